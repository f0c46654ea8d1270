"""Running a chapter's notebooks the way the tests need: whole, or mutated in one exercise."""
from __future__ import annotations

import atexit
import contextlib
import copy
import importlib.util
import json
import re
import select
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.build.reference import PACKAGE
from autograder.chapters import Chapter
from course.check import run_fresh, verdicts_of_executed
from course.notebook import exercises

HELPERS = Path(__file__).resolve().parent  # solution_text.py, which the mutants and alternatives import
MUTANTS_DIR = HELPERS.parent / "mutants"


@dataclass(frozen=True)
class Mutant:
    """A typical wrong answer: the answer cell's `code`; the verdict of exercise `judged` (None: the mutated
    exercise itself) must fail, and its message must contain `shows` when given (feedback that names the
    cause, issue 17). `hard_codes_visible`: the answer is written for the visible tests' own inputs, so only the
    hidden tests can reject it (the visible share of tests/chapters/test_chapters.py exempts it; its name says so)."""
    code: str
    shows: str | None = None
    judged: str | None = None
    hard_codes_visible: bool = False


def mutants_of(chapter: Chapter) -> dict[str, dict[str, Mutant]]:
    """{exercise: {what is wrong: Mutant}} from tests/mutants/<chapter>.py, whose MUTANTS values are the code,
    or a dict {"code": ..., "shows": ..., "judged": ...}."""
    module = chapter_file(MUTANTS_DIR, chapter)
    if module is None:
        return {}
    return {ex: {name: Mutant(value) if isinstance(value, str) else Mutant(**value) for name, value in by_name.items()}
            for ex, by_name in module.MUTANTS.items()}


def chapter_file(folder: Path, chapter: Chapter):
    """`folder`/<chapter id>.py imported as a module, or None where the chapter has no such file."""
    path = folder / f"{chapter.id}.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"{folder.name}_{chapter.id}", path)
    module = importlib.util.module_from_spec(spec)
    # The variants import the tests' helpers (solution_text) by name: on the path under pytest (conftest.py),
    # and here for whoever else loads them (benchmarks/suites/grading.py takes its wrong answers from here).
    helpers = str(HELPERS)
    added = helpers not in sys.path
    if added:
        sys.path.insert(0, helpers)
    try:
        spec.loader.exec_module(module)
    finally:
        if added:
            sys.path.remove(helpers)
    return module


def run_variants(chapter: Chapter, variants: list[list[str]]) -> list[list]:
    """For each variant (the sources of a notebook's cells, "" for a markdown cell), [cell index, exception name,
    message] of every cell that raised: all run in one process (tests/support/run_variants.py) in a copy of the chapter's
    folder, forked from the chapter's runner (ChapterRunner) where one serves it."""
    served = ChapterRunner.of(chapter).ask({"variants": variants})
    if served is not None:
        return served
    return run_fresh_runner(chapter, "run_variants.py", {"variants": variants})


def run_fresh_runner(chapter: Chapter, script: str, spec: dict):
    """tests/support/`script`'s answer to `spec`, in a new process in a temporary copy of the chapter's folder."""
    with tempfile.TemporaryDirectory() as tmp:
        copy_chapter_folder(chapter, Path(tmp))
        done = subprocess.run([sys.executable, str(HELPERS / script)], input=json.dumps({**spec, "cwd": tmp}),
                              capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"tests/support/{script} failed on {chapter.id}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def chapter_group(chapter: Chapter):
    """The xdist group of a chapter's notebook runs (tests/chapters/): its sandboxed grading, its typical mistakes,
    alternatives and seed sweep go to one worker, whose ChapterRunner and grader they share, while the other
    chapters run side by side on the other workers."""
    import pytest
    return pytest.mark.xdist_group(f"chapter_{chapter.id}")


class ChapterRunner:
    """One `run_variants.py --serve` process per chapter for this test worker: the chapter's imports and given code
    (the cells before its first exercise) run once, and the typical mistakes, the alternatives and the seed sweep
    of the chapter each fork from there (a fresh runner's start, torch's import included, costs some 3 CPU-seconds;
    tests/chapters/ puts a chapter's tests in one xdist group, so that one worker serves them all). Kept for the
    worker's life, the two most recent at most. Its copy of the chapter's folder is shared by all of its requests,
    as a fresh runner's is by the variants of one request."""

    KEPT = 2
    ANSWER_S = 1800
    _running: dict[str, "ChapterRunner"] = {}

    @classmethod
    def of(cls, chapter: Chapter) -> "ChapterRunner":
        if chapter.id not in cls._running:
            while len(cls._running) >= cls.KEPT:
                cls._running.pop(next(iter(cls._running))).close()
            cls._running[chapter.id] = cls(chapter)
        cls._running[chapter.id] = cls._running.pop(chapter.id)  # the most recent last
        return cls._running[chapter.id]

    def __init__(self, chapter: Chapter):
        nb = nbformat.read(chapter.notebook, as_version=4)
        first = min(i for ex in exercises(nb).values() for i in ex.solution_cells)
        self.folder = tempfile.TemporaryDirectory()
        copy_chapter_folder(chapter, Path(self.folder.name))
        self.process = subprocess.Popen([sys.executable, str(HELPERS / "run_variants.py"), "--serve"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        prefix = [c.source if c.cell_type == "code" else "" for c in nb.cells[:first]]
        self.ready = self._exchange({"cwd": self.folder.name, "prefix": prefix}) == {"ready": True}

    def _exchange(self, message: dict) -> dict | None:
        """The runner's one-line reply; None if it is gone. A runner silent for ANSWER_S (a test cell that never
        ends on some seed) is stopped and named, as the fresh runner's timeout did."""
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
            if not select.select([self.process.stdout], [], [], self.ANSWER_S)[0]:
                self.process.kill()
                raise RuntimeError(f"the chapter's runner (tests/support/run_variants.py --serve) did not answer "
                                   f"in {self.ANSWER_S} s")
            line = self.process.stdout.readline()  # the runner writes nothing but its one-line replies here
            return json.loads(line) if line else None
        except (OSError, ValueError):
            return None

    def ask(self, request: dict):
        """The request's result, or None where this runner cannot serve it (the caller runs it fresh)."""
        reply = self._exchange(request) if self.ready else None
        if reply is None:
            self.ready = False
        return None if reply is None or "refused" in reply else reply["result"]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.folder.cleanup()


@atexit.register
def _close_the_chapter_runners() -> None:
    while ChapterRunner._running:
        ChapterRunner._running.popitem()[1].close()


def mutated_notebook(chapter: Chapter, exercise: str, code: str, judged: str | None = None,
                     visible_only: bool = False):
    """The source notebook with `exercise`'s solution replaced by `code`, cut after the tests of `judged`
    (default: `exercise`; later cells cannot change its verdict, and skipping them saves a lot of time);
    with `visible_only`, its test cells as the student sees them (hidden tests removed)."""
    nb = nbformat.read(chapter.notebook, as_version=4)
    found = exercises(nb)
    ex = found[exercise]
    if len(ex.solution_cells) != 1:
        raise ValueError(f"{exercise} has {len(ex.solution_cells)} solution cells; mutants replace exactly one")
    nb.cells[ex.solution_cells[0]].source = code.strip("\n")
    nb.cells = nb.cells[: max(found[judged or exercise].test_cells) + 1]
    if visible_only:
        for tests in found.values():
            for i in tests.test_cells:
                if i < len(nb.cells):
                    nb.cells[i].source = visible_tests(nb.cells[i].source)
    return nb


def visible_tests(source: str) -> str:
    """A test cell's source without its hidden tests (### BEGIN HIDDEN TESTS to ### END HIDDEN TESTS or the
    end of the cell), as nbgrader's release has it."""
    kept, hidden = [], False
    for line in source.splitlines():
        if re.match(r"\s*### BEGIN HIDDEN TESTS", line):
            hidden = True
        elif re.match(r"\s*### END HIDDEN TESTS", line):
            hidden = False
        elif not hidden:
            kept.append(line)
    return "\n".join(kept)


def mutant_verdicts(chapter: Chapter, mutants: list[tuple], visible_only: bool = False):
    """[(judged exercise, Verdict)] for each (exercise, code) or (exercise, code, judged) variant, all run in
    one process (tests/support/run_variants.py), with the messages the student's check would show; with
    `visible_only`, against the visible tests alone."""
    from course.notebook import exercise_defining
    from course.verdicts import Verdict, verdict_from_error

    mutants = [(m[0], m[1], m[2] if len(m) > 2 and m[2] else m[0]) for m in mutants]
    variants = [mutated_notebook(chapter, exercise, code, judged, visible_only) for exercise, code, judged in mutants]
    defined = exercise_defining(nbformat.read(chapter.notebook, as_version=4))
    raised = run_variants(chapter, [[c.source if c.cell_type == "code" else "" for c in nb.cells] for nb in variants])
    results = []
    for (_, _, exercise), nb, errors in zip(mutants, variants, raised):
        by_cell = {index: (name, message) for index, name, message in errors}
        ex = exercises(nb)[exercise]
        stub = by_cell.get(ex.solution_cells[0])
        if stub and stub[0] == "NotImplementedError":
            status, message = verdict_from_error(exercise, stub)
        else:
            status, message = "passed", ""
            for i in ex.test_cells:
                status, message = verdict_from_error(exercise, by_cell.get(i), defined)
                if status != "passed":
                    break
        results.append((exercise, Verdict(exercise, status, message, 0.0, ex.points)))
    return results


def reference_package(chapter: Chapter) -> Path:
    """release/NN/picotorch/: the reference of the chapters before `chapter`, committed once (its modules are
    links into the last chapter's package, which copytree below follows; the build's source/NN/picotorch/ is
    an ignored copy of it, absent from a fresh clone)."""
    return chapter.source_dir.parent.parent / "release" / chapter.id / PACKAGE


def copy_chapter_folder(chapter: Chapter, target: Path) -> None:
    """The chapter's source folder at `target` as nbgrader and the notebook see it: its own files (no
    notebook) and the reference package of the chapters before it."""
    for f in chapter.source_dir.rglob("*"):
        rel = f.relative_to(chapter.source_dir)
        if f.is_file() and f.suffix != ".ipynb" and "__pycache__" not in f.parts and rel.parts[0] != PACKAGE:
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            (target / rel).write_bytes(f.read_bytes())
    reference = reference_package(chapter)
    if reference.is_dir():
        shutil.copytree(reference, target / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"),
                        dirs_exist_ok=True)



def verdict_of(nb, exercise: str, cwd: Path):
    executed = run_fresh(copy.deepcopy(nb), cwd)
    return next(v for v in verdicts_of_executed(executed) if v.exercise == exercise)


def run_in_copy(chapter: Chapter, nb, exercise: str):
    """Run `nb` in a temporary copy of the chapter's source folder (so support files resolve)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy_chapter_folder(chapter, Path(tmp))
        return verdict_of(nb, exercise, Path(tmp))
