"""Cleanup passes as IR-in / IR-out tests, plus their effect on generated backward graphs."""

from __future__ import annotations

import textwrap

import numpy as np

import gradir as gr
from gradir.backends import run
from gradir.core.ir import Graph
from gradir.passes import cleanup, cse, dce, joint_graph, simplify


def ir(text: str) -> Graph:
    return Graph.parse(textwrap.dedent(text)).verify()


def body(g: Graph) -> list[str]:
    return [ln.strip() for ln in str(g).splitlines()[1:-1]]


def test_dce_drops_unused_nodes():
    g = ir("""
        graph f {
          %0 = input name='x' : f64[3]
          %1 = exp %0 : f64[3]
          %2 = tanh %0 : f64[3]
          return %2
        }""")
    assert body(dce(g)) == ["%0 = input name='x' : f64[3]", "%1 = tanh %0 : f64[3]", "return %1"]


def test_cse_merges_equal_nodes_and_constants():
    g = ir("""
        graph f {
          %0 = input name='x' : f64[3]
          %1 = const value=2.0 : f64[]
          %2 = const value=2.0 : f64[]
          %3 = broadcast_to %1, shape=(3,) : f64[3]
          %4 = broadcast_to %2, shape=(3,) : f64[3]
          %5 = multiply %0, %3 : f64[3]
          %6 = multiply %0, %4 : f64[3]
          %7 = add %5, %6 : f64[3]
          return %7
        }""")
    assert body(dce(cse(g))) == [
        "%0 = input name='x' : f64[3]",
        "%1 = const value=2.0 : f64[]",
        "%2 = broadcast_to %1, shape=(3,) : f64[3]",
        "%3 = multiply %0, %2 : f64[3]",
        "%4 = add %3, %3 : f64[3]",
        "return %4",
    ]


def test_simplify_removes_identities_and_folds_constants():
    g = ir("""
        graph f {
          %0 = input name='x' : f64[2,3]
          %1 = const value=1.0 : f64[]
          %2 = broadcast_to %1, shape=(2, 3) : f64[2,3]
          %3 = multiply %0, %2 : f64[2,3]
          %4 = const value=0.0 : f64[]
          %5 = broadcast_to %4, shape=(2, 3) : f64[2,3]
          %6 = add %5, %3 : f64[2,3]
          %7 = reshape %6, shape=(2, 3) : f64[2,3]
          %8 = transpose %7, perm=(1, 0) : f64[3,2]
          %9 = transpose %8, perm=(1, 0) : f64[2,3]
          %10 = const value=3.0 : f64[]
          %11 = exp %10 : f64[]
          %12 = broadcast_to %11, shape=(2, 3) : f64[2,3]
          %13 = multiply %9, %12 : f64[2,3]
          return %13
        }""")
    out = dce(simplify(g))
    assert [n.op for n in out.nodes] == ["const", "broadcast_to", "multiply"]
    assert float(out.nodes[0].attrs["value"]) == np.exp(3.0)
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(run(out, [x])[0], x * np.exp(3.0), rtol=1e-15)


def test_cleanup_shrinks_a_real_backward_graph_and_keeps_its_values():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 3)), rng.standard_normal((3, 2))
    f = lambda x, w: gr.sum(gr.tanh(x @ w) * 1.0 + 0.0)
    raw = joint_graph(gr.trace(f, x, w))
    clean = cleanup(raw)
    assert len(clean.nodes) < len(raw.nodes)
    args = [x, w, np.ones(())]
    for a, b in zip(run(raw, args), run(clean, args)):
        np.testing.assert_array_equal(a, b)
