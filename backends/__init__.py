"""Backends: graph (+ plans) -> callable. NumPy is the reference."""

from gradir.backends.numpy_backend import CompiledGraph, MeasuredRun, compile_graph, generate_source, measure_memory, run

BACKENDS = ("numpy",)

__all__ = ["BACKENDS", "CompiledGraph", "MeasuredRun", "compile_graph", "generate_source", "measure_memory", "run"]
