"""J (part 2). The engine's dependency rule, probes on the small decoder, and counting from the IR.

1. The dependency rule, printed by gradir's own schedule. `x = sin(w)` is used twice: branch A
   `tanh(x)`, branch B `exp(x)`, then `add`, then `sum` (the loss). In the backward graph the two
   contributions to x's gradient meet in an explicit accumulation node (an `add` in scope `x`,
   dependency count 2, one per branch), and sin's rule (`g * cos(w)`, the node that consumes x's
   gradient) waits on it. The schedule (`gr.trace_grad(...).schedule`, engine policy) lists, step by
   step, which counts each node decremented and the ready queue after it: the accumulation's count
   goes 2 -> 1 when branch B's rule finishes and 1 -> 0 when branch A's does; only then does x's
   consumer run. (`cos(w)` reads only the saved w: it is ready from the start.)
   AccumulateGrad, seen from the eager `gr.Tensor`: the first backward assigns w.grad; a second one
   adds into the same tensor in place (a reference held from the first call sees 2x); setting
   `w.grad = None` makes the next backward assign a fresh tensor again (the held one keeps 2x).
2. Probes on the small decoder of example I (`i_small_decoder.py`, imported: 2 pre-LN blocks,
   2 heads of width 7, vocab 16, context 8, batch 2, 5,432 float64 weights). Its forward is re-expressed
   here with a zero "tap" added to each residual state (embeddings, after each attention and each MLP),
   so `gr.grad` with respect to the taps is the gradient at each residual state; the loss is the same.
   - gradient norms at each residual state from the top block down to the embeddings;
   - per-head gradient-slice norms of the Q, K and V weights (rows h*7:(h+1)*7 of each (out, in) matrix);
   - a step of fixed length 0.01 against the normalised gradient (all weights as one vector) lowers
     the loss, the same step along it raises it; the central difference of the two, divided by 0.02,
     is (to O(step^2)) the gradient's norm (the directional derivative along the gradient).
   The course did these on GPT-2 (3.434449 -> 3.421283 against, 3.447407 along); those figures need
   GPT-2, the inequalities do not.
3. Counting from the IR, on the same decoder (forward traced with `gr.scope("block0")` etc.):
   - what a training forward keeps per sequence per block: the saved-tensor report
     (`gr.trace_grad(...).saved`) grouped by each saved value's scope; elements of new memory
     (activations; a view counts its buffer once, as the report's `new` bytes do) divided by the batch.
     Compared with what fused LayerNorm / softmax / GELU rules keep (PyTorch's autograd, counted with
     its own saved-tensor hooks on the same decoder written in torch), and why the course's reference
     trainer's 2,320 is another figure again.
   - FLOPs per token of a training step (forward + backward, not the optimizer update), read off the
     forward and backward programs with each primitive's cost from the op library
     (`get_primitive(op).cost(...)`: 2*m*n*k per matmul, one per output element for elementwise ops and
     reductions), against the 6N rule (2N forward, 4N backward).

With `--out DIR` it writes the two-branch graph's report (`GradTrace.render`): the joint diagram, whose
backward nodes show their schedule step and initial dependency count, and the HTML page whose player
steps through the schedule (x's accumulation waits at count 2, then 1, then runs).

Run:  python examples/j_engine_probes_counting.py [--out DIR]
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
from collections import Counter, defaultdict

import numpy as np

import gradir as gr
from gradir.core.primitive import get_primitive
from gradir.passes.report import value_names

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import i_small_decoder as DEC  # noqa: E402 - the small decoder of example I

STEP = 0.01  # length of the probe step along / against the normalised gradient
W0 = np.array([0.5, -1.0])  # the engine example's input
COURSE_SAVED_PER_BLOCK = 2320
# The course's figures (TEACHING.md, section J), printed beside ours: its GPT-2 step probe and the FLOPs rule
COURSE = {"probe": {"unchanged": 3.434449, "against": 3.421283, "along": 3.447407}, "flops_rule": "6N (2N + 4N)"}


# -- 1. the engine's dependency rule --------------------------------------------------------------------


def two_branches(w):
    """x = sin(w) used twice: branch A tanh(x), branch B exp(x), added, summed."""
    with gr.scope("x"):
        x = gr.sin(w)
    with gr.scope("branch A"):
        a = gr.tanh(x)
    with gr.scope("branch B"):
        b = gr.exp(x)
    with gr.scope("add"):
        s = a + b
    with gr.scope("loss"):
        return gr.sum(s)


def engine_rule() -> dict:
    j = gr.trace_grad(two_branches, W0)
    sched = j.schedule
    d = sched.to_dict()
    name = value_names(j.backward)
    by_scope = defaultdict(list)
    for v in j.backward.nodes:
        by_scope[v.scope].append(v)
    acc = next(v for v in by_scope[("x",)] if v.op == "add")            # the two contributions meet here
    consumer = next(v for v in by_scope[("x",)] if v.op == "multiply" and acc in set(v.inputs))  # sin's rule
    ran_at = {s["node"]: s["step"] for s in d["steps"]}
    last = {b: max(ran_at[name[v]] for v in by_scope[(b,)]) for b in ("branch A", "branch B")}
    acc_counts = [(s["step"], s["node"], e["count"]) for s in d["steps"] for e in s["decremented"]
                  if e["node"] == name[acc]]
    grad = j.run(W0)[1][0]
    return {"schedule": sched, "schedule_dict": d, "backward": str(j.backward), "acc": name[acc],
            "consumer": name[consumer], "initial_counts": d["initial_counts"], "acc_decrements": acc_counts,
            "acc_ran": ran_at[name[acc]], "consumer_ran": ran_at[name[consumer]], "branch_last": last,
            "grad": np.asarray(grad), "grad_api": np.asarray(gr.grad(two_branches)(W0))}


def accumulate_grad() -> dict:
    """AccumulateGrad's contract on the eager Tensor: accumulate in place; after .grad = None, assign."""
    w = gr.Tensor(W0.copy(), requires_grad=True)

    def backward():
        x = gr.sin(w)
        (gr.tanh(x) + gr.exp(x)).sum().backward()

    backward()
    held = w.grad
    first = held.numpy().copy()
    backward()
    second = w.grad.numpy().copy()
    same_after_second = w.grad is held
    w.grad = None
    backward()
    third = w.grad.numpy().copy()
    return {"first": first, "second": second, "second_same_tensor": same_after_second,
            "held_after_second": held.numpy().copy(), "third": third, "third_same_tensor": w.grad is held,
            "held_after_third": held.numpy().copy()}


# -- 2. probes on the decoder ---------------------------------------------------------------------------

STATES = ["embeddings (x0)", "block 0 + attention", "block 0 + MLP", "block 1 + attention", "block 1 + MLP (top)"]


def forward(p, tokens, targets, taps=None):
    """Example I's loss, written out with a scope per block and, when `taps` is given, a zero tap added
    to each residual state (d loss / d tap = d loss / d residual state)."""
    def tap(x, k):
        return x if taps is None else x + taps[k]

    with gr.scope("embed"):
        x = tap(gr.nn.embedding(p["tok_emb"], tokens) + p["pos_emb"], 0)
    for i in range(DEC.BLOCKS):
        with gr.scope(f"block{i}"):
            h = gr.nn.layer_norm(x, p[f"b{i}.ln1_w"], p[f"b{i}.ln1_b"], eps=DEC.EPS)
            x = tap(x + DEC.attention(p, i, h), 2 * i + 1)
            h = gr.nn.layer_norm(x, p[f"b{i}.ln2_w"], p[f"b{i}.ln2_b"], eps=DEC.EPS)
            x = tap(x + DEC.mlp(p, i, h), 2 * i + 2)
    with gr.scope("head"):
        x = gr.nn.layer_norm(x, p["lnf_w"], p["lnf_b"], eps=DEC.EPS)
        return gr.nn.cross_entropy(x @ gr.transpose(p["tok_emb"]), targets)


def probes(params, tokens, targets) -> dict:
    taps = [np.zeros((DEC.BATCH, DEC.T, DEC.D)) for _ in STATES]
    loss, (grads, tap_grads) = gr.value_and_grad(forward, argnums=(0, 3))(params, tokens, targets, taps)
    grads = {k: np.asarray(v) for k, v in grads.items()}
    residual_norms = [float(np.linalg.norm(g)) for g in tap_grads]
    heads = {}
    for i in range(DEC.BLOCKS):
        for w in "qkv":
            g = grads[f"b{i}.w{w}"]
            heads[(i, w.upper())] = [float(np.linalg.norm(g[h * DEC.HD:(h + 1) * DEC.HD])) for h in range(DEC.HEADS)]
    keys = sorted(grads)
    gnorm = math.sqrt(sum(float(np.sum(grads[k] ** 2)) for k in keys))

    def moved(sign):
        return {k: params[k] + sign * STEP * grads[k] / gnorm for k in keys}

    against = float(DEC.loss_fn(moved(-1.0), tokens, targets))
    along = float(DEC.loss_fn(moved(+1.0), tokens, targets))
    return {"loss": float(loss), "loss_example_i": float(DEC.loss_fn(params, tokens, targets)),
            "residual_norms": residual_norms, "tap_grads": [np.asarray(g) for g in tap_grads], "head_norms": heads,
            "grads": grads, "grad_norm": gnorm, "norms_grow_downwards": all(
                a > b for a, b in zip(residual_norms, residual_norms[1:])), "loss_against": against, "loss_along": along,
            "directional": (along - against) / (2 * STEP)}


# -- 3. counting from the IR ----------------------------------------------------------------------------


def saved_per_block(params, tokens, targets) -> dict:
    j = gr.trace_grad(forward, params, tokens, targets)
    names = value_names(j.forward)
    value_of = {names[v]: v for v in j.forward.all_values()}
    groups = defaultdict(list)
    for e in j.saved.entries:
        v = value_of[e.name]
        groups["/".join(v.scope) or ("parameters and data" if e.kind == "input" else "(no scope)")].append(e)
    itemsize = np.dtype(np.float64).itemsize
    summary = {}
    for g, entries in groups.items():
        summary[g] = {"count": len(entries), "kinds": dict(Counter(e.kind for e in entries)),
                      "new_bytes": sum(e.new_bytes for e in entries),
                      "elements_per_sequence": sum(e.new_bytes for e in entries) // itemsize // DEC.BATCH}
    block0 = [e for e in groups["block0"] if e.new_bytes]
    sizes = size_names()
    shape_terms = Counter(sizes.get(e.new_bytes // itemsize // DEC.BATCH, "other") for e in block0)
    return {"report": j.saved, "groups": summary, "block0_entries": block0, "block0_terms": dict(shape_terms),
            "total_count": j.saved.count, "total_bytes": j.saved.bytes, "trace": j}


def size_names() -> dict:
    T, D, H = DEC.T, DEC.D, DEC.HEADS
    return {T * D: "T*D", T * DEC.MLP: "T*4D", H * T * T: "H*T*T", T: "T", H * T: "H*T"}


def fused_per_block_by_hand() -> int:
    """What fused LayerNorm / softmax / GELU rules keep per sequence per block on this decoder (PyTorch's
    autograd): LN input, mean, rstd and output twice (2*(2*T*D + 2*T)); the q, k, v projections (3*T*D)
    the score and value matmuls read; the softmax output (H*T*T); the heads' concatenation Wo reads
    (T*D); the MLP's hidden pre-activation (GELU's input) and GELU's output (2*T*4D)."""
    T, D, H = DEC.T, DEC.D, DEC.HEADS
    return 2 * (2 * T * D + 2 * T) + 3 * T * D + H * T * T + T * D + 2 * T * DEC.MLP


def torch_decoder(params: dict, tokens, targets, blocks: int = DEC.BLOCKS):
    """Example I's decoder in torch (float64), with a number of blocks and the residual states returned
    (retain_grad on each): the oracle for the probes and PyTorch's side of the saved count."""
    import torch
    import torch.nn.functional as F

    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    B, T, D, H, HD = DEC.BATCH, DEC.T, DEC.D, DEC.HEADS, DEC.HD
    future = _future_mask()

    def heads(y):
        return y.reshape(B, T, H, HD).transpose(1, 2)

    def run():
        states = []
        x = F.embedding(torch.as_tensor(tokens), p["tok_emb"]) + p["pos_emb"]
        states.append(x)
        for i in range(blocks):
            h = F.layer_norm(x, (D,), p[f"b{i}.ln1_w"], p[f"b{i}.ln1_b"], eps=DEC.EPS)
            q, k, v = (heads(F.linear(h, p[f"b{i}.w{n}"], p[f"b{i}.b{n}"])) for n in "qkv")
            s = (q @ k.transpose(-1, -2) / math.sqrt(HD)).masked_fill(future, float("-inf"))
            o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, D)
            x = x + F.linear(o, p[f"b{i}.wo"], p[f"b{i}.bo"])
            states.append(x)
            h = F.layer_norm(x, (D,), p[f"b{i}.ln2_w"], p[f"b{i}.ln2_b"], eps=DEC.EPS)
            x = x + F.linear(F.gelu(F.linear(h, p[f"b{i}.w1"], p[f"b{i}.b1"])), p[f"b{i}.w2"], p[f"b{i}.b2"])
            states.append(x)
        logits = F.layer_norm(x, (D,), p["lnf_w"], p["lnf_b"], eps=DEC.EPS) @ p["tok_emb"].T
        loss = F.cross_entropy(logits.reshape(-1, DEC.VOCAB), torch.as_tensor(targets).reshape(-1))
        return loss, states

    return p, run


_MASK = []


def _future_mask():
    """One shared (T, T) mask of future positions, so its storage is the same in every block."""
    import torch

    if not _MASK:
        _MASK.append(~torch.tril(torch.ones(DEC.T, DEC.T, dtype=torch.bool)))
    return _MASK[0]


def torch_saved_per_block(params, tokens, targets) -> int | None:
    """Elements per sequence of new memory PyTorch's autograd keeps per block: its activation storages
    (saved-tensor hooks, `gradir.frontends.torch_saved.torch_saves`) for the 2-block decoder minus the
    1-block one. None without torch."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    from gradir.frontends.torch_saved import torch_saves

    act = {}
    for blocks in (1, 2):
        p, run = torch_decoder(params, tokens, targets, blocks)
        saves = torch_saves(lambda: run()[0], params=p)
        act[blocks] = sum(s.storage_bytes for s in saves if s.first and s.kind == "activation")
    return (act[2] - act[1]) // 8 // DEC.BATCH


def flops(trace, n_weights: int, n_matmul_weights: int) -> dict:
    """Flops of the forward and backward programs by category, from each primitive's cost rule."""
    tokens = DEC.BATCH * DEC.T
    out = {}
    for part, graph in (("forward", trace.forward), ("backward", trace.backward)):
        c = Counter()
        for v in graph.nodes:
            if v.op == "const":
                continue
            prim = get_primitive(v.op)
            cost = prim.cost(v, v.inputs, v.attrs)
            if prim.kind == "matmul":
                c["attention matmuls" if len(v.shape) == 4 else "weight matmuls"] += cost
            else:
                c["elementwise and reductions"] += cost
        out[part] = {k: n / tokens for k, n in c.items()} | {"total": sum(c.values()) / tokens}
    total = out["forward"]["total"] + out["backward"]["total"]
    return {**out, "per_token": total, "six_n": 6 * n_weights, "ratio": total / (6 * n_weights),
            "n_weights": n_weights, "n_matmul_weights": n_matmul_weights, "tokens": tokens}


def matmul_weights(params) -> int:
    """Weights that enter a matmul: the attention and MLP matrices, and tok_emb once (the tied output
    projection; the embedding lookup itself is an index, not a matmul)."""
    return sum(params[f"b{i}.w{n}"].size for i in range(DEC.BLOCKS) for n in ("q", "k", "v", "o", "1", "2")) + \
        params["tok_emb"].size


# -- main -----------------------------------------------------------------------------------------------


def main(verbose: bool = True, out=None) -> dict:
    say = print if verbose else (lambda *a, **k: None)
    params = DEC.init_params()
    tokens, targets = DEC.data()

    eng, acc = engine_rule(), accumulate_grad()
    say("== J. the engine's dependency rule, probes on the small decoder, counting from the IR ==")
    say("\n1. x = sin(w) used twice (branch A tanh, branch B exp), added, summed; w = [0.5, -1]. The backward "
        "program (scopes after @):")
    say(eng["backward"])
    counts = " ".join(f"{n}:{c}" for n, c in eng["initial_counts"].items())
    say(f"dependency counts at the start (operand edges owed; 0: ready): {counts}")
    say(eng["schedule"].text(width=100))
    dec = ", ".join(f"step {s} ({n}) -> {c}" for s, n, c in eng["acc_decrements"])
    say(f"x's gradient is accumulated by {eng['acc']} (initial count {eng['initial_counts'][eng['acc']]}: one per "
        f"branch): {dec}. Branch B's last rule ran at step {eng['branch_last']['branch B']}, branch A's at "
        f"{eng['branch_last']['branch A']}; {eng['acc']} ran at step {eng['acc_ran']} and x's consumer "
        f"{eng['consumer']} (sin's rule, count {eng['initial_counts'][eng['consumer']]}) at step "
        f"{eng['consumer_ran']}.")
    say(f"dL/dw = {eng['grad'].tolist()} (cos(w) * (1 - tanh(x)^2 + exp(x)))")
    say(f"AccumulateGrad on gr.Tensor: first backward {acc['first'].tolist()}; second {acc['second'].tolist()} "
        f"(same tensor: {acc['second_same_tensor']}, the reference held from the first call now reads "
        f"{acc['held_after_second'].tolist()}); after w.grad = None the third assigns {acc['third'].tolist()} "
        f"(same tensor: {acc['third_same_tensor']}; the held one keeps {acc['held_after_third'].tolist()}).")

    pr = probes(params, tokens, targets)
    say(f"\n2. probes on example I's decoder ({DEC.count_weights(params):,} weights), loss {pr['loss']:.12f} "
        f"(example I's own loss_fn: {pr['loss_example_i']:.12f})")
    say("   gradient norm at each residual state, top block first:")
    for k in reversed(range(len(STATES))):
        say(f"   {STATES[k]:22s} {pr['residual_norms'][k]:.6f}")
    norms = pr["residual_norms"]
    grows = all(a > b for a, b in zip(norms, norms[1:]))
    say(("   here the norm grows at every step down from the top" if grows else
         "   here the norms are not monotonic from the top down") + " (each residual state's gradient is the one "
        "passing through the skip connection plus what the block above sends back, and nothing forces that sum "
        "to grow; the course's GPT-2 run was not monotonic)")
    say("   per-head gradient-slice norms (rows of each head's 7 outputs):")
    say("   block  weight  " + "  ".join(f"head {h:<6d}" for h in range(DEC.HEADS)))
    for (i, w), norms in pr["head_norms"].items():
        say(f"   {i:5d}  {w:6s}  " + "  ".join(f"{n:11.6f}" for n in norms))
    say(f"   step of length {STEP} on all weights, |grad| = {pr['grad_norm']:.6f}: against the gradient "
        f"{pr['loss_against']:.6f}, unchanged {pr['loss']:.6f}, along {pr['loss_along']:.6f}")
    say(f"   (along - against) / {2 * STEP:g} = {pr['directional']:.6f}: the slope along the gradient, its norm")
    c = COURSE["probe"]
    lower, higher = pr["loss_against"] < pr["loss"], pr["loss"] < pr["loss_along"]
    ours = (f"both hold: {pr['loss_against']:.6f} < {pr['loss']:.6f} < {pr['loss_along']:.6f}" if lower and higher else
            f"against < unchanged {lower}, unchanged < along {higher}")
    say(f"   (the course: {c['unchanged']:.6f} -> {c['against']:.6f} against, {c['along']:.6f} along; another model, "
        f"GPT-2, not this {DEC.count_weights(params):,}-weight decoder,\n    and its own text, not these random "
        "tokens, so only the inequalities carry over: against < unchanged < along;\n    in ours " + ours + ")")

    sv = saved_per_block(params, tokens, targets)
    fused = fused_per_block_by_hand()
    torch_block = torch_saved_per_block(params, tokens, targets)
    b0 = sv["groups"]["block0"]
    say(f"\n3. saved for backward by a training forward: {sv['total_count']} values, {sv['total_bytes']:,} bytes "
        "of new memory; by scope:")
    for g, s in sv["groups"].items():
        say(f"   {g:20s} {s['count']:3d} values {s['kinds']}  new memory {s['new_bytes']:6,} B = "
            f"{s['elements_per_sequence']:5,} float64 elements per sequence")
    say(f"   per sequence per block: {b0['elements_per_sequence']:,} elements (T={DEC.T}, D={DEC.D}, H={DEC.HEADS}, "
        f"4D={DEC.MLP}); block 0's entries with new memory:")
    say(f"   {'value':6s} {'producer':12s} {'source':34s} {'elements/seq':>12s}  needed by")
    for e in sv["block0_entries"]:
        say(f"   {e.name:6s} {e.producer['op']:12s} {e.producer['source'] or '':34s} "
            f"{e.new_bytes // 8 // DEC.BATCH:12d}  {e.needed_by[0] if e.needed_by else '-'}")
    terms = " + ".join(f"{n} x {t}" for t, n in sorted(sv["block0_terms"].items()))
    say(f"   = {terms}. gradir differentiates the primitives LayerNorm, softmax and GELU are made of: LayerNorm "
        "keeps x - mean, var + eps, rstd and xhat (and its output, for the next matmul); softmax keeps exp, "
        "the row sums and the probabilities; the erf GELU keeps three T*4D terms besides its input.")
    torch_txt = f"PyTorch's autograd on the same decoder keeps {torch_block:,}" if torch_block is not None else \
        "(torch not installed: PyTorch's count skipped)"
    say(f"   Fused rules keep an op's input and a few statistics: by hand {fused:,} per sequence per block; "
        f"{torch_txt}. The course's reference trainer reported {COURSE_SAVED_PER_BLOCK:,} for its own decoder: "
        "other sizes and a count of its own, so neither figure here is expected to equal it.")

    fl = flops(sv["trace"], DEC.count_weights(params), matmul_weights(params))
    say(f"\n   FLOPs per token of one training step (forward + backward, {fl['tokens']} tokens per step), from "
        "the op library's cost rules:")
    for part, rule in (("forward", 2), ("backward", 4)):
        f = fl[part]
        detail = ", ".join(f"{k} {v:,.1f}" for k, v in f.items() if k != "total")
        say(f"   {part:8s} {f['total']:10,.1f}  ({detail})  vs {rule}N = {rule * fl['n_weights']:,}")
    say(f"   total    {fl['per_token']:10,.1f}  vs 6N = {fl['six_n']:,} (N = {fl['n_weights']:,} weights): ratio "
        f"{fl['ratio']:.4f}  (the course: {COURSE['flops_rule']}; a rule of thumb")
    say("     for weight multiply-adds only: ours counts every op of the two programs, as follows)")
    say(f"   6N charges every weight one multiply-add (2 flops) forward and two backward. Only "
        f"{fl['n_matmul_weights']:,} weights enter a matmul (2 x {fl['n_matmul_weights']:,} = "
        f"{2 * fl['n_matmul_weights']:,}, the weight matmuls above); the rest (biases, LayerNorm gains, position "
        "embeddings) cost per element, not per multiply-add. 6N leaves out the attention matmuls (scores "
        "Q K^T and probabilities times V: 4*T*D per token per block forward, the full T x T computed under "
        "the mask) and every elementwise op and reduction (LayerNorm, softmax, GELU, residual adds, the loss), "
        "large here because the model is narrow.")
    figures = {"engine": eng, "accumulate": acc, "probes": pr, "saved": sv, "fused_per_block": fused,
               "torch_per_block": torch_block, "flops": fl, "n_weights": DEC.count_weights(params)}
    if out is not None:
        written = gr.trace_grad(two_branches, W0).render(pathlib.Path(out) / "j_two_branches")
        figures["files"] = {k: str(v) for k, v in written.items()}
        say(f"\nFiles (--out {out}), .dot sources and the forward/backward diagrams beside them:")
        for key, what in (("joint.svg", "the two-branch graph, each backward node with its step and count"),
                          ("html", "the report: its player steps through the schedule")):
            if key in figures["files"]:
                say(f"   {what}: {figures['files'][key]}")
    else:
        say("\nPictures: --out DIR writes the two-branch graph's diagrams and report; "
            "notebooks/j_engine_kernels_and_rulers.py shows them inline.")
    return figures


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", metavar="DIR", help="write the two-branch graph's diagrams and report into DIR")
    main(out=ap.parse_args().out)
