"""gr.nn's second batch of torch.nn.functional ops (issue 21, item 3) against float64 torch autograd with the
shared oracle (value, VJP, JVP, LLVM against NumPy): activations, losses, vector norms and distances,
instance_norm, and the new arguments of cross_entropy (weight, label_smoothing, probability targets),
batch_norm (evaluation mode), embedding (padding_idx) and ATen add/sub (alpha, through gr.from_torch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_oracle import check_op

import gradir as gr
from gradir.core.errors import AxisError, ShapeError, UnsupportedOpError
from gradir.ops import nn


def rand(*shape, seed=0, scale=1.0):
    return np.random.default_rng(seed).standard_normal(shape) * scale


def positive(*shape, seed=0):
    return np.random.default_rng(seed).uniform(0.1, 1.0, shape)


def T(a):
    return torch.tensor(np.asarray(a))


X = rand(3, 4, scale=2.0)
X3 = rand(2, 3, 5, seed=1, scale=2.0)
# large |x|: the overflow-free branches (softplus-style) must give torch's finite values and gradients
BIG = np.array([-800.0, -30.0, -2.5, -1e-3, 0.3, 2.5, 30.0, 800.0])
# hardswish/hardsigmoid at their kinks -3 and 3 (gradir takes the outer branch's derivative there, as torch)
KINKS = np.array([-5.0, -3.0, -2.0, -0.5, 0.0, 1.0, 3.0, 4.0])


def case(id, gfn, tfn, *args, **kw):
    return pytest.param(gfn, tfn, args, kw, id=id)


def run(gfn, tfn, args, kw):
    check_op(gfn, tfn, *args, **kw)


# -- activations ----------------------------------------------------------------------------------

ACTIVATIONS = [
    case("softmin", lambda x: nn.softmin(x, 1), lambda x: F.softmin(x, 1), X),
    case("softmin_axis0", lambda x: nn.softmin(x, 0), lambda x: F.softmin(x, 0), X),
    case("softmin_0d", lambda x: nn.softmin(x, -1), lambda x: F.softmin(x, -1), np.array(0.7)),
    case("softmin_empty", lambda x: nn.softmin(x, 1), lambda x: F.softmin(x, 1), np.zeros((0, 4))),
    case("logsigmoid", nn.logsigmoid, F.logsigmoid, X),
    case("logsigmoid_big", nn.logsigmoid, F.logsigmoid, BIG),
    case("logsigmoid_0d", nn.logsigmoid, F.logsigmoid, np.array(-1.3)),
    case("mish", nn.mish, F.mish, X),
    case("mish_big", nn.mish, F.mish, BIG),
    case("glu_last", nn.glu, F.glu, X),
    case("glu_axis0", lambda x: nn.glu(x, 0), lambda x: F.glu(x, 0), rand(4, 3)),  # non-trailing axis
    case("glu_size2", lambda x: nn.glu(x, 1), lambda x: F.glu(x, 1), rand(2, 2, 1)),
    case("selu", nn.selu, F.selu, X),
    case("selu_big", nn.selu, F.selu, BIG),
    case("selu_at_0", nn.selu, F.selu, np.array([-1.0, 0.0, 1.0])),  # x = 0 takes the negative branch's slope
    # alpha 1, 2 and 0.5 only: torch's celu backward rounds 1/alpha to float32 (1.0/alpha.toFloat()), which
    # only these alphas survive exactly
    case("celu", nn.celu, F.celu, X),
    case("celu_alpha2_big", lambda x: nn.celu(x, 2.0), lambda x: F.celu(x, 2.0), BIG),
    case("celu_alpha_half_big", lambda x: nn.celu(x, 0.5), lambda x: F.celu(x, 0.5), BIG),
    case("hardswish", nn.hardswish, F.hardswish, X),
    case("hardswish_kinks", nn.hardswish, F.hardswish, KINKS),
    # torch's hardsigmoid backward multiplies by the float32 constant 1.0f/6.0f: its gradient is float32-exact only
    case("hardsigmoid", nn.hardsigmoid, F.hardsigmoid, X, rtol=1e-7),
    case("hardsigmoid_kinks", nn.hardsigmoid, F.hardsigmoid, KINKS, rtol=1e-7),
    case("softsign", nn.softsign, F.softsign, np.append(BIG, 0.0)),
    case("threshold", lambda x: nn.threshold(x, 0.5, -2.0), lambda x: F.threshold(x, 0.5, -2.0),
         np.array([-1.0, 0.5, 0.7, 2.0])),  # at x == threshold: replaced, no gradient (as torch)
    case("prelu_channels", nn.prelu, F.prelu, X3, positive(3)),
    case("prelu_one", nn.prelu, F.prelu, X3, positive(1)),
    case("prelu_0d_weight", nn.prelu, F.prelu, X, np.array(0.3)),
    case("prelu_2d", nn.prelu, F.prelu, X, positive(4)),
    case("prelu_1d_input", nn.prelu, F.prelu, rand(5), positive(1)),
    case("prelu_0d_input", nn.prelu, F.prelu, np.array(-0.4), positive(1)),
    # at x = 0 the VJP takes weight's branch, as torch's backward; torch's forward mode takes slope 1 there
    # (its own two rules disagree), so the JVP is checked away from 0 above
    case("prelu_at_0", nn.prelu, F.prelu, np.array([[-1.0, 0.0], [0.0, 2.0]]), positive(2), jvp=False),
]


@pytest.mark.parametrize("gfn,tfn,args,kw", ACTIVATIONS)
def test_activations(gfn, tfn, args, kw):
    run(gfn, tfn, args, kw)


def test_activations_stay_finite_at_large_inputs():
    x = np.array([-800.0, 800.0])
    for f in (nn.logsigmoid, nn.mish, nn.celu, nn.selu, nn.softsign):
        value, grad = gr.value_and_grad(lambda x: gr.sum(f(x)))(x)
        assert np.isfinite(value) and np.isfinite(grad).all(), f.__name__


def test_activation_errors():
    with pytest.raises(ShapeError, match="glu: needs an even size"):
        nn.glu(np.zeros((2, 3)))
    with pytest.raises(AxisError, match="glu"):
        nn.glu(np.array(1.0))
    with pytest.raises(UnsupportedOpError, match="celu: alpha=0"):
        nn.celu(X, 0.0)
    with pytest.raises(ShapeError, match="prelu: weight of shape \\(4,\\)"):
        nn.prelu(rand(4), positive(4))  # a 1-d input has one channel, as torch
    with pytest.raises(ShapeError, match="prelu"):
        nn.prelu(X3, positive(2))


# -- losses ---------------------------------------------------------------------------------------

Y = rand(3, 4, seed=2, scale=2.0)
W = positive(3, 4, seed=3)
LOG_P = np.log(positive(3, 4, seed=4))
REDUCTIONS = ["mean", "sum", "none"]


def losses(reduction):
    r = reduction
    return [
        case(f"l1_{r}", lambda x, y: nn.l1_loss(x, y, reduction=r), lambda x, y: F.l1_loss(x, y, reduction=r), X, Y),
        case(f"l1_weight_{r}", lambda x, y, w: nn.l1_loss(x, y, reduction=r, weight=w),
             lambda x, y, w: F.l1_loss(x, y, reduction=r, weight=w), X, Y, W),
        case(f"smooth_l1_{r}", lambda x, y: nn.smooth_l1_loss(x, y, reduction=r),
             lambda x, y: F.smooth_l1_loss(x, y, reduction=r), X, Y),
        case(f"smooth_l1_beta_{r}", lambda x, y: nn.smooth_l1_loss(x, y, reduction=r, beta=0.5),
             lambda x, y: F.smooth_l1_loss(x, y, reduction=r, beta=0.5), X, Y),
        case(f"smooth_l1_beta0_{r}", lambda x, y: nn.smooth_l1_loss(x, y, reduction=r, beta=0.0),
             lambda x, y: F.smooth_l1_loss(x, y, reduction=r, beta=0.0), X, Y),
        case(f"huber_{r}", lambda x, y: nn.huber_loss(x, y, reduction=r),
             lambda x, y: F.huber_loss(x, y, reduction=r), X, Y),
        case(f"huber_delta_weight_{r}", lambda x, y, w: nn.huber_loss(x, y, reduction=r, delta=2.0, weight=w),
             lambda x, y, w: F.huber_loss(x, y, reduction=r, delta=2.0, weight=w), X, Y, W),
        case(f"kl_div_{r}", lambda x, y: nn.kl_div(x, y, reduction=r), lambda x, y: F.kl_div(x, y, reduction=r),
             LOG_P, positive(3, 4, seed=5)),
        case(f"kl_div_log_target_{r}", lambda x, y: nn.kl_div(x, y, reduction=r, log_target=True),
             lambda x, y: F.kl_div(x, y, reduction=r, log_target=True), LOG_P, np.log(positive(3, 4, seed=5))),
    ]


LOSSES = [c for r in REDUCTIONS for c in losses(r)] + [
    case("l1_broadcast", nn.l1_loss, F.l1_loss, X, Y[0]),
    case("huber_broadcast_0d", nn.huber_loss, F.huber_loss, np.array(0.3), Y),
    case("smooth_l1_size1", nn.smooth_l1_loss, F.smooth_l1_loss, X[:, :1], Y[:1]),
    case("l1_at_equal", nn.l1_loss, F.l1_loss, np.array([1.0, 2.0]), np.array([1.0, 0.0])),  # |0|' = 0, as torch
    case("kl_div_batchmean", lambda x, y: nn.kl_div(x, y, reduction="batchmean"),
         lambda x, y: F.kl_div(x, y, reduction="batchmean"), LOG_P, positive(3, 4, seed=5)),
    case("kl_div_batchmean_log_target", lambda x, y: nn.kl_div(x, y, reduction="batchmean", log_target=True),
         lambda x, y: F.kl_div(x, y, reduction="batchmean", log_target=True), LOG_P, -positive(4)),
    case("kl_div_batchmean_0d", lambda x, y: nn.kl_div(x, y, reduction="batchmean"),  # a 0-d input: the sum
         lambda x, y: F.kl_div(x, y, reduction="batchmean"), np.array(-0.7), np.array(0.4)),
    # a zero target contributes 0 (xlogy); its own derivative there is nan in torch, so it is a constant here
    case("kl_div_zero_target", lambda x: nn.kl_div(x, np.array([0.0, 0.5, 0.5]), reduction="sum"),
         lambda x: F.kl_div(x, T([0.0, 0.5, 0.5]), reduction="sum"), np.log(np.array([0.2, 0.3, 0.5]))),
]


@pytest.mark.filterwarnings("ignore:Using a target size")  # torch warns when the target broadcasts
@pytest.mark.filterwarnings("ignore:reduction")  # kl_div's "reduction: 'mean' divides the total loss" warning
@pytest.mark.parametrize("gfn,tfn,args,kw", LOSSES)
def test_losses(gfn, tfn, args, kw):
    run(gfn, tfn, args, kw)


def test_loss_errors():
    with pytest.raises(UnsupportedOpError, match="smooth_l1_loss: beta=-1"):
        nn.smooth_l1_loss(X, Y, beta=-1.0)
    with pytest.raises(UnsupportedOpError, match="huber_loss: delta=0"):
        nn.huber_loss(X, Y, delta=0.0)
    with pytest.raises(UnsupportedOpError, match="kl_div: reduction='avg'"):
        nn.kl_div(X, Y, reduction="avg")
    with pytest.raises(ShapeError, match="l1_loss: weight of shape \\(4,\\)"):
        nn.l1_loss(X, Y, weight=positive(4))


# -- norms and distances --------------------------------------------------------------------------

ZERO_ROW = np.array([[0.0, 0.0, 0.0], [1.0, -2.0, 0.5]])
TINY = np.array([[1e-10, -2e-10, 0.0], [1.0, -2.0, 0.5]])  # a vector whose norm is below eps


DISTANCES = [
    case("normalize", nn.normalize, F.normalize, X),
    case("normalize_p1_axis0", lambda x: nn.normalize(x, 1, 0), lambda x: F.normalize(x, 1.0, 0), X),
    case("normalize_p3_last", lambda x: nn.normalize(x, 3.0, -1), lambda x: F.normalize(x, 3.0, -1), X3),
    case("normalize_inf", lambda x: nn.normalize(x, float("inf")), lambda x: F.normalize(x, float("inf")), X),
    case("normalize_dims", lambda x: nn.normalize(x, dim=(1, 2)), lambda x: F.normalize(x, dim=(1, 2)), X3),
    case("normalize_0d", lambda x: nn.normalize(x, dim=0), lambda x: F.normalize(x, dim=0), np.array(-2.0)),
    # below eps: x / eps, and the clamped norm passes no gradient (torch's clamp_min)
    case("normalize_zero_row", nn.normalize, F.normalize, ZERO_ROW),
    case("normalize_tiny", nn.normalize, F.normalize, TINY),
    case("cosine_similarity", nn.cosine_similarity, F.cosine_similarity, X, Y),
    case("cosine_similarity_axis0", lambda a, b: nn.cosine_similarity(a, b, 0),
         lambda a, b: F.cosine_similarity(a, b, 0), X, Y),
    case("cosine_similarity_broadcast", lambda a, b: nn.cosine_similarity(a, b, -1),
         lambda a, b: F.cosine_similarity(a, b, -1), X3, rand(1, 5)),
    case("cosine_similarity_1d", lambda a, b: nn.cosine_similarity(a, b, 0),
         lambda a, b: F.cosine_similarity(a, b, 0), rand(4), rand(4, seed=3)),
    # a norm below eps is clamped in value, but (as torch clamps in place under no_grad) its derivative passes;
    # torch's forward mode cannot see that, so the JVP is left out here
    case("cosine_similarity_tiny", nn.cosine_similarity, F.cosine_similarity, TINY, rand(2, 3), jvp=False),
    case("pairwise_distance", nn.pairwise_distance, F.pairwise_distance, X, Y),
    case("pairwise_distance_p1", lambda a, b: nn.pairwise_distance(a, b, 1.0),
         lambda a, b: F.pairwise_distance(a, b, 1.0), X, Y),
    case("pairwise_distance_p3_keepdim", lambda a, b: nn.pairwise_distance(a, b, 3.0, keepdim=True),
         lambda a, b: F.pairwise_distance(a, b, 3.0, keepdim=True), X, Y),
    case("pairwise_distance_inf", lambda a, b: nn.pairwise_distance(a, b, float("inf")),
         lambda a, b: F.pairwise_distance(a, b, float("inf")), X, Y),
    case("pairwise_distance_broadcast", nn.pairwise_distance, F.pairwise_distance, X3, rand(5)),
    case("pairwise_distance_equal", nn.pairwise_distance, F.pairwise_distance, X, X.copy()),  # eps keeps it finite
    case("pairwise_distance_0d", nn.pairwise_distance, F.pairwise_distance, np.array(1.0), np.array(3.0)),
]


@pytest.mark.parametrize("gfn,tfn,args,kw", DISTANCES)
def test_norms_and_distances(gfn, tfn, args, kw):
    run(gfn, tfn, args, kw)


A, B = rand(3, 4), rand(5, 4, seed=1)
B_DUP = np.concatenate([B, A[1:2]])  # a zero distance: the gradient there is 0, as torch's


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, 0.5, float("inf"), 0.0])
@pytest.mark.parametrize("shapes", ["plain", "batched", "zero_distance"])
def test_cdist(p, shapes):
    if shapes == "zero_distance" and p in (0.5, float("inf")):
        pytest.skip("torch's backward at a zero difference is nan (p < 1) or splits no tie (inf)")
    a, b = {"plain": (A, B), "batched": (rand(2, 1, 3, 4), rand(5, 2, 4, seed=1)), "zero_distance": (A, B_DUP)}[shapes]
    # torch.cdist has no forward-mode rule (_cdist_forward), so the oracle's JVP is central differences of
    # torch.cdist in float64 (to ~1e-6 relative). At a zero distance (p = 1, 2, 3, 0) the symmetric quotient of
    # torch's |d| or ||d|| is 0, torch's backward there is 0, and gradir's tangent is 0: all three agree
    check_op(lambda a, b: nn.cdist(a, b, p), lambda a, b: torch.cdist(a, b, p), a, b)


def test_distance_errors():
    with pytest.raises(UnsupportedOpError, match="cdist: p=-1"):
        nn.cdist(A, B, -1.0)
    with pytest.raises(ShapeError, match="cdist: needs x1"):
        nn.cdist(A, rand(5, 3))
    with pytest.raises(ShapeError, match="cosine_similarity"):
        nn.cosine_similarity(X, rand(2, 4))


# -- instance_norm and batch_norm with running statistics ------------------------------------------

MEAN, VAR = rand(3, seed=7), positive(3, seed=8)


NORMS = [
    case("instance_norm", nn.instance_norm, F.instance_norm, X3),
    case("instance_norm_affine", lambda x, w, b: nn.instance_norm(x, weight=w, bias=b),
         lambda x, w, b: F.instance_norm(x, weight=w, bias=b), rand(2, 3, 4, 4), positive(3), rand(3)),
    case("instance_norm_eps", lambda x: nn.instance_norm(x, eps=0.1), lambda x: F.instance_norm(x, eps=0.1), X3),
    case("instance_norm_batch1_spatial2", nn.instance_norm, F.instance_norm, rand(1, 2, 2)),
    # evaluation form: the given statistics (constants: torch's instance_norm does not differentiate them)
    case("instance_norm_running", lambda x, w, b: nn.instance_norm(x, MEAN, VAR, w, b, use_input_stats=False),
         lambda x, w, b: F.instance_norm(x, T(MEAN), T(VAR), w, b, use_input_stats=False), X3, positive(3), rand(3)),
    case("batch_norm_eval", lambda x, w, b: nn.batch_norm(x, w, b, running_mean=MEAN, running_var=VAR, training=False),
         lambda x, w, b: F.batch_norm(x, T(MEAN), T(VAR), w, b, training=False), rand(4, 3), positive(3), rand(3)),
    case("batch_norm_eval_4d", lambda x: nn.batch_norm(x, eps=0.01, running_mean=MEAN, running_var=VAR, training=False),
         lambda x: F.batch_norm(x, T(MEAN), T(VAR), training=False, eps=0.01), rand(2, 3, 2, 2)),
    case("batch_norm_eval_batch1", lambda x: nn.batch_norm(x, running_mean=MEAN, running_var=VAR, training=False),
         lambda x: F.batch_norm(x, T(MEAN), T(VAR), training=False), rand(1, 3)),  # one value per channel is fine
    # the statistics' own gradients, which torch's batch_norm refuses, against the formula in torch
    case("batch_norm_eval_stats_grad",
         lambda x, m, v: nn.batch_norm(x, running_mean=m, running_var=v, training=False),
         lambda x, m, v: (x - m[:, None]) / torch.sqrt(v[:, None] + 1e-5), rand(2, 3, 4), MEAN, VAR),
]


@pytest.mark.parametrize("gfn,tfn,args,kw", NORMS)
def test_instance_and_eval_batch_norm(gfn, tfn, args, kw):
    run(gfn, tfn, args, kw)


def test_norm_errors():
    with pytest.raises(ShapeError, match="instance_norm: needs more than one position"):
        nn.instance_norm(rand(2, 3, 1))
    with pytest.raises(UnsupportedOpError, match="instance_norm: use_input_stats=True cannot update"):
        nn.instance_norm(X3, MEAN, VAR)
    with pytest.raises(ShapeError, match="instance_norm: needs running_mean and running_var"):
        nn.instance_norm(X3, use_input_stats=False)
    with pytest.raises(UnsupportedOpError, match="batch_norm: training mode cannot update"):
        nn.batch_norm(X3, running_mean=MEAN, running_var=VAR)
    with pytest.raises(ShapeError, match="batch_norm: needs running_mean"):
        nn.batch_norm(X3, training=False)
    with pytest.raises(ShapeError, match="batch_norm: running_var of shape \\(4,\\)"):
        nn.batch_norm(X3, running_mean=MEAN, running_var=positive(4), training=False)


# -- cross_entropy: weight, label_smoothing, probability targets ----------------------------------

Z = rand(5, 4, seed=11, scale=2.0)
LABELS = np.array([0, 3, 1, 3, 2])
CLASS_W = positive(4, seed=12)
PROBS = np.random.default_rng(13).dirichlet(np.ones(4), 5)


def _ce_case(reduction, weight, smoothing, ignore, vjp):
    kw_g = {"reduction": reduction, "label_smoothing": smoothing, "vjp": vjp}
    kw_t = {"reduction": reduction, "label_smoothing": smoothing}
    if weight:  # torch does not differentiate a class-index loss in weight: a constant here (see below)
        kw_g["weight"], kw_t["weight"] = CLASS_W, T(CLASS_W)
    if ignore:
        kw_g["ignore_index"] = kw_t["ignore_index"] = 3
    return case(f"{reduction}-{'w' if weight else 'nw'}-ls{smoothing}-{'ig' if ignore else 'all'}-{vjp}",
                lambda z, t: nn.cross_entropy(z, t, **kw_g), lambda z, t: F.cross_entropy(z, t, **kw_t), Z, LABELS)


CE_CLASS = [_ce_case(r, w, s, i, v) for r in REDUCTIONS for w in (False, True) for s in (0.0, 0.2) for i in (False, True)
            for v in ("fused", "composed") if (w or s or i) and (v == "fused" or (w and s and i))]


@pytest.mark.parametrize("gfn,tfn,args,kw", CE_CLASS)
def test_cross_entropy_class_indices(gfn, tfn, args, kw):
    run(gfn, tfn, args, kw)


def _prob_case(reduction, weight, smoothing, vjp):
    def g(z, q, *w):
        return nn.cross_entropy(z, q, reduction, vjp=vjp, weight=w[0] if w else None, label_smoothing=smoothing)

    def t(z, q, *w):
        return F.cross_entropy(z, q, w[0] if w else None, reduction=reduction, label_smoothing=smoothing)
    args = (Z, PROBS) + ((CLASS_W,) if weight else ())  # targets and weight differentiated too, as torch does
    return case(f"{reduction}-{'w' if weight else 'nw'}-ls{smoothing}-{vjp}", g, t, *args)


CE_PROB = [_prob_case(r, w, s, v) for r in REDUCTIONS for w in (False, True) for s in (0.0, 0.3)
           for v in ("fused", "composed") if v == "fused" or (w and s)]


@pytest.mark.parametrize("gfn,tfn,args,kw", CE_PROB)
def test_cross_entropy_probability_targets(gfn, tfn, args, kw):
    run(gfn, tfn, args, kw)


def test_cross_entropy_more_shapes():
    # classes last in gradir, on axis 1 in torch
    z, t = rand(2, 3, 4, seed=3), np.array([[0, 1, 3], [2, 2, 1]])
    check_op(lambda z: nn.cross_entropy(z, t, weight=CLASS_W, label_smoothing=0.1, ignore_index=2),
             lambda z: F.cross_entropy(z.movedim(-1, 1), T(t), T(CLASS_W), ignore_index=2, label_smoothing=0.1), z)
    check_op(lambda z, q: nn.cross_entropy(z, q, "none"),
             lambda z, q: F.cross_entropy(z.movedim(-1, 1), q.movedim(-1, 1), reduction="none"),
             z, np.random.default_rng(4).dirichlet(np.ones(4), (2, 3)))
    # one sample: (C,) logits and a 0-d target
    check_op(lambda z: nn.cross_entropy(z, np.array(2), weight=CLASS_W, label_smoothing=0.2),
             lambda z: F.cross_entropy(z, torch.tensor(2), T(CLASS_W), label_smoothing=0.2), Z[0])
    check_op(lambda z, q: nn.cross_entropy(z, q), lambda z, q: F.cross_entropy(z, q), Z[0], PROBS[0])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_class_weight_gradient(reduction, smoothing):
    """The fused rule's cotangent for weight (which torch's class-index loss does not give) against central
    differences of torch's value; exact up to rounding, the loss being rational in weight."""
    c = np.random.default_rng(9).standard_normal(np.shape(F.cross_entropy(T(Z), T(LABELS), reduction=reduction)))

    def torch_value(w):
        return float((F.cross_entropy(T(Z), T(LABELS), T(w), ignore_index=1, reduction=reduction,
                                      label_smoothing=smoothing) * T(c)).sum())
    want = np.zeros(4)
    for k in range(4):
        e = np.zeros(4)
        e[k] = 1e-6
        want[k] = (torch_value(CLASS_W + e) - torch_value(CLASS_W - e)) / 2e-6
    for vjp in ("fused", "composed"):
        _, vjp_fn = gr.vjp(lambda w, v=vjp: nn.cross_entropy(Z, LABELS, reduction, 1, v, weight=w,
                                                             label_smoothing=smoothing), CLASS_W)
        np.testing.assert_allclose(vjp_fn(c)[0], want, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("kind", ["class", "prob"])
def test_cross_entropy_fused_rule_differentiates_again(kind):
    """Second order through the fused VJP (weight and smoothing on) against torch's double backward."""
    r = np.random.default_rng(21)
    target = LABELS if kind == "class" else PROBS
    v, c = r.standard_normal(Z.shape), r.standard_normal(5)

    def first(z):
        return gr.grad(lambda y: gr.sum(nn.cross_entropy(y, target, "none", weight=CLASS_W, label_smoothing=0.1)
                                        * c))(z)
    ours = gr.grad(lambda z: gr.sum(first(z) * v))(Z)
    zt = torch.tensor(Z, requires_grad=True)
    loss = (F.cross_entropy(zt, T(target), T(CLASS_W), reduction="none", label_smoothing=0.1) * T(c)).sum()
    (g,) = torch.autograd.grad(loss, zt, create_graph=True)
    (want,) = torch.autograd.grad((g * T(v)).sum(), zt)
    np.testing.assert_allclose(ours, want.numpy(), rtol=1e-9, atol=1e-12)


def test_cross_entropy_default_node_keeps_its_short_form():
    g = gr.trace(lambda z: nn.cross_entropy(z, LABELS), Z)
    (node,) = [n for n in g.nodes if n.op == "cross_entropy"]
    assert len(node.inputs) == 2 and "label_smoothing" not in node.attrs
    g = gr.trace(lambda z: nn.cross_entropy(z, LABELS, weight=CLASS_W, label_smoothing=0.1), Z)
    (node,) = [n for n in g.nodes if n.op == "cross_entropy"]
    assert len(node.inputs) == 3 and node.attrs["label_smoothing"] == 0.1


def test_cross_entropy_errors():
    with pytest.raises(UnsupportedOpError, match="cross_entropy: label_smoothing=1.5"):
        nn.cross_entropy(Z, LABELS, label_smoothing=1.5)
    with pytest.raises(UnsupportedOpError, match="cross_entropy: ignore_index=0 is not supported for probability"):
        nn.cross_entropy(Z, PROBS, ignore_index=0)
    nn.cross_entropy(Z, PROBS, ignore_index=-100)  # a negative one is accepted and unused, as torch
    with pytest.raises(ShapeError, match="cross_entropy: probability targets must be f64\\[5,4\\]"):
        nn.cross_entropy(Z, PROBS[:, :3])
    with pytest.raises(ShapeError, match="cross_entropy: weight must be f64\\[4\\]"):
        nn.cross_entropy(Z, LABELS, weight=positive(3))


# -- embedding padding_idx and ATen add/sub alpha ---------------------------------------------------


def test_embedding_padding_idx():
    """The padding row passes no gradient (VJP, as torch's backward). torch's two modes disagree there: the value
    is w[idx], whose true derivative passes the padding row's tangent, and torch.func.jvp (and central differences
    of F.embedding) do pass it, while torch's backward zeroes it (padding_idx is a gradient convention). gradir
    follows torch's backward in both modes, so the JVP oracle is torch's backward turned forward:
    torch.autograd.functional.jvp, which differentiates torch's VJP again (the double-backward trick). Central
    differences of torch's F.embedding are compared too: equal off the padded positions, the row's tangent on
    them (where gradir's tangent is 0)."""
    idx = np.array([[3, 0, 1], [3, 3, 2]])
    pad = idx == 3
    f = lambda w: nn.embedding(w, idx, padding_idx=3)  # noqa: E731
    tf = lambda w: F.embedding(T(idx), w, padding_idx=3)  # noqa: E731
    w, t = rand(4, 5), rand(4, 5, seed=3)
    check_op(f, tf, w, jvp=False)  # value, VJP against torch.autograd, LLVM against NumPy
    _, got = gr.jvp(f, (w,), (t,))
    _, want = torch.autograd.functional.jvp(tf, T(w), T(t))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-14)
    assert not np.any(got[pad])
    h = 1e-6
    quotient = ((tf(T(w + h * t)) - tf(T(w - h * t))) / (2 * h)).numpy()
    np.testing.assert_allclose(got[~pad], quotient[~pad], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(quotient[pad], t[idx[pad]], rtol=1e-6, atol=1e-7)  # torch's true derivative


def test_from_torch_add_and_sub_alpha():
    """torch.add/sub/rsub's alpha is mapped in the ATen table (y * alpha, then add or subtract)."""
    def fn(x, y):
        return torch.add(x, y, alpha=2) * torch.sub(x, y, alpha=0.5) + torch.rsub(x, y, alpha=3)
    x, y = torch.tensor(X), torch.tensor(Y)
    f, params = gr.from_torch(fn, x, y)
    check_op(lambda x, y: f(params, x, y), fn, X, Y)
