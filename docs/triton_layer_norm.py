"""The Triton kernel docs/triton.md shows: `python docs/triton_layer_norm.py` prints it.

LayerNorm's backward (the gradients of sum(layer_norm(x, gain, bias) * dy) for x, gain and bias, 64 rows
of 256 float32) compiled by the Triton backend: one kernel, one program per row, the whole row in
registers. Runs on the CPU through Triton's interpreter when no GPU is there.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

import numpy as np  # noqa: E402

import gradir as gr  # noqa: E402


def loss(x, gain, bias, dy):
    return gr.sum(gr.nn.layer_norm(x, gain, bias) * dy)


def layer_norm_backward_kernel() -> str:
    """The generated source of the one kernel of LayerNorm's backward."""
    rng = np.random.default_rng(0)
    x, dy = (rng.standard_normal((64, 256)).astype(np.float32) for _ in range(2))
    gain, bias = np.ones(256, np.float32), np.zeros(256, np.float32)
    step = gr.compile(gr.grad(loss, argnums=(0, 1, 2)), backend="triton")
    compiled = step.executable(x, gain, bias, dy)
    assert len(compiled.program.kernels) == 1, compiled.listing
    return compiled.kernel_text(0)


if __name__ == "__main__":
    print(layer_norm_backward_kernel())
