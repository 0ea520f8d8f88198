"""Fusion: which IR nodes run together as one kernel, decided once for every compiled backend.

The result is a `FusedProgram`: kernels in execution order, each covering some nodes of the graph.

- ``loop``: a loop nest over a *domain* (a shape). Elementwise ops, in-register views (broadcasts,
  unit-axis reshapes) and gathers (`take`) compute one element per domain point. A *row* reduction
  (over the domain's trailing axes) splits the domain into outer axes and inner axes: the kernel
  runs, for every outer index, one or more *passes* over the inner axes, and row values (the
  reduction results and elementwise ops on them) live in registers between passes. So softmax is
  one kernel of three passes over each row, read from cache: the max, the sum of exp, the normalized
  output (an inner value a later pass needs is read back if an earlier pass stored it, else computed
  again). Any other reduction
  (e.g. a bias gradient summing over the batch axis) accumulates into its output buffer as the
  nest runs; its result can be read only by later kernels.
- ``matmul``: one matmul, run by BLAS (operand transposes become BLAS flags).
- ``scatter``: `index_add` (the backward of a gather) and `index_update` (a write at integer indices).
- ``scan``: `cumsum`, a sequential loop along its axis (vectorized over the inner axes).
- ``window``: `unfold` (im2col, a gather with a padding value) and `fold` (col2im, its scatter-add).
- ``numpy``: a node the backend does not compute (complex values, convolution folding, an op missing from
  the backend's table of the ops it renders, ...); it runs on the NumPy reference, and the listing says so.

Which ops go into loops is read from the op library: a primitive whose rule table says
``kind="elementwise"`` is computed per element; the few other ops a kernel computes are `KERNEL_OPS`.
Each compiled backend declares the ops its renderer emits (a frozenset `RENDERS`, beside its expression
emitter) and passes it to `fuse(graph, renders=...)`: what is not in it stays outside the kernels.

Views (`broadcast_to`, `transpose`, `slice`, `reshape`, `stop_gradient`) of values in memory cost
nothing: readers address the buffer they view with composed strides. A reshape NumPy could not
do without a copy becomes a copy loop. Graph outputs that are views (or inputs) are copied out.

Every value that leaves its kernel (read by another kernel or returned) is *materialized*: it gets
a contiguous buffer, in the arena (placed by passes.memory's best-fit planner over kernel steps)
or in the caller's output array. `str(program)` is the kernel listing a learner reads.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain
from types import MappingProxyType
from typing import NamedTuple

from gradir.core import dtypes
from gradir.core.ir import Graph, Value
from gradir.core.primitive import get_primitive
from gradir.passes.aliasing import c_strides, view_strides
from gradir.passes.memory import GREEDY_ORDERS, Buffer, best_fit, greedy_by_size, overlapping_pairs, overlaps
from gradir.passes.report import human_bytes

LOOP, MATMUL, SCATTER, SCAN, WINDOW, NUMPY = "loop", "matmul", "scatter", "scan", "window", "numpy"
VIEWS = frozenset({"broadcast_to", "transpose", "slice", "reshape", "stop_gradient"})
REDUCTIONS = frozenset({"sum", "max", "min"})
ARG_REDUCTIONS = frozenset({"argmax", "argmin"})  # row reductions only (over trailing axes)
PLACEMENTS = frozenset({"pad", "concatenate", "update_slice"})  # each output element comes from one operand element
LOOP_OPS = frozenset({"take", "check_classes"}) | ARG_REDUCTIONS | PLACEMENTS  # non-elementwise ops a loop computes
KERNEL_OPS = REDUCTIONS | LOOP_OPS | {"matmul", "index_add", "index_update", "cumsum", "unfold", "fold"}
# ^ the ops fusion places besides views and the elementwise ones (those whose primitive says kind="elementwise");
# a backend's table says which it renders
ALIGN = 64  # arena buffers start at multiples of this (a cache line; every dtype's alignment)
MAX_KERNEL_NODES = 64  # a longer chain starts a new kernel: LLVM's optimizer is superlinear in a loop body's size
GREEDY_PAIRS = 100_000  # buffers alive together up to which greedy placements are tried besides best fit (their cost)
LOWERED_DTYPES = frozenset({dtypes.float64, dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.int64,
                            dtypes.int32, dtypes.bool_})


class Access(NamedTuple):
    """Where a value's elements are in memory: element (offset + sum(index * strides)) of `owner`'s buffer."""

    owner: Value
    offset: int
    strides: tuple[int, ...]


_NO_VALUES: frozenset = frozenset()  # the shared empty set and map of kernels that have none (~1 KB per
_NO_MAP: Mapping = MappingProxyType({})  # kernel otherwise, and a 100k-node program has ~40k kernels)


class Kernel:
    """One kernel: the graph nodes it computes, and for loops, the domain and each value's axis map.

    `maps[v]` gives, per axis of value v, the domain axis it runs along (None for a size-1 axis it
    broadcasts from; the loop planner, backends/loops.py, gives size-1 domain axes no loop).
    `outer` is the number of outer domain axes once a row reduction fixed it (None: no row
    reduction, the whole domain is one pass). `passes[v]` is the pass an inner value is computed
    in; row values get `row_after[v]`, the number of passes that must finish before them.
    `accumulated`: reductions accumulating into memory; `copies`: copy node -> the value whose
    access it loads. Kernels without any share one immutable empty set or map.
    """

    __slots__ = ("index", "kind", "nodes", "domain", "outer", "maps", "accumulated", "copies", "epilogue", "bias",
                 "transposed", "inputs", "outputs", "passes", "row_after", "note")

    def __init__(self, index: int, kind: str, nodes: list[Value] | None = None, domain: tuple[int, ...] = (),
                 outer: int | None = None, maps: dict[Value, tuple] | None = None, accumulated: set[Value] | None = None,
                 copies: dict[Value, Value] | None = None, epilogue: Value | None = None, bias: Value | None = None,
                 transposed: Value | None = None, inputs: list[Value] | None = None, outputs: list[Value] | None = None,
                 passes: dict[Value, int] | None = None, row_after: dict[Value, int] | None = None, note: str = ""):
        self.index = index
        self.kind = kind
        self.nodes = [] if nodes is None else nodes
        self.domain = domain
        self.outer = outer
        self.maps = _NO_MAP if maps is None else maps
        self.accumulated = _NO_VALUES if accumulated is None else accumulated
        self.copies = _NO_MAP if copies is None else copies
        self.epilogue = epilogue    # matmul kernels: the `add` of a bias their product's buffer starts from
        self.bias = bias            # the epilogue's other operand
        self.transposed = transposed  # matmul kernels: the returned transpose of the product they write instead
        self.inputs = [] if inputs is None else inputs     # values read from memory (views included)
        self.outputs = [] if outputs is None else outputs  # values written to memory
        self.passes = _NO_MAP if passes is None else passes
        self.row_after = _NO_MAP if row_after is None else row_after
        self.note = note

    def __repr__(self) -> str:
        return f"<Kernel {self.name} {self.kind}: {len(self.nodes)} nodes>"

    @property
    def name(self) -> str:
        return f"k{self.index}"

    @property
    def stored(self) -> set[Value]:
        """The values the kernel writes to memory (`outputs`), as a set for membership tests (made on each call)."""
        return set(self.outputs)

    @property
    def num_passes(self) -> int:
        return max(self.passes.values(), default=0) + 1

    def is_row(self, v: Value) -> bool:
        """A row value: constant along the inner axes, computed once per outer index."""
        return self.outer is not None and all(d is None or d < self.outer for d in self.maps[v])


@dataclass
class FusedProgram:
    """Kernels in execution order, the storage of every materialized value, and the arena plan."""

    graph: Graph
    kernels: list[Kernel]
    access: dict[Value, Access]          # materialized values and views of them
    immediates: dict[Value, Value]       # views of 0-d constants -> the constant
    arena_offsets: dict[Value, int]      # bytes, for values living in the arena
    arena_bytes: int
    peak_bytes: int
    live_bytes: list[int]                # arena bytes live during each kernel
    output_copies: list[tuple[int, int]]  # (position, earlier position) of outputs returned twice
    returned: list[Value | None]         # per output position, the stored value written to the caller's array
    passthrough: list[tuple[int, int]]   # (output position, input position) of inputs returned as they are

    def __str__(self) -> str:
        return listing(self)


# -- strided access ---------------------------------------------------------------------------------

def view_access(v: Value, src: Access) -> Access | None:
    """The access of view `v` of a value stored at `src`, or None if it is not a strided view."""
    strides = view_strides(v, v.inputs[0], src.strides, itemsize=1) if v.op in VIEWS else None
    if strides is None:
        return None
    offset = src.offset + (sum(s * st for s, st in zip(v.attrs["starts"], src.strides)) if v.op == "slice" else 0)
    return Access(src.owner, offset, tuple(strides))


def _view_map(v: Value, want: tuple) -> tuple | None:
    """Given the axis map a reader wants for view `v`, the map its operand must have (None: no such map)."""
    x = v.inputs[0]
    if v.op == "stop_gradient":
        return want
    if v.op == "broadcast_to":
        lead = v.ndim - x.ndim
        return tuple(want[j + lead] if n == m else None for j, (n, m) in enumerate(zip(x.shape, v.shape[lead:])))
    if v.op == "transpose":
        out: list = [None] * x.ndim
        for j, p in enumerate(v.attrs["perm"]):
            out[p] = want[j]
        return tuple(out)
    if v.op == "reshape" and [n for n in x.shape if n != 1] == [n for n in v.shape if n != 1]:
        kept = iter(d for n, d in zip(v.shape, want) if n != 1)
        return tuple(None if n == 1 else next(kept) for n in x.shape)
    return None


def _same_map(have: tuple, want: tuple, shape) -> bool:
    return have == want or all(h == w or n == 1 for h, w, n in zip(have, want, shape))


_CONTIGUOUS: dict[tuple, tuple] = {}  # shape -> its C-contiguous element strides (one tuple per shape)
_IDENTITY: dict[int, tuple] = {}      # rank -> (0, 1, ..., rank - 1)


def _c_strides(shape: tuple) -> tuple[int, ...]:
    """c_strides(shape, 1), one shared tuple per shape (most accesses are contiguous: no tuple each)."""
    strides = _CONTIGUOUS.get(shape)
    if strides is None:
        if len(_CONTIGUOUS) > 100_000:  # a long-running process meets many shapes: sharing only saves memory
            _CONTIGUOUS.clear()
        strides = _CONTIGUOUS[shape] = c_strides(shape, 1)
    return strides


def _identity(r: int) -> tuple:
    m = _IDENTITY.get(r)
    if m is None:
        m = _IDENTITY[r] = tuple(range(r))
    return m


# -- grouping ---------------------------------------------------------------------------------------

class _Fuser:
    def __init__(self, graph: Graph, order, renders: frozenset[str] | None = None, accumulate_totals: bool = False):
        self.graph = graph
        self.renders = renders
        self.accumulate_totals = accumulate_totals
        self.order = list(graph.nodes if order is None else order)
        self.kernels: list[Kernel] = []
        self.kernel_of: dict[Value, Kernel] = {}
        self.access: dict[Value, Access] = {}
        self.immediates: dict[Value, Value] = {}  # views of 0-d constants -> the constant (a literal in code)
        # readers of each value (returning it counts as one)
        self.uses: Counter[Value] = Counter(chain.from_iterable([n.inputs for n in self.order]))
        self.uses.update(graph.outputs)
        for x in graph.inputs:
            self.access[x] = Access(x, 0, _c_strides(x.shape))

    def run(self) -> list[Kernel]:
        access, lowerable = self.access, self._lowerable
        for n in self.order:
            op = n.op
            if op == "const":
                if n.shape:
                    access[n] = Access(n, 0, _c_strides(n.shape))
            elif op in VIEWS and self._virtual_view(n):
                continue
            elif not lowerable(n) or op in ARG_REDUCTIONS and not _trailing_axis(n):
                self._new(NUMPY, n, note=self._why_not(n))
            elif op == "matmul":
                self._new(MATMUL, n)
            elif op == "index_add" or op == "index_update":
                self._new(SCATTER, n)
            elif op == "cumsum":
                self._new(SCAN, n)
            elif op == "unfold" or op == "fold":
                self._new(WINDOW, n)
            elif op in VIEWS:  # a reshape NumPy must copy: a copy loop over its operand's shape
                k = self._new(LOOP, n, domain=n.inputs[0].shape)
                k.copies = {n: n.inputs[0]}
                k.maps[n] = _identity(n.inputs[0].ndim)
            elif not (op == "add" and self._epilogue(n)) and not self._join(n):
                self._seed(n)
        return self.kernels

    def _epilogue(self, n: Value) -> bool:
        """`matmul + bias` in one kernel: the product's buffer starts as the bias and gemm adds A @ B to it
        (BLAS's beta = 1), saving a pass over the product. Only for the product's one reader, in the
        latest kernel, reached through reshapes that keep its row-major order."""
        k = self.kernels[-1] if self.kernels else None
        if n.op != "add" or k is None or k.kind != MATMUL or k.epilogue is not None or \
                n.dtype in (dtypes.float16, dtypes.bfloat16):  # those round the product before the add
            return False
        for i, u in enumerate(n.inputs):
            chain = [u]
            while chain[-1].op in ("reshape", "stop_gradient") and chain[-1] not in self.kernel_of:
                chain.append(chain[-1].inputs[0])
            if chain[-1] is k.nodes[0] and all(self.uses[v] == 1 for v in chain) and \
                    not any(self.access.get(v, Access(v, 0, _c_strides(v.shape))).strides != _c_strides(v.shape)
                            for v in chain) and n.dtype == chain[-1].dtype:
                k.nodes.append(n)
                k.epilogue, k.bias = n, n.inputs[1 - i]
                self.kernel_of[n] = k
                return True
        return False

    # values are either computed by a kernel (maybe only in registers) or views of stored values
    def _virtual_view(self, v: Value) -> bool:
        if v.inputs[0] in self.immediates or v.inputs[0].op == "const" and not v.inputs[0].ndim:
            self.immediates[v] = self.immediates.get(v.inputs[0], v.inputs[0])  # a broadcast scalar constant
            return True
        src = self.access.get(v.inputs[0])
        if src is None and v.inputs[0] in self.kernel_of:  # computed: stored contiguously if it leaves its kernel
            x = v.inputs[0]
            src = Access(x, 0, _c_strides(x.shape))
        if src is None:
            return False
        acc = view_access(v, src)
        if acc is None:
            return False
        self.access[v] = acc
        return True

    def _lowerable(self, n: Value) -> bool:
        """Whether the backend computes n (else it runs on the NumPy reference): its dtypes are lowered, fusion
        knows where it goes (a view, an elementwise primitive, one of KERNEL_OPS) and the backend renders it."""
        if n.dtype not in LOWERED_DTYPES:
            return False
        for u in n.inputs:
            if u.dtype not in LOWERED_DTYPES:
                return False
        op = n.op
        if op == "power" and not dtypes.is_float(n.dtype) or op == "convert" and _rounds_twice(n):
            return False  # NumPy's wrapping integer powers; float64 -> 16-bit floats would round twice through float32
        if op in VIEWS:
            return True
        renders = self.renders
        return (op in KERNEL_OPS or is_elementwise(op)) and (renders is None or op in renders)

    def _why_not(self, n: Value) -> str:
        op = n.op
        bad = [v.dtype for v in (n, *n.inputs) if v.dtype not in LOWERED_DTYPES]
        if bad:
            return f"dtype {dtypes.short(bad[0])} is not lowered"
        if op == "power" and not dtypes.is_float(n.dtype):
            return "integer power is not lowered"
        if op == "convert" and _rounds_twice(n):
            return f"float64 -> {dtypes.short(n.dtype)} is not lowered"
        if op not in VIEWS and (op in KERNEL_OPS or is_elementwise(op)) and self.renders is not None \
                and op not in self.renders:
            return f"{op} is not rendered by this backend"
        if op in ARG_REDUCTIONS:
            return f"{op} over a non-trailing axis is not lowered"
        return f"{op} is not lowered"

    def _new(self, kind, n, domain=(), note="") -> Kernel:
        k = Kernel(len(self.kernels), kind, [n], domain if type(domain) is tuple else tuple(domain),
                   maps={} if kind == LOOP else None, note=note)
        self.kernels.append(k)
        self.kernel_of[n] = k
        return k

    def _root(self, u: Value) -> Value:
        while u.op in VIEWS and u not in self.kernel_of:
            u = u.inputs[0]
        return u

    def _in_kernel_map(self, k: Kernel, u: Value, want: tuple) -> bool | None:
        """True if `k` can hand `u` to a reader wanting axis map `want` in registers; None if `u` is
        not computed in `k` at all; False if it is, but not in a form the reader can use."""
        path = u
        kernel_of = self.kernel_of
        while path.op in VIEWS and path not in kernel_of:
            want = _view_map(path, want)
            path = path.inputs[0]
            if want is None:
                return False if kernel_of.get(self._root(path)) is k else None
        if kernel_of.get(path) is not k:
            return None
        if path in k.accumulated or path in k.copies:
            return False
        return _same_map(k.maps[path], want, path.shape)

    def _candidate(self, n: Value) -> Kernel | None:
        """The latest kernel producing an operand of n: the only one n may join (kernels stay in a
        topological order because a node joins a kernel only when all its other producers run earlier)."""
        best = None
        kernel_of = self.kernel_of
        for u in n.inputs:
            while u.op in VIEWS and u not in kernel_of:
                u = u.inputs[0]
            k = kernel_of.get(u)
            if k is not None and (best is None or k.index > best.index):
                best = k
        return best

    def _join(self, n: Value) -> bool:
        k = self._candidate(n)
        if k is None or k.kind != LOOP or len(k.nodes) >= MAX_KERNEL_NODES:
            return False
        op = n.op
        if op in REDUCTIONS or op in ARG_REDUCTIONS:
            return self._join_reduction(k, n)
        want = self._map_for(k, n.shape)
        if want is None:
            return False
        if op == "take" or op in PLACEMENTS:
            for u, m in self._operand_maps(n, want):
                if m is None and self.kernel_of.get(self._root(u)) is k:
                    return False  # a gathered table must be in memory before the gather runs
                if m is not None and self._in_kernel_map(k, u, m) is False:
                    return False
        else:
            for u in n.inputs:
                if self._in_kernel_map(k, u, want) is False:
                    return False
        self._add(k, n, want)
        return True

    def _operand_maps(self, n: Value, want: tuple) -> list | None:
        """The axis map each operand is read with (None for operands read otherwise, e.g. a gathered table)."""
        if n.op == "take":
            axis, idx = n.attrs["axis"], n.inputs[1]
            return [(n.inputs[0], None), (idx, want[axis:axis + idx.ndim])]
        if n.op == "update_slice":
            return [(n.inputs[0], want), (n.inputs[1], None)]
        if n.op in PLACEMENTS:  # pad, concatenate: operands read at computed coordinates, from memory
            return [(u, None) for u in n.inputs]
        return [(u, want) for u in n.inputs]

    @staticmethod
    def _map_for(k: Kernel, shape) -> tuple | None:
        r = len(k.domain)
        if tuple(shape) == k.domain:
            return _identity(r)
        if k.outer is not None:
            j = k.outer
            if tuple(shape) == k.domain[:j] + (1,) * (r - j):
                return tuple(range(j)) + (None,) * (r - j)
            if tuple(shape) == k.domain[:j]:
                return _identity(j)
        return None

    def _join_reduction(self, k: Kernel, n: Value) -> bool:
        x = n.inputs[0]
        if n.op in ARG_REDUCTIONS and k.outer is not None and n.attrs["axis"] != k.outer:
            return False
        if x.shape != k.domain or self._in_kernel_map(k, x, _identity(len(k.domain))) is not True:
            return False
        p = self._root(x)
        if k.is_row(p) or p.op in REDUCTIONS or p.op in ARG_REDUCTIONS:
            return False  # a row value (only possible when the inner axes have size 1): reduce it in a later kernel
        self._reduce(k, n)
        return True

    def _beside_last(self, n: Value) -> bool:
        """Join the latest kernel as a sibling (horizontal fusion: one pass over the domain instead of two)
        when n reads nothing that kernel computes and it loops over n's domain."""
        k = self.kernels[-1] if self.kernels else None
        if k is None or k.kind != LOOP or k.copies or len(k.nodes) >= MAX_KERNEL_NODES or \
                any(self.kernel_of.get(self._root(u)) is k for u in n.inputs):
            return False
        if n.op in REDUCTIONS:
            if n.inputs[0].shape != k.domain:
                return False
            self._reduce(k, n)
            return True
        want = self._map_for(k, n.shape) if n.op not in ARG_REDUCTIONS else None
        if want is None or self._operand_maps(n, want) is None:
            return False
        self._add(k, n, want)
        return True

    def _seed(self, n: Value) -> None:
        if self._beside_last(n):
            return
        if n.op in REDUCTIONS or n.op in ARG_REDUCTIONS:
            k = self._new(LOOP, n, domain=n.inputs[0].shape)
            self.kernel_of.pop(n)
            k.nodes.clear()
            self._reduce(k, n)
        else:
            k = self._new(LOOP, n, domain=n.shape)
            k.maps[n] = _identity(n.ndim)

    def _reduce(self, k: Kernel, n: Value) -> None:
        """Add reduction n of the full-domain value: in registers if it reduces the trailing axes the
        kernel's rows are made of (fixing `outer` on the first one), else accumulating into memory."""
        r = len(k.domain)
        if n.op in ARG_REDUCTIONS:
            axes, keepdims = (n.attrs["axis"],), False
        else:
            axes, keepdims = n.attrs["axes"], n.attrs["keepdims"]
        reduced = sorted(axes)
        total = self.accumulate_totals and n.op == "sum" and len(reduced) == r and n.dtype in (dtypes.float32, dtypes.float64)
        if reduced and reduced == list(range(reduced[0], r)) and k.outer in (None, reduced[0]) and not total:
            k.outer = reduced[0]
        else:
            if not k.accumulated:
                k.accumulated = set()
            k.accumulated.add(n)
        kept = tuple(d for d in range(r) if d not in axes)
        self._add(k, n, tuple(None if d in axes else d for d in range(r)) if keepdims else kept)

    def _add(self, k: Kernel, n: Value, m: tuple) -> None:
        k.nodes.append(n)
        k.maps[n] = m
        self.kernel_of[n] = k


@functools.cache
def is_elementwise(op: str) -> bool:
    """Whether primitive `op` is elementwise, as its rule table says (Primitive.kind): one output element from
    the operands' elements at the same index, so a loop computes it in registers."""
    return get_primitive(op).kind == "elementwise"


def _rounds_twice(n: Value) -> bool:
    """A float64 -> float16/bfloat16 convert: computed through float32, it would round twice."""
    return n.dtype in (dtypes.float16, dtypes.bfloat16) and n.inputs[0].dtype == dtypes.float64


def _trailing_axis(n: Value) -> bool:
    return n.attrs["axis"] == n.inputs[0].ndim - 1


def _assign_passes(k: Kernel) -> None:
    """The pass each inner value is computed in, and after how many passes each row value can be."""
    if k.outer is None:  # no row reduction: one pass, no row values (reductions accumulate into memory)
        k.passes = dict.fromkeys(k.nodes, 0)
        return
    passes: dict[Value, int] = {}
    row_after: dict[Value, int] = {}
    maps, outer = k.maps, k.outer
    for n in k.nodes:
        if n in k.copies:
            passes[n] = 0
            continue
        ins = []
        for u in n.inputs:
            while u not in maps and u.op in VIEWS:
                u = u.inputs[0]
            if u in maps:
                ins.append(u)
        reduction = n.op in REDUCTIONS or n.op in ARG_REDUCTIONS
        if not reduction and all(d is None or d < outer for d in maps[n]):  # a row value
            row_after[n] = max((row_after[p] if p in row_after else passes[p] + 1 for p in ins), default=0)
        elif reduction:
            x = ins[0] if ins else None
            passes[n] = 0 if x is None else row_after[x] if x in row_after else passes.get(x, 0)
            if n not in k.accumulated:
                row_after[n] = passes[n] + 1
        else:
            passes[n] = max((passes[p] if p in passes and p not in row_after else row_after[p] for p in ins), default=0)
    k.passes = passes
    if row_after:
        k.row_after = row_after


def in_kernel_value(k: Kernel, u: Value) -> Value | None:
    """The in-kernel value operand `u` is (through in-register views), or None if it is read from memory."""
    maps = k.maps
    while u not in maps and u.op in VIEWS:
        u = u.inputs[0]
    return u if u in maps else None


# -- materialization and the arena -----------------------------------------------------------------

def _folds_after_their_products(kernels: list[Kernel], kernel_of: dict[Value, Kernel]) -> list[Kernel]:
    """Each fold (col2im) moved up to run right after the kernel computing its columns (a convolution's input
    gradient: the product, then its fold), where the schedule put other work between them: its one input is
    ready there, and its output is read only by kernels after it. The columns die sooner, and a backend may run
    the product and the fold image by image (backends/llvm/chains.py). Kernels are renumbered in their new order."""
    for c in [k for k in kernels if k.kind == WINDOW and k.nodes[0].op == "fold"]:
        root = c.nodes[0].inputs[0]
        while root.op in VIEWS and root not in kernel_of:
            root = root.inputs[0]
        if root in kernel_of:
            i, j = kernels.index(kernel_of[root]), kernels.index(c)
            if j > i + 1:
                kernels.insert(i + 1, kernels.pop(j))
    for i, k in enumerate(kernels):
        k.index = i
    return kernels


def fuse(graph: Graph, order: list[Value] | None = None, renders: frozenset[str] | None = None,
         accumulate_totals: bool = False) -> FusedProgram:
    """Group `graph`'s nodes (run in `order`, a schedule; default graph order) into kernels, decide
    which values are stored, and place the stored intermediates in one arena.

    `renders` is the table of ops the backend renders (each compiled backend declares its `RENDERS`): a node
    whose op is not in it gets a NumPy fallback kernel of its own, and the listing says so. None: every op
    fusion can place (the elementwise primitives and KERNEL_OPS), the kernels as no backend limits them.
    `accumulate_totals`: a float32/float64 sum over every axis accumulates into memory, not as one row (a GPU's
    row is one program)."""
    fuser = _Fuser(graph, order, renders, accumulate_totals)
    kernels = _folds_after_their_products(fuser.run(), fuser.kernel_of)
    kernel_of, access = fuser.kernel_of, fuser.access

    # graph outputs that are views, inputs, constants or already returned: a copy loop writes them
    outputs_done: dict[Value, int] = {}
    output_copies = []
    for pos, o in enumerate(graph.outputs):
        if o in outputs_done:
            output_copies.append((pos, outputs_done[o]))
            continue
        outputs_done[o] = pos
    passthrough = []  # returned inputs: the caller gets its own array back, as from the NumPy backend
    input_position = {x: i for i, x in enumerate(graph.inputs)}
    for o in list(outputs_done):
        if o.op == "input":
            passthrough.append((outputs_done.pop(o), input_position[o]))
        elif _transposed_product(o, kernel_of, fuser.uses):  # gemm writes (A @ B)^T = B^T @ A^T in place
            k = kernel_of[o.inputs[0]]
            k.nodes.append(o)
            k.transposed = o
            kernel_of[o] = k
            access[o] = Access(o, 0, _c_strides(o.shape))  # its own buffer now, not a view of the product
        elif o not in kernel_of:
            c = _copy_node(o)
            k = Kernel(len(kernels), LOOP, [c], o.shape, maps={c: _identity(o.ndim)}, copies={c: o})
            kernels.append(k)
            kernel_of[c] = k
            outputs_done[c] = outputs_done.pop(o)
    materialized: set[Value] = set()
    last_read: dict[Value, int] = {}
    immediates = fuser.immediates
    for k in kernels:
        # what each node reads from memory: a copy its source, an epilogue its bias, a loop node the
        # operands not computed in the kernel, other kernels every operand
        maps, copies, index = k.maps, k.copies, k.index
        loop = k.kind == LOOP
        # a window or batched product kernel's operands live through the next kernel too: the LLVM backend may
        # run the two image by image (backends/llvm/chains.py), and the next one's output must not lie on them
        per_image = k.kind == WINDOW or k.kind == MATMUL and k.nodes[0].ndim > 2
        held = index + 1 if per_image and index + 1 < len(kernels) else index
        seen: dict[Value, None] = {}
        for n in k.nodes:
            inside = False  # whether operands computed in the kernel are skipped
            if copies and n in copies:
                reads = (copies[n],)
            elif n is k.epilogue:
                reads = (k.bias,)
            elif n is k.transposed:
                continue
            else:
                reads, inside = n.inputs, loop
            for u in reads:
                if inside:
                    p = u
                    while p not in maps and p.op in VIEWS:
                        p = p.inputs[0]
                    if p in maps:
                        continue  # computed in the kernel
                acc = access.get(u)
                if acc is None and (u in immediates or u.op == "const" and not u.shape):
                    # read from memory with zero strides, not written into the code as a literal: kernels that
                    # differ only in a constant (x * 1.0, x * 2.0, ...) then share one compiled function
                    acc = access[u] = Access(immediates.get(u, u), 0, (0,) * u.ndim)
                root = u
                while root.op in VIEWS and root not in kernel_of:
                    root = root.inputs[0]
                if root in kernel_of:
                    materialized.add(root)
                    if root not in access:
                        access[root] = Access(root, 0, _c_strides(root.shape))
                    if acc is None:
                        acc = access.get(u)
                if acc is None:  # a view of a computed value: its strides over the stored buffer
                    acc = _chain_access(u, access)
                seen[u] = None
                last_read[acc.owner] = held
        if seen:
            k.inputs = list(seen)
    for o in outputs_done:
        materialized.add(o)
        if o not in access:
            access[o] = Access(o, 0, _c_strides(o.shape))
    for k in kernels:
        k.outputs = [n for n in k.nodes if n in materialized]
        if k.kind == LOOP:
            _assign_passes(k)

    # the arena: stored intermediates (not returned), alive from their kernel to their last reader
    # in a fixed order (kernel, then place in it): the placement must not depend on where Python put the Values
    bufs = []
    for k in kernels:
        index = k.index
        for v in k.outputs:
            if v not in outputs_done:
                end = last_read.get(v, 0)
                bufs.append(Buffer(v, -(-max(math.prod(v.shape) * v.dtype.itemsize, 1) // ALIGN) * ALIGN, index,
                                   end if end > index else index))
    arena = best_fit(bufs, len(kernels))
    best = None
    near = overlaps(bufs) if overlapping_pairs(bufs) <= GREEDY_PAIRS else None
    if near is not None:
        best = [b.offset for b in bufs]
        for order in GREEDY_ORDERS.values():  # keep the tightest placement
            size = greedy_by_size(bufs, order, near)
            if size < arena:
                arena, best = size, [b.offset for b in bufs]
        for b, off in zip(bufs, best):
            b.offset = off
    delta = [0] * (len(kernels) + 1)  # live bytes per kernel: +nbytes where a buffer starts, - after it ends
    for b in bufs:
        delta[b.start] += b.nbytes
        delta[b.end + 1] -= b.nbytes
    live, running = [], 0
    for d in delta[:-1]:
        running += d
        live.append(running)
    returned: list[Value | None] = [None] * len(graph.outputs)
    for v, pos in outputs_done.items():
        returned[pos] = v
    return FusedProgram(graph, kernels, access, fuser.immediates, {b.value: b.offset for b in bufs}, arena,
                        max(live, default=0), live, output_copies, returned, passthrough)


def _transposed_product(o: Value, kernel_of: dict, uses: dict) -> bool:
    """Whether returned value o is the transpose (last two axes) of a product nothing else reads: the
    matmul kernel then computes it in that layout instead of a copy transposing it afterwards (a
    linear layer's weight gradient, in torch's (out, in) layout)."""
    if o.op != "transpose" or o.ndim < 2 or tuple(o.attrs["perm"]) != tuple(range(o.ndim - 2)) + (o.ndim - 1, o.ndim - 2):
        return False
    m = o.inputs[0]
    k = kernel_of.get(m)
    return uses.get(o) == 1 and k is not None and k.kind == MATMUL and len(k.nodes) == 1 and uses.get(m) == 1 \
        and m.inputs[0].ndim >= 2 and m.inputs[1].ndim >= 2


def _copy_node(o: Value) -> Value:
    """A stand-in node for copying `o` (a view, input or constant) into the output array."""
    return Value("stop_gradient", (o,), {}, o.shape, o.dtype, o.source, o.graph, o.scope)


def _chain_access(u: Value, access: dict[Value, Access]) -> Access:
    chain = []
    while u not in access:
        chain.append(u)
        u = u.inputs[0]
    acc = access[u]
    for v in reversed(chain):
        acc = view_access(v, acc)
        access[v] = acc
    return acc


# -- the listing -------------------------------------------------------------------------------------

def kernel_bytes(k: Kernel, access: dict[Value, Access]) -> tuple[int, int]:
    """(bytes read, bytes written) by one run of kernel k: each distinct buffer it reads counted once
    (a broadcast reads its source, not its broadcast size), each value it writes."""
    read: dict[Value, int] = {}
    for u in k.inputs:
        a = access[u]
        touched = math.prod(n for n, s in zip(u.shape, a.strides) if s) * u.dtype.itemsize if u.ndim else u.dtype.itemsize
        read[a.owner] = max(read.get(a.owner, 0), min(touched, max(a.owner.nbytes, a.owner.dtype.itemsize)))
    written = sum(max(v.nbytes, v.dtype.itemsize) for v in k.outputs)
    return sum(read.values()), written


def _dims(shape) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def kernel_header(k: Kernel, program: FusedProgram) -> str:
    r, w = kernel_bytes(k, program.access)
    if k.kind == LOOP:
        if k.outer is None:
            shape = f"for {_dims(k.domain)}"
        elif k.outer == 0:
            shape = f"{k.num_passes} pass{'es' if k.num_passes > 1 else ''} over {_dims(k.domain)}"
        else:
            shape = f"for {_dims(k.domain[:k.outer])} x {k.num_passes} pass{'es' if k.num_passes > 1 else ''} " \
                    f"over {_dims(k.domain[k.outer:])}"
    elif k.kind == MATMUL:
        shape = "gemm"
    elif k.kind == SCATTER:
        shape = "scatter-add loop"
    elif k.kind == SCAN:
        shape = f"scan loop along axis {k.nodes[0].attrs['axis']}{' (reverse)' if k.nodes[0].attrs['reverse'] else ''}"
    elif k.kind == WINDOW:
        shape = "im2col gather loop" if k.nodes[0].op == "unfold" else "col2im scatter-add loop"
    else:
        shape = f"NumPy fallback ({k.note})"
    return f"{k.name} {k.kind:<7} {shape}  reads {human_bytes(r)}, writes {human_bytes(w)}"


def listing(program: FusedProgram) -> str:
    """The kernel listing: each kernel's loop nest, the IR nodes it covers (with the pass each runs in),
    what it stores, and the bytes it moves."""
    g = program.graph
    names = {v: f"%{i}" for i, v in enumerate(g.all_values())}
    for k in program.kernels:
        for c, src in k.copies.items():
            names.setdefault(c, f"copy({names.get(src, '?')})")
    counts: dict[str, int] = {}
    for k in program.kernels:
        counts[k.kind] = counts.get(k.kind, 0) + 1
    lines = [f"fused program {g.name}: {len(program.kernels)} kernels ("
             + ", ".join(f"{n} {kind}" for kind, n in counts.items())
             + f"), arena {human_bytes(program.arena_bytes)} (peak {human_bytes(program.peak_bytes)})"]
    for k in program.kernels:
        lines.append(kernel_header(k, program))
        for n in k.nodes:
            where = ""
            if k.kind == LOOP and n in k.accumulated:
                where = "accumulates into memory"
            elif k.kind == LOOP and n in k.row_after:
                where = f"row value after pass {k.row_after[n]}" if k.num_passes > 1 or k.row_after[n] else "row value"
            elif k.kind == LOOP and k.num_passes > 1:
                where = f"pass {k.passes.get(n, 0) + 1}"
            elif n is k.epilogue:
                where = "epilogue: the product's buffer starts as the bias"
            elif n is k.transposed:
                where = "written by the gemm in this layout: (A @ B)^T = B^T @ A^T"
            store = " -> stored" if n in k.stored else ""
            operands = ", ".join(names.get(u, "?") for u in ([k.copies[n]] if n in k.copies else n.inputs))
            op = "copy" if n in k.copies else n.op
            lines.append(f"    {names[n]} = {op} {operands} : {n.type_str}"
                         + (f"  [{where}]" if where else "") + store)
    return "\n".join(lines)

