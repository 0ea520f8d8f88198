"""TEACHING.md A: one scalar expression, L = tanh(a*b + a) at a = 1.5, b = -2.

    gradir trace examples/models/tanh_scalar.py     # forward IR, backward IR, saved values
    python examples/models/tanh_scalar.py           # L and its gradient

Expected: L = -0.9051482536, dL/da = -0.1807066389, dL/db = 0.2710599584.
`a` reaches L by two paths (through m = a*b and directly), so its backward adds two terms.
"""

import gradir as gr


def loss(a, b):
    m = a * b
    z = m + a
    return gr.tanh(z)


def example_inputs():
    return (1.5, -2.0)


if __name__ == "__main__":
    L, (da, db) = gr.value_and_grad(loss, argnums=(0, 1))(*example_inputs())
    print(f"L = {L:.10f}  dL/da = {da:.10f}  dL/db = {db:.10f}")
