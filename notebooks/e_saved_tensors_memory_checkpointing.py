# %% [markdown]
# # E. What backward keeps: saved tensors, the schedule, memory and recomputation
#
# What each op's backward rule keeps, the backward schedule of `sum(tanh(a*b + a))` step by step (dependency
# counts, the ready queue; dL/da waits for two contributions), its memory timeline, twelve residual MLP blocks
# under both schedules, recompute plans, and what the eager `gr.Tensor` keeps. The code is
# `examples/e_saved_tensors_and_memory.py`, `examples/e_checkpointing.py` and `examples/e_what_backward_keeps_eager.py`.

# %%
import course
import e_checkpointing as EC
import e_saved_tensors_and_memory as E
import e_what_backward_keeps_eager as EK
from IPython.display import display

import gradir as gr
from gradir import viz
from gradir.viz.plots import memory_timeline_figure

# %%
figures = E.main(out=course.OUT / "e")

# %% [markdown]
# The whole backward story of `sum(tanh(a*b + a))` on 3-vectors: step through the schedule with the player
# (buttons, slider or arrow keys) and watch the ready queue, the counts and the live bytes; the printed schedule
# above numbers the steps the same way.

# %%
display(gr.trace_grad(E.tanh_expr, E.VEC_A, E.VEC_B, argnums=(0, 1)))

# %% [markdown]
# The twelve residual blocks: live bytes per step under the engine's and the memory policy's schedules.

# %%
loss, params, x = E.residual_blocks()
display(memory_timeline_figure(viz.memory_plans(gr.trace_grad(loss, params, x))))

# %% [markdown]
# Recompute plans on the same blocks, and the activation timelines of no recomputation against six segments.

# %%
checkpointing = EC.main(out=course.OUT / "e")
course.show_files(checkpointing["files"])

# %% [markdown]
# The eager `gr.Tensor`: version checks, graph lifetime, accumulation, higher order; its tape drawn.

# %%
eager = EK.main(out=course.OUT / "e")
course.show_files(eager["files"])
