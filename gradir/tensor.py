"""`gr.Tensor`: the eager, PyTorch-like front door, built on the same op rules, IR and passes.

    t = gr.Tensor(np.array([2.0, 3.0]), requires_grad=True)
    y = (t * t).sum(); y.backward(); t.grad          # Tensor([4. 6.])

Every gr op works on Tensors: `bind` hands them to `Tensor._eager_bind`, which computes the result
with the op's NumPy reference at once and, when grad mode is on and an operand requires grad,
appends a node to the tape (the `grad_fn`): the op, links to where each operand came from (another
node, a leaf, or a constant), attributes, the user's source line, and the storage and *version* of
every value the op's VJP rule reads for the operands that need a gradient (`gradir.rules`).

`backward()` checks the versions of everything the reachable nodes saved, then walks them in
reverse recording order, as PyTorch's engine does (no recursion, so tapes of any depth): a node's
cotangent is the sum of its users' contributions, and its op's VJP rule turns it into its operands'.
The rule is the op library's, traced once per signature into a small IR graph, cleaned by the
default pipeline and compiled by the NumPy backend (`gradir.tape_rules`); with `create_graph=True`
that graph runs through `bind` on Tensors (`inline`), so the gradients are Tensors with history of
their own. `last_backward()` shows the tape as gradir's IR: the forward `Graph` of the nodes (every
leaf an input), and, built when asked, the partition `gr.grad`'s pipeline makes of it and which of
its residuals the tape holds.

Differences from PyTorch, on purpose: results never alias their operands (a slice or reshape is a
copy, so an in-place op never changes another Tensor behind its version counter); dtypes follow
NumPy (Python floats are float64); `.data`/`.numpy()` share memory and writes through them are not
versioned (as with torch's `.data`).
"""

from __future__ import annotations

import functools
import itertools
import types
import weakref

import numpy as np

from gradir import dtypes
from gradir.errors import (
    DTypeError,
    ExecutionError,
    FreedGraphError,
    GradirError,
    NonDifferentiableError,
    ShapeError,
    UnsupportedOpError,
    VersionError,
)
from gradir.interop import is_torch, torch_to_numpy
from gradir.ir import Graph, Value
from gradir.ops.lifting import broadcast_view
from gradir.primitive import get_primitive
from gradir.tape_rules import tape_rule
from gradir.trace import _BUILDERS, EagerOperand, bind, evaluate, user_source

# -- grad mode --------------------------------------------------------------------------------------

_GRAD_MODE = [True]


def is_grad_enabled() -> bool:
    """True unless inside `gr.no_grad()`."""
    return _GRAD_MODE[-1]


class _GradMode:
    enabled = True

    def __enter__(self):
        _GRAD_MODE.append(self.enabled)
        return self

    def __exit__(self, *exc):
        _GRAD_MODE.pop()

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):  # noqa: N801 - spelled as in PyTorch
    """Context manager (or decorator): ops on Tensors inside record nothing (an optimizer step)."""

    enabled = False


class enable_grad(_GradMode):  # noqa: N801
    """Context manager (or decorator): record again inside an enclosing `no_grad`."""

    enabled = True


# -- storage, tape nodes -----------------------------------------------------------------------------

_seq = itertools.count()


class _Storage:
    """An array and its version counter (bumped by every in-place write through a Tensor)."""

    __slots__ = ("array", "version", "mutated_at")

    def __init__(self, array: np.ndarray):
        self.array, self.version, self.mutated_at = array, 0, None


class _Frozen:
    """A tape link to a Tensor that does not require grad: its storage and version when used."""

    __slots__ = ("storage", "version", "source")

    def __init__(self, t: Tensor):
        self.storage, self.version, self.source = t._storage, t._storage.version, t._source


class Node:
    """One op recorded on Tensors; a Tensor's `grad_fn`.

    `inputs` link each operand to where its value came from: another Node, a leaf Tensor that
    requires grad, a `_Frozen` Tensor (no grad) or an ndarray constant. `saved` maps each operand
    the VJP rule reads (-1: the output) to (storage, version at record time); backward frees it
    (`had_saved` keeps the keys). `rule` is the op's VJP for this signature (`gradir.tape_rules`)."""

    __slots__ = ("op", "attrs", "inputs", "source", "shape", "dtype", "seq", "saved", "had_saved", "freed",
                 "retained", "rule", "__weakref__")

    def __init__(self, op, attrs, inputs, source, shape, dtype, saved, rule):
        self.op, self.attrs, self.inputs, self.source = op, attrs, inputs, source
        self.shape, self.dtype, self.seq, self.rule = shape, dtype, next(_seq), rule
        self.saved, self.had_saved, self.freed, self.retained = saved, tuple(saved), False, None

    @property
    def name(self) -> str:
        """`multiply` -> `MultiplyBackward`, after PyTorch's `MulBackward0`."""
        return "".join(p.capitalize() for p in self.op.split("_")) + "Backward"

    def __repr__(self) -> str:
        return f"<{self.name}>"

    @property
    def next_functions(self) -> tuple:
        """((grad_fn or AccumulateGrad or None, 0), ...) per operand, as in PyTorch."""
        out = []
        for h in self.inputs:
            out.append((h if isinstance(h, Node) else AccumulateGrad(h) if isinstance(h, Tensor) else None, 0))
        return tuple(out)


class AccumulateGrad:
    """The end of a backward path: the leaf whose `.grad` receives the gradient."""

    next_functions = ()
    name = "AccumulateGrad"

    def __init__(self, variable: Tensor):
        self.variable = variable

    def __repr__(self) -> str:
        return "<AccumulateGrad>"


# -- the Tensor ----------------------------------------------------------------------------------------


class Tensor(EagerOperand):
    """An eager array with reverse-mode autodiff, PyTorch-like (see the module docstring)."""

    __slots__ = ("_storage", "_requires_grad", "_node", "_grad", "_retain", "_source", "__weakref__")
    __array_priority__ = 1000
    __array_ufunc__ = None  # `ndarray * Tensor` defers to Tensor.__rmul__
    __hash__ = object.__hash__

    def __init__(self, data, requires_grad: bool = False, dtype=None):
        if isinstance(data, Tensor):
            data = data.data
        elif is_torch(data):
            data = torch_to_numpy(data)
        arr = np.array(data, dtype=None if dtype is None else dtypes.as_dtype(dtype))
        if arr.dtype not in dtypes.SHORT_NAMES:
            arr = arr.astype(dtypes.as_dtype(arr.dtype))
        self._init(_Storage(arr), None)
        self.requires_grad = requires_grad

    def _init(self, storage: _Storage, node: Node | None):
        self._storage, self._node, self._requires_grad = storage, node, node is not None
        self._grad, self._retain, self._source = None, False, user_source()

    @classmethod
    def _wrap(cls, array=None, node: Node | None = None, storage: _Storage | None = None) -> Tensor:
        t = object.__new__(cls)  # _init, inlined: every eager op makes one
        t._storage, t._node, t._requires_grad = storage if storage is not None else _Storage(array), node, node is not None
        t._grad, t._retain, t._source = None, False, user_source()
        return t

    # -- array facts ---------------------------------------------------------------------------------
    @property
    def data(self) -> np.ndarray:
        """The NumPy array (shared; writes through it are not versioned)."""
        return self._storage.array

    def numpy(self) -> np.ndarray:
        return self._storage.array

    shape = property(lambda self: self._storage.array.shape)
    dtype = property(lambda self: self._storage.array.dtype)
    ndim = property(lambda self: self._storage.array.ndim)
    size = property(lambda self: self._storage.array.size)
    nbytes = property(lambda self: self._storage.array.nbytes)
    version = property(lambda self: self._storage.version, doc="In-place writes so far (torch's `_version`).")
    _version = version

    @property
    def type_str(self) -> str:
        return f"{dtypes.short(self.dtype)}[{','.join(map(str, self.shape))}]"

    def item(self):
        if self.size != 1:
            raise ShapeError(f"item() needs a one-element tensor, got {self.type_str}", op="item", source=user_source())
        return self._storage.array.item()

    def tolist(self):
        return self._storage.array.tolist()

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._storage.array, dtype=dtype)

    def __len__(self) -> int:
        if not self.shape:
            raise ShapeError("len() of a 0-d tensor", op="len", source=user_source())
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        return bool(self.item())

    def __repr__(self) -> str:
        body = np.array2string(self._storage.array, separator=", ", prefix="Tensor(")
        extra = f", dtype={dtypes.short(self.dtype)}" if self.dtype != np.float64 else ""
        if self._node is not None:
            extra += f", grad_fn={self._node!r}"
        elif self._requires_grad:
            extra += ", requires_grad=True"
        return f"Tensor({body}{extra})"

    # -- autograd state ------------------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag: bool):
        flag = bool(flag)
        if flag and not dtypes.is_float(self.dtype):
            raise NonDifferentiableError(f"only floating-point tensors can require grad, this one is {self.type_str}",
                                         op="requires_grad", source=user_source())
        if not flag and self._node is not None:
            raise GradirError("requires_grad can only be turned off on a leaf; use detach() for a copy without "
                              "history", op="requires_grad", source=user_source())
        self._requires_grad = flag

    def requires_grad_(self, flag: bool = True) -> Tensor:
        self.requires_grad = flag
        return self

    @property
    def is_leaf(self) -> bool:
        """True for tensors made by the user (or under no_grad): backward stops here."""
        return self._node is None

    @property
    def grad_fn(self) -> Node | None:
        return self._node

    @property
    def grad(self) -> Tensor | None:
        """The accumulated gradient (leaves, and non-leaves that called retain_grad()); settable to None."""
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            value = value if isinstance(value, Tensor) else Tensor(value, dtype=self.dtype)
            if value.shape != self.shape:
                raise ShapeError(f"grad of shape {value.shape} assigned to a tensor of shape {self.shape}",
                                 op="grad", source=user_source())
        self._grad = value

    def retain_grad(self) -> None:
        """Keep this non-leaf's gradient in `.grad` on backward (leaves always keep theirs)."""
        if not self._requires_grad:
            raise GradirError("retain_grad() on a tensor that does not require grad", op="retain_grad",
                              source=user_source())
        if self._node is not None:
            self._retain = True
            self._node.retained = weakref.ref(self)

    def detach(self) -> Tensor:
        """The same storage (and version counter), without history."""
        return Tensor._wrap(storage=self._storage)

    def clone(self) -> Tensor:
        """A copy that keeps history (gradients flow through it)."""
        return bind("reshape", self, shape=self.shape)

    def backward(self, gradient=None, retain_graph: bool | None = None, create_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's `.grad` (and retained non-leaves').

        `gradient` is the cotangent for a non-scalar tensor (default 1 for one element). The tape's
        saved values are freed afterwards unless `retain_graph` (default: `create_graph`); with
        `create_graph=True` the gradients are Tensors with history, differentiable again."""
        _run_backward(self, gradient, create_graph if retain_graph is None else retain_graph, create_graph)

    # -- ops -----------------------------------------------------------------------------------------
    @classmethod
    def _eager_bind(cls, op: str, operands: tuple, attrs: dict) -> Tensor:
        """Evaluate `op` now; record a tape node if grad mode is on and an operand requires grad."""
        arrays, need = [], []
        for o in operands:
            if isinstance(o, Tensor):
                arrays.append(o._storage.array)
                need.append(o._requires_grad)
            else:
                arrays.append(o if type(o) is np.ndarray else np.asarray(o))
                need.append(False)
        prim = get_primitive(op)
        if prim.numpy is None and prim.decompose is not None:  # a composite: its decomposition computes it
            value = np.asarray(prim.decompose(*arrays, **attrs))
        else:
            value = evaluate(prim, arrays, attrs)
        # (an array owning its memory, base None, shares it with no operand but itself: the overlap test is skipped)
        if not value.flags.writeable or any([value is a for a in arrays]) or \
                (value.base is not None and any([np.may_share_memory(value, a) for a in arrays])):
            value = value.copy()  # never alias: an in-place write must go through one version counter
        out = cls._wrap(value)
        if not (True in need and _GRAD_MODE[-1] and prim.differentiable and dtypes.is_inexact(value.dtype)):
            return out
        need = tuple(need)
        # what the VJP reads to give the operands in `need` their cotangents (as PyTorch saves only
        # for inputs that require grad)
        rule = tape_rule(op, arrays, attrs, value, need)
        reads = rule.reads
        saved = {i: ((out._storage, 0) if i < 0 else (operands[i]._storage, operands[i]._storage.version))
                 for i in reads if i < 0 or isinstance(operands[i], Tensor)}
        inputs = tuple([_link(o, a, i in reads) for i, (o, a) in enumerate(zip(operands, arrays))])
        out._node = Node(op, attrs, inputs, out._source, value.shape, value.dtype, saved, rule)
        out._requires_grad = True
        return out

    def __getitem__(self, index):
        from gradir.ops import getitem

        return getitem(self, _eager_index(index))

    def __setitem__(self, index, value):
        index = _eager_index(index)
        if not (_GRAD_MODE[-1] and (self._requires_grad or (isinstance(value, Tensor) and value._requires_grad))):
            try:
                self._storage.array[index] = value.data if isinstance(value, Tensor) else value
            except (ValueError, IndexError, TypeError) as e:
                raise ShapeError(str(e), op="setitem", source=user_source()) from None
            self._bump()
            return
        self._inplace("setitem", lambda: _scatter(self, index, value))

    # in-place ops: mutate the storage, bump its version, rebase history onto the op's node
    def add_(self, other, alpha=1):
        return self._inplace("add_", lambda: self + (other if alpha == 1 else other * alpha))

    def sub_(self, other, alpha=1):
        return self._inplace("sub_", lambda: self - (other if alpha == 1 else other * alpha))

    def mul_(self, other):
        return self._inplace("mul_", lambda: self * other)

    def div_(self, other):
        return self._inplace("div_", lambda: self / other)

    def fill_(self, value):
        self[...] = value
        return self

    def zero_(self):
        return self.fill_(0)

    def copy_(self, src):
        self[...] = src
        return self

    __iadd__ = add_
    __isub__ = sub_
    __imul__ = mul_
    __itruediv__ = div_

    def _bump(self):
        s = self._storage
        s.version += 1
        s.mutated_at = user_source()

    def _inplace(self, op: str, compute) -> Tensor:
        """Functionalized in-place op: compute the new value out of place (recorded as usual), write
        it into this storage, bump the version, and make the op's node this tensor's grad_fn."""
        if _GRAD_MODE[-1] and self._requires_grad and self._node is None:
            raise GradirError("in-place op on a leaf that requires grad: backward would lose its value. Update "
                              "parameters inside `with gr.no_grad():` (as an optimizer step does), or use the "
                              "out-of-place op", op=op, source=user_source())
        new = compute()
        if new.shape != self.shape:
            raise ShapeError(f"the result {new.type_str} does not fit in place into {self.type_str} (only the other "
                             "operand broadcasts)", op=op, source=user_source())
        if new.dtype != self.dtype:
            if not np.can_cast(new.dtype, self.dtype, "same_kind"):
                raise DTypeError(f"cannot write a {dtypes.short(new.dtype)} result in place into {self.type_str}",
                                 op=op, source=user_source())
            from gradir.ops import astype

            new = astype(new, self.dtype)
        self._storage.array[...] = new.data
        self._bump()
        node = new._node
        if node is not None and _GRAD_MODE[-1]:
            if -1 in node.saved:  # the op's output now lives in this storage, at this version
                node.saved[-1] = (self._storage, self._storage.version)
            if self._retain:
                if self._node is not None:
                    self._node.retained = None
                node.retained = weakref.ref(self)
            self._node, self._requires_grad = node, True
        return self

    # eager-only reductions to a Python bool (a traced value has no data to test)
    def any(self): return bool(np.any(self._storage.array))
    def all(self): return bool(np.all(self._storage.array))


def _ops():
    import gradir.ops as ops

    return ops


# operators and NumPy-named methods: the traced Value's own (they call gr ops, which bind Tensors)
_NOT_SHARED = {"__init__", "__repr__", "__hash__", "__bool__", "__int__", "__float__", "__index__", "__len__",
               "__iter__", "__array__", "_control_flow", "ndim", "size", "nbytes", "type_str", "__getitem__",
               "__setitem__"}
for _name, _attr in vars(Value).items():
    in_place = _name.endswith("_") and not _name.startswith("__")  # Tensor has its own (versioned) ones
    if _name in _NOT_SHARED or _name in vars(Tensor) or in_place or not isinstance(_attr, (property, types.FunctionType)):
        continue
    setattr(Tensor, _name, _attr)


def _fast_arithmetic(dunder: str, op: str, reflected: bool):
    """Tensor's `dunder`: in the common eager cases (a Python float or int, whose weak type is the
    tensor's inexact dtype; or a Tensor of the same shape and dtype) the op's node is bound at once,
    exactly as the gr op's lifting and broadcasting would bind it; anything else takes the gr op."""
    general = vars(Value)[dunder]

    def method(self, other):
        if not _BUILDERS:
            arr = self._storage.array
            if type(other) is float or type(other) is int:
                if dtypes.is_inexact(arr.dtype):
                    c = np.asarray(other, arr.dtype)
                    if arr.ndim:
                        c = broadcast_view(c, arr.shape)
                    return Tensor._eager_bind(op, (c, self) if reflected else (self, c), {})
            elif type(other) is Tensor:
                o = other._storage.array
                if o.shape == arr.shape and o.dtype == arr.dtype and (op != "divide" or dtypes.is_inexact(arr.dtype)):
                    return Tensor._eager_bind(op, (other, self) if reflected else (self, other), {})
        return general(self, other)
    method.__name__ = method.__qualname__ = dunder
    return method


for _name, _op in (("add", "add"), ("sub", "subtract"), ("mul", "multiply"), ("truediv", "divide")):
    setattr(Tensor, f"__{_name}__", _fast_arithmetic(f"__{_name}__", _op, False))
    setattr(Tensor, f"__r{_name}__", _fast_arithmetic(f"__r{_name}__", _op, True))


def _link(o, array: np.ndarray, read: bool):
    """Where an operand's value comes from, for the tape."""
    if isinstance(o, Tensor):
        if o._node is not None:
            return o._node
        return o if o._requires_grad else _Frozen(o)
    if not read:
        return array
    if array.ndim and not any(array.strides):  # a broadcast scalar (the usual case: x * 2.0)
        return broadcast_view(np.array(array[(0,) * array.ndim]), array.shape)
    base = _compact(array)  # a constant the rule reads is copied (the caller may reuse its array), compactly
    if base is array:
        return np.array(array)
    return broadcast_view(np.array(base.reshape(()) if base.size == 1 else base), array.shape)


def _compact(a: np.ndarray) -> np.ndarray:
    """The smallest array `a` is a broadcast of (axes with stride 0 cut to length 1), or `a` itself."""
    if a.ndim == 0 or all(st for st in a.strides):
        return a
    return a[tuple(slice(0, 1) if st == 0 else slice(None) for st in a.strides)]


def _eager_index(index):
    """Tensor indices become arrays; boolean masks become their nonzero() positions (on eager
    tensors the result shape is known), as NumPy defines them."""
    index = index if isinstance(index, tuple) else (index,)
    out = []
    for i in index:
        if isinstance(i, Tensor):
            i = i.data
        if isinstance(i, list) and i and all(isinstance(b, (bool, np.bool_)) for b in i):
            i = np.asarray(i)
        if isinstance(i, np.ndarray) and i.dtype == np.bool_ and i.ndim:
            out.extend(np.nonzero(i))
        else:
            out.append(i)
    return tuple(out)


def _scatter(x: Tensor, index, value) -> Tensor:
    """`x[index] = value` as a value: the traced setitem's update_slice/index_update where it applies,
    else where(mask, value placed by index_add, x) for any NumPy index (each element written once)."""
    from gradir.ops import astype, broadcast_to, reshape, where
    from gradir.ops.lifting import lift
    from gradir.ops.update import setitem

    try:
        return setitem(x, index, value)
    except UnsupportedOpError:
        pass
    try:
        pos = np.arange(x.size).reshape(x.shape)[index]
    except (IndexError, ValueError, TypeError) as e:
        raise ShapeError(str(e), op="setitem", source=user_source()) from None
    flat = np.asarray(pos, dtype=np.int64).ravel()
    if np.unique(flat).size != flat.size:
        raise UnsupportedOpError("the index writes some element more than once; with recording on, each element "
                                 "may be written once", op="setitem", source=user_source())
    mask = np.zeros(x.size, dtype=bool)
    mask[flat] = True
    v = broadcast_to(astype(lift(value), x.dtype), np.shape(pos))
    placed = bind("index_add", reshape(v, (flat.size,)), flat, axis=0, size=x.size)
    return where(mask.reshape(x.shape), reshape(placed, x.shape), x)


# -- backward: the tape walked in reverse, each node's VJP rule compiled once per signature ------------


def _run_backward(root: Tensor, gradient, retain_graph: bool, create_graph: bool) -> None:
    src = user_source()
    if not root._requires_grad:
        raise GradirError("this tensor does not require grad and has no grad_fn: nothing to differentiate (set "
                          "requires_grad=True on a leaf; was it computed under gr.no_grad()?)", op="backward", source=src)
    seed = _seed(root, gradient, create_graph, src)
    if root._node is None:  # a leaf: its gradient is the seed itself
        _accumulate(root, seed, create_graph)
        return
    nodes = _reachable(root._node)
    _check_saved(nodes)
    if create_graph:  # the rules run through bind on Tensors: the gradients have history
        with enable_grad():
            grads, retained = _walk(nodes, root._node, seed, True)
    else:
        with np.errstate(all="ignore"):
            grads, retained = _walk(nodes, root._node, seed, False)
    _LAST[:] = [BackwardRecord(nodes, root._node, retained)]
    for t, g in grads:
        _accumulate(t, g, create_graph)
    if not retain_graph:
        for n in nodes:
            n.saved, n.freed = {}, True


def _walk(nodes: list[Node], root: Node, seed, create_graph: bool) -> tuple[list, set]:
    """Reverse-mode over the tape, last node first (PyTorch's engine order): each node's cotangent is
    the sum of its users' contributions, and its rule turns it into its operands'. Returns (tensor,
    gradient) for every leaf that requires grad and every retained non-leaf (zeros where no gradient
    arrived, as `gr.grad` gives), and the retained nodes."""
    pending: dict[Node, object] = {root: seed}
    leaves: dict[int, list] = {}  # id(leaf) -> [leaf, gradient or None], in order of appearance
    out, retained = [], set()
    for n in reversed(nodes):
        g = pending.pop(n, None)
        t = n.retained() if n.retained is not None else None
        if t is not None and t._node is n:
            retained.add(n)
            out.append((t, g if g is not None else np.zeros(n.shape, n.dtype)))
        for h in n.inputs:
            if isinstance(h, Tensor) and id(h) not in leaves:
                leaves[id(h)] = [h, None]
        if g is None:
            continue
        rule = n.rule
        cts = _node_vjp(n, rule, g, create_graph)  # builds the rule on first use, and with it rule.targets
        for i, c in zip(rule.targets, cts):
            h = n.inputs[i]
            if isinstance(h, Node):
                prev = pending.get(h)
                pending[h] = c if prev is None else prev + c
            else:  # a leaf that requires grad
                entry = leaves[id(h)]
                entry[1] = c if entry[1] is None else entry[1] + c
    for leaf, g in leaves.values():
        out.append((leaf, g if g is not None else np.zeros(leaf.shape, leaf.dtype)))
    return out, retained


def _node_vjp(n: Node, rule, g, create_graph: bool) -> tuple:
    """The cotangents of `rule.targets` for node n with output cotangent g."""
    xs, out = [None] * len(n.inputs), None
    for i in rule.reads:
        if i < 0:
            out = _saved_value(n.saved[-1][0], n, create_graph)
        elif isinstance(n.inputs[i], np.ndarray):  # a constant the rule reads (kept on the tape)
            xs[i] = n.inputs[i]
        else:
            xs[i] = _saved_value(n.saved[i][0], n.inputs[i], create_graph)
    args = xs + [out, g]
    bake = [i for i in rule.inspects if isinstance(n.inputs[i], np.ndarray)] if rule.inspects else ()  # looked at
    graph = rule.graph if not bake else None
    if graph is None and not bake:  # a rule that needs every value
        bake = [*range(len(xs)), -1, -2]
    try:
        if create_graph:
            from gradir.trace import inline, source_of

            with source_of(n.source):
                return inline(graph if graph is not None else rule.specialized(xs, out, g, bake), args,
                              keep_source=False)
        if graph is not None:
            return rule.fn(*args)
        from gradir.backends import run

        return run(rule.specialized(xs, out, g, bake), args)
    except GradirError:
        raise
    except (ValueError, IndexError, TypeError, ArithmeticError) as e:
        raise ExecutionError(f"in its backward: {type(e).__name__}: {e}", op=n.op, source=n.source) from e


class BackwardRecord:
    """What the latest `backward()` differentiated, as gradir's IR (built when asked): the tape as a
    forward `Graph` (every leaf an input), the partition `gr.grad`'s pipeline makes of it (forward and
    backward programs, residuals), and how many of those residuals are values the tape holds
    (`from_tape`) vs values it would recompute from them (`recomputed`)."""

    def __init__(self, nodes: list[Node], root: Node, retained: set):
        self._nodes, self._root, self._retained = nodes, root, retained

    @functools.cached_property
    def tape(self) -> _TapeGraph:
        return _TapeGraph(self._nodes, self._root, self._retained)

    @property
    def graph(self) -> Graph:
        return self.tape.graph

    @functools.cached_property
    def partition(self):
        from gradir.passes import joint_graph, partition, run_pipeline

        return partition(run_pipeline(joint_graph(self.tape.graph, self.tape.wrt)))

    @functools.cached_property
    def recomputed(self) -> int:
        return self.tape.count_recomputed(self.partition)

    @property
    def from_tape(self) -> int:
        return len(self.partition.residuals) - self.recomputed


_LAST: list[BackwardRecord] = []


def last_backward() -> BackwardRecord | None:
    """The record of the most recent `Tensor.backward()` (for inspection and teaching)."""
    return _LAST[-1] if _LAST else None


def _seed(root: Tensor, gradient, create_graph: bool, src):
    if gradient is None:  # gradir.seed's rule, the one gr.grad applies too
        from gradir.seed import check_implied_seed

        check_implied_seed(root.shape, root.dtype, root.type_str, lead="a gradient can only be implied for a "
                           "scalar output", hint="pass backward(gradient=...) with the output's shape",
                           op="backward", source=src)
        return np.ones(root.shape, root.dtype)
    g = gradient if isinstance(gradient, Tensor) else Tensor(gradient, dtype=root.dtype)
    if g.shape != root.shape:
        raise ShapeError(f"gradient {g.type_str} does not match the output {root.type_str}", op="backward", source=src)
    if g.dtype != root.dtype:
        g = g.astype(root.dtype)
    return g if create_graph else g.data


def _accumulate(t: Tensor, g, create_graph: bool) -> None:
    """Add g into t.grad: in place normally (as PyTorch), out of place (recorded) with create_graph."""
    if create_graph:
        g = g if isinstance(g, Tensor) else Tensor._wrap(np.array(g, dtype=t.dtype).reshape(t.shape))
        t._grad = g if t._grad is None else t._grad + g
        return
    g = np.asarray(g.data if isinstance(g, Tensor) else g, dtype=t.dtype).reshape(t.shape)
    if t._grad is None:
        t._grad = Tensor._wrap(np.array(g))
    elif t._grad._requires_grad:  # a gradient with history from an earlier create_graph backward
        with no_grad():
            t._grad = t._grad + g
    else:
        t._grad._storage.array += g
        t._grad._bump()


def _reachable(root: Node) -> list[Node]:
    """Tape nodes the root depends on, in recording order."""
    seen, stack = {root}, [root]
    while stack:
        for h in stack.pop().inputs:
            if isinstance(h, Node) and h not in seen:
                seen.add(h)
                stack.append(h)
    return sorted(seen, key=lambda n: n.seq)


def _check_saved(nodes: list[Node]) -> None:
    """Freed graph and in-place modification checks, in backward order (as the engine meets them)."""
    for n in reversed(nodes):
        if n.freed and n.had_saved:
            raise FreedGraphError(
                "trying to backward through the graph a second time: the values this op saved for backward were "
                "freed by the first backward(). Pass retain_graph=True to the first backward() to keep them",
                op=n.op, source=n.source)
        for i, (storage, version) in n.saved.items():
            if storage.version != version:
                what = "its output" if i < 0 else f"its operand {i}"
                arr = storage.array
                where = f" (last modified at {storage.mutated_at})" if storage.mutated_at else ""
                raise VersionError(
                    f"a value saved for backward was modified in place: {what} "
                    f"({dtypes.short(arr.dtype)}[{','.join(map(str, arr.shape))}]) was saved at version {version}, now "
                    f"version {storage.version}{where}; backward expected version {version}. Modify a clone() "
                    "instead, or do the in-place op before it is used", op=n.op, source=n.source)


class _TapeGraph:
    """The forward Graph of the reachable tape (every leaf, requiring grad or not, an input; a retained
    tensor's value v as v + eps, eps an input, so d/d(eps) is its gradient), and the values it holds."""

    def __init__(self, nodes: list[Node], root: Node, retained: set):
        g = Graph("tape")
        self.graph = g
        self.saved: list[Value] = []  # graph values the tape keeps for backward (saved operands/outputs)
        leaf_in: dict = {}
        kinds: list[bool] = []  # per graph input: a leaf that requires grad?
        eps: list[int] = []
        out_of: dict[Node, Value] = {}
        for n in nodes:
            operands = []
            for h in n.inputs:
                if isinstance(h, Node):
                    operands.append(out_of[h])
                elif isinstance(h, (Tensor, _Frozen)):
                    key = h if isinstance(h, Tensor) else (id(h.storage), h.version)
                    if key not in leaf_in:
                        arr = h._storage.array if isinstance(h, Tensor) else h.storage.array
                        leaf_in[key] = g.add_input(arr.shape, arr.dtype, f"t{len(leaf_in)}", h._source if
                                                   isinstance(h, Tensor) else h.source)
                        kinds.append(isinstance(h, Tensor))
                    operands.append(leaf_in[key])
                else:  # a constant; a broadcast one enters as its compact value and a broadcast_to
                    base = np.array(_compact(h))
                    c = g.append("const", (), {"value": base}, base.shape, h.dtype, n.source)
                    operands.append(c if base.shape == h.shape else
                                    g.append("broadcast_to", [c], {"shape": h.shape}, h.shape, h.dtype, n.source))
            v = g.append(n.op, operands, dict(n.attrs), n.shape, n.dtype, n.source)
            self.saved += [v if i < 0 else operands[i] for i in n.had_saved]
            if n in retained:  # d/d(eps) of v + eps, eps = 0, is the gradient at v
                e = g.add_input(n.shape, n.dtype, f"retained{len(eps)}", n.source)
                eps.append(len(g.inputs) - 1)
                v = g.append("add", [v, e], {}, n.shape, n.dtype, n.source)
            out_of[n] = v
        g.outputs = [out_of[root]]
        self.wrt = [k for k, leaf in enumerate(kinds) if leaf] + eps

    def count_recomputed(self, part) -> int:
        """How many of the backward program's residuals no tape value holds: matched by structure (op,
        operands, attributes) to a saved value or a leaf, the others are recomputed from those."""
        table: dict = {}
        keys = [("in", k) for k in range(len(self.graph.inputs))]
        fwd_ids = _structural_ids(self.graph, keys, table)
        jid = _structural_ids(part.joint, keys + [("ct",)], table)
        known = {fwd_ids[x] for x in self.graph.inputs} | {fwd_ids[v] for v in self.saved}
        done: set[Value] = set()
        stop = lambda u: u in done or jid[u] in known or u.op == "const"  # noqa: E731
        count = 0
        for r in part.residuals:
            count += not stop(r)
            done.update(_topo_until(r, stop))
        return count


def _saved_value(storage: _Storage, origin, create_graph: bool):
    """A saved array; with create_graph, a Tensor linked to the node (or leaf) that produced it."""
    if not create_graph:
        return storage.array
    if isinstance(origin, Tensor):
        return origin
    return Tensor._wrap(storage=storage, node=origin if isinstance(origin, Node) else None)


def _topo_until(v: Value, stop) -> list[Value]:
    """Values v depends on, operands first, not expanding past values for which `stop` holds."""
    order, seen, stack = [], set(), [(v, False)]
    while stack:
        u, done = stack.pop()
        if done:
            order.append(u)
        elif u not in seen:
            seen.add(u)
            stack.append((u, True))
            if not stop(u):
                stack.extend((i, False) for i in u.inputs if i not in seen)
    return order


def _structural_ids(graph: Graph, input_keys: list, table: dict) -> dict[Value, int]:
    """An id per value, equal for values computed the same way (op, operand ids, attributes)."""
    ids: dict[Value, int] = {}
    for x, key in zip(graph.inputs, input_keys):
        ids[x] = table.setdefault(key, len(table))
    for n in graph.nodes:
        if n.op == "const":
            a = n.attrs["value"]
            key = ("const", a.dtype.str, a.shape, a.tobytes())
        else:
            key = (n.op, tuple(ids[i] for i in n.inputs), repr(sorted(n.attrs.items())))
        ids[n] = table.setdefault(key, len(table))
    return ids
