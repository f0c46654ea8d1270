"""A PostgreSQL gradebook (issue 18, item 3): `autograder grade --db postgresql://...`
against a real server that these tests start on a loopback port in a temporary
folder and stop (tests/support/postgres_server.py). The same class graded into PostgreSQL
and into the default SQLite gradebook gets the same grades; two runs grading
different chapters into one PostgreSQL gradebook at the same time lose nothing;
a server that is down or refuses the login is named before anything is graded."""
from __future__ import annotations

import csv
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from postgres_server import free_port, postgres  # noqa: F401  (postgres is a fixture)
from test_grading_cli import class_of, released, write_class
from test_grading_sandbox import CHAPTER_TEXT, make_chapter

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("gradebook_postgres")]
AUTOGRADER = [sys.executable, "-m", "autograder.cli"]
CLASS_SIZE = 5  # one of each kind of answer in class_of: right, wrong, blank, broken, not JSON


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course repository with two small chapters (01_mini and its twin 02_mini) and a class for each."""
    root = tmp_path_factory.mktemp("repo")
    first = make_chapter(root)
    make_chapter(root, CHAPTER_TEXT.replace("chapter: 01_mini", "chapter: 02_mini"), "02_mini")
    students = class_of(released(first, tmp_path_factory.mktemp("release")), CLASS_SIZE)
    classes = tmp_path_factory.mktemp("classes")
    write_class(classes / "01_mini", students)
    for student, answer in students.items():  # the same answers, as 02_mini notebooks
        target = classes / "02_mini" / student / "02_mini.ipynb"
        target.parent.mkdir(parents=True)
        if isinstance(answer, str):
            target.write_text(answer)
        else:
            twin = nbformat.from_dict(nbformat.reads(nbformat.writes(answer), 4))
            twin.metadata["course"]["chapter"] = "02_mini"
            nbformat.write(twin, target)
    return root, classes


def _grade(root: Path, chapter: str, submissions: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(AUTOGRADER + ["grade", chapter, str(submissions), "--out", str(out), "--workers", "1",
                                          "--repo", str(root), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(run: subprocess.Popen) -> str:
    stdout, stderr = run.communicate(timeout=600)
    assert run.returncode == 0, stdout + stderr
    return stdout + stderr


def gradebook_snapshot(db_url: str, chapter: str) -> dict[str, tuple[float, dict[str, float | None]]]:
    """{student: (score, {grade cell: auto score})} of `chapter`, read through nbgrader's own API."""
    from nbgrader.api import Gradebook
    from autograder.grade.gradebook import engine_url
    with Gradebook(engine_url(db_url)) as gb:
        out = {}
        for submission in gb.find_assignment(chapter).submissions:
            grades = {g.name: g.auto_score for nb in submission.notebooks for g in nb.grades}
            out[submission.student.id] = (float(submission.score), grades)
        return out


def _csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def graded(course, postgres, tmp_path_factory):
    """Three runs at once: 01_mini and 02_mini into one PostgreSQL gradebook, 01_mini into SQLite."""
    root, classes = course
    url = postgres.database("gradebook")
    tmp = tmp_path_factory.mktemp("graded")
    runs = [_grade(root, "01_mini", classes / "01_mini", tmp / "pg-01", "--db", url),
            _grade(root, "02_mini", classes / "02_mini", tmp / "pg-02", "--db", url),
            _grade(root, "01_mini", classes / "01_mini", tmp / "sqlite-01")]
    outputs = [_finish(r) for r in runs]
    return url, tmp, outputs


def test_postgresql_gets_the_same_grades_as_sqlite(graded):
    url, tmp, outputs = graded
    assert _csv(tmp / "pg-01" / "grades.csv") == _csv(tmp / "sqlite-01" / "grades.csv")
    in_postgres = gradebook_snapshot(url, "01_mini")
    in_sqlite = gradebook_snapshot(f"sqlite:///{tmp / 'sqlite-01' / 'gradebook.db'}", "01_mini")
    assert in_postgres == in_sqlite and len(in_postgres) == CLASS_SIZE
    assert {s: score for s, (score, _) in in_postgres.items()} == \
        {r["student"]: float(r["score"]) for r in _csv(tmp / "pg-01" / "grades.csv")}
    assert sorted(score for score, _ in in_postgres.values()) == [0, 0, 0, 1, 3]
    assert url.split("@")[0].split(":")[-1] not in outputs[0]  # the password is never printed
    assert "postgresql://course:***@127.0.0.1" in outputs[0]


def test_two_chapters_graded_at_once_into_one_gradebook_lose_nothing(graded):
    url, tmp, _ = graded
    for chapter in ("01_mini", "02_mini"):
        assert {s: score for s, (score, _) in gradebook_snapshot(url, chapter).items()} == \
            {r["student"]: float(r["score"]) for r in _csv(tmp / f"pg-{chapter[:2]}" / "grades.csv")}
    from nbgrader.api import Gradebook
    from autograder.grade.gradebook import engine_url
    with Gradebook(engine_url(url)) as gb:
        assert sorted(a.name for a in gb.assignments) == ["01_mini", "02_mini"]
        assert len(gb.students) == CLASS_SIZE
        assert all(len(s.submissions) == 2 for s in gb.students)


def test_the_report_reads_the_postgresql_gradebook(course, graded):
    root, _ = course
    url, tmp, _ = graded
    out = tmp / "pg-02"
    canvas = list(csv.reader(open(out / "report" / "02_mini-canvas.csv", newline="")))
    assert canvas[:2] == [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "02_mini"],
                          ["Points Possible", "", "", "", "", "5"]]
    assert {r[3]: r[5] for r in canvas[2:]} == {r["student"]: r["score"] for r in _csv(out / "grades.csv")}
    assert "postgresql://course:***@" in (out / "report" / "02_mini.html").read_text()
    done = subprocess.run(AUTOGRADER + ["report", "02_mini", "--out", str(out), "--db", url, "--repo", str(root)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    never = subprocess.run(AUTOGRADER + ["report", "01_mini", "--out", str(out), "--db", url, "--repo", str(root)],
                           capture_output=True, text=True, timeout=120)
    assert never.returncode == 2 and f"01_mini was never graded into {out}" in never.stderr


def _record(url: str, root: str, chapter: str, students: list[str]) -> None:
    from autograder.grade import gradebook
    from autograder.chapters import Chapter
    from autograder.grade.grader import Result
    chapter_obj = Chapter(chapter, Path(root) / "source" / chapter)
    nb = nbformat.read(chapter_obj.notebook, 4)
    tests = [c.metadata.nbgrader.grade_id for c in nb.cells
             if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata.nbgrader.get("solution")]
    results = [Result(s, chapter, grades=[{"notebook": chapter, "name": t, "auto_score": float(i % 2),
                                           "needs_manual_grade": False} for t in tests]) for i, s in enumerate(students)]
    gradebook.record(chapter_obj, url, results)


def _waiting(url: str) -> int:
    import psycopg
    with psycopg.connect(url, connect_timeout=10) as conn:
        return conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").fetchone()[0]


def test_writers_of_one_gradebook_take_turns(course, postgres):
    """Two runs' writes held at the gradebook's lock, then let go at the same instant into an empty database:
    the race that fails one of them without the lock (both create nbgrader's tables at once:
    "duplicate key value violates unique constraint pg_type_typname_nsp_index"). Both are recorded in full."""
    root, _ = course
    from autograder.grade import gradebook
    url = postgres.database("turns")
    students = [f"r{n}" for n in range(4)]
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_record, args=(url, str(root), ch, students)) for ch in ("01_mini", "02_mini")]
    with gradebook._exclusive(gradebook.engine_url(url)):
        for p in procs:
            p.start()
        deadline = time.monotonic() + 120
        while _waiting(url) < 2:  # both are at the lock, after their imports
            assert time.monotonic() < deadline and all(p.is_alive() for p in procs), "the writers did not wait"
            time.sleep(0.2)
        import psycopg
        with psycopg.connect(url, connect_timeout=10) as conn:  # nothing was written while they waited
            assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0, 0]
    for chapter in ("01_mini", "02_mini"):
        snapshot = gradebook_snapshot(url, chapter)
        assert sorted(snapshot) == students
        assert [snapshot[s][0] for s in students] == [0.0, 4.0, 0.0, 4.0]


def test_a_server_that_is_down_is_named_before_grading(course, tmp_path):
    root, classes = course
    port = free_port()  # nothing listens there
    started = time.monotonic()
    done = subprocess.run(AUTOGRADER + ["grade", "01_mini", str(classes / "01_mini"), "--out", str(tmp_path / "out"),
                                        "--repo", str(root), "--db",
                                        f"postgresql://course:s3cret@127.0.0.1:{port}/gradebook"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert f"cannot reach the gradebook postgresql://course:***@127.0.0.1:{port}/gradebook" in done.stderr
    assert "Check that the server is running" in done.stderr and "Nothing was graded." in done.stderr
    assert "s3cret" not in done.stderr + done.stdout and "grading" not in done.stdout
    assert not (tmp_path / "out").exists()  # no half-written output
    assert time.monotonic() - started < 60


def test_a_refused_login_is_named_before_grading(course, postgres, tmp_path):
    root, classes = course
    url = f"postgresql://course:wrong@127.0.0.1:{postgres.port}/postgres"
    done = subprocess.run(AUTOGRADER + ["grade", "01_mini", str(classes / "01_mini"), "--out", str(tmp_path / "out"),
                                        "--repo", str(root), "--db", url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "password authentication failed" in done.stderr
    assert "Nothing was graded." in done.stderr and not (tmp_path / "out").exists()


# Folder names a student can choose (none of them needs a safe id: nbgrader holds each as it is) that would
# change the gradebook if any code put a name into SQL's text instead of passing it as a parameter.
SQL_NAMES = ["o'brien", "x'); DROP TABLE student; --", 'say "hi"; DELETE FROM grade',
             "$$; TRUNCATE submitted_assignment; $$", "100%_sure'", "a' OR '1'='1"]


def test_student_names_with_quotes_and_sql_reach_postgresql_as_data(course, postgres):
    """Issue 42, item 6: names are parameters, never SQL. Each is recorded verbatim, with its own points,
    beside an ordinary neighbour, and every table of nbgrader's gradebook is still there with its rows."""
    from autograder.grade.intake import student_ids
    root, _ = course
    names = ["ana", *SQL_NAMES]
    assert student_ids(names) == {n: n for n in names}, "these names must reach the gradebook unchanged"
    url = postgres.database("names")
    _record(url, str(root), "01_mini", names)
    snapshot = gradebook_snapshot(url, "01_mini")
    assert sorted(snapshot) == sorted(names), f"the gradebook holds {sorted(snapshot)}, not the class's names"
    assert [snapshot[n][0] for n in names] == [float(4 * (i % 2)) for i in range(len(names))]
    import psycopg
    with psycopg.connect(url, connect_timeout=10) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert {"student", "grade", "submitted_assignment", "submitted_notebook"} <= tables, tables
        assert conn.execute("SELECT count(*) FROM student").fetchone()[0] == len(names)
        assert conn.execute("SELECT count(*) FROM submitted_assignment").fetchone()[0] == len(names)
