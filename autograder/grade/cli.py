"""`autograder grade CHAPTER SUBMISSIONS --out DIR [--workers N]`.

A thin caller of `autograder.grade.grade_class` (grade/pipeline.py), which does the
work; here are the options, the lines printed as it goes and the summary table.
Writes, all through temporary files renamed into place (an interrupted run never
leaves a half-written file):
    DIR/grades.csv                       student (the id), folder (as handed in), chapter, score, max_score,
                                         one column per exercise; no cell a spreadsheet reads as a formula
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

import os
import sys
from pathlib import Path

from autograder.chapters import REPO, ChapterNotFound, find
from course.verdicts import MANUAL
from autograder.grade.pipeline import GradeError, GradeOptions, GradingInterrupted, grade_class, shown

__all__ = ["add_grade_parser", "run", "summary_table"]


def add_grade_parser(sub) -> None:
    """Add `autograder grade` and its options to the command's subparsers."""
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
                   help="grade on this Dask cluster's workers instead of local processes (docs/grading.md); "
                        "without it, on the standing graders when they run (`autograder graders start`)")
    g.add_argument("--local", action="store_true",
                   help="grade on local processes even when standing graders run (`autograder graders start`)")
    g.add_argument("--resume", action="store_true",
                   help="keep the results an earlier, interrupted run recorded in OUT/.resume/; grade only the rest")
    g.add_argument("--only-changed", action="store_true",
                   help="grade only the submissions new or changed since the last run into OUT (by the notebook's "
                        "content, the course version and the limits); keep the others' grades")
    g.add_argument("--repo", default=str(REPO))
    g.set_defaults(func=run)


def summary_table(results) -> str:
    """The table printed after grading: one line per student, the score and each exercise's verdict."""
    ids = [v.exercise for v in results[0].verdicts if v.status != MANUAL] if results else []
    names = [shown(r.folder or r.student)[:40] for r in results]
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
    """`autograder grade`: 0 when every submission was graded, 1 for an unknown chapter, 2 when the
    class cannot be graded at all, 130 on Ctrl-C."""
    from autograder.grade import gradebook
    from autograder.sandbox.bubblewrap import Limits

    repo = Path(args.repo).resolve()
    try:
        chapter = find(repo / "source", args.chapter)
    except ChapterNotFound as e:
        print(e, file=sys.stderr)
        return 1
    limits = Limits()
    if args.cell_timeout:
        limits.cell_timeout_s = args.cell_timeout
    if args.timeout:
        limits.submission_timeout_s = args.timeout
    if args.memory:
        limits.memory_bytes = int(args.memory * 1024 ** 3)

    def progress(result, done, total):
        note = f"  ({shown('; '.join(result.notes)[:100])})" if result.notes else ""
        print(f"[{done}/{total}] {shown(result.folder or result.student)}: "
              f"{result.score:g}/{result.max_score:g}{note}", flush=True)

    options = GradeOptions(workers=args.workers, db=args.db, limits=limits, scheduler=args.scheduler,
                           resume=args.resume, only_changed=args.only_changed, repo=repo, progress=progress,
                           standing=not args.local)
    try:
        graded = grade_class(chapter, args.submissions, args.out, options)
    except GradingInterrupted as e:
        print(f"\nautograder grade: interrupted; nothing but the results graded so far was written "
              f"({e.resume_folder}/): run the same command with --resume to grade only the rest", file=sys.stderr)
        return 130
    except GradeError as e:
        print(f"autograder grade: {e}", file=sys.stderr)
        return 2
    if graded.report_error:
        print(f"warning: the class report was not written: {graded.report_error}", file=sys.stderr)
    results, out = graded.results, graded.out
    print()
    print(summary_table(results))
    print()
    peak_worker = max(graded.worker_rss.values(), default=0) / 1024
    peak_kernel = max((r.kernel_peak_rss_kb for r in results), default=0) / 1024
    print(f"{len(results)} graded in {graded.seconds:.1f} s ({graded.seconds / len(results):.2f} s per submission, "
          f"{graded.workers} workers); peak memory {peak_worker:.0f} MiB per worker + {peak_kernel:.0f} MiB per kernel")
    print(f"wrote {out / 'grades.csv'}, {out / 'results'}/, {out / 'feedback'}/ and the gradebook "
          f"{gradebook.describe(graded.db_url)}")
    if graded.report_paths:
        paths = graded.report_paths
        print(f"class report: {paths[0]} (figures: {paths[1].name}, Canvas grades: {paths[2].name})")
    return 0
