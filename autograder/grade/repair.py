"""Put a submitted notebook back into the shape of the released one before grading.

Plain nbgrader fails a whole submission over a pasted copy of a graded cell,
and silently skips a deleted test cell. Here the graded notebook is rebuilt on
the release's skeleton, in the release's order:

- every locked cell (given code and tests) comes from the release, so an edited
  or deleted test is graded as released (nbgrader then restores hidden tests);
- an answer cell is the student's, the last copy if it was pasted several times
  (the one that ran last in their kernel, as nbgrader would keep), the earlier
  copies staying as ordinary code where they were;
- a deleted answer cell comes back as the release's stub (not attempted);
- cells the student added stay, after the cell they followed.
Each repair is a note in the student's results.

Before that, `sanitize` makes sure the notebook has the shape repair and
nbgrader rely on: a notebook edited outside Jupyter can hold cells that are not
objects, a `source` that is not text, metadata or nbgrader marks that are
strings or lists, a `grade_id` that is a list or a number. What cannot be a
cell is left out, damaged marks are dropped (the cell runs as ordinary code),
and each such change is a note that names the cell and the problem.
"""
from __future__ import annotations

import copy
import re

import nbformat

from course.notebook import NotebookError

CELL_TYPES = ("code", "markdown", "raw")
_CELL_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # nbformat 4.5's cell id
_FLAGS = ("grade", "solution", "locked", "task")
_FIX = ("fetch a fresh copy of the notebook from release/ and paste your answers into it, in Jupyter")


def _kind(value) -> str:
    return {str: "a string", list: "a list", int: "a number", float: "a number", bool: "true/false",
            type(None): "null", dict: "an object"}.get(type(value), type(value).__name__)


def sanitize(nb) -> list[str]:
    """Bring a submitted notebook (its JSON, or as nbformat read it) into the shape
    repair() and nbgrader assume, in place; returns notes naming every change. Raises
    NotebookError when it has no list of cells at all."""
    notes: list[str] = []
    if "metadata" in nb and not isinstance(nb["metadata"], dict):
        nb["metadata"] = {}  # the release's replaces it in repair()
    cells = nb.get("cells")
    if not isinstance(cells, list):
        raise NotebookError(f"its 'cells' is {_kind(cells)}, not a list of cells: the file is damaged; {_FIX}")
    kept = []
    for n, cell in enumerate(cells):
        where = f"cell {n}"
        if not isinstance(cell, dict):
            notes.append(f"{where} is {_kind(cell)}, not a notebook cell: it was left out ({_FIX})")
            continue
        if cell.get("cell_type") not in CELL_TYPES:
            notes.append(f"{where} has cell_type {cell.get('cell_type')!r}, not code, markdown or raw: it was "
                         f"left out ({_FIX})")
            continue
        if "source" not in cell:
            notes.append(f"{where} has no source: it was graded as an empty cell ({_FIX})")
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            source = "".join(source)
        if not isinstance(source, str):
            notes.append(f"{where}'s source is {_kind(source)}, not text: it was graded as an empty cell ({_FIX})")
            source = ""
        cell["source"] = source
        meta = cell.get("metadata", {})
        if not isinstance(meta, dict):
            notes.append(f"{where}'s metadata is {_kind(meta)}, not an object: it was ignored")
            meta = {}
        cell["metadata"] = meta
        if "nbgrader" in meta:
            marks = meta["nbgrader"]
            gid = marks.get("grade_id") if isinstance(marks, dict) else None
            problem = None
            if not isinstance(marks, dict):
                problem = f"its nbgrader marks (metadata.nbgrader) are {_kind(marks)}, not an object"
            elif "grade_id" in marks and gid is not None and not (isinstance(gid, str) and gid):
                problem = f"its grade_id is {_kind(gid)} ({gid!r:.60}), not a name"
            elif not (isinstance(gid, str) and gid) and any(marks.get(f) for f in _FLAGS):
                problem = "it is marked for grading but has no grade_id"
            elif isinstance(gid, str) and gid:
                if "checksum" in marks and not isinstance(marks["checksum"], str):
                    del marks["checksum"]
            if problem or not (isinstance(gid, str) and gid):
                del cell["metadata"]["nbgrader"]
            if problem:
                notes.append(f"{where}: {problem}, so it grades nothing: it ran as ordinary code. If it was "
                             f"an answer, that exercise was graded as not answered; {_FIX}")
        if not isinstance(cell.get("id"), str) or not _CELL_ID.match(cell["id"]):
            cell.pop("id", None)  # repair gives it a fresh one
        if cell["cell_type"] == "code":  # outputs are never graded (repair clears them): none can be damaged
            cell["outputs"], cell["execution_count"] = [], None
        else:
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
            if not isinstance(cell.get("attachments", {}), dict):
                del cell["attachments"]
        for key in [k for k in cell if k not in ("cell_type", "source", "metadata", "id", "attachments",
                                                 "outputs", "execution_count")]:
            del cell[key]
        kept.append(cell)
    nb["cells"] = nbformat.from_dict(kept) if isinstance(nb, nbformat.NotebookNode) else kept
    return notes


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _is_answer(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("solution"))


def _as_extra(cell, suffix: str):
    """A student's cell stripped of nbgrader's marks: it runs, but grades nothing."""
    cell = copy.deepcopy(cell)
    cell.metadata.pop("nbgrader", None)
    cell.id = f"{cell.get('id', 'cell')}-{suffix}"[:64]
    return cell


def repair(submitted, release, source=None) -> tuple[nbformat.NotebookNode, list[str]]:
    """(notebook to grade, notes) for a student's notebook `submitted` against `release`
    (and `source`, whose test cells, hidden tests and all, are not edits either)."""
    notes: list[str] = []
    originals = {_grade_id(c): c.source for c in (source.cells if source is not None else []) if _grade_id(c)}
    wanted = {}
    for cell in release.cells:
        gid = _grade_id(cell)
        if gid:
            wanted[gid] = cell
    last_answer: dict[str, int] = {}
    for i, cell in enumerate(submitted.cells):
        gid = _grade_id(cell)
        if gid in wanted and _is_answer(wanted[gid]):
            last_answer[gid] = i
    anchored: dict[str | None, list] = {}
    seen_locked: set[str] = set()
    anchor = None
    answers = {}
    for i, cell in enumerate(submitted.cells):
        gid = _grade_id(cell)
        if gid in wanted:
            if _is_answer(wanted[gid]):
                if last_answer[gid] == i:
                    answers[gid] = cell
                    anchor = gid
                else:
                    notes.append(f"the answer cell {gid} appears more than once: the last copy was graded, "
                                 "the earlier ones ran as ordinary code")
                    anchored.setdefault(anchor, []).append(_as_extra(cell, f"copy{i}"))
                continue
            if gid in seen_locked:
                notes.append(f"a pasted copy of the locked cell {gid} was left out; the released cell was graded")
                continue
            seen_locked.add(gid)
            anchor = gid
            continue
        if gid:
            notes.append(f"a cell marked {gid!r}, which is not part of this chapter, ran as ordinary code")
            cell = _as_extra(cell, f"extra{i}")
        anchored.setdefault(anchor, []).append(cell)

    cells = list(anchored.get(None, []))
    for cell in release.cells:
        gid = _grade_id(cell)
        if gid and _is_answer(cell):
            mine = answers.get(gid)
            if mine is None:
                notes.append(f"the answer cell {gid} was deleted: it was graded as the release's empty stub")
                mine = cell
            else:
                mine = copy.deepcopy(mine)
                if mine.cell_type != cell.cell_type:
                    notes.append(f"the answer cell {gid} was turned into a {mine.cell_type} cell: "
                                 f"it was graded as {cell.cell_type}")
                    converted = copy.deepcopy(cell)
                    converted.source = mine.source
                    mine = converted
                mine.metadata["nbgrader"] = copy.deepcopy(cell.metadata["nbgrader"]) | {
                    k: v for k, v in mine.metadata.get("nbgrader", {}).items() if k == "checksum"}
                mine.id = cell.get("id", mine.get("id"))
            cells.append(mine)
        else:
            if gid and gid not in seen_locked and gid.endswith("_tests"):
                notes.append(f"the test cell {gid} was deleted: it was put back and graded")
            mine = next((c for c in submitted.cells if gid and _grade_id(c) == gid), None)
            if gid and mine is not None and mine.source not in (cell.source, originals.get(gid)) \
                    and gid.endswith("_tests"):
                notes.append(f"the test cell {gid} was edited: the released version was graded")
            cells.append(copy.deepcopy(cell))
        if gid:
            cells.extend(anchored.get(gid, []))
    nb = nbformat.from_dict({k: copy.deepcopy(v) for k, v in release.items() if k != "cells"})
    nb.cells = cells
    ids: set[str] = set()
    for n, cell in enumerate(nb.cells):  # ids must be unique for nbformat; copies get fresh ones
        if not cell.get("id") or cell.id in ids:
            cell.id = f"cell-{n}"
        ids.add(cell.id)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        elif "outputs" in cell:
            del cell["outputs"]
    return nb, notes
