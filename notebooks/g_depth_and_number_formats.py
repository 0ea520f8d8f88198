# %% [markdown]
# # G. Depth and number formats
#
# Gradients through tanh and ReLU chains of depth 1-100, float16 rounding of gradients, static and dynamic loss
# scaling, fp16 weights against an fp32 master copy, bfloat16's range and gap, Adam's bytes per parameter. The
# code is `examples/g_depth_and_number_formats.py`.

# %%
import course  # noqa: F401 - the examples folder on the import path
import g_depth_and_number_formats as G
from IPython.display import display

import gradir as gr

# %%
figures = G.main()

# %% [markdown]
# A tanh chain of depth 4 at w = 3 and its backward: every step multiplies the gradient by w * (1 - tanh^2).

# %%
display(gr.viz.joint_diagram(gr.trace_grad(G.chain(gr.tanh, 3.0, 4), 0.5)))
