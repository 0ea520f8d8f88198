"""Shared test setup: float64 torch as the oracle, verified graphs, and the shared data folder."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest
from hypothesis import settings

# CI runs every property test on the same examples (derandomized): a green run means the same everywhere
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

# the Triton backend's kernels run on the CPU through Triton's interpreter, unless a GPU run asks otherwise
# (benchmarks/gpu_check.sh sets TRITON_INTERPRET=0); set before anything imports triton
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("GRADIR_CHECK", "1")  # compiled code asserts every shape/dtype the IR states
os.environ.setdefault("GRADIR_VERIFY", "1")  # every pass's result is verified
if "GRADIR_CACHE_DIR" not in os.environ:  # compiled object code: cached for this test run only, never in ~/.cache
    import tempfile

    os.environ["GRADIR_CACHE_DIR"] = tempfile.mkdtemp(prefix="gradir-test-cache-")

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def torch_float64():
    """torch's default dtype set to float64 for the test (the oracle's precision), restored after."""
    import torch

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.fixture
def names_path():
    path = DATA / "names.txt"
    if not path.exists():
        pytest.skip(f"dataset not found at {path} (it lives in the shared folder beside the repo)")
    return path


def triton_missing() -> str | None:
    """Why the Triton backend's tests cannot run here (None: they can)."""
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        return "triton is not installed (pip install -e '.[triton]')"
    return None


@pytest.fixture(scope="module", params=["numpy", "llvm", "triton"])
def eager_backend(request):
    """Run a module's tests on each backend: eager transformations executed by the NumPy interpreter, then
    by the LLVM backend and the Triton backend (each graph compiled first; Triton's kernels under its CPU
    interpreter), so every compiled backend meets every op test's oracle."""
    import gradir.api.transforms

    if request.param == "triton" and triton_missing():
        pytest.skip(triton_missing())

    before = gradir.api.transforms.EAGER_BACKEND
    gradir.api.transforms.EAGER_BACKEND = request.param
    yield request.param
    gradir.api.transforms.EAGER_BACKEND = before


SPLIT_EVERYTHING = (("PARALLEL_LOOP_WORK", 0), ("PARALLEL_MATMUL_WORK", 0), ("LOOP_GRAIN", 1), ("GEMM_GRAIN", 1),
                    ("GEMM_PIECE", 1))


@pytest.fixture
def split_everything(monkeypatch):
    """Every kernel that may be split is split, at the finest grain (so small programs test the partitions,
    including vector bodies and scalar tails that differ from one thread's)."""
    from gradir.backends.llvm import kernels
    for name, value in SPLIT_EVERYTHING:
        monkeypatch.setattr(kernels, name, value)


def pytest_configure(config):
    """GRADIR_TEST_SPLIT_EVERYTHING=1: the whole run splits every kernel that may be split (the sweep to rerun after
    touching the LLVM kernels, with GRADIR_NUM_THREADS=2, over the LLVM-vs-reference tests: the transformers zoo,
    the op menus, edge shapes; ~6 min, so not in CI)."""
    if os.environ.get("GRADIR_TEST_SPLIT_EVERYTHING") == "1":
        from gradir.backends.llvm import kernels
        for name, value in SPLIT_EVERYTHING:
            setattr(kernels, name, value)
