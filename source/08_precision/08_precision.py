# ---
# jupyter:
#   course:
#     chapter: 08_precision
#     title: Precision and profiling
#     files:
#     - figures/bit_layouts.svg
# ---

# %% [markdown]
# # Chapter 08 — Precision and profiling
#
# Training in 16 bits halves the memory of every activation and, on a GPU,
# runs the matrix products on tensor cores several times faster. It also
# breaks things: sums stop growing, large logits overflow, small gradients
# vanish. Torch's answer is **automatic mixed precision** (AMP): run the
# products in 16 bits, keep what needs range or accuracy in 32, and scale the
# loss so that gradients stay representable. The second half of the chapter
# measures where the time goes: a **profiler** of your own.
#
# Both are the dispatcher's payoff. In torch, autocast **is** a dispatch key
# (`AutocastCPU`, `AutocastCUDA`) and the profiler records at the dispatcher.
#
# **Time:** about 4 hours.
#
# **How this notebook works.** Cells with *YOUR CODE HERE* are yours, each
# followed by its tests. The visible tests name each rule the prose states;
# at grading, hidden tests try the same rules on random inputs. `check()`
# (last cell) checks the saved notebook as the grader will.
#
# **Your chapters 01–07.** `picotorch` in this folder is the course's reference
# solution of chapters 01 to 07 (`course use-mine 08_precision` runs this
# chapter on yours).

# %%
import os

# One thread each for NumPy's BLAS and torch: the products here are small (the grader asks for one too).
for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

import numpy as np
import torch

from course import Checker, compare, inputs
from course.testing import describe, for_random_inputs, same_call

check = Checker("08_precision")

# %% [markdown]
# ## 1. What we start from
#
# The next cell imports what chapters 01–07 built.

# %% reference=true
import numpy as np
import torch

from picotorch import DispatchKey, Tensor, dispatch, from_numpy, from_torch, redispatch, register_kernel

# %% [markdown]
# ## 2. Two half-precision dtypes

# %% [markdown]
# ## 3. Where half precision breaks

# %% [markdown]
# ## 4. Autocast is a dispatch key

# %% [markdown]
# ## 5. Loss scaling

# %% reference=true
# The names of this chapter that later chapters (and the course's benchmarks and widgets) may use.
__all__ = []

# %% [markdown]
# ## Check your work
#
# Save the notebook (Ctrl+S), then run the cell below: it re-runs the saved
# file in a fresh kernel, as the grader will, and lists every exercise.

# %%
check()
