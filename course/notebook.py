"""A course notebook as the checks and the grader see it: its chapter and its
exercises, read from nbgrader's cell metadata.

Conventions (the build writes them, see autograder/build/source_format.py):
- a solution cell's ``grade_id`` is the exercise id, e.g. ``ex_gradient``;
- the cell that tests it is ``<exercise>_tests`` (visible tests, then hidden ones);
- a manually graded answer is a cell that is both ``solution`` and ``grade``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

TESTS_SUFFIX = "_tests"


class NotebookError(Exception):
    """A notebook that cannot be checked or graded; the message says why and what to do."""


@dataclass
class Exercise:
    id: str
    points: float = 0.0
    manual: bool = False
    solution_cells: list[int] = field(default_factory=list)
    test_cells: list[int] = field(default_factory=list)


def read_notebook(path: str | Path) -> nbformat.NotebookNode:
    """Read a notebook, turning every way it can be unreadable into a NotebookError."""
    path = Path(path)
    if not path.exists():
        raise NotebookError(f"{path}: no such notebook. Check the path (ls {path.parent or '.'}).")
    if path.is_dir():
        raise NotebookError(f"{path} is a folder; give the path of the .ipynb file inside it.")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise NotebookError(f"{path} is not a text file, so it cannot be a notebook.") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise NotebookError(
            f"{path} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}). "
            "The file is damaged: restore it from a checkpoint (File > Revert Notebook to "
            "Checkpoint) or fetch a fresh copy from release/."
        ) from None
    if not isinstance(raw, dict) or "cells" not in raw:
        raise NotebookError(f"{path} is JSON but not a Jupyter notebook (it has no 'cells').")
    try:
        return nbformat.reads(text, as_version=4)
    except Exception as e:  # nbformat raises several types for malformed notebooks
        raise NotebookError(f"{path} is not a valid notebook: {e}") from None


def chapter_of(nb) -> str | None:
    return nb.metadata.get("course", {}).get("chapter")


def expect_chapter(nb, chapter: str, path) -> None:
    found = chapter_of(nb)
    if found != chapter:
        what = f"chapter {found}" if found else "not a notebook of this course"
        raise NotebookError(
            f"{path} is {what}, but {chapter} was expected. "
            f"Open or submit release/{chapter}/{chapter}.ipynb instead."
        )


def exercises(nb) -> dict[str, Exercise]:
    """Exercises in notebook order, keyed by id."""
    found: dict[str, Exercise] = {}
    for index, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        grade_id = meta.get("grade_id")
        if not grade_id:
            continue
        if meta.get("solution") and meta.get("grade"):
            found.setdefault(grade_id, Exercise(grade_id)).manual = True
            found[grade_id].points = float(meta.get("points", 0))
            found[grade_id].solution_cells.append(index)
        elif meta.get("solution"):
            found.setdefault(grade_id, Exercise(grade_id)).solution_cells.append(index)
        elif meta.get("grade") and grade_id.endswith(TESTS_SUFFIX):
            ex = found.setdefault(grade_id[: -len(TESTS_SUFFIX)], Exercise(grade_id[: -len(TESTS_SUFFIX)]))
            ex.test_cells.append(index)
            ex.points += float(meta.get("points", 0))
    return found
