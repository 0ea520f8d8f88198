"""F. Training with automatic gradients: gradient accumulation, data-parallel averaging, XOR.

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
3. XOR: a 2-4-1 tanh MLP (17 parameters), sum of squared errors against targets -1/+1, full-batch
   gradient descent with lr=0.5 for 2000 steps, seeds 0..9. Initialisation (ours): every weight
   and bias standard normal, drawn with `np.random.default_rng(seed)` in the order W1, b1, W2, b2.
   A run is "stuck" when its final loss is >= 1: a saturated tanh output of the wrong sign costs
   (1 - (-1))^2 = 4 per example, so stuck runs sit near 4 or 8. Before training, a central
   difference on one weight checks the gradient; Adam (lr=0.05, betas 0.9/0.999, eps 1e-8, 2000
   steps) then rescues a stuck seed. The step function is `gr.compile(gr.value_and_grad(loss))`.
   Gradient descent at lr=0.5 on a sum of squares is chaotic while a run escapes a plateau: which
   seeds end up stuck depends on rounding in the last bits (PyTorch running the same program can
   end differently on some seeds), so the stuck count belongs to this program on this build.

Run:  python examples/f_training.py
"""

from __future__ import annotations

import numpy as np

import gradir as gr

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


def xor_init(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"W1": rng.standard_normal((2, 4)), "b1": rng.standard_normal(4),
            "W2": rng.standard_normal((4, 1)), "b2": rng.standard_normal(1)}


def xor_loss(p, X, Y):
    h = gr.tanh(X @ p["W1"] + p["b1"])
    out = gr.tanh(h @ p["W2"] + p["b2"])
    return ((out[:, 0] - Y) ** 2).sum()


xor_step = gr.compile(gr.value_and_grad(xor_loss))


def gradient_descent(p: dict, steps: int = 2000, lr: float = 0.5) -> dict:
    for _ in range(steps):
        _, g = xor_step(p, XOR_X, XOR_Y)
        p = {k: p[k] - lr * g[k] for k in p}
    return p


def adam(p: dict, steps: int = 2000, lr: float = 0.05, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    for t in range(1, steps + 1):
        _, g = xor_step(p, XOR_X, XOR_Y)
        for k in p:
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
            p = p | {k: p[k] - lr * (m[k] / (1 - b1 ** t)) / (np.sqrt(v[k] / (1 - b2 ** t)) + eps)}
    return p


def gradcheck_one_weight(seed: int = 0, h: float = 1e-5) -> dict:
    """d loss / d W1[0, 1] by autodiff vs a central difference of the loss evaluated in NumPy."""
    p = xor_init(seed)
    _, g = xor_step(p, XOR_X, XOR_Y)

    def f(w):
        q = p | {"W1": p["W1"].copy()}
        q["W1"][0, 1] = w
        return float(xor_loss(q, XOR_X, XOR_Y))

    w = p["W1"][0, 1]
    numeric = (f(w + h) - f(w - h)) / (2 * h)
    return {"analytic": float(g["W1"][0, 1]), "numeric": numeric, "abs_diff": abs(float(g["W1"][0, 1]) - numeric),
            "h": h}


def xor(seeds=range(10)) -> dict:
    finals = {}
    for s in seeds:
        p = gradient_descent(xor_init(s))
        finals[s] = float(xor_loss(p, XOR_X, XOR_Y))
    stuck = [s for s, L in finals.items() if L >= STUCK]
    rescued = {}
    if stuck:
        p = adam(xor_init(stuck[0]))
        rescued = {"seed": stuck[0], "gd_final": finals[stuck[0]], "adam_final": float(xor_loss(p, XOR_X, XOR_Y))}
    n_params = sum(v.size for v in xor_init(0).values())
    return {"n_params": n_params, "final_loss": finals, "stuck": stuck, "n_stuck": len(stuck),
            "adam": rescued, "gradcheck": gradcheck_one_weight()}


def main(verbose: bool = True) -> dict:
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
        print(f"3. XOR, 2-4-1 tanh MLP ({x['n_params']} parameters), SSE, GD lr=0.5, 2000 steps")
        print(f"   gradcheck of W1[0,1] before training: autodiff {gc['analytic']:.12f}, central difference "
              f"(h={gc['h']:g}) {gc['numeric']:.12f}, |diff| {gc['abs_diff']:.1e}")
        for s, L in x["final_loss"].items():
            print(f"   seed {s}: final loss {L:.3e}{'  (stuck)' if L >= STUCK else ''}")
        print(f"   stuck: {x['n_stuck']}/10")
        if x["adam"]:
            r = x["adam"]
            print(f"   Adam lr=0.05 on stuck seed {r['seed']}: final loss {r['adam_final']:.1e} "
                  f"(gradient descent: {r['gd_final']:.3g})")
    return figures


if __name__ == "__main__":
    main()
