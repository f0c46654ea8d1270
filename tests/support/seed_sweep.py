"""Run a chapter's solution notebook once, then its test cells again under many seeds, in one process.

The hidden tests draw fresh random inputs; a correct solution must earn every point whatever they
draw. A kernel per seed would cost seconds of start-up each, so this runs the notebook's cells here,
in one namespace, as a kernel would: every cell once, then, for each seed, `course.inputs.reseed(seed)`
before each test cell (as the grader reseeds the stream for every test cell) and that cell again.

Input (stdin): {"cwd": folder, "cells": [source, ...], "test_cells": {"index": exercise}, "seeds": [int]}
Output (stdout): {"setup": [[cell index, exception name, message]],
                  "failures": [[seed, exercise, exception name, message]]}
"""
from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import sys


def _run(source: str, index: int, namespace: dict):
    """None, or (exception name, message) if the cell raised."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, f"<cell {index}>", "exec"), namespace)
    except Exception as e:  # noqa: BLE001 - every error is a verdict, as in a kernel
        return type(e).__name__, str(e)
    return None


def _watch_the_stream() -> list[bool]:
    """[flag] set whenever a cell asks course.inputs for a draw or its seed (every question goes through
    the "course.inputs" audit event); the caller clears it."""
    asked = [False]

    def hook(event, args):
        if event == "course.inputs" and args[0] not in ("drawn", "reseed", "repeating"):
            asked[0] = True

    sys.addaudithook(hook)
    return asked


def _rerun(cells: list[str], random_cells: dict[int, str], seeds: list[int], namespace: dict, asked: list[bool]):
    """[[seed, exercise, exception name, message]]: the test cells run again under each seed."""
    from course import inputs

    failures = []
    for seed in seeds:
        for index, exercise in sorted(random_cells.items()):
            inputs.reseed(seed)
            error = _run(cells[index], index, namespace)
            if error:
                failures.append([seed, exercise, *error])
            if not asked[0]:
                # it neither drew from the stream nor read its seed: another seed cannot change what it does
                # (its fixed inputs were checked on this seed), so the other seeds skip it
                del random_cells[index]
            asked[0] = False
    return failures


def sweep(cells: list[str], test_cells: dict[int, str], seeds: list[int], namespace: dict | None = None,
          start: int = 0, setup: list | None = None) -> dict:
    """The module docstring's output. `namespace`, `start`, `setup`: cells[:start] already ran there, with those
    errors, and drew nothing from course.inputs (run_variants.py --serve shares a chapter's first cells)."""
    from course import inputs

    namespace = {"__name__": "__main__"} if namespace is None else namespace
    setup = list(setup or [])
    inputs.reseed(seeds[0])
    setup += [[i, *error] for i, source in enumerate(cells) if i >= start and (error := _run(source, i, namespace))]
    # What the notebook's first run left (torch, the chapter, its tests' helpers) stays for every seed: frozen,
    # the collector no longer walks it, so a test's gc.collect() (or an automatic full collection in a deep
    # graph) costs what that test made, as in a fresh kernel, not the whole heap of this process (half of
    # chapter 02's time here). Objects a test makes are still collected as before.
    gc.collect()
    gc.freeze()
    inputs.set_repeating(True)  # the checks with fixed inputs ran above; no seed changes their verdict
    try:
        failures = _rerun(cells, dict(test_cells), seeds, namespace, _watch_the_stream())
    finally:
        inputs.set_repeating(False)
    return {"setup": setup, "failures": failures}


def main() -> None:
    spec = json.load(sys.stdin)
    os.chdir(spec["cwd"])
    sys.path.insert(0, spec["cwd"])
    os.environ["COURSE_CHECK_RUNNING"] = "1"  # a check() in a cell must not start another check
    test_cells = {int(i): e for i, e in spec["test_cells"].items()}
    sys.stdout.write(json.dumps(sweep(spec["cells"], test_cells, spec["seeds"])))


if __name__ == "__main__":
    main()
