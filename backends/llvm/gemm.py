"""gradir's own matrix multiply, C = A @ B, written in LLVM IR: packed panels of B and a register-tiled
microkernel, split across an OpenMP team.

The classic recipe (Goto's algorithm, as BLIS and OpenBLAS use it), kept small:
- C is cut into tiles of MC rows x NR columns (NR = two vectors: 32 floats or 16 doubles).
- For each tile and each block of KC steps of the k loop, the tile's KC x NR block of B is copied
  into a contiguous buffer on the stack (*packing*: any strides and transposes of B are paid for
  once here, and the copy is zero-padded past the last column).
- The *microkernel* computes 6 rows x NR columns of C in 12 vector registers: per k step it loads
  two vectors of the packed B, broadcasts 6 scalars of A (any strides), and issues 12 fused
  multiply-adds; rows past the end of A read row 0 and are not stored.
- The tiles are shared out to the threads of an OpenMP team (libgomp), when there are enough.

Everything is IEEE (each product rounded once by fma; sums in k order per element), so a result
differs from BLAS's by the rounding of a different summation order only.
"""

from __future__ import annotations

from llvmlite import ir

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()
MR = 6            # rows of C per microkernel call
MC = 16 * MR      # rows of C per tile
KC = 256          # k steps per packed block of B
PARALLEL_FLOPS = 1 << 20  # below this many multiply-adds, one thread does the whole product


def lanes(ty) -> int:
    return 16 if isinstance(ty, ir.FloatType) else 8


def gemm_function(module: ir.Module, ty, threads: bool) -> ir.Function:
    """`void gemm(A, sam, sak, B, sbk, sbn, C, ldc, M, N, K)`: C[M, N] (row stride ldc) = A @ B, with A and
    B given by element strides. Created once per module and element type."""
    name = f"gradir.gemm.{'f32' if isinstance(ty, ir.FloatType) else 'f64'}{'.mt' if threads else ''}"
    try:
        return module.get_global(name)
    except KeyError:
        pass
    args = [PTR, I64, I64, PTR, I64, I64, PTR, I64, I64, I64, I64]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), args), name=name)
    fn.linkage = "internal"
    tiles_fn = _tiles_function(module, ty)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    A, sam, sak, B, sbk, sbn, C, ldc, M, N, K = fn.args
    nr = 2 * lanes(ty)
    panels = b.sdiv(b.add(N, ir.Constant(I64, nr - 1)), ir.Constant(I64, nr))
    chunks = b.sdiv(b.add(M, ir.Constant(I64, MC - 1)), ir.Constant(I64, MC))
    ntiles = b.mul(panels, chunks)
    if not threads:
        b.call(tiles_fn, list(fn.args) + [ir.Constant(I64, 0), ntiles])
        b.ret_void()
        return fn
    small = b.icmp_signed("<", b.mul(b.mul(M, N), K), ir.Constant(I64, PARALLEL_FLOPS))
    with b.if_else(small) as (serial, parallel):
        with serial:
            b.call(tiles_fn, list(fn.args) + [ir.Constant(I64, 0), ntiles])
        with parallel:
            data = b.alloca(I64, size=len(args) + 1)  # the arguments (pointers as integers) and the tile count
            for i, a in enumerate(list(fn.args) + [ntiles]):
                v = b.ptrtoint(a, I64) if a.type == PTR else a
                b.store(v, b.gep(data, [ir.Constant(I64, i)], source_etype=I64))
            task = _task_function(module, ty, tiles_fn, len(args))
            gomp = _declare(module, "GOMP_parallel", ir.FunctionType(ir.VoidType(), [PTR, PTR, I32, I32]))
            b.call(gomp, [task, data, ir.Constant(I32, 0), ir.Constant(I32, 0)])
    b.ret_void()
    return fn


def _declare(module, name, fnty):
    try:
        return module.get_global(name)
    except KeyError:
        return ir.Function(module, fnty, name=name)


def _task_function(module, ty, tiles_fn, nargs: int) -> ir.Function:
    """The body each OpenMP thread runs: its contiguous share of the tiles."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), name=f"{tiles_fn.name}.task")
    fn.linkage = "internal"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    raw = [b.load(b.gep(fn.args[0], [ir.Constant(I64, i)], source_etype=I64), typ=I64) for i in range(nargs + 1)]
    args = [b.inttoptr(v, PTR) if t == PTR else v for v, t in zip(raw, tiles_fn.function_type.args)]
    ntiles = raw[nargs]
    tid = b.sext(b.call(_declare(module, "omp_get_thread_num", ir.FunctionType(I32, [])), []), I64)
    nt = b.sext(b.call(_declare(module, "omp_get_num_threads", ir.FunctionType(I32, [])), []), I64)
    chunk = b.sdiv(b.add(ntiles, b.sub(nt, ir.Constant(I64, 1))), nt)
    lo = b.mul(tid, chunk)
    hi = b.add(lo, chunk)
    hi = b.select(b.icmp_signed("<", hi, ntiles), hi, ntiles)
    b.call(tiles_fn, args[:nargs] + [lo, hi])
    b.ret_void()
    return fn


class _Loops:
    """Counted loops with run-time bounds for a function being built."""

    def __init__(self, fn, b):
        self.fn, self.b = fn, b

    def begin(self, lo, hi, name):
        b = self.b
        pre = b.block
        body, end = self.fn.append_basic_block(f"{name}.body"), self.fn.append_basic_block(f"{name}.end")
        b.cbranch(b.icmp_signed("<", lo, hi), body, end)
        b.position_at_end(body)
        i = b.phi(I64, name=name)
        i.add_incoming(lo, pre)
        return i, body, end, hi

    def end(self, loop, step=1):
        i, body, end, hi = loop
        b = self.b
        nxt = b.add(i, ir.Constant(I64, step))
        i.add_incoming(nxt, b.block)
        b.cbranch(b.icmp_signed("<", nxt, hi), body, end)
        b.position_at_end(end)


def _tiles_function(module, ty) -> ir.Function:
    """`tiles(A, sam, sak, B, sbk, sbn, C, ldc, M, N, K, lo, hi)`: tiles lo..hi-1 of C (panel-major)."""
    name = f"gradir.gemm_tiles.{'f32' if isinstance(ty, ir.FloatType) else 'f64'}"
    try:
        return module.get_global(name)
    except KeyError:
        pass
    w = lanes(ty)
    nr = 2 * w
    vty = ir.VectorType(ty, w)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64, PTR, I64, I64, PTR, I64, I64, I64, I64,
                                                             I64, I64]), name=name)
    fn.linkage = "internal"
    for i in (0, 3, 6):
        fn.args[i].add_attribute("noalias")
    A, sam, sak, B, sbk, sbn, C, ldc, M, N, K, lo, hi = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    L = _Loops(fn, b)
    c64 = lambda v: ir.Constant(I64, v)
    suffix = f"v{w}f{32 if w == 16 else 64}"
    fma = _declare(module, f"llvm.fma.{suffix}", ir.FunctionType(vty, [vty] * 3))
    mty = ir.VectorType(I1, w)
    mstore = _declare(module, f"llvm.masked.store.{suffix}.p0", ir.FunctionType(ir.VoidType(), [vty, PTR, I32, mty]))
    mload = _declare(module, f"llvm.masked.load.{suffix}.p0", ir.FunctionType(vty, [PTR, I32, mty, vty]))
    packed = b.alloca(ty, size=KC * nr, name="packed")  # this thread's block of B
    acc = [[b.alloca(vty) for _ in range(2)] for _ in range(MR)]
    zero = ir.Constant(vty, [0.0] * w)
    iota = ir.Constant(ir.VectorType(I64, w), list(range(w)))
    chunks = b.sdiv(b.add(M, c64(MC - 1)), c64(MC))

    tile = L.begin(lo, hi, "tile")
    t = tile[0]
    j0 = b.mul(b.sdiv(t, chunks), c64(nr))
    i_lo = b.mul(b.srem(t, chunks), c64(MC))
    i_hi = b.add(i_lo, c64(MC))
    i_hi = b.select(b.icmp_signed("<", i_hi, M), i_hi, M)
    kblock = L.begin(c64(0), K, "kc")
    k0 = kblock[0]
    kc = b.sub(K, k0)
    kc = b.select(b.icmp_signed("<", kc, c64(KC)), kc, c64(KC))
    # pack B[k0:k0+kc, j0:j0+nr] row by row, zero past column N (the load reads a clamped column)
    kk = L.begin(c64(0), kc, "pk")
    jj = L.begin(c64(0), c64(nr), "pj")
    col = b.add(j0, jj[0])
    inside = b.icmp_signed("<", col, N)
    src = b.add(b.mul(b.add(k0, kk[0]), sbk), b.mul(b.select(inside, col, c64(0)), sbn))
    v = b.load(b.gep(B, [src], source_etype=ty, inbounds=True), typ=ty)
    b.store(b.select(inside, v, ir.Constant(ty, 0.0)),
            b.gep(packed, [b.add(b.mul(kk[0], c64(nr)), jj[0])], source_etype=ty, inbounds=True))
    L.end(jj)
    L.end(kk)
    # the microkernel over the tile's rows, 6 at a time
    rows = L.begin(i_lo, i_hi, "ir")
    i0 = rows[0]
    for r in range(MR):
        for h in range(2):
            b.store(zero, acc[r][h])
    a_rows = []
    for r in range(MR):
        row = b.add(i0, c64(r))
        row = b.select(b.icmp_signed("<", row, M), row, c64(0))  # past the end: read row 0, store nothing
        a_rows.append(b.mul(row, sam))
    ks = L.begin(c64(0), kc, "k")
    k = ks[0]
    bk = b.mul(k, c64(nr))
    bv = [b.load(b.gep(packed, [b.add(bk, c64(h * w))], source_etype=ty, inbounds=True), typ=vty, align=4)
          for h in range(2)]
    a_k = b.mul(b.add(k0, k), sak)
    for r in range(MR):
        a = b.load(b.gep(A, [b.add(a_rows[r], a_k)], source_etype=ty, inbounds=True), typ=ty)
        splat = b.shuffle_vector(b.insert_element(ir.Constant(vty, ir.Undefined), a, ir.Constant(I32, 0)),
                                 ir.Constant(vty, ir.Undefined), ir.Constant(ir.VectorType(I32, w), [0] * w))
        for h in range(2):
            b.store(b.call(fma, [splat, bv[h], b.load(acc[r][h], typ=vty)]), acc[r][h])
    L.end(ks)
    first = b.icmp_signed("==", k0, c64(0))
    for r in range(MR):
        row = b.add(i0, c64(r))
        with b.if_then(b.icmp_signed("<", row, M)):
            for h in range(2):
                col = b.add(j0, c64(h * w))
                mask = b.icmp_signed("<", b.add(_splat(b, col, w), iota), _splat(b, N, w))  # columns before N
                ptr = b.gep(C, [b.add(b.mul(row, ldc), col)], source_etype=ty, inbounds=True)
                value = b.load(acc[r][h], typ=vty)
                old = b.call(mload, [ptr, ir.Constant(I32, 4), mask, zero])
                value = b.select(first, value, b.fadd(old, value))
                b.call(mstore, [value, ptr, ir.Constant(I32, 4), mask])
    L.end(rows, MR)
    L.end(kblock, KC)
    L.end(tile)
    b.ret_void()
    return fn


def _splat(b, x, w):
    vty = ir.VectorType(x.type, w)
    v = b.insert_element(ir.Constant(vty, ir.Undefined), x, ir.Constant(I32, 0))
    return b.shuffle_vector(v, ir.Constant(vty, ir.Undefined), ir.Constant(ir.VectorType(I32, w), [0] * w))
