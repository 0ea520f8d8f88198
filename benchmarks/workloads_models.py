"""The benchmark's model-sized workloads (bench_backends.py's Workload, defined here):

- cnn       a ResNet-style CNN training step (B=32, 3x32x32, float32): a conv-BN-ReLU stem, two residual
            blocks (conv-BN-ReLU-conv-BN + skip, ReLU), the second with stride 2 and a 1x1 projection skip,
            global average pool, linear, cross-entropy; gradir gr.nn and PyTorch spellings (no JAX);
- llama, mistral, neox
            transformers LlamaForCausalLM / MistralForCausalLM / GPTNeoXForCausalLM from their configs (hidden 128,
            2 layers, 4 heads (Llama and Mistral: 2 key/value heads), MLP 512, vocab 1000, seq 64, batch 4, float32,
            eager attention, random init, nothing downloaded, use_cache=False), captured with
            gr.from_torch; loss = the model's causal-LM loss with labels, gradients of every parameter; the torch
            side runs the same module through torch.func.functional_call (eager, or under torch.compile);
- gpt2s     a 2-layer GPT-2-small-shaped step (C=768, 12 heads, T=256, B=1): the repo's own GPT-2 block
            (workload_spellings.gpt_block) stacked, loss mean(y**2), in gradir, PyTorch and JAX.

Each builder takes sizes, so the tests run the same steps tiny.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from workload_spellings import gpt_block, gpt_params, jax_gpt_block, torch_gpt_block

import gradir as gr


@dataclass
class Workload:
    key: str
    title: str
    args: tuple  # NumPy arguments: the differentiated ones first, then the rest (integer data)
    argnums: int | tuple[int, ...]  # which of args are differentiated (a dict argument: all its leaves)
    names: list[str]  # gradient names, in the order the torch step returns them
    gradir_loss: Callable
    torch_step: Callable  # (torch, *torch_args) -> (loss, sequence of gradients)
    jax_loss: Callable | None  # (jax, *jax_args) -> loss; None: not expressible in JAX here
    rtol: float
    jax_note: str = ""  # why jax_loss is None


# -- the ResNet-style CNN ---------------------------------------------------------------------------

BN_EPS = 1e-5


def cnn_params(width: int = 16, classes: int = 10, seed: int = 0) -> dict:
    """Conv weights (O, C, kh, kw) with He scaling, BatchNorm gains near 1 with non-zero biases."""
    rng = np.random.default_rng(seed)
    p = {}

    def conv(name, o, c, k):
        p[name] = (rng.standard_normal((o, c, k, k)) * (2 / (c * k * k)) ** 0.5).astype(np.float32)

    def bn(name, c):
        p[name + "_g"] = (1 + 0.1 * rng.standard_normal(c)).astype(np.float32)
        p[name + "_b"] = (0.1 * rng.standard_normal(c)).astype(np.float32)

    conv("stem", width, 3, 3), bn("stem_bn", width)
    conv("b1c1", width, width, 3), bn("b1bn1", width), conv("b1c2", width, width, 3), bn("b1bn2", width)
    conv("b2c1", 2 * width, width, 3), bn("b2bn1", 2 * width), conv("b2c2", 2 * width, 2 * width, 3)
    bn("b2bn2", 2 * width), conv("b2sk", 2 * width, width, 1), bn("b2bnsk", 2 * width)
    p["fc_w"] = (rng.standard_normal((classes, 2 * width)) * (2 * width) ** -0.5).astype(np.float32)
    p["fc_b"] = (0.02 * rng.standard_normal(classes)).astype(np.float32)
    return p


def cnn_batch(B: int = 32, hw: int = 32, classes: int = 10, seed: int = 1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((B, 3, hw, hw)).astype(np.float32), rng.integers(0, classes, B)


def _cnn(nn, p, x, y, bn, relu, pool, ce):
    """One spelling for both systems: `nn` has conv2d and linear with torch's signatures."""
    cbr = lambda h, c, b, stride=1, act=True: (lambda z: relu(z) if act else z)(
        bn(nn.conv2d(h, p[c], None, stride, p[c].shape[-1] // 2), p[b + "_g"], p[b + "_b"]))
    h = cbr(x, "stem", "stem_bn")
    h = relu(h + cbr(cbr(h, "b1c1", "b1bn1"), "b1c2", "b1bn2", act=False))
    skip = cbr(h, "b2sk", "b2bnsk", 2, act=False)
    h = relu(skip + cbr(cbr(h, "b2c1", "b2bn1", 2), "b2c2", "b2bn2", act=False))
    return ce(nn.linear(pool(h), p["fc_w"], p["fc_b"]), y)


def cnn_loss(p, x, y):
    """The CNN step's loss in gradir (BatchNorm with batch statistics, biased variance, as torch's training mode)."""
    return _cnn(gr.nn, p, x, y, lambda h, g, b: gr.nn.batch_norm(h, g, b, eps=BN_EPS), gr.nn.relu,
                lambda h: gr.mean(h, axis=(2, 3)), gr.nn.cross_entropy)


def torch_cnn_step(torch, p, x, y):
    F = torch.nn.functional
    loss = _cnn(F, p, x, y, lambda h, g, b: F.batch_norm(h, None, None, g, b, training=True, eps=BN_EPS), F.relu,
                lambda h: h.mean(dim=(2, 3)), F.cross_entropy)
    return loss, torch.autograd.grad(loss, list(p.values()))


def cnn_workload(B: int = 32, width: int = 16, hw: int = 32) -> Workload:
    p = cnn_params(width)
    return Workload("cnn", f"ResNet-style CNN step B={B} 3x{hw}x{hw} width {width} f32", (p, *cnn_batch(B, hw)), 0,
                    list(p), cnn_loss, torch_cnn_step, None, rtol=1e-3,  # f32 BatchNorm sums over 32k elements
                    jax_note="not written for JAX (no JAX spelling of the CNN)")


# -- transformers models via gr.from_torch -----------------------------------------------------------

HF_SIZES = {"hidden": 128, "layers": 2, "T": 64, "B": 4, "vocab": 1000}


def hf_model(kind: str, hidden: int, layers: int, vocab: int, T: int):
    """A float32 transformers causal LM of `kind` (llama, mistral, neox) from its config, random weights."""
    import torch
    import transformers

    heads = max(1, hidden // 32)
    common = dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                  intermediate_size=4 * hidden, max_position_embeddings=max(T, 16), use_cache=False)
    torch.manual_seed(0)
    if kind == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(num_key_value_heads=max(1, heads // 2), **common))
    elif kind == "mistral":
        model = transformers.MistralForCausalLM(transformers.MistralConfig(num_key_value_heads=max(1, heads // 2),
                                                                           sliding_window=None, **common))
    elif kind == "neox":
        model = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**common))
    else:
        raise ValueError(f"unknown transformers model {kind!r}")
    model.config._attn_implementation = "eager"  # SDPA's export path differs by torch version; eager captures
    return model.float().eval()  # eval: no dropout; the step still differentiates every parameter


def _labelled(model):
    """The model as forward(input_ids, labels) -> its causal-LM loss (from_torch takes inputs positionally)."""
    import torch

    class WithLabels(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.model = m

        def forward(self, input_ids, labels):
            return self.model(input_ids=input_ids, labels=labels).loss

    return WithLabels(model)


def _torch_functional_step(module, torch, p, ids, labels):
    loss = torch.func.functional_call(module, p, (ids, labels))
    return loss, torch.autograd.grad(loss, list(p.values()))


def hf_workload(kind: str, hidden: int = HF_SIZES["hidden"], layers: int = HF_SIZES["layers"],
                T: int = HF_SIZES["T"], B: int = HF_SIZES["B"], vocab: int = HF_SIZES["vocab"]) -> Workload:
    import torch

    module = _labelled(hf_model(kind, hidden, layers, vocab, T))
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (B, T), generator=g)
    f, params = gr.from_torch(module, ids, ids)
    names = list(params)  # tied weights listed once; functional_call ties them again
    loss = lambda p, i, lab: f(p, i, lab)
    title = {"llama": "Llama", "mistral": "Mistral", "neox": "GPT-NeoX"}[kind]
    ids_np = ids.numpy()
    return Workload(kind, f"transformers {title} step (from_torch) hidden {hidden} {layers} layers seq {T} batch {B} "
                    f"vocab {vocab} f32", ({k: np.asarray(v, np.float32) for k, v in params.items()}, ids_np, ids_np), 0,
                    names, loss, functools.partial(_torch_functional_step, module), None, rtol=1e-3,
                    jax_note="a PyTorch module (no JAX spelling)")


# -- the GPT-2-small-shaped stack -------------------------------------------------------------------

GPT2S = {"layers": 2, "B": 1, "T": 256, "C": 768, "heads": 12}


def stack_params(layers: int, C: int) -> dict:
    return {f"l{i}.{k}": v for i in range(layers) for k, v in gpt_params(seed=i, C=C).items()}


def _layer(p, i):
    pre = f"l{i}."
    return {k[len(pre):]: v for k, v in p.items() if k.startswith(pre)}


def stack_loss(p, x, layers: int, heads: int):
    """mean(y**2) of `layers` GPT-2 blocks applied in turn (gradir)."""
    for i in range(layers):
        x = gpt_block(_layer(p, i), x, heads)
    return gr.mean(x * x)


def torch_stack_step(torch, p, x, layers: int, heads: int):
    y = x
    for i in range(layers):
        y = torch_gpt_block(torch, _layer(p, i), y, heads)
    loss = (y * y).mean()
    return loss, torch.autograd.grad(loss, list(p.values()))


def jax_stack_loss(jax, p, x, layers: int, heads: int):
    for i in range(layers):
        x = jax_gpt_block(jax, _layer(p, i), x, heads)
    return jax.numpy.mean(x * x)


def gpt2s_workload(layers: int = GPT2S["layers"], B: int = GPT2S["B"], T: int = GPT2S["T"], C: int = GPT2S["C"],
                   heads: int = GPT2S["heads"], key: str = "gpt2s") -> Workload:
    p = stack_params(layers, C)
    x = np.random.default_rng(1).standard_normal((B, T, C)).astype(np.float32)
    kw = dict(layers=layers, heads=heads)
    return Workload(key, f"GPT-2-small-shaped stack of {layers} blocks (repo's block) B={B} T={T} C={C} heads={heads} f32",
                    (p, x), 0, list(p), functools.partial(stack_loss, **kw), functools.partial(torch_stack_step, **kw),
                    functools.partial(jax_stack_loss, **kw), rtol=1e-3)


MODEL_WORKLOADS = {"cnn": cnn_workload, "llama": functools.partial(hf_workload, "llama"),
                   "mistral": functools.partial(hf_workload, "mistral"), "neox": functools.partial(hf_workload, "neox"),
                   "gpt2s": gpt2s_workload}
