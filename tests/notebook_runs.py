"""Running a chapter's notebooks the way the tests need: whole, or mutated in one exercise."""
from __future__ import annotations

import copy
import importlib.util
import tempfile
from pathlib import Path

import nbformat

from autograder.chapters import Chapter
from course.check import run_fresh, verdicts_of_executed
from course.notebook import exercises

MUTANTS_DIR = Path(__file__).resolve().parent / "mutants"


def mutants_of(chapter: Chapter) -> dict[str, dict[str, str]]:
    path = MUTANTS_DIR / f"{chapter.id}.py"
    if not path.exists():
        return {}
    spec = importlib.util.spec_from_file_location(f"mutants_{chapter.id}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MUTANTS


def mutated_notebook(chapter: Chapter, exercise: str, code: str):
    """The source notebook with `exercise`'s solution replaced by `code`, cut after its tests
    (later cells cannot change this exercise's verdict, and skipping them saves a lot of time)."""
    nb = nbformat.read(chapter.notebook, as_version=4)
    ex = exercises(nb)[exercise]
    if len(ex.solution_cells) != 1:
        raise ValueError(f"{exercise} has {len(ex.solution_cells)} solution cells; mutants replace exactly one")
    nb.cells[ex.solution_cells[0]].source = code.strip("\n")
    nb.cells = nb.cells[: max(ex.test_cells) + 1]
    return nb


def verdict_of(nb, exercise: str, cwd: Path):
    executed = run_fresh(copy.deepcopy(nb), cwd)
    return next(v for v in verdicts_of_executed(executed) if v.exercise == exercise)


def run_in_copy(chapter: Chapter, nb, exercise: str):
    """Run `nb` in a temporary copy of the chapter's source folder (so support files resolve)."""
    with tempfile.TemporaryDirectory() as tmp:
        for f in chapter.source_dir.rglob("*"):
            if f.is_file() and f.suffix != ".ipynb":
                target = Path(tmp) / f.relative_to(chapter.source_dir)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(f.read_bytes())
        return verdict_of(nb, exercise, Path(tmp))
