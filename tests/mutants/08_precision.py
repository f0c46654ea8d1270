"""Typical wrong answers to chapter 08, one dict per exercise: {what is wrong: the cell's code}, or a dict with the
code and what its message must show (tests/notebook_runs.Mutant). Each is the solution cell with one mistake put
in (`_wrong`); a replacement that no longer matches the solution fails loudly, here."""
from __future__ import annotations

from solution_text import rewrite, solution


def _wrong(exercise: str, *replacements: tuple[str, str]) -> str:
    return rewrite(solution("08_precision", exercise), *replacements, what=f"mutant of {exercise}", every=True)


MUTANTS = {
}
