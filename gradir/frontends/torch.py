"""PyTorch frontend: capture a torch.nn.Module (or a function of tensors) as ATen ops and replay them
through the ATen -> gradir table, so the module becomes an ordinary gradir function.

    f, params = gr.from_torch(model, x, y)       # torch.export (core ATen), or make_fx where export fails
    loss = f(params, x, y)                        # NumPy in, NumPy out; inside gr.grad/compile: traced
    grads = gr.grad(lambda p, x, y: f(p, x, y))(params, x, y)

Every replayed node keeps the model's source line (the FX node's stack trace) and its submodule path
as scope, so gradir's graphs, diagrams and errors point into the model code (DESIGN rule 8: the rest
of gradir never knows the graph came from PyTorch). torch is imported only here and in gradir.core.interop.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import logging
import operator
import os
import re
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.utils._pytree as torch_pytree

from gradir.core import dtypes
from gradir.core.errors import GradirError, ShapeError, TraceError, UnsupportedOpError
from gradir.core.interop import is_torch, numpy_to_torch, torch_to_numpy
from gradir.core.ir import Value
from gradir.core.trace import current_scope, source_of, user_source
from gradir.frontends import aten_table
from gradir.ops import astype

_TORCH_DIR = os.path.dirname(torch.__file__)
_GRADIR_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


# -- capture --------------------------------------------------------------------------------------


@dataclass
class Captured:
    """An FX graph and what its placeholders and outputs are: ("param"|"buffer"|"constant", name) or
    ("input", None) per placeholder; ("buffer", name) or ("output", None) per flat output."""

    graph: object
    inputs: list
    outputs: list
    out_spec: object
    constants: dict = field(default_factory=dict)
    method: str = "export"


class _FunctionModule(torch.nn.Module):
    """A plain function of tensors as a parameterless module (what torch.export takes)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


_INPUT_KINDS = {"PARAMETER": "param", "BUFFER": "buffer", "CONSTANT_TENSOR": "constant", "USER_INPUT": "input"}


_STOP_GRADIENT = []


def stop_gradient_op():
    """torch.ops.gradir.stop_gradient: what `detach()` and the outputs of `torch.no_grad()` blocks become
    before decomposing, because core ATen turns detach into a plain alias and inlines no_grad blocks
    (the gradients through them would silently stop being zero). The table maps it to gr.stop_gradient."""
    if not _STOP_GRADIENT:
        @torch.library.custom_op("gradir::stop_gradient", mutates_args=())
        def stop_gradient(x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @stop_gradient.register_fake
        def _(x):
            return torch.empty_like(x)
        _STOP_GRADIENT.append(torch.ops.gradir.stop_gradient.default)
    return _STOP_GRADIENT[0]


def _mark_stop_gradients(gm) -> None:
    """Rewrite detach and the results of no_grad blocks (export's wrap_with_set_grad_enabled(False, ...))
    into stop_gradient nodes, which decomposition keeps."""
    sg, graph = stop_gradient_op(), gm.graph
    no_grad = getattr(torch.ops.higher_order, "wrap_with_set_grad_enabled", None)
    for node in list(graph.nodes):
        if node.target is torch.ops.aten.detach.default:
            node.target = sg
        elif no_grad is not None and node.target is no_grad and node.args[0] is False:
            for user in [u for u in node.users if u.target is operator.getitem]:
                with graph.inserting_after(user):
                    blocked = graph.call_function(sg, (user,))
                blocked.meta = dict(user.meta)
                user.replace_all_uses_with(blocked, delete_user_cb=lambda u, b=blocked: u is not b)
    gm.recompile()


def _capture_export(module, inputs, decompose: bool) -> Captured:
    with warnings.catch_warnings():  # torch's own pytree deprecations, not the user's business
        warnings.simplefilter("ignore", FutureWarning)
        ep = torch.export.export(module, tuple(inputs))
        _mark_stop_gradients(ep.graph_module)
        if decompose:
            ep = ep.run_decompositions()  # core ATen: a fixed, small op set for the table to cover
    ins = []
    for spec in ep.graph_signature.input_specs:
        kind = _INPUT_KINDS.get(spec.kind.name)
        if kind is None:
            raise UnsupportedOpError(f"exported input {spec.arg.name} of kind {spec.kind.name} has no gradir meaning",
                                     op="from_torch", source=user_source())
        ins.append((kind, spec.target))
    outs = []
    for spec in ep.graph_signature.output_specs:
        if spec.kind.name == "BUFFER_MUTATION":
            outs.append(("buffer", spec.target))
        elif spec.kind.name in ("USER_OUTPUT", "LOSS_OUTPUT"):
            outs.append(("output", None))
        else:
            raise UnsupportedOpError(f"the module mutates its input {spec.target} in place ({spec.kind.name}); "
                                     "gradir functions are pure: return the new value instead",
                                     op="from_torch", source=user_source())
    constants = {k: torch_to_numpy(v) for k, v in ep.constants.items() if isinstance(v, torch.Tensor)}
    return Captured(ep.graph, ins, outs, ep.call_spec.out_spec, constants, "export")


def _capture_make_fx(module, inputs) -> Captured:
    """make_fx over a functional call (params and buffers as arguments); buffers the module updates in
    place come back as extra outputs, as export reports them."""
    from torch._decomp import core_aten_decompositions
    from torch.fx.experimental.proxy_tensor import make_fx

    pnames = [n for n, _ in module.named_parameters(remove_duplicate=False)]
    bnames = [n for n, _ in module.named_buffers(remove_duplicate=False)]
    specs = []

    def run(pvals, bvals, *args):
        state = {**dict(zip(pnames, pvals)), **dict(zip(bnames, bvals))}
        out = torch.func.functional_call(module, state, args, tie_weights=False)  # tied names: both are given
        flat, spec = torch_pytree.tree_flatten(out)
        specs.append(spec)
        return flat, [state[n] for n in bnames]

    pvals = [p.detach() for _, p in module.named_parameters(remove_duplicate=False)]
    bvals = [b.detach().clone() for _, b in module.named_buffers(remove_duplicate=False)]  # real mode runs it
    gm = make_fx(torch.func.functionalize(run, remove="mutations_and_views"), decomposition_table=core_aten_decompositions(),
                 record_module_stack=True, record_stack_traces=True,
                 _error_on_data_dependent_ops=False)(pvals, bvals, *inputs)  # real mode: `if x.sum() > 0` specialises
    _drop_dead(gm.graph)
    n_inputs = len(torch_pytree.tree_leaves(list(inputs)))
    ins = [("param", n) for n in pnames] + [("buffer", n) for n in bnames] + [("input", None)] * n_inputs
    outs = [("output", None)] * len(torch_pytree.tree_leaves(specs[-1].unflatten([0] * specs[-1].num_leaves))) \
        + [("buffer", n) for n in bnames]
    consts = {name: torch_to_numpy(getattr(gm, name)) for name, _ in gm.named_buffers()}
    consts.update({n.target: torch_to_numpy(getattr(gm, n.target)) for n in gm.graph.nodes
                   if n.op == "get_attr" and isinstance(getattr(gm, n.target, None), torch.Tensor)})
    return Captured(gm.graph, ins, outs, specs[-1], consts, "make_fx")


def _drop_dead(graph) -> None:
    """Remove call nodes nothing uses: a specialised `if x.sum() > 0` leaves its sum/item behind, and
    functionalize's trailing copy_ into the inputs (buffer updates come back as outputs instead)."""
    for node in reversed(list(graph.nodes)):
        if node.op == "call_function" and not node.users:
            graph.erase_node(node)


@contextlib.contextmanager
def _quiet_torch():
    """Silence logging while torch captures: its fake-tensor and export loggers print tens of lines for one
    shape mistake before gradir's one-line error (restored after; Python's logging has one global switch)."""
    before = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(before)


def _model_line(module, error: BaseException) -> str | None:
    """`file.py:LINE` of the innermost frame of `error`'s traceback in the file that defines `module`'s class."""
    try:
        path = os.path.abspath(inspect.getsourcefile(type(module)) or "")
    except TypeError:  # a built-in or C-defined class
        return None
    line = None
    for frame, lineno in traceback.walk_tb(error.__traceback__):
        if os.path.abspath(frame.f_code.co_filename) == path:
            line = f"{os.path.basename(path)}:{lineno}"
    return line


def _capture(module, inputs, decompose: bool) -> tuple[Captured, str | None]:
    """torch.export first; make_fx (which specialises Python control flow on the example inputs) where
    export refuses the module. Returns the capture and why export failed (None if it did not)."""
    with _quiet_torch():
        try:
            return _capture_export(module, inputs, decompose), None
        except GradirError:
            raise
        except Exception as e:  # noqa: BLE001 - any export failure: fall back, and say why on f.export_error
            why = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        try:
            return _capture_make_fx(module, inputs), why
        except Exception as e:  # noqa: BLE001 - neither capture works: one gradir error with both reasons
            raise TraceError(f"cannot capture {type(module).__name__}: torch.export failed ({why}) and make_fx failed "
                             f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})",
                             op="from_torch", source=_model_line(module, e) or user_source()) from e


# -- source lines, scopes and the op table --------------------------------------------------------


def node_source(node) -> str | None:
    """`file.py:LINE` of the last frame in the node's stack trace that is the user's code (not torch's,
    not gradir's): the model line that made this op."""
    trace = node.meta.get("stack_trace") or ""
    best = None
    for path, line in _FRAME.findall(trace):
        full = os.path.abspath(path)
        if not (full.startswith(_TORCH_DIR) or full.startswith(_GRADIR_DIR) or path.startswith("<")):
            best = f"{os.path.basename(path)}:{line}"
    return best


def node_scope(node) -> tuple[str, ...]:
    """Submodule paths from the node's nn_module_stack (outermost first), e.g. ("blocks.3", "blocks.3.attn")."""
    stack = node.meta.get("nn_module_stack") or {}
    paths = []
    for entry in stack.values():
        path = entry[0] if isinstance(entry, tuple) else str(entry)
        path = re.sub(r"^L__self__[._]?", "", str(path))
        if path and path not in paths:
            paths.append(path)
    return tuple(paths)


def aten_name(target) -> tuple[str, str]:
    """("addmm", "default") for torch.ops.aten.addmm.default; ("getitem", "") for operator.getitem."""
    if target is operator.getitem:
        return "getitem", ""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        ns, _, name = schema.name.rpartition("::")
        # only aten ops (and gradir's stop_gradient) may map: a custom op named like an aten op must not
        return (name if ns in ("aten", "gradir") else schema.name), target._overloadname
    return getattr(target, "__name__", str(target)), ""


def _table_entry(node):
    name, overload = aten_name(node.target)
    if name == "getitem":
        return operator.getitem
    return aten_table.lookup(name, overload)


# ATen ops whose result's shape depends on the values (what each comes from in the user's code)
DATA_DEPENDENT = {
    "nonzero": "torch.nonzero / argwhere / x[mask]",
    "argwhere": "torch.argwhere",
    "masked_select": "torch.masked_select / x[mask]",
    "unique": "torch.unique", "_unique": "torch.unique", "_unique2": "torch.unique",
    "unique_consecutive": "torch.unique_consecutive", "unique_dim": "torch.unique",
    "_assert_scalar": "a size computed from values, as in boolean-mask indexing x[mask]",
}


def _check_mapped(graph) -> dict:
    """The table entry of every call node; ONE UnsupportedOpError naming the first unmapped ATen op, its
    model line and the nearest mapped names (and how many others are unmapped)."""
    entries, missing = {}, []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        entry = _table_entry(node)
        if entry is None:
            missing.append(node)
        entries[node] = entry
    read = [n for n in missing if aten_name(n.target)[0] == "_local_scalar_dense"]
    if read:
        raise UnsupportedOpError("a tensor's value read into Python (tensor.item(), float(t), int(t)): gradir's graphs "
                                 "compute with tensors only; keep it a tensor (x * x.sum(), not x * x.sum().item())",
                                 op="aten._local_scalar_dense", source=node_source(read[0]) or user_source())
    dependent = [n for n in missing if aten_name(n.target)[0] in DATA_DEPENDENT]
    if dependent:
        node = dependent[0]
        name = aten_name(node.target)[0]
        raise UnsupportedOpError(
            f"a data-dependent shape: the size of a value here depends on the tensor's values ({DATA_DEPENDENT[name]}), "
            "and gradir's graphs have static shapes. Keep the shape and mask the values instead, e.g. "
            "torch.where(mask, x, 0).sum() for x[mask].sum(), or (mask * x).sum() / mask.sum() for a masked mean",
            op=f"aten.{name}", source=node_source(node) or user_source())
    if missing:
        node = missing[0]
        name, overload = aten_name(node.target)
        near = difflib.get_close_matches(name, list(aten_table.TABLE), n=3, cutoff=0.0)
        hint = f"; nearest supported: {', '.join('aten.' + n for n in near)}" if near else ""
        others = sorted({".".join(aten_name(n.target)) for n in missing[1:]} - {f"{name}.{overload}"})
        also = f" (also unmapped: {', '.join('aten.' + o for o in others)})" if others else ""
        raise UnsupportedOpError(f"ATen op aten.{name}.{overload} has no gradir mapping{hint}{also}",
                                 op=f"aten.{name}", source=node_source(node) or user_source())
    return entries


# -- the gradir function --------------------------------------------------------------------------


class TorchFunction:
    """A captured PyTorch module as a gradir function: ``f(params, *inputs, seed=None)`` replays its
    ATen graph through gradir ops (evaluating on NumPy arrays, recording inside a trace).

    Attributes: `capture` ("export" or "make_fx"), `buffers` (name -> array: running statistics and
    other module state, used by every call), `param_names`, `graph` (the FX graph replayed),
    `export_error` (why torch.export refused the module when make_fx was used)."""

    def __init__(self, captured: Captured, buffers: dict, aliases: dict, training: bool, name: str):
        self._cap = captured
        self._entries = _check_mapped(captured.graph)
        self._aliases = aliases
        self.buffers = buffers
        self.capture = captured.method
        self.graph = captured.graph
        self.training = training
        self.export_error = None
        self.__name__ = name
        holders = [(kind, n.meta.get("val")) for (kind, _), n in
                   zip(captured.inputs, [n for n in captured.graph.nodes if n.op == "placeholder"])]
        self._capture_key = tuple(_dtype_name(val) for _, val in holders)
        floats = {aten_table.np_dtype(val.dtype) for kind, val in holders
                  if kind in ("param", "input") and isinstance(val, torch.Tensor) and val.dtype.is_floating_point}
        self._capture_float = floats.pop() if len(floats) == 1 else None  # the dtype the module was captured in
        self._dtype_cache = {}

    @property
    def param_names(self) -> list[str]:
        return [n for k, n in self._cap.inputs if k == "param" and self._aliases.get(n, n) == n]

    def __call__(self, params, *inputs, seed=None, buffers=None):
        """The module's outputs (same structure: tensors, tuples, lists, dicts; model-output objects as dicts)."""
        return self._run(params, inputs, seed, buffers)[0]

    def with_buffers(self, params, *inputs, seed=None, buffers=None):
        """(outputs, updated buffers): the buffers after this call, as torch updates them in training mode
        (BatchNorm's running_mean, running_var, num_batches_tracked). Buffers not updated keep their value."""
        outs, updates = self._run(params, inputs, seed, buffers)
        return outs, {**(self.buffers if buffers is None else buffers), **updates}

    def _run(self, params, inputs, seed, buffers):
        leaves = torch_pytree.tree_leaves(list(inputs))
        torch_out = any(is_torch(x) for x in leaves)
        given = [torch_to_numpy(x) if is_torch(x) else x if isinstance(x, (Value, np.ndarray)) else np.asarray(x)
                 for x in leaves]
        other = self._other_float([*params.values(), *given])
        if buffers is None:
            buffers = self.buffers if other is None else {  # as module.double() casts its buffers too
                k: v.astype(other) if v.dtype == self._capture_float else v for k, v in self.buffers.items()}
        values, env, rng = iter(given), {}, _Seeds(seed)
        holders = [node for node in self._cap.graph.nodes if node.op == "placeholder"]
        for i, node in enumerate(holders):
            env[node] = self._placeholder(node, i, params, buffers, values)
        wants = None if other is None else self._dtypes_for(tuple(_dtype_name(env[node]) if name else None
                                                                  for node, name in zip(holders, self._capture_key)))
        outputs = None
        for node in self._cap.graph.nodes:
            if node.op == "get_attr":
                env[node] = self._cap.constants[node.target]
            elif node.op == "call_function":
                env[node] = self._call(node, env, rng, wants)
            elif node.op == "output":
                outputs = torch_pytree.tree_leaves(torch.fx.node.map_arg(node.args[0], lambda n: env[n]))
        return self._results(outputs, torch_out)

    def _other_float(self, given):
        """The one float dtype of the given params and inputs where it is not the capture's, else None: a float32
        module called with float64 params and inputs computes in float64, as torch.func.functional_call does.
        A mix (float32 params, float64 x: torch refuses it) keeps the capture's dtypes, as `model(x.float())`."""
        floats = {dtypes.as_dtype(n) for n in map(_dtype_name, given) if n in ("float16", "bfloat16", "float32", "float64")}
        if len(floats) != 1 or self._capture_float is None or floats == {self._capture_float}:
            return None
        return floats.pop()

    def _dtypes_for(self, key: tuple):
        """node -> torch's result for placeholders of these dtypes (cached per key); None (the capture's
        dtypes) where torch cannot run the graph at them."""
        if key not in self._dtype_cache:
            self._dtype_cache[key] = _call_dtypes(self._cap, key)
        return self._dtype_cache[key]

    def _placeholder(self, node, i, params, buffers, values):
        kind, name = self._cap.inputs[i]
        if kind == "input":
            return _check_input(node, next(values))
        if kind == "constant":
            return self._cap.constants[name]
        source = params if kind == "param" else buffers
        key = self._aliases.get(name, name)
        if key not in source:
            raise TraceError(f"missing {kind} {key!r} (from_torch's {kind}s: pass the dict it returned)",
                             op="from_torch", source=user_source())
        return source[key]

    def _call(self, node, env, rng, wants):
        entry = self._entries[node]
        args = torch.fx.node.map_arg(node.args, lambda n: env[n])
        kwargs = dict(torch.fx.node.map_arg(node.kwargs, lambda n: env[n]))
        kwargs.pop("device", None), kwargs.pop("pin_memory", None), kwargs.pop("layout", None)
        with source_of(node_source(node) or user_source(), current_scope() + node_scope(node)):
            if isinstance(entry, aten_table.NeedsSeed):
                kwargs["rng"] = rng.for_node(node)
            out = entry(*args, **kwargs)
            return _match_torch(node, out, wants[node] if wants else node.meta.get("val"))

    def _results(self, outputs, torch_out):
        user, updates = [], {}
        for (kind, name), v in zip(self._cap.outputs, outputs):
            if kind == "buffer":
                updates[self._aliases.get(name, name)] = v
            else:
                user.append(v)
        if torch_out and not any(isinstance(v, Value) for v in user):
            user = [numpy_to_torch(np.asarray(v)) for v in user]
        return rebuild(self._cap.out_spec, iter(user)), updates


def _check_input(node, x):
    """The graph was captured at the example inputs' shapes: another shape is a clear error, not a wrong answer."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor) and tuple(np.shape(x)) != tuple(int(s) for s in val.shape):
        raise ShapeError(f"input {node.name} was captured with shape {tuple(int(s) for s in val.shape)}, got "
                         f"{tuple(np.shape(x))}: call gr.from_torch again with inputs of this shape",
                         op="from_torch", source=user_source())
    return x


class _Seeds:
    """One NumPy generator per random node from the call's seed (the node's position keeps masks apart)."""

    def __init__(self, seed):
        self.seed, self.count = seed, 0

    def for_node(self, node):
        def rng(x):
            if self.seed is None:
                p = node.args[1] if len(node.args) > 1 else "?"
                raise TraceError(f"dropout with p={p} in training mode draws a random mask: pass a seed "
                                 "(f(params, x, seed=0)), or capture the module in eval mode (module.eval())",
                                 op=f"aten.{aten_name(node.target)[0]}", source=node_source(node) or user_source())
            self.count += 1
            return np.random.default_rng([int(self.seed), self.count])
        return rng


def _match_torch(node, out, val):
    """The mapped result checked against torch's own shape for the node (nothing silently wrong), and
    cast to torch's dtype `val.dtype` where the two promotion rules differ (int tensor * 0.5 is float in torch)."""
    if isinstance(val, torch.Tensor) and not isinstance(out, aten_table.Multi) and out is not None:
        return _match_one(node, out, val)
    if isinstance(val, (list, tuple)) and isinstance(out, list):
        return [_match_one(node, o, v) if isinstance(v, torch.Tensor) else o for o, v in zip(out, val)]
    return out


def _match_one(node, out, val):
    shape = tuple(int(s) for s in val.shape)
    if tuple(np.shape(out)) != shape:
        raise UnsupportedOpError(f"gradir's mapping of aten.{'.'.join(aten_name(node.target))} gave shape "
                                 f"{tuple(np.shape(out))} where torch gives {shape}",
                                 op=f"aten.{aten_name(node.target)[0]}", source=user_source())
    want = aten_table.np_dtype(val.dtype)
    have = out.dtype if hasattr(out, "dtype") else np.asarray(out).dtype
    return out if dtypes.as_dtype(have) == want else astype(out, want)


def _dtype_name(x) -> str | None:
    """'float64' for an array, Value or torch tensor; None for what has no dtype (a Python int placeholder)."""
    d = getattr(x, "dtype", None)
    return None if d is None else str(d).replace("torch.", "")


def _call_dtypes(cap: Captured, key: tuple) -> dict | None:
    """node -> torch's result (a fake tensor, or a tuple of them: its dtype is what the mapped result is
    cast to) for placeholders of the dtypes in `key`, by running the graph on fake tensors; None where
    torch raises (the capture's dtypes are kept)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    env, names = {}, iter(key)
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            for node in cap.graph.nodes:
                val = node.meta.get("val")
                if node.op == "placeholder":
                    name = next(names)
                    env[node] = torch.empty(tuple(val.shape), dtype=getattr(torch, name)) if name else val
                elif node.op == "get_attr":
                    c = cap.constants[node.target]
                    env[node] = torch.empty(np.shape(c), dtype=getattr(torch, np.asarray(c).dtype.name))
                elif node.op == "call_function":
                    env[node] = node.target(*torch.fx.node.map_arg(node.args, env.get),
                                            **torch.fx.node.map_arg(node.kwargs, env.get))
    except Exception:  # noqa: BLE001 - whatever torch refuses: the capture's dtypes, as before
        return None
    return env


def rebuild(spec, leaves):
    """The output structure from torch's TreeSpec: tuples, lists and dicts as they are; other
    containers (model-output objects such as transformers' ModelOutput) as dicts of their fields."""
    if spec.is_leaf():
        return next(leaves)
    kids = [rebuild(c, leaves) for c in (spec.children() if hasattr(spec, "children") else spec.children_specs)]
    t = spec.type
    if t in (tuple, list):
        return t(kids)
    if issubclass(t, tuple) and hasattr(t, "_fields"):  # namedtuple
        return t(*kids)
    keys = _keys(spec, len(kids))
    if keys is not None:
        return dict(zip(keys, kids))
    return tuple(kids)


def _keys(spec, n):
    ctx = spec.context
    if isinstance(ctx, (list, tuple)) and len(ctx) == n and all(isinstance(k, str) for k in ctx):
        return list(ctx)
    if isinstance(ctx, (list, tuple)) and ctx and isinstance(ctx[0], (list, tuple)) and len(ctx[0]) == n:
        return list(ctx[0])  # dataclasses registered with torch.export.register_dataclass: (fields, ...)
    import dataclasses

    if dataclasses.is_dataclass(spec.type):
        names = [f.name for f in dataclasses.fields(spec.type)]
        return names if len(names) == n else None
    return None


# -- the entry point ------------------------------------------------------------------------------


def _numpy_state(named) -> tuple[dict, dict]:
    """(first name -> array, every name -> first name): tied tensors appear once, under their first name."""
    first, arrays, aliases = {}, {}, {}
    for name, t in named:
        key = first.setdefault(id(t), name)
        aliases[name] = key
        if key == name:
            arrays[name] = torch_to_numpy(t).copy()
    return arrays, aliases


def from_torch(module, *example_inputs, decompose: bool = True):
    """Capture a torch.nn.Module (or a function of tensors) at `example_inputs` as a gradir function.

    Returns ``(f, params)``: `params` maps every `named_parameters()` name (tied weights once, under
    their first name) to a NumPy array, and ``f(params, *inputs, seed=None)`` computes the module's
    outputs with gradir ops, so gr.grad, gr.jvp, gr.compile (numpy/llvm), gr.trace_grad and recompute
    policies apply to it. The module's train/eval mode at capture is the mode replayed; dropout in
    training mode needs `seed=`. Buffers live on `f.buffers`; `f.with_buffers(...)` also returns their
    updated values. `f.capture` says how the graph was taken ("export", or "make_fx" where
    torch.export failed). An ATen op without a gradir mapping raises UnsupportedOpError here.
    Given params and inputs of another float dtype than the capture's (all float64 for a float32 module),
    f computes in it, as torch.func.functional_call does, and casts `f.buffers` along; a mix of float
    dtypes (float32 params, float64 inputs) computes in the capture's dtypes."""
    named_module = module if isinstance(module, torch.nn.Module) else _FunctionModule(module)
    captured, why = _capture(named_module, example_inputs, decompose)
    params, p_alias = _numpy_state(named_module.named_parameters(remove_duplicate=False))
    buffers, b_alias = _numpy_state(named_module.named_buffers(remove_duplicate=False))
    name = type(named_module).__name__ if isinstance(module, torch.nn.Module) else getattr(module, "__name__", "f")
    f = TorchFunction(captured, buffers, {**p_alias, **b_alias}, named_module.training, name)
    f.export_error = why
    return f, params
