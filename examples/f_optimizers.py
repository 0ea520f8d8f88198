"""F. An ill-conditioned quadratic: Hessian, step ceiling, and four optimizers on declared grids.

Problem: least squares with n = 200 rows and 2 features, the second scaled by 100, loss
L(w) = mean((X w - y)^2), so the Hessian is H = 2 X^T X / n (constant: the loss is quadratic).
The course gives H's eigenvalues 1.840138 and 21180.873551 (condition number 11510.48, stable
gradient-descent step ceiling 2/lambda_max = 9.44248e-5) but not its data. Construction (ours):
X0 = np.random.default_rng(0).standard_normal((200, 2)), X0[:, 1] *= 100; with X0 = U S V^T (thin
SVD) we keep the rotations U, V and replace the singular values by sqrt(n * lambda / 2), so
X = U diag(sqrt(n lambda / 2)) V^T has 2 X^T X / n = V diag(lambda) V^T: exactly the course's
spectrum, with X0's eigenvectors (within 0.03 degrees of the coordinate axes, as scaling one
column makes them). Targets y = X @ [1, 0.01] + 0.1 * noise (the same generator, after X0);
start w = 0. L* = L(w*) with w* from np.linalg.lstsq; the figures are the excess loss L - L*.

The Hessian is gradir's own second derivative: row j is gr.grad of (gr.grad(L))[j]. Its eigenvalues
come from the 2x2 closed form (lambda_max from the trace and determinant, lambda_min = det/lambda_max,
which avoids cancellation).

Declared grids, 2000 full-batch steps each from w = 0, with `gr.optim` (torch.optim's formulas):
- gradient descent, gr.optim.sgd(lr): lr in {1e-5, 5e-5, 9e-5, 9.4e-5, 9.5e-5, 1e-4, 2e-4}
- momentum (heavy ball, torch's SGD momentum), gr.optim.sgd(lr, momentum=mu):
  mu in {0.5, 0.9, 0.95, 0.99} x lr in {1e-5, 3e-5, 1e-4, 1.5e-4, 1.8e-4, 3e-4}
- RMSprop, gr.optim.rmsprop(lr, alpha=0.99, eps=1e-8): lr in {1e-4, 1e-3, 1e-2, 3e-2, 1e-1}
- Adam, gr.optim.adam(lr, b1=0.9, b2=0.999, eps=1e-8): lr in {1e-4, 1e-3, 1e-2, 3e-2, 1e-1}
A run is flagged when it ends above its starting loss L(0) ("diverged" in the returned dict: gradient
descent and momentum past their ceilings grow without bound; RMSprop at large lr oscillates at a
distance ~lr instead); a run whose loss stops being finite or passes 1e30 is stopped there (figure inf).
An excess of exactly 0 means L(w) rounds to L*.

What the grids show: gradient descent diverges just above 2/lambda_max and, just below it, has
moved the slow direction (lambda_min = 1.84) by a factor (1 - lr lambda_min)^2000 ~ 0.71 only:
most of the initial excess loss is still there. Heavy-ball momentum is stable up to
2(1 + mu)/lambda_max and its best runs reach ~1e-13; Adam and RMSprop rescale each coordinate by
its own gradient size, which fits this problem because its eigenvectors lie along the axes.
RMSprop (no momentum, no bias correction) keeps taking steps of size ~lr around the minimum; that
orbit amplifies rounding, so its figures match torch.optim.RMSprop's in size, not in digits.

With `--out DIR` it writes the excess loss per step of each method's best run (one plot,
log axis) and prints its path.

Run:  python examples/f_optimizers.py [--out DIR]
"""

from __future__ import annotations

import argparse
import io
import pathlib

import numpy as np

import gradir as gr

N = 200
COURSE_EIGENVALUES = (1.840138, 21180.873551)
W_TRUE = np.array([1.0, 0.01])
STEPS = 2000
DIVERGED = 1e30

GRIDS = {
    "gradient descent": [dict(lr=lr) for lr in (1e-5, 5e-5, 9e-5, 9.4e-5, 9.5e-5, 1e-4, 2e-4)],
    "momentum": [dict(lr=lr, momentum=mu) for mu in (0.5, 0.9, 0.95, 0.99) for lr in (1e-5, 3e-5, 1e-4, 1.5e-4, 1.8e-4, 3e-4)],
    "RMSprop": [dict(lr=lr, alpha=0.99, eps=1e-8) for lr in (1e-4, 1e-3, 1e-2, 3e-2, 1e-1)],
    "Adam": [dict(lr=lr, b1=0.9, b2=0.999, eps=1e-8) for lr in (1e-4, 1e-3, 1e-2, 3e-2, 1e-1)],
}
MAKERS = {"gradient descent": gr.optim.sgd, "momentum": gr.optim.sgd, "RMSprop": gr.optim.rmsprop, "Adam": gr.optim.adam}


def data(seed: int = 0, eigenvalues=COURSE_EIGENVALUES):
    """X with 2 X^T X / N having exactly `eigenvalues` (see the module docstring), and y."""
    rng = np.random.default_rng(seed)
    X0 = rng.standard_normal((N, 2))
    X0[:, 1] *= 100
    U, _, Vt = np.linalg.svd(X0, full_matrices=False)  # singular values descending: lambda_max first
    X = U @ np.diag(np.sqrt(N * np.sort(eigenvalues)[::-1] / 2)) @ Vt
    y = X @ W_TRUE + 0.1 * rng.standard_normal(N)
    return X, y, Vt


def loss(w, X, y):
    return ((X @ w - y) ** 2).mean()


loss_and_grad = gr.compile(gr.value_and_grad(loss))


def hessian(w, X, y) -> np.ndarray:
    """Row j: the gradient of the j-th component of the gradient (reverse over reverse)."""
    return np.stack([np.asarray(gr.grad(lambda v, j=j: gr.grad(loss)(v, X, y)[j])(w)) for j in range(len(w))])


def eigenvalues_2x2(H: np.ndarray) -> tuple[float, float]:
    tr, det = H[0, 0] + H[1, 1], H[0, 0] * H[1, 1] - H[0, 1] * H[1, 0]
    lam_max = tr / 2 + np.sqrt((H[0, 0] - H[1, 1]) ** 2 / 4 + H[0, 1] * H[1, 0])
    return float(det / lam_max), float(lam_max)


def train(method: str, hp: dict, X, y, steps: int = STEPS, losses: list | None = None) -> dict:
    """`losses`, if given, receives the loss before each step."""
    opt = MAKERS[method](**hp)
    w = np.zeros(X.shape[1])
    state = opt.init(w)
    for _ in range(steps):
        L, g = loss_and_grad(w, X, y)
        if losses is not None:
            losses.append(float(L))
        if not np.isfinite(L) or L > DIVERGED:
            return {"w": None, "loss": float("inf")}
        w, state = opt.update(g, state, w)
    return {"w": np.asarray(w).tolist(), "loss": float(loss(w, X, y))}


def quadratic(steps: int = STEPS) -> dict:
    X, y, Vt = data()
    H = hessian(np.zeros(2), X, y)
    lam_min, lam_max = eigenvalues_2x2(H)
    w_star = np.linalg.lstsq(X, y, rcond=None)[0]
    L_star = float(loss(w_star, X, y))
    L0 = float(loss(np.zeros(2), X, y))
    axis_angle = float(np.degrees(np.arccos(np.max(np.abs(Vt), axis=1))).max())
    runs, histories = {}, {}
    for method, grid in GRIDS.items():
        runs[method] = []
        for hp in grid:
            losses = histories.setdefault((method, len(runs[method])), [])
            r = train(method, hp, X, y, steps, losses)
            runs[method].append({**hp, "w": r["w"], "loss": r["loss"], "excess": r["loss"] - L_star,
                                 "diverged": r["loss"] > L0})
    best = {m: min(rs, key=lambda r: r["excess"]) for m, rs in runs.items()}
    best_at = {m: next(k for k, r in enumerate(rs) if r is best[m]) for m, rs in runs.items()}
    curves = {m: [v - L_star for v in histories[(m, k)]] for m, k in best_at.items()}
    return {"curves": curves, "hessian": H.tolist(), "eigenvalues": [lam_min, lam_max], "condition": lam_max / lam_min,
            "step_ceiling": 2 / lam_max, "eigvec_angle_deg": axis_angle, "w_star": w_star.tolist(),
            "loss_star": L_star, "loss_0": L0, "steps": steps, "runs": runs, "best": best}


def _hp(r: dict) -> str:
    return ", ".join(f"{k}={r[k]:g}" for k in ("lr", "momentum") if k in r)


def plot_curves(path, q: dict) -> pathlib.Path:
    """L - L* per step of each method's best run, on a log axis (an excess of 0 is drawn at the axis'
    floor); written atomically."""
    from matplotlib.figure import Figure

    from gradir.util.fileio import write_atomic

    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    floor = 1e-16 * max(q["loss_star"], 1e-300)
    for method, excess in q["curves"].items():
        ax.plot(np.maximum(excess, floor), lw=1, label=f"{method} ({_hp(q['best'][method])})")
    ax.set_yscale("log")
    ax.set(xlabel="step", ylabel="L - L*", title="ill-conditioned quadratic: best run per method")
    ax.grid(alpha=0.3)
    ax.legend(loc="center right")
    buf = io.BytesIO()
    fig.savefig(buf, format=pathlib.Path(path).suffix.lstrip(".") or "svg", metadata={"Date": None})
    return write_atomic(path, buf.getvalue())


def main(verbose: bool = True, out=None) -> dict:
    """Print the figures (with `out`, write the loss-curve plot there too); return them."""
    q = quadratic()
    if verbose:
        lam_min, lam_max = q["eigenvalues"]
        print(f"Least squares, {N} rows, 2 features (the second scaled by 100), L = mean((Xw - y)^2), H = 2 X^T X / n")
        print(f"   gradir's Hessian (grad of grad): {np.round(q['hessian'], 6).tolist()}")
        print(f"   eigenvalues {lam_min:.6f} and {lam_max:.6f}  (the course: 1.840138, 21180.873551)")
        print(f"   condition number {q['condition']:.2f}  (the course: 11510.48)")
        print(f"   stable step ceiling 2/lambda_max = {q['step_ceiling']:.5e}  (the course: 9.44248e-5)")
        print(f"   eigenvectors within {q['eigvec_angle_deg']:.3f} degrees of the coordinate axes")
        print(f"   L(0) = {q['loss_0']:.6f}, L* = {q['loss_star']:.6f}; figures below are L - L* after {q['steps']} steps")
        print("   from w = 0 (0.000e+00: L(w) rounds to L*; inf: stopped once the loss passed 1e30)")
        for method, rs in q["runs"].items():
            print(f"{method}:")
            for r in rs:
                fig = f"{r['excess']:.3e}" + ("  (ends above L(0))" if r["diverged"] else "")
                print(f"   {_hp(r):26s} {fig}")
        print("best per method (L - L*):")
        for method, r in q["best"].items():
            print(f"   {method:17s} {r['excess']:.3e}  ({_hp(r)})")
        print("Gradient descent diverges as soon as lr passes 2/lambda_max; just below it the slow direction")
        print("(lambda_min) shrinks by (1 - lr*lambda_min)^2000 ~ 0.71 and most of the excess loss remains.")
        print("Momentum stays stable up to 2(1 + mu)/lambda_max and moves the slow direction ~1/(1 - mu) times")
        print("faster; Adam and RMSprop divide each coordinate's step by its own gradient scale, which undoes")
        print("the conditioning here because the eigenvectors lie along the coordinate axes. RMSprop has no")
        print("momentum average to cancel its steps of size ~lr near the minimum: larger lr ends farther away.")
        print("That oscillation amplifies rounding: RMSprop's figures give the orbit's size, not digits another")
        print("implementation reproduces (torch.optim.RMSprop: 12 digits for 100 steps at lr=1e-3, then ~lr away).")
    if out is not None:
        q["files"] = {"curves": str(plot_curves(pathlib.Path(out) / "quadratic_loss_curves.svg", q))}
        if verbose:
            print(f"Files (--out {out}):\n   excess loss per step, best run per method: {q['files']['curves']}")
    elif verbose:
        print("Pictures: --out DIR plots each method's best run; notebooks/f_training_and_optimizers.py shows it inline.")
    return q


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", metavar="DIR", help="write the loss-curve plot into DIR")
    main(out=ap.parse_args().out)
