"""The class's nbgrader gradebook, written once by the parent process.

Each grader worker scores submissions in its own throwaway gradebook (nbgrader
autograde needs one); the rows it returns are recorded here, in the gradebook
the instructor keeps, so that `nbgrader export` and formgrader see every
student. Grading a student again replaces their submission: the old one is
removed first, never duplicated.

A SQLite gradebook (the default) is written as a copy that replaces the
original only once every student is in, so an interrupted run leaves the old
gradebook as it was. Any other SQLAlchemy URL is written in place, one commit
per student.
"""
from __future__ import annotations

import datetime
import os
import shutil
import tempfile
import warnings
from pathlib import Path

from autograder import nbgrader_env
from autograder.chapters import Chapter


def sqlite_path(db_url: str) -> Path | None:
    return Path(db_url[len("sqlite:///"):]) if db_url.startswith("sqlite:///") else None


def record(chapter: Chapter, db_url: str, results: list) -> None:
    """Put `results` (autograder.grade.Result) into the gradebook at `db_url`."""
    path = sqlite_path(db_url)
    if path is None:
        _record(chapter, db_url, results)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        if path.exists():
            shutil.copyfile(path, tmp)
        else:
            os.unlink(tmp)
        _record(chapter, f"sqlite:///{tmp}", results)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _record(chapter: Chapter, db_url: str, results: list) -> None:
    from nbgrader.api import Gradebook, MissingEntry
    from autograder.grade import prepare_course

    with tempfile.TemporaryDirectory(prefix="course-gradebook-") as tmp:
        prepare_course(chapter, Path(tmp))  # the assignment's cells, as generate_assignment records them
        api = nbgrader_env.api(Path(tmp), db_url)
        with nbgrader_env.quiet():
            outcome = api.generate_assignment(chapter.id)
        nbgrader_env.check(outcome, f"generate_assignment {chapter.id} into {db_url}")
    with Gradebook(db_url) as gb, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not in session.*")  # nbgrader's own add_submission
        for result in results:
            gb.update_or_create_student(result.student)
            try:
                gb.remove_submission(chapter.id, result.student)
            except MissingEntry:
                pass
            timestamp = datetime.datetime.fromisoformat(result.timestamp) if result.timestamp else None
            submission = gb.add_submission(chapter.id, result.student, timestamp=timestamp)
            grades = {(r["notebook"], r["name"]): r for r in result.grades if "name" in r}
            comments = {(r["notebook"], r["comment"]): r for r in result.grades if "comment" in r}
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    row = grades.get((notebook.name, grade.name))
                    if row is not None:
                        grade.auto_score = row["auto_score"]
                        grade.needs_manual_grade = row.get("needs_manual_grade", False)
                for comment in notebook.comments:
                    row = comments.get((notebook.name, comment.name))
                    if row is not None:
                        comment.auto_comment = row["auto_comment"]
            gb.db.commit()
