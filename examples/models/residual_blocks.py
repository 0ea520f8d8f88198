"""TEACHING.md E: twelve residual MLP blocks (width 256, batch 32, float32), each a gr.scope.

    gradir trace examples/models/residual_blocks.py --viz --out out/e
    gradir memory examples/models/residual_blocks.py --remat uniform

Each block is x + relu(x @ W1 + b1) @ W2 + b2; diagrams group the nodes by block.
"""

import numpy as np

import gradir as gr

BLOCKS, WIDTH, BATCH = 12, 256, 32


def loss(params, x):
    for k, p in enumerate(params):
        with gr.scope(f"block{k}"):
            x = x + gr.relu(x @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]
    return gr.mean(x * x)


def example_inputs():
    rng = np.random.default_rng(0)
    f = np.float32
    params = [{"W1": (rng.standard_normal((WIDTH, WIDTH)) / WIDTH ** 0.5).astype(f), "b1": np.zeros(WIDTH, f),
               "W2": (rng.standard_normal((WIDTH, WIDTH)) / WIDTH ** 0.5).astype(f), "b2": np.zeros(WIDTH, f)}
              for _ in range(BLOCKS)]
    return {"args": (params, rng.standard_normal((BATCH, WIDTH)).astype(f)), "argnums": (0,)}
