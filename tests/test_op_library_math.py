"""The elementwise math, logic and creation ops of issue 21 (gradir/ops/special.py, addmm/baddbmm in linalg.py)
against PyTorch in float64 with the shared oracle: value, VJP, JVP, and the LLVM backend against NumPy. Each op
runs on a 0-d input, (5,), (3, 4) and a size-1 or empty case; second order against torch's double backward;
the numerical claims (erfc for large x, sinh near 0, logaddexp without overflow) against SciPy/NumPy; torch's
gradient conventions at the special points; the errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special as sc
import torch
from torch_oracle import check_op

import gradir as gr
from gradir.core.errors import AxisError, DTypeError, ShapeError, UnsupportedOpError

SHAPES = [(), (5,), (3, 4), (1, 4), (0, 3)]
SHAPE_IDS = ["0d", "5", "3x4", "1x4", "empty"]


def normal(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def uniform(lo, hi):
    def draw(shape, seed=0):
        return np.random.default_rng(seed).uniform(lo, hi, shape)
    return draw


def off_integers(shape, seed=0):  # |x| in [0.1, 3] and at least 0.1 from an integer (trunc's jumps)
    r = np.random.default_rng(seed)
    return r.choice([-1.0, 1.0], shape) * (r.integers(0, 3, shape) + r.uniform(0.1, 0.9, shape))


unit = uniform(-0.9, 0.9)  # inside (-1, 1): arcsin, arccos, arctanh, erfinv
positive = uniform(0.2, 3.0)  # lgamma, digamma, polygamma away from their poles; logs
above_one = uniform(1.1, 3.0)  # arccosh
probability = uniform(0.05, 0.95)  # logit

# name, gradir function, torch function, input sampler, rtol
UNARY = [
    ("log2", gr.log2, torch.log2, positive, 1e-12),
    ("log10", gr.log10, torch.log10, positive, 1e-12),
    ("exp2", gr.exp2, torch.exp2, normal, 1e-12),
    ("sinh", gr.sinh, torch.sinh, normal, 1e-12),
    ("cosh", gr.cosh, torch.cosh, normal, 1e-12),
    ("arcsin", gr.arcsin, torch.asin, unit, 1e-12),
    ("arccos", gr.arccos, torch.acos, unit, 1e-12),
    ("arctan", gr.arctan, torch.atan, normal, 1e-12),
    ("arcsinh", gr.arcsinh, torch.asinh, normal, 1e-12),
    ("arccosh", gr.arccosh, torch.acosh, above_one, 1e-12),
    ("arctanh", gr.arctanh, torch.atanh, unit, 1e-12),
    ("erfc", gr.erfc, torch.erfc, normal, 1e-12),
    ("erfinv", gr.erfinv, torch.erfinv, unit, 1e-10),
    ("lgamma", gr.lgamma, torch.lgamma, positive, 1e-10),
    # torch's trigamma (digamma's derivative, polygamma(1, .)) is accurate to about 5e-10, SciPy's to 1e-15
    # (test_trigamma_against_mpmath): the rtol of these two is torch's
    ("digamma", gr.digamma, torch.digamma, positive, 2e-9),
    ("polygamma1", lambda x: gr.polygamma(1, x), lambda x: torch.polygamma(1, x), positive, 2e-9),
    ("polygamma2", lambda x: gr.polygamma(2, x), lambda x: torch.polygamma(2, x), positive, 1e-10),
    ("polygamma0", lambda x: gr.polygamma(0, x), lambda x: torch.polygamma(0, x), positive, 2e-9),
    ("trunc", gr.trunc, torch.trunc, off_integers, 1e-12),  # piecewise constant: derivative zero, as torch
    ("logit", gr.logit, torch.logit, probability, 1e-12),
    ("logit_eps", lambda x: gr.logit(x, eps=0.2), lambda x: torch.logit(x, eps=0.2), probability, 1e-12),
    ("clone", gr.clone, torch.clone, normal, 1e-12),
    ("copy", lambda x: gr.copy(x) * 2.0, lambda x: x.clone() * 2.0, normal, 1e-12),
    ("isnan", gr.isnan, torch.isnan, normal, 0),
    ("isinf", gr.isinf, torch.isinf, normal, 0),
    ("nan_to_num", gr.nan_to_num, torch.nan_to_num, normal, 1e-12),
    ("zeros_like", gr.zeros_like, torch.zeros_like, normal, 0),
    ("ones_like", gr.ones_like, torch.ones_like, normal, 0),
    ("full_like", lambda x: gr.full_like(x, 2.5), lambda x: torch.full_like(x, 2.5), normal, 0),
]


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("name, gfn, tfn, draw, rtol", UNARY, ids=[u[0] for u in UNARY])
def test_unary_against_torch(name, gfn, tfn, draw, rtol, shape):
    check_op(gfn, tfn, draw(shape), rtol=rtol, atol=1e-12, backends=shape == (3, 4))


def _with_specials(shape):
    x = normal(shape)
    flat = x.reshape(-1)
    flat[: 3] = [math.nan, math.inf, -math.inf][: flat.size]
    return x


SPECIALS = [  # NaN and infinities in the input: replaced or tested, the gradient zero there (as torch)
    ("nan_to_num", gr.nan_to_num, torch.nan_to_num),
    ("nan_to_num_args", lambda x: gr.nan_to_num(x, nan=1.5, posinf=9.0, neginf=-7.0),
     lambda x: torch.nan_to_num(x, nan=1.5, posinf=9.0, neginf=-7.0)),
    ("isnan", gr.isnan, torch.isnan),
    ("isinf", gr.isinf, torch.isinf),
]


@pytest.mark.parametrize("shape", [(3,), (3, 4)], ids=["3", "3x4"])
@pytest.mark.parametrize("name, gfn, tfn", SPECIALS, ids=[s[0] for s in SPECIALS])
def test_nan_and_inf_inputs(name, gfn, tfn, shape):
    check_op(gfn, tfn, _with_specials(shape), backends=shape == (3, 4), jvp=False)


def _lerp_args(shape):
    return normal(shape, 1), normal(shape, 2), uniform(-0.5, 1.5)(shape, 3)  # weights either side of 1/2


def _pair(a, b):
    def args(shape):
        return a(shape, 1), b(shape, 2)
    return args


def _away_from_multiples(shape):  # x / y at least 0.1 from an integer: fmod's jumps
    y = uniform(0.5, 2.0)(shape, 2) * np.random.default_rng(4).choice([-1.0, 1.0], shape)
    return off_integers(shape, 1) * np.abs(y), y


def _xlogy_args(shape):
    x, y = normal(shape, 1), positive(shape, 2)
    x.reshape(-1)[::2] = 0.0  # x == 0: the value is 0, d/dx is log(y)
    return x, y


# name, gradir function, torch function, (shape -> argument arrays), rtol
NARY = [
    ("arctan2", gr.arctan2, torch.atan2, _pair(normal, normal), 1e-12),
    ("fmod", gr.fmod, torch.fmod, _away_from_multiples, 1e-12),
    ("logaddexp", gr.logaddexp, torch.logaddexp, _pair(normal, normal), 1e-12),
    ("xlogy", gr.xlogy, torch.xlogy, _xlogy_args, 1e-12),
    ("lerp", gr.lerp, torch.lerp, _lerp_args, 1e-12),
    ("lerp_scalar", lambda a, b: gr.lerp(a, b, 0.3), lambda a, b: torch.lerp(a, b, 0.3), _pair(normal, normal), 1e-12),
    ("addcmul", lambda a, b, c: gr.addcmul(a, b, c, value=0.5), lambda a, b, c: torch.addcmul(a, b, c, value=0.5),
     lambda s: (normal(s, 1), normal(s, 2), normal(s, 3)), 1e-12),
    ("addcdiv", lambda a, b, c: gr.addcdiv(a, b, c, value=-2.0), lambda a, b, c: torch.addcdiv(a, b, c, value=-2.0),
     lambda s: (normal(s, 1), normal(s, 2), positive(s, 3)), 1e-12),
    ("addcdiv_value1", gr.addcdiv, torch.addcdiv, lambda s: (normal(s, 1), normal(s, 2), positive(s, 3)), 1e-12),
]


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("name, gfn, tfn, args, rtol", NARY, ids=[n[0] for n in NARY])
def test_nary_against_torch(name, gfn, tfn, args, rtol, shape):
    check_op(gfn, tfn, *args(shape), rtol=rtol, atol=1e-12, backends=shape == (3, 4))


BROADCAST = [  # operands of different shapes: the gradient of the smaller one is summed over the broadcast axes
    ("arctan2", gr.arctan2, torch.atan2, (normal((3, 4), 1), normal((4,), 2))),
    ("fmod", gr.fmod, torch.fmod, (off_integers((3, 4), 1) * 1.5, np.array([1.5, -1.5, 1.5, -1.5]))),
    ("logaddexp", gr.logaddexp, torch.logaddexp, (normal((3, 1), 1), normal((1, 4), 2))),
    ("xlogy", gr.xlogy, torch.xlogy, (normal((3, 4), 1), positive((4,), 2))),
    ("lerp", gr.lerp, torch.lerp, (normal((3, 4), 1), normal((4,), 2), uniform(-0.5, 1.5)((3, 1), 3))),
    ("addcmul", gr.addcmul, torch.addcmul, (normal((4,), 1), normal((3, 1), 2), normal((3, 4), 3))),
]


@pytest.mark.parametrize("name, gfn, tfn, args", BROADCAST, ids=[b[0] for b in BROADCAST])
def test_broadcasting_against_torch(name, gfn, tfn, args):
    check_op(gfn, tfn, *args, backends=False)


def test_equal_operands_of_logaddexp():
    """x == y, infinite ones included: the value without inf - inf, half the gradient to each operand (as torch)."""
    x = np.array([0.5, -2.0, 1000.0, -1000.0])
    check_op(gr.logaddexp, torch.logaddexp, x, x.copy())
    x = np.array([-math.inf, math.inf, -math.inf, 3.0])
    y = np.array([-math.inf, math.inf, 2.0, math.inf])
    np.testing.assert_array_equal(gr.logaddexp(x, y), np.logaddexp(x, y))
    big = gr.logaddexp(np.array([1000.0, -1000.0]), np.array([999.0, -1001.0]))  # no overflow, no underflow
    np.testing.assert_allclose(big, [1000.0 + math.log1p(math.exp(-1)), -1000.0 + math.log1p(math.exp(-1))], rtol=1e-15)


def test_floor_divide_is_integer_valued_with_zero_derivative():
    x, y = normal((3, 4), 1) * 5, normal((4,), 2)
    want = torch.floor_divide(torch.tensor(x), torch.tensor(y)).numpy()
    np.testing.assert_array_equal(gr.floor_divide(x, y), want)
    np.testing.assert_array_equal(gr.floor_divide(x, y), x // y)
    gx, gy = gr.grad(lambda a, b: gr.sum(gr.floor_divide(a, b)), argnums=(0, 1))(x, y)
    assert not np.any(gx) and not np.any(gy) and gy.shape == (4,)
    # torch.floor_divide has no autograd formula ("derivative for aten::floor_divide is not implemented");
    # torch.div(..., rounding_mode="floor") is the same function (values asserted equal here) and has one: zero
    # in reverse and forward mode. The oracle compares value, VJP (against torch.autograd) and JVP (against
    # torch.func.jvp, exactly: no central differences) with it, and LLVM against NumPy.
    t_floor = lambda a, b: torch.div(a, b, rounding_mode="floor")  # noqa: E731
    assert torch.equal(t_floor(torch.tensor(x), torch.tensor(y)), torch.floor_divide(torch.tensor(x), torch.tensor(y)))
    check_op(gr.floor_divide, t_floor, x, y)
    check_op(gr.floor_divide, t_floor, normal((), 3) * 5, normal((1, 4), 4))  # 0-d against a size-1 axis
    i, j = np.array([7, -7, 7, -7, 0]), np.array([2, 2, -2, -2, 3])
    out = gr.floor_divide(i, j)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, torch.floor_divide(torch.tensor(i), torch.tensor(j)).numpy())
    c = gr.compile(lambda a, b: gr.floor_divide(a, b), backend="llvm")
    np.testing.assert_array_equal(c(x, y), x // y)


@pytest.mark.parametrize("op", ["any", "all"])
@pytest.mark.parametrize("axis, keepdims", [(None, False), (0, False), (1, True), ((0, 2), False), (-1, True)])
def test_any_all_against_torch(op, axis, keepdims):
    x = (np.random.default_rng(5).random((2, 3, 4)) > 0.7) * normal((2, 3, 4))
    x[1] = 1.0  # a slice with no zeros: all() is True there
    x[0, 0, 0] = math.nan  # NaN is nonzero
    gfn = lambda a: getattr(gr, op)(a, axis=axis, keepdims=keepdims)  # noqa: E731
    t = torch.tensor(x)
    if axis is None:
        want = getattr(torch, op)(t)
    else:
        want = getattr(torch, op)(t, dim=axis, keepdim=keepdims)
    got = gfn(x)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, want.numpy())
    np.testing.assert_array_equal(got, getattr(np, op)(x, axis=axis, keepdims=keepdims))
    check_op(gfn, lambda a: want, x)  # a bool result: compared by value, no cotangent; LLVM against NumPy


@pytest.mark.parametrize("op", ["any", "all"])
def test_any_all_edges(op):
    for x in (np.zeros((0, 3)), np.array(0.0), np.array(2.5), np.array([True, False]), np.arange(4)):
        for axis in (None, 0) if np.ndim(x) else (None,):
            np.testing.assert_array_equal(getattr(gr, op)(x, axis=axis), getattr(np, op)(x, axis=axis))
    with pytest.raises(AxisError):
        getattr(gr, op)(np.ones((2, 3)), axis=2)


# -- addmm, baddbmm ---------------------------------------------------------------------------------------------
PRODUCTS = [
    ("addmm", lambda i, a, b: gr.addmm(i, a, b), torch.addmm, [(3, 4), (3, 5), (5, 4)]),
    ("addmm_row_input", lambda i, a, b: gr.addmm(i, a, b, beta=0.5, alpha=-2.0),
     lambda i, a, b: torch.addmm(i, a, b, beta=0.5, alpha=-2.0), [(4,), (3, 5), (5, 4)]),
    ("addmm_0d_input", lambda i, a, b: gr.addmm(i, a, b, alpha=3.0), lambda i, a, b: torch.addmm(i, a, b, alpha=3.0),
     [(), (1, 2), (2, 1)]),
    ("addmm_beta0", lambda i, a, b: gr.addmm(i, a, b, beta=0), lambda i, a, b: torch.addmm(i, a, b, beta=0),
     [(3, 4), (3, 5), (5, 4)]),
    ("addmm_empty", gr.addmm, torch.addmm, [(3, 4), (3, 0), (0, 4)]),
    ("baddbmm", gr.baddbmm, torch.baddbmm, [(2, 3, 4), (2, 3, 5), (2, 5, 4)]),
    ("baddbmm_args", lambda i, a, b: gr.baddbmm(i, a, b, beta=-1.5, alpha=0.25),
     lambda i, a, b: torch.baddbmm(i, a, b, beta=-1.5, alpha=0.25), [(3, 1), (2, 3, 5), (2, 5, 4)]),
    ("baddbmm_batch1", gr.baddbmm, torch.baddbmm, [(1, 1, 1), (1, 1, 2), (1, 2, 1)]),
]


@pytest.mark.parametrize("name, gfn, tfn, shapes", PRODUCTS, ids=[p[0] for p in PRODUCTS])
def test_fused_products_against_torch(name, gfn, tfn, shapes):
    check_op(gfn, tfn, *[normal(s, k) for k, s in enumerate(shapes)], backends=name in ("addmm", "baddbmm_args"))


def test_addmm_beta0_ignores_nan_in_input():
    i = np.full((2, 2), math.nan)
    a, b = normal((2, 3), 1), normal((3, 2), 2)
    np.testing.assert_allclose(gr.addmm(i, a, b, beta=0), a @ b, rtol=1e-15)
    gi = gr.grad(lambda i: gr.sum(gr.addmm(i, a, b, beta=0)))(i)
    np.testing.assert_array_equal(gi, np.zeros((2, 2)))


def test_fused_product_errors():
    with pytest.raises(ShapeError, match="2-d"):
        gr.addmm(np.zeros((2, 2)), np.zeros((1, 2, 3)), np.zeros((1, 3, 2)))
    with pytest.raises(ShapeError, match="3-d"):
        gr.baddbmm(np.zeros((2, 2)), np.zeros((2, 3)), np.zeros((3, 2)))
    with pytest.raises(ShapeError, match="broadcast"):
        gr.addmm(np.zeros((3,)), np.zeros((2, 3)), np.zeros((3, 2)))
    with pytest.raises(ShapeError, match="broadcast"):
        gr.addmm(np.zeros((2, 2, 2)), np.zeros((2, 3)), np.zeros((3, 2)))


# -- second order ----------------------------------------------------------------------------------------------------
SECOND = [
    ("lgamma", gr.lgamma, torch.lgamma, [0.3, 1.0, 2.5, 7.0]),
    ("digamma", gr.digamma, torch.digamma, [0.3, 1.0, 2.5, 7.0]),
    ("erfinv", gr.erfinv, torch.erfinv, [-0.8, -0.1, 0.0, 0.5, 0.95]),
    ("polygamma1", lambda x: gr.polygamma(1, x), lambda x: torch.polygamma(1, x), [0.4, 1.5, 4.0]),
    ("erfc", gr.erfc, torch.erfc, [-1.5, 0.0, 0.7, 3.0]),
    ("sinh", gr.sinh, torch.sinh, [-2.0, 1e-8, 0.5]),
    ("cosh", gr.cosh, torch.cosh, [-2.0, 1e-8, 0.5]),
    ("arctanh", gr.arctanh, torch.atanh, [-0.7, 0.0, 0.4]),
    ("arcsin", gr.arcsin, torch.asin, [-0.7, 0.0, 0.4]),
    ("arccosh", gr.arccosh, torch.acosh, [1.2, 3.0]),
    ("log2", gr.log2, torch.log2, [0.5, 3.0]),
    ("xlogy_y", lambda y: gr.xlogy(1.5, y), lambda y: torch.xlogy(torch.tensor(1.5, dtype=y.dtype), y), [0.5, 3.0]),
]


@pytest.mark.parametrize("name, gfn, tfn, points", SECOND, ids=[s[0] for s in SECOND])
def test_second_derivative_against_torch_double_backward(name, gfn, tfn, points):
    for p in points:
        got = gr.grad(gr.grad(gfn))(p)
        x = torch.tensor(p, dtype=torch.float64, requires_grad=True)
        (d1,) = torch.autograd.grad(tfn(x), x, create_graph=True)
        (d2,) = torch.autograd.grad(d1, x)
        # (2e-9: torch's trigamma, lgamma's second derivative, is accurate to about 5e-10)
        np.testing.assert_allclose(got, d2.item(), rtol=2e-9, atol=1e-12, err_msg=f"{name} at {p}")


def test_trigamma_against_mpmath():
    mpmath = pytest.importorskip("mpmath")
    x = np.array([0.05, 0.3, 1.0, 2.5, 13.0, 250.0])
    for n in (1, 2, 3):
        want = [float(mpmath.polygamma(n, v)) for v in x]
        np.testing.assert_allclose(gr.polygamma(n, x), want, rtol=1e-14)
    np.testing.assert_allclose(gr.grad(lambda v: gr.sum(gr.digamma(v)))(x), [float(mpmath.polygamma(1, v)) for v in x],
                               rtol=1e-14)


def test_third_derivative_of_lgamma_is_polygamma2():
    x = np.array([0.5, 1.5, 6.0])
    d3 = gr.grad(gr.grad(gr.grad(gr.lgamma)))
    np.testing.assert_allclose([d3(v) for v in x], sc.polygamma(2, x), rtol=1e-12)
    # and through a VJP of a JVP (forward over reverse): digamma'' = polygamma(2, .)
    d1 = gr.grad(lambda v: gr.sum(gr.digamma(v)))
    _, d2 = gr.jvp(d1, (x,), (np.ones_like(x),))
    np.testing.assert_allclose(d2, sc.polygamma(2, x), rtol=1e-12)


# -- numerics -------------------------------------------------------------------------------------------------------
def test_erfc_stays_accurate_for_large_x():
    x = np.array([5.0, 10.0, 20.0, 26.0])  # 1 - erf(x) is 0 from about 6 on
    np.testing.assert_allclose(gr.erfc(x), sc.erfc(x), rtol=1e-14)
    assert np.all(gr.erfc(x) > 0)
    np.testing.assert_allclose(gr.grad(lambda v: gr.sum(gr.erfc(v)))(x), -2 / np.sqrt(np.pi) * np.exp(-x * x),
                               rtol=1e-14)


@pytest.mark.filterwarnings("ignore:overflow")  # (sinh(711) = inf, as NumPy's, which warns too)
def test_hyperbolic_functions_are_accurate_near_zero_and_far_out():
    x = np.array([1e-300, -1e-12, 3e-8, 0.02, -0.7, 20.0, -300.0, 709.5, 710.4, -710.4])
    np.testing.assert_allclose(gr.sinh(x), np.sinh(x), rtol=4e-16)
    np.testing.assert_allclose(gr.cosh(x), np.cosh(x), rtol=4e-16)
    np.testing.assert_allclose(gr.grad(lambda v: gr.sum(gr.cosh(v)))(x[:7]), np.sinh(x[:7]), rtol=4e-16)
    np.testing.assert_array_equal(gr.sinh(np.array([math.inf, -math.inf, 711.0])), [math.inf, -math.inf, math.inf])
    t = np.array([1e-300, -1e-12, 3e-8, 0.5, -0.999999, 0.9999999999])
    np.testing.assert_allclose(gr.arctanh(t), np.arctanh(t), rtol=4e-16)
    np.testing.assert_array_equal(gr.arctanh(np.array([1.0, -1.0])), [math.inf, -math.inf])


def test_powers_and_logs_in_other_bases_are_exact_where_numpy_is():
    np.testing.assert_array_equal(gr.log2(2.0 ** np.arange(-5, 60)), np.arange(-5, 60))
    np.testing.assert_array_equal(gr.log10(10.0 ** np.arange(0, 20)), np.arange(0, 20))
    np.testing.assert_array_equal(gr.exp2(np.arange(-20.0, 60.0)), 2.0 ** np.arange(-20.0, 60.0))
    assert gr.exp2(np.arange(3)).dtype == np.float64  # integers become float64, as numpy.exp2


def test_xlogy_follows_torch_at_zero():
    x = np.array([0.0, 0.0, 0.0, 0.0, 2.0, 0.0])
    y = np.array([2.0, 0.0, -1.0, math.nan, 0.0, math.inf])
    t = [torch.tensor(a, requires_grad=True) for a in (x, y)]
    out = torch.xlogy(*t)
    np.testing.assert_array_equal(gr.xlogy(x, y), out.detach().numpy())
    want = torch.autograd.grad(out.sum(), t)
    got = gr.grad(lambda a, b: gr.sum(gr.xlogy(a, b)), argnums=(0, 1))(x, y)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.numpy())


def test_logit_eps_clamps_and_zeroes_the_gradient_outside():
    x = np.array([0.0, 0.01, 0.2, 0.5, 0.8, 0.99, 1.0])
    t = torch.tensor(x, requires_grad=True)
    want = torch.logit(t, eps=0.2)
    (wg,) = torch.autograd.grad(want.sum(), t)
    np.testing.assert_allclose(gr.logit(x, eps=0.2), want.detach().numpy(), rtol=1e-15)
    np.testing.assert_allclose(gr.grad(lambda v: gr.sum(gr.logit(v, eps=0.2)))(x), wg.numpy(), rtol=1e-15)


def test_nan_to_num_defaults_follow_the_dtype_and_integers_pass():
    x = np.array([math.nan, math.inf, -math.inf, 1.5], np.float32)
    out = gr.nan_to_num(x)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, torch.nan_to_num(torch.tensor(x)).numpy())
    i = np.array([1, -2, 3])
    np.testing.assert_array_equal(gr.nan_to_num(i), i)
    assert not gr.isnan(i).any() and not gr.isinf(i).any()
    with pytest.raises(DTypeError, match="complex"):
        gr.nan_to_num(np.array([1 + 1j]))


def test_lerp_reaches_the_ends_exactly():
    a, b = normal((6,), 1), normal((6,), 2)
    np.testing.assert_array_equal(gr.lerp(a, b, 1.0), b)
    np.testing.assert_array_equal(gr.lerp(a, b, 0.0), a)
    w = uniform(0, 1)((6,), 3)
    gw = gr.grad(lambda w: gr.sum(gr.lerp(a, b, w)))(w)  # the weight is differentiable
    np.testing.assert_allclose(gw, b - a, rtol=1e-15)


# -- dtypes, aliases, methods, creation ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["erfc", "erfinv", "lgamma", "digamma", "log2", "arcsinh", "sinh", "arctanh"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, gr.bfloat16], ids=["f32", "f16", "bf16"])
def test_low_precision_stays_in_its_dtype(name, dtype):
    x = np.array([0.25, 0.5, 0.75]).astype(dtype)
    fn = getattr(gr, name)
    want = {"erfc": sc.erfc, "erfinv": sc.erfinv, "lgamma": sc.gammaln, "digamma": sc.psi}.get(name) or getattr(np, name)
    for backend in ("numpy", "llvm"):
        out = np.asarray(gr.compile(fn, backend=backend)(x))
        assert out.dtype == np.dtype(dtype), backend
        tol = {np.dtype(np.float32): 1e-6}.get(np.dtype(dtype), 1e-2)
        np.testing.assert_allclose(out.astype(np.float64), want(x.astype(np.float64)), rtol=tol, atol=tol)
    assert gr.compile(lambda v: gr.polygamma(1, v), backend="numpy")(x).dtype == np.dtype(dtype)


@pytest.mark.filterwarnings("ignore:divide by zero")  # (logit(1) = inf)
def test_integer_inputs_become_float64():
    i = np.arange(1, 4)
    for fn in (gr.log2, gr.sinh, gr.cosh, gr.arctan, gr.lgamma, gr.erfc, gr.logit, gr.trunc):
        assert fn(i).dtype == np.float64
    assert gr.arctan2(i, i).dtype == np.float64 and gr.logaddexp(i, i).dtype == np.float64
    assert gr.fmod(i, 2).dtype == np.int64
    np.testing.assert_array_equal(gr.fmod(np.array([-7, 7]), 3), np.fmod([-7, 7], 3))


def test_torch_aliases_are_the_numpy_functions():
    pairs = [("asin", "arcsin"), ("acos", "arccos"), ("atan", "arctan"), ("atan2", "arctan2"), ("asinh", "arcsinh"),
             ("acosh", "arccosh"), ("atanh", "arctanh"), ("clone", "copy")]
    for alias, name in pairs:
        assert getattr(gr, alias) is getattr(gr, name)
    for name in ("sinh", "erfc", "polygamma", "zeros_like", "addmm", "lerp", "nan_to_num", "any", "floor_divide"):
        assert getattr(gr, name).__doc__


def test_clone_is_a_new_value_an_inplace_write_does_not_reach_the_original():
    def f(x):
        y = x.clone()
        y += 1.0
        return x * y

    x = normal((3,), 1)
    np.testing.assert_allclose(gr.compile(f, backend="numpy")(x), x * (x + 1))
    np.testing.assert_allclose(gr.grad(lambda v: gr.sum(f(v)))(x), 2 * x + 1, rtol=1e-15)
    a = np.ones(2)
    b = gr.copy(a)
    b[0] = 5.0
    assert a[0] == 1.0  # a real copy of a concrete array


def test_value_methods():
    x = (normal((3, 4), 1) > 0) * 1.0

    def f(v):
        return v.any(axis=0), v.all(axis=1, keepdims=True), v.clone()
    got = gr.compile(f, backend="numpy")(x)
    np.testing.assert_array_equal(got[0], x.any(axis=0))
    np.testing.assert_array_equal(got[1], x.all(axis=1, keepdims=True))
    np.testing.assert_array_equal(got[2], x)
    t = gr.Tensor(x, requires_grad=True)
    (t.clone() * 3.0).sum().backward()
    np.testing.assert_array_equal(np.asarray(t.grad.data), np.full((3, 4), 3.0))


def test_like_constructors_follow_numpy():
    a = np.ones((2, 3), np.float32)
    assert gr.zeros_like(a).dtype == np.float32 and gr.zeros_like(a).shape == (2, 3)
    assert gr.ones_like(a, dtype=gr.int64).dtype == np.int64
    np.testing.assert_array_equal(gr.full_like(np.arange(3), 2.7), np.full_like(np.arange(3), 2.7))  # cast: 2
    np.testing.assert_array_equal(gr.full_like(2.0, 7), np.full_like(2.0, 7))
    g = gr.grad(lambda v: gr.sum(gr.zeros_like(v) + gr.full_like(v, 2.0) * v))(normal((2, 2)))
    np.testing.assert_array_equal(g, np.full((2, 2), 2.0))


def test_errors_name_the_op():
    with pytest.raises(UnsupportedOpError, match="polygamma"):
        gr.polygamma(-1, 1.0)
    with pytest.raises(DTypeError, match="polygamma"):
        gr.polygamma(1.5, 1.0)
    with pytest.raises(ShapeError, match="arctan2"):
        gr.arctan2(np.ones(3), np.ones(4))
    with pytest.raises(DTypeError, match="erfc"):
        gr.trace(gr.erfc, np.array([1 + 1j]))
