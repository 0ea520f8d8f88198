"""Side-by-side timing of gradir's NumPy backend against PyTorch eager (and torch.compile / JAX
where asked and installed), on the issue's workloads:

- the TEACHING.md makemore MLP training step (embedding, linear, BatchNorm with batch statistics
  and unbiased variance, tanh, linear, cross-entropy; forward + backward, float32) at
  batch 32 / hidden 64 and batch 1024 / hidden 512;
- dot(1000) + tanh, forward + backward;
- the cost of gradir's front end for the MLP step: trace + autodiff + passes + code generation.

Reports medians over repeated runs and the ratio to PyTorch eager, prints a table and writes it to
benchmarks/core.md (atomically). The side-by-side comparison of all backends and systems, interleaved,
is benchmarks/bench_backends.py (which writes benchmarks/results.md).
Run: python benchmarks/bench_core.py [--repeats N] [--torch-compile]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import statistics
import sys
import time

import numpy as np

import gradir as gr
from gradir.util.fileio import write_atomic

RESULTS = pathlib.Path(__file__).with_name("core.md")


# -- workloads --------------------------------------------------------------------------------------

def mlp_params(hidden: int, seed: int = 0, vocab: int = 27, n_embd: int = 10, block: int = 3):
    rng = np.random.default_rng(seed)
    f = lambda *s, scale=1.0: (rng.standard_normal(s) * scale).astype(np.float32)
    fan_in = n_embd * block
    return {
        "C": f(vocab, n_embd),
        "W1": f(fan_in, hidden, scale=(5 / 3) / fan_in ** 0.5),
        "b1": f(hidden, scale=0.01),  # non-zero, as in the teaching setup
        "gamma": np.ones(hidden, np.float32), "beta": np.zeros(hidden, np.float32),
        "W2": f(hidden, vocab, scale=0.1), "b2": f(vocab, scale=0.1),
    }


def mlp_batch(batch: int, seed: int = 1, vocab: int = 27, block: int = 3):
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab, (batch, block)), rng.integers(0, vocab, batch)


def mlp_loss(p, X, Y):
    emb = gr.nn.embedding(p["C"], X)
    h_pre = emb.reshape(X.shape[0], -1) @ p["W1"] + p["b1"]
    h = gr.tanh(gr.nn.batch_norm(h_pre, p["gamma"], p["beta"], unbiased=True))
    return gr.nn.cross_entropy(h @ p["W2"] + p["b2"], Y)


def torch_mlp_loss(torch, p, X, Y):
    """The makemore MLP's loss in PyTorch (the same step as mlp_loss)."""
    import torch.nn.functional as F

    emb = p["C"][X]
    h_pre = emb.view(X.shape[0], -1) @ p["W1"] + p["b1"]
    mean = h_pre.mean(0, keepdim=True)
    var = h_pre.var(0, keepdim=True, unbiased=True)
    h = torch.tanh(p["gamma"] * (h_pre - mean) * torch.rsqrt(var + 1e-5) + p["beta"])
    return F.cross_entropy(h @ p["W2"] + p["b2"], Y)


def torch_mlp_step(torch, p, X, Y):
    loss = torch_mlp_loss(torch, p, X, Y)
    return loss, torch.autograd.grad(loss, list(p.values()))


def dot_tanh(w, x):
    return gr.tanh(gr.dot(w, x))


# -- timing -----------------------------------------------------------------------------------------

def median_ms(fn, repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def bench_mlp(batch, hidden, repeats, torch_compile, rows):
    import torch

    p, (X, Y) = mlp_params(hidden), mlp_batch(batch)
    step = gr.compile(gr.value_and_grad(mlp_loss), backend="numpy")
    gr_ms = median_ms(lambda: step(p, X, Y), repeats)
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
    tX, tY = torch.tensor(X), torch.tensor(Y)
    # same numbers from both systems before timing them
    loss, grads = step(p, X, Y)
    t_loss, t_grads = torch_mlp_step(torch, tp, tX, tY)
    assert abs(float(loss) - t_loss.item()) < 1e-4, (loss, t_loss.item())
    for k, tg in zip(p, t_grads):
        np.testing.assert_allclose(grads[k], tg.numpy(), rtol=1e-3, atol=1e-5)
    torch_ms = median_ms(lambda: torch_mlp_step(torch, tp, tX, tY), repeats)
    name = f"makemore MLP step B={batch} H={hidden} f32"
    rows.append((name, "PyTorch eager", torch_ms, 1.0))
    rows.append((name, "gradir numpy", gr_ms, gr_ms / torch_ms))
    if torch_compile:
        cstep = torch.compile(lambda: torch_mlp_step(torch, tp, tX, tY))
        c_ms = median_ms(cstep, repeats, warmup=3)
        rows.append((name, "torch.compile", c_ms, c_ms / torch_ms))
    return gr_ms / torch_ms


def bench_dot_tanh(repeats, rows):
    import torch

    rng = np.random.default_rng(2)
    w, x = rng.standard_normal(1000) / 30, rng.standard_normal(1000)
    step = gr.compile(gr.value_and_grad(dot_tanh, argnums=(0, 1)), backend="numpy")
    gr_ms = median_ms(lambda: step(w, x), repeats)
    tw, tx = torch.tensor(w, requires_grad=True), torch.tensor(x, requires_grad=True)

    def t_step():
        out = torch.tanh(torch.dot(tw, tx))
        return out, torch.autograd.grad(out, [tw, tx])
    torch_ms = median_ms(t_step, repeats)
    np.testing.assert_allclose(step(w, x)[1][0], t_step()[1][0].numpy(), rtol=1e-12)
    rows.append(("dot(1000)+tanh f64", "PyTorch eager", torch_ms, 1.0))
    rows.append(("dot(1000)+tanh f64", "gradir numpy", gr_ms, gr_ms / torch_ms))


def bench_front_end(repeats, rows):
    p, (X, Y) = mlp_params(64), mlp_batch(32)

    def build():
        gr.compile(gr.value_and_grad(mlp_loss), backend="numpy").graph(p, X, Y)
    ms = median_ms(build, max(5, repeats // 10), warmup=1)
    rows.append(("trace+autodiff+passes+codegen, MLP step", "gradir", ms, float("nan")))
    return ms


# -- report -----------------------------------------------------------------------------------------

def render(rows, repeats, command) -> str:
    import importlib.util

    import torch

    missing = [name for name in ("jax",) if importlib.util.find_spec(name) is None]
    lines = [
        "# Benchmark results",
        "",
        f"`{command}` on {platform.machine()}, {os.cpu_count()} CPU cores, "
        f"Python {platform.python_version()}, NumPy {np.__version__}, PyTorch {torch.__version__} "
        f"({torch.get_num_threads()} threads). Medians of {repeats} runs; ratio = time / PyTorch eager time "
        "(lower is better)." + (f" Not installed, so not compared: {', '.join(missing)}." if missing else ""),
        "",
        "| workload | system | median ms | ratio to PyTorch eager |",
        "|---|---|---:|---:|",
    ]
    for name, system, ms, ratio in rows:
        r = "" if ratio != ratio else f"{ratio:.2f}x"
        lines.append(f"| {name} | {system} | {ms:.3f} | {r} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=100)
    ap.add_argument("--torch-compile", action="store_true", help="also time torch.compile (slow to build)")
    ap.add_argument("--out", type=pathlib.Path, default=RESULTS)
    args = ap.parse_args(argv)
    rows: list = []
    bench_mlp(32, 64, args.repeats, args.torch_compile, rows)
    bench_mlp(1024, 512, max(20, args.repeats // 2), args.torch_compile, rows)
    bench_dot_tanh(args.repeats, rows)
    bench_front_end(args.repeats, rows)
    command = "python benchmarks/bench_core.py " + " ".join(argv if argv is not None else sys.argv[1:])
    table = render(rows, args.repeats, command.strip())
    print(table)
    write_atomic(args.out, table)
    return rows


if __name__ == "__main__":
    main()
