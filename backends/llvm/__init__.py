"""The LLVM backend: fused, vectorized CPU code through llvmlite. backend.py runs it (buffers, the driver's
table, the disk cache, NumPy fallbacks); codegen.py builds the module and its driver, kernels.py emits the
loop, matmul and scatter kernels, emitter.py the per-op expressions they share and `RENDERS`, the table of
the ops this backend renders (fusion keeps the others out of its kernels), mathlib.py the math functions;
jit.py compiles IR to machine code. Kernels that can share one function are found by backends/sharing.py.

Layer rule: imports gradir.util, gradir.core, gradir.ops, gradir.passes, backends/loops.py, backends/sharing.py
and the NumPy reference (gradir.backends.numpy_backend), at the top of the module; llvmlite is a hard
dependency, and the only lazy import is SciPy's BLAS (jit.py)."""

from gradir.backends.llvm.emitter import RENDERS

__all__ = ["RENDERS"]
