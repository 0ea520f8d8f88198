"""The public transformations: trace, grad, value_and_grad, vjp, jvp, compile, checkpoint, trace_grad.

Every transformation works the same way: flatten the (pytree) arguments, trace the function into a
Graph (gradir.api.args), transform the graph (autodiff, cleanup), then either evaluate it on the NumPy
backend or, when called inside another trace, re-record it there (so grad(grad(f)) and grad inside
compile compose into one graph). gr.compile's options are one `CompileOptions` object
(gradir.api.options); the trace of a compiled function carries them to the gradients taken inside it.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Callable

import numpy as np

from gradir.api import cache
from gradir.api.args import Args, as_leaf, captures, finish, numpy_results, prepare, signature, trace_args
from gradir.api.grad_trace import GradTrace
from gradir.api.options import CompileOptions, RematOptions, options_of
from gradir.backends import compile_graph, run
from gradir.core import dtypes
from gradir.core.errors import DTypeError, GradirError, NonDifferentiableError, ShapeError
from gradir.core.interop import is_torch, torch_to_numpy
from gradir.core.ir import Graph, Value
from gradir.core.seed import check_implied_seed
from gradir.core.source import scope
from gradir.core.trace import (
    abstract_dtype,
    building,
    constant,
    current_graph,
    current_scope,
    inline,
    is_traced,
    user_source,
)
from gradir.ops import zeros
from gradir.passes import joint_graph, jvp_graph, partition, run_pipeline
from gradir.passes.remat.plan import CHECKPOINT, in_checkpoint, plan_remat
from gradir.passes.schedule import schedule
from gradir.util.pytree import tree_flatten, tree_unflatten

__all__ = ["Compiled", "checkpoint", "compile", "grad", "jvp", "trace", "trace_grad", "value_and_grad", "vjp"]

EAGER_BACKEND = os.environ.get("GRADIR_EAGER_BACKEND", "numpy")
"""What runs the graphs of eager transformations (grad, vjp, jvp called outside gr.compile): the NumPy
interpreter by default; "llvm" compiles each graph first (the test suite runs the op tests both ways)."""

INTERPRET_NODES = 256
"""NumPy runs graphs up to this many nodes by interpreting them; bigger ones are compiled to NumPy source
once (about 20 µs a node, then ~5x less per node and call than the interpreter) and kept with the graph."""


def _execute(graph: Graph, flat_args: list) -> list:
    """Evaluate `graph` now (by EAGER_BACKEND) or re-record it inside the enclosing trace. What a
    backend compiled is kept on the graph, so cached graphs (gradir.api.cache) are compiled once."""
    if is_traced(*flat_args):
        return inline(graph, flat_args)
    if EAGER_BACKEND == "numpy" and len(graph.nodes) <= INTERPRET_NODES:
        return run(graph, flat_args)
    compiled = graph.__dict__.setdefault("compiled_by", {})
    if EAGER_BACKEND not in compiled:
        compiled[EAGER_BACKEND] = compile_graph(graph, backend=EAGER_BACKEND)
    return list(compiled[EAGER_BACKEND](*flat_args))


def _cached(fn: Callable, what: tuple, a: Args, build: Callable):
    """`build()`'s graphs for `fn` at `a`'s signature, from gradir.api.cache when called outside any trace
    (inside one, values of the enclosing trace may be captured: always built afresh)."""
    if a.traced or current_graph() is not None:
        return build()
    return cache.lookup(fn, (what, signature(a), current_scope()), build)


# -- trace ----------------------------------------------------------------------------------------


def trace(fn: Callable, *args, name: str | None = None) -> Graph:
    """Trace `fn` at `args` into a Graph (print it to see the SSA text form)."""
    a = prepare(fn, args)
    graph = trace_args(fn, a, name)
    graph.verify()
    return graph


# -- reverse mode ---------------------------------------------------------------------------------


def _argnums(argnums, nargs: int, op: str) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for n in nums:
        if not -nargs <= n < nargs:
            raise GradirError(f"argnums {n} is out of range for {nargs} positional arguments", op=op,
                              source=user_source())
    return tuple(n % nargs for n in nums)


def _wrt(a: Args, nums, op: str) -> list[int]:
    """Flat positions of the leaves of the positional arguments `nums`; each must be a real float."""
    wrt = [i for n in nums for i in a.leaf_ranges[n]]
    for i in wrt:
        if not dtypes.is_float(abstract_dtype(a.flat[i])):
            raise NonDifferentiableError(_no_gradient(a, i), op=op, source=user_source())
    return wrt


def _no_gradient(a: Args, i: int) -> str:
    """Why leaf `i` has no gradient, and what to pass instead."""
    name, dt = a.names[i], abstract_dtype(a.flat[i])
    leaf = [x for arg in a.args for x in tree_flatten(arg)[0]][i]  # as given: a Python int is not an i64 array
    if isinstance(leaf, bool):
        return f"argument {name} is the bool {leaf}, which has no gradient: leave it out of argnums"
    if isinstance(leaf, int):
        return (f"argument {name} is the integer {leaf}, which has no gradient: pass a float ({leaf}.0) to "
                "differentiate with respect to it, or leave it out of argnums")
    if dt == np.bool_:
        return f"argument {name} has dtype bool, which has no gradient (masks have none): leave it out of argnums"
    if dtypes.is_integer(dt):
        return (f"argument {name} has integer dtype {dtypes.short(dt)}, which has no gradient (integer indices have "
                f"none): pass floats ({name}.astype(np.float64)) to differentiate with respect to it, or leave it "
                "out of argnums")
    return (f"argument {name} has dtype {dtypes.short(dt)}; gradients are defined for real floating inputs only: "
            "leave it out of argnums")


def _check_scalar_output(forward: Graph, op: str) -> None:
    """A gradient needs one output whose seed can be implied (gradir.core.seed's rule, the one Tensor.backward()
    and torch's backward() use: one element, real float). The error points at the line that computed it."""
    lead, hint = "needs a function returning one scalar", "use gr.vjp for other outputs"
    if len(forward.outputs) != 1:
        shapes = ", ".join(o.type_str for o in forward.outputs) or "nothing"
        raise ShapeError(f"{lead}, got ({shapes}); {hint}", op=op, source=user_source())
    out = forward.outputs[0]
    check_implied_seed(out.shape, out.dtype, out.type_str, lead=lead, hint=hint, op=op,
                       source=out.source or user_source())


def _grad_graph(fn, a: Args, argnums, op: str, options: CompileOptions):
    """The cleaned graph: primal inputs (+ captures) -> (loss, gradients of the argnums leaves), following
    the recompute plan of `options` (those of the gr.compile it is traced in)."""
    nums = _argnums(argnums, len(a.leaf_ranges), op)
    wrt = _wrt(a, nums, op)  # before tracing: an integer argument is the problem, not what it computes
    forward = trace_args(fn, a, options=options)  # a gr.grad inside fn follows the same plan
    _check_scalar_output(forward, op)
    joint = joint_graph(forward, wrt)
    seeded = Graph(f"{forward.name}_grad")
    seeded_inputs = [seeded.add_input(x.shape, x.dtype, x.attrs.get("name"), x.source) for x in joint.inputs[:-1]]
    # the joint graph inlined as it is, unless a recompute plan or a gr.checkpoint region asks for a partition
    plan = _remat_plan(run_pipeline(joint), options.remat) if options.remat.plans or _has_checkpoints(forward) else None
    with building(seeded):
        one = constant(np.ones(forward.outputs[0].shape, dtype=forward.outputs[0].dtype))  # () or (1, 1), ...
        if plan is None:
            seeded.outputs = inline(joint, seeded_inputs + [one])
        else:  # forward program, then the backward program recomputing what the plan did not keep
            part, k = plan[1], plan[1].forward.num_forward_outputs
            outs = inline(part.forward, seeded_inputs)
            seeded.outputs = outs[:k] + inline(part.backward, outs[k:] + [one])
    return run_pipeline(seeded), nums, forward


def _has_checkpoints(graph: Graph) -> bool:
    return any(in_checkpoint(n) for n in graph.nodes)


def _remat_plan(joint: Graph, remat: RematOptions):
    """(plan, partition) of `joint` under the recompute settings `remat`."""
    plan = plan_remat(joint, remat.policy, remat.memory_budget, **dict(remat.planner))
    return plan, partition(joint, saved=plan.saved)


def checkpoint(fn: Callable) -> Callable:
    """Mark `fn` as a recompute region (torch.utils.checkpoint / jax.checkpoint): backward keeps
    only what enters and leaves it and computes its inside again. The gradients are the same."""
    ids = itertools.count()

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with scope(f"{CHECKPOINT}:{getattr(fn, '__name__', 'fn')}#{next(ids)}"):
            return fn(*args, **kwargs)
    return wrapper


def _split_grads(flat_grads, a: Args, nums):
    out, k = [], 0
    for n in nums:
        r = a.leaf_ranges[n]
        _, sub_tree = tree_flatten(tree_unflatten(a.in_tree, list(range(len(a.flat))))[n])
        out.append(tree_unflatten(sub_tree, flat_grads[k:k + len(r)]))
        k += len(r)
    return out


def value_and_grad(fn: Callable, argnums: int | tuple[int, ...] = 0) -> Callable:
    """`fn`'s value and its gradient with respect to the positional arguments `argnums`.

    Gradients come back in the structure of the arguments (pytrees) and as the same kind of array.
    The returned function traces `fn` once per input signature and reuses that graph (gradir.api.cache).
    """
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        f = functools.partial(fn, **kwargs) if kwargs else fn  # keyword arguments: passed through, not differentiated
        a = prepare(f, args)
        # cached per transformed function, as gr.compile caches per compiled object: gr.grad(f) made anew traces anew
        options = options_of(current_graph())  # inside gr.compile: its recompute plan
        graph, nums, forward = _cached(wrapper, ("value_and_grad", argnums), a,
                                       lambda: _grad_graph(f, a, argnums, "grad", options))
        values = finish(_execute(graph, a.flat + captures(forward)), a)
        grads = _split_grads(values[1:], a, nums)
        return values[0], (grads[0] if isinstance(argnums, int) else tuple(grads))
    return wrapper


def grad(fn: Callable, argnums: int | tuple[int, ...] = 0) -> Callable:
    """The gradient of scalar-valued `fn` with respect to positional arguments `argnums`
    (an int gives one gradient, a tuple a tuple of them). Differentiable again: grad(grad(f)).
    "Scalar" as for torch's backward(): one real float element, of any shape ((), (1,), (1, 1), ...;
    gradir.core.seed); the arguments differentiated must be real floats (pass 3.0, not 3)."""
    vg = value_and_grad(fn, argnums)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return vg(*args, **kwargs)[1]
    return wrapper


def vjp(fn: Callable, *args):
    """(out, vjp_fn): vjp_fn(cotangent) returns one cotangent per positional argument (pytrees
    mirrored; None for integer/bool leaves). The forward runs now; residuals are kept for vjp_fn."""
    a = prepare(fn, args)

    def build():
        forward = trace_args(fn, a)
        wrt = [i for i, x in enumerate(forward.inputs[:len(a.flat)]) if dtypes.is_float(x.dtype)]
        return forward, wrt, partition(run_pipeline(joint_graph(forward, wrt)))

    forward, wrt, part = _cached(fn, ("vjp",), a, build)
    fwd_vals = _execute(part.forward, a.flat + captures(forward))
    k = len(forward.outputs)
    outs, residuals = fwd_vals[:k], fwd_vals[k:]
    out_tree = forward.out_tree
    user_outs = finish(outs, a)

    def vjp_fn(cotangent):
        cts, ct_tree = tree_flatten(cotangent)
        if ct_tree != out_tree:
            raise ShapeError("cotangent structure differs from the output's", op="vjp", source=user_source())
        cts = [np.asarray(torch_to_numpy(c) if is_torch(c) else c, dtype=o.dtype) if not isinstance(c, Value)
               else c for c, o in zip(cts, forward.outputs)]
        for c, o in zip(cts, forward.outputs):
            if tuple(c.shape) != o.shape:
                raise ShapeError(f"cotangent shape {tuple(c.shape)} differs from output {o.type_str}", op="vjp",
                                 source=user_source())
        grads = finish(_execute(part.backward, list(residuals) + cts), a)
        flat_ct: list = [None] * len(a.flat)
        for i, g in zip(wrt, grads):
            flat_ct[i] = g
        return tuple(_split_grads(flat_ct, a, range(len(args))))

    vjp_fn.partition = part
    return tree_unflatten(out_tree, user_outs), vjp_fn


# -- forward mode ---------------------------------------------------------------------------------


def _check_tangents(t_flat: list, a: Args) -> None:
    """Each tangent has its primal's shape; a float primal needs a float tangent (as in JAX; it is then
    cast to the primal's dtype). Python scalars are weakly typed and fit any float primal."""
    for i, (t, p) in enumerate(zip(t_flat, a.flat)):
        leaf = as_leaf(t)
        if tuple(np.shape(leaf)) != tuple(np.shape(p)):
            raise ShapeError(f"tangent for {a.names[i]} has shape {tuple(np.shape(leaf))}, the primal "
                             f"{tuple(np.shape(p))}", op="jvp", source=user_source())
        pdt = abstract_dtype(p)
        weak = isinstance(t, (int, float)) and not isinstance(t, bool)
        if dtypes.is_float(pdt) and not weak and not dtypes.is_float(abstract_dtype(leaf)):
            raise DTypeError(f"tangent for {a.names[i]} has dtype {dtypes.short(abstract_dtype(leaf))}; a "
                             f"{dtypes.short(pdt)} primal needs a float tangent", op="jvp", source=user_source())


def jvp(fn: Callable, primals: tuple, tangents: tuple):
    """(out, tangent_out): `fn` at `primals` and its directional derivative along `tangents`.

    `tangents` mirrors `primals`: same structure and shapes; float primals take float tangents
    (cast to the primal's dtype). A mismatch raises ShapeError / DTypeError naming the leaf."""
    a = prepare(fn, tuple(primals))
    t_flat, t_tree = tree_flatten(tuple(tangents))
    if len(t_flat) != len(a.flat):
        raise ShapeError("tangents must mirror the primals' structure", op="jvp", source=user_source())
    _check_tangents(t_flat, a)
    t_flat = [t if isinstance(t, Value) else np.asarray(torch_to_numpy(t) if is_torch(t) else t, dtype=p.dtype)
              for t, p in zip(t_flat, a.flat)]

    def build():
        forward = trace_args(fn, a)
        return forward, run_pipeline(jvp_graph(forward))

    forward, graph = _cached(fn, ("jvp",), a, build)
    caps = captures(forward)
    # jvp_graph's inputs: all primal inputs (captures included), then one tangent per input
    cap_tangents = [zeros(c.shape, c.dtype) for c in caps]
    values = finish(_execute(graph, a.flat + caps + t_flat + cap_tangents), a)
    k = len(forward.outputs)
    return tree_unflatten(forward.out_tree, values[:k]), tree_unflatten(forward.out_tree, values[k:])


# -- compile --------------------------------------------------------------------------------------


class Compiled:
    """A function compiled by `gr.compile`: traced once per input signature, then run by a backend, as its
    `options` (a CompileOptions) say."""

    def __init__(self, fn, options: CompileOptions):
        self.fn, self.options = fn, options
        self._cache: dict = {}
        self._arrays: dict = {}  # the same entries, by the shapes and dtypes of all-array calls
        functools.update_wrapper(self, fn)

    backend = property(lambda self: self.options.backend)
    check = property(lambda self: self.options.check)
    policy = property(lambda self: self.options.policy)

    def __repr__(self) -> str:
        """`<gr.compile(loss, backend='llvm'): 2 signatures cached: (f32[32,256], f32[256]); (f64[], f64[])>`."""
        name = getattr(self.fn, "__qualname__", None) or getattr(self.fn, "__name__", None) or repr(self.fn)
        name = name.rpartition("<locals>.")[2]  # `Model.step`, not `main.<locals>.Model.step`
        policy = f", policy={self.policy!r}" if self.policy != "engine" else ""
        sigs = []
        for key, (graph, _) in list(self._cache.items()):  # a copy: a compile in another thread may add an entry
            shapes = ", ".join(v.type_str for v in graph.inputs)
            static = key[-1] if isinstance(key, tuple) and isinstance(key[-1], tuple) else ()  # keyword constants
            names = [kv[0] for kv in static if isinstance(kv, tuple) and len(kv) == 2 and isinstance(kv[0], str)]
            sigs.append(f"({shapes}{''.join(f', {k}=...' for k in names)})")
        cached = (f"{len(sigs)} signature{'s' * (len(sigs) != 1)} cached: {'; '.join(sigs[:8])}"
                  f"{f'; ... {len(sigs) - 8} more' if len(sigs) > 8 else ''}" if sigs else "not traced yet")
        return f"<gr.compile({name}, backend={self.backend!r}{policy}): {cached}>"

    def _entry(self, a: Args):
        key = signature(a)
        try:
            hash(key)
        except TypeError:
            raise GradirError("keyword arguments of a compiled function are static: traced in as constants and part "
                              "of the cache key, so they must be hashable (numbers, strings, tuples); pass arrays "
                              "positionally", op="compile", source=user_source()) from None
        entry = self._cache.get(key)
        if entry is None:
            graph = run_pipeline(trace_args(a.fn, a, options=self.options))  # the gradients inside follow its remat
            if captures(graph):
                raise GradirError("a compiled function may not close over values of an enclosing trace",
                                  op="compile", source=user_source())
            order = None if self.policy == "engine" else schedule(graph, self.policy).order  # engine order: the graph's
            entry = self._cache[key] = (graph, compile_graph(graph, check=self.check, order=order, backend=self.backend))
        return entry

    def _args(self, args, kwargs) -> Args:
        # the triton backend takes torch tensors where they are (on the GPU); the others take NumPy arrays
        return prepare(functools.partial(self.fn, **kwargs) if kwargs else self.fn, args,
                        keep_torch=self.backend == "triton")

    def __call__(self, *args, **kwargs):
        arrays = not kwargs and all(type(x) is np.ndarray for x in args)
        if arrays:  # only NumPy arrays: the signature is their shapes and dtypes, looked up without flattening
            entry = self._arrays.get(tuple((x.shape, x.dtype) for x in args))
            if entry is not None:
                return tree_unflatten(entry[0].out_tree, numpy_results(entry[1](*args)))
        a = self._args(args, kwargs)
        if a.traced:  # compile inside a trace: just inline the function
            graph = trace_args(a.fn, a)
            return tree_unflatten(graph.out_tree, inline(graph, a.flat + captures(graph)))
        entry = self._entry(a)
        if arrays:
            self._arrays[tuple((x.shape, x.dtype) for x in args)] = entry
        graph, compiled = entry
        flat = a.flat if a.device_flat is None else a.device_flat
        return tree_unflatten(graph.out_tree, finish(compiled(*flat), a))

    def run_with_ready(self, *args, on_ready, **kwargs) -> list:
        """Run on `args` as a call does, calling ``on_ready(position, array)`` for each flat output as soon as it
        is final: during the run where the backend can say (the LLVM backend, between its kernels), else after
        it. Returns the flat outputs. Data-parallel training starts each gradient bucket's all-reduce here."""
        a = self._args(args, kwargs)
        compiled = self._entry(a)[1]
        flat = a.flat if a.device_flat is None else a.device_flat
        if hasattr(compiled, "run_with_ready"):
            return compiled.run_with_ready(flat, on_ready)
        outs = list(compiled(*flat))
        for pos, out in enumerate(outs):
            on_ready(pos, out)
        return outs

    def graph(self, *args, **kwargs) -> Graph:
        """The optimized graph this function runs for `args`' signature."""
        return self._entry(self._args(args, kwargs))[0]

    def source(self, *args, **kwargs) -> str:
        """What the backend generated for `args`' signature: Python/NumPy source, or for LLVM the
        fused kernel listing followed by the LLVM IR."""
        return self._entry(self._args(args, kwargs))[1].source

    def executable(self, *args, **kwargs):
        """The backend's compiled program for `args`' signature (for LLVM: `.listing`, `.optimized_ir`,
        `.assembly`, `.program` (the fused kernels), `.profile(*flat_args)` (seconds per kernel))."""
        return self._entry(self._args(args, kwargs))[1]

    @property
    def cache_size(self) -> int:
        return len(self._cache)


def compile(fn: Callable | None = None, *, backend: str = "llvm", remat: str | None = None,
            memory_budget: int | None = None, check: bool | None = None, policy: str = "engine"):
    """Compile `fn`: traced once per input signature (shapes, dtypes, pytree structure), cached,
    and run by `backend`. Usable as ``@gr.compile`` or ``@gr.compile(backend="numpy")``.

    `policy` is the scheduling policy of the dependency-counted order the backend runs ("engine" or
    "memory", see gradir.passes.schedule). `remat` / `memory_budget` (recompute planning, see
    gradir.passes.remat.plan) apply to the gradients computed inside `fn` (its gr.grad / gr.value_and_grad
    calls); for a function that takes no gradient they change nothing. `check=True` (default: the GRADIR_CHECK environment
    variable) makes the generated code assert that every value has the shape and dtype the IR promises."""
    if check is None:
        check = os.environ.get("GRADIR_CHECK", "") not in ("", "0")
    options = CompileOptions.make(backend, remat, memory_budget, check, policy)

    def wrap(f):
        return Compiled(f, options)
    return wrap if fn is None else wrap(fn)


# -- inspection -----------------------------------------------------------------------------------


def trace_grad(fn: Callable, *args, argnums: int | tuple[int, ...] = 0, remat: str | None = None,
               memory_budget: int | None = None, policy: str | None = None, **remat_options) -> GradTrace:
    """Trace, differentiate and partition `fn` at `args` for inspection: `.forward`, `.backward`,
    `.saved`, `.schedule` (dependency-counted, under `policy`: "engine" or "memory"), `.memory`,
    and `.remat` (the recompute plan under `remat`: none, uniform, selective, mincut, optimal, with
    `memory_budget` in bytes for optimal; options such as segments=6 for uniform)."""
    a = prepare(fn, args)
    nums = _argnums(argnums, len(a.leaf_ranges), "trace_grad")
    wrt = _wrt(a, nums, "trace_grad")
    graph = trace_args(fn, a)
    _check_scalar_output(graph, "trace_grad")
    joint = run_pipeline(joint_graph(graph, wrt))
    if remat is None and memory_budget is not None:
        remat = "optimal"
    plan, part = _remat_plan(joint, RematOptions(remat or "none", memory_budget, tuple(remat_options.items())))
    return GradTrace(graph, joint, part, policy or "engine", tuple(wrt), plan)
