"""gr.linalg: the matrix functions of numpy.linalg and torch.linalg in one namespace (decompositions,
inverses and solves, the matrix products that numpy.linalg also lists, and numpy.linalg.trace, which is
gr.linalg_trace under its NumPy name: the same function object, since the top level's `gr.trace` is the
tracer)."""

from gradir.ops.arrange import linalg_trace as trace
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
from gradir.util.public import api_dir

__all__ = ["cholesky", "cross", "det", "eigh", "eigvalsh", "inv", "matmul", "matrix_transpose", "qr", "slogdet",
           "solve", "solve_triangular", "svd", "svdvals", "tensordot", "trace"]


__dir__ = api_dir(globals())  # dir() and tab completion offer __all__, not the imports (gradir.util.public)
