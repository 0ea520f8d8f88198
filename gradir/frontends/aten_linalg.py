"""The ATen -> gradir table's linear algebra: matrix products onto gradir ops, and torch.linalg's
factorizations, inverses and solves onto gr.linalg, assembled into TABLE by aten_table.

Core ATen spells torch.linalg's functions as their LAPACK-shaped `_ex` forms, which also return LAPACK's
`info` (gradir raises on a singular or non-positive-definite matrix instead, so it is 0 here) and pieces
such as LU factors and pivots that gradir does not compute: a graph that reads one fails, naming it.
"""

from __future__ import annotations

from gradir import ops
from gradir.core import dtypes
from gradir.frontends.aten_common import Multi, ndim_of, not_computed, shape_of
from gradir.ops import linalg_namespace as la
from gradir.ops import nn as gnn


def _info(a):
    """LAPACK's info per matrix: 0 (gradir raises on a singular / non-positive-definite matrix instead)."""
    return ops.zeros(shape_of(a)[:-2], dtypes.int32)


def _solve(a, b, left=True):
    """torch.linalg.solve's rule: B (*, n) with A's shape less its last axis is a batch of vectors."""
    vec = ndim_of(b) == ndim_of(a) - 1 and shape_of(b) == shape_of(a)[:-1]
    if not left:  # X A = B is A^T X^T = B^T
        a, b = la.matrix_transpose(a), b if vec else la.matrix_transpose(b)
    x = ops.squeeze(la.solve(a, ops.expand_dims(b, -1)), -1) if vec else la.solve(a, b)
    return x if left or vec else la.matrix_transpose(x)


def _solve_ex(a, b, left=True, check_errors=False):
    """_linalg_solve_ex -> (result, LU, pivots, info)."""
    return Multi(lambda: _solve(a, b, left), not_computed("_linalg_solve_ex", "LU"),
                 not_computed("_linalg_solve_ex", "pivots"), lambda: _info(a))


def _slogdet(a):
    """_linalg_slogdet -> (sign, logabsdet, LU, pivots)."""
    both = Multi.of_one_call(lambda: la.slogdet(a), 2)
    return Multi(lambda: both[0], lambda: both[1], not_computed("_linalg_slogdet", "LU"),
                 not_computed("_linalg_slogdet", "pivots"))


def _lower(a, uplo):
    """The matrix whose lower triangle holds what UPLO names: the upper triangle of A is the lower one of A^T."""
    return a if uplo == "L" else la.matrix_transpose(a)


def _eigh(a, UPLO="L", compute_v=True):  # noqa: N803 - torch's argument name
    a = _lower(a, UPLO)
    return Multi.of_one_call(lambda: la.eigh(a), 2) if compute_v else Multi(lambda: la.eigvalsh(a))


def _svd(full_matrices):
    """linalg_svd / _linalg_svd -> (U, S, Vh). S alone (svdvals: compute_uv=False; or S of a full SVD of a
    non-square A, whose full U and Vh gr.linalg.svd does not make) is svdvals: no singular vectors needed."""
    def svd(a, full_matrices=full_matrices, compute_uv=True, driver=None):
        uvh = Multi.of_one_call(lambda: la.svd(a, full_matrices), 3)
        if compute_uv and not (full_matrices and shape_of(a)[-1] != shape_of(a)[-2]):
            return uvh
        return Multi(lambda: uvh[0], lambda: la.svdvals(a), lambda: uvh[2])
    return svd


def _svd_uv(a, some=True, compute_uv=True):
    """svd (torch.svd) -> (U, S, V): linalg_svd's with V = Vh^T (full U and V for some=False, so a non-square
    A's U or V read is linalg_svd's error); compute_uv=False gives S and torch's zero-filled U (m, m), V (n, n)."""
    if not compute_uv:
        batch, (m, n) = shape_of(a)[:-2], shape_of(a)[-2:]
        return Multi(lambda: ops.full(batch + (m, m), 0, a.dtype), lambda: la.svdvals(a),
                     lambda: ops.full(batch + (n, n), 0, a.dtype))
    usvh = _svd(True)(a, full_matrices=not some)
    return Multi(lambda: usvh[0], lambda: usvh[1], lambda: la.matrix_transpose(usvh[2]))


def _slogdet_pair(a):
    """linalg_slogdet / slogdet -> (sign, logabsdet)."""
    return Multi.of_one_call(lambda: la.slogdet(a), 2)


def _cholesky(a, upper=False):
    """linalg_cholesky / cholesky (torch.cholesky, deprecated; both upper=False by default)."""
    return la.cholesky(a, upper=upper)


LINALG = {
    "mm": ops.matmul, "bmm": ops.matmul, "matmul": ops.matmul, "dot": ops.matmul, "outer": ops.outer,
    "addmm": lambda i, a, b, beta=1, alpha=1: ops.addmm(i, a, b, beta=beta, alpha=alpha),
    "baddbmm": lambda i, a, b, beta=1, alpha=1: ops.baddbmm(i, a, b, beta=beta, alpha=alpha),
    "linear": lambda x, w, b=None: gnn.linear(x, w, b), "t": lambda x: ops.transpose(x),
    "einsum": lambda eq, xs, path=None: ops.einsum(eq, *xs),
    "tensordot": lambda a, b, dims_self, dims_other: ops.tensordot(a, b, (list(dims_self), list(dims_other))),
    "kron": ops.kron, "inner": ops.inner,
    "linalg_cross": lambda a, b, dim=-1: ops.cross(a, b, dim),
    # torch.cross without dim: the first axis of size 3 (deprecated there)
    "cross": lambda a, b, dim=None: ops.cross(a, b, list(shape_of(a)).index(3) if dim is None else dim),
    # torch.linalg
    "linalg_inv_ex": lambda a, check_errors=False: Multi(lambda: la.inv(a), lambda: _info(a)),
    "linalg_inv": la.inv, "inverse": la.inv,
    "_linalg_det": lambda a: Multi(lambda: la.det(a), not_computed("_linalg_det", "LU"),
                                   not_computed("_linalg_det", "pivots")),
    "linalg_det": la.det, "det": la.det,
    "_linalg_slogdet": _slogdet,
    "linalg_slogdet": _slogdet_pair, "slogdet": _slogdet_pair,
    "_linalg_solve_ex": _solve_ex, "linalg_solve": _solve,
    "linalg_solve_ex": lambda a, b, left=True, check_errors=False: Multi(lambda: _solve(a, b, left), lambda: _info(a)),
    "linalg_solve_triangular": lambda a, b, upper, left=True, unitriangular=False: la.solve_triangular(
        a, b, lower=not upper, left=left, unit_diagonal=unitriangular),
    "linalg_cholesky_ex": lambda a, upper=False, check_errors=False: Multi(lambda: _cholesky(a, upper),
                                                                           lambda: _info(a)),
    "linalg_cholesky": _cholesky, "cholesky": _cholesky,
    "linalg_qr": lambda a, mode="reduced": Multi.of_one_call(lambda: la.qr(a, mode), 2),
    "_linalg_eigh": _eigh, "linalg_eigh": _eigh,
    "linalg_eigvalsh": lambda a, UPLO="L": la.eigvalsh(_lower(a, UPLO)),
    "_linalg_svd": _svd(False), "linalg_svd": _svd(True), "svd": _svd_uv,
    "linalg_svdvals": lambda a, driver=None: la.svdvals(a),
}

__all__ = ["LINALG"]
