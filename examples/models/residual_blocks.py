"""TEACHING.md E: twelve residual MLP blocks (width 256, batch 32, float32), each a gr.scope.

    gradir trace examples/models/residual_blocks.py --viz --out out/e
    gradir memory examples/models/residual_blocks.py --remat uniform --segments 6

Each block is x + relu(x @ W1 + b1) @ W2 + b2; the loss is mean(x*x); diagrams group the nodes by
block. `residual_blocks(...)` builds the same model at other sizes (the examples, tests and
benchmarks of recompute planning use it).
"""

import numpy as np

import gradir as gr

BLOCKS, WIDTH, BATCH = 12, 256, 32


def loss(params, x):
    for k, p in enumerate(params):
        with gr.scope(f"block{k}"):
            x = x + gr.relu(x @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]
    return gr.mean(x * x)


def residual_blocks(blocks=BLOCKS, width=WIDTH, batch=BATCH, seed=0, dtype=np.float32):
    """(loss, params, x): `blocks` blocks of `width`, a batch of `batch` rows, fixed seed."""
    rng = np.random.default_rng(seed)
    params = [{"W1": (rng.standard_normal((width, width)) / width ** 0.5).astype(dtype), "b1": np.zeros(width, dtype),
               "W2": (rng.standard_normal((width, width)) / width ** 0.5).astype(dtype), "b2": np.zeros(width, dtype)}
              for _ in range(blocks)]
    return loss, params, rng.standard_normal((batch, width)).astype(dtype)


def example_inputs():
    _, params, x = residual_blocks()
    return {"args": (params, x), "argnums": (0,)}
