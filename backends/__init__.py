"""Backends: graph (+ plans) -> callable. NumPy is the reference; LLVM compiles fused kernels to native code,
Triton to GPU kernels.

`compile_graph` is the one entry point: it lowers the graph's composite ops to primitives (passes.lower),
once, and hands the backend a graph of primitives; the backends trust that. `run` (the NumPy interpreter,
for one-off evaluation) lowers the same way. Each compiled backend declares the ops it renders (`RENDERS`:
gradir.backends.llvm.RENDERS, gradir.backends.triton.RENDERS), which fusion reads; backends/loops.py plans
their loops and backends/sharing.py finds the kernels that share one compiled function.

Layer rule (gradir.backends): imports gradir.util, gradir.core, gradir.ops, gradir.passes and backends below
it, at the top of the module; never gradir.viz or anything above it, and never the face `gradir`. The llvm and
triton backends are part of the package and imported here; llvmlite is a hard dependency, while the third-party
triton and torch are imported lazily, when a Triton program is compiled or run, so `import gradir` never loads them.
"""

from gradir.backends.llvm.backend import compile_graph as compile_llvm
from gradir.backends.numpy_backend import CompiledGraph, MeasuredRun, generate_source, measure_memory
from gradir.backends.numpy_backend import compile_graph as compile_numpy
from gradir.backends.numpy_backend import run as interpret
from gradir.backends.triton.backend import compile_graph as compile_triton
from gradir.passes.lower import lower_composites
from gradir.util.gcpause import gc_paused

BACKENDS = ("numpy", "llvm", "triton")


@gc_paused
def compile_graph(graph, check: bool = False, order=None, backend: str = "numpy"):
    """Compile `graph` with `backend` ("numpy", "llvm" or "triton"); its nodes run in `order` (a schedule).
    Composite ops are lowered to primitives first (a graph that has some then runs in its own order: the
    schedule named the composite nodes)."""
    lowered = lower_composites(graph)
    if lowered is not graph:
        graph, order = lowered, None
    if backend == "triton":
        return compile_triton(graph, check=check, order=order)
    if backend == "llvm":
        return compile_llvm(graph, check=check, order=order)
    return compile_numpy(graph, check=check, order=order)


def run(graph, args: list) -> list:
    """Interpret `graph` on NumPy arrays, node by node (no code generation), its composite ops lowered first."""
    return interpret(lower_composites(graph), args)


__all__ = ["BACKENDS", "CompiledGraph", "MeasuredRun", "compile_graph", "generate_source", "measure_memory", "run"]
