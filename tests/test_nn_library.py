"""gr.nn's torch.nn.functional library (activations, losses, norms, conv/pool, attention) against float64
torch autograd: forward values and the VJP of a random cotangent for every float input, a few
second-order checks, and the LLVM backend against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gradir as gr
from gradir.core.errors import GradirError, ShapeError, UnsupportedOpError
from gradir.ops import nn

RTOL, ATOL = 1e-10, 1e-12


def rng(seed=0):
    return np.random.default_rng(seed)


def check(gr_fn, torch_fn, *args, seed=0, rtol=RTOL, atol=ATOL, frozen=()):
    """gr_fn(*args) and its VJP (random cotangent) w.r.t. every argument, against torch float64 autograd.
    All args are float arrays; integer/bool operands are closed over by the caller. Arguments in `frozen`
    are ones torch does not differentiate (a loss's weight): their cotangents are checked against central
    differences of torch's value instead (exact up to rounding where the function is linear in them)."""
    out, vjp_fn = gr.vjp(gr_fn, *args)
    t_args = [torch.tensor(a, requires_grad=i not in frozen) for i, a in enumerate(args)]
    t_out = torch_fn(*t_args)
    np.testing.assert_allclose(out, t_out.detach().numpy(), rtol=rtol, atol=atol, err_msg="forward value")
    ct = rng(seed + 100).normal(size=np.shape(out))
    cts = vjp_fn(ct)
    live = [i for i in range(len(args)) if i not in frozen]
    t_grads = torch.autograd.grad(t_out, [t_args[i] for i in live], torch.tensor(ct), allow_unused=True)
    for i, tg in zip(live, t_grads):
        want = np.zeros(np.shape(args[i])) if tg is None else tg.numpy()
        np.testing.assert_allclose(cts[i], want, rtol=rtol, atol=atol, err_msg=f"cotangent of argument {i}")
    for i in frozen:
        want = np.zeros(np.shape(args[i]))
        for j in np.ndindex(want.shape):
            def at(delta):
                a = [torch.tensor(v) for v in args]
                a[i] = a[i].clone()
                a[i][j] += delta
                return float((torch_fn(*a) * torch.tensor(ct)).sum())
            want[j] = (at(0.5) - at(-0.5))
        np.testing.assert_allclose(cts[i], want, rtol=1e-9, atol=1e-11, err_msg=f"cotangent of frozen argument {i}")


def check_second_order(gr_fn, torch_fn, x, seed=2, rtol=1e-9, atol=1e-11):
    """Gradient of <grad <f(x), c>, v> against torch double-backward."""
    r = rng(seed)
    c = r.normal(size=np.shape(gr_fn(x)))
    v = r.normal(size=np.shape(x))
    ours = gr.grad(lambda y: gr.sum(gr.grad(lambda z: gr.sum(gr_fn(z) * c))(y) * v))(x)
    xt = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad((torch_fn(xt) * torch.tensor(c)).sum(), xt, create_graph=True)
    (want,) = torch.autograd.grad((g * torch.tensor(v)).sum(), xt)
    np.testing.assert_allclose(ours, want.numpy(), rtol=rtol, atol=atol)


def check_llvm(fn, *args, rtol=1e-10, atol=1e-12):
    """The LLVM backend agrees with the NumPy reference on fn and on its gradient."""
    def loss(*a):
        return gr.sum(fn(*a) * fn(*a))
    for f in (fn, gr.grad(loss, argnums=tuple(range(len(args))))):
        want = gr.compile(f, backend="numpy")(*args)
        got = gr.compile(f, backend="llvm")(*args)
        for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# -- activations ----------------------------------------------------------------------------------

ACTIVATIONS = [
    ("silu", nn.silu, F.silu),
    ("softplus", nn.softplus, F.softplus),
    ("softplus_beta", lambda x: nn.softplus(x, beta=2.0, threshold=3.0), lambda x: F.softplus(x, beta=2.0, threshold=3.0)),
    ("softplus_small_beta", lambda x: nn.softplus(x, beta=0.5), lambda x: F.softplus(x, beta=0.5)),
    ("leaky_relu", nn.leaky_relu, F.leaky_relu),
    ("leaky_relu_slope", lambda x: nn.leaky_relu(x, 0.2), lambda x: F.leaky_relu(x, 0.2)),
    ("elu", nn.elu, F.elu),
    ("elu_alpha", lambda x: nn.elu(x, alpha=0.7), lambda x: F.elu(x, alpha=0.7)),
    ("hardtanh", nn.hardtanh, F.hardtanh),
    ("hardtanh_range", lambda x: nn.hardtanh(x, -2.0, 0.5), lambda x: F.hardtanh(x, -2.0, 0.5)),
    ("relu6", lambda x: nn.relu6(x * 4), lambda x: F.relu6(x * 4)),
]


@pytest.mark.parametrize("name,ours,theirs", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activation(name, ours, theirs):
    x = rng().normal(size=(4, 7)) * 3
    check(ours, theirs, x)


def test_softplus_and_elu_extremes():
    """Far tails: relative accuracy (log1p, expm1), no overflow in the unselected branches (no nan gradients)."""
    x = np.array([-800.0, -60.0, -37.0, -20.0, -1e-9, 0.5, 19.0, 25.0, 800.0])
    check(nn.softplus, F.softplus, x, rtol=1e-12, atol=0)
    check(lambda v: nn.softplus(v, beta=3.0, threshold=50.0), lambda v: F.softplus(v, beta=3.0, threshold=50.0), x,
          rtol=1e-12, atol=0)
    check(nn.elu, F.elu, x, rtol=1e-12, atol=1e-16)  # expm1's derivative is taken as expm1(x) + 1: absolute accuracy
    check(nn.silu, F.silu, x[1:-1], rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("fn,tfn", [(nn.silu, F.silu), (lambda x: nn.softplus(x, beta=1.5), lambda x: F.softplus(x, beta=1.5)),
                                    (nn.elu, F.elu)])
def test_activation_second_order(fn, tfn):
    check_second_order(fn, tfn, rng(3).normal(size=(3, 5)))


# -- losses ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_mse_loss(reduction, weighted):
    r = rng(1)
    x, y, w = r.normal(size=(3, 4)), r.normal(size=(3, 4)), r.uniform(0.1, 2.0, size=(3, 4))
    if weighted:
        check(lambda a, b, c: nn.mse_loss(a, b, reduction=reduction, weight=c),
              lambda a, b, c: F.mse_loss(a, b, reduction=reduction, weight=c), x, y, w)
    else:
        check(lambda a, b: nn.mse_loss(a, b, reduction=reduction), lambda a, b: F.mse_loss(a, b, reduction=reduction), x, y)


def test_mse_loss_broadcasts_as_torch():
    r = rng(2)
    x, y = r.normal(size=(3, 4)), r.normal(size=(4,))
    with pytest.warns(UserWarning):
        check(nn.mse_loss, F.mse_loss, x, y)


NLL_CASES = [  # input shape, ignore_index, weighted, reduction
    ((5, 4), -100, False, "mean"),
    ((5, 4), -100, True, "mean"),
    ((5, 4), 2, True, "mean"),
    ((5, 4), 1, False, "sum"),
    ((5, 4), 3, True, "none"),
    ((4,), -100, True, "mean"),
    ((2, 3, 4, 5), 0, True, "mean"),
    ((2, 3, 6), -1, False, "none"),
]


@pytest.mark.parametrize("shape,ignore_index,weighted,reduction", NLL_CASES)
def test_nll_loss(shape, ignore_index, weighted, reduction):
    r = rng(4)
    c = shape[0] if len(shape) == 1 else shape[1]
    tshape = () if len(shape) == 1 else (shape[0], *shape[2:])
    logp = np.log(r.dirichlet(np.ones(c), size=tshape))            # (..., C) log-probabilities
    x = np.ascontiguousarray(np.moveaxis(logp, -1, 1)) if len(shape) > 1 else logp  # torch wants it contiguous
    t = r.integers(0, c, size=tshape)
    if ignore_index >= 0 and t.size > 1:
        t.flat[1] = ignore_index
    elif ignore_index < 0 and t.ndim:
        t.flat[0] = ignore_index
    w = r.uniform(0.5, 2.0, size=c)
    kw = dict(ignore_index=ignore_index, reduction=reduction)
    tt = torch.tensor(t)
    if weighted:  # torch does not differentiate nll_loss w.r.t. weight: compare the value and the input's gradient
        check(lambda a: nn.nll_loss(a, t, w, **kw), lambda a: F.nll_loss(a, tt, torch.tensor(w), **kw), x)
        np.testing.assert_allclose(gr.grad(lambda ww: gr.sum(nn.nll_loss(x, t, ww, **kw)))(w),
                                   _nll_weight_grad(x, t, w, ignore_index, reduction), rtol=RTOL, atol=ATOL)
    else:
        check(lambda a: nn.nll_loss(a, t, **kw), lambda a: F.nll_loss(a, tt, **kw), x)


def _nll_weight_grad(x, t, w, ignore_index, reduction):
    """d sum(nll_loss) / d weight by torch autograd of the loss written out (torch's own op has no weight grad)."""
    xt, wt = torch.tensor(x), torch.tensor(w, requires_grad=True)
    xr = xt.movedim(1, -1).reshape(-1, xt.shape[1]) if xt.ndim > 1 else xt.reshape(1, -1)
    tr = torch.tensor(t).reshape(-1)
    keep = tr != ignore_index
    safe = torch.where(keep, tr, 0)
    wr = wt[safe] * keep
    losses = -xr[torch.arange(len(tr)), safe] * wr
    loss = losses.sum() / wr.sum() if reduction == "mean" else losses.sum()
    loss.backward()
    return wt.grad.numpy()


def test_nll_loss_all_ignored_is_nan_like_torch():
    x, t = np.log(np.full((2, 3), 1 / 3)), np.array([-100, -100])
    assert np.isnan(F.nll_loss(torch.tensor(x), torch.tensor(t)).item())
    with np.errstate(invalid="ignore"):
        assert np.isnan(gr.compile(lambda a: nn.nll_loss(a, t))(x))


def test_nll_loss_traced_targets():
    r = rng(5)
    x, t = np.log(r.dirichlet(np.ones(4), size=6)), r.integers(0, 4, size=6)
    t[2] = -100
    ours = gr.grad(lambda a, tt: nn.nll_loss(a, tt))(x, t)
    xt = torch.tensor(x, requires_grad=True)
    F.nll_loss(xt, torch.tensor(t)).backward()
    np.testing.assert_allclose(ours, xt.grad.numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(reduction, weighted):
    r = rng(6)
    p, y, w = r.uniform(0.05, 0.95, size=(3, 5)), r.uniform(0, 1, size=(3, 5)), r.uniform(0.5, 2.0, size=(5,))
    if weighted:  # weight (broadcast over rows) is a differentiable input too
        check(lambda a, b, c: nn.binary_cross_entropy(a, b, c, reduction=reduction),
              lambda a, b, c: F.binary_cross_entropy(a, b, c, reduction=reduction), p, y, w, frozen=(2,))
    else:
        check(lambda a, b: nn.binary_cross_entropy(a, b, reduction=reduction),
              lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction), p, y)


def test_binary_cross_entropy_clamps_log_at_minus_100():
    p, y = np.array([0.0, 1.0, 1e-50, 0.5]), np.array([1.0, 0.0, 1.0, 0.3])
    want = F.binary_cross_entropy(torch.tensor(p), torch.tensor(y), reduction="none").numpy()
    np.testing.assert_allclose(nn.binary_cross_entropy(p, y, reduction="none"), want, rtol=1e-12)


BCE_LOGITS_CASES = [  # reduction, weighted, pos_weighted, shape
    ("mean", False, False, (4, 3)),
    ("sum", True, False, (4, 3)),
    ("none", False, True, (4, 3)),
    ("mean", True, True, (2, 4, 3)),
    ("mean", False, False, (7,)),
]


@pytest.mark.parametrize("reduction,weighted,pos_weighted,shape", BCE_LOGITS_CASES)
def test_binary_cross_entropy_with_logits(reduction, weighted, pos_weighted, shape):
    r = rng(7)
    x, y = r.normal(size=shape) * 4, r.uniform(0, 1, size=shape)
    w, pw = r.uniform(0.5, 2.0, size=shape[-1:]), r.uniform(0.5, 3.0, size=shape[-1:])
    names = ["w"] * weighted + ["pw"] * pos_weighted
    extra = [{"w": w, "pw": pw}[k] for k in names]

    def kw(vals):
        return {{"w": "weight", "pw": "pos_weight"}[k]: v for k, v in zip(names, vals)}

    check(lambda a, b, *e: nn.binary_cross_entropy_with_logits(a, b, reduction=reduction, **kw(e)),
          lambda a, b, *e: F.binary_cross_entropy_with_logits(a, b, reduction=reduction, **kw(e)), x, y, *extra,
          frozen=tuple(range(2, 2 + len(extra))))


def test_binary_cross_entropy_with_logits_extreme_logits():
    x, y = np.array([-800.0, -40.0, 0.0, 40.0, 800.0]), np.array([0.0, 1.0, 0.5, 0.0, 1.0])
    check(lambda a, b: nn.binary_cross_entropy_with_logits(a, b, reduction="none"),
          lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction="none"), x, y, rtol=1e-12, atol=1e-300)


# -- normalisation --------------------------------------------------------------------------------

RMS_CASES = [  # shape, normalized_shape, weighted, eps
    ((3, 8), 8, True, None),
    ((3, 8), (8,), False, 1e-3),
    ((2, 3, 4), (3, 4), True, None),
    ((2, 3, 4), [4], True, 1e-6),
]


@pytest.mark.parametrize("shape,normalized_shape,weighted,eps", RMS_CASES)
def test_rms_norm(shape, normalized_shape, weighted, eps):
    r = rng(8)
    x = r.normal(size=shape)
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if weighted:
        check(lambda a, w: nn.rms_norm(a, normalized_shape, w, eps), lambda a, w: F.rms_norm(a, ns, w, eps), x,
              r.normal(size=ns))
    else:
        check(lambda a: nn.rms_norm(a, normalized_shape, eps=eps), lambda a: F.rms_norm(a, ns, eps=eps), x)


def test_rms_norm_second_order_and_eps_default():
    x = rng(9).normal(size=(3, 6)) * 1e-9  # tiny inputs: the default eps (finfo eps) matters
    check_second_order(lambda a: nn.rms_norm(a, 6), lambda a: F.rms_norm(a, (6,)), x * 1e9)
    np.testing.assert_allclose(nn.rms_norm(x, 6), F.rms_norm(torch.tensor(x), (6,)).numpy(), rtol=1e-10)
    x32 = x.astype(np.float32) * np.float32(1e5)
    np.testing.assert_allclose(nn.rms_norm(x32, 6), F.rms_norm(torch.tensor(x32), (6,)).numpy(), rtol=1e-5)


GROUP_CASES = [  # shape, groups, affine
    ((2, 6, 5), 3, True),
    ((2, 6, 3, 4), 2, True),
    ((2, 4, 3, 3), 4, False),
    ((3, 4), 1, True),
]


@pytest.mark.parametrize("shape,groups,affine", GROUP_CASES)
def test_group_norm(shape, groups, affine):
    r = rng(10)
    x = r.normal(size=shape)
    c = shape[1]
    if affine:
        check(lambda a, w, b: nn.group_norm(a, groups, w, b), lambda a, w, b: F.group_norm(a, groups, w, b), x,
              r.normal(size=c), r.normal(size=c))
    else:
        check(lambda a: nn.group_norm(a, groups, eps=1e-3), lambda a: F.group_norm(a, groups, eps=1e-3), x)


# -- convolution and pooling ----------------------------------------------------------------------

CONV1D_CASES = [  # x shape, weight shape, stride, padding, dilation, groups, bias
    ((2, 3, 9), (4, 3, 3), 1, 0, 1, 1, True),
    ((2, 3, 10), (5, 3, 2), 2, 1, 1, 1, False),
    ((1, 2, 11), (3, 2, 3), (3,), (2,), 2, 1, True),
    ((2, 4, 8), (6, 2, 3), 1, 1, 1, 2, True),
    ((3, 7), (2, 3, 3), 1, 1, 1, 1, True),            # unbatched
    ((2, 3, 9), (4, 3, 4), 1, "same", 1, 1, True),    # odd total padding: one more at the end
    ((2, 3, 9), (4, 3, 3), 1, "same", 2, 1, False),
    ((2, 3, 9), (4, 3, 3), 2, "valid", 1, 1, False),
]


@pytest.mark.filterwarnings("ignore:Using padding=.same. with even kernel")  # torch copies the input; we pad too
@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups,bias", CONV1D_CASES)
def test_conv1d(xs, ws, stride, padding, dilation, groups, bias):
    r = rng(11)
    args = [r.normal(size=xs), r.normal(size=ws)] + ([r.normal(size=ws[0])] if bias else [])
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    check(lambda x, w, *b: nn.conv1d(x, w, *b, **kw), lambda x, w, *b: F.conv1d(x, w, *b, **kw), *args)


CONV2D_GROUP_CASES = [  # x shape, weight shape, stride, padding, groups
    ((2, 4, 6, 5), (6, 2, 3, 3), 1, 1, 2),
    ((1, 6, 7, 7), (6, 1, 3, 2), 2, (1, 0), 6),       # depthwise
    ((6, 6, 5), (3, 2, 2, 2), 1, 0, 3),               # unbatched
    ((1, 2, 6, 5), (3, 2, 2, 3), 1, "same", 1),
    ((1, 2, 6, 5), (4, 1, 3, 4), 1, "same", 2),
    ((1, 2, 6, 5), (3, 2, 3, 2), 2, "valid", 1),
]


@pytest.mark.filterwarnings("ignore:Using padding=.same. with even kernel")  # torch copies the input; we pad too
@pytest.mark.parametrize("xs,ws,stride,padding,groups", CONV2D_GROUP_CASES)
def test_conv2d_groups(xs, ws, stride, padding, groups):
    r = rng(12)
    kw = dict(stride=stride, padding=padding, groups=groups)
    check(lambda x, w, b: nn.conv2d(x, w, b, **kw), lambda x, w, b: F.conv2d(x, w, b, **kw), r.normal(size=xs),
          r.normal(size=ws), r.normal(size=ws[0]))


CONVT_CASES = [  # x shape, weight shape, stride, padding, output_padding, groups, dilation
    ((2, 3, 4, 4), (3, 2, 3, 3), 1, 0, 0, 1, 1),
    ((2, 3, 4, 5), (3, 2, 3, 3), 2, 1, 1, 1, 1),
    ((1, 2, 3, 3), (2, 3, 4, 2), (2, 3), (1, 0), (0, 2), 1, 1),
    ((1, 2, 3, 4), (2, 1, 3, 3), 1, 0, 1, 1, 2),      # output_padding < dilation (not stride)
    ((2, 4, 3, 3), (4, 3, 2, 2), 2, 0, 0, 2, 1),
    ((2, 5, 5), (2, 3, 3, 3), 2, 1, 0, 1, 1),         # unbatched
]


@pytest.mark.parametrize("xs,ws,stride,padding,output_padding,groups,dilation", CONVT_CASES)
def test_conv_transpose2d(xs, ws, stride, padding, output_padding, groups, dilation):
    r = rng(13)
    kw = dict(stride=stride, padding=padding, output_padding=output_padding, groups=groups, dilation=dilation)
    check(lambda x, w, b: nn.conv_transpose2d(x, w, b, **kw), lambda x, w, b: F.conv_transpose2d(x, w, b, **kw),
          r.normal(size=xs), r.normal(size=ws), r.normal(size=ws[1] * groups))


ADAPTIVE_CASES = [  # x shape, output_size
    ((2, 3, 8, 6), (4, 3)),
    ((2, 3, 7, 5), 3),
    ((1, 2, 5, 7), (2, 4)),
    ((1, 2, 6, 9), (4, None)),
    ((2, 4, 5), 1),                                   # unbatched, global pool
    ((1, 1, 3, 3), (5, 4)),                           # output larger than input
]


@pytest.mark.parametrize("xs,output_size", ADAPTIVE_CASES)
@pytest.mark.parametrize("kind", ["avg", "max"])
def test_adaptive_pool2d(xs, output_size, kind):
    ours, theirs = {"avg": (nn.adaptive_avg_pool2d, F.adaptive_avg_pool2d),
                    "max": (nn.adaptive_max_pool2d, F.adaptive_max_pool2d)}[kind]
    check(lambda x: ours(x, output_size), lambda x: theirs(x, output_size), rng(14).normal(size=xs))


# -- attention ------------------------------------------------------------------------------------

SDPA_CASES = [  # q shape, k shape, v shape, mask kind, causal, scale
    ((5, 4), (5, 4), (5, 3), None, False, None),
    ((2, 3, 6, 4), (2, 3, 7, 4), (2, 3, 7, 5), None, False, 0.3),
    ((2, 3, 6, 4), (2, 3, 6, 4), (2, 3, 6, 4), None, True, None),
    ((2, 4, 4), (2, 6, 4), (2, 6, 2), None, True, None),     # causal with L < S: top-left aligned
    ((2, 6, 4), (2, 4, 4), (2, 4, 2), None, True, None),     # causal with L > S
    ((2, 3, 6, 4), (2, 3, 7, 4), (2, 3, 7, 5), "bool", False, None),
    ((2, 3, 6, 4), (1, 3, 7, 4), (1, 3, 7, 5), "bool_rows", False, None),  # fully masked rows give zeros
    ((2, 6, 4), (2, 7, 4), (2, 7, 5), "float", False, None),
    ((2, 6, 4), (2, 7, 4), (2, 7, 5), "float_inf", False, 2.0),
]


def _mask(kind, lq, s, r):
    if kind == "bool":
        m = r.uniform(size=(lq, s)) < 0.7
        m[:, 0] = True
        return m
    if kind == "bool_rows":
        m = r.uniform(size=(6, 1, lq, s)) < 0.6  # broadcasts over batch and heads
        m[:, :, 1] = False
        return m[:2]
    if kind == "float":
        return r.normal(size=(lq, s))
    m = np.where(r.uniform(size=(lq, s)) < 0.7, 0.0, -np.inf)
    m[:, 1] = 0.0
    return m


@pytest.mark.parametrize("qs,ks,vs,mask,causal,scale", SDPA_CASES)
def test_scaled_dot_product_attention(qs, ks, vs, mask, causal, scale):
    r = rng(15)
    q, k, v = r.normal(size=qs), r.normal(size=ks), r.normal(size=vs)
    m = None if mask is None else _mask(mask, qs[-2], ks[-2], r)
    kw = dict(is_causal=causal, scale=scale)
    if m is not None and m.dtype != bool:  # a float mask is differentiable too
        check(lambda a, b, c, mm: nn.scaled_dot_product_attention(a, b, c, mm, **kw),
              lambda a, b, c, mm: F.scaled_dot_product_attention(a, b, c, mm, **kw), q, k, v,
              np.where(np.isinf(m), -1e300, m) if mask == "float_inf" else m)
        check(lambda a, b, c: nn.scaled_dot_product_attention(a, b, c, m, **kw),
              lambda a, b, c: F.scaled_dot_product_attention(a, b, c, torch.tensor(m), **kw), q, k, v)
    else:
        mt = None if m is None else torch.tensor(m)
        check(lambda a, b, c: nn.scaled_dot_product_attention(a, b, c, m, **kw),
              lambda a, b, c: F.scaled_dot_product_attention(a, b, c, mt, **kw), q, k, v)


def test_sdpa_gqa():
    r = rng(16)
    q, k, v = r.normal(size=(2, 6, 5, 4)), r.normal(size=(2, 2, 7, 4)), r.normal(size=(2, 2, 7, 3))
    check(lambda a, b, c: nn.scaled_dot_product_attention(a, b, c, enable_gqa=True, is_causal=True),
          lambda a, b, c: F.scaled_dot_product_attention(a, b, c, enable_gqa=True, is_causal=True), q, k, v)


def test_sdpa_dropout_needs_seed_and_matches_its_mask():
    r = rng(17)
    q, k, v = r.normal(size=(2, 5, 4)), r.normal(size=(2, 6, 4)), r.normal(size=(2, 6, 3))
    with pytest.raises(UnsupportedOpError, match="seed") as e:
        nn.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
    assert "test_nn_library.py" in str(e.value)
    keep = np.random.default_rng(3).random((2, 5, 6)) >= 0.25  # how gr.nn.dropout draws its mask

    def theirs(a, b, c):
        attn = torch.softmax(a @ b.transpose(-1, -2) / 2.0, -1) * torch.tensor(keep) / 0.75
        return attn @ c
    check(lambda a, b, c: nn.scaled_dot_product_attention(a, b, c, dropout_p=0.25, seed=3), theirs, q, k, v)


def test_sdpa_errors():
    q = np.zeros((3, 4))
    with pytest.raises(UnsupportedOpError, match="is_causal"):
        nn.scaled_dot_product_attention(q, q, q, np.ones((3, 3), bool), is_causal=True)
    with pytest.raises(ShapeError, match="scaled_dot_product_attention") as e:
        nn.scaled_dot_product_attention(q, np.zeros((3, 5)), q)
    assert "test_nn_library.py" in str(e.value)


# -- forward mode, float32, eager Tensors --------------------------------------------------------

JVP_CASES = [  # name, ours, theirs, argument shapes
    ("softplus", lambda x: nn.softplus(x, beta=2.0), lambda x: F.softplus(x, beta=2.0), [(3, 4)]),
    ("bce_logits", lambda x, y: nn.binary_cross_entropy_with_logits(x, y), F.binary_cross_entropy_with_logits, [(3, 4)] * 2),
    ("group_norm", lambda x, w: nn.group_norm(x, 2, w), lambda x, w: F.group_norm(x, 2, w), [(2, 4, 3), (4,)]),
    ("conv_transpose2d", lambda x, w: nn.conv_transpose2d(x, w, stride=2, output_padding=1),
     lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=1), [(1, 2, 3, 3), (2, 3, 2, 2)]),
    ("adaptive_max", lambda x: nn.adaptive_max_pool2d(x, (2, 3)), lambda x: F.adaptive_max_pool2d(x, (2, 3)), [(1, 2, 5, 5)]),
    ("sdpa", lambda q, k, v: nn.scaled_dot_product_attention(q, k, v, is_causal=True),
     lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), [(2, 4, 3), (2, 5, 3), (2, 5, 2)]),
]


@pytest.mark.parametrize("name,ours,theirs,shapes", JVP_CASES, ids=[c[0] for c in JVP_CASES])
def test_jvp_against_torch_func(name, ours, theirs, shapes):
    r = rng(20)
    args = [r.uniform(0.1, 0.9, size=s) if name == "bce_logits" and i else r.normal(size=s) for i, s in enumerate(shapes)]
    tangents = [r.normal(size=s) for s in shapes]
    out, tan = gr.jvp(ours, tuple(args), tuple(tangents))
    t_out, t_tan = torch.func.jvp(theirs, tuple(map(torch.tensor, args)), tuple(map(torch.tensor, tangents)))
    np.testing.assert_allclose(out, t_out.numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(tan, t_tan.numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("fn", [nn.silu, nn.softplus, nn.elu, nn.leaky_relu, nn.relu6, lambda x: nn.rms_norm(x, 5),
                                lambda x: nn.group_norm(x, 5), lambda x: nn.adaptive_avg_pool2d(x[None], 3),
                                lambda x: nn.scaled_dot_product_attention(x, x, x, np.tril(np.ones((5, 5), bool))),
                                lambda x: nn.binary_cross_entropy_with_logits(x, x * 0 + 0.25, reduction="none")])
def test_float32_stays_float32(fn):
    x = rng(21).normal(size=(4, 5, 5)).astype(np.float32)
    assert fn(x).dtype == np.float32
    assert gr.compile(fn)(x).dtype == np.float32


def test_eager_tensor_backward():
    r = rng(22)
    x = r.normal(size=(2, 4, 3))
    t = gr.Tensor(x, requires_grad=True)
    nn.scaled_dot_product_attention(nn.silu(t), t, t, is_causal=True).sum().backward()
    xt = torch.tensor(x, requires_grad=True)
    F.scaled_dot_product_attention(F.silu(xt), xt, xt, is_causal=True).sum().backward()
    np.testing.assert_allclose(t.grad, xt.grad.numpy(), rtol=RTOL, atol=ATOL)


# -- softmax over an empty axis -------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (2, 0, 4)])
@pytest.mark.parametrize("fn,tfn", [(nn.softmax, torch.softmax), (nn.log_softmax, torch.log_softmax)])
def test_softmax_empty(shape, fn, tfn):
    x = np.zeros(shape)
    axis = 1 if len(shape) == 3 else -1
    want = tfn(torch.tensor(x), axis).numpy()
    for got in (fn(x, axis), gr.compile(lambda a: fn(a, axis))(x), gr.grad(lambda a: gr.sum(fn(a, axis)))(x)):
        assert got.shape == want.shape


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("call,err,match", [
    (lambda: nn.mse_loss(np.zeros(3), np.zeros(3), reduction="avg"), UnsupportedOpError, "mse_loss"),
    (lambda: nn.nll_loss(np.zeros((3, 4)), np.zeros(4, np.int64)), ShapeError, "nll_loss"),
    (lambda: nn.nll_loss(np.zeros((3, 4)), np.array([0, 4, 1])), ShapeError, "out of range"),
    (lambda: nn.nll_loss(np.zeros((3, 4)), np.zeros(3)), GradirError, "integer"),
    (lambda: nn.binary_cross_entropy(np.full(3, 0.5), np.zeros(4)), ShapeError, "binary_cross_entropy"),
    (lambda: nn.binary_cross_entropy(np.full(3, 1.5), np.zeros(3)), ShapeError, r"\[0, 1\]"),
    (lambda: nn.rms_norm(np.zeros((2, 3)), (2,)), ShapeError, "rms_norm"),
    (lambda: nn.rms_norm(np.zeros((2, 3)), 3, np.ones(2)), ShapeError, "weight"),
    (lambda: nn.group_norm(np.zeros((2, 6, 3)), 4), ShapeError, "group_norm"),
    (lambda: nn.conv1d(np.zeros((1, 3, 5)), np.zeros((2, 2, 3))), ShapeError, "conv1d"),
    (lambda: nn.conv2d(np.zeros((1, 4, 5, 5)), np.zeros((3, 2, 3, 3)), groups=2), ShapeError, "groups"),
    (lambda: nn.conv_transpose2d(np.zeros((1, 2, 3, 3)), np.zeros((2, 2, 3, 3)), stride=2, output_padding=2), ShapeError,
     "output_padding"),
    (lambda: nn.adaptive_avg_pool2d(np.zeros((1, 2, 3, 3)), (0, 2)), ShapeError, "adaptive_avg_pool2d"),
    (lambda: nn.hardtanh(np.zeros(3), 1.0, -1.0), UnsupportedOpError, "hardtanh"),
    (lambda: nn.conv2d(np.zeros((1, 2, 5, 5)), np.zeros((3, 2, 3, 3)), stride=2, padding="same"), ShapeError, "stride 1"),
    (lambda: nn.conv1d(np.zeros((1, 2, 5)), np.zeros((3, 2, 3)), padding="full"), UnsupportedOpError, "conv1d"),
])
def test_errors_name_op_and_line(call, err, match):
    with pytest.raises(err, match=match) as e:
        call()
    assert "test_nn_library.py" in str(e.value)


# -- LLVM backend ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["silu_softplus_elu", "bce_logits", "rms_group", "sdpa_causal", "conv_t_adaptive"])
def test_llvm_matches_numpy(name):
    r = rng(18)
    if name == "silu_softplus_elu":  # with far tails
        x = np.concatenate([r.normal(size=20) * 3, [-700.0, -60.0, -37.0, -1e-9, 0.0, 1e-9, 25.0, 700.0]])
        check_llvm(lambda x: nn.silu(x) + nn.softplus(x, beta=2.0) + nn.elu(x) + nn.leaky_relu(x), x)
    elif name == "bce_logits":
        check_llvm(lambda x, y: nn.binary_cross_entropy_with_logits(x, y, reduction="none", pos_weight=np.full(5, 2.0)),
                   r.normal(size=(3, 5)) * 4, r.uniform(size=(3, 5)))
    elif name == "rms_group":
        check_llvm(lambda x, w: nn.group_norm(nn.rms_norm(x, (3, 4), w), 2), r.normal(size=(2, 4, 3, 4)),
                   r.normal(size=(3, 4)))
    elif name == "sdpa_causal":
        check_llvm(lambda q, k, v: nn.scaled_dot_product_attention(q, k, v, is_causal=True), r.normal(size=(2, 5, 4)),
                   r.normal(size=(2, 5, 4)), r.normal(size=(2, 5, 3)))
    else:
        check_llvm(lambda x, w: nn.adaptive_avg_pool2d(nn.conv_transpose2d(x, w, stride=2, padding=1), (3, 5)),
                   r.normal(size=(1, 2, 3, 4)), r.normal(size=(2, 3, 3, 3)))
