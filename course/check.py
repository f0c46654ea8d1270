"""The checks a student runs while working.

``Checker(chapter)()`` re-runs the *saved* notebook in a fresh kernel, as the
grader will, and lists every exercise as passed, failed, not attempted, error or
manually graded. ``Checker(chapter)("ex_id")`` runs that exercise's visible tests
in the live kernel, so a fix can be tried without re-running everything. A pass
there means the visible tests passed (PASSED_VISIBLE says so wherever it is shown).

Hidden tests are not in a student's notebook. A self-learner working in a clone of
the course's repository has them in source/: ``check(hidden=True)`` and
``course check --hidden`` grade the saved notebook as the grader does (its
sandbox, its feedback: messages, never a hidden test's source). That is
course/hidden.py, run by the `course` command in a process of its own: neither
this module nor the student's kernel ever imports the grader.
"""
from __future__ import annotations

import html
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

from course.notebook import NotebookError, exercise_defining, exercises, expect_chapter, read_notebook
from course.verdicts import (ERROR, FAILED, MANUAL, NOT_ATTEMPTED, PASSED, Status, Verdict, error_of,
                             verdict_from_error)

# Set while a notebook is being run by a check or by the grader, so that a
# `check()` left in a cell does not start a check inside the check.
RUNNING_ENV = "COURSE_CHECK_RUNNING"
CELL_TIMEOUT_S = 300
# What a pass of the student's own check means: the grader's feedback says "passed" once the hidden tests ran.
PASSED_VISIBLE = "visible tests passed — hidden tests try the same rules on new inputs at grading"
HIDDEN_HEADER = "Graded the saved file {path} as the grader does: the chapter's hidden tests, in the grader's sandbox"
SAVE_FIRST = " (save with Ctrl+S first: unsaved edits are not seen)"


def run_fresh(nb, cwd: Path, timeout: int = CELL_TIMEOUT_S):
    """Execute a notebook in a new kernel of this Python, keeping going after errors."""
    from nbclient import NotebookClient

    env_before = os.environ.get(RUNNING_ENV)
    os.environ[RUNNING_ENV] = "1"
    try:
        client = NotebookClient(
            nb, timeout=timeout, allow_errors=True, kernel_name="python3",
            resources={"metadata": {"path": str(cwd)}},
        )
        client.execute(stderr=subprocess.DEVNULL)  # the kernel's own start-up warnings are not the student's
    finally:
        if env_before is None:
            os.environ.pop(RUNNING_ENV, None)
        else:
            os.environ[RUNNING_ENV] = env_before
    return nb


def verdicts_of_executed(nb) -> list[Verdict]:
    """One verdict per exercise of an executed notebook."""
    result = []
    defined = exercise_defining(nb)
    for ex in exercises(nb).values():
        if ex.manual:
            result.append(Verdict(ex.id, MANUAL, "graded by your instructor", 0.0, ex.points))
            continue
        solution_error = next((error_of(nb.cells[i]) for i in ex.solution_cells if error_of(nb.cells[i])), None)
        if solution_error and solution_error[0] == "NotImplementedError":
            status, message = verdict_from_error(ex.id, solution_error)
        else:
            status, message = PASSED, ""
            for i in ex.test_cells:
                status, message = verdict_from_error(ex.id, error_of(nb.cells[i]), defined)
                if status != PASSED:
                    break
            if not ex.test_cells:
                status, message = ERROR, "the test cell of this exercise is missing: restore it from release/."
        points = ex.points if status == PASSED else 0.0
        result.append(Verdict(ex.id, status, message, points, ex.points))
    return result


def check_notebook(path: str | Path, chapter: str | None = None, exercise: str | None = None) -> list[Verdict]:
    """Run the notebook at `path` in a fresh kernel and return its verdicts (only
    `exercise`'s, when given: the run then stops after that exercise's tests)."""
    path = Path(path)
    nb = read_notebook(path)
    notebook_chapter(nb, path, chapter)
    found = exercises(nb)
    if exercise is not None:
        ex = found.get(exercise)
        if ex is None:
            known = ", ".join(e for e, x in found.items() if not x.manual)
            raise NotebookError(f"no exercise {exercise!r} in {path.name}. Exercises: {known}.")
        if ex.test_cells:
            nb.cells = nb.cells[: max(ex.test_cells) + 1]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    verdicts = verdicts_of_executed(run_fresh(nb, path.parent.resolve()))
    return [v for v in verdicts if exercise is None or v.exercise == exercise]


def _message(v: Verdict, hidden: bool) -> str:
    """What a verdict's row says: a pass of the visible tests says what it does not cover."""
    if v.status == PASSED and not v.message and not hidden:
        return PASSED_VISIBLE
    return v.message


def format_table(verdicts: list[Verdict], hidden: bool = False) -> str:
    """The verdicts as text; `hidden`: the grader's (a pass then means the hidden tests passed too)."""
    width = max([len(v.exercise) for v in verdicts] + [8])
    lines = [f"{'exercise':<{width}}  {'status':<15} points"]
    for v in verdicts:
        lines.append(f"{v.exercise:<{width}}  {v.status:<15} {v.points:g}/{v.max_points:g}")
        if v.status != MANUAL:
            lines.extend(f"{'':<{width}}    {line}" for line in _message(v, hidden).splitlines())
    auto = [v for v in verdicts if v.status != MANUAL]
    lines.append(f"total: {sum(v.points for v in auto):g}/{sum(v.max_points for v in auto):g} automatic points")
    return "\n".join(lines)


def format_hidden(path: Path, verdicts: list[Verdict], notes: list[str]) -> str:
    """The grader's verdicts as text, under a line that says which tests ran."""
    lines = [HIDDEN_HEADER.format(path=path), format_table(verdicts, hidden=True)]
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def _html_table(verdicts: list[Verdict], hidden: bool = False) -> str:
    colour = {PASSED: "#1a7f37", FAILED: "#cf222e", ERROR: "#9a6700", NOT_ATTEMPTED: "#57606a", MANUAL: "#0969da"}
    rows = "".join(
        f"<tr><td><code>{html.escape(v.exercise)}</code></td>"
        f"<td style='color:{colour.get(v.status, '#000')};font-weight:bold'>{v.status}</td>"
        f"<td>{v.points:g}/{v.max_points:g}</td>"
        f"<td><pre style='margin:0;white-space:pre-wrap'>{html.escape(_message(v, hidden))}</pre></td></tr>"
        for v in verdicts
    )
    return (f"<table class='course-check'><tr><th>exercise</th><th>status</th><th>points</th>"
            f"<th>message</th></tr>{rows}</table>")


class HiddenTestsUnavailable(Exception):
    """The hidden tests cannot run here (course/hidden.py); the message says why, in one line."""


def notebook_chapter(nb, path: Path, chapter: str | None) -> str:
    """The chapter of the notebook `nb` read from `path`: `chapter`, checked, or the one its metadata names."""
    if chapter is not None:
        expect_chapter(nb, chapter, path)
        return chapter
    found = nb.metadata.get("course", {}).get("chapter")
    if not found:
        raise NotebookError(f"{path} is not a notebook of this course (it names no chapter).")
    return found


class Checker:
    """`check()` for the whole saved notebook, `check("ex_id")` for one exercise, live; `check(hidden=True)`
    grades the saved notebook with the hidden tests, where a clone of the course has them. Each shows its
    verdicts and returns None (nothing for Jupyter to echo); `verdicts(...)` returns them instead."""

    def __init__(self, chapter: str, notebook: str | Path | None = None):
        self.chapter = chapter
        self.notebook = Path(notebook) if notebook else None

    def _path(self) -> Path:
        if self.notebook:
            return self.notebook
        # JupyterLab tells the kernel which notebook it serves; fall back to the
        # chapter's file name in the working folder (the notebook's own folder).
        session = _namespace().get("__session__")
        if session and str(session).endswith(".ipynb") and Path(session).exists():
            return Path(session)
        return Path(f"{self.chapter}.ipynb")

    def __call__(self, exercise: str | None = None, *, hidden: bool = False) -> None:
        if os.environ.get(RUNNING_ENV):
            return  # a check() left in a cell, reached while checking or grading
        path = self._path()
        try:
            if hidden:
                verdicts, notes = self._hidden(path)
                _show_hidden(path, [v for v in verdicts if exercise in (None, v.exercise)], notes)
                return
            stale = _unsaved_in_kernel(path) if exercise is None else 0
            verdicts = self.verdicts(exercise)
        except (NotebookError, HiddenTestsUnavailable) as e:
            _show_text(f"check: {e}")
            return
        _show(verdicts, whole=exercise is None, path=path, stale=stale)

    def verdicts(self, exercise: str | None = None) -> list[Verdict]:
        """The verdicts `check(exercise)` shows, without showing them."""
        path = self._path()
        if exercise is None:
            return check_notebook(path, self.chapter)
        return [self._run_visible_tests(path, exercise)]

    def _hidden(self, path: Path) -> tuple[list[Verdict], list[str]]:
        """grade_with_hidden_tests in a process of its own: the grader (nbgrader, its gradebook, the
        sandbox's pipes) never loads into the student's kernel."""
        done = subprocess.run([sys.executable, "-m", "course.cli", "check", "--hidden", "--json", str(path)],
                              capture_output=True, text=True, env={**os.environ, "PYTHONIOENCODING": "utf-8"})
        try:
            answer = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise HiddenTestsUnavailable(f"the grader stopped without verdicts: {tail}") from None
        if "unavailable" in answer:
            raise HiddenTestsUnavailable(answer["unavailable"])
        if "error" in answer:
            raise NotebookError(answer["error"])
        return [Verdict(**{**v, "status": Status(v["status"])}) for v in answer["verdicts"]], answer["notes"]

    def _run_visible_tests(self, path: Path, exercise: str) -> Verdict:
        nb = read_notebook(path)
        expect_chapter(nb, self.chapter, path)
        found = exercises(nb)
        if exercise not in found:
            known = ", ".join(e for e, ex in found.items() if not ex.manual)
            raise NotebookError(f"no exercise {exercise!r} in {self.chapter}. Exercises: {known}.")
        ex = found[exercise]
        if ex.manual:
            return Verdict(ex.id, MANUAL, "graded by your instructor", 0.0, ex.points)
        namespace = _namespace()
        for i in ex.test_cells:
            try:
                exec(compile(nb.cells[i].source, f"<visible tests of {exercise}>", "exec"), namespace)
            except Exception as e:  # the verdict names the exception; the student's cell shows the rest
                status, message = verdict_from_error(exercise, (type(e).__name__, str(e)), exercise_defining(nb))
                if status == ERROR:
                    message += "\n" + "".join(traceback.format_exception(e)[-3:])
                return Verdict(exercise, status, message, 0.0, ex.points)
        return Verdict(exercise, PASSED, PASSED_VISIBLE, ex.points, ex.points)


def _namespace() -> dict:
    """The namespace the student's cells run in: IPython's user namespace in a kernel."""
    try:
        from IPython import get_ipython
        if get_ipython() is not None:
            return get_ipython().user_ns
    except ImportError:
        pass
    return sys.modules["__main__"].__dict__


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
        return get_ipython() is not None and "IPKernelApp" in get_ipython().config
    except ImportError:
        return False


def _show_text(text: str) -> None:
    print(text)


def _show_hidden(path: Path, verdicts: list[Verdict], notes: list[str]) -> None:
    if _in_notebook():
        from IPython.display import HTML, display
        items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
        display(HTML(f"<p>{html.escape(HIDDEN_HEADER.format(path=path))}{SAVE_FIRST}</p>"
                     + _html_table(verdicts, hidden=True)
                     + (f"<p>Notes from the grader:</p><ul>{items}</ul>" if notes else "")))
    else:
        print(format_hidden(path, verdicts, notes))


def unsaved_cells(nb, ran: list[str]) -> int:
    """How many of the cells a kernel ran (`ran`, oldest first, the cell running now last) the saved notebook
    `nb` does not hold as they ran: edits not saved yet (or cells deleted since)."""
    def norm(source: str) -> str:
        return "\n".join(line.rstrip() for line in source.strip().splitlines())
    saved = {norm(c.source) for c in nb.cells if c.cell_type == "code"}
    return len({norm(s) for s in ran[:-1] if s.strip()} - saved)


def unsaved_warning(path: Path, count: int) -> str:
    """What check() says when the saved notebook is older than what the kernel ran (`count` cells)."""
    return (f"The saved file {path.name} is older than what this kernel ran: {count} cell(s) you ran are not in "
            f"it as they ran. check() grades the saved file, so unsaved work shows as not attempted or failed. "
            f"Save (Ctrl+S), then run check() again.")


def _unsaved_in_kernel(path: Path) -> int:
    """unsaved_cells of the saved notebook at `path` against this kernel's history; 0 outside a kernel."""
    if not _in_notebook():
        return 0
    from IPython import get_ipython
    try:
        return unsaved_cells(read_notebook(path), list(get_ipython().history_manager.input_hist_raw[1:]))
    except (OSError, NotebookError):
        return 0


def _show(verdicts, whole: bool, path: Path, stale: int = 0) -> None:
    header = f"Checked the saved file {path} in a fresh kernel" if whole else "Ran the visible tests in this kernel"
    if _in_notebook():
        from IPython.display import HTML, display
        note = SAVE_FIRST if whole else ""
        # Said above the table, large and red: a student who ran everything and did not save must not read
        # "not attempted" as the verdict on their code.
        warning = (f"<div class='course-unsaved' style='border:2px solid #cf222e;background:#ffebe9;"
                   f"padding:.6rem .8rem;margin:.4rem 0;font-size:1.1em;font-weight:bold'>⚠ "
                   f"{html.escape(unsaved_warning(path, stale))}</div>") if stale else ""
        display(HTML(warning + f"<p>{html.escape(header)}{note}</p>" + _html_table(verdicts)))
    else:
        if stale:
            print("WARNING: " + unsaved_warning(path, stale))
        print(header)
        print(format_table(verdicts))
