# %% [markdown]
# # J. The engine: dependency counting, fused kernels, and gradients as rulers
#
# The dependency rule in gradir's own backward schedule (x used by two branches: its accumulation's count 2 -> 1
# -> 0), probes on example I's decoder, saved values and FLOPs per token; what `gr.compile` makes of a training
# step; the makemore backward with three mistakes switched on, each located by the per-intermediate table. The
# code is `examples/j_engine_probes_counting.py`, `examples/j_fused_kernels.py` and
# `examples/j_wrong_steps_and_rulers.py`.

# %%
import course
import j_engine_probes_counting as J
import j_fused_kernels as JK
import j_wrong_steps_and_rulers as JW
from IPython.display import display

import gradir as gr

# %%
figures = J.main()

# %% [markdown]
# The two-branch graph: `x` feeds two branches, so its gradient's accumulation waits for a count of 2. Each
# backward node shows its schedule step and initial dependency count; the player steps through them.

# %%
display(gr.trace_grad(J.two_branches, J.W0))

# %%
kernels = JK.main()

# %%
rulers = JW.main(["--data", str(course.NAMES)] if course.NAMES.exists() else [])
