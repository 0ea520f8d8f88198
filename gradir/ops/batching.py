"""Batching rules: how each primitive runs on operands that carry an extra batch axis (gr.vmap).

A rule is `rule(operands, bdims, **attrs) -> (out, out_bdim)`: `bdims[i]` is the axis of operand i that
holds the batch (None: operand i is the same for every example, it has the per-example shape), `attrs` are
the node's attributes as traced for one example. The rule returns the batched result and where its batch
axis is. gradir.passes.batching walks a graph calling them; the rules live in the primitives' records
(`Primitive.batch`), attached here by `batch_rule`.

Most rules move the batch axes to the front (`front`), broadcast operands without one (every example
shares them), and shift axis attributes by one. Ops that do not take a leading batch dimension naturally
(a gather whose indices are batched as well as its table) rewrite into one op over the flattened batch.
`loop_rule` is the correct but slow rule for the rest (indexed writes with batched indices, index_reduce):
one application per example, stacked. Any primitive registered after this module has no rule until one is
attached; gr.vmap then names it (gradir.passes.batching).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from gradir.core.errors import ShapeError
from gradir.core.primitive import REGISTRY
from gradir.core.trace import bind, constant

Rule = Callable[..., tuple]


def batch_rule(*names: str):
    """Decorator: `factory(name) -> rule`, attached as the batching rule of each primitive in `names`."""
    def attach(factory):
        for name in names:
            REGISTRY[name].batch = factory(name)
        return factory
    return attach


# -- helpers ---------------------------------------------------------------------------------------
def batch_size(operands, bdims) -> int:
    """The batch size: the length of the batch axis of the batched operands (they agree: the pass checks)."""
    for x, d in zip(operands, bdims):
        if d is not None:
            return x.shape[d]
    raise ShapeError("a batching rule called without a batched operand", op="vmap")


def moveaxis(x, src: int, dst: int):
    """x with axis `src` moved to position `dst` (both non-negative)."""
    if src == dst:
        return x
    perm = [i for i in range(len(x.shape)) if i != src]
    perm.insert(dst, src)
    return bind("transpose", x, perm=tuple(perm))


def front(x, d, size: int):
    """x with its batch axis first; an unbatched x is broadcast along a new first axis of `size`."""
    if d is None:
        return bind("broadcast_to", x, shape=(size,) + tuple(x.shape))
    return moveaxis(x, d, 0)


def _fronts(operands, bdims):
    size = batch_size(operands, bdims)
    return [front(x, d, size) for x, d in zip(operands, bdims)], size


def _reshape(x, shape):
    shape = tuple(shape)
    return x if tuple(x.shape) == shape else bind("reshape", x, shape=shape)


def unbatch(x, d: int, i: int):
    """Example i of x (its batch axis d removed)."""
    n = len(x.shape)
    starts, stops = [0] * n, list(x.shape)
    starts[d], stops[d] = i, i + 1
    part = bind("slice", x, starts=tuple(starts), stops=tuple(stops), steps=(1,) * n)
    return _reshape(part, x.shape[:d] + x.shape[d + 1:])


def _normalized(idx, n: int):
    """Integer indices with negative entries wrapped into [0, n) (as take and index_add read them)."""
    zero = bind("broadcast_to", constant(np.zeros((), idx.dtype)), shape=tuple(idx.shape))
    size = bind("broadcast_to", constant(np.array(n, idx.dtype)), shape=tuple(idx.shape))
    return bind("where", bind("less", idx, zero), bind("add", idx, size), idx)


def _offsets(idx, n: int):
    """Batched indices (B, ...) into a table of B blocks of n rows: idx[b] + b * n, negatives wrapped first."""
    size = idx.shape[0]
    base = constant((np.arange(size, dtype=idx.dtype) * n).reshape((size,) + (1,) * (len(idx.shape) - 1)))
    return bind("add", _normalized(idx, n), bind("broadcast_to", base, shape=tuple(idx.shape)))


# -- the generic rules -------------------------------------------------------------------------------
def loop_rule(name: str) -> Rule:
    """One application of `name` per example, stacked along a new first axis: right for any primitive (each
    application sees exactly the per-example shapes it was traced with), at B nodes' cost."""
    def rule(operands, bdims, **attrs):
        size = batch_size(operands, bdims)
        if size == 0:
            raise ShapeError(f"cannot batch {name} over an empty batch (it has no batching rule but a loop)", op=name)
        rows = []
        for i in range(size):
            out = bind(name, *[x if d is None else unbatch(x, d, i) for x, d in zip(operands, bdims)], **attrs)
            rows.append(_reshape(out, (1,) + tuple(out.shape)))
        return (rows[0] if size == 1 else bind("concatenate", *rows, axis=0)), 0
    return rule


_ELEMENTWISE = [n for n, p in REGISTRY.items() if p.kind == "elementwise"] + ["check_classes"]


@batch_rule(*_ELEMENTWISE)
def elementwise(name: str) -> Rule:
    """Operands of one shape: all batched on one axis keep it, else batch axes first and the others broadcast."""
    def rule(operands, bdims, **attrs):
        if bdims[0] is not None and all(d == bdims[0] for d in bdims):
            return bind(name, *operands, **attrs), bdims[0]
        xs, _ = _fronts(operands, bdims)
        return bind(name, *xs, **attrs), 0
    return rule


@batch_rule("inv", "det", "slogdet_sign", "logabsdet", "cholesky", "qr_q", "qr_r", "eigh_values", "eigh_vectors",
            "svd_u", "svd_s", "svd_vh", "solve", "solve_triangular")
def leading_batch(name: str) -> Rule:
    """Ops that already map over leading axes (stacks of matrices): the batch axis becomes one more of them."""
    def rule(operands, bdims, **attrs):
        xs, _ = _fronts(operands, bdims)
        return bind(name, *xs, **attrs), 0
    return rule


# -- reductions and scans ----------------------------------------------------------------------------
@batch_rule("sum", "max", "min", "prod")
def reduction(name: str) -> Rule:
    def rule(operands, bdims, axes, keepdims):
        x = moveaxis(operands[0], bdims[0], 0)
        ndim = len(x.shape) - 1  # (a 0-d example may be "reduced" over axis 0: nothing to do then)
        return bind(name, x, axes=tuple(a + 1 for a in axes if a < ndim), keepdims=keepdims), 0
    return rule


@batch_rule("argmax", "argmin", "cumsum", "cumprod", "cumarg", "logcumsumexp", "argsort")
def along_axis(name: str) -> Rule:
    """Ops along one `axis` of their operand: it moves one place right of the leading batch axis."""
    def rule(operands, bdims, axis, **attrs):
        x = moveaxis(operands[0], bdims[0], 0)
        return bind(name, x, axis=axis + 1, **attrs), 0
    return rule


# -- shapes ------------------------------------------------------------------------------------------
@batch_rule("reshape")
def _reshape_rule(name):
    def rule(operands, bdims, shape):
        x = moveaxis(operands[0], bdims[0], 0)
        return _reshape(x, (x.shape[0],) + tuple(shape)), 0
    return rule


@batch_rule("transpose")
def _transpose_rule(name):
    def rule(operands, bdims, perm):
        (x,), (d,) = operands, bdims
        # the batch axis stays where it is; the example's axes are permuted around it
        axes = [a for a in range(len(x.shape)) if a != d]
        new = [axes[p] for p in perm]
        new.insert(d, d)
        return bind("transpose", x, perm=tuple(new)), d
    return rule


@batch_rule("broadcast_to")
def _broadcast_rule(name):
    def rule(operands, bdims, shape):
        x = moveaxis(operands[0], bdims[0], 0)
        size, example = x.shape[0], tuple(x.shape[1:])
        x = _reshape(x, (size,) + (1,) * (len(shape) - len(example)) + example)  # align the example's axes right
        return bind("broadcast_to", x, shape=(size,) + tuple(shape)), 0
    return rule


@batch_rule("slice")
def _slice_rule(name):
    def rule(operands, bdims, starts, stops, steps):
        x = moveaxis(operands[0], bdims[0], 0)
        return bind("slice", x, starts=(0,) + tuple(starts), stops=(x.shape[0],) + tuple(stops),
                    steps=(1,) + tuple(steps)), 0
    return rule


@batch_rule("pad")
def _pad_rule(name):
    def rule(operands, bdims, lo, hi, interior, value):
        x = moveaxis(operands[0], bdims[0], 0)
        return bind("pad", x, lo=(0,) + tuple(lo), hi=(0,) + tuple(hi), interior=(0,) + tuple(interior),
                    value=value), 0
    return rule


@batch_rule("concatenate")
def _concatenate_rule(name):
    def rule(operands, bdims, axis):
        xs, _ = _fronts(operands, bdims)
        return bind("concatenate", *xs, axis=axis + 1), 0
    return rule


@batch_rule("update_slice")
def _update_slice_rule(name):
    def rule(operands, bdims, starts, stops, steps):
        (x, v), size = _fronts(operands, bdims)
        return bind("update_slice", x, v, starts=(0,) + tuple(starts), stops=(size,) + tuple(stops),
                    steps=(1,) + tuple(steps)), 0
    return rule


# -- matmul ------------------------------------------------------------------------------------------
@batch_rule("matmul")
def _matmul_rule(name):
    def rule(operands, bdims):
        (a, b), (da, db) = operands, bdims
        if da is not None and db is None and len(b.shape) == 2:  # rows times one matrix: one product
            a = moveaxis(a, da, 0)
            rows = bind("matmul", _reshape(a, (math.prod(a.shape[:-1]), a.shape[-1])), b)
            return _reshape(rows, tuple(a.shape[:-1]) + (b.shape[-1],)), 0
        if da is None and db is not None and len(a.shape) == 2 and len(b.shape) == 3:  # one matrix times B of them
            b = moveaxis(b, db, 1)  # (k, B, n) -> (k, B*n): one product, the batch axis lands in the middle
            k, size, n = b.shape
            out = bind("matmul", a, _reshape(b, (k, size * n)))
            return _reshape(out, (a.shape[0], size, n)), 1
        (a, b), _ = _fronts(operands, bdims)
        return bind("matmul", a, b), 0
    return rule


# -- gathers and scatters ----------------------------------------------------------------------------
@batch_rule("take")
def _take_rule(name):
    def rule(operands, bdims, axis):
        (x, idx), (dx, di) = operands, bdims
        if di is None:
            return bind("take", moveaxis(x, dx, 0), idx, axis=axis + 1), 0
        if dx is None:  # one table, batched indices: the batch axis of idx lands at `axis`
            return bind("take", x, idx, axis=axis), axis + di
        # both batched: gather rows of the (B*n, ...) table at idx[b] + b*n
        x, idx = moveaxis(x, dx, 0), moveaxis(idx, di, 0)
        size, n = x.shape[0], x.shape[axis + 1]
        rest = tuple(x.shape[1:axis + 1]) + tuple(x.shape[axis + 2:])
        table = _reshape(moveaxis(x, axis + 1, 1), (size * n,) + rest)
        out = bind("take", table, _offsets(idx, n), axis=0)  # (B, *idx, pre..., post...)
        k = len(idx.shape)  # B and the index axes: put the index axes back at `axis`
        perm = (0,) + tuple(range(k, k + axis)) + tuple(range(1, k)) + tuple(range(k + axis, len(out.shape)))
        return bind("transpose", out, perm=perm), 0
    return rule


@batch_rule("index_add")
def _index_add_rule(name):
    def rule(operands, bdims, axis, size):
        (g, idx), (dg, di) = operands, bdims
        if di is None:
            return bind("index_add", moveaxis(g, dg, 0), idx, axis=axis + 1, size=size), 0
        (g, idx), batch = _fronts(operands, bdims)  # (B, pre..., *idx, post...), (B, *idx)
        k = len(idx.shape) - 1
        # the index axes first after B, then a scatter into B blocks of `size` rows
        perm = (0,) + tuple(range(axis + 1, axis + 1 + k)) + tuple(range(1, axis + 1)) \
            + tuple(range(axis + 1 + k, len(g.shape)))
        out = bind("index_add", bind("transpose", g, perm=perm), _offsets(idx, size), axis=0, size=batch * size)
        out = _reshape(out, (batch, size) + tuple(out.shape[1:]))  # (B, size, pre..., post...)
        return moveaxis(out, 1, axis + 1), 0
    return rule


@batch_rule("index_update")
def _index_update_rule(name):
    loop = loop_rule(name)

    def rule(operands, bdims, axis):
        (x, idx, v), (dx, di, dv) = operands, bdims
        if di is not None:
            return loop(operands, bdims, axis=axis)
        size = batch_size(operands, bdims)
        return bind("index_update", front(x, dx, size), idx, front(v, dv, size), axis=axis + 1), 0
    return rule


REGISTRY["index_reduce"].batch = loop_rule("index_reduce")


@batch_rule("unfold", "fold")
def _windows_rule(name):
    """im2col / col2im map over their leading N axis: the batch axis is folded into it."""
    def rule(operands, bdims, **attrs):
        x = moveaxis(operands[0], bdims[0], 0)
        size, n = x.shape[:2]
        out = bind(name, _reshape(x, (size * n,) + tuple(x.shape[2:])), **attrs)
        return _reshape(out, (size, n) + tuple(out.shape[1:])), 0
    return rule


__all__ = ["batch_rule", "batch_size", "front", "loop_rule", "moveaxis", "unbatch"]
