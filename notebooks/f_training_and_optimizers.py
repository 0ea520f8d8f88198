# %% [markdown]
# # F. Training: accumulation, data parallelism, XOR, optimizers and makemore
#
# Gradient accumulation and two simulated data-parallel ranks, XOR with the course's initialisation, the
# optimizers on an ill-conditioned quadratic, and the makemore MLP trained by hand-derived gradients and by one
# compiled step. The code is `examples/f_training.py`, `examples/f_optimizers.py`, `examples/f_makemore_backprop.py`
# and `examples/f_makemore_training.py`; `python examples/f_data_parallel.py` runs real data parallelism on two
# processes (it starts them, so it is not run here).

# %%
import course
import f_makemore_backprop as FB
import f_makemore_training as FM
import f_optimizers as FO
import f_training as F

# %%
figures = F.main(out=course.OUT / "f")
course.show_files(figures["files"])

# %%
optimizers = FO.main(out=course.OUT / "f")
course.show_files(optimizers["files"])

# %% [markdown]
# makemore on names.txt (when the course's dataset is beside the repository): 1,000 steps here; the reference runs
# are 200,000 steps (`--steps 200000`).

# %%
if course.NAMES.exists():
    backprop = FB.main(["--data", str(course.NAMES), "--steps", "1000", "--out", str(course.OUT / "f")])
    course.show_files(backprop["files"])
    trained = FM.main(["--data", str(course.NAMES), "--steps", "1000", "--out", str(course.OUT / "f")])
    course.show_files(trained["files"])
else:
    print(f"names.txt not found at {course.NAMES}: the makemore part needs the course's dataset")
