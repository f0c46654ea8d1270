"""Given code comes in pieces of at most a screen (issue 36: one idea at a time).

A given code cell (neither a student's answer cell nor a test cell) of any chapter holds at most
GIVEN_CELL_LINES lines: a longer one is split at a natural seam (a class per cell, a group of related
functions) with a short paragraph before each piece. Static: it reads the built source notebooks, which
test_build.py::test_release_is_in_sync keeps in step with the text forms.
"""
from __future__ import annotations

import nbformat
import pytest

from conftest import CHAPTERS

GIVEN_CELL_LINES = 60  # about a screen


def long_given_cells(nb, limit: int = GIVEN_CELL_LINES) -> list[str]:
    """`cell N (L lines, starts "...")` for each given code cell of nb longer than `limit` lines."""
    found = []
    for index, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("solution") or meta.get("grade"):
            continue
        lines = cell.source.splitlines()
        if len(lines) > limit:
            found.append(f"cell {index} ({len(lines)} lines, starts {lines[0][:60]!r})")
    return found


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.id for c in CHAPTERS])
def test_no_given_code_cell_is_longer_than_a_screen(chapter):
    found = long_given_cells(nbformat.read(chapter.notebook, as_version=4))
    assert not found, (f"{chapter.id}: given code cells over {GIVEN_CELL_LINES} lines: " + "; ".join(found)
                       + f". Split each at a natural seam in source/{chapter.id}/{chapter.id}.py, a short "
                       "paragraph before each piece (a piece of a reference=true cell stays reference=true).")


def test_the_check_sees_a_long_given_cell_and_ignores_answers_and_tests():
    long = "\n".join(f"x{i} = {i}" for i in range(GIVEN_CELL_LINES + 1))
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(long),
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell(long, metadata={"nbgrader": {"solution": True, "grade": False}}),
        nbformat.v4.new_code_cell(long, metadata={"nbgrader": {"solution": False, "grade": True}}),
        nbformat.v4.new_code_cell(long, metadata={"nbgrader": {"solution": False, "grade": False, "locked": True}}),
        nbformat.v4.new_code_cell(long),
    ])
    assert long_given_cells(nb) == [f"cell 4 ({GIVEN_CELL_LINES + 1} lines, starts 'x0 = 0')",
                                    f"cell 5 ({GIVEN_CELL_LINES + 1} lines, starts 'x0 = 0')"]
    assert long_given_cells(nb, limit=GIVEN_CELL_LINES + 1) == []
