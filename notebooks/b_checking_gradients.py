# %% [markdown]
# # B. Checking gradients
#
# The function under test is `L(x) = sum(tanh(A @ x) ** 2)`: directional checks along random unit directions, a
# negative control a coordinate check misses, cross-entropy against `p - y`, and `gr.checks.gradcheck` of every
# differentiable primitive. The code is `examples/b_checking_gradients.py`.

# %%
import course  # noqa: F401 - the examples folder on the import path
import b_checking_gradients as B
import numpy as np
from IPython.display import display

import gradir as gr

# %%
figures = B.main()

# %% [markdown]
# The program gradir differentiates, and its backward with each node's schedule step.

# %%
x = np.random.default_rng(0).standard_normal(B.A.shape[1])
display(gr.trace(B.L, x))
display(gr.trace_grad(B.L, x).backward)
