"""Random wide programs on every backend: counts of ok / crash / wrong, and how to reproduce each failure.

Program `seed` is `tests/wide_programs.py`'s `generate(seed, max_steps)`: a random straight-line program
over 0-4-D values (views, joins, pads, gathers and scatters, reductions, normalizations, matmul/einsum,
in-place writes, float32 regions), with a scalar loss weighing every value. Each backend compiles the
program's `value_and_grad` and runs it once; the NumPy backend is checked against PyTorch float64
autograd, the LLVM and Triton backends against the NumPy backend (tests/wide_checks.py; rtol 1e-9, 1e-4 for
programs with a float32 step). Triton runs under its CPU interpreter unless TRITON_INTERPRET=0 is set.

  python benchmarks/fuzz_backends.py --programs 10000 --backends numpy,llvm,triton   # seeds 0..9999
  python benchmarks/fuzz_backends.py --seed 17 --backends llvm --show                # one program
  python benchmarks/fuzz_backends.py --seed 17 --backends llvm --shrink              # its smallest failing form

The long mode runs the programs in a child process (tests/wide_checks.py's `Isolated`: a segfault in
generated code or a hang past --timeout is that program's outcome, and the child is restarted), shows a
progress bar and writes benchmarks/fuzz.md (atomically): per backend the counts and the time taken
(compile + one call, summed; extrapolated to 10,000 programs), the CPU and the date, then each failure
class (kind, the exception's message without its numbers, the innermost gradir frame) with its first
seeds and a command showing its shortest program. `--seed S` runs one program in this process and prints
each backend's outcome, with the traceback of a crash; `--show` prints the program first, as a
standalone script; `--shrink` drops steps, loss terms and arguments while the outcome keeps its class,
and prints what is left.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import faulthandler
import os
import pathlib
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict

REPO = pathlib.Path(__file__).resolve().parents[1]
# the settings of the test suite (tests/conftest.py): set before gradir or triton is imported
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("GRADIR_CHECK", "1")
os.environ.setdefault("GRADIR_VERIFY", "1")
os.environ.setdefault("GRADIR_CACHE_DIR", tempfile.mkdtemp(prefix="gradir-fuzz-cache-"))
sys.path.insert(0, str(REPO))

import dataclasses  # noqa: E402

from benchmarks.bench_backends import _cpu_model as cpu_model  # noqa: E402
from gradir.util.fileio import write_atomic  # noqa: E402
from tests.wide_checks import Isolated, Outcome, check, references, run_gradir  # noqa: E402
from tests.wide_programs import RTOL, Program, generate  # noqa: E402

BACKENDS = ("numpy", "llvm", "triton")
KINDS = ("ok", "crash", "wrong", "timeout")




def git_commit() -> str:
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout.strip()
        return out.stdout.strip() + (" with uncommitted changes" if dirty else "")
    return "?"


# -- one program: show, run, shrink -----------------------------------------------------------------


def show_outcomes(program: Program, backends) -> dict[str, Outcome]:
    """Run the program on each backend in this process (a segfault ends it, with faulthandler's trace)."""
    faulthandler.enable(sys.__stderr__)  # the real stderr: a segfault still prints where it was
    outcomes, refs = {}, references(program)
    for b in backends:
        out = outcomes[b] = check(program, b, refs)
        print(f"{b:7s} {out.kind:7s} {out.seconds:6.2f} s  {out.detail}" + (f"  [{out.where}]" if out.where else ""))
        if out.kind == "crash":  # run it again outside the guard for the whole traceback
            try:
                run_gradir(program, b)
            except Exception:  # noqa: BLE001 - printing it is the point
                traceback.print_exc(limit=-12)
    return outcomes


def _uses(lines, name: str) -> bool:
    return any(re.search(rf"\b{name}\b", line) for line in lines)


def without_step(program: Program, k: int) -> Program:
    """The program without step k and every step reading its value (directly or not)."""
    gone, steps = {program.steps[k].out.name}, []
    for i, s in enumerate(program.steps):
        if i == k or any(_uses(s.gr, name) for name in gone):
            gone.add(s.out.name)
        else:
            steps.append(s)
    return _pruned(dataclasses.replace(program, steps=steps))


def _pruned(program: Program) -> Program:
    """Drop arguments and constants no step reads (float arguments stay: the loss weighs them)."""
    lines = [line for s in program.steps for line in s.gr]
    inputs = [v for v in program.inputs if v.dtype != "int64" or _uses(lines, v.name)]
    consts = {k: c for k, c in program.consts.items() if _uses(lines, k)}
    return dataclasses.replace(program, inputs=inputs, consts=consts)


def shrink(program: Program, backend: str, checker: Isolated) -> Program:
    """Greedily remove steps, then loss terms, then unused float arguments while `backend`'s outcome keeps
    its signature (kind, exception type, innermost gradir frame); each try runs in `checker`'s child."""
    target = checker.check(program, backend).signature
    if target == "ok":
        return program
    program = dataclasses.replace(program, shrunk=True)
    same = lambda p: checker.check(p, backend).signature == target  # noqa: E731
    changed = True
    while changed:
        changed = False
        for k in reversed(range(len(program.steps))):
            smaller = without_step(program, k)
            if same(smaller):
                program, changed = smaller, True
                break
    names = [v.name for v in program.outputs]
    for name in names:  # loss terms
        keep = tuple(n for n in (program.loss_names or names) if n != name)
        if keep and same(smaller := dataclasses.replace(program, loss_names=keep)):
            program = smaller
    lines = [line for s in program.steps for line in s.gr]
    for v in list(program.inputs):  # float arguments no step reads and no loss term weighs
        if v.dtype != "int64" and not _uses(lines, v.name) and v.name not in (program.loss_names or ()):
            smaller = dataclasses.replace(program, inputs=[u for u in program.inputs if u is not v])
            if program.loss_names and same(smaller):
                program = smaller
    return program


# -- the long mode ----------------------------------------------------------------------------------


def fuzz(args, backends) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    seeds = range(args.start, args.start + args.programs)
    counts = {b: Counter() for b in backends}
    seconds = Counter()
    classes: dict[tuple[str, str], list] = defaultdict(list)  # (backend, signature) -> [(seed, steps, outcome)]
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn()]
    started, done = time.perf_counter(), 0
    checker = Isolated(args.max_steps, args.timeout)
    try:
        with Progress(*columns) as progress:
            task = progress.add_task("programs", total=len(seeds))
            for seed in seeds:
                steps = len(generate(seed, args.max_steps).steps)
                for b in backends:
                    out = checker.check(seed, b)
                    counts[b][out.kind] += 1
                    seconds[b] += out.seconds
                    if out.kind != "ok":
                        classes[b, out.signature].append((seed, steps, out))
                done += 1
                summary = "  ".join(f"{b} " + "/".join(str(counts[b][k]) for k in KINDS[:3]) for b in backends)
                progress.update(task, advance=1, description=f"ok/crash/wrong  {summary}")
    except KeyboardInterrupt:  # report the programs run so far
        print(f"interrupted after {done} programs")
    finally:
        checker.close()
    if not done:
        return
    wall = time.perf_counter() - started
    text = report(args, backends, counts, seconds, classes, wall, done)
    write_atomic(args.out, text)
    print(text)


def report(args, backends, counts, seconds, classes, wall, n) -> str:
    """The markdown of benchmarks/fuzz.md for `n` programs from seed args.start."""
    command = f"python benchmarks/fuzz_backends.py --programs {n} --backends {','.join(backends)}" + (
        f" --start {args.start}" if args.start else "") + (
        f" --max-steps {args.max_steps}" if args.max_steps != DEFAULT_STEPS else "")
    lines = [
        "# Random wide programs on every backend",
        "",
        f"`{command}`: seeds {args.start}..{args.start + n - 1} of `tests/wide_programs.py` (1-{args.max_steps}"
        f" steps each), {datetime.date.today().isoformat()}, {cpu_model()} ({os.cpu_count()} cores, "
        f"{platform.python_version()}), gradir at {git_commit()}; "
        + ("" if "triton" not in backends else "Triton under its CPU interpreter; "
           if os.environ.get("TRITON_INTERPRET") == "1" else "Triton compiled for the GPU; ") +
        f"{wall:.0f} s in all, so about {wall / n * 10000 / 60:.0f} min for 10,000 programs on these backends "
        f"(5-minute load average {os.getloadavg()[1]:.1f} at the end; the run itself keeps about one core busy).",
        "",
        "Oracles: the NumPy backend against PyTorch float64 autograd; LLVM and Triton against the NumPy backend",
        "(against torch where the NumPy backend crashed). Tolerance: |got - want| <= rtol (|want| + max|want|)",
        f"per array, rtol {_e(RTOL['float64'])} ({_e(RTOL['float32'])} when the program has a float32 value); dtypes, "
        "shapes and NaNs must match.",
        f"A backend gets {args.timeout:g} s per program (compile and one call) before it counts as a timeout.",
        "",
        "| backend | programs | ok | crash | wrong | timeout | time | per program | 10,000 programs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for b in backends:
        c, s = counts[b], seconds[b]
        lines.append(f"| {b} | {n} | " + " | ".join(str(c[k]) for k in KINDS) +
                     f" | {s:.0f} s | {s / n * 1000:.0f} ms | {s / n * 10000 / 60:.0f} min |")
    lines += ["", "Time: compile and one call of `value_and_grad`, summed per backend (the NumPy backend's includes",
              "nothing of torch's; the last column extrapolates linearly). The wall time adds the oracles and the child",
              "process's start."]
    for b in backends:
        mine = sorted(((sig, runs) for (bb, sig), runs in classes.items() if bb == b), key=lambda x: -len(x[1]))
        if not mine:
            continue
        lines += ["", f"## {b}: {sum(len(r) for _, r in mine)} failing programs in {len(mine)} classes", ""]
        for sig, runs in mine:
            seeds = [s for s, _, _ in runs]
            short_seed, short_steps, short = min(runs, key=lambda r: (r[1], r[0]))
            lines += [
                f"### {sig} ({len(runs)} programs)",
                "",
                f"- e.g. `{short.detail[:300]}`",
                f"- first seeds: {', '.join(map(str, seeds[:args.examples]))}"
                + (f" (of {len(seeds)})" if len(seeds) > args.examples else ""),
                f"- shortest: seed {short_seed} ({short_steps} steps): `python benchmarks/fuzz_backends.py --seed "
                f"{short_seed}" + (f" --max-steps {args.max_steps}" if args.max_steps != DEFAULT_STEPS else "")
                + f" --backends {b} --show` (`--shrink` for its smallest form)",
                "",
            ]
    return "\n".join(lines).rstrip() + "\n"


DEFAULT_STEPS = 12


def _e(x: float) -> str:
    return f"{x:.0e}".replace("e-0", "e-")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=500, help="how many programs (seeds start..start+N-1)")
    ap.add_argument("--start", type=int, default=0, help="the first seed")
    ap.add_argument("--backends", default="numpy,llvm,triton", help="comma-separated: numpy,llvm,triton")
    ap.add_argument("--max-steps", type=int, default=DEFAULT_STEPS, help="steps per program: 1..this")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per program and backend")
    ap.add_argument("--examples", type=int, default=5, help="failing seeds listed per class")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "fuzz.md"), help="the report (long mode)")
    ap.add_argument("--seed", type=int, help="run this one program and print each backend's outcome")
    ap.add_argument("--show", action="store_true", help="with --seed: print the program (gradir spelling)")
    ap.add_argument("--shrink", action="store_true", help="with --seed: print the smallest program failing alike")
    args = ap.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if unknown := set(backends) - set(BACKENDS):
        ap.error(f"unknown backends {sorted(unknown)}; choose from {', '.join(BACKENDS)}")
    if args.seed is None:
        fuzz(args, backends)
        return 0
    program = generate(args.seed, args.max_steps)
    if args.show:
        print(program.source(backends[0]))
    if args.shrink:
        checker = Isolated(args.max_steps, args.timeout)
        outcomes = {b: checker.check(program, b) for b in backends}
        for b, out in outcomes.items():
            print(f"{b:7s} {out.kind:7s} {out.seconds:6.2f} s  {out.detail}" + (f"  [{out.where}]" if out.where else ""))
            if out.kind != "ok":
                small = shrink(program, b, checker)
                print(f"\n# smallest program {b} fails alike ({out.signature}):\n")
                print(small.source(b))
        checker.close()
    else:
        outcomes = show_outcomes(program, backends)
    return 0 if all(o.kind == "ok" for o in outcomes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
