"""Teaching examples E (eager semantics) and F (accumulation, data parallelism, XOR with the course's initialisation): the figures
TEACHING.md gives, hand-derived values, and float64 torch / NumPy closed forms for our own setups."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from examples_util import load, run


@pytest.fixture(scope="module")
def e_out(tmp_path_factory):
    return tmp_path_factory.mktemp("e_eager_out")


@pytest.fixture(scope="module")
def e(e_out):
    return run(load("e_what_backward_keeps_eager"), True, e_out)


@pytest.fixture(scope="module")
def f_out(tmp_path_factory):
    return tmp_path_factory.mktemp("f_training_out")


@pytest.fixture(scope="module")
def f(f_out):
    module = load("f_training")
    return (module, *run(module, True, f_out))


# -- E ------------------------------------------------------------------------------------------------


def test_e_what_each_node_keeps(e):
    t = e[0]["tape"]
    keeps = {row["op"]: row["keeps"] for row in t["keeps"]}
    assert keeps == {"multiply": "multiply keeps the other operand", "add": "add keeps nothing",
                     "tanh": "tanh keeps its output", "sum": "sum keeps nothing"}
    assert t["saved_per_node"] == {"SumBackward": 0, "TanhBackward": 1, "AddBackward": 0, "MultiplyBackward": 2}
    # backward of sum(tanh(x*x + x)) reads x (for the multiply) and tanh's output, nothing else
    assert (t["residuals"], t["from_tape"], t["recomputed"]) == (2, 2, 0)
    xt = torch.tensor([2.0, 3.0], dtype=torch.float64, requires_grad=True)
    torch.tanh(xt * xt + xt).sum().backward()
    np.testing.assert_allclose(t["grad"], xt.grad.numpy(), rtol=1e-13, atol=1e-15)  # 1 - tanh^2 cancels


def test_e_version_check(e):
    v = e[0]["version"]
    assert "saved at version 0, now version 1" in v["error"] and v["error"].startswith("multiply:")
    assert v["version_after"] == 1
    assert v["add_case_grad"] == [1.0, 1.0]  # d/dx sum(x + 2)
    # the versions the error names, printed beside the course's
    assert v["version_saved"] == 0
    assert "x's version: 0 when multiply saved it -> 1 at backward  (the course: 0 -> 1)" in e[1]


def test_e_graph_lifetime(e):
    g = e[0]["lifetime"]
    assert g["first"] == [4.0, 6.0]  # 2x at [2, 3]
    assert "second time" in g["freed_error"] and "retain_graph=True" in g["freed_error"]
    assert g["retained_first"] == g["retained_again"] == [4.0, 6.0]
    assert g["accumulated"] == [8.0, 12.0]
    assert g["after_zero"] == g["after_none"] == [4.0, 6.0] and g["none_after_reset"]
    assert "x.grad = [8.0, 12.0] (2x the one before)  (the course: 2x)" in e[1]


def test_e_higher_order_and_leaves(e):
    h, lf = e[0]["higher_order"], e[0]["leaf"]
    assert (h["first"], h["second"], h["first_has_grad_fn"]) == (12.0, 12.0, True)  # 3x^2, 6x at 2
    assert lf["x_is_leaf"] and not lf["y_is_leaf"] and lf["y_grad_fn"] == "<MultiplyBackward>"
    assert lf["x_grad"] == [4.0, 6.0] and lf["y_grad"] == [1.0, 1.0] and lf["not_retained_grad"] is None
    out = e[1]
    assert "saved at version 0, now version 1" in out and "second derivative 12" in out and "[8.0, 12.0]" in out
    assert "first derivative 12 (has a grad_fn: True), second derivative 12  (the course: 12, 12)" in out
    assert ("x.grad = [4.0, 6.0], retained y.grad = [1.0, 1.0], without retain_grad(): y.grad = None\n"
            "     (the course: x.grad = [4, 6], retained y.grad = [1, 1])") in out


def test_e_out_writes_the_tape_diagrams(e, e_out):
    import shutil

    files = e[0]["files"]
    for name in ("tape", "tape_backward"):
        dot = e_out / f"{name}.dot"
        assert files[f"{name}.dot"] == str(dot) and dot.read_text().startswith("digraph") and str(dot) in e[1]
    assert "tanh" in (e_out / "tape.dot").read_text()  # the tape's forward graph
    assert not list(e_out.glob("*.tmp")) and not list(e_out.glob(".*"))  # atomic writes
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot program is not installed: only the .dot sources are written")
    assert "<svg" in (e_out / "tape_backward.svg").read_text()


# -- F ------------------------------------------------------------------------------------------------


def _torch_mse_grad(X, y):
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    ((torch.tensor(X) @ w + b - torch.tensor(y)) ** 2).mean().backward()
    return np.concatenate([w.grad.numpy(), [b.grad.item()]])


def test_f_gradient_accumulation(f):
    module, figures, out = f
    a = figures["accumulation"]
    X, y = module.regression_data()
    full = _torch_mse_grad(X, y)
    np.testing.assert_allclose(a["full"], full, rtol=1e-14)
    np.testing.assert_allclose(a["full"], np.append(2 * X.T @ -y / 7, 2 * -y.mean()), rtol=1e-14)  # w = b = 0
    assert a["weighted_maxdiff"] <= 1e-15
    np.testing.assert_allclose(a["weighted"], full, rtol=1e-14, atol=1e-16)
    unweighted = _torch_mse_grad(X[:3], y[:3]) + _torch_mse_grad(X[3:], y[3:])
    np.testing.assert_allclose(a["unweighted"], unweighted, rtol=1e-14)
    ratio = np.linalg.norm(unweighted) / np.linalg.norm(full)
    assert a["unweighted_norm_ratio"] == pytest.approx(ratio, rel=1e-12)
    assert 1.5 < ratio < 2.5 and f"norm ratio to full {ratio:.2f}" in out  # ~2 (TEACHING's data: 2.01)
    # the course's figure beside ours, and the reason: g_a + g_b = 2 g + (g_a - g)/4, so |ratio - 2| <= r/4
    ga = _torch_mse_grad(X[:3], y[:3])
    r = np.linalg.norm(ga - full) / np.linalg.norm(full)
    assert a["first_rel_distance"] == pytest.approx(r, rel=1e-12)
    np.testing.assert_allclose(unweighted, 2 * full + (ga - full) / 4, rtol=1e-12, atol=1e-15)
    assert abs(ratio - 2) <= r / 4
    flat = " ".join(out.split())
    assert f"norm ratio to full {ratio:.2f} (the course: 2.01, on its own data)" in flat
    assert f"(ours: r = {r:.2f}, ratio within 2 +- {r / 4:.2f})" in flat


def test_f_data_parallel_weighting(f):
    module, figures, out = f
    d = figures["data_parallel"]
    X, y = module.regression_data()
    g1, g2, full = _torch_mse_grad(X[:3], y[:3]), _torch_mse_grad(X[3:], y[3:]), _torch_mse_grad(X, y)
    np.testing.assert_allclose(d["rank_grads"], [g1, g2], rtol=1e-14)
    # (g1 + g2)/2 - (3 g1 + 4 g2)/7 = (g1 - g2)/14
    expected = np.linalg.norm((g1 - g2) / 14) / np.linalg.norm(full)
    assert d["naive_rel_error"] == pytest.approx(expected, rel=1e-10)
    assert 0.05 < d["naive_rel_error"] < 0.3  # wrong by ~0.1-0.2 (TEACHING's data: 0.16)
    assert d["weighted_rel_error"] <= 1e-15
    # the course's figure beside ours; both are r/8, r = |g1 - g|/|g| (g1 - g2 = (7/4)(g1 - g))
    r = np.linalg.norm(g1 - full) / np.linalg.norm(full)
    assert d["naive_rel_error"] == pytest.approx(r / 8, rel=1e-10)
    flat = " ".join(out.split())
    assert f"relative error {d['naive_rel_error']:.2f} (the course: 0.16, on its own data)" in flat
    assert f"(ours: {r:.2f}/8 = {r / 8:.2f})" in flat
    # the course's 0.16 means r = 1.28, so its ratio lies within 2 +- 0.32: 2.01 does
    assert "means r = 1.28 on its data, for which section 1 puts the ratio within 2 +- 0.32" in flat
    assert abs(2.01 - 2) <= 8 * 0.16 / 4


def _torch_xor_grad(p, dtype=torch.float64):
    P = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in p.items()}
    X, Y = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=dtype), \
        torch.tensor([-1.0, 1.0, 1.0, -1.0], dtype=dtype)
    # nn.Linear's layout: weight (out, in), y = x @ W.T + b
    out = torch.tanh(torch.tanh(X @ P["W1"].T + P["b1"]) @ P["W2"].T + P["b2"])
    loss = ((out[:, 0] - Y) ** 2).sum()
    loss.backward()
    return loss.item(), {k: v.grad.numpy() for k, v in P.items()}


def _course_init(seed):
    """An independent reading of the course's convention: torch.nn.Linear(2, 4), Linear(4, 1) whose
    weight, bias tensors are overwritten in order, row-major, by random.Random(seed).uniform(-1, 1)."""
    import random
    rng = random.Random(seed)
    l1, l2 = torch.nn.Linear(2, 4).double(), torch.nn.Linear(4, 1).double()
    with torch.no_grad():
        for t in (l1.weight, l1.bias, l2.weight, l2.bias):
            t.copy_(torch.tensor([rng.uniform(-1, 1) for _ in range(t.numel())], dtype=torch.float64).reshape(t.shape))
    return l1, l2


def test_f_xor_course_initialisation(f):
    module, figures, out = f
    x = figures["xor"]
    assert x["n_params"] == 17  # 2*4 + 4 + 4*1 + 1
    for seed in (0, 3, 7):
        l1, l2 = _course_init(seed)
        p = module.xor_init(seed)
        for a, b in zip((l1.weight, l1.bias, l2.weight, l2.bias), p.values()):
            np.testing.assert_array_equal(a.detach().numpy(), b)
    assert round(x["step0_loss_seed0"], 6) == 5.260514  # the course's step-0 loss, seed 0
    assert "step-0 loss on seed 0: 5.260514" in out


def test_f_xor_gradients_match_torch(f):
    module = f[0]
    for seed in range(10):  # at every initialisation, and along one trained trajectory
        p = module.xor_init(seed)
        for _ in range(3):
            L, g = module.xor_step(p, module.XOR_X, module.XOR_Y)
            Lt, gt = _torch_xor_grad(p)
            assert L == pytest.approx(Lt, rel=1e-13)
            for k in p:
                np.testing.assert_allclose(g[k], gt[k], rtol=1e-11, atol=1e-13)
            if seed:
                break
            p = module.gradient_descent(p, steps=300)


def test_f_xor_adam_course_figures(f):
    module, figures, out = f
    a = figures["xor"]["adam_seed0"]
    # the course: Adam lr 0.05 on seed 0 ends at 0.000089 with predictions -0.9973, +0.9952, +0.9948, -0.9944
    assert round(a["final"], 6) == 0.000089
    assert np.round(a["predictions"], 4).tolist() == [-0.9973, 0.9952, 0.9948, -0.9944]
    # oracle: torch.optim.Adam on the same initialisation
    l1, l2 = _course_init(0)
    params = [*l1.parameters(), *l2.parameters()]
    opt = torch.optim.Adam(params, lr=0.05, betas=(0.9, 0.999), eps=1e-8)
    X, Y = torch.tensor(module.XOR_X), torch.tensor(module.XOR_Y)
    for _ in range(2000):
        opt.zero_grad()
        ((torch.tanh(l2(torch.tanh(l1(X))))[:, 0] - Y) ** 2).sum().backward()
        opt.step()
    with torch.no_grad():
        pred = torch.tanh(l2(torch.tanh(l1(X))))[:, 0].numpy()
    np.testing.assert_allclose(a["predictions"], pred, rtol=1e-9)
    assert a["final"] == pytest.approx(((pred - module.XOR_Y) ** 2).sum(), rel=1e-7)
    assert "final loss 0.000089, predictions -0.9973 +0.9952 +0.9948 -0.9944" in out


def test_f_xor_training_figures(f):
    module, figures, out = f
    x = figures["xor"]
    gc = x["gradcheck"]
    assert gc["abs_diff"] < 1e-10  # ~4e-11 at h = 1e-5 (TEACHING: ~1e-12)
    finals = x["final_loss"]
    assert sorted(finals) == list(range(10))
    for s, L in finals.items():
        # converged, or stuck with saturated outputs of the wrong sign: 4 per wrong example
        assert L < 1e-2 or min(abs(L - 4.0), abs(L - 8.0)) < 0.2, (s, L)
    assert x["stuck"] == [s for s, L in finals.items() if L >= 1.0] and 1 <= x["n_stuck"] <= 9
    # Adam converges on seed 0 (whether gradient descent sticks there is rounding's call: see below)
    assert x["adam_seed0"]["gd_final"] == finals[0] and x["adam_seed0"]["final"] < 1e-3
    assert f"stuck: {x['n_stuck']}/10" in out


def test_f_xor_stuck_count_depends_on_rounding(f):
    """Which seeds stick is rounding's call, so no stuck list is expected here: BLAS and NumPy pick other kernels
    on other CPUs (PyTorch float32 stuck on the course's [0, 1, 2, 3, 4, 6, 9] on our build, on [2, 3, 5, 6] on an
    AVX-512 machine). What is asserted holds whichever way each run's last bits fall."""
    module, figures, out = f
    x = figures["xor"]
    v = x["variants"]
    for name, finals in v.items():  # every variant ends converged or saturated, and the printout says which
        assert all(L < 1e-2 or min(abs(L - 4.0), abs(L - 8.0)) < 0.2 for L in finals.values()), name
        stuck = module.stuck_of(finals)
        assert f"{name:32s} stuck {len(stuck)}/10 {stuck}" in out
    # one ulp of one weight (a difference of one rounding) decides: of 16 such nudges some stick, some converge
    # (8 of 16 stick on our build: all 16 on one side would be a 1-in-30,000 chance at that rate)
    nudged = x["nudged"]["finals"]
    k = sum(L >= module.STUCK for L in nudged)
    assert len(nudged) == 16 and 0 < k < 16
    assert all(L < 1e-2 or min(abs(L - 4.0), abs(L - 8.0)) < 0.2 for L in nudged)
    assert f"({len(nudged)} runs, each entry up and down): {k} stuck, {16 - k} converged" in out
    # the printed sentence about PyTorch float32 says what its own row shows (not another machine's count)
    if "PyTorch float32" in v:
        assert f"PyTorch float32 (its default dtype) sticks {len(module.stuck_of(v['PyTorch float32']))}/10 here" in \
            " ".join(out.split())
    assert f"(the course: 7/10 {module.COURSE_STUCK})" in out
    # so mathematically equal programs disagree on which seeds stick: summing the examples in another order does
    reordered = [k for k in v if k.startswith("gradir float64, rows")]
    assert len(reordered) == 3 and any(module.stuck_of(v[k]) != x["stuck"] for k in reordered)
    # the batched PyTorch run is a per-seed run: the same losses after a few steps (2000 steps would amplify
    # any rounding difference between the batched and the per-seed kernels into another stuck list)
    batched = module.torch_gd_finals([1, 5], "float64", steps=20)
    loop = module.torch_gd_finals([1, 5], "float64", batched=False, steps=20)
    assert loop == pytest.approx(batched, rel=1e-12) and batched != module.torch_gd_finals([1, 5], "float64", steps=0)


def test_f_xor_backward_schedule_by_hand(f):
    _, figures, out = f
    b = figures["xor_backward"]
    ir = b["backward"]
    # read off the IR: a node owes one count per operand computed inside the backward program
    for line in ("%12 = multiply %9, %11", "%17 = multiply %13, %16", "%19 = matmul %17, %0",
                 "%26 = multiply %19, %25", "%29 = matmul %28, %26", "return %30, %27, %22, %18"):
        assert line in ir
    counts = b["initial_counts"]
    assert counts["%11"] == 1   # multiply %7, %4: saved_subtract17 (%4) is an input
    assert counts["%19"] == 1   # matmul %17, %0: W2 is an input
    assert counts["%23"] == 0   # h*h of the saved h: both operands are inputs
    assert counts["%26"] == 2   # dh (from above) times 1 - h^2 (local): waits for two
    assert b["waits_for_two"] == ["%12", "%16", "%17", "%21", "%25", "%26", "%29"]
    steps = {s["node"]: s for s in b["steps"]}
    assert {d["node"]: d["count"] for d in steps["%17"]["decremented"]} == {"%18": 0, "%19": 0, "%21": 1}
    assert len(b["steps"]) == 25 and "a node runs once its count" in out


def test_f_xor_memory_peak_by_hand(f):
    _, figures, out = f
    b = figures["xor_backward"]
    h, col, one = 4 * 4 * 8, 4 * 1 * 8, 1 * 8   # float64: h (4x4), the output column (4x1), db2 (1)
    # at backward step 17 (h*h for tanh's rule): the saved h read for the last time, dh, h*h being made,
    # and the gradients made so far: dW2 (as its 4x1 transpose) and db2
    assert (b["peak_bytes"], b["peak_at"]) == (3 * h + col + one, "backward step 17") and b["peak_bytes"] == 424
    alive = sorted((a["bytes"], a["result"]) for a in b["alive_at_peak"])
    assert alive == [(one, True), (col, True), (h, False), (h, False), (h, False)]
    # backward step 0 (after the 14 forward steps): only what the forward saved is live, the saved h, the
    # output tanh and the residual (4,); the last forward step also held the squared residuals sum reads
    assert b["live_bytes"][14] == h + col + 4 * 8 and b["live_bytes"][13] == h + col + 2 * 4 * 8
    assert "peak 424 B at backward step 17 (%23 multiply) =" in " ".join(out.split())


def test_f_gr_train_resumes_bit_for_bit_and_matches_the_hand_loop(f, f_out):
    # oracles: a straight gr.train run of the same length, and the eager hand-written Adam loop of section 3
    _, figures, out = f
    t, hand = figures["train"], figures["xor"]["adam_seed0"]["final"]
    assert t["first_steps"] == 1000 and t["resumed_from"] == 1000
    assert t["bitwise"] and t["losses_equal"] and t["final"] == t["straight_final"]
    assert t["final"] == pytest.approx(hand, rel=1e-9)  # compiled vs eager: the same updates, rounding aside
    assert (f_out / "xor_adam.npz").is_file() and "<svg" in (f_out / "xor_adam_loss.svg").read_text()
    assert "continues from step 1000" in out and "same bits: True" in out


def test_f_out_writes_curves_and_diagrams(f, f_out):
    import shutil

    _, figures, out = f
    files = figures["files"]
    curves = f_out / "xor_loss_curves.svg"
    assert files["curves"] == str(curves) and "<svg" in curves.read_text()
    for key in ("html", "memory.svg", "forward.dot", "backward.dot"):
        assert (f_out / f"xor_loss.{key}").is_file()
    assert str(curves) in out and files["html"] in out
    assert not list(f_out.glob("*.tmp")) and not list(f_out.glob(".*"))  # atomic writes
    c = figures["xor"]["curves"]
    assert len(c["Adam"]) == 2000 and sorted(c["gradient descent"]) == list(range(10))
    assert c["Adam"][0] == pytest.approx(figures["xor"]["step0_loss_seed0"], rel=1e-15)  # the loss before step 1
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot program is not installed: only the .dot sources are written")
    assert "<svg" in (f_out / "xor_loss.backward.svg").read_text()


def test_f_xor_gradcheck_course_weight_and_rounding_step(f):
    """The gradcheck is on the course's weight W1[0][0] at h = 1e-5, printed beside the course's 9.89e-13; the
    central difference moves in steps of ulp(L)/(2h), and |diff| is within about one step."""
    module, figures, out = f
    x = figures["xor"]
    gc, g10, g2 = x["gradcheck"], x["gradcheck_W1_10"], x["gradcheck_rows_0132"]
    _, gt = _torch_xor_grad(module.xor_init(0))
    assert gc["at"] == [0, 0] and gc["h"] == 1e-5 and gc["analytic"] == pytest.approx(gt["W1"][0, 0], rel=1e-12)
    assert g10["at"] == [1, 0] and g10["analytic"] == pytest.approx(gt["W1"][1, 0], rel=1e-12)
    for c in (gc, g10, g2):  # the two losses differ by a whole number of ulp(L): the numeric value sits on a grid
        p, h = module.xor_init(0), c["h"]
        X, Y = module.XOR_X[c["order"]], module.XOR_Y[c["order"]]
        losses = []
        for w in (p["W1"][tuple(c["at"])] + h, p["W1"][tuple(c["at"])] - h):
            q = p | {"W1": p["W1"].copy()}
            q["W1"][tuple(c["at"])] = w
            losses.append(float(module.xor_loss(q, X, Y)))
        units = (losses[0] - losses[1]) / np.spacing(losses[0])
        assert units == round(units) and np.spacing(losses[0]) == np.spacing(5.26)
        assert c["step"] == np.spacing(5.26) / (2 * h)
        assert c["numeric"] == pytest.approx(round(units) * c["step"], rel=1e-15)
        assert c["abs_diff"] <= 2.5 * c["step"]
    assert g2["order"] == [0, 1, 3, 2] and g2["abs_diff"] != gc["abs_diff"]  # another order, another step
    flat = " ".join(out.split())
    assert f"|diff| {gc['abs_diff']:.2e} (the course: 9.89e-13, its h not given); W1[1,0]: |diff| {g10['abs_diff']:.2e}" \
        in flat
    assert f"steps of ulp(L)/(2h) = {gc['step']:.2e}. Ours is off by {gc['abs_diff'] / gc['step']:.2f} step, the " \
        f"course's by {9.89e-13 / gc['step']:.2f}" in flat
    assert f"give |diff| {g2['abs_diff']:.2e} ({g2['abs_diff'] / g2['step']:.2f} steps)" in flat


def _plain_scalar_gd(seed, tanh="math", square="mul", bias="last", order="forward", steps=2000, lr=0.5):
    """An independent scalar program: Python floats, lists, one example at a time. Returns (step-0, final) loss."""
    import math
    import random
    rng = random.Random(seed)
    v = [rng.uniform(-1, 1) for _ in range(17)]
    xs, ys = [(0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0)], [-1.0, 1.0, 1.0, -1.0]

    def th(z):
        if tanh == "math":
            return math.tanh(z)
        if tanh == "exp":
            return (math.exp(2 * z) - 1) / (math.exp(2 * z) + 1)
        return (math.exp(z) - math.exp(-z)) / (math.exp(z) + math.exp(-z))

    def sq(t):
        return t * t if square == "mul" else t ** 2

    def neuron(w, b, inputs):
        if bias == "first":
            return sum((wi * xi for wi, xi in zip(w, inputs)), b)
        s = 0.0
        for k, (wi, xi) in enumerate(zip(w, inputs)):
            s = wi * xi if k == 0 else s + wi * xi
        return s + b

    def fwd(v, x):
        h = [th(neuron(v[2 * j:2 * j + 2], v[8 + j], x)) for j in range(4)]
        return h, th(neuron(v[12:16], v[16], h))

    def loss(v):
        L = 0.0
        for x, y in zip(xs, ys):
            L = L + sq(fwd(v, x)[1] - y)
        return L

    L0 = loss(v)
    for _ in range(steps):
        g = [0.0] * 17
        for e in (range(4) if order == "forward" else range(3, -1, -1)):
            h, o = fwd(v, xs[e])
            dz2 = (1 - sq(o)) * (2 * (o - ys[e]))
            for j in range(4):
                g[12 + j] += h[j] * dz2
                dz1 = (1 - sq(h[j])) * (v[12 + j] * dz2)
                g[2 * j] += dz1 * xs[e][0]
                g[2 * j + 1] += dz1 * xs[e][1]
                g[8 + j] += dz1
            g[16] += dz2
        v = [p + -lr * gp for p, gp in zip(v, g)]
    return L0, loss(v)


class _Value:
    """A micrograd-style scalar engine (children kept in order, not in a set): backward runs the reverse
    topological order and each use adds its contribution with grad +=."""

    def __init__(self, data, children=()):
        self.data, self.grad, self._prev, self._backward = data, 0.0, tuple(children), lambda: None

    def __add__(self, other):
        other = other if isinstance(other, _Value) else _Value(other)
        out = _Value(self.data + other.data, (self, other))

        def _backward():
            self.grad += out.grad
            other.grad += out.grad
        out._backward = _backward
        return out

    __radd__ = __add__

    def __mul__(self, other):
        other = other if isinstance(other, _Value) else _Value(other)
        out = _Value(self.data * other.data, (self, other))

        def _backward():
            self.grad += other.data * out.grad
            other.grad += self.data * out.grad
        out._backward = _backward
        return out

    def __pow__(self, k):
        out = _Value(self.data ** k, (self,))

        def _backward():
            self.grad += k * self.data ** (k - 1) * out.grad
        out._backward = _backward
        return out

    def __sub__(self, other):
        return self + other * -1.0

    def tanh(self):
        import math
        t = (math.exp(2 * self.data) - 1) / (math.exp(2 * self.data) + 1)
        out = _Value(t, (self,))

        def _backward():
            self.grad += (1 - t ** 2) * out.grad
        out._backward = _backward
        return out

    def backward(self):
        topo, seen = [], set()

        def build(v):
            if id(v) not in seen:
                seen.add(id(v))
                for c in v._prev:
                    build(c)
                topo.append(v)
        build(self)
        self.grad = 1.0
        for v in reversed(topo):
            v._backward()


def _micrograd_gd(seed, steps, lr=0.5):
    import random
    rng = random.Random(seed)
    v = [_Value(rng.uniform(-1, 1)) for _ in range(17)]
    xs, ys = [[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], [-1.0, 1.0, 1.0, -1.0]

    def loss():
        def fwd(x):
            h = [sum((wi * xi for wi, xi in zip(v[2 * j:2 * j + 2], x)), v[8 + j]).tanh() for j in range(4)]
            return sum((wi * hi for wi, hi in zip(v[12:16], h)), v[16]).tanh()
        return sum(((fwd(x) - y) ** 2 for x, y in zip(xs, ys)), 0.0)

    for _ in range(steps):
        L = loss()
        for p in v:
            p.grad = 0.0
        L.backward()
        for p in v:
            p.data += -lr * p.grad
    return loss().data


def test_f_xor_scalar_programs(f):
    """The vectorised scalar programs equal independent Python-float programs bit for bit; the table prints their
    stuck lists beside the course's, and the sentence under it says what the rows show."""
    module, figures, out = f
    rows = figures["xor"]["scalar"]
    assert len(rows) == len(module.SCALAR_VARIANTS) == 7
    for opts, row in zip(module.SCALAR_VARIANTS, rows):
        L0, L = module.scalar_gd(range(10), steps=150, **opts)
        for s in range(10):  # bit for bit against the plain program, 150 steps on every seed
            assert (L0[s], L[s]) == _plain_scalar_gd(s, steps=150, **opts), (opts, s)
        assert round(row["step0_loss_seed0"], 6) == 5.260514  # the course's initialisation in every row
        assert row["stuck"] == [s for s, v in row["finals"].items() if v >= 1.0]
        assert all(v < 1e-2 or v >= 1.0 for v in row["finals"].values())  # converged or stuck (one may be leaving)
        line = (f"{module.TANH_FORMULAS[row['tanh']]:22s} {'t**2' if row['square'] == 'pow' else 't*t':6s} "
                f"{row['bias']:6s} {'0..3' if row['order'] == 'forward' else '3..0':11s} "
                f"{row['step0_loss_seed0']:<11.6f} {len(row['stuck'])}/10 {row['stuck']}")
        assert line in out
    # the whole 2000 steps of two rows, against the plain program (the first row on seeds 0 and 9)
    for s in (0, 9):
        assert rows[0]["finals"][s] == _plain_scalar_gd(s)[1]
    # the last row is the order a micrograd-style engine runs in: its Value engine gives the same numbers
    mg = rows[-1]
    assert (mg["tanh"], mg["square"], mg["bias"], mg["order"]) == ("exp", "pow", "first", "backward")
    for s in (0, 4):
        assert module.scalar_gd([s], steps=40, **module.SCALAR_VARIANTS[-1])[1][0] == _micrograd_gd(s, 40)
    assert mg["finals"][0] == _micrograd_gd(0, 2000)
    flat = " ".join(out.split())
    assert f"     {'the course':62s} 7/10 [0, 4, 5, 6, 7, 8, 9]" in out
    same = [i for i, r in enumerate(rows) if r["stuck"] == module.COURSE_STUCK]
    lists = len({tuple(r["stuck"]) for r in rows})
    if same:
        assert f"Row(s) {same} give the course's list." in flat
    else:
        assert f"None of these 7 programs gives the course's list. They give {lists} different lists" in flat
    assert lists > 1  # the same mathematics and initialisation, several stuck lists
    assert "the count depends on the order of the sums and on the tanh and square formulas, not on the " \
        "initialisation" in flat
