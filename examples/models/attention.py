"""TEACHING.md D: one attention head, no mask, D=2, with the given Q, K, V and upstream G.

    gradir trace examples/models/attention.py --viz --out out/d

The loss sum(O * G) makes G the upstream gradient of O = softmax(Q K^T / sqrt(D)) V, so the
backward computes exactly the dQ, dK, dV of the teaching example.
"""

import numpy as np

import gradir as gr

G = np.array([[1.0, -0.5], [-1.0, 2.0]])


def loss(Q, K, V):
    S = Q @ K.T / np.sqrt(2.0)
    A = gr.nn.softmax(S, axis=-1)
    O = A @ V
    return gr.sum(O * G)


def example_inputs():
    Q = np.array([[1.0, 0.0], [0.5, 1.0]])
    K = np.array([[1.0, 1.0], [0.0, 2.0]])
    V = np.array([[2.0, -1.0], [0.0, 3.0]])
    return (Q, K, V)
