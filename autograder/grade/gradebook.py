"""The class's nbgrader gradebook, written once by the parent process.

Each grader worker scores submissions in its own throwaway gradebook (nbgrader
autograde needs one); the rows it returns are recorded here, in the gradebook
the instructor keeps, so that `nbgrader export` and formgrader see every
student. Grading a student again replaces their submission: the old one is
removed first, never duplicated.

A SQLite gradebook (the default) is written as a copy that replaces the
original only once every student is in, so an interrupted run leaves the old
gradebook as it was. Any other SQLAlchemy URL is written in place, one commit
per student. A PostgreSQL gradebook (`postgresql://user:password@host/db`,
through psycopg) is checked before anything is graded (`check`), and each run
writes it holding an advisory lock, so that runs grading different chapters
into it at the same time never race on creating its tables, its students or
nbgrader's alembic stamp.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

from autograder import nbgrader_env
from autograder.chapters import Chapter
from autograder.grade.files import write_atomic


def sqlite_path(db_url: str) -> Path | None:
    """The file of a sqlite:/// URL, or None for another database."""
    return Path(db_url[len("sqlite:///"):]) if db_url.startswith("sqlite:///") else None


class GradebookError(Exception):
    """The gradebook cannot be used; the message says why and what to do."""


def engine_url(db_url: str) -> str:
    """`db_url` with its driver named: plain postgresql:// means psycopg (3) whatever SQLAlchemy's default."""
    for plain in ("postgresql://", "postgres://"):
        if db_url.startswith(plain):
            return "postgresql+psycopg://" + db_url[len(plain):]
    return db_url


def describe(db_url: str) -> str:
    """`db_url` fit to print: without its password."""
    from sqlalchemy.engine import make_url
    try:
        return make_url(db_url).render_as_string(hide_password=True)
    except Exception:
        return db_url.split("@")[-1]


def check(db_url: str, timeout_s: int = 10) -> None:
    """Raise GradebookError unless a server gradebook at `db_url` answers (SQLite needs no check)."""
    if db_url.startswith("sqlite"):
        return
    import sqlalchemy
    from sqlalchemy import exc
    try:
        url = sqlalchemy.engine.make_url(engine_url(db_url))
        args = {"connect_timeout": timeout_s} if url.get_backend_name() == "postgresql" else {}
        engine = sqlalchemy.create_engine(url, connect_args=args, poolclass=sqlalchemy.pool.NullPool)
    except exc.ArgumentError as e:
        raise GradebookError(f"{db_url!r} is not a database URL ({e}); a PostgreSQL gradebook is "
                             "postgresql://USER:PASSWORD@HOST:PORT/DATABASE") from None
    except (ImportError, exc.NoSuchModuleError) as e:
        raise GradebookError(f"no driver for the gradebook {describe(db_url)} ({e}); for PostgreSQL, "
                             "install the course again (scripts/setup.sh), which brings psycopg") from None
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text("SELECT 1"))
    except exc.DBAPIError as e:
        reason = " ".join(str(getattr(e, "orig", None) or e).split())[:400].rstrip(".")
        end = "" if reason.endswith("?") else "."
        raise GradebookError(f"cannot reach the gradebook {describe(db_url)}: {reason}{end} Check that the server "
                             "is running and that the address, user, password and database are right.") from None
    finally:
        engine.dispose()


COURSE_ID = "default_course"  # nbgrader's Gradebook default


# pg_advisory_lock's key for "a run is writing this gradebook": any constant the course alone uses.
_LOCK_KEY = 0x636F75727365  # "course"


@contextlib.contextmanager
def _exclusive(db_url: str):
    """Hold PostgreSQL's advisory lock of the gradebook while writing it (other databases: nothing)."""
    import sqlalchemy
    url = sqlalchemy.engine.make_url(db_url)
    if url.get_backend_name() != "postgresql":
        yield
        return
    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": _LOCK_KEY})
            connection.commit()
            try:
                yield
            finally:
                connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": _LOCK_KEY})
                connection.commit()
    finally:
        engine.dispose()


def record(chapter: Chapter, db_url: str, results: list, known: Path | None = None, key: str = "") -> None:
    """Put `results` (autograder.grade.grader.Result) into the gradebook at `db_url`.

    `known` (a file) remembers, for the grader's `key`, the chapter's rows as generate_assignment left
    them in this gradebook: a later run whose key and rows still match does not generate it again."""
    path = sqlite_path(db_url)
    if path is None:
        url = engine_url(db_url)
        with _exclusive(url):
            _record(chapter, url, results, known, key, db_url)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        if path.exists():
            shutil.copyfile(path, tmp)
        else:
            os.unlink(tmp)
        _record(chapter, f"sqlite:///{tmp}", results, known, key, db_url)  # known by its own name, not the copy's
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _record(chapter: Chapter, db_url: str, results: list, known: Path | None = None, key: str = "",
            gradebook: str = "") -> None:
    from nbgrader.api import Gradebook

    nbgrader_env.stamp_in_process()
    from importlib.metadata import version
    gradebook = hashlib.sha256((gradebook or db_url).encode()).hexdigest()[:16]
    remember = {"key": key, "nbgrader": version("nbgrader"), "db": gradebook} if known and key else None
    if remember is None or not _generated_already(chapter.id, db_url, known, remember):
        _generate(chapter, db_url)
        if remember is not None:
            with Gradebook(db_url, COURSE_ID) as gb:
                remember["rows"] = assignment_rows(gb, chapter.id)
    with Gradebook(db_url, COURSE_ID) as gb, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not in session.*")  # nbgrader's own add_submission
        for result in results:
            try:
                _record_one(gb, chapter, result, result.grades, result.timestamp)
            except Exception as e:  # this student's rows, not the class's gradebook: record them as 0
                gb.db.rollback()
                result.notes.append(f"the gradebook did not accept this submission's grades ({type(e).__name__}: "
                                    f"{str(e)[:200]}): it holds 0 points for it; tell your instructor")
                _record_one(gb, chapter, result, [], None)
    if remember is not None and "rows" in remember:
        write_atomic(known, json.dumps(remember) + "\n")


def _generate(chapter: Chapter, db_url: str) -> None:
    """The chapter's assignment, notebooks and cells in the gradebook, as nbgrader's generate_assignment
    records them (5-10 s: nbgrader converts the whole notebook)."""
    from autograder.grade.grader import prepare_course
    with tempfile.TemporaryDirectory(prefix="course-gradebook-") as tmp:
        prepare_course(chapter, Path(tmp))  # the assignment's cells, as generate_assignment records them
        # The course the assignment belongs to: nbgrader's default course_id ('') has no row in the course
        # table, which SQLite lets pass and PostgreSQL refuses (a foreign key); this is the Gradebook's own.
        api = nbgrader_env.api(Path(tmp), db_url, **{"CourseDirectory.course_id": COURSE_ID})
        with nbgrader_env.quiet():
            outcome = api.generate_assignment(chapter.id)
        nbgrader_env.check(outcome, f"generate_assignment {chapter.id} into {describe(db_url)}")


def _generated_already(chapter_id: str, db_url: str, known: Path, remember: dict) -> bool:
    """Did a run with the same grader key generate this chapter into this gradebook, and are its rows
    still exactly those it left (none deleted or changed since, by a run of another version, say)?"""
    from nbgrader.api import Gradebook
    try:
        before = json.loads(known.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(before, dict) or any(before.get(k) != v for k, v in remember.items()):
        return False
    with Gradebook(db_url, COURSE_ID) as gb:
        rows = assignment_rows(gb, chapter_id)
    if rows is None or rows != before.get("rows"):
        return False
    remember["rows"] = rows
    return True


def assignment_rows(gb, chapter_id: str) -> str | None:
    """A digest of what generate_assignment records for a chapter (its notebooks and every grade,
    solution, task and source cell, column by column); None when the gradebook has no such assignment."""
    from nbgrader.api import MissingEntry
    from sqlalchemy import inspect
    try:
        assignment = gb.find_assignment(chapter_id)
    except MissingEntry:
        return None
    h = hashlib.sha256()
    for notebook in sorted(assignment.notebooks, key=lambda n: n.name):
        h.update(b"notebook\0" + notebook.name.encode())
        for kind in ("grade_cells", "solution_cells", "task_cells", "source_cells"):
            for cell in sorted(getattr(notebook, kind), key=lambda c: c.name):
                columns = {a.key: getattr(cell, a.key) for a in inspect(cell).mapper.column_attrs
                           if not a.key.endswith("id")}
                h.update(f"{kind}\0{json.dumps(columns, sort_keys=True, default=str)}\0".encode())
    return h.hexdigest()


def _record_one(gb, chapter: Chapter, result, rows: list[dict], timestamp: str | None) -> None:
    from nbgrader.api import MissingEntry
    gb.update_or_create_student(result.student)
    try:
        gb.remove_submission(chapter.id, result.student)
    except MissingEntry:
        pass
    when = datetime.datetime.fromisoformat(timestamp) if timestamp else None
    submission = gb.add_submission(chapter.id, result.student, timestamp=when)
    grades = {(r["notebook"], r["name"]): r for r in rows if "name" in r}
    comments = {(r["notebook"], r["comment"]): r for r in rows if "comment" in r}
    for notebook in submission.notebooks:
        for grade in notebook.grades:
            row = grades.get((notebook.name, grade.name))
            if row is not None:
                grade.auto_score = row["auto_score"]
                grade.needs_manual_grade = row.get("needs_manual_grade", False)
            elif not rows:  # nothing graded: 0, not "needs manual grading"
                grade.auto_score, grade.needs_manual_grade = 0.0, False
        for comment in notebook.comments:
            row = comments.get((notebook.name, comment.name))
            if row is not None:
                comment.auto_comment = row["auto_comment"]
    gb.db.commit()
