# %% [markdown]
# # A. One scalar expression, three ways
#
# `L = tanh(a*b + a)` at a = 1.5, b = -2: a micrograd-style tape, gradir's IR (the tape *is* a graph; `a` is read
# twice, so its gradient is the sum of two paths), and numerical checks that never use autodiff. The code is
# `examples/a_scalar_three_ways.py`; this notebook runs it and draws it.

# %%
import course  # noqa: F401 - the examples folder on the import path
import a_scalar_three_ways as A
from IPython.display import display

import gradir as gr
from gradir import viz

# %% [markdown]
# What the example prints: the tape's gradients, the IR, the finite-difference sweep and its slopes, the
# complex step and its blind spots, and the two deliberate engine bugs.

# %%
figures = A.main()

# %% [markdown]
# The tape as a graph, micrograd-style: each value with its data and its gradient.

# %%
display(viz.value_diagram(A.loss, A.A, A.B))

# %% [markdown]
# Forward and backward together: the saved tensors are the orange edges; backward nodes show their schedule step
# and dependency count, and the gradients are named after their inputs (`d a`, `d b`).

# %%
display(viz.joint_diagram(gr.trace_grad(A.loss, A.A, A.B, argnums=(0, 1))))
