"""Backends: graph (+ plans) -> callable. NumPy is the reference."""

from gradir.backends.numpy_backend import CompiledGraph, compile_graph, generate_source, run

BACKENDS = ("numpy",)

__all__ = ["BACKENDS", "CompiledGraph", "compile_graph", "generate_source", "run"]
