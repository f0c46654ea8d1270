"""A course notebook as the checks and the grader see it: its chapter and its
exercises, read from nbgrader's cell metadata.

Conventions (the build writes them, see autograder/build/source_format.py):
- a solution cell's ``grade_id`` is the exercise id, e.g. ``ex_gradient``;
- the cell that tests it is ``<exercise>_tests`` (visible tests, then hidden ones);
- a manually graded answer is a cell that is both ``solution`` and ``grade``.
"""
from __future__ import annotations

import ast
import json
import re
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
    """The chapter id a course notebook names in its metadata, or None for another notebook."""
    return nb.metadata.get("course", {}).get("chapter")


def expect_chapter(nb, chapter: str, path) -> None:
    """NotebookError unless `nb` (read from `path`) is a notebook of chapter `chapter`."""
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


def _top_level_names(source: str) -> list[str]:
    """The names a cell binds at its top level (def, class, assignment, import); none if it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"]
    return names


_EXERCISE_HEADING = re.compile(r"^#+ Exercise (\d+)", re.M)


def exercise_number(nb, ex: Exercise, order: int) -> int:
    """The number the prose gives the exercise (the last "## Exercise N" heading above its answer cell), or
    its place in the notebook where no heading numbers it."""
    for cell in reversed(nb.cells[: ex.solution_cells[0] + 1] if ex.solution_cells else []):
        if cell.cell_type == "markdown" and (found := _EXERCISE_HEADING.findall(cell.source)):
            return int(found[-1])
    return order


def exercise_defining(nb) -> dict[str, tuple[int, str]]:
    """name -> (number, id) of the exercise whose answer cell defines it: what a test that fails with a
    NameError of that name needs done first."""
    found: dict[str, tuple[int, str]] = {}
    for order, ex in enumerate(exercises(nb).values(), start=1):
        number = exercise_number(nb, ex, order)
        for i in ex.solution_cells:
            for name in _top_level_names(nb.cells[i].source):
                found.setdefault(name, (number, ex.id))
    return found
