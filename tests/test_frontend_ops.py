"""gr.from_torch over the ATen mappings of issue 21's op library, table-driven: each case is a tiny function or
module written with the torch API users write (torch.atan2, torch.linalg.inv, F.pad(mode="reflect"),
nn.EmbeddingBag, ...). The cases of a family are captured together as one module (one torch.export per family
keeps the file fast) and every output's value, and the gradient of a weighted sum of the float outputs with
respect to every float input and parameter, are checked against torch autograd in float64. Each family is
captured both ways: decomposed to core ATen (the default) and as torch.export leaves it (decompose=False), which
keeps the higher-level ops (aten.linalg_inv, aten.cross_entropy_loss, aten.l1_loss, aten.reflection_pad2d, ...)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import gradir as gr  # noqa: E402
from gradir.core.errors import GradirError, UnsupportedOpError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


@pytest.fixture(autouse=True)
def _float64(torch_float64):
    """torch's default dtype float64 (the literals the cases make, torch.tensor([0.25, 0.8]), match the inputs)."""


@dataclass
class Case:
    """`fn(*inputs)` (or `fn(module, *inputs)` with `module` an nn.Module factory): a tensor or a tuple of them.
    With grad=False its outputs are compared by value only (ops torch does not differentiate)."""

    name: str
    fn: object
    inputs: tuple
    module: object = None
    grad: bool = True
    rtol: float = 1e-9


_GEN = np.random.default_rng(21)


def r(*shape, lo=-1.0, hi=1.0):
    """A float64 tensor uniform in [lo, hi)."""
    return torch.tensor(_GEN.uniform(lo, hi, shape))


def i(*values):
    return torch.tensor(values, dtype=torch.int64)


def spd(n=3):
    a = r(n, n)
    return a @ a.T + n * torch.eye(n, dtype=torch.float64)


def well(n=3):
    """A well-conditioned matrix (its solves' gradients are tame)."""
    return r(n, n) + 3 * torch.eye(n, dtype=torch.float64)


INF, NAN = float("inf"), float("nan")
SPECIAL = torch.tensor([[1.5, NAN, INF], [-INF, -2.0, 0.25]], dtype=torch.float64)

MATH = [
    Case("atan2", torch.atan2, (r(3, 4), r(3, 4))),
    Case("inverse trig", lambda x, y: (torch.asin(x), torch.acos(x), torch.atan(y), torch.atanh(x)),
         (r(2, 3, lo=-0.9, hi=0.9), r(2, 3, lo=-3, hi=3))),
    Case("numpy and special spellings", lambda x: (
        torch.arcsin(x), torch.arccos(x), torch.arctan(x), torch.arctanh(x), torch.arcsinh(x), torch.arccosh(2 + x),
        torch.arctan2(x, 1 - x), torch.special.erfc(x), torch.special.erfinv(x), torch.special.exp2(x),
        torch.special.gammaln(x + 1), torch.special.digamma(x + 1), torch.special.psi(x + 2),
        torch.special.polygamma(2, x + 1)), (r(2, 3, lo=-0.9, hi=0.9),)),
    Case("hyperbolic", lambda x: (torch.sinh(x), torch.cosh(x), torch.asinh(x), torch.acosh(2.5 + x)), (r(2, 3),)),
    Case("log2 log10 exp2", lambda x: (torch.log2(x), torch.log10(x), torch.exp2(x)), (r(2, 3, lo=0.1, hi=4),)),
    Case("trunc fix", lambda x: (torch.trunc(3 * x), torch.fix(3 * x)), (r(2, 3),)),
    Case("fmod", lambda a, b: (torch.fmod(a, b), torch.fmod(a, 0.7)),
         (r(2, 3, lo=-4, hi=4), torch.tensor([[0.6, -0.9, 1.3], [-1.7, 0.8, 2.1]], dtype=torch.float64))),
    Case("div rounding", lambda a, b: (torch.div(a, b, rounding_mode="floor"), torch.div(a, b, rounding_mode="trunc")),
         (r(2, 3, lo=-4, hi=4), torch.tensor([[0.6, -0.9, 1.3], [-1.7, 0.8, 2.1]], dtype=torch.float64))),
    Case("floor_divide", torch.floor_divide, (r(2, 3, lo=-4, hi=4), r(2, 3, lo=0.5, hi=2)), grad=False),
    Case("logaddexp xlogy", lambda a, b: (torch.logaddexp(a, b), torch.xlogy(a, b.abs() + 0.1),
                                          torch.special.xlogy(torch.relu(a), b.abs() + 0.1)), (r(2, 3), r(2, 3))),
    Case("logit", lambda p: (torch.logit(p), torch.logit(p, eps=0.2)), (r(2, 3, lo=0.05, hi=0.95),)),
    Case("erfc erfinv", lambda x: (torch.erfc(x), torch.erfinv(x)), (r(2, 3, lo=-0.9, hi=0.9),)),
    Case("gamma functions", lambda x: (torch.lgamma(x), torch.digamma(x), torch.polygamma(1, x)),
         (r(2, 3, lo=0.5, hi=3),)),
    Case("isnan isinf", lambda x: (torch.isnan(x), torch.isinf(x)), (SPECIAL,), grad=False),
    Case("nan_to_num", lambda x: (torch.nan_to_num(x), torch.nan_to_num(x, nan=0.5, posinf=3.0, neginf=-3.0)),
         (SPECIAL.clone(),)),
    Case("clone", lambda x: x.clone() * 2, (r(2, 3),)),
    Case("add sub alpha", lambda a, b: (torch.add(a, b, alpha=2), torch.sub(a, b, alpha=3)), (r(2, 3), r(2, 3))),
    Case("addmm baddbmm", lambda c, a, b: (torch.addmm(c, a, b, beta=0.5, alpha=2),
                                           torch.baddbmm(c, a.expand(2, 2, 3), b.expand(2, 3, 4), alpha=-1)),
         (r(2, 4), r(2, 3), r(3, 4))),
    Case("lerp", lambda a, b, w: (torch.lerp(a, b, 0.3), torch.lerp(a, b, w)), (r(2, 3), r(2, 3), r(2, 3, lo=0, hi=1))),
    Case("addcmul addcdiv", lambda c, a, b: (torch.addcmul(c, a, b, value=0.5), torch.addcdiv(c, a, b.abs() + 0.5,
                                                                                             value=2)),
         (r(2, 3), r(2, 3), r(2, 3))),
    Case("activations", lambda x: (F.logsigmoid(x), F.mish(x), F.hardswish(3 * x), F.glu(x, -1),
                                   F.threshold(x, 0.1, -1.0)), (r(2, 4),)),
    # torch's float64 hardsigmoid backward multiplies by float32's 1/6 (1.9e-8 off): gradir's 1/6 is exact
    Case("hardsigmoid", lambda x: F.hardsigmoid(3 * x), (r(2, 4),), rtol=1e-7),
    Case("prelu", lambda m, x: m(x), (r(2, 3, 4),), module=lambda: nn.PReLU(3, init=0.3)),
]

SCANS = [
    Case("cumprod", lambda x: torch.cumprod(x, 1), (r(2, 4),)),
    Case("cummax cummin", lambda x: (*torch.cummax(x, 1), *torch.cummin(x, -1)), (r(2, 4),)),
    Case("logcumsumexp", lambda x: torch.logcumsumexp(x, -1), (r(2, 4),)),
    Case("diff", lambda x, p, a: (torch.diff(x), torch.diff(x, n=2, dim=-1, prepend=p, append=a)),
         (r(2, 4), r(2, 1), r(2, 2))),
    Case("median", lambda x: (torch.median(x), *torch.median(x, dim=1)), (r(3, 5),)),
    Case("kthvalue", lambda x: tuple(torch.kthvalue(x, 2, dim=0)), (r(3, 4),)),
    Case("quantile", lambda x: (torch.quantile(x, 0.3, dim=1), torch.quantile(x, torch.tensor([0.25, 0.8]), dim=0),
                                torch.quantile(x, 0.5, interpolation="midpoint")), (r(3, 5),)),
    Case("nansum nanmean", lambda x: (torch.nansum(x), torch.nanmean(x, dim=1)),
         (torch.tensor([[1.0, NAN, 2.5], [NAN, -1.0, 0.5]], dtype=torch.float64),)),
    Case("count_nonzero", lambda x: (torch.count_nonzero(x), torch.count_nonzero(x, dim=1)),
         (torch.tensor([[1.0, 0.0, 2.5], [0.0, 0.0, 0.5]], dtype=torch.float64),), grad=False),
]

SHAPES = [
    Case("diagonals", lambda m, v: (torch.diagonal(m, 1), torch.diag_embed(v), torch.diag(v, -1), torch.diag(m),
                                    torch.trace(m)), (r(3, 4), r(2, 3))),
    Case("flip rot90", lambda x: (torch.flip(x, (0, -1)), torch.rot90(x), torch.rot90(x, -1, (1, 2))), (r(2, 3, 4),)),
    Case("eye", lambda x: x + torch.eye(3), (r(3, 3),)),
    Case("stacking", lambda a, b: (torch.hstack([a, b]), torch.vstack([a, b]), *torch.meshgrid(a[0], b[1], indexing="ij"),
                                   *torch.meshgrid(a[0], b[1], indexing="xy"), *torch.meshgrid(a[1], b[0]),
                                   *torch.broadcast_tensors(a[:1], b), a.mT, b.T),
         (r(2, 3), r(2, 3))),
    Case("index_add copy fill", lambda x, s: (x.index_add(1, i(2, 0, 2), s, alpha=2), x.index_copy(1, i(2, 0, 1), s),
                                              x.index_fill(0, i(1), -0.5)), (r(2, 4), r(2, 3))),
    Case("index_put", lambda x, v: (x.index_put((i(0, 2, 0),), v, accumulate=True), x.index_put((i(1, 0),), v[:2])),
         (r(3, 2), r(3, 2))),
    Case("setitem", lambda x, v: x.clone().index_put_((i(2, 0), i(1, 1)), v), (r(3, 2), r(2))),
    Case("masked_scatter", lambda x, s: x.masked_scatter(x > 0, s), (r(2, 4), r(8))),
    Case("scatter_reduce", lambda x, s: tuple(x.scatter_reduce(1, i([0, 2, 0], [1, 1, 3]), s, how, include_self=inc)
                                              for how, inc in [("sum", True), ("prod", False), ("mean", True),
                                                               ("amax", False), ("amin", True)]),
         (r(2, 4), r(2, 3))),
    Case("scatter reduce=", lambda x, s: (x.scatter(1, i([0, 2], [1, 1]), s, reduce="add"),
                                          x.scatter(1, i([0, 2], [3, 3]), s, reduce="multiply")), (r(2, 4), r(2, 2)),
         grad=False),  # torch does not differentiate scatter's reduce=
    Case("select slice scatter", lambda x, s, t: (torch.select_scatter(x, s, 1, -1),
                                                  torch.slice_scatter(x, t, 1, 0, 4, 2)), (r(2, 4), r(2), r(2, 2))),
    # decompose=False keeps F.normalize's aten.expand_as
    Case("expand_as normalize", lambda x, y: (F.normalize(x, dim=-1), F.normalize(x, p=1.0, dim=0), x.expand_as(y)),
         (r(2, 3), r(4, 2, 3))),
]

def _usv(usv):
    """torch.svd's U, S, V by what does not depend on the singular vectors' signs: U^2, S, V^2 and U diag(S) V^T."""
    u, s, v = usv
    return u ** 2, s, v ** 2, (u * s.unsqueeze(-2)) @ v.mT


LINALG = [
    Case("inv", lambda a: (torch.linalg.inv(a), torch.linalg.inv_ex(a)[0], torch.inverse(a)), (well(),)),
    Case("det slogdet", lambda a: (torch.linalg.det(a), torch.det(a), *torch.linalg.slogdet(a)), (well(),)),
    Case("solve", lambda a, b, v: (torch.linalg.solve(a, b), torch.linalg.solve(a, v),
                                   torch.linalg.solve(a, b.T, left=False), torch.linalg.solve_ex(a, b)[0]),
         (well(), r(3, 2), r(3))),
    Case("solve_triangular", lambda a, b: (torch.linalg.solve_triangular(a.triu(), b, upper=True),
                                           torch.linalg.solve_triangular(a.tril(), b.T, upper=False, left=False,
                                                                         unitriangular=True)), (well(), r(3, 2))),
    Case("cholesky", lambda a: (torch.linalg.cholesky(a), torch.linalg.cholesky_ex(a, upper=True)[0]), (spd(),)),
    Case("qr", lambda a: tuple(torch.linalg.qr(a)), (r(4, 3),)),
    Case("eigh", lambda a: (torch.linalg.eigh(a)[0], torch.linalg.eigh(a, UPLO="U")[1] ** 2,
                            torch.linalg.eigvalsh(a, UPLO="U")), (spd(),)),
    Case("svd", lambda a: (torch.linalg.svd(a, full_matrices=False)[0] ** 2, torch.linalg.svd(a)[1],
                           torch.linalg.svdvals(a)), (r(4, 3),)),
    # torch's older spellings (aten.slogdet, aten.cholesky, aten.svd): svd's V is linalg's Vh transposed, some=False
    # its full U and V (a square A's; a non-square A's S alone), compute_uv=False torch's zero-filled U and V
    Case("torch.slogdet torch.cholesky", lambda a, s: (*torch.slogdet(a), torch.cholesky(s), torch.cholesky(s, upper=True)),
         (well(), spd())),
    Case("torch.svd", lambda a, q: (*_usv(torch.svd(a)), torch.svd(a, some=False)[1], *torch.svd(a, compute_uv=False),
                                    *_usv(torch.svd(q, some=False))), (r(4, 3), r(3, 3))),
    Case("products", lambda a, b, c: (torch.linalg.cross(a, b), torch.cross(a, b, dim=1),
                                      torch.tensordot(a, c, dims=([1], [0])), torch.kron(a[:2, :2], c),
                                      torch.inner(a, b)), (r(2, 3), r(2, 3), r(3, 2))),
]

NN = [
    Case("losses", lambda x, y: (F.l1_loss(x, y), F.smooth_l1_loss(x, y, beta=0.5), F.huber_loss(x, y, delta=0.5),
                                 F.l1_loss(x, y, reduction="none"), F.huber_loss(x, y, reduction="sum")),
         (r(2, 3), r(2, 3))),
    Case("kl_div", lambda x, y: (F.kl_div(x, y.softmax(-1), reduction="batchmean"),
                                 F.kl_div(x, y, reduction="sum", log_target=True)), (r(2, 3), r(2, 3))),
    Case("distances", lambda a, b: (F.cosine_similarity(a, b), F.pairwise_distance(a, b),
                                    F.pairwise_distance(a, b, p=1.5, keepdim=True), torch.cdist(a, b),
                                    torch.cdist(a, b, p=1.0)), (r(3, 4), r(3, 4))),
    Case("cross_entropy", lambda x, t, q, z, u: (
        F.cross_entropy(x, t, weight=torch.tensor([0.5, 1.0, 2.0, 1.5]), label_smoothing=0.1),
        F.cross_entropy(x, q.softmax(-1)), F.cross_entropy(z, u, ignore_index=1, reduction="sum")),
        (r(3, 4), i(0, 3, 1), r(3, 4), r(2, 4, 3), i([0, 1, 3], [2, 1, 0]))),
    Case("instance_norm", lambda m, x: m(x), (r(2, 3, 2, 3),), module=lambda: nn.InstanceNorm2d(3, affine=True)),
    Case("batch_norm eval", lambda m, x: m(x), (r(2, 3, 2, 2),), module=lambda: _eval(nn.BatchNorm2d(3))),
]

POOLS = [
    Case("conv3d", lambda m, x: m(x), (r(1, 2, 3, 4, 3),), module=lambda: nn.Conv3d(2, 3, 2, stride=(1, 2, 1), padding=1)),
    Case("conv_transpose1d", lambda m, x: m(x), (r(2, 2, 4),),
         module=lambda: nn.ConvTranspose1d(2, 3, 3, stride=2, padding=1, output_padding=1)),
    Case("conv1d conv2d conv_transpose2d", lambda m, x, y: (m[0](x), m[1](y), m[2](y)), (r(2, 2, 5), r(1, 2, 4, 4)),
         module=lambda: nn.ModuleList([nn.Conv1d(2, 3, 3, padding="same", dilation=2), nn.Conv2d(2, 3, 2, padding="same"),
                                       nn.ConvTranspose2d(2, 2, 3, stride=2, padding=1, output_padding=1)])),
    Case("max_pool1d", lambda x: (F.max_pool1d(x, 2, ceil_mode=True), *F.max_pool1d(x, 3, 2, padding=1,
                                                                                   return_indices=True)), (r(2, 3, 5),)),
    Case("max_pool2d", lambda x: (*F.max_pool2d(x, 2, ceil_mode=True, return_indices=True),
                                  F.max_pool2d(x, 2, 1, dilation=2)), (r(1, 2, 5, 5),)),
    Case("avg_pool", lambda x, y: (F.avg_pool1d(x, 3, 2, padding=1, count_include_pad=False),
                                   F.avg_pool1d(x, 2, ceil_mode=True), F.avg_pool2d(y, 3, 2, ceil_mode=True),
                                   F.avg_pool2d(y, 3, 2, padding=1, ceil_mode=True, count_include_pad=False),
                                   F.avg_pool2d(y, 2, divisor_override=3)), (r(2, 3, 5), r(1, 2, 5, 5))),
    Case("adaptive", lambda x, y: (F.adaptive_avg_pool1d(x, 3), *F.adaptive_max_pool1d(x, 3, return_indices=True),
                                   *F.adaptive_max_pool2d(y, (2, 3), return_indices=True)),
         (r(2, 3, 5), r(1, 2, 5, 4))),
    Case("pixel shuffle", lambda x: (F.pixel_shuffle(x, 2), F.pixel_unshuffle(x, 2)), (r(1, 4, 2, 4),)),
    Case("pad modes", lambda x, y, z: (F.pad(x, (2, 1), mode="reflect"), F.pad(y, (1, 2, 2, 1), mode="reflect"),
                                       F.pad(y, (1, 0, 2, 1), mode="replicate"), F.pad(z, (1, 1, 0, 1, 1, 0), "replicate"),
                                       F.pad(y, (1, 2, 1, 0), mode="circular"), F.pad(y, (-1, 2, 1, -1), value=0.5)),
         (r(2, 3, 4), r(1, 2, 3, 4), r(1, 1, 2, 3, 2))),
    Case("embedding_bag", lambda m, x, o, s, w: (m[0](x, o, per_sample_weights=s), m[1](x.view(2, 3)), m[2](x, o),
                                                 F.embedding_bag(x, w, o, mode="mean", include_last_offset=True)),
         (i(1, 4, 2, 0, 4, 3), i(0, 2, 2), r(6), r(5, 2)),
         module=lambda: nn.ModuleList([nn.EmbeddingBag(5, 3, mode="sum"), nn.EmbeddingBag(5, 3, mode="mean"),
                                       nn.EmbeddingBag(5, 3, mode="max", padding_idx=4)])),
]

# ATen ops that core ATen decomposes and torch.export's graph without decompositions does not contain (it keeps
# F.pad as aten.pad, PReLU as aten.prelu, ...), mapped for graphs that call them: what a model calling them gets
aten = torch.ops.aten
DIRECT = [
    Case("padding ops", lambda x, y, z: (aten.reflection_pad1d(x, [2, 1]), aten.reflection_pad2d(y, [1, 2, 2, 1]),
                                         aten.reflection_pad3d(z, [1, 0, 1, 1, 0, 1]), aten.replication_pad1d(x, [0, 2]),
                                         aten.replication_pad2d(y, [1, 0, 2, 1]), aten.replication_pad3d(z, [1] * 6),
                                         aten._pad_circular(y, [1, 2, 1, 0]), aten._pad_enum(y, [1, 1, 0, 2], 0),
                                         aten._pad_enum(y, [1, -1, 0, 2], 3, 0.5)),
         (r(2, 3, 4), r(1, 2, 3, 4), r(1, 1, 2, 3, 2))),
    Case("activation kernels", lambda x, w: (aten._prelu_kernel(x, w.view(1, 3, 1)), aten.log_sigmoid_forward(x)[0]),
         (r(2, 3, 4), r(3))),
]

FAMILIES = {"math": MATH, "scans": SCANS, "shapes": SHAPES, "linalg": LINALG, "nn": NN, "pools": POOLS, "direct": DIRECT}


def _eval(module):
    return module.eval()


class Family(nn.Module):
    """A family's cases in one module: its inputs are every case's inputs in order, its outputs every output."""

    def __init__(self, cases):
        super().__init__()
        self.cases = cases
        self.mods = nn.ModuleDict({str(k): c.module().double() for k, c in enumerate(cases) if c.module is not None})

    def forward(self, *xs):
        outs, it = [], iter(xs)
        for k, c in enumerate(self.cases):
            args = [next(it) for x in c.inputs]
            out = c.fn(self.mods[str(k)], *args) if c.module is not None else c.fn(*args)
            outs += list(out) if isinstance(out, (tuple, list)) else [out]
        return tuple(outs)


def _owners(cases, outputs) -> list[Case]:
    """The case of each output, in order."""
    owners = []
    for c in cases:
        out = c.fn(c.module().double(), *c.inputs) if c.module is not None else c.fn(*c.inputs)
        owners += [c] * (len(out) if isinstance(out, (tuple, list)) else 1)
    assert len(owners) == len(outputs)
    return owners


def _close(got, want, what, rtol=1e-9, scale=None):
    """Integer and boolean results exactly; floats within rtol, and absolutely within rtol of `scale` (the
    reference's largest finite entry; for gradients, the largest of all)."""
    want = np.asarray(want)
    if not np.issubdtype(want.dtype, np.floating):
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    finite = want[np.isfinite(want)]
    scale = (float(np.max(np.abs(finite))) if finite.size else 0.0) if scale is None else scale
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale + 1e-300, equal_nan=True, err_msg=what)


@pytest.mark.parametrize("decompose", [True, False], ids=["core-aten", "decompose-False"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_values_and_gradients_match_torch(family, decompose):
    cases = FAMILIES[family]
    torch.manual_seed(0)
    model = Family(cases)
    inputs = [x for c in cases for x in c.inputs]
    owner = [c for c in cases for _ in c.inputs]
    wrt = [k for k, x in enumerate(inputs) if owner[k].grad and x.is_floating_point()]
    f, params = gr.from_torch(model, *inputs, decompose=decompose)
    arrays = [x.numpy() for x in inputs]
    how = "decomposed" if decompose else "decompose=False"

    leaves = [x.clone().requires_grad_(k in wrt) for k, x in enumerate(inputs)]
    want = model(*leaves)
    outputs = _owners(cases, want)
    for c, g, w in zip(outputs, f(params, *arrays), want):
        _close(g, w.detach().numpy(), f"{c.name}: value ({how})", c.rtol)

    # the gradient of a random weighting of the differentiable outputs, by every float input and parameter
    rng = np.random.default_rng(1)
    weights = [rng.standard_normal(tuple(w.shape)) if c.grad and w.is_floating_point() else None
               for c, w in zip(outputs, want)]
    if all(c is None for c in weights):
        return
    loss = sum((w * torch.from_numpy(c)).sum() for w, c in zip(want, weights) if c is not None)
    named = list(model.named_parameters())
    wanted = [leaves[k] for k in wrt] + [p for _, p in named]
    want_grads = [np.zeros(tuple(x.shape)) if g is None else g.numpy()
                  for g, x in zip(torch.autograd.grad(loss, wanted, allow_unused=True), wanted)]

    def gr_loss(p, *xs):
        return sum(gr.sum(o * c) for o, c in zip(f(p, *xs), weights) if c is not None)

    value, grads = gr.value_and_grad(gr_loss, argnums=(0, *(1 + k for k in wrt)))(params, *arrays)
    _close(value, loss.item(), f"loss ({how})", max(c.rtol for c in cases))
    scale = max(float(np.max(np.abs(g))) for g in want_grads)
    for k, g, w in zip(wrt, grads[1:], want_grads):
        _close(g, w, f"{owner[k].name}: d/d input {k} ({how})", owner[k].rtol, scale)
    for (name, _), w in zip(named, want_grads[len(wrt):]):
        _close(grads[0][name], w, f"d/d {name} ({how})", scale=scale)


def test_linalg_error_checks_and_their_effect_tokens_are_dropped():
    """torch.export threads torch.linalg's error checks through effect tokens (a token input and output, a
    with_effects call per check): the capture drops them, stays an export capture, and a singular matrix is
    gradir's own error at the call."""
    def fn(a):
        return torch.linalg.inv(a) @ torch.linalg.cholesky(a @ a.T)

    a = well()
    f, params = gr.from_torch(fn, a)
    assert f.capture == "export" and f.export_error is None
    assert not any("effects" in str(n.target) or "check_errors" in str(n.target) for n in f.graph.nodes)
    _close(f(params, a.numpy()), fn(a).numpy(), "inv @ cholesky")
    _close(f.in_torch(params, a).numpy(), fn(a).numpy(), "the captured graph in torch")
    with pytest.raises(GradirError, match="[Ss]ingular"):
        f(params, np.zeros((3, 3)))


@pytest.mark.parametrize("decompose", [True, False], ids=["core-aten", "decompose-False"])
def test_torch_svd_full_u_and_v_of_a_non_square_matrix_is_linalg_svds_error(decompose):
    """torch.svd(some=False) is linalg_svd(full_matrices=True): a non-square A's full U or V is the same clear error."""
    def fn(a):
        u, s, v = torch.svd(a, some=False)
        return u.sum() + s.sum() + v.sum()

    a = r(4, 3)
    f, params = gr.from_torch(fn, a, decompose=decompose)
    with pytest.raises(UnsupportedOpError, match="full_matrices=True on a non-square"):
        f(params, a.numpy())


def test_quantiles_computed_in_the_model_are_a_clear_error_when_traced():
    """aten.quantile (kept by decompose=False; core ATen decomposes it into a sort and gathers, which take any q)
    onto gradir's quantile, which picks its order statistics at trace time: q may be computed from an input while
    that input is known (a plain call), and is a clear error where it is traced."""
    def fn(x, q):
        return torch.quantile(x, q.sigmoid())

    x, q = r(5), r(2)
    f, params = gr.from_torch(fn, x, q, decompose=False)
    _close(f(params, x.numpy(), q.numpy()), fn(x, q).numpy(), "quantile of a computed q")
    with pytest.raises(UnsupportedOpError, match="q computed in the model"):
        gr.grad(lambda x, q: gr.sum(f(params, x, q)), argnums=1)(x.numpy(), q.numpy())


@pytest.mark.parametrize("norm", [nn.BatchNorm2d, nn.InstanceNorm2d])
def test_running_statistics_without_decompositions_are_said_not_updated(norm):
    """torch.export's graph without decompositions keeps a training-mode batch_norm / instance_norm whole and records
    no update of its running statistics: f.notes says so; the default capture updates them as torch does."""
    model, x = norm(3, affine=True, track_running_stats=True).double(), r(2, 3, 2, 3)
    f, params = gr.from_torch(model, x, decompose=False)
    assert any("running statistics not updated" in n for n in f.notes), f.notes
    f, params = gr.from_torch(model, x)
    assert f.notes == []
    out, buffers = f.with_buffers(params, x.numpy())
    want = model(x)
    _close(out, want.detach().numpy(), "output")
    for name in ("running_mean", "running_var"):
        _close(buffers[name], getattr(model, name).numpy(), name)
