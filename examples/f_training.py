"""F. Training with automatic gradients: gradient accumulation, data-parallel averaging, XOR.

(The ill-conditioned quadratic and the optimizer grids are in f_optimizers.py.)

1. Gradient accumulation with `gr.Tensor`. Setup (ours; TEACHING.md leaves it open): linear
   least squares, 7 examples with 3 features drawn with seed 0, targets X @ [1, -2, 0.5] + 0.3 plus
   noise 0.1, parameters w = 0, b = 0; loss = mean squared error. The 7 examples are split into
   microbatches of 3 and 4. Each microbatch's mean loss, weighted by 3/7 and 4/7, is backpropagated
   in turn and `.grad` accumulates: the sum equals the full-batch gradient to ~1e-16. Without the
   weights the accumulated gradient is the sum of two means, about twice the full-batch one (our
   data: norm ratio 1.90; the reference's data gave 2.01). The ratio is near 2 because both
   microbatch means are near the full-batch mean.
2. Two simulated data-parallel ranks hold 3 and 4 of the examples, each computes its mean-loss
   gradient on its own parameter replica, and an "all-reduce" combines them. The naive mean of the
   two rank means is off by (g1 - g2)/14 (relative error 0.14 on our data; 0.16 on the
   reference's); weighting by example counts (3/7, 4/7) recovers the full-batch gradient.
3. XOR: a 2-4-1 tanh MLP (17 parameters), sum of squared errors against targets -1/+1, in float64.
   Initialisation (the course's): 17 draws of `random.Random(seed).uniform(-1, 1)` filled into W1,
   b1, W2, b2 in that order, each tensor row-major in PyTorch's nn.Linear layout (W1 is (4, 2):
   out_features x in_features, and the layer computes tanh(X @ W1.T + b1)). This is the convention
   that gives the course's step-0 loss 5.260514 on seed 0 (W1 filled as (2, 4) gives 6.775364).
   A central difference on one weight checks the gradient before training. Adam (lr=0.05, betas 0.9/0.999,
   eps 1e-8, 2000 steps, PyTorch's update) on seed 0 reproduces the course's final loss 0.000089 and
   predictions -0.9973, +0.9952, +0.9948, -0.9944. Full-batch gradient descent, lr=0.5, 2000 steps, seeds
   0..9: a run is "stuck" when its final loss is >= 1 (a saturated output of the wrong sign costs (1 -
   (-1))^2 = 4 per example, so stuck runs sit near 4 or 8). The course reports 7/10 stuck (seeds 0, 4, 5, 6,
   7, 8, 9); the printout gives this machine's count. Which seeds stick depends on rounding, not only on the
   initialisation: moving one weight of seed 3's initialisation by one unit in the last place (one ulp, the
   size of one rounding difference) sends some runs to a plateau and lets others converge; the same descent
   with the four examples summed in another order (rows permuted; mathematically the same loss and
   gradient), in float32, or in PyTorch, sticks on other seeds and other counts; and so does the same
   program on another CPU, whose BLAS and NumPy pick other kernels that round differently (PyTorch float32's
   count differs between two of our machines). The step function is `gr.compile(gr.value_and_grad(loss))`;
   gradient descent is written out, Adam is `gr.optim.adam`.

4. How one XOR step's backward runs: the backward program of the 2-4-1 loss at seed 0's
   initialisation, its dependency-counted schedule step by step and the memory timeline of forward
   then backward (float64: the hidden layer h is 4x4 = 128 B, the output 4x1 = 32 B).

5. The same Adam run as a person would write it with `gr.train`: one compiled training step, a
   checkpoint after 1000 steps, then a second call that resumes from it and continues to 2000. Its
   final loss equals a straight 2000-step run bit for bit, and the hand-written loop of section 3.

With `--out DIR` it writes the loss curves (gradient descent on seeds 0..9 and Adam on seed 0,
one plot) and the XOR loss's diagrams, memory plot and HTML report (`j.render`), and prints their
paths.

Run:  python examples/f_training.py [--out DIR]
"""

from __future__ import annotations

import argparse
import io
import pathlib
import random
import tempfile
import textwrap

import numpy as np

import gradir as gr
from gradir.passes.report import value_name

# -- 1 and 2: accumulation and data parallelism ------------------------------------------------------


def regression_data(seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((7, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.3 + 0.1 * rng.standard_normal(7)
    return X, y


def mse(w, b, X, y):
    return ((X @ w + b - y) ** 2).mean()


def fresh_params():
    return gr.Tensor(np.zeros(3), requires_grad=True), gr.Tensor(0.0, requires_grad=True)


def flat_grad(w, b) -> np.ndarray:
    return np.concatenate([w.grad.numpy(), [b.grad.item()]])


def accumulation() -> dict:
    X, y = regression_data()
    w, b = fresh_params()
    mse(w, b, X, y).backward()
    full = flat_grad(w, b)
    parts = [(X[:3], y[:3]), (X[3:], y[3:])]
    w, b = fresh_params()
    for Xk, yk in parts:  # .grad accumulates across the two backward calls
        (mse(w, b, Xk, yk) * (len(yk) / len(y))).backward()
    weighted = flat_grad(w, b)
    w, b = fresh_params()
    for Xk, yk in parts:
        mse(w, b, Xk, yk).backward()
    unweighted = flat_grad(w, b)
    return {"full": full.tolist(), "weighted": weighted.tolist(), "unweighted": unweighted.tolist(),
            "weighted_maxdiff": float(np.max(np.abs(weighted - full))),
            "unweighted_norm_ratio": float(np.linalg.norm(unweighted) / np.linalg.norm(full))}


def data_parallel() -> dict:
    X, y = regression_data()
    w, b = fresh_params()
    mse(w, b, X, y).backward()
    full = flat_grad(w, b)
    rank_grads, counts = [], []
    for Xk, yk in [(X[:3], y[:3]), (X[3:], y[3:])]:  # each rank: its own replica, its own mean loss
        w, b = fresh_params()
        mse(w, b, Xk, yk).backward()
        rank_grads.append(flat_grad(w, b))
        counts.append(len(yk))
    naive = sum(rank_grads) / len(rank_grads)
    weighted = sum(n * g for n, g in zip(counts, rank_grads)) / sum(counts)
    rel = lambda g: float(np.linalg.norm(g - full) / np.linalg.norm(full))  # noqa: E731
    return {"rank_grads": [g.tolist() for g in rank_grads], "counts": counts, "full": full.tolist(),
            "naive": naive.tolist(), "weighted": weighted.tolist(), "naive_rel_error": rel(naive),
            "weighted_rel_error": rel(weighted)}


# -- 3: XOR -----------------------------------------------------------------------------------------

XOR_X = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
XOR_Y = np.array([-1.0, 1.0, 1.0, -1.0])
STUCK = 1.0
COURSE_STUCK = [0, 4, 5, 6, 7, 8, 9]  # the seeds the course's run left stuck
EXAMPLE_ORDERS = ([3, 2, 1, 0], [1, 0, 3, 2], [0, 2, 1, 3])  # the same four examples, other row orders


def xor_init(seed: int, dtype=np.float64) -> dict:
    """The course's initialisation: 17 draws of `random.Random(seed).uniform(-1, 1)`, filled in the order
    W1 (4, 2), b1 (4), W2 (1, 4), b2 (1), each tensor row-major in PyTorch's nn.Linear layout
    (out_features, in_features). Step-0 loss on seed 0: 5.260514."""
    rng = random.Random(seed)
    v = np.array([rng.uniform(-1, 1) for _ in range(17)], dtype=dtype)
    return {"W1": v[:8].reshape(4, 2), "b1": v[8:12], "W2": v[12:16].reshape(1, 4), "b2": v[16:]}


def xor_forward(p, X):
    h = gr.tanh(X @ p["W1"].T + p["b1"])
    return gr.tanh(h @ p["W2"].T + p["b2"])[:, 0]


def xor_loss(p, X, Y):
    return ((xor_forward(p, X) - Y) ** 2).sum()


xor_step = gr.compile(gr.value_and_grad(xor_loss))


def gradient_descent(p: dict, steps: int = 2000, lr: float = 0.5, X=XOR_X, Y=XOR_Y, losses: list | None = None) -> dict:
    """`losses`, if given, receives the loss before each step."""
    lr = np.asarray(lr, dtype=X.dtype)  # keeps a float32 run in float32
    for _ in range(steps):
        L, g = xor_step(p, X, Y)
        if losses is not None:
            losses.append(float(L))
        p = {k: p[k] - lr * g[k] for k in p}
    return p


def adam(p: dict, steps: int = 2000, lr: float = 0.05, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
         losses: list | None = None):
    """Adam from `gr.optim` (torch.optim.Adam's update, operation by operation)."""
    opt = gr.optim.adam(lr=lr, b1=b1, b2=b2, eps=eps)
    state = opt.init(p)
    for _ in range(steps):
        L, g = xor_step(p, XOR_X, XOR_Y)
        if losses is not None:
            losses.append(float(L))
        p, state = opt.update(g, state, p)
    return p


def gradcheck_one_weight(seed: int = 0, h: float = 1e-5) -> dict:
    """d loss / d W1[1, 0] by autodiff vs a central difference of the loss."""
    p = xor_init(seed)
    _, g = xor_step(p, XOR_X, XOR_Y)

    def f(w):
        q = p | {"W1": p["W1"].copy()}
        q["W1"][1, 0] = w
        return float(xor_loss(q, XOR_X, XOR_Y))

    w = p["W1"][1, 0]
    numeric = (f(w + h) - f(w - h)) / (2 * h)
    return {"analytic": float(g["W1"][1, 0]), "numeric": numeric, "abs_diff": abs(float(g["W1"][1, 0]) - numeric),
            "h": h}


def gd_finals(seeds, dtype=np.float64, order=(0, 1, 2, 3), curves: dict | None = None) -> dict:
    """Final loss per seed; `curves`, if given, receives each seed's loss per step."""
    X, Y = XOR_X[list(order)].astype(dtype), XOR_Y[list(order)].astype(dtype)
    out = {}
    for s in seeds:
        losses = curves.setdefault(s, []) if curves is not None else None
        out[s] = float(xor_loss(gradient_descent(xor_init(s, dtype), X=X, Y=Y, losses=losses), X, Y))
    return out


def stuck_of(finals: dict) -> list:
    return [s for s, L in finals.items() if L >= STUCK]


def torch_gd_finals(seeds, dtype_name: str, batched: bool = True, steps: int = 2000) -> dict | None:
    """The same gradient descent in PyTorch autograd (the course's framework), or None without torch.
    `batched` stacks the seeds' independent models along a leading axis (one autograd call per step
    for all seeds: the same arithmetic per seed as a loop over seeds, though batched kernels may round
    differently, and 2000 steps can turn that into another stuck list)."""
    try:
        import torch
    except ImportError:
        return None
    dtype = getattr(torch, dtype_name)
    X, Y = torch.tensor(XOR_X, dtype=dtype), torch.tensor(XOR_Y, dtype=dtype)
    groups = [list(seeds)] if batched else [[s] for s in seeds]
    finals = {}
    for group in groups:
        inits = [xor_init(s) for s in group]
        P = [torch.tensor(np.stack([i[k] for i in inits]), dtype=dtype, requires_grad=True) for k in ("W1", "b1", "W2", "b2")]
        for step in range(steps + 1):
            h = torch.tanh(X @ P[0].transpose(1, 2) + P[1][:, None, :])
            out = torch.tanh(h @ P[2].transpose(1, 2) + P[3][:, None, :])[:, :, 0]
            losses = ((out - Y) ** 2).sum(1)
            if step == steps:
                break
            grads = torch.autograd.grad(losses.sum(), P)
            with torch.no_grad():
                P = [(p - 0.5 * g).requires_grad_() for p, g in zip(P, grads)]
        finals |= dict(zip(group, losses.tolist()))
    return finals


NUDGED_SEED = 3  # half of its one-ulp nudges stick on our build


def ulp_nudges(seed: int = NUDGED_SEED) -> list:
    """Final losses of gradient descent from `seed`'s initialisation with one entry of W1 moved by one ulp,
    up then down for each of its 8 entries: a difference the size of one rounding."""
    finals = []
    for direction in (np.inf, -np.inf):
        for i in range(8):
            p = xor_init(seed)
            w = p["W1"].reshape(-1)  # a view: writing it moves p["W1"]
            w[i] = np.nextafter(w[i], direction)
            finals.append(float(xor_loss(gradient_descent(p), XOR_X, XOR_Y)))
    return finals


def xor(seeds=range(10), variants: bool = True) -> dict:
    p0 = xor_init(0)
    curves = {"gradient descent": {}, "Adam": []}  # loss per step, for the plot --out writes
    finals = gd_finals(seeds, curves=curves["gradient descent"])
    p = adam(xor_init(0), losses=curves["Adam"])
    out = {"curves": curves, "n_params": sum(v.size for v in p0.values()), "step0_loss_seed0": float(xor_loss(p0, XOR_X, XOR_Y)),
           "final_loss": finals, "stuck": stuck_of(finals), "n_stuck": len(stuck_of(finals)),
           "adam_seed0": {"gd_final": finals.get(0), "final": float(xor_loss(p, XOR_X, XOR_Y)),
                          "predictions": np.asarray(xor_forward(p, XOR_X)).tolist()},
           "gradcheck": gradcheck_one_weight()}
    if variants:  # the same mathematics, other roundings
        out["variants"] = {"gradir float32": gd_finals(seeds, np.float32)}
        for order in EXAMPLE_ORDERS:
            out["variants"][f"gradir float64, rows {list(order)}"] = gd_finals(seeds, order=order)
        for name in ("float32", "float64"):
            finals_t = torch_gd_finals(seeds, name)
            if finals_t is not None:
                out["variants"][f"PyTorch {name}"] = finals_t
        out["nudged"] = {"seed": NUDGED_SEED, "finals": ulp_nudges()}
    return out


# -- 4: how the XOR step's backward runs -----------------------------------------------------------


def say(text: str, indent: str = "   ") -> None:
    print(textwrap.fill(text, 100, initial_indent=indent, subsequent_indent=indent))


def xor_backward_story(seed: int = 0, verbose: bool = True):
    """The backward schedule and memory timeline of xor_loss at the course's initialisation of `seed`.
    Returns (figures, the GradTrace)."""
    j = gr.trace_grad(xor_loss, xor_init(seed), XOR_X, XOR_Y)
    sched, mem = j.schedule, j.memory
    names = {v: f"%{k}" for k, v in enumerate(j.backward.all_values())}
    owner = mem.owner
    results = {owner[o] for o in mem.graph.outputs}
    t = mem.peak_step
    alive = [{"value": value_name(b.value, mem.graph), "op": b.value.op, "type": b.value.type_str,
              "bytes": b.nbytes, "result": b.value in results, "read_last": b.end == t}
             for b in mem.lifetimes if b.start <= t <= b.end]
    waits_two = [names[n] for n, c in sched.initial_counts.items() if c == 2]
    if verbose:
        say("The backward program of the XOR loss (seed 0's initialisation; gradients for W1, b1, W2, b2; X and Y "
            "are data). The schedule and the memory plan name its values %k:")
        print("   " + str(j.backward).replace("\n", "\n   "))
        say("The schedule: a node runs once its count (operands computed inside the backward and not yet run) "
            "reaches 0; \"ready after\" is the queue the engine may run next, most recent forward op first. "
            f"The nodes starting at count 2 ({', '.join(waits_two)}) wait for two backward results, e.g. the "
            "cotangent from above and the local derivative (1 - h^2) of a tanh.")
        print("   " + sched.text(width=100).replace("\n", "\n   "))
        say("The memory timeline of forward then backward (float64, 8 B a number: h and the other 4x4 values are "
            "128 B, the 4x1 output 32 B; inputs, parameters, 0-d values and views own nothing; gradients, the "
            "results, stay to the end). Forward rows name the forward program's values (not printed: %10 is the "
            "hidden layer h, %15 the output's tanh), backward rows the backward program's above: the same %k is a "
            "different value in each.")
        print("   " + mem.text(width=100).replace("\n", "\n   "))
        terms = " + ".join(f"{a['bytes']} B ({a['value']} {a['op']} {a['type']}"
                           f"{', a gradient' if a['result'] else ', read for the last time' if a['read_last'] else ''})"
                           for a in alive)
        say(f"peak {mem.peak_bytes} B at {mem.describe_step(t)} = {terms}.")
    sd = sched.to_dict()
    return {"backward": str(j.backward), "initial_counts": sd["initial_counts"], "steps": sd["steps"],
            "waits_for_two": waits_two, "peak_bytes": mem.peak_bytes, "peak_at": mem.where(t),
            "alive_at_peak": alive, "live_bytes": list(mem.live_bytes)}, j


def plot_xor_curves(path, curves: dict) -> pathlib.Path:
    """Loss per step, gradient descent on every seed and Adam on seed 0, on a log axis; written atomically."""
    from matplotlib.figure import Figure

    from gradir.util.fileio import write_atomic

    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    for losses in curves["gradient descent"].values():
        stuck = losses[-1] >= STUCK
        ax.plot(losses, lw=1, color="tab:red" if stuck else "tab:blue", alpha=0.6,
                label=("gradient descent, stuck" if stuck else "gradient descent, converged"))
    ax.plot(curves["Adam"], lw=1.5, color="black", label="Adam, seed 0")
    handles = dict(zip(*reversed(ax.get_legend_handles_labels())))  # one legend entry per label
    ax.legend(handles.values(), handles.keys(), loc="lower left")
    ax.set_yscale("log")
    ax.set(xlabel="step", ylabel="sum of squared errors", title="XOR 2-4-1: gradient descent lr=0.5 (seeds 0-9), Adam lr=0.05")
    ax.grid(alpha=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format=pathlib.Path(path).suffix.lstrip(".") or "svg", metadata={"Date": None})
    return write_atomic(path, buf.getvalue())


def write_files(out, figures: dict, j) -> dict:
    """The loss curves and the XOR loss's diagrams, memory plot and HTML report, into `out`; paths printed."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    curves = plot_xor_curves(out / "xor_loss_curves.svg", figures["xor"]["curves"])
    print(f"   loss curves (gradient descent seeds 0-9, Adam seed 0): {curves}")
    written = j.render(out / "xor_loss")
    print(f"   HTML report of the XOR loss's backward: {written['html']}")
    print(f"   memory timeline plot: {written['memory.svg']}")
    svgs = [k for k in written if k.endswith(".svg") and k != "memory.svg"]
    if svgs:
        print(f"   {len(svgs)} diagrams drawn by dot, e.g. {written.get('backward.svg', written[svgs[0]])}")
    for note in written.notes:  # e.g. the dot program is missing: the .dot sources are still written
        print(f"   note: {note}")
    return {"curves": str(curves), **{k: str(v) for k, v in written.items()}}


def train_xor(where: pathlib.Path, seed: int = 0, steps: int = 2000) -> dict:
    """Adam on XOR through gr.train: `steps // 2` steps with a checkpoint, then a resumed run to `steps` (with
    its loss plot), against one straight run. Files go to `where`."""
    p0, opt = xor_init(seed), gr.optim.adam(lr=0.05)
    batch = lambda k: (XOR_X, XOR_Y)  # noqa: E731 - full batch: every step sees the four examples
    ck = where / "xor_adam.npz"
    # (resume=False: a fresh run, whatever a run before left in `where`; the second call resumes this one)
    first = gr.train(xor_loss, p0, opt, batch, steps=steps // 2, checkpoint=ck, resume=False, progress=False)
    resumed = gr.train(xor_loss, p0, opt, batch, steps=steps, checkpoint=ck, resume=True, progress=False,
                       plot=where / "xor_adam_loss.svg")
    straight = gr.train(xor_loss, p0, opt, batch, steps=steps, progress=False)
    same = all(np.array_equal(resumed.params[k], straight.params[k]) for k in p0)
    return {"first_steps": first.step, "resumed_from": resumed.resumed_from, "final": float(xor_loss(resumed.params,
            XOR_X, XOR_Y)), "straight_final": float(xor_loss(straight.params, XOR_X, XOR_Y)), "bitwise": same,
            "losses_equal": resumed.losses == straight.losses, "checkpoint": str(ck), "plot": str(resumed.plot),
            "seconds": straight.seconds}


def main(verbose: bool = True, out=None) -> dict:
    """Print the figures (with `out`, write plots and diagrams there too); return them."""
    figures = {"accumulation": accumulation(), "data_parallel": data_parallel(), "xor": xor()}
    if verbose:
        a = figures["accumulation"]
        print("1. gradient accumulation, 7 examples as microbatches of 3 + 4 (linear least squares, seed 0):")
        print(f"   full-batch gradient          {np.round(a['full'], 6).tolist()}")
        print(f"   weighted 3/7 + 4/7, via .grad {np.round(a['weighted'], 6).tolist()}  max |diff| "
              f"{a['weighted_maxdiff']:.1e}")
        print(f"   unweighted (sum of means)    {np.round(a['unweighted'], 6).tolist()}  norm ratio to full "
              f"{a['unweighted_norm_ratio']:.2f}")
        d = figures["data_parallel"]
        print(f"2. two data-parallel ranks holding {d['counts'][0]} and {d['counts'][1]} examples:")
        print(f"   naive mean of rank means: relative error {d['naive_rel_error']:.2f}")
        print(f"   count-weighted (3/7, 4/7): relative error {d['weighted_rel_error']:.1e}")
        x = figures["xor"]
        gc = x["gradcheck"]
        print(f"3. XOR, 2-4-1 tanh MLP ({x['n_params']} parameters), sum of squared errors, targets -1/+1;")
        print("   the course's initialisation: random.Random(seed).uniform(-1, 1) for W1 (4x2), b1, W2 (1x4), b2, row-major")
        print(f"   step-0 loss on seed 0: {x['step0_loss_seed0']:.6f}  (the course: 5.260514)")
        print(f"   gradcheck of W1[1,0] before training: autodiff {gc['analytic']:.12f}, central difference "
              f"(h={gc['h']:g}) {gc['numeric']:.12f}, |diff| {gc['abs_diff']:.1e}")
        a = x["adam_seed0"]
        print(f"   Adam lr=0.05 (betas 0.9/0.999, eps 1e-8), 2000 steps on seed 0: final loss {a['final']:.6f}, "
              f"predictions {' '.join(f'{v:+.4f}' for v in a['predictions'])}")
        print("     (the course: 0.000089, -0.9973 +0.9952 +0.9948 -0.9944)"
              + (f"; gradient descent leaves this seed at {a['gd_final']:.3g}" if a["gd_final"] >= STUCK else ""))
        print("   gradient descent lr=0.5, 2000 steps, float64 (a run is stuck when its final loss is >= 1):")
        for s, L in x["final_loss"].items():
            print(f"   seed {s}: final loss {L:.3e}{'  (stuck)' if L >= STUCK else ''}")
        print(f"   stuck: {x['n_stuck']}/10 {x['stuck']}  (the course: {len(COURSE_STUCK)}/10 {COURSE_STUCK})")
        if "variants" in x:
            print("   the same descent with mathematically equal programs that round differently:")
            for name, finals in x["variants"].items():
                st = stuck_of(finals)
                print(f"     {name:32s} stuck {len(st)}/10 {st}")
            n = x["nudged"]
            k = sum(L >= STUCK for L in n["finals"])
            print(f"   seed {n['seed']} with one entry of W1 moved by one ulp ({len(n['finals'])} runs, each entry up and "
                  f"down): {k} stuck, {len(n['finals']) - k} converged")
            say("Near a plateau gradient descent at lr=0.5 amplifies a last-bit difference (one ulp of one weight, the "
                "order the four examples are summed in, float32 against float64, PyTorch's kernels against gradir's, one "
                "CPU's BLAS kernels against another's) until the run escapes or saturates: the stuck count belongs to one "
                "program at one precision on one machine, not to the initialisation."
                + (f" PyTorch float32 (its default dtype) sticks {len(stuck_of(x['variants']['PyTorch float32']))}/10 "
                   f"here, on another CPU another count." if "PyTorch float32" in x["variants"] else ""))
        print("4. how one step's backward runs, XOR 2-4-1 at seed 0:")
    figures["xor_backward"], j = xor_backward_story(verbose=verbose)
    with tempfile.TemporaryDirectory() as tmp:
        where = pathlib.Path(out if out is not None else tmp)
        where.mkdir(parents=True, exist_ok=True)
        t = figures["train"] = train_xor(where)
    if verbose:
        hand = figures["xor"]["adam_seed0"]["final"]
        print("5. the same Adam run with gr.train (one compiled step; checkpoint, resume, plot):")
        print(f"   gr.train(xor_loss, params, gr.optim.adam(lr=0.05), batches, steps=1000, checkpoint=...) stops at "
              f"step {t['first_steps']};")
        print(f"   the same call with steps=2000 and resume=True continues from step {t['resumed_from']}")
        print(f"   final loss {t['final']:.6f}; a straight 2000-step run: {t['straight_final']:.6f}, same bits: "
              f"{t['bitwise']} (every step's loss equal: {t['losses_equal']})")
        print(f"   the hand-written loop of section 3 ended at {hand:.6f}")
        print(f"   one compiled program per step, 2000 steps in {t['seconds']:.2f} s"
              + (f"; checkpoint {t['checkpoint']}, loss plot {t['plot']}" if out is not None else ""))
    if out is not None:
        if verbose:
            print(f"Files (--out {out}):")
        figures["files"] = write_files(out, figures, j)
    elif verbose:
        print("Pictures: --out DIR writes the loss curves, diagrams and an HTML report; "
              "notebooks/f_training_and_optimizers.py shows them inline.")
    return figures


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", metavar="DIR", help="write the loss curves, diagrams and an HTML report into DIR")
    main(out=ap.parse_args().out)
