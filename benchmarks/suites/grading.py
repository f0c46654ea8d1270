"""The autograder against plain nbgrader on the same class (COURSE.md §6, issue 3).

One class of chapter-00 submissions (right, wrong, blank in turn: 40 of them, 3
with --quick) is graded twice in this run:
  ours      `autograder grade 00_tour CLASS --out DIR --workers 2` (start-up included)
  baseline  `nbgrader generate_assignment` once, then `nbgrader autograde 00_tour
            --student S` once per student, as an instructor without this tool would
The record says whether both gave every student the same points on every exercise,
seconds per submission, and peak memory per worker and per sandboxed kernel.

Then the cost of every chapter and of grading on Dask (issue 19):
  chapter NN  a class of right, wrong and blank notebooks (6, or 2 with --quick) graded
              locally with 2 workers: seconds per submission per worker (each result's
              own grading time, the figure a capacity plan multiplies), against the
              class's wall time per submission; peak memory per worker and per kernel
  dask        the same chapter-00 class (12, or 4) graded on a Dask cluster on this
              machine (`dask scheduler` and two `dask worker --nthreads 1` processes,
              started before the clock), against the local pool; the scheduler's
              overhead per task (the round trip of an empty task) and the same scores
  incremental a chapter-00 class (100, or 6) graded with --only-changed, then again after
              5 (or 1) resubmitted: the second run's seconds against the first's, on the local
              pool (graders started by each run), on standing graders (`autograder graders
              start`) and on a Dask cluster that stays up (issue 43)
"""
from __future__ import annotations

import csv
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


def _mutants(chapter: str = CHAPTER) -> dict[str, list[str]]:
    """The typical wrong answers' code, read by the tests' own loader (tests/support/notebook_runs.mutants_of)."""
    sys.path.insert(0, str(REPO / "tests" / "support"))
    try:
        from autograder.chapters import discover
        from notebook_runs import mutants_of
    finally:
        sys.path.remove(str(REPO / "tests" / "support"))
    found = next(c for c in discover(REPO / "source") if c.id == chapter)
    return {ex: [m.code for m in cases.values()] for ex, cases in mutants_of(found).items()}


def make_class(folder: Path, size: int, chapter: str = CHAPTER) -> list[str]:
    """Right, wrong (one typical mistake, from tests/mutants) and blank notebooks, in turn."""
    source = nbformat.read(REPO / "source" / chapter / f"{chapter}.ipynb", 4)
    release = nbformat.read(REPO / "release" / chapter / f"{chapter}.ipynb", 4)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
               if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"}
    mutants = [(ex, code) for ex, codes in sorted(_mutants(chapter).items()) for code in codes]
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
        nbformat.write(nb, folder / student / f"{chapter}.ipynb")
        students.append(student)
    return students


def _ours(class_dir: Path, out: Path, chapter: str = CHAPTER, *extra: str) -> tuple[float, dict, dict]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "autograder.cli", "grade", chapter, str(class_dir), "--out",
                           str(out), *(extra or ("--workers", str(WORKERS)))], capture_output=True, text=True)
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
    records = [record("grading", f"autograde {size} {CHAPTER} submissions", ours_s,
                      "nbgrader autograde, one CLI call per student", base_s, **extra)]
    records += chapter_costs(quick)
    records += dask_case(quick)
    records += incremental_case(quick)
    return records


def incremental_case(quick: bool, size: int | None = None, changed: int | None = None) -> list[dict]:
    """A chapter-00 class (100, or 6) graded with --only-changed, then again after 5 (or 1) students
    resubmitted (a blank notebook becomes the solution): the second run against the first (issue 43).
    Three times: on the local pool (each run starts its graders: a bubblewrap sandbox that imports torch and runs
    the reference notebook), on standing graders (`autograder graders start`, started before the clock: a TLS
    Dask cluster on loopback whose workers keep their graders warm, used by a plain `autograder grade`), and on
    a Dask cluster that stays up between the runs (`--scheduler`)."""
    from benchmarks.run import record
    sys.path.insert(0, str(REPO / "tests" / "support"))
    from dask_cluster import DaskCluster
    size = size or (6 if quick else 100)
    changed = changed or (1 if quick else 5)
    records = []
    with tempfile.TemporaryDirectory(prefix="bench-grading-incremental-") as tmp:
        tmp = Path(tmp)
        records.append(_twice(tmp / "local", size, changed, "the local pool, 2 workers started by each run",
                              "--workers", str(WORKERS), "--local"))
        records.append(_standing(tmp, size, changed))
        with DaskCluster(tmp / "cluster") as cluster:
            for _ in range(WORKERS):
                cluster.start_worker()
            cluster.wait_for_workers(WORKERS)
            records.append(_twice(tmp / "dask", size, changed, f"a Dask cluster of {WORKERS} workers that stays up",
                                  "--scheduler", cluster.address))
    return [record("grading", f"incremental ({how}): {size} {CHAPTER} submissions, then {changed} resubmitted",
                   again_s, "the first grading of the class", first_s, **extra)
            for how, first_s, again_s, extra in records]


def _standing(tmp: Path, size: int, changed: int) -> tuple:
    """`_twice` on standing graders of WORKERS workers in a folder of this run's, stopped afterwards."""
    graders = [sys.executable, "-m", "autograder.cli", "graders"]
    saved = os.environ.get("AUTOGRADER_GRADERS")
    os.environ["AUTOGRADER_GRADERS"] = str(tmp / "standing-graders")
    try:
        subprocess.run(graders + ["start", "--workers", str(WORKERS), "--idle-timeout", "30m"], check=True,
                       capture_output=True)
        return _twice(tmp / "standing", size, changed, f"standing graders, {WORKERS} workers "
                      "(`autograder graders start`)", "--workers", str(WORKERS))
    finally:
        subprocess.run(graders + ["stop"], capture_output=True)
        if saved is None:
            os.environ.pop("AUTOGRADER_GRADERS")
        else:
            os.environ["AUTOGRADER_GRADERS"] = saved


def _twice(folder: Path, size: int, changed: int, how: str, *where: str) -> tuple:
    """(how, the first run's seconds, the second's, what the record says) of a class graded with --only-changed,
    then again after `changed` blank notebooks became the solution."""
    students = make_class(folder / "class", size)
    first_s, first, _ = _ours(folder / "class", folder / "out", CHAPTER, *where, "--only-changed")
    blank = [s for n, s in enumerate(students) if n % 3 == 2][:changed]
    right = folder / "class" / students[0] / f"{CHAPTER}.ipynb"
    for student in blank:
        shutil.copyfile(right, folder / "class" / student / f"{CHAPTER}.ipynb")
    again_s, again, _ = _ours(folder / "class", folder / "out", CHAPTER, *where, "--only-changed")
    kept = all(again[s] == first[s] for s in students if s not in blank)
    return how, first_s, again_s, dict(
        submissions=size, resubmitted=len(blank), others_kept=kept,
        resubmitted_graded_again=all(sum(again[s].values()) > 0 for s in blank))


def _seconds(out: Path) -> list[float]:
    import json
    return [json.loads(p.read_text())["seconds"] for p in sorted((out / "results").glob("*.json"))]


def chapter_costs(quick: bool, chapters: list[str] | None = None) -> list[dict]:
    """Per chapter: seconds per submission per worker and peak memory, graded locally."""
    from benchmarks.run import record
    from autograder.chapters import discover
    size = 2 if quick else 6
    records = []
    for chapter in chapters or [c.id for c in discover(REPO / "source")]:
        if not (REPO / "tests" / "mutants" / f"{chapter}.py").exists():
            continue
        with tempfile.TemporaryDirectory(prefix=f"bench-grading-{chapter}-") as tmp:
            tmp = Path(tmp)
            make_class(tmp / "class", size, chapter)
            wall, _, memory = _ours(tmp / "class", tmp / "out", chapter)
            each = _seconds(tmp / "out")
        per_worker = sum(each) / len(each)
        records.append(record("grading", f"chapter {chapter}: {size} submissions, {WORKERS} workers", per_worker,
                              "the class's wall time per submission (start-up included)", wall / size,
                              s_per_submission_per_worker=round(per_worker, 2), slowest_s=round(max(each), 2),
                              wall_s=round(wall, 1), **memory))
    return records


def dask_case(quick: bool) -> list[dict]:
    """The same chapter-00 class on a Dask cluster of this machine, against the local pool."""
    from benchmarks.run import record
    sys.path.insert(0, str(REPO / "tests" / "support"))
    from dask_cluster import DaskCluster
    size = 4 if quick else 12
    with tempfile.TemporaryDirectory(prefix="bench-grading-dask-") as tmp:
        tmp = Path(tmp)
        make_class(tmp / "class", size)
        local_s, local, _ = _ours(tmp / "class", tmp / "local")
        with DaskCluster(tmp / "cluster") as cluster:
            cluster.start_worker()
            cluster.start_worker()
            cluster.wait_for_workers(2)
            with cluster.client() as client:
                client.submit(abs, -1, pure=False).result()
                start = time.perf_counter()
                for i in range(50):  # one task at a time: what the scheduler adds to each submission
                    client.submit(abs, -i, pure=False).result()
                overhead_ms = (time.perf_counter() - start) / 50 * 1000
            dask_s, dask, memory = _ours(tmp / "class", tmp / "dask", CHAPTER, "--scheduler", cluster.address)
            warm_s, _, _ = _ours(tmp / "class", tmp / "dask-warm", CHAPTER, "--scheduler", cluster.address)
    return [record("grading", f"dask: {size} {CHAPTER} submissions, 2 workers", dask_s,
                   f"the local pool, {WORKERS} workers, same class", local_s, submissions=size,
                   dask_s_per_submission=round(dask_s / size, 2), local_s_per_submission=round(local_s / size, 2),
                   warm_rerun_s=round(warm_s, 1), scheduler_overhead_ms_per_task=round(overhead_ms, 1),
                   same_scores=dask == local, **memory)]
