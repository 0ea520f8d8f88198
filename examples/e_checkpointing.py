"""E. Activation checkpointing: what backward keeps, what it computes again, and what that costs.

Twelve residual MLP blocks (width 256, batch 32, float32), each traced inside ``gr.scope("blockK")``:

    block(x) = x + relu(x @ W1 + b1) @ W2 + b2        (W1, W2: 256x256)      loss = mean(x * x)

differentiated with respect to the parameters (x is data, as in a training step), under several
recompute plans (``gr.trace_grad(loss, params, x, remat=...)``):

- ``none``: keep every activation the backward reads;
- ``uniform`` with ``segments=6``: two blocks per segment; only the input of each segment is kept,
  and the backward recomputes the inside of segments 1-5 from it (the last segment is needed first,
  so it is not recomputed: torch.utils.checkpoint.checkpoint_sequential's rule);
- ``selective``: keep matmul outputs, recompute the cheap elementwise rest;
- ``mincut``: the fewest saved bytes by a min cut of the joint graph (if gradir.passes.remat.mincut exists).
  Literally the fewest is none at all: recompute the whole forward from the inputs, at the first
  backward step, so every recomputed value is live at once and the peak does not drop. With
  ``forbid=("matmul",)`` (AOTAutograd's rule: never recompute compute-bound ops) it keeps as much
  as no recomputation does on this model;
- ``optimal`` at the uniform plan's activation peak: the least recomputation whose peak fits in the
  same memory (if gradir.passes.remat.milp exists). On this model it cannot recompute less than uniform-6
  (see below), so it is also shown with room for one more activation;
- and the same program with ``gr.checkpoint`` regions instead of a policy: pairs 0-4 checkpointed
  (what checkpoint_sequential does, so it equals uniform-6), and every other pair (0, 2, 4).

For each: saved activations and their bytes, block forward calls (12, plus one per block the
backward recomputes anything of), recomputed ops and their flops, and the activation peak of forward
then backward (passes.remat's accounting: inputs, parameters and the program's results not counted).

By hand (one activation = 32x256 float32 = 32 KiB): block k keeps its relu output r_k (relu's rule
keeps its output; the second matmul's rule reads it for dW2) and its output x_(k+1) (the next
block's first matmul reads it for dW1; after block 11, x*x reads it). That is 24 activations,
768 KiB, 12 block calls. Uniform-6 keeps the inputs of segments 1-5 (x_2, x_4, ..., x_10: 5) and
what the last segment's two blocks keep (r_10, x_11, r_11, x_12: 4): 9 activations, 288 KiB, and
recomputes blocks 0-9 once more: 22 block calls. In each recomputed segment (blocks 2s, 2s+1) the
backward recomputes block 2s whole (matmul, broadcast of b1, add, relu, matmul, add, broadcast of
b2, add: 8 ops, for r_2s and x_(2s+1)) and block 2s+1 up to its relu (4 ops), three 32x256x256
matmuls (2*32*256*256 flops each) and six 32x256 elementwise ops.

Why optimal cannot beat uniform-6 at uniform-6's peak here. The backward needs all 24 of r_0..r_11
and x_1..x_12. Each one it does not keep costs one matmul of its own to recompute (r_k needs x_k @ W1
of block k, x_(k+1) needs r_k @ W2 of block k) plus two elementwise ops, unless that matmul's result
is kept instead, which costs the same memory: so kept + recomputed matmuls >= 24. Every kept value is
alive when block 11's backward runs its relu rule, together with two 32x256 cotangents and the
product being made (and less r_11, read for the last time just before): peak >= kept + 2 activations.
At 352 KiB = 11 activations that allows 9 kept, hence >= 15 recomputed matmuls and 30 elementwise
ops: exactly uniform-6's 63,160,320 flops (gradir's uniform plan recomputes only what backward needs,
not the last block of a segment whole). With room for one more activation, 10 kept and 14 matmuls.
PyTorch's checkpoint_sequential reruns whole segments: 4 matmuls and 8 elementwise ops per segment.

Why PyTorch's reference figures differ (61 tensors / 13.91 MiB / 12 block calls without
checkpointing vs 21 / 2.50 MiB / 22 calls with six segments). PyTorch counts every tensor an
autograd node packs for backward (torch.autograd.graph.saved_tensors_hooks): a tensor kept by two
nodes counts twice, and parameters count. Per block of nn.Linear -> ReLU -> nn.Linear:

    Linear 1 (addmm): its input x_k and its weight W1^T         ReLU: its output r_k
    Linear 2 (addmm): its input r_k (again) and its weight W2^T

5 tensors per block, against gradir's 2 activations: gradir's saved-tensor report counts each
value once (r_k serves both rules) and counts new memory only (parameters and the input already
exist; they appear in the report as inputs with 0 new bytes). On *this* model PyTorch packs
12*5 - 1 + 2 = 61 tensors (block 0 does not keep W1^T, since x needs no gradient; y*y packs y
twice), 6.94 MiB; deduplicated by storage that is 48 tensors, gradir's 48 saved values (23 weights,
x, 24 activations), and without parameters and input it is exactly gradir's 24 / 768 KiB. The
reference's 13.91 MiB is what PyTorch packs for blocks with a hidden width of 512 (256 -> 512 ->
256), the input requiring grad and a loss that packs y once (y.pow(2)): 12 * (32 + 512 + 64 + 64 +
512) KiB + 32 KiB = 13.906 MiB in 61 tensors, and with checkpoint_sequential(6): 5 segment inputs
+ 2 * 5 + 1 = 16 tensors, 2.50 MiB (torch 2.13; the reference's 21 has five more tensors of zero
bytes, one per checkpointed segment: earlier 2.x releases' non-reentrant checkpoint saved each segment's
inputs through `_NoopSaveInputs.apply(dummy, kwargs, *args)` with `dummy = torch.empty((0,),
requires_grad=True)`, so the hooks saw one empty tensor beside each segment's input; 2.13 saves the
inputs without it. 16 + 5 empty tensors = 21, the same 2.50 MiB; the `dummy` is read from
torch/utils/checkpoint.py of those releases, not measured here).
Block calls agree: 12 and 22 (PyTorch reruns whole blocks; gradir counts a block as called again
when the backward recomputes any node of it, here the last block of a segment only up to its relu).
tests/test_example_e_checkpointing.py measures PyTorch's figures with saved_tensors_hooks.

What "activation peak" counts. The table's peak is the memory plan of forward then backward in
engine order, with what every plan holds alike left out: the inputs, the parameters and the
program's results (the loss and the 48 gradients). Without recomputation it is 832 KiB, reached at
backward step 15 (relu's rule in block 11): the 22 saved activations not yet read for the last time
(x_1..x_11, r_0..r_10) and 4 backward buffers of 32x256 (the cotangent of x_12, which block 10 still
reads; dr_11 = g @ W2^T; relu's mask as float32; the product being made): 26 x 32 KiB.
e_saved_tensors_and_memory.py prints "engine order 6.05 MiB" for the same model: the memory plan
with the results counted. The gradients pile up to the end of the backward, so that peak is at its
last step, when no activation is left: 24 x 256 KiB + 24 x 1 KiB of gradients + one 32 KiB cotangent.

With `--out DIR` it writes the memory timelines (activation peak) of no recomputation and of six
uniform segments side by side, and the diagrams, plot and HTML report of the uniform-6 trace
(recomputed nodes are marked), and prints their paths.

Run: python examples/e_checkpointing.py [--out DIR]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import pathlib
import sys

import numpy as np

import gradir as gr
from gradir.passes.report import human_bytes

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from e_saved_tensors_and_memory import (  # noqa: E402 - the companion example's readers of a memory plan
    activation_plan,
    parts_text,
    peak_parts,
    say,
    write_trace_files,
)

WIDTH, BATCH, BLOCKS, SEGMENTS = 256, 32, 12, 6
# The course's figures (TEACHING.md, section E): its reference experiment in PyTorch, without checkpointing and
# with six checkpoint segments; printed beside ours as "(the course: X)".
COURSE = {"tensors": 61, "mib": 13.91, "block_calls": 12,
          "checkpointed_tensors": 21, "checkpointed_mib": 2.50, "checkpointed_block_calls": 22}


def make_params(blocks=BLOCKS, width=WIDTH, hidden=WIDTH, batch=BATCH, seed=0):
    """Parameters (a list of dicts W1, b1, W2, b2) and the data x, float32."""
    rng = np.random.default_rng(seed)
    f = np.float32
    params = [{"W1": (rng.standard_normal((width, hidden)) / width ** 0.5).astype(f), "b1": np.zeros(hidden, f),
               "W2": (rng.standard_normal((hidden, width)) / hidden ** 0.5).astype(f), "b2": np.zeros(width, f)}
              for _ in range(blocks)]
    return params, rng.standard_normal((batch, width)).astype(f)


def block(x, p):
    return x + gr.relu(x @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]


def two_blocks(x, params, first):
    for k in (first, first + 1):
        with gr.scope(f"block{k}"):
            x = block(x, params[k])
    return x


def make_loss(checkpointed_pairs=()):
    """The twelve-block loss; the pairs of blocks listed run inside gr.checkpoint regions."""
    checkpointed = gr.checkpoint(two_blocks)  # one wrapper: each call is a region of its own

    def loss(params, x):
        for pair in range(len(params) // 2):
            x = (checkpointed if pair in checkpointed_pairs else two_blocks)(x, params, 2 * pair)
        return gr.mean(x * x)
    return loss


def block_calls(j) -> int:
    """Block forward calls: every block once, plus once for each block the backward recomputes
    anything of (read off the scopes of the recomputed nodes)."""
    recomputed = {s for v in j.partition.recomputed for s in v.scope if s.startswith("block")}
    return BLOCKS + len(recomputed)


def figures_of(j) -> dict:
    r = j.remat
    return {"saved": r.saved_count, "saved_bytes": r.saved_bytes, "block_calls": block_calls(j),
            "recomputed_ops": r.recomputed_ops, "recompute_flops": r.recompute_flops, "peak_bytes": r.peak_bytes,
            "proven_optimal": r.plan.optimal}


def plans(params, x) -> dict[str, dict]:
    """Figures per plan, in the order of the table."""
    loss = make_loss()
    out = {}
    for name, kw in (("none", {}), (f"uniform, {SEGMENTS} segments", {"remat": "uniform", "segments": SEGMENTS}),
                     ("selective (keep matmul)", {"remat": "selective"})):
        out[name] = figures_of(gr.trace_grad(loss, params, x, remat=kw.pop("remat", "none"), **kw))
    uniform_peak = out[f"uniform, {SEGMENTS} segments"]["peak_bytes"]
    out["mincut"] = figures_of(gr.trace_grad(loss, params, x, remat="mincut"))
    out["mincut, matmul not recomputed"] = figures_of(gr.trace_grad(loss, params, x, remat="mincut",
                                                                    forbid=("matmul",)))
    out["optimal at uniform's peak"] = figures_of(
        gr.trace_grad(loss, params, x, remat="optimal", memory_budget=uniform_peak))
    one_more = uniform_peak + BATCH * WIDTH * 4  # room for one more 32x256 activation
    out["optimal at uniform's peak + 32 KiB"] = figures_of(
        gr.trace_grad(loss, params, x, remat="optimal", memory_budget=one_more, time_limit=60.0))  # a ceiling: ~1 s
    for name, pairs in (("gr.checkpoint pairs 0-4", (0, 1, 2, 3, 4)), ("gr.checkpoint pairs 0, 2, 4", (0, 2, 4))):
        out[name] = figures_of(gr.trace_grad(make_loss(pairs), params, x))
    return out


def print_table(rows: dict[str, dict]) -> None:
    print("| plan | saved activations | saved bytes | block calls | recomputed ops | recompute flops | activation peak |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, f in rows.items():
        proven = " (proven optimal)" if f["proven_optimal"] else ""
        print(f"| {name}{proven} | {f['saved']} | {human_bytes(f['saved_bytes'])} | {f['block_calls']} | "
              f"{f['recomputed_ops']} | {f['recompute_flops']:,} | {human_bytes(f['peak_bytes'])} |")


def what_one_block_saves(params, x, k=5) -> list[str]:
    """gradir's saved-tensor report entries that block k's rules need (activations and inputs)."""
    j = gr.trace_grad(make_loss(), params, x)
    forward_scope = {f"%{i}": n.scope for i, n in enumerate(j.forward.all_values())}
    out = []
    for e in j.saved.entries:
        reasons = [str(n) for n in e.needed_by if f"block{k}" in forward_scope.get(n.value, ())]
        if reasons:
            out.append(f"{e.name} {e.type_str} ({e.kind}, {human_bytes(e.new_bytes)} new): {'; '.join(reasons)}")
    return out


# -- PyTorch, for the comparison with the reference figures ----------------------------------------


def pytorch_saved(hidden=WIDTH, segments=None, input_requires_grad=False, square="mul", blocks=BLOCKS, seed=0) -> dict:
    """What PyTorch's autograd packs for the same model (nn.Linear -> ReLU -> nn.Linear blocks, float32),
    counted with torch.autograd.graph.saved_tensors_hooks: every pack (tensors as PyTorch counts them),
    distinct storages, and distinct storages that are neither parameters nor the input (activations);
    with `segments`, under checkpoint_sequential. `square`: "mul" (y*y, packs y twice) or "pow" (once)."""
    import torch
    from torch import nn
    from torch.utils.checkpoint import checkpoint_sequential

    torch.manual_seed(seed)
    calls = [0]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = nn.Linear(WIDTH, hidden), nn.Linear(hidden, WIDTH)

        def forward(self, x):
            calls[0] += 1
            return x + self.l2(torch.relu(self.l1(x)))

    model = nn.Sequential(*[Block() for _ in range(blocks)])
    x = torch.randn(BATCH, WIDTH, requires_grad=input_requires_grad)
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        y = model(x) if segments is None else checkpoint_sequential(model, segments, x, use_reentrant=False)
        loss = (y * y if square == "mul" else y.pow(2)).mean()
    loss.backward()
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in packed}
    not_new = {p.untyped_storage().data_ptr() for p in model.parameters()} | {x.untyped_storage().data_ptr()}
    acts = {k: v for k, v in storages.items() if k not in not_new}
    return {"tensors": len(packed), "bytes": sum(t.numel() * t.element_size() for t in packed),
            "distinct": len(storages), "activations": len(acts), "activation_bytes": sum(acts.values()),
            "block_calls": calls[0]}


def what_the_peaks_count(params, x) -> dict:
    """The activation peak of no recomputation taken apart, and the memory plan's peak of the same trace."""
    j = gr.trace_grad(make_loss(), params, x)
    act, mem = activation_plan(j), j.memory
    parts = peak_parts(act)
    say(f"What \"activation peak\" counts: the memory plan of forward then backward (engine order) without what "
        f"every plan holds alike: the inputs, the parameters and the program's results (the loss and the "
        f"{len(j.backward.outputs)} gradients). Without recomputation it is reached at "
        f"{act.describe_step(act.peak_step)}, relu's rule in block 11: {parts_text(act.peak_bytes, parts)}. The "
        f"saved ones are x_1..x_11 and r_0..r_10 (x_12 and r_11 have been read for the last time); the backward "
        f"buffers are the cotangent of x_12 (block 10 still reads it), dr_11 = g @ W2^T, relu's mask as float32 "
        f"and the product being made.", indent="")
    print()
    say(f"e_saved_tensors_and_memory.py prints \"engine order {human_bytes(mem.peak_bytes)}\" for the same model: "
        f"the memory plan with the results counted. Gradients stay alive to the end, so that peak is at "
        f"{mem.describe_step(mem.peak_step)}, the last, when no activation is left: "
        f"{parts_text(mem.peak_bytes, peak_parts(mem))}.", indent="")
    return {"activation_peak": act.peak_bytes, "activation_peak_at": act.where(act.peak_step),
            "activation_peak_parts": parts, "memory_plan_peak": mem.peak_bytes,
            "memory_plan_peak_at": mem.where(mem.peak_step), "memory_plan_peak_parts": peak_parts(mem)}


def write_files(out, params, x) -> dict:
    """The activation-peak timelines of no recomputation and of uniform-6 side by side, and the uniform-6
    trace's diagrams, memory plot and HTML report, written into `out` (atomically); their paths printed."""
    from gradir.viz.plots import memory_timeline

    loss = make_loss()
    none = gr.trace_grad(loss, params, x)
    uniform = gr.trace_grad(loss, params, x, remat="uniform", segments=SEGMENTS)
    path = memory_timeline({"no recomputation": activation_plan(none),
                            f"uniform, {SEGMENTS} segments": activation_plan(uniform)},
                           pathlib.Path(out) / "checkpointing.activation_timeline.svg",
                           title="activation bytes live per step (results, inputs and parameters left out)")
    print(f"   activation timelines, no recomputation vs uniform-{SEGMENTS}: {path}")
    return {"activation_timeline": str(path), "uniform": write_trace_files(uniform, out, f"uniform{SEGMENTS}")}


def main(out=None) -> dict:
    """Print the figures (and, with `out`, write plots and diagrams there); return them."""
    params, x = make_params()
    print(f"{BLOCKS} residual MLP blocks x + relu(x @ W1 + b1) @ W2 + b2, width {WIDTH}, batch {BATCH}, float32; "
          "gradients of mean(x*x) with respect to the parameters:\n")
    rows = plans(params, x)
    say("One row per recompute plan: what the backward keeps (saved activations, their bytes), what it computes "
        "again (block calls, recomputed ops and their flops) and the activation peak that buys (what it counts: "
        "below the table).", indent="")
    print_table(rows)
    figures = {"plans": rows}
    print()
    u, n = rows[f"uniform, {SEGMENTS} segments"], rows["none"]
    say(f"Read it against the first row. Uniform-{SEGMENTS} keeps {u['saved']} activations instead of {n['saved']} "
        f"and pays {u['block_calls'] - n['block_calls']} extra block calls. Selective trades each activation for the "
        "matmul output it is recomputed from, the same size here: no memory saved, only cheap elementwise ops "
        "recomputed. Min-cut's 0 saved bytes is the fewest by its own measure: it recomputes the whole forward "
        "at the first backward step, where everything recomputed is live at once, so the peak does not drop. "
        "Optimal finds the least recomputation that fits uniform's peak.", indent="")
    print(f"Block calls: {n['block_calls']} without recomputation, {u['block_calls']} with uniform-{SEGMENTS}  "
          f"(the course: {COURSE['block_calls']} / {COURSE['checkpointed_block_calls']}, in its PyTorch reference run)")
    print()
    figures["peaks"] = what_the_peaks_count(params, x)

    print("\nWhat block 5 keeps in gradir (the saved-tensor report, no recomputation):")
    figures["block5_saves"] = what_one_block_saves(params, x)
    for line in figures["block5_saves"]:
        print(f"   {line}")
    print("PyTorch's nodes pack, per block: Linear 1 its input x_k and W1^T; ReLU its output r_k; Linear 2 its\n"
          "input r_k again and W2^T: 5 tensors, parameters included and r_k twice. gradir counts each value once\n"
          "and new memory only (the weights and x already exist).")

    if importlib.util.find_spec("torch") is not None:
        same = pytorch_saved()
        seg = pytorch_saved(segments=SEGMENTS)
        print(f"\nPyTorch on this model: {same['tensors']} tensors packed, {human_bytes(same['bytes'])} "
              f"({same['block_calls']} block calls); {same['distinct']} distinct storages;")
        print(f"without parameters and input {same['activations']} tensors, {human_bytes(same['activation_bytes'])} "
              f"(gradir: {rows['none']['saved']}, {human_bytes(rows['none']['saved_bytes'])}).")
        print(f"With checkpoint_sequential({SEGMENTS}): {seg['tensors']} tensors, {human_bytes(seg['bytes'])}, "
              f"{seg['block_calls']} block calls; activations {seg['activations']}, "
              f"{human_bytes(seg['activation_bytes'])}.")
        ref = pytorch_saved(hidden=2 * WIDTH, input_requires_grad=True, square="pow")
        ref_seg = pytorch_saved(hidden=2 * WIDTH, segments=SEGMENTS, input_requires_grad=True, square="pow")
        version = sys.modules["torch"].__version__.split("+")[0]
        c = COURSE
        print(f"The course's reference figures match a 256 -> 512 -> 256 block with x requiring grad and y.pow(2), "
              f"in torch {version}:")
        print(f"   no checkpointing: {ref['tensors']} tensors, {human_bytes(ref['bytes'])}, {ref['block_calls']} block "
              f"calls  (the course: {c['tensors']} / {c['mib']:.2f} MiB / {c['block_calls']})")
        print(f"   checkpoint_sequential({SEGMENTS}): {ref_seg['tensors']} tensors, {human_bytes(ref_seg['bytes'])}, "
              f"{ref_seg['block_calls']} block calls  (the course: {c['checkpointed_tensors']} / "
              f"{c['checkpointed_mib']:.2f} MiB / {c['checkpointed_block_calls']};")
        print(f"   the reference's {c['checkpointed_tensors']} is {ref_seg['tensors']} + "
              f"{c['checkpointed_tensors'] - ref_seg['tensors']} empty tensors, one per checkpointed segment: "
              f"{SEGMENTS - 1} of {SEGMENTS}, the last runs plainly)")
        print("   Where those empty tensors come from, read from torch/utils/checkpoint.py of earlier 2.x releases "
              "(not measured")
        print("   here): their non-reentrant checkpoint saved an empty `dummy` tensor beside each segment's inputs; "
              f"torch {version}")
        print(f"   (measured above: {ref_seg['tensors']} tensors) saves the inputs without it.")
        figures["pytorch"] = {"same_model": same, "same_model_checkpointed": seg, "reference_model": ref,
                              "reference_model_checkpointed": ref_seg}
    if out is not None:
        print(f"\nFiles (--out {out}):")
        figures["files"] = write_files(out, params, x)
    else:
        print("\nPictures: --out DIR writes the memory timelines, diagrams and an HTML report; "
              "notebooks/e_saved_tensors_memory_checkpointing.py shows them inline.")
    return figures


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", metavar="DIR", help="write memory timelines, diagrams and an HTML report into DIR")
    main(ap.parse_args().out)
