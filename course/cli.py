"""The `course` command, for students and self-learners.

    course check PATH.ipynb [EXERCISE]   run the saved notebook in a fresh kernel, list verdicts
    course use-mine CHAPTER              run CHAPTER on your own earlier chapters' code
    course use-reference CHAPTER         back to the course's reference code
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from course.notebook import NotebookError


def _check(args) -> int:
    from course.check import check_notebook, format_table

    try:
        verdicts = check_notebook(args.notebook, exercise=args.exercise)
    except NotebookError as e:
        print(f"course check: {e}", file=sys.stderr)
        return 2
    print(format_table(verdicts))
    return 0 if all(v.ok for v in verdicts) else 1


def _use_mine(args) -> int:
    from course.own_code import use_mine

    try:
        written = use_mine(Path(args.release), args.chapter)
    except NotebookError as e:
        print(f"course use-mine: {e}", file=sys.stderr)
        return 2
    print(f"{args.chapter} now runs on your own code: wrote {', '.join(written)}.")
    print(f"Restart the kernel of {args.chapter}. `course use-reference {args.chapter}` undoes this.")
    return 0


def _use_reference(args) -> int:
    from course.own_code import use_reference

    restored = use_reference(Path(args.release), args.chapter)
    print(f"{args.chapter} runs on the course's reference code"
          + (" again; restart its kernel." if restored else " (it already did)."))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="course", description="Check your work; choose what later chapters run on.")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="run a saved notebook in a fresh kernel and show every exercise's verdict")
    c.add_argument("notebook", help="path to your chapter notebook, e.g. release/00_tour/00_tour.ipynb")
    c.add_argument("exercise", nargs="?", help="only this exercise (runs the notebook up to its tests)")
    c.set_defaults(func=_check)
    for name, func, text in [("use-mine", _use_mine, "run CHAPTER on your own code from the earlier chapters"),
                             ("use-reference", _use_reference, "run CHAPTER on the course's reference code")]:
        p = sub.add_parser(name, help=text)
        p.add_argument("chapter")
        p.add_argument("--release", default="release", help="the folder holding your chapters (default: release)")
        p.set_defaults(func=func)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
