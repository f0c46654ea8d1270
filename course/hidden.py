"""`course check --hidden`: a self-learner's notebook graded with the chapter's hidden tests, as the grader
grades it: the clone's source/ and the grader's own code (autograder/grade/grader.py) in its sandbox
(autograder/sandbox/). The grader is imported only here, and only when asked, from a clone of the course's
repository; an installed `course` package and the class hub have no source/, and are told so.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from course.check import HiddenTestsUnavailable, notebook_chapter
from course.notebook import read_notebook
from course.verdicts import Verdict

__all__ = ["course_clone", "grade_with_hidden_tests"]


def course_clone(notebook: Path, chapter: str) -> Path | None:
    """The clone of the course's repository that holds `chapter`'s hidden tests: the first folder above the
    notebook, or above this package, with source/<chapter>/<chapter>.py and the grader beside it."""
    for place in [*notebook.resolve().parents, Path(__file__).resolve().parent.parent]:
        if (place / "source" / chapter / f"{chapter}.py").is_file() and (place / "autograder").is_dir():
            return place
    return None


def grade_with_hidden_tests(path: str | Path, chapter: str | None = None) -> tuple[list[Verdict], list[str]]:
    """(verdicts, notes) of the grader on the saved notebook at `path`: the chapter's hidden tests from the
    course clone's source/, in the grader's sandbox. Raises HiddenTestsUnavailable where they cannot run
    (before running anything), NotebookError for a file that is not this course's notebook."""
    path = Path(path)
    chapter = notebook_chapter(read_notebook(path), path, chapter)
    repo = course_clone(path, chapter)
    if repo is None:
        raise HiddenTestsUnavailable(
            f"the hidden tests of {chapter} are not here: they live in source/ of a clone of the course's "
            "repository (an installed course package or the class hub has none), and your grader runs them.")
    if shutil.which("bwrap") is None:
        raise HiddenTestsUnavailable("the hidden tests run only in the grader's sandbox, and bubblewrap is not "
                                     "installed here: `apt-get install bubblewrap` (scripts/setup.sh does it).")
    try:  # the grader, and nbgrader under it: only now, and only in a clone (see the module's docstring)
        from autograder.chapters import find
        from autograder.grade.grader import Grader
        from autograder.sandbox.bubblewrap import SandboxError
    except ImportError as e:
        raise HiddenTestsUnavailable(f"the grader cannot be imported here ({e}): run the clone's own "
                                     f"{repo / '.venv/bin/course'}.") from None
    source = find(repo / "source", chapter)
    if not source.notebook.is_file():
        raise HiddenTestsUnavailable(f"{source.notebook} is not built: run `make build` in {repo}.")
    with tempfile.TemporaryDirectory(prefix="course-hidden-") as work:
        grader = Grader(source, Path(work) / "grading")
        try:
            result = grader.grade("you", path.resolve())
        except SandboxError as e:
            raise HiddenTestsUnavailable("the grader's sandbox cannot run here: "
                                         + (str(e).strip().splitlines() or ["no reason given"])[-1]) from None
        finally:
            grader.close()
    return result.verdicts, result.notes
