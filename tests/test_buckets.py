"""Gradient buckets planned from the backward schedule (passes/buckets.py), the LLVM backend's run that hands
each output over as soon as it is final, and `gradir schedule --buckets`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import gradir as gr
from gradir.cli.app import app
from gradir.passes.buckets import plan_buckets
from gradir.util.pytree import tree_flatten

RNG = np.random.default_rng(0)
LAYERS, WIDTH = 4, 16
BYTES = WIDTH * WIDTH * 8  # one float64 weight gradient


def chain(p, x):
    for i in range(LAYERS):
        x = gr.tanh(x @ p[f"w{i}"])
    return gr.mean(x * x)


def chain_args():
    return {f"w{i}": RNG.standard_normal((WIDTH, WIDTH)) / 4 for i in range(LAYERS)}, RNG.standard_normal((3, WIDTH))


def test_buckets_follow_the_order_backward_finishes_gradients():
    # the backward of a chain finishes the last layer's gradient first: buckets of two weights are (w3, w2), (w1, w0)
    p, x = chain_args()
    j = gr.trace_grad(chain, p, x)
    plan = j.buckets(2 * BYTES)
    assert [b.names for b in plan.buckets] == [["d p['w3']", "d p['w2']"], ["d p['w1']", "d p['w0']"]]
    assert [b.nbytes for b in plan.buckets] == [2 * BYTES, 2 * BYTES]
    order = j.schedule.order
    step_of = {id(n): k for k, n in enumerate(order)}  # (Values compare elementwise: no list.index)
    for b in plan.buckets:  # each bucket launches at the step of its last gradient's producer
        last = j.backward.outputs[b.positions[-1]]
        assert order[b.launch_step] is last
        assert all(step_of[id(j.backward.outputs[p])] <= b.launch_step for p in b.positions)
    assert plan.buckets[-1].launch_step == len(order) - 1  # the first layer's gradient is the backward's end
    one = j.buckets(BYTES - 1)  # each gradient over the cap: one bucket each, still in finishing order
    assert [b.names for b in one.buckets] == [[f"d p['w{i}']"] for i in reversed(range(LAYERS))]
    assert len(j.buckets(10**9).buckets) == 1


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=6), st.integers(1, 12))
def test_buckets_partition_the_gradients_in_ready_order_under_the_cap(widths, cap_units):
    # random layer widths and caps: every gradient in exactly one bucket, none over the cap unless alone, and the
    # launch steps never decrease
    p = {f"w{i}": np.ones((w, 2)) for i, w in enumerate(widths)}

    def f(p):
        return sum(gr.sum(gr.tanh(v) * (i + 1)) for i, v in enumerate(p.values()))
    j = gr.trace_grad(f, p)
    cap = cap_units * 16
    plan = j.buckets(cap)
    positions = [q for b in plan.buckets for q in b.positions]
    assert sorted(positions) == list(range(len(widths)))
    for b in plan.buckets:
        assert b.nbytes <= cap or len(b.positions) == 1
        assert b.nbytes == sum(j.backward.outputs[q].nbytes for q in b.positions)
    assert plan.launch_steps == sorted(plan.launch_steps)


def test_run_with_ready_hands_over_each_output_once_final_in_the_plans_order():
    p, x = chain_args()
    step = gr.compile(gr.value_and_grad(chain), backend="llvm")
    want = tree_flatten(step(p, x))[0]
    compiled = step.executable(p, x)
    seen = []
    outs = compiled.run_with_ready(tree_flatten((p, x))[0], lambda pos, a: seen.append((pos, a.copy())))
    assert sorted(pos for pos, _ in seen) == list(range(len(want)))
    for pos, early in seen:  # what the callback saw was already the final value
        np.testing.assert_array_equal(early, want[pos])
        np.testing.assert_array_equal(outs[pos], want[pos])
    plan = plan_buckets(step.graph(p, x), list(range(1, LAYERS + 1)), 1)  # one gradient per bucket
    assert [pos for pos, _ in seen if pos > 0] == [b.positions[0] for b in plan.buckets]


def test_schedule_command_prints_and_draws_the_buckets(tmp_path):
    runner = CliRunner()
    model = "examples/models/mlp.py"
    result = runner.invoke(app, ["schedule", model, "--buckets", "1KiB", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    buckets = data["buckets"]["buckets"]
    assert data["buckets"]["bucket_bytes"] == 1024 and len(data["schedule"]["steps"]) == data["buckets"]["num_steps"]
    assert all(b["bytes"] <= 1024 or len(b["gradients"]) == 1 for b in buckets)
    steps = [s["node"] for s in data["schedule"]["steps"]]
    assert [steps[b["launch_step"]] for b in buckets] == [b["launch_node"] for b in buckets]
    plot = tmp_path / "timeline.svg"
    result = runner.invoke(app, ["schedule", model, "--buckets", "1KiB", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert "gradient buckets of" in result.stdout and all(f'id="bucket{b["bucket"]}-0"' in plot.read_text()
                                                          for b in buckets)
    bad = runner.invoke(app, ["schedule", model, "--buckets", "lots"])
    assert bad.exit_code != 0 and "--buckets 'lots' is not a size" in bad.output


def test_plan_rejects_a_non_positive_cap():
    p, x = chain_args()
    with pytest.raises(ValueError, match="bucket_bytes"):
        plan_buckets(gr.trace_grad(chain, p, x).backward, None, 0)


def test_compiled_run_with_ready_falls_back_to_the_end_on_other_backends():
    # the NumPy backend cannot hand outputs over mid-run: Compiled.run_with_ready calls back after the run, with
    # the same flat outputs a call gives
    p, x = chain_args()
    for backend in ("numpy", "llvm"):
        step = gr.compile(gr.value_and_grad(chain), backend=backend)
        seen = []
        outs = step.run_with_ready(p, x, on_ready=lambda pos, a: seen.append(pos))
        want = tree_flatten(step(p, x))[0]
        assert sorted(seen) == list(range(len(want)))
        for o, w in zip(outs, want):
            np.testing.assert_array_equal(o, w)
