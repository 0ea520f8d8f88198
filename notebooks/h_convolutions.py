# %% [markdown]
# # H. Convolutions
#
# The output-size formula against `gr.nn.conv2d`, a small CNN (two convolutions, pooling, a linear layer)
# differentiated with `gr.grad` and checked against PyTorch and central differences, and max against average
# pooling's backward. The code is `examples/h_convolutions.py`.

# %%
import course  # noqa: F401 - the examples folder on the import path
import h_convolutions as H
from IPython.display import display

import gradir as gr

# %%
figures = H.main()

# %% [markdown]
# The CNN's layers as gradir traces them (each box an op with its shape).

# %%
params, x, labels = H.init()
display(gr.trace(H.cnn_loss, x, *params.values(), labels))
