"""Dependency-counted schedules and memory plans: property tests on random programs (dependencies
respected, every policy gives the same gradients, arena buffers never overlap while both live, the
planned peak is the measured peak) and the memory-aware policy against engine order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import gradir as gr
from gradir.backends import compile_graph
from gradir.passes.memory import plan_memory
from gradir.passes.report import human_bytes
from gradir.passes.schedule import POLICIES, schedule
from tests.random_programs import make_inputs, programs, run


def traced(program, seed=0):
    shapes, steps = program
    xs = make_inputs(shapes, seed)
    return gr.trace_grad(lambda *a: run(steps, a, "gr"), *xs, argnums=tuple(range(len(xs)))), xs


def check_dependencies(graph, order):
    done = set(graph.inputs)
    assert sorted(map(id, order)) == sorted(map(id, graph.nodes))  # every node exactly once
    for n in order:
        assert all(i in done for i in n.inputs), f"{n.op} ran before its operands"
        done.add(n)


def check_arena(plan):
    live = [b for b in plan.buffers if b.nbytes]
    for i, a in enumerate(live):
        assert 0 <= a.offset and a.offset + a.nbytes <= plan.arena_bytes
        for b in live[i + 1:]:
            if a.overlaps(b):
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset, (a, b)
    assert plan.arena_bytes >= plan.peak_bytes >= plan.lower_bound_bytes


@settings(max_examples=40, deadline=None)
@given(programs(max_steps=10))
def test_random_programs_schedules_and_plans(program):
    j, xs = traced(program)
    reference = None
    for policy in POLICIES:
        jp = j.with_policy(policy)
        check_dependencies(jp.backward, jp.schedule.order)
        outputs, grads = jp.run(*xs)
        if reference is None:
            reference = grads
        for a, b in zip(grads, reference):
            np.testing.assert_array_equal(a, b)  # same ops on the same values: bitwise equal
        plan = jp.memory
        check_arena(plan)
        measured = jp.measure(*xs)
        assert measured.peak_bytes == plan.peak_bytes
        for t, n in enumerate(plan.order):
            if n in measured.live_bytes:
                assert measured.live_bytes[n] == plan.live_bytes[t], (t, n.op)


def test_schedule_report_counts_and_queue():
    j = gr.trace_grad(lambda a, b: gr.tanh(a * b + a), 1.5, -2.0, argnums=(0, 1))
    s = j.schedule
    d = s.to_dict()
    assert d["policy"] == "engine" and len(d["steps"]) == len(j.backward.nodes)
    # the node consuming the cotangent and 1 - y^2 (`t = g * (1 - y*y)`) fans out to three users
    fan = next(st for st in s.steps if len(st.decremented) == 3)
    assert fan.node.op == "multiply" and sorted(c for _, c in fan.decremented) == [0, 0, 1]
    # engine order is the order autodiff emitted the rules in
    assert s.order == j.backward.nodes
    assert "counts decremented" in str(s)


def mlp(x, w1, w2, w3):
    h = gr.relu(x @ w1)
    h = gr.tanh(h @ w2)
    return gr.sum((h @ w3) ** 2)


def wide(x, w):
    # several independent branches: the engine finishes them in emission order, the memory policy
    # prefers steps that release saved activations early
    outs = [gr.sum(gr.tanh(x * (k + 1.0)) @ w) for k in range(4)]
    return outs[0] + outs[1] * outs[2] - outs[3]


MODELS = {
    "mlp": (mlp, lambda r: (r.standard_normal((32, 16)), r.standard_normal((16, 64)), r.standard_normal((64, 64)),
                            r.standard_normal((64, 8)))),
    "wide": (wide, lambda r: (r.standard_normal((64, 32)), r.standard_normal((32, 4)))),
    "tanh": (lambda a, b: gr.tanh(a * b + a), lambda r: (1.5, -2.0)),
}


def peaks(name):
    fn, make = MODELS[name]
    args = make(np.random.default_rng(0))
    j = gr.trace_grad(fn, *args, argnums=tuple(range(len(args))))
    return {p: j.with_policy(p).memory.peak_bytes for p in POLICIES}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_memory_policy_never_peaks_above_engine_order(name):
    p = peaks(name)
    assert p["memory"] <= p["engine"]


def test_memory_policy_is_strictly_better_somewhere():
    assert any(peaks(name)["memory"] < peaks(name)["engine"] for name in MODELS)


def test_plan_of_a_compiled_graph_matches_measurement_and_compile_runs_the_schedule():
    rng = np.random.default_rng(1)
    args = MODELS["mlp"][1](rng)
    step = gr.compile(gr.value_and_grad(mlp, argnums=(1, 2, 3)), policy="memory", backend="numpy")
    graph = step.graph(*args)
    order = schedule(graph, "memory").order
    assert step.source(*args) == compile_graph(graph, order=order, check=step.check).source
    expected = gr.value_and_grad(mlp, argnums=(1, 2, 3))(*args)
    got = step(*args)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-12)
    for a, b in zip(got[1], expected[1]):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    plan = plan_memory(graph, order)
    from gradir.backends import measure_memory

    assert measure_memory(graph, list(args), order).peak_bytes == plan.peak_bytes


# -- printing the reports (passes.text_table) -------------------------------------------------------

def _mlp_trace():
    fn, make = MODELS["mlp"]
    return gr.trace_grad(fn, *make(np.random.default_rng(0)), argnums=(1, 2, 3))


def _index(values, v) -> int:
    return next(i for i, u in enumerate(values) if u is v)


def test_reports_print_every_row_within_80_columns():
    j = _mlp_trace()
    rows = {"schedule": len(j.backward.nodes), "memory": len(j.forward.nodes) + len(j.backward.nodes)}
    for what, n in rows.items():
        text = str(getattr(j, what))
        assert max(map(len, text.splitlines())) <= 80, what
        assert "not shown" not in text
        lines = text.splitlines()
        rule = next(i for i, line in enumerate(lines) if set(line) <= {"-", " "} and line)
        steps = [line.split() for line in lines[rule + 1:rule + 1 + n]]
        # one line per step, numbered 0.. within each program (the memory plan: forward, then backward)
        numbers = [int(s[1] if what == "memory" else s[0]) for s in steps]
        expected = list(range(n)) if what == "schedule" else (list(range(len(j.forward.nodes)))
                                                               + list(range(len(j.backward.nodes))))
        assert numbers == expected, what


def test_one_step_numbering_across_schedule_memory_and_saved():
    """The memory peak is named by its backward step and %k, as the schedule and the backward IR name them."""
    j = _mlp_trace()
    m, s = j.memory, j.schedule
    k = m.peak_step - len(j.forward.nodes)  # the timeline is forward's nodes, then backward in schedule order
    assert k >= 0 and m.phases[m.peak_step] == "backward"
    node = s.order[k]
    name = f"%{j.backward.number(node)}"
    assert f"peak {human_bytes(m.peak_bytes)} at backward step {k} ({name} {node.op})" in str(m)
    row = next(line.split() for line in s.text(width=None).splitlines() if line.split()[:2] == [str(k), name])
    assert row[2] == node.op
    # the saved report's last use is the backward step of the last reader in that same order
    for e, x in zip(j.saved.entries, j.backward.inputs):
        readers = [_index(s.order, u) for u in j.backward.nodes if any(i is x for i in u.inputs)]
        if readers and not any(o is x for o in j.backward.outputs):
            assert e.last_use == max(readers)


def test_saved_values_are_named_after_their_forward_ids():
    j = _mlp_trace()
    k = j.forward.num_forward_outputs
    for v, x in zip(j.forward.outputs[k:], j.backward.inputs):
        if v.op != "input":
            # the forward IR's line for v reads `%N = op ...`: the backward input is saved_<op>N
            line = next(t for t in j.forward.to_text().splitlines() if t.strip().startswith(f"%{j.forward.number(v)} = "))
            number = line.split("=")[0].strip()[1:]
            assert x.attrs["name"] == f"saved_{v.op}{number}" == f"saved_{line.split()[2]}{number}"


def test_summaries_keep_the_ends_and_the_peak_and_count_what_they_leave_out():
    j = _mlp_trace()
    m = j.memory
    total = len(m.order)
    text = m.text(limit=6, more="MORE")
    lines = text.splitlines()
    assert any(line.rstrip().endswith("<- peak") for line in lines)
    gaps = [line for line in lines if "not shown" in line]
    shown = sum(1 for line in lines if line.startswith(("forward ", "backward ")))
    left = sum(int(g.split()[1].replace(",", "")) for g in gaps)
    assert shown + left == total and shown <= 6 + 3 and all(g.endswith("MORE") for g in gaps)
    assert "forward step 3 to" in gaps[0]  # named the way the rows are: phase and step within it


def test_csv_holds_the_same_numbers_as_to_dict():
    import csv
    import io

    j = _mlp_trace()
    steps = j.schedule.to_dict()["steps"]
    rows = list(csv.DictReader(io.StringIO(j.schedule.to_csv())))
    assert [(int(r["step"]), r["node"], r["op"], int(r["queue_size"]), int(r["freed_bytes"])) for r in rows] == \
        [(s["step"], s["node"], s["op"], s["queue_size"], s["freed_bytes"]) for s in steps]
    mem = list(csv.DictReader(io.StringIO(j.memory.to_csv())))
    assert [int(r["live_bytes"]) for r in mem] == j.memory.live_bytes
    assert [(r["phase"], int(r["phase_step"])) for r in mem] == [(s["phase"], s["phase_step"])
                                                                  for s in j.memory.to_dict()["steps"]]
    saved = list(csv.DictReader(io.StringIO(j.saved.to_csv())))
    assert [(r["value"], int(r["bytes"]), int(r["new_bytes"])) for r in saved] == \
        [(e["name"], e["bytes"], e["new_bytes"]) for e in j.saved.to_dict()["entries"]]


def test_memory_peak_and_the_recompute_reports_activation_peak_are_named_apart():
    fn, make = MODELS["mlp"]
    j = gr.trace_grad(fn, *make(np.random.default_rng(0)), argnums=(1, 2, 3), remat="selective")
    # the activation peak leaves out the program's results (loss and gradients): never above the plan's peak
    assert j.remat.peak_bytes <= j.memory.peak_bytes
    assert "activation peak" in str(j.remat) and "planned peak" not in str(j.remat)
    assert "results included" in str(j.memory)


def test_rich_table_has_the_text_rows():
    j = _mlp_trace()
    assert j.schedule.table().row_count == len(j.backward.nodes)
    assert j.schedule.table(limit=10).row_count == 11  # 10 rows and the one saying rows were left out


def test_text_table_fits_by_shrinking_then_dropping_then_cutting():
    from gradir.passes.text_table import Column, render, shown

    assert shown(10, None) == list(range(10))
    assert shown(10, 4) == [0, 1, None, 8, 9]
    assert shown(10, 4, keep={5}) == [0, 1, None, 5, None, 8, 9]
    assert shown(10, 4, keep={3}) == [0, 1, 2, 3, None, 8, 9]  # a gap of one row shows the row
    cols = [Column("id", right=True), Column("why", wrap=True, least=6), Column("where", drop=1)]
    rows = [("7", "tanh keeps its output", "model.py:12")]
    # natural widths 2 + 21 + 11 and two gaps of 2: 38 columns
    assert render(cols, rows, width=None) == ["id  why                    where",
                                              "--  ---------------------  -----------",
                                              " 7  tanh keeps its output  model.py:12"]
    # 30 columns: `why` narrows to 30 - 2 - 11 - 4 = 13 and wraps at word boundaries; `where` stays
    assert render(cols, rows, width=30) == ["id  why            where",
                                            "--  -------------  -----------",
                                            " 7  tanh keeps     model.py:12",
                                            "    its output"]
    # 20 columns: `why` would have to go below its header's width first, so `where` is dropped
    assert render(cols, rows, width=20) == ["id  why", "--  ----------------", " 7  tanh keeps its", "    output"]
    cut = [Column("op", least=4)]
    assert render(cut, [("broadcast_to",)], width=6) == ["op", "------", "broad…"]
