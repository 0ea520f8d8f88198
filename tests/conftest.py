"""Shared test setup: float64 torch as the oracle, verified graphs, and the shared data folder."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

os.environ.setdefault("GRADIR_CHECK", "1")  # compiled code asserts every shape/dtype the IR states

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
