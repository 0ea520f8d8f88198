"""Values in LLVM IR, shared by the kernel emitters (kernels.py): the storage and compute types of each dtype,
loads and stores (with the float16/bfloat16 conversions and rounding), constants, error flags, counted loops,
and the per-op expressions of elementwise ops (mathlib.py's functions for the transcendental ones).
`RENDERS` is the table of the ops this backend renders: fusion (passes.fusion.fuse) keeps every other op out
of the kernels, on the NumPy reference.

Values are computed in registers of a *compute type*: double for float64, float for float32 and
for float16/bfloat16 (loaded and stored with conversions, and rounded after every op so results
match NumPy's, which rounds each op's result too), i64/i32 for integers, i1 for bools.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from typing import TYPE_CHECKING

from llvmlite import ir

from gradir.core import dtypes
from gradir.core.dtypes import is_float
from gradir.core.ir import Value
from gradir.passes.fusion import Kernel

from . import mathlib

if TYPE_CHECKING:
    from .codegen import ModuleBuilder

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()

STORAGE = {dtypes.float64: F64, dtypes.float32: F32, dtypes.float16: F16, dtypes.bfloat16: I16,
           dtypes.int64: I64, dtypes.int32: I32, dtypes.bool_: I8}
COMPUTE = {dtypes.float64: F64, dtypes.float32: F32, dtypes.float16: F32, dtypes.bfloat16: F32,
           dtypes.int64: I64, dtypes.int32: I32, dtypes.bool_: I1}

LOOP_ID_MARK = "gradir.loop.id."
_loop_ids = itertools.count()


def loop_id(module: ir.Module, *hints) -> ir.MDValue:
    """A loop ID for a loop's latch branch carrying `hints`: names ("llvm.loop.unroll.disable") or (name, value)
    pairs (("llvm.loop.vectorize.enable", False)). LLVM wants a distinct node that lists itself first; llvmlite
    writes no such node, so this one is marked and `module_text` rewrites it."""
    def hint(h):
        if isinstance(h, str):
            return [ir.MetaDataString(module, h)]
        name, value = h
        return [ir.MetaDataString(module, name), ir.Constant(I1 if isinstance(value, bool) else I32, int(value))]
    mark = ir.MetaDataString(module, f"{LOOP_ID_MARK}{next(_loop_ids)}")
    return module.add_metadata([mark] + [module.add_metadata(hint(h)) for h in hints])


@contextlib.contextmanager
def counted(b: ir.IRBuilder, start, stop, step=1, name="i", hints=()):
    """`for i in range(start, stop, step)` (stop > start not required): yields i; the body is emitted inside.
    `hints`: for LLVM's loop passes (emitter.loop_id), e.g. SCALAR (vectorizing and unrolling a loop of a few
    iterations costs compile time and buys nothing)."""
    start, stop, step = (ir.Constant(I64, v) if isinstance(v, int) else v for v in (start, stop, step))
    pre = b.block
    head, body, done = (b.append_basic_block(f"{name}.{s}") for s in ("head", "body", "done"))
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name=name)
    i.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", i, stop), body, done)
    b.position_at_end(body)
    yield i
    i.add_incoming(b.add(i, step), b.block)
    latch = b.branch(head)
    if hints:
        latch.set_metadata("llvm.loop", loop_id(b.module, *hints))
    b.position_at_end(done)


def module_text(module: ir.Module) -> str:
    """The module's IR text with the loop IDs of `loop_id` made self-referential."""
    return re.sub(rf'^(!\d+) = !{{ !"{re.escape(LOOP_ID_MARK)}\d+"', lambda m: f"{m.group(1)} = distinct !{{ {m.group(1)}",
                  str(module), flags=re.M)


class Emitter:
    """Shared by the kernel emitters: loads, stores, conversions and elementwise ops."""

    def __init__(self, mb: ModuleBuilder, k: Kernel, fn: ir.Function, buffers: dict[Value, ir.Value]):
        self.mb, self.k, self.fn, self.buffers = mb, k, fn, buffers
        self.program = mb.program
        self.module = mb.module
        self.entry = fn.append_basic_block("entry")
        self.b = ir.IRBuilder(self.entry)
        self.err = self.b.alloca(I32, name="err")
        self.b.store(ir.Constant(I32, 0), self.err)
        self.at: list[Value] = []  # the node being emitted (named by a LoweringError)
        self.part: tuple[ir.Value, ir.Value] | None = None  # a thread's [lo, hi) of the split loop (kernels.py)
        self.split: int | str | None = None  # which loop `part` ranges over (kernels.Split.where)

    # -- memory
    def element_ptr(self, owner: Value, index: ir.Value):
        return self.b.gep(self.buffers[owner], [index], source_etype=STORAGE[owner.dtype], inbounds=True)

    def load_at(self, owner: Value, index: ir.Value, dt) -> ir.Value:
        raw = self.b.load(self.element_ptr(owner, index), typ=STORAGE[dt])
        return self.from_storage(raw, dt)

    def store_at(self, owner: Value, index: ir.Value, value: ir.Value, dt) -> None:
        self.b.store(self.to_storage(value, dt), self.element_ptr(owner, index))

    def load_if(self, inside: ir.Value, load, otherwise: ir.Value) -> ir.Value:
        """load() where `inside`, else `otherwise`: the load under a branch, which the vectorizer turns into a
        masked vector load (a contiguous piece stays contiguous; what lies outside is never read)."""
        b = self.b
        before = b.block
        then = self.fn.append_basic_block("in")
        merge = self.fn.append_basic_block("placed")
        b.cbranch(inside, then, merge)
        b.position_at_end(then)
        loaded = load()
        then_end = b.block
        b.branch(merge)
        b.position_at_end(merge)
        phi = b.phi(otherwise.type)
        phi.add_incoming(loaded, then_end)
        phi.add_incoming(otherwise, before)
        return phi

    def from_storage(self, raw, dt):
        b = self.b
        if dt == dtypes.float16:
            return b.fpext(raw, F32)
        if dt == dtypes.bfloat16:
            return b.bitcast(b.shl(b.zext(raw, I32), ir.Constant(I32, 16)), F32)
        if dt == dtypes.bool_:
            return b.icmp_unsigned("!=", raw, ir.Constant(I8, 0))
        return raw

    def to_storage(self, value, dt):
        b = self.b
        if dt == dtypes.float16:
            return b.fptrunc(value, F16)
        if dt == dtypes.bfloat16:  # round to nearest even on the bits; NaN stays a quiet NaN
            bits = b.bitcast(value, I32)
            lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
            rounded = b.lshr(b.add(b.add(bits, ir.Constant(I32, 0x7FFF)), lsb), ir.Constant(I32, 16))
            nan = b.fcmp_unordered("uno", value, value)
            return b.trunc(b.select(nan, ir.Constant(I32, 0x7FC0), rounded), I16)
        if dt == dtypes.bool_:
            return b.zext(value, I8)
        return value

    def round_low_precision(self, value, dt):
        """float16/bfloat16 values are computed in float but rounded after every op, as NumPy does."""
        if dt in (dtypes.float16, dtypes.bfloat16):
            return self.from_storage(self.to_storage(value, dt), dt)
        return value

    def constant(self, value, dt):
        ty = COMPUTE[dt]
        if dt == dtypes.bool_:
            return ir.Constant(I1, int(bool(value)))
        if is_float(dt):
            return ir.Constant(ty, float(value))
        return ir.Constant(ty, int(value))

    def intrinsic(self, name, ty, args):
        fn = self.module.declare_intrinsic(name, [ty], ir.FunctionType(ty, [ty] * len(args)))
        return self.b.call(fn, args)

    def flag_error(self, bad: ir.Value, node: Value) -> None:
        """Record (branch-free) that `node` met bad input; the kernel returns its code at the end."""
        # the node's position in its kernel, + 1: kernels sharing code share codes; the caller maps them back
        code = ir.Constant(I32, next(i for i, n in enumerate(self.k.nodes) if n is node) + 1)
        old = self.b.load(self.err, typ=I32)
        self.b.store(self.b.select(bad, code, old), self.err)

    def linear(self, coords, strides, offset=0) -> ir.Value:
        """offset + sum(coordinate * stride): an element's position in its buffer."""
        total = ir.Constant(I64, offset)
        for i, s in zip(coords, strides):
            if s:
                total = self.b.add(total, self.b.mul(i, ir.Constant(I64, s)))
        return total

    def finish(self) -> None:
        self.b.ret(self.b.load(self.err, typ=I32))

    # -- loops
    def loop_begin(self, n: int, name: str = "i"):
        """`for i in range(n)`: the body follows until loop_end."""
        b = self.b
        pre = b.block
        header = self.fn.append_basic_block(f"{name}.body")
        after = self.fn.append_basic_block(f"{name}.end")
        b.branch(header if n > 0 else after)  # an empty loop's body stays, unreachable
        b.position_at_end(header)
        phi = b.phi(I64, name=name)
        if n > 0:
            phi.add_incoming(ir.Constant(I64, 0), pre)
        return Loop(phi, header, after, n)

    def loop_range(self, lo: ir.Value, hi: ir.Value, name: str = "i"):
        """`for i in range(lo, hi)` with bounds known at run time (a thread's part of a split loop)."""
        b = self.b
        pre = b.block
        header = self.fn.append_basic_block(f"{name}.body")
        after = self.fn.append_basic_block(f"{name}.end")
        b.cbranch(b.icmp_unsigned("<", lo, hi), header, after)
        b.position_at_end(header)
        phi = b.phi(I64, name=name)
        phi.add_incoming(lo, pre)
        return Loop(phi, header, after, hi)

    def loop_end(self, loop: Loop, unroll: bool = True) -> None:
        """Close `loop`. unroll=False keeps LLVM from unrolling it whole: a short contiguous loop inside another
        is then vectorized along itself, not unrolled and vectorized along the outer loop with gathers."""
        b = self.b
        nxt = b.add(loop.index, ir.Constant(I64, 1), flags=["nuw", "nsw"])
        loop.index.add_incoming(nxt, b.block)
        end = ir.Constant(I64, max(loop.n, 1)) if isinstance(loop.n, int) else loop.n
        latch = b.cbranch(b.icmp_unsigned("<", nxt, end), loop.header, loop.after)
        if not unroll:
            latch.set_metadata("llvm.loop", loop_id(self.module, "llvm.loop.unroll.disable"))
        b.position_at_end(loop.after)

    # -- elementwise ops
    def elementwise(self, n: Value, xs: list[ir.Value]) -> ir.Value:
        b, op = self.b, n.op
        dt = n.inputs[0].dtype if n.inputs else n.dtype  # the operands' dtype (for `where`: the condition's)
        fl = is_float(dt)
        ty = COMPUTE[dt]
        if op in ("stop_gradient", "check_classes"):
            return xs[0]
        if op == "convert":
            return self.convert(xs[0], dt, n.dtype)
        if op in mathlib.FUNCTIONS:
            return self.round_low_precision(b.call(mathlib.function(self.module, op, ty), [xs[0]]), n.dtype)
        if op == "real":  # (of a real value: complex ones are not lowered)
            return xs[0]
        if op == "imag":
            return self.constant(0, n.dtype)
        x = xs[0]
        y = xs[1] if len(xs) > 1 else None
        zero = ir.Constant(ty, 0.0 if fl else 0)
        if op == "negative":
            r = b.fneg(x) if fl else b.sub(zero, x)
        elif op == "relu":
            r = b.select(b.fcmp_ordered("<=", x, zero) if fl else b.icmp_signed("<", x, zero), zero, x)  # -0.0 -> 0.0
        elif op == "sqrt":
            r = self.intrinsic("llvm.sqrt", ty, [x])
        elif op == "rsqrt":
            r = b.fdiv(ir.Constant(ty, 1.0), self.intrinsic("llvm.sqrt", ty, [x]))
        elif op in ROUNDING:
            r = self.intrinsic(ROUNDING[op], ty, [x])
        elif op == "tan":
            sin, cos = (mathlib.function(self.module, f, ty) for f in ("sin", "cos"))
            r = b.fdiv(b.call(sin, [x]), b.call(cos, [x]))
        elif op == "log1p":
            r = self.log1p(x, ty)
        elif op == "abs":
            r = self.intrinsic("llvm.fabs", ty, [x]) if fl else b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)
        elif op == "sign":
            one, minus = ir.Constant(ty, 1.0 if fl else 1), ir.Constant(ty, -1.0 if fl else -1)
            if fl:
                r = b.select(b.fcmp_ordered(">", x, zero), one, b.select(b.fcmp_ordered("<", x, zero), minus,
                             b.select(b.fcmp_ordered("==", x, zero), zero, x)))
            else:
                r = b.select(b.icmp_signed(">", x, zero), one, b.select(b.icmp_signed("<", x, zero), minus, zero))
        elif op in ("add", "subtract", "multiply"):
            if dt == dtypes.bool_:
                r = {"add": b.or_, "multiply": b.and_, "subtract": b.xor}[op](x, y)
            elif fl:
                r = {"add": b.fadd, "subtract": b.fsub, "multiply": b.fmul}[op](x, y)
            else:
                r = {"add": b.add, "subtract": b.sub, "multiply": b.mul}[op](x, y)
        elif op == "divide":
            r = b.fdiv(x, y)
        elif op == "power":
            if fl:
                r = b.call(mathlib.pow_function(self.module, ty), [x, y])
            else:
                r = b.fptosi(b.call(mathlib.pow_function(self.module, F64), [b.sitofp(x, F64), b.sitofp(y, F64)]), ty)
        elif op in ("maximum", "minimum"):
            if fl:
                r = self.intrinsic(f"llvm.{op}", ty, [x, y])
            else:
                cmp = b.icmp_signed(">" if op == "maximum" else "<", x, y) if dt != dtypes.bool_ else \
                    b.icmp_unsigned(">" if op == "maximum" else "<", x, y)
                r = b.select(cmp, x, y)
        elif op in COMPARISONS:
            sym = COMPARISONS[op]
            if fl:
                r = b.fcmp_unordered("!=", x, y) if op == "not_equal" else b.fcmp_ordered(sym, x, y)
            elif dt == dtypes.bool_:
                r = b.icmp_unsigned(sym, x, y)
            else:
                r = b.icmp_signed(sym, x, y)
        elif op == "remainder":
            r = self.remainder(x, y, fl, ty)
        elif op in ("logical_and", "logical_or"):
            x, y = self.truth(x, dt), self.truth(y, dt)
            r = b.and_(x, y) if op == "logical_and" else b.or_(x, y)
        elif op == "logical_not":
            r = b.xor(self.truth(x, dt), ir.Constant(I1, 1))
        elif op == "where":
            r = b.select(self.truth(x, n.inputs[0].dtype), xs[1], xs[2])
        else:
            raise NotImplementedError(op)
        return self.round_low_precision(r, n.dtype)

    def log1p(self, x, ty):
        """log(1 + x) to a few ulps where 1 + x rounds (Goldberg's trick): with u = fl(1 + x),
        log(u) * x / (u - 1), exact at u == 1 (then x, keeping -0.0) and at u == inf."""
        b = self.b
        one = ir.Constant(ty, 1.0)
        u = b.fadd(one, x)
        r = b.fmul(b.call(mathlib.function(self.module, "log", ty), [u]), b.fdiv(x, b.fsub(u, one)))
        r = b.select(b.fcmp_ordered("==", u, ir.Constant(ty, float("inf"))), u, r)
        return b.select(b.fcmp_ordered("==", u, one), x, r)

    def truth(self, x, dt):
        if dt == dtypes.bool_:
            return x
        if is_float(dt):
            return self.b.fcmp_unordered("!=", x, ir.Constant(COMPUTE[dt], 0.0))
        return self.b.icmp_signed("!=", x, ir.Constant(COMPUTE[dt], 0))

    def remainder(self, x, y, fl, ty):
        """NumPy's floored remainder: the result takes the divisor's sign (x % 0 is NaN, or 0 for integers)."""
        b = self.b
        zero = ir.Constant(ty, 0.0 if fl else 0)
        if fl:
            r = b.frem(x, y)
            fix = b.and_(b.fcmp_ordered("!=", r, zero),
                         b.xor(b.fcmp_ordered("<", r, zero), b.fcmp_ordered("<", y, zero)))
            r = b.select(fix, b.fadd(r, y), r)
            # an exact zero takes the divisor's sign, as in NumPy
            return b.select(b.fcmp_ordered("==", r, zero), self.intrinsic("llvm.copysign", ty, [zero, y]), r)
        safe = b.select(b.or_(b.icmp_signed("==", y, zero), b.icmp_signed("==", y, ir.Constant(ty, -1))),
                        ir.Constant(ty, 1), y)
        r = b.srem(x, safe)
        fix = b.and_(b.icmp_signed("!=", r, zero), b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", safe, zero)))
        r = b.select(fix, b.add(r, safe), r)
        return b.select(b.icmp_signed("==", y, zero), zero, r)

    def convert(self, x, src, dst):
        b = self.b
        s, d = COMPUTE[src], COMPUTE[dst]
        if dst == dtypes.bool_:
            return self.truth(x, src)
        if is_float(dst):
            if src == dtypes.bool_:
                r = b.uitofp(x, d)
            elif not is_float(src):
                r = b.sitofp(x, d)
            elif s == d:
                r = x
            else:
                r = b.fpext(x, d) if d == F64 else b.fptrunc(x, d)
            return self.round_low_precision(r, dst)
        if src == dtypes.bool_:
            return b.zext(x, d)
        if is_float(src):  # truncation toward zero; NaN and out-of-range saturate instead of being undefined
            return self.intrinsic_2("llvm.fptosi.sat", d, s, [x])
        if s.width == d.width:
            return x
        return b.sext(x, d) if d.width > s.width else b.trunc(x, d)

    def intrinsic_2(self, name, ret, arg, args):
        fn = self.module.declare_intrinsic(name, [ret, arg], ir.FunctionType(ret, [arg]))
        return self.b.call(fn, args)


COMPARISONS = {"less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">=", "equal": "==",
               "not_equal": "!="}
ROUNDING = {"floor": "llvm.floor", "ceil": "llvm.ceil", "rint": "llvm.rint"}  # rint: ties to even (the default mode)

ELEMENTWISE_RENDERS = frozenset({  # the elementwise primitives `Emitter.elementwise` computes (on every lowered dtype)
    "abs", "add", "ceil", "convert", "cos", "divide", "equal", "erf", "exp", "expm1", "floor", "greater", "greater_equal",
    "imag", "less", "less_equal", "log", "log1p", "logical_and", "logical_not", "logical_or", "maximum", "minimum",
    "multiply", "negative", "not_equal", "power", "real", "relu", "remainder", "rint", "rsqrt", "sigmoid", "sign", "sin",
    "sqrt", "stop_gradient", "subtract", "tan", "tanh", "where"})
RENDERS = ELEMENTWISE_RENDERS | frozenset({  # ... and every op the kernels (kernels.py) render: the table fusion asks
    "sum", "max", "min", "argmax", "argmin",         # reductions in registers or into memory; arg-reductions of rows
    "take", "check_classes",                         # gathers and the class-index check
    "pad", "concatenate", "update_slice",            # placements
    "matmul", "index_add", "index_update",           # BLAS or a loop; scatter loops
    "cumsum",                                        # a scan loop
    "unfold", "fold"})                               # im2col gather, col2im scatter-add loops


class Loop:
    def __init__(self, index, header, after, n):
        self.index, self.header, self.after, self.n = index, header, after, n
