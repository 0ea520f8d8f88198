"""A two-layer tanh MLP classifier: the model file `gradir trace` reads by default in the README.

    gradir trace examples/models/mlp.py

The example inputs come from the shape annotations: 32 examples of 16 features, integer labels
in [0, 4), and the parameters of a 16 -> 32 -> 4 network (672 weights and biases). The data are
marked grad=False, so only the parameters are differentiated. The loss is the mean cross-entropy,
composed from gr ops (log-sum-exp minus the label's logit).
"""

import gradir as gr

N, D, H, C = 32, 16, 32, 4  # batch, features, hidden units, classes


def loss(x: gr.f32[N, D](grad=False), labels: gr.i64[N](high=C),
         w1: gr.f32[D, H], b1: gr.f32[H], w2: gr.f32[H, C], b2: gr.f32[C]):
    h = gr.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    picked = gr.sum(logits * gr.one_hot(labels, C, dtype=logits.dtype), axis=1)
    return gr.mean(gr.logsumexp(logits, axis=1) - picked)


if __name__ == "__main__":
    import numpy as np

    from gradir.api.specs import example_args

    args = example_args(loss)
    value, grads = gr.value_and_grad(loss, argnums=(2, 3, 4, 5))(*args)
    print(f"loss = {value:.6f} (log {C} = {np.log(C):.6f} for a uniform guess)")
    for name, g in zip(("w1", "b1", "w2", "b2"), grads):
        print(f"d loss / d {name}: shape {g.shape}, norm {np.linalg.norm(g):.6f}")
