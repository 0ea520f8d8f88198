"""Side-by-side timing of gradir's backends against PyTorch eager, torch.compile and JAX jit.

Systems: gradir LLVM (when built), gradir NumPy, PyTorch eager, torch.compile (Inductor, default
mode), JAX jit. A system that is not installed or fails to compile is skipped with the reason.
Workloads, each one call returning the loss and the gradients of every parameter:

- dot     dot(1000)+tanh in float64, gradients wrt both vectors;
- mlp32   the makemore MLP training step (bench_core.py's: embedding, linear, BatchNorm with batch
          statistics and unbiased variance, tanh, linear, cross-entropy) in float32, B=32 / H=64;
- mlp1024 the same at B=1024 / H=512;
- gpt     a GPT-2-style block in float32 (B=8, T=64, C=128, 4 heads): pre-LayerNorm causal
          self-attention and an erf-GELU MLP (4C), both residual; loss = mean(y**2), gradients
          of every weight and bias;
- cnn, llama, mistral, neox, gpt2s
          workloads_models.py's: a ResNet-style CNN step, transformers Llama/Mistral/GPT-NeoX training steps
          captured with gr.from_torch, a 2-layer GPT-2-small-shaped stack of the block above.

Thread modes (--threads, default 1,all): each mode runs in its own child processes with OPENBLAS_NUM_THREADS,
OMP_NUM_THREADS, MKL_NUM_THREADS and GRADIR_NUM_THREADS set and torch.set_num_threads, and gets its own tables
(a child that crashes costs only its current workload). Each mode measures the machine's peaks (roofline.py) and
writes gradir LLVM's per-kernel listing, with achieved GFLOP/s and GB/s against them, to benchmarks/profile.md.
--compile-time adds compile_time.py's cold and cached compile of a 12-layer GPT-2-small-shaped step.

Method: every system's loss and gradients are first checked against gradir NumPy's (a system that
disagrees is reported "wrong" and not timed). Then, after a warm-up, the systems are timed in
interleaved rounds: each round runs every system once, in a shuffled order, for a block of k calls
(k chosen per system so a block lasts about --block-ms), each block after a pause (--pause-ms: on a
2-core machine the previous system's still-spinning worker threads, OpenBLAS's for up to ~0.1 s, would
otherwise stall the next system's threads many-fold) and a few untimed calls; the per-call time of a
block is one sample,
and the table reports the median over rounds, the spread (half the interquartile range, in % of the
median) and the ratio to the fastest *other* system (< 1.00x: faster than every other system).
"compile" is the first call of a fresh compiled object minus a steady call; gradir's is measured
with GRADIR_CACHE_DIR=off (no on-disk cache), torch.compile's may use Inductor's on-disk cache.
The harness (first call, interleaved timing, summary, table, header) is also bench_gpu.py's, which passes
a `sync` (torch.cuda.synchronize) run around every timed call and block, and a baseline for the ratios.

Writes the tables to benchmarks/results.md and the kernel listing to benchmarks/profile.md (atomically). Run:
  python benchmarks/bench_backends.py [--rounds N] [--workloads dot,mlp32,mlp1024,gpt,cnn,llama,mistral,neox,gpt2s]
      [--systems llvm,numpy,torch,torch.compile,jax] [--threads 1,all] [--compile-time] [--unset-openblas-coretype]
      [--out PATH] [--profile-out PATH] [--quick]
      [--block-ms MS] [--pause-ms MS] [--warmup-s S]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import importlib.util
import json
import math
import os
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import gradir as gr
from gradir.util.fileio import write_atomic

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import compile_time  # noqa: E402
from bench_core import dot_tanh, mlp_batch, mlp_loss, mlp_params, torch_mlp_step  # noqa: E402
from machine import (  # noqa: E402, F401 - bb._cpu_model, bb.versions, ... as bench_gpu.py reads them
    BUSY_WARNING,
    MODULES,
    OPENBLAS_VARS,
    OtherLoad,
    _busy_cores,
    _cpu_model,
    cpu_description,
    environment_line,
    openblas_kernels,
    versions,
)
from roofline import kernel_profile, measure_peaks, peaks_line, render_profile, render_scaling  # noqa: E402
from workload_spellings import (  # noqa: E402, F401 - bb.GPT_* and the spellings, as bench_gpu.py reads them
    GPT_B,
    GPT_C,
    GPT_HEADS,
    GPT_T,
    LN_EPS,
    gpt_input,
    gpt_loss,
    gpt_params,
    jax_dot_loss,
    jax_gpt_loss,
    jax_mlp_loss,
    torch_dot_step,
    torch_gpt_step,
)
from workloads_models import MODEL_WORKLOADS, Workload  # noqa: E402

RESULTS = pathlib.Path(__file__).with_name("results.md")
PROFILE = pathlib.Path(__file__).with_name("profile.md")
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "GRADIR_NUM_THREADS")

# system keys (for --systems) -> names in the tables
SYSTEMS = {
    "llvm": "gradir llvm",
    "numpy": "gradir numpy",
    "torch": "PyTorch eager",
    "torch.compile": "torch.compile",
    "jax": "JAX jit",
}
REFERENCE = "numpy"


# -- workloads -------------------------------------------------------------------------------------

GPT_LARGE = {"B": 32, "T": 1024, "C": 768, "heads": 12}  # GPT-2 small's width (bench_gpu.py's "gpt_large")


def workload(key: str, **sizes) -> Workload:
    """The workload `key` at its standard sizes, or at `sizes` (mlp: B, H; gpt and gpt_large: B, T, C, heads),
    for a smaller or larger run of the same step (bench_gpu.py --quick)."""
    if key in MODEL_WORKLOADS:  # workloads_models.py's: their builders take their own sizes
        return MODEL_WORKLOADS[key](**sizes)
    allowed = {"dot": (), "mlp32": ("B", "H"), "mlp1024": ("B", "H"), "gpt": ("B", "T", "C", "heads"),
               "gpt_large": ("B", "T", "C", "heads")}.get(key)
    if allowed is None:
        raise ValueError(f"unknown workload {key!r}; choose from {', '.join(WORKLOADS)}, gpt_large")
    if set(sizes) - set(allowed):
        extra = sorted(set(sizes) - set(allowed))
        raise ValueError(f"workload {key!r} takes the sizes {', '.join(allowed) or '(none)'}, not {', '.join(extra)}")
    if key == "dot":
        rng = np.random.default_rng(2)
        w, x = rng.standard_normal(1000) / 30, rng.standard_normal(1000)
        return Workload("dot", "dot(1000)+tanh f64", (w, x), (0, 1), ["w", "x"], dot_tanh, torch_dot_step,
                        jax_dot_loss, rtol=1e-10)
    if key in ("mlp32", "mlp1024"):
        batch, hidden = (32, 64) if key == "mlp32" else (1024, 512)
        batch, hidden = sizes.get("B", batch), sizes.get("H", hidden)
        p, (X, Y) = mlp_params(hidden), mlp_batch(batch)
        return Workload(key, f"makemore MLP step B={batch} H={hidden} f32", (p, X, Y), 0, list(p), mlp_loss,
                        torch_mlp_step, jax_mlp_loss, rtol=1e-4)
    d = {"B": GPT_B, "T": GPT_T, "C": GPT_C, "heads": GPT_HEADS} if key == "gpt" else dict(GPT_LARGE)
    d.update(sizes)
    B, T, C, heads = d["B"], d["T"], d["C"], d["heads"]
    if C % heads:
        raise ValueError(f"C={C} is not a multiple of heads={heads}")
    with_heads = (lambda f: f) if heads == GPT_HEADS else (lambda f: functools.partial(f, heads=heads))
    p = gpt_params(C=C)
    # gpt_large's float32 sums run over B*T = 32k rows (weight gradients) and 25M elements (the loss), in any
    # order on a GPU (atomics): a looser tolerance than the small block's
    rtol = 1e-4 if B * T <= 4096 else 1e-3
    return Workload(key, f"GPT-2 block B={B} T={T} C={C} heads={heads} f32", (p, gpt_input(B=B, T=T, C=C)), 0, list(p),
                    with_heads(gpt_loss), with_heads(torch_gpt_step), with_heads(jax_gpt_loss), rtol=rtol)


WORKLOADS = ("dot", "mlp32", "mlp1024", "gpt", *MODEL_WORKLOADS)


def _named(names, grads) -> dict[str, np.ndarray]:
    """Gradients as {name: NumPy array}, from a dict (by name) or a sequence (in `names` order)."""
    if isinstance(grads, dict):
        return {k: np.asarray(grads[k]) for k in names}
    if len(names) == 1 and not isinstance(grads, (tuple, list)):
        grads = [grads]
    return {k: np.asarray(g) for k, g in zip(names, grads)}


# -- systems: each becomes a Runner (one call = loss and gradients) or a reason it was skipped -----

@dataclass
class Runner:
    key: str
    call: Callable[[], Any]  # one step; returns the system's own output (a GPU's work may be queued: see sync)
    unpack: Callable[[Any], tuple[float, dict[str, np.ndarray]]]
    compile_ms: float = float("nan")
    steady_s: float = float("nan")  # median seconds of the steady calls after the first (_first_call)
    samples: list[float] = field(default_factory=list)  # per-call seconds, one per timed block
    profile: Callable[[], list[dict]] | None = None  # gradir LLVM: roofline.kernel_profile of its step


class Skip(Exception):
    """A system that cannot run this workload (not installed, not built, failed to compile)."""


def _timed(call: Callable, sync: Callable[[], None] | None = None) -> float:
    """Seconds one call takes; with `sync` (e.g. torch.cuda.synchronize), run before and after it, so the
    device work the call queued asynchronously counts."""
    if sync is not None:
        sync()
    t0 = time.perf_counter()
    call()
    if sync is not None:
        sync()
    return time.perf_counter() - t0


def _first_call(runner: Runner, steady_calls: int = 5, env: dict | None = None,
                sync: Callable[[], None] | None = None) -> Runner:
    """Run the first call (the compile) and a few steady ones, each timed alone (between two `sync`s when
    given); compile_ms = first - median steady, steady_s = median steady."""
    try:
        with _env(env or {}):
            first = _timed(runner.call, sync)
    except Exception as e:  # any failure to build or run skips the system
        raise Skip(f"failed to compile or run: {type(e).__name__}: {_short(e)}") from e
    runner.steady_s = statistics.median(_timed(runner.call, sync) for _ in range(steady_calls))
    runner.compile_ms = (first - runner.steady_s) * 1e3
    return runner


@contextlib.contextmanager
def _env(values: dict):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _short(e: BaseException, n: int = 160) -> str:
    s = " ".join(str(e).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def _gradir_runner(w: Workload, backend: str) -> Runner:
    import gradir.backends

    if backend not in gradir.backends.BACKENDS:
        raise Skip("not available (backend not built)")
    step = gr.compile(gr.value_and_grad(w.gradir_loss, argnums=w.argnums), backend=backend)
    args = w.args
    runner = Runner(backend, lambda: step(*args), lambda out: (float(out[0]), _named(w.names, out[1])),
                    profile=(lambda: kernel_profile(step, args)) if backend == "llvm" else None)
    # compile time without gradir's on-disk cache (a backend without one ignores the variable)
    return _first_call(runner, env={"GRADIR_CACHE_DIR": "off"})


def _torch():
    try:
        import torch
    except ImportError as e:
        raise Skip("not installed (torch)") from e
    return torch


def _torch_args(torch, w: Workload):
    nd = len(w.argnums) if isinstance(w.argnums, tuple) else w.argnums + 1  # differentiated args come first
    out = []
    for i, a in enumerate(w.args):
        if isinstance(a, dict):
            out.append({k: torch.tensor(v, requires_grad=i < nd) for k, v in a.items()})
        else:
            out.append(torch.tensor(a, requires_grad=i < nd and np.issubdtype(a.dtype, np.floating)))
    return out


def _torch_unpack(w: Workload):
    return lambda out: (out[0].item(), _named(w.names, [g.detach().numpy() for g in out[1]]))


def _torch_eager_runner(w: Workload) -> Runner:
    torch = _torch()
    targs = _torch_args(torch, w)
    runner = _first_call(Runner("torch", lambda: w.torch_step(torch, *targs), _torch_unpack(w)))
    runner.compile_ms = math.nan  # nothing to compile
    return runner


def _torch_compile_runner(w: Workload) -> Runner:
    torch = _torch()
    targs = _torch_args(torch, w)
    step = torch.compile(functools.partial(w.torch_step, torch))  # Inductor, default mode
    return _first_call(Runner("torch.compile", lambda: step(*targs), _torch_unpack(w)))


def _jax():
    try:
        import jax
    except ImportError as e:
        raise Skip("not installed (jax)") from e
    jax.config.update("jax_enable_x64", True)  # float64 workloads stay float64 (float32 ones stay float32)
    return jax


def _jax_runner(w: Workload) -> Runner:
    if w.jax_loss is None:
        raise Skip(w.jax_note or "not expressible in JAX here")
    jax = _jax()
    f = jax.jit(jax.value_and_grad(functools.partial(w.jax_loss, jax), argnums=w.argnums))
    jargs = jax.device_put(w.args)
    return _first_call(Runner("jax", lambda: jax.block_until_ready(f(*jargs)),
                              lambda out: (float(out[0]), _named(w.names, out[1]))))


BUILDERS = {
    "llvm": lambda w: _gradir_runner(w, "llvm"),
    "numpy": lambda w: _gradir_runner(w, "numpy"),
    "torch": _torch_eager_runner,
    "torch.compile": _torch_compile_runner,
    "jax": _jax_runner,
}


# -- correctness -----------------------------------------------------------------------------------

def max_rel_error(ref: tuple[float, dict], got: tuple[float, dict]) -> float:
    """Largest error over the loss and every gradient, each relative to that array's largest reference
    magnitude, floored at 1e-2 of the largest gradient overall (a gradient that is zero in exact
    arithmetic, such as a bias just before BatchNorm, holds only rounding noise)."""
    (l0, g0), (l1, g1) = ref, got
    errs = [abs(l1 - l0) / max(abs(l0), 1e-30)]
    scale = max([float(np.max(np.abs(r))) for r in g0.values() if r.size] + [1e-30])
    for k, r in g0.items():
        a = np.asarray(g1[k])
        if a.shape != r.shape:
            return float("inf")
        if r.size:
            err = np.max(np.abs(a.astype(np.float64) - r))
            errs.append(float(err) / max(float(np.max(np.abs(r))), 1e-2 * scale))
    return max(errs)


def check(w: Workload, runners: dict[str, Runner], log=print, ref: tuple[float, dict] | None = None,
          systems: dict[str, str] = SYSTEMS, skipped: dict[str, str] | None = None) -> dict[str, float]:
    """Compare every runner with `ref` (default: gradir NumPy's output); remove (and report) the ones that
    disagree beyond w.rtol. With `skipped`, a runner whose check call raises moves there with the reason."""
    if ref is None:
        if REFERENCE not in runners:
            raise RuntimeError("gradir numpy (the reference) did not run")
        ref = runners[REFERENCE].unpack(runners[REFERENCE].call())
    errors = {}
    for key in list(runners):
        try:
            err = max_rel_error(ref, runners[key].unpack(runners[key].call()))
        except Exception as e:
            if skipped is None:
                raise
            skipped[key] = f"failed on the check call: {type(e).__name__}: {_short(e)}"
            del runners[key]
            continue
        errors[key] = err
        ok = err <= w.rtol
        log(f"  check {systems[key]:<14} max rel error {err:.1e} (tolerance {w.rtol:.0e}): {'ok' if ok else 'WRONG'}")
        if not ok:
            del runners[key]
    return errors


def build(w: Workload, systems, log=print) -> tuple[dict[str, Runner], dict[str, str]]:
    runners, skipped = {}, {}
    for key in systems:
        try:
            runners[key] = BUILDERS[key](w)
        except Skip as e:
            skipped[key] = str(e)
            log(f"  {SYSTEMS[key]}: {e}")
    return runners, skipped


# -- timing: one harness for bench_backends.py (CPU) and bench_gpu.py (sync=torch.cuda.synchronize) --------

def _block(call: Callable, k: int, limit_s: float = math.inf, sync: Callable[[], None] | None = None) -> float:
    """Seconds per call over k back-to-back calls (fewer if they pass limit_s: a system slowed down
    many-fold by another process does not stretch the run), with the garbage collector off; with `sync`,
    between a sync before the first call and one after the last (asynchronous device work counts)."""
    gc.collect()
    gc.disable()
    try:
        if sync is not None:
            sync()
        t0 = time.perf_counter()
        n = 0
        while n < k:
            call()
            n += 1
            if time.perf_counter() - t0 > limit_s:
                break
        if sync is not None:
            sync()
        return (time.perf_counter() - t0) / n
    finally:
        gc.enable()


def _settle(call: Callable, pause_s: float, warm_s: float, min_calls: int = 1) -> None:
    """Sleep, so the previous system's idle worker threads stop spinning (OpenBLAS's spin for up to
    ~0.1 s after a call and, on 2 cores, stall another system's thread team many-fold), then wake this
    system's threads up with untimed calls for about warm_s (at least min_calls)."""
    if pause_s:
        time.sleep(pause_s)
    t_end = time.perf_counter() + warm_s
    for _ in range(min_calls):
        call()
    while time.perf_counter() < t_end:
        call()


def time_interleaved(runners: dict[str, Runner], rounds: int, block_s: float, warmup_s: float | None,
                     pause_s: float = 0.0, rewarm_s: float = 0.005, seed: int = 0, *, warm_calls: int = 1,
                     sync: Callable[[], None] | None = None, log: Callable[[str], Any] | None = None) -> dict[str, int]:
    """Pick each system's calls per block: after about warmup_s of warm-up, from the median of 5 single
    calls; with warmup_s=None, from the steady time _first_call measured (no warm-up). Then run `rounds`
    rounds, each running every system's block (_block, with `sync`) once in a shuffled order, each block
    after a pause and untimed calls (_settle: pause_s, then for rewarm_s, at least warm_calls). `log`
    (when given) hears of progress about every quarter of the rounds. Returns the calls per block."""
    calls = {}
    for key, r in runners.items():
        if warmup_s is None:
            per_call = r.steady_s
            if per_call != per_call:
                raise ValueError(f"{key}: no steady time from _first_call; pass warmup_s to measure one")
        else:
            _settle(r.call, pause_s, warmup_s)
            per_call = statistics.median(_timed(r.call, sync) for _ in range(5))
        calls[key] = max(1, round(block_s / max(per_call, 1e-9)))
    order = list(runners)
    rng = random.Random(seed)
    t0 = time.perf_counter()
    for i in range(rounds):
        rng.shuffle(order)
        for key in order:
            r = runners[key]
            _settle(r.call, pause_s, rewarm_s, warm_calls)
            r.samples.append(_block(r.call, calls[key], limit_s=5 * block_s, sync=sync))
        if log is not None and ((i + 1) % max(1, rounds // 4) == 0 or i + 1 == rounds):
            log(f"  round {i + 1}/{rounds} ({time.perf_counter() - t0:.0f} s)")
    return calls


def summarise(runners: dict[str, Runner], calls: dict[str, int], baseline: str | None = None) -> list[dict]:
    """One row per system, fastest first: median and fastest block's seconds per call ("s", "min_s"), the
    spread (half the interquartile range, % of the median), "ratio" and "min_ratio" (median / the fastest
    other system's median, min / the fastest other's min; with `baseline`: to that system's), calls per
    block, compile ms and the number of rounds."""
    med = {k: statistics.median(r.samples) for k, r in runners.items()}
    best = {k: min(r.samples) for k, r in runners.items()}
    rows = []
    for key, r in runners.items():
        if baseline is None:
            others = [k for k in runners if k != key]
            ratio = med[key] / min(med[k] for k in others) if others else math.nan
            min_ratio = best[key] / min(best[k] for k in others) if others else math.nan
        else:
            ratio, min_ratio = med[key] / med.get(baseline, math.nan), best[key] / best.get(baseline, math.nan)
        q = statistics.quantiles(r.samples, n=4) if len(r.samples) >= 2 else [med[key]] * 3
        rows.append({"key": key, "s": med[key], "min_s": best[key], "spread": (q[2] - q[0]) / 2 / med[key] * 100,
                     "ratio": ratio, "min_ratio": min_ratio, "calls": calls[key], "compile_ms": r.compile_ms,
                     "rounds": len(r.samples)})
    return sorted(rows, key=lambda row: row["s"])


# -- report ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Units:
    """How a table shows times: the per-call columns' labels, scale (per second) and format, and the
    compile column's label, unit (in ms) and format."""

    median: str = "median µs"
    min: str = "min µs"
    per_s: float = 1e6
    fmt: str = ",.1f"
    compile: str = "compile ms"
    compile_unit_ms: float = 1.0
    compile_fmt: str = ",.0f"


def system_name(key: str, compile_backend: str = "inductor", systems: dict[str, str] = SYSTEMS) -> str:
    """The table's name for a system; torch.compile with another backend than Inductor says which."""
    if key == "torch.compile" and compile_backend != "inductor":
        return f"torch.compile ({compile_backend})"
    return systems[key]


def render_table(w: Workload, rows, skipped, wrong, errors, *, units: Units = Units(), baseline: str | None = None,
                 systems: dict[str, str] = SYSTEMS, compile_backend: str = "inductor") -> str:
    """The workload's markdown table: summarise's rows, then the wrong and the skipped systems. Without
    `baseline` the ratios are to the fastest other system (median and min columns); with it, one ratio
    column, to that system's median."""
    name = functools.partial(system_name, compile_backend=compile_backend, systems=systems)
    fmt = lambda v, spec, suffix="": "" if v != v else f"{v:{spec}}{suffix}"  # NaN -> empty cell
    cols = ["system", units.median, "spread", "vs fastest other" if baseline is None else f"vs {baseline}", units.min,
            *(["min vs fastest other's min"] if baseline is None else []), "calls/block", units.compile, "max rel error"]
    lines = [f"### {w.title}", "", "| " + " | ".join(cols) + " |", "|---|" + "---:|" * (len(cols) - 1)]
    for row in rows:
        cells = [name(row["key"]), f"{row['s'] * units.per_s:{units.fmt}}", f"±{row['spread']:.0f}%",
                 fmt(row["ratio"], ".2f", "x"), f"{row['min_s'] * units.per_s:{units.fmt}}",
                 *([fmt(row["min_ratio"], ".2f", "x")] if baseline is None else []), str(row["calls"]),
                 fmt(row["compile_ms"] / units.compile_unit_ms, units.compile_fmt),
                 fmt(errors.get(row["key"], math.nan), ".0e")]
        lines.append("| " + " | ".join(cells) + " |")
    for key, err in wrong.items():
        lines.append(f"| {name(key)} | wrong |" + " |" * (len(cols) - 3) + f" {err:.0e} |")
    for key, why in skipped.items():
        lines.append(f"| {name(key)} | skipped: {why} |" + " |" * (len(cols) - 2))
    return "\n".join(lines) + "\n"


def cpu_method(args) -> str:
    """The method paragraph of bench_backends.py's report."""
    return (
        f"{args.rounds} interleaved rounds, each system timed once per round for a block of about "
        f"{args.block_ms:g} ms (calls/block; cut short at 5x that), shuffled order per round, "
        f"after {args.warmup_s:g} s of warm-up per system; "
        f"each block follows a {args.pause_ms:g} ms pause (so the previous system's worker threads stop spinning) and "
        "about 5 ms of untimed calls. "
        "median µs: median over rounds of the per-call time; spread: half the interquartile range; min µs: "
        "the fastest round (less sensitive to other processes; its ratio likewise to the fastest other system's min); "
        "vs fastest other: median / the fastest other system's median (below 1.00x: faster than every other "
        "system); compile ms: first call of a fresh compiled object minus a steady call (gradir with "
        "GRADIR_CACHE_DIR=off); max rel error: loss and gradients against gradir numpy, relative to each "
        "array's largest magnitude (at least 1% of the largest gradient's).")


def header(command: str, args, *, title: str = "Backend benchmark results", where: str | None = None,
           modules=MODULES, note: str = "", method: str | None = None) -> str:
    """A report's head: the title; the command, where it ran (default: this CPU; bench_gpu.py: the GPU or
    Triton's interpreter) and the versions of `modules`; an optional note; the method paragraph (default:
    bench_backends.py's, from args)."""
    lines = [f"# {title}", "", f"`{command}` on {where or cpu_description()}; {versions(modules)}.", ""]
    if note:
        lines += [note, ""]
    return "\n".join([*lines, method if method is not None else cpu_method(args), ""])


# -- main ------------------------------------------------------------------------------------------

@dataclass
class Result:
    """One workload's outcome in one thread mode: its table, gradir LLVM's per-kernel profile and compile ms."""

    key: str
    title: str
    table: str
    profile: list[dict] | None = None
    llvm_compile_ms: float = math.nan


def run_workload(key: str, systems, args, log=print) -> Result:
    w = workload(key)
    log(f"== {w.title}")
    runners, skipped = build(w, systems, log=log)
    if REFERENCE not in runners:
        return Result(key, w.title, f"### {w.title}\n\ngradir numpy (the reference) failed: "
                      f"{skipped.get(REFERENCE, 'not selected')}\n")
    errors = check(w, runners, log=log, skipped=skipped)
    wrong = {k: e for k, e in errors.items() if k not in runners}
    if REFERENCE not in args.systems_timed:
        runners.pop(REFERENCE, None)
    meter = OtherLoad().start()
    calls = time_interleaved(runners, args.rounds, args.block_ms / 1e3, args.warmup_s, args.pause_ms / 1e3)
    other = meter.cores()
    rows = summarise(runners, calls)
    table = render_table(w, rows, skipped, wrong, errors)
    table += (f"\nOther processes kept {other:.2f} cores busy on average while this table was timed."
              + (" " + BUSY_WARNING if other > 0.1 else "") + "\n")
    log(table)
    llvm = runners.get("llvm")
    profile = llvm.profile() if llvm is not None and llvm.profile is not None else None
    return Result(key, w.title, table, profile, llvm.compile_ms if llvm is not None else math.nan)


def gradir_threads_note() -> str:
    """Whether the LLVM backend reads GRADIR_NUM_THREADS (its sources name the variable), for the tables' heads."""
    spec = importlib.util.find_spec("gradir.backends.llvm")
    if spec is None or spec.origin is None:
        return "n/a: no LLVM backend"
    src = "".join(f.read_text() for f in pathlib.Path(spec.origin).parent.glob("*.py"))
    return "honoured by the LLVM backend" if "GRADIR_NUM_THREADS" in src else "n/a: the LLVM backend ignores it"


def thread_counts(spec: str) -> list[int]:
    """'1,all' -> [1, os.cpu_count()] (duplicates dropped)."""
    out = [os.cpu_count() or 1 if s.strip() == "all" else int(s) for s in spec.split(",") if s.strip()]
    return list(dict.fromkeys(out))


def mode_heading(n: int, note: str) -> str:
    return (f"## {n} thread{'s' if n > 1 else ''}\n\nPyTorch torch.set_num_threads({n}); NumPy's OpenBLAS and MKL "
            f"OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=MKL_NUM_THREADS={n} (this mode ran in its own process); "
            f"gradir GRADIR_NUM_THREADS={n} ({note}).\n")


def render_mode(n: int, note: str, env_line: str, peaks: dict, results: list[Result]) -> tuple[str, str]:
    """A thread mode's section of results.md (heading, environment, peaks, tables) and of profile.md."""
    tables = "\n".join([mode_heading(n, note), env_line, "", peaks_line(peaks), "", *(r.table for r in results)])
    prof = [f"## {n} thread{'s' if n > 1 else ''}", "", peaks_line(peaks), ""]
    for r in results:
        prof.append(render_profile(r.title, r.profile, peaks) if r.profile else
                    f"#### {r.title}\n\nno gradir LLVM profile (the backend did not run or was not selected)\n")
    return tables, "\n".join(prof)


def run_mode(args, log=print) -> None:
    """In a thread mode's own process: set torch's threads, measure the peaks (unless args.peaks has them), run
    the workloads; after each, write the state so far (args.out, JSON: environment, peaks, results), so a crash
    loses only the workload it happened in."""
    n = args.thread_mode
    with contextlib.suppress(ImportError):
        import torch

        torch.set_num_threads(n)
    state = {"env": environment_line(), "peaks": json.loads(args.peaks) if args.peaks else measure_peaks(),
             "results": []}
    log(state["env"])
    log(peaks_line(state["peaks"]))
    write_atomic(args.out, json.dumps(state))
    for key in args.workload_keys:
        state["results"].append(vars(run_workload(key, args.systems_run, args, log=log)))
        write_atomic(args.out, json.dumps(state))


def run_modes(argv: list[str], args, log=print) -> tuple[str, str, dict]:
    """Each thread mode in child processes (thread counts of OpenBLAS and MKL are fixed when they load); a child
    that dies (a crash in a system) costs its current workload, reported as such, and a new child runs the rest.
    Returns the tables, the profile listing and gradir LLVM's compile ms per workload (the first mode's that has it)."""
    tables, profiles, compile_ms, by_mode = [], [], {}, []
    skip = {"--out", "--profile-out", "--threads", "--workloads"}
    child_argv = [a for i, a in enumerate(argv) if a not in skip and (i == 0 or argv[i - 1] not in skip)
                  and a not in ("--unset-openblas-coretype", "--compile-time", "--tables-only")
                  and not a.startswith(("--out=", "--threads=", "--workloads="))]
    for n in thread_counts(args.threads):
        state, remaining = {"env": "", "peaks": None, "results": []}, list(args.workload_keys)
        while remaining:
            with tempfile.TemporaryDirectory() as tmp:
                out = pathlib.Path(tmp) / "state.json"
                cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), *child_argv, "--thread-mode", str(n),
                       "--workloads", ",".join(remaining), "--out", str(out),
                       *(["--peaks", json.dumps(state["peaks"])] if state["peaks"] else [])]
                log(f"== {n} thread{'s' if n > 1 else ''}: {' '.join(cmd[1:])}")
                proc = subprocess.run(cmd, env=dict(os.environ, **{k: str(n) for k in THREAD_VARS}))
                got = json.loads(out.read_text()) if out.exists() else {"results": []}
            state["env"], state["peaks"] = got.get("env") or state["env"], got.get("peaks") or state["peaks"]
            state["results"] += [Result(**r) for r in got["results"]]
            remaining = remaining[len(got["results"]):]
            if proc.returncode != 0 and remaining:
                key = remaining.pop(0)
                why = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
                state["results"].append(Result(key, key, f"### {key}\n\nThe run of this workload died ({why}); "
                                               "see the log for the last system built or timed.\n"))
        if state["peaks"] is None:
            tables.append(f"{mode_heading(n, gradir_threads_note())}\nThe child run failed before measuring.\n")
            continue
        t, p = render_mode(n, gradir_threads_note(), state["env"], state["peaks"], state["results"])
        tables.append(t)
        profiles.append(p)
        by_mode.append((n, {r.title: r.profile for r in state["results"]}))
        for r in state["results"]:  # the first mode's figure, or a later mode's where it has none
            if compile_ms.get(r.key, math.nan) != compile_ms.get(r.key, math.nan) or r.key not in compile_ms:
                compile_ms[r.key] = r.llvm_compile_ms
    if len(by_mode) > 1:
        profiles.append(render_scaling(by_mode))
    return "\n".join(tables), "\n".join(profiles), compile_ms


def rerun_without_openblas_coretype(argv: list[str], log=print) -> str:
    """The same benchmark in a child process with OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE removed."""
    present = [k for k in OPENBLAS_VARS if k in os.environ]
    title = f"## Second run with {' and '.join(OPENBLAS_VARS)} unset"
    if not present:
        return f"{title}\n\nNot run: neither variable is set in this environment, so it would repeat the first run.\n"
    env = {k: v for k, v in os.environ.items() if k not in OPENBLAS_VARS}
    child_argv = [a for a in argv if a not in ("--unset-openblas-coretype", "--compile-time")]
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "tables.md"
        cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), *child_argv, "--out", str(out), "--tables-only",
               "--profile-out", str(pathlib.Path(tmp) / "profile.md")]
        log(f"== re-running without {', '.join(present)}: {' '.join(cmd[1:])}")
        proc = subprocess.run(cmd, env=env)
        if proc.returncode != 0 or not out.exists():
            return f"{title}\n\nThe child run failed (exit status {proc.returncode}).\n"
        return f"{title}\n\n{out.read_text()}"


def main(argv: list[str] | None = None) -> str:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=None, help="interleaved timing rounds (default 20; 3 with --quick)")
    ap.add_argument("--block-ms", type=float, default=None, help="target duration of one timed block (default 50)")
    ap.add_argument("--warmup-s", type=float, default=None, help="warm-up per system before timing (default 0.5)")
    ap.add_argument("--pause-ms", type=float, default=None,
                    help="sleep before each timed block, so other systems' worker threads stop spinning (default 150)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: " + ",".join(WORKLOADS))
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated: " + ",".join(SYSTEMS))
    ap.add_argument("--threads", default="1,all", help="thread modes, each in its own process (default 1,all)")
    ap.add_argument("--compile-time", action="store_true",
                    help="also measure the 12-layer GPT-2-small step's cold and cached compile (compile_time.py)")
    ap.add_argument("--unset-openblas-coretype", action="store_true",
                    help="also re-run in a child process without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE and append its tables")
    ap.add_argument("--quick", action="store_true", help="few short rounds (for a smoke test)")
    ap.add_argument("--out", type=pathlib.Path, default=RESULTS)
    ap.add_argument("--profile-out", type=pathlib.Path, default=PROFILE, help="the per-kernel listing (profile.md)")
    ap.add_argument("--tables-only", action="store_true", help=argparse.SUPPRESS)  # the coretype child's output
    ap.add_argument("--thread-mode", type=int, default=None, help=argparse.SUPPRESS)  # a thread mode's child
    ap.add_argument("--peaks", default=None, help=argparse.SUPPRESS)  # its peaks, when an earlier child measured them
    args = ap.parse_args(argv)
    args.rounds = args.rounds if args.rounds is not None else (3 if args.quick else 20)
    args.block_ms = args.block_ms if args.block_ms is not None else (5.0 if args.quick else 50.0)
    args.warmup_s = args.warmup_s if args.warmup_s is not None else (0.05 if args.quick else 0.5)
    args.pause_ms = args.pause_ms if args.pause_ms is not None else (20.0 if args.quick else 150.0)
    workloads = [s.strip() for s in args.workloads.split(",") if s.strip()]
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    for s in systems:
        if s not in SYSTEMS:
            ap.error(f"unknown system {s!r}; choose from {', '.join(SYSTEMS)}")
    for s in workloads:
        if s not in WORKLOADS:
            ap.error(f"unknown workload {s!r}; choose from {', '.join(WORKLOADS)}")
    args.systems_timed = set(systems)
    args.systems_run = list(dict.fromkeys([REFERENCE, *systems]))  # gradir numpy always runs: it is the reference
    args.workload_keys = workloads
    if args.thread_mode is not None:
        run_mode(args)
        return ""
    command = "python benchmarks/bench_backends.py " + " ".join(argv)
    t0 = time.perf_counter()
    tables, profile, compile_ms = run_modes(argv, args)
    if args.tables_only:
        write_atomic(args.out, tables)
        return tables
    report = header(command.strip(), args) + "\n" + tables
    if args.compile_time:
        print("== compile time (compile_time.py)")
        report += "\n" + compile_time.render(compile_time.measure(), compile_ms)
    elif compile_ms:
        report += "\n" + compile_time.render_workloads(compile_ms)
    if args.unset_openblas_coretype:
        report += "\n" + rerun_without_openblas_coretype(argv)
    report += (f"\nTotal wall time of the run: {time.perf_counter() - t0:.0f} s; "
               f"cores busy with other processes at the end: {_busy_cores():.1f}.\n")
    write_atomic(args.out, report)
    write_atomic(args.profile_out, f"# Where gradir LLVM's time goes\n\n`{command.strip()}` on {cpu_description()}. "
                 "Each kernel run alone (the backend's executable.profile), its FLOPs counted from the IR (2MNK per "
                 "product, one per element otherwise, none for data movement) and its bytes from the kernel listing; "
                 "of roofline: achieved / min(peak GFLOP/s, flop/byte x peak GB/s), or of the peak GB/s for a kernel "
                 "without arithmetic.\n\n" + profile)
    print(f"wrote {args.out} and {args.profile_out}")
    return report


if __name__ == "__main__":
    main()
