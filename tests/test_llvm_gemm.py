"""gemm.py's packed matrix product, called directly: every size around its blocks (register tiles, packed
panels, K and N blocks), every layout (transposes, strided views), beta 0 and 1, float32 and float64, with the
host's blocking and the AVX2 one, against NumPy in float64; and its results do not depend on the blocking or
on how a product's rows are split between threads (each element of C is one chain of fused multiply-adds in
k order), so they are the same on any x86 CPU with AVX2."""

from __future__ import annotations

import ctypes
import functools

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gradir.backends.llvm import backend, gemm, jit

pytestmark = pytest.mark.skipif(gemm.host_shapes() is None, reason="gradir's gemm needs AVX2 and FMA")

I64, P = ctypes.c_int64, ctypes.c_void_p
SIGNATURE = ctypes.CFUNCTYPE(None, I64, I64, I64, P, I64, I64, P, I64, I64, P, I64, I64, I64, P)
AVX2 = gemm.blocking(256)  # what a CPU with AVX2 but not AVX-512 runs (the instructions run here too)


@functools.cache
def module(suffix: str, blocking: str):
    """The host's module (as kernels' modules use it) or one built with the AVX2 blocking."""
    if blocking == "host":
        return backend.gemm_module(suffix)
    gemm.runtime()
    return jit.JitModule.from_ir(gemm.gemm_ir(suffix, AVX2[suffix]))


def product(a, b, c, beta, blocking="host", rows=None, entry="gemm"):
    """C[..., :rows, :] = A[..., :rows, :] @ B + beta * C[..., :rows, :] through gradir_gemm_f32/f64 (`entry`
    "dot": gradir_dot_f32/f64) on the arrays' own strides, over their batch axes (A's, B's and C's leading axes:
    broadcast ones have stride 0)."""
    suffix = {np.float32: "f32", np.float64: "f64"}[a.dtype.type]
    fn = SIGNATURE(module(suffix, blocking).address(f"gradir_{entry}_{suffix}"))
    e = a.itemsize
    batch = np.array([(n, sa // e, sb // e, sc // e) for n, sa, sb, sc in
                      zip(c.shape[:-2], a.strides[:-2], b.strides[:-2], c.strides[:-2])], np.int64).reshape(-1)
    fn(a.shape[-2] if rows is None else rows, b.shape[-1], a.shape[-1], a.ctypes.data, a.strides[-2] // e,
       a.strides[-1] // e, b.ctypes.data, b.strides[-2] // e, b.strides[-1] // e, c.ctypes.data,
       c.strides[-2] // e, beta, c.ndim - 2, batch.ctypes.data)


def operand(rng, rows, cols, dt, layout):
    """A rows x cols matrix laid out 'row' (C order), 'col' (a transpose) or 'strided' (every other column)."""
    if layout == "col":
        return np.ascontiguousarray(rng.standard_normal((cols, rows)).astype(dt)).T
    if layout == "strided":
        return rng.standard_normal((rows, 2 * cols)).astype(dt)[:, ::2]
    return rng.standard_normal((rows, cols)).astype(dt)


def check(M, N, K, dt, la, lb, beta, blocking, seed=0):
    rng = np.random.default_rng(seed)
    a, b = operand(rng, M, K, dt, la), operand(rng, K, N, dt, lb)
    c0 = rng.standard_normal((M, N)).astype(dt)
    c = c0.copy()
    product(a, b, c, beta, blocking)
    want = a.astype(np.float64) @ b.astype(np.float64) + beta * c0.astype(np.float64)
    # each element: K fused multiply-adds and an add, each rounding once
    bound = (K + 2) * np.finfo(dt).eps * (np.abs(a).astype(np.float64) @ np.abs(b) + np.abs(c0) * beta)
    assert np.all(np.abs(c - want) <= bound), (M, N, K, dt, la, lb, beta, blocking)
    return a, b, c0, c


SIZES = st.one_of(st.integers(1, 40), st.sampled_from([47, 48, 49, 63, 64, 65, 255, 256, 257, 481, 600]))


@given(M=SIZES, N=SIZES, K=st.one_of(st.just(0), SIZES), dt=st.sampled_from([np.float32, np.float64]),
       la=st.sampled_from(["row", "col", "strided"]), lb=st.sampled_from(["row", "col", "strided"]),
       beta=st.sampled_from([0, 1]), blocking=st.sampled_from(["host", "avx2"]))
@settings(deadline=None)  # (the first call compiles the module)
@example(M=16, N=1024, K=144, dt=np.float32, la="row", lb="col", beta=0, blocking="host")  # a CNN weight grad
@example(M=9, N=600, K=257, dt=np.float64, la="col", lb="col", beta=1, blocking="host")  # two N and K blocks
@example(M=13, N=50, K=37, dt=np.float32, la="row", lb="col", beta=0, blocking="avx2")  # both in-register
@example(M=13, N=50, K=37, dt=np.float64, la="row", lb="col", beta=1, blocking="avx2")  # transposes, AVX2
@example(M=3, N=5, K=0, dt=np.float32, la="row", lb="row", beta=0, blocking="host")  # an empty sum is zero
def test_every_size_and_layout_matches_numpy_in_float64(M, N, K, dt, la, lb, beta, blocking):
    if M * N * K > 600 * 600 * 40:
        K = 40
    check(M, N, K, dt, la, lb, beta, blocking)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_results_do_not_depend_on_the_blocking_or_on_splitting_the_rows(dt):
    """Bit for bit: AVX-512 against AVX2 blocking (other tiles and panels), and C computed in two pieces of rows
    (what two threads do) against one piece."""
    M, N, K = 37, 530, 300
    a, b, c0, whole = check(M, N, K, dt, "row", "col", 1, "host")
    other = c0.copy()
    product(a, b, other, 1, "avx2")
    np.testing.assert_array_equal(other, whole)
    pieces = c0.copy()
    product(a[:13], b, pieces[:13], 1, rows=13)
    product(a[13:], b, pieces[13:], 1, rows=M - 13)
    np.testing.assert_array_equal(pieces, whole)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_a_batched_call_is_the_products_one_by_one(dt):
    """One call over a batch of two axes (attention's batch and heads): a strided A viewed as (B, H, T, d) of a
    (B, T, H, d) buffer, a B broadcast over the first axis (stride 0), an empty sum and an empty batch; bit for bit
    the calls one element at a time, and within rounding NumPy's float64 product."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 70, 4, 40)).astype(dt).transpose(0, 2, 1, 3)
    b = np.broadcast_to(rng.standard_normal((4, 40, 50)).astype(dt), (3, 4, 40, 50))
    c0 = rng.standard_normal((3, 4, 70, 50)).astype(dt)
    batched, one_by_one = c0.copy(), c0.copy()
    product(a, b, batched, 1)
    for i in range(3):
        for h in range(4):
            product(a[i, h], b[i, h], one_by_one[i, h], 1)
    np.testing.assert_array_equal(batched, one_by_one)
    want = a.astype(np.float64) @ b.astype(np.float64) + c0
    np.testing.assert_allclose(batched, want, rtol=0, atol=50 * np.finfo(dt).eps * np.abs(want).max())
    empty = np.full((3, 4, 70, 50), np.nan, dt)
    product(a[..., :0], b[:, :, :0], empty, 0)
    np.testing.assert_array_equal(empty, 0)
    nothing = np.full((0, 4, 70, 50), np.nan, dt)
    product(a[:0], b[:0], nothing, 0)  # no batch elements: nothing to do (and no crash)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_a_b_read_in_place_gives_the_packed_products_bits(dt):
    """Few rows of A (at most DIRECT_ROWS tiles) and B's rows contiguous: B is read where it is, not packed, except
    a last panel ending in a partial vector. The same B in a strided copy (packed) gives the same bits."""
    rng = np.random.default_rng(5)
    M, N, K = gemm.DIRECT_ROWS * gemm.host_shapes()["f32"].mr, 1000, 300  # two K blocks, a partial last panel
    a, c0 = rng.standard_normal((M, K)).astype(dt), rng.standard_normal((M, N)).astype(dt)
    b = rng.standard_normal((K, N)).astype(dt)
    strided = np.zeros((K, 2 * N), dt)[:, ::2]
    strided[...] = b
    in_place, packed = c0.copy(), c0.copy()
    product(a, b, in_place, 1)
    product(a, strided, packed, 1)
    np.testing.assert_array_equal(in_place, packed)
    np.testing.assert_allclose(in_place, a.astype(np.float64) @ b + c0, rtol=1e-4 if dt == np.float32 else 1e-12,
                               atol=1e-3 if dt == np.float32 else 1e-10)


@given(M=st.integers(1, 40), N=st.integers(1, 40), K=st.one_of(st.integers(0, 40), st.sampled_from([255, 256, 1000])),
       dt=st.sampled_from([np.float32, np.float64]), beta=st.sampled_from([0, 1]))
@settings(deadline=None)
@example(M=16, N=144, K=1024, dt=np.float32, beta=0)  # a CNN weight gradient, one image
@example(M=5, N=7, K=3, dt=np.float64, beta=1)        # no vector part: the tail only
def test_dot_products_of_contiguous_rows_match_numpy_and_any_split_or_cpu(M, N, K, dt, beta):
    """gradir_dot (A's rows and B's columns contiguous along k): within the error bound of NumPy's float64 product;
    bit for bit the same with the AVX2 module (its logical vectors are the same) and computed in two row pieces."""
    rng = np.random.default_rng(M * 1000 + N)
    a, b = rng.standard_normal((M, K)).astype(dt), np.ascontiguousarray(rng.standard_normal((N, K)).astype(dt)).T
    c0 = rng.standard_normal((M, N)).astype(dt)
    c = c0.copy()
    product(a, b, c, beta, entry="dot")
    want = a.astype(np.float64) @ b.astype(np.float64) + beta * c0.astype(np.float64)
    bound = (K + 2) * np.finfo(dt).eps * (np.abs(a).astype(np.float64) @ np.abs(b) + np.abs(c0) * beta)
    assert np.all(np.abs(c - want) <= bound)
    other = c0.copy()
    product(a, b, other, beta, "avx2", entry="dot")
    np.testing.assert_array_equal(other, c)
    pieces, cut = c0.copy(), M // 2
    product(a[:cut], b, pieces[:cut], beta, rows=cut, entry="dot")
    product(a[cut:], b, pieces[cut:], beta, rows=M - cut, entry="dot")
    np.testing.assert_array_equal(pieces, c)
