"""A tiny two-chapter course written in the text form, for tests of the build and the checks."""
from __future__ import annotations

from pathlib import Path

ALPHA = '''# ---
# jupyter:
#   course:
#     chapter: 01_alpha
#     files: [data.txt]
# ---

# %% [markdown]
# # Alpha

# %% reference=true
class Box:
    """Given code that later chapters build on."""
    def __init__(self, value):
        self.value = value


# %% solution="ex_double" reference=true
def double(box):
    ### BEGIN SOLUTION
    return Box(box.value * 2)
    ### END SOLUTION


# %% tests="ex_double" points=1
assert double(Box(3)).value == 6, "double(Box(3)) should hold 6"
### BEGIN HIDDEN TESTS
assert double(Box(-4)).value == -8, "double(Box(-4)) should hold -8"
### END HIDDEN TESTS

# %% solution="ex_text"
def read_data():
    ### BEGIN SOLUTION
    return open("data.txt").read().strip()
    ### END SOLUTION


# %% tests="ex_text" points=2
assert read_data() == "hello", f"read_data() gave {read_data()!r}, expected 'hello'"
'''

BETA = '''# ---
# jupyter:
#   course:
#     chapter: 02_beta
# ---

# %%
from picotorch import Box, double

# %% solution="ex_quadruple"
def quadruple(box):
    ### BEGIN SOLUTION
    return double(double(box))
    ### END SOLUTION


# %% tests="ex_quadruple" points=1
assert quadruple(Box(1)).value == 4, "quadruple(Box(1)) should hold 4"
'''


def write(root: Path) -> Path:
    """A course folder at `root` with chapters 01_alpha and 02_beta; returns root."""
    for chapter, text in [("01_alpha", ALPHA), ("02_beta", BETA)]:
        folder = root / "source" / chapter
        folder.mkdir(parents=True)
        (folder / f"{chapter}.py").write_text(text)
    (root / "source" / "01_alpha" / "data.txt").write_text("hello\n")
    (root / "source" / "01_alpha" / "notes-for-instructors.md").write_text("not for students\n")
    return root
