"""The op library PyTorch models need (issue 10): values and gradients against torch autograd in
float64, JVPs against central differences, second order against torch double backward, NumPy and
LLVM backends against each other, and the errors the OpInfo sweep asked for."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_ops import check_jvp, check_second_order  # the same JVP and Hessian-vector oracles

import gradir as gr
from gradir.core.errors import ShapeError, UnsupportedOpError

RTOL, ATOL = 1e-12, 1e-12


def assert_close(a, b, rtol=RTOL, atol=ATOL):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def _leaf(a):
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True)


def _flat(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


def check_vjp(gfn, tfn, args, rng, rtol=RTOL, atol=ATOL):
    """gr.vjp's outputs and cotangents against torch.autograd.grad with the same random cotangent
    (integer outputs, such as topk's indices, are compared by value and get no cotangent)."""
    out, vjp_fn = gr.vjp(gfn, *args)
    leaves = [_leaf(a) for a in args]
    t_out = _flat(tfn(*leaves))
    for o, w in zip(_flat(out), t_out):
        assert_close(o, w.detach().numpy(), rtol, atol)
    diff = [w.is_floating_point() and w.requires_grad for w in t_out]
    cts = [rng.standard_normal(tuple(o.shape)) if d else np.zeros(tuple(o.shape), np.float64)
           for o, d in zip(t_out, diff)]
    want = torch.autograd.grad([w for w, d in zip(t_out, diff) if d],
                               leaves, [torch.from_numpy(c) for c, d in zip(cts, diff) if d], allow_unused=True)
    got = vjp_fn(type(out)(c if d else np.zeros(np.shape(o), np.asarray(o).dtype) for c, d, o in zip(cts, diff, _flat(out)))
                 if isinstance(out, (list, tuple)) else cts[0])
    assert len(got) == len(args)
    for g, w, a in zip(got, want, args):
        assert_close(g, np.zeros(np.shape(a)) if w is None else w.numpy(), rtol, atol)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def _normal(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _positive(*shape, seed=0):
    return np.random.default_rng(seed).uniform(0.2, 2.0, shape)


def _small(*shape, seed=0):  # |x| < 1.2, away from tan's poles
    return np.random.default_rng(seed).uniform(-1.2, 1.2, shape)


def _halves():  # exact halves (round's ties to even), and values either side of integers
    return np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -1.7, 0.2, 3.49, 3.51])


# -- elementwise ---------------------------------------------------------------------------------
UNARY = [
    ("log1p", gr.log1p, torch.log1p, _positive),
    ("expm1", gr.expm1, torch.expm1, _normal),
    ("tan", gr.tan, torch.tan, _small),
    ("floor", gr.floor, torch.floor, _normal),
    ("ceil", gr.ceil, torch.ceil, _normal),
    ("round", gr.round, torch.round, _normal),
    ("real", gr.real, torch.real, _normal),
]


@pytest.mark.parametrize("name,gfn,tfn,make", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("shape", [(), (5,), (3, 4)])
def test_unary_against_torch(name, gfn, tfn, make, shape, rng):
    check_vjp(gfn, tfn, [make(*shape)], rng)


def test_round_halves_to_even_and_decimals(rng):
    check_vjp(gr.round, torch.round, [_halves()], rng)
    x = _normal(7) * 10
    check_vjp(lambda x: gr.round(x, 2), lambda x: torch.round(x, decimals=2), [x], rng)


@pytest.mark.parametrize("name,gfn,tfn,make", UNARY[:3], ids=[u[0] for u in UNARY[:3]])
def test_unary_second_order_and_jvp(name, gfn, tfn, make, rng):
    x = make(2, 3)
    check_second_order(gfn, tfn, x, rng)
    check_jvp(gfn, [x], rng)


def test_real_passes_the_gradient_on_real_input():
    # the OpInfo sweep: gr.real of a real value gave a zero gradient
    assert_close(gr.grad(lambda x: gr.sum(gr.real(x) * x))(np.array([1.0, -2.0])), [2.0, -4.0])


REMAINDER = [((5,), (5,)), ((3, 4), (4,)), ((2, 1, 3), (4, 1))]


@pytest.mark.parametrize("xs,ys", REMAINDER)
def test_remainder_gradients(xs, ys, rng):
    x = _normal(*xs, seed=1) * 5
    y = np.where(rng.random(ys) < 0.5, -1, 1) * _positive(*ys, seed=2)  # both signs, away from 0
    check_vjp(gr.remainder, torch.remainder, [x, y], rng)
    check_jvp(gr.remainder, [x, y], rng)


# -- clip / clamp --------------------------------------------------------------------------------
def _clip_inputs():
    return np.array([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0])  # both boundaries hit exactly


CLIPS = [
    ("scalars", lambda x: gr.clip(x, -1.0, 1.0), lambda x: torch.clamp(x, -1.0, 1.0)),
    ("min only", lambda x: gr.clip(x, -0.5), lambda x: torch.clamp(x, min=-0.5)),
    ("max only", lambda x: gr.clamp(x, max=0.5), lambda x: torch.clamp(x, max=0.5)),
    ("min > max", lambda x: gr.clip(x, 1.0, -1.0), lambda x: torch.clamp(x, 1.0, -1.0)),
    ("min == max", lambda x: gr.clip(x, 0.5, 0.5), lambda x: torch.clamp(x, 0.5, 0.5)),
]


@pytest.mark.parametrize("name,gfn,tfn", CLIPS, ids=[c[0] for c in CLIPS])
def test_clip_scalar_bounds_match_torch_at_the_boundaries(name, gfn, tfn, rng):
    check_vjp(gfn, tfn, [_clip_inputs()], rng)


def test_clip_array_bounds_differentiable_in_all_three(rng):
    # lo, hi arrays (broadcast against x), with min > max and min == max among the columns
    x = np.array([[-2.0, -1.0, 0.0, 0.5, 1.0, 2.0, 0.3, -3.0]] * 3) + np.array([[0.0], [0.25], [-0.25]])
    lo = np.array([-1.0, -1.0, -0.5, 0.5, 1.0, 1.0, 0.3, 0.3])
    hi = np.array([1.0, 0.5, 0.0, 0.5, -1.0, 2.0, 0.3, 0.3])
    check_vjp(gr.clip, torch.clamp, [x, lo, hi], rng)
    check_vjp(lambda x, lo: gr.clip(x, lo), lambda x, lo: torch.clamp(x, min=lo), [x, lo], rng)
    check_vjp(lambda x, hi: gr.clip(x, max=hi), lambda x, hi: torch.clamp(x, max=hi), [x, hi], rng)


def test_clip_needs_a_bound():
    with pytest.raises(gr.GradirError, match="clip"):
        gr.trace(lambda x: gr.clip(x), np.ones(3))


# -- reductions and scans ------------------------------------------------------------------------
def _with_zeros(k):
    x = _normal(3, 4, seed=3)
    x[1, 1] = 0.0
    if k == 2:
        x[1, 3] = 0.0
        x[2, 0] = 0.0
    return x


PRODS = [
    ("all", lambda x: gr.prod(x), lambda x: torch.prod(x)),
    ("axis1", lambda x: gr.prod(x, axis=1), lambda x: torch.prod(x, 1)),
    ("axis-2 keepdims", lambda x: gr.prod(x, axis=-2, keepdims=True), lambda x: torch.prod(x, -2, keepdim=True)),
    ("axes (0,1)", lambda x: gr.prod(x, axis=(0, 1)), lambda x: torch.prod(x.reshape(-1))),
]


@pytest.mark.parametrize("zeros", [0, 1, 2])
@pytest.mark.parametrize("name,gfn,tfn", PRODS, ids=[p[0] for p in PRODS])
def test_prod_with_zeros(name, gfn, tfn, zeros, rng):
    check_vjp(gfn, tfn, [_with_zeros(zeros)], rng)


@pytest.mark.parametrize("zeros", [0, 1])
def test_prod_second_order_with_up_to_one_zero(zeros, rng):
    check_second_order(lambda x: gr.prod(x, axis=1), lambda x: torch.prod(x, 1), _with_zeros(zeros), rng)
    check_jvp(lambda x: gr.prod(x, axis=1), [_with_zeros(zeros)], rng)


CUMSUMS = [
    ("axis0", lambda x: gr.cumsum(x, 0), lambda x: torch.cumsum(x, 0)),
    ("axis-1", lambda x: gr.cumsum(x, -1), lambda x: torch.cumsum(x, -1)),
    ("flat", lambda x: gr.cumsum(x), lambda x: torch.cumsum(x.reshape(-1), 0)),
]


@pytest.mark.parametrize("name,gfn,tfn", CUMSUMS, ids=[c[0] for c in CUMSUMS])
def test_cumsum(name, gfn, tfn, rng):
    x = _normal(3, 4, 2)
    check_vjp(gfn, tfn, [x], rng)
    check_jvp(gfn, [x], rng)


def test_cumsum_second_order(rng):
    check_second_order(lambda x: gr.cumsum(x * x, 1), lambda x: torch.cumsum(x * x, 1), _normal(3, 4), rng)


NORMS = [
    ("2 all", lambda x: gr.norm(x), lambda x: torch.linalg.vector_norm(x)),
    ("2 axis", lambda x: gr.norm(x, axis=-1), lambda x: torch.linalg.vector_norm(x, dim=-1)),
    ("1 keepdims", lambda x: gr.norm(x, 1, axis=0, keepdims=True),
     lambda x: torch.linalg.vector_norm(x, 1, dim=0, keepdim=True)),
    ("inf", lambda x: gr.norm(x, math.inf, axis=1), lambda x: torch.linalg.vector_norm(x, math.inf, dim=1)),
    ("-inf", lambda x: gr.norm(x, -math.inf), lambda x: torch.linalg.vector_norm(x, -math.inf)),
    ("p=3", lambda x: gr.norm(x, 3, axis=(0, 1)), lambda x: torch.linalg.vector_norm(x, 3, dim=(0, 1))),
    ("p=0.5", lambda x: gr.norm(x, 0.5, axis=1), lambda x: torch.linalg.vector_norm(x, 0.5, dim=1)),
    ("0", lambda x: gr.norm(x, 0, axis=1), lambda x: torch.linalg.vector_norm(x, 0, dim=1)),
]


@pytest.mark.parametrize("name,gfn,tfn", NORMS, ids=[n[0] for n in NORMS])
def test_norm(name, gfn, tfn, rng):
    check_vjp(gfn, tfn, [_normal(3, 4)], rng, rtol=1e-11)


@pytest.mark.parametrize("name,gfn,tfn", [n for n in NORMS if n[0] not in ("p=0.5",)],
                         ids=[n[0] for n in NORMS if n[0] not in ("p=0.5",)])
def test_norm_gradient_at_zero_is_torchs(name, gfn, tfn, rng):
    x = np.zeros((3, 4))
    x[0] = _normal(4)  # row 0 nonzero, the rest all zeros
    check_vjp(gfn, tfn, [x], rng)
    assert not np.isnan(gr.grad(lambda x: gr.sum(gfn(x)))(np.zeros((3, 4)))).any()


def test_norm_second_order(rng):
    check_second_order(lambda x: gr.norm(x, axis=1), lambda x: torch.linalg.vector_norm(x, dim=1), _normal(3, 4), rng)
    check_jvp(lambda x: gr.norm(x, 3, axis=1), [_normal(3, 4)], rng)


def test_empty_axis_reductions_fail_at_trace_time_or_match_torch():
    x = np.zeros((3, 0))
    for fn in (gr.max, gr.min):
        with pytest.raises(ShapeError, match=rf"{fn.__name__}.*empty axis") as err:
            gr.trace(lambda x: fn(x, axis=1), x)
        assert "test_op_library.py" in str(err.value)  # names the user's line
        with pytest.raises(ShapeError, match="empty axis"):
            fn(x, axis=1)  # eagerly too
        with pytest.raises((RuntimeError, IndexError)):  # torch refuses as well
            getattr(torch, "amax" if fn is gr.max else "amin")(torch.zeros(3, 0), 1)
    got = gr.logsumexp(x, axis=1)
    assert_close(got, torch.logsumexp(torch.zeros(3, 0), 1).numpy())
    assert_close(gr.grad(lambda x: gr.sum(gr.logsumexp(x, axis=1)))(x), np.zeros((3, 0)))
    assert_close(gr.logsumexp(x, axis=1, keepdims=True), torch.logsumexp(torch.zeros(3, 0), 1, keepdim=True).numpy())
    assert_close(gr.max(x, axis=0), np.zeros(0))  # a non-empty axis of an empty value is fine


# -- shapes --------------------------------------------------------------------------------------
SHAPES = [
    ("tril", lambda x: gr.tril(x), lambda x: torch.tril(x), (4, 5)),
    ("tril k=1 batched", lambda x: gr.tril(x, 1), lambda x: torch.tril(x, 1), (2, 3, 4)),
    ("triu k=-1", lambda x: gr.triu(x, -1), lambda x: torch.triu(x, -1), (5, 3)),
    ("triu k=2", lambda x: gr.triu(x, k=2), lambda x: torch.triu(x, 2), (4, 4)),
    ("roll flat", lambda x: gr.roll(x, 3), lambda x: torch.roll(x, 3), (3, 4)),
    ("roll axis-1", lambda x: gr.roll(x, -2, axis=-1), lambda x: torch.roll(x, -2, -1), (3, 4)),
    ("roll two axes", lambda x: gr.roll(x, (1, 5), axis=(0, 1)), lambda x: torch.roll(x, (1, 5), (0, 1)), (3, 4)),
    ("tile", lambda x: gr.tile(x, (2, 3)), lambda x: x.repeat(2, 3), (3, 4)),
    ("tile more reps", lambda x: gr.tile(x, (2, 1, 3)), lambda x: x.repeat(2, 1, 3), (3, 4)),
    ("tile fewer reps", lambda x: gr.tile(x, 2), lambda x: torch.tile(x, (2,)), (3, 4)),
    ("repeat int", lambda x: gr.repeat(x, 2, axis=1), lambda x: torch.repeat_interleave(x, 2, 1), (3, 4)),
    ("repeat flat", lambda x: gr.repeat(x, 3), lambda x: torch.repeat_interleave(x, 3), (2, 2)),
    ("repeat counts", lambda x: gr.repeat(x, [1, 0, 2], axis=0),
     lambda x: torch.repeat_interleave(x, torch.tensor([1, 0, 2]), 0), (3, 2)),
]


@pytest.mark.parametrize("name,gfn,tfn,shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_shape_ops(name, gfn, tfn, shape, rng):
    x = _normal(*shape)
    check_vjp(gfn, tfn, [x], rng)
    check_jvp(gfn, [x], rng)


def test_outer(rng):
    check_vjp(gr.outer, torch.outer, [_normal(3), _normal(4, seed=1)], rng)
    check_vjp(gr.outer, lambda a, b: torch.outer(a.reshape(-1), b), [_normal(2, 2), _normal(3, seed=1)], rng)


def test_shape_op_errors():
    with pytest.raises(ShapeError, match="tril"):
        gr.trace(gr.tril, np.ones(3))
    with pytest.raises(ShapeError, match="roll"):
        gr.trace(lambda x: gr.roll(x, (1, 2, 3), axis=(0, 1)), np.ones((2, 2)))


# -- einsum --------------------------------------------------------------------------------------
EINSUMS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ijk->kj", [(2, 3, 4)]),
    ("i,i->", [(4,), (4,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ij,jk,ik->j", [(2, 3), (3, 4), (2, 4)]),
    ("ijk,j->ik", [(2, 3, 4), (3,)]),
    ("ij,kl->ikjl", [(2, 3), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output: 'ik'
]


@pytest.mark.parametrize("spec,shapes", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum(spec, shapes, rng):
    args = [_normal(*s, seed=i) for i, s in enumerate(shapes)]
    check_vjp(lambda *a: gr.einsum(spec, *a), lambda *a: torch.einsum(spec, *a), args, rng, rtol=1e-11)


def test_einsum_second_order(rng):
    w = _normal(4, 5, seed=2)
    check_second_order(lambda x: gr.einsum("ij,jk->ik", x * x, w), lambda x: torch.einsum("ij,jk->ik", x * x,
                       torch.from_numpy(w)), _normal(3, 4), rng)


@pytest.mark.parametrize("spec,shapes,error", [
    ("ii->i", [(3, 3)], UnsupportedOpError),
    ("...ij->ij", [(2, 3)], UnsupportedOpError),
    ("i,i,i,i->", [(2,)] * 4, UnsupportedOpError),
    ("ij,jk->ik", [(3, 4), (5, 6)], ShapeError),
    ("ij->ijk", [(3, 4)], ShapeError),
])
def test_einsum_errors(spec, shapes, error):
    with pytest.raises(error, match="einsum") as err:
        gr.trace(lambda *a: gr.einsum(spec, *a), *[np.ones(s) for s in shapes])
    assert "test_op_library.py" in str(err.value)


# -- indexing ------------------------------------------------------------------------------------
def _index(shape, n, seed=0, unique_along=None):
    """Random indices in [0, n); with unique_along, no repeats along that axis (for scatter)."""
    r = np.random.default_rng(seed)
    if unique_along is None:
        return r.integers(0, n, shape)
    ax = unique_along
    perms = np.argsort(r.random(shape[:ax] + (n,) + shape[ax + 1:]), axis=ax)
    return np.take(perms, np.arange(shape[ax]), axis=ax)


GATHERS = [
    ((3, 4), 0, (5, 4)),
    ((3, 4), 1, (3, 6)),
    ((3, 4), -1, (2, 2)),  # index smaller than x off the axis
    ((2, 3, 4), 1, (2, 5, 3)),
]


@pytest.mark.parametrize("xs,axis,ishape", GATHERS)
def test_gather(xs, axis, ishape, rng):
    idx = _index(ishape, xs[axis])
    check_vjp(lambda x: gr.gather(x, axis, idx), lambda x: torch.gather(x, axis, torch.from_numpy(idx)),
              [_normal(*xs)], rng)


def test_gather_traced_index_and_second_order(rng):
    idx = _index((3, 5), 4)
    out = gr.compile(lambda x, i: gr.gather(x, 1, i))(_normal(3, 4), idx)
    assert_close(out, np.take_along_axis(_normal(3, 4), idx, 1))
    check_second_order(lambda x: gr.gather(x * x, 1, idx), lambda x: torch.gather(x * x, 1, torch.from_numpy(idx)),
                       _normal(3, 4), rng)


SCATTERS = [
    ((4, 3), 0, (2, 3), (3, 3)),  # src larger than the index: only its corner is read
    ((3, 5), 1, (3, 2), (3, 2)),
    ((2, 4, 3), -2, (2, 3, 2), (2, 3, 3)),
]


@pytest.mark.parametrize("xs,axis,ishape,ss", SCATTERS)
def test_scatter_add_and_scatter(xs, axis, ishape, ss, rng):
    ti = lambda: torch.from_numpy(idx)  # noqa: E731
    # torch's own backward fails when src is larger than the index: its oracle reads the corner explicitly
    corner = tuple(slice(0, n) for n in ishape)
    idx = _index(ishape, xs[axis], seed=4)  # repeats allowed: scatter_add accumulates
    check_vjp(lambda x, s: gr.scatter_add(x, axis, idx, s), lambda x, s: torch.scatter_add(x, axis, ti(), s[corner]),
              [_normal(*xs), _normal(*ss, seed=1)], rng)
    idx = _index(ishape, xs[axis], seed=5, unique_along=axis % len(xs))  # scatter: no repeated positions
    check_vjp(lambda x, s: gr.scatter(x, axis, idx, s), lambda x, s: torch.scatter(x, axis, ti(), s[corner]),
              [_normal(*xs), _normal(*ss, seed=1)], rng)
    check_vjp(lambda x: gr.scatter(x, axis, idx, 2.5), lambda x: torch.scatter(x, axis, ti(), 2.5), [_normal(*xs)], rng)
    check_jvp(lambda x, s: gr.scatter_add(x, axis, idx, s), [_normal(*xs), _normal(*ss, seed=1)], rng)


def test_index_errors():
    with pytest.raises(ShapeError, match="gather.*out of bounds") as err:
        gr.trace(lambda x: gr.gather(x, 0, np.array([[3]])), np.ones((3, 1)))
    assert "test_op_library.py" in str(err.value)
    with pytest.raises(ShapeError, match="gather"):
        gr.trace(lambda x: gr.gather(x, 0, np.array([-1])), np.ones(3))  # torch refuses negatives too
    with pytest.raises(ShapeError, match="scatter_add"):
        gr.trace(lambda x: gr.scatter_add(x, 0, np.zeros((2, 2), int), np.ones((1, 2))), np.ones((3, 2)))
    with pytest.raises(gr.errors.DTypeError, match="masked_fill"):
        gr.trace(lambda x: gr.masked_fill(x, np.ones(3), 0.0), np.ones(3))


def test_masked_fill(rng):
    x, mask = _normal(3, 4), _normal(4, seed=1) > 0  # the mask broadcasts
    check_vjp(lambda x: gr.masked_fill(x, mask, -1.5), lambda x: x.masked_fill(torch.from_numpy(mask), -1.5), [x], rng)
    check_vjp(lambda x, v: gr.masked_fill(x, mask, v), lambda x, v: x.masked_fill(torch.from_numpy(mask), v),
              [x, np.array(0.7)], rng)
    check_vjp(lambda x: gr.logsumexp(gr.masked_fill(x, mask, -math.inf), axis=1),
              lambda x: torch.logsumexp(x.masked_fill(torch.from_numpy(mask), -math.inf), 1), [x], rng)


# -- sorting -------------------------------------------------------------------------------------
SORTS = [
    ("sort", lambda x: gr.sort(x), lambda x: torch.sort(x).values),
    ("sort axis0 desc", lambda x: gr.sort(x, axis=0, descending=True), lambda x: torch.sort(x, 0, True).values),
    ("topk", lambda x: gr.topk(x, 2), lambda x: tuple(torch.topk(x, 2))),
    ("topk smallest axis0", lambda x: gr.topk(x, 3, axis=0, largest=False),
     lambda x: tuple(torch.topk(x, 3, dim=0, largest=False))),
]


@pytest.mark.parametrize("name,gfn,tfn", SORTS, ids=[s[0] for s in SORTS])
@pytest.mark.parametrize("shape", [(6,), (4, 5), (3, 4, 5)])
def test_sort_and_topk(name, gfn, tfn, shape, rng):
    if "axis0" in name and shape[0] < 4:
        shape = (4,) + shape[1:]
    check_vjp(gfn, tfn, [_normal(*shape)], rng)  # continuous random values: no ties


def test_argsort_and_sort_second_order(rng):
    x = _normal(4, 5)
    np.testing.assert_array_equal(gr.argsort(x, axis=1), torch.argsort(torch.from_numpy(x), 1).numpy())
    np.testing.assert_array_equal(gr.argsort(x, axis=0, descending=True),
                                  torch.argsort(torch.from_numpy(x), 0, descending=True).numpy())
    check_second_order(lambda x: gr.sort(x * x, axis=1), lambda x: torch.sort(x * x, 1).values, x, rng)
    check_jvp(lambda x: gr.topk(x, 2)[0], [x], rng)


def test_descending_argsort_is_stable_on_ties():
    x = np.array([1.0, 3.0, 3.0, 0.0, 3.0])
    np.testing.assert_array_equal(gr.argsort(x, descending=True),
                                  torch.argsort(torch.from_numpy(x), descending=True, stable=True).numpy())


# -- backends ------------------------------------------------------------------------------------
BACKEND_FNS = [
    ("elementwise", lambda x, y: gr.log1p(x * x) + gr.expm1(y) * gr.tan(x * 0.5) + gr.floor(x) - gr.ceil(y)
     + gr.round(x * 3) + gr.real(x)),
    ("remainder", lambda x, y: gr.remainder(x * 3, y * y + 0.5)),
    ("clip", lambda x, y: gr.clip(x, -0.5, 0.5) * gr.clip(x, y, 1.0)),
    ("reductions", lambda x, y: gr.prod(x, axis=1) + gr.cumsum(y, 1)[:, -1] + gr.norm(x + y, axis=1)),
    ("shapes", lambda x, y: gr.tril(x) * gr.triu(y, 1) + gr.roll(x, 1, axis=0) * gr.tile(y[:1], (3, 1))),
    ("indexing", lambda x, y: gr.gather(x, 1, np.array([[0, 2], [1, 1], [3, 0]])).sum()
     + gr.scatter_add(x, 0, np.array([[2, 0, 1, 1]]), y).sum() + gr.masked_fill(y, y > 0, 0.0).sum()),
    ("sorting", lambda x, y: gr.sort(x, axis=1) + gr.topk(y, 4, axis=1)[0]),
    ("einsum", lambda x, y: gr.einsum("ij,kj->ik", x, y) + gr.outer(x[0], y[1])[:3, :3]),
]


@pytest.mark.parametrize("name,fn", BACKEND_FNS, ids=[b[0] for b in BACKEND_FNS])
def test_numpy_and_llvm_backends_agree(name, fn):
    x, y = _normal(3, 4), _normal(3, 4, seed=1)

    def loss(x, y):
        return gr.sum(fn(x, y) * fn(x, y))

    got = {}
    for backend in ("numpy", "llvm"):
        got[backend] = gr.compile(gr.value_and_grad(loss, argnums=(0, 1)), backend=backend)(x, y)
    (v0, (gx0, gy0)), (v1, (gx1, gy1)) = got["numpy"], got["llvm"]
    assert_close(v1, v0, rtol=1e-12)
    assert_close(gx1, gx0, rtol=1e-12)
    assert_close(gy1, gy0, rtol=1e-12)


# -- properties ----------------------------------------------------------------------------------
@given(st.lists(st.sampled_from([0.0, 0.0, 1.0, -2.0, 0.5, 3.0]), min_size=1, max_size=6))
def test_prod_gradient_is_the_product_of_the_others(values):
    x = np.array(values)
    got = gr.grad(lambda x: gr.prod(x))(x)
    want = [np.prod(np.delete(x, i)) for i in range(x.size)]  # the definition, computed directly
    assert_close(got, want)


@given(st.integers(1, 5), st.integers(1, 5), st.integers(-6, 6))
def test_tril_triu_partition_the_matrix(m, n, k):
    x = np.arange(1.0, m * n + 1).reshape(m, n)
    np.testing.assert_array_equal(gr.tril(x, k), torch.tril(torch.from_numpy(x), k).numpy())
    np.testing.assert_array_equal(gr.triu(x, k), torch.triu(torch.from_numpy(x), k).numpy())


def test_eager_tensors_and_float32(rng):
    x = _normal(2, 3)

    def f(t):
        return (gr.prod(t, axis=1).sum() + gr.gather(t, 1, np.array([[0], [2]])).sum() + gr.sort(t, axis=1)[:, 0].sum()
                + gr.clip(t, -0.5, 2.0).sum() + gr.cumsum(t, 1).sum() + gr.norm(t) + gr.einsum("ij,kj->ik", t, t).sum())

    t = gr.Tensor(x, requires_grad=True)
    f(t).backward()
    tt = _leaf(x)
    (tt.prod(1).sum() + torch.gather(tt, 1, torch.tensor([[0], [2]])).sum() + torch.sort(tt, 1).values[:, 0].sum()
     + torch.clamp(tt, -0.5, 2.0).sum() + torch.cumsum(tt, 1).sum() + torch.linalg.vector_norm(tt)
     + torch.einsum("ij,kj->ik", tt, tt).sum()).backward()
    assert_close(t.grad.numpy() if hasattr(t.grad, "numpy") else np.asarray(t.grad), tt.grad.numpy())
    x32 = x.astype(np.float32)  # Python-scalar bounds are weakly typed: float32 stays float32
    for out in (gr.clip(x32, 0.0, 1.0), gr.prod(x32), gr.norm(x32), gr.cumsum(x32), gr.log1p(np.abs(x32)), gr.tan(x32)):
        assert out.dtype == np.float32
