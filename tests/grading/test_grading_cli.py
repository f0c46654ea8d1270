"""`autograder grade` on a whole class (issue 3, items 1, 2 and 5): the files it
writes, the gradebook nbgrader reads, the same grades with 1 worker and with 4,
regrading, zip intake, and feedback that teaches without leaking hidden tests."""
from __future__ import annotations

import csv
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from test_grading_sandbox import RIGHT, WRONG_DOUBLE, answer, make_chapter

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("grading_cli")]
AUTOGRADER = [sys.executable, "-m", "autograder.cli"]
# Two of each kind of answer (class_of): enough to spread over two workers, and over one.
CLASS_SIZE = 10
# Passes the visible test (float32) and fails the hidden ones (float64).
HIDDEN_WRONG = "def double(x):\n    return x * 2 if x.dtype == torch.float32 else x * 3\n"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A course repository holding the small chapter, and its release notebook."""
    root = tmp_path_factory.mktemp("repo")
    chapter = make_chapter(root)
    return root, chapter, released(chapter, tmp_path_factory.mktemp("release"))


def released(chapter, course: Path):
    """`chapter`'s release notebook, as nbgrader's generate_assignment writes it into the course folder `course`."""
    from autograder import nbgrader_env
    from autograder.grade.grader import prepare_course
    nbgrader_env.stamp_in_process()  # the gradebook's alembic stamp without the `alembic` command (3 s)
    prepare_course(chapter, course)
    with nbgrader_env.quiet():
        nbgrader_env.check(nbgrader_env.api(course).generate_assignment(chapter.id), "generate_assignment")
    return nbformat.read(course / "release" / chapter.id / chapter.notebook.name, 4)


def class_of(release, size: int) -> dict[str, object]:
    """{student: notebook or raw text}: right, wrong, blank and broken answers in turn."""
    kinds = [
        answer(answer(release, "ex_double", RIGHT["ex_double"]), "ex_half", RIGHT["ex_half"]),
        answer(answer(release, "ex_double", HIDDEN_WRONG), "ex_half", RIGHT["ex_half"]),
        release,
        answer(release, "ex_double", "def double(x):\n    return undefined_name * x\n"),
        "{ not a notebook",
    ]
    return {f"s{n:02d}": kinds[n % len(kinds)] for n in range(size)}


def write_class(folder: Path, students: dict, nbgrader_layout: bool = False) -> Path:
    for student, nb in students.items():
        target = folder / student / ("01_mini" if nbgrader_layout else "") / "01_mini.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(nb, str):
            target.write_text(nb)
        else:
            nbformat.write(nb, target)
    return folder


def grade(repo_root: Path, submissions: Path, out: Path, workers: int, *extra):
    done = subprocess.run(AUTOGRADER + ["grade", "01_mini", str(submissions), "--out", str(out),
                                        "--workers", str(workers), "--repo", str(repo_root), *extra],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def rows(out: Path) -> list[dict]:
    with open(out / "grades.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def graded_class(repo, tmp_path_factory):
    root, chapter, release = repo
    students = class_of(release, CLASS_SIZE)
    tmp = tmp_path_factory.mktemp("class")
    folders = write_class(tmp / "folders", students)
    nbgrader = write_class(tmp / "course" / "submitted", students, nbgrader_layout=True)
    (nbgrader.parent / "dave-has-nothing").mkdir()  # not under submitted/: ignored
    (folders / "empty").mkdir()  # a student folder without the notebook
    two = grade(root, nbgrader.parent, tmp / "two", 2)
    one = grade(root, folders, tmp / "one", 1)
    return tmp, two, one


def test_a_class_gets_the_same_grades_with_one_worker_and_with_two(graded_class):
    tmp, two, one = graded_class
    by_two = {r["student"]: r for r in rows(tmp / "two")}
    by_one = {r["student"]: r for r in rows(tmp / "one")}
    assert len(by_two) == CLASS_SIZE and set(by_one) == set(by_two) | {"empty"}
    assert all(by_one[s] == by_two[s] for s in by_two)
    expected = {0: 3, 1: 1, 2: 0, 3: 0, 4: 0}  # right, wrong double, blank, broken double, not JSON
    assert {s: float(r["score"]) for s, r in by_two.items()} == {s: expected[int(s[1:]) % 5] for s in by_two}


def test_the_command_writes_grades_results_and_feedback(graded_class):
    tmp, two, _ = graded_class
    out = tmp / "two"
    header = list(csv.reader(open(out / "grades.csv")))[0]
    assert header == ["student", "folder", "chapter", "score", "max_score", "ex_double", "ex_half", "ex_secret",
                      "ex_gpu"]
    result = json.loads((out / "results" / "s01.json").read_text())
    assert result["score"] == 1 and {e["exercise"] for e in result["exercises"]} == {"ex_double", "ex_half",
                                                                                   "ex_secret", "ex_gpu"}
    assert all({"points", "max_points", "status", "message"} <= set(e) for e in result["exercises"])
    broken = json.loads((out / "results" / "s04.json").read_text())
    assert "not valid JSON" in broken["notes"][0]
    assert all((out / "feedback" / f"s{n:02d}" / "01_mini.html").is_file() for n in range(CLASS_SIZE))
    assert f"[{CLASS_SIZE}/{CLASS_SIZE}]" in two and "graded in" in two and "per submission" in two and "MiB per worker" in two
    summary = two.split(f"[{CLASS_SIZE}/{CLASS_SIZE}]")[1]
    assert "student" in summary and f"s{CLASS_SIZE - 1:02d}" in summary and ("3/5" in summary or "4/5" in summary)  # the table
    assert not list(out.rglob("*.tmp"))


def test_a_student_folder_without_the_notebook_gets_a_note(graded_class):
    tmp, _, _ = graded_class
    empty = json.loads((tmp / "one" / "results" / "empty.json").read_text())
    assert empty["score"] == 0 and "no 01_mini.ipynb" in empty["notes"][0]


def test_feedback_of_a_failing_hidden_test_teaches_and_leaks_nothing(graded_class, repo):
    tmp, _, _ = graded_class
    _, chapter, _ = repo
    page = (tmp / "two" / "feedback" / "s01" / "01_mini.html").read_text()
    assert "double of a tensor of shape (1,): values differ from torch" in page  # the hidden test's message
    hidden = chapter.notebook.read_text()
    assert "torch.randn(n, dtype=torch.float64)" in hidden
    for leak in ["torch.randn(n, dtype=torch.float64)", "BEGIN HIDDEN TESTS", "Traceback", "hidden-",
                 "assert_close(double(torch.ones(2))"]:
        assert leak not in page, leak


def test_nbgrader_export_reads_the_gradebook(graded_class):
    tmp, _, _ = graded_class
    out = tmp / "two"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    done = subprocess.run([sys.executable, "-m", "nbgrader", "export", "--to", "exported.csv"], cwd=out,
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    exported = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader(open(out / "exported.csv"))}
    assert exported == {r["student"]: float(r["score"]) for r in rows(out)}


def test_grading_a_student_again_replaces_their_grade(graded_class, repo, tmp_path):
    tmp, _, _ = graded_class
    root, _, release = repo
    out = tmp_path / "out"
    shutil.copytree(tmp / "one", out)  # the gradebook of the whole class, s01 with a wrong answer
    again = write_class(tmp_path / "again", {"s01": answer(answer(release, "ex_double", RIGHT["ex_double"]),
                                                           "ex_half", RIGHT["ex_half"])})
    grade(root, again, out, 1)
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        assert len(gb.find_student("s01").submissions) == 1
        assert gb.find_submission("01_mini", "s01").score == 3
        assert gb.find_submission("01_mini", "s00").score == 3  # the others are still there
        assert len(gb.students) == CLASS_SIZE + 1  # and the student folder without a notebook
    assert [r["student"] for r in rows(out)] == ["s01"]  # grades.csv is this run's


def test_a_zip_with_escaping_paths_and_links_is_unpacked_safely(repo, tmp_path):
    root, _, release = repo
    archive = tmp_path / "class.zip"
    outside = tmp_path / "escaped.txt"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("class/amy/01_mini.ipynb", nbformat.writes(answer(release, "ex_half", RIGHT["ex_half"])))
        zf.writestr("class/../escaped.txt", "written outside")
        zf.writestr("/tmp/absolute-escape.txt", "written outside")
        link = zipfile.ZipInfo("class/bo/01_mini.ipynb")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
        zf.writestr("class/bo/readme.txt", "my notebook is the link above")
    done = subprocess.run(AUTOGRADER + ["grade", "01_mini", str(archive), "--out", str(tmp_path / "out"),
                                        "--workers", "1", "--repo", str(root)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not outside.exists() and not Path("/tmp/absolute-escape.txt").exists()
    assert "refused 'class/../escaped.txt'" in done.stderr and "link or special file" in done.stderr
    scores = {r["student"]: float(r["score"]) for r in rows(tmp_path / "out")}
    assert scores == {"amy": 1.0, "bo": 0.0}
    bo = json.loads((tmp_path / "out" / "results" / "bo.json").read_text())
    assert "no 01_mini.ipynb" in bo["notes"][0]


def _generated_once_then_kept(out: Path, chapter, monkeypatch) -> None:
    """After a first run: the workers kept the course folder nbgrader generated in this machine's cache (the next
    run's workers, any run's, copy it), and the gradebook's record of the chapter's rows; the next run into the same
    gradebook does not generate the chapter into it again (gradebook._generate is the parent's; the workers are
    processes)."""
    from autograder.grade import gradebook
    from autograder.grade.grader import machine_generated
    kept = machine_generated(chapter)
    assert kept is not None and (kept / "complete").is_file() and (kept / "gradebook.db").is_file(), kept
    assert (kept / "release" / "01_mini" / "01_mini.ipynb").is_file()
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700, "the cache holds the hidden tests: its owner's alone"
    assert json.loads((out / ".resume" / "01_mini" / ".gradebook.json").read_text())["rows"]
    monkeypatch.setattr(gradebook, "_generate", lambda *a: pytest.fail("generated the chapter into the gradebook "
                                                                      "again although its rows had not changed"))


def test_the_machines_generated_course_folder_is_one_per_chapter_version(tmp_path, monkeypatch):
    """Every grader of this machine copies the course folder nbgrader generated for the chapter's version
    (grader.machine_generated): another version of the chapter (a hidden test edited) gets a folder of its own,
    a version unused for a week is removed when another is asked for, and a folder that goes while it is being
    copied leaves nothing half-copied (the grader then generates its own)."""
    from autograder.grade import grader
    monkeypatch.setenv("COURSE_GRADER_GENERATED", str(tmp_path / "cache"))
    chapter = make_chapter(tmp_path / "repo")
    first = grader.machine_generated(chapter)
    assert first == grader.machine_generated(chapter) and first.parent == tmp_path / "cache"
    assert stat.S_IMODE(first.parent.stat().st_mode) == 0o700
    (first / "release").mkdir(parents=True)
    (first / "release" / "a.txt").write_text("kept")
    (first / "complete").write_text("")
    chapter.text_form.write_text(chapter.text_form.read_text() + "\n# a hidden test edited\n")
    os.utime(first, (1, 1))  # unused for decades
    second = grader.machine_generated(chapter)
    assert second != first and not first.exists(), "the old version stays, or the new one is not told apart"

    (second / "source").mkdir(parents=True)
    (second / "source" / "x").write_text("")
    (second / "complete").write_text("")  # but no release/ nor gradebook.db: the copy fails half-way
    work = tmp_path / "work"
    work.mkdir()
    assert grader.copy_generated(second, work) is False
    assert list(work.iterdir()) == [], "a half-made copy stayed in the grader's folder"


def _the_gradebook_is_generated_again_when_its_rows_changed(out: Path, chapter, key: str) -> None:
    """The record of the chapter's rows is believed only while the gradebook still holds exactly them."""
    import sqlite3
    from autograder.grade import gradebook
    known = out / ".resume" / "01_mini" / ".gradebook.json"
    db = out / "gradebook.db"
    remember = {k: v for k, v in json.loads(known.read_text()).items() if k != "rows"}
    assert remember["key"] == key
    assert gradebook._generated_already("01_mini", f"sqlite:///{db}", known, dict(remember))
    changed = out / "changed.db"
    shutil.copyfile(db, changed)
    with sqlite3.connect(changed) as connection:  # a hidden test changed by a run of another course version
        assert connection.execute("UPDATE source_cell SET source = source || '#'").rowcount > 0
    assert not gradebook._generated_already("01_mini", f"sqlite:///{changed}", known, dict(remember))
    assert not gradebook._generated_already("01_mini", f"sqlite:///{out / 'empty.db'}", known, dict(remember))
    assert not gradebook._generated_already("01_mini", f"sqlite:///{db}", known, {**remember, "key": "other"})


def test_unusable_submissions_exit_2_with_a_message(repo, tmp_path):
    root, _, _ = repo
    (tmp_path / "bad.zip").write_text("not a zip")
    done = subprocess.run(AUTOGRADER + ["grade", "01_mini", str(tmp_path / "bad.zip"), "--out", str(tmp_path / "o"),
                                        "--repo", str(root)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "not a readable zip file" in done.stderr
    assert not (tmp_path / "o" / "grades.csv").exists()


def test_grade_class_grades_a_class_from_python_as_the_command_does(repo, tmp_path, monkeypatch):
    """The command is a thin caller of autograder.grade.grade_class (issue 17, item 3): the same
    grading from Python, a result object back, the errors as exceptions (never SystemExit)."""
    from autograder.chapters import ChapterNotFound
    from autograder.grade import ClassResult, GradeError, GradeOptions, grade_class
    root, chapter, release = repo
    students = class_of(release, 3)  # right, hidden-wrong, blank
    folders = write_class(tmp_path / "class", students)
    said, landed = [], []
    options = GradeOptions(workers=1, repo=root, say=said.append, warn=said.append,
                           progress=lambda result, done, total: landed.append((result.student, done, total)))
    graded = grade_class("01_mini", folders, tmp_path / "out", options)
    assert isinstance(graded, ClassResult) and graded.chapter == chapter and graded.workers == 1
    assert [r.student for r in graded.results] == ["s00", "s01", "s02"]
    assert [r.score for r in graded.results] == [3, 1, 0], [r.to_json() for r in graded.results]
    assert {s for s, _, _ in landed} == {"s00", "s01", "s02"} and sorted(d for _, d, _ in landed) == [1, 2, 3]
    assert {total for _, _, total in landed} == {3}
    assert said == ["grading 3 submissions of 01_mini with 1 worker(s), sandboxed ..."], said
    assert {r["student"]: float(r["score"]) for r in rows(tmp_path / "out")} == {"s00": 3, "s01": 1, "s02": 0}
    assert graded.report_error is None and all(p.is_file() for p in graded.report_paths)
    assert (tmp_path / "out" / "feedback" / "s01" / "01_mini.html").is_file()

    # incremental (issue 43): s02 resubmits a right answer; only s02 is graded again, the others kept
    nbformat.write(class_of(release, 1)["s00"], folders / "s02" / "01_mini.ipynb")
    said.clear(), landed.clear()
    options.only_changed = True
    _generated_once_then_kept(tmp_path / "out", chapter, monkeypatch)
    again = grade_class("01_mini", folders, tmp_path / "out", options)
    assert said[-1] == "1 new or changed, 2 unchanged (their grades kept; regrade everyone with --all)", said
    assert landed == [("s02", 3, 3)], landed
    assert [r.score for r in again.results] == [3, 1, 3]
    assert {r["student"]: float(r["score"]) for r in rows(tmp_path / "out")} == {"s00": 3, "s01": 1, "s02": 3}
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{tmp_path / 'out' / 'gradebook.db'}") as gb:  # recorded without generating again
        assert gb.find_submission("01_mini", "s02").score == 3 and gb.find_submission("01_mini", "s01").score == 1
    _the_gradebook_is_generated_again_when_its_rows_changed(tmp_path / "out", chapter, again.key)
    options.only_changed = False

    with pytest.raises(ChapterNotFound, match="no chapter '99_none'"):
        grade_class("99_none", folders, tmp_path / "never", options)
    with pytest.raises(GradeError, match="is neither a folder of submissions nor a .zip of one"):
        grade_class(chapter, tmp_path / "missing", tmp_path / "never", options)
    (tmp_path / "nobody").mkdir()
    with pytest.raises(GradeError, match="no student folders found in"):
        grade_class(chapter, tmp_path / "nobody", tmp_path / "never", options)
    assert not (tmp_path / "never").exists()
