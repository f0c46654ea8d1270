"""The `autograder` command."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.chapters import REPO


def _build(args) -> int:
    from autograder.build.release import assemble_reference, build
    from autograder.build.source_format import SourceError

    repo = Path(args.repo).resolve()
    try:
        problems = build(repo, check=args.check)
    except SourceError as e:
        print(f"autograder build: {e}", file=sys.stderr)
        return 2
    if args.check:
        for p in problems:
            print(p)
        if problems:
            print(f"release/ is out of date ({len(problems)} files): run `autograder build`.", file=sys.stderr)
            return 1
        print("release/ is in sync with source/.")
        return 0
    assemble_reference(repo, repo / "build" / "reference")
    print("\n".join(f"wrote {p}" if not p.startswith("stray") else f"removed {p[7:]}" for p in problems)
          or "release/ was already up to date.")
    return 0


def main(argv=None) -> int:
    """The `autograder` command: parse `argv` and run build, grade, report or graders; its exit status."""
    parser = argparse.ArgumentParser(prog="autograder", description="Build and grade the course.")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="generate release/ (and the derived source files) from source/")
    b.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each out-of-date file")
    b.add_argument("--repo", default=str(REPO), help="the course repository (default: this one)")
    b.set_defaults(func=_build)
    from autograder.grade.cli import add_grade_parser
    add_grade_parser(sub)
    from autograder.grade.report import add_report_parser
    add_report_parser(sub)
    from autograder.grade.standing import add_graders_parser
    add_graders_parser(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
