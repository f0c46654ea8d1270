"""Every chapter in source/, discovered by itself, meets the foundation's checks:
its solution earns every automatic point (hidden tests included), its release
earns none, every exercise rejects typical wrong answers, and plain nbgrader
gives the same verdicts as the course's own grader."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.grade.grader import Grader
from conftest import CHAPTERS, EVERY_CHAPTER, MACHINERY_CHAPTERS, REPO
from course.notebook import exercises
from notebook_runs import (chapter_group, copy_chapter_folder, mutant_verdicts, mutants_of, mutated_notebook,
                          run_in_copy)

pytestmark = pytest.mark.slow


def _per_chapter(chapter):
    """A chapter's tests form an xdist group of their own (notebook_runs.chapter_group): its notebooks are graded
    once, on one worker, and the chapters are graded side by side on the others (one group for all of them held one
    worker for twenty minutes)."""
    return pytest.param(chapter, id=chapter.id, marks=chapter_group(chapter))


GRADED_CHAPTERS = [_per_chapter(c) for c in CHAPTERS]
# plain nbgrader's run checks the course's grader, not the chapter: in `make test` chapter 05 (the CUDA emulator in
# the kernel) and the last (every earlier chapter's reference package under it; the first chapter has none, and
# nbgrader treats its cells as it treats the last's), every chapter under `make sweep` (conftest's EVERY_CHAPTER)
PLAIN_NBGRADER_CHAPTERS = [_per_chapter(c) for c in CHAPTERS
                           if EVERY_CHAPTER or (c in MACHINERY_CHAPTERS and c is not CHAPTERS[0])]
_GRADED: dict[str, tuple] = {}


@pytest.fixture
def graded(chapter, tmp_path_factory):
    """The course grader's results for the chapter's source and release notebooks (graded once per worker)."""
    if chapter.id not in _GRADED:
        grader = Grader(chapter, tmp_path_factory.mktemp(chapter.id))
        release = Path(chapter.source_dir.parent.parent / "release" / chapter.id / chapter.notebook.name)
        try:
            _GRADED[chapter.id] = (chapter, grader.grade("solution", chapter.notebook),
                                   grader.grade("blank", release))
        finally:
            grader.close()  # its sandbox (torch and the chapter, a few hundred MiB) is not needed again
    return _GRADED[chapter.id]


@pytest.mark.parametrize("chapter", GRADED_CHAPTERS)
def test_solution_earns_every_automatic_point(graded):
    chapter, solution, _ = graded
    failed = [f"{v.exercise}: {v.status}: {v.message}" for v in solution.verdicts
              if v.status not in ("passed", "manually graded")]
    assert not failed, f"{chapter.id} solution fails its own tests:\n" + "\n".join(failed)
    auto = [v for v in solution.verdicts if v.status == "passed"]
    assert len(auto) >= 5 and all(v.points == v.max_points > 0 for v in auto)


@pytest.mark.parametrize("chapter", GRADED_CHAPTERS)
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


VISIBLE_SHARE = 0.9  # issue 36: a pass means passed


@pytest.mark.parametrize("chapter", GRADED_CHAPTERS)
def test_tests_reject_typical_mistakes(chapter):
    """Each typical wrong answer (tests/mutants/<chapter>.py), put in place of its exercise's solution in the
    source notebook, must make that exercise fail, with a message; and the VISIBLE tests alone (what a student runs
    before submitting) must reject at least 90 % of them (a pass means passed). A mutant that hard-codes the visible
    cases is exempt from the share (`hard_codes_visible`) and says so in its name.

    One run serves both: every variant runs against the visible tests first; only the mutants that pass them run
    again with the hidden tests (a variant that fails a visible test fails the full cell at the same line)."""
    nb = nbformat.read(chapter.notebook, as_version=4)
    solutions = [(ex.id, nb.cells[ex.solution_cells[0]].source) for ex in exercises(nb).values() if not ex.manual]
    cases = [(ex, name, m) for ex, by_name in mutants_of(chapter).items() for name, m in by_name.items()]
    visible = mutant_verdicts(chapter, solutions + [(ex, m.code, m.judged) for ex, _, m in cases], visible_only=True)
    # The unchanged solutions come first: they must pass here too, or a rejection could be the runner's doing.
    wrongly_failed = [f"{ex}: {v.status}: {v.message}" for ex, v in visible[: len(solutions)] if v.status != "passed"]
    assert not wrongly_failed, "the solution fails in the variant runner:\n" + "\n".join(wrongly_failed)
    verdicts = [v for _, v in visible[len(solutions):]]
    only_hidden = [i for i, v in enumerate(verdicts) if v.status not in ("failed", "error")]
    full = mutant_verdicts(chapter, [(cases[i][0], cases[i][2].code, cases[i][2].judged) for i in only_hidden])
    for i, (_, v) in zip(only_hidden, full):
        verdicts[i] = v

    accepted = [f"{ex}: {name}" for (ex, name, _), v in zip(cases, verdicts) if v.status not in ("failed", "error")]
    assert not accepted, f"{chapter.id}: the tests accept these wrong answers:\n" + "\n".join(accepted)
    silent = [f"{ex}: {name}" for (ex, name, _), v in zip(cases, verdicts) if not v.message]
    assert not silent, "a rejected answer must come with a message: " + ", ".join(silent)
    # Feedback that names the cause (issue 17): where a mutant says what its message must show, it shows it.
    unnamed = [f"{ex}: {name}: the message must show {m.shows!r}; it says: {v.message}"
               for (ex, name, m), v in zip(cases, verdicts) if m.shows and m.shows not in v.message]
    assert not unnamed, "feedback that hides the cause it knows:\n" + "\n".join(unnamed)

    honest = [i for i, (_, _, m) in enumerate(cases) if not m.hard_codes_visible]
    passed_visible = [f"{cases[i][0]}: {cases[i][1]}" for i in honest if i in only_hidden]
    share = 1 - len(passed_visible) / max(len(honest), 1)
    print(f"{chapter.id}: the visible tests reject {share:.0%} of {len(honest)} typical mistakes")
    assert share >= VISIBLE_SHARE, (
        f"{chapter.id}: the visible tests alone reject only {share:.0%} of the typical mistakes (at least "
        f"{VISIBLE_SHARE:.0%} wanted); these pass every visible test and fail only at grading:\n"
        + "\n".join(passed_visible))
    unnamed = [name for _, name, m in cases if m.hard_codes_visible and "hard-code" not in name]
    assert not unnamed, f"a mutant exempt as hard-coded must say so in its description: {unnamed}"


@functools.cache
def _a_kernels_verdict_on_a_mutant():
    """(chapter, mutant's code, the verdict a Jupyter kernel gives it): one kernel run for the two tests below
    (they share the first chapter's xdist group, hence its worker)."""
    chapter = CHAPTERS[0]
    code = mutants_of(chapter)["ex_count_parameters"]["counts the top level only"].code
    return chapter, code, run_in_copy(chapter, mutated_notebook(chapter, "ex_count_parameters", code),
                                      "ex_count_parameters")


@chapter_group(CHAPTERS[0])
def test_the_fast_runner_agrees_with_a_kernel():
    """tests/support/run_variants.py gives a kernel's verdicts: compare on one mutant of each kind of outcome."""
    chapter, code, kernel = _a_kernels_verdict_on_a_mutant()
    fast = dict(mutant_verdicts(chapter, [("ex_count_parameters", code)]))["ex_count_parameters"]
    assert (fast.status, fast.message.split("(random")[0]) == (kernel.status, kernel.message.split("(random")[0])


@chapter_group(CHAPTERS[0])
def test_a_mutant_failure_message_teaches():
    """The failure message names the computation and what torch gives, not a bare AssertionError."""
    _, _, verdict = _a_kernels_verdict_on_a_mutant()
    assert "count_parameters" in verdict.message and "torch gives" in verdict.message, verdict.message


@pytest.fixture
def plain_nbgrader(chapter, tmp_path_factory):
    """Plain nbgrader's points for the chapter's solution and release notebooks: `nbgrader
    generate_assignment` and `nbgrader autograde`, default settings, in a course of that chapter alone
    made from a copy of the repo. Returns (course folder, {(student, chapter, exercise): points})."""
    course = tmp_path_factory.mktemp(f"plain-nbgrader-{chapter.id}") / "course"
    (course / "source" / chapter.id).mkdir(parents=True)
    copy_chapter_folder(chapter, course / "source" / chapter.id)  # the reference package from release/
    shutil.copy(chapter.notebook, course / "source" / chapter.id)
    shutil.copy(REPO / "nbgrader_config.py", course)
    submitted = {"solution": chapter.notebook, "blank": REPO / "release" / chapter.id / chapter.notebook.name}
    for student, nb in submitted.items():
        (course / "submitted" / student / chapter.id).mkdir(parents=True)
        shutil.copy(nb, course / "submitted" / student / chapter.id / chapter.notebook.name)
    nbgrader = [sys.executable, "-m", "nbgrader"]
    # One BLAS thread, as in the course's sandbox: a pool waiting for a busy core can push a cell past
    # nbgrader's 30 s timeout when the suite runs a worker per core.
    env_path = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if os.environ.get("COURSE_CUDA_CACHE"):  # the run's compiled kernels (conftest's cuda_cache), not ~/.cache's
        env_path["COURSE_CUDA_CACHE"] = os.environ["COURSE_CUDA_CACHE"]
    for cmd in (["generate_assignment", chapter.id], ["autograde", chapter.id, "--create"]):
        done = subprocess.run(nbgrader + cmd, cwd=course, capture_output=True, text=True, env=env_path)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    from nbgrader.api import Gradebook
    points = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        nb = nbformat.read(chapter.notebook, as_version=4)
        for e, ex in exercises(nb).items():
            if not ex.manual:
                for student in ("solution", "blank"):
                    points[student, chapter.id, e] = gb.find_grade(f"{e}_tests", chapter.id, chapter.id,
                                                                   student).score
    return course, points


@pytest.mark.parametrize("chapter", PLAIN_NBGRADER_CHAPTERS)
def test_plain_nbgrader_gives_the_same_verdicts(graded, plain_nbgrader):
    """Plain nbgrader gives the points the course's grader gave the same two notebooks."""
    chapter, solution, blank = graded
    course, points = plain_nbgrader
    assert not (course / "release" / chapter.id / chapter.text_form.name).exists(), \
        "plain nbgrader copied the chapter's text form (solutions!) into release/"
    plain = {(student, e): score for (student, c, e), score in points.items() if c == chapter.id}
    ours = {(student, v.exercise): v.points for student, result in (("solution", solution), ("blank", blank))
            for v in result.verdicts if v.status != "manually graded"}
    assert plain == ours
    # The course's nbgrader_config.py makes a chapter's check() cell return at once in nbgrader's own
    # kernels: there it would run the whole notebook a second time and change no grade.
    autograded = nbformat.read(course / "autograded" / "solution" / chapter.id / chapter.notebook.name, 4)
    checks = [c for c in autograded.cells if c.cell_type == "code" and c.source.strip() == "check()"]
    assert checks and all(not c.outputs for c in checks), \
        f"{chapter.id}: check() ran again inside nbgrader's autograde: {checks[0].outputs if checks else 'no check() cell'}"
