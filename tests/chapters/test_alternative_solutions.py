"""The tests are no stricter than torch: correct answers written differently from the course's solution
(tests/alternatives/<chapter>.py: other loops, other algorithms, other error messages where the chapter
asks only for torch's exception type) earn every automatic point, hidden tests included.

All alternatives of a chapter run in one process (tests/support/run_variants.py), as the typical mistakes do, packed
into as few notebooks as hold them (`packed`)."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from autograder.chapters import Chapter
from conftest import CHAPTERS
from course.notebook import exercises
from course.verdicts import verdict_from_error
from notebook_runs import chapter_file, chapter_group, run_variants

pytestmark = pytest.mark.slow
ALTERNATIVES_DIR = Path(__file__).resolve().parents[1] / "alternatives"
GRADED_CHAPTERS = [c for c in CHAPTERS if c.id != "00_tour"]  # the tour's exercises are torch code of one line


def alternatives_of(chapter: Chapter) -> dict[str, dict[str, str]]:
    """{what is different: {exercise: the code of its cell}} from tests/alternatives/<chapter>.py."""
    module = chapter_file(ALTERNATIVES_DIR, chapter)
    return {} if module is None else module.ALTERNATIVES


def alternative_cells(chapter: Chapter, cells: dict[str, str]) -> list[str]:
    """The source notebook's code cells with each named exercise's solution cell replaced, up to the last test cell."""
    nb = nbformat.read(chapter.notebook, as_version=4)
    by_id = exercises(nb)
    sources = [c.source if c.cell_type == "code" else "" for c in nb.cells]
    for exercise, code in cells.items():
        (index,) = by_id[exercise].solution_cells
        sources[index] = code.strip("\n")
    last = max(i for ex in by_id.values() if not ex.manual for i in ex.test_cells)
    return sources[:last + 1]


def packed(alternatives: dict[str, dict[str, str]]) -> list[dict[str, str]]:
    """The alternatives in as few notebooks as hold them, no notebook with two of one exercise: {exercise: the
    alternative's name} each. One notebook an alternative, each would run the rest of the chapter (its emulator's
    launches, its training) again from its exercise on; packed, every exercise is still judged on its own."""
    notebooks: list[dict[str, str]] = []
    for name, cells in alternatives.items():
        home = next((nb for nb in notebooks if not set(cells) & set(nb)), None)
        if home is None:
            home = {}
            notebooks.append(home)
        home.update(dict.fromkeys(cells, name))
    return notebooks


def verdicts_of_alternatives(chapter: Chapter, alternatives: list[dict[str, str]]) -> list[dict[str, tuple[str, str]]]:
    """For each alternative, {exercise: (status, message)} of every automatic exercise."""
    by_id = exercises(nbformat.read(chapter.notebook, as_version=4))
    results = []
    for errors in run_variants(chapter, [alternative_cells(chapter, cells) for cells in alternatives]):
        by_cell = {index: (name, message) for index, name, message in errors}
        verdicts = {}
        for ex in by_id.values():
            if ex.manual:
                continue
            status, message = "passed", ""
            for i in list(ex.solution_cells) + list(ex.test_cells):
                status, message = verdict_from_error(ex.id, by_cell.get(i))
                if status != "passed":
                    break
            verdicts[ex.id] = status, message
        results.append(verdicts)
    return results


def test_every_chapter_has_alternative_solutions():
    for chapter in GRADED_CHAPTERS:
        alternatives = alternatives_of(chapter)
        assert len(alternatives) >= 2, f"{chapter.id}: tests/alternatives/{chapter.id}.py needs at least two alternatives"
        auto = {e for e, ex in exercises(nbformat.read(chapter.notebook, as_version=4)).items() if not ex.manual}
        for name, cells in alternatives.items():
            assert cells and set(cells) <= auto, f"{chapter.id}: {name!r} replaces {set(cells) - auto or 'nothing'}"


@pytest.mark.parametrize("chapter", [pytest.param(c, id=c.id, marks=chapter_group(c)) for c in GRADED_CHAPTERS])
def test_alternative_solutions_earn_every_point(chapter):
    alternatives = alternatives_of(chapter)
    if not alternatives:
        pytest.skip(f"no tests/alternatives/{chapter.id}.py (test_every_chapter_has_alternative_solutions fails)")
    notebooks = packed(alternatives)
    verdicts = verdicts_of_alternatives(chapter, [{ex: alternatives[name][ex] for ex, name in nb.items()}
                                                  for nb in notebooks])
    lost = [f"{nb.get(exercise) or 'the solution, after ' + '; '.join(dict.fromkeys(nb.values()))}: {exercise}: "
            f"{status}: {message}" for nb, by_exercise in zip(notebooks, verdicts)
            for exercise, (status, message) in by_exercise.items() if status != "passed"]
    assert not lost, f"{chapter.id}: correct alternative solutions lose points:\n" + "\n".join(lost)
