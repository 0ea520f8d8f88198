"""The LLVM backend: fused, vectorized CPU code through llvmlite."""
