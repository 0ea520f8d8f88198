"""The benchmark workloads' other spellings: the GPT-2-style block (gradir, PyTorch, JAX) and the PyTorch and
JAX versions of dot+tanh and the makemore MLP step, so every system computes the same loss and gradients.
Used by bench_backends.py and bench_gpu.py."""

from __future__ import annotations

import math

import numpy as np

import gradir as gr

# -- the GPT-2-style block ------------------------------------------------------------------------

GPT_B, GPT_T, GPT_C, GPT_HEADS = 8, 64, 128, 4
LN_EPS = 1e-5


def gpt_params(seed: int = 0, C: int = GPT_C) -> dict:
    """Block weights in torch's layout (linear weights are (out, in)); LayerNorm gains near 1 and
    non-zero biases, so every term of the gradient is exercised."""
    rng = np.random.default_rng(seed)
    f = lambda *s, scale: (rng.standard_normal(s) * scale).astype(np.float32)
    return {
        "ln1_w": 1 + f(C, scale=0.1), "ln1_b": f(C, scale=0.1),
        "attn_w": f(3 * C, C, scale=C ** -0.5), "attn_b": f(3 * C, scale=0.02),
        "proj_w": f(C, C, scale=C ** -0.5), "proj_b": f(C, scale=0.02),
        "ln2_w": 1 + f(C, scale=0.1), "ln2_b": f(C, scale=0.1),
        "fc_w": f(4 * C, C, scale=C ** -0.5), "fc_b": f(4 * C, scale=0.02),
        "fc2_w": f(C, 4 * C, scale=(4 * C) ** -0.5), "fc2_b": f(C, scale=0.02),
    }


def gpt_input(seed: int = 1, B: int = GPT_B, T: int = GPT_T, C: int = GPT_C) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((B, T, C)).astype(np.float32)


def gpt_loss(p, x, heads: int = GPT_HEADS):
    """mean(block(x)**2) for the pre-LayerNorm block, written with gradir ops."""
    x = gpt_block(p, x, heads)
    return gr.mean(x * x)


def gpt_block(p, x, heads: int = GPT_HEADS):
    """The pre-LayerNorm block (gradir): causal self-attention and an erf-GELU MLP, both residual."""
    B, T, C = x.shape
    hd = C // heads
    split = lambda y: gr.swapaxes(gr.reshape(y, (B, T, heads, hd)), 1, 2)  # (B, T, C) -> (B, H, T, hd)
    h = gr.nn.layer_norm(x, p["ln1_w"], p["ln1_b"], eps=LN_EPS)
    qkv = gr.nn.linear(h, p["attn_w"], p["attn_b"])
    q, k, v = split(qkv[..., :C]), split(qkv[..., C:2 * C]), split(qkv[..., 2 * C:])
    s = q @ gr.swapaxes(k, -1, -2) * (1.0 / math.sqrt(hd))
    causal = np.tril(np.ones((T, T), dtype=bool))
    s = gr.where(np.broadcast_to(causal, s.shape), s, -np.inf)  # query i sees keys j <= i
    o = gr.reshape(gr.swapaxes(gr.nn.softmax(s, axis=-1) @ v, 1, 2), (B, T, C))
    x = x + gr.nn.linear(o, p["proj_w"], p["proj_b"])
    h = gr.nn.layer_norm(x, p["ln2_w"], p["ln2_b"], eps=LN_EPS)
    return x + gr.nn.linear(gr.nn.gelu(gr.nn.linear(h, p["fc_w"], p["fc_b"])), p["fc2_w"], p["fc2_b"])  # erf GELU


def torch_gpt_step(torch, p, x, heads: int = GPT_HEADS):
    """The same block in PyTorch: loss and the gradients of every parameter (in p's order)."""
    y = torch_gpt_block(torch, p, x, heads)
    loss = (y * y).mean()
    return loss, torch.autograd.grad(loss, list(p.values()))


def torch_gpt_block(torch, p, x, heads: int = GPT_HEADS):
    """gpt_block in PyTorch."""
    F = torch.nn.functional

    B, T, C = x.shape
    hd = C // heads
    split = lambda y: y.reshape(B, T, heads, hd).transpose(1, 2)
    h = F.layer_norm(x, (C,), p["ln1_w"], p["ln1_b"], eps=LN_EPS)
    q, k, v = (split(y) for y in F.linear(h, p["attn_w"], p["attn_b"]).split(C, dim=-1))
    s = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(hd))
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # on x's device (a GPU run)
    s = s.masked_fill(~causal, float("-inf"))
    o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
    x = x + F.linear(o, p["proj_w"], p["proj_b"])
    h = F.layer_norm(x, (C,), p["ln2_w"], p["ln2_b"], eps=LN_EPS)
    return x + F.linear(F.gelu(F.linear(h, p["fc_w"], p["fc_b"])), p["fc2_w"], p["fc2_b"])  # approximate="none": erf


def jax_gpt_loss(jax, p, x, heads: int = GPT_HEADS):
    x = jax_gpt_block(jax, p, x, heads)
    return jax.numpy.mean(x * x)


def jax_gpt_block(jax, p, x, heads: int = GPT_HEADS):
    """gpt_block in JAX."""
    jnp = jax.numpy
    B, T, C = x.shape
    hd = C // heads
    split = lambda y: y.reshape(B, T, heads, hd).transpose(0, 2, 1, 3)

    def layer_norm(y, w, b):
        mean = y.mean(-1, keepdims=True)
        var = ((y - mean) ** 2).mean(-1, keepdims=True)
        return (y - mean) * jax.lax.rsqrt(var + LN_EPS) * w + b

    linear = lambda y, w, b: y @ w.T + b
    h = layer_norm(x, p["ln1_w"], p["ln1_b"])
    qkv = linear(h, p["attn_w"], p["attn_b"])
    q, k, v = split(qkv[..., :C]), split(qkv[..., C:2 * C]), split(qkv[..., 2 * C:])
    s = q @ k.transpose(0, 1, 3, 2) * (1.0 / math.sqrt(hd))
    s = jnp.where(jnp.tril(jnp.ones((T, T), dtype=bool)), s, -jnp.inf)
    o = (jax.nn.softmax(s, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
    x = x + linear(o, p["proj_w"], p["proj_b"])
    h = layer_norm(x, p["ln2_w"], p["ln2_b"])
    return x + linear(jax.nn.gelu(linear(h, p["fc_w"], p["fc_b"]), approximate=False), p["fc2_w"], p["fc2_b"])


# -- the other workloads in torch and JAX ---------------------------------------------------------

def torch_dot_step(torch, w, x):
    out = torch.tanh(torch.dot(w, x))
    return out, torch.autograd.grad(out, [w, x])


def jax_dot_loss(jax, w, x):
    return jax.numpy.tanh(jax.numpy.dot(w, x))


def jax_mlp_loss(jax, p, X, Y):
    """bench_core.mlp_loss in jax.numpy: BatchNorm with the unbiased batch variance, mean cross-entropy."""
    jnp = jax.numpy
    emb = p["C"][X]
    h_pre = emb.reshape(X.shape[0], -1) @ p["W1"] + p["b1"]
    mean = h_pre.mean(0, keepdims=True)
    var = h_pre.var(0, keepdims=True, ddof=1)
    h = jnp.tanh(p["gamma"] * (h_pre - mean) * jax.lax.rsqrt(var + 1e-5) + p["beta"])
    logp = jax.nn.log_softmax(h @ p["W2"] + p["b2"], axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, Y[:, None], axis=1))
