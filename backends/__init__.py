"""Backends: graph (+ plans) -> callable. NumPy is the reference; LLVM compiles fused kernels to native code,
Triton to GPU kernels."""

from gradir.backends.numpy_backend import CompiledGraph, MeasuredRun, generate_source, measure_memory, run
from gradir.backends.numpy_backend import compile_graph as compile_numpy
from gradir.gcpause import gc_paused

BACKENDS = ("numpy", "llvm", "triton")


@gc_paused
def compile_graph(graph, check: bool = False, order=None, backend: str = "numpy"):
    """Compile `graph` with `backend` ("numpy", "llvm" or "triton"); its nodes run in `order` (a schedule)."""
    if backend == "triton":
        from gradir.backends.triton.backend import compile_graph as compile_triton

        return compile_triton(graph, check=check, order=order)
    if backend == "llvm":
        from gradir.backends.llvm.backend import compile_graph as compile_llvm

        return compile_llvm(graph, check=check, order=order)
    return compile_numpy(graph, check=check, order=order)


__all__ = ["BACKENDS", "CompiledGraph", "MeasuredRun", "compile_graph", "generate_source", "measure_memory", "run"]
