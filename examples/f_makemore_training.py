"""F. The makemore MLP trained by gradir: one compiled step with gr.optim.sgd.

The model and data are those of `f_makemore_backprop.py` (names.txt, block 3, n_embd 10, n_hidden
200: 12,297 parameters; BatchNorm with the batch's unbiased statistics, tanh, cross-entropy). There
the gradients are written by hand; here the whole training step is one program `gr.compile` makes:
the loss and its gradient (`gr.value_and_grad`), the SGD update (`gr.optim.sgd` with a step
schedule: lr 0.1 for the first half of the steps, 0.01 after) and the running BatchNorm statistics
(momentum 0.001), compiled once by the LLVM backend and called once per batch of 32. Initialisation
and batches come from the same generator as the hand-derived run, so the first update is checked
against the hand-written backward (they agree to rounding).

The reference run of 200,000 steps reached train 2.0713 / val 2.1105; this program with
`--steps 200000` (about a minute, LLVM backend, one core) reached train 2.0728 / val 2.1144, as the
hand-derived run of the companion example does from the same initialisation and batches. The course
drew its initialisation and batches from its own generator: with `--seed 1`, `2`, `3` this program
gives train 2.0730 / 2.0704 / 2.0735 and val 2.1114 / 2.1137 / 2.1140, a spread that holds the course's
train figure and comes within 0.001 of its val figure. The default is a short run.

With `--out DIR` it writes the batch loss per step and the final train/val losses as a plot
(`gr.train.plot_losses`, written atomically) and prints its path.

Run:  python examples/f_makemore_training.py [--data ../shared/data/names.txt] [--steps 2000] [--out DIR]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

import gradir as gr

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from f_makemore_backprop import (  # noqa: E402 - the model, data and hand-written backward of the companion example
    COURSE,
    DEFAULT_DATA,
    EPS,
    SEED,
    backward_by_hand,
    evaluate,
    forward_np,
    init_params,
    n_params,
    reference_200k_line,
    sample_batch,
    splits,
    the_course,
)

MOMENTUM = 0.001  # of the running BatchNorm statistics


def loss_and_stats(p, Xb, Yb):
    """The model's loss on a batch, and the batch's BatchNorm mean and unbiased variance."""
    n = Xb.shape[0]
    hpre = p["C"][Xb].reshape(n, -1) @ p["W1"] + p["b1"]
    mean = gr.mean(hpre, axis=0, keepdims=True)
    var = gr.var(hpre, axis=0, keepdims=True, ddof=1)
    h = gr.tanh(p["bngain"] * (hpre - mean) * (var + EPS) ** -0.5 + p["bnbias"])
    return gr.nn.cross_entropy(h @ p["W2"] + p["b2"], Yb), mean, var


def make_step(opt):
    """One training step as one function: loss and gradient, the optimizer's update, running statistics."""
    value_and_grad = gr.value_and_grad(lambda p, X, Y: loss_and_stats(p, X, Y)[0])

    def step(p, state, bnmean, bnvar, Xb, Yb):
        loss, grads = value_and_grad(p, Xb, Yb)
        _, mean, var = loss_and_stats(p, Xb, Yb)  # the same nodes as inside the loss: cleanup merges them
        p, state = opt.update(grads, state, p)
        bnmean = (1 - MOMENTUM) * bnmean + MOMENTUM * mean
        bnvar = (1 - MOMENTUM) * bnvar + MOMENTUM * var
        return loss, p, state, bnmean, bnvar
    return step


def train(data: dict, vocab: int, steps: int, n_hidden: int = 200, backend: str = "llvm", log_every: int = 0,
          seed: int = SEED) -> dict:
    rng = np.random.default_rng(seed)
    p = init_params(vocab, n_hidden, rng)
    opt = gr.optim.sgd(gr.optim.step_lr(0.1, step_size=max(1, steps // 2), gamma=0.1))
    state = opt.init(p)
    bnmean, bnvar = np.zeros((1, n_hidden)), np.ones((1, n_hidden))
    step = gr.compile(make_step(opt), backend=backend)
    Xtr, Ytr = data["train"]
    losses, first_update = [], None
    t0 = time.perf_counter()
    for i in range(steps):
        Xb, Yb = sample_batch(Xtr, Ytr, rng)
        before = p
        loss, p, state, bnmean, bnvar = step(p, state, bnmean, bnvar, Xb, Yb)
        if i == 0:  # the same update from the hand-written backward of the companion example
            d = backward_by_hand(before, forward_np(before, Xb, Yb), Xb, Yb)
            first_update = max(float(np.max(np.abs(p[k] - (before[k] - 0.1 * d[k])))) for k in p)
        losses.append(float(loss))
        if log_every and (i % log_every == 0 or i == steps - 1):
            print(f"   step {i:7d}/{steps}: batch loss {losses[-1]:.4f}")
    seconds = time.perf_counter() - t0
    ev = {k: evaluate(p, *data[k], bnmean, bnvar) for k in ("train", "val")}
    k = max(1, min(50, steps // 10))
    return {"n_params": n_params(p), "steps": steps, "seconds": seconds, "first_update_vs_hand": first_update,
            "first_losses": float(np.mean(losses[:k])), "last_losses": float(np.mean(losses[-k:])), "window": k,
            "eval": ev, "losses": losses, "compiled_once": step.cache_size == 1}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="path to names.txt")
    ap.add_argument("--steps", type=int, default=2000, help="training steps (reference run: 200000)")
    ap.add_argument("--backend", default="llvm", choices=("llvm", "numpy"))
    ap.add_argument("--seed", type=int, default=SEED, help="initialisation and batches (default: the companion's)")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--out", metavar="DIR", help="write the loss-curve plot into DIR")
    args = ap.parse_args(argv)
    if not pathlib.Path(args.data).is_file():
        ap.error(f"names.txt not found at {args.data} (pass --data)")
    data, vocab = splits(args.data)
    verbose = not args.quiet
    if verbose:
        print(f"Training the makemore MLP (n_hidden 200) for {args.steps:,} steps of batch 32 with one compiled step:\n"
              f"value_and_grad, gr.optim.sgd (lr 0.1, then 0.01 from step {max(1, args.steps // 2):,}) and the running "
              "BatchNorm statistics")
    f = train(data, vocab, args.steps, backend=args.backend, log_every=(max(1, args.steps // 10) if verbose else 0),
              seed=args.seed)
    if verbose:
        print(f"makemore MLP, {f['n_params']:,} parameters{the_course(COURSE['params_200'])}, {f['steps']:,} steps of one "
              f"compiled training step ({args.backend}): {f['seconds']:.1f} s, {f['steps'] / f['seconds']:,.0f} steps/s")
        print(f"   first update vs the hand-written backward: max |difference| {f['first_update_vs_hand']:.1e}")
        print(f"   batch loss: first {f['window']} steps {f['first_losses']:.4f}, last {f['window']} {f['last_losses']:.4f}")
        print(f"   with the running BatchNorm statistics: train {f['eval']['train']:.4f}, val {f['eval']['val']:.4f}"
              f"\n   {reference_200k_line()}")
    if args.out is not None:
        path = gr.train.plot_losses(pathlib.Path(args.out) / "makemore_loss.svg", list(enumerate(f["losses"])),
                                    evals=[(f["steps"], f["eval"])],
                                    title=f"makemore MLP: batch loss per step, train/val after {f['steps']:,} steps")
        f["files"] = {"curves": str(path)}
        if verbose:
            print(f"   loss curve: {path}")
    elif verbose:
        print("Pictures: --out DIR writes the loss curve; notebooks/f_training_and_optimizers.py shows it inline.")
    return f


if __name__ == "__main__":
    main()
