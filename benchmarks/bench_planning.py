"""How fast scheduling and memory planning are on large graphs (issue target: a 10,000-node graph
scheduled and memory-planned in under 1 s), and how the memory-aware policy's peak compares with
engine order on a few models. Writes benchmarks/planning.md (atomically).

Run: python benchmarks/bench_planning.py
"""

from __future__ import annotations

import pathlib
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import gradir as gr  # noqa: E402
from gradir.fileio import write_atomic  # noqa: E402
from gradir.passes.memory import plan_memory  # noqa: E402
from gradir.passes.report import human_bytes  # noqa: E402
from gradir.passes.schedule import POLICIES, schedule  # noqa: E402

OUT = pathlib.Path(__file__).with_name("planning.md")


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


def time_planning(depth: int, repeats: int = 3):
    loss, args = deep_residual_mlp(depth)
    j = gr.trace_grad(loss, *args)
    rows = []
    for policy in POLICIES:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            s = schedule(j.backward, policy, owned_inputs=j.saved_inputs)
            graph, order, phases = j.partition.stitch(s.order)
            plan = plan_memory(graph, order, phases)
            times.append(time.perf_counter() - t0)
        rows.append((len(j.backward.nodes), len(j.joint.nodes), policy, statistics.median(times) * 1e3, plan.peak_bytes))
    return rows


def models():
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
    lines = ["# Scheduling and memory planning", "",
             "`python benchmarks/bench_planning.py`. Time to schedule the backward graph (dependency counting, ready",
             "queue) and plan memory over the forward+backward timeline (lifetimes, peak, best-fit arena); medians of 3.",
             "", "| backward nodes | joint nodes | policy | schedule + plan (ms) | planned peak |", "|---:|---:|---|---:|---:|"]
    for depth in (111, 1111, 2222):  # about 1k, 10k and 20k backward nodes
        for nb, nj, policy, ms, peak in time_planning(depth):
            lines.append(f"| {nb} | {nj} | {policy} | {ms:.0f} | {human_bytes(peak)} |")
    lines += ["", "Peak memory of forward + backward under each policy (same gradients, bitwise):", "",
              "| model | engine order peak | memory-aware peak | change |", "|---|---:|---:|---:|"]
    for name, (fn, args, argnums) in models().items():
        j = gr.trace_grad(fn, *args, argnums=argnums)
        e, m = (j.with_policy(p).memory.peak_bytes for p in ("engine", "memory"))
        lines.append(f"| {name} | {human_bytes(e)} | {human_bytes(m)} | {(m - e) / e:+.1%} |")
    text = "\n".join(lines) + "\n"
    print(text)
    write_atomic(OUT, text)


if __name__ == "__main__":
    main()
