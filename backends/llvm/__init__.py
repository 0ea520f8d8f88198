"""The LLVM backend: fused, vectorized CPU code through llvmlite. backend.py runs it (buffers, the driver's
table, the disk cache, NumPy fallbacks); codegen.py builds the module and its driver, kernels.py emits the
loop and matmul kernels, index_kernels.py the scatter, scan and window kernels, emitter.py the per-op
expressions they share and `RENDERS`, the table of the ops this backend renders (fusion keeps the others out
of its kernels), mathlib.py the math functions; jit.py compiles IR to machine code (and holds OpenBLAS at one
thread while gradir runs); pool.py is the thread pool that big kernels are split over (kernels.split_of says
how). Kernels that can share one function are found by backends/sharing.py.

Layer rule: imports gradir.util, gradir.core, gradir.ops, gradir.passes, backends/loops.py, backends/sharing.py
and the NumPy reference (gradir.backends.numpy_backend), at the top of the module; llvmlite and threadpoolctl
are hard dependencies, and the only lazy import is SciPy's BLAS (jit.py)."""

from gradir.backends.llvm.emitter import RENDERS

__all__ = ["RENDERS"]
