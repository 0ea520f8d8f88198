"""gr.linalg: the matrix functions of numpy.linalg and torch.linalg in one namespace (decompositions,
inverses and solves, and the matrix products that numpy.linalg also lists)."""

from gradir.ops.decompositions import (
    cholesky,
    det,
    eigh,
    eigvalsh,
    inv,
    qr,
    slogdet,
    solve,
    solve_triangular,
    svd,
    svdvals,
)
from gradir.ops.linalg import cross, matmul, matrix_transpose, tensordot

__all__ = ["cholesky", "cross", "det", "eigh", "eigvalsh", "inv", "matmul", "matrix_transpose", "qr", "slogdet",
           "solve", "solve_triangular", "svd", "svdvals", "tensordot"]
