"""Mixed precision for compiled training steps (`gr.amp`): float16 or bfloat16 compute, float32 master weights,
static or dynamic loss scaling.

    opt = gr.amp.mixed_precision(gr.optim.adam(1e-3), dtype="float16")    # dynamic loss scaling
    result = gr.train(loss, params, opt, batches, steps=1000)             # or gr.train.train_step(loss, opt)

The parameters stay in their own dtype (float32: the master weights). One step, all inside the one program
`gr.train` compiles:

1. the float parameters and the float leaves of the batch are cast to `dtype`, and `loss` runs on those
   copies; its value is cast to float32 and multiplied by the loss scale S;
2. the gradient of that scaled loss flows back through the casts' VJPs and arrives in float32, S times too
   large. On the way it is float16: a large S overflows there to inf, and without S small gradients round
   to zero (TEACHING.md G: 1e-8 is 0 in float16, 1e-8 * 16384 is not);
3. the gradients are divided by S. If any is inf or NaN the step is skipped: the parameters and the wrapped
   optimizer's state are kept as they were (``where(finite, new, old)``, so Adam's step count does not move
   either). The dynamic scaler then multiplies S by `backoff_factor` (halves it), and after `growth_interval`
   finite steps in a row by `growth_factor` (doubles it): torch.amp.GradScaler's rule. A static scale
   (``loss_scale=1024.0``) never changes, and a step that overflows under it is skipped all the same.

State (a dict, saved and resumed by gr.train's checkpoints like any other): ``"loss_scale"`` (float32 0-d),
``"good_steps"`` (finite steps since S last changed), ``"skipped"`` (steps skipped so far), both int64 0-d,
and the wrapped optimizer's state under its name (``"adam"``).

With the default init_scale of 65536 the first step of a loss computed wholly in float16 is skipped: the scale
itself, the first cotangent, is beyond float16's 65504 (torch.amp.GradScaler does the same).

Memory: next to float32 Adam's 4 + 4 + 8 = 16 bytes per parameter, the float16 copy of the weights the
forward computes with adds 2: 18 (`gr.train.memory` lists it as "low-precision parameter copies").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import reduce

import numpy as np

from gradir.api import transforms as api
from gradir.core import dtypes
from gradir.core.errors import GradirError
from gradir.core.ir import Value
from gradir.core.trace import is_traced, quietly, user_source
from gradir.ops import abs, add, astype, greater_equal, less, max, maximum, where, zeros
from gradir.training.optim import Optimizer, _arrays, _dtype
from gradir.util.public import api_dir
from gradir.util.pytree import tree_flatten, tree_unflatten

__all__ = ["all_finite", "cast_floats", "mixed_precision"]

LOW_PRECISION = (dtypes.float16, dtypes.bfloat16)


def cast_floats(tree, dtype):
    """`tree` with every floating-point array leaf (NumPy array or traced value) cast to `dtype`; integer and
    bool leaves (token ids, masks) and Python numbers are left alone."""
    leaves, td = tree_flatten(tree)
    return tree_unflatten(td, [astype(x, dtype) if isinstance(x, (Value, np.ndarray)) and dtypes.is_float(x.dtype)
                               else x for x in leaves])


def all_finite(tree):
    """A 0-d bool: no leaf of `tree` holds an inf or NaN. (max |x| < inf: NaN propagates through max and fails
    the ordered comparison.)"""
    leaves = [x for x in tree_flatten(tree)[0] if np.size(x)]  # an empty leaf holds nothing to check
    if not leaves:
        return less(0.0, math.inf)
    return less(reduce(maximum, [max(abs(x)) for x in leaves]), math.inf)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise GradirError(message, op="amp.mixed_precision", source=user_source())


def _scalar(x, dtype, like):
    """A 0-d `dtype` array (traced when `like`, the parameters, are traced: state made inside a trace)."""
    leaves, _ = tree_flatten(like)
    return zeros((), dtype) + x if is_traced(*leaves) else np.asarray(x, dtype)


def mixed_precision(opt: Optimizer, dtype="float16", loss_scale: str | float | None = "dynamic", *,
                    init_scale: float = 2.0**16, growth_interval: int = 2000, growth_factor: float = 2.0,
                    backoff_factor: float = 0.5) -> Optimizer:
    """`opt` (any gr.optim optimizer, or a chain) run in mixed precision: the loss computed in `dtype`
    ("float16" or "bfloat16") from float32 master weights, with loss scaling; see the module docstring.

    loss_scale: "dynamic" (start at `init_scale`, back off on overflow, grow after `growth_interval` good
    steps), a number (a static scale), or None (no scaling; bfloat16 has float32's range and rarely needs it).
    Keep scales powers of two: then scaling and unscaling are exact."""
    try:
        dtype = dtypes.as_dtype(dtype)
    except Exception:
        dtype = None
    _check(dtype in LOW_PRECISION, "dtype must be float16 or bfloat16 (the compute dtype; the master weights "
                                   "keep the parameters' own dtype)")
    _check(isinstance(opt, Optimizer) and opt.gradients is None,
           "mixed_precision wraps one gr.optim optimizer (or chain), once")
    dynamic = loss_scale == "dynamic"
    _check(dynamic or loss_scale is None or (isinstance(loss_scale, (int, float)) and loss_scale > 0),
           f"loss_scale must be 'dynamic', a positive number or None, got {loss_scale!r}")
    _check(growth_interval >= 1 and growth_factor >= 1 and 0 < backoff_factor <= 1,
           "need growth_interval >= 1, growth_factor >= 1 and 0 < backoff_factor <= 1")
    start = float(init_scale if dynamic else 1.0 if loss_scale is None else loss_scale)
    inner = opt.name

    def init(params):
        return {"loss_scale": _scalar(start, dtypes.float32, params), "good_steps": _scalar(0, dtypes.int64, params),
                "skipped": _scalar(0, dtypes.int64, params), inner: opt.init(params)}

    def gradients(loss: Callable) -> Callable:
        def scaled_loss(params, scale, *batch):
            return astype(loss(cast_floats(params, dtype), *cast_floats(batch, dtype)), dtypes.float32) * scale

        value_and_grad = api.value_and_grad(scaled_loss)

        def run(params, state, *batch):
            scale = state["loss_scale"]
            scaled, grads = value_and_grad(params, scale, *batch)
            return scaled / scale, grads  # exact for a power-of-two scale
        return run

    def update(grads, state, params):
        scale = state["loss_scale"]
        leaves, td = tree_flatten(grads)
        grads = tree_unflatten(td, [g / astype(scale, g.dtype) for g in leaves])
        finite = all_finite(grads)
        # eagerly (NumPy) a skipped step's inf arithmetic would warn; its results are discarded below
        new_params, new_inner = quietly(opt.update, grads, state[inner], params)
        params, inner_state = (_keep_unless(finite, new, old) for new, old in ((new_params, params),
                                                                                (new_inner, state[inner])))
        good = where(finite, add(state["good_steps"], 1), 0)
        if dynamic:
            grow = greater_equal(good, growth_interval)
            scale = where(finite, where(grow, scale * growth_factor, scale), scale * backoff_factor)
            good = where(grow, 0, good)
        skipped = add(state["skipped"], where(finite, 0, 1))
        new_state = {"loss_scale": scale, "good_steps": good, "skipped": skipped, inner: inner_state}
        return params, new_state

    settings = dict(opt=opt, dtype=dtypes.short(dtype), loss_scale=loss_scale)
    if dynamic:
        settings.update(init_scale=init_scale, growth_interval=growth_interval, growth_factor=growth_factor,
                        backoff_factor=backoff_factor)
    return Optimizer(init, _arrays(update), "mixed_precision", settings, gradients=gradients)


def _keep_unless(ok, new, old):
    """`new` where `ok` (0-d bool), else `old`, leaf by leaf in the dtype of `old`."""
    n, td = tree_flatten(new)
    o, _ = tree_flatten(old)
    return tree_unflatten(td, [where(ok, astype(a, _dtype(b)), b) for a, b in zip(n, o)])


__dir__ = api_dir(globals())  # dir() and tab completion offer __all__, not the imports (gradir.util.public)
