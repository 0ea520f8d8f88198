"""gr.train.memory: the bytes of one training step by category, against the figures derived by hand
(parameters P values of the parameter dtype; gradients as many, of the dtype autodiff gives them; the
optimizer's per-parameter buffers: none for plain SGD, one for momentum, two for Adam)."""

from __future__ import annotations

import numpy as np
import pytest

import gradir as gr

SHAPES = {"w1": (6, 5), "b1": (5,), "w2": (5, 3), "b2": (3,)}
P = sum(int(np.prod(s)) for s in SHAPES.values())


def model(dtype):
    rng = np.random.default_rng(0)
    params = {k: rng.standard_normal(s).astype(dtype) for k, s in SHAPES.items()}
    x, y = rng.standard_normal((4, 6)).astype(dtype), rng.integers(0, 3, 4)

    def loss(p, x, y):
        return gr.nn.cross_entropy(gr.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"], y)
    return loss, params, x, y


@pytest.mark.parametrize("make, buffers", [
    (lambda: gr.optim.sgd(0.1), 0),
    (lambda: gr.optim.sgd(0.1, momentum=0.9), 1),
    (lambda: gr.optim.rmsprop(0.01), 1),
    (lambda: gr.optim.rmsprop(0.01, momentum=0.9, centered=True), 3),
    (lambda: gr.optim.adam(1e-3), 2),
    (lambda: gr.optim.chain(gr.optim.clip(1.0), gr.optim.adamw(1e-3)), 2),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bytes_per_parameter_are_parameters_gradients_and_the_optimizers_buffers(make, buffers, dtype):
    loss, params, x, y = model(dtype)
    report = gr.train.memory(loss, params, make(), x, y)
    size = np.dtype(dtype).itemsize
    assert report.parameters == P
    assert report.categories["parameters"] == (len(SHAPES), P * size)
    assert report.categories["gradients"] == (len(SHAPES), P * size)
    assert report.categories["optimizer state"] == (buffers * len(SHAPES), buffers * P * size)
    assert report.bytes_per_parameter == (2 + buffers) * size  # Adam in float32: 16
    assert report.working_peak > 0
    d = report.to_dict()
    assert d["bytes_per_parameter"] == report.bytes_per_parameter and "bytes per parameter" in report.text()


def test_the_step_counter_is_listed_apart_from_the_per_parameter_state():
    loss, params, x, y = model(np.float32)
    report = gr.train.memory(loss, params, gr.optim.adam(1e-3), x, y)
    n, nbytes = report.categories["optimizer scalars"]
    assert n == 1 and nbytes == np.dtype(gr.optim.adam(1e-3).init(params)["step"].dtype).itemsize


def test_a_bare_array_parameter_keeps_the_step_counter_apart():
    # one parameter array (no dict): the 0-d step count has its pytree structure too, not its shape and dtype
    w, x = np.ones((4, 3), np.float32), np.ones((2, 4), np.float32)
    report = gr.train.memory(lambda w, x: gr.sum((x @ w) ** 2), w, gr.optim.adam(1e-3), x)
    assert report.categories["optimizer state"] == (2, 2 * 48)  # Adam's two moments, 12 float32 each
    assert report.categories["optimizer scalars"] == (1, 8)     # the int64 step count
    assert report.bytes_per_parameter == 16.0
