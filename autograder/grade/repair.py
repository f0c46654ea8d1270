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
from dataclasses import dataclass, field

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
    NotebookError when it has no list of cells at all.

    Each cell goes through CELL_PASSES in order; a pass that returns None leaves the cell out."""
    notes: list[str] = []
    if "metadata" in nb and not isinstance(nb["metadata"], dict):
        nb["metadata"] = {}  # the release's replaces it in repair()
    cells = nb.get("cells")
    if not isinstance(cells, list):
        raise NotebookError(f"its 'cells' is {_kind(cells)}, not a list of cells: the file is damaged; {_FIX}")
    kept = []
    for n, cell in enumerate(cells):
        for step in CELL_PASSES:
            cell = step(cell, f"cell {n}", notes)
            if cell is None:
                break
        else:
            kept.append(cell)
    nb["cells"] = nbformat.from_dict(kept) if isinstance(nb, nbformat.NotebookNode) else kept
    return notes


# -- sanitize's passes: (cell, where, notes) -> the cell, or None to leave it out -----------------------

def keep_cells(cell, where: str, notes: list[str]):
    """Only an object with a known cell_type is a cell; anything else is left out."""
    if not isinstance(cell, dict):
        notes.append(f"{where} is {_kind(cell)}, not a notebook cell: it was left out ({_FIX})")
        return None
    if cell.get("cell_type") not in CELL_TYPES:
        notes.append(f"{where} has cell_type {cell.get('cell_type')!r}, not code, markdown or raw: it was "
                     f"left out ({_FIX})")
        return None
    return cell


def source_as_text(cell, where: str, notes: list[str]):
    """The source is one str (a list of lines is joined; anything else becomes empty)."""
    if "source" not in cell:
        notes.append(f"{where} has no source: it was graded as an empty cell ({_FIX})")
    source = cell.get("source", "")
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        source = "".join(source)
    if not isinstance(source, str):
        notes.append(f"{where}'s source is {_kind(source)}, not text: it was graded as an empty cell ({_FIX})")
        source = ""
    cell["source"] = source
    return cell


def metadata_as_object(cell, where: str, notes: list[str]):
    """The metadata is a dict (anything else is ignored)."""
    meta = cell.get("metadata", {})
    if not isinstance(meta, dict):
        notes.append(f"{where}'s metadata is {_kind(meta)}, not an object: it was ignored")
        meta = {}
    cell["metadata"] = meta
    return cell


def sound_marks(cell, where: str, notes: list[str]):
    """nbgrader marks stay only where they are an object with a grade_id that is a name."""
    meta = cell["metadata"]
    if "nbgrader" not in meta:
        return cell
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
        del meta["nbgrader"]
    if problem:
        notes.append(f"{where}: {problem}, so it grades nothing: it ran as ordinary code. If it was "
                     f"an answer, that exercise was graded as not answered; {_FIX}")
    return cell


def valid_id(cell, where: str, notes: list[str]):
    """An id that is not nbformat 4.5's kind is dropped (repair gives the cell a fresh one)."""
    if not isinstance(cell.get("id"), str) or not _CELL_ID.match(cell["id"]):
        cell.pop("id", None)
    return cell


def no_outputs(cell, where: str, notes: list[str]):
    """A code cell has empty outputs (they are never graded), other cells none at all."""
    if cell["cell_type"] == "code":
        cell["outputs"], cell["execution_count"] = [], None
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)
        if not isinstance(cell.get("attachments", {}), dict):
            del cell["attachments"]
    return cell


def known_keys(cell, where: str, notes: list[str]):
    """Only the keys nbformat's schema knows for a cell are kept."""
    for key in [k for k in cell if k not in ("cell_type", "source", "metadata", "id", "attachments",
                                             "outputs", "execution_count")]:
        del cell[key]
    return cell


CELL_PASSES = (keep_cells, source_as_text, metadata_as_object, sound_marks, valid_id, no_outputs, known_keys)


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


@dataclass
class Repair:
    """What the passes of `repair` read and build, one field each."""
    submitted: nbformat.NotebookNode
    release: nbformat.NotebookNode
    source: nbformat.NotebookNode | None = None
    notes: list[str] = field(default_factory=list)
    wanted: dict = field(default_factory=dict)          # grade_id -> the released cell
    originals: dict = field(default_factory=dict)       # grade_id -> the source notebook's text of the cell
    graded_copy: dict = field(default_factory=dict)     # answer grade_id -> index of the submitted copy graded
    answers: dict = field(default_factory=dict)         # answer grade_id -> the student's cell graded
    extras: dict = field(default_factory=dict)          # grade_id it followed (None: the top) -> the student's cells
    locked_seen: set = field(default_factory=set)       # locked grade_ids the submission has
    cells: list = field(default_factory=list)           # the notebook's cells, as rebuilt
    notebook: nbformat.NotebookNode | None = None


def repair(submitted, release, source=None) -> tuple[nbformat.NotebookNode, list[str]]:
    """(notebook to grade, notes) for a student's notebook `submitted` against `release`
    (and `source`, whose test cells, hidden tests and all, are not edits either).

    The work is done by REPAIR_PASSES, in order, each on the one `Repair` record."""
    work = Repair(submitted, release, source)
    for step in REPAIR_PASSES:
        step(work)
    return work.notebook, work.notes


# -- repair's passes: each reads and fills fields of the Repair record ------------------------------------

def index_release(r: Repair) -> None:
    """r.wanted, r.originals: the release's marked cells, and the source's text of each, by grade_id."""
    r.wanted = {_grade_id(c): c for c in r.release.cells if _grade_id(c)}
    r.originals = {_grade_id(c): c.source for c in (r.source.cells if r.source is not None else []) if _grade_id(c)}


def pick_graded_copies(r: Repair) -> None:
    """r.graded_copy: for each answer, the submitted copy that is graded: the last (the one that ran last)."""
    for i, cell in enumerate(r.submitted.cells):
        gid = _grade_id(cell)
        if gid in r.wanted and _is_answer(r.wanted[gid]):
            r.graded_copy[gid] = i


def sort_submitted(r: Repair) -> None:
    """r.answers, r.extras, r.locked_seen: each submitted cell is the graded answer, an extra that stays
    after the released cell it followed, or a pasted copy of a locked cell, left out (each noted)."""
    anchor = None
    for i, cell in enumerate(r.submitted.cells):
        gid = _grade_id(cell)
        if gid in r.wanted and _is_answer(r.wanted[gid]):
            if r.graded_copy[gid] == i:
                r.answers[gid] = cell
                anchor = gid
            else:
                r.notes.append(f"the answer cell {gid} appears more than once: the last copy was graded, "
                               "the earlier ones ran as ordinary code")
                r.extras.setdefault(anchor, []).append(_as_extra(cell, f"copy{i}"))
        elif gid in r.wanted:
            if gid in r.locked_seen:
                r.notes.append(f"a pasted copy of the locked cell {gid} was left out; the released cell was graded")
            else:
                r.locked_seen.add(gid)
                anchor = gid
        else:
            if gid:
                r.notes.append(f"a cell marked {gid!r}, which is not part of this chapter, ran as ordinary code")
                cell = _as_extra(cell, f"extra{i}")
            r.extras.setdefault(anchor, []).append(cell)


def rebuild_on_release(r: Repair) -> None:
    """r.cells: the release's cells in its order (answers the student's, locked cells the release's),
    each followed by the student's extras that followed it."""
    r.cells = list(r.extras.get(None, []))
    for cell in r.release.cells:
        gid = _grade_id(cell)
        r.cells.append(_graded_answer(r, cell) if gid and _is_answer(cell) else _released_locked(r, cell))
        if gid:
            r.cells.extend(r.extras.get(gid, []))


def _graded_answer(r: Repair, released):
    """The student's answer to `released`, with its type, marks and id (the release's stub if deleted)."""
    gid = _grade_id(released)
    mine = r.answers.get(gid)
    if mine is None:
        r.notes.append(f"the answer cell {gid} was deleted: it was graded as the release's empty stub")
        return released
    mine = copy.deepcopy(mine)
    if mine.cell_type != released.cell_type:
        r.notes.append(f"the answer cell {gid} was turned into a {mine.cell_type} cell: "
                       f"it was graded as {released.cell_type}")
        converted = copy.deepcopy(released)
        converted.source = mine.source
        mine = converted
    mine.metadata["nbgrader"] = copy.deepcopy(released.metadata["nbgrader"]) | {
        k: v for k, v in mine.metadata.get("nbgrader", {}).items() if k == "checksum"}
    mine.id = released.get("id", mine.get("id"))
    return mine


def _released_locked(r: Repair, released):
    """A copy of the released cell `released`; a test cell deleted or edited is noted."""
    gid = _grade_id(released)
    if gid and gid not in r.locked_seen and gid.endswith("_tests"):
        r.notes.append(f"the test cell {gid} was deleted: it was put back and graded")
    mine = next((c for c in r.submitted.cells if gid and _grade_id(c) == gid), None)
    if gid and mine is not None and mine.source not in (released.source, r.originals.get(gid)) \
            and gid.endswith("_tests"):
        r.notes.append(f"the test cell {gid} was edited: the released version was graded")
    return copy.deepcopy(released)


def assemble(r: Repair) -> None:
    """r.notebook: the release's notebook-level fields (metadata, format) around r.cells."""
    r.notebook = nbformat.from_dict({k: copy.deepcopy(v) for k, v in r.release.items() if k != "cells"})
    r.notebook.cells = r.cells


def fresh_ids(r: Repair) -> None:
    """Every cell id is unique, as nbformat requires: a missing or repeated one becomes cell-N."""
    ids: set[str] = set()
    for n, cell in enumerate(r.notebook.cells):
        if not cell.get("id") or cell.id in ids:
            cell.id = f"cell-{n}"
        ids.add(cell.id)


def clear_outputs(r: Repair) -> None:
    """No cell carries outputs or an execution count: only the grader's run writes them."""
    for cell in r.notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        elif "outputs" in cell:
            del cell["outputs"]


REPAIR_PASSES = (index_release, pick_graded_copies, sort_submitted, rebuild_on_release, assemble, fresh_ids,
                 clear_outputs)
