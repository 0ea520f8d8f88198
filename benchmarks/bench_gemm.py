"""Matrix products alone: gradir's LLVM product (backends/llvm/gemm.py's packed micro-kernel) against
torch.matmul (MKL or oneDNN in the CPU wheel) and NumPy's matmul (its OpenBLAS), in GFLOP/s, per shape and
layout, on the training-step shapes the workloads run: squares, a ResNet-style CNN's per-image products,
the GPT-2-style block's and GPT-2-small's forward (NN), input-gradient (NT: dY @ W^T) and weight-gradient
(TN: X^T @ dY) products, the makemore MLP's 27-wide output layer.

Each system computes C = op(A) @ op(B) from the same float32 operands: gradir a compiled `transpose(a) @ b`
(its call, as a program calls it), torch and NumPy on transposed views. Timing is bench_backends.py's:
interleaved rounds of blocks of calls, medians; the ratio is gradir's time over the fastest other system's.
Threads: --threads (default 1) for every system. Writes benchmarks/gemm.md (atomically). Run:
  python benchmarks/bench_gemm.py [--threads N] [--rounds N] [--block-ms MS] [--out PATH] [--quick]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys

SHAPES = [  # (what, M, N, K, layout): layout's letters say whether A, B are used transposed
    ("square", 32, 32, 32, "NN"), ("square", 64, 64, 64, "NN"), ("square", 128, 128, 128, "NN"),
    ("square", 256, 256, 256, "NN"), ("square", 512, 512, 512, "NN"), ("square", 1024, 1024, 1024, "NN"),
    ("CNN conv", 16, 1024, 144, "NN"), ("CNN weight grad", 16, 144, 1024, "NT"),
    ("CNN input grad", 144, 1024, 16, "TN"),
    ("GPT block qkv", 512, 384, 128, "NN"), ("GPT block dX", 512, 128, 512, "NT"),
    ("GPT block dW", 128, 512, 512, "TN"),
    ("GPT-2-small MLP", 2048, 3072, 768, "NN"), ("GPT-2-small dX", 2048, 768, 3072, "NT"),
    ("GPT-2-small dW", 768, 3072, 2048, "TN"), ("GPT-2-small 4096 rows", 4096, 768, 768, "NN"),
    ("makemore logits", 1024, 27, 512, "NN"), ("makemore dW", 512, 27, 1024, "TN"),
]
QUICK = {"square", "CNN conv", "CNN weight grad", "GPT block dX"}
OUT = pathlib.Path(__file__).with_name("gemm.md")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--block-ms", type=float, default=40.0)
    p.add_argument("--out", type=pathlib.Path, default=OUT)
    p.add_argument("--quick", action="store_true", help="a few small shapes, 3 rounds (a smoke test)")
    args = p.parse_args(argv)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "GRADIR_NUM_THREADS"):
        os.environ[var] = str(args.threads)  # before NumPy, torch and gradir start their pools
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    import numpy as np
    import torch
    from bench_backends import Runner, header, time_interleaved

    import gradir as gr
    from gradir.util.fileio import write_atomic

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    shapes = [s for s in SHAPES if s[0] in QUICK and s[1] <= 256] if args.quick else SHAPES
    rounds = 3 if args.quick else args.rounds
    rows = []
    for what, M, N, K, layout in shapes:
        a = rng.standard_normal((K, M) if layout[0] == "T" else (M, K)).astype(np.float32)
        b = rng.standard_normal((N, K) if layout[1] == "T" else (K, N)).astype(np.float32)
        op = {"N": lambda x: x, "T": gr.transpose}
        f = gr.compile(lambda a, b, fa=op[layout[0]], fb=op[layout[1]]: fa(a) @ fb(b), backend="llvm")
        an, bn = (a.T if layout[0] == "T" else a), (b.T if layout[1] == "T" else b)
        at, bt = torch.from_numpy(a), torch.from_numpy(b)
        at, bt = (at.T if layout[0] == "T" else at), (bt.T if layout[1] == "T" else bt)
        want = an.astype(np.float64) @ bn.astype(np.float64)
        for got in (f(a, b), an @ bn, (at @ bt).numpy()):  # every system computes the product
            assert np.abs(got - want).max() <= 1e-4 * np.sqrt(K) * max(1.0, np.abs(want).max()), what
        runners = {"gradir": Runner("gradir", lambda: f(a, b), None),
                   "torch": Runner("torch", lambda: torch.matmul(at, bt), None),
                   "numpy": Runner("numpy", lambda: np.matmul(an, bn), None)}
        time_interleaved(runners, rounds, args.block_ms / 1e3, warmup_s=0.1)
        median = {k: statistics.median(r.samples) for k, r in runners.items()}
        median["kernel"] = sum(s for _, s in f.executable(a, b).profile(a, b, repeats=50))  # (one kernel)
        gflops = {k: 2 * M * N * K / s / 1e9 for k, s in median.items()}
        ratio = median["gradir"] / min(median["torch"], median["numpy"])
        rows.append(f"| {what} | {M}x{N}x{K} | {layout} | {gflops['gradir']:.1f} | {gflops['kernel']:.1f} | "
                    f"{gflops['torch']:.1f} | {gflops['numpy']:.1f} | {ratio:.2f}x |")
        print(rows[-1], flush=True)
    command = "python benchmarks/bench_gemm.py" + (f" --threads {args.threads}" if args.threads != 1 else "")
    method = (f"{rounds} interleaved rounds of blocks of about {args.block_ms:.0f} ms per system, {args.threads} "
              "thread(s) each; GFLOP/s = 2MNK / median seconds per call (a call includes each system's own "
              "overhead: gradir's compiled-program call, torch's dispatch, NumPy's); gradir kernel: the product's "
              "kernel alone (the executable's profile: the jitted driver called on it, median of 50); ratio: "
              "gradir's median call time over the fastest other system's (< 1.00x: gradir faster).")
    table = ["| product | M x N x K | layout | gradir GFLOP/s | gradir kernel | torch.matmul | NumPy matmul | ratio |",
             "|---|---|---|---:|---:|---:|---:|---:|", *rows]
    text = header(command, args, title="Matrix product benchmark (float32)", method=method) + "\n" + "\n".join(table)
    write_atomic(args.out, text + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
