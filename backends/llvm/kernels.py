"""The kernel emitters: each fused kernel of the program as one LLVM function body. `LoopKernel` emits a
fused loop nest (outer loops over the row axes, a loop nest per pass over the inner axes: elementwise chains,
reductions, gathers and placements), `MatmulKernel` a matmul (a call of gemm.py's product or BLAS, or a loop for small
products) with its bias epilogue; `split_of` says how threads share either. The kernels that index (index_add, cumsum,
unfold/fold) are in index_kernels.py. codegen.py's ModuleBuilder creates the functions and calls them.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np
from llvmlite import ir

from gradir.core import dtypes
from gradir.core.dtypes import is_float
from gradir.core.ir import Value
from gradir.passes.aliasing import c_strides, nocopy_reshape
from gradir.passes.fusion import LOOP, MATMUL, PLACEMENTS, REDUCTIONS, WINDOW, in_kernel_value

from ..loops import LoopPlan, Term, buffer_reads, is_literal, mapped, stored_earlier
from . import mathlib
from .emitter import COMPUTE, I1, I8, I32, I64, Emitter, Loop
from .gemm import SIGNATURE, host_shapes, prefers_dot

PARALLEL_LOOP_WORK = 1 << 16    # loop kernels below this many element-ops (elements x nodes) run on one thread
PARALLEL_MATMUL_WORK = 1 << 18  # products below this many multiply-adds run on one thread
LOOP_GRAIN = 256                # a split innermost loop is cut at multiples of this many iterations, so each
# thread's vector body and scalar tail cover the same elements as one thread's would (same arithmetic)
GEMM_GRAIN = 32                 # rows of a split product: whole micro-kernel tiles per thread
GEMM_PIECE = 1 << 22            # and at least this many multiply-adds: OpenBLAS computes smaller products with
# other kernels (its "small matrix" path), whose sums round differently; measured: pieces of 1.3M multiply-adds
# of a 2M product differ in the last bit, pieces of 4M and more of bigger products are exact. Splitting C's
# columns (OpenBLAS's rows) changed dgemm's results at any piece size, so only rows and batches are split. (Measured
# on one CPU: which kernel OpenBLAS picks depends on it, so tests compare split products within rounding.)
UNROLLED_INSIDE = 64  # loops around fewer iterations than this may be unrolled by LLVM (close_loops)
VECTOR_INSIDE = 16    # innermost loops (inside another) of this many iterations and more are not unrolled whole
ONLINE_CHUNK = 2048  # elements of a row an online max-and-sum pass (emit_online) takes at a time (8 KB of f32: L1)
REASSOC = ("reassoc", "contract")  # lets the vectorizer split a reduction into lanes (the order of a sum changes)
SMALL_MATMUL = 16 * 16 * 16       # products below this many multiply-adds run as a loop, not a BLAS call
BLAS_GEMM = {dtypes.float32: "sgemm", dtypes.float64: "dgemm"}
FORTRAN_GEMM = ir.FunctionType(ir.VoidType(), [ir.PointerType()] * 13)  # every argument by pointer
OWN_GEMM = {dtypes.float32: "f32", dtypes.float64: "f64"} if host_shapes() else {}
# gemm.py's products (by element type suffix), where the CPU has AVX2 and FMA: any strides; BLAS (SciPy's
# OpenBLAS) elsewhere


def reduction_identity(op: str, dt):
    if op == "sum":
        return 0
    if is_float(dt):
        return -math.inf if op in ("max", "argmax") else math.inf
    if dt == dtypes.bool_:
        return op in ("min", "argmin")
    info = np.iinfo(dt)
    return info.min if op in ("max", "argmax") else info.max


class Split(NamedTuple):
    """How threads share a kernel: `where` (a loop kernel: the loop's position in its plan; a matmul: "batch"
    or "m", C's rows) has `size` iterations, cut into whole pieces of `grain` (codegen.py gives each thread a range)."""

    where: int | str
    size: int
    grain: int


def split_of(program, k) -> Split | None:
    """How kernel k is shared between threads, or None when it is too small or must run whole on one."""
    if k.kind == LOOP:
        work = math.prod(k.domain) * max(1, len(k.nodes))
        if work < PARALLEL_LOOP_WORK:
            return None
        plan = LoopPlan.nest(program, k)
        j = plan.splittable(program, k)
        if j is None or plan.loops[j].size < 2:
            return None
        grain = LOOP_GRAIN if j == len(plan.loops) - 1 else 1
        if plan.loops[j].size < 2 * grain:
            return None
        return Split(j, plan.loops[j].size, grain)
    if k.kind == WINDOW:  # unfold / fold: each image's windows are independent (fold adds within its image)
        n = k.nodes[0]
        cols = n.shape if n.op == "unfold" else n.inputs[0].shape
        return Split("batch", cols[0], 1) if cols[0] >= 2 and math.prod(cols) >= PARALLEL_LOOP_WORK else None
    if k.kind == MATMUL:
        n = k.nodes[0]
        if min(x.ndim for x in n.inputs) < 2 or BLAS_GEMM.get(n.dtype) is None:
            return None
        _, ash, ast, _, bsh, bst = gemm_operands(program, k)
        (M, K), N = ash[-2:], bsh[-1]
        batch = np.broadcast_shapes(ash[:-2], bsh[:-2])
        out = next((v for v in (k.epilogue, k.transposed) if v is not None), n)
        # (split by image, the output's first axis must be the images: a reshaped epilogue's may not be)
        if M * N * K * math.prod(batch) < PARALLEL_MATMUL_WORK or batch and tuple(out.shape[:1]) != tuple(batch[:1]):
            return None
        if batch and batch[0] >= 2:
            return Split("batch", batch[0], 1)
        if M * N * K < SMALL_MATMUL:
            return None
        if n.dtype in OWN_GEMM:  # any rows: each element of C is computed the same way in any piece
            return Split("m", M, GEMM_GRAIN) if M >= 2 * GEMM_GRAIN else None
        if not (blas_layout(M, K, *ast[-2:]) and blas_layout(K, N, *bst[-2:])):
            return None
        # C's rows (the columns of OpenBLAS's column-major C^T): each piece at least GEMM_PIECE multiply-adds
        grain = -(-max(GEMM_GRAIN, -(-GEMM_PIECE // max(N * K, 1))) // GEMM_GRAIN) * GEMM_GRAIN
        return Split("m", M, grain) if M >= 2 * grain else None
    return None


class LoopKernel(Emitter):
    """A fused loop nest: outer loops over the row axes, then one loop nest per pass over the inner axes."""

    pass_index = 0  # the pass being emitted (row values between passes count as the pass before)
    segment = None  # (counter, lo, hi): the piece of the innermost loop being emitted (placement_segments)

    def emit(self):
        k, b = self.k, self.b
        self.immediates = self.program.immediates
        self.plan = LoopPlan.nest(self.program, k)
        self.counters: dict[int, ir.Value] = {}  # loop position -> its counter, while the code at hand is inside it
        self.acc_slots = {n: b.alloca(COMPUTE[n.dtype], name=f"acc{i}") for i, n in enumerate(k.nodes)
                          if n.op in REDUCTIONS or n.op in ("argmax", "argmin")}
        # a float max/min in registers: NaN propagates through a flag (llvm.maximum reductions do not vectorize)
        self.nan_slots = {n: b.alloca(I1) for n in k.nodes if n.op in ("max", "min") and is_float(n.dtype)
                          and n not in k.accumulated}
        self.arg_slots = {n: b.alloca(COMPUTE[n.inputs[0].dtype]) for n in k.nodes if n.op in ("argmax", "argmin")}
        online = self.online_sums()
        self.running = {m: b.alloca(COMPUTE[m.dtype], name="running") for m, _ in online.values()}
        if self.part is None:  # (a split kernel's caller fills them once, before the threads start)
            self.prologue()
        loops = self.open_loops(outer=True)
        self.rows: dict[Value, ir.Value] = {}
        self.emit_rows(0)
        for p in range(k.num_passes):
            if p - 1 in online:  # done with pass p - 1
                self.emit_rows(p + 1)
            elif p in online:
                self.emit_online(p, *online[p])
                self.emit_rows(p + 1, keep=online[p][1])
            else:
                self.emit_pass(p)
                self.emit_rows(p + 1)
        self.close_loops(loops)
        self.finish()

    def prologue(self) -> None:
        """What runs once before the loops: memory accumulators start at the reduction's identity."""
        for n in self.k.nodes:  # (in node order: a set's order would change the IR text, and so the
            if n in self.k.accumulated:  # disk cache's key, run to run)
                self.fill(n, reduction_identity(n.op, n.dtype))

    def open_loops(self, outer: bool, but_last: bool = False) -> list[Loop]:
        """Open the plan's outer (row) or inner loops, outermost first (the split one over this thread's part;
        `but_last`: all but the innermost, which the caller opens)."""
        opened = []
        for j, lp in enumerate(self.plan.loops[:-1] if but_last else self.plan.loops):
            if lp.outer == outer:
                name = f"{'o' if outer else f'p{self.pass_index}i'}{lp.axes[0]}"
                opened.append((j, self.loop_range(*self.part, name) if j == self.split else self.loop_begin(lp.size, name)))
                self.counters[j] = opened[-1][1].index
        return opened

    def close_loops(self, opened, inner: int = 1) -> None:
        """Close the `opened` loops (`inner`: the iterations of loops inside them the caller closed)."""
        for j, lp in reversed(opened):
            # a loop around at least UNROLLED_INSIDE iterations is not unrolled: LLVM would copy the vectorized
            # inner loop once per iteration (a broadcast subtract over [32, 16, 32, 32]: 5,000 lines, 0.2 s of
            # compile) for no measurable speed, unless it accumulates into memory (a bias gradient's column sums:
            # unrolled, each pass over the accumulator row adds several rows; 33 vs 40 us at 2 threads). A loop
            # nest's innermost loop of VECTOR_INSIDE to UNROLLED_INSIDE
            # iterations is not unrolled either: unrolled whole, LLVM vectorized the loop around it instead, with
            # gathers and scatters (rotary embeddings' [4, 4, 64, 32] products ran at 1 ns an element; row
            # kernels' passes and longer loops measured faster left alone)
            inside = inner * math.prod(self.plan.loops[i].size for i, _ in opened if i > j)
            gathered = inside == 1 and j > 0 and self.k.outer is None and \
                VECTOR_INSIDE <= self.plan.loops[j].size < UNROLLED_INSIDE
            self.loop_end(lp, unroll=(inside < UNROLLED_INSIDE or bool(self.k.accumulated)) and not gathered)
            del self.counters[j]

    def term(self, t: Term) -> ir.Value:
        """One address term of the plan: (counter // div) % mod * stride."""
        b = self.b
        v = self.counters[t.loop]
        if t.div != 1:
            v = b.udiv(v, ir.Constant(I64, t.div))
        if t.mod is not None:
            v = b.urem(v, ir.Constant(I64, t.mod))
        return v if t.stride == 1 else b.mul(v, ir.Constant(I64, t.stride), flags=["nsw"])

    def buffer_reads(self, n: Value):
        """(operand, axis map) for each operand n reads from memory."""
        return buffer_reads(self.program, self.k, n)

    def literal(self, u: Value) -> bool:
        return is_literal(self.program, u)

    def producer(self, u: Value) -> Value | None:
        return in_kernel_value(self.k, u)

    def index(self, strides_by_domain: list[int], offset: int = 0) -> ir.Value:
        """offset + the plan's address terms for these strides, over the loops the code at hand is inside."""
        b, total = self.b, None
        for t in self.plan.terms(strides_by_domain, self.counters):
            term = self.term(t)
            total = term if total is None else b.add(total, term, flags=["nsw"])
        if total is None:
            return ir.Constant(I64, offset)
        return b.add(total, ir.Constant(I64, offset), flags=["nsw"]) if offset else total

    def fill(self, n: Value, value) -> None:
        owner = self.program.access[n].owner
        lp = self.loop_begin(max(n.size, 1), "fill")
        self.store_at(owner, lp.index, self.constant(value, n.dtype), n.dtype)
        self.loop_end(lp)

    # -- values
    def value(self, u: Value, want: tuple, memo: dict) -> ir.Value:
        """Operand u (read with axis map `want`) at the current loop point."""
        if self.literal(u):
            c = self.immediates.get(u, u)
            return self.constant(c.attrs["value"].item(), u.dtype)
        p = self.producer(u)
        if p is None:
            acc = self.program.access[u]
            return self.load_at(acc.owner, self.index(mapped(acc.strides, want, len(self.k.domain)), acc.offset),
                                u.dtype)
        if p in self.rows:
            return self.rows[p]
        k = self.k
        if self.stored_earlier(p):  # read it back (from cache) rather than compute it again
            at = self.index(mapped(c_strides(p.shape, 1), k.maps[p], len(k.domain)))
            return self.load_at(self.program.access[p].owner, at, p.dtype)
        return self.compute(p, memo)

    def stored_earlier(self, p: Value) -> bool:
        return stored_earlier(self.k, p, self.pass_index)

    def compute(self, n: Value, memo: dict) -> ir.Value:
        """n at the current loop point, its in-kernel operands first (in dependency order, without
        recursion: a fused chain can be thousands of ops deep)."""
        stack = [(n, False)]
        while stack:
            v, operands_done = stack.pop()
            if v in memo:
                continue
            if operands_done:
                memo[v] = self.compute_one(v, memo)
                continue
            stack.append((v, True))
            for u in ([self.k.copies[v]] if v in self.k.copies else v.inputs):
                p = self.producer(u)
                if p is not None and p not in memo and p not in self.rows and not self.stored_earlier(p):
                    stack.append((p, False))
        return memo[n]

    def compute_one(self, n: Value, memo: dict) -> ir.Value:
        """n, its in-kernel operands being computed already (in memo) or readable."""
        k = self.k
        m = k.maps[n]
        self.at[:] = [n]
        if n in k.copies:
            v = self.value(k.copies[n], tuple(range(len(k.domain))), memo)
        elif n.op == "take":
            v = self.gather(n, memo)
        elif n.op in PLACEMENTS:
            v = self.place(n, memo)
        elif n.op in REDUCTIONS or n.op in ("argmax", "argmin"):
            raise AssertionError("reductions are read from rows")
        else:
            xs = [self.value(u, m, memo) for u in n.inputs]
            if n.op == "check_classes":
                self.check_classes(n, xs[0])
            v = self.elementwise(n, xs)
        return v

    def gather(self, n: Value, memo) -> ir.Value:
        b, k = self.b, self.k
        x, idx = n.inputs
        axis, m = n.attrs["axis"], k.maps[n]
        i = self.value(idx, m[axis:axis + idx.ndim], memo)
        i = b.sext(i, I64) if i.type.width < 64 else i
        size = x.shape[axis]
        i = b.select(b.icmp_signed("<", i, ir.Constant(I64, 0)), b.add(i, ir.Constant(I64, size)), i)
        bad = b.or_(b.icmp_signed("<", i, ir.Constant(I64, 0)), b.icmp_signed(">=", i, ir.Constant(I64, size)))
        self.flag_error(bad, n)
        i = b.select(bad, ir.Constant(I64, 0), i)
        acc = self.program.access[x]
        xm = tuple(m[:axis]) + tuple(m[axis + idx.ndim:])
        rest = list(acc.strides[:axis]) + list(acc.strides[axis + 1:])
        base = self.index(mapped(rest, xm, len(k.domain)), acc.offset)
        at = b.add(base, b.mul(i, ir.Constant(I64, acc.strides[axis])))
        return self.load_at(acc.owner, at, x.dtype)

    # -- pad, concatenate, update_slice: each element is one operand element (or a fill value), chosen
    # -- branch-free; the loads read a clamped, always valid position
    def coords_of(self, n: Value) -> list[ir.Value]:
        """n's coordinate along each of its axes (a size-1 axis is always at 0)."""
        terms = [self.plan.coordinate(d) for d in self.k.maps[n]]
        return [ir.Constant(I64, 0) if t is None else self.term(t) for t in terms]

    def load_coords(self, u: Value, coords: list[ir.Value]) -> ir.Value:
        if self.literal(u):
            return self.constant(self.immediates.get(u, u).attrs["value"].item(), u.dtype)
        acc = self.program.access[u]
        return self.load_at(acc.owner, self.linear(coords, acc.strides, acc.offset), u.dtype)

    def in_range(self, c, lo: int, hi: int):
        b = self.b
        if self.segment is not None and c is self.segment[0]:  # known for the whole piece (placement_segments)
            seg_lo, seg_hi = self.segment[1:]
            if lo <= seg_lo and seg_hi <= hi or seg_hi <= lo or hi <= seg_lo:
                return ir.Constant(I1, int(lo <= seg_lo and seg_hi <= hi))
        return b.and_(b.icmp_signed(">=", c, ir.Constant(I64, lo)), b.icmp_signed("<", c, ir.Constant(I64, hi)))

    def strided(self, c, start: int, step: int, count: int):
        """(inside, k): whether coordinate c is start + k*step for some 0 <= k < count, and k."""
        b = self.b
        t = b.sub(c, ir.Constant(I64, start))
        if step == 1:
            return self.in_range(c, start, start + count), t
        inside = self.in_range(t, 0, count * step - step + 1) if count else ir.Constant(I1, 0)
        inside = b.and_(inside, b.icmp_signed("==", b.srem(t, ir.Constant(I64, step)), ir.Constant(I64, 0)))
        return inside, b.sdiv(t, ir.Constant(I64, step))

    def load_where(self, inside, u: Value, coords, otherwise) -> ir.Value:
        """u at coords where `inside`, else `otherwise` (a masked vector load once vectorized: load_if)."""
        if self.literal(u) or not u.size:
            return self.b.select(inside, self.load_coords(u, coords), otherwise) if u.size else otherwise
        return self.load_if(inside, lambda: self.load_coords(u, coords), otherwise)

    def place(self, n: Value, memo) -> ir.Value:
        b, a, c = self.b, n.attrs, self.coords_of(n)
        if n.op == "pad":
            x = n.inputs[0]
            inside, at = ir.Constant(I1, 1), []
            for ci, lo, inter, size in zip(c, a["lo"], a["interior"], x.shape):
                ok, k = self.strided(ci, lo, inter + 1, size)
                inside, at = b.and_(inside, ok), at + [k]
            return self.load_where(inside, x, at, self.constant(a["value"], n.dtype))
        if n.op == "concatenate":
            axis, offset, value = a["axis"], 0, self.constant(0, n.dtype)
            for x in n.inputs:
                size = x.shape[axis]
                ok = self.in_range(c[axis], offset, offset + size)
                at = c[:axis] + [b.sub(c[axis], ir.Constant(I64, offset))] + c[axis + 1:]
                value = self.load_where(ok, x, at, value)
                offset += size
            return value
        x, v = n.inputs  # update_slice
        inside, at = ir.Constant(I1, 1), []
        for ci, start, stop, step in zip(c, a["starts"], a["stops"], a["steps"]):
            ok, k = self.strided(ci, start, step, len(range(start, stop, step)))
            inside, at = b.and_(inside, ok), at + [k]
        return self.load_where(inside, v, at, self.value(x, self.k.maps[n], memo))

    def check_classes(self, n: Value, i: ir.Value) -> None:
        b = self.b
        size, ignore = n.attrs["size"], n.attrs["ignore"]
        ty = i.type
        bad = b.or_(b.icmp_signed("<", i, ir.Constant(ty, 0)), b.icmp_signed(">=", i, ir.Constant(ty, size)))
        if ignore is not None:
            bad = b.and_(bad, b.icmp_signed("!=", i, ir.Constant(ty, ignore)))
        self.flag_error(bad, n)

    def store_value(self, n: Value, v: ir.Value) -> None:
        k = self.k
        strides = c_strides(k.domain, 1) if n in k.copies else mapped(c_strides(n.shape, 1), k.maps[n], len(k.domain))
        self.store_at(self.program.access[n].owner, self.index(list(strides)), v, n.dtype)

    # -- row values: computed once per outer index, between passes
    def emit_rows(self, after: int, keep: Value | None = None) -> None:
        """The row values that need `after` passes, then the next pass's accumulators reset (but `keep`'s: an
        online sum, accumulated with the pass before)."""
        k = self.k
        memo: dict = {}
        for n in k.nodes:
            if n.op in REDUCTIONS or n.op in ("argmax", "argmin"):
                if n not in k.accumulated and k.row_after.get(n) == after:
                    v = self.b.load(self.acc_slots[n], typ=COMPUTE[n.dtype])
                    if n in self.nan_slots:
                        v = self.b.select(self.b.load(self.nan_slots[n], typ=I1), ir.Constant(v.type, math.nan), v)
                    v = self.round_low_precision(v, n.dtype)
                    self.rows[n] = v
                    if n in k.stored:
                        self.store_value(n, v)
            elif k.row_after.get(n) == after and n in k.row_after:
                v = self.compute(n, memo)
                self.rows[n] = v
                if n in k.stored:
                    self.store_value(n, v)
        if after < k.num_passes:  # the accumulators of the next pass start at their identity
            for n in k.nodes:
                if n in self.acc_slots and n not in k.accumulated and k.passes.get(n) == after and n is not keep:
                    self.b.store(self.constant(reduction_identity(n.op, n.dtype), n.dtype), self.acc_slots[n])
                    if n in self.nan_slots:
                        self.b.store(ir.Constant(I1, 0), self.nan_slots[n])
                    if n in self.arg_slots:
                        x = n.inputs[0]
                        self.b.store(self.constant(reduction_identity(n.op, x.dtype), x.dtype), self.arg_slots[n])

    def emit_pass(self, p: int) -> None:
        self.pass_index = p
        segments = self.placement_segments()
        loops = self.open_loops(outer=False, but_last=segments is not None)
        for segment in segments or [None]:
            if segment is not None:  # the innermost loop over one segment: every placement is in or out whole
                j, (lo, hi) = len(self.plan.loops) - 1, segment
                inner = self.loop_range(ir.Constant(I64, lo), ir.Constant(I64, hi), f"p{p}s{lo}")
                self.counters[j], self.segment = inner.index, (inner.index, lo, hi)
            self.pass_body(p)
            if segment is not None:
                self.loop_end(inner, unroll=not VECTOR_INSIDE <= hi - lo < UNROLLED_INSIDE)
                del self.counters[j]
                self.segment = None
        self.close_loops(loops, inner=self.plan.loops[-1].size if segments else 1)

    def pass_body(self, p: int) -> None:
        """Pass p's work at one element: its reductions accumulate, its stored values are stored."""
        k, memo, full = self.k, {}, tuple(range(len(self.k.domain)))
        for n in k.nodes:
            if k.passes.get(n) != p or n in k.row_after and n.op not in REDUCTIONS and n.op not in ("argmax", "argmin"):
                continue
            if n.op in REDUCTIONS:
                self.accumulate(n, self.value(n.inputs[0], full, memo))
            elif n.op in ("argmax", "argmin"):
                self.arg_step(n, self.value(n.inputs[0], full, memo))
            elif n in k.stored:
                self.store_value(n, self.compute(n, memo))

    # -- online softmax: the max and the sum of exp(x - max) in one pass over the row
    def online_sums(self) -> dict[int, tuple[Value, Value]]:
        """pass p -> (m, s) where pass p takes the max m of x and pass p + 1 does nothing but sum exp(x - m) into
        s (softmax, log_softmax, cross-entropy; not logsumexp, whose max passes through a where): those two passes
        run as one (`emit_online`). Only for rows that are one float32/float64 loop of this thread (not split, no
        placements) longer than ONLINE_CHUNK: a shorter row is read back from L1 anyway (and the chunk loop's
        bookkeeping made 64-element rows 20% slower)."""
        k, loops = self.k, self.plan.loops
        inner = [j for j, lp in enumerate(loops) if not lp.outer]
        if len(inner) != 1 or inner[0] == self.split or loops[inner[0]].size <= ONLINE_CHUNK or \
                any(n.op in PLACEMENTS for n in k.nodes):
            return {}
        through_views = lambda u: u if self.producer(u) is None else self.producer(u)
        found = {}
        for s in k.nodes:
            q = k.passes.get(s)
            if s.op != "sum" or s in k.accumulated or not q or q - 1 in found:
                continue
            x = through_views(s.inputs[0])
            t = through_views(x.inputs[0]) if x.op == "exp" else None
            m = through_views(t.inputs[1]) if t is not None and t.op == "subtract" else None
            if m is None or m.op != "max" or m in k.accumulated or s.dtype != m.dtype or \
                    m.dtype not in (dtypes.float32, dtypes.float64) or k.row_after.get(m) != q or \
                    through_views(m.inputs[0]) is not through_views(t.inputs[0]):
                continue
            in_pass = {n for n in k.nodes if k.passes.get(n) == q}
            if in_pass == {s, x, t} and not {x, t} & set(k.stored):
                found[q - 1] = (m, s)
        return found

    def emit_online(self, p: int, m: Value, s: Value) -> None:
        """Passes p (the max m, and whatever else it does) and p + 1 (s = the sum of exp(x - m)) as one pass
        over the row, ONLINE_CHUNK elements at a time: each chunk's max first, then, if the max grew, the sum so
        far scaled by exp(old max - new max), then the chunk's exp(x - new max) added. Both inner loops vectorize
        and the chunk is read back from L1, so the row is read from memory once for the two reductions. The sum
        is the same to rounding (exp(a - c) = exp(a - b) exp(b - c)); rows of -inf give NaN, as in two passes, and
        chunks of -inf before the first finite one add nothing."""
        b = self.b
        j = next(j for j, lp in enumerate(self.plan.loops) if not lp.outer)
        size, ty = self.plan.loops[j].size, COMPUTE[m.dtype]
        one, exp = self.constant(1.0, m.dtype), mathlib.function(self.module, "exp", ty)
        zero, minus_inf = self.constant(0.0, m.dtype), self.constant(-math.inf, m.dtype)
        b.store(minus_inf, self.running[m])
        b.store(self.constant(0, s.dtype), self.acc_slots[s])

        def chunk(lo: ir.Value, n: int) -> None:
            hi = b.add(lo, ir.Constant(I64, n))
            for q in (p, p + 1):
                self.pass_index = q
                inner = self.loop_range(lo, hi, f"online{q}")
                self.counters[j] = inner.index
                self.pass_body(q)
                self.loop_end(inner)
                del self.counters[j]
                if q == p:  # rescale the sum to the new max (by 1 when it did not grow: -inf to -inf too)
                    old, new = b.load(self.running[m], typ=ty), b.load(self.acc_slots[m], typ=ty)
                    scale = b.select(b.fcmp_ordered("==", old, new), one, b.call(exp, [b.fsub(old, new)]))
                    b.store(b.fmul(b.load(self.acc_slots[s], typ=ty), scale), self.acc_slots[s])
                    b.store(new, self.running[m])
                    # a max of -inf so far (a masked first chunk) subtracts 0: exp(-inf - 0) adds 0, not NaN
                    self.rows[m] = b.select(b.fcmp_ordered("==", new, minus_inf), zero, new)
            del self.rows[m]

        whole, rest = divmod(size, ONLINE_CHUNK)
        if whole:
            c = self.loop_begin(whole, "chunk")
            chunk(b.mul(c.index, ir.Constant(I64, ONLINE_CHUNK)), ONLINE_CHUNK)
            self.loop_end(c, unroll=False)
        if rest:
            chunk(ir.Constant(I64, whole * ONLINE_CHUNK), rest)

    def placement_segments(self) -> list[tuple[int, int]] | None:
        """The innermost loop of a kernel placing elements (pad, concatenate, update_slice), cut where an operand's
        range begins or ends along it, so each piece loads every operand or none without a condition per element
        (conditional loads of three concatenated operands were vectorized as gathers: 100 us for [8, 64, 384]);
        None where that loop is not cut (a strided placement along it, one piece, a split or outer loop)."""
        k, loops = self.k, self.plan.loops
        if not loops or not any(n.op in PLACEMENTS for n in k.nodes):
            return None
        j = len(loops) - 1
        if loops[j].outer or j == self.split or len(loops[j].axes) != 1:
            return None
        d, size, cuts = loops[j].axes[0], loops[j].size, {0, loops[j].size}
        for n in k.nodes:
            if n.op not in PLACEMENTS or d not in k.maps[n]:
                continue
            i, a = k.maps[n].index(d), n.attrs
            if n.op == "pad":
                if a["interior"][i]:
                    return None
                cuts |= {a["lo"][i], a["lo"][i] + n.inputs[0].shape[i]}
            elif n.op == "concatenate" and a["axis"] == i:
                cuts |= set(itertools.accumulate(x.shape[i] for x in n.inputs))
            elif n.op == "update_slice":
                if a["steps"][i] != 1:
                    return None
                cuts |= {a["starts"][i], a["stops"][i]}
        cuts = sorted(c for c in cuts if 0 <= c <= size)
        return list(zip(cuts, cuts[1:])) if len(cuts) > 2 else None

    def combine(self, op: str, dt, acc, x):
        b = self.b
        if op == "sum":
            if dt == dtypes.bool_:
                return b.or_(acc, x)
            return b.fadd(acc, x, flags=REASSOC) if is_float(dt) else b.add(acc, x)
        if is_float(dt):
            return self.intrinsic("llvm.maximum" if op == "max" else "llvm.minimum", COMPUTE[dt], [acc, x])
        cmp = (b.icmp_unsigned if dt == dtypes.bool_ else b.icmp_signed)(">" if op == "max" else "<", x, acc)
        return b.select(cmp, x, acc)

    def accumulate(self, n: Value, x: ir.Value) -> None:
        xd = n.inputs[0].dtype
        if n.op == "sum" and xd != n.dtype:  # bool / int32 sums accumulate in int64, as NumPy
            x = self.convert(x, xd, n.dtype)
        if n in self.k.accumulated:
            acc = self.program.access[n]
            at = self.index(mapped(c_strides(n.shape, 1), self.k.maps[n], len(self.k.domain)))
            old = self.load_at(acc.owner, at, n.dtype)
            self.store_at(acc.owner, at, self.combine(n.op, n.dtype, old, x), n.dtype)
        elif n in self.nan_slots:  # maxnum lanes plus an any-NaN flag: both vectorize as reductions
            b = self.b
            old = b.load(self.acc_slots[n], typ=COMPUTE[n.dtype])
            # no-NaN flags make it a recognised max reduction; NaN lanes give poison that the flag overrides
            fn = self.module.declare_intrinsic("llvm.maxnum" if n.op == "max" else "llvm.minnum", [old.type],
                                               ir.FunctionType(old.type, [old.type] * 2))
            b.store(b.call(fn, [old, x], fastmath=("nnan", "nsz")), self.acc_slots[n])
            b.store(b.or_(b.load(self.nan_slots[n], typ=I1), b.fcmp_unordered("uno", x, x)), self.nan_slots[n])
        else:
            old = self.b.load(self.acc_slots[n], typ=COMPUTE[n.dtype])
            self.b.store(self.combine(n.op, n.dtype, old, x), self.acc_slots[n])

    def arg_step(self, n: Value, x: ir.Value) -> None:
        """argmax/argmin: the first index of the extreme value (of the first NaN, if any), as NumPy."""
        b = self.b
        dt = n.inputs[0].dtype
        best = b.load(self.arg_slots[n], typ=COMPUTE[dt])
        if is_float(dt):
            better = b.fcmp_ordered(">" if n.op == "argmax" else "<", x, best)
            better = b.or_(better, b.and_(b.fcmp_unordered("uno", x, x), b.fcmp_ordered("ord", best, best)))
        else:
            better = (b.icmp_unsigned if dt == dtypes.bool_ else b.icmp_signed)(">" if n.op == "argmax" else "<", x, best)
        outer = self.k.outer
        inner_strides = [0] * outer + list(c_strides(self.k.domain[outer:], 1))
        i = self.index(inner_strides)
        # the first element always wins (so an all -inf row gives 0); later ones only if strictly better
        first = b.icmp_unsigned("==", i, ir.Constant(I64, 0))
        better = b.or_(better, first)
        b.store(b.select(better, x, best), self.arg_slots[n])
        old = b.load(self.acc_slots[n], typ=I64)
        b.store(b.select(better, i, old), self.acc_slots[n])


# -- matmul --------------------------------------------------------------------------------------------

def gemm_operands(program, k):
    """(A's access, shape, strides, then B's) of matmul kernel k as the product C = A @ B it computes: 1-d
    operands as matrices; for a kernel writing the transposed product, B^T and A^T swapped in."""
    a, bv = k.nodes[0].inputs
    A, B = program.access[a], program.access[bv]
    ash, ast = (a.shape, A.strides) if a.ndim >= 2 else ((1,) + a.shape, (0,) + A.strides)
    bsh, bst = (bv.shape, B.strides) if bv.ndim >= 2 else (bv.shape + (1,), B.strides + (0,))
    if k.transposed is not None:  # write (A @ B)^T = B^T @ A^T: the operands swap and transpose
        swap = lambda xs: tuple(xs[:-2]) + (xs[-1], xs[-2])
        (A, ash, ast), (B, bsh, bst) = (B, swap(bsh), swap(bst)), (A, swap(ash), swap(ast))
    return A, ash, ast, B, bsh, bst


def batch_strides(batch, shape, strides) -> list[int]:
    """An operand's strides along the product's batch axes `batch` (0 where it is broadcast)."""
    lead = len(batch) - (len(shape) - 2)
    return [0] * lead + [0 if sh == 1 and bb != 1 else st for sh, st, bb in zip(shape[:-2], strides[:-2], batch[lead:])]


class MatmulKernel(Emitter):
    """C = A @ B with NumPy's matmul shapes, per batch element, from at least SMALL_MATMUL multiply-adds on:
    gemm.py's product on the operands' strides (float32/float64 on CPUs with AVX2 and FMA), else BLAS gemm
    when they are strided matrices (their transposes become its flags); smaller products are a loop."""

    def emit(self):
        n = self.k.nodes[0]
        A, ash, ast, B, bsh, bst = gemm_operands(self.program, self.k)
        M, K = ash[-2:]
        N = bsh[-1]
        batch = np.broadcast_shapes(ash[:-2], bsh[:-2])
        nb = len(batch)
        self.dims = (M, N, K)
        self.batch = batch
        self.a_batch, self.b_batch = batch_strides(batch, ash, ast), batch_strides(batch, bsh, bst)
        self.c_batch = list(c_strides(batch + (M, N), 1))[:nb]
        self.a_mat, self.b_mat = ast[-2:], bst[-2:]
        out = next((v for v in (self.k.epilogue, self.k.transposed) if v is not None), n)
        self.A, self.B, self.C = A, B, self.program.access[out]
        self.n = n
        # a thread's part (codegen sets it): one range of the first batch axis or of C's rows (split_of)
        ranged = {"batch": 0, "m": nb}.get(self.split)
        if self.k.epilogue is not None:  # C starts as the bias; the product is added to it (beta = 1)
            self.fill_bias(out, self.k.bias, ranged)
        if n.dtype in OWN_GEMM and M * N * K >= SMALL_MATMUL:  # (split_of splits only such products)
            self.call_own_gemm()  # one call: the gemm runs the batch itself
            self.finish()
            return
        loops = [self.loop_range(*self.part, f"b{d}") if ranged == d else self.loop_begin(s, f"b{d}")
                 for d, s in enumerate(batch)]
        idx = [lp.index for lp in loops]
        offs = [self.linear(idx, s, acc.offset) for s, acc in
                ((self.a_batch, A), (self.b_batch, B), (self.c_batch, self.C))]
        blas = BLAS_GEMM.get(n.dtype)
        la, lb = blas_layout(M, K, *self.a_mat), blas_layout(K, N, *self.b_mat)
        rows = None
        if self.split == "m":  # this thread's rows of A and C
            lo, hi = self.part
            b = self.b
            a_off, b_off, c_off = offs
            offs = [b.add(a_off, b.mul(lo, ir.Constant(I64, self.a_mat[0]))), b_off,
                    b.add(c_off, b.mul(lo, ir.Constant(I64, N)))]
            rows = b.sub(hi, lo)
        if rows is not None:
            self.call_gemm(blas, la, lb, *offs, rows=self.b.trunc(rows, I32))
        elif M * N * K >= SMALL_MATMUL and blas is not None and la and lb:
            self.call_gemm(blas, la, lb, *offs)
        else:
            self.loop_matmul(*offs)
        for lp in reversed(loops):
            self.loop_end(lp)
        self.finish()

    def fill_bias(self, out: Value, bias: Value, ranged: int | None = None) -> None:
        """C = the bias, over this thread's range of the product's axis `ranged` (the first batch axis or the
        rows; None: all of C). out holds the product's elements in C order, but its shape may differ (a batch
        folded into the rows, a reshape): then the product's coordinates are unravelled into out's."""
        product = tuple(self.batch) + self.dims[:2]
        constant = bias in self.program.immediates or bias.op == "const" and not bias.ndim
        acc = None if constant else self.program.access[bias]
        shape, bias_strides = out.shape, None if constant else acc.strides
        if ranged is not None and tuple(out.shape) != product:
            shape = product  # the bias's strides over the product's axes, where a view can say them
            bias_strides = None if constant else nocopy_reshape(out.shape, acc.strides, product, 1)
        loops = [self.loop_range(*self.part, f"c{d}") if d == ranged else self.loop_begin(s, f"c{d}")
                 for d, s in enumerate(shape)]
        c = [lp.index for lp in loops]
        if constant:
            value = self.constant(self.program.immediates.get(bias, bias).attrs["value"].item(), bias.dtype)
        else:
            if bias_strides is None:  # unravel the product's coordinates into out's (a division per element)
                b, flat = self.b, self.linear(c, c_strides(product, 1))
                oc = [b.urem(b.udiv(flat, ir.Constant(I64, stride)), ir.Constant(I64, size))
                      for stride, size in zip(c_strides(out.shape, 1), out.shape)]
                at = self.linear(oc, acc.strides, acc.offset)
            else:
                at = self.linear(c, bias_strides, acc.offset)
            value = self.load_at(acc.owner, at, bias.dtype)
        self.store_at(self.C.owner, self.linear(c, c_strides(shape, 1), self.C.offset), value, out.dtype)
        for lp in reversed(loops):
            self.loop_end(lp)

    def call_gemm(self, gemm, la, lb, a_off, b_off, c_off, rows=None):
        """Row-major C = A @ B is column-major C^T = B^T @ A^T: gemm(opB, opA, N, M, K, B, A). `rows`: this
        thread's number of rows of A and C (a run-time value), at the offsets given."""
        b = self.b
        M, N, K = self.dims
        dt = self.n.dtype
        ty = COMPUTE[dt]

        def cell(ty_, value):
            p = b.alloca(ty_)
            b.store(value if isinstance(value, ir.Value) else ir.Constant(ty_, value), p)
            return p
        opa, lda = la
        opb, ldb = lb
        beta = 0.0 if self.k.epilogue is None else 1.0
        args = [cell(I8, ord(opb)), cell(I8, ord(opa)), cell(I32, N), cell(I32, M if rows is None else rows),
                cell(I32, K), cell(ty, 1.0),
                self.element_ptr(self.B.owner, b_off), cell(I32, ldb), self.element_ptr(self.A.owner, a_off),
                cell(I32, lda), cell(ty, beta), self.element_ptr(self.C.owner, c_off), cell(I32, max(N, 1))]
        b.call(self.mb.external(f"gradir_blas_{gemm}", FORTRAN_GEMM), args)

    def call_own_gemm(self):
        """gemm.py's product on the operands' own strides, over the whole batch in one call (a thread's part: a
        range of the first batch axis or of C's rows)."""
        b = self.b
        M, N, K = self.dims
        i64 = lambda v: ir.Constant(I64, v)
        offsets = [i64(acc.offset) for acc in (self.A, self.B, self.C)]
        counts, rows = [i64(size) for size in self.batch], i64(M)
        if self.split is not None:
            lo, hi = self.part
            steps = ((self.a_batch[0], self.b_batch[0], self.c_batch[0]) if self.split == "batch"
                     else (self.a_mat[0], 0, N))
            offsets = [b.add(o, b.mul(lo, i64(step))) for o, step in zip(offsets, steps)]
            if self.split == "batch":
                counts[0] = b.sub(hi, lo)
            else:
                rows = b.sub(hi, lo)
        table = self.entry_alloca(ir.ArrayType(I64, 4 * max(len(counts), 1)))
        for d, fields in enumerate(zip(counts, self.a_batch, self.b_batch, self.c_batch)):
            for f, v in enumerate(fields):
                at = b.gep(table, [i64(0), i64(4 * d + f)], inbounds=True)
                b.store(v if isinstance(v, ir.Value) else i64(v), at)
        a_off, b_off, c_off = offsets
        args = [rows, i64(N), i64(K),
                self.element_ptr(self.A.owner, a_off), i64(self.a_mat[0]), i64(self.a_mat[1]),
                self.element_ptr(self.B.owner, b_off), i64(self.b_mat[0]), i64(self.b_mat[1]),
                self.element_ptr(self.C.owner, c_off), i64(N), i64(0 if self.k.epilogue is None else 1),
                i64(len(counts)), table]
        suffix = OWN_GEMM[self.n.dtype]
        kind = "dot" if prefers_dot(M, K, self.a_mat[1], self.b_mat[0], suffix) else "gemm"
        b.call(self.mb.external(f"gradir_{kind}_{suffix}", SIGNATURE), args)

    def loop_matmul(self, a_off, b_off, c_off):
        b = self.b
        M, N, K = self.dims
        dt = self.n.dtype
        sam, sak = self.a_mat
        sbk, sbn = self.b_mat
        li = self.loop_begin(M, "m")
        lj = self.loop_begin(N, "n")
        slot = self.entry_alloca(COMPUTE[dt])
        ci = b.add(c_off, b.add(b.mul(li.index, ir.Constant(I64, N)), lj.index))
        start = self.constant(0, dt) if self.k.epilogue is None else self.load_at(self.C.owner, ci, dt)
        b.store(start, slot)
        lk = self.loop_begin(K, "k")
        ai = b.add(a_off, b.add(b.mul(li.index, ir.Constant(I64, sam)), b.mul(lk.index, ir.Constant(I64, sak))))
        bi = b.add(b_off, b.add(b.mul(lk.index, ir.Constant(I64, sbk)), b.mul(lj.index, ir.Constant(I64, sbn))))
        x = self.load_at(self.A.owner, ai, self.n.inputs[0].dtype)
        y = self.load_at(self.B.owner, bi, self.n.inputs[1].dtype)
        old = b.load(slot, typ=COMPUTE[dt])
        if is_float(dt):
            new = b.fadd(old, b.fmul(x, y), flags=REASSOC)
        elif dt == dtypes.bool_:
            new = b.or_(old, b.and_(x, y))
        else:
            new = b.add(old, b.mul(x, y))
        b.store(new, slot)
        self.loop_end(lk)
        self.store_at(self.C.owner, ci, self.round_low_precision(b.load(slot, typ=COMPUTE[dt]), dt), dt)
        self.loop_end(lj)
        self.loop_end(li)

    def entry_alloca(self, ty):
        with self.b.goto_block(self.entry):
            self.b.position_at_start(self.entry)
            return self.b.alloca(ty)


def blas_layout(rows: int, cols: int, s_row: int, s_col: int):
    """('N'|'T', leading dimension) for passing a row-major-indexed matrix to column-major gemm, or None."""
    if cols == 1:
        s_col = 1
    if rows == 1:
        s_row = max(cols, 1)
    if s_col == 1 and s_row >= max(cols, 1):
        return "N", s_row
    if s_row == 1 and s_col >= max(rows, 1):
        return "T", s_col
    return None
