"""Each batching rule against a Python loop over the examples: every operand batched at its first or last axis or
not at all (integer indices differ between examples), for the primitives whose rules rewrite more than axes
(matmul, gathers and scatters, scans, indexed writes, convolution windows, the linalg ops) and for a composite
batched through its decomposition."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gradir as gr
from gradir.core.ir import Graph
from gradir.core.trace import building
from gradir.passes.batching import batch_graph

B = 3
N = 5  # every integer operand below indexes an axis of N: in [-N, N), and batched it stays there (_batched)
rng = np.random.default_rng(0)
SPD = (lambda a: a @ a.T + 4 * np.eye(4))(rng.standard_normal((4, 4)))

CASES = {  # name: (function of one example, example arguments)
    "matmul": (lambda a, b: a @ b, [rng.standard_normal((2, 3)), rng.standard_normal((3, 4))]),
    "batched_matmul": (lambda a, b: a @ b, [rng.standard_normal((2, 2, 3)), rng.standard_normal((2, 3, 4))]),
    "matvec": (lambda a, b: a @ b, [rng.standard_normal((2, 3)), rng.standard_normal(3)]),
    "take": (lambda x, i: gr.take(x, i, axis=1), [rng.standard_normal((2, 5, 3)), rng.integers(-5, 5, (2, 2))]),
    "take_grad": (lambda x, i, g: gr.vjp(lambda x: gr.take(x, i, axis=1), x)[1](g)[0],
                  [rng.standard_normal((2, 5, 3)), rng.integers(-5, 5, (4,)), rng.standard_normal((2, 4, 3))]),
    "scans": (lambda x: (gr.cumsum(x, axis=1), gr.cumprod(x, axis=0), gr.logcumsumexp(x, axis=1),
                         gr.cummax(x, axis=1)[1], gr.argsort(x, axis=0), gr.argmin(x, axis=1)),
              [rng.standard_normal((3, 4))]),
    "index_copy": (lambda x, i, v: gr.index_copy(x, 1, i, v),
                   [rng.standard_normal((2, 5)), np.array([3, 0]), rng.standard_normal((2, 2))]),
    "scatter_reduce": (lambda x, i, s: (gr.scatter_reduce(x, 1, i, s, "amax"),  # index_reduce's loop rule
                                        gr.scatter_reduce(x, 1, i, s, "prod", include_self=False)),
                       [rng.standard_normal((2, 5)), rng.integers(0, 5, (2, 3)), rng.standard_normal((2, 3))]),
    "setitem": (lambda x, v: gr.ops.update.setitem(x, (slice(1, 3), 0), v),
                [rng.standard_normal((4, 2)), rng.standard_normal(2)]),
    "conv2d": (lambda x, w: gr.nn.conv2d(x, w, padding=1, stride=2),
               [rng.standard_normal((2, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))]),
    "max_pool": (lambda x: gr.nn.max_pool2d(x, 2), [rng.standard_normal((1, 2, 4, 4))]),
    "linalg": (lambda a, b: (gr.linalg.inv(a), gr.linalg.det(a), gr.linalg.solve(a, b), gr.linalg.cholesky(a),
                             gr.linalg.eigh(a)[0], gr.linalg.slogdet(a)[1]), [SPD, rng.standard_normal((4, 2))]),
    "concat_pad_slice": (lambda x, y: gr.concatenate([gr.pad(x, ((1, 0), (0, 2))), y[::-1]], axis=1)[1:, ::2],
                         [rng.standard_normal((2, 3)), rng.standard_normal((3, 4))]),
}


def _batched(x, axis):
    """B different examples stacked along `axis`: example b is x scaled and shifted by b, or for integer indices
    x + b wrapped into [0, N) (negative entries into [-N, 0)), so that each example gathers or writes at other
    positions (a rule that read example 0's indices for all would fail) and indices distinct in x stay distinct."""
    if x.dtype.kind in "iu":
        assert ((-N <= x) & (x < N)).all(), "an integer operand indexes an axis of N"
        xs = [np.where(x < 0, (x + b) % N - N, (x + b) % N) for b in range(B)]
    else:
        xs = [x * (1 + 0.1 * b) + 0.01 * b for b in range(B)]
    return np.stack(xs, axis=axis)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_rule_matches_a_loop_over_the_examples(name):
    f, args = CASES[name]
    for axes in itertools.product([0, -1, None], repeat=len(args)):
        if all(a is None for a in axes):
            continue
        batched = [x if a is None else _batched(x, a) for x, a in zip(args, axes)]
        ours = gr.vmap(f, in_axes=axes)(*batched)
        examples = [[x if a is None else np.take(x, b, axis=a) for x, a in zip(batched, axes)] for b in range(B)]
        loop = [f(*e) for e in examples]
        flat_ours = ours if isinstance(ours, tuple) else (ours,)
        flat_loop = [r if isinstance(r, tuple) else (r,) for r in loop]
        for k, o in enumerate(flat_ours):
            np.testing.assert_allclose(o, np.stack([r[k] for r in flat_loop]), rtol=1e-10, atol=1e-12,
                                       err_msg=f"{name} in_axes={axes} output {k}")


def test_a_composite_is_batched_through_its_decomposition(rng):
    logits, y = rng.standard_normal((B, 2, 5)), rng.integers(0, 5, (B, 2))
    graph = gr.trace(lambda z, t: gr.nn.cross_entropy(z, t), logits[0], y[0])
    assert "cross_entropy" in {n.op for n in graph.nodes}  # not lowered: the pass meets the composite
    batched = batch_graph(graph, [0, 0], B, 0)
    out = Graph("call")
    with building(out):
        xs = [out.add_input(v.shape, v.dtype) for v in (logits, y)]
        out.outputs = gr.core.trace.inline(batched, xs)
    got = gr.backends.run(out, [logits, y])[0]
    want = [gr.nn.cross_entropy(logits[b], y[b]) for b in range(B)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
