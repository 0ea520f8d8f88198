"""gr.from_torch on a model from a widely used model-definition library: Hugging Face's GPT-2, built from a small
config (random weights, nothing downloaded), with an attention mask, labels ignored at -100 and tied embeddings.
Checked against PyTorch autograd in float64. Also: a Llama as its config builds it (its DynamicCache output left
out, with a note), and the error a mixture of experts with transformers' default kernels gives. The zoo of
architectures is tests/test_frontend_hf_zoo.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gradir as gr
from gradir.core.errors import UnsupportedOpError

transformers = pytest.importorskip("transformers")

VOCAB, T = 50, 8


class WithMaskAndLabels(torch.nn.Module):
    """Keyword arguments as positional ones (from_torch takes example inputs positionally)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, labels):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)


def gpt2(attention: str):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=2, n_head=4, use_cache=False,
                                  bos_token_id=0, eos_token_id=0)
    cfg._attn_implementation = attention
    return WithMaskAndLabels(transformers.GPT2LMHeadModel(cfg).double().eval())


def batch():
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, VOCAB, (2, T), generator=g)
    labels = idx.clone()
    labels[0, :3] = -100  # ignored positions
    mask = torch.ones(2, T, dtype=torch.long)
    mask[1, 6:] = 0  # padding: the attention mask is built from it inside the model
    return idx, mask, labels


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_hugging_face_gpt2_traces_and_its_gradients_match_torch(attention):
    model, inputs = gpt2(attention), batch()
    f, params = gr.from_torch(model, *inputs)
    assert "model.transformer.wte.weight" in params and "model.lm_head.weight" not in params  # tied: listed once
    # torch.export handles the eager attention; with SDPA this torch/transformers pair fails in export, and the
    # make_fx fallback (functionalized views) captures it
    assert f.capture == ("export" if attention == "eager" else "make_fx")
    arrays = [t.numpy() for t in inputs]
    out = f(params, *arrays)
    assert set(out) >= {"loss", "logits"}  # the model-output object as a dict
    ref = model(*inputs)
    np.testing.assert_allclose(out["logits"], ref.logits.detach().numpy(), rtol=1e-10, atol=1e-12)
    # Hugging Face computes its causal-LM loss in float32 (logits.float()): compared at that precision
    np.testing.assert_allclose(out["loss"], ref.loss.item(), rtol=1e-6)

    weights = torch.randn(ref.logits.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    (ref.logits * weights).sum().backward()
    grads = gr.grad(lambda p, *xs: gr.sum(f(p, *xs)["logits"] * weights.numpy()))(params, *arrays)
    for name, p in model.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)


def _tiny(name: str):
    """Three architectures whose shapes once crashed the LLVM backend (issue 19): one key/value head shared by
    every query head (GPT-BigCode's multi-query attention, Gemma's single KV head) and MobileNetV2 padding
    the 1x1 maps its last blocks make of a 32x32 image."""
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (2, 6), generator=torch.Generator().manual_seed(3))
    if name == "gpt_bigcode":
        cfg = transformers.GPTBigCodeConfig(vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=1, n_head=4,
                                            multi_query=True, use_cache=False, bos_token_id=0, eos_token_id=0)
        return transformers.GPTBigCodeForCausalLM(cfg), ids
    if name == "gemma":
        cfg = transformers.GemmaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=4, num_key_value_heads=1, head_dim=8, use_cache=False)
        return transformers.GemmaForCausalLM(cfg), ids
    cfg = transformers.MobileNetV2Config(num_channels=3, image_size=32, depth_multiplier=0.25, num_labels=3)
    image = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    return transformers.MobileNetV2ForImageClassification(cfg), image


@pytest.mark.parametrize("name", ["gpt_bigcode", "gemma", "mobilenet_v2"])
def test_shared_kv_heads_and_padded_1x1_maps_compile_and_match_torch(name):
    model, x = _tiny(name)
    model = model.double().eval()
    x = x.double() if x.is_floating_point() else x
    f, params = gr.from_torch(model, x)
    ref = model(x).logits
    weights = torch.randn(ref.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    (ref * weights).sum().backward()
    loss = lambda p, xs: gr.sum(f(p, xs)["logits"] * weights.numpy())
    grads = gr.compile(gr.grad(loss), backend="llvm")(params, x.numpy())
    reference = gr.compile(gr.grad(loss), backend="numpy")(params, x.numpy())
    # Gemma's RMSNorm computes in float32 even in a float64 model (and LLVM sums float32 rows in another order)
    rtol, atol = (1e-4, 1e-6) if name == "gemma" else (1e-9, 1e-12)
    for pname, p in model.named_parameters():
        np.testing.assert_allclose(grads[pname], reference[pname], rtol=rtol, atol=atol, err_msg=pname)
        np.testing.assert_allclose(grads[pname], p.grad.numpy(), rtol=rtol, atol=atol, err_msg=pname)


def test_a_default_config_llama_captures_and_its_cache_is_left_out_with_a_note():
    """A Llama as its config builds it returns a DynamicCache in its outputs (use_cache defaults to True): the
    cache is left out of f's outputs, said once on f.notes, and the logits match torch."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2)
    model, ids = transformers.LlamaForCausalLM(cfg).double().eval(), torch.randint(0, VOCAB, (1, 5))
    assert cfg.use_cache
    f, params = gr.from_torch(model, ids)
    assert len(f.notes) == 1 and "DynamicCache" in f.notes[0] and "use_cache=False" in f.notes[0]
    out = f(params, ids.numpy())
    assert set(out) == {"logits"} and set(f.outputs) == {"logits"}
    # Llama's RMSNorm and rotary tables compute in float32 inside the float64 model: float32 agreement
    np.testing.assert_allclose(out["logits"], model(ids).logits.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_a_mixture_of_experts_with_its_default_kernels_says_how_to_capture_it():
    """transformers' default experts kernel sorts tokens by expert (histc, a custom grouped_mm): the error says
    which experts_implementation has static shapes."""
    torch.manual_seed(0)
    cfg = transformers.MixtralConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1, num_local_experts=2)
    with pytest.raises(UnsupportedOpError, match='experts_implementation="batched_mm"'):
        gr.from_torch(transformers.MixtralForCausalLM(cfg).double().eval(), torch.randint(0, VOCAB, (1, 4)))


def test_llama_at_training_size_has_the_reference_gradients_on_llvm():
    """Kernels big enough to be split or partitioned (here a (32, 8, 64) batch: the example k_llama_names' shape):
    a change to the LLVM backend's loops once gave every gradient wrong at this size while the tiny-config zoo and
    the thread-count tests (which compared the backend with itself) passed. Random tokens: no dataset needed."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=27, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8,
                                   bos_token_id=0, eos_token_id=0, tie_word_embeddings=False, use_cache=False)
    model = transformers.LlamaForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(5)
    idx, targets = torch.randint(0, 27, (32, 8), generator=g), torch.randint(0, 27, (32, 8), generator=g).numpy()
    f, params = gr.from_torch(model, idx)
    step = gr.value_and_grad(lambda p, i, t: gr.nn.cross_entropy(f(p, i)["logits"], t))
    got = gr.compile(step, backend="llvm")(params, idx.numpy(), targets)
    want = gr.compile(step, backend="numpy")(params, idx.numpy(), targets)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for name, w in want[1].items():  # float32, summed in another order: relative to each gradient's largest entry
        np.testing.assert_allclose(got[1][name], w, rtol=0, atol=1e-4 * np.abs(w).max(), err_msg=name)
