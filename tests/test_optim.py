"""gr.optim against torch.optim: every optimizer, schedule and the global-norm clip, step by step in float64.

Both sides train the same small model from the same start, each computing its own gradients (torch with
autograd, gradir with gr.grad), so a wrong formula anywhere (a bias correction, a lerp, a first-step
special case, a schedule off by one step) shows up as a parameter difference far above rounding."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import gradir as gr  # noqa: E402
from gradir.core.errors import GradirError, ShapeError  # noqa: E402
from gradir.util.pytree import tree_flatten  # noqa: E402

O, S = torch.optim, torch.optim.lr_scheduler
STEPS = 50
TOL = dict(rtol=1e-12, atol=1e-12)

_rng = np.random.default_rng(0)
P0 = {"W": _rng.normal(size=(4, 3)), "b": _rng.normal(size=3), "s": np.array(0.7)}
X, Y = _rng.normal(size=(5, 4)), _rng.normal(size=(5, 3))


def loss_gr(p, x, y):
    h = gr.tanh(x @ p["W"] + p["b"]) * p["s"]
    return gr.sum((h - y) ** 2)


def loss_torch(p, x, y):
    h = torch.tanh(x @ p["W"] + p["b"]) * p["s"]
    return ((h - y) ** 2).sum()


def train_both(opt, make_torch, make_sched=None, steps=STEPS, params=None, clip=None):
    """Run gradir's `opt` and torch's optimizer side by side; check the parameters after every step."""
    params = dict(P0) if params is None else params
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    topt = make_torch(list(tp.values()))
    sched = make_sched(topt) if make_sched else None
    xt, yt = torch.tensor(X, dtype=tp["W"].dtype), torch.tensor(Y, dtype=tp["W"].dtype)
    x, y = X.astype(params["W"].dtype), Y.astype(params["W"].dtype)
    state = opt.init(params)
    for i in range(steps):
        grads = gr.grad(loss_gr)(params, x, y)
        if clip is not None:
            grads = gr.optim.clip_by_global_norm(grads, clip)
        params, state = opt.update(grads, state, params)
        topt.zero_grad()
        loss_torch(tp, xt, yt).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(list(tp.values()), clip)
        topt.step()
        if sched:
            sched.step()
        for k in params:
            np.testing.assert_allclose(params[k], tp[k].detach().numpy(), **(TOL if params[k].dtype == np.float64 else
                                                                               dict(rtol=2e-5, atol=2e-6)),
                                       err_msg=f"{k} after step {i + 1}")
    assert int(state["step"] if "step" in state else state[list(state)[-1]]["step"]) == steps
    return params, state


OPTIMIZERS = {
    "sgd": (lambda lr: gr.optim.sgd(lr), lambda ps, lr: O.SGD(ps, lr)),
    "sgd_momentum": (lambda lr: gr.optim.sgd(lr, momentum=0.9), lambda ps, lr: O.SGD(ps, lr, momentum=0.9)),
    "sgd_nesterov": (lambda lr: gr.optim.sgd(lr, momentum=0.9, nesterov=True),
                     lambda ps, lr: O.SGD(ps, lr, momentum=0.9, nesterov=True)),
    "sgd_dampening_wd": (lambda lr: gr.optim.sgd(lr, momentum=0.8, dampening=0.3, weight_decay=0.05),
                         lambda ps, lr: O.SGD(ps, lr, momentum=0.8, dampening=0.3, weight_decay=0.05)),
    "sgd_nesterov_wd": (lambda lr: gr.optim.sgd(lr, momentum=0.5, nesterov=True, weight_decay=0.1),
                        lambda ps, lr: O.SGD(ps, lr, momentum=0.5, nesterov=True, weight_decay=0.1)),
    "rmsprop": (lambda lr: gr.optim.rmsprop(lr), lambda ps, lr: O.RMSprop(ps, lr)),
    "rmsprop_momentum": (lambda lr: gr.optim.rmsprop(lr, alpha=0.9, momentum=0.7, weight_decay=0.01),
                         lambda ps, lr: O.RMSprop(ps, lr, alpha=0.9, momentum=0.7, weight_decay=0.01)),
    "rmsprop_centered": (lambda lr: gr.optim.rmsprop(lr, centered=True, eps=1e-6),
                         lambda ps, lr: O.RMSprop(ps, lr, centered=True, eps=1e-6)),
    "rmsprop_centered_momentum": (lambda lr: gr.optim.rmsprop(lr, alpha=0.9, centered=True, momentum=0.5),
                                  lambda ps, lr: O.RMSprop(ps, lr, alpha=0.9, centered=True, momentum=0.5)),
    # alpha < 0.5: torch's lerp computes from the far end. Centered RMSprop divides by sqrt(s - a^2), which
    # magnifies rounding as the gradient's variance shrinks; a larger eps bounds that magnification
    "rmsprop_centered_small_alpha": (lambda lr: gr.optim.rmsprop(lr, alpha=0.3, eps=1e-4, centered=True, momentum=0.5),
                                     lambda ps, lr: O.RMSprop(ps, lr, alpha=0.3, eps=1e-4, centered=True, momentum=0.5)),
    "adam": (lambda lr: gr.optim.adam(lr), lambda ps, lr: O.Adam(ps, lr)),
    "adam_betas": (lambda lr: gr.optim.adam(lr, b1=0.4, b2=0.95, eps=1e-6),  # b1 < 0.5: lerp's far-end branch
                   lambda ps, lr: O.Adam(ps, lr, betas=(0.4, 0.95), eps=1e-6)),
    "adam_wd": (lambda lr: gr.optim.adam(lr, weight_decay=0.1), lambda ps, lr: O.Adam(ps, lr, weight_decay=0.1)),
    "adamw": (lambda lr: gr.optim.adamw(lr), lambda ps, lr: O.AdamW(ps, lr)),
    "adamw_wd": (lambda lr: gr.optim.adamw(lr, b1=0.8, weight_decay=0.3),
                 lambda ps, lr: O.AdamW(ps, lr, betas=(0.8, 0.999), weight_decay=0.3)),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_matches_torch(name):
    ours, theirs = OPTIMIZERS[name]
    train_both(ours(1e-2), lambda ps: theirs(ps, 1e-2))


# -- schedules --------------------------------------------------------------------------------------

SCHEDULES = {
    "step_lr": (lambda: gr.optim.step_lr(0.05, 7, gamma=0.5), lambda o: S.StepLR(o, 7, gamma=0.5)),
    "linear_lr": (lambda: gr.optim.linear_lr(0.05, 0.2, 0.9, 20), lambda o: S.LinearLR(o, 0.2, 0.9, 20)),
    "linear_warmup": (lambda: gr.optim.linear_warmup(0.05, 10, start_factor=0.1),
                      lambda o: S.LinearLR(o, 0.1, 1.0, 10)),
    "linear_warmup_from_0": (lambda: gr.optim.linear_warmup(0.05, 10), lambda o: S.LambdaLR(o, lambda e: min(e, 10) / 10)),
    "cosine": (lambda: gr.optim.cosine(0.05, STEPS), lambda o: S.CosineAnnealingLR(o, STEPS)),
    "cosine_min_lr": (lambda: gr.optim.cosine(0.05, STEPS, min_lr=0.01), lambda o: S.CosineAnnealingLR(o, STEPS, 0.01)),
    "cosine_warmup": (lambda: gr.optim.cosine(0.05, STEPS, min_lr=0.01, warmup_steps=8),
                      lambda o: S.SequentialLR(o, [S.LambdaLR(o, lambda e: e / 8), S.CosineAnnealingLR(o, STEPS - 8, 0.01)],
                                               milestones=[8])),
}


def torch_lrs(make_sched, steps):
    """The lr torch's scheduler gives update k, for k = 0 .. steps - 1 (scheduler.step() after each update)."""
    opt = O.SGD([torch.zeros(1, requires_grad=True)], 0.05)
    sched, lrs = make_sched(opt), []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return np.array(lrs)


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_schedule_values_match_torch(name):
    ours, theirs = SCHEDULES[name]
    schedule = ours()
    got = np.array([schedule(np.array(k, dtype=np.int64)) for k in range(STEPS)], dtype=np.float64)
    np.testing.assert_allclose(got, torch_lrs(theirs, STEPS), rtol=1e-13, atol=1e-15)


def test_cosine_stays_at_min_lr_after_total_steps():
    schedule = gr.optim.cosine(0.05, 10, min_lr=0.01)
    assert [float(schedule(np.array(k))) for k in (10, 11, 100)] == [0.01, 0.01, 0.01]


@pytest.mark.parametrize("opt_name,sched_name", [("adam", "cosine_warmup"), ("adamw_wd", "step_lr"),
                                                 ("sgd_nesterov", "linear_lr"), ("sgd_dampening_wd", "cosine_min_lr"),
                                                 ("rmsprop_momentum", "linear_warmup"), ("adam_wd", "linear_warmup_from_0"),
                                                 ("rmsprop", "cosine")])
def test_optimizer_with_schedule_matches_torch(opt_name, sched_name):
    ours, theirs = OPTIMIZERS[opt_name]
    our_sched, their_sched = SCHEDULES[sched_name]
    train_both(ours(our_sched()), lambda ps: theirs(ps, 0.05), their_sched)


# -- clipping ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_norm", [0.1, 1.0, 1e3])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_clip_by_global_norm_matches_torch(max_norm, dtype):
    rng = np.random.default_rng(1)
    grads = {"a": rng.normal(size=(3, 4)).astype(dtype), "b": [rng.normal(size=5).astype(dtype), np.array(2.0, dtype)]}
    leaves, tree = tree_flatten(grads)
    tgrads = [torch.tensor(g) for g in leaves]
    ps = [torch.zeros_like(g, requires_grad=True) for g in tgrads]
    for p, g in zip(ps, tgrads):
        p.grad = g.clone()
    total = torch.nn.utils.clip_grad_norm_(ps, max_norm)
    np.testing.assert_allclose(gr.optim.global_norm(grads), total.numpy(), rtol=1e-14 if dtype == np.float64 else 1e-6)
    clipped = tree_flatten(gr.optim.clip_by_global_norm(grads, max_norm))
    assert clipped[1] == tree
    for ours, p in zip(clipped[0], ps):
        assert ours.dtype == dtype
        np.testing.assert_allclose(ours, p.grad.numpy(), rtol=1e-14 if dtype == np.float64 else 1e-6)


def test_chain_clip_then_adam_matches_torch():
    opt = gr.optim.chain(gr.optim.clip(0.5), gr.optim.adam(1e-2))
    # the chain clips inside update; torch clips the grads before its step
    params = dict(P0)
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    topt = O.Adam(list(tp.values()), 1e-2)
    state = opt.init(params)
    assert list(state) == ["clip", "adam"] and state["clip"] == {}
    for _ in range(20):
        params, state = opt.update(gr.grad(loss_gr)(params, X, Y), state, params)
        topt.zero_grad()
        loss_torch(tp, torch.tensor(X), torch.tensor(Y)).backward()
        torch.nn.utils.clip_grad_norm_(list(tp.values()), 0.5)
        topt.step()
    for k in params:
        np.testing.assert_allclose(params[k], tp[k].detach().numpy(), **TOL)
    assert int(state["adam"]["step"]) == 20


def test_clip_before_sgd_matches_torch():
    ours, theirs = OPTIMIZERS["sgd_momentum"]
    train_both(ours(0.05), lambda ps: theirs(ps, 0.05), clip=0.3, steps=20)


# -- dtypes, state layout, errors -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["adam_wd", "adamw_wd", "rmsprop_centered_momentum", "sgd_nesterov_wd"])
def test_float32_params_stay_float32(name):
    ours, theirs = OPTIMIZERS[name]
    params = {k: v.astype(np.float32) for k, v in P0.items()}
    opt = ours(gr.optim.cosine(1e-2, 20))
    params, state = train_both(opt, lambda ps: theirs(ps, 1e-2), lambda o: S.CosineAnnealingLR(o, 20), steps=10,
                               params=params)
    for leaf in tree_flatten((params, {k: v for k, v in state.items() if k != "step"}))[0]:
        assert leaf.dtype == np.float32
    assert state["step"].dtype == np.int64


def test_state_layout_is_a_dict_of_arrays(tmp_path):
    opt = gr.optim.rmsprop(1e-2, centered=True, momentum=0.9)
    state = opt.init(P0)
    assert list(state) == ["step", "square_avg", "grad_avg", "momentum"]
    assert state["step"].shape == () and state["step"].dtype == np.int64 and int(state["step"]) == 0
    for key in ("square_avg", "grad_avg", "momentum"):
        assert tree_flatten(state[key])[1] == tree_flatten(P0)[1]
    params, state = opt.update(gr.grad(loss_gr)(P0, X, Y), state, P0)
    assert all(isinstance(x, np.ndarray) for x in tree_flatten((params, state))[0])
    assert list(gr.optim.adam().init(P0)) == ["step", "exp_avg", "exp_avg_sq"]
    assert list(gr.optim.sgd(0.1).init(P0)) == ["step"] and list(gr.optim.sgd(0.1, momentum=0.9).init(P0)) == ["step", "momentum"]
    # a state saved to .npz and loaded back continues the same run
    leaves, tree = tree_flatten(state)
    np.savez(tmp_path / "state.npz", *leaves)
    with np.load(tmp_path / "state.npz") as f:
        loaded = [f[f"arr_{i}"] for i in range(len(leaves))]
    from gradir.util.pytree import tree_unflatten

    g = gr.grad(loss_gr)(params, X, Y)
    a = opt.update(g, state, params)
    b = opt.update(g, tree_unflatten(tree, loaded), params)
    for x, y in zip(tree_flatten(a)[0], tree_flatten(b)[0]):
        np.testing.assert_array_equal(x, y)


def test_list_and_tuple_params():
    params = [np.ones(3), (np.full((2, 2), 2.0),)]
    grads = [np.full(3, 0.5), (np.ones((2, 2)),)]
    new, state = gr.optim.sgd(0.1, momentum=0.9).update(grads, gr.optim.sgd(0.1, momentum=0.9).init(params), params)
    assert isinstance(new, list) and isinstance(new[1], tuple)
    np.testing.assert_array_equal(new[0], np.full(3, 0.95))
    np.testing.assert_array_equal(state["momentum"][1][0], np.ones((2, 2)))


def test_errors():
    with pytest.raises(GradirError, match="nesterov"):
        gr.optim.sgd(0.1, nesterov=True)
    with pytest.raises(GradirError, match="betas"):
        gr.optim.adam(1e-3, b1=1.0)
    with pytest.raises(GradirError, match="lr"):
        gr.optim.adamw(-1.0)
    opt = gr.optim.adam(1e-3)
    with pytest.raises(ShapeError, match="structure"):
        opt.update({"W": P0["W"]}, opt.init(P0), P0)
    with pytest.raises(ShapeError, match="shape"):
        opt.update({**P0, "b": np.ones(4)}, opt.init(P0), P0)
    assert repr(gr.optim.adam(1e-3)) == "gr.optim.adam(lr=0.001, b1=0.9, b2=0.999, eps=1e-08, weight_decay=0.0)"
    assert repr(gr.optim.chain(gr.optim.clip(1.0), gr.optim.sgd(gr.optim.step_lr(0.1, 3)))) == (
        "gr.optim.chain(clip=gr.optim.clip(max_norm=1.0), sgd=gr.optim.sgd(lr=gr.optim.step_lr(0.1, 3, 0.1), momentum=0.0, "
        "dampening=0.0, weight_decay=0.0, nesterov=False))")


# -- inside gr.compile ------------------------------------------------------------------------------


def loss_poly(p, x, y):
    """loss_gr without the tanh: LLVM's tanh may differ from NumPy's in the last place, and 40 steps of momentum
    would add such differences up; here the compiled and eager runs compute the same arithmetic."""
    h = (x @ p["W"] + p["b"]) * p["s"]
    return gr.sum((h - y) ** 2) / 100


def training_step(opt, max_norm=None):
    def step(params, state, x, y):
        loss, grads = gr.value_and_grad(loss_poly)(params, x, y)
        if max_norm is not None:
            grads = gr.optim.clip_by_global_norm(grads, max_norm)
        params, state = opt.update(grads, state, params)
        return loss, params, state
    return step


COMPILED = {
    "adam_cosine_warmup_clip": (lambda: gr.optim.adam(gr.optim.cosine(1e-2, 40, 1e-3, warmup_steps=5), weight_decay=0.1),
                                1.0),
    "sgd_nesterov_step_lr": (lambda: gr.optim.sgd(gr.optim.step_lr(1e-2, 7, 0.5), momentum=0.9, nesterov=True), None),
    "rmsprop_momentum_linear": (lambda: gr.optim.rmsprop(gr.optim.linear_warmup(1e-2, 10), momentum=0.5,
                                                         weight_decay=0.01), None),
    "chain_clip_adamw": (lambda: gr.optim.chain(gr.optim.clip(0.5), gr.optim.adamw(1e-2)), None),
}


@pytest.mark.parametrize("backend", ["numpy", "llvm"])
@pytest.mark.parametrize("name", list(COMPILED))
def test_compiled_training_step_equals_eager(name, backend):
    make, max_norm = COMPILED[name]
    opt = make()
    step = training_step(opt, max_norm)
    compiled = gr.compile(step, backend=backend)
    eager_p, eager_s = dict(P0), opt.init(P0)
    comp_p, comp_s = dict(P0), opt.init(P0)
    first = None
    for _ in range(40):
        eager_loss, eager_p, eager_s = step(eager_p, eager_s, X, Y)
        comp_loss, comp_p, comp_s = compiled(comp_p, comp_s, X, Y)
        first = comp_loss if first is None else first
    assert comp_loss < 0.8 * first  # it trains
    assert compiled.cache_size == 1  # the state went in and came back with one signature: traced once
    ours, tree = tree_flatten((eager_loss, eager_p, eager_s))
    theirs, their_tree = tree_flatten((comp_loss, comp_p, comp_s))
    assert tree == their_tree
    for a, b in zip(ours, theirs):
        assert np.asarray(a).dtype == np.asarray(b).dtype
        if backend == "numpy":
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("name", ["rmsprop_centered_momentum", "adam_betas", "sgd_dampening_wd"])
def test_compiled_update_equals_eager(name):
    """The update alone, fed the same gradients: the compiled program computes what the eager one does (a whole
    training step of centered RMSprop divides by sqrt(s - a^2), which magnifies the ulps by which LLVM's tanh
    differs from NumPy's; here no such difference enters)."""
    opt = OPTIMIZERS[name][0](gr.optim.cosine(1e-2, 30, warmup_steps=3))
    update = gr.compile(opt.update, backend="llvm")
    eager_p, eager_s = dict(P0), opt.init(P0)
    comp_p, comp_s = dict(P0), opt.init(P0)
    for _ in range(30):
        grads = gr.grad(loss_gr)(eager_p, X, Y)
        eager_p, eager_s = opt.update(grads, eager_s, eager_p)
        comp_p, comp_s = update(grads, comp_s, comp_p)
    for a, b in zip(tree_flatten((eager_p, eager_s))[0], tree_flatten((comp_p, comp_s))[0]):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15)


def test_init_traces_too():
    opt = gr.optim.adam(1e-3)
    state = gr.compile(opt.init, backend="numpy")(P0)
    assert list(state) == ["step", "exp_avg", "exp_avg_sq"]
    assert int(state["step"]) == 0 and np.asarray(state["step"]).dtype == np.int64
    np.testing.assert_array_equal(state["exp_avg"]["W"], np.zeros((4, 3)))
