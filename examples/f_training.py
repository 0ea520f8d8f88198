"""F. Training with automatic gradients: gradient accumulation, data-parallel averaging, XOR.

(The ill-conditioned quadratic and the optimizer grids are in f_optimizers.py.)

1. Gradient accumulation with `gr.Tensor`. Setup (ours; TEACHING.md leaves it open): linear
   least squares, 7 examples with 3 features drawn with seed 0, targets X @ [1, -2, 0.5] + 0.3 plus
   noise 0.1, parameters w = 0, b = 0; loss = mean squared error. The 7 examples are split into
   microbatches of 3 and 4. Each microbatch's mean loss, weighted by 3/7 and 4/7, is backpropagated
   in turn and `.grad` accumulates: the sum equals the full-batch gradient to ~1e-16. Without the
   weights the accumulated gradient is the sum of two means, about twice the full-batch one (our
   data: norm ratio 1.90; the course's data, not given in TEACHING.md, gave 2.01). With g the full
   gradient and g_a the first microbatch's, the sum of the two means is 2 g + (g_a - g)/4, so the ratio is 2 to
   within r/4, r = |g_a - g|/|g|: near 2 when both microbatch means are near the full mean.
2. Two simulated data-parallel ranks hold 3 and 4 of the examples, each computes its mean-loss
   gradient on its own parameter replica, and an "all-reduce" combines them. The naive mean of the
   two rank means is off by (g1 - g2)/14, a relative error of r/8 (0.14 on our data; the course's 0.16
   means r = 1.28 on its data, which puts its section-1 ratio within 2 +- 0.32: its 2.01 is); weighting
   by example counts (3/7, 4/7) recovers the full-batch gradient.
3. XOR: a 2-4-1 tanh MLP (17 parameters), sum of squared errors against targets -1/+1, in float64.
   Initialisation (the course's): 17 draws of `random.Random(seed).uniform(-1, 1)` filled into W1,
   b1, W2, b2 in that order, each tensor row-major in PyTorch's nn.Linear layout (W1 is (4, 2):
   out_features x in_features, and the layer computes tanh(X @ W1.T + b1)). This is the convention
   that gives the course's step-0 loss 5.260514 on seed 0 (W1 filled as (2, 4) gives 6.775364).
   A central difference (h=1e-5) on W1[0][0], the course's weight, checks the gradient before training:
   |diff| 4.4e-11 here, 9.89e-13 in the course (its h not given). Both are within one rounding step: the
   two losses differ by a whole number of ulp(L), so the difference moves in steps of ulp(L)/(2h) =
   4.4e-11 at L = 5.26, and which step a program lands on is its rounding's (the examples summed in
   another order land two steps off). Adam (lr=0.05, betas 0.9/0.999, eps 1e-8, 2000 steps, PyTorch's
   update) on seed 0 reproduces the course's final loss 0.000089 and
   predictions -0.9973, +0.9952, +0.9948, -0.9944. Full-batch gradient descent, lr=0.5, 2000 steps, seeds
   0..9: a run is "stuck" when its final loss is >= 1 (a saturated output of the wrong sign costs (1 -
   (-1))^2 = 4 per example, so stuck runs sit near 4 or 8). The course reports 7/10 stuck (seeds 0, 4, 5, 6,
   7, 8, 9); the printout gives this machine's count. Which seeds stick depends on rounding, not only on the
   initialisation: moving one weight of seed 3's initialisation by one unit in the last place (one ulp, the
   size of one rounding difference) sends some runs to a plateau and lets others converge; the same descent
   with the four examples summed in another order (rows permuted; mathematically the same loss and
   gradient), in float32, or in PyTorch, sticks on other seeds and other counts; and so does the same
   program on another CPU, whose BLAS and NumPy pick other kernels that round differently (PyTorch float32's
   count differs between two of our machines). The course computed with scalar Python floats;
   `scalar_gd` is that computation (NumPy over seeds, each entry the Python float program's number bit
   for bit) with the choices such a program makes: tanh as math.tanh, (e^2z - 1)/(e^2z + 1) (micrograd's)
   or (e^z - e^-z)/(e^z + e^-z); 1 - t^2 as t*t or t**2 (Python's pow, which is not always t*t to the last
   bit); biases first or last in each sum; the four examples' gradients added 0..3 or 3..0. Seven such
   programs are printed; none gives the course's list, nor did the 48 combinations of these options we
   tried, PyTorch float32 and float64 with nn.Linear and torch.optim.SGD, nor a micrograd Value engine
   (whose children sit in a Python set, ordered by memory address: eight runs of the same program gave
   seven lists, none the course's). The course's list needs the course's exact program. The step function
   is `gr.compile(gr.value_and_grad(loss))`; gradient descent is written out, Adam is `gr.optim.adam`.

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
import math
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
    w, b = fresh_params()
    mse(w, b, *parts[0]).backward()
    first = flat_grad(w, b)  # the first microbatch's mean gradient
    r = float(np.linalg.norm(first - full) / np.linalg.norm(full))
    return {"full": full.tolist(), "weighted": weighted.tolist(), "unweighted": unweighted.tolist(),
            "weighted_maxdiff": float(np.max(np.abs(weighted - full))),
            "unweighted_norm_ratio": float(np.linalg.norm(unweighted) / np.linalg.norm(full)),
            "first_rel_distance": r}


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
# the course's figures beside ours: TEACHING.md's norm ratio and naive-mean error; its gradcheck of W1[0][0]
COURSE = {"norm_ratio": 2.01, "naive_rel_error": 0.16, "gradcheck_abs_diff": 9.89e-13}
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


def gradcheck_one_weight(seed: int = 0, h: float = 1e-5, at=(0, 0), order=(0, 1, 2, 3)) -> dict:
    """d loss / d W1[at] by autodiff vs a central difference of the loss, the examples summed in `order`.
    The two losses are numbers near L, so their difference is a whole number of ulp(L) and the central
    difference moves in steps of ulp(L) / (2h): `step`."""
    p = xor_init(seed)
    X, Y = XOR_X[list(order)], XOR_Y[list(order)]
    _, g = xor_step(p, X, Y)

    def f(w):
        q = p | {"W1": p["W1"].copy()}
        q["W1"][at] = w
        return float(xor_loss(q, X, Y))

    w = p["W1"][at]
    numeric = (f(w + h) - f(w - h)) / (2 * h)
    step = float(np.spacing(f(w))) / (2 * h)
    return {"at": list(at), "analytic": float(g["W1"][at]), "numeric": numeric,
            "abs_diff": abs(float(g["W1"][at]) - numeric), "h": h, "step": step, "order": list(order)}


# The course's computation is scalar Python floats; its program (the order of its sums, its tanh, its square) is not
# given. These options change only that: each is the same mathematics and the same initialisation.
_py_tanh = np.frompyfunc(math.tanh, 1, 1)
_py_exp = np.frompyfunc(math.exp, 1, 1)
_py_square = np.frompyfunc(lambda t: t ** 2, 1, 1)  # Python's float pow: not always t * t to the last bit
SCALAR_VARIANTS = [  # options of scalar_gd, one table row each
    {}, {"order": "backward"}, {"bias": "first"}, {"square": "pow"}, {"tanh": "exp"}, {"tanh": "sinhcosh"},
    # micrograd's formulas (sum(wi*xi, b), tanh via exp(2z), (1 - t**2), (o - y)**2) in the order its engine adds a
    # weight's four contributions when a node's children are kept in order (a Python set, as in micrograd, orders
    # them by memory address: the same program then gives another stuck list from one run to the next)
    {"tanh": "exp", "square": "pow", "bias": "first", "order": "backward"},
]
TANH_FORMULAS = {"math": "math.tanh(z)", "exp": "(e^2z-1)/(e^2z+1)", "sinhcosh": "(e^z-e^-z)/(e^z+e^-z)"}


def scalar_gd(seeds, tanh: str = "math", square: str = "mul", bias: str = "last", order: str = "forward",
              steps: int = 2000, lr: float = 0.5) -> tuple:
    """Gradient descent on XOR as a scalar Python program computes it, for several seeds at once.

    Each array entry is one seed's computation: NumPy's elementwise +, -, * and / round as Python's floats do,
    and tanh, exp and the square (`square="pow"`: t ** 2) call Python's own functions, so every entry is the
    Python-float program's number, bit for bit. Options: `tanh` math.tanh, "exp" (e^2z - 1)/(e^2z + 1) (micrograd's)
    or "sinhcosh" (e^z - e^-z)/(e^z + e^-z); `square` how 1 - t^2 and (o - y)^2 square (t * t or t ** 2); `bias`
    first or last in each neuron's sum (w0*x0 + w1*x1 + b, or b + w0*x0 + ...); `order` the order the four
    examples' gradients are added ("forward" 0..3 or "backward" 3..0, as a micrograd-style engine's reverse
    topological order runs them). Returns (step-0 losses, final losses), arrays over `seeds`."""
    rngs = [random.Random(s) for s in seeds]
    P = np.array([[r.uniform(-1, 1) for _ in range(17)] for r in rngs]).T.copy()  # (17, seeds): W1, b1, W2, b2

    def th(z):
        if tanh == "math":
            return _py_tanh(z).astype(float)
        if tanh == "exp":
            e = _py_exp(2 * z).astype(float)
            return (e - 1) / (e + 1)
        a, b = _py_exp(z).astype(float), _py_exp(-z).astype(float)
        return (a - b) / (a + b)

    sq = (lambda t: t * t) if square == "mul" else (lambda t: _py_square(t).astype(float))

    def forward(P, x):
        W1, b1, W2, b2 = P[0:8].reshape(4, 2, -1), P[8:12], P[12:16], P[16]
        terms = [W1[:, 0] * x[0], W1[:, 1] * x[1]]
        z1 = (b1 + terms[0]) + terms[1] if bias == "first" else (terms[0] + terms[1]) + b1
        h = th(z1)  # (4, seeds)
        z2 = b2 + W2[0] * h[0] if bias == "first" else W2[0] * h[0]
        for j in range(1, 4):
            z2 = z2 + W2[j] * h[j]
        return h, th(z2 if bias == "first" else z2 + b2)

    def loss(P):
        L = 0.0
        for x, y in zip(XOR_X.tolist(), XOR_Y.tolist()):
            L = L + sq(forward(P, x)[1] - y)
        return L

    L0 = loss(P)
    examples = range(4) if order == "forward" else range(3, -1, -1)
    for _ in range(steps):
        G = np.zeros_like(P)
        for e in examples:
            x, y = XOR_X[e].tolist(), float(XOR_Y[e])
            h, o = forward(P, x)
            dz2 = (1 - sq(o)) * (2 * (o - y))
            G[12:16] += h * dz2
            G[16] += dz2
            dz1 = (1 - sq(h)) * (P[12:16] * dz2)
            G[0:8:2] += dz1 * x[0]
            G[1:8:2] += dz1 * x[1]
            G[8:12] += dz1
        P = P - lr * G  # = p + (-lr * grad): lr = 0.5 scales exactly
    return L0, loss(P)


def scalar_variants(seeds=range(10)) -> list:
    rows = []
    for opts in SCALAR_VARIANTS:
        L0, L = scalar_gd(seeds, **opts)
        o = {"tanh": "math", "square": "mul", "bias": "last", "order": "forward"} | opts
        rows.append(o | {"step0_loss_seed0": float(L0[0]), "finals": dict(zip(seeds, L.tolist())),
                         "stuck": [s for s, v in zip(seeds, L) if v >= STUCK]})
    return rows


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
           "gradcheck": gradcheck_one_weight(), "gradcheck_W1_10": gradcheck_one_weight(at=(1, 0)),
           "gradcheck_rows_0132": gradcheck_one_weight(order=(0, 1, 3, 2))}
    if variants:  # the same mathematics, other roundings
        out["variants"] = {"gradir float32": gd_finals(seeds, np.float32)}
        for order in EXAMPLE_ORDERS:
            out["variants"][f"gradir float64, rows {list(order)}"] = gd_finals(seeds, order=order)
        for name in ("float32", "float64"):
            finals_t = torch_gd_finals(seeds, name)
            if finals_t is not None:
                out["variants"][f"PyTorch {name}"] = finals_t
        out["nudged"] = {"seed": NUDGED_SEED, "finals": ulp_nudges()}
        out["scalar"] = scalar_variants(seeds)
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
        r, c = a["first_rel_distance"], COURSE
        print(f"   unweighted (sum of means)    {np.round(a['unweighted'], 6).tolist()}  norm ratio to full "
              f"{a['unweighted_norm_ratio']:.2f}  (the course: {c['norm_ratio']:.2f}, on its own data)")
        say(f"Why the two differ: TEACHING.md does not give the course's data, and the ratio depends on them. With g the "
            f"full-batch gradient and g_a, g_b the microbatch means, 3 g_a + 4 g_b = 7 g, so g_a + g_b = 2 g + (g_a - g)/4: "
            f"the ratio is 2 to within r/4, r = |g_a - g|/|g| (ours: r = {r:.2f}, ratio within 2 +- {r / 4:.2f}). "
            f"It is near 2 when both microbatch means are near the full mean.")
        d = figures["data_parallel"]
        print(f"2. two data-parallel ranks holding {d['counts'][0]} and {d['counts'][1]} examples:")
        print(f"   naive mean of rank means: relative error {d['naive_rel_error']:.2f}  (the course: "
              f"{c['naive_rel_error']:.2f}, on its own data)")
        say(f"Why: the naive mean minus the full gradient is (g_a - g_b)/14 = (7/4)(g_a - g)/14, a relative error of r/8 "
            f"(ours: {r:.2f}/8 = {r / 8:.2f}), data-dependent like section 1's ratio. The course's {c['naive_rel_error']} "
            f"means r = {8 * c['naive_rel_error']:.2f} on its data, for which section 1 puts the ratio within 2 +- "
            f"{2 * c['naive_rel_error']:.2f}: its {c['norm_ratio']} is consistent with that.")
        print(f"   count-weighted (3/7, 4/7): relative error {d['weighted_rel_error']:.1e}")
        x = figures["xor"]
        gc = x["gradcheck"]
        print(f"3. XOR, 2-4-1 tanh MLP ({x['n_params']} parameters), sum of squared errors, targets -1/+1;")
        print("   the course's initialisation: random.Random(seed).uniform(-1, 1) for W1 (4x2), b1, W2 (1x4), b2, row-major")
        print(f"   step-0 loss on seed 0: {x['step0_loss_seed0']:.6f}  (the course: 5.260514)")
        g10, g2 = x["gradcheck_W1_10"], x["gradcheck_rows_0132"]
        print(f"   gradcheck of W1[0,0] (the course's weight) before training: autodiff {gc['analytic']:.12f}, central "
              f"difference (h={gc['h']:g}) {gc['numeric']:.12f}, |diff| {gc['abs_diff']:.2e}  (the course: "
              f"{COURSE['gradcheck_abs_diff']:.2e}, its h not given); W1[1,0]: |diff| {g10['abs_diff']:.2e}")
        say(f"Why they differ: the two losses of a central difference are near L = {x['step0_loss_seed0']:.2f}, so their "
            f"difference is a whole number of ulp(L) and at h={gc['h']:g} the central difference moves in steps of "
            f"ulp(L)/(2h) = {gc['step']:.2e}. Ours is off by {gc['abs_diff'] / gc['step']:.2f} step, the course's by "
            f"{COURSE['gradcheck_abs_diff'] / gc['step']:.2f} (if its h was {gc['h']:g} too); the four examples summed in the "
            f"order {g2['order']} give |diff| {g2['abs_diff']:.2e} ({g2['abs_diff'] / g2['step']:.2f} steps) with the "
            f"same h and weight: which step the rounding lands on is the program's, as with the stuck seeds below.")
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
            rows = x["scalar"]
            say("The course's program is not given; it is said to have computed with scalar Python floats. The same descent "
                "as a scalar Python program (every number the Python float one, bit for bit), with the options such a program "
                "chooses; each row starts from the course's initialisation:")
            print(f"     {'tanh':22s} {'square':6s} {'bias':6s} {'grads added':11s} {'step-0 loss':11s} stuck")
            for v in rows:
                print(f"     {TANH_FORMULAS[v['tanh']]:22s} {'t**2' if v['square'] == 'pow' else 't*t':6s} {v['bias']:6s} "
                      f"{'0..3' if v['order'] == 'forward' else '3..0':11s} {v['step0_loss_seed0']:<11.6f} "
                      f"{len(v['stuck'])}/10 {v['stuck']}")
            print(f"     {'the course':62s} {len(COURSE_STUCK)}/10 {COURSE_STUCK}")
            same = [i for i, v in enumerate(rows) if v["stuck"] == COURSE_STUCK]
            lists = len({tuple(v["stuck"]) for v in rows})
            say((f"Row(s) {same} give the course's list. " if same else f"None of these {len(rows)} programs gives the "
                 "course's list. ") + f"They give {lists} different lists, and all start from the course's step-0 loss "
                f"(5.260514 on seed 0): the count depends on the order of the sums "
                "and on the tanh and square formulas, not on the initialisation (which is the course's: step-0 loss and "
                "Adam's figures above), so the course's list needs the course's exact program.")
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
