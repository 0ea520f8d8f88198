"""gr.nn against float64 torch autograd: forward values, VJPs with random cotangents, JVPs against
central differences, second order against torch double-backward, and the TEACHING.md H figures."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gradir as gr
from gradir.core.errors import GradirError, ShapeError, UnsupportedOpError
from gradir.core.ir import Graph
from gradir.ops import nn

RTOL, ATOL = 1e-9, 1e-11


def _is_float(a) -> bool:
    return np.asarray(a).dtype.kind == "f"


def check_vjp(gr_fn, torch_fn, *args, seed=0, rtol=RTOL, atol=ATOL):
    """Forward value and the VJP of a random cotangent, for every float argument, against torch."""
    out, vjp_fn = gr.vjp(gr_fn, *args)
    t_args = [torch.tensor(a, requires_grad=_is_float(a)) for a in args]
    t_out = torch_fn(*t_args)
    np.testing.assert_allclose(out, t_out.detach().numpy(), rtol=rtol, atol=atol)
    ct = np.random.default_rng(seed).normal(size=np.shape(out))
    cts = vjp_fn(ct)
    wrt = [i for i, a in enumerate(args) if _is_float(a)]
    t_grads = torch.autograd.grad(t_out, [t_args[i] for i in wrt], torch.tensor(ct), allow_unused=True)
    for i, tg in zip(wrt, t_grads):
        want = np.zeros(np.shape(args[i])) if tg is None else tg.numpy()
        np.testing.assert_allclose(cts[i], want, rtol=rtol, atol=atol, err_msg=f"cotangent of argument {i}")
    return cts


def check_jvp_fd(fn, *args, seed=1, h=1e-6, rtol=1e-6, atol=1e-8):
    """gr.jvp along a random direction against a central difference of the eager function."""
    rng = np.random.default_rng(seed)
    tangents = tuple(rng.normal(size=np.shape(a)) if _is_float(a) else np.zeros_like(a) for a in args)
    out, tan = gr.jvp(fn, args, tangents)
    plus = fn(*[a + h * t if _is_float(a) else a for a, t in zip(args, tangents)])
    minus = fn(*[a - h * t if _is_float(a) else a for a, t in zip(args, tangents)])
    np.testing.assert_allclose(out, fn(*args), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tan, (np.asarray(plus) - np.asarray(minus)) / (2 * h), rtol=rtol, atol=atol)


def check_second_order(gr_fn, torch_fn, x, seed=2, rtol=1e-8, atol=1e-10):
    """Gradient of <grad L(x), v> with L(x) = <f(x), c>, against torch double-backward."""
    rng = np.random.default_rng(seed)
    c = rng.normal(size=np.shape(gr_fn(x)))
    v = rng.normal(size=np.shape(x))

    def inner(x):
        return gr.sum(gr.grad(lambda y: gr.sum(gr_fn(y) * c))(x) * v)

    ours = gr.grad(inner)(x)
    xt = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad((torch_fn(xt) * torch.tensor(c)).sum(), xt, create_graph=True)
    (want,) = torch.autograd.grad((g * torch.tensor(v)).sum(), xt)
    np.testing.assert_allclose(ours, want.numpy(), rtol=rtol, atol=atol)


@pytest.fixture
def r():
    return np.random.default_rng(42)


# -- softmax family --------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,axis", [((5,), -1), ((3, 4), -1), ((3, 4), 0), ((2, 3, 4), 1)])
def test_softmax_and_log_softmax_match_torch(r, shape, axis):
    x = r.normal(size=shape) * 3
    check_vjp(lambda x: nn.softmax(x, axis=axis), lambda x: torch.softmax(x, dim=axis), x)
    check_vjp(lambda x: nn.log_softmax(x, axis=axis), lambda x: torch.log_softmax(x, dim=axis), x)


def test_softmax_is_stable_for_large_logits():
    x = np.array([1000.0, 1001.0, -1000.0])
    np.testing.assert_allclose(nn.softmax(x), torch.softmax(torch.tensor(x), 0).numpy(), rtol=1e-12)
    np.testing.assert_allclose(nn.log_softmax(x), torch.log_softmax(torch.tensor(x), 0).numpy(), rtol=1e-12)


# -- cross-entropy ---------------------------------------------------------------------------------


@pytest.mark.parametrize("vjp", ["fused", "composed"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore", [False, True])
def test_cross_entropy_matches_torch(r, vjp, reduction, ignore):
    logits = r.normal(size=(7, 5)) * 2
    targets = r.integers(0, 5, size=7)
    kw = {}
    if ignore:
        targets[[1, 4]] = -100
        kw = {"ignore_index": -100}
    check_vjp(lambda z, t: nn.cross_entropy(z, t, reduction=reduction, vjp=vjp, **kw),
              lambda z, t: F.cross_entropy(z, t, reduction=reduction, **kw), logits, targets)


@pytest.mark.parametrize("vjp", ["fused", "composed"])
def test_cross_entropy_over_last_axis_of_3d_logits(r, vjp):
    logits, targets = r.normal(size=(2, 3, 4)), r.integers(0, 4, size=(2, 3))
    targets[0, 1] = 3  # ignore_index may be a real class id too: its rows drop out
    check_vjp(lambda z, t: nn.cross_entropy(z, t, ignore_index=3, vjp=vjp),
              lambda z, t: F.cross_entropy(z.reshape(-1, 4), t.reshape(-1), ignore_index=3), logits, targets)


def test_cross_entropy_fused_and_composed_vjps_agree(r):
    logits, targets = r.normal(size=(9, 6)), r.integers(0, 6, size=9)
    targets[2] = -1
    grads = [gr.grad(lambda z, v=v: nn.cross_entropy(z, targets, ignore_index=-1, vjp=v))(logits)
             for v in ("fused", "composed")]
    np.testing.assert_allclose(grads[0], grads[1], rtol=0, atol=1e-12)


def test_cross_entropy_gradient_is_p_minus_y_and_matches_finite_differences(r):
    # TEACHING H/B: for one row, d loss / d logits = softmax - onehot; check against central differences
    z, y = r.normal(size=(1, 5)), np.array([2])
    g = gr.grad(lambda z: nn.cross_entropy(z, y))(z)
    p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    np.testing.assert_allclose(g, p - np.eye(5)[y], rtol=1e-12, atol=1e-14)
    fd = np.zeros_like(z)
    for k in range(5):
        e = np.zeros_like(z)
        e[0, k] = 1e-6
        fd[0, k] = (nn.cross_entropy(z + e, y) - nn.cross_entropy(z - e, y)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_jvp_matches_finite_differences(r, reduction):
    logits, targets = r.normal(size=(5, 4)), np.array([0, 3, -7, 1, 2])
    check_jvp_fd(lambda z, t: nn.cross_entropy(z, t, reduction=reduction, ignore_index=-7), logits, targets)


def test_cross_entropy_second_order_fused_equals_composed_and_torch(r):
    logits, targets = r.normal(size=(4, 5)), np.array([1, 0, 4, 4])
    check_second_order(lambda z: nn.cross_entropy(z, targets, vjp="fused"),
                       lambda z: F.cross_entropy(z, torch.tensor(targets)), logits)
    check_second_order(lambda z: nn.cross_entropy(z, targets, vjp="composed"),
                       lambda z: F.cross_entropy(z, torch.tensor(targets)), logits)


def test_cross_entropy_keeps_float32(r):
    logits = r.normal(size=(3, 4)).astype(np.float32)
    out = nn.cross_entropy(logits, np.array([0, 1, 2]))
    assert out.dtype == np.float32
    g = gr.grad(lambda z: nn.cross_entropy(z, np.array([0, 1, 2])))(logits)
    want = torch.func.grad(lambda z: F.cross_entropy(z, torch.tensor([0, 1, 2])))(torch.tensor(logits))
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, want.numpy(), rtol=1e-5, atol=1e-6)


# -- normalisation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("shape,axis", [((4, 6), -1), ((2, 3, 5), -1), ((2, 3, 5), (-2, -1))])
def test_layer_norm_matches_torch(r, shape, axis, affine):
    x = r.normal(size=shape) * 2 + 1
    norm_shape = shape[-1:] if axis == -1 else shape[-2:]
    w, b = r.normal(size=norm_shape), r.normal(size=norm_shape)
    if affine:
        check_vjp(lambda x, w, b: nn.layer_norm(x, w, b, axis=axis),
                  lambda x, w, b: F.layer_norm(x, norm_shape, w, b), x, w, b)
    else:
        check_vjp(lambda x: nn.layer_norm(x, axis=axis), lambda x: F.layer_norm(x, norm_shape), x)


def test_layer_norm_over_a_middle_axis(r):
    x, w = r.normal(size=(2, 5, 3)), r.normal(size=5)
    check_vjp(lambda x, w: nn.layer_norm(x, w, axis=1),
              lambda x, w: F.layer_norm(x.transpose(1, 2), (5,), w).transpose(1, 2), x, w)


def _torch_bn(unbiased, eps=1e-5):
    def fn(x, w, b):
        if not unbiased:
            return F.batch_norm(x, None, None, w, b, training=True, eps=eps)
        axes = [0] + list(range(2, x.ndim))
        shape = (1, -1) + (1,) * (x.ndim - 2)
        xhat = (x - x.mean(axes, keepdim=True)) / torch.sqrt(x.var(axes, unbiased=True, keepdim=True) + eps)
        return xhat * w.reshape(shape) + b.reshape(shape)
    return fn


@pytest.mark.parametrize("vjp", ["fused", "composed"])
@pytest.mark.parametrize("unbiased", [False, True])
@pytest.mark.parametrize("shape", [(8, 3), (4, 3, 2, 5)])
def test_batch_norm_matches_torch(r, shape, unbiased, vjp):
    x = r.normal(size=shape) * 3 + 0.5
    w, b = r.normal(size=shape[1]), r.normal(size=shape[1])
    check_vjp(lambda x, w, b: nn.batch_norm(x, w, b, unbiased=unbiased, vjp=vjp), _torch_bn(unbiased), x, w, b)


@pytest.mark.parametrize("unbiased", [False, True])
def test_batch_norm_fused_and_composed_vjps_agree(r, unbiased):
    x, w, b = r.normal(size=(5, 4, 3)), r.normal(size=4), r.normal(size=4)
    c = r.normal(size=x.shape)
    grads = [gr.grad(lambda x, w, b, v=v: gr.sum(nn.batch_norm(x, w, b, unbiased=unbiased, vjp=v) * c),
                     argnums=(0, 1, 2))(x, w, b) for v in ("fused", "composed")]
    for a, e in zip(*grads):
        np.testing.assert_allclose(a, e, rtol=0, atol=1e-12)


def test_batch_norm_without_affine_and_stats(r):
    x = r.normal(size=(6, 2, 3))
    check_vjp(lambda x: nn.batch_norm(x), lambda x: F.batch_norm(x, None, None, training=True), x)
    mean, var = nn.batch_norm_stats(x, unbiased=True)
    np.testing.assert_allclose(mean, x.mean(axis=(0, 2)), rtol=1e-12)
    np.testing.assert_allclose(var, x.var(axis=(0, 2), ddof=1), rtol=1e-12)


def test_batch_norm_jvp_and_second_order(r):
    x, w, b = r.normal(size=(5, 3)), r.normal(size=3), r.normal(size=3)
    check_jvp_fd(lambda x, w, b: nn.batch_norm(x, w, b), x, w, b)
    check_jvp_fd(lambda x, w, b: nn.batch_norm(x, w, b, unbiased=True), x, w, b)
    check_second_order(lambda x: nn.batch_norm(x, w, b), lambda x: _torch_bn(False)(x, torch.tensor(w), torch.tensor(b)), x)


# -- activations and layers ------------------------------------------------------------------------


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch(r, approximate):
    x = r.normal(size=(4, 5)) * 2
    check_vjp(lambda x: nn.gelu(x, approximate=approximate), lambda x: F.gelu(x, approximate=approximate), x)


def test_reexported_activations(r):
    x = r.normal(size=(3, 4))
    check_vjp(nn.relu, torch.relu, x)
    check_vjp(nn.sigmoid, torch.sigmoid, x)
    check_vjp(nn.tanh, torch.tanh, x)
    np.testing.assert_array_equal(nn.one_hot(np.array([2, 0]), 3), np.eye(3)[[2, 0]])


@pytest.mark.parametrize("bias", [False, True])
def test_linear_matches_torch(r, bias):
    x, w, b = r.normal(size=(2, 3, 4)), r.normal(size=(5, 4)), r.normal(size=5)
    if bias:
        check_vjp(nn.linear, F.linear, x, w, b)
    else:
        check_vjp(lambda x, w: nn.linear(x, w), lambda x, w: F.linear(x, w), x, w)


def test_embedding_matches_torch(r):
    weight, idx = r.normal(size=(6, 3)), np.array([[0, 5, 5], [2, 0, 1]])
    check_vjp(lambda w, i: nn.embedding(w, i), lambda w, i: F.embedding(i, w), weight, idx)


def test_dropout_mask_scale_and_gradient(r):
    x, p = r.normal(size=(50, 40)), 0.3
    keep = np.random.default_rng(7).random(x.shape) >= p
    y = nn.dropout(x, p, seed=7)
    np.testing.assert_allclose(y, np.where(keep, x / (1 - p), 0.0), rtol=1e-15)
    assert 0.6 < keep.mean() < 0.8
    g = gr.grad(lambda x: gr.sum(nn.dropout(x, p, seed=7)))(x)
    np.testing.assert_allclose(g, keep / (1 - p), rtol=1e-15)
    np.testing.assert_array_equal(nn.dropout(x, p, seed=7, training=False), x)
    np.testing.assert_array_equal(nn.dropout(x, 1.0, seed=7), np.zeros_like(x))


# -- convolution and pooling -----------------------------------------------------------------------


@pytest.mark.parametrize("stride,padding,dilation", [(1, 0, 1), (2, 1, 1), (1, 2, 2), ((2, 1), (0, 1), (1, 2))])
@pytest.mark.parametrize("bias", [False, True])
def test_conv2d_matches_torch(r, stride, padding, dilation, bias):
    x, w, b = r.normal(size=(2, 3, 7, 6)), r.normal(size=(4, 3, 3, 2)), r.normal(size=4)
    kw = {"stride": stride, "padding": padding, "dilation": dilation}
    if bias:
        check_vjp(lambda x, w, b: nn.conv2d(x, w, b, **kw), lambda x, w, b: F.conv2d(x, w, b, **kw), x, w, b)
    else:
        check_vjp(lambda x, w: nn.conv2d(x, w, **kw), lambda x, w: F.conv2d(x, w, **kw), x, w)


@pytest.mark.parametrize("kernel,stride,padding", [(2, None, 0), (3, 2, 1), ((3, 2), (1, 2), (1, 0))])
def test_pooling_matches_torch(r, kernel, stride, padding):
    x = r.normal(size=(2, 3, 7, 6))
    check_vjp(lambda x: nn.max_pool2d(x, kernel, stride, padding), lambda x: F.max_pool2d(x, kernel, stride, padding), x)
    check_vjp(lambda x: nn.avg_pool2d(x, kernel, stride, padding), lambda x: F.avg_pool2d(x, kernel, stride, padding), x)


def test_unfold_matches_torch_and_fold_is_its_adjoint(r):
    x = r.normal(size=(2, 3, 6, 5))
    geo = {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 1), "dilation": (1, 2)}
    cols = nn.unfold(x, **geo)
    want = F.unfold(torch.tensor(x), **geo).numpy()  # (N, C*kh*kw, OH*OW)
    np.testing.assert_array_equal(cols.reshape(want.shape), want)
    y = r.normal(size=cols.shape)
    # <unfold(x), y> == <x, fold(y)>: the defining property of an adjoint
    np.testing.assert_allclose(np.sum(cols * y), np.sum(x * nn.fold(y, (6, 5), **geo)), rtol=1e-12)
    check_vjp(lambda y: nn.fold(y, (6, 5), **geo),
              lambda y: F.fold(y.reshape(want.shape), (6, 5), **geo), y)


@pytest.mark.parametrize("name", ["conv2d", "max_pool2d", "avg_pool2d"])
def test_conv_and_pool_jvp_match_finite_differences(r, name):
    x, w = r.normal(size=(1, 2, 5, 5)), r.normal(size=(3, 2, 3, 3))
    if name == "conv2d":
        check_jvp_fd(lambda x, w: nn.conv2d(x, w, stride=2, padding=1), x, w)
    else:
        check_jvp_fd(lambda x: getattr(nn, name)(x, 3, 2, 1), x)


def test_second_order_matches_torch_double_backward(r):
    x = r.normal(size=(3, 5))
    check_second_order(nn.softmax, lambda x: torch.softmax(x, -1), x)
    check_second_order(nn.log_softmax, lambda x: torch.log_softmax(x, -1), x)
    check_second_order(nn.layer_norm, lambda x: F.layer_norm(x, (5,)), x)
    check_second_order(nn.gelu, F.gelu, x)
    check_second_order(lambda x: nn.gelu(x, "tanh"), lambda x: F.gelu(x, approximate="tanh"), x)
    xi, w = r.normal(size=(1, 2, 5, 5)), r.normal(size=(2, 2, 3, 3))
    check_second_order(lambda x: nn.gelu(nn.conv2d(x, w, padding=1)),
                       lambda x: F.gelu(F.conv2d(x, torch.tensor(w), padding=1)), xi)
    # conv2d's weight gradient differentiated again through the input: d/dx <dL/dw, v>
    c, v = r.normal(size=(1, 2, 5, 5)), r.normal(size=w.shape)
    ours = gr.grad(lambda x: gr.sum(gr.grad(lambda w: gr.sum(nn.conv2d(x, w, padding=1) ** 2 * c), argnums=0)(w) * v))(xi)
    xt, wt = torch.tensor(xi, requires_grad=True), torch.tensor(w, requires_grad=True)
    (gw,) = torch.autograd.grad((F.conv2d(xt, wt, padding=1) ** 2 * torch.tensor(c)).sum(), wt, create_graph=True)
    (want,) = torch.autograd.grad((gw * torch.tensor(v)).sum(), xt)
    np.testing.assert_allclose(ours, want.numpy(), rtol=1e-8, atol=1e-10)


def test_teaching_h_output_size_and_pool_routing():
    # floor((n + 2p - d(k-1) - 1)/s) + 1 with n=32, k=3, p=1, d=1, s=2 -> 16
    assert nn.out_size(32, 3, 2, 1, 1) == 16
    assert nn.conv2d(np.zeros((1, 1, 32, 32)), np.zeros((1, 1, 3, 3)), stride=2, padding=1).shape == (1, 1, 16, 16)
    x = np.array([[[[1.0, 3.0], [2.0, 0.5]]]])
    up = np.array([[[[4.0]]]])
    _, back = gr.vjp(lambda x: nn.max_pool2d(x, 2), x)
    np.testing.assert_array_equal(back(up)[0], [[[[0.0, 4.0], [0.0, 0.0]]]])   # 4 -> 4, all to the max
    _, back = gr.vjp(lambda x: nn.avg_pool2d(x, 2), x)
    np.testing.assert_array_equal(back(up)[0], np.ones((1, 1, 2, 2)))         # 4 -> 1 each


# -- graphs, compile, inspection -------------------------------------------------------------------


def _model(x, w, b, targets):
    h = nn.batch_norm(nn.conv2d(x, w, padding=1), b, b)
    h = nn.max_pool2d(nn.relu(h), 2)
    return nn.cross_entropy(gr.mean(h, axis=(2, 3)), targets)


def _model_torch(x, w, b, targets):
    h = F.batch_norm(F.conv2d(x, w, padding=1), None, None, b, b, training=True)
    return F.cross_entropy(F.max_pool2d(torch.relu(h), 2).mean((2, 3)), targets)


def test_composite_graph_verifies_round_trips_and_compiles(r):
    x, w, b, t = r.normal(size=(2, 3, 4, 4)), r.normal(size=(4, 3, 3, 3)), r.normal(size=4), np.array([1, 3])
    g = gr.trace(_model, x, w, b, t)
    ops = g.op_counts()
    assert ops["cross_entropy"] == 1 and ops["batch_norm"] == 1 and ops["unfold"] == 2
    g.verify()
    again = Graph.parse(g.to_text(full=True)).verify()
    assert str(again) == str(g)
    want = _model_torch(*[torch.tensor(a) for a in (x, w, b, t)]).item()
    step = gr.compile(_model)
    np.testing.assert_allclose(step(x, w, b, t), want, rtol=1e-10)
    lowered = step.graph(x, w, b, t)
    assert "cross_entropy" not in lowered.op_counts() and "batch_norm" not in lowered.op_counts()
    check_vjp(_model, _model_torch, x, w, b, t)


def test_compiled_gradient_of_composites_runs_on_numpy_backend(r):
    x, w, b, t = r.normal(size=(2, 3, 4, 4)), r.normal(size=(4, 3, 3, 3)), r.normal(size=4), np.array([0, 2])
    step = gr.compile(gr.grad(_model, argnums=(1, 2)))
    gw, gb = step(x, w, b, t)
    ts = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in (x, w, b, t)]
    tw, tb = torch.autograd.grad(_model_torch(*ts), ts[1:3])
    np.testing.assert_allclose(gw, tw.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gb, tb.numpy(), rtol=1e-9, atol=1e-12)


def test_trace_grad_shows_the_fused_cross_entropy_rule(r):
    z, t = r.normal(size=(4, 5)), np.array([1, 0, 4, 2])
    fused = gr.trace_grad(lambda z: nn.cross_entropy(z, t), z).backward.op_counts()
    composed = gr.trace_grad(lambda z: nn.cross_entropy(z, t, vjp="composed"), z).backward.op_counts()
    # fused: softmax - onehot, no log and no scatter; composed: the gather's adjoint scatters into logits
    assert "log" not in fused and "index_add" not in fused
    assert composed.get("index_add", 0) == 1
    assert sum(fused.values()) < sum(composed.values())


def test_trace_grad_shows_the_fused_batch_norm_rule(r):
    x, w, b = r.normal(size=(6, 3)), r.normal(size=3), r.normal(size=3)
    sizes = [len(gr.trace_grad(lambda x, w, b, v=v: gr.sum(nn.batch_norm(x, w, b, vjp=v) ** 2), x, w, b,
                               argnums=(0, 1, 2)).backward.nodes) for v in ("fused", "composed")]
    assert sizes[0] < sizes[1]


# -- errors ----------------------------------------------------------------------------------------


def test_errors_name_the_op_and_the_user_line(r):
    z = r.normal(size=(3, 4))
    with pytest.raises(ShapeError, match=r"cross_entropy: .*test_nn\.py"):
        nn.cross_entropy(z, np.array([0, 1]))
    with pytest.raises(ShapeError, match=r"cross_entropy: target 4 is out of range"):
        nn.cross_entropy(z, np.array([0, 1, 4]))
    with pytest.raises(UnsupportedOpError, match="reduction"):
        nn.cross_entropy(z, np.array([0, 1, 2]), reduction="avg")
    with pytest.raises(GradirError, match=r"cross_entropy: .*test_nn\.py"):
        gr.trace(lambda z: nn.cross_entropy(z, np.array([0.0, 1.0, 2.0])), z)
    with pytest.raises(ShapeError, match=r"batch_norm: .*test_nn\.py"):
        gr.trace(lambda x: nn.batch_norm(x, np.ones(3), np.ones(4)), z)
    with pytest.raises(ShapeError, match=r"conv2d: .*test_nn\.py"):
        nn.conv2d(np.zeros((1, 2, 5, 5)), np.zeros((1, 3, 3, 3)))
    with pytest.raises(ShapeError, match=r"unfold: .*test_nn\.py"):
        nn.conv2d(np.zeros((1, 2, 2, 2)), np.zeros((1, 2, 3, 3)))
    with pytest.raises(ShapeError, match=r"max_pool2d: padding"):
        nn.max_pool2d(np.zeros((1, 1, 4, 4)), 2, padding=2)
    with pytest.raises(UnsupportedOpError, match="gelu"):
        nn.gelu(z, approximate="erf")
