"""dtypes: promotion (NumPy 2's rules as the oracle, Python scalars weakly typed), low-precision
floats against float32, complex128 through the analytic ops, and gradient dtypes."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
import torch

import gradir as gr
from gradir.core.errors import DTypeError

BF16 = np.dtype(ml_dtypes.bfloat16)
NUMPY_DTYPES = [np.bool_, np.int32, np.int64, np.float16, np.float32, np.float64, np.complex128]


def _ones(dtype, shape=(2,)):
    return np.ones(shape, dtype=dtype)


def _traced_dtype(f, *args):
    """The dtype the IR records for f's output (the trace path, not eager NumPy)."""
    return gr.trace(f, *args).outputs[0].dtype


# -- promotion -------------------------------------------------------------------------------------
@pytest.mark.parametrize("a,b", list(itertools.combinations_with_replacement(NUMPY_DTYPES, 2)),
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["add", "multiply", "maximum"])
def test_array_promotion_follows_numpy(op, a, b):
    x, y = _ones(a), _ones(b)
    want = getattr(np, op)(x, y).dtype
    assert gr.__dict__[op](x, y).dtype == want
    assert gr.__dict__[op](y, x).dtype == want
    assert _traced_dtype(lambda x, y: gr.__dict__[op](x, y), x, y) == want


@pytest.mark.parametrize("a,b", list(itertools.combinations_with_replacement(NUMPY_DTYPES[:-1], 2)),
                         ids=lambda d: np.dtype(d).name)
def test_divide_and_compare_promotion(a, b):
    x, y = _ones(a), _ones(b)
    assert gr.divide(x, y).dtype == np.true_divide(x, y).dtype
    assert gr.less(x, y).dtype == np.bool_
    np.testing.assert_array_equal(gr.less_equal(x, y), np.less_equal(x, y))


SCALARS = [True, 2, 2.0, 1j]


@pytest.mark.parametrize("scalar", SCALARS, ids=repr)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_python_scalars_are_weak_like_numpy2(dtype, scalar):
    """NumPy 2 (NEP 50) treats Python scalars weakly too: it is the oracle here."""
    x = _ones(dtype)
    for op, np_op in [(gr.add, np.add), (gr.multiply, np.multiply)]:
        want = np_op(x, scalar).dtype
        assert op(x, scalar).dtype == want
        assert op(scalar, x).dtype == want
        assert _traced_dtype(lambda x: op(x, scalar), x) == want
    if np.dtype(dtype).kind == "f":
        assert _traced_dtype(lambda x: x * scalar - scalar / (x + 3.0), x) == np.promote_types(dtype, np.result_type(scalar, x))


@pytest.mark.parametrize("scalar,want", [(True, BF16), (2, BF16), (2.0, BF16), (1j, np.complex64)], ids=repr)
def test_bfloat16_with_python_scalars(scalar, want):
    x = _ones(BF16)
    assert gr.add(x, scalar).dtype == want
    assert _traced_dtype(lambda x: 2.0 * x * scalar, x) == want


@pytest.mark.parametrize("other,want", [(np.bool_, BF16), (np.int32, BF16), (np.float16, np.float32),
                                        (np.float32, np.float32), (np.float64, np.float64),
                                        (BF16, BF16)], ids=lambda d: np.dtype(d).name)
def test_bfloat16_array_promotion(other, want):
    """bf16 with a wider float widens; with f16 (neither contains the other) both go to f32, as JAX does."""
    assert gr.add(_ones(BF16), _ones(other)).dtype == want
    assert gr.multiply(_ones(other), _ones(BF16)).dtype == want


def test_float32_stays_float32_through_a_model():
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    w = np.ones((3, 4), np.float32)

    def f(x):
        h = gr.tanh(x @ w * 0.5 + 1.0)
        return gr.mean(gr.sigmoid(h) ** 2 / 3.0 - gr.logsumexp(h, axis=1, keepdims=True)) + gr.var(h, ddof=1)

    assert _traced_dtype(f, x) == np.float32
    assert np.asarray(f(x)).dtype == np.float32


def test_integer_and_bool_results_as_numpy():
    i32, b = np.array([1, 2, 3], np.int32), np.array([True, True, False])
    assert gr.sum(b) == 2 and np.asarray(gr.sum(b)).dtype == np.sum(b).dtype
    assert np.asarray(gr.sum(i32)).dtype == np.sum(i32).dtype
    np.testing.assert_array_equal(gr.sum(b.reshape(3, 1), axis=0), np.sum(b.reshape(3, 1), axis=0))
    assert np.asarray(gr.mean(i32)).dtype == np.mean(i32).dtype
    assert np.asarray(gr.max(i32)).dtype == np.int32
    assert np.asarray(gr.argmax(i32)).dtype == np.int64
    for f in (gr.exp, gr.sqrt, gr.tanh, gr.sin):  # ufuncs of integers compute in float64
        name = f.__name__
        np.testing.assert_allclose(f(i32), getattr(np, name)(i32), rtol=1e-15)
        assert f(i32).dtype == getattr(np, name)(i32).dtype
    np.testing.assert_array_equal(gr.power(i32, 2), i32 ** 2)
    assert gr.power(i32, 2).dtype == (i32 ** 2).dtype
    np.testing.assert_array_equal(gr.negative(i32), -i32)
    np.testing.assert_array_equal(gr.astype(np.array([1.7, -1.7]), gr.int32), np.array([1.7, -1.7]).astype(np.int32))
    assert gr.astype(b, gr.float32).dtype == np.float32
    np.testing.assert_array_equal(gr.where(b, i32, 0), np.where(b, i32, 0))
    assert gr.where(b, i32, 0).dtype == np.int32


def test_bool_subtract_is_refused_as_numpy():
    b = np.array([True, False])
    with pytest.raises(TypeError):
        np.subtract(b, b)
    with pytest.raises(DTypeError):
        gr.subtract(b, b)


# -- float16 and bfloat16 against float32 ----------------------------------------------------------
# tolerance: about four unit roundoffs (f16 2**-11, bf16 2**-8) of error, relative to 1 + |value|
LOW = {"float16": (np.float16, 2e-3), "bfloat16": (BF16, 1.6e-2)}


def _low_precision_cases():
    w = np.random.default_rng(0).standard_normal((4, 3)) * 0.5
    return {
        "tanh_mlp": lambda x: gr.tanh(x @ w.astype(x.dtype) + 0.5),
        "exp_log": lambda x: gr.log(gr.exp(x) + 1.0),
        "sigmoid_sqrt": lambda x: gr.sqrt(gr.sigmoid(x)) * gr.rsqrt(x * x + 1.0),
        "sin_cos_div": lambda x: gr.sin(x) / (2.0 + gr.cos(x)),
        "power_abs": lambda x: gr.abs(x) ** 1.5 - gr.maximum(x, 0.0),
        "reductions": lambda x: gr.concatenate([gr.logsumexp(x, axis=1), gr.mean(x, axis=1), gr.max(x, axis=1)]),
        "var": lambda x: gr.var(x, axis=0, ddof=1),
        "indexing": lambda x: x[np.array([1, 0, 1]), ::-1] * x[-1],
    }


@pytest.mark.parametrize("case", list(_low_precision_cases()))
@pytest.mark.parametrize("low", LOW)
def test_low_precision_matches_float32(low, case):
    dtype, rtol = LOW[low]
    f = _low_precision_cases()[case]
    x32 = np.random.default_rng(1).uniform(-1.5, 1.5, (2, 4)).astype(np.float32)
    x = x32.astype(dtype)
    ref = np.asarray(gr.compile(f)(x.astype(np.float32)))  # the same (rounded) inputs in float32
    # traced, so that the operators are gradir's (eagerly, `array + 1.0` would be NumPy's own)
    out = gr.compile(f)(x)
    assert out.dtype == dtype
    np.testing.assert_allclose(np.asarray(out, np.float32), ref, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("case", ["tanh_mlp", "exp_log", "sigmoid_sqrt", "sin_cos_div", "reductions", "indexing"])
@pytest.mark.parametrize("low", LOW)
def test_low_precision_gradients(low, case):
    dtype, rtol = LOW[low]
    f = _low_precision_cases()[case]
    x = np.random.default_rng(2).uniform(-1.5, 1.5, (2, 4)).astype(dtype)

    def loss(x):
        return gr.sum(f(x))

    g = gr.grad(loss)(x)
    g32 = gr.grad(loss)(x.astype(np.float32))
    assert g.dtype == dtype and g32.dtype == np.float32
    np.testing.assert_allclose(np.asarray(g, np.float32), g32, rtol=rtol, atol=rtol)


# -- complex128 ------------------------------------------------------------------------------------
COMPLEX_UNARY = {
    "exp": (gr.exp, np.exp), "log": (gr.log, np.log), "tanh": (gr.tanh, np.tanh), "sin": (gr.sin, np.sin),
    "cos": (gr.cos, np.cos), "sqrt": (gr.sqrt, np.sqrt), "sigmoid": (gr.sigmoid, lambda z: 1.0 / (1.0 + np.exp(-z))),
}
COMPLEX_BINARY = {
    "multiply": (gr.multiply, np.multiply), "add": (gr.add, np.add), "divide": (gr.divide, np.divide),
    "power": (gr.power, np.power), "subtract": (gr.subtract, np.subtract),
}


def _z(rng, shape=(3, 4)):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


@pytest.mark.parametrize("name", COMPLEX_UNARY)
def test_complex_unary_against_numpy(name):
    g, n = COMPLEX_UNARY[name]
    z = _z(np.random.default_rng(3))
    want = n(z)
    for out in (g(z), gr.compile(g)(z)):
        assert np.asarray(out).dtype == np.complex128
        np.testing.assert_allclose(out, want, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("name", COMPLEX_BINARY)
def test_complex_binary_against_numpy(name):
    g, n = COMPLEX_BINARY[name]
    rng = np.random.default_rng(4)
    a, b = _z(rng, (3, 1)), _z(rng, (4,))
    for out in (g(a, b), gr.compile(g)(a, b), g(a, 0.5), g(2.0, b)):
        assert np.asarray(out).dtype == np.complex128
    np.testing.assert_allclose(g(a, b), n(a, b), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(gr.compile(g)(a, b), n(a, b), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(g(a, 0.5), n(a, 0.5), rtol=1e-14, atol=1e-15)


def test_complex_step_derivative_matches_torch():
    """Im f(x + ih) / h through a composite of the analytic ops equals torch's float64 derivative."""
    def f(x):
        return gr.tanh(x * x + gr.sin(x)) * gr.sigmoid(x) / gr.sqrt(x + 3.0) + gr.exp(-x) * gr.log(x + 4.0) + x ** 2.5

    def tf(x):
        return torch.tanh(x * x + torch.sin(x)) * torch.sigmoid(x) / torch.sqrt(x + 3.0) + torch.exp(-x) * torch.log(x + 4.0) \
            + x ** 2.5

    x = np.array([0.3, 1.1, 2.0])
    h = 1e-20
    cs = np.imag(gr.compile(f)(x + 1j * h)) / h
    tx = torch.tensor(x, requires_grad=True)
    tf(tx).sum().backward()
    np.testing.assert_allclose(cs, tx.grad.numpy(), rtol=1e-14)
    np.testing.assert_allclose(gr.grad(lambda x: gr.sum(f(x)))(x), tx.grad.numpy(), rtol=1e-13)


def test_complex_abs_and_parts():
    z = _z(np.random.default_rng(5))
    np.testing.assert_allclose(gr.abs(z), np.abs(z), rtol=1e-15)
    assert gr.abs(z).dtype == np.float64
    np.testing.assert_array_equal(gr.real(z), z.real)
    np.testing.assert_array_equal(gr.imag(z), z.imag)


# -- gradient dtypes -------------------------------------------------------------------------------
F32_LOSSES = {
    "tanh": lambda x: gr.sum(gr.tanh(x) * 2.0),
    "matmul": lambda x: gr.sum((x @ x.T) ** 2) / 10.0,
    "logsumexp": lambda x: gr.logsumexp(x),
    "var": lambda x: gr.var(x, axis=0, ddof=1).sum(),
    "where_max": lambda x: gr.sum(gr.where(x > 0, x, 0.01 * x)) + gr.max(x),
    "divide_power": lambda x: gr.mean(1.0 / (x * x + 1.0) + gr.abs(x) ** 3),
    "gather": lambda x: gr.sum(x[np.array([0, 1, 1]), 1:] ** 2),
    "cast_f64": lambda x: gr.sum(gr.sin(gr.astype(x, gr.float64))),
}


@pytest.mark.parametrize("name", F32_LOSSES)
def test_float32_inputs_get_float32_gradients(name):
    f = F32_LOSSES[name]
    x = np.random.default_rng(6).uniform(-1, 1, (2, 3)).astype(np.float32)
    g = gr.grad(f)(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, gr.grad(f)(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    value, g2 = gr.value_and_grad(f)(x)
    assert np.asarray(value).dtype == (np.float64 if name == "cast_f64" else np.float32)
    assert g2.dtype == np.float32


def test_mixed_precision_gradients_keep_each_input_dtype():
    x32 = np.ones((2, 2), np.float32)
    x64 = np.full((2, 2), 0.5)
    g32, g64 = gr.grad(lambda a, b: gr.sum(a * b), argnums=(0, 1))(x32, x64)
    assert g32.dtype == np.float32 and g64.dtype == np.float64
    np.testing.assert_array_equal(g32, x64.astype(np.float32))
    np.testing.assert_array_equal(g64, x32.astype(np.float64))


def test_torch_bfloat16_grad_and_tensor():
    xt = torch.tensor([0.5, 1.25, -2.0], dtype=torch.bfloat16)
    g = gr.grad(lambda a: gr.sum(a * a * a))(xt)
    assert isinstance(g, torch.Tensor) and g.dtype == torch.bfloat16
    want = 3 * xt.float() ** 2
    torch.testing.assert_close(g.float(), want, rtol=1e-2, atol=1e-2)
    t = gr.Tensor(xt)
    assert t.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(np.asarray(t.data).astype(np.float32), xt.float().numpy())
    y = gr.compile(lambda a: a * 2.0)(torch.tensor(1.5, dtype=torch.bfloat16))  # 0-d round trip
    assert y.dtype == torch.bfloat16 and y.item() == 3.0
