# %% [markdown]
# # D. Matrices, softmax, attention and LayerNorm
#
# The rules of `Y = X W`, softmax cross-entropy and its overflow, one attention head with every intermediate
# cotangent exposed, its causal mask, LayerNorm, and the two gradient routes of a residual block. The code is
# `examples/d_matrix_softmax_attention_norm.py`.

# %%
import course  # noqa: F401 - the examples folder on the import path
import d_matrix_softmax_attention_norm as D
import numpy as np
from IPython.display import display

import gradir as gr

# %%
figures = D.main()

# %% [markdown]
# One causal attention head as gradir traces it: scores, masked softmax, the mix of values; then the whole
# backward story (diagrams, the schedule player, the memory plan and the tables).

# %%
rng = np.random.default_rng(0)
Q, K, V = (rng.standard_normal((4, 3)) for _ in range(3))
mask = np.tril(np.ones((4, 4), dtype=bool))
head_loss = lambda q, k, v: gr.sum(D.head(q, k, v, mask) ** 2)  # noqa: E731
display(gr.trace_grad(head_loss, Q, K, V, argnums=(0, 1, 2)))
