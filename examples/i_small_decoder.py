"""I. A small decoder, checked two ways.

A two-block pre-LayerNorm transformer decoder in float64, written with gradir ops:

    x = E[tokens] + P                                   (token and learned position embeddings)
    per block:  x = x + Attn(LN1(x));  x = x + MLP(LN2(x)),  MLP(h) = W2 gelu(W1 h + b1) + b2
    logits = LN_f(x) @ E^T                              (tied embedding: the output projection is E^T)
    loss = cross_entropy(logits, next tokens)           (mean over batch and positions)

Attn is multi-head (2 heads of width 7) causal self-attention: scores Q K^T / sqrt(7), future keys
set to -inf before the softmax, heads concatenated and projected by Wo. GELU is the exact (erf) form.
Sizes: vocab 16, context 8, width 14, MLP 4x (56), batch 2, so 5,432 weights in a dict pytree.

The gradient of the loss over the whole params dict (`gr.grad`) is checked two ways:
1. against PyTorch autograd in float64 on the same weights (the same math written in torch):
   max |gradir - torch| / (1 + max |torch|) over all parameters, expected <= 1e-12;
2. against central differences at h = 1e-6 on 300 entries sampled with a fixed seed, each loss
   evaluated eagerly on NumPy arrays: every |analytic - numeric| <= 1e-8 + 1e-6 |numeric|.
Then the causal mask: changing the token at position t leaves every logit (and per-position loss)
at earlier positions bit-for-bit unchanged; without the mask they move (negative control).

Run:  python examples/i_small_decoder.py
"""

from __future__ import annotations

import math

import numpy as np

import gradir as gr

VOCAB, T, D, HEADS, MLP, BATCH, BLOCKS = 16, 8, 14, 2, 56, 2, 2
HD = D // HEADS
EPS = 1e-5
H_FD = 1e-6
N_SAMPLES = 300
SEED = 0
# The course's figures (TEACHING.md, section I), printed beside ours
COURSE = {"weights": "~5k", "vs_torch": "<= 1e-12", "vs_fd": "<= 1e-8 + 1e-6|g|"}


def shapes() -> dict:
    """Every parameter's name and shape (torch layout: linear weights are (out, in))."""
    s = {"tok_emb": (VOCAB, D), "pos_emb": (T, D), "lnf_w": (D,), "lnf_b": (D,)}
    for i in range(BLOCKS):
        s.update({f"b{i}.ln1_w": (D,), f"b{i}.ln1_b": (D,),
                  f"b{i}.wq": (D, D), f"b{i}.bq": (D,), f"b{i}.wk": (D, D), f"b{i}.bk": (D,),
                  f"b{i}.wv": (D, D), f"b{i}.bv": (D,), f"b{i}.wo": (D, D), f"b{i}.bo": (D,),
                  f"b{i}.ln2_w": (D,), f"b{i}.ln2_b": (D,),
                  f"b{i}.w1": (MLP, D), f"b{i}.b1": (MLP,), f"b{i}.w2": (D, MLP), f"b{i}.b2": (D,)})
    return s


def init_params(seed: int = SEED) -> dict:
    """Random float64 weights; LayerNorm gains near 1 and biases nonzero so every term is exercised."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in shapes().items():
        leaf = name.split(".")[-1]
        if leaf.endswith("_w") and leaf.startswith("ln"):
            params[name] = 1.0 + 0.1 * rng.standard_normal(shape)
        elif len(shape) == 1:
            params[name] = 0.1 * rng.standard_normal(shape)
        else:
            params[name] = rng.standard_normal(shape) / math.sqrt(shape[-1])
    return params


def data(seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """A fixed random token sequence per batch row: inputs are positions 0..T-1, targets 1..T."""
    seq = np.random.default_rng(seed + 1).integers(0, VOCAB, size=(BATCH, T + 1))
    return seq[:, :T], seq[:, 1:]


def count_weights(params: dict) -> int:
    return sum(int(np.size(v)) for v in params.values())


# -- the model in gradir ----------------------------------------------------------------------------

CAUSAL = np.tril(np.ones((T, T), dtype=bool))  # query i sees keys j <= i


def split_heads(x):
    """(B, T, D) -> (B, H, T, HD)."""
    return gr.swapaxes(gr.reshape(x, (x.shape[0], T, HEADS, HD)), 1, 2)  # any batch size


def attention(p, i, h, causal=True):
    q = split_heads(gr.nn.linear(h, p[f"b{i}.wq"], p[f"b{i}.bq"]))
    k = split_heads(gr.nn.linear(h, p[f"b{i}.wk"], p[f"b{i}.bk"]))
    v = split_heads(gr.nn.linear(h, p[f"b{i}.wv"], p[f"b{i}.bv"]))
    s = q @ gr.swapaxes(k, -1, -2) * (1.0 / math.sqrt(HD))
    if causal:
        s = gr.where(np.broadcast_to(CAUSAL, s.shape), s, -np.inf)  # exp(-inf) = 0: no weight on the future
    o = gr.reshape(gr.swapaxes(gr.nn.softmax(s, axis=-1) @ v, 1, 2), (h.shape[0], T, D))
    return gr.nn.linear(o, p[f"b{i}.wo"], p[f"b{i}.bo"])


def mlp(p, i, h):
    return gr.nn.linear(gr.nn.gelu(gr.nn.linear(h, p[f"b{i}.w1"], p[f"b{i}.b1"])), p[f"b{i}.w2"], p[f"b{i}.b2"])


def logits_fn(p, tokens, causal=True):
    """Logits (B, T, VOCAB) of the decoder on integer tokens (B, T)."""
    x = gr.nn.embedding(p["tok_emb"], tokens) + p["pos_emb"]
    for i in range(BLOCKS):
        x = x + attention(p, i, gr.nn.layer_norm(x, p[f"b{i}.ln1_w"], p[f"b{i}.ln1_b"], eps=EPS), causal)
        x = x + mlp(p, i, gr.nn.layer_norm(x, p[f"b{i}.ln2_w"], p[f"b{i}.ln2_b"], eps=EPS))
    x = gr.nn.layer_norm(x, p["lnf_w"], p["lnf_b"], eps=EPS)
    return x @ gr.transpose(p["tok_emb"])  # tied: output projection is the embedding matrix transposed


def loss_fn(p, tokens, targets):
    """Mean next-token cross-entropy."""
    return gr.nn.cross_entropy(logits_fn(p, tokens), targets)


# -- the same model in PyTorch (the oracle; imported lazily so the example runs without torch) ------


def torch_loss_and_grads(params: dict, tokens, targets):
    """Loss and gradients by torch autograd in float64, on the same weights and the same math."""
    import torch
    import torch.nn.functional as F

    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    tok = torch.as_tensor(tokens)
    x = F.embedding(tok, p["tok_emb"]) + p["pos_emb"]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))

    def heads(y):
        return y.reshape(y.shape[0], T, HEADS, HD).transpose(1, 2)

    for i in range(BLOCKS):
        h = F.layer_norm(x, (D,), p[f"b{i}.ln1_w"], p[f"b{i}.ln1_b"], eps=EPS)
        q, k, v = (heads(F.linear(h, p[f"b{i}.w{n}"], p[f"b{i}.b{n}"])) for n in "qkv")
        s = (q @ k.transpose(-1, -2) / math.sqrt(HD)).masked_fill(~mask, float("-inf"))
        o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(x.shape[0], T, D)
        x = x + F.linear(o, p[f"b{i}.wo"], p[f"b{i}.bo"])
        h = F.layer_norm(x, (D,), p[f"b{i}.ln2_w"], p[f"b{i}.ln2_b"], eps=EPS)
        x = x + F.linear(F.gelu(F.linear(h, p[f"b{i}.w1"], p[f"b{i}.b1"])), p[f"b{i}.w2"], p[f"b{i}.b2"])
    logits = F.layer_norm(x, (D,), p["lnf_w"], p["lnf_b"], eps=EPS) @ p["tok_emb"].T
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), torch.as_tensor(targets).reshape(-1))
    loss.backward()
    return loss.item(), {k: v.grad.numpy() for k, v in p.items()}


# -- the checks ---------------------------------------------------------------------------------------


def vs_torch(grads: dict, torch_grads: dict) -> float:
    """max |gradir - torch| / (1 + max |torch|) over all parameters."""
    err = max(float(np.max(np.abs(grads[k] - torch_grads[k]))) for k in grads)
    scale = max(float(np.max(np.abs(g))) for g in torch_grads.values())
    return err / (1.0 + scale)


def sample_entries(params: dict, n: int = N_SAMPLES, seed: int = SEED) -> list[tuple[str, tuple]]:
    """n distinct (name, index) pairs drawn uniformly over all weights with a fixed seed."""
    flat = [(k, idx) for k, v in params.items() for idx in np.ndindex(v.shape)]
    picks = np.random.default_rng(seed).choice(len(flat), size=n, replace=False)
    return [flat[j] for j in sorted(picks)]


def central_differences(params: dict, tokens, targets, entries, h: float = H_FD) -> np.ndarray:
    """(L(w + h e) - L(w - h e)) / 2h for each sampled entry; L evaluated eagerly, never differentiated."""
    out = []
    for name, idx in entries:
        p = dict(params)
        w = params[name].copy()
        p[name] = w
        w[idx] += h
        up = float(loss_fn(p, tokens, targets))
        w[idx] -= 2 * h
        down = float(loss_fn(p, tokens, targets))
        out.append((up - down) / (2 * h))
    return np.array(out)


def causal_check(params: dict, tokens, targets, t: int = T // 2) -> dict:
    """Change the token at position t (every batch row): logits and per-position losses before t must not
    move. The same change without the mask moves them (negative control)."""
    changed = tokens.copy()
    changed[:, t] = (changed[:, t] + 1) % VOCAB

    def per_position(p, tok, causal):
        logits = logits_fn(p, tok, causal)
        return np.asarray(logits), np.asarray(gr.nn.cross_entropy(logits, targets, reduction="none"))

    (la, ca), (lb, cb) = per_position(params, tokens, True), per_position(params, changed, True)
    (ua, _), (ub, _) = per_position(params, tokens, False), per_position(params, changed, False)
    return {"position": t,
            "earlier_logit_change": float(np.max(np.abs(la[:, :t] - lb[:, :t]))),
            "earlier_loss_change": float(np.max(np.abs(ca[:, :t] - cb[:, :t]))),
            "later_logit_change": float(np.max(np.abs(la[:, t:] - lb[:, t:]))),
            "unmasked_earlier_logit_change": float(np.max(np.abs(ua[:, :t] - ub[:, :t])))}


def main(verbose: bool = True) -> dict:
    say = print if verbose else (lambda *a, **k: None)
    params = init_params()
    tokens, targets = data()
    n_weights = count_weights(params)
    loss, grads = gr.value_and_grad(loss_fn)(params, tokens, targets)
    grads = {k: np.asarray(v) for k, v in grads.items()}
    t_loss, t_grads = torch_loss_and_grads(params, tokens, targets)
    rel_torch = vs_torch(grads, t_grads)

    entries = sample_entries(params)
    numeric = central_differences(params, tokens, targets, entries)
    analytic = np.array([grads[k][idx] for k, idx in entries])
    fd_err = np.abs(analytic - numeric)
    fd_ratio = fd_err / (1e-8 + 1e-6 * np.abs(numeric))  # <= 1 means within the TEACHING tolerance
    causal = causal_check(params, tokens, targets)

    say("== I. a small decoder: 2 pre-LN blocks, 2-head causal attention, GELU MLP, tied embedding ==")
    say(f"vocab {VOCAB}, context {T}, width {D}, heads {HEADS}, MLP {MLP}, batch {BATCH}, float64")
    within = lambda ok: "ours is within it" if ok else "ours is OUTSIDE it"  # noqa: E731
    say(f"weights: {n_weights} in {len(params)} tensors  (the course: {COURSE['weights']}; it rounds, ours is the exact "
        "count of these tensors)")
    say(f"loss: gradir {float(loss):.15f}  torch {t_loss:.15f}")
    say(f"vs torch autograd: max err / (1 + max|grad|) = {rel_torch:.2e}  (the course: {COURSE['vs_torch']}; a bound, "
        f"{within(rel_torch <= 1e-12)})")
    say(f"vs central differences (h={H_FD:g}) on {len(entries)} sampled entries: "
        f"worst |analytic - numeric| = {fd_err.max():.2e},")
    say(f"   worst err / (1e-8 + 1e-6|g|) = {fd_ratio.max():.3f}  (the course: {COURSE['vs_fd']}, i.e. this ratio <= 1; "
        f"a bound, {within(fd_ratio.max() <= 1.0)})")
    say(f"causal mask, token {causal['position']} changed: earlier logits move by {causal['earlier_logit_change']:.1e}, "
        f"earlier losses by {causal['earlier_loss_change']:.1e}, later logits by {causal['later_logit_change']:.2e}; "
        f"without the mask earlier logits move by {causal['unmasked_earlier_logit_change']:.2e}")
    say("\nPictures: notebooks/i_small_decoder.py shows the decoder's forward/backward report with the schedule player inline.")
    return {"n_weights": n_weights, "loss": float(loss), "torch_loss": t_loss, "rel_err_vs_torch": rel_torch,
            "fd_samples": len(entries), "fd_worst_abs_err": float(fd_err.max()), "fd_worst_ratio": float(fd_ratio.max()),
            "causal": causal, "grads": grads, "torch_grads": t_grads}


if __name__ == "__main__":
    main()
