"""E. What backward keeps alive: saved tensors, the backward schedule and the memory plan.

1. For each op, what its backward rule reads (asked of the rules themselves, gradir.core.rules).
2. The saved-tensor report of L = tanh(a*b + a).
3. The same expression on 3-vectors, L = sum(tanh(a*b + a)) in float64: the backward schedule
   step by step (each node's dependency count, the ready queue the engine picks from) and the
   memory timeline of forward then backward, every byte derivable by hand (one f64[3] is 24 B).
4. Twelve residual MLP blocks (width 256, batch 32, float32), without recomputation: how many
   tensors backward keeps and how many bytes, and the peak of forward + backward under the engine
   and the memory-aware schedules, taken apart into what is alive at the peak. (Checkpointing, the
   other half of this experiment, is the recompute planner's job: e_checkpointing.py.)
5. Attention score memory: one causal attention layer, 12 heads, T=1024, fp32, keeps its softmax
   probabilities, B*H*T*T elements: 48 MiB per layer, read off the saved-tensor report.

Our block is `x + relu(x @ W1 + b1) @ W2 + b2` (weights 256x256). The PyTorch reference experiment
reported 61 tensors / 13.91 MiB; PyTorch counts what its autograd nodes hold, parameters included,
while gradir's report counts new memory only (activations; inputs and parameters cost nothing extra,
and views of saved values are free), so the figures differ by design.

Two peaks of the same twelve-block model. This program prints "engine order 6.05 MiB": the memory
plan's peak (`j.memory.peak_bytes`), every buffer the forward and backward programs allocate,
the program's results (the gradients, alive to the end) included, the inputs (parameters and x:
the caller's) and 0-d values not. It is reached at the last backward step, when every activation
has been freed and all 48 gradients are held: 24 x 256 KiB (dW1, dW2) + 24 x 1 KiB (db1, db2) +
one 32x256 cotangent of 32 KiB = 6,348,800 B. e_checkpointing.py prints "activation peak 832 KiB"
for the same model: the same timeline with the program's results left out too (every recompute
plan holds the same gradients), reached at backward step 15, in block 11's backward:
22 saved activations + 4 backward temporaries, 26 x 32 KiB = 851,968 B.

With `--out DIR` it writes, for the 3-vector expression and for the twelve blocks, the diagrams
(forward, backward, joint and fused-kernel programs: .dot, and .svg when Graphviz's `dot` runs),
the memory-timeline plot and an HTML report (`j.render`), and prints their paths.

Run: python examples/e_saved_tensors_and_memory.py [--out DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import textwrap

import numpy as np

import gradir as gr
from gradir.core.rules import explain, vjp_reads, vjp_reads_by_operand
from gradir.passes.memory import plan_memory
from gradir.passes.report import human_bytes

WIDTH, BATCH, BLOCKS = 256, 32, 12
MODELS = pathlib.Path(__file__).resolve().parent / "models"
# The course's figure (TEACHING.md, section E), printed beside ours as "(the course: X)": attention score memory
# B*H*T*T elements per layer, 12 heads, T=1024, fp32
COURSE = {"attention_mib_per_layer": 48}


def rule_table() -> dict[str, str]:
    """op -> what its backward rule keeps, for a few ops on f64[3] operands."""
    x = np.zeros(3)
    cases = {"add": 2, "multiply": 2, "divide": 2, "tanh": 1, "exp": 1, "sigmoid": 1, "relu": 1, "sin": 1,
             "log": 1, "sum": 1}
    out = {}
    for op, n in cases.items():
        attrs = {"axes": (0,), "keepdims": False} if op == "sum" else {}
        shape = () if op == "sum" else (3,)
        args = (op, [x] * n, attrs, shape, x.dtype)
        out[op] = explain(op, vjp_reads(*args), n, by_operand=vjp_reads_by_operand(*args))
    return out


def residual_blocks(blocks=BLOCKS, width=WIDTH, batch=BATCH, seed=0):
    """The twelve-block model of examples/models/residual_blocks.py."""
    spec = importlib.util.spec_from_file_location("residual_blocks", MODELS / "residual_blocks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.residual_blocks(blocks, width, batch, seed)


def tanh_expr(a, b):
    return gr.sum(gr.tanh(a * b + a))


VEC_A, VEC_B = np.array([1.5, -0.5, 2.0]), np.array([-2.0, 1.0, 0.5])


def activation_plan(j):
    """The memory plan of j's timeline with the program's results left out, as the recompute planner
    measures it (passes.remat's "activation peak")."""
    graph, order, phases = j.partition.stitch(j.schedule.order)
    return plan_memory(graph, order, phases, count_outputs=False)


KINDS = ("gradient", "saved activation", "forward value", "backward temporary")
PLURAL = {"gradient": "gradients", "saved activation": "saved activations", "forward value": "forward values",
          "backward temporary": "backward temporaries"}


def peak_parts(plan) -> list[dict]:
    """What is alive at a memory plan's peak step, grouped by kind and type: gradients (the program's
    results), saved activations (forward buffers still alive in the backward), forward values and
    backward temporaries; within a kind, the largest buffers first."""
    t = plan.peak_step
    results = {plan.owner[o] for o in plan.graph.outputs}
    groups: dict[tuple, int] = {}
    for b in plan.lifetimes:
        if b.start <= t <= b.end:
            if b.value in results:
                what = "gradient"
            elif b.phase == "forward":
                what = "saved activation" if plan.phases[t] == "backward" else "forward value"
            else:
                what = "backward temporary"
            key = (what, b.value.type_str, b.nbytes)
            groups[key] = groups.get(key, 0) + 1
    parts = [{"what": w, "type": ty, "count": n, "bytes_each": nb} for (w, ty, nb), n in groups.items()]
    return sorted(parts, key=lambda r: (KINDS.index(r["what"]), -r["bytes_each"]))


def parts_text(peak: int, parts: list[dict]) -> str:
    """"6.05 MiB = 24 x 256.00 KiB (gradients f32[256,256]) + ... = 6,348,800 B"."""
    terms = " + ".join(f"{r['count']} x {human_bytes(r['bytes_each'])} "
                       f"({PLURAL[r['what']] if r['count'] > 1 else r['what']} {r['type']})" for r in parts)
    return f"{human_bytes(peak)} = {terms} = {peak:,} B"


def say(text: str, indent: str = "   ") -> None:
    """Print a paragraph wrapped to 100 columns."""
    print(textwrap.fill(text, 100, initial_indent=indent, subsequent_indent=indent))


def indented(report_text: str, indent: str = "   ") -> str:
    return indent + report_text.replace("\n", "\n" + indent)


def write_trace_files(j, out, name: str) -> dict:
    """j.render into `out` (atomic writes, a manifest per name): prints what was written, and why a
    diagram was not drawn (no `dot` program, a timeout) without stopping. Returns {key: path}."""
    written = j.render(pathlib.Path(out) / name)
    svgs = sorted((k for k in written if k.endswith(".svg") and k != "memory.svg"), key=lambda k: k != "backward.svg")
    print(f"   wrote {len(written)} files for {name} in {out}:")
    print(f"     HTML report (open it in a browser): {written['html']}")
    print(f"     memory timeline plot: {written['memory.svg']}")
    if svgs:
        print(f"     {len(svgs)} diagrams drawn by dot, e.g. {written[svgs[0]]} (.dot sources beside them)")
    for note in written.notes:
        print(f"     note: {note}")
    return {k: str(v) for k, v in written.items()}


def attention_layer(T=1024, heads=12, d=64, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((1, heads, T, d)).astype(np.float32) for _ in range(3))
    mask = np.tril(np.ones((T, T), dtype=bool))

    def attend(q, k, v):
        scores = (q @ gr.swapaxes(k, -1, -2)) * (1 / d ** 0.5)
        p = gr.nn.softmax(gr.where(mask, scores, -1e9), axis=-1)
        return gr.sum(p @ v)
    return attend, (q, k, v)


def schedule_and_timeline():
    """Section 3: the backward schedule and memory timeline of sum(tanh(a*b + a)) on 3-vectors.
    Returns (figures, the GradTrace)."""
    j = gr.trace_grad(tanh_expr, VEC_A, VEC_B, argnums=(0, 1))
    bwd, sched, mem = j.backward, j.schedule, j.memory
    say("The backward program (a, b and saved_tanh4 come from the forward program; ct0 is the seed dL/dL = 1; "
        "the schedule and the memory plan name its values %k):")
    print(indented(str(bwd)))
    # a is used twice (a*b and + a): its gradient is an add of two contributions
    da = bwd.outputs[0]
    name = {v: f"%{k}" for k, v in enumerate(bwd.all_values())}
    counts = sched.initial_counts
    ran = {s.node: s.index for s in sched.steps}
    direct, through = (name[i] for i in da.inputs)
    print()
    say("The schedule. Each node starts owing one count per operand computed inside the backward program "
        "(inputs and the seed are there from the start). Running a node decrements its users' counts "
        "(\"counts decremented\"); a node whose count reaches 0 joins the ready queue (\"ready after\": what "
        "the engine may run next), and the engine runs the ready node of the most recent forward op first.")
    say(f"Look at {name[da]} = {da.op} {direct}, {through}: dL/da, the sum of the contribution through '+ a' "
        f"({direct}) and the one through a*b ({through} = {direct} * b). It starts with count {counts[da]}, drops "
        f"to 1 at step {ran[da.inputs[0]]} and to 0 at step {ran[da.inputs[1]]}: a node that waits for two "
        "contributions.")
    print(indented(sched.text()))
    acts = activation_plan(j)
    print()
    say("The memory timeline: forward, then backward in the schedule's order. One f64[3] buffer is 3 x 8 = 24 B. "
        "A buffer is live from the step that writes it through the last step that reads it; inputs (a, b: the "
        "caller's), 0-d values (the loss, the seed, the constant 1.0) and views (reshape, broadcast_to) own "
        "nothing. The saved tanh output is written at forward step 2 and freed at backward step 2 (y*y, its last "
        "reader). The gradients are the program's results: live to the end. Forward rows name the forward "
        "program's values (%2 = a*b, %3 = + a, %4 = tanh, %5 = sum), backward rows the backward program's above: "
        "the same %k is a different value in each.")
    print(indented(mem.text()))
    say(f"peak: {parts_text(mem.peak_bytes, peak_parts(mem))}. Without the program's results (the recompute "
        f"planner's activation peak): {parts_text(acts.peak_bytes, peak_parts(acts))}, at "
        f"{acts.where(acts.peak_step)}.")
    sd, md = sched.to_dict(), mem.to_dict()
    return {"backward": str(bwd), "initial_counts": sd["initial_counts"], "steps": sd["steps"],
            "gradient_of_a": {"node": name[da], "op": da.op, "inputs": [direct, through],
                              "initial_count": counts[da], "ready_after_steps": [ran[i] for i in da.inputs]},
            "memory": {k: md[k] for k in ("peak_bytes", "peak_step", "peak_at", "lower_bound_bytes", "steps",
                                          "buffers")},
            "memory_parts": peak_parts(mem), "activation_peak_bytes": acts.peak_bytes,
            "activation_peak_at": acts.where(acts.peak_step)}, j


def main(out=None) -> dict:
    """Print the figures (and, with `out`, write the diagrams, plots and reports there); return them."""
    figures = {}
    print("1. What each op's backward rule keeps (asked of the rules):")
    rules = rule_table()
    for why in rules.values():
        print(f"   {why}")
    figures["rules"] = rules

    print("\n2. Saved tensors of L = tanh(a*b + a) at a=1.5, b=-2:")
    j = gr.trace_grad(lambda a, b: gr.tanh(a * b + a), 1.5, -2.0, argnums=(0, 1))
    print(j.saved)
    figures["tanh_saved"] = j.saved.to_dict()

    print(f"\n3. How backward runs: L = sum(tanh(a*b + a)) at a={VEC_A.tolist()}, b={VEC_B.tolist()}, float64.")
    figures["tanh_vector"], j_vec = schedule_and_timeline()

    print(f"\n4. {BLOCKS} residual MLP blocks, width {WIDTH}, batch {BATCH}, float32, no recomputation:")
    loss, params, x = residual_blocks()
    j = gr.trace_grad(loss, params, x)
    saved = j.saved
    acts = [e for e in saved.entries if e.kind == "activation"]
    print(f"   saved for backward: {saved.count} values, {len(acts)} of them activations holding "
          f"{human_bytes(saved.bytes)} of new memory (the rest are inputs and parameters)")
    peaks = {p: j.with_policy(p).memory.peak_bytes for p in ("engine", "memory")}
    print(f"   peak of forward + backward: engine order {human_bytes(peaks['engine'])}, "
          f"memory-aware {human_bytes(peaks['memory'])}")
    mem, act = j.memory, activation_plan(j)
    parts, act_parts = peak_parts(mem), peak_parts(act)
    say(f"What that peak counts: the memory plan (j.memory) of forward then backward, every buffer the two "
        f"programs allocate, the gradients (the program's results, alive to the end) included; the parameters and "
        f"x are inputs, the caller's, and not counted. It is reached at {mem.describe_step(mem.peak_step)}, the "
        f"last step, when every activation has been freed and all {len(j.backward.outputs)} gradients are held: "
        f"{parts_text(mem.peak_bytes, parts)}.")
    say(f"e_checkpointing.py's \"activation peak\" of the same model ({human_bytes(act.peak_bytes)} without "
        f"recomputation) leaves the results out as well, since every recompute plan holds the same gradients. "
        f"It is reached at {act.describe_step(act.peak_step)}, in block 11's backward: "
        f"{parts_text(act.peak_bytes, act_parts)}.")
    figures.update(blocks_saved_count=saved.count, blocks_activations=len(acts), blocks_saved_bytes=saved.bytes,
                   blocks_peaks=peaks, blocks_peak_at=mem.where(mem.peak_step), blocks_peak_parts=parts,
                   blocks_activation_peak=act.peak_bytes, blocks_activation_peak_at=act.where(act.peak_step),
                   blocks_activation_peak_parts=act_parts, blocks_remat_peak=j.remat.peak_bytes)

    print("\n5. One causal attention layer, 12 heads, T=1024, fp32:")
    attend, args = attention_layer()
    ja = gr.trace_grad(attend, *args, argnums=(0, 1, 2))
    biggest = max(ja.saved.entries, key=lambda e: e.new_bytes)
    print(f"   largest saved value: {biggest.name} {biggest.type_str} (the softmax's {biggest.producer['op']}, "
          f"{biggest.needed_by[0].reason if biggest.needed_by else ''}),")
    b, h, t, _ = biggest.shape
    print(f"   {human_bytes(biggest.new_bytes)} = B*H*T*T*4 bytes = {b}*{h}*{t}*{t}*4 per layer  "
          f"(the course: {COURSE['attention_mib_per_layer']} MiB per layer)")
    figures.update(attention_largest_shape=tuple(biggest.shape), attention_largest_bytes=biggest.new_bytes)

    if out is not None:
        print(f"\nFiles (--out {out}):")
        figures["files"] = {"tanh_expr": write_trace_files(j_vec, out, "tanh_expr"),
                            "residual_blocks": write_trace_files(j, out, "residual_blocks")}
    else:
        print("\nPictures: --out DIR writes the diagrams, memory plots and HTML reports (with the schedule player); "
              "notebooks/e_saved_tensors_memory_checkpointing.py shows them inline.")
    return figures


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", metavar="DIR", help="write diagrams, memory plots and HTML reports into DIR")
    main(ap.parse_args().out)
