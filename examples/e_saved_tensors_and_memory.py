"""E. What backward keeps alive: saved tensors, the backward schedule and the memory plan.

1. For each op, what its backward rule reads (asked of the rules themselves, gradir.rules).
2. The saved-tensor report of L = tanh(a*b + a).
3. Twelve residual MLP blocks (width 256, batch 32, float32), without recomputation: how many
   tensors backward keeps and how many bytes, and the peak of forward + backward under the engine
   and the memory-aware schedules. (Checkpointing, the other half of this experiment, is the
   recompute planner's job.)
4. Attention score memory: one causal attention layer, 12 heads, T=1024, fp32, keeps its softmax
   probabilities, B*H*T*T elements: 48 MiB per layer, read off the saved-tensor report.

Our block is `x + relu(x @ W1 + b1) @ W2 + b2` (weights 256x256). The PyTorch reference experiment
reported 61 tensors / 13.91 MiB; PyTorch counts what its autograd nodes hold, parameters included,
while gradir's report counts new memory only (activations; inputs and parameters cost nothing extra,
and views of saved values are free), so the figures differ by design.

Run: python examples/e_saved_tensors_and_memory.py
"""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np

import gradir as gr
from gradir.passes.report import human_bytes
from gradir.rules import explain, vjp_reads, vjp_reads_by_operand

WIDTH, BATCH, BLOCKS = 256, 32, 12
MODELS = pathlib.Path(__file__).resolve().parent / "models"


def rule_table() -> dict[str, str]:
    """op -> what its backward rule keeps, for a few ops on f64[3] operands."""
    x = np.zeros(3)
    cases = {"add": 2, "multiply": 2, "divide": 2, "tanh": 1, "exp": 1, "sigmoid": 1, "relu": 1, "sin": 1,
             "log": 1, "sum": 1}
    out = {}
    for op, n in cases.items():
        attrs = {"axes": (0,), "keepdims": False} if op == "sum" else {}
        shape = () if op == "sum" else (3,)
        args = (op, [x] * n, attrs, shape, x.dtype)
        out[op] = explain(op, vjp_reads(*args), n, by_operand=vjp_reads_by_operand(*args))
    return out


def residual_blocks(blocks=BLOCKS, width=WIDTH, batch=BATCH, seed=0):
    """The twelve-block model of examples/models/residual_blocks.py."""
    spec = importlib.util.spec_from_file_location("residual_blocks", MODELS / "residual_blocks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.residual_blocks(blocks, width, batch, seed)


def attention_layer(T=1024, heads=12, d=64, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((1, heads, T, d)).astype(np.float32) for _ in range(3))
    mask = np.tril(np.ones((T, T), dtype=bool))

    def attend(q, k, v):
        scores = (q @ gr.swapaxes(k, -1, -2)) * (1 / d ** 0.5)
        p = gr.nn.softmax(gr.where(mask, scores, -1e9), axis=-1)
        return gr.sum(p @ v)
    return attend, (q, k, v)


def main() -> dict:
    figures = {}
    print("1. What each op's backward rule keeps (asked of the rules):")
    rules = rule_table()
    for why in rules.values():
        print(f"   {why}")
    figures["rules"] = rules

    print("\n2. Saved tensors of L = tanh(a*b + a) at a=1.5, b=-2:")
    j = gr.trace_grad(lambda a, b: gr.tanh(a * b + a), 1.5, -2.0, argnums=(0, 1))
    print(j.saved)
    figures["tanh_saved"] = j.saved.to_dict()

    print(f"\n3. {BLOCKS} residual MLP blocks, width {WIDTH}, batch {BATCH}, float32, no recomputation:")
    loss, params, x = residual_blocks()
    j = gr.trace_grad(loss, params, x)
    saved = j.saved
    acts = [e for e in saved.entries if e.kind == "activation"]
    print(f"   saved for backward: {saved.count} values, {len(acts)} of them activations holding "
          f"{human_bytes(saved.bytes)} of new memory (the rest are inputs and parameters)")
    peaks = {p: j.with_policy(p).memory.peak_bytes for p in ("engine", "memory")}
    print(f"   peak of forward + backward: engine order {human_bytes(peaks['engine'])}, "
          f"memory-aware {human_bytes(peaks['memory'])}")
    figures.update(blocks_saved_count=saved.count, blocks_activations=len(acts), blocks_saved_bytes=saved.bytes,
                   blocks_peaks=peaks)

    print("\n4. One causal attention layer, 12 heads, T=1024, fp32:")
    attend, args = attention_layer()
    j = gr.trace_grad(attend, *args, argnums=(0, 1, 2))
    biggest = max(j.saved.entries, key=lambda e: e.new_bytes)
    print(f"   largest saved value: {biggest.name} {biggest.type_str} (the softmax's {biggest.producer['op']}, "
          f"{biggest.needed_by[0].reason if biggest.needed_by else ''}), {human_bytes(biggest.new_bytes)} = "
          "B*H*T*T*4 bytes = 1*12*1024*1024*4")
    figures.update(attention_largest_shape=tuple(biggest.shape), attention_largest_bytes=biggest.new_bytes)
    return figures


if __name__ == "__main__":
    main()
