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
def names_path():
    path = DATA / "names.txt"
    if not path.exists():
        pytest.skip(f"dataset not found at {path} (it lives in the shared folder beside the repo)")
    return path


@pytest.fixture(scope="module", params=["numpy", "llvm"])
def eager_backend(request):
    """Run a module's tests twice: eager transformations executed by the NumPy interpreter, then by
    the LLVM backend (each graph compiled first), so the LLVM backend meets every op test's oracle."""
    import gradir.api

    before = gradir.api.EAGER_BACKEND
    gradir.api.EAGER_BACKEND = request.param
    yield request.param
    gradir.api.EAGER_BACKEND = before
