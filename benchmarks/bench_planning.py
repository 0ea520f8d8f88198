"""The compiler at scale: time and memory of every phase from trace to generated code, on graphs of
1k to 1M joint nodes, and how the memory-aware scheduling policy's peak compares with engine order.

Scale workload: a deep residual tanh MLP, `h = h + tanh(h @ w) * 0.5` per block (16x16 weights,
batch 8), differentiated with respect to every weight; the block count is chosen for the size of the
cleaned joint (forward + backward) graph. Each size runs in a fresh process, so its peak resident
memory is its own. Phases, as `gr.compile(gr.value_and_grad(loss))` runs them:

  trace -> autodiff (joint graph) -> cleanup (lower, simplify, cse, dce) -> partition (forward /
  backward programs, saved values) -> schedule (dependency-counted backward order; its step-by-step
  record is replayed when a report asks for it) -> memory plan (lifetimes, live bytes and peak over
  forward then backward; its lower bound and arena layout are worked out when a report reads them)
  -> codegen (fusion + LLVM, compiled for this CPU, no on-disk cache) -> reports (the schedule,
  memory plan and saved-tensor report as text).

"MiB" is the process's peak resident memory after the phase minus after importing gradir and loading
LLVM (a high-water mark: it never goes down). Also measured: `gr.grad` on a 20,000-op tanh chain, first
call and later calls (graphs cached per input signature).

Writes benchmarks/planning.md (atomically). Run:
  python benchmarks/bench_planning.py [--sizes 1000,10000,100000,1000000] [--repeats 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import gradir as gr  # noqa: E402
from gradir.passes.report import human_bytes  # noqa: E402
from gradir.util.fileio import write_atomic  # noqa: E402

OUT = pathlib.Path(__file__).with_name("planning.md")
PIPELINE = ("trace", "autodiff", "cleanup", "partition", "schedule", "memory", "codegen")
PHASES = PIPELINE + ("reports",)
JOINT_NODES_PER_BLOCK = 13  # of the residual block below, after cleanup


def deep_residual_mlp(depth: int, width: int = 16, batch: int = 8):
    """A residual tanh MLP deep enough that its backward graph has thousands of nodes."""
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((width, width)) / width ** 0.5 for _ in range(depth)]
    x = rng.standard_normal((batch, width))

    def loss(ws, x):
        h = x
        for w in ws:
            h = h + gr.tanh(h @ w) * 0.5
        return gr.sum(h * h)
    return loss, (ws, x)


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def one_size(nodes: int) -> dict:
    """Every phase once on a graph of about `nodes` joint nodes (run in a fresh process)."""
    os.environ["GRADIR_CACHE_DIR"] = "off"
    from gradir.api.args import prepare, trace_args
    from gradir.backends import compile_graph
    from gradir.backends.llvm import jit
    from gradir.passes import joint_graph, partition, run_pipeline
    from gradir.passes.memory import plan_memory
    from gradir.passes.saved import saved_tensors
    from gradir.passes.schedule import schedule

    jit.target_machine()  # LLVM's own libraries (~85 MiB resident) are loaded before the baseline
    loss, args = deep_residual_mlp(max(1, nodes // JOINT_NODES_PER_BLOCK))
    base = _rss_mib()
    times, mib = {}, {}

    def phase(name, fn):
        t0 = time.perf_counter()
        out = fn()
        times[name], mib[name] = time.perf_counter() - t0, _rss_mib() - base
        return out

    a = prepare(loss, args)
    wrt = list(range(len(a.flat) - 1))
    graph = phase("trace", lambda: trace_args(loss, a))
    joint = phase("autodiff", lambda: joint_graph(graph, wrt))
    joint = phase("cleanup", lambda: run_pipeline(joint))
    part = phase("partition", lambda: partition(joint))
    sched = phase("schedule", lambda: schedule(part.backward, "engine"))
    plan = phase("memory", lambda: plan_memory(*part.stitch(sched.order)))
    phase("codegen", lambda: compile_graph(joint, backend="llvm"))  # engine order: the graph's (as gr.compile runs it)
    phase("reports", lambda: [str(sched), str(plan), str(saved_tensors(part, sched.order))])
    return {"joint_nodes": len(joint.nodes), "backward_nodes": len(part.backward.nodes), "times": times, "mib": mib,
            "peak_bytes": plan.peak_bytes}


def grad_chain(ops: int = 20000, calls: int = 5) -> dict:
    """`gr.grad` of a tanh chain: the first call (trace, differentiate, compile) and later ones (cached)."""
    def chain(x):
        for _ in range(ops):
            x = gr.tanh(x)
        return gr.sum(x)

    x = np.linspace(-1, 1, 8)
    g = gr.grad(chain)
    t0 = time.perf_counter()
    g(x)
    first = time.perf_counter() - t0
    later = []
    for _ in range(calls):
        t0 = time.perf_counter()
        g(x)
        later.append(time.perf_counter() - t0)
    return {"ops": ops, "first": first, "later": statistics.median(later)}


def policy_models():
    rng = np.random.default_rng(0)

    def mlp(x, w1, w2, w3):
        h = gr.relu(x @ w1)
        h = gr.tanh(h @ w2)
        return gr.sum((h @ w3) ** 2)

    def wide(x, w):
        outs = [gr.sum(gr.tanh(x * (k + 1.0)) @ w) for k in range(4)]
        return outs[0] + outs[1] * outs[2] - outs[3]

    def makemore(p, X, Y):
        emb = gr.nn.embedding(p["C"], X).reshape(X.shape[0], -1)
        h = gr.tanh(gr.nn.batch_norm(emb @ p["W1"] + p["b1"], p["g"], p["b"], unbiased=True))
        return gr.nn.cross_entropy(h @ p["W2"] + p["b2"], Y)

    mm = {"C": rng.standard_normal((27, 10)), "W1": rng.standard_normal((30, 64)), "b1": rng.standard_normal(64),
          "g": np.ones(64), "b": np.zeros(64), "W2": rng.standard_normal((64, 27)), "b2": np.zeros(27)}
    return {
        "relu/tanh MLP 32x16-64-64-8": (mlp, (rng.standard_normal((32, 16)), rng.standard_normal((16, 64)),
                                              rng.standard_normal((64, 64)), rng.standard_normal((64, 8))), (1, 2, 3)),
        "four tanh branches 64x32": (wide, (rng.standard_normal((64, 32)), rng.standard_normal((32, 4))), (0, 1)),
        "makemore MLP B=32 H=64": (makemore, (mm, rng.integers(0, 27, (32, 3)), rng.integers(0, 27, 32)), (0,)),
        "residual tanh MLP, 12 blocks": (*deep_residual_mlp(12), (0,)),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000,1000000", help="joint-graph sizes, comma-separated")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one size, print JSON
    ap.add_argument("--repeats", type=int, default=3, help="processes per size up to 200k nodes (medians per phase)")
    ap.add_argument("--out", type=pathlib.Path, default=OUT)
    opts = ap.parse_args()
    if opts.one:
        print(json.dumps(one_size(opts.one)))
        return

    intro = __doc__.split("\n\n")[1].replace("\n", " ")
    lines = ["# The compiler at scale", "", f"`python benchmarks/bench_planning.py`. {intro}",
             "", "Seconds per phase, medians of 3 processes up to 100k nodes. \"trace to code\" is the pipeline (every",
             "phase but the reports; target at 100k nodes: under 3 s and 300 MiB); MiB: peak resident memory over the",
             "process after importing gradir and LLVM, through code generation, then with the reports printed too:", "",
             "| joint nodes | " + " | ".join(PIPELINE) + " | trace to code s | peak MiB | reports s | with reports MiB |",
             "|---:|" + "---:|" * (len(PIPELINE) + 4)]
    for size in (int(s) for s in opts.sizes.split(",")):
        print(f"size {size} ...", flush=True)
        runs = []
        for _ in range(opts.repeats if size <= 200_000 else 1):  # a 1M-node run takes minutes: once
            done = subprocess.run([sys.executable, __file__, "--one", str(size)], capture_output=True, text=True)
            if done.returncode:
                break
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        if not runs:
            lines.append(f"| ~{size} | failed: {done.stderr.strip().splitlines()[-1][:100]} |")
            continue
        times = {p: statistics.median(r["times"][p] for r in runs) for p in PHASES}
        pipeline = statistics.median(sum(r["times"][p] for p in PIPELINE) for r in runs)
        mib = statistics.median(r["mib"]["codegen"] for r in runs)  # a high-water mark: the pipeline's peak
        with_reports = statistics.median(r["mib"]["reports"] for r in runs)
        lines.append(f"| {runs[0]['joint_nodes']:,} | " + " | ".join(f"{times[p]:.2f}" for p in PIPELINE) +
                     f" | **{pipeline:.2f}** | **{mib:.0f}** | {times['reports']:.2f} | {with_reports:.0f} |")
        print(lines[-1], flush=True)

    g = grad_chain()
    lines += ["", f"`gr.grad` of a {g['ops']:,}-op tanh chain: first call {g['first']:.2f} s (trace, differentiate, "
              f"compile to NumPy), later calls {g['later'] * 1e3:.0f} ms (median; the graph is cached per input signature).",
              "", "Peak memory of forward + backward under each scheduling policy (same gradients, bitwise):", "",
              "| model | engine order peak | memory-aware peak | change |", "|---|---:|---:|---:|"]
    for name, (fn, args, argnums) in policy_models().items():
        j = gr.trace_grad(fn, *args, argnums=argnums)
        e, m = (j.with_policy(p).memory.peak_bytes for p in ("engine", "memory"))
        lines.append(f"| {name} | {human_bytes(e)} | {human_bytes(m)} | {(m - e) / e:+.1%} |")
    text = "\n".join(lines) + "\n"
    print(text)
    write_atomic(opts.out, text)


if __name__ == "__main__":
    main()
