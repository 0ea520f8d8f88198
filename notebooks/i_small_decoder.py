# %% [markdown]
# # I. A small decoder
#
# A two-block pre-LayerNorm decoder (2-head causal attention, GELU MLP, tied embedding, 5,432 float64 weights):
# `gr.grad` against PyTorch autograd and central differences on 300 sampled entries, and a changed future token
# that leaves earlier logits unchanged. The code is `examples/i_small_decoder.py`.

# %%
import course  # noqa: F401 - the examples folder on the import path
import i_small_decoder as I  # noqa: E741
from IPython.display import display

import gradir as gr

# %%
figures = I.main()

# %% [markdown]
# The decoder's backward story: saved tensors, the schedule (step through it), the memory plan.

# %%
tokens, targets = I.data()
display(gr.trace_grad(I.loss_fn, I.init_params(), tokens, targets))
