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
"""
from __future__ import annotations

import copy

import nbformat


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
    nb = copy.deepcopy(submitted)
    nb.cells = cells
    nb.metadata = copy.deepcopy(release.metadata)
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
