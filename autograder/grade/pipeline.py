"""Grade a class from Python: `grade_class(chapter, submissions, out, options)`, what `autograder grade` runs.

    from autograder.grade import GradeOptions, grade_class
    graded = grade_class("01_tensor", "class/", "out/", GradeOptions(workers=4))
    graded.results          # one Result per student folder, in the order of the folders
    graded.report_paths     # out/report/01_tensor.html, -figures.csv, -canvas.csv

The stages, in order: the checks that the class can be graded at all (the gradebook
server, bubblewrap), intake (grade/intake.py), grading on the local pool
(grade/workers.py) or a Dask cluster (grade/distributed.py), with the record that
lets an interrupted run resume (grade/journal.py), and then the files, all through temporary files
renamed into place (an interrupted run never leaves a half-written file):

    OUT/grades.csv                       student (the id), folder (as handed in), chapter, score, max_score,
                                         one column per exercise (grade/csv_cells.py: no cell is a formula)
    OUT/results/<student>.json           every exercise's points and message, and the notes
    OUT/feedback/<student>/<chapter>.html  the page to hand back (no hidden test in it)
    OUT/gradebook.db                     nbgrader's gradebook (or options.db): nbgrader export, formgrader
    OUT/autograded/<student>/<chapter>/  the executed notebooks, for formgrader (instructor only)
    OUT/report/                          the class report (grade/report.py)

Whatever one submission holds, it costs that submission only. What stops the whole
class is a `GradeError` (its message says why; the command exits 2), or Ctrl-C,
raised as `GradingInterrupted` once the results graded so far are recorded.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from autograder.chapters import REPO, Chapter, find
from autograder.grade.csv_cells import csv_text
from autograder.grade.files import write_atomic

__all__ = ["ClassResult", "GradeError", "GradeOptions", "GradingInterrupted", "grade_class", "shown"]


class GradeError(Exception):
    """The class cannot be graded at all (no sandbox, unreadable submissions, a gradebook server
    that refuses, no worker of the cluster): the message says why. Nothing was written."""


class GradingInterrupted(KeyboardInterrupt):
    """Ctrl-C while grading: the results graded so far are in `resume_folder`; grading again
    with `resume=True` grades only the rest."""

    def __init__(self, resume_folder: Path):
        super().__init__(str(resume_folder))
        self.resume_folder = resume_folder


def _say(line: str) -> None:
    print(line, flush=True)


def _warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class GradeOptions:
    """How to grade: where, with what limits, and whom to tell as it goes."""
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)  # local grader processes
    db: str | None = None  # gradebook SQLAlchemy URL (default: sqlite:///OUT/gradebook.db)
    limits: object | None = None  # autograder.sandbox.bubblewrap.Limits (default: Limits())
    scheduler: str | None = None  # tcp://HOST:PORT of a Dask cluster to grade on instead
    standing: bool = True  # without a scheduler: on this user's standing graders when they run (grade/standing.py)
    resume: bool = False  # keep the results an interrupted run recorded in OUT/.resume/
    only_changed: bool = False  # grade only submissions new or changed since the last run into OUT; keep the rest
    repo: Path = REPO  # the course repository whose source/ holds the chapter
    progress: Callable | None = None  # progress(result, done, total) as each result lands
    say: Callable[[str], None] = _say  # a line about the run (stdout by default)
    warn: Callable[[str], None] = _warn  # a warning line, "warning: ..." (stderr by default)


@dataclass
class ClassResult:
    """What grading a class gave: every student's Result and where the files went."""
    chapter: Chapter
    out: Path
    results: list  # autograder.grade.grader.Result, one per student folder
    db_url: str
    workers: int  # grader processes used (on a cluster: the workers that graded)
    worker_rss: dict  # {worker: peak RSS in KiB}
    warnings: list[str] = field(default_factory=list)  # what intake warned about
    renamed: list[str] = field(default_factory=list)  # the folders graded under another id, and why
    look_alikes: list[str] = field(default_factory=list)  # the folder names that look alike, as told
    report_paths: list[Path] = field(default_factory=list)  # empty when the report could not be written
    report_error: str | None = None  # why it could not, then
    seconds: float = 0.0  # from intake to the report
    unchanged: list[str] = field(default_factory=list)  # with only_changed: the students whose grades were kept
    key: str = ""  # the grader's key (grade/journal.py): the chapter's files, the grader's code, the limits


def shown(name: str) -> str:
    """A name for one line of the terminal: control characters escaped."""
    return name if name.isprintable() else repr(name)[1:-1]


def grade_class(chapter: Chapter | str, submissions: Path | str, out: Path | str,
                options: GradeOptions | None = None) -> ClassResult:
    """Grade every student folder in `submissions` (a folder, or a .zip of one) of `chapter`
    (a Chapter, or its id in options.repo's source/) into `out`.

    Raises ChapterNotFound for an unknown chapter id, GradeError when the class cannot be
    graded at all, GradingInterrupted on Ctrl-C while grading."""
    options = options or GradeOptions()
    repo = Path(options.repo).resolve()
    if not isinstance(chapter, Chapter):
        chapter = find(repo / "source", chapter)
    out = Path(out)
    _check_tools(options)
    limits = options.limits
    if limits is None:
        from autograder.sandbox.bubblewrap import Limits
        limits = Limits()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="course-intake-") as scratch:
        todo, warnings = _intake(chapter, Path(submissions), Path(scratch), options)
        told = _tell_names(todo, options)
        results, workers, worker_rss, kept, key = _grade(chapter, todo, out, limits, options, repo)
    graded = ClassResult(chapter, out, results, options.db or f"sqlite:///{(out / 'gradebook.db').resolve()}",
                         workers, worker_rss, warnings, *told)
    graded.key = key
    graded.unchanged = sorted(kept) if options.only_changed else []
    _write(graded, options)
    graded.seconds = time.monotonic() - started
    return graded


# -- the stages -------------------------------------------------------------------------------------

def _check_tools(options: GradeOptions) -> None:
    """A gradebook server that is down or refuses, or no bubblewrap: said before anything is graded."""
    from autograder.grade import gradebook
    from autograder.sandbox.bubblewrap import SandboxError, bwrap
    if options.db:
        try:
            gradebook.check(options.db)
        except gradebook.GradebookError as e:
            raise GradeError(f"{e} Nothing was graded.") from None
    try:
        if not options.scheduler:  # on a cluster, each worker checks its own (grade/distributed.py)
            bwrap()
    except SandboxError as e:
        raise GradeError(str(e)) from None


def _intake(chapter: Chapter, where: Path, scratch: Path, options: GradeOptions):
    """(submissions, warnings) from a folder or a zip unpacked into `scratch`; each warning told."""
    from autograder.grade.intake import IntakeError, collect, unpack
    try:
        if where.is_file() and where.suffix.lower() == ".zip":
            skipped: dict = {}
            warnings = unpack(where, scratch, skipped)
            folder = scratch
        elif where.is_dir():
            warnings, folder, skipped = [], where, {}
        else:
            raise GradeError(f"{where} is neither a folder of submissions nor a .zip of one.")
        submissions = collect(folder, chapter.id, chapter.notebook.name, warnings, skipped)
    except IntakeError as e:
        raise GradeError(str(e)) from None
    for w in warnings:
        options.warn(f"warning: {shown(w)}")
    if not submissions:
        raise GradeError(f"no student folders found in {where}")
    return submissions, warnings


def _tell_names(submissions, options: GradeOptions) -> tuple[list[str], list[str]]:
    """(renamed, look-alikes): said on the run's output before grading, because a script or a person
    joining grades.csv, results/ and the gradebook must know which folder became which id, and an
    instructor reading the report cannot tell look-alike names apart unless told."""
    from autograder.grade.intake import look_alikes, renamed
    changed, alike = renamed(submissions), look_alikes(submissions)
    if changed:
        options.say(f"student ids: {len(changed)} folder name(s) cannot be nbgrader student ids and were changed; "
                    "grades.csv, results/, feedback/, the gradebook and the report use the id, and grades.csv's "
                    "`folder` column and the report show the name as it was:")
        for line in changed:
            options.say(f"  {shown(line)}")
    for line in alike:
        options.say(shown(line))
    return changed, alike


def _grade(chapter: Chapter, submissions, out: Path, limits, options: GradeOptions, repo: Path):
    """(results in the order of `submissions`, workers used, {worker: peak RSS in KiB}, the students whose
    recorded results were kept, the grader's key): on the local pool or the cluster; with options.resume
    or options.only_changed, only the submissions not recorded yet."""
    from autograder.grade.journal import Journal
    from autograder.grade.version import course_version, grader_key
    from autograder.sandbox.bubblewrap import SandboxError
    folders = {s.student: s.folder for s in submissions}
    workers = max(1, min(options.workers, len(submissions)))
    version = course_version(repo, chapter.id)
    address, security, where = _where(options, repo, version, workers)
    # Dask is imported only for a run on a cluster: a local run does not pay seconds for it
    cluster_errors: tuple = ()
    if address:
        from autograder.grade.distributed import ClusterError, grade_on_cluster
        from autograder.grade.standing import StandingError
        cluster_errors = (ClusterError, StandingError)
    options.say(f"grading {len(submissions)} submissions of {chapter.id} {where}, sandboxed ...")
    try:
        journal = Journal(out, chapter.id, grader_key(chapter.id, version, limits))
        # The journal of every run keeps each result with the digest of what was graded (the notebook's
        # bytes) and the grader's key (the course version, the limits): a submission whose digest and key
        # match is the same grading again, so an incremental run keeps it.
        before = journal.start(submissions, resume=options.resume or options.only_changed)
        for r in before.values():  # the journal keeps results, not the folders they came from
            r.folder = folders.get(r.student, r.student)
        todo = [s for s in submissions if s.student not in before]
        if options.only_changed:
            options.say(f"{len(todo)} new or changed, {len(before)} unchanged (their grades kept; "
                        "regrade everyone with --all)")
        elif before:
            options.say(f"resuming: {len(before)} graded before, {len(todo)} to grade")

        def on_result(result, done, total):
            journal.add(result)
            result.folder = folders.get(result.student, result.student)
            if options.progress:
                options.progress(result, len(before) + done, len(submissions))

        fresh, worker_rss = [], {}
        if todo:
            _import_the_writers_meanwhile()
        if todo and address:
            fresh, worker_rss = grade_on_cluster(address, chapter, todo, limits, on_result, version,
                                                 log=options.warn, security=security and security())
        elif todo:
            from autograder.grade.grader import machine_generated
            from autograder.grade.workers import grade_all
            # this machine's generated course folder, shared by every run of the chapter's version; else the run's
            fresh, worker_rss = grade_all(chapter, todo, max(1, min(workers, len(todo))), limits, on_result,
                                          machine_generated(chapter, version) or journal.generated)
    except KeyboardInterrupt:
        raise GradingInterrupted(out / ".resume" / chapter.id) from None
    except (SandboxError, *cluster_errors) as e:
        raise GradeError(str(e)) from None
    by_student = {**before, **{r.student: r for r in fresh}}
    results = [by_student[s.student] for s in submissions]
    return results, (len(worker_rss) if address else workers), worker_rss, set(before), journal.key


def _where(options: GradeOptions, repo: Path, version: dict, workers: int):
    """(the Dask scheduler's address or None for the local pool, a function giving its Security or None, the
    words for the run's first line): `--scheduler`, else this user's standing graders when they run and fit
    (grade/standing.py), else the local pool. The Security is made only when something is to be graded: it
    imports Dask."""
    from autograder.grade import standing
    try:
        if options.scheduler:
            return (options.scheduler, lambda: standing.security_for(options.scheduler),
                    f"on the Dask cluster at {options.scheduler}")
        graders = standing.for_grading(repo, version, options.warn) if options.standing else None
        if graders is not None:
            return (graders.address, graders.security,
                    f"on the standing graders at {graders.address} ({graders.state['workers']} worker(s) that stay "
                    "warm between runs; `autograder graders stop` stops them)")
    except standing.StandingError as e:
        raise GradeError(str(e)) from None
    return None, None, f"with {workers} worker(s)"


def _import_the_writers_meanwhile() -> None:
    """Import what `_write` needs (nbgrader's API alone takes over a second) in a thread, while this process
    waits for the graders: when few submissions changed, waiting for the graders' start is most of a run,
    and these imports came after it."""
    def imports() -> None:
        try:
            import nbgrader.api  # noqa: F401
            from autograder.grade import feedback, gradebook, report  # noqa: F401
        except Exception:  # noqa: BLE001  (the same imports in _write say what is wrong, where it matters)
            pass
    threading.Thread(target=imports, name="import-the-writers", daemon=True).start()


def _write(graded: ClassResult, options: GradeOptions) -> None:
    """The gradebook, results/, feedback/, autograded/, grades.csv, nbgrader_config.py and the report."""
    from autograder.grade import feedback, gradebook, report
    from autograder.grade.journal import RESUME
    chapter, out, results = graded.chapter, graded.out, graded.results
    # An unchanged submission keeps its gradebook rows: recording it again would drop the points an
    # instructor gave it by hand in formgrader since.
    fresh = [r for r in results if r.student not in set(graded.unchanged)]
    if fresh:
        gradebook.record(chapter, graded.db_url, fresh, out / RESUME / chapter.id / ".gradebook.json", graded.key)
    for r in results:
        write_atomic(out / "results" / f"{r.student}.json", json.dumps(r.to_json(), indent=2) + "\n")
        write_atomic(out / "feedback" / r.student / f"{chapter.id}.html",
                     feedback.render(r, f"{chapter.id}: feedback for {r.folder or r.student}"))
        if r.autograded:
            write_atomic(out / "autograded" / r.student / chapter.id / chapter.notebook.name, r.autograded)
    write_atomic(out / "grades.csv", grades_csv(results, chapter.id))
    if not options.db:
        write_atomic(out / "nbgrader_config.py",
                     "# Written by `autograder grade`: lets `nbgrader export` and formgrader read this folder.\n"
                     "c = get_config()  # noqa: F821\n"
                     f"c.CourseDirectory.root = {str(out.resolve())!r}\n"
                     f"c.CourseDirectory.db_url = {graded.db_url!r}\n")
    try:
        graded.report_paths = report.write(out, chapter.id, graded.db_url)
    except report.ReportError as e:
        graded.report_error = str(e)


def grades_csv(results, chapter_id: str) -> str:
    """One row per student folder: `student` is the id that results/, feedback/, the gradebook and
    the report use, `folder` the folder's name as handed in (printable), so that a join on either works."""
    ids = [v.exercise for v in results[0].verdicts] if results else []
    rows = []
    for r in results:
        points = {v.exercise: v.points for v in r.verdicts}
        rows.append([r.student, r.folder or r.student, chapter_id, f"{r.score:g}", f"{r.max_score:g}",
                     *[f"{points.get(i, 0):g}" for i in ids]])
    return csv_text(rows, ["student", "folder", "chapter", "score", "max_score", *ids])
