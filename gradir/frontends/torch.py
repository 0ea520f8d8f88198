"""PyTorch frontend: capture a torch.nn.Module (or a function of tensors) as ATen ops and replay them
through the ATen -> gradir table, so the module becomes an ordinary gradir function.

    f, params = gr.from_torch(model, x, y)       # torch.export (core ATen), or make_fx where export fails
    loss = f(params, x, y)                        # NumPy in, NumPy out; inside gr.grad/compile: traced
    grads = gr.grad(lambda p, x, y: f(p, x, y))(params, x, y)

Every replayed node keeps the model's source line (the FX node's stack trace) and its submodule path
as scope, so gradir's graphs, diagrams and errors point into the model code (DESIGN rule 8: the rest
of gradir never knows the graph came from PyTorch). The graph is taken by gradir.frontends.torch_capture;
each ATen op is looked up in aten_table's one TABLE. torch is imported only by these frontend modules
and gradir.core.interop.
"""

from __future__ import annotations

import difflib
import operator
import os
import re

import numpy as np
import torch
import torch.utils._pytree as torch_pytree

from gradir.api.specs import TensorSpec
from gradir.core import dtypes
from gradir.core.errors import DTypeError, ShapeError, TraceError, UnsupportedOpError
from gradir.core.interop import is_torch, numpy_to_torch, torch_to_numpy
from gradir.core.ir import Value
from gradir.core.trace import current_scope, source_of, user_source
from gradir.frontends import aten_table
from gradir.frontends.torch_capture import Captured, as_module, capture, forward_returns_tensors, run_in_torch, widen_dtypes
from gradir.ops import astype

_TORCH_DIR = os.path.dirname(torch.__file__)
_GRADIR_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


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


def _is_inplace(target) -> bool:
    return any(t.name == "inplace" for t in getattr(target, "tags", ()))


def _table_entry(node):
    name, overload = aten_name(node.target)
    if name == "getitem":
        return operator.getitem
    entry = aten_table.lookup(name, overload)
    if entry is None and _is_inplace(node.target) and name.endswith("_") and _writes_a_fresh_tensor(node):
        functional = aten_table.lookup(name[:-1], overload)
        return None if functional is None else aten_table.InPlace(functional)
    return entry


def _is_view(target) -> bool:
    """Whether an ATen op returns a view of its input (its schema's result aliases an argument)."""
    schema = getattr(target, "_schema", None)
    return bool(schema and schema.returns and schema.returns[0].alias_info is not None
                and not schema.returns[0].alias_info.is_write)


def _writes_a_fresh_tensor(node) -> bool:
    """An in-place op can run as its out-of-place form when what it writes is no view of another tensor and no
    view of it was taken before the write (its later readers then all see the new value)."""
    dst = node.args[0] if node.args else None
    if not isinstance(dst, torch.fx.Node) or (dst.op == "call_function" and _is_view(dst.target)):
        return False
    order = {n: i for i, n in enumerate(node.graph.nodes)}
    return not any(order[u] < order[node] and u.op == "call_function" and _is_view(u.target) for u in dst.users)


# the families an unmapped op's suggestions come from: ops of its own kind, never private no-ops (_assert_*)
_FAMILIES = {"pointwise": aten_table.ELEMENTWISE, "reduction": aten_table.REDUCTIONS}

# unmapped ops with a known way around them
KNOWN = {
    "histc": "Hugging Face mixture-of-experts layers sort tokens by expert with histc and a custom grouped_mm by "
             "default: build the model with experts_implementation=\"batched_mm\" (static shapes)",
    "transformers::grouped_mm_fallback": "build the model with experts_implementation=\"batched_mm\" (static shapes)",
}


_NAMESPACES = ("special_", "linalg_", "fft_")  # torch.special.*, torch.linalg.*, ...: a family, not a spelling


def _spelling(name: str) -> str:
    """`name` without its torch namespace prefix (special_zeta -> zeta): what closeness in spelling compares."""
    return next((name[len(p):] for p in _NAMESPACES if name.startswith(p)), name)


def nearest_supported(name: str, target=None) -> list[str]:
    """Up to three mapped ATen names of the same kind as `name` (elementwise, reduction, view/shape op; the
    whole table for others) and close in spelling (namespace prefixes such as special_ left out of the
    comparison); [] when none is close."""
    base = name.removesuffix("_") if target is not None and _is_inplace(target) else name
    tags = {t.name for t in getattr(target, "tags", ())}
    family = next((_FAMILIES[t] for t in _FAMILIES if t in tags), None)
    if family is None and target is not None and _is_view(target):
        family = aten_table.SHAPES
    pool = family if family is not None else aten_table.TABLE
    names: dict[str, list[str]] = {}
    for k in sorted({k.split(".")[0] for k in pool if not k.startswith(("_", "sym_"))}):
        names.setdefault(_spelling(k), []).append(k)
    near = difflib.get_close_matches(_spelling(base), list(names), n=3, cutoff=0.6)
    return [k for n in near for k in names[n]][:3]


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
        near = nearest_supported(name, node.target)
        hint = f"; nearest supported: {', '.join('aten.' + n for n in near)}" if near else ""
        known = next((KNOWN[aten_name(m.target)[0]] for m in missing if aten_name(m.target)[0] in KNOWN), None)
        hint += f"; {known}" if known else ""
        others = sorted({".".join(aten_name(n.target)) for n in missing[1:]} - {f"{name}.{overload}"})
        also = f" (also unmapped: {', '.join('aten.' + o for o in others)})" if others else ""
        raise UnsupportedOpError(f"ATen op aten.{name}.{overload} has no gradir mapping{hint}{also}",
                                 op=f"aten.{name}", source=node_source(node) or user_source())
    for node, entry in entries.items():  # what reads a layout can say at capture that it cannot map it
        if isinstance(entry, aten_table.NeedsLayout):
            val = node.args[0].meta.get("val")
            with source_of(node_source(node) or user_source(), node_scope(node)):
                entry.check(tuple(val.shape), *node.args[1:], layout=_layout(val), **node.kwargs)
    return entries


def _layout(val) -> tuple:
    """(strides, storage offset) of torch's tensor `val`."""
    return tuple(val.stride()), val.storage_offset()


# -- the gradir function --------------------------------------------------------------------------


class TorchFunction:
    """A captured PyTorch module as a gradir function: ``f(params, *inputs, seed=None)`` replays its
    ATen graph through gradir ops (evaluating on NumPy arrays, recording inside a trace).

    Attributes: `capture` ("export" or "make_fx"), `buffers` (name -> array: running statistics and
    other module state, used by every call), `param_names`, `graph` (the FX graph replayed),
    `export_error` (why torch.export refused the module when make_fx was used), `notes` (what the capture
    changed: outputs left out), `outputs` (the outputs' shapes and dtypes), `float32_as` (None, or float64:
    see from_torch; a copy of f with it changed shares the capture)."""

    def __init__(self, captured: Captured, buffers: dict, aliases: dict, training: bool, name: str):
        self._cap = captured
        self._entries = _check_mapped(captured.graph)
        self._aliases = aliases
        self.buffers = buffers
        self.capture = captured.method
        self.graph = captured.graph
        self.training = training
        self.export_error = None
        self.notes = []  # what the capture changed, in a sentence each (outputs left out)
        self.float32_as = None
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

    @property
    def outputs(self):
        """The module's outputs at capture, in their structure, as gr.TensorSpec (shape, dtype) per tensor."""
        out = next(n for n in self._cap.graph.nodes if n.op == "output")
        vals = [n.meta.get("val") if isinstance(n, torch.fx.Node) else n for n in torch_pytree.tree_leaves(out.args[0])]
        specs = [TensorSpec(tuple(int(d) for d in v.shape), aten_table.np_dtype(v.dtype)) if isinstance(v, torch.Tensor)
                 else v for (kind, _), v in zip(self._cap.outputs, vals) if kind == "output"]
        return rebuild(self._cap.out_spec, iter(specs))

    def in_torch(self, params, *inputs, buffers=None):
        """The captured ATen graph run by torch itself (autograd records it: give torch tensors with
        requires_grad for gradients), with the same float32_as choice as f: what f computes, op for op. Where f
        and the module differ, this tells the capture's difference (module vs. this) from the mapping's (this
        vs. f). Params, buffers and inputs may be NumPy arrays or torch tensors; outputs are torch tensors."""
        leaves = torch_pytree.tree_leaves(list(inputs))
        wide = self._widens(self._other_float([*params.values(), *leaves]))
        buffers = self.buffers if buffers is None else buffers
        given, values = [], iter(leaves)
        for kind, name in self._cap.inputs:
            key = self._aliases.get(name, name)
            value = next(values) if kind == "input" else self._cap.constants[name] if kind == "constant" else \
                (params if kind == "param" else buffers)[key]
            value = value if is_torch(value) else numpy_to_torch(np.asarray(value))
            given.append(value.double() if wide and kind in ("buffer", "constant") and value.dtype == torch.float32
                         else value)
        outputs = run_in_torch(self._cap, given, wide)
        return rebuild(self._cap.out_spec, iter(v for (kind, _), v in zip(self._cap.outputs, outputs) if kind == "output"))

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
        wide = self._widens(other)
        constants = self._cap.constants if not wide else {k: _widen_array(v) for k, v in self._cap.constants.items()}
        if wide:
            buffers = {k: _widen_array(v) for k, v in buffers.items()}
        values, env, rng = iter(given), {}, _Seeds(seed)
        holders = [node for node in self._cap.graph.nodes if node.op == "placeholder"]
        for i, node in enumerate(holders):
            env[node] = self._placeholder(node, i, params, buffers, values, constants)
        wants = None if other is None else self._dtypes_for(tuple(_dtype_name(env[node]) if name else None
                                                                  for node, name in zip(holders, self._capture_key)))
        outputs = None
        for node in self._cap.graph.nodes:
            if node.op == "get_attr":
                env[node] = constants[node.target]
            elif node.op == "call_function":
                env[node] = self._call(node, env, rng, wants, wide)
                if isinstance(self._entries[node], aten_table.InPlace):
                    env[node.args[0]] = env[node]  # later readers of the written tensor see the write
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

    def _widens(self, other) -> bool:
        """Whether this call computes the model's float32 requests in float64 (float32_as, in a float64 call)."""
        return self.float32_as is not None and (other or self._capture_float) == dtypes.float64

    def _placeholder(self, node, i, params, buffers, values, constants):
        kind, name = self._cap.inputs[i]
        if kind == "input":
            return _check_input(node, next(values))
        if kind == "constant":
            return constants[name]
        source = params if kind == "param" else buffers
        key = self._aliases.get(name, name)
        if key not in source:
            raise TraceError(f"missing {kind} {key!r} (from_torch's {kind}s: pass the dict it returned)",
                             op="from_torch", source=user_source())
        return source[key]

    def _call(self, node, env, rng, wants, wide):
        entry = self._entries[node]
        args = torch.fx.node.map_arg(node.args, lambda n: env[n])
        kwargs = dict(torch.fx.node.map_arg(node.kwargs, lambda n: env[n]))
        kwargs.pop("device", None), kwargs.pop("pin_memory", None), kwargs.pop("layout", None)
        if wide:
            args, kwargs = widen_dtypes(args), widen_dtypes(kwargs)
        with source_of(node_source(node) or user_source(), current_scope() + node_scope(node)):
            if isinstance(entry, aten_table.NeedsSeed):
                kwargs["rng"] = rng.for_node(node)
            if isinstance(entry, aten_table.NeedsLayout):
                kwargs["layout"] = _layout(node.args[0].meta.get("val"))
            out = entry(*args, **kwargs)
            return _match_torch(node, out, wants[node] if wants else node.meta.get("val"), wide)

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


def _match_torch(node, out, val, wide=False):
    """The mapped result checked against torch's own shape for the node (nothing silently wrong), and
    cast to torch's dtype `val.dtype` where the two promotion rules differ (int tensor * 0.5 is float in torch);
    with `wide`, float64 where torch has float32."""
    if isinstance(val, torch.Tensor) and not isinstance(out, aten_table.Multi) and out is not None:
        return _match_one(node, out, val, wide)
    if isinstance(val, (list, tuple)) and isinstance(out, list):
        return [_match_one(node, o, v, wide) if isinstance(v, torch.Tensor) else o for o, v in zip(out, val)]
    return out


def _match_one(node, out, val, wide):
    shape = tuple(int(s) for s in val.shape)
    if tuple(np.shape(out)) != shape:
        raise UnsupportedOpError(f"gradir's mapping of aten.{'.'.join(aten_name(node.target))} gave shape "
                                 f"{tuple(np.shape(out))} where torch gives {shape}",
                                 op=f"aten.{aten_name(node.target)[0]}", source=user_source())
    want = aten_table.np_dtype(torch.float64 if wide and val.dtype == torch.float32 else val.dtype)
    have = out.dtype if hasattr(out, "dtype") else np.asarray(out).dtype
    return out if dtypes.as_dtype(have) == want else astype(out, want)


def _widen_array(x):
    """A float32 constant or buffer as float64 (float32_as); others as they are."""
    return x.astype(np.float64) if getattr(x, "dtype", None) == np.float32 else x


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
    if t is type(None):  # a None output (where _tensors_only left an object out of a tuple)
        return None
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


def from_torch(module, *example_inputs, decompose: bool = True, float32_as=None):
    """Capture a torch.nn.Module (or a function of tensors) at `example_inputs` as a gradir function.

    Returns ``(f, params)``: `params` maps every `named_parameters()` name (tied weights once, under
    their first name) to a NumPy array, and ``f(params, *inputs, seed=None)`` computes the module's
    outputs with gradir ops, so gr.grad, gr.jvp, gr.compile (numpy/llvm), gr.trace_grad and recompute
    policies apply to it. The module's train/eval mode at capture is the mode replayed; dropout in
    training mode needs `seed=`. Buffers live on `f.buffers`; `f.with_buffers(...)` also returns their
    updated values. `f.capture` says how the graph was taken ("export", or "make_fx" where
    torch.export failed). An ATen op without a gradir mapping raises UnsupportedOpError here, naming
    mapped ops of the same kind where one is close. decompose=False replays export's graph before its
    decomposition to core ATen, which keeps higher-level ops (aten.linalg_inv, aten.cross_entropy_loss,
    aten.pad); a training-mode BatchNorm's running statistics are then not updated (f.notes says so).

    Outputs that are not tensors (a transformers `DynamicCache` in `past_key_values`, other objects) are
    left out of f's outputs, and `f.notes` says which; `f.outputs` is the outputs' structure with a
    gr.TensorSpec (shape, dtype) per tensor.

    Given params and inputs of another float dtype than the capture's (all float64 for a float32 module),
    f computes in it, as torch.func.functional_call does, and casts `f.buffers` along; a mix of float
    dtypes (float32 params, float64 inputs) computes in the capture's dtypes. The model's own float32
    requests (Llama's RMSNorm `x.to(torch.float32)`, rotary tables, `softmax(dtype=torch.float32)`) stay
    float32 in a float64 call, as in torch; ``float32_as=np.float64`` computes them in float64 too (and
    float32 constants and buffers), in calls whose params and inputs are float64, so a float64 model is
    float64 throughout (calls in float32 are unchanged). `f.in_torch(params, *inputs)` runs the captured
    graph in torch itself with the same choice, a reference for both."""
    if float32_as is not None and dtypes.as_dtype(float32_as) != dtypes.float64:
        raise DTypeError(f"float32_as={float32_as!r}: the model's float32 requests can be computed in float64 "
                         "(float32_as=np.float64) or left as they are (None)", op="from_torch", source=user_source())
    named_module = as_module(module)
    dropped = {}
    with forward_returns_tensors(named_module, dropped):
        captured, why = capture(named_module, example_inputs, decompose)
    params, p_alias = _numpy_state(named_module.named_parameters(remove_duplicate=False))
    buffers, b_alias = _numpy_state(named_module.named_buffers(remove_duplicate=False))
    name = type(named_module).__name__ if isinstance(module, torch.nn.Module) else getattr(module, "__name__", "f")
    f = TorchFunction(captured, buffers, {**p_alias, **b_alias}, named_module.training, name)
    f.export_error = why
    f.float32_as = None if float32_as is None else dtypes.float64
    if dropped:
        f.notes.append("left out of the outputs (not tensors): " + ", ".join(f"{k} ({v})" for k, v in dropped.items())
                       + ("; a model built with use_cache=False does not make its cache"
                          if any(v.endswith("Cache") for v in dropped.values()) else ""))
    hidden = _unrecorded_updates(captured.graph)
    if hidden:
        f.notes.append(f"running statistics not updated ({', '.join(hidden)} in training mode): torch.export's graph "
                       "without decompositions does not record that update; capture with decompose=True (the default)")
    return f, params


def _unrecorded_updates(graph) -> list[str]:
    """The batch_norm / instance_norm nodes that move running statistics in place inside the op (training mode, with
    running statistics), which the graph without decompositions keeps whole and records no buffer update for."""
    found = []
    for node in graph.nodes:
        name = aten_name(node.target)[0] if node.op == "call_function" else None
        if name in ("batch_norm", "instance_norm") and len(node.args) > 5 and node.args[5] and node.args[3] is not None:
            found.append(f"aten.{name}")
    return sorted(set(found))
