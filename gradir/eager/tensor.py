"""`gr.Tensor`: the eager, PyTorch-like front door, built on the same op rules, IR and passes.

    t = gr.Tensor(np.array([2.0, 3.0]), requires_grad=True)
    y = (t * t).sum(); y.backward(); t.grad          # Tensor([4. 6.])

Every gr op works on Tensors: `bind` hands them to `Tensor._eager_bind`, which computes the result
with the op's NumPy reference at once and, when grad mode is on and an operand requires grad,
appends a node to the tape (the `grad_fn`): the op, links to where each operand came from (another
node, a leaf, or a constant), attributes, the user's source line, and the storage and *version* of
every value the op's VJP rule reads for the operands that need a gradient (`gradir.core.rules`).

The tape's storage and nodes are gradir.eager.tape; grad mode (`gr.no_grad`) is gradir.eager.grad_mode.
`backward()` runs the backward engine (gradir.eager.engine): it checks the versions of everything the
reachable nodes saved, then walks them in reverse recording order, as PyTorch's engine does, each op's
VJP rule traced once per signature into a small IR graph, cleaned by the default pipeline and compiled
by the NumPy backend (`gradir.eager.tape_rules`). `gradir.eager.engine.last_backward()` shows the tape
as gradir's IR (gradir.eager.record).

Differences from PyTorch, on purpose: results never alias their operands (a slice or reshape is a
copy, so an in-place op never changes another Tensor behind its version counter); dtypes follow
NumPy (Python floats are float64); `.data`/`.numpy()` share memory and writes through them are not
versioned (as with torch's `.data`).
"""

from __future__ import annotations

import types
import weakref

import numpy as np

from gradir.core import dtypes
from gradir.core.errors import DTypeError, GradirError, NonDifferentiableError, ShapeError, UnsupportedOpError
from gradir.core.interop import is_torch, torch_to_numpy
from gradir.core.ir import Value
from gradir.core.primitive import get_primitive
from gradir.core.trace import EagerOperand, bind, current_graph, evaluate, user_source
from gradir.eager.engine import run_backward
from gradir.eager.grad_mode import GRAD_MODE
from gradir.eager.tape import Frozen, Node, Storage, compact
from gradir.eager.tape_rules import tape_rule
from gradir.ops import astype, broadcast_to, getitem, reshape, where
from gradir.ops.lifting import broadcast_view, lift
from gradir.ops.update import setitem

__all__ = ["Tensor"]


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
        self._init(Storage(arr), None)
        self.requires_grad = requires_grad

    def _init(self, storage: Storage, node: Node | None):
        self._storage, self._node, self._requires_grad = storage, node, node is not None
        self._grad, self._retain, self._source = None, False, user_source()

    @classmethod
    def _wrap(cls, array=None, node: Node | None = None, storage: Storage | None = None) -> Tensor:
        t = object.__new__(cls)  # _init, inlined: every eager op makes one
        t._storage, t._node, t._requires_grad = storage if storage is not None else Storage(array), node, node is not None
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
        run_backward(self, gradient, create_graph if retain_graph is None else retain_graph, create_graph)

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
        if not (True in need and GRAD_MODE[-1] and prim.differentiable and dtypes.is_inexact(value.dtype)):
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
        return getitem(self, _eager_index(index))

    def __setitem__(self, index, value):
        index = _eager_index(index)
        if not (GRAD_MODE[-1] and (self._requires_grad or (isinstance(value, Tensor) and value._requires_grad))):
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
        if GRAD_MODE[-1] and self._requires_grad and self._node is None:
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
            new = astype(new, self.dtype)
        self._storage.array[...] = new.data
        self._bump()
        node = new._node
        if node is not None and GRAD_MODE[-1]:
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
        if current_graph() is None:
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
        return o if o._requires_grad else Frozen(o)
    if not read:
        return array
    if array.ndim and not any(array.strides):  # a broadcast scalar (the usual case: x * 2.0)
        return broadcast_view(np.array(array[(0,) * array.ndim]), array.shape)
    base = compact(array)  # a constant the rule reads is copied (the caller may reuse its array), compactly
    if base is array:
        return np.array(array)
    return broadcast_view(np.array(base.reshape(()) if base.size == 1 else base), array.shape)


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
