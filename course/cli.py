"""The `course` command, for students and self-learners.

    course check PATH.ipynb [EXERCISE]   run the saved notebook in a fresh kernel, list verdicts
    course check --hidden PATH.ipynb     grade it with the hidden tests, as the grader does (in a clone)
    course copy-release [RELEASE] [WORK] make your working copy: the chapters WORK lacks, from RELEASE
    course use-mine CHAPTER              run CHAPTER on your own earlier chapters' code
    course use-reference CHAPTER         back to the course's reference code
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from course.notebook import NotebookError


def _check(args) -> int:
    if args.hidden:
        return _check_hidden(args)
    from course.check import check_notebook, format_table

    try:
        verdicts = check_notebook(args.notebook, exercise=args.exercise)
    except NotebookError as e:
        print(f"course check: {e}", file=sys.stderr)
        return 2
    print(format_table(verdicts))
    return 0 if all(v.ok for v in verdicts) else 1


def _check_hidden(args) -> int:
    """0: every exercise passed (or is graded by hand), 1: some did not, 2: the hidden tests cannot run
    here (one line says why; nothing ran) or the file is not the course's notebook. --json: the same as
    one line of JSON on stdout, for `check(hidden=True)` (course/check.py)."""
    from dataclasses import asdict

    from course.check import HiddenTestsUnavailable, format_hidden
    from course.hidden import grade_with_hidden_tests

    def answer(key: str, value, code: int) -> int:
        if args.json:
            print(json.dumps({key: value}))
        else:
            print(f"course check --hidden: {value}", file=sys.stderr)
        return code

    try:
        verdicts, notes = grade_with_hidden_tests(args.notebook)
    except HiddenTestsUnavailable as e:
        return answer("unavailable", str(e), 2)
    except NotebookError as e:
        return answer("error", str(e), 2)
    shown = [v for v in verdicts if args.exercise in (None, v.exercise)]
    if args.json:
        print(json.dumps({"verdicts": [asdict(v) for v in shown], "notes": notes}))
    else:
        print(format_hidden(Path(args.notebook), shown, notes))
    return 0 if all(v.ok for v in shown) else 1


def copy_missing_chapters(release: Path, work: Path) -> list[str]:
    """Copy each chapter folder of `release` that `work` lacks, whole; a chapter already in `work` is the
    student's and is left as it is (no file of it is overwritten, none added). Returns the chapters copied."""
    if not release.is_dir():
        raise NotebookError(f"{release} does not exist: give the folder the course ships its chapters in.")
    work.mkdir(parents=True, exist_ok=True)
    copied = []
    for chapter in sorted(p for p in release.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not (work / chapter.name).exists():
            # copied beside, then renamed: a copy cut short is never taken for the student's chapter
            partial = work / f".{chapter.name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(chapter, partial, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
            partial.rename(work / chapter.name)
            copied.append(chapter.name)
    return copied


def _copy_release(args) -> int:
    try:
        copied = copy_missing_chapters(Path(args.release), Path(args.work))
    except NotebookError as e:
        print(f"course copy-release: {e}", file=sys.stderr)
        return 2
    where = f"{args.work}/, your working copy ({args.release}/ stays as the course ships it)"
    print(f"copied {', '.join(copied)} from {args.release}/ into {where}" if copied else f"your work is in {where}")
    return 0


def _use_mine(args) -> int:
    from course.framework_package import use_mine

    try:
        written = use_mine(Path(args.release), args.chapter)
    except NotebookError as e:
        print(f"course use-mine: {e}", file=sys.stderr)
        return 2
    print(f"{args.chapter} now runs on your own code: wrote {', '.join(written)}.")
    print(f"Restart the kernel of {args.chapter}. `course use-reference {args.chapter}` undoes this.")
    return 0


def _use_reference(args) -> int:
    from course.framework_package import use_reference

    restored = use_reference(Path(args.release), args.chapter)
    print(f"{args.chapter} runs on the course's reference code"
          + (" again; restart its kernel." if restored else " (it already did)."))
    return 0


def main(argv=None) -> int:
    """The `course` command: parse `argv` and run the subcommand; its exit status."""
    parser = argparse.ArgumentParser(prog="course", description="Check your work; choose what later chapters run on.")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="run a saved notebook in a fresh kernel and show every exercise's verdict")
    c.add_argument("notebook", help="path to your chapter notebook, e.g. work/00_tour/00_tour.ipynb")
    c.add_argument("exercise", nargs="?", help="only this exercise (runs the notebook up to its tests)")
    c.add_argument("--hidden", action="store_true",
                   help="grade the saved notebook with the chapter's hidden tests, in the grader's sandbox, as "
                        "the grader does (needs a clone of the course's repository: its source/ holds them)")
    c.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # for check(hidden=True)
    c.set_defaults(func=_check)
    w = sub.add_parser("copy-release", help="make your working copy: copy the chapters WORK lacks from RELEASE "
                                            "(an existing file is never overwritten)")
    w.add_argument("release", nargs="?", default="release")
    w.add_argument("work", nargs="?", default="work")
    w.set_defaults(func=_copy_release)
    for name, func, text in [("use-mine", _use_mine, "run CHAPTER on your own code from the earlier chapters"),
                             ("use-reference", _use_reference, "run CHAPTER on the course's reference code")]:
        p = sub.add_parser(name, help=text)
        p.add_argument("chapter")
        p.add_argument("--release", default="work" if Path("work").is_dir() else "release",
                       help="the folder holding your chapters (default: work, your copy, where there is one; "
                            "else release)")
        p.set_defaults(func=func)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
