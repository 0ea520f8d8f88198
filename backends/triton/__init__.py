"""The Triton backend: the fusion pass's kernels as Triton GPU kernels (backend.py, codegen.py, mathfn.py)."""
