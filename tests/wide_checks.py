"""Running the random wide programs of tests/wide_programs.py on gradir's backends, and judging them.

- `run_gradir(program, backend)` / `run_torch(program)`: the loss and gradients, as NumPy arrays.
- `references(program)`: the oracles: PyTorch float64 autograd, and the NumPy backend checked against it.
- `check(program, backend, refs)`: one backend's `Outcome`: ok, crash (the exception's type, first line
  and innermost gradir frame) or wrong (what differs): the NumPy backend against torch, any other
  against the NumPy backend (against torch where the NumPy backend crashed).
- `Isolated`: the same in a child process, so a backend that kills its process (a segfault in generated
  code) or hangs costs one outcome ("crash ... killed by SIGSEGV", "timeout"), not the whole run.
  `python -m tests.wide_checks` is that child: it reads `backend seed` lines and answers JSON lines.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import pathlib
import pickle
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

import numpy as np

from tests.wide_programs import Program, generate

REPO = pathlib.Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class Outcome:
    """What one backend did with one program."""

    kind: str  # "ok" | "crash" | "wrong" | "timeout"
    detail: str = ""  # the exception's type and first line, or what differs
    where: str = ""  # for a crash: the innermost frame in gradir's own code (file:line in function)
    seconds: float = 0.0

    @property
    def signature(self) -> str:
        """A key grouping outcomes likely to share a cause: kind, exception type, innermost gradir frame."""
        if self.kind == "crash":  # the message without its line and the numbers that vary
            text = re.sub(r"\s*\(at <wide program[^)]*\)", "", self.detail)
            text = re.sub(r"[0-9a-f]{16,}|%\d+|\bk\d+|\d+", "#", text)
            return f"crash {text[:200]} at {self.where or '?'}"
        if self.kind == "wrong":
            what = self.detail.split(": ", 1)[-1]
            return "wrong " + ("values" if what.startswith("max error") else "dtype or shape" if what.startswith("got")
                               else what.split(" (")[0])
        return self.kind


def run_gradir(program: Program, backend: str) -> list[np.ndarray]:
    """[loss, grad of each float argument] of the program's value_and_grad compiled for `backend`."""
    import gradir as gr

    step = gr.compile(gr.value_and_grad(program.gradir_function(), argnums=program.argnums), backend=backend)
    loss, grads = step(*program.arguments())
    grads = grads if isinstance(grads, tuple) else (grads,)
    return [np.asarray(loss)] + [np.asarray(g) for g in grads]


def run_torch(program: Program) -> list[np.ndarray]:
    """[loss, grads] from PyTorch autograd; checks every value's shape and dtype against the program's."""
    import torch

    args = [torch.from_numpy(np.array(a)) for a in program.arguments()]
    for k in program.argnums:
        args[k].requires_grad_(True)
    loss, values = program.torch_function()(*args)
    for v, t in zip(program.inputs + [s.out for s in program.steps], values):
        if tuple(t.shape) != v.shape or str(t.dtype) != f"torch.{v.dtype}":
            raise AssertionError(f"generator bug: torch gives {v.name} {tuple(t.shape)} {t.dtype}, "
                                 f"the program says {v.shape} {v.dtype}")
    leaves = [args[k] for k in program.argnums]
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    grads = [torch.zeros_like(x) if g is None else g for x, g in zip(leaves, grads)]
    return [loss.detach().numpy()] + [g.numpy() for g in grads]


def compare(got, want, rtol: float, names) -> str:
    """'' when got matches want: same shapes, dtypes, NaNs and infinities, and |got - want| <= rtol (|want| +
    max|want|) elementwise (the second term: an error relative to the array's scale); else what differs."""
    for name, g, w in zip(names, got, want):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"{name}: got {g.dtype}{list(g.shape)}, want {w.dtype}{list(w.shape)}"
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        if not np.array_equal(np.isnan(g64), np.isnan(w64)):
            return f"{name}: NaN where the reference has none (or the reverse)"
        finite = np.isfinite(w64)
        if not np.array_equal(g64[~finite], w64[~finite]):
            return f"{name}: infinities differ"
        err = np.abs(g64 - w64)[finite]
        scale = np.abs(w64[finite]).max(initial=0.0)
        bound = rtol * (np.abs(w64[finite]) + max(scale, 1e-300))
        if (err > bound).any():
            k = int(np.argmax(err / bound))
            pos = tuple(int(i) for i in np.unravel_index(np.flatnonzero(finite)[k], w.shape)) if w.ndim else ()
            return (f"{name}: max error {err.max():.3g} (at {pos}: got {g64[pos]:.12g}, want {w64[pos]:.12g}; "
                    f"scale {scale:.3g}, rtol {rtol:g})")
    return ""


def crash_outcome(e: BaseException) -> Outcome:
    """A crash, named by exception type and first line, located at the innermost frame in gradir's code."""
    first = (str(e).strip().splitlines() or [""])[0][:240]
    return Outcome("crash", f"{type(e).__name__}: {first}", _innermost(traceback.extract_tb(e.__traceback__)))


def _innermost(frames) -> str:
    """file:line in function of the innermost frame (of `frames`, outermost first) in gradir's own code."""
    for frame in reversed(frames):
        filename, lineno, name = frame[0], frame[1], frame[2]
        try:
            rel = pathlib.Path(filename).resolve().relative_to(REPO)
        except ValueError:
            continue
        if rel.parts[0] != "tests" and not rel.parts[0].startswith("."):  # not the tests, not .venv
            return f"{rel}:{lineno} in {name}"
    return ""


def names_of(program: Program) -> list[str]:
    return ["loss"] + [f"grad {program.inputs[k].name}" for k in program.argnums]


def _attempt(fn):
    """(result, None) or (None, the crash Outcome), and the seconds it took."""
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result, out = fn(), None
    except Exception as e:  # noqa: BLE001 - any exception is the outcome being classified
        result, out = None, crash_outcome(e)
    return result, out, time.perf_counter() - start


@dataclasses.dataclass
class References:
    """What a backend's result is compared with: torch's [loss, grads], the NumPy backend's (None where it
    crashed), and the NumPy backend's own outcome against torch."""

    torch: list | None
    numpy: list | None
    numpy_outcome: Outcome


def references(program: Program) -> References:
    """Run the oracles: PyTorch float64 autograd, then the NumPy backend checked against it."""
    want, torch_crash, _ = _attempt(lambda: run_torch(program))
    got, out, seconds = _attempt(lambda: run_gradir(program, "numpy"))
    if torch_crash is not None:  # the oracle itself failed: a bug of the generator, not of a backend
        out = Outcome("crash", "torch spelling: " + torch_crash.detail, "tests/wide_programs.py")
    elif out is None:
        diff = compare(got, want, program.rtol, names_of(program))
        out = Outcome("wrong", diff) if diff else Outcome("ok")
    out.seconds = seconds
    return References(want, got, out)


def check(program: Program, backend: str, refs: References | None = None) -> Outcome:
    """`backend`'s outcome on `program` (see the module's docstring)."""
    refs = refs or references(program)
    if backend == "numpy":
        return refs.numpy_outcome
    got, out, seconds = _attempt(lambda: run_gradir(program, backend))
    reference = refs.numpy if refs.numpy is not None else refs.torch
    if out is None:
        if reference is None:  # both oracles failed: nothing to compare with
            out = Outcome("crash", "no reference: " + refs.numpy_outcome.detail, refs.numpy_outcome.where)
        else:
            diff = compare(got, reference, program.rtol, names_of(program))
            out = Outcome("wrong", diff) if diff else Outcome("ok")
    out.seconds = seconds
    return out


# -- in a child process -----------------------------------------------------------------------------


class Isolated:
    """`check` run in a child process (started on first use, restarted after it dies): a segfault or a
    hang of one program becomes that program's outcome. The child keeps the last program's references,
    so asking for several backends of one seed in a row runs the oracles once."""

    def __init__(self, max_steps: int, timeout: float = 120.0, recycle: int = 1000):
        self.max_steps, self.timeout, self.recycle = max_steps, timeout, recycle
        self.proc: subprocess.Popen | None = None
        self.served = 0

    def _start(self) -> None:
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "tests.wide_checks",
                                      str(self.max_steps)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, bufsize=1)
        self.served = 0

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc.stdin.close()
            self.proc.stdout.close()
            self.stderr.close()
            self.proc = None

    def check(self, program: int | Program, backend: str) -> Outcome:
        """`backend`'s outcome on `program`, given by seed (generated with `max_steps`) or whole. A child that
        dies is asked once more in a new child: a death that does not repeat (a kill from outside) is no
        outcome of the program's."""
        out = self._check(program, backend)
        return self._check(program, backend) if out.detail.startswith("ProcessDied") else out

    def _check(self, program: int | Program, backend: str) -> Outcome:
        if self.proc is not None and self.served >= self.recycle:  # bound the child's memory
            self.close()
        if self.proc is None:
            self._start()
        self.served += 1
        what = program if isinstance(program, int) else base64.b64encode(pickle.dumps(program)).decode()
        self.proc.stdin.write(f"{backend} {what}\n")
        self.proc.stdin.flush()
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            ready = sel.select(self.timeout + (30 if self.served == 1 else 0))  # the first call imports everything
        line = self.proc.stdout.readline() if ready else ""
        if line:
            return Outcome(**json.loads(line))
        if not ready:
            self.close()
            return Outcome("timeout", f"no answer within {self.timeout:g} s", "", self.timeout)
        code = self.proc.wait()
        self.stderr.seek(0)
        out = _died(code, self.stderr.read())
        self.close()
        return out


def _died(code: int, stderr: str) -> Outcome:
    """The Outcome of a child that exited with `code`, from faulthandler's traceback in its stderr."""
    if code < 0:
        how = f"killed by {signal.Signals(-code).name}"
    else:
        how = f"exited with status {code}: " + ([line for line in stderr.splitlines() if line.strip()] or [""])[-1][:200]
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', stderr.split("Current thread")[-1])
    frames = [(f, int(n), name) for f, n, name in reversed(frames)]  # faulthandler prints innermost first
    kernel = next((f"{name} of {pathlib.Path(f).name}" for f, _, name in reversed(frames)
                   if pathlib.Path(f).name.startswith("gradir_triton_")), "")  # a module the Triton backend wrote
    return Outcome("crash", f"ProcessDied: {how}" + (f" in generated code ({kernel})" if kernel else ""),
                   _innermost(frames))


def _serve(max_steps: int) -> None:
    """The child: for each `backend seed` or `backend <pickled program>` line on stdin, one JSON Outcome
    line on the original stdout."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever else writes to stdout goes to stderr
    cached: tuple[str, Program, References] | None = None
    for line in sys.stdin:
        backend, what = line.split()
        if cached is None or cached[0] != what:
            program = generate(int(what), max_steps) if what.isdigit() else pickle.loads(base64.b64decode(what))
            cached = (what, program, references(program))
        out = check(cached[1], backend, cached[2])
        answers.write(json.dumps(dataclasses.asdict(out)) + "\n")


if __name__ == "__main__":
    # the settings of the test suite (tests/conftest.py) unless the caller set others
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("GRADIR_CHECK", "1")
    os.environ.setdefault("GRADIR_VERIFY", "1")
    os.environ.setdefault("GRADIR_CACHE_DIR", tempfile.mkdtemp(prefix="gradir-wide-cache-"))
    _serve(int(sys.argv[1]))
