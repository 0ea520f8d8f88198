"""One check for an op against PyTorch in float64 (issue 21's op library): the value, the VJP of a random
cotangent (torch.autograd), the JVP along a random tangent (torch.func.jvp, torch's forward mode; central
differences where torch has no forward rule), and the LLVM backend against the NumPy reference on the value
and the gradient."""

from __future__ import annotations

import numpy as np
import torch

import gradir as gr


def _flat(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _floating(a) -> bool:
    return np.issubdtype(np.asarray(a).dtype, np.floating)


def _close(got, want, rtol, atol, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, torch {want.shape}"
    if want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer):
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol,
                                   err_msg=what, equal_nan=True)


def check_op(gfn, tfn, *args, seed=0, rtol=1e-10, atol=1e-12, jvp=True, backends=True):
    """gfn(*args) against tfn(*torch args) (float64): values, VJP and JVP w.r.t. every float argument, and
    (`backends`) the LLVM backend against NumPy. Integer/bool arguments are passed through undifferentiated.
    Outputs that are not floating (indices, masks) are compared by value and get no cotangent."""
    rng = np.random.default_rng(seed)
    args = [np.asarray(a) for a in args]
    live = [i for i, a in enumerate(args) if _floating(a)]
    t_args = [torch.tensor(a, requires_grad=i in live) for i, a in enumerate(args)]
    t_out = _flat(tfn(*t_args))
    out, vjp_fn = gr.vjp(gfn, *args)
    outs = _flat(out)
    assert len(outs) == len(t_out), f"{len(outs)} outputs, torch {len(t_out)}"
    for k, (o, w) in enumerate(zip(outs, t_out)):
        _close(o, w.detach().numpy(), rtol, atol, f"value of output {k}")

    diff = [w.is_floating_point() and w.requires_grad for w in t_out]
    cts = [rng.standard_normal(tuple(w.shape)) if d else np.zeros(tuple(w.shape), np.asarray(o).dtype)
           for w, d, o in zip(t_out, diff, outs)]
    if any(diff) and live:
        want = torch.autograd.grad([w for w, d in zip(t_out, diff) if d], [t_args[i] for i in live],
                                   [torch.from_numpy(c) for c, d in zip(cts, diff) if d], allow_unused=True)
        got = vjp_fn(type(out)(cts) if isinstance(out, (list, tuple)) else cts[0])
        for i, w in zip(live, want):
            _close(got[i], np.zeros(args[i].shape) if w is None else w.numpy(), rtol, atol, f"cotangent of argument {i}")

    if jvp and live and any(diff):
        tangents = [rng.standard_normal(a.shape) if i in live else np.zeros(a.shape, a.dtype)
                    for i, a in enumerate(args)]
        _, got_t = gr.jvp(gfn, tuple(args), tuple(tangents))
        want_t, exact = _torch_jvp(tfn, args, tangents, live)
        tol = (rtol, atol) if exact else (max(rtol, 1e-6), max(atol, 1e-7))  # central differences: O(h^2)
        for k, (g, w, d) in enumerate(zip(_flat(got_t), want_t, diff)):
            if d:
                _close(g, w, *tol, f"tangent of output {k}")

    if backends:
        check_backends(gfn, *args, rtol=max(rtol, 1e-10), atol=max(atol, 1e-12))


def _torch_jvp(tfn, args, tangents, live):
    """(tangents, exact): torch.func.jvp's tangents (float64 numpy), or central differences (exact=False) where
    torch has no forward-mode rule."""
    def f(*xs):
        full = [torch.tensor(a) for a in args]
        for i, x in zip(live, xs):
            full[i] = x
        return tuple(o for o in _flat(tfn(*full)))
    primals = tuple(torch.tensor(args[i]) for i in live)
    tans = tuple(torch.tensor(tangents[i]) for i in live)
    try:
        _, t = torch.func.jvp(f, primals, tans)
        return [x.numpy(force=True) for x in t], True
    except (RuntimeError, NotImplementedError, IndexError):
        h = 1e-6
        plus = f(*(p + h * t for p, t in zip(primals, tans)))
        minus = f(*(p - h * t for p, t in zip(primals, tans)))
        return [((a - b) / (2 * h)).numpy() if a.is_floating_point() else None for a, b in zip(plus, minus)], False


def check_backends(gfn, *args, rtol=1e-10, atol=1e-12):
    """The LLVM backend agrees with the NumPy reference on gfn and on the gradient of a random weighting of it."""
    args = [np.asarray(a) for a in args]
    live = tuple(i for i, a in enumerate(args) if _floating(a))
    outs = _flat(gfn(*args))
    weights = [np.random.default_rng(7 + k).standard_normal(np.shape(o)) for k, o in enumerate(outs)]

    def loss(*a):
        total = 0.0
        for o, w in zip(_flat(gfn(*a)), weights):
            if np.issubdtype(np.dtype(o.dtype), np.floating):
                total = total + gr.sum(o * w)
        return total

    fns = [gfn] + ([gr.grad(loss, argnums=live)] if live and any(_floating(o) for o in outs) else [])
    for f in fns:
        want = _flat(gr.compile(f, backend="numpy")(*args))
        got = _flat(gr.compile(f, backend="llvm")(*args))
        for g, w in zip(got, want):
            _close(g, w, rtol, atol, "LLVM against NumPy")
