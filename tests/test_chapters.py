"""Every chapter in source/, discovered by itself, meets the foundation's checks:
its solution earns every automatic point (hidden tests included), its release
earns none, every exercise rejects typical wrong answers, and plain nbgrader
gives the same verdicts as the course's own grader."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.grade import Grader
from conftest import CHAPTERS
from course.notebook import exercises
from notebook_runs import mutants_of, mutated_notebook, run_in_copy

pytestmark = pytest.mark.slow
chapter_ids = [c.id for c in CHAPTERS]


@pytest.fixture(scope="module", params=CHAPTERS, ids=chapter_ids)
def graded(request, tmp_path_factory):
    """The course grader's results for the chapter's source and release notebooks."""
    chapter = request.param
    grader = Grader(chapter, tmp_path_factory.mktemp(chapter.id))
    release = Path(chapter.source_dir.parent.parent / "release" / chapter.id / chapter.notebook.name)
    return chapter, grader.grade("solution", chapter.notebook), grader.grade("blank", release)


def test_solution_earns_every_automatic_point(graded):
    chapter, solution, _ = graded
    failed = [f"{v.exercise}: {v.status}: {v.message}" for v in solution.verdicts
              if v.status not in ("passed", "manually graded")]
    assert not failed, f"{chapter.id} solution fails its own tests:\n" + "\n".join(failed)
    auto = [v for v in solution.verdicts if v.status == "passed"]
    assert len(auto) >= 5 and all(v.points == v.max_points > 0 for v in auto)


def test_release_earns_zero_points(graded):
    chapter, _, blank = graded
    assert blank.score == 0, f"{chapter.id} release notebook earns {blank.score} points"
    assert all(v.status in ("not attempted", "manually graded") for v in blank.verdicts), blank.verdicts


def test_every_automatic_exercise_has_mutants():
    for chapter in CHAPTERS:
        nb = nbformat.read(chapter.notebook, as_version=4)
        auto = {e for e, ex in exercises(nb).items() if not ex.manual}
        missing = auto - set(mutants_of(chapter))
        assert not missing, f"{chapter.id}: exercises without a typical wrong answer in tests/mutants: {missing}"


MUTANT_CASES = [(c, ex, name, code) for c in CHAPTERS for ex, cases in mutants_of(c).items()
                for name, code in cases.items()]


@pytest.mark.parametrize("chapter,exercise,name,code", MUTANT_CASES,
                         ids=[f"{c.id}-{ex}-{name}" for c, ex, name, _ in MUTANT_CASES])
def test_tests_reject_typical_mistake(chapter, exercise, name, code):
    verdict = run_in_copy(chapter, mutated_notebook(chapter, exercise, code), exercise)
    assert verdict.status in ("failed", "error"), f"{exercise} accepted a wrong answer ({name})"
    assert verdict.message, "a rejected answer must come with a message"


def test_a_mutant_failure_message_teaches():
    """The failure message names the computation and what torch gives, not a bare AssertionError."""
    chapter = CHAPTERS[0]
    code = mutants_of(chapter)["ex_count_parameters"]["counts the top level only"]
    verdict = run_in_copy(chapter, mutated_notebook(chapter, "ex_count_parameters", code), "ex_count_parameters")
    assert "count_parameters" in verdict.message and "torch gives" in verdict.message, verdict.message


@pytest.mark.parametrize("chapter", CHAPTERS, ids=chapter_ids)
def test_plain_nbgrader_gives_the_same_verdicts(chapter, tmp_path, repo):
    """`nbgrader generate_assignment` and `nbgrader autograde`, default settings, on a copy of the repo."""
    course = tmp_path / "course"
    shutil.copytree(repo / "source", course / "source")
    shutil.copy(repo / "nbgrader_config.py", course)
    submitted = {"solution": chapter.notebook, "blank": repo / "release" / chapter.id / chapter.notebook.name}
    for student, nb in submitted.items():
        (course / "submitted" / student / chapter.id).mkdir(parents=True)
        shutil.copy(nb, course / "submitted" / student / chapter.id / chapter.notebook.name)
    nbgrader = [sys.executable, "-m", "nbgrader"]
    env_path = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    for cmd in (["generate_assignment", chapter.id], ["autograde", chapter.id, "--create"]):
        done = subprocess.run(nbgrader + cmd, cwd=course, capture_output=True, text=True, env=env_path)
        assert done.returncode == 0, done.stdout + done.stderr
    assert not (course / "release" / chapter.id / chapter.text_form.name).exists(), \
        "plain nbgrader copied the chapter's text form (solutions!) into release/"
    from nbgrader.api import Gradebook
    nb = nbformat.read(chapter.notebook, as_version=4)
    auto = [e for e, ex in exercises(nb).items() if not ex.manual]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        plain = {(student, e): gb.find_grade(f"{e}_tests", chapter.id, chapter.id, student).score
                 for student in submitted for e in auto}
    grader = Grader(chapter, tmp_path / "ours")
    ours = {}
    for student, nb in submitted.items():
        for v in grader.grade(student, nb).verdicts:
            if v.status != "manually graded":
                ours[(student, v.exercise)] = v.points
    assert plain == ours
