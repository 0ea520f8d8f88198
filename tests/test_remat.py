"""Recompute planning (gradir.passes.remat.plan, gr.checkpoint, trace_grad/compile(remat=), `gradir memory --remat`).

Gradients under every plan must equal the unplanned ones bitwise (NumPy backend, float64): a plan
only decides what is kept and what is computed again, never how. The unplanned gradients are checked
against PyTorch in float64. Report figures are derived by hand on small scoped chains.
"""

from __future__ import annotations

import json
import os
import pathlib
import re

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from random_programs import apply_step, make_inputs, programs
from typer.testing import CliRunner

import gradir as gr
from gradir.backends import run
from gradir.cli.app import CLIError, app, parse_size
from gradir.core.errors import GradirError
from gradir.passes.partition import RECOMPUTE, forward_values
from gradir.passes.remat.plan import blocks, in_checkpoint

EXAMPLES = int(os.environ.get("GRADIR_REMAT_EXAMPLES", 40))  # more for a longer search

try:
    runner = CliRunner(mix_stderr=False)  # click < 8.2 mixes stderr into stdout unless told not to
except TypeError:
    runner = CliRunner()


# -- random programs with scopes and checkpoint regions ----------------------------------------------

GROUP_KINDS = ("plain", "scope", "checkpoint", "scope>checkpoint", "checkpoint>scope")


@st.composite
def scoped_programs(draw):
    """(shapes, steps, groups, kinds): consecutive steps cut into groups, each run plainly, inside a
    gr.scope block, inside a gr.checkpoint region, or both (in either nesting)."""
    shapes, steps = draw(programs(max_inputs=3, max_steps=8))
    n = len(steps)
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=4))) if n > 1 else []
    bounds = [0, *cuts, n]
    groups = list(zip(bounds[:-1], bounds[1:]))
    kinds = [draw(st.sampled_from(GROUP_KINDS)) for _ in groups]
    return shapes, steps, groups, kinds


def make_program(steps, groups, kinds, checkpoints=True):
    """The program as a function of its inputs. The loss sums every value, except that of a
    checkpointed group only its last value counts (so regions have values that do not leave them).
    `checkpoints=False`: the same arithmetic with the regions left out (the unplanned reference)."""
    def run_group(pool, lo, hi):
        for s in steps[lo:hi]:
            apply_step(s, pool, 0)

    region = gr.checkpoint(run_group)  # one wrapper: every call is a region of its own

    def f(*xs):
        pool, counted = list(xs), [True] * len(xs)
        for g, ((lo, hi), kind) in enumerate(zip(groups, kinds)):
            ckpt = "checkpoint" in kind
            body = region if ckpt and checkpoints else run_group
            if kind == "scope>checkpoint" or kind == "scope":
                with gr.scope(f"block{g}"):
                    body(pool, lo, hi)
            elif kind == "checkpoint>scope" and checkpoints:
                region_scoped(pool, lo, hi, g)
            else:
                body(pool, lo, hi)
            counted += [not ckpt or k == hi - lo - 1 for k in range(hi - lo)]
        return sum_of([v for v, c in zip(pool, counted) if c], gr.sum)

    def scoped(pool, lo, hi, g):
        with gr.scope(f"block{g}"):
            run_group(pool, lo, hi)

    region_scoped = gr.checkpoint(scoped)
    return f


def sum_of(values, total):
    out = None
    for v in values:
        out = total(v) if out is None else out + total(v)
    return out


def torch_grads(steps, groups, kinds, xs):
    """The reference gradients by PyTorch autograd, float64 (same loss as make_program)."""
    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    pool, counted = list(ts), [True] * len(ts)
    for (lo, hi), kind in zip(groups, kinds):
        for s in steps[lo:hi]:
            apply_step(s, pool, 1)
        counted += [("checkpoint" not in kind) or k == hi - lo - 1 for k in range(hi - lo)]
    sum_of([v for v, c in zip(pool, counted) if c], lambda v: v.sum()).backward()
    return [t.grad.numpy() for t in ts]


def plans(budget: int) -> list[tuple[str, dict]]:
    out = [("none", {}), ("uniform", {}), ("uniform", {"segments": 1}), ("uniform", {"segments": 2}),
           ("uniform", {"segments": 3}), ("selective", {}), ("selective", {"keep_ops": ("tanh", "multiply")}),
           ("mincut", {}), ("mincut", {"forbid": ("matmul", "tanh")}), ("optimal", {"memory_budget": budget})]
    return out


def internal_values(joint: gr.Graph) -> set:
    """Forward values produced inside a checkpoint region that no forward node outside it reads and
    that are not results: what the region must recompute rather than keep."""
    fwd = forward_values(joint)
    forward = set(fwd)
    readers: dict = {v: [] for v in fwd}
    for n in fwd:
        for i in n.inputs:
            if i in readers:
                readers[i].append(n)
    results = set(joint.outputs[:joint.num_forward_outputs])

    def leaves(v) -> bool:  # read outside its region, a result, or the storage of a view that leaves it (a
        # transpose, reshape or broadcast of it: keeping v costs no more than keeping the view, and a backward
        # node may read v itself, as the matmul VJP does for x @ v.T once transpose(transpose(v)) folds)
        return v in results or any(in_checkpoint(u) != in_checkpoint(v) or u.op in SAME_STORAGE and leaves(u)
                                   for u in readers[v])
    return {v for v in forward if in_checkpoint(v) and not leaves(v)}


SAME_STORAGE = ("transpose", "reshape", "broadcast_to", "stop_gradient")


def assert_bitwise(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        assert np.array_equal(g, w), np.max(np.abs(g - w))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scoped_programs(), st.integers(0, 2**16))
@example(([(2, 3)], [("unary", "exp_tanh", (0,), None), ("unary", "exp_tanh", (0,), None), ("transpose", "T", (1,), None),
                     ("unary", "exp_tanh", (0,), None), ("unary", "exp_tanh", (0,), None),
                     ("matmul", "matmul", (0, 3), None), ("unary", "exp_tanh", (0,), None)],
          [(0, 3), (3, 7)], ["checkpoint", "plain"]), 0)  # a region's output is a transpose read by a matmul
def test_every_plan_gives_the_unplanned_gradients_bitwise(program, seed):
    shapes, steps, groups, kinds = program
    xs = make_inputs(shapes, seed)
    argnums = tuple(range(len(xs)))
    plain, f = make_program(steps, groups, kinds, checkpoints=False), make_program(steps, groups, kinds)

    reference = gr.trace_grad(plain, *xs, argnums=argnums)
    loss0, grads0 = reference.run(*xs)
    for g, t in zip(grads0, torch_grads(steps, groups, kinds, xs)):  # the reference itself is right
        np.testing.assert_allclose(g, t, rtol=1e-10, atol=1e-12)

    # a budget every program can meet: its peak without a plan (checkpoint regions recompute even then,
    # which can lift the peak above the reference's)
    budget = gr.trace_grad(f, *xs, argnums=argnums).remat.peak_bytes
    for policy, options in plans(budget):
        if policy == "uniform" and not blocks(reference.joint):
            continue  # see test_uniform_without_forward_nodes
        j = gr.trace_grad(f, *xs, argnums=argnums, remat=policy, **options)
        j.forward.verify()
        j.backward.verify()
        loss, grads = j.run(*xs)
        assert_bitwise(loss, loss0)
        assert_bitwise(grads, grads0)
        # checkpoint regions recompute their inside: none of their internal values is kept
        assert not internal_values(j.joint) & set(j.residuals), (policy, options)
        # every node the backward computes again is marked so, and there are as many as reported
        recomputed = set(j.partition.recomputed)
        marked = [n for n in j.backward.nodes if RECOMPUTE in n.scope]
        assert {j.partition.joint_of[n] for n in marked} == recomputed
        assert len(marked) == j.remat.recomputed_ops

    # the gr.grad path and compiled code, with checkpoint regions and under each policy
    want = gr.grad(plain, argnums=argnums)(*xs)
    assert_bitwise(gr.grad(f, argnums=argnums)(*xs), want)
    policies = ["none", "selective"] + ["uniform"] * bool(blocks(reference.joint)) + ["mincut"]
    for policy in policies:
        assert_bitwise(gr.compile(gr.grad(f, argnums=argnums), remat=policy, backend="numpy")(*xs), want)
    # a budget alone asks for the optimal plan
    assert_bitwise(gr.compile(gr.grad(f, argnums=argnums), memory_budget=budget, backend="numpy")(*xs), want)


# -- reports by hand -----------------------------------------------------------------------------------


def sin_chain(blocks: int):
    def f(x):
        for k in range(blocks):
            with gr.scope(f"b{k}"):
                x = gr.sin(x)
        return gr.sum(x)
    return f


def sin_chain_grad(x, blocks):
    """d/dx sum(sin^(n)(x)) = prod_k cos(x_k), x_0 = x, x_(k+1) = sin(x_k)."""
    g, v = np.ones_like(x), x
    for _ in range(blocks):
        g, v = g * np.cos(v), np.sin(v)
    return g


X5 = np.linspace(-1.0, 1.5, 5)  # f64[5]: 40 bytes per value


@pytest.mark.parametrize("segments, saved, recomputed, calls", [
    # 6 sin blocks; sin's rule keeps its input, so block k needs x_k (x_0 = x is an input).
    (None, 3, 2, 8),  # sqrt(6) -> 2 segments of 3: keep x_3 (read by segment 1) and x_4, x_5 (last segment); recompute x_1, x_2
    (3, 3, 2, 8),     # segments of 2: keep x_2, x_4 (segment inputs) and x_5 (last segment); recompute x_1 (b0), x_3 (b2)
    (6, 5, 0, 6),     # one block per segment: every x_k crosses a segment boundary: keep x_1..x_5, recompute nothing
    (1, 5, 0, 6),     # one segment, the last: nothing recomputed
])
def test_uniform_on_a_scoped_chain_by_hand(segments, saved, recomputed, calls):
    options = {} if segments is None else {"segments": segments}
    j = gr.trace_grad(sin_chain(6), X5, remat="uniform", **options)
    r = j.remat
    assert (r.saved_count, r.saved_bytes, r.recomputed_ops, r.blocks, r.block_calls) == (saved, 40 * saved, recomputed, 6,
                                                                                         calls)
    assert r.recompute_flops == 5 * recomputed  # sin: one flop per element
    _, (g,) = j.run(X5)
    np.testing.assert_allclose(g, sin_chain_grad(X5, 6), rtol=1e-14)


def test_none_keeps_every_block_input_and_selective_keeps_only_the_chosen_ops():
    none = gr.trace_grad(sin_chain(4), X5).remat
    assert (none.saved_count, none.saved_bytes, none.block_calls, none.recomputed_ops) == (3, 120, 4, 0)
    # keep nothing of sin: the backward recomputes x_1..x_3 (x_4 is never read): 3 ops, 3 blocks again
    sel = gr.trace_grad(sin_chain(4), X5, remat="selective").remat
    assert (sel.saved_count, sel.recomputed_ops, sel.block_calls) == (0, 3, 7)


def test_checkpoint_keeps_only_what_enters_and_leaves_the_region():
    region = gr.checkpoint(lambda x: gr.sin(gr.sin(gr.sin(x))))

    def f(x):
        return gr.sum(gr.sin(region(x)))  # the region's output x_3 is read outside (by the last sin's rule)
    j = gr.trace_grad(f, X5)
    # inside: x_1, x_2 (read by sin rules inside the region) are recomputed, not saved; x_3 is kept
    assert (j.remat.saved_count, j.remat.saved_bytes, j.remat.recomputed_ops) == (1, 40, 2)
    assert [n.op for n in j.backward.nodes if RECOMPUTE in n.scope] == ["sin", "sin"]
    np.testing.assert_allclose(gr.grad(f)(X5), sin_chain_grad(X5, 4), rtol=1e-14)
    np.testing.assert_allclose(j.run(X5)[1][0], sin_chain_grad(X5, 4), rtol=1e-14)


def test_compile_with_remat_runs_the_recomputation_and_keeps_it_apart():
    f, blocks = sin_chain(6), 6
    plain = gr.compile(gr.grad(f), backend="numpy")
    planned = gr.compile(gr.grad(f), remat="uniform", backend="numpy")  # 2 segments of 3: x_1, x_2 recomputed (see above)
    np.testing.assert_allclose(planned(X5), sin_chain_grad(X5, blocks), rtol=1e-14)
    assert_bitwise([planned(X5)], [plain(X5)])
    graph = planned.graph(X5)
    recomputed = [n for n in graph.nodes if RECOMPUTE in n.scope]
    assert [n.op for n in recomputed] == ["sin", "sin"]
    # not merged back into the forward's sin nodes: grad(f) needs x_1..x_5 (not the loss, so not x_6),
    # then x_1, x_2 once more, in the graph and in the generated source
    assert sum(n.op == "sin" for n in plain.graph(X5).nodes) == blocks - 1
    assert sum(n.op == "sin" for n in graph.nodes) == blocks - 1 + 2
    assert planned.source(X5).count("np.sin(") == blocks - 1 + 2


def test_uniform_without_forward_nodes():
    j = gr.trace_grad(lambda x: gr.sum(x), 1.5, remat="uniform")  # sum of a 0-d value: no forward node at all
    assert (j.remat.saved_count, j.remat.recomputed_ops, j.remat.block_calls) == (0, 0, 0)
    assert j.run(1.5)[1] == [1.0]


def test_unknown_policy_is_a_gradir_error():
    with pytest.raises(GradirError, match="unknown recompute policy 'sometimes'"):
        gr.trace_grad(sin_chain(2), X5, remat="sometimes")
    with pytest.raises(GradirError, match="unknown recompute policy"):
        gr.compile(lambda x: x, remat="sometimes")


def test_optimal_below_the_smallest_feasible_peak_is_a_clear_error():
    with pytest.raises(GradirError) as e:
        gr.trace_grad(sin_chain(6), X5, remat="optimal", memory_budget=1)
    assert type(e.value).__name__ == "BudgetError"
    message = str(e.value).lower()
    assert any(w in message for w in ("minimum", "smallest", "at least")) and any(c.isdigit() for c in message), message


# -- the command line -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, size", [("4MiB", 4 * 2**20), ("512KiB", 512 * 1024), ("1.5GB", 1_500_000_000),
                                        ("1000000", 10**6), ("2 kb", 2000), ("0.5KiB", 512), ("1e6", 10**6),
                                        ("100B", 100), ("1GiB", 2**30),
                                        # fractions of a byte round to the nearest one (1.2 * 1024 = 1228.8)
                                        ("1.2KiB", 1229), ("1.5", 2), ("0.5", 1), ("2.4 B", 2),
                                        # what gradir prints reads back: "4,250 B (4.15 KiB)"; 4.15 * 1024 = 4249.6
                                        ("4.15 KiB", 4250), ("4,250 B", 4250), ("1,048,576", 2**20)])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text, why", [("4M", "not a size"), ("4MB/s", "not a size"), ("abc", "not a size"),
                                       ("", "not a size"), ("nan", "not a size"), ("12,34", "not a size"),
                                       ("0", "positive"), ("-1KiB", "positive"), ("0.4", "rounds to 0 B")])
def test_parse_size_rejects(text, why):
    with pytest.raises(CLIError, match=why) as e:
        parse_size(text)
    assert "\n" not in str(e.value) and repr(text) in str(e.value)


CHAIN_MODEL = '''import gradir as gr

def loss(x: gr.f64[5]):
    for k in range(6):
        with gr.scope(f"b{k}"):
            x = gr.sin(x)
    return gr.sum(x)
'''


@pytest.fixture
def chain_file(tmp_path) -> pathlib.Path:
    path = tmp_path / "chain.py"
    path.write_text(CHAIN_MODEL)
    return path


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_memory_with_remat_json_gives_both_reports(chain_file):
    result = _invoke("memory", chain_file, "--remat", "uniform", "--segments", "3", "--format", "json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert set(out) == {"memory", "remat", "budget_bytes"} and out["budget_bytes"] is None
    r = out["remat"]  # segments of 2 blocks: see test_uniform_on_a_scoped_chain_by_hand
    assert (r["policy"], r["saved_count"], r["saved_bytes"], r["recomputed_ops"], r["block_calls"]) == ("uniform", 3, 120,
                                                                                                        2, 8)
    assert r["options"]["segments"] == 3
    assert out["memory"]["peak_bytes"] >= r["peak_bytes"]  # the memory plan also counts the program's results
    assert result.stderr == ""


def test_memory_with_remat_table(chain_file):
    result = _invoke("memory", chain_file, "--remat", "uniform")
    assert result.exit_code == 0, result.stderr
    assert "memory plan" in result.stdout and "recompute plans" in result.stdout and "uniform" in result.stdout


@pytest.mark.parametrize("policy", ["none", "uniform", "selective", "mincut"])
@pytest.mark.parametrize("command", ["memory", "trace"])
def test_a_budget_for_a_heuristic_is_refused_not_ignored(chain_file, policy, command):
    """Only the optimal planner reads a budget; a heuristic would produce the same plan with or without one
    (160 B fits in 1 KiB, so nothing would even be noted): the option is refused, saying which policy takes it."""
    result = _invoke(command, chain_file, "--remat", policy, "--budget", "1KiB")
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "--budget is an option of --remat optimal" in result.stderr and f"--remat {policy} does not" in result.stderr


def test_a_printed_budget_reads_back(chain_file):
    """The summary prints budgets as "4,250 B (4.15 KiB)"; either form, pasted back, asks for that budget
    (to the byte for the first; 4.15 KiB = 4249.6 B rounds to the same 4,250 B)."""
    printed = _invoke("trace", chain_file, "--remat", "optimal", "--budget", "4250")
    assert printed.exit_code == 0, printed.stderr
    shown = re.search(r"\(budget ([\d,]+ B) \(([\d.]+ KiB)\)\)", " ".join(printed.stdout.split()))  # table may wrap
    assert shown is not None and shown.groups() == ("4,250 B", "4.15 KiB"), printed.stdout
    for text in shown.groups():
        again = _invoke("memory", chain_file, "--remat", "optimal", "--budget", text, "--format", "json")
        assert again.exit_code == 0 and json.loads(again.stdout)["budget_bytes"] == 4250, again.stderr


def test_memory_without_remat_is_the_plain_memory_report(chain_file):
    result = _invoke("memory", chain_file, "--format", "json")
    assert result.exit_code == 0 and "peak_bytes" in json.loads(result.stdout)


@pytest.mark.parametrize("args, message", [
    (["--remat", "sometimes"], "unknown --remat 'sometimes' (have: none, uniform, selective, mincut, optimal)"),
    (["--budget", "4M"], "--budget '4M' is not a size"),
    (["--budget", "0.4"], "rounds to 0 B"),
    (["--remat", "uniform", "--budget", "1KiB"], "--budget is an option of --remat optimal"),
    (["--remat", "selective", "--segments", "2"], "--segments is an option of --remat uniform"),
    (["--segments", "0"], "--segments 0 must be at least 1"),
])
def test_memory_rejects_bad_remat_options_in_one_line(chain_file, args, message):
    result = _invoke("memory", chain_file, *args)
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_budget_error_is_one_line_with_exit_2(chain_file, monkeypatch):
    """A planner's failure (the MILP's "budget below the smallest feasible peak") reaches the user as
    one line and exit code 2; here a stand-in planner raises it, with a two-line message."""
    import gradir.api.transforms as transforms  # where trace_grad looks the planner up
    import gradir.core.errors

    error = getattr(gradir.core.errors, "BudgetError", GradirError)

    def refuse(joint, policy="none", memory_budget=None, **options):
        raise error(f"budget {memory_budget} B is below the smallest feasible peak\n(minimum: 160 B)", op="remat")
    monkeypatch.setattr(transforms, "plan_remat", refuse)
    result = _invoke("memory", chain_file, "--remat", "optimal", "--budget", "100")
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "budget 100 B is below the smallest feasible peak (minimum: 160 B)" in result.stderr


def test_memory_budget_below_the_minimum_states_it(chain_file):
    result = _invoke("memory", chain_file, "--remat", "optimal", "--budget", "1")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr and "BudgetError" in result.stderr
    # the minimum it states is the true one: a plan fits in it, and not in a byte less
    minimum = int(re.findall(r"([\d,]+) (?:B|bytes)\)?$", result.stderr.strip())[-1].replace(",", ""))
    fits = _invoke("memory", chain_file, "--remat", "optimal", "--budget", minimum, "--format", "json")
    assert fits.exit_code == 0 and json.loads(fits.stdout)["remat"]["peak_bytes"] <= minimum
    assert _invoke("memory", chain_file, "--remat", "optimal", "--budget", minimum - 1).exit_code == 2


def test_trace_with_remat_prints_runnable_programs_and_a_one_line_summary(chain_file):
    result = _invoke("trace", chain_file, "--remat", "uniform", "--segments", "3")
    assert result.exit_code == 0, result.stderr
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("recompute")]
    assert len(lines) == 1
    assert ("uniform (segments=3): 3 activations saved (120 B), 2 ops recomputed (10 flops), 8 block calls for 6 blocks"
            in lines[0])
    # the printed programs parse back and compute the gradient, recomputing x_1 and x_3 in backward
    texts = re.findall(r"^graph \S+ \{$.*?^\}$", result.stdout, re.S | re.M)
    forward, backward = (gr.Graph.parse(t).verify() for t in texts)
    assert [n.op for n in backward.nodes if RECOMPUTE in n.scope] == ["sin", "sin"]
    x = np.random.default_rng(0).standard_normal(5)
    outs = run(forward, [x])
    (g,) = run(backward, list(outs[1:]) + [np.ones(())])
    np.testing.assert_allclose(g, sin_chain_grad(x, 6), rtol=1e-14)
