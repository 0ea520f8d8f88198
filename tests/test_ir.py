"""The IR: text form round trip, verifier, networkx view, and property tests on random programs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import gradir as gr
from gradir.core.errors import IRParseError, VerifyError
from gradir.core.ir import Graph
from gradir.passes import cse, dce, joint_graph, jvp_graph, lower_composites, partition, run_pipeline, simplify
from tests.random_programs import make_inputs, programs, run


def loss(a, b):
    return gr.tanh(a * b + a)


def test_text_form_is_readable_and_names_the_source_line():
    g = gr.trace(loss, 1.5, -2.0)
    text = str(g)
    assert text.splitlines()[0] == "graph loss {"
    assert "%2 = multiply %0, %1 : f64[]  # test_ir.py:" in text
    assert text.splitlines()[-2] == "  return %4"


def test_round_trip_preserves_text_and_semantics():
    x = np.array([[1.0, -2.0, 0.5]])
    g = gr.trace(lambda x: gr.sum(gr.exp(x) * 2.0 + x[:, ::2].sum(), axis=1), x)
    parsed = Graph.parse(str(g)).verify()
    assert str(parsed) == str(g)
    from gradir.backends import run as run_graph

    np.testing.assert_allclose(run_graph(parsed, [x])[0], run_graph(g, [x])[0], rtol=0, atol=0)


def test_large_constants_are_elided_unless_full():
    big = np.arange(100.0)
    g = gr.trace(lambda x: x + big, np.zeros(100))
    assert "value=..." in str(g)
    with pytest.raises(IRParseError):
        Graph.parse(str(g))
    assert str(Graph.parse(g.to_text(full=True))) == str(g)


def test_parse_errors_are_gradir_errors():
    with pytest.raises(IRParseError):
        Graph.parse("graph f {\n  %0 = input name='x' : f64[]\n  %1 = tanh %7 : f64[]\n  return %1\n}")
    with pytest.raises(IRParseError):
        Graph.parse("not a graph")


def test_verifier_catches_wrong_types_and_order():
    g = gr.trace(loss, 1.5, -2.0)
    bad = Graph.parse(str(g).replace("%3 = add %2, %0 : f64[]", "%3 = add %2, %0 : f32[]"))
    with pytest.raises(VerifyError, match="op rule gives f64"):
        bad.verify()
    text = str(g).replace("%2 = multiply %0, %1", "%2 = multiply %0, %0")
    Graph.parse(text).verify()  # still well formed
    g.nodes[0], g.nodes[1] = g.nodes[1], g.nodes[0]
    with pytest.raises(VerifyError, match="before its definition"):
        g.verify()


def test_networkx_view_matches_graph():
    g = gr.trace(loss, 1.5, -2.0)
    nxg = g.to_networkx()
    assert nxg.number_of_nodes() == len(g.inputs) + len(g.nodes)
    assert nxg.number_of_edges() == sum(len(n.inputs) for n in g.nodes)
    import networkx as nx

    order = list(nx.topological_sort(nxg))
    assert order.index(0) < order.index(4)


@settings(max_examples=40, deadline=None)
@given(programs())
def test_random_programs_round_trip_and_every_pass_verifies(program):
    shapes, steps = program
    xs = make_inputs(shapes)
    g = gr.trace(lambda *a: run(steps, a, "gr"), *xs)
    assert str(Graph.parse(g.to_text(full=True))) == str(g)
    joint = joint_graph(g)
    joint.verify()
    assert str(Graph.parse(joint.to_text(full=True))) == str(joint)
    for p in (lower_composites, simplify, cse, dce):
        joint = p(joint).verify()
    assert joint.num_forward_outputs == 1
    part = partition(joint)
    part.forward.verify()
    part.backward.verify()
    assert len(dce(part.backward).nodes) == len(part.backward.nodes)  # no dead code left in backward
    assert len(dce(part.forward).nodes) == len(part.forward.nodes)
    run_pipeline(jvp_graph(g)).verify()
