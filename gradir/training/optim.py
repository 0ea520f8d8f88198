"""Optimizers as pure functions over pytrees of parameters (`gr.optim`).

    opt = gr.optim.adam(lr=1e-3)                       # or adamw, sgd, rmsprop; lr may be a schedule
    state = opt.init(params)                           # a dict of arrays: the step count and moments
    params, state = opt.update(grads, state, params)   # the new parameters and state

Nothing is updated in place: `update` computes new arrays from old ones with gradir ops, so the same
code runs eagerly on NumPy arrays and traces into a graph inside `gr.compile`, where a whole training
step ``step(params, state, batch) -> (loss, params, state)`` becomes one compiled program that takes
the optimizer state in and gives it back.

Hyperparameters mean what torch.optim's do, and the updates follow torch's single-tensor code
(torch/optim/{sgd,rmsprop,adam}.py) operation by operation, so float64 runs agree with torch to
rounding (about 1e-15 per step): e.g. Adam's ``denom = sqrt(v) / sqrt(1 - b2**t) + eps``, not
``sqrt(v / (1 - b2**t)) + eps``.

State layout (a dict; the same keys, in the same order, for the same optimizer settings, so it can be
saved to .npz and loaded back):

- ``"step"``: 0-d int64, the number of updates done so far (0 after `init`).
  (Eagerly every leaf is a NumPy array; a function compiled by gr.compile gives 0-d results back as
  NumPy scalars, np.int64 here, as it does for every 0-d output. Either kind goes back in unchanged.)
- one entry per moment, each a pytree shaped like `params` (same structure, shapes, dtypes):
  sgd ``"momentum"`` (when momentum != 0); rmsprop ``"square_avg"``, ``"grad_avg"`` (centered),
  ``"momentum"`` (momentum > 0); adam / adamw ``"exp_avg"``, ``"exp_avg_sq"`` (torch's names).

A learning-rate schedule is a function ``count -> lr`` of the 0-d step count (the number of updates
done before this one: 0 for the first), written with gradir ops so that it traces: `step_lr`,
`linear_lr`, `linear_warmup`, `cosine`. Under torch's convention, ``scheduler.step()`` once after
each ``optimizer.step()``, update k (from 0) uses the scheduler's lr at ``last_epoch == k``: the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gradir.api import transforms as api
from gradir.core import dtypes
from gradir.core.errors import GradirError, ShapeError
from gradir.core.ir import Value
from gradir.core.trace import is_traced, user_source
from gradir.ops import add, astype, cos, equal, floor, less, minimum, power, sqrt, sum, where, zeros
from gradir.util.public import api_dir
from gradir.util.pytree import tree_flatten, tree_unflatten

__all__ = ["Optimizer", "adam", "adamw", "chain", "clip", "clip_by_global_norm", "cosine", "global_norm", "linear_lr",
           "linear_warmup", "loss_and_grads", "rmsprop", "sgd", "step_lr"]

Schedule = Callable[[Any], Any]


@dataclass(frozen=True)
class Optimizer:
    """A pair of pure functions: ``init(params) -> state`` and ``update(grads, state, params) -> (params, state)``.

    `name` and `hyperparams` are for printing (``print(opt)``) and for checkpoints that want to record
    what produced a state."""

    init: Callable[[Any], dict]
    update: Callable[[Any, dict, Any], tuple[Any, dict]]
    name: str = "optimizer"
    hyperparams: dict = field(default_factory=dict)
    # How a training step differentiates the loss for this optimizer: ``gradients(loss)`` returns
    # ``(params, state, *batch) -> (loss value, grads)``. None: gr.value_and_grad(loss) with respect to the
    # parameters. gr.amp.mixed_precision casts and scales the loss here (see `loss_and_grads`).
    gradients: Callable[[Callable], Callable] | None = None

    def __repr__(self) -> str:
        # a schedule prints as the call that made it (its __name__), not as a function object
        args = ", ".join(f"{k}={v.__name__}" if callable(v) and not isinstance(v, Optimizer) and hasattr(v, "__name__")
                         else f"{k}={v!r}" for k, v in self.hyperparams.items())
        return f"gr.optim.{self.name}({args})"


def loss_and_grads(loss: Callable, opt) -> Callable:
    """The first half of a training step with `opt`: ``(params, state, *batch) -> (loss value, grads)``, the
    gradient of ``loss(params, *batch)`` with respect to `params` (or what `opt.gradients` makes of it)."""
    hook = getattr(opt, "gradients", None)
    if hook is not None:
        return hook(loss)
    value_and_grad = api.value_and_grad(loss)  # made once: eager calls then reuse its traced graph
    return lambda params, state, *batch: value_and_grad(params, *batch)


# -- helpers ----------------------------------------------------------------------------------------


def _check(ok: bool, message: str, op: str) -> None:
    if not ok:
        raise GradirError(message, op=f"optim.{op}", source=user_source())


def _check_lr(lr, op: str) -> None:
    _check(callable(lr) or (isinstance(lr, (int, float)) and lr >= 0),
           f"lr must be a number >= 0 or a schedule (a function of the step count), got {lr!r}", op)


def _dtype(x):
    return x.dtype if isinstance(x, (Value, np.ndarray)) else np.asarray(x).dtype


def _zeros_like(x):
    if isinstance(x, Value):
        return zeros(x.shape, x.dtype)
    x = np.asarray(x)
    return np.zeros(x.shape, x.dtype)


def _zeros_tree(params):
    """A buffer per parameter, zero, in the parameters' structure (a moment, a momentum buffer)."""
    leaves, tree = tree_flatten(params)
    return tree_unflatten(tree, [_zeros_like(p) for p in leaves])


def _step_zero(params):
    """The initial step count: a 0-d int64 (traced when `init` itself runs inside a trace)."""
    leaves, _ = tree_flatten(params)
    return zeros((), dtypes.int64) if is_traced(*leaves) else np.zeros((), np.int64)


def _leaves(grads, params, op: str):
    """Flat gradient and parameter leaves, after checking they have the same structure and shapes."""
    g, gtree = tree_flatten(grads)
    p, ptree = tree_flatten(params)
    if gtree != ptree:
        raise ShapeError("grads and params must have the same pytree structure (the gradient of each parameter)",
                         op=f"optim.{op}", source=user_source())
    for i, (a, b) in enumerate(zip(g, p)):
        if tuple(np.shape(a)) != tuple(np.shape(b)):
            raise ShapeError(f"gradient {i} has shape {tuple(np.shape(a))}, its parameter {tuple(np.shape(b))}",
                             op=f"optim.{op}", source=user_source())
    return g, p, ptree


def _like(x, leaf):
    """A 0-d scalar (an lr from a schedule, a bias correction) in `leaf`'s dtype: torch applies such numbers
    as scalars of the parameter's dtype, and NumPy's rules would otherwise promote a float32 parameter."""
    if isinstance(x, (int, float)) and not isinstance(x, np.generic):  # np.float64 is a float, but not weak
        return x  # a Python number is weakly typed already
    return astype(x, _dtype(leaf))


def _lr_at(lr, count):
    """The learning rate for the update after `count` earlier ones."""
    return lr(count) if callable(lr) else lr


def _lerp(a, b, w: float):
    """torch.lerp(a, b, w) as ATen computes it: from the nearer end, for accuracy at both ends."""
    if abs(w) < 0.5:
        return a + w * (b - a)
    return b - (b - a) * (1 - w)


def _arrays(update):
    """`update`, whose eager results are all NumPy arrays: NumPy arithmetic gives 0-d results back as scalars
    (np.float64), and a state of one kind of leaf is simpler to save, load and compare."""
    def wrapper(grads, state, params):
        out = update(grads, state, params)
        leaves, tree = tree_flatten(out)
        return out if is_traced(*leaves) else tree_unflatten(tree, [np.asarray(x) for x in leaves])
    return wrapper


def _flat_state(state, key):
    return tree_flatten(state[key])[0] if key in state else None


# -- SGD --------------------------------------------------------------------------------------------


def sgd(lr, momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False) -> Optimizer:
    """Stochastic gradient descent with optional momentum, as torch.optim.SGD.

    g <- grad + weight_decay * p;  with momentum: b <- g on the first update, else
    momentum * b + (1 - dampening) * g, and g <- g + momentum * b (nesterov) or b;  p <- p - lr * g.
    State: ``{"step", "momentum"}`` (no "momentum" when momentum == 0)."""
    _check_lr(lr, "sgd")
    _check(momentum >= 0 and weight_decay >= 0, "momentum and weight_decay must be >= 0", "sgd")
    _check(not nesterov or (momentum > 0 and dampening == 0),
           "nesterov momentum requires a momentum > 0 and zero dampening (as torch.optim.SGD)", "sgd")

    def init(params):
        state = {"step": _step_zero(params)}
        if momentum != 0:
            state["momentum"] = _zeros_tree(params)
        return state

    def update(grads, state, params):
        gs, ps, tree = _leaves(grads, params, "sgd")
        count = state["step"]
        step_lr_ = _lr_at(lr, count)
        bufs = _flat_state(state, "momentum")
        first = equal(count, 0) if momentum != 0 else None
        new_p, new_b = [], []
        for i, (g, p) in enumerate(zip(gs, ps)):
            if weight_decay != 0:
                g = g + weight_decay * p
            if momentum != 0:
                # torch starts the buffer at the first gradient itself (no dampening), then decays it
                b = where(first, g, bufs[i] * momentum + (1 - dampening) * g)
                new_b.append(b)
                g = g + momentum * b if nesterov else b
            new_p.append(p + -_like(step_lr_, p) * g)
        new_state = {"step": add(count, 1)}
        if momentum != 0:
            new_state["momentum"] = tree_unflatten(tree, new_b)
        return tree_unflatten(tree, new_p), new_state

    return Optimizer(init, _arrays(update), "sgd", dict(lr=lr, momentum=momentum, dampening=dampening,
                                              weight_decay=weight_decay, nesterov=nesterov))


# -- RMSprop ----------------------------------------------------------------------------------------


def rmsprop(lr=1e-2, alpha: float = 0.99, eps: float = 1e-8, momentum: float = 0.0, centered: bool = False,
            weight_decay: float = 0.0) -> Optimizer:
    """RMSprop, as torch.optim.RMSprop.

    g <- grad + weight_decay * p;  s <- alpha * s + (1 - alpha) * g^2;  centered: a <- lerp(a, g, 1 - alpha),
    avg = sqrt(s - a^2) + eps, else sqrt(s) + eps;  momentum > 0: b <- momentum * b + g / avg, p <- p - lr * b,
    else p <- p - lr * g / avg.  State: ``{"step", "square_avg", "grad_avg" (centered), "momentum" (momentum > 0)}``."""
    _check_lr(lr, "rmsprop")
    _check(0 <= alpha and eps >= 0 and momentum >= 0 and weight_decay >= 0,
           "alpha, eps, momentum and weight_decay must be >= 0", "rmsprop")

    def init(params):
        state = {"step": _step_zero(params), "square_avg": _zeros_tree(params)}
        if centered:
            state["grad_avg"] = _zeros_tree(params)
        if momentum > 0:
            state["momentum"] = _zeros_tree(params)
        return state

    def update(grads, state, params):
        gs, ps, tree = _leaves(grads, params, "rmsprop")
        count = state["step"]
        lr_t = _lr_at(lr, count)
        sq, ga, bufs = (_flat_state(state, k) for k in ("square_avg", "grad_avg", "momentum"))
        out: dict[str, list] = {"p": [], "square_avg": [], "grad_avg": [], "momentum": []}
        for i, (g, p) in enumerate(zip(gs, ps)):
            if weight_decay != 0:
                g = g + weight_decay * p
            s = sq[i] * alpha + (1 - alpha) * g * g  # addcmul_(g, g, value=1 - alpha)
            out["square_avg"].append(s)
            if centered:
                a = _lerp(ga[i], g, 1 - alpha)
                out["grad_avg"].append(a)
                avg = sqrt(s + -1 * a * a)  # addcmul(a, a, value=-1)
            else:
                avg = sqrt(s)
            avg = avg + eps
            neg_lr = -_like(lr_t, p)
            if momentum > 0:
                b = bufs[i] * momentum + g / avg  # addcdiv_(g, avg)
                out["momentum"].append(b)
                p = p + neg_lr * b
            else:
                p = p + neg_lr * g / avg  # addcdiv_(g, avg, value=-lr): (value * g) / avg
            out["p"].append(p)
        new_state = {"step": add(count, 1), "square_avg": tree_unflatten(tree, out["square_avg"])}
        if centered:
            new_state["grad_avg"] = tree_unflatten(tree, out["grad_avg"])
        if momentum > 0:
            new_state["momentum"] = tree_unflatten(tree, out["momentum"])
        return tree_unflatten(tree, out["p"]), new_state

    return Optimizer(init, _arrays(update), "rmsprop", dict(lr=lr, alpha=alpha, eps=eps, momentum=momentum, centered=centered,
                                                   weight_decay=weight_decay))


# -- Adam / AdamW -----------------------------------------------------------------------------------


def _adam(name: str, lr, b1: float, b2: float, eps: float, weight_decay: float, decoupled: bool) -> Optimizer:
    _check_lr(lr, name)
    _check(0 <= b1 < 1 and 0 <= b2 < 1, f"betas must be in [0, 1), got b1={b1}, b2={b2}", name)
    _check(eps >= 0 and weight_decay >= 0, "eps and weight_decay must be >= 0", name)

    def init(params):
        return {"step": _step_zero(params), "exp_avg": _zeros_tree(params), "exp_avg_sq": _zeros_tree(params)}

    def update(grads, state, params):
        gs, ps, tree = _leaves(grads, params, name)
        count = state["step"]
        lr_t = _lr_at(lr, count)
        step = add(count, 1)
        t = astype(step, dtypes.float64)  # torch computes the bias corrections in Python floats (double)
        bias_correction1 = 1 - power(b1, t)
        bias_correction2 = 1 - power(b2, t)
        step_size = lr_t / bias_correction1
        bias_correction2_sqrt = sqrt(bias_correction2)
        ms, vs = tree_flatten(state["exp_avg"])[0], tree_flatten(state["exp_avg_sq"])[0]
        new_p, new_m, new_v = [], [], []
        for g, p, m, v in zip(gs, ps, ms, vs):
            if weight_decay != 0:
                if decoupled:  # AdamW: shrink the parameter itself, apart from the gradient's moments
                    p = p * (1 - _like(lr_t, p) * weight_decay)
                else:  # Adam's L2 penalty: part of the gradient
                    g = g + weight_decay * p
            m = _lerp(m, g, 1 - b1)
            v = v * b2 + (1 - b2) * g * g
            denom = sqrt(v) / _like(bias_correction2_sqrt, p) + eps
            new_p.append(p + -_like(step_size, p) * m / denom)  # addcdiv_(m, denom, value=-step_size)
            new_m.append(m)
            new_v.append(v)
        return tree_unflatten(tree, new_p), {"step": step, "exp_avg": tree_unflatten(tree, new_m),
                                             "exp_avg_sq": tree_unflatten(tree, new_v)}

    return Optimizer(init, _arrays(update), name, dict(lr=lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay))


def adam(lr=1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.0) -> Optimizer:
    """Adam, as torch.optim.Adam (amsgrad=False): weight_decay is an L2 penalty added to the gradient.

    With t the step number (from 1): g <- grad + weight_decay * p;  m <- lerp(m, g, 1 - b1);
    v <- b2 * v + (1 - b2) * g^2;  p <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
    State: ``{"step", "exp_avg", "exp_avg_sq"}``."""
    return _adam("adam", lr, b1, b2, eps, weight_decay, decoupled=False)


def adamw(lr=1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 1e-2) -> Optimizer:
    """AdamW, as torch.optim.AdamW: decoupled weight decay, p <- p * (1 - lr * weight_decay) before Adam's
    update (which then sees the raw gradient). State: ``{"step", "exp_avg", "exp_avg_sq"}``."""
    return _adam("adamw", lr, b1, b2, eps, weight_decay, decoupled=True)


# -- learning-rate schedules ------------------------------------------------------------------------


def step_lr(lr: float, step_size: int, gamma: float = 0.1) -> Schedule:
    """``lr * gamma ** (count // step_size)``: torch.optim.lr_scheduler.StepLR(step_size, gamma)."""
    _check(step_size >= 1, f"step_size must be a positive integer, got {step_size!r}", "step_lr")

    def schedule(count):
        return lr * power(gamma, floor(count / step_size))
    schedule.__name__ = f"gr.optim.step_lr({lr!r}, {step_size!r}, {gamma!r})"
    return schedule


def linear_lr(lr: float, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5) -> Schedule:
    """``lr * (start_factor + (end_factor - start_factor) * min(count, total_iters) / total_iters)``:
    torch.optim.lr_scheduler.LinearLR(start_factor, end_factor, total_iters) (constant after total_iters)."""
    _check(total_iters >= 1, f"total_iters must be a positive integer, got {total_iters!r}", "linear_lr")

    def schedule(count):
        return lr * (start_factor + (end_factor - start_factor) * minimum(count, total_iters) / total_iters)
    schedule.__name__ = f"gr.optim.linear_lr({lr!r}, {start_factor!r}, {end_factor!r}, {total_iters!r})"
    return schedule


def linear_warmup(lr: float, warmup_steps: int, start_factor: float = 0.0) -> Schedule:
    """Warm up linearly from ``start_factor * lr`` (0 by default: the first update moves nothing) to `lr` over
    `warmup_steps` updates, then stay at `lr`: torch's LinearLR(start_factor, 1.0, warmup_steps) (which needs
    start_factor > 0; LambdaLR(lambda e: min(e, warmup_steps) / warmup_steps) for 0)."""
    return linear_lr(lr, start_factor, 1.0, warmup_steps)


def cosine(lr: float, total_steps: int, min_lr: float = 0.0, warmup_steps: int = 0) -> Schedule:
    """Cosine annealing from `lr` to `min_lr` over `total_steps` updates, after an optional linear warmup from 0.

    Without warmup: ``min_lr + (lr - min_lr) * (1 + cos(pi * count / total_steps)) / 2``, which is
    torch.optim.lr_scheduler.CosineAnnealingLR(T_max=total_steps, eta_min=min_lr) for count <= total_steps;
    afterwards it stays at min_lr (torch's would rise again along the cosine). With warmup: ``lr * count /
    warmup_steps`` for the first `warmup_steps` updates, then the cosine over the remaining ``total_steps -
    warmup_steps`` (torch's SequentialLR of LambdaLR(lambda e: e / warmup_steps) and that CosineAnnealingLR,
    milestone warmup_steps)."""
    _check(0 <= warmup_steps < total_steps, f"need 0 <= warmup_steps < total_steps, got {warmup_steps}, {total_steps}",
           "cosine")
    decay_steps = total_steps - warmup_steps

    def schedule(count):
        t = minimum(count - warmup_steps, decay_steps) if warmup_steps else minimum(count, decay_steps)
        decayed = min_lr + (lr - min_lr) * (1 + cos(math.pi * t / decay_steps)) / 2
        if not warmup_steps:
            return decayed
        return where(less(count, warmup_steps), lr * count / warmup_steps, decayed)
    schedule.__name__ = f"gr.optim.cosine({lr!r}, {total_steps!r}, {min_lr!r}, {warmup_steps!r})"
    return schedule


# -- gradient clipping ------------------------------------------------------------------------------


def global_norm(tree):
    """The 2-norm of all leaves of `tree` together: the norm of the per-leaf norms, as torch.nn.utils.clip_grad_norm_
    computes it (0-d, in the leaves' promoted dtype)."""
    leaves, _ = tree_flatten(tree)
    _check(len(leaves) > 0, "global_norm of an empty tree", "global_norm")
    total = None
    for x in leaves:
        sq = sum(x * x)  # the leaf's norm squared; its square root squared again would only add rounding
        total = sq if total is None else total + sq
    return sqrt(total)


def clip_by_global_norm(grads, max_norm: float):
    """`grads` scaled by ``min(1, max_norm / (global_norm(grads) + 1e-6))``, as torch.nn.utils.clip_grad_norm_
    (norm_type=2) scales them in place; the scale is applied in each leaf's dtype."""
    _check(max_norm >= 0, f"max_norm must be >= 0, got {max_norm!r}", "clip_by_global_norm")
    leaves, tree = tree_flatten(grads)
    if not leaves:
        return grads
    scale = minimum(max_norm / (global_norm(grads) + 1e-6), 1.0)
    return tree_unflatten(tree, [g * _like(scale, g) for g in leaves])


def clip(max_norm: float) -> Optimizer:
    """A gradient transformation for `chain`: clip_by_global_norm(grads, max_norm); its update returns
    ``(clipped grads, state)`` and its state is empty."""
    _check(max_norm >= 0, f"max_norm must be >= 0, got {max_norm!r}", "clip")
    return Optimizer(lambda params: {}, lambda grads, state, params: (clip_by_global_norm(grads, max_norm), state),
                     "clip", dict(max_norm=max_norm))


def chain(*transforms: Optimizer) -> Optimizer:
    """Gradient transformations (`clip`) followed by an optimizer: ``chain(clip(1.0), adam(1e-3))``.

    Every transformation but the last maps ``(grads, state, params) -> (grads, state)``; the last one is the
    optimizer, whose update gives the new params. State: a dict of each part's state keyed by its name, in order
    (``{"clip": {}, "adam": {...}}``; a repeated name gets a numeric suffix)."""
    _check(len(transforms) >= 1 and all(isinstance(t, Optimizer) for t in transforms),
           "chain takes one or more gr.optim transformations, the optimizer last", "chain")
    _check(all(t.gradients is None for t in transforms), "a transformation that changes how the loss is "
           "differentiated (gr.amp.mixed_precision) goes outside the chain: mixed_precision(chain(...))", "chain")
    keys: list[str] = []
    for t in transforms:
        key, n = t.name, 1
        while key in keys:
            key, n = f"{t.name}_{n}", n + 1
        keys.append(key)

    def init(params):
        return {k: t.init(params) for k, t in zip(keys, transforms)}

    def update(grads, state, params):
        new_state = {}
        for k, t in zip(keys[:-1], transforms[:-1]):
            grads, new_state[k] = t.update(grads, state[k], params)
        params, new_state[keys[-1]] = transforms[-1].update(grads, state[keys[-1]], params)
        return params, new_state

    return Optimizer(init, update, "chain", {k: t for k, t in zip(keys, transforms)})


__dir__ = api_dir(globals())  # dir() and tab completion offer __all__, not the imports (gradir.util.public)
