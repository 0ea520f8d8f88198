"""Bucketed all-reduce overlapped with the backward vs all-reduce after the backward, on 2 local processes.

`gr.distributed.DataParallel` with `overlap=True` starts each bucket's all-reduce as soon as the compiled
program has finished its last gradient (the LLVM backend hands control back there; gloo's threads send
while the backward goes on), with `overlap=False` after the whole program. Both do the same arithmetic:
the run first checks that they end with the same parameters, bit for bit.

Workload: an MLP of `--layers` tanh layers of `--width` x `--width` float32 weights, a batch of `--batch`
examples per rank, mean squared error, SGD; buckets of `--bucket-mib` MiB. Method: `--rounds` rounds, each
running `--steps` steps of both systems in alternating order (this machine is shared and noisy: compare
the ratio, not the times); a step's time is rank 0's wall time from the start of its forward to the
end of its last all-reduce, after the first round's compile. The table gives the median and spread per
system and the ratio, then the per-bucket timeline of one step of each system (when each all-reduce
started and when all had finished, from the start of the forward).

Each rank runs single-threaded (OpenBLAS, OpenMP: 1 thread), one core each on a 2-core machine; on such a
machine the all-reduce and the backward compete for the same cores, so the gain of overlapping is small:
it is reported as measured.

Writes benchmarks/distributed.md atomically. Run:
  python benchmarks/bench_distributed.py [--rounds N] [--steps K] [--layers L] [--width W] [--batch B]
      [--bucket-mib M] [--out PATH] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

import numpy as np

import gradir as gr
from gradir.util.fileio import write_atomic

RESULTS = pathlib.Path(__file__).with_name("distributed.md")
WORLD = 2
SYSTEMS = {"overlap": "buckets overlapped with the backward", "after": "all-reduce after the backward"}


def params(layers: int, width: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {f"w{i}": (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32) for i in range(layers)}


def loss(p, x, y):
    for i in range(len(p)):
        x = gr.tanh(x @ p[f"w{i}"])
    return gr.mean(gr.sum((x - y) ** 2, axis=1))


def run_rank(args) -> dict:
    """This rank's measurements (torch.distributed initialised from the environment)."""
    info = gr.distributed.init(timeout_s=300)
    rng = np.random.default_rng(100 + info.rank)
    x = rng.standard_normal((args.batch, args.width)).astype(np.float32)
    y = rng.standard_normal((args.batch, args.width)).astype(np.float32)
    dps = {key: gr.distributed.DataParallel(loss, gr.optim.sgd(0.01), overlap=key == "overlap",
                                            bucket_bytes=int(args.bucket_mib * 2**20)) for key in SYSTEMS}
    state = {key: dp.init(params(args.layers, args.width)) for key, dp in dps.items()}
    samples: dict = {key: [] for key in SYSTEMS}
    timelines: dict = {}
    for r in range(args.rounds + 1):  # round 0 compiles and warms up, untimed
        order = list(SYSTEMS) if r % 2 == 0 else list(SYSTEMS)[::-1]
        for key in order:
            dp = dps[key]
            p, s = state[key]
            times = []
            for _ in range(args.steps):
                _, p, s = dp.step(p, s, x, y)
                times.append(dp.last["timeline_ms"]["reduced"])
            state[key] = (p, s)
            if r:
                samples[key].append(statistics.median(times))
            timelines[key] = dp.last["timeline_ms"]
    record = {"rank": info.rank, "samples": samples, "timelines": timelines,
              "plan": dps["overlap"].plan.to_dict(),
              "digests": {key: gr.distributed.tree_digest(state[key]) for key in SYSTEMS}}
    gr.distributed.finish()
    return record


def render(args, rec: dict) -> str:
    s, plan = rec["samples"], rec["plan"]
    median = {k: statistics.median(v) for k, v in s.items()}
    spread = {k: (np.percentile(v, 75) - np.percentile(v, 25)) / 2 / median[k] * 100 for k, v in s.items()}
    lines = [f"## {args.layers} layers of {args.width}x{args.width} float32, batch {args.batch} per rank, "
             f"{WORLD} ranks (gloo, loopback), buckets of {args.bucket_mib:g} MiB", "",
             f"{args.rounds} rounds of {args.steps} steps per system, alternating; rank 0's step from the start of "
             "its forward to the end of its last all-reduce.", "",
             "| system | median ms/step | spread | vs after the backward |", "|---|---:|---:|---:|"]
    for k in SYSTEMS:
        lines.append(f"| {SYSTEMS[k]} | {median[k]:,.2f} | ±{spread[k]:.0f}% | {median[k] / median['after']:.2f}x |")
    same = "yes" if rec["same_bits"] else "NO"
    lines += ["", f"Same parameters after both runs, bit for bit, on every rank: {same}.", "",
              "Per-bucket timeline of one step on rank 0 (ms from the start of the forward):", "",
              "| bucket | gradients | bytes | launch at backward step (steps left) | all-reduce started, overlapped | "
              "started, after the backward |", "|---:|---|---:|---:|---:|---:|"]
    t = rec["timelines"]
    for b, lo, la in zip(plan["buckets"], t["overlap"]["launch"], t["after"]["launch"]):
        left = plan["num_steps"] - 1 - b["launch_step"]
        lines.append(f"| {b['bucket']} | {', '.join(b['gradients'])} | {b['bytes']:,} | {b['launch_step']} ({left}) | "
                     f"{lo:,.2f} | {la:,.2f} |")
    lines += ["", "| | overlapped | after the backward |", "|---|---:|---:|",
              f"| forward and backward done | {t['overlap']['computed']:,.2f} | {t['after']['computed']:,.2f} |",
              f"| every all-reduce done | {t['overlap']['reduced']:,.2f} | {t['after']['reduced']:,.2f} |"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--bucket-mib", type=float, default=2.0)
    ap.add_argument("--out", type=pathlib.Path, default=RESULTS)
    ap.add_argument("--quick", action="store_true", help="a tiny model and two rounds (checks that it runs)")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.layers, args.width, args.batch, args.bucket_mib = 2, 2, 3, 32, 8, 0.005
    if "RANK" in os.environ:  # one of the ranks launch_local started
        record = run_rank(args)
        pathlib.Path(os.environ["GRADIR_BENCH_OUT"], f"rank{record['rank']}.json").write_text(json.dumps(record))
        return record
    flags = [f"--rounds={args.rounds}", f"--steps={args.steps}", f"--layers={args.layers}", f"--width={args.width}",
             f"--batch={args.batch}", f"--bucket-mib={args.bucket_mib}"]
    single = {v: "1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gradir-bench-dp-") as tmp:
        results = gr.distributed.launch_local([__file__, *flags], WORLD, timeout_s=1200,
                                              env={**single, "GRADIR_BENCH_OUT": tmp})
        for r, (rc, text) in enumerate(results):
            if rc:
                raise SystemExit(f"rank {r} failed:\n{text}")
        recs = [json.loads(pathlib.Path(tmp, f"rank{r}.json").read_text()) for r in range(WORLD)]
    rec = recs[0]
    rec["same_bits"] = len({d for x in recs for d in x["digests"].values()}) == 1
    table = render(args, rec)
    header = (f"# Data-parallel gradient all-reduce: overlapped vs after the backward\n\n"
              f"`python benchmarks/bench_distributed.py{' --quick' if args.quick else ''}` on "
              f"{os.cpu_count()} cores, {time.perf_counter() - start:.0f} s. Each rank is one single-threaded "
              "process; the all-reduce runs on gloo's threads, so on a 2-core machine it shares the cores with the "
              "backward and the overlap can save little.\n\n")
    write_atomic(args.out, (header + table).encode())
    print(table)
    print(f"wrote {args.out}")
    return rec


if __name__ == "__main__":
    main(sys.argv[1:])
