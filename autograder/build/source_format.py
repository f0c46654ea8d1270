"""From a chapter's text form (jupytext percent format) to an nbgrader source notebook.

A chapter is written as `source/NN_name/NN_name.py`. Cell headers carry short keys
that this module expands into nbgrader's metadata:

    # %% solution="ex_id"              the student's answer cell for exercise ex_id
    # %% ... reference=true            a code cell (given or solution) that joins the
                                       reference framework later chapters run on
    # %% tests="ex_id" points=2        its tests: visible ones, then ### BEGIN HIDDEN TESTS
    # %% [markdown] manual="q_id" points=2   a written answer, graded by hand
    # %% free=true                     a scratch cell the student may edit freely
    every other cell                   read-only (locked), so grading restores it

Cell ids are derived from the chapter id and position, so a rebuild writes the same bytes.
"""
from __future__ import annotations

import copy
from pathlib import Path

import jupytext
import nbformat

SCHEMA = 3
_OUR_KEYS = ("solution", "tests", "manual", "points", "reference", "free")
_JUPYTEXT_NOISE = ("lines_to_next_cell", "lines_to_end_of_cell_marker", "cell_marker", "title")


class SourceError(Exception):
    pass


def _nbgrader(grade_id: str, *, grade: bool, solution: bool, locked: bool, points=None) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": SCHEMA,
            "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    return meta


_PARSED: dict[tuple[str, str, str], nbformat.NotebookNode] = {}


def notebook_from_text(path: Path, chapter_id: str) -> nbformat.NotebookNode:
    """The nbgrader source notebook of a chapter's text form: metadata, cell ids and nbgrader markers from the
    cell headers; SourceError naming a bad header. A text parsed before in this process is not parsed again (the
    build makes chapter N's reference package from chapters 0 to N-1: jupytext's parse was half its time)."""
    text = Path(path).read_text()
    key = (str(path), chapter_id, text)
    if key not in _PARSED:
        _PARSED[key] = _parse(path, chapter_id, text)
    return copy.deepcopy(_PARSED[key])


def _parse(path: Path, chapter_id: str, text: str) -> nbformat.NotebookNode:
    nb = jupytext.reads(text, fmt="py:percent")
    course = nb.metadata.get("course", {})
    if course.get("chapter") != chapter_id:
        raise SourceError(f"{path}: its header must say `course: chapter: {chapter_id}`.")
    nb.metadata = nbformat.from_dict({
        "course": course,
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    })
    seen: set[str] = set()
    for index, cell in enumerate(nb.cells):
        keys = {k: cell.metadata.pop(k) for k in _OUR_KEYS if k in cell.metadata}
        for noise in _JUPYTEXT_NOISE:
            cell.metadata.pop(noise, None)
        unknown = set(cell.metadata) - {"tags"}
        if unknown:
            raise SourceError(f"{path}: cell {index} has unknown header keys {sorted(unknown)}; "
                              f"known keys: {', '.join(_OUR_KEYS)}.")
        where = f"{path}: cell {index}"
        if "solution" in keys:
            grade_id = keys["solution"]
            cell.metadata["nbgrader"] = _nbgrader(grade_id, grade=False, solution=True, locked=False)
            if "### BEGIN SOLUTION" not in cell.source:
                raise SourceError(f"{where} ({grade_id}) has no ### BEGIN SOLUTION region.")
        elif "tests" in keys:
            grade_id = f"{keys['tests']}_tests"
            if "points" not in keys:
                raise SourceError(f"{where} ({grade_id}) needs points=N.")
            cell.metadata["nbgrader"] = _nbgrader(grade_id, grade=True, solution=False, locked=True,
                                                  points=keys["points"])
            # JupyterLab's Run All goes on past a cell tagged raises-exception: a failing visible test shows
            # its error, and the cells after it (check() at the end) still run. The grader and check() read
            # the error from the cell's output as before.
            tags = cell.metadata.setdefault("tags", [])
            if "raises-exception" not in tags:
                tags.append("raises-exception")
        elif "manual" in keys:
            grade_id = keys["manual"]
            cell.metadata["nbgrader"] = _nbgrader(grade_id, grade=True, solution=True, locked=False,
                                                  points=keys.get("points", 1))
        elif keys.get("free"):
            grade_id = f"{chapter_id}_free{index:02d}"
        else:
            grade_id = f"{chapter_id}_c{index:02d}"
            cell.metadata["nbgrader"] = _nbgrader(grade_id, grade=False, solution=False, locked=True)
        if keys.get("reference"):
            if cell.cell_type != "code":
                raise SourceError(f"{where}: only code cells can join the reference framework.")
            cell.metadata["course"] = {"reference": True}
        if grade_id in seen:
            raise SourceError(f"{where}: id {grade_id!r} is used twice.")
        seen.add(grade_id)
        cell.id = grade_id.replace("_", "-")
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.validate(nb)
    return nb


def dumps(nb) -> str:
    """The one serialisation used for every notebook the build writes."""
    return nbformat.writes(nb, version=4) + "\n"
