"""Softmax rows longer than one chunk (kernels.ONLINE_CHUNK) take their max and their sum of exp(x - max) in one
online pass on the LLVM backend. Against PyTorch float64 autograd: rows whose max grows chunk by chunk, rows
masked with -inf at the start (a first chunk of -inf must add nothing), all -inf rows (NaN, as torch), large
offsets, and lengths that are and are not whole chunks."""

from __future__ import annotations

import numpy as np
import pytest

import gradir as gr
from gradir.backends.llvm.kernels import ONLINE_CHUNK

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(22)

# (name, gradir row function, torch row function): each maps rows [R, n] to a scalar
FUNCTIONS = [
    ("softmax", lambda x, w: gr.sum(gr.nn.softmax(x, axis=-1) * w), lambda x, w: (torch.softmax(x, -1) * w).sum()),
    ("log_softmax", lambda x, w: gr.sum(gr.nn.log_softmax(x, axis=-1) * w),
     lambda x, w: (torch.log_softmax(x, -1) * w).sum()),
    ("cross_entropy", lambda x, w: gr.nn.cross_entropy(x, _targets(x)),
     lambda x, w: torch.nn.functional.cross_entropy(x, torch.tensor(_targets(x)))),
]


def _targets(x) -> np.ndarray:
    """Classes past the masked start."""
    return np.array([x.shape[-1] - 1, x.shape[-1] - 1, ONLINE_CHUNK])


def _rows(kind: str, n: int) -> np.ndarray:
    x = RNG.standard_normal((3, n)) * 4
    if kind == "growing":  # every chunk's max above the last: the sum is rescaled at each chunk
        x = x + np.linspace(0, 60, n)
    elif kind == "masked_start":  # the whole first chunk -inf, as a padding mask writes them
            x[:, :ONLINE_CHUNK] = -np.inf
    elif kind == "offset":
        x = x - 1000.0
    return x


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [ONLINE_CHUNK + 1, 2 * ONLINE_CHUNK, 3 * ONLINE_CHUNK + 37])
@pytest.mark.parametrize("kind", ["random", "growing", "masked_start", "offset"])
@pytest.mark.parametrize("name, f, tf", FUNCTIONS, ids=[c[0] for c in FUNCTIONS])
def test_online_rows_match_torch(name, f, tf, kind, n, dtype):
    x, w = _rows(kind, n).astype(dtype), RNG.standard_normal((3, n)).astype(dtype)
    step = gr.compile(gr.value_and_grad(f), backend="llvm")
    value, grad = step(x, w)
    assert "online" in step.executable(x, w).module_ir  # the one-pass form ran
    tx = torch.tensor(x.astype(np.float64), requires_grad=True)
    want = tf(tx, torch.tensor(w.astype(np.float64)))
    want.backward()
    tol = 1e-11 if dtype == np.float64 else 2e-5
    scale = max(1.0, float(np.abs(tx.grad.numpy()).max()))
    np.testing.assert_allclose(value, want.item(), rtol=tol)
    np.testing.assert_allclose(grad, tx.grad.numpy(), rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("bad", ["all -inf", "one nan", "nan in the first chunk, the max later"])
def test_rows_with_nan_or_only_minus_inf_are_nan_as_in_torch(bad):
    x = RNG.standard_normal((2, 2 * ONLINE_CHUNK + 5))
    if bad == "all -inf":
        x[1] = -np.inf
    elif bad == "one nan":
        x[1, ONLINE_CHUNK + 3] = np.nan
    else:
        x[1, 5], x[1, -1] = np.nan, 50.0
    got = gr.compile(lambda x: gr.nn.softmax(x, axis=-1), backend="llvm")(x)
    want = torch.softmax(torch.tensor(x), -1).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)


def test_short_rows_keep_two_passes():
    x = RNG.standard_normal((4, ONLINE_CHUNK))
    step = gr.compile(lambda x: gr.nn.softmax(x, axis=-1), backend="llvm")
    np.testing.assert_allclose(step(x), torch.softmax(torch.tensor(x), -1).numpy(), rtol=1e-12)
    assert "online" not in step.executable(x).module_ir
