"""Teaching example F, makemore backprop: the hand-written backward of the flattened MLP against
gradir's autodiff and against float64 torch autograd (every intermediate via retain_grad), the fused
cross-entropy / BatchNorm rules, BatchNorm's vanishing directions and a short training run."""

from __future__ import annotations

import contextlib
import io
import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from examples_util import load

STEPS = 1000
_CACHE: dict = {}


@pytest.fixture
def mk(names_path, tmp_path_factory):
    """(module, figures, printed output), computed once per module (names_path skips when absent); --out writes
    into _CACHE["out"]."""
    if "run" not in _CACHE:
        module = load("f_makemore_backprop")
        _CACHE["out"] = tmp_path_factory.mktemp("makemore_backprop_out")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            figures = module.main(["--data", str(names_path), "--steps", str(STEPS), "--out", str(_CACHE["out"])])
        _CACHE["run"] = (module, figures, buf.getvalue())
    return _CACHE["run"]


def torch_intermediates(p: dict, Xb, Yb, eps=1e-5) -> tuple[dict, dict]:
    """Karpathy's flattened forward in float64 torch; every intermediate retains its grad."""
    P = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
    n = len(Yb)
    Xb, Yb = torch.tensor(Xb), torch.tensor(Yb)
    v = {"emb": P["C"][Xb]}
    v["embcat"] = v["emb"].view(n, -1)
    v["hprebn"] = v["embcat"] @ P["W1"] + P["b1"]
    v["bnmeani"] = 1 / n * v["hprebn"].sum(0, keepdim=True)
    v["bndiff"] = v["hprebn"] - v["bnmeani"]
    v["bndiff2"] = v["bndiff"] ** 2
    v["bnvar"] = 1 / (n - 1) * v["bndiff2"].sum(0, keepdim=True)
    v["bnvar_inv"] = (v["bnvar"] + eps) ** -0.5
    v["bnraw"] = v["bndiff"] * v["bnvar_inv"]
    v["hpreact"] = P["bngain"] * v["bnraw"] + P["bnbias"]
    v["h"] = torch.tanh(v["hpreact"])
    v["logits"] = v["h"] @ P["W2"] + P["b2"]
    v["logit_maxes"] = v["logits"].max(1, keepdim=True).values
    v["norm_logits"] = v["logits"] - v["logit_maxes"]
    v["counts"] = v["norm_logits"].exp()
    v["counts_sum"] = v["counts"].sum(1, keepdim=True)
    v["counts_sum_inv"] = v["counts_sum"] ** -1
    v["probs"] = v["counts"] * v["counts_sum_inv"]
    v["logprobs"] = v["probs"].log()
    v["loss"] = -v["logprobs"][range(n), Yb].mean()
    for t in v.values():
        t.retain_grad()
    v["loss"].backward()
    grads = {k: t.grad.numpy() for k, t in (v | P).items()}
    return grads, {k: t.detach().numpy() for k, t in v.items()}


# -- parameter counts and data ---------------------------------------------------------------------


def test_parameter_counts_and_data(mk, names_path):
    _, f, out = mk
    count = lambda h: 27 * 10 + 30 * h + h + h * 27 + 27 + 2 * h  # C, W1, b1, W2, b2, gain, bias
    assert f["n_params"] == count(64) == 4137
    assert f["train"]["n_params"] == count(200) == 12297
    words = names_path.read_text().split()
    assert f["vocab"] == len(set("".join(words))) + 1 == 27
    assert sum(f["data"].values()) == sum(len(w) + 1 for w in words)  # one example per character and the end
    random.Random(42).shuffle(words)  # makemore's split: 80/10/10 by word after the seeded shuffle
    n1, n2 = int(0.8 * len(words)), int(0.9 * len(words))
    for k, part in (("train", words[:n1]), ("val", words[n1:n2]), ("test", words[n2:])):
        assert f["data"][k] == sum(len(w) + 1 for w in part)
    # ours (checked above against the count by hand) beside the course's figure
    assert "4,137 parameters  (the course: 4,137)" in out and "12,297 parameters  (the course: 12,297)" in out
    # the 200,000-step figures are measured ones, not this 1,000-step run's, and the text says so
    assert "after 200,000 steps, measured with --steps 200000 (not this run): train 2.0728, val 2.1144" in out
    assert "(the course: train 2.0713, val 2.1105; it drew its initialisation and batches from its own generator" in out
    assert "this run" not in out.replace("(not this run)", "")


# -- 2: every intermediate ---------------------------------------------------------------------------


def test_hand_backward_matches_torch_and_gradir(mk):
    module, f, _ = mk
    Xb, Yb = f["batch"]
    tg, tv = torch_intermediates(f["params"], Xb, Yb)
    assert f["loss"] == pytest.approx(float(tv["loss"]), rel=1e-14) and f["autodiff_loss"] == pytest.approx(f["loss"], rel=1e-15)
    names = [s for s in module.STEPS if s != "loss"] + module.PARAMS
    assert len(names) == 19 + 7
    for name in names:  # the oracle: float64 torch autograd, every intermediate via retain_grad
        np.testing.assert_allclose(f["hand"][name], tg[name], rtol=1e-10, atol=1e-15, err_msg=name)
        np.testing.assert_allclose(f["autodiff"][name], tg[name], rtol=1e-10, atol=1e-15, err_msg=name)
    # hand vs gradir, step by step: the same arithmetic, so exact; C differs only in the order rows
    # used several times accumulate (np.add.at vs gradir's scatter), within 1e-15 relative
    rows = {r.name: r for r in f["table"].rows}
    assert sorted(rows) == sorted(names) and f["table"].all_approximate
    inexact = sorted(n for n, r in rows.items() if not r.exact)
    assert set(inexact) <= {"C"}, inexact
    for name, r in rows.items():
        scale = np.abs(f["hand"][name]).max()
        assert r.exact or r.maxdiff <= 1e-15 * scale, (name, r.maxdiff, scale)
    # b1 is redundant before BatchNorm: its gradient is ~0 (but b1 itself is not zero)
    assert np.abs(f["params"]["b1"]).max() > 0.01 and np.abs(f["hand"]["b1"]).max() < 1e-15


# -- 3: fused rules and BatchNorm directions -------------------------------------------------------------


def test_fused_rules_agree_approximately(mk):
    _, f, out = mk
    Xb, Yb = f["batch"]
    tg, tv = torch_intermediates(f["params"], Xb, Yb)
    lt = torch.tensor(tv["logits"], requires_grad=True)
    F.cross_entropy(lt, torch.tensor(Yb)).backward()
    rows = {r.name: r for r in f["fused"].rows}
    for name, ref in (("dlogits (softmax - onehot)/n", lt.grad.numpy()), ("dhprebn BN 3-term", tg["hprebn"])):
        r = rows[name]
        assert r.approximate and r.maxdiff <= 1e-9, (name, r)
        assert r.maxdiff > 0  # a different rounding path: approximately, not exactly (observed ~1e-17)
        np.testing.assert_allclose(f["fused_values"][name], ref, rtol=1e-10, atol=1e-16, err_msg=name)
    np.testing.assert_allclose(f["autodiff"]["logits"], lt.grad.numpy(), rtol=1e-10, atol=1e-16)
    assert "fused rules vs autodiff" in out


def test_batchnorm_vanishing_directions(mk):
    _, f, out = mk
    b = f["bn_directions"]
    assert b["sum_dx"] < 1e-10 and b["dx_scale"] > 1e-4  # shift invariance: column sums of dx vanish
    # with eps the xhat direction is eps/(var+eps) of the unregularised size, not zero: closed form
    assert b["sum_dx_xhat_predicted_maxdiff"] < 1e-10 and b["sum_dx_xhat_predicted_max"] > 1e-9
    assert b["sum_dx_xhat"] == pytest.approx(b["sum_dx_xhat_predicted_max"], rel=1e-6)
    assert b["eps0_sum_dx"] < 1e-10 and b["eps0_sum_dx_xhat"] < 1e-10  # eps = 0: both vanish
    # printed beside the course's ~0, the xhat direction with its reason (eps), the eps = 0 line plainly
    assert f"max |.| {b['sum_dx']:.1e}  (the course: ~0)" in out
    assert f"max |.| {b['sum_dx_xhat']:.1e}  (the course: ~0; so it is at eps = 0, below; with eps = 1e-05" in out
    assert f"of dhprebn*xhat {b['eps0_sum_dx_xhat']:.1e}  (the course: ~0)" in out


def test_gradir_fused_vs_composed(mk):
    _, f, _ = mk
    g = f["gradir_fused_vs_composed"]
    assert g["table"].all_approximate and g["table"].max_diff <= 1e-9
    Xb, Yb = f["batch"]
    tg, tv = torch_intermediates(f["params"], Xb, Yb)
    lt = torch.tensor(tv["logits"], requires_grad=True)
    F.cross_entropy(lt, torch.tensor(Yb)).backward()
    np.testing.assert_allclose(g["ce_fused"], lt.grad.numpy(), rtol=1e-10, atol=1e-16)
    # BatchNorm (unbiased) with hpreact's cotangent: dx = dhprebn, dgain, dbias from torch
    dx, dgain, dbias = g["bn_fused"]
    np.testing.assert_allclose(dx, tg["hprebn"], rtol=1e-10, atol=1e-16)
    np.testing.assert_allclose(dgain, tg["bngain"][0], rtol=1e-10, atol=1e-16)
    np.testing.assert_allclose(dbias, tg["bnbias"][0], rtol=1e-10, atol=1e-16)


# -- 4: training ----------------------------------------------------------------------------------------


def torch_eval(p, X, Y, mean, var, eps=1e-5) -> float:
    P = {k: torch.tensor(v) for k, v in p.items()}
    x = P["C"][torch.tensor(X)].view(len(X), -1) @ P["W1"] + P["b1"]
    x = F.batch_norm(x, torch.tensor(mean[0]), torch.tensor(var[0]), P["bngain"][0], P["bnbias"][0], training=False,
                     eps=eps)
    return F.cross_entropy(torch.tanh(x) @ P["W2"] + P["b2"], torch.tensor(Y)).item()


def test_short_training_run(mk, names_path):
    module, f, out = mk
    t = f["train"]
    assert t["steps"] == STEPS and len(t["losses"]) == STEPS
    assert t["losses"][0] > math.log(27) - 0.2  # ~3.3 or above at initialisation
    assert t["last_losses"] < t["first_losses"] - 0.3 and t["last_losses"] < 2.8
    # evaluation with the running statistics: against torch's eval-mode batch_norm
    data, _ = module.splits(names_path)
    for k in ("train", "val"):
        ref = torch_eval(t["params"], *data[k], t["running_mean"], t["running_var"])
        assert t["eval"][k] == pytest.approx(ref, rel=1e-12)
        assert t["eval"][k] < 2.8  # learned something
        assert abs(t["eval"][k] - t["eval_full_stats"][k]) < 0.1  # running stats close to the full-set ones
    assert np.all(t["running_var"] > 0) and np.abs(t["running_mean"]).max() > 0
    assert "with running BatchNorm statistics" in out


def test_output_order_and_the_loss_curve(mk):
    """The training log is printed under section 4's heading, after the checks; --out writes the loss curve."""
    _, f, out = mk
    assert out.index("1. names.txt") < out.index("3. ") < out.index("4. training") < out.index("step       0/")
    path = _CACHE["out"] / "makemore_backprop_loss.svg"
    assert f["files"]["curves"] == str(path) and f"loss curve: {path}" in out
    assert "<svg" in path.read_text() and not list(_CACHE["out"].glob("*.tmp"))


def test_cmp_catches_the_biased_variance_rule(mk):
    """Negative control: the biased-variance BatchNorm backward on this unbiased forward is caught."""
    module, f, _ = mk
    p, dy, n = f["params"], f["autodiff"]["hpreact"], len(f["batch"][1])
    Xb, Yb = f["batch"]
    v = module.forward_np(p, Xb, Yb)
    xhat = v["bnraw"]
    wrong = p["bngain"] * v["bnvar_inv"] / n * (n * dy - dy.sum(0) - xhat * (dy * xhat).sum(0))
    row = module.gr.checks.cmp("dhprebn biased", wrong, f["autodiff"]["hprebn"], verbose=False)
    assert not row.approximate and row.maxdiff > 1e-5
