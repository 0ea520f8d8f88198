"""gr.Tensor, the eager front door, against PyTorch float64 running the same program: accumulation,
graph lifetime, leaves and retain_grad, higher order, version checks, in-place ops, no_grad."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gradir as gr
from gradir.core.errors import FreedGraphError, GradirError, NonDifferentiableError, ShapeError, VersionError
from gradir.eager.engine import last_backward
from gradir.eager.tape import AccumulateGrad


def pair(values, requires_grad=True):
    """The same leaf in gradir and in torch (float64)."""
    a = np.asarray(values, dtype=np.float64)
    return gr.Tensor(a, requires_grad=requires_grad), torch.tensor(a, requires_grad=requires_grad)


def close(t: gr.Tensor, ref: torch.Tensor, tol=1e-13):
    np.testing.assert_allclose(t.numpy(), ref.detach().numpy(), rtol=tol, atol=tol)


def test_design_example_and_grad_fn_links():
    t = gr.Tensor(np.array([2.0, 3.0]), requires_grad=True)
    y = (t * t).sum()
    assert repr(y.grad_fn) == "<SumBackward>" and not y.is_leaf and t.is_leaf
    (mul, _), = y.grad_fn.next_functions
    assert mul.name == "MultiplyBackward"
    leaves = [f for f, _ in mul.next_functions]
    assert all(isinstance(f, AccumulateGrad) and f.variable is t for f in leaves)
    y.backward()
    np.testing.assert_array_equal(t.grad.numpy(), [4.0, 6.0])  # d/dt sum(t^2) = 2t, by hand
    assert y.item() == 13.0 and float(y) == 13.0


def test_accumulation_doubles_and_retain_graph_repeats():
    x, xt = pair([2.0, 3.0])
    y, yt = (x * gr.tanh(x)).sum(), (xt * torch.tanh(xt)).sum()
    y.backward(retain_graph=True)
    yt.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    close(x.grad, xt.grad)
    y.backward(retain_graph=True)  # accumulates: the second call doubles .grad
    yt.backward(retain_graph=True)
    close(x.grad, xt.grad)
    np.testing.assert_allclose(x.grad.numpy(), 2 * first, rtol=1e-15)
    x.grad = None  # retain_graph: the same gradient again
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), first, rtol=1e-15)


def test_second_backward_through_freed_graph_raises():
    x, xt = pair([2.0, 3.0])
    y = (x * x).sum()  # the line the error names
    line = f"test_tensor.py:{test_second_backward_through_freed_graph_raises.__code__.co_firstlineno + 2}"
    y.backward()
    yt = (xt * xt).sum()
    yt.backward()
    with pytest.raises(RuntimeError, match="second time"):
        yt.backward()
    with pytest.raises(FreedGraphError, match="retain_graph=True") as e:
        y.backward()
    assert e.value.op == "multiply" and e.value.source == line
    # nothing saved (add, sum): torch and gradir both allow a second pass
    z, zt = (x + 1.0).sum(), (xt + 1.0).sum()
    x.grad, xt.grad = None, None
    z.backward(), zt.backward(), z.backward(), zt.backward()
    close(x.grad, xt.grad)


def test_leaf_vs_non_leaf_and_retain_grad():
    x, xt = pair([2.0, 3.0])
    y, yt = x * x, xt * xt
    y.retain_grad(), yt.retain_grad()
    y.sum().backward(), yt.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 6.0])  # TEACHING E
    np.testing.assert_array_equal(y.grad.numpy(), [1.0, 1.0])
    close(x.grad, xt.grad), close(y.grad, yt.grad)
    w = x * 3.0  # not retained: no .grad, as in torch
    w.sum().backward()
    assert w.grad is None and not w.is_leaf and w.grad_fn is not None
    x.requires_grad_(False)
    assert x.is_leaf and x.grad is not None
    # retained grads accumulate too, and follow the tensor through an in-place op
    a, at = pair([0.5, -1.0])
    b, bt = gr.sin(a), torch.sin(at)  # sin keeps its input, not its output: b may be written
    b.retain_grad(), bt.retain_grad()
    b.mul_(2.0), bt.mul_(2.0)
    for _ in range(2):
        (b * b).sum().backward(retain_graph=True)
        (bt * bt).sum().backward(retain_graph=True)
    close(b.grad, bt.grad), close(a.grad, at.grad)


def test_create_graph_second_derivative_of_cube():
    x = gr.Tensor(2.0, requires_grad=True)
    (x ** 3).backward(create_graph=True)
    g = x.grad
    assert g.item() == 12.0 and g.grad_fn is not None  # 3x^2 at 2
    x.grad = None
    g.backward()
    assert x.grad.item() == 12.0  # 6x at 2


def test_create_graph_hessian_vector_product_matches_torch(rng):
    a, v = rng.standard_normal(5), rng.standard_normal(5)
    x, xt = pair(a)
    gr_loss = (gr.tanh(x) * gr.sin(x) + x * x * x).sum()
    t_loss = (torch.tanh(xt) * torch.sin(xt) + xt ** 3).sum()
    gr_loss.backward(create_graph=True)
    (gt,) = torch.autograd.grad(t_loss, xt, create_graph=True)
    close(x.grad, gt)
    g = x.grad
    x.grad = None
    (g * gr.Tensor(v)).sum().backward()
    (hv,) = torch.autograd.grad((gt * torch.tensor(v)).sum(), xt)
    close(x.grad, hv, tol=1e-12)


def test_version_check_and_the_allowed_add_case():
    x, xt = pair([2.0, 3.0])
    y, yt = (x * x).sum(), (xt * xt).sum()
    with gr.no_grad():
        x += 1  # without recording: the version still moves
    with torch.no_grad():
        xt += 1
    assert x.version == 1
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0"):
        yt.backward()
    with pytest.raises(VersionError, match="saved at version 0, now version 1") as e:
        y.backward()
    assert e.value.op == "multiply" and "backward expected version 0" in str(e.value)
    # add saves nothing: mutating its input is allowed, and the gradient is right
    x, xt = pair([2.0, 3.0])
    y, yt = (x + 2.0).sum(), (xt + 2.0).sum()
    with gr.no_grad():
        x += 1
    with torch.no_grad():
        xt += 1
    y.backward(), yt.backward()
    close(x.grad, xt.grad)


def test_version_check_follows_what_the_rule_reads():
    # multiply by a tensor without grad saves only that tensor (as torch): mutating x is fine
    x, xt = pair([2.0, 3.0])
    c, ct = pair([5.0, -1.0], requires_grad=False)
    y, yt = (x * c).sum(), (xt * ct).sum()
    with gr.no_grad():
        x.mul_(10.0)
    with torch.no_grad():
        xt.mul_(10.0)
    y.backward(), yt.backward()
    close(x.grad, xt.grad)
    # exp keeps its output: writing into the output is caught (torch too)
    x, xt = pair([0.5, 1.5])
    y, yt = gr.exp(x), torch.exp(xt)
    s, st = (y * 2.0).sum(), (yt * 2.0).sum()
    y.add_(1.0), yt.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        st.backward()
    with pytest.raises(VersionError, match="its output") as e:
        s.backward()
    assert e.value.op == "exp"
    # a detached alias shares the version counter
    x = gr.Tensor([1.0, 2.0], requires_grad=True)
    y = gr.tanh(x)
    z = (y * y).sum()
    y.detach()[0] = 0.0
    with pytest.raises(VersionError):
        z.backward()


def test_in_place_ops_rebase_history_like_torch(rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
    (x, xt), (w, wt) = pair(a), pair(b)

    def program(x, w, lib):
        h = lib.sin(x * w)  # sin keeps its input, so h itself may be written
        h.add_(w)  # broadcast other operand
        h *= 2.0
        h.sub_(x, alpha=0.5)
        h[0, 1:3] = w[:2] * 3.0
        h[np.array([2, 0]), 0] = -1.0
        h /= 1.5
        return (h * h).sum()

    program(x, w, gr).backward()
    program(xt, wt, torch).backward()
    close(x.grad, xt.grad), close(w.grad, wt.grad)


def test_setitem_with_masks_and_integer_arrays(rng):
    a = rng.standard_normal((4, 3))
    x, xt = pair(a)
    h, ht = x * 1.0, xt * 1.0
    h[h > 0.3] = 0.0
    ht[ht > 0.3] = 0.0
    h[[0, 2], [1, 2]] = x[1, :2] * 4.0
    ht[[0, 2], [1, 2]] = xt[1, :2] * 4.0
    close(h, ht)
    (h ** 2).sum().backward(), (ht ** 2).sum().backward()
    close(x.grad, xt.grad)


def test_in_place_on_a_leaf_that_requires_grad():
    x = gr.Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(GradirError, match="no_grad") as e:
        x += 1
    assert e.value.op == "add_" and e.value.source.startswith("test_tensor.py:")
    with gr.no_grad():  # an SGD step
        x -= 0.5 * gr.Tensor([2.0, 2.0])
    np.testing.assert_array_equal(x.numpy(), [0.0, 1.0])
    assert x.is_leaf and x.requires_grad and x.version == 1
    y = gr.Tensor([1, 2])  # int64
    with pytest.raises(GradirError, match="cannot write"):
        y += 0.5
    z = gr.Tensor(np.zeros(3))
    with pytest.raises(ShapeError):
        z += np.ones((2, 3))


def test_grad_none_and_zero_():
    x, xt = pair([1.0, -2.0, 0.5])
    for _ in range(3):
        (x * x * x).sum().backward()
        (xt * xt * xt).sum().backward()
    close(x.grad, xt.grad)
    x.grad.zero_(), xt.grad.zero_()
    (x * x * x).sum().backward(), (xt * xt * xt).sum().backward()
    close(x.grad, xt.grad)
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.array([1.0, 4.0, 0.25]), rtol=1e-15)
    x.grad = None
    assert x.grad is None
    (x * 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])


def test_no_grad_and_enable_grad():
    x = gr.Tensor([1.0, 2.0], requires_grad=True)
    with gr.no_grad():
        y = x * x
        with gr.enable_grad():
            z = x * x
    assert not y.requires_grad and y.grad_fn is None and y.is_leaf
    assert z.requires_grad and z.grad_fn is not None

    @gr.no_grad()
    def step(t):
        return t * 3.0

    assert step(x).grad_fn is None and (x * 3.0).grad_fn is not None
    with pytest.raises(GradirError, match="does not require grad"):
        y.sum().backward()


def test_gradient_argument_for_non_scalar_roots(rng):
    a, v = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    x, xt = pair(a)
    y, yt = gr.sin(x) * x, torch.sin(xt) * xt
    with pytest.raises(ShapeError, match="gradient="):
        y.backward(retain_graph=True)
    with pytest.raises(ShapeError, match="does not match"):
        y.backward(gradient=np.ones(3), retain_graph=True)
    y.backward(gradient=v)
    yt.backward(gradient=torch.tensor(v))
    close(x.grad, xt.grad)
    leaf = gr.Tensor([1.0, 2.0], requires_grad=True)
    leaf.backward(gradient=np.array([3.0, 4.0]))  # a leaf root receives the gradient itself
    np.testing.assert_array_equal(leaf.grad.numpy(), [3.0, 4.0])


def test_detach_stops_gradients():
    x, xt = pair([0.3, -0.7])
    y, yt = x * x.detach() + gr.tanh(x), xt * xt.detach() + torch.tanh(xt)
    y.sum().backward(), yt.sum().backward()
    close(x.grad, xt.grad)
    d = x.detach()
    assert not d.requires_grad and d.is_leaf and np.shares_memory(d.numpy(), x.numpy())


def test_small_mlp_matches_gr_grad_and_torch(rng):
    p = {"W1": rng.standard_normal((4, 8)) * 0.5, "b1": rng.standard_normal(8) * 0.1,
         "W2": rng.standard_normal((8, 3)) * 0.5, "b2": rng.standard_normal(3) * 0.1}
    X, y = rng.standard_normal((6, 4)), rng.integers(0, 3, 6)

    def loss(p, X, y):
        h = gr.tanh(X @ p["W1"] + p["b1"])
        return gr.nn.cross_entropy(h @ p["W2"] + p["b2"], y) + 1e-3 * (p["W1"] ** 2).sum()

    expected = gr.grad(loss)(p, X, y)
    tp = {k: gr.Tensor(v, requires_grad=True) for k, v in p.items()}
    out = loss(tp, X, y)
    out.backward()
    # residuals come from the tape; only the fused cross_entropy node's internal softmax pieces
    # (which exist after lowering, not on the tape) are recomputed from tape values
    assert last_backward().recomputed <= 2
    torch_p = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
    h = torch.tanh(torch.tensor(X) @ torch_p["W1"] + torch_p["b1"])
    t_loss = torch.nn.functional.cross_entropy(h @ torch_p["W2"] + torch_p["b2"], torch.tensor(y)) + \
        1e-3 * (torch_p["W1"] ** 2).sum()
    t_loss.backward()
    np.testing.assert_allclose(out.item(), t_loss.item(), rtol=1e-14)
    for k in p:
        close(tp[k].grad, torch_p[k].grad, tol=1e-12)
        np.testing.assert_allclose(tp[k].grad.numpy(), expected[k], rtol=1e-13, atol=1e-15)


def test_residual_made_by_cleanup_is_recomputed_from_the_tape():
    # cleanup rewrites x**2 as x*x, so tanh's saved output has a structure no tape value has
    x, xt = pair([0.5, -1.0, 2.0])
    gr.tanh(x ** 2).sum().backward()
    torch.tanh(xt ** 2).sum().backward()
    close(x.grad, xt.grad)
    record = last_backward()
    assert record.recomputed == 1 and len(record.partition.residuals) == record.from_tape + 1


def test_tensors_work_with_every_kind_of_operand():
    x = gr.Tensor([1.0, 2.0], requires_grad=True)
    y = np.array([3.0, 4.0]) * x + 1  # ndarray on the left defers to the Tensor
    assert isinstance(y, gr.Tensor) and y.grad_fn is not None
    f32 = gr.Tensor(np.ones(2, np.float32), requires_grad=True)
    z = (f32 * 2.0).sum()  # weak Python scalars keep float32
    z.backward()
    assert z.dtype == np.float32 and f32.grad.dtype == np.float32
    assert gr.Tensor(torch.tensor([1.0, 2.0])).dtype == np.float32
    v = x[gr.Tensor([1, 0])] * x[x.detach() > 1.5]  # integer and mask indices given as Tensors
    np.testing.assert_array_equal(v.numpy(), [4.0, 2.0])
    # inside a trace a Tensor is a constant
    np.testing.assert_allclose(gr.grad(lambda w: (w * x).sum())(np.ones(2)), [1.0, 2.0])
    with pytest.raises(NonDifferentiableError):
        gr.Tensor([1, 2], requires_grad=True)


def test_numpy_named_methods_and_gr_functions_on_tensors(rng):
    a, b = rng.uniform(0.5, 2.0, (3, 4)), rng.standard_normal((4, 2))
    (x, xt), (w, wt) = pair(a), pair(b)
    y = gr.concatenate([x.T.reshape(6, 2), gr.stack([x[0, :2], x[:, 1].sum() * x[2, ::-2]])], axis=0)
    yt = torch.cat([xt.T.reshape(6, 2), torch.stack([xt[0, :2], xt[:, 1].sum() * xt[2, [3, 1]]])], dim=0)
    z = (x.log() * x.sqrt()).mean(axis=0) + x.max(axis=1).sum() + gr.maximum(x @ w, 0.0).sum()
    zt = (xt.log() * xt.sqrt()).mean(dim=0) + xt.max(dim=1).values.sum() + torch.clamp_min(xt @ wt, 0.0).sum()
    loss = (z * z).sum() + gr.where(x > 1.0, x.exp(), x.sigmoid()).sum() + x.tanh().var(axis=0).sum() + (y ** 3).sum()
    loss_t = (zt * zt).sum() + torch.where(xt > 1.0, xt.exp(), xt.sigmoid()).sum() + \
        xt.tanh().var(dim=0, unbiased=False).sum() + (yt ** 3).sum()
    loss.backward(), loss_t.backward()
    np.testing.assert_allclose(loss.item(), loss_t.item(), rtol=1e-13)
    close(x.grad, xt.grad, tol=1e-12), close(w.grad, wt.grad, tol=1e-12)
    assert len(x) == 3 and [r.shape for r in x] == [(4,)] * 3 and x.ndim == 2 and x.size == 12


def test_an_op_returning_its_operand_array_does_not_alias_it():
    """stop_gradient's NumPy reference returns its operand as it is: the result gets its own copy, so an
    in-place write to it leaves the operand (and its version) alone (oracle: the operand's own values)."""
    x0 = np.arange(4.0)
    x = gr.Tensor(x0.copy(), requires_grad=True)
    y = gr.stop_gradient(x)
    with gr.no_grad():
        y += 1
    np.testing.assert_array_equal(x.numpy(), x0)
    np.testing.assert_array_equal(y.numpy(), x0 + 1)
