"""The code of a chapter's solution cells, read from its text form, and rewrites of that code: what
tests/mutants/ and tests/alternatives/ make their variants from, so that each variant follows the solution as
the solution changes, and a replacement that no longer matches fails loudly, here, naming itself."""
from __future__ import annotations

import re
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "source"
_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def solution(chapter: str, exercise: str) -> str:
    """The code of `exercise`'s solution cell in source/<chapter>/<chapter>.py, solution markers removed."""
    text = (SOURCE / chapter / f"{chapter}.py").read_text()
    header = re.search(rf'^# %% solution="{exercise}".*$', text, re.M)
    if header is None:
        raise ValueError(f"source/{chapter}/{chapter}.py has no solution cell {exercise!r}")
    body = text[header.end():]
    body = body[:re.search(r"^# %%", body, re.M).start()]
    return "\n".join(line for line in body.splitlines()
                     if not any(marker in line for marker in _MARKERS)).strip("\n") + "\n"


def rewrite(code: str, *replacements: tuple[str, str], what: str, every: bool = False) -> str:
    """`code` with each (old, new) made: `old` must occur exactly once, or, with every=True, at least once
    (and each occurrence is replaced). `what` names the variant in the error."""
    for old, new in replacements:
        count = code.count(old)
        if count == 0 or (count > 1 and not every):
            raise ValueError(f"{what}: {old!r} occurs {count} times in the solution")
        code = code.replace(old, new)
    return code
