"""gr.amp: mixed precision in compiled training steps, against torch.amp.GradScaler driving the same float16
computation from float32 master weights, and against the float16 arithmetic of TEACHING.md G done by hand."""

from __future__ import annotations

import numpy as np
import pytest

import gradir as gr
from gradir.core.errors import GradirError

torch = pytest.importorskip("torch")

BACKENDS = ("numpy", "llvm")


def two_weights(w):
    """G's gradients {2.0, 1e-8}: 2.0 overflows float16 once scaled by 32768 or more; 1e-8 = 1e-4 * 1e-4
    underflows float16 (smallest subnormal 6e-8) unless scaled."""
    return w[0] * 2.0 + (w[1] * 1e-4) * 1e-4


def run(loss, params, opt, steps, *batch, backend="numpy"):
    """`steps` training steps; the history holds (loss scale, params) before each. backend "eager": not compiled."""
    step = gr.train.train_step(loss, opt, backend=backend, compile=backend != "eager")
    state = opt.init(params)
    history = []
    for _ in range(steps):
        history.append((float(state.get("loss_scale", 1.0)), params))
        _, params, state = step(params, state, *batch)
    return params, state, history


def torch_scaled(loss, params, steps, torch_opt, *batch, **scaler):
    """The reference: float32 leaves, a float16 copy per step, loss in float32 scaled by GradScaler."""
    ws = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    opt = torch_opt(list(ws.values()))
    sc = torch.amp.GradScaler("cpu", **scaler)
    scales, grads = [], []
    for _ in range(steps):
        opt.zero_grad()
        half = {k: w.half() for k, w in ws.items()}
        value = loss(half, *[torch.tensor(b).half() for b in batch]).float()
        sc.scale(value).backward()
        scales.append(sc.get_scale())
        grads.append({k: w.grad.clone().numpy() / sc.get_scale() for k, w in ws.items()})
        sc.step(opt)
        sc.update()
    return {k: w.detach().numpy() for k, w in ws.items()}, scales, grads


@pytest.mark.parametrize("backend", (*BACKENDS, "eager"))
@pytest.mark.filterwarnings("error")  # a skipped step's inf arithmetic stays quiet, also eagerly
def test_dynamic_scaler_skips_and_recovers_as_torch(backend):
    # 65536 and 32768 overflow on 2.0 (2 * 32768 = 65536 > 65504, float16's max): two skips, then 16384 holds;
    # after growth_interval=3 good steps it doubles to 32768, overflows, halves again: the same as GradScaler
    params = {"w": np.array([1.0, 1.0], np.float32)}
    opt = gr.amp.mixed_precision(gr.optim.sgd(0.1), "float16", growth_interval=3)
    final, state, history = run(lambda p: two_weights(p["w"]), params, opt, 10, backend=backend)
    ref, ref_scales, _ = torch_scaled(lambda p: two_weights(p["w"]), params, 10,
                                      lambda ps: torch.optim.SGD(ps, lr=0.1), init_scale=65536.0, growth_interval=3)
    scales = [s for s, _ in history]
    assert scales == ref_scales == [65536, 32768, 16384, 16384, 16384, 32768, 16384, 16384, 16384, 32768]
    np.testing.assert_array_equal(final["w"], ref["w"])
    # a skipped step leaves the weights and the wrapped optimizer's step count alone
    skipped = [k for k, s in enumerate(scales) if s > 16384]
    after = [p for _, p in history[1:]] + [final]
    for k in range(10):
        moved = not np.array_equal(after[k]["w"], history[k][1]["w"])
        assert moved == (k not in skipped)
    assert int(state["skipped"]) == len(skipped) == 4
    assert int(state["sgd"]["step"]) == 10 - int(state["skipped"])
    assert float(state["loss_scale"]) == 16384 and int(state["good_steps"]) == 0


def test_scaling_recovers_a_gradient_float16_loses():
    # unscaled, 1e-4 * 1e-4 rounds to 0 in float16; at 16384 it survives and unscales to GradScaler's figure
    params = {"w": np.array([1.0, 1.0], np.float32)}
    loss = lambda p: two_weights(p["w"])  # noqa: E731
    _, _, ref_grads = torch_scaled(loss, params, 3, lambda ps: torch.optim.SGD(ps, lr=0.1), init_scale=65536.0)
    expected = np.float32(np.float16(np.float16(16384 * np.float16(1e-4)) * np.float16(1e-4))) / 16384  # by hand
    assert ref_grads[2]["w"][1] == pytest.approx(expected, rel=1e-6) and expected == pytest.approx(1e-8, rel=1e-3)
    for scale, want in ((None, 0.0), (16384.0, expected)):
        opt = gr.amp.mixed_precision(gr.optim.sgd(0.1), "float16", loss_scale=scale)
        state = opt.init(params)
        _, grads = opt.gradients(loss)(params, state)
        assert grads["w"][1] / state["loss_scale"] == want


@pytest.mark.parametrize("backend", BACKENDS)
def test_master_weights_keep_small_updates(backend):
    # TEACHING.md G: 1.0 + 0.0003 two thousand times. A float16 weight never moves (the gap above 1 is 2^-10,
    # and 0.0003 is under half of it); the float32 master copy of mixed precision reaches ~1.6
    def pull(p):
        return gr.sum(p["w"] * -0.0003)

    pure = run(pull, {"w": np.ones(1, np.float16)}, gr.optim.sgd(1.0), 2000, backend=backend)
    assert pure[0]["w"][0] == 1.0
    mixed, state, _ = run(pull, {"w": np.ones(1, np.float32)},
                          gr.amp.mixed_precision(gr.optim.sgd(1.0), "float16", loss_scale=1024.0), 2000, backend=backend)
    # by hand: the float16 gradient 1024 * fp16(-0.0003), rounded to float16, unscaled in float32
    per_step = np.float32(np.float16(np.float16(1024) * np.float16(-0.0003))) / np.float32(1024)
    expected = np.float32(1.0)
    for _ in range(2000):
        expected = np.float32(expected - per_step)
    assert mixed["w"][0] == expected and abs(expected - 1.6) < 2e-4 and int(state["skipped"]) == 0


def mlp_loss(p, x, y):
    h = gr.tanh(x @ p["W1"] + p["b1"])
    return gr.mean((h @ p["W2"] - y) ** 2)


def torch_mlp_loss(p, x, y):
    h = torch.tanh(x @ p["W1"] + p["b1"])
    return ((h @ p["W2"] - y) ** 2).mean()


@pytest.fixture(scope="module")
def mlp():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    y = rng.normal(size=(64, 1)).astype(np.float32)
    params = {"W1": (rng.normal(size=(8, 16)) * 0.3).astype(np.float32), "b1": np.zeros(16, np.float32),
              "W2": (rng.normal(size=(16, 1)) * 0.3).astype(np.float32)}
    return params, x, y


@pytest.mark.parametrize("backend", BACKENDS)
def test_float16_adam_follows_torch_and_reaches_the_float32_result(mlp, backend):
    params, x, y = mlp
    opt = gr.amp.mixed_precision(gr.optim.adam(1e-2), "float16", growth_interval=50)
    mixed, state, history = run(mlp_loss, params, opt, 150, x, y, backend=backend)
    ref, ref_scales, _ = torch_scaled(torch_mlp_loss, params, 150, lambda ps: torch.optim.Adam(ps, lr=1e-2), x, y,
                                      init_scale=65536.0, growth_interval=50)
    assert [s for s, _ in history] == ref_scales  # the same overflows, so the same skipped steps
    assert int(state["skipped"]) >= 1
    # float16 rounding differs between the two systems' matmuls, and Adam's normalised steps amplify it: after
    # 20 steps the two runs are within 2e-3, while float16 and float32 training differ by about 1e-2 there
    early, _, _ = torch_scaled(torch_mlp_loss, params, 20, lambda ps: torch.optim.Adam(ps, lr=1e-2), x, y)
    for k in params:
        np.testing.assert_allclose(history[20][1][k], early[k], atol=2e-3)
    # against plain float32 training: after 150 steps the master weights are within 5e-2 of the float32 run
    # and the loss within 15% (0.0047 in float32 here)
    full, _, _ = run(mlp_loss, params, gr.optim.adam(1e-2), 150, x, y, backend=backend)
    f32, f16 = (float(mlp_loss(p, x, y)) for p in (full, mixed))
    assert abs(f16 - f32) <= 0.15 * f32
    for k in params:
        np.testing.assert_allclose(mixed[k], full[k], atol=5e-2)
        np.testing.assert_allclose(mixed[k], ref[k], atol=1e-2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bfloat16_without_scaling(mlp, backend):
    params, x, y = mlp
    mixed, state, _ = run(mlp_loss, params, gr.amp.mixed_precision(gr.optim.adam(1e-2), "bfloat16", None), 150, x, y,
                          backend=backend)
    full, _, _ = run(mlp_loss, params, gr.optim.adam(1e-2), 150, x, y, backend=backend)
    assert float(state["loss_scale"]) == 1.0 and int(state["skipped"]) == 0
    assert all(mixed[k].dtype == np.float32 for k in params)  # the master weights stay float32
    f32, bf16 = (float(mlp_loss(p, x, y)) for p in (full, mixed))
    assert abs(bf16 - f32) <= 0.25 * f32  # bfloat16 keeps 8 bits of mantissa: a looser tolerance than float16


def test_memory_report_counts_the_float16_copies(mlp):
    # float32 Adam: 4 (weights) + 4 (gradients) + 8 (two moments) = 16 bytes per parameter; mixed precision
    # adds the float16 copy of each weight the forward computes with: 18
    params, x, y = mlp
    n = sum(v.size for v in params.values())
    plain = gr.train.memory(mlp_loss, params, gr.optim.adam(1e-2), x, y)
    mixed = gr.train.memory(mlp_loss, params, gr.amp.mixed_precision(gr.optim.adam(1e-2)), x, y)
    assert plain.bytes_per_parameter == 16 and "low-precision parameter copies" not in plain.categories
    assert mixed.bytes_per_parameter == 18
    assert mixed.categories["low-precision parameter copies"] == (3, 2 * n)
    assert mixed.categories["gradients"] == (3, 4 * n)  # the gradients of the float32 masters are float32
    assert mixed.categories["optimizer scalars"] == (4, 4 + 3 * 8)  # loss scale (f32), good/skipped/step (i64)


def test_checkpoint_resume_is_bitwise(mlp, tmp_path):
    params, x, y = mlp
    opt = gr.amp.mixed_precision(gr.optim.adam(1e-2), "float16", growth_interval=5)
    straight = gr.train(mlp_loss, params, opt, lambda k: (x, y), steps=20, progress=False)
    path = tmp_path / "amp.npz"
    gr.train(mlp_loss, params, opt, lambda k: (x, y), steps=12, checkpoint=path, progress=False)
    resumed = gr.train(mlp_loss, params, opt, lambda k: (x, y), steps=20, checkpoint=path, resume=True,
                       progress=False)
    for k in params:
        np.testing.assert_array_equal(resumed.params[k], straight.params[k])
    assert float(resumed.state["loss_scale"]) == float(straight.state["loss_scale"])
    assert resumed.losses == straight.losses


def test_errors_name_the_op():
    with pytest.raises(GradirError, match="amp.mixed_precision.*float16 or bfloat16"):
        gr.amp.mixed_precision(gr.optim.sgd(0.1), "float32")
    with pytest.raises(GradirError, match="loss_scale"):
        gr.amp.mixed_precision(gr.optim.sgd(0.1), loss_scale=-1.0)
    with pytest.raises(GradirError, match="outside the chain"):
        gr.optim.chain(gr.optim.clip(1.0), gr.amp.mixed_precision(gr.optim.sgd(0.1)))


def test_isfinite_matches_numpy():
    x = np.array([0.0, -1.5, np.inf, -np.inf, np.nan, 65504], np.float16)
    for dtype in (np.float16, np.float32, np.float64):
        np.testing.assert_array_equal(gr.isfinite(x.astype(dtype)), np.isfinite(x.astype(dtype)))
        f = gr.compile(gr.isfinite, backend="llvm")
        np.testing.assert_array_equal(f(x.astype(dtype)), np.isfinite(x.astype(dtype)))
    np.testing.assert_array_equal(gr.isfinite(np.arange(3)), [True, True, True])
    assert bool(gr.amp.all_finite({"a": np.ones(3), "b": np.array([1.0, np.nan])})) is False
    assert bool(gr.amp.all_finite({"a": np.ones(3), "b": np.array([1.0, 1e300])})) is True
    assert bool(gr.amp.all_finite({"a": np.ones((0, 3)), "b": np.array([np.inf])})) is False  # empty leaves skipped
    assert bool(gr.amp.all_finite({"a": np.ones((0, 3))})) is True
