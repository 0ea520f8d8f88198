"""Random programs as wide as what users write (tests/wide_programs.py) on every backend.

The NumPy backend must match PyTorch float64 autograd (value and gradient of every float argument),
and the LLVM and Triton backends must match the NumPy backend, on every program: no crash, no
mismatch (rtol 1e-9; 1e-4 with a float32 step). The compiled backends run in one child process
(tests/wide_checks.py's `Isolated`), so a segfault in generated code fails its own test only.

Seeds are fixed: programs 0..N-1 of up to 8 steps, those `python benchmarks/fuzz_backends.py --max-steps 8`
runs first (its default runs thousands of up to 12 steps); a failing test names the command that shows
the program and its traceback. The NumPy backend's programs are drawn by hypothesis (seeds, under the
derandomized 'ci' profile)."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest
from conftest import triton_missing
from hypothesis import example, given, settings

from tests.wide_checks import REPO, Isolated, Outcome, _died, check, compare, run_torch
from tests.wide_ops import OPS
from tests.wide_programs import Program, Step, Var, generate, wide_programs

STEPS = 8  # programs of 1-8 steps (the long mode's default is 12: thousands of longer ones)
N_NUMPY, N_LLVM, N_TRITON = 300, 160, 200  # 60-90 s in all on a 2-core machine


def explain(out: Outcome, seed: int, backend: str) -> str:
    return (f"{backend} on program {seed}: {out.kind}: {out.detail}" + (f" [{out.where}]" if out.where else "")
            + f"\n  reproduce: python benchmarks/fuzz_backends.py --seed {seed} --max-steps {STEPS} --backends {backend} --show")


@pytest.fixture(scope="module")
def isolated():
    checker = Isolated(STEPS)
    yield checker
    checker.close()


# -- the generator ---------------------------------------------------------------------------------


@settings(settings.get_profile("ci"), max_examples=100)
@given(wide_programs(STEPS))
@example(generate(5995963, STEPS))  # repeat counts along an empty axis: torch.tensor([]) was a float tensor
def test_a_seed_gives_one_program_whose_torch_spelling_has_the_stated_shapes(program):
    again = generate(program.seed, STEPS)
    assert again.source() == program.source()
    assert all(np.array_equal(a, b) for a, b in zip(again.arguments(), program.arguments()))
    loss, *grads = run_torch(program)  # raises if a value's shape or dtype is not the one the program states
    assert loss.shape == () and len(grads) == len(program.argnums)


def test_the_first_seeds_cover_every_op_and_the_awkward_shapes():
    programs = [generate(seed, STEPS) for seed in range(N_LLVM)]
    steps = [s for p in programs for s in p.steps]
    values = [v for p in programs for v in p.inputs + [s.out for s in p.steps]]
    lines = [line for s in steps for line in s.gr]
    assert {s.op for s in steps} == set(OPS)
    assert {v.ndim for v in values} >= {0, 1, 2, 3, 4}
    assert any(v.size == 0 for v in values) and any(1 in v.shape for v in values) and any(v.size > 1000 for v in values)
    assert {v.dtype for v in values} == {"float64", "float32", "int64"}  # float32 regions, traced indices
    assert any(re.search(r"\[[^\]]*::-\d", line) for line in lines)  # a negative step
    assert any(re.search(r"^v\d+\[.*\] \+?= ", line) for line in lines)  # an in-place write
    assert any("axis=(" in line for line in lines)  # a reduction over several axes
    assert max(len(p.steps) for p in programs) == STEPS and any(len(p.steps) == 1 for p in programs)


def test_compare_flags_what_differs():
    want = [np.array(1.0), np.array([1.0, -2.0, 3.0])]
    names = ["loss", "grad x"]
    assert compare([w.copy() for w in want], want, 1e-9, names) == ""
    near = [want[0], want[1] * (1 + 1e-12)]
    assert compare(near, want, 1e-9, names) == ""
    assert "max error" in compare([want[0], want[1] + [0, 0, 1e-6]], want, 1e-9, names)
    assert "got float32" in compare([want[0], want[1].astype(np.float32)], want, 1e-9, names)
    assert "NaN" in compare([want[0], np.array([1.0, np.nan, 3.0])], want, 1e-9, names)
    assert "got float64[2]" in compare([want[0], want[1][:2]], want, 1e-9, names)


def test_a_child_that_dies_is_one_crash_outcome():
    kill = "__import__('os').kill(__import__('os').getpid(), 11)"
    x = Var("x1", (2,), "float64")
    program = Program(0, 1, [x], {}, {}, [Step("unary", (kill, "v2 = x1"), (kill, "v2 = x1"), Var("v2", (2,), "float64"))])
    checker = Isolated(STEPS)
    try:
        out = checker.check(program, "llvm")
        assert out.kind == "crash" and out.detail.startswith("ProcessDied: killed by SIGSEGV"), out
        assert checker.check(generate(0, STEPS), "numpy").kind in ("ok", "wrong", "crash")  # a new child answers
    finally:
        checker.close()


def test_a_segfault_is_located_in_gradir_and_the_generated_kernel():
    stderr = f"""Fatal Python error: Segmentation fault

Current thread 0x00007f (most recent call first):
  File "/x/site-packages/triton/runtime/interpreter.py", line 550 in create_masked_load
  File "/tmp/gradir-cache/triton/gradir_triton_1.py", line 313 in k14
  File "{REPO}/backends/triton/backend.py", line 323 in _launch
  File "{REPO}/tests/wide_checks.py", line 60 in run_gradir
"""
    out = _died(-11, stderr)
    assert out.detail == "ProcessDied: killed by SIGSEGV in generated code (k14 of gradir_triton_1.py)"
    assert out.where == "backends/triton/backend.py:323 in _launch"


# -- the backends ----------------------------------------------------------------------------------


@settings(settings.get_profile("ci"), max_examples=N_NUMPY)
@given(wide_programs(STEPS))
def test_numpy_backend_matches_torch(program):
    out = check(program, "numpy")
    assert out.kind == "ok", explain(out, program.seed, "numpy")


@pytest.mark.parametrize("seed", range(N_LLVM))
def test_llvm_backend_matches_numpy(seed, isolated):
    out = isolated.check(seed, "llvm")
    assert out.kind == "ok", explain(out, seed, "llvm")


@pytest.mark.skipif(triton_missing() is not None, reason=str(triton_missing()))
@pytest.mark.parametrize("seed", range(N_TRITON))
def test_triton_backend_matches_numpy(seed, isolated):
    out = isolated.check(seed, "triton")
    assert out.kind == "ok", explain(out, seed, "triton")


# -- the long mode's script ------------------------------------------------------------------------


def fuzz_script():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import fuzz_backends

    return fuzz_backends


def test_fuzz_script_writes_a_report_and_shows_a_program(tmp_path, capsys):
    fuzz_backends = fuzz_script()
    out = tmp_path / "fuzz.md"
    fuzz_backends.main(["--programs", "3", "--backends", "numpy", "--max-steps", "4", "--out", str(out)])
    text = out.read_text()
    assert "| numpy | 3 | 3 | 0 | 0 | 0 |" in text and "seeds 0..2" in text, text
    assert fuzz_backends.main(["--seed", "5", "--max-steps", "4", "--backends", "numpy", "--show"]) == 0
    shown = capsys.readouterr().out
    assert "def f(" in shown and 'backend="numpy"' in shown and "numpy   ok" in shown


def test_dropping_a_step_drops_what_reads_it():
    without_step = fuzz_script().without_step
    program = generate(3, STEPS)
    for k, step in enumerate(program.steps):
        smaller = without_step(program, k)
        names = {s.out.name for s in smaller.steps}
        assert step.out.name not in names and len(smaller.steps) < len(program.steps)
        for s in smaller.steps:  # every step left reads only arguments, constants and steps left
            assert not re.search(rf"\b{step.out.name}\b", " ".join(s.gr))
        run_torch(smaller)  # still a program: every name it reads is defined
