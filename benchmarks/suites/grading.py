"""The autograder against plain nbgrader on the same class (COURSE.md §6, issue 3).

One class of chapter-00 submissions (right, wrong, blank in turn: 40 of them, 3
with --quick) is graded twice in this run:
  ours      `autograder grade 00_tour CLASS --out DIR --workers 2` (start-up included)
  baseline  `nbgrader generate_assignment` once, then `nbgrader autograde 00_tour
            --student S` once per student, as an instructor without this tool would
The record says whether both gave every student the same points on every exercise,
seconds per submission, and peak memory per worker and per sandboxed kernel.
"""
from __future__ import annotations

import csv
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[2]
CHAPTER = "00_tour"
WORKERS = 2


def available() -> str | None:
    if not shutil.which("bwrap"):
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    if not (REPO / "source" / CHAPTER / f"{CHAPTER}.ipynb").exists():
        return f"source/{CHAPTER} is missing: run `autograder build`"
    return None


def _mutants() -> dict[str, list[str]]:
    spec = importlib.util.spec_from_file_location("mutants", REPO / "tests" / "mutants" / f"{CHAPTER}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {ex: list(cases.values()) for ex, cases in module.MUTANTS.items()}


def make_class(folder: Path, size: int) -> list[str]:
    """Right, wrong (one typical mistake, from tests/mutants) and blank notebooks, in turn."""
    source = nbformat.read(REPO / "source" / CHAPTER / f"{CHAPTER}.ipynb", 4)
    release = nbformat.read(REPO / "release" / CHAPTER / f"{CHAPTER}.ipynb", 4)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
               if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"}
    mutants = [(ex, code) for ex, codes in sorted(_mutants().items()) for code in codes]
    students = []
    for n in range(size):
        nb = nbformat.from_dict(nbformat.reads(nbformat.writes(release), 4))
        kind = n % 3
        if kind != 2:
            wrong = mutants[(n // 3) % len(mutants)] if kind == 1 else (None, None)
            for cell in nb.cells:
                gid = cell.metadata.get("nbgrader", {}).get("grade_id")
                if gid in answers:
                    cell.source = wrong[1].strip("\n") if gid == wrong[0] else answers[gid]
        student = f"student{n:03d}"
        (folder / student).mkdir(parents=True)
        nbformat.write(nb, folder / student / f"{CHAPTER}.ipynb")
        students.append(student)
    return students


def _ours(class_dir: Path, out: Path) -> tuple[float, dict, dict]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "autograder.cli", "grade", CHAPTER, str(class_dir), "--out",
                           str(out), "--workers", str(WORKERS)], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError("autograder grade failed:\n" + done.stdout[-3000:] + done.stderr[-3000:])
    memory = re.search(r"peak memory (\d+) MiB per worker \+ (\d+) MiB per kernel", done.stdout)
    scores = {}
    with open(out / "grades.csv", newline="") as f:
        for row in csv.DictReader(f):
            scores[row["student"]] = {k: float(v) for k, v in row.items()
                                      if k.startswith("ex_")}
    return seconds, scores, {"peak_worker_mib": int(memory.group(1)), "peak_kernel_mib": int(memory.group(2))}


def _baseline(class_dir: Path, course: Path, students: list[str], exercises: list[str]) -> tuple[float, dict]:
    shutil.copytree(REPO / "source", course / "source")
    shutil.copy(REPO / "nbgrader_config.py", course)
    for student in students:
        (course / "submitted" / student / CHAPTER).mkdir(parents=True)
        shutil.copy(class_dir / student / f"{CHAPTER}.ipynb", course / "submitted" / student / CHAPTER)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    nbgrader = [sys.executable, "-m", "nbgrader"]
    start = time.perf_counter()
    subprocess.run(nbgrader + ["generate_assignment", CHAPTER], cwd=course, env=env, check=True,
                   capture_output=True)
    for student in students:
        subprocess.run(nbgrader + ["autograde", CHAPTER, "--student", student, "--create"], cwd=course, env=env,
                       check=True, capture_output=True)
    seconds = time.perf_counter() - start
    from nbgrader.api import Gradebook
    scores = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in students:
            scores[student] = {ex: float(gb.find_grade(f"{ex}_tests", CHAPTER, CHAPTER, student).score or 0)
                               for ex in exercises}
    return seconds, scores


def run(quick: bool) -> list[dict]:
    from benchmarks.run import record
    from course.notebook import exercises
    size = 3 if quick else 40
    auto = [e for e, ex in exercises(nbformat.read(REPO / "source" / CHAPTER / f"{CHAPTER}.ipynb", 4)).items()
            if not ex.manual]
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        tmp = Path(tmp)
        students = make_class(tmp / "class", size)
        ours_s, ours, memory = _ours(tmp / "class", tmp / "out")
        base_s, base = _baseline(tmp / "class", tmp / "course", students, auto)
    same = all(ours[s][e] == base[s][e] for s in students for e in auto)
    differ = [f"{s}:{e} ours {ours[s][e]:g} nbgrader {base[s][e]:g}" for s in students for e in auto
              if ours[s][e] != base[s][e]]
    extra = {"submissions": size, "workers": WORKERS, "ours_s_per_submission": round(ours_s / size, 2),
             "baseline_s_per_submission": round(base_s / size, 2), "speedup": round(base_s / ours_s, 2),
             "same_scores": same, **memory}
    if differ:
        extra["differences"] = "; ".join(differ[:5])
    return [record("grading", f"autograde {size} {CHAPTER} submissions", ours_s,
                   "nbgrader autograde, one CLI call per student", base_s, **extra)]
