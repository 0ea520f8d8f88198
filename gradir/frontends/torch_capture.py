"""Taking a torch module's graph: torch.export to core ATen, or make_fx where export refuses the module, with
detach and no_grad blocks kept as stop_gradient, and the outputs torch's pytree cannot carry (a transformers
DynamicCache) left out. gradir.frontends.torch replays what this takes."""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import logging
import operator
import os
import traceback
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.utils._pytree as torch_pytree

from gradir.core.errors import GradirError, TraceError, UnsupportedOpError
from gradir.core.interop import numpy_to_torch, torch_to_numpy
from gradir.core.trace import user_source

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


def as_module(module) -> torch.nn.Module:
    """`module` itself, or a plain function of tensors as a parameterless module."""
    return module if isinstance(module, torch.nn.Module) else _FunctionModule(module)


_INPUT_KINDS = {"PARAMETER": "param", "BUFFER": "buffer", "CONSTANT_TENSOR": "constant", "USER_INPUT": "input",
                "TOKEN": "token"}


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
        elif spec.kind.name == "TOKEN":
            outs.append(("token", None))
        elif spec.kind.name in ("USER_OUTPUT", "LOSS_OUTPUT"):
            outs.append(("output", None))
        else:
            raise UnsupportedOpError(f"the module mutates its input {spec.target} in place ({spec.kind.name}); "
                                     "gradir functions are pure: return the new value instead",
                                     op="from_torch", source=user_source())
    if any(kind == "token" for kind, _ in ins):
        ins, outs = _drop_error_checks(ep.graph, ins, outs)
    _drop_unread_results(ep.graph)
    constants = {k: torch_to_numpy(v) for k, v in ep.constants.items() if isinstance(v, torch.Tensor)}
    return Captured(ep.graph, ins, outs, ep.call_spec.out_spec, constants, "export")


def _drop_error_checks(graph, ins: list, outs: list) -> tuple[list, list]:
    """torch.export threads torch.linalg's error checks (`_linalg_check_errors` of LAPACK's info, which raises
    on a singular matrix) through effect tokens: a token input, a `with_effects` call per check, the token as
    an output. gradir's linalg ops raise on such a matrix themselves, so the checks go, and with them the
    tokens' placeholders and outputs; (ins, outs) without the tokens. Another op with effects is an error."""
    with_effects = torch.ops.higher_order.with_effects
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is with_effects:
            if node.args[1] is not torch.ops.aten._linalg_check_errors.default:
                raise UnsupportedOpError(f"{node.args[1]} runs for its side effect (torch.export threads it through "
                                         "an effect token), which a gradir function has no place for",
                                         op=str(node.args[1]), source=user_source())
            for token in list(node.users):  # getitem(check, 0): the token after the check is the one before
                token.replace_all_uses_with(node.args[0])
                graph.erase_node(token)
            graph.erase_node(node)
    out = next(n for n in graph.nodes if n.op == "output")
    out.args = (type(out.args[0])(v for v, (kind, _) in zip(out.args[0], outs) if kind != "token"),)
    for node, (kind, _) in zip([n for n in graph.nodes if n.op == "placeholder"], ins):
        if kind == "token":
            graph.erase_node(node)
    return [i for i in ins if i[0] != "token"], [o for o in outs if o[0] != "token"]


def _drop_unread_results(graph) -> None:
    """Remove the results of multi-result ops that nothing reads (the graph without decompositions keeps a getitem
    per result: embedding_bag's offset2bag, bag_size, max_indices; the info the linalg checks read), so the replay
    computes no more than the model uses."""
    for node in reversed(list(graph.nodes)):
        if node.op == "call_function" and node.target is operator.getitem and not node.users:
            graph.erase_node(node)


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


_PLAIN = (torch.Tensor, int, float, bool, complex, str, type(None))
_DROPPED = object()


def _tensors_only(out, dropped: dict, path: str = "output"):
    """`out` without the objects torch's pytree cannot carry (transformers' DynamicCache in past_key_values, any
    other non-tensor object): a dict drops their keys, a list or tuple holds None in their place. Records
    path -> type name in `dropped`. `out` itself when nothing is dropped."""
    if isinstance(out, _PLAIN) or (type(out) in torch_pytree.SUPPORTED_NODES
                                   and not isinstance(out, (Mapping, list, tuple))):  # a registered dataclass
        return out
    if isinstance(out, Mapping):
        kept = {k: _tensors_only(v, dropped, f"{path}.{k}" if path != "output" else str(k)) for k, v in out.items()}
        if all(kept[k] is v for k, v in out.items()):
            return out
        return {k: v for k, v in kept.items() if v is not _DROPPED}  # model-output objects come back as dicts anyway
    if isinstance(out, (list, tuple)):
        kept = [_tensors_only(v, dropped, f"{path}[{i}]") for i, v in enumerate(out)]
        if all(a is b for a, b in zip(kept, out)):
            return out
        kept = [None if v is _DROPPED else v for v in kept]
        return type(out)(*kept) if hasattr(out, "_fields") else type(out)(kept)
    dropped[path] = type(out).__name__
    return _DROPPED


@contextlib.contextmanager
def forward_returns_tensors(module, dropped: dict):
    """Patch `module.forward` (for the capture only) to leave out of its result what is not tensors (see
    _tensors_only): the module is captured as it is, so parameter names, scopes and source lines stay its own."""
    own = module.__dict__.get("forward")
    forward = module.forward

    @functools.wraps(forward)  # export reads the forward's signature through __wrapped__
    def tensors_only(*args, **kwargs):
        out = _tensors_only(forward(*args, **kwargs), dropped)
        return None if out is _DROPPED else out
    module.forward = tensors_only
    try:
        yield
    finally:
        if own is None:
            del module.forward
        else:
            module.forward = own


def capture(module, inputs, decompose: bool) -> tuple[Captured, str | None]:
    """torch.export first; make_fx (which specialises Python control flow on the example inputs) where
    export refuses the module. Returns the capture and why export failed (None if it did not)."""
    with _quiet_torch():
        try:
            with contextlib.redirect_stderr(io.StringIO()):  # export prints its partial graph on a data-dependent guard
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


def widen_dtypes(args):
    """`args` (nested lists, tuples, dicts) with torch.float32 as torch.float64: the model's float32 requests
    (x.float(), softmax(dtype=torch.float32), float32 tensors it creates) under float32_as=float64."""
    if args is torch.float32:
        return torch.float64
    if isinstance(args, (list, tuple)):
        return type(args)(widen_dtypes(a) for a in args)
    if isinstance(args, dict):
        return {k: widen_dtypes(v) for k, v in args.items()}
    return args


def run_in_torch(cap: Captured, placeholders: list, wide: bool) -> list:
    """The flat outputs of the captured graph run by torch on `placeholders` (torch tensors, in the graph's
    placeholder order): the reference the replay through gradir ops is checked against. stop_gradient is
    detach; with `wide`, the graph's float32 requests and constants are float64."""
    env, values, outputs = {}, iter(placeholders), []
    sg = stop_gradient_op()
    for node in cap.graph.nodes:
        if node.op == "placeholder":
            env[node] = next(values)
        elif node.op == "get_attr":
            c = numpy_to_torch(np.asarray(cap.constants[node.target]))
            env[node] = c.double() if wide and c.dtype == torch.float32 else c
        elif node.op == "call_function":
            args = torch.fx.node.map_arg(node.args, env.get)
            kwargs = torch.fx.node.map_arg(node.kwargs, env.get)
            if wide:
                args, kwargs = widen_dtypes(args), widen_dtypes(kwargs)
            if node.target is sg:
                env[node] = args[0].detach()
            elif node.target is torch.ops.aten._assert_tensor_metadata.default:  # its dtype is the capture's
                env[node] = None
            else:
                env[node] = node.target(*args, **kwargs)
        elif node.op == "output":
            outputs = torch_pytree.tree_leaves(torch.fx.node.map_arg(node.args[0], env.get))
    return outputs
