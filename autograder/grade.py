"""Grade one chapter's submissions with nbgrader, and read back verdicts that teach.

nbgrader does the grading (its autograde restores locked cells, runs the
notebook, records scores in the gradebook); this module sets up the course
folder it needs, hands it each submission, and turns the gradebook's scores and
the executed notebook's errors into one Verdict per exercise.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder import nbgrader_env
from autograder.build import declared_files
from autograder.chapters import Chapter
from autograder.reference import package_files
from autograder.chapters import discover
from course.notebook import NotebookError, exercises, expect_chapter, read_notebook
from course.verdicts import MANUAL, PASSED, Verdict, error_of, verdict_from_error


@dataclass
class Result:
    student: str
    chapter: str
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(v.points for v in self.verdicts)

    @property
    def max_score(self) -> float:
        return sum(v.max_points for v in self.verdicts)


class Grader:
    """A course folder for one chapter, set up once, then any number of submissions."""

    def __init__(self, chapter: Chapter, workdir: Path, db_url: str | None = None):
        self.chapter = chapter
        self.root = workdir
        self.db_url = db_url
        source = workdir / "source" / chapter.id
        source.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(chapter.notebook, source / chapter.notebook.name)
        nb = read_notebook(chapter.notebook)
        support = {name: chapter.source_dir / name for name in declared_files(chapter, nb)}
        for name, path in support.items():
            shutil.copyfile(path, source / name)
        chapters = discover(chapter.source_dir.parent)
        earlier = [c for c in chapters if c.number < chapter.number]
        for rel, text in package_files(earlier).items():
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            (source / rel).write_text(text)
        self.source_nb = nb
        self.api = nbgrader_env.api(workdir, db_url)
        with nbgrader_env.quiet():
            result = self.api.generate_assignment(chapter.id)
        nbgrader_env.check(result, f"generate_assignment {chapter.id}")

    def grade(self, student: str, notebook: Path) -> Result:
        """Grade one student's notebook; bad input becomes a note, never an exception."""
        result = Result(student, self.chapter.id)
        try:
            nb = read_notebook(notebook)
            expect_chapter(nb, self.chapter.id, notebook)
        except NotebookError as e:
            result.notes.append(str(e))
            result.verdicts = self._zero_verdicts("not graded: " + str(e))
            return result
        target = self.root / "submitted" / student / self.chapter.id
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        shutil.copyfile(notebook, target / self.chapter.notebook.name)
        with nbgrader_env.quiet():
            outcome = self.api.autograde(self.chapter.id, student)
        if not outcome.get("success"):
            result.notes.append("nbgrader could not grade this notebook: " + _last_line(outcome))
            result.verdicts = self._zero_verdicts("not graded: see the note")
            return result
        result.verdicts = self._verdicts(student)
        return result

    def _zero_verdicts(self, message: str) -> list[Verdict]:
        return [Verdict(ex.id, MANUAL if ex.manual else "error", message, 0.0, ex.points)
                for ex in exercises(self.source_nb).values()]

    def _verdicts(self, student: str) -> list[Verdict]:
        """Scores from the gradebook, messages from the executed notebook."""
        executed = nbformat.read(self.root / "autograded" / student / self.chapter.id / self.chapter.notebook.name, 4)
        by_grade_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in executed.cells}
        from nbgrader.api import Gradebook
        verdicts = []
        with Gradebook(self.api.coursedir.db_url) as gb:
            for ex in exercises(self.source_nb).values():
                if ex.manual:
                    verdicts.append(Verdict(ex.id, MANUAL, "graded by your instructor", 0.0, ex.points))
                    continue
                grade_id = self.source_nb.cells[ex.test_cells[0]].metadata.nbgrader.grade_id
                grade = gb.find_grade(grade_id, self.chapter.id, self.chapter.id, student)
                points = float(grade.score or 0.0)
                cell = by_grade_id.get(grade_id)
                status, message = verdict_from_error(ex.id, error_of(cell) if cell is not None else None)
                if status == PASSED and points < ex.points:
                    status, message = "error", "the tests did not run to completion"
                if status != PASSED:
                    solution = [by_grade_id.get(ex.id)]
                    stub = next((error_of(c) for c in solution if c is not None and error_of(c)), None)
                    if stub and stub[0] == "NotImplementedError":
                        status, message = verdict_from_error(ex.id, stub)
                verdicts.append(Verdict(ex.id, status, message, points, ex.points))
        return verdicts


def _last_line(outcome: dict) -> str:
    text = (outcome.get("error") or outcome.get("log") or "").strip().splitlines()
    return text[-1] if text else "no reason given"
