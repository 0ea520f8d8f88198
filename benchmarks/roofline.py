"""Where gradir's LLVM time goes, against what the machine can do: the machine's measured peaks (a large sgemm's
GFLOP/s, a large triad's GB/s, at the run's thread count), each kernel's achieved GFLOP/s and GB/s from the
backend's own profile (executable.profile: kernels run one at a time), and its share of the roofline
(attainable = min(peak GFLOP/s, arithmetic intensity x peak GB/s)). Also the BLAS each system uses.
Used by bench_backends.py, which writes the listing to benchmarks/profile.md."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable

import numpy as np

from gradir.passes.fusion import MATMUL, kernel_bytes
from gradir.util.pytree import tree_flatten

FREE_OPS = frozenset({"stop_gradient", "convert", "take", "check_classes", "unfold", "fold", "transpose", "reshape",
                      "broadcast_to", "slice", "concatenate", "pad", "copy", "index_update", "index_add", "where",
                      "select"})  # data movement: no arithmetic counted
REDUCTION_OPS = frozenset({"sum", "max", "min", "prod", "argmax", "argmin", "mean", "logsumexp"})


def node_flops(n) -> int:
    """Floating-point operations of one IR node: 2MNK for a product (batched: per batch), the input size for a
    reduction, nothing for data movement, one per output element otherwise (a transcendental counts one)."""
    if n.op == "matmul":
        k = n.inputs[0].shape[-1] if n.inputs[0].ndim else 1
        return 2 * math.prod(n.shape) * k
    if n.op in FREE_OPS:
        return 0
    if n.op in REDUCTION_OPS:
        return math.prod(n.inputs[0].shape) if n.inputs else 0
    return math.prod(n.shape)


def kernel_profile(step, args, repeats: int = 10) -> list[dict]:
    """For the gr.compile'd `step` on `args`: each kernel's header, median seconds run alone ("s": repeated,
    its operands in cache) and in program order ("s_in_order": operands where the step leaves them), flops
    and bytes moved."""
    exe = step.executable(*args)
    flat, _ = tree_flatten(args)
    times = exe.profile(*flat, repeats=repeats)
    in_order = exe.profile(*flat, repeats=repeats, in_order=True)
    prog = exe.program
    rows = []
    for k, (head, s), (_, s_in_order) in zip(prog.kernels, times, in_order):
        nodes = [n for n in k.nodes if n is not k.transposed] if k.kind == MATMUL else k.nodes
        r, w = kernel_bytes(k, prog.access)
        rows.append({"kernel": head, "s": s, "s_in_order": s_in_order, "flops": sum(node_flops(n) for n in nodes),
                     "bytes": r + w})
    return rows


# -- the machine's peaks ---------------------------------------------------------------------------

def _best(fn: Callable[[], object], seconds: float = 0.3, at_least: int = 3) -> float:
    fn()
    best, t_end, n = math.inf, time.perf_counter() + seconds, 0
    while n < at_least or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        n += 1
    return best


def measure_peaks(n: int = 2048, words: int = 1 << 24, seconds: float = 0.3) -> dict:
    """This process's peaks at its current thread settings: an n x n x n float32 product by NumPy's BLAS and by
    torch's (GFLOP/s, the faster is the peak) and a triad a = b + 2c over `words` float32 (GB/s: 3 arrays moved;
    torch's, multi-threaded, when installed, else NumPy's)."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    out = {"gflops_numpy": 2 * n ** 3 / _best(lambda: a @ b, seconds) / 1e9}
    x, y, z = (np.ones(words, np.float32) for _ in range(3))
    triad = lambda: np.add(x, np.multiply(y, 2.0, out=z), out=z)  # NumPy: two passes over z (counted as such)
    out["gbs_numpy"] = 5 * 4 * words / _best(triad, seconds) / 1e9
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        out["gflops_torch"] = 2 * n ** 3 / _best(lambda: ta @ tb, seconds) / 1e9
        tx, ty, tz = (torch.from_numpy(v) for v in (x, y, z))
        out["gbs_torch"] = 3 * 4 * words / _best(lambda: torch.add(ty, tz, alpha=2.0, out=tx), seconds) / 1e9
    out["gflops"] = max(v for k, v in out.items() if k.startswith("gflops_"))
    out["gbs"] = max(v for k, v in out.items() if k.startswith("gbs_"))
    return out


def peaks_line(p: dict, n: int = 2048) -> str:
    parts = [f"sgemm {n}³: NumPy's BLAS {p['gflops_numpy']:.0f} GFLOP/s"]
    if "gflops_torch" in p:
        parts.append(f"torch's {p['gflops_torch']:.0f}")
    parts.append(f"triad: NumPy {p['gbs_numpy']:.1f} GB/s")
    if "gbs_torch" in p:
        parts.append(f"torch {p['gbs_torch']:.1f}")
    return f"Measured peaks: {', '.join(parts)}; roofline from {p['gflops']:.0f} GFLOP/s and {p['gbs']:.1f} GB/s."


def torch_blas() -> str:
    """The BLAS torch was built with, from torch.__config__.show() (MKL and its version, or OpenBLAS)."""
    try:
        import torch
    except ImportError:
        return "torch not installed"
    return blas_from_config(torch.__config__.show())


def blas_from_config(text: str) -> str:
    info = re.search(r"BLAS_INFO=(\w+)", text)
    mkl = re.search(r"Math Kernel Library Version ([\w.\-]+)", text)
    cap = re.search(r"CPU capability usage: (\w+)", text)
    name = info.group(1) if info else "unknown"
    if name == "mkl" and mkl:
        name = f"MKL {mkl.group(1)}"
    return name + (f" ({cap.group(1)} kernels)" if cap else "")


# -- the listing -------------------------------------------------------------------------------------

def products_at_peak(rows: list[dict], peaks: dict) -> float:
    """Seconds the matrix products' flops take at the measured peak GFLOP/s: a floor for the step, whatever
    the rest costs (convolutions and attention included: they are products here)."""
    return sum(r["flops"] for r in rows if r["kernel"].split()[1:2] == ["matmul"]) / (peaks["gflops"] * 1e9)


def render_profile(title: str, rows: list[dict], peaks: dict, top: int = 10) -> str:
    """A workload's top kernels by time: seconds, share, GFLOP/s, GB/s, arithmetic intensity, and the
    achieved fraction of the roofline's attainable rate (of the peak bandwidth for a kernel without arithmetic)."""
    total = sum(r["s"] for r in rows) or math.nan
    in_order = sum(r.get("s_in_order", math.nan) for r in rows)
    lines = [f"#### {title}", "",
             f"{len(rows)} kernels, {total * 1e6:,.0f} µs run one at a time, {in_order * 1e6:,.0f} µs in program "
             f"order (as in the step: each kernel's operands where the kernels before it left them, not in cache "
             f"from its own last run); the matrix products' arithmetic alone, at the measured peak, takes "
             f"{products_at_peak(rows, peaks) * 1e6:,.0f} µs; top {min(top, len(rows))} by time:", "",
             "| kernel | µs | in order µs | share | GFLOP/s | GB/s | flop/byte | of roofline |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: -r["s"])[:top]:
        s = max(r["s"], 1e-12)
        gf, gb = r["flops"] / s / 1e9, r["bytes"] / s / 1e9
        ai = r["flops"] / r["bytes"] if r["bytes"] else math.inf
        attainable = min(peaks["gflops"], ai * peaks["gbs"])
        frac = gf / attainable if r["flops"] else gb / peaks["gbs"]
        bound = "compute" if r["flops"] and attainable >= peaks["gflops"] else "memory"
        lines.append(f"| `{r['kernel']}` | {r['s'] * 1e6:,.1f} | {r.get('s_in_order', math.nan) * 1e6:,.1f} | "
                     f"{r['s'] / total:.0%} | {gf:,.1f} | {gb:,.1f} | "
                     f"{ai:.2f} | {frac:.0%} ({bound}) |")
    return "\n".join(lines) + "\n"


def render_scaling(modes: list[tuple[int, dict[str, list[dict]]]]) -> str:
    """How each kernel class scales with threads: per workload (title -> its kernel_profile rows, per thread
    count), the summed µs of each class (the kernel header's second word: loop, matmul, window, ...) at each
    count and the speedup over the first count."""
    counts = [n for n, _ in modes]
    lines = ["## Scaling by kernel class", "",
             f"Summed kernel µs (each kernel run alone) per class at {', '.join(map(str, counts))} threads, and the "
             f"speedup of each count over {counts[0]}.", "",
             "| workload | class | " + " | ".join(f"{n} thr µs" for n in counts) + " | " +
             " | ".join(f"{n} thr speedup" for n in counts[1:]) + " |",
             "|---|---|" + "---:|" * (2 * len(counts) - 1)]
    for title in modes[0][1]:
        per = [{} for _ in counts]
        for i, (_, profiles) in enumerate(modes):
            for r in profiles.get(title) or []:
                kind = r["kernel"].split()[1]
                per[i][kind] = per[i].get(kind, 0.0) + r["s"]
        for kind in sorted(per[0], key=lambda k: -per[0][k]):
            us = [p.get(kind, math.nan) * 1e6 for p in per]
            lines.append(f"| {title} | {kind} | " + " | ".join(f"{u:,.0f}" for u in us) + " | " +
                         " | ".join(f"{us[0] / u:.2f}x" for u in us[1:]) + " |")
    return "\n".join(lines) + "\n"

