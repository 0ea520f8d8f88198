"""The kernel emitters of the ops that index rather than fuse: `ScatterKernel` index_add, `ScanKernel` cumsum
(NumPy's order), `WindowKernel` unfold/fold (im2col and col2im). codegen.py's ModuleBuilder calls them like
kernels.py's. Only the window kernels are split between threads (by image: kernels.split_of)."""

from __future__ import annotations

import math

from llvmlite import ir

from gradir.core.dtypes import is_float
from gradir.passes.aliasing import c_strides

from .emitter import COMPUTE, I1, I32, I64, PTR, Emitter
from .gemm import host_shapes
from .kernels import OWN_GEMM

VOID = ir.VoidType()
MASKED_ROW_VECTORS = 8  # unfold rows of at most this many vectors are copied as whole masked vectors

# -- scatter-add ----------------------------------------------------------------------------------------

class ScatterKernel(Emitter):
    """index_add: zeros, then out[..., idx[j] mod size, ...] += g[..., j, ...] over g's elements in order.
    index_update: a copy of x, then out[..., idx[j], ...] = v[..., j, ...] in order (the last write wins)."""

    def emit(self):
        b = self.b
        n = self.k.nodes[0]
        out = self.program.access[n].owner
        if n.op == "index_update":
            x, idx, g = n.inputs
            axis = n.attrs["axis"]
            size = x.shape[axis]
            X = self.program.access[x]
            loops = [self.loop_begin(s, f"x{d}") for d, s in enumerate(n.shape)]
            c = [lp.index for lp in loops]
            at = self.linear(c, c_strides(n.shape, 1))
            self.store_at(out, at, self.load_at(X.owner, self.linear(c, X.strides, X.offset), x.dtype), n.dtype)
            for lp in reversed(loops):
                self.loop_end(lp)
        else:
            g, idx = n.inputs
            axis, size = n.attrs["axis"], n.attrs["size"]
            lp = self.loop_begin(max(n.size, 1), "zero")
            self.store_at(out, lp.index, self.constant(0, n.dtype), n.dtype)
            self.loop_end(lp)
        G, I = self.program.access[g], self.program.access[idx]
        loops = [self.loop_begin(s, f"g{d}") for d, s in enumerate(g.shape)]
        c = [lp.index for lp in loops]

        lin = self.linear
        j = self.load_at(I.owner, lin(c[axis:axis + idx.ndim], I.strides, I.offset), idx.dtype)
        j = b.sext(j, I64) if j.type.width < 64 else j
        sz = ir.Constant(I64, size)
        if n.op == "index_update":  # NumPy's indexing: negative counts from the end, out of range is an error
            j = b.select(b.icmp_signed("<", j, ir.Constant(I64, 0)), b.add(j, sz), j)
            bad = b.or_(b.icmp_signed("<", j, ir.Constant(I64, 0)), b.icmp_signed(">=", j, sz))
            self.flag_error(bad, n)
            j = b.select(bad, ir.Constant(I64, 0), j)
        else:  # the adjoint of take: positions modulo the size
            j = b.srem(j, sz)
            j = b.select(b.icmp_signed("<", j, ir.Constant(I64, 0)), b.add(j, sz), j)
        oc = c[:axis] + [j] + c[axis + idx.ndim:]
        at = lin(oc, c_strides(n.shape, 1))
        x = self.load_at(G.owner, lin(c, G.strides, G.offset), g.dtype)
        if n.op == "index_add":
            old = self.load_at(out, at, n.dtype)
            x = self.round_low_precision(b.fadd(old, x) if is_float(n.dtype) else b.add(old, x), n.dtype)
        self.store_at(out, at, x, n.dtype)
        for lp in reversed(loops):
            self.loop_end(lp)
        self.finish()


# -- cumsum -----------------------------------------------------------------------------------------------

class ScanKernel(Emitter):
    """cumsum along one axis: for each position of the outer axes, a sequential loop along the scanned axis
    (from its far end when `reverse`), each step adding a row of the inner axes (a vectorizable loop) to the
    previous row of the output, in NumPy's order (no reassociation), so results match np.cumsum."""

    def emit(self):
        b = self.b
        n = self.k.nodes[0]
        (x,) = n.inputs
        axis, reverse = n.attrs["axis"], n.attrs["reverse"]
        out, X = self.program.access[n].owner, self.program.access[x]
        length = n.shape[axis]
        ostr = c_strides(n.shape, 1)
        outer = [self.loop_begin(s, f"o{d}") for d, s in enumerate(n.shape[:axis])]
        oc = [lp.index for lp in outer]
        for first in (True, False):  # the first row is a copy; each later one adds the row before
            steps = 1 if first else length - 1
            lt = self.loop_begin(steps if length else 0, "first" if first else "t")
            t = lt.index if first else b.add(lt.index, ir.Constant(I64, 1), flags=["nuw", "nsw"])
            pos = b.sub(ir.Constant(I64, length - 1), t) if reverse else t
            inner = [self.loop_begin(s, f"i{d}") for d, s in enumerate(n.shape[axis + 1:], axis + 1)]
            c = oc + [pos] + [lp.index for lp in inner]
            v = self.load_at(X.owner, self.linear(c, X.strides, X.offset), x.dtype)
            if x.dtype != n.dtype:  # bool / int32 sums run in int64, as NumPy
                v = self.convert(v, x.dtype, n.dtype)
            at = self.linear(c, ostr)
            if not first:
                prev = b.add(at, ir.Constant(I64, ostr[axis] if reverse else -ostr[axis]))
                old = self.load_at(out, prev, n.dtype)
                v = self.round_low_precision(b.fadd(old, v) if is_float(n.dtype) else b.add(old, v), n.dtype)
            self.store_at(out, at, v, n.dtype)
            for lp in reversed(inner):
                self.loop_end(lp)
            self.loop_end(lt)
        for lp in reversed(outer):
            self.loop_end(lp)
        self.finish()


# -- unfold (im2col) and fold (col2im) --------------------------------------------------------------------

class WindowKernel(Emitter):
    """unfold: out[n, c, i, j, y, x] = x[n, c, y*sh + i*dh - ph, x*sw + j*dw - pw], or `value` in the padding.
    fold: zeros, then out[n, c, y*sh + i*dh - ph, x*sw + j*dw - pw] += cols[n, c, i, j, y, x] over (i, j)
    in order, as the NumPy reference adds its windows (positions in the padding are dropped). Per window
    offset (i, j), the rows and columns inside the image are a range computed once: the loops over them are
    branch-free (contiguous when the stride is 1), the padding a fill loop. The offsets are loops LLVM may not
    unroll (an unrolled 3x3 window nest was most of a CNN step's compile time)."""

    def emit(self):
        n = self.k.nodes[0]
        (src,) = n.inputs
        a = n.attrs
        self.n, self.src = n, src
        self.out, self.S = self.program.access[n].owner, self.program.access[src]
        image = src.shape if n.op == "unfold" else n.shape  # (N, C, H, W)
        cols = n.shape if n.op == "unfold" else src.shape   # (N, C, kh, kw, OH, OW)
        self.image, self.cols = image, cols
        kh, kw, OH, OW = cols[2:]
        H, W = image[2:]
        (sh, sw), (ph, pw), (dh, dw) = a["stride"], a["padding"], a["dilation"]
        b, c64 = self.b, (lambda v: ir.Constant(I64, v))
        images = self.part if self.split == "batch" else (c64(0), c64(cols[0]))  # this thread's (kernels.split_of)
        if n.op == "fold":  # (its images' part of the output, which is contiguous)
            per_image = c64(math.prod(image[1:]))
            lp = self.loop_range(b.mul(images[0], per_image), b.mul(images[1], per_image), "zero")
            self.store_at(self.out, lp.index, self.constant(0, n.dtype), n.dtype)
            self.loop_end(lp)
        loops = [self.loop_range(*images, "wn")] + [self.loop_begin(s, name) for s, name in
                                                     zip(cols[1:4], ("wc", "wi", "wj"))]
        self.nc = [lp.index for lp in loops[:2]]
        i, j = loops[2].index, loops[3].index
        dy = b.sub(b.mul(i, c64(dh)), c64(ph))  # the window's offset in the image (may be negative)
        dx = b.sub(b.mul(j, c64(dw)), c64(pw))
        (y0, y1), (x0, x1) = self.inside_range(dy, sh, H, OH), self.inside_range(dx, sw, W, OW)
        if n.op == "unfold":
            self.fill_rows(i, j, c64(0), y0, c64(0), c64(OW))
            self.fill_rows(i, j, y1, c64(OH), c64(0), c64(OW))
        if not (n.op == "unfold" and sw == 1 and self.whole_rows(i, j, (y0, y1), (x0, x1), sh, (dy, dx))):
            if n.op == "unfold":
                self.fill_rows(i, j, y0, y1, c64(0), x0)
                self.fill_rows(i, j, y0, y1, x1, c64(OW))
            self.window(i, j, (y0, y1), (x0, x1), (sh, sw), (dy, dx))
        for k, lp in enumerate(reversed(loops)):
            self.loop_end(lp, unroll=k >= 2)
        self.finish()

    def inside_range(self, offset, stride: int, size: int, count: int):
        """The positions o (0 <= o < count) whose pixel o * stride + offset lies in [0, size), as [lo, hi) (IR
        values; hi >= lo)."""
        b, c64 = self.b, (lambda v: ir.Constant(I64, v))

        def ceil_div(a):  # ceil(a / stride) for any sign of a (sdiv truncates toward zero)
            a = b.add(a, c64(stride - 1))
            return b.sdiv(b.select(b.icmp_signed("<", a, c64(0)), b.sub(a, c64(stride - 1)), a), c64(stride))

        def clamp(v, lo, hi):
            v = b.select(b.icmp_signed("<", v, lo), lo, v)
            return b.select(b.icmp_signed(">", v, hi), hi, v)
        lo = clamp(ceil_div(b.sub(c64(0), offset)), c64(0), c64(count))
        hi = clamp(ceil_div(b.sub(c64(size), offset)), lo, c64(count))
        return lo, hi

    def col_at(self, i, j, y, x):
        return self.linear(self.nc + [i, j, y, x], c_strides(self.cols, 1))

    def fill_rows(self, i, j, y0, y1, x0, x1) -> None:
        """unfold's padding: `value` at cols[n, c, i, j, y0:y1, x0:x1]."""
        ly = self.loop_range(y0, y1, "py")
        lx = self.loop_range(x0, x1, "px")
        self.store_at(self.out, self.col_at(i, j, ly.index, lx.index), self.constant(self.n.attrs["value"], self.n.dtype),
                      self.n.dtype)
        self.loop_end(lx, unroll=False)
        self.loop_end(ly)

    def whole_rows(self, i, j, ys, xs, sh: int, offsets) -> bool:
        """unfold with stride 1 along contiguous rows, float32/float64 on AVX2 or AVX-512: each row y of window
        (i, j) inside the image as whole vectors, OW columns in ceil(OW / L) masked loads (the source where it lies inside,
        [x0, x1), `value` elsewhere) and stores, the masks made once per window. (A loop over [x0, x1) became a
        memcpy call per row; one over all OW columns with the load under a branch, masks remade per vector.)
        False where it does not apply (the caller emits the loops)."""
        b, n = self.b, self.n
        OW, suffix = self.cols[-1], OWN_GEMM.get(n.dtype)  # (the types gemm.py has a vector shape for here)
        if suffix is None or self.S.strides[-1] != 1 or OW > MASKED_ROW_VECTORS * host_shapes()[suffix].lanes:
            return False  # (a source row must be contiguous: a view, a transposed input's, may not be)
        L, ty = host_shapes()[suffix].lanes, COMPUTE[n.dtype]
        vec, bits = ir.VectorType(ty, L), ir.VectorType(I1, L)
        declared = lambda name, ty: self.module.globals.get(name) or ir.Function(self.module, ty, name)
        load = declared(f"llvm.masked.load.v{L}{suffix}.p0", ir.FunctionType(vec, [PTR, I32, bits, vec]))
        store = declared(f"llvm.masked.store.v{L}{suffix}.p0", ir.FunctionType(VOID, [vec, PTR, I32, bits]))
        splat = lambda v, t: b.shuffle_vector(b.insert_element(ir.Constant(ir.VectorType(t, L), None), v,
                                                               ir.Constant(I32, 0)),
                                              ir.Constant(ir.VectorType(t, L), None), ir.Constant(ir.VectorType(I32, L), [0] * L))
        lo, hi = splat(b.trunc(xs[0], I32), I32), splat(b.trunc(xs[1], I32), I32)
        fill = ir.Constant(vec, [float(n.attrs["value"])] * L)
        align = ir.Constant(I32, n.dtype.itemsize)
        chunks = []
        for q in range(0, OW, L):
            x = ir.Constant(ir.VectorType(I32, L), list(range(q, q + L)))
            inside = b.and_(b.icmp_signed(">=", x, lo), b.icmp_signed("<", x, hi))
            chunks.append((q, inside, None if q + L <= OW else ir.Constant(bits, [q + k < OW for k in range(L)])))
        ly = self.loop_range(*ys, "y")
        y = ly.index
        row = b.add(b.mul(y, ir.Constant(I64, sh)), offsets[0])
        for q, inside, tail in chunks:
            at = self.linear(self.nc + [row, b.add(offsets[1], ir.Constant(I64, q))], self.S.strides, self.S.offset)
            # (not inbounds: a window's first vector may start before the image, masked off)
            src = b.gep(self.buffers[self.S.owner], [at], source_etype=ty)
            v = b.call(load, [src, align, inside, fill])
            dst = self.element_ptr(self.out, self.col_at(i, j, y, ir.Constant(I64, q)))
            if tail is None:
                b.store(v, dst, align=n.dtype.itemsize)
            else:
                b.call(store, [v, dst, align, tail])
        self.loop_end(ly)
        return True

    def window(self, i, j, ys, xs, strides, offsets) -> None:
        """The positions of window (i, j) inside the image: copied out (unfold) or added back (fold)."""
        b, n = self.b, self.n
        ly = self.loop_range(*ys, "y")
        lx = self.loop_range(*xs, "x")
        y, x = ly.index, lx.index
        row = b.add(b.mul(y, ir.Constant(I64, strides[0])), offsets[0])
        col = b.add(b.mul(x, ir.Constant(I64, strides[1])), offsets[1])
        pixel = self.nc + [row, col]
        if n.op == "unfold":
            v = self.load_at(self.S.owner, self.linear(pixel, self.S.strides, self.S.offset), self.src.dtype)
            self.store_at(self.out, self.col_at(i, j, y, x), v, n.dtype)
        else:
            v = self.load_at(self.S.owner, self.linear(self.nc + [i, j, y, x], self.S.strides, self.S.offset),
                             self.src.dtype)
            at = self.linear(pixel, c_strides(n.shape, 1))
            old = self.load_at(self.out, at, n.dtype)
            self.store_at(self.out, at, self.round_low_precision(b.fadd(old, v), n.dtype), n.dtype)
        self.loop_end(lx, unroll=False)
        self.loop_end(ly)
