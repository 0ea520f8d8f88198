"""Where a GPU step's time goes: each kernel's device time for gradir's Triton backend and for torch.compile.

    python benchmarks/profile_gpu.py [--workload gpt_large] [--calls 5] [--top 25] [--out profile_gpu.txt]

Runs bench_gpu.py's workload, compiled by gradir (kernels launched one by one, no CUDA graph, so every launch
is seen) and by torch.compile, under torch.profiler for `--calls` steady calls each, and prints the kernels
by total device time with gradir's kernel listing, so each Triton function (k<index>) and each cuBLAS call
can be traced to the fused kernel and the ops it runs. `--device cpu --quick` checks the pipeline through
Triton's interpreter (timings meaningless).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import bench_gpu as bg  # noqa: E402

import gradir as gr  # noqa: E402


def kernel_table(torch, prof, calls: int, top: int) -> tuple[str, float]:
    """The `top` kernels by device time per call, and the total device ms per call."""
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        t = e.self_cuda_time_total if t is None else t
        if t > 0:
            rows.append((t / calls / 1e3, e.count // calls, e.key))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    lines = [f"{'ms/call':>9} {'share':>6} {'launches':>8}  kernel"]
    lines += [f"{ms:9.3f} {ms / total:6.1%} {n:8d}  {name[:150]}" for ms, n, name in rows[:top]]
    return "\n".join(lines), total


def profile(torch, device, run, calls: int, top: int) -> str:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    for _ in range(2):
        run()
    if device.type == "cuda":
        torch.cuda.synchronize()
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            run()
        if device.type == "cuda":
            torch.cuda.synchronize()
    table, total = kernel_table(torch, prof, calls, top)
    return f"device time {total:.3f} ms per call\n{table}"


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--workload", default="gpt_large", choices=bg.WORKLOADS)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--quick", action="store_true", help="bench_gpu.py's tiny sizes (the interpreter path)")
    ap.add_argument("--out", type=pathlib.Path, default=None)
    args = ap.parse_args(argv)
    os.environ["GRADIR_TRITON_CUDA_GRAPHS"] = "0"  # every launch seen by the profiler
    torch, device = bg.select_device(args.device)
    bench = bg.Bench(torch, device, quick=args.quick)
    w = bg.workload(args.workload, args.quick)
    parts = [f"# {w.title} on {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}"]

    step = gr.compile(gr.value_and_grad(w.gradir_loss, argnums=w.argnums), backend="triton", check=False)
    gargs = bench.args(w, grad=False)
    parts += ["## gradir triton", profile(torch, device, lambda: step(*gargs), args.calls, args.top),
              step.executable(*gargs).listing]
    runner = bench.torch_compile(w)
    parts += ["## torch.compile", profile(torch, device, runner.call, args.calls, args.top)]
    text = "\n\n".join(parts) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return text


if __name__ == "__main__":
    main()
