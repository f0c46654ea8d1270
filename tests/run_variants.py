"""Run many variants of a chapter notebook in one Python process.

A Jupyter kernel per variant costs seconds of start-up; the typical-mistake tests
run dozens of variants per chapter, so they execute each variant's cells here
instead, in a fresh namespace, one after another, as a kernel would (an error
in one cell does not stop the next). The chapter's own framework (`picotorch`)
is re-imported for every variant, so a variant cannot leak into the next.

Input (stdin): {"cwd": folder, "variants": [[cell source, ...], ...]}
Output (stdout): one JSON list per variant: [[cell index, exception name, message], ...]
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys

VARIANT_TIMEOUT_S = 120


class VariantTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise VariantTimeout(f"still running after {VARIANT_TIMEOUT_S} s")


def run_variant(cells: list[str]) -> list[list]:
    for name in [m for m in sys.modules if m == "picotorch" or m.startswith("picotorch.")]:
        del sys.modules[name]
    namespace = {"__name__": "__main__"}
    errors = []
    signal.alarm(VARIANT_TIMEOUT_S)
    try:
        for index, source in enumerate(cells):
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(source, f"<cell {index}>", "exec"), namespace)
            except VariantTimeout as e:
                errors.append([index, "TimeoutError", str(e)])
                break
            except Exception as e:  # noqa: BLE001 - every error is a verdict, as in a kernel
                errors.append([index, type(e).__name__, str(e)])
    finally:
        signal.alarm(0)
    return errors


def main() -> None:
    spec = json.load(sys.stdin)
    os.chdir(spec["cwd"])
    sys.path.insert(0, spec["cwd"])
    os.environ["COURSE_CHECK_RUNNING"] = "1"  # a check() in a cell must not start another check
    signal.signal(signal.SIGALRM, _alarm)
    results = [run_variant(cells) for cells in spec["variants"]]
    sys.stdout.write(json.dumps(results))


if __name__ == "__main__":
    main()
