"""`autograder grade CHAPTER SUBMISSIONS --out DIR`."""
from __future__ import annotations

import csv
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from autograder.chapters import REPO, find


def add_grade_parser(sub) -> None:
    g = sub.add_parser("grade", help="grade a class's submissions of one chapter")
    g.add_argument("chapter")
    g.add_argument("submissions", help="a folder with one folder per student")
    g.add_argument("--out", required=True, help="where grades.csv and results/ go")
    g.add_argument("--repo", default=str(REPO))
    g.set_defaults(func=run)


def find_submissions(folder: Path, chapter: str) -> dict[str, Path | None]:
    """{student: notebook path or None} for `folder/<student>/<chapter>.ipynb`
    and nbgrader's `folder/<student>/<chapter>/<chapter>.ipynb`."""
    found: dict[str, Path | None] = {}
    for student_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        candidates = [student_dir / f"{chapter}.ipynb", student_dir / chapter / f"{chapter}.ipynb"]
        found[student_dir.name] = next((c for c in candidates if c.is_file()), None)
    return found


def run(args) -> int:
    from autograder.grade import Grader, Result
    from course.verdicts import Verdict

    repo = Path(args.repo).resolve()
    chapter = find(repo / "source", args.chapter)
    folder = Path(args.submissions)
    if not folder.is_dir():
        print(f"autograder grade: {folder} is not a folder of submissions.", file=sys.stderr)
        return 2
    out = Path(args.out)
    (out / "results").mkdir(parents=True, exist_ok=True)
    submissions = find_submissions(folder, chapter.id)
    results = []
    with tempfile.TemporaryDirectory(prefix="course-grade-") as tmp:
        grader = Grader(chapter, Path(tmp), db_url=f"sqlite:///{(out / 'gradebook.db').resolve()}")
        for i, (student, notebook) in enumerate(submissions.items(), 1):
            if notebook is None:
                r = Result(student, chapter.id, grader._zero_verdicts("no notebook submitted"),
                           [f"no {chapter.id}.ipynb in the student's folder"])
            else:
                r = grader.grade(student, notebook)
            print(f"[{i}/{len(submissions)}] {student}: {r.score:g}/{r.max_score:g}", flush=True)
            results.append(r)
            (out / "results" / f"{student}.json").write_text(json.dumps(
                {"student": r.student, "chapter": r.chapter, "score": r.score, "max_score": r.max_score,
                 "notes": r.notes, "exercises": [asdict(v) for v in r.verdicts]}, indent=2))
    ids = [v.exercise for v in results[0].verdicts] if results else []
    with open(out / "grades.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "chapter", "score", "max_score", *ids])
        for r in results:
            w.writerow([r.student, r.chapter, r.score, r.max_score, *[v.points for v in r.verdicts]])
    return 0
