"""The op library against independent oracles.

Forward values and VJPs (random cotangents, through `gr.vjp`) are checked against PyTorch float64
autograd; JVPs (`gr.jvp`) against central finite differences, and the unary ops' also against
torch.func.jvp (torch's forward mode) in float64; second derivatives (grad of grad, and
forward-over-reverse) against torch double backward. NumPy indexing, whose negative steps torch lacks,
is checked against NumPy itself: the adjoint of ``x[index]`` scatters the cotangent onto the flat
positions ``arange(x.size).reshape(x.shape)[index]``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gradir as gr

RTOL, ATOL = 1e-10, 1e-12
pytestmark = pytest.mark.usefixtures("eager_backend")  # every test on the NumPy interpreter and on LLVM
HYP = settings(max_examples=25, deadline=None, derandomize=True)


# -- helpers ---------------------------------------------------------------------------------------
def assert_close(got, want, rtol=RTOL, atol=ATOL):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def sample(rng, shape, domain="any"):
    """Random float64 values in an op's smooth domain."""
    if domain == "pos":
        return rng.uniform(0.5, 2.0, shape)
    if domain == "nonzero":  # away from kinks at 0 (relu, abs) and poles (divide)
        return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.2, 2.0, shape)
    return rng.standard_normal(shape)


def _leaf(a):
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True)


def _flat(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


def check_vjp(gfn, tfn, args, rng, rtol=RTOL, atol=ATOL):
    """gr.vjp's output and cotangents against torch.autograd.grad with the same random cotangent."""
    out, vjp_fn = gr.vjp(gfn, *args)
    leaves = [_leaf(a) for a in args]
    t_out = _flat(tfn(*leaves))
    cts = [rng.standard_normal(tuple(o.shape)) for o in t_out]
    for o, w in zip(_flat(out), t_out):
        assert_close(o, w.detach().numpy(), rtol, atol)
    want = torch.autograd.grad(t_out, leaves, [torch.from_numpy(c) for c in cts], allow_unused=True)
    got = vjp_fn(cts if isinstance(out, (list, tuple)) else cts[0])
    assert len(got) == len(args)
    for g, w, a in zip(got, want, args):
        assert_close(g, np.zeros(np.shape(a)) if w is None else w.numpy(), rtol, atol)


def check_jvp(gfn, args, rng, h=1e-6):
    """gr.jvp's tangent against a central difference along the same random direction."""
    tangents = tuple(rng.standard_normal(np.shape(a)) for a in args)
    out, tan = gr.jvp(gfn, tuple(args), tangents)

    def at(s):
        return [np.asarray(o, dtype=np.float64) for o in _flat(gfn(*[a + s * t for a, t in zip(args, tangents)]))]

    for o, t, plus, minus in zip(_flat(out), _flat(tan), at(h), at(-h)):
        assert np.shape(o) == np.shape(t) == plus.shape
        assert_close(t, (plus - minus) / (2 * h), rtol=1e-6, atol=1e-7)


def check_torch_jvp(gfn, tfn, args, rng, rtol=RTOL, atol=ATOL):
    """gr.jvp's output and tangent against torch.func.jvp (torch's forward mode, float64) along the same random
    tangent: an oracle independent of gradir, where check_jvp's difference quotient is of gradir's own function."""
    tangents = tuple(rng.standard_normal(np.shape(a)) for a in args)
    out, tan = gr.jvp(gfn, tuple(args), tangents)
    t_out, t_tan = torch.func.jvp(tfn, tuple(torch.tensor(np.asarray(a, np.float64)) for a in args),
                                  tuple(torch.from_numpy(t) for t in tangents))
    for o, t, wo, wt in zip(_flat(out), _flat(tan), _flat(t_out), _flat(t_tan)):
        assert_close(o, wo.numpy(), rtol, atol)
        assert_close(t, wt.numpy(), rtol, atol)


def check_second_order(gfn, tfn, x, rng):
    """Hessian-vector product: grad of <grad <f, w>, v> against torch double backward."""
    w = rng.standard_normal(np.shape(tfn(_leaf(x)).detach().numpy()))
    v = rng.standard_normal(np.shape(x))
    got = gr.grad(lambda x: gr.sum(gr.grad(lambda x: gr.sum(gfn(x) * w))(x) * v))(x)
    tx = _leaf(x)
    (g,) = torch.autograd.grad((tfn(tx) * torch.from_numpy(w)).sum(), tx, create_graph=True)
    inner = (g * torch.from_numpy(v)).sum()
    # a gradient that does not depend on x (x*y with respect to x) has a zero second derivative
    want = torch.autograd.grad(inner, tx)[0] if inner.requires_grad else torch.zeros_like(tx)
    assert_close(got, want.numpy(), rtol=1e-9, atol=1e-11)
    # forward-over-reverse gives the same product
    _, fwd = gr.jvp(gr.grad(lambda x: gr.sum(gfn(x) * w)), (x,), (v,))
    assert_close(fwd, want.numpy(), rtol=1e-9, atol=1e-11)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# -- elementwise unary -----------------------------------------------------------------------------
UNARY = {  # name: (gradir, torch, domain, smooth)
    "negative": (gr.negative, torch.neg, "any", False),
    "exp": (gr.exp, torch.exp, "any", True),
    "log": (gr.log, torch.log, "pos", True),
    "tanh": (gr.tanh, torch.tanh, "any", True),
    "sigmoid": (gr.sigmoid, torch.sigmoid, "any", True),
    "relu": (gr.relu, torch.relu, "nonzero", False),
    "sqrt": (gr.sqrt, torch.sqrt, "pos", True),
    "rsqrt": (gr.rsqrt, torch.rsqrt, "pos", True),
    "abs": (gr.abs, torch.abs, "nonzero", False),
    "sin": (gr.sin, torch.sin, "any", True),
    "cos": (gr.cos, torch.cos, "any", True),
    "erf": (gr.erf, torch.erf, "any", True),
    "square": (gr.square, torch.square, "any", True),
}
SHAPES = [(), (5,), (2, 3, 4)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", UNARY)
def test_unary_vjp_jvp(name, shape, rng):
    g, t, domain, _ = UNARY[name]
    x = sample(rng, shape, domain)
    check_vjp(g, t, [x], rng)
    check_jvp(g, [x], rng)


@pytest.mark.parametrize("shape", [(), (1,), (3, 1, 4)], ids=str)
@pytest.mark.parametrize("name", UNARY)
def test_unary_jvp_against_torch_forward_mode(name, shape, rng):
    """Each unary op's JVP (tanh's among them) against torch.func.jvp in float64: 0-d, a single element, a size-1
    axis between two others."""
    g, t, domain, _ = UNARY[name]
    check_torch_jvp(g, t, [sample(rng, shape, domain)], rng)


@pytest.mark.parametrize("name", [n for n, spec in UNARY.items() if spec[3]])
def test_unary_second_order(name, rng):
    g, t, domain, _ = UNARY[name]
    check_second_order(g, t, sample(rng, (2, 3), domain), rng)


def test_kinks_match_torch():
    """relu and abs at exactly 0 take torch's subgradient (0)."""
    x = np.array([-1.0, 0.0, 2.0])
    for g, t in [(gr.relu, torch.relu), (gr.abs, torch.abs)]:
        tx = _leaf(x)
        t(tx).sum().backward()
        assert_close(gr.grad(lambda x: gr.sum(g(x)))(x), tx.grad.numpy())


# -- elementwise binary with broadcasting ----------------------------------------------------------
BINARY = {  # name: (gradir, torch, domain of x, domain of y)
    "add": (gr.add, torch.add, "any", "any"),
    "subtract": (gr.subtract, torch.sub, "any", "any"),
    "multiply": (gr.multiply, torch.mul, "any", "any"),
    "divide": (gr.divide, torch.div, "any", "nonzero"),
    "power": (gr.power, torch.pow, "pos", "any"),
    "maximum": (gr.maximum, torch.maximum, "any", "any"),
    "minimum": (gr.minimum, torch.minimum, "any", "any"),
}
BROADCASTS = [((), ()), ((), (3,)), ((3,), ()), ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((4,), (2, 3, 4)),
              ((2, 1, 4), (3, 1)), ((5,), (5,))]


@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
@pytest.mark.parametrize("name", BINARY)
def test_binary_vjp_jvp(name, shapes, rng):
    g, t, dx, dy = BINARY[name]
    args = [sample(rng, shapes[0], dx), sample(rng, shapes[1], dy)]
    check_vjp(g, t, args, rng)
    check_jvp(g, args, rng)


@pytest.mark.parametrize("scalar_first", [False, True])
@pytest.mark.parametrize("name", BINARY)
def test_binary_with_python_scalar(name, scalar_first, rng):
    """A Python scalar on either side is a constant: only the array gets a cotangent."""
    g, t, dx, dy = BINARY[name]
    c, tc = 1.75, torch.tensor(1.75, dtype=torch.float64)
    x = sample(rng, (3, 2), dy if scalar_first else dx)
    if scalar_first:
        check_vjp(lambda x: g(c, x), lambda x: t(tc, x), [x], rng)
    else:
        check_vjp(lambda x: g(x, c), lambda x: t(x, tc), [x], rng)


@pytest.mark.parametrize("name", ["multiply", "divide", "power", "maximum"])
def test_binary_second_order(name, rng):
    g, t, dx, dy = BINARY[name]
    x, y = sample(rng, (2, 3), dx), sample(rng, (3,), dy)
    check_second_order(lambda x: g(x, y), lambda x: t(x, torch.from_numpy(y)), x, rng)
    check_second_order(lambda y: g(x, y), lambda y: t(torch.from_numpy(x), y), y, rng)


OPERATORS = {  # the Python operators on traced values and their reflected forms with arrays/scalars
    "a + b": (lambda a, b: a + b, "any"),
    "a - b": (lambda a, b: a - b, "any"),
    "a * b": (lambda a, b: a * b, "any"),
    "a / b": (lambda a, b: a / b, "nonzero"),
    "a ** b": (lambda a, b: abs(a) ** b, "any"),
    "-a + 2.0 - b": (lambda a, b: -a + 2.0 - b, "any"),
    "2.0 / b * a": (lambda a, b: 2.0 / b * a, "nonzero"),
    "3.0 ** b - a": (lambda a, b: 3.0 ** b - a, "any"),
}


@pytest.mark.parametrize("expr", OPERATORS)
def test_python_operators(expr, rng):
    f, dy = OPERATORS[expr]
    args = [sample(rng, (3, 1), "nonzero"), sample(rng, (4,), dy)]
    check_vjp(f, f, args, rng)


def test_operators_with_numpy_constants(rng):
    """ndarray (op) Value defers to the traced value; the array is a constant."""
    c = rng.standard_normal((2, 3))
    x = rng.standard_normal((2, 3))

    def f(x):
        return c * x + c / (x * x + 1.0) - c

    tc = torch.from_numpy(c)
    check_vjp(f, lambda x: tc * x + tc / (x * x + 1.0) - tc, [x], rng)


def test_power_at_zero_matches_torch():
    """0 ** y for y >= 0 and x ** 0 have the masked derivatives torch uses (no NaN)."""
    x = np.array([0.0, 0.0, 2.0, 0.0])
    y = np.array([2.0, 0.0, 0.0, 1.0])
    tx, ty = _leaf(x), _leaf(y)
    torch.pow(tx, ty).sum().backward()
    gx, gy = gr.grad(lambda x, y: gr.sum(x ** y), argnums=(0, 1))(x, y)
    assert_close(gx, tx.grad.numpy())
    assert_close(gy, ty.grad.numpy())


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_ties_split_like_torch(name, rng):
    g, t, _, _ = BINARY[name]
    x = np.array([[1.0, 2.0, 3.0], [0.0, -1.0, 5.0]])
    y = np.array([1.0, 0.5, 3.0])  # ties at columns 0 and 2 of row 0
    check_vjp(g, t, [x, y], rng)
    check_vjp(lambda x: g(x, 0.0), lambda x: t(x, torch.zeros((), dtype=torch.float64)), [x], rng)
    check_jvp(lambda x, y: g(x, y + 0.25), [x, y], rng)  # off the ties, where a difference quotient exists


@settings(max_examples=25, deadline=None, derandomize=True)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3),
       name=st.sampled_from(["add", "subtract", "multiply", "divide", "maximum"]))
def test_binary_broadcasting_hypothesis(shapes, name):
    g, t, dx, dy = BINARY[name]
    rng = np.random.default_rng(len(shapes.input_shapes[0]) * 7 + len(shapes.input_shapes[1]))
    args = [sample(rng, shapes.input_shapes[0], dx), sample(rng, shapes.input_shapes[1], dy)]
    check_vjp(g, t, args, rng)


# -- comparisons, where, casts ---------------------------------------------------------------------
COMPARE = {
    "less": (gr.less, torch.lt, lambda a, b: a < b),
    "less_equal": (gr.less_equal, torch.le, lambda a, b: a <= b),
    "greater": (gr.greater, torch.gt, lambda a, b: a > b),
    "greater_equal": (gr.greater_equal, torch.ge, lambda a, b: a >= b),
    "equal": (gr.equal, torch.eq, lambda a, b: a == b),
    "not_equal": (gr.not_equal, torch.ne, lambda a, b: a != b),
}


@pytest.mark.parametrize("name", COMPARE)
def test_comparisons(name):
    g, t, op = COMPARE[name]
    a = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    b = np.array([[2.0], [2.0]])  # broadcast, with ties
    want = t(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    got = g(a, b)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, want)
    traced = gr.compile(op)(a, b)  # the operator on traced values, run by the backend
    np.testing.assert_array_equal(traced, want)
    np.testing.assert_array_equal(g(a, 2.0), t(torch.from_numpy(a), 2.0).numpy())


def test_logical_ops():
    p, q = np.array([True, True, False, False]), np.array([True, False, True, False])
    np.testing.assert_array_equal(gr.logical_and(p, q), np.logical_and(p, q))
    np.testing.assert_array_equal(gr.logical_or(p, q), np.logical_or(p, q))
    np.testing.assert_array_equal(gr.logical_not(p), np.logical_not(p))
    np.testing.assert_array_equal(gr.logical_and(np.array([0.0, 2.0]), 1.0), [False, True])


@pytest.mark.parametrize("shapes", [((2, 3), (2, 3), (2, 3)), ((3, 1), (1, 4), ()), ((4,), (3, 1), (3, 4))], ids=str)
def test_where(shapes, rng):
    cs, xs, ys = shapes
    cond = rng.standard_normal(cs) > 0
    x, y = rng.standard_normal(xs), rng.standard_normal(ys)
    check_vjp(lambda x, y: gr.where(cond, x, y), lambda x, y: torch.where(torch.from_numpy(cond), x, y), [x, y], rng)
    check_jvp(lambda x, y: gr.where(cond, x, y), [x, y], rng)
    # a traced condition built from the inputs, and Python scalar branches
    check_vjp(lambda x: gr.where(x > 0, x, 0.1 * x), lambda x: torch.where(x > 0, x, 0.1 * x), [x], rng)
    check_vjp(lambda x: gr.where(x > 0, 1.0, x), lambda x: torch.where(x > 0, 1.0, x), [x], rng)


def test_where_second_order(rng):
    x = rng.standard_normal((4,))
    check_second_order(lambda x: gr.where(x > 0, x ** 3, gr.sin(x)),
                       lambda x: torch.where(x > 0, x ** 3, torch.sin(x)), x, rng)


def test_astype(rng):
    x = rng.standard_normal((3, 2))
    out, vjp_fn = gr.vjp(lambda x: gr.astype(x, gr.float32) * 2.0, x)
    assert out.dtype == np.float32
    assert_close(out, (x.astype(np.float32) * 2).astype(np.float32), rtol=0, atol=0)
    ct = rng.standard_normal((3, 2)).astype(np.float32)
    (g,) = vjp_fn(ct)
    assert g.dtype == np.float64  # the cotangent comes back in the input's dtype
    assert_close(g, 2.0 * ct.astype(np.float64), rtol=1e-7)
    # a cast to int cuts the gradient
    assert_close(gr.grad(lambda x: gr.sum(gr.astype(x, gr.int64) * 1.0 + x))(x), np.ones((3, 2)))
    assert_close(gr.jvp(lambda x: gr.astype(x, gr.float32), (x,), (np.ones_like(x),))[1],
                 np.ones((3, 2), np.float32), rtol=0, atol=0)


# -- reductions ------------------------------------------------------------------------------------
def _dims(axis, ndim):
    return tuple(range(ndim)) if axis is None else axis


REDUCTIONS = {  # name: (gradir f(x, axis, keepdims), torch f(x, dims, keepdim), smooth)
    "sum": (lambda x, a, k: gr.sum(x, axis=a, keepdims=k), lambda x, d, k: torch.sum(x, d, keepdim=k), False),
    "mean": (lambda x, a, k: gr.mean(x, axis=a, keepdims=k), lambda x, d, k: torch.mean(x, d, keepdim=k), False),
    "max": (lambda x, a, k: gr.max(x, axis=a, keepdims=k), lambda x, d, k: torch.amax(x, d, keepdim=k), False),
    "min": (lambda x, a, k: gr.min(x, axis=a, keepdims=k), lambda x, d, k: torch.amin(x, d, keepdim=k), False),
    "var": (lambda x, a, k: gr.var(x, axis=a, keepdims=k),
            lambda x, d, k: torch.var(x, d, correction=0, keepdim=k), True),
    "var_ddof1": (lambda x, a, k: gr.var(x, axis=a, keepdims=k, ddof=1),
                  lambda x, d, k: torch.var(x, d, correction=1, keepdim=k), True),
    "logsumexp": (lambda x, a, k: gr.logsumexp(x, axis=a, keepdims=k),
                  lambda x, d, k: torch.logsumexp(x, d, keepdim=k), True),
}
AXES = [None, 0, 1, -1, (0, 2), (-1, 0), (0, 1, 2)]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduction_vjp_jvp(name, axis, keepdims, rng):
    g, t, _ = REDUCTIONS[name]
    x = rng.standard_normal((2, 3, 4))
    check_vjp(lambda x: g(x, axis, keepdims), lambda x: t(x, _dims(axis, 3), keepdims), [x], rng)
    check_jvp(lambda x: g(x, axis, keepdims), [x], rng)


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduction_of_0d_and_empty_axes(name, rng):
    g, t, _ = REDUCTIONS[name]
    x = rng.standard_normal(())
    if name != "var_ddof1":  # one sample: the unbiased variance is 0/0
        check_vjp(lambda x: g(x, None, False), lambda x: t(x, (), False) if name == "logsumexp"
                  else t(x.reshape(1), 0, False), [x], rng)
    if name in ("sum", "mean", "max", "min"):  # axis=() reduces nothing, as NumPy (torch reads () as "all")
        y = rng.standard_normal((2, 3))
        assert_close(g(y, (), False), y)


@pytest.mark.parametrize("name", [n for n, spec in REDUCTIONS.items() if spec[2]])
@pytest.mark.parametrize("axis", [None, -1, (0, 1)], ids=str)
def test_reduction_second_order(name, axis, rng):
    g, t, _ = REDUCTIONS[name]
    x = rng.standard_normal((3, 4))
    check_second_order(lambda x: g(x, axis, False), lambda x: t(x, _dims(axis, 2), False), x, rng)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(data=st.data(), name=st.sampled_from(list(REDUCTIONS)), keepdims=st.booleans())
def test_reduction_hypothesis(data, name, keepdims):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=2, max_side=4), label="shape")
    axis = data.draw(hnp.valid_tuple_axes(len(shape), min_size=1), label="axis")
    g, t, _ = REDUCTIONS[name]
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape)
    check_vjp(lambda x: g(x, axis, keepdims), lambda x: t(x, axis, keepdims), [x], rng)


@pytest.mark.parametrize("axis", [None, 0, 1, -1], ids=str)
@pytest.mark.parametrize("name,tfn", [("max", torch.amax), ("min", torch.amin)])
def test_extremum_ties_split_evenly_like_torch(name, tfn, axis, rng):
    g = REDUCTIONS[name][0]
    x = np.array([[1.0, 3.0, 3.0, -2.0], [-2.0, 0.5, -2.0, -2.0], [4.0, 4.0, 4.0, 4.0]])
    check_vjp(lambda x: g(x, axis, False), lambda x: tfn(x, _dims(axis, 2), False), [x], rng)
    if axis is None:  # torch.max(x) without a dim also splits evenly
        tx = _leaf(x)
        (torch.max(tx) if name == "max" else torch.min(tx)).backward()
        assert_close(gr.grad(lambda x: g(x, None, False))(x), tx.grad.numpy())


def test_logsumexp_infinities_match_torch():
    x = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [0.0, -np.inf]])
    want = torch.logsumexp(torch.from_numpy(x), 1).numpy()
    np.testing.assert_array_equal(gr.logsumexp(x, axis=1), want)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [None, 0, 1, -1], ids=str)
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin(name, axis, keepdims, rng):
    x = rng.integers(0, 3, (3, 5)).astype(np.float64)  # many ties: the first index wins
    got = getattr(gr, name)(x, axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(got, getattr(np, name)(x, axis=axis, keepdims=keepdims))
    if axis is not None:
        np.testing.assert_array_equal(got, getattr(torch, name)(torch.from_numpy(x), axis, keepdim=keepdims).numpy())
    assert np.asarray(got).dtype == np.int64
    traced = gr.compile(lambda x: getattr(gr, name)(x, axis=axis, keepdims=keepdims))(x)
    np.testing.assert_array_equal(traced, got)


# -- shape ops -------------------------------------------------------------------------------------
def _np_shape(f, shape):
    return f(np.empty(shape)).shape


SHAPE_OPS = {  # id: (input shape, gradir f, torch f)
    "reshape": ((2, 3, 4), lambda x: gr.reshape(x, (6, 4)), lambda x: x.reshape(6, 4)),
    "reshape_-1": ((2, 3, 4), lambda x: gr.reshape(x, (4, -1, 2)), lambda x: x.reshape(4, -1, 2)),
    "reshape_flat": ((2, 3, 4), lambda x: gr.reshape(x, -1), lambda x: x.reshape(-1)),
    "reshape_0d": ((), lambda x: gr.reshape(x, (1, 1)), lambda x: x.reshape(1, 1)),
    "transpose": ((2, 3, 4), gr.transpose, lambda x: x.permute(2, 1, 0)),
    "transpose_perm": ((2, 3, 4), lambda x: gr.transpose(x, (1, -1, 0)), lambda x: x.permute(1, 2, 0)),
    ".T": ((2, 3), lambda x: x.T, lambda x: x.T),
    "swapaxes": ((2, 3, 4), lambda x: gr.swapaxes(x, 0, -1), lambda x: x.swapaxes(0, -1)),
    "broadcast_to": ((3, 1), lambda x: gr.broadcast_to(x, (2, 3, 4)), lambda x: x.expand(2, 3, 4)),
    "broadcast_0d": ((), lambda x: gr.broadcast_to(x, (2, 2)), lambda x: x.expand(2, 2)),
    "expand_dims_0": ((2, 3), lambda x: gr.expand_dims(x, 0), lambda x: x.unsqueeze(0)),
    "expand_dims_-1": ((2, 3), lambda x: gr.expand_dims(x, -1), lambda x: x.unsqueeze(-1)),
    "expand_dims_tuple": ((2, 3), lambda x: gr.expand_dims(x, (0, -1, 2)),
                          lambda x: x.reshape(_np_shape(lambda a: np.expand_dims(a, (0, -1, 2)), (2, 3)))),
    "squeeze": ((1, 3, 1, 2), gr.squeeze, lambda x: x.reshape(3, 2)),
    "squeeze_axis": ((1, 3, 1, 2), lambda x: gr.squeeze(x, -2), lambda x: x.squeeze(-2)),
    "squeeze_tuple": ((1, 3, 1, 2), lambda x: gr.squeeze(x, (0, 2)), lambda x: x.reshape(3, 2)),
    "concatenate_0": ((2, 3), lambda x: gr.concatenate([x, 2.0 * x[:1], x], axis=0),
                      lambda x: torch.cat([x, 2.0 * x[:1], x], 0)),
    "concatenate_-1": ((2, 3), lambda x: gr.concatenate([x[:, :1], x, np.ones((2, 2))], axis=-1),
                       lambda x: torch.cat([x[:, :1], x, torch.ones(2, 2, dtype=torch.float64)], -1)),
    "stack": ((2, 3), lambda x: gr.stack([x, x * x], axis=1), lambda x: torch.stack([x, x * x], 1)),
    "split_sections": ((6, 4), lambda x: gr.split(x, 3), lambda x: list(torch.split(x, 2, 0))),
    "split_points": ((6, 4), lambda x: gr.split(x, [1, 4], axis=0), lambda x: list(torch.tensor_split(x, [1, 4], 0))),
    "split_-1": ((6, 4), lambda x: gr.split(x, [3], axis=-1), lambda x: list(torch.tensor_split(x, [3], -1))),
    "pad_int": ((2, 3), lambda x: gr.pad(x, 1), lambda x: F.pad(x, (1, 1, 1, 1))),
    "pad_per_axis": ((2, 3), lambda x: gr.pad(x, ((0, 1), (2, 0)), constant_values=1.5),
                     lambda x: F.pad(x, (2, 0, 0, 1), value=1.5)),
    "pad_pair": ((2, 3, 2), lambda x: gr.pad(x, (1, 2)), lambda x: F.pad(x, (1, 2, 1, 2, 1, 2))),
}


@pytest.mark.parametrize("name", SHAPE_OPS)
def test_shape_ops(name, rng):
    shape, g, t = SHAPE_OPS[name]
    x = rng.standard_normal(shape)
    check_vjp(g, t, [x], rng)
    check_jvp(g, [x], rng)


def test_split_matches_numpy_edge_cases():
    x = np.arange(10.0)
    for points in ([3, 1], [-3], [12], [0, 0, 5]):
        got, want = gr.split(x, points), np.split(x, points)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


# -- indexing --------------------------------------------------------------------------------------
def numpy_index_vjp(shape, index, ct):
    """NumPy's own adjoint of x[index]: each output element adds its cotangent where it was read."""
    where_read = np.arange(int(np.prod(shape))).reshape(shape)[index]
    g = np.zeros(int(np.prod(shape)))
    np.add.at(g, np.ravel(where_read), np.ravel(ct))
    return g.reshape(shape)


S = slice
INDEXES = [
    1, -1, (1, 2), (S(1, 3),), (S(None, None, 2),), (S(None, None, -1),), (Ellipsis, S(None, None, -2)),
    (None, 1, Ellipsis, None), (S(1, None), None, S(None, 2)), (S(None), S(-3, -1), S(None, None, 3)),
    (S(5, 1, -2),), (Ellipsis, 0), (Ellipsis,), (S(10, 20),), (2, S(4, None, -3), -1), (S(None, None, -3), 1),
    # integer arrays
    np.array([0, 2, 2, 3]), np.array([[0, -1], [1, 1]]), (np.array([0, 1]), np.array([1, 4])),
    (S(None), np.array([4, 0])), (0, np.array([1, 2])), (np.array([1, 3]), S(1, None)),
    (S(None), np.array([0, 1]), np.array([2, 3])), (np.array([0, 1]), S(None), np.array([2, 3])),
    (np.array([[0], [1]]), np.array([0, 1, 2])), [0, 2], (Ellipsis, np.array([5, 0])),
    (None, np.array([1]), S(None)), (np.array([0, 1]), None, np.array([2, 3])), (S(None, None, -1), np.array([1, 1])),
    (np.array([3, 0]), 1, S(None, None, 2)),
]


@pytest.mark.parametrize("index", INDEXES, ids=repr)
def test_getitem_against_numpy(index, rng):
    x = rng.standard_normal((4, 5, 6))
    out, vjp_fn = gr.vjp(lambda x: x[index], x)
    want = x[index]
    assert_close(out, want, rtol=0, atol=0)
    ct = rng.standard_normal(np.shape(want))
    assert_close(vjp_fn(ct)[0], numpy_index_vjp(x.shape, index, ct))
    check_jvp(lambda x: gr.getitem(x, index), [x], rng)


def test_getitem_second_order(rng):
    x = rng.standard_normal((4, 3))
    idx = np.array([0, 3, 3, 1])
    check_second_order(lambda x: gr.tanh(x[idx, ::-1]) * x[1:, 1:].sum(),
                       lambda x: torch.tanh(x[torch.from_numpy(idx)].flip(1)) * x[1:, 1:].sum(), x, rng)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_embedding_gather_against_torch(dtype, rng):
    """C[Xb]: a (27, 10) table gathered by a (32, 3) index batch, repeats accumulating in the VJP."""
    C = rng.standard_normal((27, 10))
    Xb = rng.integers(0, 27, (32, 3)).astype(dtype)
    check_vjp(lambda C: C[Xb], lambda C: C[torch.from_numpy(Xb.astype(np.int64))], [C], rng)
    # the index may be a traced input too: it gets no cotangent
    out, vjp_fn = gr.vjp(lambda C, X: C[X], C, Xb)
    gC, gX = vjp_fn(np.ones((32, 3, 10)))
    assert gX is None
    assert_close(gC, np.bincount(Xb.ravel(), minlength=27)[:, None] * np.ones((1, 10)))


def test_pick_rows_against_torch(rng):
    """logp[arange(n), y], the cross-entropy gather."""
    n = 7
    logits = rng.standard_normal((n, 5))
    y = rng.integers(0, 5, n)

    def g(z):
        logp = z - gr.logsumexp(z, axis=1, keepdims=True)
        return -gr.mean(logp[np.arange(n), y])

    def t(z):
        return F.cross_entropy(z, torch.from_numpy(y))

    check_vjp(g, t, [logits], rng)
    check_second_order(g, t, logits, rng)
    out, vjp_fn = gr.vjp(lambda z, yy: z[np.arange(n), yy], logits, y)  # traced labels
    assert_close(out, logits[np.arange(n), y], rtol=0, atol=0)
    ct = rng.standard_normal(n)
    assert_close(vjp_fn(ct)[0], numpy_index_vjp(logits.shape, (np.arange(n), y), ct))


def test_take(rng):
    x = rng.standard_normal((3, 4))
    idx = np.array([[3, -1], [0, 0]])
    check_vjp(lambda x: gr.take(x, idx, axis=1), lambda x: x[:, torch.from_numpy(idx % 4)], [x], rng)


@pytest.mark.parametrize("dtype", [None, gr.float32])
def test_one_hot(dtype):
    idx = np.array([[0, 4], [2, 2]])
    got = gr.one_hot(idx, 5) if dtype is None else gr.one_hot(idx, 5, dtype=dtype)
    want = F.one_hot(torch.from_numpy(idx), 5).numpy()
    assert got.dtype == (np.float64 if dtype is None else np.float32)
    np.testing.assert_array_equal(got, want)
    traced = gr.compile(lambda i: gr.one_hot(i, 5))(idx)
    np.testing.assert_array_equal(traced, want)


def test_one_hot_in_a_loss(rng):
    z = rng.standard_normal((4, 3))
    y = np.array([0, 2, 1, 2])
    check_vjp(lambda z: gr.sum(gr.one_hot(y, 3) * gr.tanh(z)),
              lambda z: (F.one_hot(torch.from_numpy(y), 3) * torch.tanh(z)).sum(), [z], rng)


# -- matmul ----------------------------------------------------------------------------------------
MATMUL_SHAPES = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
                 ((4,), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((2, 3, 4), (4,)), ((3, 4), (2, 4, 1))]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul(shapes, rng):
    a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    check_vjp(gr.matmul, torch.matmul, [a, b], rng)
    check_vjp(lambda a, b: a @ b, lambda a, b: a @ b, [a, b], rng)
    check_jvp(gr.matmul, [a, b], rng)


def test_matmul_with_constant_operands(rng):
    a, w = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    check_vjp(lambda a: a @ w, lambda a: a @ torch.from_numpy(w), [a], rng)
    check_vjp(lambda w: a @ w, lambda w: torch.from_numpy(a) @ w, [w], rng)


def test_matmul_second_order(rng):
    a, w = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    check_second_order(lambda a: gr.tanh(a @ w) @ w.T, lambda a: torch.tanh(a @ torch.from_numpy(w)) @ torch.from_numpy(w).T,
                       a, rng)


def test_matmul_integers_as_numpy():
    a, b = np.arange(6).reshape(2, 3), np.arange(3)
    got = gr.matmul(a, b)
    np.testing.assert_array_equal(got, a @ b)
    assert got.dtype == (a @ b).dtype
