"""Every chapter's solution earns every automatic point on every seed of its hidden tests' random inputs.

A tolerance tuned to one draw, or inputs that leave float32 ill-conditioned on some draws, costs a
correct student points one run in ten (chapter 04's cross-entropy of logits scaled by 1e4 once did).
Each chapter's test cells run under SEEDS_PER_CHAPTER seeds in one process (tests/support/seed_sweep.py);
the seeds are fixed so that a failure here is reproducible, and split into chunks that the suite's
workers share. COURSE_SWEEP_FIRST_SEED explores other seeds.

How many seeds: `make test` sweeps SEEDS_IN_THE_SUITE per chapter, which catches a test that fails one
draw in a few and keeps the suite under its 15 minutes; `make sweep` sweeps 50,
a quarter of an hour of both cores on its own, before a release and whenever a test's inputs or
tolerances change (COURSE_SWEEP_SEEDS sets any other count).
"""
from __future__ import annotations

import os

import nbformat
import pytest

from conftest import CHAPTERS
from course.notebook import exercises
from notebook_runs import ChapterRunner, chapter_group, run_fresh_runner

pytestmark = pytest.mark.slow

SEEDS_IN_THE_SUITE = 3
SEEDS_PER_CHAPTER = int(os.environ.get("COURSE_SWEEP_SEEDS", SEEDS_IN_THE_SUITE))
FIRST_SEED = int(os.environ.get("COURSE_SWEEP_FIRST_SEED", "0"))
# Seconds one seed of a chapter's test cells takes on one core (measured); chapters whose sweep would
# hold one worker for minutes are split so that both workers share them.
_SECONDS_PER_SEED = {"01_tensor": 3, "02_autograd": 5, "04_training": 9, "05_backend": 4, "07_conv": 3, "08_precision": 3}
# Each chunk first runs the whole notebook once (chapter 02: half a minute): chunks much shorter than this
# would spend more on those runs than they save by spreading the seeds over the workers.
_SECONDS_PER_CHUNK = 150


def _chunks():
    for chapter in CHAPTERS:
        seeds = list(range(FIRST_SEED, FIRST_SEED + SEEDS_PER_CHAPTER))
        n_chunks = -(-len(seeds) * _SECONDS_PER_SEED.get(chapter.id, 1) // _SECONDS_PER_CHUNK)
        for k in range(n_chunks):  # chunks of equal size: no chunk of two seeds paying a whole first run
            part = seeds[k * len(seeds) // n_chunks:(k + 1) * len(seeds) // n_chunks]
            # one chunk runs with the chapter's other tests, forked from their runner; several spread over the workers
            marks = [chapter_group(chapter)] if n_chunks == 1 else []
            yield pytest.param(chapter, part, id=f"{chapter.id}-seeds-{part[0]}-{part[-1]}", marks=marks)


def sweep(chapter, seeds: list[int]) -> dict:
    nb = nbformat.read(chapter.notebook, as_version=4)
    test_cells = {i: e for e, ex in exercises(nb).items() if not ex.manual for i in ex.test_cells}
    spec = {"cells": [c.source if c.cell_type == "code" else "" for c in nb.cells],
            "test_cells": {str(i): e for i, e in test_cells.items()}, "seeds": seeds}
    served = ChapterRunner.of(chapter).ask({"sweep": spec})
    return served if served is not None else run_fresh_runner(chapter, "seed_sweep.py", spec)


@pytest.mark.parametrize("chapter, seeds", list(_chunks()))
def test_solution_earns_every_point_on_every_seed(chapter, seeds):
    result = sweep(chapter, seeds)
    setup = [f"cell {i}: {name}: {message[:300]}" for i, name, message in result["setup"]]
    assert not setup, f"{chapter.id}'s solution notebook raised on its first run:\n" + "\n".join(setup)
    failures = [f"seed {seed}: {exercise}: {name}: {message[:500]}"
                for seed, exercise, name, message in result["failures"]]
    assert not failures, (
        f"{chapter.id}'s solution loses points on {len({f[0] for f in result['failures']})} of {len(seeds)} "
        f"seeds (replay one with course.inputs.reseed(seed) before the test cell):\n" + "\n".join(failures[:10]))


def test_the_sweep_sees_a_seed_dependent_failure(tmp_path):
    """The sweep reports the seeds on which a test fails, and only those: a test cell that fails on
    odd seeds fails on exactly the odd ones."""
    from seed_sweep import sweep as run_sweep  # in this process: the runner's own logic

    cells = ["from course import inputs", "value = inputs.seed()\nassert value % 2 == 0, f'odd seed {value}'"]
    result = run_sweep(cells, {1: "ex_odd"}, [2, 3, 4, 5])
    assert [f[:2] for f in result["failures"]] == [[3, "ex_odd"], [5, "ex_odd"]], result
    assert result["setup"] == []


def test_the_sweep_runs_a_test_that_draws_nothing_once_and_one_that_draws_on_every_seed():
    from seed_sweep import sweep as run_sweep

    cells = ["from course import inputs\nfixed, drawn = [], []",
             "fixed.append(1)\nassert len(fixed) <= 2, 'a test of fixed inputs ran again'",
             "drawn.append(inputs.randint(0, 9))\nassert len(drawn) < 5, 'ran on the fourth seed'"]
    # every cell runs once as the notebook's first run, then each test cell under the first seed
    result = run_sweep(cells, {1: "ex_fixed", 2: "ex_drawn"}, [0, 1, 2, 3])
    assert [f[:2] for f in result["failures"]] == [[3, "ex_drawn"]], result


def test_a_check_with_fixed_inputs_runs_on_the_first_run_only():
    from seed_sweep import sweep as run_sweep

    cells = ["from course import inputs\nfrom course.testing import with_fixed_inputs\nruns = []",
             "with_fixed_inputs(runs.append, 1)\nassert len(runs) <= 1, 'a check with fixed inputs ran again'\n"
             "inputs.randint(0, 9)"]
    result = run_sweep(cells, {1: "ex_fixed"}, [0, 1, 2])
    assert result == {"setup": [], "failures": []}, result
    from course import inputs
    assert not inputs.repeating(), "the sweep leaves the stream as it found it"
