"""gradir's own matrix product, in LLVM IR: a packed, register-blocked gemm for the host's vector ISA.

`gradir_gemm_f32` / `gradir_gemm_f64(M, N, K, A, sam, sak, B, sbk, sbn, C, ldc, beta, nbatch, batch)` compute
C = A @ B + beta * C (beta 0 or 1) for an M x K matrix A and a K x N matrix B at any element strides
(A[i, k] = A[i * sam + k * sak]; a transpose is just other strides) into a row-major C with row stride ldc,
for every element of a batch of any number of axes (`batch`: each axis's size and the three operands' strides
along it; attention's products over batch and heads are one call that packs into one buffer).
The structure is BLIS's (Van Zee and van de Geijn, "BLIS: A Framework for Rapidly Instantiating BLAS
Functionality"), with the two inner loops swapped for the wide register tiles of AVX-512:

    for each block of NC columns of B and C:            (jc)
      for each block of KC rows of B:                    (pc)  pack B[pc:, jc:] into column panels  (L2)
        for each panel of MR rows of A and C:            (ir)  pack A[ir:, pc:] k-major               (L1)
          for each panel of NR columns:                  (jr)  micro-kernel: C[ir:, jc+jr:] += Ap @ Bp

The micro-kernel keeps an MR x NR tile of C in MR * NR / L vector registers (L lanes), and per step of k loads
NR / L vectors of the packed B row, broadcasts MR elements of the packed A column and issues MR * NR / L fused
multiply-adds. Packing copies each operand once per block into the contiguous, zero-padded order the
micro-kernel reads, so its loads never miss L1/L2 and never depend on the caller's strides. Edge rows run as
tiles of the powers of two below MR, edge columns as tiles of fewer vectors whose last partial vector goes
through a scratch tile. A product of few rows (at most DIRECT_ROWS tiles: a convolution's output channels)
whose B has contiguous rows skips packing B: the micro-kernel reads B's rows in place, as packing would cost
about as much as the few tiles that reuse each panel. Either way each element of C is one chain of fused
multiply-adds in k order, so results do not depend on the blocking, the ISA or how rows are split.

`gradir_dot_f32` / `gradir_dot_f64` (the same signature) compute products whose A rows and B columns are both
contiguous along k (a convolution's weight gradient, dY @ cols^T) as dot products, unpacked; kernels choose it
(`prefers_dot`) for few rows. Its sums are lane-wise partial sums, also the same on any CPU with AVX2.
One call runs on one thread (the pool partitions products). Each element type's module is compiled once per
process (or loaded from the disk cache: backend.load_module) when a kernel first calls it.
"""

from __future__ import annotations

import ctypes
import functools
from typing import NamedTuple

import llvmlite.binding as llvm
from llvmlite import ir

from . import jit
from .emitter import counted, module_text

I32, I64, PTR = ir.IntType(32), ir.IntType(64), ir.PointerType()
VOID = ir.VoidType()
SIGNATURE = ir.FunctionType(VOID, [I64, I64, I64, PTR, I64, I64, PTR, I64, I64, PTR, I64, I64, I64, PTR])
"""gradir_gemm_f32/f64(M, N, K, A, sam, sak, B, sbk, sbn, C, ldc, beta, nbatch, batch), as kernels' modules
declare it: `batch` points to nbatch rows of (count, A's stride, B's stride, C's stride), outermost axis first."""
ONE = ir.FunctionType(VOID, [I64, I64, I64, PTR, I64, I64, PTR, I64, I64, PTR, I64, I64, PTR])


class Shape(NamedTuple):
    """A gemm's blocking: a micro-tile of MR rows by NV vectors of L lanes, and the cache blocks."""
    lanes: int   # L: elements per vector register
    mr: int      # rows of the register tile
    nv: int      # vectors per row of the tile (NR = nv * lanes columns)
    kc: int      # rows of B per packed block (the depth of one micro-kernel call)
    nc: int      # columns of B per packed block (a multiple of NR)

    @property
    def nr(self) -> int:
        return self.nv * self.lanes


DIRECT_ROWS = 4  # products of at most this many register tiles of rows read B's contiguous rows in place
DOT_LANES = {"f32": 16, "f64": 8}  # the dot products' partial sums: 512 bits, one register on AVX-512, two on AVX2
DOT_TILES = {512: 4, 256: 2}  # vector bits -> a dot tile's rows and columns (its accumulators fill half the registers;
# the tile changes no element's sums)
DOT_ROWS = 32  # at most this many rows run as dot products (not a multiple of the ISA's tile: the choice, and so
# the results, are the same on every CPU)
TILES = {512: (8, 3), 256: (4, 3)}  # vector bits -> (MR, NV): AVX-512's 32 registers hold 24 accumulators, the
# B row and a broadcast; AVX2's 16 hold 12, the B row and a broadcast. MR is a power of two: A is packed through
# in-register transposes of MR rows (`transpose`), and edge rows are tiles of the powers of two below it.


def blocking(vector_bits: int) -> dict[str, Shape]:
    """The blocking per element type ('f32', 'f64') for registers of `vector_bits` (512 or 256)."""
    mr, nv = TILES[vector_bits]
    out = {}
    for name, bits in (("f32", 32), ("f64", 64)):
        lanes = vector_bits // bits
        nr, kc = nv * lanes, 256
        nc = max(nr, (512 * 1024 // (kc * bits // 8)) // nr * nr)  # the packed B block fills about 512 KB (L2)
        out[name] = Shape(lanes, mr, nv, kc, nc)
    return out


@functools.cache
def host_shapes() -> dict[str, Shape] | None:
    """This CPU's blocking (`blocking`), or None without AVX2 and FMA (BLAS runs)."""
    features = llvm.get_host_cpu_features()
    if features.get("avx512f"):
        return blocking(512)
    if features.get("avx2") and features.get("fma"):
        return blocking(256)
    return None


def prefers_dot(M: int, K: int, sak: int, sbk: int, suffix: str) -> bool:
    """Whether a product runs as dot products (`gradir_dot_*`): A's rows and B's columns contiguous along k, at most
    DOT_ROWS rows (packing B would cost about as much as the few tiles that reuse it) and k long enough for the
    vectors."""
    return sak == 1 and sbk == 1 and M <= DOT_ROWS and K >= 8 * DOT_LANES[suffix]


SCALAR = (("llvm.loop.vectorize.enable", False), "llvm.loop.unroll.disable")  # a short or rare loop, left as is


def describe() -> str:
    """What computes the LLVM backend's float products on this CPU (benchmark reports name it)."""
    shapes = host_shapes()
    if shapes is None:
        return "SciPy's OpenBLAS (no AVX2 and FMA here)"
    f32 = shapes["f32"]
    return f"gradir's gemm ({f32.lanes * 32}-bit vectors, float32 tiles {f32.mr}x{f32.nr})"


def c64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


class GemmBuilder:
    """Emits one gemm function for an element type and a `Shape` (see the module docstring)."""

    def __init__(self, module: ir.Module, ty: ir.Type, suffix: str, shape: Shape):
        self.m, self.ty, self.suffix, self.s = module, ty, suffix, shape
        self.vec = ir.VectorType(ty, shape.lanes)
        self.size = 4 if isinstance(ty, ir.FloatType) else 8
        name = f"llvm.fma.v{shape.lanes}f{self.size * 8}"  # (llvmlite names no vector intrinsics itself)
        self.fma = ir.Function(module, ir.FunctionType(self.vec, [self.vec] * 3), name)
        self.edge = self.edge_store()

    def edge_store(self) -> ir.Function:
        """edge(scratch, C, ldc, beta, mr, nr): C[:mr, :nr] = scratch[:mr, :nr] + beta * C (scratch rows NR long)."""
        fn = ir.Function(self.m, ir.FunctionType(VOID, [PTR, PTR, I64, I64, I64, I64]), name=f"gemm_edge_{self.suffix}")
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        scratch, c, ldc, beta, mr, nr = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        add_old = b.icmp_signed("!=", beta, c64(0))
        with counted(b, 0, mr, name="r", hints=SCALAR) as r, counted(b, 0, nr, name="j", hints=SCALAR) as j:
            x = b.load(self.at(b, scratch, b.add(b.mul(r, c64(self.s.nr)), j)), typ=self.ty)
            p = self.at(b, c, b.add(b.mul(r, ldc), j))
            old = b.select(add_old, b.load(p, typ=self.ty), ir.Constant(self.ty, 0.0))
            b.store(b.fadd(x, old), p)
        b.ret_void()
        return fn

    def at(self, b, base, index):
        return b.gep(base, [index], source_etype=self.ty, inbounds=True)

    def micro_kernel(self, mr: int, nv: int) -> ir.Function:
        """tile(kc, Ap, Bp, sb, C, ldc, beta, nr, scratch): C[:mr, :nr] = Ap @ Bp + beta * C for nr <= nv * L
        columns, Ap k-major (MR values per k), Bp's rows sb apart (a packed panel: NR; B itself: its row stride);
        nr < nv * L (an edge) goes through `scratch`."""
        s, ty, vec = self.s, self.ty, self.vec
        fn = ir.Function(self.m, ir.FunctionType(VOID, [I64, PTR, PTR, I64, PTR, I64, I64, I64, PTR]),
                         name=f"gemm_tile_{self.suffix}_{mr}x{nv}")
        fn.linkage = "internal"
        fn.attributes.add("noinline")  # (inlined into the driver, twelve tiles take LLVM seconds to compile)
        kc, ap, bp, sb, c, ldc, beta, nr, scratch = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        entry = b.block
        zero = ir.Constant(vec, [0.0] * s.lanes)
        loop, done = b.append_basic_block("k"), b.append_basic_block("k.done")
        b.branch(loop)
        b.position_at_end(loop)
        k = b.phi(I64, name="k")
        acc = [[b.phi(vec, name=f"c{r}_{v}") for v in range(nv)] for r in range(mr)]
        brow = [b.load(self.at(b, bp, b.add(b.mul(k, sb), c64(v * s.lanes))), typ=vec, align=self.size)
                for v in range(nv)]
        undef = ir.Constant(vec, None)
        mask = ir.Constant(ir.VectorType(I32, s.lanes), [0] * s.lanes)
        new = []
        for r in range(mr):
            a = b.load(self.at(b, ap, b.add(b.mul(k, c64(s.mr)), c64(r))), typ=ty)
            splat = b.shuffle_vector(b.insert_element(undef, a, ir.Constant(I32, 0)), undef, mask)
            new.append([b.call(self.fma, [splat, brow[v], acc[r][v]]) for v in range(nv)])
        k1 = b.add(k, c64(1))
        k.add_incoming(c64(0), entry)
        k.add_incoming(k1, loop)
        for r in range(mr):
            for v in range(nv):
                acc[r][v].add_incoming(zero, entry)
                acc[r][v].add_incoming(new[r][v], loop)
        b.cbranch(b.icmp_signed("<", k1, kc), loop, done)
        b.position_at_end(done)
        add_old = b.icmp_signed("!=", beta, c64(0))
        with b.if_else(b.icmp_signed("==", nr, c64(nv * s.lanes))) as (whole, edge):
            with whole, b.if_else(add_old) as (add, overwrite):  # straight into C
                for branch, adding in ((add, True), (overwrite, False)):
                    with branch:
                        for r in range(mr):
                            for v in range(nv):
                                p = self.at(b, c, b.add(b.mul(c64(r), ldc), c64(v * s.lanes)))
                                x = b.fadd(new[r][v], b.load(p, typ=vec, align=self.size)) if adding else new[r][v]
                                b.store(x, p, align=self.size)
            with edge:  # the tile to scratch, its valid columns into C
                for r in range(mr):
                    for v in range(nv):
                        b.store(new[r][v], self.at(b, scratch, c64(r * s.nr + v * s.lanes)), align=self.size)
                b.call(self.edge, [scratch, c, ldc, beta, c64(mr), nr])
        b.ret_void()
        return fn

    def copy(self, b, rows, cols, src, s_row, s_col, dst, d_row: int, width: int):
        """dst[i * d_row + j] = src[i * s_row + j * s_col] for i < rows, j < cols (a packing). A source contiguous
        along j is copied row by row (LLVM vectorizes it); one contiguous along i (s_row == 1) is transposed in
        registers, `width` columns by L rows at a time (`transpose`), the rest element by element."""
        L = self.s.lanes
        assert width == L or width == d_row, "a transposed block is stored as whole rows or one contiguous run"

        def element(i, j):
            x = b.load(self.at(b, src, b.add(b.mul(i, s_row), b.mul(j, s_col))), typ=self.ty)
            b.store(x, self.at(b, dst, b.add(b.mul(i, c64(d_row)), j)))

        def elements(i_from, i_to, j_from, j_to):
            with counted(b, j_from, j_to, name="cj", hints=SCALAR) as j, \
                    counted(b, i_from, i_to, name="ci", hints=SCALAR) as i:
                element(i, j)
        with b.if_else(b.icmp_signed("==", s_row, c64(1))) as (down, across):
            with down:
                wide, tall = b.and_(cols, c64(-width)), b.and_(rows, c64(-L))
                with counted(b, 0, wide, width, name="tj") as j0:
                    with counted(b, 0, tall, L, name="ti") as i0:
                        column = [b.load(self.at(b, src, b.add(b.mul(b.add(j0, c64(w)), s_col), i0)), typ=self.vec,
                                         align=self.size) for w in range(width)]
                        for o, v in enumerate(self.transpose(b, column)):
                            at = b.add(b.mul(b.add(i0, c64(o * L // width)), c64(d_row)), j0)
                            b.store(v, self.at(b, dst, at), align=self.size)
                    elements(tall, rows, j0, b.add(j0, c64(width)))
                elements(c64(0), rows, wide, cols)
            with across, counted(b, 0, rows, name="ci") as i, counted(b, 0, cols, name="cj") as j:
                element(i, j)

    def transpose(self, b, vectors: list) -> list:
        """W vectors of L lanes (W a power of two) holding X[w, l] -> W vectors holding X^T's elements in order
        (l * W + w): log2(W) rounds of interleaving vector i with vector i + W/2, each of which rotates the bits
        of an element's position w * L + l left by one (log2(W) rotations move w's bits below l's)."""
        L, W = self.s.lanes, len(vectors)
        assert W & (W - 1) == 0 and W <= L, "a power of two, at most the lanes"
        i32 = ir.IntType(32)
        halves = [[j + h * L // 2 + side * L for j in range(L // 2) for side in (0, 1)] for h in (0, 1)]
        masks = [ir.Constant(ir.VectorType(i32, L), m) for m in halves]
        for _ in range(W.bit_length() - 1):
            vectors = [b.shuffle_vector(vectors[i], vectors[i + W // 2], m) for i in range(W // 2) for m in masks]
        return vectors

    def gemm(self) -> ir.Function:
        s, ty = self.s, self.ty
        heights = sorted({s.mr} | {1 << e for e in range(s.mr.bit_length()) if 1 << e < s.mr}, reverse=True)
        tiles = {(mr, nv): self.micro_kernel(mr, nv) for mr in heights for nv in range(1, s.nv + 1)}
        fn = ir.Function(self.m, ONE, name=f"gemm_one_{self.suffix}")
        fn.linkage = "internal"
        M, N, K, a, sam, sak, bm, sbk, sbn, c, ldc, beta, bp = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        zero = ir.Constant(ty, 0.0)
        smin = lambda x, y: b.select(b.icmp_signed("<", x, y), x, y)
        with b.if_then(b.and_(b.icmp_signed("==", K, c64(0)), b.icmp_signed("==", beta, c64(0)))):
            with counted(b, 0, M, name="zi", hints=SCALAR) as i, counted(b, 0, N, name="zj", hints=SCALAR) as j:
                # an empty sum is 0
                b.store(zero, self.at(b, c, b.add(b.mul(i, ldc), j)))
        block = self.block_elements(b, N, K)
        ap = self.at(b, bp, block)
        scratch = self.at(b, ap, c64(s.kc * s.mr))
        # few rows of A (a convolution's output channels) reuse each packed panel of B only M / MR times, so a
        # B with contiguous rows is read in place; only a panel ending in a partial vector is packed
        direct = b.and_(b.icmp_signed("==", sbn, c64(1)), b.icmp_signed("<=", M, c64(DIRECT_ROWS * s.mr)))
        in_place = lambda width: b.and_(direct, b.icmp_signed("==", b.urem(width, c64(s.lanes)), c64(0)))
        with counted(b, 0, N, s.nc, name="jc") as jc:
            nc = smin(b.sub(N, jc), c64(s.nc))
            with counted(b, 0, K, s.kc, name="pc") as pc:
                kc = smin(b.sub(K, pc), c64(s.kc))
                # pack B[pc:pc+kc, jc:jc+nc]: panel p holds columns p*NR.. as kc rows of NR (zero past nc)
                with counted(b, 0, nc, s.nr, name="pj") as j0:
                    width = smin(b.sub(nc, j0), c64(s.nr))
                    with b.if_then(b.not_(in_place(width))):
                        panel = self.at(b, bp, b.mul(j0, kc))
                        src = self.at(b, bm, b.add(b.mul(pc, sbk), b.mul(b.add(jc, j0), sbn)))
                        self.copy(b, kc, width, src, sbk, sbn, panel, s.nr, s.lanes)
                        with counted(b, 0, kc, name="zk", hints=SCALAR) as k, \
                                counted(b, width, s.nr, name="zj", hints=SCALAR) as j:
                            b.store(zero, self.at(b, panel, b.add(b.mul(k, c64(s.nr)), j)))
                with counted(b, 0, M, s.mr, name="ir") as i0:
                    rows = smin(b.sub(M, i0), c64(s.mr))
                    # pack A[i0:i0+rows, pc:pc+kc] k-major: MR values per k
                    src = self.at(b, a, b.add(b.mul(i0, sam), b.mul(pc, sak)))
                    self.copy(b, kc, rows, src, sak, sam, ap, s.mr, s.mr)
                    tile_beta = b.select(b.icmp_signed("==", pc, c64(0)), beta, c64(1))  # later K blocks add
                    with counted(b, 0, nc, s.nr, name="jr") as j0:
                        cols = smin(b.sub(nc, j0), c64(s.nr))
                        vectors = b.udiv(b.add(cols, c64(s.lanes - 1)), c64(s.lanes))
                        here = in_place(cols)
                        panel = b.select(here, self.at(b, bm, b.add(b.mul(pc, sbk), b.add(jc, j0))),
                                         self.at(b, bp, b.mul(j0, kc)))
                        stride = b.select(here, sbk, c64(s.nr))
                        corner = b.add(b.mul(i0, ldc), b.add(jc, j0))
                        # the rows: one full tile, or (an edge) tiles of the powers of two that sum to `rows`
                        for mr in heights:
                            if mr == s.mr:
                                take, r0 = b.icmp_signed("==", rows, c64(mr)), c64(0)
                            else:
                                take = b.and_(b.icmp_signed("!=", rows, c64(s.mr)),
                                              b.icmp_signed("!=", b.and_(rows, c64(mr)), c64(0)))
                                r0 = b.and_(rows, c64(~(2 * mr - 1)))
                            with b.if_then(take):
                                done = b.append_basic_block("tile.done")
                                pick = b.switch(vectors, done)
                                for nv in range(1, s.nv + 1):
                                    case = b.append_basic_block(f"tile.{mr}x{nv}")
                                    pick.add_case(c64(nv), case)
                                    b.position_at_end(case)
                                    b.call(tiles[mr, nv], [kc, self.at(b, ap, r0), panel, stride,
                                                           self.at(b, c, b.add(corner, b.mul(r0, ldc))), ldc,
                                                           tile_beta, cols, scratch])
                                    b.branch(done)
                                b.position_at_end(done)
        b.ret_void()
        return self.batched(fn, f"gradir_gemm_{self.suffix}")

    def dot(self) -> ir.Function:
        """`gradir_dot_<suffix>`, gemm's signature, for A's rows and B's columns contiguous along k (sak = sbk = 1;
        a convolution's weight gradient, dY @ cols^T): each element of C is a dot product of two contiguous rows,
        summed in DOT_LANES lane-wise partial sums (a logical vector: AVX2 runs it as two registers, with the same
        sums), a fixed halving tree and the k tail in order. Tiles of T x T elements (DOT_TILES): 2T loads per
        T * T fused multiply-adds, nothing packed."""
        ty, W = self.ty, DOT_LANES[self.suffix]
        tile = DOT_TILES[self.s.lanes * self.size * 8]
        vec = ir.VectorType(ty, W)
        name = f"llvm.fma.v{W}f{self.size * 8}"
        fma = self.m.globals.get(name) or ir.Function(self.m, ir.FunctionType(vec, [vec] * 3), name)
        fma1 = ir.Function(self.m, ir.FunctionType(ty, [ty] * 3), f"llvm.fma.f{self.size * 8}")
        prefetch = ir.Function(self.m, ir.FunctionType(VOID, [PTR, I32, I32, I32]), "llvm.prefetch.p0")
        i32 = lambda v: ir.Constant(I32, v)
        fn = ir.Function(self.m, ONE, name=f"dot_one_{self.suffix}")
        fn.linkage = "internal"
        M, N, K, a, sam, _, bm, _, sbn, c, ldc, beta, _ = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        umin = lambda x, y: b.select(b.icmp_signed("<", x, y), x, y)
        body = c64(0) if W == 1 else b.and_(K, c64(-W))
        acc = [[b.alloca(vec) for _ in range(tile)] for _ in range(tile)]  # (in the entry block: registers)
        sums = [[b.alloca(ty) for _ in range(tile)] for _ in range(tile)]
        with counted(b, 0, N, tile, name="dj", hints=SCALAR) as j0, counted(b, 0, M, tile, name="di", hints=SCALAR) as i0:
            # past the product's last row or column, a tile repeats it (loaded, summed, not stored)
            arows = [self.at(b, a, b.mul(umin(b.add(i0, c64(r)), b.sub(M, c64(1))), sam)) for r in range(tile)]
            bcols = [self.at(b, bm, b.mul(umin(b.add(j0, c64(q)), b.sub(N, c64(1))), sbn)) for q in range(tile)]
            for row in acc:
                for slot in row:
                    b.store(ir.Constant(vec, [0.0] * W), slot)
            # the next tile's B columns (a weight gradient's come from memory) are fetched into L2 while this tile
            # is summed: each pass over these columns (one per tile of rows) fetches one of them, a line per step
            # of k (in the CNN step: 6.7 -> 5.8 ms for the three big weight gradients)
            ahead = b.add(b.add(j0, c64(tile)), b.urem(b.udiv(i0, c64(tile)), c64(tile)))
            ahead = self.at(b, bm, b.mul(umin(ahead, b.sub(N, c64(1))), sbn))
            with counted(b, 0, body, W, name="dk", hints=SCALAR) as k:  # (vector code already: LLVM's unrolling
                # of it bought nothing measurable and cost compile time)
                b.call(prefetch, [self.at(b, ahead, k), i32(0), i32(2), i32(1)])  # (read, L2, data)
                xs = [b.load(self.at(b, p, k), typ=vec, align=self.size) for p in arows]
                ys = [b.load(self.at(b, p, k), typ=vec, align=self.size) for p in bcols]
                for r in range(tile):
                    for q in range(tile):
                        b.store(b.call(fma, [xs[r], ys[q], b.load(acc[r][q], typ=vec)]), acc[r][q])
            totals = self.lane_sums(b, [b.load(slot, typ=vec) for row in acc for slot in row], W)
            for r in range(tile):
                for q in range(tile):
                    b.store(totals[r * tile + q], sums[r][q])
            with counted(b, body, K, name="dt", hints=SCALAR) as k:
                xs = [b.load(self.at(b, p, k), typ=ty) for p in arows]
                ys = [b.load(self.at(b, p, k), typ=ty) for p in bcols]
                for r in range(tile):
                    for q in range(tile):
                        b.store(b.call(fma1, [xs[r], ys[q], b.load(sums[r][q], typ=ty)]), sums[r][q])
            add_old = b.icmp_signed("!=", beta, c64(0))
            for r in range(tile):
                for q in range(tile):
                    inside = b.and_(b.icmp_signed("<", b.add(i0, c64(r)), M), b.icmp_signed("<", b.add(j0, c64(q)), N))
                    with b.if_then(inside):
                        p = self.at(b, c, b.add(b.mul(b.add(i0, c64(r)), ldc), b.add(j0, c64(q))))
                        old = b.select(add_old, b.load(p, typ=ty), ir.Constant(ty, 0.0))
                        b.store(b.fadd(b.load(sums[r][q], typ=ty), old), p)
        b.ret_void()
        return self.batched(fn, f"gradir_dot_{self.suffix}", scratch=False)

    @staticmethod
    def lane_sums(b, vectors: list, W: int) -> list:
        """Each vector's lanes summed by halving (lanes [0, w/2) plus [w/2, w) of every group of w lanes, w = W, W/2,
        ..., 1): a fixed tree, so the same sums on any CPU. Two vectors are halved together by two shuffles and one
        add (their groups interleaved), so n vectors take about 3n operations, not 3n log W."""
        i32 = ir.IntType(32)
        assert len(vectors) & (len(vectors) - 1) == 0, "vectors are paired up"
        names = [[i] for i in range(len(vectors))]  # per vector, whose partial sum each group of lanes holds
        w = W  # every group's width
        while w > 1:
            h, groups = w // 2, len(names[0])
            if len(vectors) > 1:  # pair up: each result holds both vectors' groups, each half as wide
                half = lambda o: ir.Constant(ir.VectorType(i32, 2 * groups * h), [
                    lane for j in range(groups) for base in (0, W) for lane in range(base + j * w + o, base + j * w + o + h)])
                vectors = [b.fadd(b.shuffle_vector(x, y, half(0)), b.shuffle_vector(x, y, half(h)))
                           for x, y in zip(vectors[::2], vectors[1::2])]
                names = [[n for pair in zip(x, y) for n in pair] for x, y in zip(names[::2], names[1::2])]
            else:  # one vector left: halve its groups in place (it narrows)
                x = vectors[0]
                half = lambda o: ir.Constant(ir.VectorType(i32, groups * h),
                                             [j * w + o + t for j in range(groups) for t in range(h)])
                vectors = [b.fadd(b.shuffle_vector(x, x, half(0)), b.shuffle_vector(x, x, half(h)))]
                W = groups * h
            w = h
        total = {n: b.extract_element(v, ir.Constant(i32, lane)) for v, ns in zip(vectors, names)
                 for lane, n in enumerate(ns)}
        return [total[i] for i in range(len(total))]

    def block_elements(self, b, N, K):
        """Elements of the packed B block: min(K, KC) rows of min(N, NC) columns rounded up to whole panels."""
        s = self.s
        smin = lambda x, y: b.select(b.icmp_signed("<", x, y), x, y)
        return b.mul(smin(K, c64(s.kc)), b.mul(b.udiv(b.add(smin(N, c64(s.nc)), c64(s.nr - 1)), c64(s.nr)),
                                               c64(s.nr)))

    def batched(self, one: ir.Function, name: str, scratch: bool = True) -> ir.Function:
        """The exported function `name`: one allocation (`scratch`: the packed B block, the packed A panel, the edge
        tile), then `one` on every batch element, its operands' offsets unravelled from a flat counter over the
        batch."""
        s = self.s
        malloc = self.m.globals.get("gradir_malloc") or ir.Function(self.m, ir.FunctionType(PTR, [I64]),
                                                                     name="gradir_malloc")
        free = self.m.globals.get("gradir_free") or ir.Function(self.m, ir.FunctionType(VOID, [PTR]), name="gradir_free")
        fn = ir.Function(self.m, SIGNATURE, name=name)
        M, N, K, a, sam, sak, bm, sbk, sbn, c, ldc, beta, nbatch, batch = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        field = lambda d, f: b.load(b.gep(batch, [b.add(b.mul(d, c64(4)), c64(f))], source_etype=I64, inbounds=True),
                                     typ=I64)
        total, rest, offsets = b.alloca(I64), b.alloca(I64), [b.alloca(I64) for _ in range(3)]
        b.store(c64(1), total)
        with counted(b, 0, nbatch, name="nb", hints=SCALAR) as d:
            b.store(b.mul(b.load(total, typ=I64), field(d, 0)), total)
        bp = ir.Constant(PTR, None) if not scratch else b.call(
            malloc, [b.mul(b.add(self.block_elements(b, N, K), c64(s.kc * s.mr + s.mr * s.nr)), c64(self.size))])
        with counted(b, 0, b.load(total, typ=I64), name="t") as t:
            b.store(t, rest)
            for o in offsets:
                b.store(c64(0), o)
            with counted(b, 0, nbatch, name="ax", hints=SCALAR) as j:  # innermost axis first
                d = b.sub(b.sub(nbatch, c64(1)), j)
                count, left = field(d, 0), b.load(rest, typ=I64)
                i = b.urem(left, count)
                b.store(b.udiv(left, count), rest)
                for f, o in enumerate(offsets, 1):
                    b.store(b.add(b.load(o, typ=I64), b.mul(i, field(d, f))), o)
            oa, ob, oc = (b.load(o, typ=I64) for o in offsets)
            b.call(one, [M, N, K, self.at(b, a, oa), sam, sak, self.at(b, bm, ob), sbk, sbn, self.at(b, c, oc),
                         ldc, beta, bp])
        if scratch:
            b.call(free, [bp])
        b.ret_void()
        return fn


TYPES = {"f32": ir.FloatType(), "f64": ir.DoubleType()}


def gemm_ir(suffix: str, shape: Shape) -> str:
    """The gemm module of one element type ('f32' or 'f64'): `gradir_gemm_<suffix>` for the given blocking, and
    `gradir_dot_<suffix>`."""
    m = ir.Module(name=f"gradir_gemm_{suffix}")
    builder = GemmBuilder(m, TYPES[suffix], suffix, shape)
    builder.gemm()
    builder.dot()
    return module_text(m)


_REGISTERED: list[jit.JitModule] = []  # kept alive: kernels' modules call into them by address


def register(suffix: str, module: jit.JitModule) -> None:
    """Make the compiled gemm module's product callable from kernels' modules (backend.load_module)."""
    _REGISTERED.append(module)  # (two threads compiling at once may both register one; neither may be freed)
    for name in (f"gradir_gemm_{suffix}", f"gradir_dot_{suffix}"):
        jit.add_symbol(name, module.address(name))


@functools.cache
def runtime() -> None:
    """Register the C library functions the gemm module calls (malloc, free); once per process."""
    libc = ctypes.CDLL(None)
    jit.add_symbol("gradir_malloc", ctypes.cast(libc.malloc, ctypes.c_void_p).value)
    jit.add_symbol("gradir_free", ctypes.cast(libc.free, ctypes.c_void_p).value)


__all__ = ["SIGNATURE", "Shape", "blocking", "describe", "gemm_ir", "host_shapes", "prefers_dot", "register", "runtime"]
