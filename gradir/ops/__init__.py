"""The op library: NumPy-named functions over traced values or arrays, each bound to primitives, and `gr.nn`.

Layer rule: imports gradir.util, gradir.core and itself. Inside: lifting, shapes, elementwise, reductions,
creation, special, indexing, linalg, decompositions, linalg_namespace (gr.linalg), update, scans, arrange,
index_writes, conv, methods, nn (each imports only modules before it)."""

from gradir.ops import (  # noqa: F401 - gr.linalg (registers the decompositions), gr.nn
    arrange,
    creation,
    elementwise,
    index_writes,
    indexing,
    linalg_namespace,
    methods,
    nn,
    reductions,
    scans,
    shapes,
    special,
)
from gradir.ops.arrange import *  # noqa: F403 - these modules' __all__ are the op library's names (see __all__ below)
from gradir.ops.creation import *  # noqa: F403
from gradir.ops.elementwise import *  # noqa: F403
from gradir.ops.index_writes import *  # noqa: F403
from gradir.ops.indexing import *  # noqa: F403
from gradir.ops.lifting import astype
from gradir.ops.linalg import addmm, baddbmm, cross, dot, einsum, inner, kron, matmul, tensordot
from gradir.ops.reductions import *  # noqa: F403
from gradir.ops.scans import *  # noqa: F403
from gradir.ops.shapes import *  # noqa: F403
from gradir.ops.special import *  # noqa: F403
from gradir.ops.update import setitem  # noqa: F401 - x[idx] = v as a pure op; registers its primitives

methods.attach()  # Value's operators and NumPy-like methods

# The op library, each name written once, in its module's __all__: all of nine modules' lists, and the few ops of
# lifting.py and linalg.py that are public (their other names are helpers; linalg's matrix_transpose is gr.linalg's).
# gr re-exports this list (tests/test_public_api.py pins it).
__all__ = [
    *arrange.__all__, *creation.__all__, *elementwise.__all__, *index_writes.__all__, *indexing.__all__,
    *reductions.__all__, *scans.__all__, *shapes.__all__, *special.__all__,
    "astype", "addmm", "baddbmm", "cross", "dot", "einsum", "inner", "kron", "matmul", "tensordot",
]
