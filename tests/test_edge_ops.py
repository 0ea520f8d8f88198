"""Edge cases of the reference semantics (issue 19): padding rows of embeddings, norms with p < 1 at zero,
activations at their kinks and far out, clip with NaN bounds, 0-d values with axis 0/-1, empty group-norm
batches, convolution padding [0]. Every oracle is PyTorch float64 autograd; each gradir function runs on
the NumPy reference (gr.value_and_grad) and compiled by the LLVM backend."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import gradir as gr  # noqa: E402
from gradir.core.errors import AxisError  # noqa: E402

# torch.export's own deprecation noise (its TreeSpec copying), not ours
pytestmark = pytest.mark.filterwarnings("ignore:.*isinstance\\(treespec, LeafSpec\\).*:FutureWarning")
RTOL = ATOL = 1e-12
BACKENDS = ["numpy", "llvm"]
INF, NAN = float("inf"), float("nan")


@pytest.fixture(autouse=True)
def _float64(torch_float64):
    """Every test here builds torch tensors in float64."""


def value_and_grad(fn, backend, argnums=0):
    """gr.value_and_grad of fn on the reference interpreter, or compiled by the LLVM backend."""
    vg = gr.value_and_grad(fn, argnums=argnums)
    return vg if backend == "numpy" else gr.compile(vg, backend="llvm")


def close(got, want):
    """Equal to torch's float64 result within RTOL, NaN where torch has NaN, same shape."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)


def leaf(a):
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True)


def torch_value_and_grads(tfn, weights, *args):
    """sum(tfn(*args) * weights) and its gradients with respect to every arg (zeros where unused)."""
    leaves = [leaf(a) for a in args]
    loss = (tfn(*leaves) * torch.from_numpy(weights)).sum()
    loss.backward()
    return loss.item(), [np.zeros(np.shape(a)) if t.grad is None else t.grad.numpy() for a, t in zip(args, leaves)]


def check(gfn, tfn, args, backend, rng, out_shape=None):
    """gfn against tfn: the value of a random weighted sum of the outputs and its gradients."""
    shape = tuple(tfn(*[leaf(a) for a in args]).shape) if out_shape is None else out_shape
    weights = rng.standard_normal(shape)
    want, want_grads = torch_value_and_grads(tfn, weights, *args)
    value, grads = value_and_grad(lambda *xs: gr.sum(gfn(*xs) * weights), backend,
                                  argnums=tuple(range(len(args))))(*args)
    close(value, want)
    for g, w in zip(grads, want_grads):
        close(g, w)


@pytest.fixture
def rng():
    return np.random.default_rng(19)


# -- embedding: the padding row gets no gradient ------------------------------------------------


class Embed(nn.Module):
    def __init__(self, padding_idx):
        super().__init__()
        self.emb = nn.Embedding(7, 3, padding_idx=padding_idx)

    def forward(self, idx):
        return self.emb(idx)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("padding_idx", [2, -1, None])
def test_from_torch_embedding_padding_row_has_zero_gradient(padding_idx, backend, rng):
    torch.manual_seed(0)
    model = Embed(padding_idx)
    with torch.no_grad():
        model.emb.weight.normal_()  # nn.Embedding zeroes the padding row; a nonzero one shows its value passes
    idx = torch.tensor([[2, 6, 2, 0], [6, 1, 2, 5]])
    weights = rng.standard_normal((2, 4, 3))
    ref = Embed(padding_idx)
    ref.load_state_dict(model.state_dict())
    loss = (ref(idx) * torch.from_numpy(weights)).sum()
    loss.backward()
    want = ref.emb.weight.grad.numpy()
    pad = None if padding_idx is None else padding_idx % 7
    if pad is not None:
        assert not want[pad].any() and want[1].any()
    f, params = gr.from_torch(model, idx)
    value, grads = value_and_grad(lambda p, i: gr.sum(f(p, i) * weights), backend)(params, idx.numpy())
    close(value, loss.item())
    close(grads["emb.weight"], want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("padding_idx", [0, 3, -4])
def test_nn_embedding_padding_idx_matches_torch(padding_idx, backend, rng):
    idx = np.array([[3, 0, 1], [3, 3, 2]])
    w = rng.standard_normal((4, 5))
    check(lambda w: gr.nn.embedding(w, idx, padding_idx=padding_idx),
          lambda w: F.embedding(torch.from_numpy(idx), w, padding_idx=padding_idx), (w,), backend, rng)


def test_nn_embedding_padding_idx_out_of_range_names_the_op():
    with pytest.raises(gr.errors.ShapeError, match="embedding.*padding_idx=4"):
        gr.nn.embedding(np.zeros((4, 2)), np.array([0]), padding_idx=4)


# -- vector norms with p < 1 or p < 0 at zero ------------------------------------------------------


NORM_INPUTS = {
    "zeros": np.array([[0.0, 1.5, -2.0, 0.0], [0.7, -0.3, 1.1, 2.0], [0.0, 0.0, 0.0, 0.0]]),
    "no_zeros": np.array([[0.4, 1.5, -2.0, 0.9], [0.7, -0.3, 1.1, 2.0], [3.0, -1.0, 0.5, 0.25]]),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("data", sorted(NORM_INPUTS))
@pytest.mark.parametrize("p", [0.5, 0.3, -1.0, -0.5, -2.0, 1.5, 3.0])
@pytest.mark.parametrize("axis", [None, 1])
def test_norm_gradient_at_zero_matches_torch(p, axis, data, backend, rng):
    x = NORM_INPUTS[data]
    check(lambda x: gr.norm(x, p, axis=axis), lambda x: torch.linalg.vector_norm(x, p, dim=axis), (x,), backend, rng)


@pytest.mark.parametrize("p", [-1.0, -0.5])
def test_negative_norm_of_infinities_is_inf_as_torch(p):
    x = np.array([INF, -INF])
    close(gr.norm(x, p), torch.linalg.vector_norm(torch.from_numpy(x), p).item())


# -- activations at their kinks and far from zero --------------------------------------------------


KINKS = np.array([0.0, -0.0, -1.0, 1.0, 6.0, -3.0, 3.0, 20.0, -800.0, 800.0, 0.5, -0.25])
ACTIVATIONS = {
    "elu": (gr.nn.elu, F.elu),
    "elu_alpha2": (lambda x: gr.nn.elu(x, 2.0), lambda x: F.elu(x, 2.0)),
    "leaky_relu": (lambda x: gr.nn.leaky_relu(x, 0.2), lambda x: F.leaky_relu(x, 0.2)),
    "hardtanh": (gr.nn.hardtanh, F.hardtanh),
    "hardtanh_0_6": (lambda x: gr.nn.hardtanh(x, 0.0, 6.0), lambda x: F.hardtanh(x, 0.0, 6.0)),
    "relu6": (gr.nn.relu6, F.relu6),
    "relu": (gr.nn.relu, F.relu),
    "softplus": (gr.nn.softplus, F.softplus),
    "silu": (gr.nn.silu, F.silu),
    "gelu": (gr.nn.gelu, F.gelu),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_gradients_at_kinks_match_torch(name, backend, rng):
    gfn, tfn = ACTIVATIONS[name]
    check(gfn, tfn, (KINKS,), backend, rng)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make, decompose", [(lambda: nn.ELU(1.5), True), (nn.SELU, True), (nn.SELU, False),
                                             (lambda: nn.CELU(0.5), False), (nn.ELU, False)],
                         ids=["elu", "selu", "selu-aten", "celu-aten", "elu-aten"])
def test_from_torch_elu_family_at_zero_and_far_out(make, decompose, backend, rng):
    """aten.elu with scale/input_scale (selu, celu): alpha * scale at 0, and no NaN where exp overflows.
    (nn.CELU under the default decomposition is torch's own where(x > 0, x, expm1(x / alpha)), whose
    gradient torch's autograd also makes NaN far out: not tested here.)"""
    module = make()
    weights = rng.standard_normal(KINKS.shape)
    want, (want_grad,) = torch_value_and_grads(module, weights, KINKS)
    f, params = gr.from_torch(module, torch.from_numpy(KINKS), decompose=decompose)
    value, grad = value_and_grad(lambda x: gr.sum(f(params, x) * weights), backend)(KINKS)
    close(value, want)
    close(grad, want_grad)


# -- clip / clamp with NaN bounds ------------------------------------------------------------------


CLIP_X = np.array([1.0, 2.0, 5.0, -1.0, 3.0, 0.0, 0.5])
CLIP_BOUNDS = [(NAN, 3.0), (0.0, NAN), (NAN, None), (None, NAN), (NAN, NAN),
               (np.array([0.0, NAN, 0.0, 0.0, 4.0, 0.0, 0.0]), np.array([3.0, 3.0, NAN, 3.0, 2.0, 0.0, 1.0])),
               (0.0, 3.0), (3.0, 0.0)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bounds", range(len(CLIP_BOUNDS)))
def test_clip_with_nan_bounds_matches_torch_clamp_as_tensors(bounds, backend, rng):
    """Bounds as traced arrays: values, and the cotangents of x and of each bound, as torch.clamp's."""
    lo, hi = CLIP_BOUNDS[bounds]
    present = [np.broadcast_to(np.asarray(b, dtype=np.float64), CLIP_X.shape).copy() for b in (lo, hi)
               if b is not None]

    def gfn(x, *bs):
        it = iter(bs)
        return gr.clip(x, None if lo is None else next(it), None if hi is None else next(it))

    def tfn(x, *bs):
        it = iter(bs)
        return torch.clamp(x, None if lo is None else next(it), None if hi is None else next(it))
    check(gfn, tfn, (CLIP_X, *present), backend, rng)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bounds", [b for b in CLIP_BOUNDS if not isinstance(b[0], np.ndarray)])
def test_clip_with_nan_bounds_matches_torch_clamp_as_constants(bounds, backend, rng):
    """Bounds as Python floats (constants in the graph)."""
    lo, hi = bounds
    check(lambda x: gr.clip(x, lo, hi), lambda x: torch.clamp(x, lo, hi), (CLIP_X,), backend, rng)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bounds", range(len(CLIP_BOUNDS)))
def test_clip_of_nan_x_is_nan_as_torch_clamp(bounds, backend):
    """A NaN in x stays NaN whatever the bounds, also where max < min (where the result is otherwise max)."""
    lo, hi = CLIP_BOUNDS[bounds]
    x = np.array([NAN, 1.0, NAN, 5.0, -1.0, NAN, 2.0])
    want = torch.clamp(torch.from_numpy(x), *(None if b is None else torch.tensor(b) for b in (lo, hi))).numpy()
    run = (lambda f: f) if backend == "numpy" else (lambda f: gr.compile(f, backend="llvm"))
    close(run(lambda x: gr.clip(x, lo, hi))(x), want)
    present = [np.broadcast_to(np.asarray(b, dtype=np.float64), x.shape).copy() for b in (lo, hi) if b is not None]
    if lo is None or hi is None:
        close(run(lambda x, b: gr.clip(x, *((None, b) if lo is None else (b, None))))(x, *present), want)
    else:
        close(run(lambda x, a, b: gr.clip(x, a, b))(x, *present), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_clip_of_integers_with_traced_bounds_stays_integer(backend):
    x, lo, hi = np.arange(-2, 6), np.array([1, 1, 1, 1, 4, 4, 4, 4]), np.array([3, 3, 3, 3, 2, 2, 2, 2])
    f = (lambda f: f) if backend == "numpy" else (lambda f: gr.compile(f, backend="llvm"))
    got = np.asarray(f(lambda x, a, b: gr.clip(x, a, b))(x, lo, hi))
    want = torch.clamp(torch.from_numpy(x), torch.from_numpy(lo), torch.from_numpy(hi)).numpy()
    assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_from_torch_clamp_min_max_do_not_split_ties(backend, rng):
    """aten.clamp_min/clamp_max (kept with decompose=False): torch's clamp gradients, not maximum's halves."""
    class Clamps(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = nn.Parameter(torch.tensor([0.0, 1.0, 0.5, 0.5, NAN]))

        def forward(self, x):
            return torch.clamp_min(x, self.m) * 2.0 + torch.clamp_max(x, self.m) + torch.clamp_min(x, 0.0)

    x = np.array([0.0, 1.0, -1.0, 2.0, 1.0])
    weights = rng.standard_normal(x.shape)
    model = Clamps()
    xt = leaf(x)
    loss = (model(xt) * torch.from_numpy(weights)).sum()
    loss.backward()
    f, params = gr.from_torch(Clamps(), torch.from_numpy(x), decompose=False)
    value, (gp, gx) = value_and_grad(lambda p, x: gr.sum(f(p, x) * weights), backend, argnums=(0, 1))(params, x)
    close(value, loss.item())
    close(gx, xt.grad.numpy())
    close(gp["m"], model.m.grad.numpy())


# -- 0-d values with axis 0 or -1 ------------------------------------------------------------------


SCALAR_OPS = {
    "softmax": (gr.nn.softmax, lambda x, a: torch.softmax(x, a)),
    "log_softmax": (gr.nn.log_softmax, lambda x, a: torch.log_softmax(x, a)),
    "sum": (gr.sum, lambda x, a: torch.sum(x, a)),
    "mean": (gr.mean, lambda x, a: torch.mean(x, a)),
    "max": (gr.max, lambda x, a: torch.amax(x, a)),
    "logsumexp": (gr.logsumexp, lambda x, a: torch.logsumexp(x, a)),
    "norm": (lambda x, a: gr.norm(x, 2, a), lambda x, a: torch.linalg.vector_norm(x, 2, a)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("name", sorted(SCALAR_OPS))
def test_0d_value_with_axis_matches_torch(name, axis, backend, rng):
    gfn, tfn = SCALAR_OPS[name]
    check(lambda x: gfn(x, axis), lambda x: tfn(x, axis), (np.array(-0.75),), backend, rng)


def test_0d_value_axis_errors_are_gradir_errors():
    x = np.array(2.0)
    for fn in (lambda: gr.sum(x, 1), lambda: gr.sum(x, -2), lambda: gr.roll(x, 1, -1), lambda: gr.repeat(x, 2, 0),
               lambda: gr.split(x, 1, 0), lambda: gr.nn.softmax(x, 1), lambda: gr.swapaxes(x, 0, 1)):
        with pytest.raises(AxisError):
            fn()
    close(gr.swapaxes(x, 0, -1), torch.swapaxes(torch.tensor(2.0), 0, -1))


# -- group_norm of an empty batch ------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(0, 4, 3), (0, 4)])
def test_group_norm_of_empty_batch_matches_torch(shape, backend, rng):
    x, w, b = np.zeros(shape), rng.standard_normal(4), rng.standard_normal(4)
    check(lambda x, w, b: gr.nn.group_norm(x, 2, w, b), lambda x, w, b: F.group_norm(x, 2, w, b), (x, w, b),
          backend, rng)


@pytest.mark.parametrize("backend", BACKENDS)
def test_group_norm_without_positions_has_zero_gradients(backend, rng):
    """(N, C, 0): an empty output does not depend on weight or bias, so their gradients are 0, as a finite
    difference gives (torch's weight gradient is NaN here, 0/0 in its kernel)."""
    x, w, b = np.zeros((2, 4, 0)), rng.standard_normal(4), rng.standard_normal(4)
    value, grads = value_and_grad(lambda x, w, b: gr.sum(gr.nn.group_norm(x, 2, w, b)), backend, argnums=(1, 2))(x, w, b)
    close(value, 0.0)
    for g in grads:
        close(g, np.zeros(4))
    assert gr.nn.group_norm(x, 2, w, b).shape == (2, 4, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_from_torch_group_norm_of_empty_batch(backend, rng):
    model = nn.GroupNorm(2, 4)
    x = torch.zeros(0, 4, 3)
    model(x).sum().backward()
    f, params = gr.from_torch(nn.GroupNorm(2, 4), x)
    value, grads = value_and_grad(lambda p, x: gr.sum(f(p, x)), backend)(params, x.numpy())
    close(value, 0.0)
    close(grads["weight"], model.weight.grad.numpy())
    close(grads["bias"], model.bias.grad.numpy())


# -- convolution padding given once for every spatial axis -----------------------------------------


CONVS = {  # built in the test, under the float64 default
    "conv2d": (lambda: nn.Conv2d(2, 3, 3, padding="valid"), (2, 2, 5, 6)),
    "conv2d-strided-groups": (lambda: nn.Conv2d(2, 4, (2, 3), padding="valid", stride=2, groups=2), (1, 2, 7, 7)),
    "conv2d-same": (lambda: nn.Conv2d(2, 3, 3, padding="same", bias=False), (1, 2, 5, 5)),
    "conv1d": (lambda: nn.Conv1d(2, 3, 3, padding="valid"), (2, 2, 6)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CONVS))
def test_from_torch_conv_padding_valid(name, backend, rng):
    """nn.Conv2d(padding="valid") records aten.convolution with padding [0]: one entry for every axis."""
    torch.manual_seed(3)
    make, shape = CONVS[name]
    module, x = make(), torch.randn(*shape)
    out = module(x)
    weights = rng.standard_normal(tuple(out.shape))
    loss = (out * torch.from_numpy(weights)).sum()
    loss.backward()
    f, params = gr.from_torch(module, x)
    value, grads = value_and_grad(lambda p, x: gr.sum(f(p, x) * weights), backend)(params, x.numpy())
    close(value, loss.item())
    assert set(grads) == {n for n, _ in module.named_parameters()}
    for n, p in module.named_parameters():
        close(grads[n], p.grad.numpy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_repeat_with_no_counts_along_an_empty_axis(backend):
    """np.repeat(x, [], axis) on an empty axis (the long mode's seed 9157 crashed every backend on it)."""
    x = np.random.default_rng(0).standard_normal((2, 0, 3))
    value, grad = gr.compile(gr.value_and_grad(lambda x: gr.sum(gr.repeat(x, [], axis=1)) + gr.sum(x * 2.0)),
                             backend=backend)(x)
    tx = torch.tensor(x, requires_grad=True)
    want = torch.repeat_interleave(tx, torch.tensor([], dtype=torch.long), dim=1).sum() + (tx * 2.0).sum()
    want.backward()
    assert grad.shape == (2, 0, 3)
    np.testing.assert_allclose(value, want.item())
    np.testing.assert_array_equal(grad, tx.grad.numpy())
