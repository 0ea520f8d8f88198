"""Linear algebra (issue 21): tensordot, inner, kron, cross and gr.linalg's inverses, solves and
decompositions, each against torch in float64 (value, VJP, JVP, and the LLVM backend against NumPy) on one
matrix, a batch (2, 3, 3) and 1x1 matrices; second order of inv, det and solve against torch double backward;
the errors. Losses on eigenvectors and singular vectors are gauge-invariant (sign flips cancel), as torch's
own tests write them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_ops import check_second_order
from torch_oracle import check_op

import gradir as gr
from gradir.core.errors import DTypeError, ExecutionError, ShapeError, UnsupportedOpError
from gradir.core.primitive import get_primitive

RNG = np.random.default_rng(21)
SQUARE = [(3, 3), (2, 3, 3), (1, 1)]  # one matrix, a batch, 1x1
RECT = [(4, 3), (3, 4), (2, 4, 3), (2, 3, 4), (1, 1)]  # tall, wide, batched, 1x1


def _normal(*shape):
    return RNG.standard_normal(shape)


def _well_conditioned(shape):
    """Invertible and far from singular: a random matrix plus n on the diagonal."""
    n = shape[-1]
    return _normal(*shape) + n * np.eye(n)


def _spd(shape):
    x = _normal(*shape)
    return x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])


def _gsym(a):
    return (a + gr.linalg.matrix_transpose(a)) / 2


def _tsym(a):
    return (a + a.mT) / 2


# -- tensordot, inner, kron, cross ---------------------------------------------------------------------
@pytest.mark.parametrize("sa, sb, axes", [((2, 3, 4), (3, 4, 5), 2), ((2, 3), (3, 4), 1), ((2, 3), (4,), 0),
                                          ((3, 4, 2), (2, 5, 3), ([0, 2], [2, 0])), ((4, 3), (4,), ([0], [0])),
                                          ((2, 3), (3, 2), ([], []))], ids=str)
def test_tensordot(sa, sb, axes):
    tdims = axes if isinstance(axes, int) else (list(axes[0]), list(axes[1]))
    check_op(lambda a, b: gr.tensordot(a, b, axes), lambda a, b: torch.tensordot(a, b, dims=tdims),
             _normal(*sa), _normal(*sb))


def test_tensordot_agrees_with_numpy_on_negative_axes():
    a, b = _normal(3, 4, 2), _normal(2, 3)
    np.testing.assert_allclose(gr.tensordot(a, b, ([-1, 0], [0, -1])), np.tensordot(a, b, ([-1, 0], [0, -1])))


@pytest.mark.parametrize("sa, sb", [((4,), (4,)), ((2, 4), (3, 4)), ((2, 3, 4), (4,)), ((), (2, 3))], ids=str)
def test_inner(sa, sb):
    check_op(gr.inner, torch.inner, _normal(*sa), _normal(*sb))


@pytest.mark.parametrize("sa, sb", [((2, 3), (3, 2)), ((3,), (2, 2)), ((2, 1, 2), (2, 3)), ((1, 1), (1,))], ids=str)
def test_kron(sa, sb):
    check_op(gr.kron, torch.kron, _normal(*sa), _normal(*sb))


@pytest.mark.parametrize("sa, sb, axis", [((3,), (3,), -1), ((4, 3), (4, 3), -1), ((4, 3), (1, 3), 1),
                                          ((3, 4), (3, 4), 0), ((2, 3, 1), (1, 3, 5), 1)], ids=str)
def test_cross(sa, sb, axis):
    check_op(lambda a, b: gr.cross(a, b, axis), lambda a, b: torch.linalg.cross(a, b, dim=axis),
             _normal(*sa), _normal(*sb))
    a, b = _normal(*sa), _normal(*sb)
    np.testing.assert_allclose(gr.cross(a, b, dim=axis), np.cross(a, b, axis=axis), rtol=1e-14)


def test_cross_of_ints_and_of_operands_of_different_ranks_matches_numpy():
    a, b = np.array([1, 2, 3]), np.array([4, 5, 7])
    out = gr.cross(a, b)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, np.cross(a, b))
    a, b = _normal(4, 3), _normal(3)  # torch.linalg.cross wants equal ranks; NumPy broadcasts
    np.testing.assert_allclose(gr.cross(a, b), np.cross(a, b), rtol=1e-14)


# -- inv, det, slogdet, solve --------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SQUARE, ids=str)
def test_inv(shape):
    check_op(gr.linalg.inv, torch.linalg.inv, _well_conditioned(shape))


@pytest.mark.parametrize("shape", SQUARE, ids=str)
def test_det(shape):
    a = _well_conditioned(shape)
    a[..., 0, :] *= -1  # a negative determinant too
    check_op(gr.linalg.det, torch.linalg.det, a)


@pytest.mark.parametrize("shape", SQUARE, ids=str)
def test_slogdet(shape):
    a = _well_conditioned(shape)
    if len(shape) == 3:
        a[0, 0, :] *= -1  # one negative determinant in the batch
    # the sign is compared by value; torch's tangent of the sign is a ZeroTensor, so the oracle checks logabsdet
    sign, logabs = gr.linalg.slogdet(a)
    want = torch.linalg.slogdet(torch.tensor(a))
    np.testing.assert_array_equal(sign, want.sign.numpy())
    np.testing.assert_allclose(logabs, want.logabsdet.numpy(), rtol=1e-13)
    check_op(lambda a: gr.linalg.slogdet(a)[1], lambda a: torch.linalg.slogdet(a)[1], a)


def test_det_of_a_singular_matrix_value_and_gradient_as_torch():
    """det is 0, and so is its gradient there (torch's convention: its formula scales by det; the true cofactor
    matrix of the rank-2 matrix is not 0); no error from the inverse the nonsingular formula takes."""
    a = np.array([[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.5, -1.0, 2.0]], [[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]]])
    got, vjp_fn = gr.vjp(gr.linalg.det, a)
    assert got[0] == 0.0
    ta = torch.tensor(a, requires_grad=True)
    torch.linalg.det(ta).sum().backward()
    np.testing.assert_allclose(vjp_fn(np.ones(2))[0], ta.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("sa, sb", [((3, 3), (3, 2)), ((2, 3, 3), (2, 3, 1)), ((1, 1), (1, 1)), ((3, 3), (3,)),
                                    ((2, 3, 3), (3,)), ((2, 3, 3), (3, 2)), ((3, 3), (2, 3, 4))], ids=str)
def test_solve(sa, sb):
    check_op(gr.linalg.solve, torch.linalg.solve, _well_conditioned(sa), _normal(*sb))


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("sa, sb", [((3, 3), (3, 2)), ((2, 3, 3), (2, 3, 2)), ((1, 1), (1, 1))], ids=str)
def test_solve_triangular(sa, sb, lower):
    """The other triangle is not read (its gradient is zero), as torch's."""
    a = _well_conditioned(sa)
    check_op(lambda a, b: gr.linalg.solve_triangular(a, b, lower=lower),
             lambda a, b: torch.linalg.solve_triangular(a, b, upper=not lower), a, _normal(*sb))


@pytest.mark.parametrize("left, unit", [(False, False), (True, True), (False, True)])
def test_solve_triangular_right_side_and_unit_diagonal(left, unit):
    a, b = _well_conditioned((2, 3, 3)), _normal(2, 4, 3) if not left else _normal(2, 3, 4)
    check_op(lambda a, b: gr.linalg.solve_triangular(a, b, lower=True, left=left, unit_diagonal=unit),
             lambda a, b: torch.linalg.solve_triangular(a, b, upper=False, left=left, unitriangular=unit), a, b)


def test_solve_triangular_of_a_vector_matches_scipy():
    scipy_linalg = pytest.importorskip("scipy.linalg")
    a, b = _well_conditioned((4, 4)), _normal(4)
    for lower in (True, False):
        np.testing.assert_allclose(gr.linalg.solve_triangular(a, b, lower=lower),
                                   scipy_linalg.solve_triangular(a, b, lower=lower), rtol=1e-12)


# -- second order ----------------------------------------------------------------------------------------
def test_second_order_inv_det_solve():
    rng = np.random.default_rng(5)
    a = _well_conditioned((3, 3))
    b = _normal(3, 2)
    check_second_order(gr.linalg.inv, torch.linalg.inv, a, rng)
    check_second_order(gr.linalg.det, torch.linalg.det, _well_conditioned((2, 3, 3)), rng)
    check_second_order(lambda a: gr.linalg.solve(a, b), lambda a: torch.linalg.solve(a, torch.tensor(b)), a, rng)
    check_second_order(lambda b: gr.linalg.solve(a * b[0, 0], b), lambda b: torch.linalg.solve(torch.tensor(a) * b[0, 0], b),
                       b, rng)


def test_second_order_logabsdet_cholesky_and_spectra():
    rng = np.random.default_rng(6)
    a = _spd((3, 3))
    check_second_order(lambda a: gr.linalg.slogdet(a)[1], lambda a: torch.linalg.slogdet(a)[1], a, rng)
    check_second_order(lambda a: gr.linalg.cholesky(_gsym(a)), lambda a: torch.linalg.cholesky(_tsym(a)), a, rng)
    check_second_order(lambda a: gr.linalg.eigvalsh(_gsym(a)), lambda a: torch.linalg.eigvalsh(_tsym(a)), a, rng)
    check_second_order(gr.linalg.svdvals, torch.linalg.svdvals, _normal(4, 3), rng)


# -- cholesky, qr ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SQUARE, ids=str)
def test_cholesky(shape):
    """Of the symmetric part: the gradient is symmetric (as torch), so a loss on the raw matrix would
    differ from torch's by where the off-diagonal cotangent goes."""
    check_op(lambda a: gr.linalg.cholesky(_gsym(a)), lambda a: torch.linalg.cholesky(_tsym(a)), _spd(shape))


def test_cholesky_upper_and_symmetric_gradient():
    a = _spd((3, 3))
    np.testing.assert_allclose(gr.linalg.cholesky(a, upper=True), np.linalg.cholesky(a).T, rtol=1e-14)
    g = gr.grad(lambda a: gr.sum(gr.linalg.cholesky(a) * np.arange(9.0).reshape(3, 3)))(a)
    np.testing.assert_allclose(g, g.T, rtol=1e-12)


@pytest.mark.parametrize("shape", RECT + [(3, 3), (2, 3, 3)], ids=str)
def test_qr(shape):
    """Q and R themselves: NumPy and torch both run LAPACK's Householder QR, so their signs agree."""
    check_op(gr.linalg.qr, torch.linalg.qr, _normal(*shape), rtol=1e-9, atol=1e-11)


def test_qr_mode_r():
    a = _normal(4, 3)
    np.testing.assert_allclose(gr.linalg.qr(a, mode="r"), np.linalg.qr(a, mode="r"), rtol=1e-14)


# -- eigh ------------------------------------------------------------------------------------------------------
EIGH_LOSSES = {  # gauge-invariant: eigenvalues, |V|^2, and V diag(f(w)) V^T
    "values": (lambda w, v: w, lambda w, v: w),
    "squared_vectors": (lambda w, v: v * v, lambda w, v: v * v),
    "function_of_matrix": (lambda w, v: (v * gr.exp(w)[..., None, :]) @ gr.linalg.matrix_transpose(v),
                           lambda w, v: (v * torch.exp(w)[..., None, :]) @ v.mT),
}


@pytest.mark.parametrize("loss", sorted(EIGH_LOSSES))
@pytest.mark.parametrize("shape", SQUARE, ids=str)
def test_eigh(shape, loss):
    gl, tl = EIGH_LOSSES[loss]
    check_op(lambda a: gl(*gr.linalg.eigh(_gsym(a))), lambda a: tl(*torch.linalg.eigh(_tsym(a))), _normal(*shape),
             rtol=1e-9, atol=1e-11)


def test_eigvalsh_and_eigh_values_agree_with_numpy():
    a = _spd((2, 4, 4))
    w, v = gr.linalg.eigh(a)
    np.testing.assert_allclose(w, np.linalg.eigvalsh(a), rtol=1e-13)
    np.testing.assert_allclose(gr.linalg.eigvalsh(a), w, rtol=1e-13)
    np.testing.assert_allclose((v * w[..., None, :]) @ np.swapaxes(v, -1, -2), a, rtol=1e-12, atol=1e-12)


# -- svd -------------------------------------------------------------------------------------------------------
SVD_LOSSES = {  # gauge-invariant: U diag(S) Vh, U Vh (the polar factor), S, |U|^2 and |Vh|^2
    "reconstruction": (lambda u, s, vh: (u * s[..., None, :]) @ vh, lambda u, s, vh: (u * s[..., None, :]) @ vh),
    "polar": (lambda u, s, vh: u @ vh, lambda u, s, vh: u @ vh),
    "values": (lambda u, s, vh: s, lambda u, s, vh: s),
    "squared_vectors": (lambda u, s, vh: (u * u, vh * vh), lambda u, s, vh: (u * u, vh * vh)),
}


@pytest.mark.parametrize("loss", sorted(SVD_LOSSES))
@pytest.mark.parametrize("shape", RECT + [(3, 3), (2, 3, 3)], ids=str)
def test_svd(shape, loss):
    gl, tl = SVD_LOSSES[loss]
    check_op(lambda a: gl(*gr.linalg.svd(a, full_matrices=False)),
             lambda a: tl(*torch.linalg.svd(a, full_matrices=False)), _normal(*shape), rtol=1e-9, atol=1e-11)


def test_svdvals_gradient_with_repeated_singular_values():
    """S alone needs no distinct values: the identity's gradient is U Vh = I."""
    np.testing.assert_allclose(gr.grad(lambda a: gr.sum(gr.linalg.svdvals(a)))(np.eye(3)), np.eye(3), atol=1e-14)
    s = gr.linalg.svd(np.eye(2) * 2.0, compute_uv=False)
    np.testing.assert_allclose(s, [2.0, 2.0])


# -- dtypes, compiled, eager ------------------------------------------------------------------------------------
def test_float32_stays_float32_and_ints_become_float64():
    a32 = _well_conditioned((3, 3)).astype(np.float32)
    for f in (gr.linalg.inv, gr.linalg.det, gr.linalg.cholesky, gr.linalg.eigvalsh, gr.linalg.svdvals):
        x = _spd((3, 3)).astype(np.float32) if f in (gr.linalg.cholesky, gr.linalg.eigvalsh) else a32
        assert f(x).dtype == np.float32, f
    assert gr.linalg.det(np.array([[2, 1], [1, 3]])).dtype == np.float64
    np.testing.assert_allclose(gr.linalg.det(np.array([[2, 1], [1, 3]])), 5.0)


@pytest.mark.parametrize("shape", [(0, 3, 3), (0, 0), (2, 0, 0)], ids=str)
def test_empty_batches_and_0x0_matrices(shape):
    x = np.zeros(shape)
    for f, want in ((gr.linalg.inv, np.linalg.inv), (gr.linalg.det, np.linalg.det),
                    (gr.linalg.eigvalsh, np.linalg.eigvalsh), (gr.linalg.svdvals, np.linalg.svdvals)):
        np.testing.assert_array_equal(f(x), want(x))
        assert gr.grad(lambda x: gr.sum(f(x)))(x).shape == shape


def test_compiled_and_eager_agree():
    a = _well_conditioned((2, 3, 3))

    def f(a):
        q, r = gr.linalg.qr(a)
        return gr.sum(gr.linalg.inv(a) * q) + gr.sum(gr.linalg.slogdet(a)[1])

    want = gr.grad(f)(a)
    np.testing.assert_allclose(gr.compile(gr.grad(f), backend="llvm")(a), want, rtol=1e-11)
    t = gr.Tensor(a, requires_grad=True)
    y = gr.sum(gr.linalg.inv(t) * gr.linalg.qr(t)[0]) + gr.sum(gr.linalg.slogdet(t)[1])
    y.backward()
    np.testing.assert_allclose(t.grad, want, rtol=1e-11)


def test_flops_and_kind():
    g = gr.trace(lambda a: gr.linalg.inv(a), _well_conditioned((2, 4, 4)))
    (node,) = [n for n in g.nodes if n.op == "inv"]
    prim = get_primitive("inv")
    assert prim.kind == "other" and prim.cost(node, node.inputs, node.attrs) == 2 * 2 * 4 ** 3


# -- errors ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [gr.linalg.inv, gr.linalg.det, gr.linalg.slogdet, gr.linalg.cholesky, gr.linalg.eigh,
                                gr.linalg.eigvalsh, lambda a: gr.linalg.solve(a, np.ones(3))])
def test_non_square_is_a_shape_error(fn):
    with pytest.raises(ShapeError, match=r"square matrices \(\.\.\., n, n\), got f64\[3,4\]"):
        fn(np.ones((3, 4)))
    with pytest.raises(ShapeError, match="needs matrices"):
        gr.trace(fn, np.ones(3))


def test_errors():
    with pytest.raises(DTypeError, match="real float32 or float64"):
        gr.linalg.inv(np.eye(2, dtype=np.complex128))
    with pytest.raises(UnsupportedOpError, match="full_matrices=False"):
        gr.linalg.svd(np.ones((3, 2)))
    with pytest.raises(UnsupportedOpError, match="complete"):
        gr.linalg.qr(np.ones((3, 2)), mode="complete")
    with pytest.raises(ShapeError, match="3-vectors"):
        gr.cross(np.ones(2), np.ones(2))
    with pytest.raises(ShapeError, match="differ in size"):
        gr.tensordot(np.ones((2, 3)), np.ones((2, 3)), 1)
    with pytest.raises(ShapeError, match="b must be"):
        gr.linalg.solve(np.eye(3), np.ones(2))
    with pytest.raises(ExecutionError, match="inv"):
        gr.linalg.inv(np.zeros((2, 2)))
    with pytest.raises(ShapeError, match="square"):  # the source line is the user's
        gr.trace(lambda a: gr.linalg.det(a), np.ones((2, 3)))


def test_namespace():
    assert gr.linalg.matmul is gr.matmul and gr.linalg.tensordot is gr.tensordot and gr.linalg.cross is gr.cross
    assert all(callable(getattr(gr.linalg, n)) and getattr(gr.linalg, n).__doc__ for n in gr.linalg.__all__)
