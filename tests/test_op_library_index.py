"""Diagonals, stacking and index writes (issue 21): diagonal/diag/diag_embed/linalg_trace, flip/rot90/hstack/
vstack/meshgrid, index_add/index_copy/index_fill/index_put, select_scatter/slice_scatter/masked_scatter,
scatter_reduce, and 0-d sort/gather/scatter, each against torch autograd in float64 (value, VJP, JVP, LLVM
against NumPy) over non-trailing axes, 0-d, size-1 and empty inputs, with constant and traced indices."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_ops import check_second_order
from torch_oracle import check_op

import gradir as gr
from gradir.core.errors import AxisError, DTypeError, ShapeError, UnsupportedOpError


def normal(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def T(a):
    return torch.tensor(np.asarray(a))


# -- 0-d sort / gather / scatter ---------------------------------------------------------------------
def test_sort_argsort_0d():
    check_op(lambda a: gr.sort(a), lambda a: torch.sort(a).values, np.array(1.5))
    check_op(lambda a: gr.sort(a, 0, descending=True), lambda a: torch.sort(a, 0, True).values, np.array(1.5))
    check_op(lambda a: gr.argsort(a, -1), lambda a: torch.argsort(a, -1), np.array(1.5))
    with pytest.raises(AxisError):
        gr.sort(np.array(1.0), 1)


@pytest.mark.parametrize("x, index", [(np.array(1.5), np.array(0)), (np.array(1.5), np.array([0, 0])),
                                      (normal(3), np.array(2)), (np.array(1.5), np.array([0]))])
def test_gather_0d(x, index):
    check_op(lambda a: gr.gather(a, 0, index), lambda a: torch.gather(a, 0, T(index)), x)
    check_op(lambda a, i: gr.gather(a, -1, i), lambda a, i: torch.gather(a, -1, i), x, index)  # traced index


@pytest.mark.parametrize("x, index, src", [(np.array(1.5), np.array(0), np.array(2.5)),
                                           (np.array(1.5), np.array([0]), np.array([2.5])),
                                           (normal(3), np.array(1), np.array(2.5))])
def test_scatter_scatter_add_0d(x, index, src):
    check_op(lambda a, s: gr.scatter(a, 0, index, s), lambda a, s: torch.scatter(a, 0, T(index), s), x, src)
    check_op(lambda a, s: gr.scatter_add(a, 0, index, s), lambda a, s: torch.scatter_add(a, 0, T(index), s), x, src)


def test_scatter_add_0d_repeats_and_errors():
    check_op(lambda a, s: gr.scatter_add(a, 0, np.array([0, 0]), s),
             lambda a, s: torch.scatter_add(a, 0, torch.tensor([0, 0]), s), np.array(1.5), np.array([2.5, 1.0]))
    with pytest.raises(ShapeError):
        gr.gather(np.array(1.0), 0, np.array([[0]]))  # a 0-d x counts as 1-d, so a 2-d index does not fit
    with pytest.raises(ShapeError):
        gr.gather(np.array(1.0), 0, np.array([1]))


# -- diagonals ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("offset, a1, a2", [(0, 0, 1), (1, 2, 0), (-1, -1, -2), (3, 1, 2), (-2, 0, 2), (7, 0, 1)])
def test_diagonal(offset, a1, a2):
    check_op(lambda a: gr.diagonal(a, offset, a1, a2), lambda a: torch.diagonal(a, offset, a1, a2), normal(2, 3, 4))


def test_diagonal_edges_and_errors():
    check_op(lambda a: gr.diagonal(a), lambda a: torch.diagonal(a), normal(1, 1))
    check_op(lambda a: gr.diagonal(a, 0, 1, 2), lambda a: torch.diagonal(a, 0, 1, 2), np.zeros((2, 0, 3)))
    np.testing.assert_array_equal(gr.diagonal(np.arange(12.0).reshape(3, 4), 1), np.diagonal(np.arange(12.0).reshape(3, 4), 1))
    with pytest.raises(ShapeError):
        gr.diagonal(normal(3))
    with pytest.raises(AxisError):
        gr.diagonal(normal(3, 3), 0, 1, -1)


@pytest.mark.parametrize("k", [0, 2, -1])
def test_diag(k):
    check_op(lambda a: gr.diag(a, k), lambda a: torch.diag(a, k), normal(3))  # vector -> matrix
    check_op(lambda a: gr.diag(a, k), lambda a: torch.diag(a, k), normal(3, 4))  # matrix -> vector
    check_op(lambda a: gr.diag(a, k), lambda a: torch.diag(a, k), normal(1))


def test_diag_edges():
    np.testing.assert_array_equal(gr.diag(np.zeros(0), -2), np.diag(np.zeros(0), -2))
    check_op(lambda a: gr.diag(a, 5), lambda a: torch.diag(a, 5), normal(2, 3))  # an empty diagonal
    with pytest.raises(ShapeError):
        gr.diag(np.array(1.0))


@pytest.mark.parametrize("offset, a1, a2", [(0, -2, -1), (1, 0, 2), (-2, 2, 0), (0, 1, 0), (2, -1, 1)])
def test_diag_embed(offset, a1, a2):
    check_op(lambda a: gr.diag_embed(a, offset, a1, a2), lambda a: torch.diag_embed(a, offset, a1, a2), normal(2, 3))


def test_diag_embed_edges():
    check_op(lambda a: gr.diag_embed(a, -1), lambda a: torch.diag_embed(a, -1), normal(4))
    check_op(lambda a: gr.diag_embed(a), lambda a: torch.diag_embed(a), np.zeros((2, 0)))
    x = normal(2, 3)
    np.testing.assert_array_equal(gr.diagonal(gr.diag_embed(x, 1, 0, 2), 1, 0, 2), x)  # diagonal inverts it
    with pytest.raises(ShapeError):
        gr.diag_embed(np.array(1.0))


def test_linalg_trace():
    check_op(gr.linalg_trace, torch.trace, normal(3, 4))
    check_op(lambda a: gr.linalg_trace(a, 1), lambda a: torch.diagonal(a, 1, -2, -1).sum(-1), normal(2, 3, 3))
    check_op(lambda a: gr.linalg_trace(a, -1, 0, 2), lambda a: torch.diagonal(a, -1, 0, 2).sum(-1), normal(3, 2, 4))
    np.testing.assert_allclose(gr.linalg_trace(normal(3, 2, 4), 0, 0, 1), np.trace(normal(3, 2, 4)))
    assert gr.trace.__module__.startswith("gradir.api")  # gr.trace stays the tracer


# -- flip / rot90 / hstack / vstack / meshgrid --------------------------------------------------------
@pytest.mark.parametrize("axis", [None, 0, (0, 2), -1])
def test_flip(axis):
    dims = [0, 1, 2] if axis is None else [axis] if isinstance(axis, int) else list(axis)
    check_op(lambda a: gr.flip(a, axis), lambda a: torch.flip(a, dims), normal(2, 3, 4))


def test_flip_0d():
    check_op(lambda a: gr.flip(a), lambda a: torch.flip(a, []), np.array(1.5))


@pytest.mark.parametrize("k", [-1, 0, 1, 2, 3, 5])
@pytest.mark.parametrize("axes", [(0, 1), (2, 0), (-1, 1)])
def test_rot90(k, axes):
    check_op(lambda a: gr.rot90(a, k, axes), lambda a: torch.rot90(a, k, axes), normal(2, 3, 4))


def test_rot90_errors():
    with pytest.raises(AxisError):
        gr.rot90(normal(2, 2), 1, (0, 0))
    with pytest.raises(ShapeError):
        gr.rot90(normal(3))


@pytest.mark.parametrize("shapes", [[(3,), (2,)], [(2, 3), (2, 1)], [(), ()], [(2, 0, 2), (2, 1, 2)]])
def test_hstack(shapes):
    args = [normal(*s, seed=i) for i, s in enumerate(shapes)]
    check_op(lambda *a: gr.hstack(a), lambda *a: torch.hstack(a), *args)


@pytest.mark.parametrize("shapes", [[(3,), (3,)], [(2, 3), (1, 3)], [(), ()], [(0, 2), (2,)]])
def test_vstack(shapes):
    args = [normal(*s, seed=i) for i, s in enumerate(shapes)]
    check_op(lambda *a: gr.vstack(a), lambda *a: torch.vstack(a), *args)


@pytest.mark.parametrize("indexing", ["xy", "ij"])
@pytest.mark.parametrize("shapes", [[(3,), (2,)], [(3,), (2,), (4,)], [(), (2,)], [(3,)], [(0,), (2,)]])
def test_meshgrid(indexing, shapes):
    args = [normal(*s, seed=i) for i, s in enumerate(shapes)]
    check_op(lambda *a: gr.meshgrid(*a, indexing=indexing), lambda *a: torch.meshgrid(*a, indexing=indexing), *args)


def test_meshgrid_xy_is_numpys_default():
    a, b = np.arange(3.0), np.arange(2.0)
    for got, want in zip(gr.meshgrid(a, b), np.meshgrid(a, b)):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ShapeError):
        gr.meshgrid(a, indexing="yx")


# -- index_add / index_copy / index_fill ----------------------------------------------------------------
IDX = np.array([2, 0])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_index_add(axis):
    x = normal(3, 4, 3)
    src = normal(*[2 if a == axis % 3 else n for a, n in enumerate(x.shape)], seed=1)
    check_op(lambda a, s: gr.index_add(a, axis, IDX, s, alpha=-1.5),
             lambda a, s: torch.index_add(a, axis, T(IDX), s, alpha=-1.5), x, src)
    check_op(lambda a, i, s: gr.index_add(a, axis, i, s), lambda a, i, s: torch.index_add(a, axis, i, s), x, IDX, src)


def test_index_add_repeats_0d_and_empty():
    idx = np.array([1, 1, 0, 1])
    check_op(lambda a, s: gr.index_add(a, 0, idx, s), lambda a, s: torch.index_add(a, 0, T(idx), s),
             normal(3, 2), normal(4, 2, seed=1))
    check_op(lambda a, s: gr.index_add(a, 0, np.array([0]), s),
             lambda a, s: torch.index_add(a, 0, torch.tensor([0]), s), np.array(1.5), np.array(2.0))
    check_op(lambda a, s: gr.index_add(a, 1, np.zeros(0, np.int64), s),
             lambda a, s: torch.index_add(a, 1, torch.zeros(0, dtype=torch.int64), s), normal(2, 3), np.zeros((2, 0)))


@pytest.mark.parametrize("axis", [0, 1])
def test_index_copy(axis):
    x = normal(3, 4)
    src = normal(*[2 if a == axis else n for a, n in enumerate(x.shape)], seed=1)
    check_op(lambda a, s: gr.index_copy(a, axis, IDX, s), lambda a, s: torch.index_copy(a, axis, T(IDX), s), x, src)
    check_op(lambda a, i, s: gr.index_copy(a, axis, i, s), lambda a, i, s: torch.index_copy(a, axis, i, s),
             x, IDX, src)


@pytest.mark.parametrize("axis, index", [(0, np.array([2, 0])), (1, np.array([-1, 1])), (1, np.array(3)),
                                         (0, np.array([1, 1]))])
def test_index_fill(axis, index):
    # the value is differentiable: torch gives it each filled element once, repeated positions or not (torch's
    # backward fails on a negative position, which its forward takes: torch is given the wrapped one)
    wrapped = T(index % (3, 4)[axis])
    check_op(lambda a, v: gr.index_fill(a, axis, index, v), lambda a, v: torch.index_fill(a, axis, wrapped, v),
             normal(3, 4), np.array(0.7))
    check_op(lambda a: gr.index_fill(a, axis, index, 2.5), lambda a: torch.index_fill(a, axis, T(index), 2.5),
             normal(3, 4))


def test_index_fill_traced_and_0d():
    check_op(lambda a, i, v: gr.index_fill(a, 1, i, v), lambda a, i, v: torch.index_fill(a, 1, i % 4, v),
             normal(3, 4), np.array([-1, 0]), np.array(0.7))
    check_op(lambda a: gr.index_fill(a, 0, np.array(0), -1.0), lambda a: torch.index_fill(a, 0, torch.tensor(0), -1.0),
             np.array(1.5))


def test_index_writes_errors():
    with pytest.raises(ShapeError, match="out of bounds"):
        gr.index_add(normal(3), 0, np.array([-1]), normal(1))  # torch refuses negative positions here
    with pytest.raises(ShapeError, match="source shape"):
        gr.index_copy(normal(3, 4), 1, IDX, normal(3, 3))
    with pytest.raises(ShapeError):
        gr.index_fill(normal(3, 4), 0, IDX, np.ones(2))
    with pytest.raises(ShapeError):
        gr.index_add(normal(3, 4), 0, np.array([[0]]), normal(1, 4))
    with pytest.raises(DTypeError):
        gr.index_copy(normal(3), 0, np.array([0.5]), normal(1))


# -- index_put -----------------------------------------------------------------------------------------
I0, I1 = np.array([0, 2, -1]), np.array([1, 1, 3])
PUT = [  # (x shape, indices, values shape): leading, middle (adjacent), split (not adjacent), broadcast, masks
    ((3, 4), (I0, I1), (3,)),
    ((3, 4), (I0, I1), ()),
    ((2, 3, 4), (None, np.array([0, 2])), (2, 2, 4)),
    ((2, 3, 4), (None, np.array([[0], [2]]), np.array([1, 3])), (2, 2, 2)),
    ((2, 3, 4), (np.array([1, -2]), None, I1[:2]), (2, 3)),
    ((2, 3, 4), (np.array([1, 0]),), (4,)),
    ((3, 4), (np.array([[True, False, True, False], [False] * 4, [True] * 4]),), (6,)),
    ((3, 4), (np.array([True, False, True]),), (1, 4)),
]


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("shape, indices, vshape", PUT)
def test_index_put(shape, indices, vshape, accumulate):
    t_indices = [None if i is None else T(i) for i in indices]
    check_op(lambda a, v: gr.index_put(a, indices, v, accumulate),
             lambda a, v: torch.ops.aten.index_put(a, t_indices, v, accumulate), normal(*shape), normal(*vshape, seed=1))


def test_index_put_repeats_accumulate_and_traced():
    idx = (np.array([1, 0, 1, 1]),)
    check_op(lambda a, v: gr.index_put(a, idx, v, accumulate=True),
             lambda a, v: torch.index_put(a, (T(idx[0]),), v, accumulate=True), normal(3, 2), normal(4, 2, seed=1))
    # traced integer indices (negatives wrap when the program runs) and a traced mask with a scalar value
    check_op(lambda a, i, j, v: gr.index_put(a, (i, j), v), lambda a, i, j, v: torch.index_put(a, (i, j), v),
             normal(3, 4), I0, I1, normal(3, seed=1))
    mask = normal(3, 4, seed=2) > 0
    for acc in (False, True):
        check_op(lambda a, m, v: gr.index_put(a, (m,), v, acc), lambda a, m, v: torch.index_put(a, (m,), v, acc),
                 normal(3, 4), mask, np.array(0.5))
        check_op(lambda a, m, v: gr.index_put(a, (m,), v, acc), lambda a, m, v: torch.index_put(a, (m,), v, acc),
                 normal(3, 4), mask[:, 0], normal(4, seed=3))


def test_index_put_errors():
    with pytest.raises(ShapeError):
        gr.index_put(normal(3), (np.array([3]),), 1.0)
    with pytest.raises(ShapeError):
        gr.index_put(normal(3, 4), (I0, I1), normal(2))
    with pytest.raises(ShapeError):
        gr.index_put(normal(3), (I0, I1), 1.0)
    with pytest.raises(UnsupportedOpError):
        gr.trace(lambda a, m: gr.index_put(a, (m, np.array([0])), 1.0), normal(3, 4), np.ones(3, bool))


# -- select_scatter / slice_scatter / masked_scatter ----------------------------------------------------
@pytest.mark.parametrize("axis, index", [(0, 1), (1, -1), (2, 0)])
def test_select_scatter(axis, index):
    x = normal(2, 3, 4)
    src = normal(*[n for a, n in enumerate(x.shape) if a != axis], seed=1)
    check_op(lambda a, s: gr.select_scatter(a, s, axis, index), lambda a, s: torch.select_scatter(a, s, axis, index),
             x, src)


@pytest.mark.parametrize("axis, start, end, step", [(0, None, None, 1), (1, 1, None, 1), (2, 1, None, 2),
                                                    (2, -3, -1, 1), (1, 2, 2, 1)])
def test_slice_scatter(axis, start, end, step):
    x = normal(2, 3, 4)
    want = torch.tensor(x)[(slice(None),) * axis + (slice(start, end, step),)].shape
    check_op(lambda a, s: gr.slice_scatter(a, s, axis, start, end, step),
             lambda a, s: torch.slice_scatter(a, s, axis, start, end, step), x, normal(*want, seed=1))


def test_select_slice_scatter_errors():
    with pytest.raises(ShapeError):
        gr.select_scatter(normal(2, 3), normal(2), 0, 0)
    with pytest.raises(ShapeError):
        gr.select_scatter(normal(2, 3), normal(3), 0, 2)
    with pytest.raises(ShapeError):
        gr.slice_scatter(normal(2, 3), normal(2, 1), 1, 0, 3, 2)
    with pytest.raises(ShapeError):
        gr.slice_scatter(normal(2, 3), normal(2, 3), 1, 0, 3, 0)


@pytest.mark.parametrize("mshape", [(3, 4), (4,), (3, 1)])
def test_masked_scatter(mshape):
    mask = normal(*mshape, seed=2) > 0
    x, src = normal(3, 4), normal(14, seed=1)
    check_op(lambda a, s: gr.masked_scatter(a, mask, s), lambda a, s: a.masked_scatter(T(mask), s), x, src)
    check_op(lambda a, m, s: gr.masked_scatter(a, m, s), lambda a, m, s: a.masked_scatter(m, s), x, mask, src)


def test_masked_scatter_edges():
    x = normal(2, 3)
    check_op(lambda a, s: gr.masked_scatter(a, np.zeros((2, 3), bool), s),
             lambda a, s: a.masked_scatter(torch.zeros(2, 3, dtype=torch.bool), s), x, normal(2, 2, seed=1))
    check_op(lambda a, s: gr.masked_scatter(a, np.ones((2, 3), bool), s),
             lambda a, s: a.masked_scatter(torch.ones(2, 3, dtype=torch.bool), s), x, normal(2, 3, seed=1))
    check_op(lambda a, s: gr.masked_scatter(a, np.array(True), s),
             lambda a, s: a.masked_scatter(torch.tensor(True), s), np.array(1.0), normal(2, seed=1))
    with pytest.raises(ShapeError):
        gr.masked_scatter(x, np.ones((2, 3), bool), normal(5))
    with pytest.raises(DTypeError):
        gr.masked_scatter(x, np.ones((2, 3)), normal(6))


# -- scatter_reduce ------------------------------------------------------------------------------------------
REDUCES = ["sum", "prod", "mean", "amax", "amin"]
SCATTER_INDEX = np.array([[0, 1, 0, 2], [2, 2, 1, 0]])  # row 1 of x (axis 0) gets nothing at column 0


def check_scatter_reduce(x, axis, index, src, reduce, include_self, jvp=True):
    # torch's forward-mode rule for prod is wrong (it misses x's and src's factors); the JVP is checked by
    # central differences there
    check_op(lambda a, s: gr.scatter_reduce(a, axis, index, s, reduce, include_self=include_self),
             lambda a, s: torch.scatter_reduce(a, axis, T(index), s, reduce, include_self=include_self), x, src,
             jvp=jvp and reduce != "prod")
    if reduce == "prod":
        rng = np.random.default_rng(4)
        tx, ts = rng.standard_normal(x.shape), rng.standard_normal(src.shape)
        f = lambda a, s: gr.scatter_reduce(a, axis, index, s, reduce, include_self=include_self)  # noqa: E731
        _, got = gr.jvp(f, (x, src), (tx, ts))
        h = 1e-6
        want = (f(x + h * tx, src + h * ts) - f(x - h * tx, src - h * ts)) / (2 * h)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce(reduce, include_self):
    check_scatter_reduce(normal(3, 4), 0, SCATTER_INDEX, normal(2, 4, seed=1), reduce, include_self)
    # a non-trailing axis of a 3-d x, the index smaller than x off the axis
    index = np.array([[[1, 0], [0, 0]], [[1, 1], [0, 1]]])
    check_scatter_reduce(normal(2, 3, 3), 1, index, normal(2, 2, 2, seed=2), reduce, include_self)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_scatter_reduce_ties_split_the_gradient(reduce, include_self):
    x = np.array([1.0, 5.0, 2.0])
    src = np.array([1.0, 3.0, 1.0, 5.0, 2.0, 2.0]) * (1 if reduce == "amax" else -1)
    index = np.array([0, 0, 0, 1, 2, 2])
    if reduce == "amin":
        x = -x
    # without include_self, x ties with the result at positions 1 and 2: torch's reverse mode shares the cotangent
    # with x and drops x's share (so does gradir's), while its forward mode ignores x; gradir's JVP is the
    # transpose of its VJP, so it is compared with torch's reverse mode only there
    check_scatter_reduce(x, 0, index, src, reduce, include_self, jvp=include_self)


@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_prod_with_zeros(include_self):
    x = np.array([[1.5, 0.0, -2.0, 3.0], [0.5, 2.0, 0.0, 1.0], [1.0, -1.0, 2.0, 0.0]])
    src = np.array([[0.0, 2.0, 1.5, -1.0], [2.0, 0.0, 3.0, 0.0]])
    check_scatter_reduce(x, 0, SCATTER_INDEX, src, "prod", include_self)


def test_scatter_reduce_second_order():
    index = np.array([0, 1, 0, 2, 2, 1])
    src = normal(6)
    src[3] = 0.0  # a single zero among a position's factors
    base = torch.full((3,), 1.5, dtype=torch.float64)
    check_second_order(lambda s: gr.scatter_reduce(np.full(3, 1.5), 0, index, s, "prod"),
                       lambda s: torch.scatter_reduce(base, 0, T(index), s, "prod"), src, np.random.default_rng(1))
    check_second_order(lambda s: gr.scatter_reduce(s[:3] * 0.5, 0, index, s, "amax"),
                       lambda s: torch.scatter_reduce(s[:3] * 0.5, 0, T(index), s, "amax"), src, np.random.default_rng(2))


def test_scatter_reduce_0d_integers_and_errors():
    check_op(lambda a, s: gr.scatter_reduce(a, 0, np.array(0), s, "amax"),
             lambda a, s: torch.scatter_reduce(a, 0, torch.tensor(0), s, "amax"), np.array(1.0), np.array(3.0))
    x, src, index = np.array([-5, 7]), np.array([2, -3, 4]), np.array([0, 0, 1])
    for reduce in REDUCES:
        for include_self in (True, False):
            got = gr.scatter_reduce(x, 0, index, src, reduce, include_self=include_self)
            want = torch.scatter_reduce(T(x), 0, T(index), T(src), reduce, include_self=include_self)
            np.testing.assert_array_equal(got, want.numpy())  # integer mean rounds down, as torch
    with pytest.raises(UnsupportedOpError):
        gr.scatter_reduce(normal(3), 0, np.array([0]), normal(1), "max")
    with pytest.raises(ShapeError):
        gr.scatter_reduce(normal(3), 0, np.array([3]), normal(1), "sum")
