"""Norms and distances of vectors: normalize, cosine_similarity, pairwise_distance, cdist (compositions of
gr.norm, whose gradient at a zero vector is 0 as torch's)."""

from __future__ import annotations

from gradir.core.errors import ShapeError, UnsupportedOpError
from gradir.core.trace import user_source
from gradir.ops.elementwise import greater_equal, less, stop_gradient, where
from gradir.ops.lifting import broadcast_all, lift, lift_all, normalize_axes
from gradir.ops.nn.composite import choice, float_input
from gradir.ops.reductions import norm, sum
from gradir.ops.shapes import expand_dims

__all__ = ["cdist", "cosine_similarity", "normalize", "pairwise_distance"]

# -- normalisation of vectors ---------------------------------------------------------------------


def normalize(input, p=2.0, dim=1, eps=1e-12):
    """input / max(||input||_p, eps) along `dim` (an int or a tuple; torch.nn.functional.normalize): unit
    vectors, and below eps the vector scaled by 1/eps. p is gr.norm's ord (any real number or +-inf; 0 counts nonzeros)."""
    x = lift(input)
    float_input("normalize", x)
    axes = normalize_axes(dim, x.ndim, "normalize")
    n = norm(x, p, axes, keepdims=True)
    return x / where(less(n, eps), eps, n)  # clamp_min: below eps the norm gets no gradient, as torch


def _clamped_through(n, eps):
    """max(n, eps) in value, with the derivative of n itself (1) also below eps: torch's cosine_similarity
    clamps the norms in place under no_grad, so autograd sees through the clamp."""
    return where(greater_equal(n, eps), n, eps + (n - stop_gradient(n)))


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1 / max(|x1|, eps) * x2 / max(|x2|, eps)) along `dim` (torch.nn.functional.cosine_similarity's
    current formula: each vector is normalised first, which keeps the result within [-1, 1]); x1 and x2
    broadcast. As torch, the clamp at eps passes the norm's derivative through unchanged."""
    a, b = lift_all(x1, x2, op="cosine_similarity")
    float_input("cosine_similarity", a)
    a, b = broadcast_all(a, b, op="cosine_similarity")
    axes = normalize_axes(dim, a.ndim, "cosine_similarity")
    if len(axes) > 1:
        raise ShapeError(f"needs one dim, got {dim!r}", op="cosine_similarity", source=user_source())
    na = _clamped_through(norm(a, 2, axes, keepdims=True), eps)
    nb = _clamped_through(norm(b, 2, axes, keepdims=True), eps)
    return sum((a / na) * (b / nb), axes)


# -- distances ------------------------------------------------------------------------------------


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """||x1 - x2 + eps||_p over the last axis (torch.nn.functional.pairwise_distance; x1 and x2 broadcast).
    eps keeps the norm's gradient finite where x1 == x2."""
    a, b = lift_all(x1, x2, op="pairwise_distance")
    float_input("pairwise_distance", a)
    d = a - b + eps
    return norm(d, p, -1, keepdims=keepdim)


def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """p-norm distances between the rows of x1 (..., P, M) and of x2 (..., R, M): (..., P, R), leading axes
    broadcast (torch.cdist). gradir always takes the norm of the differences (exact; torch's matrix-product
    form for p = 2, which `compute_mode` selects, rounds differently); the gradient at a zero distance is 0."""
    choice("cdist", "compute_mode", compute_mode, ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
                                                   "donot_use_mm_for_euclid_dist"))
    a, b = lift_all(x1, x2, op="cdist")
    float_input("cdist", a)
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-1]:
        raise ShapeError(f"needs x1 (..., P, M) and x2 (..., R, M), got shapes {tuple(a.shape)} and "
                         f"{tuple(b.shape)}", op="cdist", source=user_source())
    if isinstance(p, str) or not p >= 0:
        raise UnsupportedOpError(f"p={p!r} must be a non-negative number or inf (as torch)", op="cdist",
                                 source=user_source())
    d = expand_dims(a, -2) - expand_dims(b, -3)  # (..., P, R, M)
    return norm(d, p, -1)
