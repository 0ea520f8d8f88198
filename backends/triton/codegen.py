"""Triton source for the loop kernels of a fused program: one ``@triton.jit`` function per kernel.

The fusion pass (passes.fusion) decided the kernels; this module renders each loop kernel as readable
Python. Every shape is static, so sizes and strides are literals in the source. Two forms:

- **flat** (no row reduction): the kernel's domain is numbered 0..N-1 and each program instance takes
  BLOCK consecutive points, ``i = pid * BLOCK + arange(BLOCK)``; a value's element is at
  ``offset + sum(coordinate_d * stride_d)``, the coordinates read off ``i`` by division and modulo
  (axes that every access walks contiguously are merged first, so a plain elementwise chain reads
  ``p[i]``).
- **row** (softmax, LayerNorm, cross-entropy, ...): one program per row (an index of the outer axes);
  the inner axes are numbered 0..R-1. When R fits in registers (``R <= MAX_ROW``) the whole row is one
  block: each inner value is computed once and row reductions are ``tl.sum``/``tl.max`` of it. Otherwise
  the row is walked in chunks of BLOCK, once per *pass* of the fusion plan: the values a pass needs from
  earlier passes are read back if stored, else computed again, exactly as the LLVM backend does.

Reductions the fusion pass accumulates into memory (a bias gradient summing over the batch axis; on this
backend also a loss's total sum, `fuse(accumulate_totals=True)`) are ``tl.atomic_add`` into a buffer the host
zeroed: programs add in any order, so sums may differ from NumPy's in the last bits. Where that would be more
than TARGET_PROGRAMS programs, each program takes several rows of the axes every accumulation sums over (flat
kernels: rows of the trailing axes; row kernels: whole rows), sums them in registers and adds once per lane.
Values are computed in float64, float32 (also for float16 and bfloat16, rounded back after every op, as
NumPy rounds each op's result), int64/int32 or int1. An out-of-range gather index
stores the node's code in an error word the host reads after the run.

`RENDERS` is the table of the ops this backend renders; fusion (passes.fusion.fuse) reads it and keeps every
other op out of the kernels, on the NumPy reference (index_update, where the last write wins, and imag are
not in it). What is not rendered in a loop kernel of rendered ops (the kernel then runs on the NumPy
reference, and the listing says so): argmax / argmin in the chunked form, accumulated max/min and
low-precision accumulation; `unrendered(k)` gives the reason.
"""

from __future__ import annotations

import math
import os

import numpy as np

from gradir.core import dtypes
from gradir.core.dtypes import is_float
from gradir.core.ir import Value
from gradir.passes.aliasing import c_strides
from gradir.passes.fusion import ARG_REDUCTIONS, PLACEMENTS, REDUCTIONS, FusedProgram, Kernel, in_kernel_value
from gradir.passes.report import value_names

from ..loops import LoopPlan, Term, mapped, stored_earlier

MAX_ROW = 4096        # inner elements a row kernel keeps in registers (one block); longer rows are chunked
CHUNK = 1024          # the block of chunked rows
FLAT_BLOCK = 1024     # the most points of a flat kernel one program takes
TARGET_PROGRAMS = 1024  # a kernel accumulating into memory gives each program rows until about this many remain
MIN_LANES = 128       # ... rows of at least this many points where the accumulations allow (a loss's total sum)
MATH = {"tanh": "mathfn.tanh", "sigmoid": "mathfn.sigmoid", "expm1": "mathfn.expm1", "log1p": "mathfn.log1p",
        "tan": "mathfn.tan", "rint": "mathfn.rint", "exp": "tl.exp", "log": "tl.log", "sin": "tl.sin", "cos": "tl.cos",
        "sqrt": "tl.sqrt", "erf": "tl.math.erf", "floor": "tl.floor", "ceil": "tl.ceil"}
COMPUTE = {dtypes.float64: "tl.float64", dtypes.float32: "tl.float32", dtypes.float16: "tl.float32",
           dtypes.bfloat16: "tl.float32", dtypes.int64: "tl.int64", dtypes.int32: "tl.int32", dtypes.bool_: "tl.int1"}
STORAGE = {dtypes.float16: "tl.float16", dtypes.bfloat16: "tl.bfloat16"}
COMPARE = {"less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">=", "equal": "==", "not_equal": "!="}
ZERO = {dtypes.bool_: "False", **{d: "0" for d in (dtypes.int64, dtypes.int32)},
        **{d: "0.0" for d in dtypes.FLOATING}}  # the value a masked-off lane loads (tl.load casts it)
LOADS = object()  # the key of a scope's load variables in its memo
ELEMENTWISE_RENDERS = frozenset({  # the elementwise primitives `LoopSource.elementwise` writes (imag is not one)
    "abs", "add", "ceil", "convert", "cos", "divide", "equal", "erf", "exp", "expm1", "floor", "greater", "greater_equal",
    "less", "less_equal", "log", "log1p", "logical_and", "logical_not", "logical_or", "maximum", "minimum", "multiply",
    "negative", "not_equal", "power", "real", "relu", "remainder", "rint", "rsqrt", "sigmoid", "sign", "sin", "sqrt",
    "stop_gradient", "subtract", "tan", "tanh", "where"})
RENDERS = ELEMENTWISE_RENDERS | frozenset({  # ... and every op the backend's kernels render: the table fusion asks
    "sum", "max", "min", "argmax", "argmin",         # reductions (rows in registers, chunked; atomics into memory)
    "take", "check_classes",                         # gathers and the class-index check
    "pad", "concatenate", "update_slice",            # placements
    "matmul", "index_add"})                          # gemm.py (tl.dot) or torch.matmul; scatter.py (atomic adds)


def interpreting() -> bool:
    """Whether Triton runs kernels on the CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "") not in ("", "0")


def autotuning() -> bool:
    """GRADIR_TRITON_AUTOTUNE=1: each kernel tries AUTOTUNE_WARPS on its first launch and keeps the fastest
    (on a GPU only: Triton's autotuner needs a device to time on, the interpreter has none)."""
    return os.environ.get("GRADIR_TRITON_AUTOTUNE", "") not in ("", "0") and not interpreting()


AUTOTUNE_WARPS = (1, 2, 4, 8)


def autotune_line(zeroed: list[str]) -> str:
    """The decorator that autotunes a kernel's warp count (block sizes are fixed in its source)."""
    reset = f", reset_to_zero={zeroed!r}" if zeroed else ""
    return (f"@triton.autotune(configs=[triton.Config({{}}, num_warps=w) for w in {AUTOTUNE_WARPS!r}], "
            f"key=[]{reset})\n")


def next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def unrendered(program: FusedProgram, k: Kernel) -> str | None:
    """Why loop kernel `k` cannot be rendered (it then runs on the NumPy reference), or None."""
    for n in k.nodes:
        if n not in k.copies and n.op not in RENDERS:
            return f"{n.op} is not rendered"
        if n.dtype not in COMPUTE or any(u.dtype not in COMPUTE for u in n.inputs):
            return f"{n.op} on {dtypes.short(n.dtype)}"
        if n in k.accumulated and (n.op != "sum" or n.dtype in STORAGE):
            return f"an accumulated {n.op} over {dtypes.short(n.dtype)} (atomics add float32/float64/int sums only)"
        if n.op == "power" and not is_float(n.dtype):
            return "integer power"
        if n.op in REDUCTIONS and n not in k.accumulated and not k.is_row(n):
            return f"a {n.op} over part of a row"
    if k.outer is not None and math.prod(k.domain[k.outer:]) > MAX_ROW and any(n.op in ARG_REDUCTIONS for n in k.nodes):
        return "argmax/argmin over a row longer than MAX_ROW"
    return None


def literal(value, dt) -> str:
    """A scalar constant as Triton source, in the compute type of `dt`. Triton takes a bare Python float as
    float32 where no tensor gives it a type (a stored or selected constant), so float64 ones are typed."""
    if dt == dtypes.bool_:
        return "True" if bool(value) else "False"
    if not is_float(dt):
        return repr(int(value))
    v = float(value)
    text = ('float("nan")' if math.isnan(v) else 'float("inf")' if v == math.inf else '-float("inf")' if v == -math.inf
            else repr(v))
    return f"tl.full([], {text}, tl.float64)" if dt == dtypes.float64 else text


def identity(op: str, dt) -> str:
    if op == "sum":
        return literal(0, dt)
    if is_float(dt):
        return literal(-math.inf if op in ("max", "argmax") else math.inf, dt)
    if dt == dtypes.bool_:
        return literal(op in ("min", "argmin"), dt)
    info = np.iinfo(dt)
    return literal(info.min if op in ("max", "argmax") else info.max, dt)


def _and(x: str, y: str) -> str:
    # bool & and | through tl.where: Triton's interpreter cannot `&` a scalar comparison with a block
    return f"tl.where({x}, {y}, False)"


def _or(x: str, y: str) -> str:
    return f"tl.where({x}, True, {y})"


def nan_lanes(x: str) -> str:
    """The live lanes where x is NaN (a block even where x is one value for the whole row)."""
    return _and("live", f"({x} != {x})")


def term_text(t: Term, base: str) -> str:
    """A loop plan's address term over counter `base`: ``(base // div) % mod * stride``, without the parts that do nothing."""
    c = base if t.div == 1 else f"({base} // {t.div})"
    c = c if t.mod is None else f"({c} % {t.mod})"
    return c if t.stride == 1 else f"{c} * {t.stride}"


def buffer_names(program: FusedProgram) -> dict:
    """A name per buffer owner: the graph's input names, "output k", "%n" for the rest (value_names)."""
    names = value_names(program.graph)
    names.update({v: f"output {pos}" for pos, v in enumerate(program.returned) if v is not None})
    return names


def parameter_line(names: dict, owners: list[Value]) -> str:
    """What each pointer parameter points at (``p0: x, p1: output 0, p2: %14``), for a kernel's docstring."""
    return ", ".join(f"p{j}: {names.get(o, o.op)}" for j, o in enumerate(owners))


class LoopSource:
    """Renders one loop kernel (see the module docstring); `text` is the function, `params` the buffers
    it takes (owners of stored values, in order), `grid` and `meta` how the host launches it."""

    def __init__(self, program: FusedProgram, k: Kernel, name: str, names: dict):
        self.program, self.k, self.name, self.names = program, k, name, names  # names: buffer_names(program)
        self.immediates = program.immediates
        self.params: list[Value] = []        # buffer owners, in parameter order
        self.param_of: dict[Value, str] = {}
        self.pos = {n: j for j, n in enumerate(k.nodes)}  # (Values compare elementwise: no list.index)
        self.lines: list[str] = []
        self.depth = 1
        self.row: dict[Value, str] = {}      # row values computed so far (scalars)
        r = len(k.domain)
        self.r = r
        self.plan = LoopPlan.blocks(k)
        self.outer = k.outer if k.outer is not None else 0
        inner = math.prod(k.domain[self.outer:])
        self.inner_size = inner
        # grid: programs to launch (0 for an empty domain: the host launches nothing)
        self.rows_per_program = 1  # > 1: rows summed in registers, accumulated with one atomic add per lane
        if k.outer is None:
            self.form = "flat"
            self.block = min(FLAT_BLOCK, next_pow2(max(inner, 1)))
            self.grid = -(-inner // self.block)
            if k.accumulated:
                self.flat_rows()
        else:
            self.form = "row" if inner <= MAX_ROW else "chunked"
            self.block = next_pow2(max(inner, 1)) if self.form == "row" else CHUNK
            rows = math.prod(k.domain[:self.outer])
            if self.form == "row" and k.accumulated and self.summed_axes() >= self.outer:
                self.rows_per_program = self.rows_each(rows, 1)
            self.grid = rows // self.rows_per_program
        self.num_warps = 8 if self.block >= 2048 else 4
        self.pass_index = 0
        self.text = self.render()

    def flat_rows(self) -> None:
        """Rows per program for a flat kernel that accumulates: a row is the points after the leading axes every
        accumulation sums over (at least MIN_LANES where those axes allow), cut into `col_blocks` blocks."""
        k, f = self.k, self.summed_axes()
        while f > 0 and math.prod(k.domain[f:]) < MIN_LANES:
            f -= 1
        kept = math.prod(k.domain[f:])
        block = min(FLAT_BLOCK, next_pow2(max(kept, 1)))
        cols, rows = -(-kept // block), math.prod(k.domain[:f])
        many = self.rows_each(rows, cols)
        if many > 1:
            self.kept, self.col_blocks, self.block, self.rows_per_program = kept, cols, block, many
            self.grid = rows // many * cols

    def summed_axes(self) -> int:
        """How many leading domain axes every accumulation sums over (its address does not move along them)."""
        k, first = self.k, self.r
        for n in k.nodes:
            if n in k.accumulated:
                strides = mapped(c_strides(n.shape, 1), k.maps[n], self.r)
                first = min(first, next((d for d in range(self.r) if strides[d] and k.domain[d] > 1), first))
        return first

    @staticmethod
    def rows_each(rows: int, columns: int) -> int:
        """Rows per program: the largest divisor of `rows` that still leaves TARGET_PROGRAMS programs (over
        `columns` blocks per row). Each program then adds its rows' sums once instead of once per row: a bias
        gradient over 32k rows of a batch made 32k atomic adds into each address."""
        most = rows * columns // TARGET_PROGRAMS
        return max((d for d in range(1, min(rows, most) + 1) if rows % d == 0), default=1)

    # -- source lines
    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def param(self, owner: Value) -> str:
        if owner not in self.param_of:
            self.param_of[owner] = f"p{len(self.params)}"
            self.params.append(owner)
        return self.param_of[owner]

    def fresh(self, n: Value) -> str:
        return f"v{self.pos[n]}"

    # -- indices
    def term(self, t: Term) -> str:
        """A plan term: the outer counter is the program id, the inner one the lane index."""
        return term_text(t, "pid" if self.plan.loops[t.loop].outer else "i")

    def index(self, strides: list[int], offset: int = 0) -> str:
        """offset + sum of coordinate * stride, one term per run of axes the access walks contiguously."""
        terms = [self.term(t) for t in self.plan.terms(strides)]
        if offset or not terms:
            terms.append(str(offset))
        return " + ".join(terms)

    def lanes(self, strides: list[int]) -> bool:
        """Whether an access with these domain strides differs between the lanes of a program (flat: any axis;
        rows: the inner axes); one that does not is a scalar load or store."""
        return self.plan.moves(strides, outer=False)

    def is_vector(self, n: Value) -> bool:
        """Whether in-kernel value n differs between lanes (row values are scalars in row kernels)."""
        return self.plan.runs_along(self.k.maps[n], outer=False)

    def varies(self, u: Value, want: tuple) -> bool:
        """Whether operand u (read with axis map `want`) differs between lanes."""
        if self.literal_value(u) is not None:
            return False
        p = in_kernel_value(self.k, u)
        if p is not None:
            return self.is_vector(p)
        return self.lanes(mapped(self.program.access[u].strides, want, self.r))

    # -- values
    def literal_value(self, u: Value) -> str | None:
        """A 0-d constant (or a view of one) as a literal in the source: each Triton kernel is compiled on its
        own, so a literal lets the compiler fold it (LLVM's backend loads them to share code between kernels)."""
        if u in self.immediates or u.op == "const" and not u.ndim:
            c = self.immediates.get(u, u)
            return literal(c.attrs["value"].item(), u.dtype)
        return None

    def load(self, u: Value, want: tuple, memo: dict) -> str:
        """Operand u read from memory with axis map `want`: a masked vector load, or in a row kernel a
        scalar load when u is constant along the row. Each distinct load is one variable per scope."""
        acc = self.program.access[u]
        strides = mapped(acc.strides, want, self.r)
        ptr = f"{self.param(acc.owner)} + {self.index(strides, acc.offset)}"
        text = f"tl.load({ptr}, mask=live, other={ZERO[u.dtype]})" if self.lanes(strides) else f"tl.load({ptr})"
        text += ".to(tl.float32)" if u.dtype in STORAGE else ""
        loads = memo.setdefault(LOADS, {})
        if text not in loads:
            loads[text] = f"x{len(self.lines)}"
            self.emit(f"{loads[text]} = {text}")
        return loads[text]

    def value(self, u: Value, want: tuple, memo: dict) -> str:
        lit = self.literal_value(u)
        if lit is not None:
            return lit
        p = in_kernel_value(self.k, u)
        if p is None:
            return self.load(u, want, memo)
        if p in self.row:
            return self.row[p]
        if self.stored_earlier(p):
            acc = self.program.access[p]
            strides = mapped(c_strides(p.shape, 1), self.k.maps[p], self.r)
            mask = ", mask=live" if self.lanes(strides) else ""
            text = f"tl.load({self.param(acc.owner)} + {self.index(strides, acc.offset)}{mask})"
            return text + (".to(tl.float32)" if p.dtype in STORAGE else "")
        return self.compute(p, memo)

    def stored_earlier(self, p: Value) -> bool:
        # a row in registers keeps every inner value of the row: only chunks read stored ones back
        return self.form == "chunked" and stored_earlier(self.k, p, self.pass_index)

    def compute(self, n: Value, memo: dict) -> str:
        """n's variable, emitting its in-kernel operands first (in dependency order, without recursion)."""
        stack = [(n, False)]
        while stack:
            v, ready = stack.pop()
            if v in memo:
                continue
            if ready:
                name = self.fresh(v)
                self.emit(f"{name} = {self.expression(v, memo)}  # {self.comment(v)}")
                memo[v] = name
                continue
            stack.append((v, True))
            for u in ([self.k.copies[v]] if v in self.k.copies else v.inputs):
                p = in_kernel_value(self.k, u)
                if p is not None and p not in memo and p not in self.row and not self.stored_earlier(p):
                    stack.append((p, False))
        return memo[n]

    def comment(self, n: Value) -> str:
        where = f"  ({n.source})" if n.source else ""
        return f"{n.op} -> {dtypes.short(n.dtype)}{list(n.shape)}{where}"

    def rounded(self, text: str, dt) -> str:
        return f"({text}).to({STORAGE[dt]}).to(tl.float32)" if dt in STORAGE else text

    def expression(self, n: Value, memo: dict) -> str:
        k = self.k
        if n in k.copies:
            return self.value(k.copies[n], tuple(range(self.r)), memo)
        if n.op == "take":
            return self.gather(n, memo)
        if n.op in PLACEMENTS:
            return self.place(n, memo)
        xs = [self.value(u, k.maps[n], memo) for u in n.inputs]
        if n.op == "check_classes":
            self.check_classes(n, xs[0])
            return xs[0]
        return self.rounded(self.elementwise(n, xs), n.dtype)

    def elementwise(self, n: Value, xs: list[str]) -> str:
        op = n.op
        dt = n.inputs[0].dtype if n.inputs else n.dtype
        fl = is_float(dt)
        x = xs[0]
        y = xs[1] if len(xs) > 1 else None
        if op == "stop_gradient":
            return x
        if op == "convert":
            if n.dtype == dtypes.bool_:
                return f"({x} != {literal(0, dt)})"
            return f"({x}).to({COMPUTE[n.dtype]})"
        if op == "real":  # (of a real value: complex ones are not lowered)
            return x
        if op in MATH:
            return f"{MATH[op]}({x})"
        if op == "negative":
            return f"(-{x})"
        if op == "relu":
            return f"tl.where({x} <= {literal(0, dt)}, {literal(0, dt)}, {x})"
        if op == "rsqrt":
            return f"(1.0 / tl.sqrt({x}))"
        if op == "abs":
            return f"tl.abs({x})"
        if op == "sign":
            one, zero = literal(1, dt), literal(0, dt)
            inner = f"tl.where({x} < {zero}, -{one}, {zero})" if not fl else \
                f"tl.where({x} < {zero}, -{one}, tl.where({x} == {zero}, {zero}, {x}))"
            return f"tl.where({x} > {zero}, {one}, {inner})"
        if op in ("add", "subtract", "multiply"):
            if dt == dtypes.bool_:
                return {"add": _or(x, y), "multiply": _and(x, y), "subtract": f"({x} != {y})"}[op]
            return f"({x} {dict(add='+', subtract='-', multiply='*')[op]} {y})"
        if op == "divide":
            return f"({x} / {y})"
        if op == "power":
            return f"mathfn.pow({x}, {y})"
        if op in ("maximum", "minimum"):
            if dt == dtypes.bool_:
                return _or(x, y) if op == "maximum" else _and(x, y)
            nan = ", propagate_nan=tl.PropagateNan.ALL" if fl else ""
            return f"tl.{op}({x}, {y}{nan})"
        if op in COMPARE:
            return f"({x} {COMPARE[op]} {y})"
        if op == "remainder":
            return self.remainder(x, y, dt)
        if op in ("logical_and", "logical_or"):
            a, b = self.truth(x, n.inputs[0].dtype), self.truth(y, n.inputs[1].dtype)
            return _and(a, b) if op == "logical_and" else _or(a, b)
        if op == "logical_not":
            return f"(~{self.truth(x, dt)})" if dt != dtypes.bool_ else f"({x} == 0)"
        if op == "where":
            return f"tl.where({self.truth(x, dt)}, {xs[1]}, {xs[2]})"
        raise NotImplementedError(op)

    def truth(self, x: str, dt) -> str:
        return x if dt == dtypes.bool_ else f"({x} != {literal(0, dt)})"

    def remainder(self, x: str, y: str, dt) -> str:
        """NumPy's floored remainder (the divisor's sign) from the truncated one `%` gives."""
        zero = literal(0, dt)
        r = f"({x} % {y})"
        fixed = f"tl.where(({r} != {zero}) & (({r} < {zero}) != ({y} < {zero})), {r} + {y}, {r})"
        return fixed if is_float(dt) else f"tl.where({y} == 0, 0, {fixed})"

    def flag(self, bad: str, n: Value, vector: bool) -> None:
        """Record that node n met bad input: its code in the error word (the host raises the located error)."""
        code = self.pos[n] + 1
        if vector:
            # (a block of pointers and mask even where bad is one value for every lane)
            self.emit(f"tl.store(err + i * 0, {code}, mask={_and(bad, 'live')})")
        else:
            self.emit(f"tl.store(err, {code}, mask={bad})")

    def gather(self, n: Value, memo) -> str:
        x, idx = n.inputs
        axis, m = n.attrs["axis"], self.k.maps[n]
        i = self.value(idx, m[axis:axis + idx.ndim], memo)
        size = x.shape[axis]
        j = f"g{self.pos[n]}"
        self.emit(f"{j} = tl.full([], {i}, tl.int64)" if self.literal_value(idx) is not None else f"{j} = ({i}).to(tl.int64)")
        self.emit(f"{j} = tl.where({j} < 0, {j} + {size}, {j})")
        self.flag(f"(({j} < 0) | ({j} >= {size}))", n, self.varies(idx, m[axis:axis + idx.ndim]))
        self.emit(f"{j} = tl.where(({j} < 0) | ({j} >= {size}), 0, {j})")
        acc = self.program.access[x]
        xm = tuple(m[:axis]) + tuple(m[axis + idx.ndim:])
        rest = list(acc.strides[:axis]) + list(acc.strides[axis + 1:])
        base = self.index(mapped(rest, xm, self.r), acc.offset)
        vector = self.varies(idx, m[axis:axis + idx.ndim]) or self.lanes(mapped(rest, xm, self.r))
        # (+ i * 0: the index may be one value for every lane, a scalar, where the map says the value varies)
        text = f"tl.load({self.param(acc.owner)} + {base} + {j} * {acc.strides[axis]}{' + i * 0, mask=live' if vector else ''})"
        return text + (".to(tl.float32)" if x.dtype in STORAGE else "")

    def check_classes(self, n: Value, i: str) -> None:
        size, ignore = n.attrs["size"], n.attrs["ignore"]
        bad = f"(({i} < 0) | ({i} >= {size}))"
        if ignore is not None:
            bad = f"({bad} & ({i} != {ignore}))"
        self.flag(bad, n, self.varies(n.inputs[0], self.k.maps[n]))

    # -- pad, concatenate, update_slice: per-axis coordinates, masked loads. A coordinate is an int where it is
    # -- known when rendering (a size-1 axis is at 0), so conditions on it fold away; else (text, varies by lane)
    def coords(self, n: Value) -> list:
        """n's coordinate along each of its axes: 0 for a size-1 axis, else (text, whether it differs by lane)."""
        terms = [self.plan.coordinate(d) for d in self.k.maps[n]]
        return [0 if t is None else (f"({self.term(t)})", not self.plan.loops[t.loop].outer) for t in terms]

    def load_where(self, inside, u: Value, coords: list, otherwise: str, vector: bool) -> str:
        """u at `coords` where `inside` (a condition, or True/False when known), else `otherwise`; `vector`:
        whether the result is a block (then the load is one too, whatever its address)."""
        if inside is False:
            return otherwise
        lit = self.literal_value(u)
        acc = None if lit is not None else self.program.access[u]
        if acc is not None:
            parts = [(c * s, False) if isinstance(c, int) else (f"{c[0]} * {s}", c[1])
                     for c, s in zip(coords, acc.strides) if s]
            at = " + ".join([str(t) for t, _ in parts] + [str(acc.offset)])
            ptr = f"{self.param(acc.owner)} + {at}"
            if vector and not any(lanes for _, lanes in parts):
                ptr += " + i * 0"  # one element for every lane: a block of pointers, as the mask is a block
            mask = ("live" if inside is True else _and(inside, "live")) if vector else \
                (None if inside is True else inside)
            lit = f"tl.load({ptr}{'' if mask is None else f', mask={mask}, other={ZERO[u.dtype]}'})"
            lit += ".to(tl.float32)" if u.dtype in STORAGE else ""
        return lit if inside is True else f"tl.where({inside}, {lit}, {otherwise})"

    @staticmethod
    def strided(c, start: int, step: int, count: int):
        """(inside, k): whether coordinate c is start + k*step for some 0 <= k < count, and k."""
        if isinstance(c, int):
            t = c - start
            return 0 <= t < count * step - step + 1 and t % step == 0, t // step
        text, lanes = c
        t = f"({text} - {start})"
        k = t if step == 1 else f"({t} // {step})"
        inside = f"(({t} >= 0) & ({t} < {count * step - step + 1}))" if count else False
        if step != 1 and count:
            inside = _and(inside, f"({t} % {step} == 0)")
        return inside, (k, lanes)

    @staticmethod
    def all_of(parts: list):
        """The conjunction of conditions (True/False where known when rendering)."""
        if any(p is False for p in parts):
            return False
        out = True
        for p in parts:
            if p is not True:
                out = p if out is True else _and(out, p)
        return out

    def place(self, n: Value, memo) -> str:
        a, c, vector = n.attrs, self.coords(n), self.is_vector(n)
        if n.op == "pad":
            x = n.inputs[0]
            parts, at = [], []
            for ci, lo, inter, size in zip(c, a["lo"], a["interior"], x.shape):
                ok, k = self.strided(ci, lo, inter + 1, size)
                parts.append(ok)
                at.append(k)
            return self.load_where(self.all_of(parts), x, at, literal(a["value"], n.dtype), vector)
        if n.op == "concatenate":
            axis, offset, value = a["axis"], 0, literal(0, n.dtype)
            for x in n.inputs:
                size = x.shape[axis]
                ok, k = self.strided(c[axis], offset, 1, size)
                value = self.load_where(ok, x, c[:axis] + [k] + c[axis + 1:], value, vector)
                offset += size
            return value
        x, v = n.inputs  # update_slice
        parts, at = [], []
        for ci, start, stop, step in zip(c, a["starts"], a["stops"], a["steps"]):
            ok, k = self.strided(ci, start, step, len(range(start, stop, step)))
            parts.append(ok)
            at.append(k)
        return self.load_where(self.all_of(parts), v, at, self.value(x, self.k.maps[n], memo), vector)

    # -- stores and reductions
    def store(self, n: Value, text: str) -> None:
        k = self.k
        strides = c_strides(k.domain, 1) if n in k.copies else mapped(c_strides(n.shape, 1), k.maps[n], self.r)
        acc = self.program.access[n]
        ptr = f"{self.param(acc.owner)} + {self.index(list(strides))}"
        value = f"({text}).to({STORAGE[n.dtype]})" if n.dtype in STORAGE else text
        if self.lanes(list(strides)):
            self.emit(f"tl.store({ptr}, {value}, mask=live)")
        else:
            self.emit(f"tl.store({ptr}, {value})")

    def accumulate(self, n: Value, x: str) -> None:
        """A reduction into memory (the host zeroed the buffer): atomic adds, one term per domain point; with
        several rows per program, a register sum over them (added by `accumulated_atomics` after the rows)."""
        if self.rows_per_program > 1:
            self.emit(f"a{self.pos[n]} += tl.where(live, {x}, {literal(0, n.dtype)})")
        else:
            self.atomic_add(n, x)

    def accumulators(self) -> None:
        for n in self.k.nodes:
            if n in self.k.accumulated:
                self.emit(f"a{self.pos[n]} = tl.zeros([{self.block}], {COMPUTE[n.dtype]})")

    def accumulated_atomics(self) -> None:
        for n in self.k.nodes:
            if n in self.k.accumulated:
                self.atomic_add(n, f"a{self.pos[n]}")

    def atomic_add(self, n: Value, x: str) -> None:
        k = self.k
        acc = self.program.access[n]
        strides = mapped(c_strides(n.shape, 1), k.maps[n], self.r)
        ptr = f"{self.param(acc.owner)} + {self.index(strides)}"
        # one term per domain point: per lane where the address differs between lanes, else the lanes' sum
        # added once (a value constant across the lanes still counts once per lane)
        if self.lanes(strides):
            self.emit(f"tl.atomic_add({ptr}, {x}, mask=live)")
        else:
            self.emit(f"tl.atomic_add({ptr}, tl.sum(tl.where(live, {x}, {literal(0, n.dtype)}), axis=0))")

    def reduce_vector(self, n: Value, x: str) -> str:
        """Row reduction of a full-row vector (register form) to a scalar, NaN propagating as NumPy's."""
        dt = n.dtype
        if n.op == "sum":
            return f"tl.sum(tl.where(live, {x}, {literal(0, dt)}), axis=0)"
        f = "tl.max" if n.op == "max" else "tl.min"
        text = f"{f}(tl.where(live, {x}, {identity(n.op, dt)}), axis=0)"
        if is_float(dt):
            text = f"tl.where(tl.sum(tl.where({nan_lanes(x)}, 1, 0), axis=0) > 0, float('nan'), {text})"
        return text

    def arg_vector(self, n: Value, x: str) -> str:
        """argmax/argmin of a full row: the first index of the extreme (of the first NaN, if any), as NumPy."""
        big = self.inner_size
        f = "tl.max" if n.op == "argmax" else "tl.min"
        ext = f"{f}(tl.where(live, {x}, {identity(n.op, n.inputs[0].dtype)}), axis=0)"
        first = f"tl.min(tl.where({_and('live', f'({x} == e{self.pos[n]})')}, i, {big}), axis=0)"
        self.emit(f"e{self.pos[n]} = {ext}")
        if is_float(n.inputs[0].dtype):
            nan = f"tl.min(tl.where({nan_lanes(x)}, i, {big}), axis=0)"
            return f"tl.where({nan} < {big}, {nan}, {first}).to(tl.int64)"
        return f"({first}).to(tl.int64)"

    # -- the kernel
    def render(self) -> str:
        k = self.k
        self.emit("pid = tl.program_id(0)")
        many = self.rows_per_program
        if self.form == "flat":
            if many > 1:  # point r * kept + column, r over this program's rows
                kept, cols = self.kept, self.col_blocks
                self.emit(f"column = (pid % {cols}) * {self.block} + tl.arange(0, {self.block})")
                self.emit(f"live = column < {kept}")
                self.accumulators()
                self.emit(f"for r in range((pid // {cols}) * {many}, (pid // {cols} + 1) * {many}):")
                self.depth += 1
                self.emit(f"i = r * {kept} + column")
            else:
                self.emit(f"i = pid * {self.block} + tl.arange(0, {self.block})")
                self.emit(f"live = i < {self.inner_size}")
            memo: dict = {}
            full = tuple(range(self.r))
            for n in k.nodes:
                if n in k.accumulated:
                    self.accumulate(n, self.sum_operand(n, self.value(n.inputs[0], full, memo)))
                elif n in k.stored:
                    self.store(n, self.compute(n, memo))
            if many > 1:
                self.depth -= 1
                self.emit("i = column")  # the accumulations' addresses do not move along the rows
                self.accumulated_atomics()
        elif self.form == "row":
            self.emit(f"i = tl.arange(0, {self.block})")
            self.emit(f"live = i < {self.inner_size}")
            if many > 1:
                self.accumulators()
                self.emit(f"for pid in range(tl.program_id(0) * {many}, (tl.program_id(0) + 1) * {many}):")
                self.depth += 1
            memo = {}
            self.rows_after(0, memo)
            for p in range(k.num_passes):
                self.pass_index = p
                self.register_pass(p, memo)
                self.rows_after(p + 1, memo)
            if many > 1:
                self.depth -= 1
                self.accumulated_atomics()
        else:
            self.rows_after(0, {})
            for p in range(k.num_passes):
                self.pass_index = p
                self.chunked_pass(p)
                self.rows_after(p + 1, {})
        body = "\n".join(self.lines)
        params = ", ".join([f"p{j}" for j in range(len(self.params))] + ["err"])
        head = f"{autotune_line(self.zeroed_params()) if autotuning() else ''}@triton.jit\ndef {self.name}({params}):\n"
        doc = f'    """{self.describe()}\n    {parameter_line(self.names, self.params)}"""\n'
        return head + doc + body + "\n"

    def zeroed_params(self) -> list[str]:
        """The parameters atomics add into (zeroed by the host before each launch, and by the autotuner
        before each trial)."""
        return [self.param_of[self.program.access[n].owner] for n in self.k.nodes if n in self.k.accumulated]

    def describe(self) -> str:
        k = self.k
        each = f", {self.rows_per_program} rows each" if self.rows_per_program > 1 else ""
        if self.form == "flat":
            return f"{len(k.nodes)} nodes over {self.inner_size} points; {self.grid} programs of {self.block}{each}"
        what = "whole row in registers" if self.form == "row" else f"chunks of {self.block}, {k.num_passes} passes"
        rows = f"{self.grid * self.rows_per_program} rows in {self.grid} programs" if each else f"{self.grid} rows"
        return f"{len(k.nodes)} nodes; {rows} of {self.inner_size} ({what})"

    def sum_operand(self, n: Value, x: str) -> str:
        xd = n.inputs[0].dtype
        return f"({x}).to({COMPUTE[n.dtype]})" if n.op == "sum" and xd != n.dtype else x

    def rows_after(self, after: int, memo: dict) -> None:
        """The row values that can be computed once `after` passes are done, in node order."""
        k = self.k
        for n in k.nodes:
            if k.row_after.get(n) != after or n not in k.row_after:
                continue
            if n.op in REDUCTIONS or n.op in ARG_REDUCTIONS:
                continue  # made by their pass
            name = self.compute(n, memo)
            self.row[n] = name
            if n in k.stored:
                self.store(n, name)

    def register_pass(self, p: int, memo: dict) -> None:
        k = self.k
        full = tuple(range(self.r))
        for n in k.nodes:
            if k.passes.get(n) != p or (n in k.row_after and n.op not in REDUCTIONS and n.op not in ARG_REDUCTIONS):
                continue
            if n in k.accumulated:
                self.accumulate(n, self.sum_operand(n, self.value(n.inputs[0], full, memo)))
            elif n.op in REDUCTIONS:
                x = self.sum_operand(n, self.value(n.inputs[0], full, memo))
                name = f"v{self.pos[n]}"
                self.emit(f"{name} = {self.rounded(self.reduce_vector(n, x), n.dtype)}  # {self.comment(n)}")
                self.row[n] = memo[n] = name
                if n in k.stored:
                    self.store(n, name)
            elif n.op in ARG_REDUCTIONS:
                x = self.value(n.inputs[0], full, memo)
                name = f"v{self.pos[n]}"
                self.emit(f"{name} = {self.arg_vector(n, x)}  # {self.comment(n)}")
                self.row[n] = memo[n] = name
                if n in k.stored:
                    self.store(n, name)
            elif n in k.stored:
                self.store(n, self.compute(n, memo))

    def chunked_pass(self, p: int) -> None:
        k = self.k
        full = tuple(range(self.r))
        reductions = [n for n in k.nodes if k.passes.get(n) == p and n.op in REDUCTIONS and n not in k.accumulated]
        for n in reductions:
            dt = COMPUTE[n.dtype]
            self.emit(f"a{self.pos[n]} = tl.full([{self.block}], {identity(n.op, n.dtype)}, {dt})")
            if n.op != "sum" and is_float(n.dtype):
                self.emit(f"nan{self.pos[n]} = tl.zeros([{self.block}], tl.int32)")
        self.emit(f"for start in range(0, {self.inner_size}, {self.block}):")
        self.depth += 1
        self.emit(f"i = start + tl.arange(0, {self.block})")
        self.emit(f"live = i < {self.inner_size}")
        memo: dict = {}
        for n in k.nodes:
            if k.passes.get(n) != p or (n in k.row_after and n.op not in REDUCTIONS):
                continue
            if n in k.accumulated:
                self.accumulate(n, self.sum_operand(n, self.value(n.inputs[0], full, memo)))
            elif n.op in REDUCTIONS:
                x = self.sum_operand(n, self.value(n.inputs[0], full, memo))
                a = f"a{self.pos[n]}"
                if n.op == "sum":
                    self.emit(f"{a} += tl.where(live, {x}, {literal(0, n.dtype)})")
                else:
                    f = "tl.maximum" if n.op == "max" else "tl.minimum"
                    self.emit(f"{a} = {f}({a}, tl.where(live, {x}, {identity(n.op, n.dtype)}))")
                    if is_float(n.dtype):
                        self.emit(f"nan{self.pos[n]} += tl.where({nan_lanes(x)}, 1, 0)")
            elif n in k.stored:
                self.store(n, self.compute(n, memo))
        self.depth -= 1
        for n in reductions:
            j = self.pos[n]
            f = {"sum": "tl.sum", "max": "tl.max", "min": "tl.min"}[n.op]
            text = f"{f}(a{j}, axis=0)"
            if n.op != "sum" and is_float(n.dtype):
                text = f"tl.where(tl.sum(nan{j}, axis=0) > 0, float('nan'), {text})"
            self.emit(f"v{j} = {self.rounded(text, n.dtype)}  # {self.comment(n)}")
            self.row[n] = f"v{j}"
            if n in k.stored:
                self.store(n, f"v{j}")


__all__ = ["CHUNK", "FLAT_BLOCK", "MAX_ROW", "RENDERS", "LoopSource", "buffer_names", "literal", "next_pow2", "term_text",
           "parameter_line", "unrendered"]
