"""`autograder grade CHAPTER SUBMISSIONS --out DIR [--workers N]`.

Writes, all through temporary files renamed into place (an interrupted run never
leaves a half-written file):
    DIR/grades.csv                       student, chapter, score, max_score, one column per exercise
    DIR/results/<student>.json           every exercise's points and message, and the notes
    DIR/feedback/<student>/<chapter>.html  the page to hand back (no hidden test in it)
    DIR/gradebook.db                     nbgrader's gradebook (or --db URL): nbgrader export, formgrader
    DIR/autograded/<student>/<chapter>/  the executed notebooks, for formgrader (instructor only)
Exits 0 when every submission was graded, whatever the scores; 2 when the
submissions or the sandbox cannot be used at all. Whatever one submission holds,
it costs that submission only: every student folder is graded (0 and a note
when there is nothing gradable) or named in a warning.
"""
from __future__ import annotations

import csv
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from autograder.chapters import REPO, find


def add_grade_parser(sub) -> None:
    g = sub.add_parser("grade", help="grade a class's submissions of one chapter, in parallel and sandboxed",
                       description=__doc__, formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    g.add_argument("chapter")
    g.add_argument("submissions", help="a folder with one folder per student (or nbgrader's submitted/), or a .zip")
    g.add_argument("--out", required=True, help="where grades.csv, results/, feedback/ and the gradebook go")
    g.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="grader processes (default: cores)")
    g.add_argument("--db", help="gradebook SQLAlchemy URL (default: sqlite:///OUT/gradebook.db)")
    g.add_argument("--cell-timeout", type=float, help="seconds one cell may run (default 120)")
    g.add_argument("--timeout", type=float, help="seconds one notebook may run (default 600)")
    g.add_argument("--memory", type=float, help="GiB of address space per kernel (default 4)")
    g.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help="grade on this Dask cluster's workers instead of local processes (docs/grading.md)")
    g.add_argument("--resume", action="store_true",
                   help="keep the results an earlier, interrupted run recorded in OUT/.resume/; grade only the rest")
    g.add_argument("--repo", default=str(REPO))
    g.set_defaults(func=run)


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    os.replace(tmp, path)


def _csv(results, chapter_id: str) -> str:
    """One row per student folder, under the folder's own name (not the id it may have been
    graded under: results/<id>.json holds both)."""
    ids = [v.exercise for v in results[0].verdicts] if results else []
    buffer = io.StringIO()
    w = csv.writer(buffer)
    w.writerow(["student", "chapter", "score", "max_score", *ids])
    for r in results:
        points = {v.exercise: v.points for v in r.verdicts}
        w.writerow([r.folder or r.student, chapter_id, f"{r.score:g}", f"{r.max_score:g}",
                    *[f"{points.get(i, 0):g}" for i in ids]])
    return buffer.getvalue()


def _shown(name: str) -> str:
    """A name for one line of the terminal: control characters escaped."""
    return name if name.isprintable() else repr(name)[1:-1]


def summary_table(results) -> str:
    ids = [v.exercise for v in results[0].verdicts if v.status != "manually graded"] if results else []
    names = [_shown(r.folder or r.student)[:40] for r in results]
    width = max([len(n) for n in names] + [7])
    head = f"{'student':<{width}}  {'score':>9}  " + "  ".join(i[:12].ljust(12) for i in ids) + "  notes"
    lines = [head, "-" * len(head)]
    for r, name in zip(results, names):
        by = {v.exercise: v for v in r.verdicts}
        auto = [by[i] for i in ids if i in by]
        cells = "  ".join(f"{by[i].points:g}/{by[i].max_points:g} {by[i].status[:6]}".ljust(12)[:12]
                          if i in by else " " * 12 for i in ids)
        score = f"{sum(v.points for v in auto):g}/{sum(v.max_points for v in auto):g}"
        lines.append(f"{name:<{width}}  {score:>9}  {cells}  {len(r.notes) or ''}")
    return "\n".join(lines)


def run(args) -> int:
    from autograder.grade import feedback, gradebook
    from autograder.sandbox.bubblewrap import Limits, SandboxError, bwrap
    from autograder.grade.intake import IntakeError, collect, unpack
    from autograder.grade.distributed import ClusterError, grade_class

    repo = Path(args.repo).resolve()
    chapter = find(repo / "source", args.chapter)
    where = Path(args.submissions)
    out = Path(args.out)
    if args.db:  # a gradebook server that is down or refuses us: say so before grading anything
        try:
            gradebook.check(args.db)
        except gradebook.GradebookError as e:
            print(f"autograder grade: {e} Nothing was graded.", file=sys.stderr)
            return 2
    try:
        if not args.scheduler:  # on a cluster, each worker checks its own (autograder/grade/distributed.py)
            bwrap()
    except SandboxError as e:
        print(f"autograder grade: {e}", file=sys.stderr)
        return 2
    limits = Limits()
    if args.cell_timeout:
        limits.cell_timeout_s = args.cell_timeout
    if args.timeout:
        limits.submission_timeout_s = args.timeout
    if args.memory:
        limits.memory_bytes = int(args.memory * 1024 ** 3)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="course-intake-") as scratch:
        try:
            if where.is_file() and where.suffix.lower() == ".zip":
                skipped: dict = {}
                warnings = unpack(where, Path(scratch), skipped)
                folder = Path(scratch)
            elif where.is_dir():
                warnings, folder, skipped = [], where, {}
            else:
                print(f"autograder grade: {where} is neither a folder of submissions nor a .zip of one.",
                      file=sys.stderr)
                return 2
            submissions = collect(folder, chapter.id, chapter.notebook.name, warnings, skipped)
        except IntakeError as e:
            print(f"autograder grade: {e}", file=sys.stderr)
            return 2
        for w in warnings:
            print(f"warning: {_shown(w)}", file=sys.stderr)
        if not submissions:
            print(f"autograder grade: no student folders found in {where}", file=sys.stderr)
            return 2
        folders = {s.student: s.folder for s in submissions}
        workers = max(1, min(args.workers, len(submissions)))
        print(f"grading {len(submissions)} submissions of {chapter.id} "
              + (f"on the Dask cluster at {args.scheduler}" if args.scheduler else f"with {workers} worker(s)")
              + ", sandboxed ...", flush=True)

        def progress(result, done, total):
            note = f"  ({_shown('; '.join(result.notes)[:100])})" if result.notes else ""
            print(f"[{done}/{total}] {_shown(folders.get(result.student, result.student))}: "
                  f"{result.score:g}/{result.max_score:g}{note}", flush=True)

        try:
            results, worker_rss = grade_class(args, chapter, submissions, workers, limits, progress, out)
            workers = len(worker_rss) if args.scheduler else workers
        except KeyboardInterrupt:
            print(f"\nautograder grade: interrupted; nothing but the results graded so far was written "
                  f"({out / '.resume' / chapter.id}/): run the same command with --resume to grade only the rest",
                  file=sys.stderr)
            return 130
        except (SandboxError, ClusterError) as e:
            print(f"autograder grade: {e}", file=sys.stderr)
            return 2
    for r in results:
        r.folder = folders.get(r.student, r.student)
    db_url = args.db or f"sqlite:///{(out / 'gradebook.db').resolve()}"
    gradebook.record(chapter, db_url, results)
    for r in results:
        write_atomic(out / "results" / f"{r.student}.json", json.dumps(r.to_json(), indent=2) + "\n")
        write_atomic(out / "feedback" / r.student / f"{chapter.id}.html",
                     feedback.render(r, f"{chapter.id}: feedback for {r.folder or r.student}"))
        if r.autograded:
            write_atomic(out / "autograded" / r.student / chapter.id / chapter.notebook.name, r.autograded)
    write_atomic(out / "grades.csv", _csv(results, chapter.id))
    if not args.db:
        write_atomic(out / "nbgrader_config.py",
                     "# Written by `autograder grade`: lets `nbgrader export` and formgrader read this folder.\n"
                     "c = get_config()  # noqa: F821\n"
                     f"c.CourseDirectory.root = {str(out.resolve())!r}\n"
                     f"c.CourseDirectory.db_url = {db_url!r}\n")
    from autograder.grade import report
    try:
        report_paths = report.write(out, chapter.id, db_url)
    except report.ReportError as e:
        report_paths = []
        print(f"warning: the class report was not written: {e}", file=sys.stderr)
    elapsed = time.monotonic() - started
    print()
    print(summary_table(results))
    print()
    peak_worker = max(worker_rss.values(), default=0) / 1024
    peak_kernel = max((r.kernel_peak_rss_kb for r in results), default=0) / 1024
    print(f"{len(results)} graded in {elapsed:.1f} s ({elapsed / len(results):.2f} s per submission, "
          f"{workers} workers); peak memory {peak_worker:.0f} MiB per worker + {peak_kernel:.0f} MiB per kernel")
    print(f"wrote {out / 'grades.csv'}, {out / 'results'}/, {out / 'feedback'}/ and the gradebook {gradebook.describe(db_url)}")
    if report_paths:
        print(f"class report: {report_paths[0]} (figures: {report_paths[1].name}, Canvas grades: {report_paths[2].name})")
    return 0
