"""GPU timing of gradir's Triton backend against PyTorch eager and torch.compile (Inductor).

Systems, all on the same device and taking torch tensors there: "gradir triton"
(``gr.compile(gr.value_and_grad(loss, argnums=...), backend="triton")``), "PyTorch eager" and
"torch.compile" (Inductor, default mode; `--compile-backend` picks another torch.compile backend).
Workloads (bench_backends.py's, imported from there), each one call returning the loss and the
gradients of every parameter, float32:

- mlp1024    the makemore MLP training step at B=1024 / H=512;
- gpt        the GPT-2-style block at B=8, T=64, C=128, 4 heads;
- gpt_large  the same block at B=32, T=1024, C=768, 12 heads (GPT-2 small's width).

Method: each system's loss and gradients are first checked against PyTorch eager in float64 on the same
device (a system that disagrees beyond the workload's tolerance is reported "wrong" and not timed). Then
the systems are timed in interleaved rounds: each round runs every system once, in a shuffled order, for
a block of k back-to-back calls (k chosen per system so a block lasts about --block-ms) after one untimed
call, with ``torch.cuda.synchronize()`` before and after the block (perf_counter between: host overhead,
such as gradir's launches from Python, counts). The table reports the median ms per step over rounds, the
spread (half the interquartile range, in % of the median), the ratio to torch.compile's median (below
1.00x: faster than torch.compile) and the compile time (the first call of a fresh compiled object minus a
steady call; gradir's with GRADIR_CACHE_DIR=off, Triton's and Inductor's own on-disk caches as they are).
The tables are written atomically after every workload (a run cut short keeps the finished ones). The
harness (first call, interleaved timing, summary, table, header) is bench_backends.py's, run with
``sync=torch.cuda.synchronize``, no pause between blocks and the ratio to torch.compile.

``--device cpu`` runs the same pipeline on CPU tensors through Triton's interpreter (TRITON_INTERPRET=1,
set here before triton is imported): those timings say nothing about speed, the run only checks that the
pipeline works and agrees. ``--quick`` shrinks every workload to a few rows (for the interpreter).

Run (benchmarks/gpu_check.sh runs it after the compiled Triton tests):
  python benchmarks/bench_gpu.py [--device cuda|cpu] [--workloads mlp1024,gpt,gpt_large] [--rounds N]
      [--quick] [--out PATH] [--block-ms MS] [--systems triton,torch,torch.compile] [--compile-backend NAME]
"""

from __future__ import annotations

import argparse
import functools
import gc
import math
import os
import pathlib
import platform
import sys
import tempfile
import time

import numpy as np

import gradir as gr
from gradir.util.fileio import write_atomic

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_backends as bb  # noqa: E402

RESULTS = pathlib.Path(__file__).with_name("gpu.md")
INTERPRETER_RESULTS = pathlib.Path(tempfile.gettempdir()) / "gradir-bench-gpu" / "gpu_interpreter.md"

SYSTEMS = {"triton": "gradir triton", "torch": "PyTorch eager", "torch.compile": "torch.compile"}
BASELINE = "torch.compile"  # the ratio column is to this system
WORKLOADS = ("mlp1024", "gpt", "gpt_large")
# --quick: a few rows each, so Triton's CPU interpreter gets through every kernel in well under a second
QUICK_SIZES = {"mlp1024": {"B": 32, "H": 64}, "gpt": {"B": 2, "T": 4, "C": 8, "heads": 2},
               "gpt_large": {"B": 1, "T": 8, "C": 12, "heads": 3}}

# the tables' time columns: ms per step and compile seconds (bench_backends.py's: µs per call, compile ms)
STEP_MS = bb.Units(median="median ms/step", min="min ms", per_s=1e3, fmt=",.3f", compile="compile s",
                   compile_unit_ms=1e3, compile_fmt=",.1f")
MODULES = (("PyTorch", "torch"), ("Triton", "triton"), ("NumPy", "numpy"), ("gradir", "gradir"))

Runner = bb.Runner
Skip = bb.Skip


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") not in ("", "0")


def select_device(device: str):
    """Set up the environment for `device` (before triton is imported) and return torch's device."""
    if device == "cpu":
        if "triton" in sys.modules and not interpreting():
            raise SystemExit("--device cpu needs TRITON_INTERPRET=1 before triton is imported; this process "
                             "imported triton without it")
        os.environ["TRITON_INTERPRET"] = "1"
    elif interpreting():
        raise SystemExit(f"--device cuda runs the compiled kernels: unset TRITON_INTERPRET (it is "
                         f"{os.environ['TRITON_INTERPRET']!r}) or set it to 0")
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA GPU (torch.cuda.is_available() is False); "
                         "run with --device cpu --quick for the interpreter path")
    return torch, torch.device(device)


def workload(key: str, quick: bool) -> bb.Workload:
    return bb.workload(key, **(QUICK_SIZES[key] if quick else {}))


# -- systems ---------------------------------------------------------------------------------------

class Bench:
    """The device, its synchronisation and the arguments in each system's form."""

    def __init__(self, torch, device, compile_backend: str = "inductor", quick: bool = False):
        self.torch, self.device, self.compile_backend = torch, device, compile_backend
        # run after each timed call or block, so the work queued on the GPU counts (on the CPU: done on return)
        self.sync = torch.cuda.synchronize if device.type == "cuda" else None
        # --quick (the interpreter, ~0.5 s a call): one steady call after the first, no untimed call per block
        self.steady_calls, self.warm_calls = (1, 0) if quick else (3, 1)

    def args(self, w: bb.Workload, grad: bool, dtype=None) -> list:
        """w's arguments as torch tensors on the device; `grad`: the differentiated floating ones require
        grad; `dtype`: the floating ones cast to it (the float64 reference)."""
        torch = self.torch
        nd = len(w.argnums) if isinstance(w.argnums, tuple) else w.argnums + 1  # differentiated args come first

        def tensor(a, i):
            floating = np.issubdtype(a.dtype, np.floating)
            t = torch.tensor(a, device=self.device, dtype=dtype if floating and dtype is not None else None)
            return t.requires_grad_(grad and i < nd and floating)

        return [{k: tensor(v, i) for k, v in a.items()} if isinstance(a, dict) else tensor(a, i)
                for i, a in enumerate(w.args)]

    @staticmethod
    def to_numpy(t) -> np.ndarray:
        return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)

    def unpack(self, w: bb.Workload):
        def unpack(out):
            loss, grads = out
            if isinstance(grads, dict):
                grads = [grads[k] for k in w.names]
            return float(self.to_numpy(loss)), {k: self.to_numpy(g) for k, g in zip(w.names, grads)}
        return unpack

    def first_call(self, runner: Runner, env: dict | None = None) -> Runner:
        """bench_backends.py's first call (compile_ms, steady_s), synchronised, with this bench's steady calls."""
        return bb._first_call(runner, self.steady_calls, env, sync=self.sync)

    # each builder: a Runner (compiled, first call done) or Skip
    def gradir_triton(self, w: bb.Workload) -> Runner:
        try:
            import triton  # noqa: F401
        except ImportError as e:
            raise Skip("not installed (triton)") from e
        step = gr.compile(gr.value_and_grad(w.gradir_loss, argnums=w.argnums), backend="triton", check=False)
        args = self.args(w, grad=False)
        # compile time without gradir's on-disk cache of generated kernel modules
        return self.first_call(Runner("triton", lambda: step(*args), self.unpack(w)), env={"GRADIR_CACHE_DIR": "off"})

    def torch_eager(self, w: bb.Workload) -> Runner:
        torch, args = self.torch, self.args(w, grad=True)
        runner = self.first_call(Runner("torch", lambda: w.torch_step(torch, *args), self.unpack(w)))
        runner.compile_ms = math.nan  # nothing to compile
        return runner

    def torch_compile(self, w: bb.Workload) -> Runner:
        torch = self.torch
        torch._dynamo.reset()  # a fresh compile per workload: a recompile would make the changed sizes dynamic
        step = torch.compile(functools.partial(w.torch_step, torch), backend=self.compile_backend)
        args = self.args(w, grad=True)
        return self.first_call(Runner("torch.compile", lambda: step(*args), self.unpack(w)))

    def reference(self, w: bb.Workload) -> tuple[float, dict[str, np.ndarray]]:
        """Loss and gradients from PyTorch eager in float64 on the device."""
        args = self.args(w, grad=True, dtype=self.torch.float64)
        out = self.unpack(w)(w.torch_step(self.torch, *args))
        del args
        return out

    def build(self, key: str, w: bb.Workload) -> Runner:
        return {"triton": self.gradir_triton, "torch": self.torch_eager, "torch.compile": self.torch_compile}[key](w)


# -- report ----------------------------------------------------------------------------------------

def verdict(rows: list[dict], compile_backend: str) -> str:
    """The line under a table: gradir triton's median over torch.compile's ("" unless both were timed)."""
    ratio = next((row["ratio"] for row in rows if row["key"] == "triton"), math.nan)
    if ratio != ratio:
        return ""
    return (f"\ngradir triton / {bb.system_name(BASELINE, compile_backend)}: **{ratio:.2f}x** "
            f"({'faster' if ratio < 1 else 'slower'}; target: below 1.00x).\n")


def header(command: str, args, torch, device, warm_calls: int = 1) -> str:
    """bench_backends.py's header, with this device and this run's method."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        where = (f"{platform.node() or 'this machine'}'s GPU, **{torch.cuda.get_device_name(device)}** "
                 f"({props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB, compute capability "
                 f"{props.major}.{props.minor}; CUDA {torch.version.cuda}; TF32 matmuls "
                 f"{'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'})")
        note = ""
    else:
        where = (f"{platform.node() or 'this machine'}'s **CPU, through Triton's interpreter** (TRITON_INTERPRET=1; "
                 f"{bb._cpu_model()}, {os.cpu_count()} cores)")
        note = ("**Interpreter timings: meaningless for speed.** This run only checks that the pipeline (compile, "
                "correctness check, interleaved timing, table) works; the GPU figures come from `--device cuda`.")
    backend = "Inductor, default mode" if args.compile_backend == "inductor" else f"backend {args.compile_backend!r}"
    method = (
        f"Each system's loss and gradients are first checked against PyTorch eager in float64 on the same device "
        f"(max rel error: over the loss and every gradient, relative to each array's largest magnitude, at least 1% "
        f"of the largest gradient's); a system beyond the workload's tolerance is reported wrong and not timed. "
        f"Then {args.rounds} interleaved rounds, shuffled order per round, each system timed once per round for a "
        f"block of about {args.block_ms:g} ms (calls/block; cut short at 5x that) after "
        f"{warm_calls or 'no'} untimed call{'' if warm_calls == 1 else 's'}, "
        f"synchronised before and after the block. median ms/step: median over rounds; spread: half the "
        f"interquartile range; vs {BASELINE} ({backend}): median / its median (below 1.00x: faster); compile s: "
        f"first call of a fresh compiled object minus a steady call (gradir with GRADIR_CACHE_DIR=off; Triton's "
        f"and Inductor's on-disk caches as they were).")
    return bb.header(command, args, title="GPU benchmark: gradir's Triton backend", where=where, modules=MODULES,
                     note=note, method=method) + "\n"


# -- main ------------------------------------------------------------------------------------------

def run_workload(bench: Bench, key: str, systems: list[str], args, log=print) -> str:
    w = workload(key, args.quick)
    log(f"== {w.title}")
    runners, skipped = {}, {}
    for s in systems:
        t0 = time.perf_counter()
        try:
            runners[s] = bench.build(s, w)
            compile_s = runners[s].compile_ms / 1e3
            log(f"  {SYSTEMS[s]}: " + (f"compile {compile_s:.1f} s, " if compile_s == compile_s else "")
                + f"steady {runners[s].steady_s * 1e3:.3f} ms ({time.perf_counter() - t0:.1f} s)")
        except Skip as e:
            skipped[s] = str(e)
            log(f"  {SYSTEMS[s]}: {e} ({time.perf_counter() - t0:.1f} s)")
    try:
        ref = bench.reference(w)
    except Exception as e:
        return f"### {w.title}\n\nthe float64 reference (PyTorch eager) failed: {type(e).__name__}: {bb._short(e)}\n"
    errors = bb.check(w, runners, log=log, ref=ref, systems=SYSTEMS, skipped=skipped)
    wrong = {k: e for k, e in errors.items() if k not in runners}
    del ref
    rows = []
    if runners:
        calls = bb.time_interleaved(runners, args.rounds, args.block_ms / 1e3, None, rewarm_s=0.0,
                                    warm_calls=bench.warm_calls, sync=bench.sync, log=log)
        rows = bb.summarise(runners, calls, baseline=BASELINE)
    table = bb.render_table(w, rows, skipped, wrong, errors, units=STEP_MS, baseline=BASELINE, systems=SYSTEMS,
                            compile_backend=args.compile_backend) + verdict(rows, args.compile_backend)
    log(table)
    runners.clear()
    gc.collect()
    if bench.device.type == "cuda":
        bench.torch.cuda.empty_cache()
    return table


def main(argv: list[str] | None = None) -> str:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cuda: compiled kernels on the GPU; cpu: Triton's interpreter (a pipeline check, no speed)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: " + ",".join(WORKLOADS))
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated: " + ",".join(SYSTEMS))
    ap.add_argument("--rounds", type=int, default=None, help="interleaved timing rounds (default 15; 2 with --quick)")
    ap.add_argument("--block-ms", type=float, default=None, help="target duration of one timed block (default 100; "
                    "1 with --quick: one call)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (for the interpreter path): " +
                    "; ".join(f"{k} {' '.join(f'{a}={v}' for a, v in s.items())}" for k, s in QUICK_SIZES.items()))
    ap.add_argument("--compile-backend", default="inductor", help="torch.compile's backend (default inductor)")
    ap.add_argument("--out", type=pathlib.Path, default=None,
                    help=f"where the table goes (default {RESULTS.name} beside this script; with --device cpu, "
                         f"{INTERPRETER_RESULTS})")
    args = ap.parse_args(argv)
    args.rounds = args.rounds if args.rounds is not None else (2 if args.quick else 15)
    args.block_ms = args.block_ms if args.block_ms is not None else (1.0 if args.quick else 100.0)
    args.out = args.out or (RESULTS if args.device == "cuda" else INTERPRETER_RESULTS)
    workloads = [s.strip() for s in args.workloads.split(",") if s.strip()]
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    for s in workloads:
        if s not in WORKLOADS:
            ap.error(f"unknown workload {s!r}; choose from {', '.join(WORKLOADS)}")
    for s in systems:
        if s not in SYSTEMS:
            ap.error(f"unknown system {s!r}; choose from {', '.join(SYSTEMS)}")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")

    torch, device = select_device(args.device)
    bench = Bench(torch, device, args.compile_backend, quick=args.quick)
    command = ("python benchmarks/bench_gpu.py " + " ".join(argv)).strip()
    head = header(command, args, torch, device, bench.warm_calls)
    print(head.split("\n")[2], flush=True)
    t0 = time.perf_counter()
    log = functools.partial(print, flush=True)
    tables = []
    for key in workloads:
        tables.append(run_workload(bench, key, systems, args, log=log))
        done = f"\nWall time so far: {time.perf_counter() - t0:.0f} s ({len(tables)}/{len(workloads)} workloads).\n"
        write_atomic(args.out, head + "\n".join(tables) + done)  # a run cut short keeps the finished tables
    report = head + "\n".join(tables) + f"\nTotal wall time of the run: {time.perf_counter() - t0:.0f} s.\n"
    write_atomic(args.out, report)
    print(f"wrote {args.out}", flush=True)
    return report


if __name__ == "__main__":
    main()
