"""The Triton backend: the fusion pass's kernels as Triton GPU kernels. backend.py runs them (buffers, launches,
CUDA graphs, fallbacks); codegen.py writes the loop kernels and declares `RENDERS`, the table of the ops this
backend renders (fusion keeps the others out of its kernels), gemm.py the tl.dot matmuls, scatter.py index_add;
mathfn.py holds the math functions they call. Kernels of one structure share one generated function, found by
backends/sharing.py (the LLVM backend's key).

Layer rule: imports gradir.util, gradir.core, gradir.ops, gradir.passes, backends/loops.py, backends/sharing.py
and the NumPy reference (gradir.backends.numpy_backend), at the top of the module. The third-party triton and
torch are imported lazily, inside the functions that compile or run kernels, so importing this package never
loads them; only mathfn.py (imported by the generated kernel modules) imports triton at its top."""

from gradir.backends.triton.codegen import RENDERS

__all__ = ["RENDERS"]
