"""The eager backward engine: Tensor.backward() walks the tape in reverse and runs each node's VJP
rule, traced and compiled once per signature (gradir.eager.tape_rules)."""

import ml_dtypes
import numpy as np
import pytest

import gradir as gr
from gradir.eager.engine import _reachable


def chain(x, n: int):
    """n elementwise ops whose derivatives multiply to about 1 (so a deep chain's gradient neither
    vanishes nor overflows): x + 0.001, exp, log, x * 1.00001, repeated; then sum(x * x)."""
    for i in range(n):
        k = i % 4
        x = x + 0.001 if k == 0 else gr.exp(x) if k == 1 else gr.log(x) if k == 2 else x * 1.00001
    return gr.sum(x * x)


def chain_grad_by_hand(x0: np.ndarray, n: int) -> np.ndarray:
    """d chain / dx in NumPy, forward mode: (value, derivative) through every op."""
    v, d = x0.copy(), np.ones_like(x0)
    for i in range(n):
        k = i % 4
        if k == 0:
            v = v + 0.001
        elif k == 1:
            v = np.exp(v)
            d = d * v
        elif k == 2:
            d = d / v
            v = np.log(v)
        else:
            v, d = v * 1.00001, d * 1.00001
    return 2 * v * d


def test_deep_chain_backward_equals_traced_grad_without_recursion():
    n = 20_000  # far past Python's recursion limit: the engine must not recurse
    x0 = np.linspace(-1.0, 1.0, 5)
    x = gr.Tensor(x0, requires_grad=True)
    y = chain(x, n)
    nodes = _reachable(y.grad_fn)
    assert len(nodes) == n + 2
    # one compiled rule per signature, not per node: add, exp, log, multiply (twice: by a constant
    # and x * x), sum
    assert len({id(node.rule) for node in nodes}) == 6
    y.backward()
    expected = gr.grad(lambda v: chain(v, n))(x0)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), chain_grad_by_hand(x0, n), rtol=1e-9)
    assert np.all(np.abs(expected) > 1e-3)  # a gradient that did not vanish


def test_create_graph_through_a_chain_matches_nested_grad():
    n = 400
    x = gr.Tensor(0.5, requires_grad=True)
    chain(x, n).backward(create_graph=True)
    first = x.grad
    assert first.grad_fn is not None
    x.grad = None
    first.backward()
    f = lambda v: chain(v, n)  # noqa: E731
    np.testing.assert_allclose(first.item(), gr.grad(f)(0.5), rtol=1e-12)
    np.testing.assert_allclose(x.grad.item(), gr.grad(gr.grad(f))(0.5), rtol=1e-10)



def test_repeated_index_write_uses_the_constant_indices():
    # index_update's rule looks at constant indices (the last write wins): the tape traces that
    # node's rule with its indices, as gr.grad does with a constant index
    idx = np.array([0, 2, 0, 2, 1])
    x0 = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])

    def f(x):
        y = x * 1.0
        y[idx] = x[1:] ** 2
        return (y * y).sum()

    def f_np(x):
        y = x * 1.0
        y[idx] = x[1:] ** 2  # NumPy: the last write wins
        return float(np.sum(y * y))

    x = gr.Tensor(x0, requires_grad=True)
    f(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), gr.checks.central_difference(f_np, x0), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), gr.grad(f)(x0), rtol=1e-12)


def _link_type(h):
    a = h.storage.array if hasattr(h, "storage") else h  # a no-grad Tensor's link holds its storage
    return type(h).__name__, tuple(a.shape), a.dtype


def _record(t):
    """What a result holds: value, dtype, and its node's op and operands (kind, shape, dtype)."""
    n = t.grad_fn
    return t.numpy().tolist(), t.dtype, None if n is None else (n.op, [_link_type(h) for h in n.inputs], n.shape, n.dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, ml_dtypes.bfloat16, np.complex128, np.int64])
@pytest.mark.parametrize("shape", [(), (3,)])
def test_tensor_arithmetic_fast_path_binds_what_the_gr_ops_bind(dtype, shape):
    # Tensor's +, -, *, / bind the op directly in the common cases; the gr functions are the oracle
    base = np.arange(1, 1 + int(np.prod(shape)), dtype=np.float64).reshape(shape)
    grad = np.dtype(dtype).kind in "fV"  # complex and integer tensors cannot require grad
    x = gr.Tensor(base.astype(dtype), requires_grad=grad)
    y = gr.Tensor((base + 2).astype(dtype))
    fns = {"add": gr.add, "subtract": gr.subtract, "multiply": gr.multiply, "divide": gr.divide}
    pairs = [(lambda a, b: a + b, "add"), (lambda a, b: a - b, "subtract"), (lambda a, b: a * b, "multiply"),
             (lambda a, b: a / b, "divide")]
    for other in (2.5, 3, y):
        for expr, name in pairs:
            assert _record(expr(x, other)) == _record(fns[name](x, other)), (name, other)
            if not isinstance(other, gr.Tensor):
                assert _record(expr(other, x)) == _record(fns[name](other, x)), (name, other, "reflected")
