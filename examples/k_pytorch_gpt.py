"""K. A GPT-style model from PyTorch: what its backward keeps, in what order it runs, what it costs.

The model is ordinary PyTorch (examples/models/torch_gpt.py: token and position embeddings, two
pre-LayerNorm blocks with causal `F.scaled_dot_product_attention` and a GELU MLP, tied input and
output embeddings). `gr.from_torch` captures it with torch.export at the level of core ATen ops and
replays each op through gradir's one ATen -> gradir table, so the result is a gradir function of
(params, idx). The loss is written in gradir (cross-entropy, ignore_index -1), and from there on
everything is gradir's: the joint graph, the backward schedule, the saved tensors and the memory plan,
with every node carrying the model file's source line and module path. It prints:

1. the capture: how it was made, parameters by module, loss and the largest gradient error against
   PyTorch autograd in float64 (the numbers that prove each gradient right);
2. the backward schedule, summarized, and the saved tensors grouped by the module that made them;
3. the memory plan of forward then backward, and an optimal recompute plan under a budget of 60% of
   the activation peak (a mixed-integer program; its optimality gap is reported);
4. what PyTorch's own autograd saves for the same model (`gr.torch_saved`), next to gradir's count.

Run:  python examples/k_pytorch_gpt.py
"""

from __future__ import annotations

import pathlib
import sys
from collections import defaultdict

import numpy as np
import torch.nn.functional as F

import gradir as gr
from gradir.passes.report import human_bytes

sys.path.insert(0, str(pathlib.Path(__file__).parent / "models"))
import torch_gpt  # noqa: E402 - the model file, also usable as `gradir trace examples/models/torch_gpt.py`

BUDGET_SHARE = 0.6  # of the activation peak without recomputation


def gradir_loss(f):
    """The loss, in gradir, over the captured model `f(params, idx)`."""
    def loss(params, idx, targets):
        logits = f(params, idx)
        return gr.nn.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1)
    return loss


def module_of(v) -> str:
    """The module that made a value: the innermost scope gr.from_torch recorded ("blocks.0.attn.qkv"),
    or "(model)" for what the model's own forward computes (and the loss)."""
    parts = [s for s in v.scope if s != "recompute"]
    return parts[-1] if parts else "(model)"


def main(verbose: bool = True) -> dict:
    say = print if verbose else (lambda *a, **k: None)
    model, (idx, targets) = torch_gpt.model(), torch_gpt.example_inputs()
    f, params = gr.from_torch(model, idx)
    loss = gradir_loss(f)
    value, grads = gr.value_and_grad(loss)(params, idx.numpy(), targets.numpy())

    want = F.cross_entropy(model(idx).reshape(-1, torch_gpt.VOCAB), targets.reshape(-1), ignore_index=-1)
    want.backward()
    torch_grads = {name: p.grad.numpy() for name, p in model.named_parameters()}
    rel = max(float(np.abs(grads[k] - g).max() / (1 + np.abs(g).max())) for k, g in torch_grads.items())

    say("== K. a GPT-style model from PyTorch ==")
    say(f"captured with {f.capture}: {len(params)} parameter tensors "
        f"({sum(p.size for p in params.values()):,} weights; head.weight is tied to wte.weight, listed once)")
    say(f"loss: gradir {float(value):.15f}  torch {want.item():.15f}")
    say(f"every parameter gradient vs PyTorch autograd (float64): max err / (1 + max|grad|) = {rel:.1e}")

    j = gr.trace_grad(loss, params, idx.numpy(), targets.numpy())
    sched, plan, saved = j.schedule, j.memory, j.saved
    say(f"\nbackward schedule: {len(sched.steps)} steps in engine order; at most "
        f"{max(s.queue_size for s in sched.steps)} nodes wait in the ready queue "
        "(print(j.schedule) lists every step)")
    say(f"saved for backward: {saved.count} values, {human_bytes(saved.bytes)} of new memory. By module:")
    by_module: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r, entry in zip(j.residuals, saved.entries):  # one report entry per residual, in the same order
        counts = by_module[module_of(r)]
        counts[0] += 1
        counts[1] += entry.new_bytes
    for name, (count, nbytes) in sorted(by_module.items(), key=lambda kv: -kv[1][1]):
        say(f"  {name:28s} {count:4d} values  {human_bytes(nbytes):>10s}")
    say(f"\nmemory plan: peak {human_bytes(plan.peak_bytes)} at {plan.describe_step(plan.peak_step)}; "
        f"arena {human_bytes(plan.arena_bytes)}")

    none = gr.trace_grad(loss, params, idx.numpy(), targets.numpy(), remat="none").remat
    budget = int(BUDGET_SHARE * none.peak_bytes)
    opt = gr.trace_grad(loss, params, idx.numpy(), targets.numpy(), remat="optimal", memory_budget=budget).remat
    say(f"recompute: without it the activation peak is {human_bytes(none.peak_bytes)}; under a budget of "
        f"{human_bytes(budget)} the optimal plan peaks at {human_bytes(opt.peak_bytes)}, recomputing "
        f"{opt.recomputed_ops} ops ({opt.recompute_flops:,} flops)")

    cmp = gr.torch_saved(model, idx, loss=lambda logits: F.cross_entropy(
        logits.reshape(-1, torch_gpt.VOCAB), targets.reshape(-1), ignore_index=-1))
    say(f"\nwhat PyTorch's autograd saves for the same model: {cmp.torch_count} saves, "
        f"{human_bytes(cmp.torch_bytes)} added save by save, {human_bytes(cmp.activation_bytes)} of activation "
        f"storage; gradir: {human_bytes(cmp.gradir.bytes)}. Why they differ:")
    for line in cmp.differences():
        say(f"  - {line}")
    return {"capture": f.capture, "loss": float(value), "torch_loss": want.item(), "rel_err_vs_torch": rel,
            "saved_bytes": saved.bytes, "peak_bytes": plan.peak_bytes, "budget": budget,
            "optimal_peak": opt.peak_bytes, "none_peak": none.peak_bytes, "recomputed_ops": opt.recomputed_ops,
            "torch_activation_bytes": cmp.activation_bytes, "torch_saves": cmp.torch_count,
            "by_module": dict(by_module)}


if __name__ == "__main__":
    main()
