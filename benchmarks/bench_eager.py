"""Eager-mode overhead: `gr.Tensor` against PyTorch eager, op by op, on small tensors.

Workloads (each a training-style step: forward with recording on, then `loss.backward()` into
the leaves' `.grad`):

- chain     a 20,000-op elementwise chain on an 8-element float64 vector (add a scalar, tanh,
            multiply by a scalar, repeated), then sum: almost nothing but per-op overhead;
- makemore  the makemore MLP step of bench_core.py (embedding, linear, BatchNorm with batch
            statistics and unbiased variance, tanh, linear, cross-entropy), B=32, H=64, float32.

Method: both systems' losses and gradients are first checked against each other. Then, after a
warm-up, they are timed in interleaved rounds: each round runs both systems once, in a shuffled
order, for a block of k steps (k chosen per system so a block lasts about --block-ms; one step for
the chain); forward and backward are timed separately within each step, and a block's per-step
times are one sample. Each workload is timed twice: with the garbage collector on (what a program
sees: CPython's collector walks the growing tape) and off (the ops' own overhead). Each table gives
the median over rounds, the spread (half the interquartile range, in % of the median), the time per
recorded op (each system's own count: gradir's tape nodes, PyTorch's autograd nodes) and gradir's
median over PyTorch's (the issue's target: within 5x).
PyTorch runs with one intra-op thread by default (--torch-threads): tensors this small never use
more, and an idle thread pool is what another process's load stalls.

Writes the table to benchmarks/eager.md (atomically). Run:
  python benchmarks/bench_eager.py [--rounds N] [--chain-ops N] [--block-ms MS] [--out PATH] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import os
import pathlib
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np

import gradir as gr
from gradir.eager.engine import _reachable
from gradir.util.fileio import write_atomic

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_backends import OtherLoad, _busy_cores  # noqa: E402
from bench_core import mlp_batch, mlp_loss, mlp_params, torch_mlp_loss  # noqa: E402

RESULTS = pathlib.Path(__file__).with_name("eager.md")
PHASES = ("forward", "backward", "step")


# -- workloads: the same step written for both systems --------------------------------------------

def chain_forward(x, n_ops: int, tanh):
    """n_ops elementwise ops (x + 0.1, tanh, x * 1.01, repeated), then sum (one more op)."""
    for i in range(n_ops):
        k = i % 3
        x = x + 0.1 if k == 0 else tanh(x) if k == 1 else x * 1.01
    return x.sum()


@dataclass
class System:
    name: str
    leaves: dict                      # name -> leaf tensor (its .grad is reset before every step)
    forward: object                   # () -> loss
    samples: dict = field(default_factory=lambda: {p: [] for p in PHASES})
    ops: int = 0

    def step(self) -> tuple[float, float]:
        for t in self.leaves.values():
            t.grad = None
        t0 = time.perf_counter()
        loss = self.forward()
        t1 = time.perf_counter()
        loss.backward()
        return t1 - t0, time.perf_counter() - t1

    def grads(self) -> dict[str, np.ndarray]:
        self.step()
        return {k: np.asarray(t.grad.numpy() if hasattr(t.grad, "numpy") else t.grad, dtype=np.float64)
                for k, t in self.leaves.items()}


def _torch_graph_size(loss) -> int:
    seen, stack = set(), [loss.grad_fn]
    while stack:
        f = stack.pop()
        if f is None or f in seen or type(f).__name__ == "AccumulateGrad":
            continue
        seen.add(f)
        stack.extend(g for g, _ in f.next_functions)
    return len(seen)


def workload(key: str, chain_ops: int) -> tuple[str, System, System]:
    import torch

    if key == "chain":
        x0 = np.linspace(-1.0, 1.0, 8)
        gx, tx = gr.Tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
        g = System("gradir gr.Tensor", {"x": gx}, lambda: chain_forward(gx, chain_ops, gr.tanh))
        t = System("PyTorch eager", {"x": tx}, lambda: chain_forward(tx, chain_ops, torch.tanh))
        title = f"elementwise chain, {chain_ops:,} ops on f64[8], forward + backward"
    elif key == "makemore":
        p, (X, Y) = mlp_params(64), mlp_batch(32)
        gp = {k: gr.Tensor(v, requires_grad=True) for k, v in p.items()}
        tp = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
        tX, tY = torch.tensor(X), torch.tensor(Y)
        g = System("gradir gr.Tensor", gp, lambda: mlp_loss(gp, X, Y))
        t = System("PyTorch eager", tp, lambda: torch_mlp_loss(torch, tp, tX, tY))
        title = "makemore MLP step B=32 H=64 f32, forward + loss.backward()"
    else:
        raise SystemExit(f"unknown workload {key!r} (chain, makemore)")
    g.ops = len(_reachable(g.forward()._node))
    t.ops = _torch_graph_size(t.forward())
    return title, g, t


def check(g: System, t: System) -> float:
    """Largest difference between the two systems' gradients, relative to each array's largest
    magnitude (at least 1% of the largest gradient's: BatchNorm leaves b1's gradient at rounding level)."""
    a, b = g.grads(), t.grads()
    floor = 0.01 * max(float(np.max(np.abs(v))) for v in b.values())
    err = 0.0
    for k in a:
        scale = max(float(np.max(np.abs(b[k]))), floor, 1e-300)
        err = max(err, float(np.max(np.abs(a[k] - b[k]))) / scale)
    if err > 1e-4:
        raise SystemExit(f"gradir and PyTorch disagree (max rel error {err:.1e}); not timing")
    return err


# -- timing ----------------------------------------------------------------------------------------

def time_interleaved(systems: list[System], rounds: int, block_s: float, warmup_s: float, collect: bool,
                     seed: int = 0) -> None:
    """Fill each system's samples (see the module docstring); `collect`: the garbage collector on."""
    for s in systems:
        s.samples = {p: [] for p in PHASES}
    calls = {}
    for s in systems:
        t_end = time.perf_counter() + warmup_s
        single = [sum(s.step())]
        while time.perf_counter() < t_end:
            single.append(sum(s.step()))
        calls[s.name] = max(1, round(block_s / statistics.median(single)))
    rng = random.Random(seed)
    order = list(systems)
    for _ in range(rounds):
        rng.shuffle(order)
        for s in order:
            k = calls[s.name]
            fwd = bwd = 0.0
            gc.collect()
            if not collect:
                gc.disable()
            try:
                for _ in range(k):
                    f, b = s.step()
                    fwd, bwd = fwd + f, bwd + b
            finally:
                gc.enable()
            s.samples["forward"].append(fwd / k)
            s.samples["backward"].append(bwd / k)
            s.samples["step"].append((fwd + bwd) / k)


def _median_spread(xs: list[float]) -> tuple[float, float]:
    med = statistics.median(xs)
    q = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [med] * 3
    return med, (q[2] - q[0]) / 2 / med * 100


def render(title: str, g: System, t: System, err: float, collect: bool) -> tuple[str, dict]:
    lines = [f"### {title}, garbage collector {'on' if collect else 'off'}", "",
             f"Recorded ops: gradir tape nodes {g.ops:,}, PyTorch autograd nodes {t.ops:,}; max rel gradient "
             f"difference {err:.0e}.", "",
             "| phase | PyTorch eager ms | spread | gradir gr.Tensor ms | spread | PyTorch µs/op | gradir µs/op "
             "| gradir / PyTorch |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    ratios = {}
    for phase in PHASES:
        (tm, ts), (gm, gs) = _median_spread(t.samples[phase]), _median_spread(g.samples[phase])
        ratios[phase] = gm / tm
        lines.append(f"| {phase} | {tm * 1e3:.3f} | ±{ts:.0f}% | {gm * 1e3:.3f} | ±{gs:.0f}% | "
                     f"{tm * 1e6 / t.ops:.2f} | {gm * 1e6 / g.ops:.2f} | {gm / tm:.2f}x |")
    return "\n".join(lines) + "\n", ratios


def header(command: str, args) -> str:
    import torch

    return "\n".join([
        "# Eager-mode benchmark: gr.Tensor vs PyTorch eager", "",
        f"`{command}` on {platform.machine()}, {os.cpu_count()} CPU cores; Python {platform.python_version()}, "
        f"NumPy {np.__version__}, PyTorch {torch.__version__} ({torch.get_num_threads()} threads).", "",
        f"{args.rounds} interleaved rounds, shuffled order per round, each system timed once per round for a block "
        f"of about {args.block_ms:g} ms of steps (at least one), after {args.warmup_s:g} s of warm-up; forward and "
        "backward timed separately in every step; each workload with the garbage collector on, then off. ms: "
        "median over rounds of the per-step time; spread: half the interquartile range; "
        "µs/op: ms over the system's recorded ops (per-op overhead); "
        "gradir / PyTorch: ratio of the medians (the target is 5x or less). Cores busy with other processes at "
        f"the start: {_busy_cores():.1f} (a shared machine's load inflates both systems' times and the spreads).",
        ""])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--chain-ops", type=int, default=20_000)
    ap.add_argument("--block-ms", type=float, default=100.0)
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--workloads", default="chain,makemore")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="PyTorch intra-op threads (small tensors run on one anyway; one keeps other processes' "
                         "load from stalling an idle thread pool)")
    ap.add_argument("--out", type=pathlib.Path, default=RESULTS)
    ap.add_argument("--quick", action="store_true", help="3 rounds, a 2,000-op chain, short blocks (a smoke run)")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.chain_ops, args.block_ms, args.warmup_s = 3, 2_000, 20.0, 0.1
    import torch

    torch.set_num_threads(args.torch_threads)
    command = ("python benchmarks/bench_eager.py " + " ".join(sys.argv[1:] if argv is None else argv)).strip()
    parts, ratios = [header(command, args)], {}
    for key in args.workloads.split(","):
        title, g, t = workload(key, args.chain_ops)
        err = check(g, t)
        for collect in (True, False):
            load = OtherLoad().start()
            time_interleaved([g, t], args.rounds, args.block_ms / 1e3, args.warmup_s, collect)
            table, ratios[key, collect] = render(title, g, t, err, collect)
            table += f"\nOther processes kept {load.cores():.2f} cores busy on average while this table was timed.\n"
            print(table)
            parts.append(table)
    write_atomic(args.out, "\n".join(parts))
    print(f"wrote {args.out}")
    return ratios


if __name__ == "__main__":
    main()
