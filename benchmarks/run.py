"""One runner for every benchmark suite (COURSE.md §6).

    python benchmarks/run.py [SUITE ...] [--quick] [--json FILE]

A suite is a module `benchmarks/suites/<name>.py` with `run(quick: bool) -> list[dict]`
returning records {"suite", "case", "ours_s", "baseline", "baseline_s", "ratio", ...}
where ratio = ours_s / baseline_s (lower is better), both timed in this run, and an
optional `available() -> str | None` that says why the suite cannot run here.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def suites() -> list[str]:
    return sorted(p.stem for p in (HERE / "suites").glob("*.py") if not p.stem.startswith("_"))


def best_of(fn, repeat: int = 5, number: int = 1) -> float:
    """Seconds per call: the best of `repeat` rounds of `number` calls (the least disturbed round)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def torch_and_numpy_missing() -> str | None:
    """A suite's `available()` where it needs only torch and numpy: why it cannot run, or None."""
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        return f"needs torch and numpy ({e})"
    return None


def write_reference(folder: Path) -> Path:
    """`folder`, holding the reference picotorch generated from source/ now (never a stale build)."""
    from autograder.build.reference import package_files
    from autograder.chapters import discover
    for rel, text in package_files(discover(HERE.parent / "source")).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


def record(suite: str, case: str, ours_s: float, baseline: str, baseline_s: float, **extra) -> dict:
    return {"suite": suite, "case": case, "ours_s": ours_s, "baseline": baseline,
            "baseline_s": baseline_s, "ratio": ours_s / baseline_s if baseline_s else float("inf"), **extra}


def format_table(records: list[dict]) -> str:
    lines = [f"{'suite':<10} {'case':<44} {'ours (s)':>10} {'baseline (s)':>13} {'ratio':>7}  baseline / notes"]
    for r in records:
        extra = {k: v for k, v in r.items() if k not in {"suite", "case", "ours_s", "baseline", "baseline_s", "ratio"}}
        notes = r["baseline"] + ("; " + ", ".join(f"{k}={v}" for k, v in extra.items()) if extra else "")
        lines.append(f"{r['suite']:<10} {r['case']:<44} {r['ours_s']:>10.4g} {r['baseline_s']:>13.4g} "
                     f"{r['ratio']:>7.2f}  {notes}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suites", nargs="*", help=f"suites to run (default: all): {', '.join(suites())}")
    parser.add_argument("--quick", action="store_true", help="smaller cases; under two minutes on 2 cores")
    parser.add_argument("--json", help="also write the records to this file")
    args = parser.parse_args(argv)
    chosen = args.suites or suites()
    unknown = [s for s in chosen if s not in suites()]
    if unknown:
        parser.error(f"unknown suite(s) {', '.join(unknown)}; known: {', '.join(suites())}")
    records = []
    for name in chosen:
        module = importlib.import_module(f"benchmarks.suites.{name}")
        why_not = module.available() if hasattr(module, "available") else None
        if why_not:
            print(f"{name}: not run: {why_not}")
            continue
        print(f"{name}: running{' (quick)' if args.quick else ''} ...", flush=True)
        records.extend(module.run(quick=args.quick))
    print(format_table(records))
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
