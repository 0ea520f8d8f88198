"""The Triton backend: the fusion pass's kernels as Triton GPU kernels. backend.py runs them (buffers, launches,
CUDA graphs, fallbacks); codegen.py writes the loop kernels, gemm.py the tl.dot matmuls, scatter.py index_add;
mathfn.py holds the math functions they call."""
