"""gr.train: the same numbers as a hand-written loop, exact resuming, atomic checkpoints, the loss plot."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest

import gradir as gr
from gradir.core.errors import GradirError
from gradir.training.loop import CheckpointError, load_checkpoint, save_checkpoint
from gradir.util.pytree import tree_flatten


class StandInSGD:
    """Plain SGD with gradir.training.optim's shape (init / pure update), so these tests do not depend on gr.optim."""

    def __init__(self, lr: float):
        self.lr = lr

    def init(self, params):
        return {"step": np.zeros((), np.int64)}

    def update(self, grads, state, params):
        return {k: params[k] - self.lr * grads[k] for k in params}, {"step": state["step"] + 1}


def _optimizers():
    return [pytest.param(lambda: StandInSGD(0.1), id="stand-in-sgd"),  # any object with init/update will do
            pytest.param(lambda: gr.optim.adam(lr=0.02), id="adam"),
            pytest.param(lambda: gr.optim.sgd(lr=0.05, momentum=0.9), id="sgd-momentum"),
            pytest.param(lambda: gr.optim.adamw(lr=gr.optim.cosine(0.02, total_steps=20, warmup_steps=3)),
                         id="adamw-cosine")]  # a schedule reads the state's step count: resumed exactly too


OPTIMIZERS = _optimizers()


def mlp_loss(p, x, y):
    h = gr.tanh(x @ p["W1"] + p["b1"])
    return gr.mean((h @ p["W2"] - y) ** 2)


def make_problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    params = {"W1": rng.normal(size=(3, 8)) * 0.5, "b1": np.zeros(8), "W2": rng.normal(size=(8, 1)) * 0.5}
    xs = rng.normal(size=(64, 3))
    ys = np.sin(xs @ np.array([[1.0], [-2.0], [0.5]]))

    def batch(k):  # a function of the step: batch k is the same after a resume
        i = (k * 16) % 64
        return xs[i:i + 16], ys[i:i + 16]

    return params, batch, xs, ys


def assert_trees_equal(a, b):
    """Same structure, leaf kinds, dtypes and bits."""
    la, ta = tree_flatten(a)
    lb, tb = tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        assert type(x) is type(y)
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(x, y, strict=True)  # bitwise for floats that are not NaN


def full_loss(p, xs, ys):  # an independent figure: NumPy, not gradir
    return float(np.mean((np.tanh(xs @ p["W1"] + p["b1"]) @ p["W2"] - ys) ** 2))


@pytest.mark.parametrize("make_opt", OPTIMIZERS)
def test_train_equals_a_hand_written_loop(make_opt):
    params, batch, xs, ys = make_problem()
    opt = make_opt()
    result = gr.train(mlp_loss, params, opt, batch, steps=30, eval_fn=lambda p: full_loss(p, xs, ys),
                      eval_every=10, progress=False, backend="numpy")

    def step(p, s, x, y):
        value, grads = gr.value_and_grad(mlp_loss)(p, x, y)
        p, s = opt.update(grads, s, p)
        return value, p, s

    step = gr.compile(step, backend="numpy")
    p, s, losses = params, opt.init(params), []
    for k in range(30):
        value, p, s = step(p, s, *batch(k))
        losses.append((k, float(value)))
    assert_trees_equal(result.params, p)
    assert_trees_equal(result.state, s)
    assert result.losses == losses and result.step == 30
    assert [k for k, _ in result.evals] == [10, 20, 30]
    assert result.evals[-1][1] == full_loss(p, xs, ys)
    assert result.step_fn.cache_size == 1  # one compiled program, compiled once


def test_llvm_backend_and_eager_agree_with_their_own_loops():
    params, batch, _, _ = make_problem()
    opt = StandInSGD(0.1)
    compiled = gr.train(mlp_loss, params, opt, batch, steps=5, progress=False)  # backend="llvm", the default
    eager = gr.train(mlp_loss, params, opt, batch, steps=5, progress=False, compile=False)
    p, s = params, opt.init(params)
    for k in range(5):
        value, grads = gr.value_and_grad(mlp_loss)(p, *batch(k))
        p, s = opt.update(grads, s, p)
    assert_trees_equal(eager.params, p)
    for name in p:  # compiled code may fuse and round differently: the same numbers to rounding
        np.testing.assert_allclose(compiled.params[name], p[name], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("make_opt", OPTIMIZERS)
def test_resume_is_bitwise(tmp_path, make_opt):
    params, batch, xs, ys = make_problem(1)
    kw = dict(eval_fn=lambda p: {"full": full_loss(p, xs, ys)}, eval_every=4, checkpoint_every=5, progress=False,
              backend="numpy")
    straight = gr.train(mlp_loss, params, make_opt(), batch, steps=20, checkpoint=tmp_path / "a.npz", **kw)
    first = gr.train(mlp_loss, params, make_opt(), batch, steps=7, checkpoint=tmp_path / "b.npz", **kw)
    assert first.step == 7 and load_checkpoint(tmp_path / "b.npz").step == 7
    resumed = gr.train(mlp_loss, params, make_opt(), batch, steps=20, checkpoint=tmp_path / "b.npz", **kw)
    assert resumed.resumed_from == 7 and resumed.step == 20
    assert_trees_equal(resumed.params, straight.params)
    assert_trees_equal(resumed.state, straight.state)
    assert resumed.losses == straight.losses and [k for k, _ in resumed.losses] == list(range(20))
    assert resumed.evals == straight.evals
    assert_trees_equal(load_checkpoint(tmp_path / "b.npz").params, straight.params)


def test_resume_with_an_iterable_skips_the_used_batches(tmp_path):
    params, batch, _, _ = make_problem(2)
    data = [batch(k) for k in range(12)]
    straight = gr.train(mlp_loss, params, StandInSGD(0.1), data, progress=False, backend="numpy")
    assert straight.step == 12  # steps=None: until the iterable runs out
    gr.train(mlp_loss, params, StandInSGD(0.1), data, steps=5, checkpoint=tmp_path / "c.npz", progress=False,
             backend="numpy")
    resumed = gr.train(mlp_loss, params, StandInSGD(0.1), iter(data), checkpoint=tmp_path / "c.npz", progress=False,
                       backend="numpy")
    assert_trees_equal(resumed.params, straight.params)
    assert resumed.losses == straight.losses


def test_ctrl_c_keeps_the_finished_steps(tmp_path):
    params, batch, _, _ = make_problem(3)
    straight = gr.train(mlp_loss, params, StandInSGD(0.1), batch, steps=10, progress=False, backend="numpy")

    def interrupted(k):
        if k == 6:
            raise KeyboardInterrupt
        return batch(k)

    ck = tmp_path / "run.npz"
    partial = gr.train(mlp_loss, params, StandInSGD(0.1), interrupted, steps=10, checkpoint=ck, progress=False,
                       backend="numpy", plot=tmp_path / "run.svg", on_interrupt="return")  # the partial run
    assert partial.interrupted and partial.step == 6 and len(partial.losses) == 6
    assert partial.note == f"interrupted at step 6; checkpoint {ck} holds it (resume=True continues from there)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.npz", "run.svg"]  # no temporary files
    assert load_checkpoint(ck).step == 6
    resumed = gr.train(mlp_loss, params, StandInSGD(0.1), batch, steps=10, checkpoint=ck, progress=False,
                       backend="numpy")
    assert_trees_equal(resumed.params, straight.params)
    assert resumed.losses == straight.losses


def test_checkpoint_round_trips_structure_and_dtypes(tmp_path):
    params = {"layers": [{"W": np.ones((2, 3), np.float32), "b": np.zeros(3, gr.bfloat16)}], "scale": np.float64(2.0),
              "n": 3, "pair": (np.arange(2), None)}
    state = {"step": np.int64(4), "flag": np.array(True)}
    path = save_checkpoint(tmp_path / "x.npz", params, state, 4, losses=[(0, 1.5), (1, 0.25)], evals=[(2, {"a": 1.0})])
    assert [p.name for p in tmp_path.iterdir()] == ["x.npz"]
    ck = load_checkpoint(path)
    assert_trees_equal(ck.params, params)
    assert_trees_equal(ck.state, state)
    assert (ck.step, ck.losses, ck.evals) == (4, [(0, 1.5), (1, 0.25)], [(2, {"a": 1.0})])
    with np.load(path, allow_pickle=False) as z:  # stable, readable key paths
        assert "params['layers'][0]['W']" in z.files and "state['step']" in z.files


@pytest.mark.parametrize("damage", ["garbage", "truncated", "foreign", "empty"])
def test_a_damaged_checkpoint_is_a_clear_error_naming_the_file(tmp_path, damage):
    params, batch, _, _ = make_problem()
    path = tmp_path / "bad.npz"
    gr.train(mlp_loss, params, StandInSGD(0.1), batch, steps=2, checkpoint=path, progress=False, backend="numpy")
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"not a checkpoint at all")
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "foreign":
        np.savez(path, W=np.ones(3))
    else:
        path.write_bytes(b"")
    with pytest.raises(CheckpointError, match="bad.npz") as e:
        gr.train(mlp_loss, params, StandInSGD(0.1), batch, steps=4, checkpoint=path, progress=False, backend="numpy")
    assert isinstance(e.value, GradirError) and e.value.__cause__ is None
    assert "resume=False" in str(e.value)
    again = gr.train(mlp_loss, params, StandInSGD(0.1), batch, steps=2, checkpoint=path, resume=False, progress=False,
                     backend="numpy")  # starting over replaces it
    assert again.resumed_from is None and load_checkpoint(path).step == 2


def test_a_mismatched_checkpoint_names_the_file_and_the_leaf(tmp_path):
    params, batch, _, _ = make_problem()
    path = tmp_path / "m.npz"
    gr.train(mlp_loss, params, StandInSGD(0.1), batch, steps=2, checkpoint=path, progress=False, backend="numpy")
    wider = {**params, "W1": np.zeros((3, 9)), "b1": np.zeros(9), "W2": np.zeros((9, 1))}
    with pytest.raises(CheckpointError, match=r"m\.npz.*params\['W1'\]"):
        gr.train(mlp_loss, wider, StandInSGD(0.1), batch, steps=4, checkpoint=path, progress=False, backend="numpy")
    with pytest.raises(CheckpointError, match=r"m\.npz.*step 2, beyond steps=1"):
        gr.train(mlp_loss, params, StandInSGD(0.1), batch, steps=1, checkpoint=path, progress=False, backend="numpy")


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_loss_plot_is_a_valid_image(tmp_path, suffix):
    params, batch, xs, ys = make_problem()
    out = tmp_path / f"curve{suffix}"
    result = gr.train(mlp_loss, params, StandInSGD(0.1), batch, steps=12, eval_fn=lambda p: full_loss(p, xs, ys),
                      eval_every=4, plot=out, progress=False, backend="numpy")
    assert result.plot == out and [p.name for p in tmp_path.iterdir()] == [out.name]
    data = out.read_bytes()
    if suffix == ".png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
    else:
        root = ET.fromstring(data)
        assert root.tag.endswith("svg")
        assert "training loss" in data.decode()


def test_bad_plot_extension_fails_before_training(tmp_path):
    calls = []
    params, batch, _, _ = make_problem()
    with pytest.raises(GradirError, match=r"curve\.jpg"):
        gr.train(mlp_loss, params, StandInSGD(0.1), lambda k: calls.append(k) or batch(k), steps=3,
                 plot=tmp_path / "curve.jpg", progress=False, backend="numpy")
    assert calls == []


@pytest.mark.parametrize("make_opt", OPTIMIZERS[:3])  # not the 20-step cosine schedule: its lr is 0 after step 20
def test_the_loss_falls_on_least_squares(make_opt):
    rng = np.random.default_rng(4)
    A = rng.normal(size=(32, 4))
    b = A @ np.array([1.0, -1.0, 2.0, 0.5]) + 0.01 * rng.normal(size=32)

    def loss(p, A, b):
        r = A @ p["w"] - b
        return gr.sum(r * r) / 32.0

    params = {"w": np.zeros(4)}
    result = gr.train(loss, params, make_opt(), lambda k: (A, b), steps=150, progress=False, backend="numpy")
    initial = float(np.mean(b ** 2))  # NumPy at w = 0, not gr.train's own first loss
    final = float(np.mean((A @ result.params["w"] - b) ** 2))
    assert result.losses[0][1] == pytest.approx(initial, rel=1e-12)
    assert final < 0.01 * initial


def test_progress_false_prints_nothing_and_true_reports(capfd):
    params, batch, xs, ys = make_problem()
    gr.train(mlp_loss, params, StandInSGD(0.1), batch, steps=4, eval_fn=lambda p: full_loss(p, xs, ys), eval_every=2,
             progress=False, backend="numpy")
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    gr.train(mlp_loss, params, StandInSGD(0.1), batch, steps=4, eval_fn=lambda p: full_loss(p, xs, ys), eval_every=2,
             progress=True, backend="numpy")
    out, err = capfd.readouterr()
    assert out == ""
    assert "step 2: eval" in err and "trained 4 steps" in err


def test_a_failed_save_leaves_no_temporary_file_and_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    params, batch, _, _ = make_problem()
    path = tmp_path / "keep.npz"
    gr.train(mlp_loss, params, StandInSGD(0.1), batch, steps=2, checkpoint=path, progress=False, backend="numpy")
    before = path.read_bytes()

    def failing_savez(f, **arrays):
        f.write(b"PK\x03\x04 half an archive")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", failing_savez)  # by object: "gradir.training.loop" on the package is the function
    with pytest.raises(OSError, match="No space left"):
        gr.train(mlp_loss, params, StandInSGD(0.1), batch, steps=4, checkpoint=path, progress=False, backend="numpy")
    assert [p.name for p in tmp_path.iterdir()] == ["keep.npz"] and path.read_bytes() == before
