"""Teaching example I: a small decoder's gradients against float64 torch autograd and central
differences (the TEACHING.md bounds), plus the causal mask and the tied embedding."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
from examples_util import load

import gradir as gr


@pytest.fixture(scope="module")
def mod():
    return load("i_small_decoder")


@pytest.fixture(scope="module")
def run(mod):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        figures = mod.main()
    return figures, buf.getvalue()


def test_weight_count_by_hand(mod, run):
    f, text = run
    V, T, D, M, B = mod.VOCAB, mod.T, mod.D, mod.MLP, mod.BLOCKS
    # embeddings + final LN + per block (2 LNs, q/k/v/o with biases, two MLP linears with biases)
    by_hand = V * D + T * D + 2 * D + B * (4 * D + 4 * (D * D + D) + (M * D + M) + (D * M + D))
    assert f["n_weights"] == by_hand == 5432
    assert 4000 <= by_hand <= 6000  # "about 5k"
    assert "weights: 5432 in 36 tensors  (the course: ~5k; it rounds, ours is the exact count of these tensors)" in text


def test_loss_matches_torch_and_chance(mod, run):
    f, _ = run
    assert abs(f["loss"] - f["torch_loss"]) <= 1e-13
    assert abs(f["loss"] - np.log(mod.VOCAB)) < 1.5  # an untrained model sits near chance, ln 16


def test_grads_vs_torch_autograd(run):
    f, text = run
    grads, tg = f["grads"], f["torch_grads"]
    assert set(grads) == set(tg) and len(grads) == 36
    for k in grads:
        assert grads[k].shape == tg[k].shape and grads[k].dtype == np.float64
        assert np.all(np.isfinite(grads[k])), k  # the -inf mask must not leak NaN into any gradient
        assert np.any(grads[k] != 0.0), k       # every parameter is reached
    err = max(float(np.max(np.abs(grads[k] - tg[k]))) for k in grads)
    scale = max(float(np.max(np.abs(g))) for g in tg.values())
    assert err / (1.0 + scale) <= 1e-12
    assert f["rel_err_vs_torch"] == pytest.approx(err / (1.0 + scale), rel=1e-12, abs=1e-300)
    assert "vs torch autograd: max err / (1 + max|grad|) =" in text
    assert f"= {f['rel_err_vs_torch']:.2e}  (the course: <= 1e-12; a bound, ours is within it)" in text


def test_grads_vs_central_differences(mod, run):
    f, text = run
    assert 200 <= f["fd_samples"] <= 500
    assert f["fd_worst_ratio"] <= 1.0
    # redo a few entries independently here, with a different seed, against the torch gradient
    params = mod.init_params()
    tokens, targets = mod.data()
    entries = mod.sample_entries(params, n=20, seed=7)
    numeric = mod.central_differences(params, tokens, targets, entries, h=1e-6)
    for (name, idx), g_num in zip(entries, numeric):
        g = f["torch_grads"][name][idx]
        assert abs(f["grads"][name][idx] - g_num) <= 1e-8 + 1e-6 * abs(g), (name, idx)
        assert abs(g - g_num) <= 1e-8 + 1e-6 * abs(g), (name, idx)
    assert f"on {f['fd_samples']} sampled entries" in text
    assert (f"worst err / (1e-8 + 1e-6|g|) = {f['fd_worst_ratio']:.3f}  (the course: <= 1e-8 + 1e-6|g|, i.e. this ratio "
            "<= 1; a bound, ours is within it)") in text


def test_sampling_is_fixed_and_spread(mod):
    params = mod.init_params()
    a, b = mod.sample_entries(params), mod.sample_entries(params)
    assert a == b and len(set(a)) == len(a) == mod.N_SAMPLES
    assert len({name for name, _ in a}) >= 20  # most tensors are sampled, not just the big ones


def test_tied_embedding_gets_both_routes(mod, run):
    """Rows of tok_emb for tokens never fed in still get gradient: only the output projection (E^T)
    reaches them. (Their values are covered by the torch comparison.)"""
    f, _ = run
    tokens, _ = mod.data()
    unused = sorted(set(range(mod.VOCAB)) - set(tokens.ravel().tolist()))
    assert unused
    assert np.all(np.abs(f["grads"]["tok_emb"][unused]).max(axis=1) > 0)


def test_causal_mask(mod, run):
    f, text = run
    c = f["causal"]
    assert c["earlier_logit_change"] == 0.0 and c["earlier_loss_change"] == 0.0
    assert c["later_logit_change"] > 1e-3            # the changed token does matter from t on
    assert c["unmasked_earlier_logit_change"] > 1e-3  # negative control: without the mask it leaks back
    # every split position, and per-position losses from a torch-free re-run
    params = mod.init_params()
    tokens, targets = mod.data()
    for t in range(1, mod.T):
        r = mod.causal_check(params, tokens, targets, t=t)
        assert r["earlier_logit_change"] == 0.0 and r["earlier_loss_change"] == 0.0, t
    assert "earlier logits move by 0.0e+00" in text


def test_torch_check_catches_a_different_gelu(mod, monkeypatch):
    """Negative control: the torch comparison fails when gradir's model uses the tanh GELU instead."""
    params = mod.init_params()
    tokens, targets = mod.data()
    _, tg = mod.torch_loss_and_grads(params, tokens, targets)
    real = gr.nn.gelu
    monkeypatch.setattr(mod.gr.nn, "gelu", lambda x, approximate="none": real(x, approximate="tanh"))
    wrong = {k: np.asarray(v) for k, v in gr.grad(mod.loss_fn)(params, tokens, targets).items()}
    assert mod.vs_torch(wrong, tg) > 1e-6
