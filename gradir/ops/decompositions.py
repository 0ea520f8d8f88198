"""Matrix inverses, solves and decompositions (gr.linalg): inv, det, slogdet, solve, solve_triangular,
cholesky, qr, eigh and svd, on the last two axes and batched over the leading ones.

A primitive has one result, so a factorization with several is one primitive per result (eigh is
`eigh_values` and `eigh_vectors`, svd is `svd_u`, `svd_s` and `svd_vh`), each a call of np.linalg: NumPy runs
the factorization once per result a program uses. Each VJP rule gives its own result's share of the cotangent
(the gradient is linear in the cotangents), written with gradir ops (matmul, transposes, triangular masks and
these primitives), so it differentiates again. The compiled backends run these on the NumPy reference.

Conventions are torch.linalg's: real float32/float64 matrices (integers become float64); cholesky and eigh read
the lower triangle and have symmetric gradients (their JVPs see the tangent's symmetric part); eigenvector and
singular-vector gradients divide by eigenvalue / squared singular value gaps, so they need distinct values (and
nonzero singular values for a non-square matrix). Eigenvectors and singular vectors carry the signs LAPACK
picked: a loss that depends on those signs is differentiated for that choice.
"""

from __future__ import annotations

import math

import numpy as np

from gradir.core import dtypes
from gradir.core.errors import DTypeError, ShapeError, UnsupportedOpError
from gradir.core.primitive import Primitive, register
from gradir.core.trace import bind, user_source
from gradir.ops.elementwise import where
from gradir.ops.indexing import tril, triu
from gradir.ops.lifting import broadcast_shape, lift, lift_all, type_str
from gradir.ops.linalg import matrix_transpose as mT
from gradir.ops.reductions import sum as sum_
from gradir.ops.shapes import broadcast_to, concatenate, expand_dims, pad, reshape, slice_axis
from gradir.ops.special import as_inexact

__all__ = ["cholesky", "det", "eigh", "eigvalsh", "inv", "qr", "slogdet", "solve", "solve_triangular", "svd", "svdvals"]

_REAL = (dtypes.float32, dtypes.float64)


# -- checks and small helpers ------------------------------------------------------------------------
def _check(op: str, a, square: bool = True):
    """The operand rule shared by the shape rules and the public functions: real float matrices (..., m, n)."""
    if len(a.shape) < 2:
        raise ShapeError(f"needs matrices (..., m, n), got {type_str(a)}", op=op)
    if square and a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"needs square matrices (..., n, n), got {type_str(a)}", op=op)
    if a.dtype not in _REAL:
        raise DTypeError(f"needs real float32 or float64 matrices, got {dtypes.short(a.dtype)}", op=op)


def _matrix(a, op: str, square: bool = True):
    """A public function's matrix operand: lifted, integers and bools as float64 (as NumPy), checked."""
    return _checked(as_inexact(a), op, square)


def _checked(a, op, square):
    try:
        _check(op, a, square)
    except (ShapeError, DTypeError) as e:
        raise type(e)(e.detail, op=op, source=user_source()) from None
    return a


def _eye(n: int, like):
    return np.eye(n, dtype=like.dtype)


def _unsqueeze2(x):
    """(...) -> (..., 1, 1): a per-matrix scalar against its matrix."""
    return reshape(x, tuple(x.shape) + (1, 1))


def _cols(x, start, stop):
    return slice_axis(x, len(x.shape) - 1, start, stop)


def _sym(t):
    return 0.5 * (t + mT(t))


def _scale_cols(x, v):
    """x[..., i, j] * v[..., j]."""
    return x * expand_dims(v, -2)


def _scale_rows(x, v):
    """x[..., i, j] * v[..., i]."""
    return x * expand_dims(v, -1)


def _gaps(w):
    """E[i, j] = w[j] - w[i] off the diagonal and 1 on it: what the eigenvector and singular-vector
    rules divide by."""
    return expand_dims(w, -2) - expand_dims(w, -1) + _eye(w.shape[-1], w)


def _offdiagonal(x):
    """x with its diagonal zeroed by a constant mask (the rules' x / E is finite there: E's diagonal is 1)."""
    return x * (1 - _eye(x.shape[-1], x))


def _per_matrix(count):
    """A flops rule: `count(m, n, operands)` (LAPACK's leading-order count for one matrix) times the batch."""
    return lambda out, xs, attrs: math.prod(xs[0].shape[:-2]) * int(count(*xs[0].shape[-2:], xs))


def _primitive(name, args, infer, numpy, vjp, jvp, count, doc, differentiable=True):
    register(Primitive(name, args, infer, numpy, vjp=vjp, jvp=jvp, kind="other", flops=_per_matrix(count),
                       differentiable=differentiable, doc=doc))


def _same_shape(op):
    def infer(a):
        _check(op, a)
        return a.shape, a.dtype
    return infer


def _batch_shape(op):
    def infer(a):
        _check(op, a)
        return a.shape[:-2], a.dtype
    return infer


# -- inv, det, slogdet ---------------------------------------------------------------------------------
_primitive("inv", ("a",), _same_shape("inv"), "np.linalg.inv(a)",
           vjp=lambda g, x, a: [-(mT(x) @ g @ mT(x))],
           jvp=lambda ts, x, a: -(x @ ts[0] @ x),
           count=lambda m, n, xs: 2 * n ** 3, doc="Matrix inverse (numpy.linalg.inv).")


def _cofactor(a, d):
    """d det(A) / dA = det(A) A^{-T}, the matrix of cofactors, where A is invertible. Where det(A) is exactly 0
    (inv would fail) A is replaced by the identity, so the gradient there is 0: torch's, whose LU formula also
    scales by det(A) (the true cofactor matrix of a matrix of rank n - 1 is not 0)."""
    singular = broadcast_to(_unsqueeze2(d == 0), a.shape)
    return _unsqueeze2(d) * mT(bind("inv", where(singular, _eye(a.shape[-1], a), a)))


_primitive("det", ("a",), _batch_shape("det"), "np.linalg.det(a)",
           vjp=lambda g, d, a: [_unsqueeze2(g) * _cofactor(a, d)],
           jvp=lambda ts, d, a: sum_(_cofactor(a, d) * ts[0], axis=(-2, -1)),
           count=lambda m, n, xs: 2 * n ** 3 // 3, doc="Determinant (numpy.linalg.det).")
_primitive("slogdet_sign", ("a",), _batch_shape("slogdet_sign"), "np.linalg.slogdet(a)[0]", vjp=None, jvp=None,
           count=lambda m, n, xs: 2 * n ** 3 // 3, differentiable=False,
           doc="The sign of the determinant, -1, 0 or 1 (numpy.linalg.slogdet's first result); derivative zero.")
_primitive("logabsdet", ("a",), _batch_shape("logabsdet"), "np.linalg.slogdet(a)[1]",
           vjp=lambda g, y, a: [_unsqueeze2(g) * mT(bind("inv", a))],
           jvp=lambda ts, y, a: sum_(mT(bind("inv", a)) * ts[0], axis=(-2, -1)),
           count=lambda m, n, xs: 2 * n ** 3 // 3,
           doc="log |det A| (numpy.linalg.slogdet's second result; -inf for a singular matrix).")


def inv(a):
    """numpy.linalg.inv (torch.linalg.inv): the inverse of each square matrix in the last two axes. A
    singular matrix raises (as both)."""
    return bind("inv", _matrix(a, "inv"))


def det(a):
    """numpy.linalg.det (torch.linalg.det): the determinant of each square matrix. Its gradient is
    det(A) A^{-T}, the matrix of cofactors; at a matrix whose determinant is exactly 0 it is 0, as torch's."""
    return bind("det", _matrix(a, "det"))


def slogdet(a):
    """numpy.linalg.slogdet (torch.linalg.slogdet): (sign, logabsdet), det = sign * exp(logabsdet), as a
    tuple. The sign has no derivative; logabsdet's gradient is A^{-T}."""
    a = _matrix(a, "slogdet")
    return bind("slogdet_sign", a), bind("logabsdet", a)


# -- solve, solve_triangular ---------------------------------------------------------------------------
def _solve_infer(op):
    def infer(a, b, **attrs):
        _check(op, a)
        if len(b.shape) != len(a.shape) or b.shape[:-2] != a.shape[:-2] or b.shape[-2] != a.shape[-1]:
            raise ShapeError(f"primitive needs b (..., n, k) with a's batch dims, got {type_str(a)} and {type_str(b)}",
                             op=op)
        if b.dtype != a.dtype:
            raise DTypeError("operands must share one dtype", op=op)
        return b.shape, b.dtype
    return infer


def _rhs(ta, tb, x):
    """The right-hand side of a solve's tangent, tB - tA X (None when both tangents are)."""
    if ta is None:
        return tb
    return -(ta @ x) if tb is None else tb - ta @ x


def _solve_vjp(g, x, a, b):
    gb = bind("solve", mT(a), g)
    return [-(gb @ mT(x)), gb]


def _solve_jvp(ts, x, a, b):
    rhs = _rhs(ts[0], ts[1], x)
    return None if rhs is None else bind("solve", a, rhs)


_primitive("solve", ("a", "b"), _solve_infer("solve"), "np.linalg.solve(a, b)", vjp=_solve_vjp, jvp=_solve_jvp,
           count=lambda m, n, xs: 2 * n ** 3 // 3 + 2 * n * n * xs[1].shape[-1],
           doc="A^{-1} B for square A (..., n, n) and B (..., n, k) of the same batch (numpy.linalg.solve).")


def _tri(x, lower):
    return tril(x) if lower else triu(x)


def _solve_tri_vjp(g, x, a, b, lower):
    gb = bind("solve_triangular", mT(a), g, lower=not lower)
    return [-_tri(gb @ mT(x), lower), gb]


def _solve_tri_jvp(ts, x, a, b, lower):
    rhs = _rhs(None if ts[0] is None else _tri(ts[0], lower), ts[1], x)
    return None if rhs is None else bind("solve_triangular", a, rhs, lower=lower)


# NumPy has no triangular solve: its general solve on the triangle gives the same X (scipy's is not batched)
_primitive("solve_triangular", ("a", "b"), _solve_infer("solve_triangular"),
           "np.linalg.solve(np.tril(a) if lower else np.triu(a), b)", vjp=_solve_tri_vjp, jvp=_solve_tri_jvp,
           count=lambda m, n, xs: n * n * xs[1].shape[-1],
           doc="T^{-1} B, T the lower (lower=True) or upper triangle of a (scipy.linalg.solve_triangular).")


def _solve_operands(op, a, b):
    """a (..., n, n) and b (..., n, k) or (n,) with broadcast batch dims, as the primitive takes them, and
    whether b was a vector (NumPy 2's rule: only a 1-D b is one)."""
    a, b = lift_all(a, b, op=op)
    a, b = _checked(as_inexact(a), op, True), as_inexact(b)
    vector = b.ndim == 1
    b2 = reshape(b, b.shape + (1,)) if vector else b
    if b2.ndim < 2 or b2.shape[-2] != a.shape[-1]:
        raise ShapeError(f"b must be (n,) or (..., n, k) for a of {type_str(a)}, got {type_str(b)}", op=op,
                         source=user_source())
    try:
        batch = broadcast_shape([a.shape[:-2], b2.shape[:-2]])
    except ValueError:
        raise ShapeError(f"batch dimensions of {type_str(a)} and {type_str(b)} do not broadcast", op=op,
                         source=user_source()) from None
    return broadcast_to(a, batch + a.shape[-2:]), broadcast_to(b2, batch + b2.shape[-2:]), vector


def _unvector(x, vector):
    return reshape(x, x.shape[:-1]) if vector else x


def solve(a, b):
    """numpy.linalg.solve (torch.linalg.solve): X with A X = B, for square A (..., n, n) and B (..., n, k),
    batch dims broadcasting; a 1-D b (n,) is one vector (NumPy 2's rule; torch also takes a batch of
    vectors (..., n) when B has one axis fewer than A: write b[..., None] and drop the axis after)."""
    a, b, vector = _solve_operands("solve", a, b)
    return _unvector(bind("solve", a, b), vector)


def solve_triangular(a, b, lower=False, *, left=True, unit_diagonal=False):
    """scipy.linalg.solve_triangular, batched (torch.linalg.solve_triangular, whose `upper` is `not lower`):
    X with T X = B, T the lower (lower=True) or upper triangle of a; the other triangle is not read and
    gets no gradient. `left=False` solves X T = B; `unit_diagonal` takes T's diagonal as ones."""
    if not left:  # X T = B is T^T X^T = B^T (and x T = b, for a vector, T^T x = b)
        b = lift(b)
        xt = solve_triangular(mT(a), b if b.ndim == 1 else mT(b), not lower, unit_diagonal=unit_diagonal)
        return xt if b.ndim == 1 else mT(xt)
    a, b, vector = _solve_operands("solve_triangular", a, b)
    if unit_diagonal:
        a = where(_eye(a.shape[-1], a).astype(bool), 1.0, a)
    return _unvector(bind("solve_triangular", a, b, lower=lower), vector)


def _right_tri(b, r, lower):
    """B T^{-1} for a triangular T: (T^{-T} B^T)^T."""
    return mT(bind("solve_triangular", mT(r), mT(b), lower=not lower))


# -- cholesky --------------------------------------------------------------------------------------------
def _cholesky_vjp(g, l, a):
    p = tril(mT(l) @ g)
    p = 0.5 * (p + mT(tril(p, -1)))  # adjoint of K -> tril(K) with half the diagonal, made symmetric
    return [_right_tri(bind("solve_triangular", mT(l), p, lower=False), l, lower=True)]  # L^{-T} P L^{-1}


def _cholesky_jvp(ts, l, a):
    k = _right_tri(bind("solve_triangular", l, _sym(ts[0]), lower=True), mT(l), lower=False)  # L^{-1} dA L^{-T}
    return l @ (tril(k) - 0.5 * (k * _eye(k.shape[-1], k)))  # dL = L (tril(K) with half the diagonal)


_primitive("cholesky", ("a",), _same_shape("cholesky"), "np.linalg.cholesky(a)", vjp=_cholesky_vjp, jvp=_cholesky_jvp,
           count=lambda m, n, xs: n ** 3 // 3,
           doc="Lower Cholesky factor L, A = L L^T, of a symmetric positive-definite A (numpy.linalg.cholesky).")


def cholesky(a, upper=False):
    """numpy.linalg.cholesky (torch.linalg.cholesky): L lower triangular with A = L L^T (its transpose
    with upper=True), for symmetric positive-definite A; the lower triangle is read, the gradient is
    symmetric (as torch). A matrix that is not positive definite raises."""
    l = bind("cholesky", _matrix(a, "cholesky"))
    return mT(l) if upper else l


# -- qr ----------------------------------------------------------------------------------------------------
def _qr_infer(op, part):
    def infer(a):
        _check(op, a, square=False)
        m, n = a.shape[-2:]
        k = min(m, n)
        return a.shape[:-2] + ((m, k) if part == "q" else (k, n)), a.dtype
    return infer


def _qr_tall_vjp(q, r, gq, gr):
    """m >= n: gA = (gQ + Q copyltu(M)) R^{-T}, M = R gR^T - gQ^T Q, copyltu(M) = tril(M) + tril(M, -1)^T."""
    m = -(mT(gq) @ q) if gr is None else r @ mT(gr) if gq is None else r @ mT(gr) - mT(gq) @ q
    b = q @ (tril(m) + mT(tril(m, -1)))
    return _right_tri(b if gq is None else b + gq, mT(r), lower=True)


def _qr_vjp(a, q, r, gq, gr):
    """A's cotangent from Q's (gq) or R's (gr); one of them None. For m < n, A = [X Y] and R = [U V]:
    (Q, U) = qr(X) and V = Q^T Y, so X's share is the square case's with gQ + Y gV^T, and Y's is Q gV."""
    m, n = a.shape[-2:]
    if m >= n:
        return _qr_tall_vjp(q, r, gq, gr)
    y = _cols(a, m, n)
    if gr is None:
        return pad(_qr_tall_vjp(q, _cols(r, 0, m), gq, None), [(0, 0)] * (a.ndim - 1) + [(0, n - m)])
    gv = _cols(gr, m, n)
    gq2 = y @ mT(gv) if gq is None else gq + y @ mT(gv)
    return concatenate([_qr_tall_vjp(q, _cols(r, 0, m), gq2, _cols(gr, 0, m)), q @ gv], axis=-1)


def _qr_tall_jvp(q, r, t):
    """m >= n: C = Q^T dA R^{-1} = Q^T dQ + dR R^{-1}, skew plus upper triangular: Omega = Q^T dQ is C's strict
    lower part minus its transpose, dR = (C - Omega) R, dQ = dA R^{-1} - Q (C - Omega)."""
    ar = _right_tri(t, r, lower=False)
    c = mT(q) @ ar
    low = tril(c, -1)
    upper = c - (low - mT(low))
    return ar - q @ upper, upper @ r


def _qr_jvp(a, q, r, t):
    """(dQ, dR) along dA; for m < n from the square part X and dV = Q^T (dY - dQ V)."""
    m, n = a.shape[-2:]
    if m >= n:
        return _qr_tall_jvp(q, r, t)
    dq, du = _qr_tall_jvp(q, _cols(r, 0, m), _cols(t, 0, m))
    return dq, concatenate([du, mT(q) @ (_cols(t, m, n) - dq @ _cols(r, m, n))], axis=-1)


def _qr_count(m, n, xs):
    k = min(m, n)
    return 2 * m * n * k - 2 * k ** 3 // 3  # Householder; forming Q costs about as much again


_primitive("qr_q", ("a",), _qr_infer("qr_q", "q"), "np.linalg.qr(a)[0]",
           vjp=lambda g, q, a: [_qr_vjp(a, q, bind("qr_r", a), g, None)],
           jvp=lambda ts, q, a: _qr_jvp(a, q, bind("qr_r", a), ts[0])[0],
           count=lambda m, n, xs: 2 * _qr_count(m, n, xs),
           doc="Q of the reduced QR decomposition (numpy.linalg.qr's first result).")
_primitive("qr_r", ("a",), _qr_infer("qr_r", "r"), "np.linalg.qr(a, mode='r')",
           vjp=lambda g, r, a: [_qr_vjp(a, bind("qr_q", a), r, None, g)],
           jvp=lambda ts, r, a: _qr_jvp(a, bind("qr_q", a), r, ts[0])[1],
           count=_qr_count, doc="R of the reduced QR decomposition (numpy.linalg.qr's second result).")


def qr(a, mode="reduced"):
    """numpy.linalg.qr (torch.linalg.qr): (Q, R) with A = Q R, Q (..., m, k) with orthonormal columns and R
    (..., k, n) upper triangular, k = min(m, n); mode="r" gives R alone. The gradient needs the first
    min(m, n) columns of A to be independent (as torch); mode "complete" is not supported."""
    if mode not in ("reduced", "r"):
        raise UnsupportedOpError(f"mode={mode!r} is not supported (only 'reduced' and 'r')", op="qr",
                                 source=user_source())
    a = _matrix(a, "qr", square=False)
    return bind("qr_r", a) if mode == "r" else (bind("qr_q", a), bind("qr_r", a))


# -- eigh ------------------------------------------------------------------------------------------------
def _eigh_shape(op, part):
    def infer(a):
        _check(op, a)
        return (a.shape[:-1] if part == "w" else a.shape), a.dtype
    return infer


def _eigh_values_vjp(g, w, a):
    v = bind("eigh_vectors", a)
    return [_scale_cols(v, g) @ mT(v)]  # V diag(g) V^T


def _eigh_values_jvp(ts, w, a):
    v = bind("eigh_vectors", a)
    return sum_(v * (ts[0] @ v), axis=-2)  # diag(V^T dA V)


def _eigh_vectors_vjp(g, v, a):
    x = mT(v) @ g
    return [v @ ((0.5 * (x - mT(x))) / _gaps(bind("eigh_values", a))) @ mT(v)]  # V (skew(V^T gV) / E) V^T


def _eigh_vectors_jvp(ts, v, a):
    p = mT(v) @ _sym(ts[0]) @ v
    return v @ _offdiagonal(p / _gaps(bind("eigh_values", a)))  # V (P / E off the diagonal), P = V^T dA V


_primitive("eigh_values", ("a",), _eigh_shape("eigh_values", "w"), "np.linalg.eigvalsh(a)",
           vjp=_eigh_values_vjp, jvp=_eigh_values_jvp, count=lambda m, n, xs: 4 * n ** 3 // 3,
           doc="Eigenvalues of a symmetric matrix, ascending (numpy.linalg.eigvalsh); the lower triangle is read.")
_primitive("eigh_vectors", ("a",), _eigh_shape("eigh_vectors", "v"), "np.linalg.eigh(a)[1]",
           vjp=_eigh_vectors_vjp, jvp=_eigh_vectors_jvp, count=lambda m, n, xs: 9 * n ** 3,
           doc="Orthonormal eigenvectors (columns) of a symmetric matrix (numpy.linalg.eigh's second result).")


def eigh(a):
    """numpy.linalg.eigh (torch.linalg.eigh): (w, V), the ascending eigenvalues and the orthonormal
    eigenvectors (columns) of each symmetric matrix, from its lower triangle. The gradient is symmetric;
    V's needs distinct eigenvalues (it divides by their gaps, as torch's)."""
    a = _matrix(a, "eigh")
    return bind("eigh_values", a), bind("eigh_vectors", a)


def eigvalsh(a):
    """numpy.linalg.eigvalsh (torch.linalg.eigvalsh): the ascending eigenvalues of each symmetric matrix."""
    return bind("eigh_values", _matrix(a, "eigvalsh"))


# -- svd ---------------------------------------------------------------------------------------------------
def _svd_shape(op, part):
    def infer(a):
        _check(op, a, square=False)
        m, n = a.shape[-2:]
        k = min(m, n)
        return a.shape[:-2] + {"u": (m, k), "s": (k,), "vh": (k, n)}[part], a.dtype
    return infer


def _svd(a, *parts):
    return [bind("svd_" + p, a) for p in parts]


def _svd_s_vjp(g, s, a):
    u, vh = _svd(a, "u", "vh")
    return [_scale_cols(u, g) @ vh]  # U diag(g) Vh


def _svd_s_jvp(ts, s, a):
    u, vh = _svd(a, "u", "vh")
    return sum_(u * (ts[0] @ mT(vh)), axis=-2)  # diag(U^T dA V)


def _svd_u_vjp(g, u, a):
    """U [(skew(U^T gU) / E) S] Vh + (I - U U^T) gU S^{-1} Vh, E[i, j] = s_j^2 - s_i^2 (torch's svd_backward)."""
    s, vh = _svd(a, "s", "vh")
    x = mT(u) @ g
    ga = u @ _scale_cols((x - mT(x)) / _gaps(s * s), s)
    if a.shape[-2] > s.shape[-1]:  # U does not span R^m: the rest of gU
        ga = ga + _scale_cols(g - u @ x, 1 / s)
    return [ga @ vh]


def _svd_vh_vjp(g, vh, a):
    """U [S (skew(V^T gV) / E)] Vh + U S^{-1} gVh (I - V V^T), gV = gVh^T."""
    u, s = _svd(a, "u", "s")
    y = vh @ mT(g)
    rows = _scale_rows((y - mT(y)) / _gaps(s * s), s) @ vh
    if a.shape[-1] > s.shape[-1]:
        rows = rows + _scale_rows(g - mT(y) @ vh, 1 / s)
    return [u @ rows]


def _svd_u_jvp(ts, u, a):
    """dU = U ((dP S + S dP^T) / E off the diagonal) + (I - U U^T) dA V S^{-1}, dP = U^T dA V."""
    s, vh = _svd(a, "s", "vh")
    av = ts[0] @ mT(vh)
    dp = mT(u) @ av
    du = u @ _offdiagonal((_scale_cols(dp, s) + _scale_rows(mT(dp), s)) / _gaps(s * s))
    return du + _scale_cols(av - u @ dp, 1 / s) if a.shape[-2] > s.shape[-1] else du


def _svd_vh_jvp(ts, vh, a):
    """dV = V ((S dP + dP^T S) / E off the diagonal) + (I - V V^T) dA^T U S^{-1}; dVh = dV^T."""
    u, s = _svd(a, "u", "s")
    ua = mT(u) @ ts[0]
    dp = ua @ mT(vh)
    dvh = -_offdiagonal((_scale_rows(dp, s) + _scale_cols(mT(dp), s)) / _gaps(s * s)) @ vh  # (V Omega)^T, Omega skew
    return dvh + _scale_rows(ua - dp @ vh, 1 / s) if a.shape[-1] > s.shape[-1] else dvh


def _svd_count(m, n, xs):
    k, big = min(m, n), max(m, n)
    return 4 * big * k * k + 8 * k ** 3  # bidiagonalization and the QR iteration, with vectors


_primitive("svd_u", ("a",), _svd_shape("svd_u", "u"), "np.linalg.svd(a, full_matrices=False)[0]",
           vjp=_svd_u_vjp, jvp=_svd_u_jvp, count=_svd_count,
           doc="U of the reduced SVD A = U diag(S) Vh (numpy.linalg.svd(full_matrices=False)'s first result).")
_primitive("svd_s", ("a",), _svd_shape("svd_s", "s"), "np.linalg.svd(a, compute_uv=False)",
           vjp=_svd_s_vjp, jvp=_svd_s_jvp, count=lambda m, n, xs: 4 * max(m, n) * min(m, n) ** 2,
           doc="Singular values, descending (numpy.linalg.svdvals).")
_primitive("svd_vh", ("a",), _svd_shape("svd_vh", "vh"), "np.linalg.svd(a, full_matrices=False)[2]",
           vjp=_svd_vh_vjp, jvp=_svd_vh_jvp, count=_svd_count,
           doc="Vh of the reduced SVD A = U diag(S) Vh (numpy.linalg.svd(full_matrices=False)'s third result).")


def svd(a, full_matrices=True, compute_uv=True):
    """numpy.linalg.svd (torch.linalg.svd): (U, S, Vh) with A = U diag(S) Vh, S descending, k = min(m, n)
    columns of U and rows of Vh. Only the reduced SVD is supported: full_matrices=True (NumPy's default)
    is accepted for square matrices, where the two agree. compute_uv=False gives S alone. The gradient
    through U or Vh needs distinct (and for non-square A nonzero) singular values, as torch's."""
    a = _matrix(a, "svd", square=False)
    if not compute_uv:
        return bind("svd_s", a)
    if full_matrices and a.shape[-1] != a.shape[-2]:
        raise UnsupportedOpError(f"full_matrices=True on a non-square {type_str(a)}: only the reduced SVD is "
                                 "supported; pass full_matrices=False", op="svd", source=user_source())
    return bind("svd_u", a), bind("svd_s", a), bind("svd_vh", a)


def svdvals(a):
    """numpy.linalg.svdvals (torch.linalg.svdvals): the singular values, descending. Its gradient
    U diag(g) Vh needs no distinct values."""
    return bind("svd_s", _matrix(a, "svdvals", square=False))
