"""Which typical wrong answers (tests/mutants/<chapter>.py) the tests accept on some seed.

tests/chapters/test_chapters.py rejects each mutant on the one seed its run draws; a mutant that only some draws
expose passes there by luck and fails a fresh clone's suite another day. This runs every mutant of a
chapter under COURSE_SEED=k for each seed k, and prints for every mutant the seeds on which its exercise
passed. Run it after adding mutants or changing a chapter's tests; a mutant accepted on some seed needs a
check with fixed inputs that exposes its mistake on every seed. Slow (a chapter's mutants per seed):

    nice -n 10 .venv/bin/python tests/support/mutant_seed_audit.py 04_training --seeds 1-12
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")  # as tests/conftest.py: one BLAS thread, as the grading sandbox gives

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nbformat  # noqa: E402

from autograder.chapters import discover  # noqa: E402
from course.notebook import exercises  # noqa: E402
from notebook_runs import mutant_verdicts, mutants_of, run_variants  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def seeds_of(text: str) -> list[int]:
    """"1-12" or "3,7,20-22" as a list of seeds."""
    seeds = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds += range(int(low), int(high or low) + 1)
    return seeds


def runner_sees(chapter, seed: int) -> None:
    """The variant runner is a subprocess that inherits os.environ: check that it draws from `seed`."""
    os.environ["COURSE_SEED"] = str(seed)
    (errors,) = run_variants(chapter, [["from course import inputs\nraise RuntimeError(inputs.seed())"]])
    if errors[0][2] != str(seed):
        raise SystemExit(f"the variant runner draws from seed {errors[0][2]}, not COURSE_SEED={seed}")


def audit(chapter, seeds: list[int]) -> dict[tuple[str, str], list[int]]:
    """{(exercise, mutant): seeds on which it was accepted}; the unchanged solutions run first, as in
    tests/chapters/test_chapters.py, under the name "(the solution fails)", listing the seeds on which they FAILED."""
    nb = nbformat.read(chapter.notebook, as_version=4)
    solutions = [(ex.id, nb.cells[ex.solution_cells[0]].source) for ex in exercises(nb).values() if not ex.manual]
    cases = [(ex, name, m) for ex, by_name in mutants_of(chapter).items() for name, m in by_name.items()]
    found = {(ex, "(the solution fails)"): [] for ex, _ in solutions} | {(ex, name): [] for ex, name, _ in cases}
    for seed in seeds:
        started = time.monotonic()
        os.environ["COURSE_SEED"] = str(seed)
        verdicts = mutant_verdicts(chapter, solutions + [(ex, m.code, m.judged) for ex, _, m in cases])
        for (ex, _), (_, v) in zip(solutions, verdicts):
            if v.status != "passed":
                found[ex, "(the solution fails)"].append(seed)
        for (ex, name, _), (_, v) in zip(cases, verdicts[len(solutions):]):
            if v.status not in ("failed", "error"):  # what tests/chapters/test_chapters.py counts as accepted
                found[ex, name].append(seed)
        accepted = sum(seed in s for (_, name), s in found.items() if name != "(the solution fails)")
        print(f"{chapter.id} seed {seed}: {accepted} accepted, {time.monotonic() - started:.0f} s", flush=True)
    return found


def main() -> int:
    chapters = {c.id: c for c in discover(REPO / "source")}
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="chapter ids (default: every chapter with mutants)")
    parser.add_argument("--seeds", default="1-12", help="e.g. 1-12 or 3,7,20-22")
    args = parser.parse_args()
    chosen = [chapters[c] for c in args.chapters] or [c for c in chapters.values() if mutants_of(c)]
    seeds = seeds_of(args.seeds)
    runner_sees(chosen[0], seeds[-1])
    weak = 0
    for chapter in chosen:
        found = audit(chapter, seeds)
        print(f"\n{chapter.id}, seeds {args.seeds}: seeds on which each mutant was accepted")
        for (ex, name), bad in found.items():
            if name == "(the solution fails)" and not bad:
                continue
            print(f"  {ex}: {name}: {', '.join(map(str, bad)) or '-'}")
        weak += sum(1 for s in found.values() if s)
        print(flush=True)
    return 1 if weak else 0


if __name__ == "__main__":
    sys.exit(main())
