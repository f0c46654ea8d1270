"""The code of a chapter's solution cells, read from its text form, and rewrites of that code: what
tests/mutants/ and tests/alternatives/ make their variants from, so that each variant follows the solution as
the solution changes, and a replacement that no longer matches fails loudly, here, naming itself."""
from __future__ import annotations

import functools
from pathlib import Path

from autograder.build.source_format import notebook_from_text

SOURCE = Path(__file__).resolve().parents[2] / "source"
_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def solution_cells(text_form: Path, chapter: str) -> dict[str, str]:
    """{exercise: its solution cell's code, solution markers removed} of the text form at `text_form`, read
    by the build's own parser (a test's own chapter as well as the course's)."""
    nb = notebook_from_text(text_form, chapter)
    cells = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade"):
            code = "\n".join(line for line in cell.source.splitlines() if line.strip() not in _MARKERS)
            cells[meta["grade_id"]] = code.strip("\n") + "\n"
    return cells


@functools.cache
def _solution_cells(chapter: str) -> dict[str, str]:
    return solution_cells(SOURCE / chapter / f"{chapter}.py", chapter)


def solution(chapter: str, exercise: str) -> str:
    """The code of `exercise`'s solution cell in source/<chapter>/<chapter>.py, solution markers removed."""
    cells = _solution_cells(chapter)
    if exercise not in cells:
        raise ValueError(f"source/{chapter}/{chapter}.py has no solution cell {exercise!r}")
    return cells[exercise]


def rewrite(code: str, *replacements: tuple[str, str], what: str, every: bool = False) -> str:
    """`code` with each (old, new) made: `old` must occur exactly once, or, with every=True, at least once
    (and each occurrence is replaced). `what` names the variant in the error."""
    for old, new in replacements:
        count = code.count(old)
        if count == 0 or (count > 1 and not every):
            raise ValueError(f"{what}: {old!r} occurs {count} times in the solution")
        code = code.replace(old, new)
    return code
