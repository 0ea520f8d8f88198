# %% [markdown]
# # C. Forward mode against reverse mode
#
# One gradient of `L = tanh(x0*x1 + x2*x2 + x3*x3)` two ways: forward mode (`gr.jvp`, one seed per input) and
# reverse mode (`gr.grad`, one backward pass), with the operation counts read off the IR. The code is
# `examples/c_forward_vs_reverse.py`.

# %%
import course  # noqa: F401 - the examples folder on the import path
import c_forward_vs_reverse as C
from IPython.display import display

import gradir as gr

# %%
figures = C.main()

# %% [markdown]
# The forward program, and the joint forward+backward graph reverse mode builds from it.

# %%
point = (0.5, -1.0, 0.25, 2.0)
display(gr.trace(C.loss, *point))
display(gr.viz.joint_diagram(gr.trace_grad(C.loss, *point, argnums=(0, 1, 2, 3))))
