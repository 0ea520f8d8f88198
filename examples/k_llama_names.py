"""K. A Llama trained on names: a Hugging Face model captured by gradir, trained next to PyTorch.

The model is Hugging Face's `LlamaForCausalLM`, built from a small config (random initialisation,
nothing downloaded): two decoder layers of RMSNorm, rotary position embeddings, grouped-query attention
(4 query heads sharing 2 key/value heads) and a SwiGLU MLP, 77,504 float32 weights. It is trained as
a character-level language model on names.txt in makemore's way: each example is a block of 8
characters (padded with '.', the boundary token) and the character that follows; the model reads the
block and its logits at the last position predict the next character.

`gr.from_torch` captures the module (torch.export at the level of core ATen ops, replayed through
gradir's ATen -> gradir table), the loss is gradir's cross-entropy, and `gr.train` trains it: one
compiled LLVM step (the loss, its gradient and `gr.optim.adam`'s update), a progress bar, a loss plot
and a checkpoint. The same run happens in PyTorch beside it: the same initial weights (the torch model
itself: from_torch copied them), the same batches, `torch.optim.Adam` with the same settings.

Why the curves match, and where they part: both runs do the same float32 arithmetic, but not in the same
order (matrix products sum in other blocks; exp, cos and sin come from other libraries), so from the first
update on the losses differ by about a float32 ulp (~1e-7 relative). Training amplifies that difference
about tenfold every 50 steps (the lower panel of the plot is a straight line on its log axis): the curves
agree within 1e-6 for the first 150 steps and part (differ by more than 1e-3) at step 364. From there on
they are two runs of the same training: batch losses a few percent apart, the mean of the last 200 of
2000 steps 0.2% apart, the held-out losses 0.8%. Nothing in either program is wrong when they part.
float64 (`--dtype float64`) does not move that step: transformers' Llama computes RMSNorm and the rotary
tables in float32 whatever the model's dtype (an upcast meant for float16), so a float64 run starts
1e-10 apart yet parts at step 361 (`gr.from_torch(..., float32_as=np.float64)` would make gradir's side
float64 throughout, but not the PyTorch model it is compared with).

It prints the capture (ATen nodes, the gradir graph and the ops Llama's pieces became), the compiled
step (IR nodes, fused kernels, arena), both loss curves side by side with their relative difference,
the held-out loss of both models, and names sampled from each with the same random numbers.
With `out` it writes gr.train's checkpoint and loss plot, and both curves on one plot.

Run:  python examples/k_llama_names.py [--steps 2000] [--out out/k_llama] [--dtype float32|float64]

The LLVM step's matrix products call SciPy's OpenBLAS, which runs them on its own threads; for matrices
this small on a machine busy with other work, `OPENBLAS_NUM_THREADS=1` made a step 8x faster (3.7 ms
against 31 ms on two shared cores; PyTorch on one thread: 7-12 ms).
"""

from __future__ import annotations

import argparse
import io
import pathlib
import random
import sys
import time
from collections import Counter

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from matplotlib.figure import Figure

import gradir as gr
from gradir.passes.fusion import NUMPY, kernel_header
from gradir.passes.report import human_bytes
from gradir.util.fileio import write_atomic

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from f_makemore_backprop import DEFAULT_DATA, build_dataset, load_words, vocabulary  # noqa: E402 - makemore's data

BLOCK, BATCH = 8, 32  # characters of context, examples per step
LR = 3e-3  # Adam's learning rate (betas 0.9/0.999, eps 1e-8: both libraries' defaults)
SEED = 0
CLOSE, END = 1e-3, 0.02  # the curves agree within CLOSE (relative) for the first 100 steps; their ends within END
SHOW = 12  # sampled names printed per model
HELD_OUT = 4096  # held-out pairs the final loss is measured on (128 calls of the captured batch shape)


class NextChar(torch.nn.Module):
    """A causal LM as a next-character model: the logits at the last position of each block."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, idx):
        return self.lm(input_ids=idx, logits_to_keep=1).logits[:, -1]  # logits_to_keep: lm_head on that one only


def build_model(vocab: int, dtype: str = "float32", seed: int = SEED) -> NextChar:
    """A small Llama from a transformers config, random initialisation (torch.manual_seed(seed))."""
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=BLOCK,
                                   bos_token_id=0, eos_token_id=0, tie_word_embeddings=False, use_cache=False)
    return NextChar(transformers.LlamaForCausalLM(cfg)).to(getattr(torch, dtype))


def load(path) -> dict:
    """makemore's 90/10 train/held-out split by word (random.seed(42) shuffle), as (block, next char) pairs;
    the first HELD_OUT held-out pairs are kept (the held-out loss is a mean: 4,096 pairs pin it to ~0.02)."""
    words = load_words(path)
    stoi = vocabulary(words)
    random.Random(42).shuffle(words)
    n = int(0.9 * len(words))
    train, val = (build_dataset(w, stoi, BLOCK) for w in (words[:n], words[n:]))
    # whole batches (the captured model has the batch shape it was captured at), at most HELD_OUT pairs
    m = min(HELD_OUT, len(val[0]) // BATCH * BATCH)
    return {"train": train, "val": (val[0][:m], val[1][:m]), "itos": {i: c for c, i in stoi.items()}}


def batch_indices(n: int, steps: int, seed: int = SEED) -> np.ndarray:
    """The training examples of every step, (steps, BATCH): both runs read the same ones."""
    return np.random.default_rng(seed).integers(0, n, (steps, BATCH))


def gradir_loss(f):
    """Cross-entropy, in gradir, over the captured model `f(params, idx)`."""
    def loss(params, idx, targets):
        return gr.nn.cross_entropy(f(params, idx), targets)
    return loss


def train_torch(model, X, Y, batches) -> tuple[list[float], float]:
    """The PyTorch run: torch.optim.Adam with the same settings on the same batches; (losses, seconds)."""
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    losses, t0, threads = [], time.perf_counter(), torch.get_num_threads()
    # one thread: matrices of 32 x 64 gain nothing from more, and on a busy machine threads that wait for each
    # other made a step 30x slower
    torch.set_num_threads(1)
    try:
        for ix in batches:
            loss = F.cross_entropy(model(torch.from_numpy(X[ix])), torch.from_numpy(Y[ix]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    finally:
        torch.set_num_threads(threads)
    return losses, time.perf_counter() - t0


def sample(probs, itos: dict, n_rows: int, seed: int, max_len: int = 20) -> list[str]:
    """Names from `probs(context) -> (rows, vocab)` probabilities, one per row, makemore's way: start from a
    block of '.', draw the next character, slide the block, stop at '.'. The draws are inverse-CDF from one
    seeded generator's uniforms, so two models given the same seed make the same choices where they agree."""
    rng = np.random.default_rng(seed)
    ctx = np.zeros((n_rows, BLOCK), dtype=np.int64)
    out = [[] for _ in range(n_rows)]
    done = np.zeros(n_rows, dtype=bool)
    for _ in range(max_len):
        p = np.asarray(probs(ctx), dtype=np.float64)
        cdf = np.cumsum(p, axis=1)
        u = rng.random(n_rows) * cdf[:, -1]
        ix = np.minimum((cdf < u[:, None]).sum(axis=1), p.shape[1] - 1)
        for r in np.flatnonzero(~done):
            if ix[r] == 0:
                done[r] = True
            else:
                out[r].append(itos[int(ix[r])])
        if done.all():
            break
        ctx = np.concatenate([ctx[:, 1:], ix[:, None]], axis=1)
    return ["".join(chars) for chars in out]


def compare(gl: np.ndarray, tl: np.ndarray) -> dict:
    """The figures of the two curves: the largest relative difference over the first 100 steps, the first
    step where they differ by more than CLOSE, and their ends (the mean of the last tenth of the steps)."""
    rel = np.abs(gl - tl) / np.abs(tl)
    parted = np.flatnonzero(rel > CLOSE)
    w = max(1, len(gl) // 10)
    end_g, end_t = float(gl[-w:].mean()), float(tl[-w:].mean())
    return {"rel": rel, "max_rel_first_100": float(rel[:100].max()), "parted_at": int(parted[0]) if parted.size else None,
            "end_window": w, "end_gradir": end_g, "end_torch": end_t, "end_rel": abs(end_g - end_t) / abs(end_t)}


def plot_curves(path, gl: np.ndarray, tl: np.ndarray, rel: np.ndarray, title: str) -> pathlib.Path:
    """Both loss curves on one axis, their relative difference below (log scale, with the CLOSE line; steps
    where the losses are equal are drawn at 1e-9); written atomically."""
    fig = Figure(figsize=(7, 5.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[2, 1])
    top.plot(tl, lw=1.6, color="tab:orange", label="PyTorch")
    top.plot(gl, lw=0.8, color="tab:blue", label="gradir (gr.train, LLVM)")
    top.set(ylabel="batch loss", title=title)
    top.legend(loc="upper right")
    bottom.semilogy(np.maximum(rel, 1e-9), lw=0.8, color="tab:gray")
    bottom.axhline(CLOSE, color="tab:red", lw=0.8, ls="--", label=f"{CLOSE:g}")
    bottom.set(xlabel="step", ylabel="|gradir - torch| / torch")
    bottom.legend(loc="lower right")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format=pathlib.Path(path).suffix.lstrip(".") or "svg", metadata={"Date": None})
    return write_atomic(path, buf.getvalue())


def kernel_text(prog, kernel) -> str:
    """One kernel's lines of the fused program's listing (its header and the IR nodes it covers)."""
    lines = str(prog).splitlines()
    start = lines.index(kernel_header(kernel, prog))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")), len(lines))
    return "\n".join(lines[start:end])


def main(steps: int = 2000, out: str | None = "out/k_llama", *, dtype: str = "float32", data=DEFAULT_DATA,
         verbose: bool = True, progress: bool = True) -> dict:
    """Capture, train (gradir and PyTorch), compare, sample; files into `out` (None: no files). Returns the figures."""
    say = print if verbose else (lambda *a, **k: None)
    d = load(data)
    (X, Y), (Xv, Yv), itos = d["train"], d["val"], d["itos"]
    model = build_model(len(itos), dtype)
    batches = batch_indices(len(X), steps)

    say(f"== K. a Llama on names: Hugging Face's LlamaForCausalLM, {sum(p.numel() for p in model.parameters()):,} "
        f"{dtype} weights, trained on {len(X):,} (block of {BLOCK} characters -> next character) pairs ==")
    f, params = gr.from_torch(model, torch.from_numpy(X[batches[0]]))
    loss = gradir_loss(f)
    forward = gr.trace(loss, params, X[batches[0]], Y[batches[0]])
    ops = Counter(n.op for n in forward.nodes)
    say(f"\n1. The capture ({f.capture}): {sum(n.op == 'call_function' for n in f.graph.nodes)} core ATen nodes "
        f"replayed as {len(forward.nodes)} gradir nodes for the loss. Llama's pieces are visible in the op counts: "
        f"RMSNorm as rsqrt ({ops['rsqrt']}), rotary embeddings as cos/sin ({ops['cos']}/{ops['sin']}), SwiGLU's "
        f"SiLU as sigmoid ({ops['sigmoid']}), attention as matmul ({ops['matmul']}) and softmax's exp ({ops['exp']}).")
    say("   most used ops: " + ", ".join(f"{op} {k}" for op, k in ops.most_common(8)))

    files = {}
    opt = gr.optim.adam(LR)
    val_loss = gr.compile(loss)  # the same loss, compiled for evaluation (no gradient)

    def held_out(p) -> float:  # the mean loss over the held-out pairs, a batch at a time (the captured shape)
        return float(np.mean([val_loss(p, Xv[i:i + BATCH], Yv[i:i + BATCH]) for i in range(0, len(Xv), BATCH)]))

    if out is not None:
        out = pathlib.Path(out)
        out.mkdir(parents=True, exist_ok=True)  # gr.train writes into an existing folder only
        files = {"checkpoint": out / "llama_names.npz", "train_plot": out / "llama_names_loss.svg"}
    result = gr.train(loss, params, opt, lambda k: (X[batches[k]], Y[batches[k]]), steps=steps,
                      eval_fn=lambda p: {"held-out": held_out(p)}, checkpoint=files.get("checkpoint"),
                      resume=False,  # the PyTorch run starts from step 0: so does this one
                      plot=files.get("train_plot"), progress=progress)
    gl = np.array([v for _, v in result.losses])

    state0 = opt.init(params)
    exe = result.step_fn.executable(params, state0, X[batches[0]], Y[batches[0]])
    prog = exe.program
    kinds = Counter(k.kind for k in prog.kernels)
    say(f"\n2. The compiled step (gr.train's one program: loss, gradient, Adam): "
        f"{len(result.step_fn.graph(params, state0, X[batches[0]], Y[batches[0]]).nodes)} IR nodes fused into "
        f"{len(prog.kernels)} kernels ({', '.join(f'{n} {k}' for k, n in kinds.most_common())}), one arena of "
        f"{human_bytes(prog.arena_bytes)}. Kernels the LLVM backend does not lower run as NumPy between the others:")
    for k in prog.kernels:
        if k.kind == NUMPY:
            say(f"   {kernel_header(k, prog)}")
    rms = next(k for k in prog.kernels if any(n.op == "rsqrt" for n in k.nodes))
    say("   The kernel of the first RMSNorm, as the listing shows it (each IR node, the pass it runs in, what is "
        "stored): a row loop, one pass for the mean square, one to scale; the nodes numbered past the forward's "
        "belong to the backward, computed here while their inputs are at hand:")
    say("\n".join("   " + line for line in kernel_text(prog, rms).splitlines()))
    say(f"   {steps} steps took {result.seconds:.1f} s with gradir (compile and held-out evaluation included; "
        "OpenBLAS's threads: see the docstring)")

    tl, torch_seconds = train_torch(model, X, Y, batches)
    tl = np.array(tl)
    c = compare(gl, tl)
    with torch.no_grad():
        torch_val = F.cross_entropy(model(torch.from_numpy(Xv)), torch.from_numpy(Yv)).item()
    gr_val = result.evals[-1][1]["held-out"]
    say(f"   and {torch_seconds:.1f} s with PyTorch (eager, one thread)")

    say("\n3. The two loss curves (batch loss per step; the same weights, batches and Adam settings):")
    say(f"   {'step':>6s} {'gradir':>10s} {'PyTorch':>10s} {'rel. diff':>10s}")
    for k in sorted({0, 1, 10, 50, 99, 150, 200, 500, 1000, steps - 1} & set(range(steps))):
        say(f"   {k:6d} {gl[k]:10.6f} {tl[k]:10.6f} {c['rel'][k]:10.1e}")
    parted = ("they never differ by more than that" if c["parted_at"] is None
              else f"they first differ by more than that at step {c['parted_at']}")
    say(f"   largest relative difference over the first {min(100, steps)} steps: {c['max_rel_first_100']:.1e} "
        f"(within {CLOSE:g}); {parted}.")
    say(f"   mean of the last {c['end_window']} steps: gradir {c['end_gradir']:.4f}, PyTorch {c['end_torch']:.4f} "
        f"({c['end_rel']:.2%} apart; within {END:.0%}). Held-out loss ({len(Yv):,} pairs): gradir {gr_val:.4f}, "
        f"PyTorch {torch_val:.4f}.")
    say("   Rounding makes the difference: float32 arithmetic in another order (in a float64 model too: Llama's "
        "RMSNorm and rotary tables run in float32) starts it at an ulp, and training amplifies it about tenfold "
        "every 50 steps until the two runs are two samples of the same training.")

    params_for_sampling = result.params
    if out is not None:
        ck = gr.train.load_checkpoint(files["checkpoint"])
        params_for_sampling = ck.params  # what a later session would sample from
        files["curves"] = plot_curves(out / "llama_names_vs_torch.svg", gl, tl, c["rel"],
                                      f"Llama on names, {dtype}: gradir and PyTorch, the same batches")
    probs = gr.compile(lambda p, idx: gr.nn.softmax(f(p, idx), axis=-1))
    names = sample(lambda ctx: probs(params_for_sampling, ctx), itos, BATCH, seed=SEED)
    with torch.no_grad():
        torch_names = sample(lambda ctx: F.softmax(model(torch.from_numpy(ctx)), -1).numpy(), itos, BATCH, seed=SEED)
    same = sum(a == b for a, b in zip(names, torch_names))
    say(f"\n4. Names sampled from each model with the same random numbers ({same} of {BATCH} identical: "
        "where the weights still agree, so do the choices):")
    say("   gradir:  " + " ".join(n or "''" for n in names[:SHOW]))  # '' : a name ended at once
    say("   PyTorch: " + " ".join(n or "''" for n in torch_names[:SHOW]))
    if out is not None:
        say(f"\nfiles: checkpoint {files['checkpoint']} (step {ck.step}; gr.train.load_checkpoint reads it back, "
            f"the names above came from it), gr.train's loss plot {files['train_plot']}, "
            f"both curves {files['curves']}")
    return {"capture": f.capture, "aten_nodes": sum(n.op == "call_function" for n in f.graph.nodes),
            "forward_nodes": len(forward.nodes), "kernels": len(prog.kernels), "numpy_kernels": kinds[NUMPY],
            "steps": steps, "dtype": dtype, "losses": gl.tolist(), "torch_losses": tl.tolist(),
            "max_rel_first_100": c["max_rel_first_100"], "parted_at": c["parted_at"], "end_rel": c["end_rel"],
            "end_gradir": c["end_gradir"], "end_torch": c["end_torch"], "val_gradir": gr_val, "val_torch": torch_val,
            "seconds": result.seconds, "torch_seconds": torch_seconds, "samples": names, "torch_samples": torch_names,
            "same_samples": same, "files": {k: str(v) for k, v in files.items()}, "batches": batches}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000, help="training steps of batch 32")
    ap.add_argument("--out", metavar="DIR", default="out/k_llama", help="checkpoint and plots go here")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="path to names.txt")
    a = ap.parse_args()
    main(a.steps, a.out, dtype=a.dtype, data=a.data)
