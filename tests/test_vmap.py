"""gr.vmap against torch.func.vmap in float64: per-example gradients of an MLP, attention with batched Q/K/V,
reductions over non-trailing and batched axes, in_axes None/0/1 and pytrees, out_axes, a batch of one,
compile(vmap(f)) on the NumPy and LLVM backends, composition with grad/jvp/vmap, the errors, and random
programs (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings

import gradir as gr
from gradir.core.errors import ShapeError, UnsupportedOpError
from gradir.core.primitive import REGISTRY
from tests.random_programs import make_inputs, programs, run

pytestmark = pytest.mark.usefixtures("torch_float64")
T = torch.tensor


def close(ours, theirs, tol=1e-10):
    np.testing.assert_allclose(np.asarray(ours), theirs.detach().numpy() if torch.is_tensor(theirs) else theirs,
                               rtol=tol, atol=tol)


# -- per-example gradients --------------------------------------------------------------------------
def mlp_params(rng, d=5, h=7, c=4):
    return {"W1": rng.standard_normal((d, h)) * 0.5, "b1": rng.standard_normal(h) * 0.1,
            "W2": rng.standard_normal((h, c)) * 0.5, "b2": rng.standard_normal(c) * 0.1}


def mlp_loss_gr(p, x, y):
    h = gr.tanh(x @ p["W1"] + p["b1"])
    logits = gr.reshape(h @ p["W2"] + p["b2"], (1, -1))
    return gr.nn.cross_entropy(logits, gr.reshape(y, (1,)))


def mlp_loss_torch(p, x, y):
    h = torch.tanh(x @ p["W1"] + p["b1"])
    return F.cross_entropy((h @ p["W2"] + p["b2"]).reshape(1, -1), y.reshape(1))


def test_per_example_gradients_of_an_mlp_match_torch_func(rng):
    p, xs, ys = mlp_params(rng), rng.standard_normal((6, 5)), rng.integers(0, 4, 6)
    ours = gr.vmap(gr.grad(mlp_loss_gr), in_axes=(None, 0, 0))(p, xs, ys)
    pt = {k: T(v) for k, v in p.items()}
    theirs = torch.func.vmap(torch.func.grad(mlp_loss_torch), in_dims=(None, 0, 0))(pt, T(xs), T(ys))
    assert set(ours) == set(p)
    for k in p:
        assert ours[k].shape == (6,) + p[k].shape
        close(ours[k], theirs[k])
    # and they are the gradients of each example alone
    for i in range(6):
        close(ours["W1"][i], gr.grad(mlp_loss_gr)(p, xs[i], ys[i])["W1"])


def test_per_example_gradients_with_layer_norm_and_mse(rng):
    W, g, b = rng.standard_normal((4, 6)), rng.standard_normal(6), rng.standard_normal(6)
    xs, ts = rng.standard_normal((5, 3, 4)), rng.standard_normal((5, 3, 6))

    def loss(W, g, b, x, t):
        return gr.mean((gr.nn.layer_norm(x @ W, g, b) - t) ** 2)

    def loss_t(W, g, b, x, t):
        return torch.mean((F.layer_norm(x @ W, (6,), g, b) - t) ** 2)

    ours = gr.vmap(gr.grad(loss, argnums=(0, 1, 2)), in_axes=(None, None, None, 0, 0))(W, g, b, xs, ts)
    theirs = torch.func.vmap(torch.func.grad(loss_t, argnums=(0, 1, 2)), in_dims=(None, None, None, 0, 0))(
        T(W), T(g), T(b), T(xs), T(ts))
    for o, t in zip(ours, theirs):
        close(o, t)


# -- attention ----------------------------------------------------------------------------------------
def attention_gr(q, k, v):
    s = q @ gr.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    n = s.shape[-1]
    s = gr.where(np.tril(np.ones((n, n), bool)), s, -1e9)
    return gr.nn.softmax(s, axis=-1) @ v


def attention_torch(q, k, v):
    s = q @ k.transpose(-1, -2) / np.sqrt(q.shape[-1])
    n = s.shape[-1]
    s = torch.where(torch.tril(torch.ones(n, n, dtype=torch.bool)), s, -1e9)
    return torch.softmax(s, -1) @ v


def test_attention_with_batched_queries_keys_and_values(rng):
    q, k, v = (rng.standard_normal((3, 5, 4)) for _ in range(3))
    close(gr.vmap(attention_gr)(q, k, v), torch.func.vmap(attention_torch)(T(q), T(k), T(v)))
    # heads: a second vmap over axis 1, keys and values shared across the batch, batch axis out at 1
    q4 = rng.standard_normal((2, 5, 3, 4))  # (batch, position, head, feature)
    inner = gr.vmap(attention_gr, in_axes=(1, None, None))
    ours = gr.vmap(inner, in_axes=(0, None, None), out_axes=1)(q4, k[0], v[0])
    theirs = torch.func.vmap(torch.func.vmap(attention_torch, in_dims=(1, None, None)), in_dims=(0, None, None),
                             out_dims=1)(T(q4), T(k[0]), T(v[0]))
    assert ours.shape == tuple(theirs.shape)
    close(ours, theirs)


def test_per_example_gradients_through_attention(rng):
    Wq, Wk, Wv = (rng.standard_normal((4, 4)) * 0.5 for _ in range(3))
    xs = rng.standard_normal((3, 5, 4))

    def loss(Wq, Wk, Wv, x):
        return gr.sum(attention_gr(x @ Wq, x @ Wk, x @ Wv) ** 2)

    def loss_t(Wq, Wk, Wv, x):
        return torch.sum(attention_torch(x @ Wq, x @ Wk, x @ Wv) ** 2)

    ours = gr.vmap(gr.grad(loss, argnums=(0, 1, 2)), in_axes=(None, None, None, 0))(Wq, Wk, Wv, xs)
    theirs = torch.func.vmap(torch.func.grad(loss_t, argnums=(0, 1, 2)), in_dims=(None, None, None, 0))(
        T(Wq), T(Wk), T(Wv), T(xs))
    for o, t in zip(ours, theirs):
        close(o, t)


# -- reductions, axes -------------------------------------------------------------------------------
@pytest.mark.parametrize("in_axis", [0, 1, 2, -1])
def test_reductions_over_non_trailing_axes_with_the_batch_anywhere(rng, in_axis):
    x = rng.standard_normal((3, 4, 5))

    def f(x):
        return (gr.sum(x, axis=0), gr.max(x, axis=0, keepdims=True), gr.mean(x, axis=(0, 1)), gr.logsumexp(x, axis=0),
                gr.cumsum(x, axis=0), gr.argmax(x, axis=0), gr.prod(x, axis=1), gr.var(x, axis=0))

    def ft(x):
        return (x.sum(0), x.amax(0, keepdim=True), x.mean((0, 1)), torch.logsumexp(x, 0), torch.cumsum(x, 0),
                torch.argmax(x, 0), torch.prod(x, 1), torch.var(x, 0, unbiased=False))

    ours = gr.vmap(f, in_axes=in_axis)(x)
    theirs = torch.func.vmap(ft, in_dims=in_axis)(T(x))
    for o, t in zip(ours, theirs):
        assert o.shape == tuple(t.shape)
        close(o, t)


@pytest.mark.parametrize("out_axes", [0, 1, -1])
def test_in_axes_none_zero_and_one_and_out_axes(rng, out_axes):
    a, b, c = rng.standard_normal((4, 3)), rng.standard_normal((3, 6)), rng.standard_normal((2, 3))

    def f(a, b, c):
        return gr.tanh(a @ b) + gr.sum(c), a[:, :, None] * gr.exp(b[None])

    def ft(a, b, c):
        return torch.tanh(a @ b) + c.sum(), a[:, :, None] * torch.exp(b[None])

    ours = gr.vmap(f, in_axes=(1, None, 0), out_axes=out_axes)(np.repeat(a[:, None], 2, 1), b, c)
    theirs = torch.func.vmap(ft, in_dims=(1, None, 0), out_dims=out_axes)(T(np.repeat(a[:, None], 2, 1)), T(b), T(c))
    for o, t in zip(ours, theirs):
        assert o.shape == tuple(t.shape)
        close(o, t)


def test_a_batch_of_one_and_unbatched_outputs(rng):
    x, w = rng.standard_normal((1, 3)), rng.standard_normal(3)
    ours = gr.vmap(lambda x, w: (x * w, w * 2.0), in_axes=(0, None))(x, w)
    theirs = torch.func.vmap(lambda x, w: (x * w, w * 2.0), in_dims=(0, None))(T(x), T(w))
    for o, t in zip(ours, theirs):
        assert o.shape == tuple(t.shape)
        close(o, t)


def test_out_axes_none_keeps_an_output_every_example_shares(rng):
    x, w = rng.standard_normal((4, 3)), rng.standard_normal(3)

    def f(x, w):
        return x * w, gr.sum(w * w)

    ours = gr.vmap(f, in_axes=(0, None), out_axes=(0, None))(x, w)
    theirs = torch.func.vmap(lambda x, w: (x * w, (w * w).sum()), in_dims=(0, None), out_dims=(0, None))(T(x), T(w))
    for o, t in zip(ours, theirs):
        assert np.shape(o) == tuple(t.shape)
        close(o, t)
    # an output that depends on the mapped argument cannot be unmapped: torch and gradir both refuse
    with pytest.raises(gr.GradirError, match=r"out_axes is None for output 0, but it differs between examples"):
        gr.vmap(f, in_axes=(0, None), out_axes=None)(x, w)
    with pytest.raises(ValueError):
        torch.func.vmap(lambda x, w: x * w, in_dims=(0, None), out_dims=None)(T(x), T(w))


def test_axis_size_maps_a_function_of_no_mapped_argument(rng):
    w = rng.standard_normal(3)
    ours = gr.vmap(lambda w: gr.tanh(w), in_axes=None, axis_size=5)(w)
    np.testing.assert_array_equal(ours, np.broadcast_to(np.tanh(w), (5, 3)))
    twice = gr.vmap(lambda w: gr.tanh(w), in_axes=None, axis_size=2)(w)  # a new size is a new graph, not a cache hit
    assert np.shape(twice) == (2, 3)
    with pytest.raises(ShapeError, match=r"different sizes.*x: 4.*axis_size: 3"):
        gr.vmap(lambda x: x, axis_size=3)(np.zeros(4))


def test_in_axes_as_a_pytree_prefix(rng):
    p = {"a": rng.standard_normal((3, 2)), "b": rng.standard_normal(3)}
    ours = gr.vmap(lambda p: p["a"] * p["b"], in_axes=({"a": 1, "b": None},))(p)
    np.testing.assert_allclose(ours, (p["a"] * p["b"][:, None]).T)


def test_dict_in_axes_and_out_axes_name_the_keys_in_any_order(rng):
    """A dict in in_axes/out_axes matches the argument's (output's) keys as a set, as JAX's does: here listed in
    the other order than the argument's and the output's."""
    p = {"w": rng.standard_normal((3, 4)), "b": rng.standard_normal(4)}
    xs = rng.standard_normal((5, 4))

    def f(p, x):
        return {"y": gr.tanh(x * p["w"] + p["b"]), "s": gr.sum(x * p["b"])}

    ours = gr.vmap(f, in_axes=({"b": None, "w": None}, 0), out_axes={"s": 0, "y": 1})(p, xs)
    tp = {k: T(v) for k, v in p.items()}  # torch.func.vmap pairs dicts up by position: its dims in the tree's order
    theirs = torch.func.vmap(lambda p, x: {"y": torch.tanh(x * p["w"] + p["b"]), "s": torch.sum(x * p["b"])},
                             in_dims=({"w": None, "b": None}, 0), out_dims={"y": 1, "s": 0})(tp, T(xs))
    assert list(ours) == ["y", "s"]
    close(ours["y"], theirs["y"])
    close(ours["s"], theirs["s"])
    ws = rng.standard_normal((5, 3, 4))  # a mapped leaf: its axis is read from its own key, not by position
    ours = gr.vmap(lambda p: p["w"] * p["b"], in_axes=({"b": None, "w": 0},))({"w": ws, "b": p["b"]})
    np.testing.assert_allclose(ours, ws * p["b"])
    with pytest.raises(gr.GradirError, match="does not match the structure"):
        gr.vmap(lambda p: p["w"], in_axes=({"w": 0, "c": None},))(p)


def test_shape_ops_indexing_and_concatenation(rng):
    x, idx, table = rng.standard_normal((4, 6)), rng.integers(-6, 6, (4, 3)), rng.standard_normal((6, 5))

    def f(x, i):
        y = gr.concatenate([x[::2], gr.reshape(x, (2, 3))[1], gr.pad(x, (1, 2))], axis=0)
        return y, gr.take(x, i), gr.take(table, i, axis=0), gr.broadcast_to(x[1:3], (2, 2))

    def ft(x, i):
        y = torch.cat([x[::2], x.reshape(2, 3)[1], F.pad(x, (1, 2))])
        return y, x[i % 6], table_t[i % 6], torch.broadcast_to(x[1:3], (2, 2))

    table_t = T(table)
    ours = gr.vmap(f)(x, idx)
    theirs = torch.func.vmap(ft)(T(x), T(idx))
    for o, t in zip(ours, theirs):
        close(o, t)


def test_gather_gradients_with_per_example_indices(rng):
    emb, idx, w = rng.standard_normal((7, 3)), rng.integers(0, 7, (4, 5)), rng.standard_normal((4, 5, 3))
    loss = lambda emb, i, w: gr.sum(gr.tanh(emb[i]) * w)
    loss_t = lambda emb, i, w: torch.sum(torch.tanh(emb[i]) * w)
    ours = gr.vmap(gr.grad(loss), in_axes=(None, 0, 0))(emb, idx, w)
    theirs = torch.func.vmap(torch.func.grad(loss_t), in_dims=(None, 0, 0))(T(emb), T(idx), T(w))
    close(ours, theirs)
    # the table batched too (each example its own table)
    embs = rng.standard_normal((4, 7, 3))
    close(gr.vmap(gr.grad(loss))(embs, idx, w), torch.func.vmap(torch.func.grad(loss_t))(T(embs), T(idx), T(w)))


def test_one_matrix_times_a_batch_of_matrices(rng):
    a, bs = rng.standard_normal((3, 4)), rng.standard_normal((5, 4, 2))
    np.testing.assert_allclose(gr.vmap(lambda b: a @ b)(bs), a @ bs, rtol=1e-12)
    np.testing.assert_allclose(gr.vmap(lambda b: a @ b, in_axes=2)(bs.transpose(1, 2, 0)), a @ bs, rtol=1e-12)


def test_indexed_writes_with_batched_indices_loop_over_the_batch(rng):
    x, i, v = rng.standard_normal((3, 5)), rng.integers(0, 5, (3, 2)), rng.standard_normal((3, 2))
    ours = gr.vmap(lambda x, i, v: gr.index_copy(x, 0, i, v))(x, i, v)
    want = x.copy()
    for b in range(3):
        want[b, i[b]] = v[b]
    np.testing.assert_allclose(ours, want)


# -- composition -----------------------------------------------------------------------------------
def test_grad_and_jvp_of_vmap(rng):
    x = rng.standard_normal((4, 3))
    f = gr.vmap(lambda x: gr.sum(gr.sin(x) * x))
    ft = torch.func.vmap(lambda x: torch.sum(torch.sin(x) * x))
    close(gr.grad(lambda x: gr.sum(f(x)))(x), torch.func.grad(lambda x: ft(x).sum())(T(x)))
    t = rng.standard_normal((4, 3))
    close(gr.jvp(f, (x,), (t,))[1], torch.func.jvp(ft, (T(x),), (T(t),))[1])
    close(gr.vmap(gr.grad(gr.grad(lambda a: gr.sin(a) * a)))(x[:, 0]),
          torch.func.vmap(torch.func.grad(torch.func.grad(lambda a: torch.sin(a) * a)))(T(x[:, 0])))


@pytest.mark.parametrize("backend", ["numpy", "llvm"])
def test_compile_of_vmap(rng, backend):
    p, xs, ys = mlp_params(rng), rng.standard_normal((6, 5)), rng.integers(0, 4, 6)
    step = gr.compile(gr.vmap(gr.grad(mlp_loss_gr), in_axes=(None, 0, 0)), backend=backend)
    ours = step(p, xs, ys)
    pt = {k: T(v) for k, v in p.items()}
    theirs = torch.func.vmap(torch.func.grad(mlp_loss_torch), in_dims=(None, 0, 0))(pt, T(xs), T(ys))
    for k in p:
        close(ours[k], theirs[k])
    q, k_, v = (rng.standard_normal((3, 5, 4)) for _ in range(3))
    close(gr.compile(gr.vmap(attention_gr), backend=backend)(q, k_, v),
          torch.func.vmap(attention_torch)(T(q), T(k_), T(v)))


def test_vmap_closing_over_an_enclosing_trace(rng):
    xs, ys = rng.standard_normal(3), rng.standard_normal((4, 2))
    ours = gr.vmap(lambda x: gr.vmap(lambda y: x * y + gr.sin(x))(ys))(xs)
    np.testing.assert_allclose(ours, xs[:, None, None] * ys + np.sin(xs)[:, None, None], rtol=1e-12)


@settings(max_examples=30, deadline=None)
@given(programs(max_steps=6))
def test_random_programs_per_example_gradients_match_torch(program):
    shapes, steps = program
    xs = make_inputs(shapes, seed=len(steps))
    batch = make_inputs([(3,) + shapes[0]], seed=7)[0]  # the first input batched, the others shared
    nums = tuple(range(len(xs)))
    f = lambda *a: run(steps, a, "gr")
    ft = lambda *a: run(steps, a, "torch")
    in_axes = (0,) + (None,) * (len(xs) - 1)
    ours = gr.vmap(gr.value_and_grad(f, argnums=nums), in_axes=in_axes)(batch, *xs[1:])
    theirs = torch.func.vmap(torch.func.grad_and_value(ft, argnums=nums), in_dims=in_axes)(
        T(batch), *map(T, xs[1:]))
    close(ours[0], theirs[1])
    for o, t in zip(ours[1], theirs[0]):
        close(o, t)


# -- errors ----------------------------------------------------------------------------------------
def test_mismatched_batch_sizes_name_the_arguments(rng):
    with pytest.raises(ShapeError, match=r"different sizes.*x: 3.*y: 4"):
        gr.vmap(lambda x, y: x + y)(np.zeros(3), np.zeros(4))


def test_a_primitive_without_a_batching_rule_is_named_with_its_line(monkeypatch):
    monkeypatch.setattr(REGISTRY["sin"], "batch", None)
    with pytest.raises(UnsupportedOpError, match=r"sin: has no batching rule.*test_vmap.py:\d+"):
        gr.vmap(lambda x: gr.sin(x) * 2.0)(np.ones(3))


def test_bad_in_axes(rng):
    with pytest.raises(ShapeError, match="out of range"):
        gr.vmap(lambda x: x, in_axes=2)(np.zeros((2, 3)))
    with pytest.raises(gr.GradirError, match="no argument is mapped"):
        gr.vmap(lambda x: x, in_axes=None)(np.zeros(3))
    with pytest.raises(gr.GradirError, match="2 entries for 1 positional"):
        gr.vmap(lambda x: x, in_axes=(0, 0))(np.zeros(3))
