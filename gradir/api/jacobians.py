"""Full Jacobians and Hessians: gr.jacobian (reverse mode, jax.jacrev), gr.jacfwd (forward mode), gr.hessian.

    gr.jacobian(f)(x)   # vmap of f's VJP over the basis of its output: one batched backward pass
    gr.jacfwd(f)(x)     # vmap of f's JVP over the basis of its input: one batched forward-mode pass
    gr.hessian(f)(x)    # jacfwd(jacobian(f)): forward over reverse

Shapes and nesting follow JAX (and torch.func): the Jacobian of an output leaf of shape S with respect to an
input leaf of shape T has shape S + T; the result is the output's structure, each leaf replaced by the
Jacobians with respect to the arguments `argnums` (one argument's structure for an int, a tuple of them for a
tuple). Each transformation is ordinary ops: it composes with compile, vmap and itself.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from gradir.api.args import as_leaf, prepare
from gradir.api.transforms import _argnums, _wrt, jvp, vjp
from gradir.api.vmap import vmap
from gradir.core import dtypes
from gradir.core.errors import DTypeError
from gradir.core.interop import is_torch, numpy_to_torch
from gradir.core.ir import Value
from gradir.core.trace import abstract_dtype, user_source
from gradir.ops import reshape, zeros
from gradir.util.pytree import tree_flatten, tree_map, tree_unflatten


def _shape(x) -> tuple[int, ...]:
    return tuple(np.shape(x)) if not isinstance(x, Value) else x.shape


def _as(x, shape):
    """x reshaped to `shape` (a NumPy array stays one)."""
    return reshape(x, shape) if isinstance(x, Value) else np.reshape(np.asarray(x), shape)


def _basis(shape, dtype) -> np.ndarray:
    """The standard basis of arrays of `shape`, stacked: (size, *shape)."""
    n = math.prod(shape)
    return np.eye(n, dtype=dtype).reshape((n,) + tuple(shape))


def _setup(fn, args, kwargs, argnums, op):
    """(f, numpy-fied args, argnums tuple, Args, torch_out): torch tensors become NumPy arrays (results go back
    as torch); the arguments `argnums` must be real floats."""
    f = functools.partial(fn, **kwargs) if kwargs else fn
    torch_out = any(is_torch(x) for x in tree_flatten(args)[0])
    if torch_out:
        args = tuple(tree_map(lambda x: as_leaf(x) if is_torch(x) else x, a) for a in args)
    a = prepare(f, args)
    nums = _argnums(argnums, len(args), op)
    _wrt(a, nums, op)
    return f, tuple(args), nums, a, torch_out


def _finish(result, torch_out: bool):
    return tree_map(lambda x: numpy_to_torch(np.asarray(x)), result) if torch_out else result


def _check_float_output(o, op):
    dt = o.dtype if isinstance(o, Value) else abstract_dtype(np.asarray(o))
    if not dtypes.is_float(dt):
        raise DTypeError(f"the function returned a {dtypes.short(dt)} output; Jacobians are defined for real float "
                         "outputs only", op=op, source=user_source())


def jacobian(fn: Callable, argnums: int | tuple[int, ...] = 0) -> Callable:
    """The Jacobian of `fn` with respect to positional arguments `argnums`, by reverse mode (jax.jacrev,
    torch.func.jacrev): f's VJP, vmapped over the standard basis of each output leaf, one row per output
    element. Shapes: output shape + argument shape; nesting: output structure, then arguments (a tuple of
    them when `argnums` is a tuple)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        f, args, nums, a, torch_out = _setup(fn, args, kwargs, argnums, "jacobian")
        out, pullback = vjp(f, *args)
        flat_out, out_tree = tree_flatten(out)
        per_out = []
        for j, o in enumerate(flat_out):
            _check_float_output(o, "jacobian")
            shape = _shape(o)

            def row(ct, j=j):
                cts = [ct if k == j else zeros(_shape(x), x.dtype if isinstance(x, Value) else np.asarray(x).dtype)
                       for k, x in enumerate(flat_out)]
                grads = pullback(tree_unflatten(out_tree, cts))
                return tuple(grads[n] for n in nums)

            dtype = o.dtype if isinstance(o, Value) else np.asarray(o).dtype
            rows = vmap(row)(_basis(shape, dtype))  # per argument: its structure, leaves (size, *leaf shape)
            jac = tuple(tree_map(lambda r, shape=shape: _as(r, shape + _shape(r)[1:]), r) for r in rows)
            per_out.append(jac[0] if isinstance(argnums, int) else jac)
        return _finish(tree_unflatten(out_tree, per_out), torch_out)
    return wrapper


def jacfwd(fn: Callable, argnums: int | tuple[int, ...] = 0) -> Callable:
    """The Jacobian of `fn` with respect to positional arguments `argnums`, by forward mode (jax.jacfwd,
    torch.func.jacfwd): f's JVP, vmapped over the standard basis of each input leaf, one column per input
    element. Same shapes and nesting as gr.jacobian; cheaper when inputs are fewer than outputs."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        f, args, nums, a, torch_out = _setup(fn, args, kwargs, argnums, "jacfwd")
        zero_tangents = [np.zeros(np.shape(x), abstract_dtype(x)) for x in a.flat]
        out_tree, columns = None, {}  # leaf index -> the flat output tangents, each (*out shape, *leaf shape)
        for n in nums:
            for i in a.leaf_ranges[n]:
                shape = _shape(a.flat[i])

                def push(t, i=i):
                    tangents = list(zero_tangents)
                    tangents[i] = t
                    return jvp(f, args, tree_unflatten(a.in_tree, tangents))[1]

                cols = vmap(push, out_axes=-1)(_basis(shape, abstract_dtype(a.flat[i])))
                flat, out_tree = tree_flatten(cols)
                columns[i] = [_as(c, _shape(c)[:-1] + shape) for c in flat]
        per_out = []
        for j in range(out_tree.num_leaves):
            jac = []
            for n in nums:
                sub = tree_flatten(args[n])[1]
                jac.append(tree_unflatten(sub, [columns[i][j] for i in a.leaf_ranges[n]]))
            per_out.append(jac[0] if isinstance(argnums, int) else tuple(jac))
        return _finish(tree_unflatten(out_tree, per_out), torch_out)
    return wrapper


def hessian(fn: Callable, argnums: int | tuple[int, ...] = 0) -> Callable:
    """The Hessian of `fn` with respect to positional arguments `argnums` (jax.hessian, torch.func.hessian):
    jacfwd(jacobian(fn, argnums), argnums), forward over reverse. For a scalar f of x with shape T: T + T; for a
    tuple of argnums, the blocks nested as `H[i][j]`."""
    return functools.wraps(fn)(jacfwd(jacobian(fn, argnums), argnums))


__all__ = ["hessian", "jacfwd", "jacobian"]
