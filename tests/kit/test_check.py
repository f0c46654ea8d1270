"""The student's check: `course check` in a shell and `check(...)` in a notebook."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from autograder.build.release import build
from conftest import CHAPTERS, MACHINERY_CHAPTERS, REPO
from course.check import PASSED_VISIBLE, check_notebook
from course.notebook import NotebookError, exercises
from two_chapter_course import write
from notebook_runs import mutants_of

pytestmark = pytest.mark.slow


def course_check(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "course.cli", "check", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd)


def _copy_chapter(chapter, notebook: Path, tmp_path: Path) -> Path:
    """The notebook in a copy of its release folder (support files beside it, as a student has them)."""
    release = chapter.source_dir.parent.parent / "release" / chapter.id
    for f in release.rglob("*"):
        if f.is_file():
            (tmp_path / f.relative_to(release)).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / f.relative_to(release)).write_bytes(f.read_bytes())
    target = tmp_path / chapter.notebook.name
    target.write_bytes(notebook.read_bytes())
    return target


# The command's exit codes on whole notebooks are a property of the tool, not of a chapter: one
# chapter shows them. Every chapter's solution and release are graded in tests/chapters/test_chapters.py, whose
# typical-mistake test also runs every chapter's solutions against its visible tests alone (what `check` runs),
# and every chapter's `check()` runs in its notebook in the browser pass (tests/browser/test_in_browser.py).
@pytest.mark.parametrize("chapter", CHAPTERS[:1], ids=[c.id for c in CHAPTERS[:1]])
def test_solution_passes_and_exits_0(chapter, tmp_path):
    done = course_check(_copy_chapter(chapter, chapter.notebook, tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    auto = [e for e, ex in exercises(nbformat.read(chapter.notebook, 4)).items() if not ex.manual]
    for e in auto:
        assert any(line.split()[:2] == [e, "passed"] for line in done.stdout.splitlines()), done.stdout
    # issue 36: a pass says what it covers, in every row that shows one
    assert done.stdout.count(PASSED_VISIBLE) == len(auto), done.stdout


@pytest.mark.parametrize("chapter", CHAPTERS[:1], ids=[c.id for c in CHAPTERS[:1]])
def test_blank_is_not_attempted_and_exits_1(chapter, tmp_path):
    release = chapter.source_dir.parent.parent / "release" / chapter.id / chapter.notebook.name
    done = course_check(_copy_chapter(chapter, release, tmp_path))
    assert done.returncode == 1
    verdicts = [line for line in done.stdout.splitlines() if line.startswith("ex_")]
    assert verdicts and all("not attempted" in line for line in verdicts), done.stdout


# The whole-notebook wrong answer: on conftest's MACHINERY_CHAPTERS (every chapter under `make sweep`).
WRONG_ANSWER_CHAPTERS = MACHINERY_CHAPTERS


@pytest.mark.parametrize("chapter", WRONG_ANSWER_CHAPTERS, ids=[c.id for c in WRONG_ANSWER_CHAPTERS])
def test_wrong_answer_fails_with_its_teaching_message_and_nothing_hidden_runs(chapter, tmp_path):
    """The last exercise answered wrongly in the student's (release) notebook: it fails, with a message,
    and every other exercise passes."""
    nb = nbformat.read(chapter.notebook, as_version=4)
    release = nbformat.read(chapter.source_dir.parent.parent / "release" / chapter.id / chapter.notebook.name, 4)
    # The last exercise: later exercises may build on earlier ones, but none builds on the last.
    # Its wrong answer returns None wherever the solution has code: visible tests must catch that.
    exercise = [e for e, ex in exercises(nb).items() if not ex.manual][-1]
    solution = nb.cells[exercises(nb)[exercise].solution_cells[0]].source
    wrong = re.sub(r"( *)### BEGIN SOLUTION\n.*?### END SOLUTION", r"\1return None", solution, flags=re.S)
    # The student's notebook: every other exercise solved, this one wrong.
    for ex in exercises(nb).values():
        for i in ex.solution_cells:
            release.cells[i].source = nb.cells[i].source if ex.id != exercise else wrong
    path = tmp_path / "student.ipynb"
    _copy_chapter(chapter, chapter.notebook, tmp_path)
    nbformat.write(release, path)
    verdicts = {v.exercise: v for v in check_notebook(path, chapter.id)}
    assert verdicts[exercise].status in ("failed", "error") and verdicts[exercise].message
    assert "Traceback" not in verdicts[exercise].message
    others = [v for e, v in verdicts.items() if e != exercise and v.status != "manually graded"]
    assert others and all(v.status == "passed" for v in others), others


# The tests of the built mini course share one worker (--dist loadgroup): the course is built once.
on_mini = pytest.mark.xdist_group("check_mini")


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    root = write(tmp_path_factory.mktemp("mini"))
    build(root)
    return root / "release"


@on_mini
def test_bad_inputs_get_clear_errors(mini, tmp_path):
    broken = tmp_path / "01_alpha.ipynb"
    broken.write_text('{"cells": [')
    done = course_check(broken)
    assert done.returncode == 2 and "is not valid JSON" in done.stderr and "Traceback" not in done.stderr
    done = course_check(tmp_path / "nowhere.ipynb")
    assert done.returncode == 2 and "no such notebook" in done.stderr
    done = course_check(mini / "01_alpha" / "01_alpha.ipynb", "ex_nope")
    assert done.returncode == 2 and "no exercise 'ex_nope'" in done.stderr and "ex_double" in done.stderr
    plain = tmp_path / "plain.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), plain)
    assert "not a notebook of this course" in course_check(plain).stderr
    with pytest.raises(NotebookError, match="is chapter 01_alpha, but 02_beta was expected"):
        check_notebook(mini / "01_alpha" / "01_alpha.ipynb", "02_beta")


def _run_in_kernel(nb, cwd):
    NotebookClient(nb, timeout=120, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def _stream(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@on_mini
def test_check_in_the_live_kernel(mini):
    """check("ex_id") runs that exercise's visible tests against what is defined in the kernel now;
    check() with no id re-runs the saved file in a fresh kernel."""
    folder = mini / "01_alpha"
    saved = nbformat.read(folder / "01_alpha.ipynb", 4)
    nb = nbformat.read(folder / "01_alpha.ipynb", 4)
    report = "from course import Checker\ncheck = Checker('01_alpha')\n"
    nb.cells += [nbformat.v4.new_code_cell(c) for c in [
        report + "r = check.verdicts('ex_double'); print('RESULT', r[0].status)",
        "def double(box):\n    return Box(box.value * 2)",
        "r = check.verdicts('ex_double'); print('RESULT', r[0].status)",
        "r = check('ex_nope'); print('RESULT', r)",
        "r = check.verdicts(); print('RESULT', [(v.exercise, v.status) for v in r])",
        "check('ex_double')",
        "check()",
    ]]
    out = _run_in_kernel(nb, folder)
    results = [_stream(c) for c in out.cells[-7:]]
    assert "RESULT not attempted" in results[0]
    assert "RESULT passed" in results[2], "the live check must see the definition made in the kernel"
    assert "no exercise 'ex_nope'" in results[3] and "RESULT None" in results[3]
    # The saved file is still blank, whatever the live kernel holds.
    assert "RESULT [('ex_double', 'not attempted'), ('ex_text', 'not attempted')]" in results[4]
    assert nbformat.read(folder / "01_alpha.ipynb", 4) == saved
    # issue 36: check() and check("ex") show their table and echo nothing as Out[n]; a pass says what it covers
    for cell in out.cells[-2:]:
        assert not [o for o in cell.outputs if o.output_type == "execute_result"], cell.outputs
        assert [o for o in cell.outputs if "text/html" in o.get("data", {})], cell.outputs
    live = "".join(o.data["text/html"] for o in out.cells[-2].outputs if o.output_type == "display_data")
    assert "passed" in live and PASSED_VISIBLE in live, live
    whole = "".join(o.data["text/html"] for o in out.cells[-1].outputs if o.output_type == "display_data")
    assert "not attempted" in whole
    # issue 43: the kernel ran cells the saved file does not hold: said first, in a box the student cannot miss
    assert whole.index("class='course-unsaved'") < whole.index("not attempted"), whole
    assert "is older than what this kernel ran" in whole and "Save (Ctrl+S), then run check() again" in whole
    assert "course-unsaved" not in live, "check('ex') runs the live kernel: nothing to save for it"


def test_unsaved_cells_counts_what_the_kernel_ran_that_the_saved_file_lacks():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1\n"), nbformat.v4.new_markdown_cell("y")])
    from course.check import unsaved_cells
    assert unsaved_cells(nb, ["x = 1", "check()"]) == 0  # the cell running check() itself is not counted
    assert unsaved_cells(nb, ["x = 1  ", "x = 2", "", "check()"]) == 1


@on_mini
def test_a_check_left_in_the_notebook_does_not_recurse(mini, tmp_path):
    nb = nbformat.read(mini / "01_alpha" / "01_alpha.ipynb", 4)
    nb.cells.append(nbformat.v4.new_code_cell("from course import Checker\nChecker('01_alpha')()"))
    path = mini / "01_alpha" / "with_check.ipynb"
    nbformat.write(nb, path)
    try:
        verdicts = check_notebook(path, "01_alpha")
    finally:
        path.unlink()
    assert [v.status for v in verdicts] == ["not attempted", "not attempted"]


def test_a_missing_earlier_exercise_is_named_rather_than_its_name_error():
    """Issue 17: a test that fails because an earlier exercise's name is not defined says which exercise to do
    first, in the student's check and in the grader's feedback alike; a name of the exercise's own is not."""
    from autograder.grade.grader import _status
    from course.notebook import exercise_defining
    from course.verdicts import verdict_from_error

    chapter = next(c for c in CHAPTERS if c.id == "05_backend")
    defined = exercise_defining(nbformat.read(chapter.notebook, as_version=4))
    number, exercise = defined["launch_map_strided"]
    error = ("NameError", "name 'launch_map_strided' is not defined")
    status, message = verdict_from_error("ex_binary", error, defined)
    assert status == "error" and f"needs exercise {number} ({exercise}) first" in message, message
    answer_index = 7
    status, graded = _status("ex_binary", [{"status": "error", "ename": error[0], "evalue": error[1]}],
                             {"status": "ok"}, defined,
                             {answer_index: {"status": "error", "ename": "SyntaxError", "evalue": "invalid syntax"}},
                             {exercise: answer_index})
    assert f"needs exercise {number} ({exercise}) first" in graded and "that cell raised SyntaxError" in graded
    _, own = verdict_from_error(exercise, error, defined)
    assert "needs exercise" not in own and "NameError" in own


# --- issue 36: the hidden tests for a self-learner, and tracebacks that end at the test's line -----------

TOUR = next(c for c in CHAPTERS if c.id == "00_tour")
# A mistake only the hidden tests catch today: batch dimensions taken from one operand, never broadcast.
HIDDEN_ONLY = "batch dimensions must be equal (no broadcasting)"


def _student_notebook(tmp_path: Path, wrong: dict[str, str] | None = None) -> Path:
    """The release notebook of chapter 00 with every exercise answered as the solution does, but for
    `wrong` ({exercise: the cell's code}), saved in a copy of its release folder, as a student has it."""
    nb = nbformat.read(TOUR.notebook, as_version=4)
    release = nbformat.read(REPO / "release" / TOUR.id / TOUR.notebook.name, 4)
    for ex in exercises(nb).values():
        for i in ex.solution_cells:
            release.cells[i].source = (wrong or {}).get(ex.id, nb.cells[i].source)
    path = _copy_chapter(TOUR, TOUR.notebook, tmp_path)
    nbformat.write(release, path)
    return path


@pytest.mark.xdist_group("hidden_check")
def test_check_hidden_grades_the_solution_as_the_grader_does(tmp_path):
    done = course_check("--hidden", _student_notebook(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hidden tests, in the grader's sandbox" in done.stdout.splitlines()[0], done.stdout
    auto = [e for e, ex in exercises(nbformat.read(TOUR.notebook, 4)).items() if not ex.manual]
    for e in auto:
        assert any(line.split()[:2] == [e, "passed"] for line in done.stdout.splitlines()), done.stdout
    # the grader's own words: a pass there means the hidden tests passed; no hidden test's source is shown
    assert PASSED_VISIBLE not in done.stdout and "HIDDEN TESTS" not in done.stdout, done.stdout


@pytest.mark.xdist_group("hidden_check")
def test_check_hidden_in_the_notebook_shows_the_mistake_only_hidden_tests_catch(tmp_path):
    """check(hidden=True) in the student's kernel: the grader's verdict on a mistake the hidden tests catch
    (chapter 00's matmul_shape without batch broadcasting), with its message, and no Out[n] echo."""
    mutant = mutants_of(TOUR)["ex_matmul_shape"][HIDDEN_ONLY].code.strip("\n")
    path = _student_notebook(tmp_path, {"ex_matmul_shape": mutant})
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        f"from course import Checker\nCheck = Checker('00_tour', {str(path)!r})\nCheck(hidden=True)")])
    out = _run_in_kernel(nb, tmp_path).cells[0].outputs
    assert not [o for o in out if o.output_type in ("execute_result", "error")], out
    shown = "".join(o.data["text/html"] for o in out if o.output_type == "display_data")
    rows = dict(re.findall(r"<code>(\w+)</code></td><td[^>]*>([\w ]+)</td>", shown))
    assert rows.get("ex_matmul_shape") == "failed", shown
    assert "matmul_shape((" in shown and "torch gives" in shown, "the grader's message names the call: " + shown
    assert all(status in ("passed", "manually graded") for e, status in rows.items() if e != "ex_matmul_shape"), rows
    assert "HIDDEN TESTS" not in shown and "random_matmul_pair" not in shown, "a hidden test's source was shown"


def test_check_hidden_without_the_hidden_tests_says_so_and_runs_nothing(tmp_path):
    """An installed course package (a copy of it outside the clone, first on the path) and a notebook
    outside the clone: no source/ to take the hidden tests from."""
    installed = tmp_path / "site"
    shutil.copytree(REPO / "course", installed / "course", ignore=shutil.ignore_patterns("__pycache__"))
    notebook = tmp_path / "00_tour.ipynb"
    shutil.copyfile(REPO / "release" / TOUR.id / TOUR.notebook.name, notebook)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "course.cli", "check", "--hidden", str(notebook)], cwd=tmp_path,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(installed)})
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "not here" in done.stderr, done.stderr
    assert time.monotonic() - started < 30, "it must run nothing"


def test_check_hidden_without_the_sandbox_says_so_and_runs_nothing(tmp_path, monkeypatch, capsys):
    import course.hidden
    from course.cli import main

    monkeypatch.setattr(course.hidden.shutil, "which", lambda name: None)
    monkeypatch.setattr("autograder.grade.grader.Grader", None)  # running anything would fail loudly
    assert main(["check", "--hidden", str(REPO / "release" / TOUR.id / TOUR.notebook.name)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "bubblewrap is not installed" in err, err


_FAILING_TESTS = {
    "a helper of course.compare": 'compare.assert_equal([1, 2], [1, 3], "my_list()")',
    "a random-input test of course.testing": (
        "@for_random_inputs(examples=5)\ndef _(draw):\n"
        "    same_call(lambda t: t + 1, [draw.randn((2,))], 't + 1', ours=lambda t: t * 0)"),
    "a labelled block": 'with compare.labelled("walking the graph"):\n    {}["missing"]',
}


def test_a_failing_visible_test_shows_a_traceback_that_ends_at_its_line(tmp_path):
    """IPython shows a failure of the course's helpers without their frames (issue 36): the traceback ends
    at the test's own line, and the message is the one the helper raised."""
    cells = ["import torch\nfrom course import compare\nfrom course.testing import for_random_inputs, same_call"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells + list(_FAILING_TESTS.values())])
    out = _run_in_kernel(nb, tmp_path)
    for (name, source), cell in zip(_FAILING_TESTS.items(), out.cells[1:]):
        (error,) = [o for o in cell.outputs if o.output_type == "error"]
        text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error.traceback))
        assert error.ename == "AssertionError" and error.evalue, (name, error)
        assert "course/" not in text and "hidden" not in text, f"{name}: the course's frames show:\n{text}"
        frames = re.findall(r"^(Cell In\[\d+\], line \d+.*|File .*)$", text, re.M)
        assert frames and frames[-1].startswith("Cell In"), f"{name}: it does not end in the test:\n{text}"
        assert text.rstrip().endswith(error.evalue.splitlines()[-1]), f"{name}: the message changed:\n{text}"


def test_visible_test_cells_let_run_all_go_on_past_a_failure():
    """Issue 43: JupyterLab's Run All stops at a cell that raises unless it is tagged raises-exception; every
    visible test cell of the release is, so a student with one mistake still reaches check() at the end (the
    failure shows in the cell, and check() and the grader read it from there)."""
    for chapter in CHAPTERS:
        nb = nbformat.read(REPO / "release" / chapter.id / chapter.notebook.name, 4)
        tests = {i for ex in exercises(nb).values() for i in ex.test_cells}
        tagged = {i for i, c in enumerate(nb.cells) if "raises-exception" in c.metadata.get("tags", [])}
        assert tests and tagged == tests, (chapter.id, sorted(tagged ^ tests))
