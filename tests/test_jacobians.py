"""gr.jacobian (reverse mode), gr.jacfwd and gr.hessian against torch.func.jacrev / jacfwd / hessian in float64:
vector and matrix functions, argnums tuples, pytree arguments and outputs, an MLP's Hessian, composition with
compile and vmap, and the errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gradir as gr
from gradir.core.errors import DTypeError, NonDifferentiableError

pytestmark = pytest.mark.usefixtures("torch_float64")
T = torch.tensor


def close(ours, theirs, tol=1e-10):
    assert np.shape(ours) == tuple(theirs.shape)
    np.testing.assert_allclose(np.asarray(ours), theirs.detach().numpy(), rtol=tol, atol=tol)


def vec_gr(W, x):
    return gr.tanh(W @ x) * gr.sum(x ** 2)


def vec_torch(W, x):
    return torch.tanh(W @ x) * torch.sum(x ** 2)


def mat_gr(A, B):
    return gr.nn.softmax(A @ B, axis=0) + gr.sin(A).sum()


def mat_torch(A, B):
    return torch.softmax(A @ B, 0) + torch.sin(A).sum()


@pytest.mark.parametrize("ours, theirs", [(gr.jacobian, torch.func.jacrev), (gr.jacfwd, torch.func.jacfwd)])
def test_jacobians_of_a_vector_function(rng, ours, theirs):
    W, x = rng.standard_normal((4, 3)), rng.standard_normal(3)
    close(ours(vec_gr, argnums=1)(W, x), theirs(vec_torch, argnums=1)(T(W), T(x)))
    close(ours(vec_gr)(W, x), theirs(vec_torch)(T(W), T(x)))  # (4,) + (4, 3)
    for o, t in zip(ours(vec_gr, argnums=(0, 1))(W, x), theirs(vec_torch, argnums=(0, 1))(T(W), T(x))):
        close(o, t)


@pytest.mark.parametrize("ours, theirs", [(gr.jacobian, torch.func.jacrev), (gr.jacfwd, torch.func.jacfwd)])
def test_jacobians_of_a_matrix_function(rng, ours, theirs):
    A, B = rng.standard_normal((3, 2)), rng.standard_normal((2, 4))
    for o, t in zip(ours(mat_gr, argnums=(0, 1))(A, B), theirs(mat_torch, argnums=(0, 1))(T(A), T(B))):
        close(o, t)  # (3, 4, 3, 2) and (3, 4, 2, 4)


def test_jacobian_and_jacfwd_agree_on_pytrees_as_torch_func(rng):
    p = {"w": rng.standard_normal((2, 3)), "b": rng.standard_normal(2)}
    x = rng.standard_normal(3)

    def f(p, x):
        y = gr.tanh(p["w"] @ x + p["b"])
        return {"y": y, "n": gr.sum(y * y)}

    def ft(p, x):
        y = torch.tanh(p["w"] @ x + p["b"])
        return {"y": y, "n": torch.sum(y * y)}

    pt = {k: T(v) for k, v in p.items()}
    for ours, theirs in [(gr.jacobian, torch.func.jacrev), (gr.jacfwd, torch.func.jacfwd)]:
        got, want = ours(f, argnums=(0, 1))(p, x), theirs(ft, argnums=(0, 1))(pt, T(x))
        assert set(got) == {"y", "n"}
        for out in ("y", "n"):
            for k in ("w", "b"):
                close(got[out][0][k], want[out][0][k])
            close(got[out][1], want[out][1])


def test_hessian_of_a_scalar_function(rng):
    x = rng.standard_normal(4)
    f = lambda x: gr.sum(gr.tanh(x) ** 3) * gr.logsumexp(x)
    ft = lambda x: torch.sum(torch.tanh(x) ** 3) * torch.logsumexp(x, 0)
    close(gr.hessian(f)(x), torch.func.hessian(ft)(T(x)))
    X = rng.standard_normal((2, 3))  # a matrix argument: (2, 3, 2, 3)
    close(gr.hessian(f)(X), torch.func.hessian(lambda x: torch.sum(torch.tanh(x) ** 3) * torch.logsumexp(x, (0, 1)))(T(X)))


def test_hessian_of_an_mlp_loss_with_argnums_tuple(rng):
    W1, W2 = rng.standard_normal((3, 4)) * 0.5, rng.standard_normal((4, 2)) * 0.5
    x, y = rng.standard_normal((5, 3)), np.array([0, 1, 1, 0, 1])

    def loss(W1, W2):
        return gr.nn.cross_entropy(gr.tanh(x @ W1) @ W2, y)

    def loss_t(W1, W2):
        return torch.nn.functional.cross_entropy(torch.tanh(T(x) @ W1) @ W2, T(y))

    H, Ht = gr.hessian(loss, argnums=(0, 1))(W1, W2), torch.func.hessian(loss_t, argnums=(0, 1))(T(W1), T(W2))
    for i in range(2):
        for j in range(2):
            close(H[i][j], Ht[i][j])
    np.testing.assert_allclose(H[0][1], np.transpose(H[1][0], (2, 3, 0, 1)), atol=1e-12)  # symmetric


def test_jacobians_compose_with_compile_and_vmap(rng):
    W, xs = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    per_example = gr.vmap(gr.jacobian(vec_gr, argnums=1), in_axes=(None, 0))(W, xs)
    want = torch.func.vmap(torch.func.jacrev(vec_torch, argnums=1), in_dims=(None, 0))(T(W), T(xs))
    close(per_example, want)
    close(gr.compile(gr.jacfwd(vec_gr, argnums=1), backend="numpy")(W, xs[0]), want[0])
    close(gr.compile(gr.hessian(lambda x: gr.sum(gr.sin(x) * x)))(xs[0]),
          torch.func.hessian(lambda x: torch.sum(torch.sin(x) * x))(T(xs[0])))


def test_torch_tensors_in_torch_tensors_out(rng):
    W, x = T(rng.standard_normal((4, 3))), T(rng.standard_normal(3))
    got = gr.jacobian(vec_gr, argnums=1)(W, x)
    assert torch.is_tensor(got)
    close(got.numpy(), torch.func.jacrev(vec_torch, argnums=1)(W, x))


def test_errors():
    with pytest.raises(NonDifferentiableError, match="integer"):
        gr.jacobian(lambda x: x * 2.0)(np.arange(3))
    with pytest.raises(DTypeError, match="real float outputs"):
        gr.jacobian(lambda x: gr.argmax(x, axis=0))(np.ones(3))
    with pytest.raises(gr.GradirError, match="out of range"):
        gr.jacfwd(lambda x: x, argnums=2)(np.ones(3))
