"""Chapter 05 on a lent GPU, under whichever Python runs this (the device's python3, or the project's .venv).

    python3 benchmarks/device/gpu_check.py [--quick] [--out DIR] [--budget SECONDS]

benchmarks/gpu_check.sh is the way in: it installs the carried wheels first where this Python lacks them.
The steps, each reported in the table at the end:

1. set-up: every third-party module the check imports (benchmarks/device/imports.py finds them in the
   code) imports here, the carried distributions are the ones wheels.txt pins and what they require is
   installed, and a notebook cell runs in a fresh IPython kernel;
2. the GPU: torch sees a CUDA GPU and cupy is installed; if not, it says "no CUDA GPU" and stops (exit 3);
3. the reference: build/reference assembled from source/, as `autograder build` does it (no nbgrader);
4. the GPU tests: `pytest -m gpu` on the test files with gpu-marked tests, as JUnit XML;
5. chapter 05's solution notebook, hidden tests included, built from its text form and checked in a fresh
   kernel as a student's check runs it: on a GPU its tests use torch.cuda tensors;
6. the `gpu` benchmark suite (benchmarks/run.py gpu), as JSON records naming the device;
7. the `compile` benchmark suite (chapter 06: fused kernels against eager picotorch and torch.compile), --quick;
8. the table, printed and written.

Steps 4-7 share --budget (seconds from the start, default 270): each gets its share of what is left, and
one that outruns it is interrupted (pytest then still writes its XML) and reported as timed out.
Everything goes to --out (default: $OUT where that is set, else benchmarks/results/gpu/), eight files at
most: summary.json, gpu-tests.xml, gpu-tests.log, notebook.json, notebook.log, gpu-bench.json,
gpu-bench.log, compile-bench.json, compile-bench.log, table.txt.

Exit status: 0 all ran and passed, 1 something failed or timed out, 2 the set-up is incomplete, 3 no GPU.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.device import imports  # noqa: E402

OK, FAILED, SETUP, NO_GPU = 0, 1, 2, 3
SHARES = {"tests": 0.35, "notebook": 0.25, "bench": 0.25, "compile": 0.15}  # of the budget left when each step starts
RESERVE_S = 15  # kept back for the table and a step's clean stop
GPU_MODULES = {"cupy"}  # without it there is no GPU path: the GPU probe says so, not the set-up


def default_out() -> Path:
    return Path(os.environ["OUT"]) if os.environ.get("OUT") else REPO / "benchmarks" / "results" / "gpu"


# ------------------------------------------------------------------ 1. set-up

def installed() -> dict[str, str]:
    """{normalised name: version} of the distributions this Python finds first on its path."""
    from importlib import metadata

    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(imports.normalise(name), dist.version)
    return found


def missing_distributions() -> list[str]:
    """The distributions of wheels.txt that this Python lacks: all of them on the device, none in the venv."""
    have = installed()
    return [dist for dist in imports.read_wheels() if dist not in have]


def check_carried() -> tuple[list[str], list[str]]:
    """(problems, notes) about the distributions wheels.txt carries: found here, at that version, and
    with what each requires installed in a version it accepts."""
    from importlib import metadata

    problems, notes = [], []
    try:
        from packaging.requirements import Requirement
    except ImportError:
        Requirement = None
        notes.append("packaging is missing: the carried wheels' requirements were not checked")
    pins = imports.read_wheels()
    versions = installed()
    for dist, pinned in pins.items():
        have = versions.get(dist)
        if have is None:
            problems.append(f"{dist}=={pinned} (wheels.txt) is not installed: carry build/device-wheels")
            continue
        if have != pinned:
            notes.append(f"{dist} is {have} here; wheels.txt carries {pinned}")
        for text in (metadata.requires(dist) or []) if Requirement else []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            found = versions.get(imports.normalise(req.name))
            if found is None:
                problems.append(f"{dist} requires {req}, which is not installed here")
                continue
            if req.specifier and not req.specifier.contains(found, prereleases=True):
                notes.append(f"{dist} requires {req}; {req.name} {found} is here")
    return problems, notes


def kernel_env(tmp: Path) -> None:
    """A `python3` kernel spec for this very interpreter, found before any other, and Jupyter's files in
    `tmp`: the notebook check starts its kernels by that name, and this Python may have no kernel spec."""
    spec = tmp / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python {sys.version_info.major}.{sys.version_info.minor} (GPU check)",
        "language": "python", "metadata": {"debugger": False}}))
    os.environ["JUPYTER_PATH"] = os.pathsep.join([str(tmp / "jupyter"), *filter(None, [os.environ.get("JUPYTER_PATH")])])
    os.environ["JUPYTER_RUNTIME_DIR"] = str(tmp / "runtime")
    os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    os.environ.setdefault("IPYTHONDIR", str(tmp / "ipython"))
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(REPO) not in paths:  # the kernel and the steps import course, autograder, benchmarks from here
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, paths)])


def kernel_smoke() -> str | None:
    """Run one cell in a fresh kernel, as the notebook check will; None, or what went wrong."""
    import ipykernel  # noqa: F401  (the kernel the notebook check starts; nbclient does not require it)
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import sys; print(sys.executable)")])
    try:
        NotebookClient(nb, timeout=60, startup_timeout=60, kernel_name="python3").execute(stderr=subprocess.DEVNULL)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    out = "".join(o.get("text", "") for o in nb.cells[0].outputs).strip()
    if out != sys.executable:
        return f"the kernel ran {out or 'nothing'!r}, not {sys.executable}"
    return None


def setup(summary: dict) -> bool:
    problems, notes = check_carried()
    for module, where in imports.third_party().items():
        if module in GPU_MODULES:
            continue
        try:
            importlib.import_module(module)
        except Exception as e:
            problems.append(f"import {module} fails here ({type(e).__name__}: {str(e)[:200]}); "
                            f"the check imports it at {where[0]}")
    if not any(p.startswith(("import nbclient", "import nbformat")) for p in problems):
        try:
            trouble = kernel_smoke()
        except ImportError as e:
            trouble = f"{type(e).__name__}: {e}"
        if trouble:
            problems.append(f"a notebook kernel does not start here: {trouble}")
    summary["setup"] = {"problems": problems, "notes": notes}
    for n in notes:
        print(f"  note: {n}")
    for p in problems:
        print(f"  problem: {p}")
    return not problems


# ------------------------------------------------------------------ 2.-3. the GPU and the reference

def probe_gpu(summary: dict) -> bool:
    from course.cuda.status import environment, gpu_available

    env = environment()
    summary["environment"].update(env)
    print(f"device: {env['gpu'] or 'no GPU'} | torch {env['torch']} | cupy {env['cupy']} | nvrtc {env['nvrtc']}")
    if gpu_available():
        return True
    import torch
    print(f"no CUDA GPU here (torch.cuda.is_available() is {torch.cuda.is_available()}, cupy "
          f"{env['cupy'] or 'not installed'}): nothing to check. The emulator's checks run in the ordinary "
          "test suite.")
    return False


def assemble(summary: dict) -> bool:
    from autograder.build.release import assemble_reference

    start = time.monotonic()
    try:
        assemble_reference(REPO, REPO / "build" / "reference")
    except Exception as e:
        summary["reference"] = {"error": f"{type(e).__name__}: {e}"}
        print(f"assembling build/reference failed: {type(e).__name__}: {e}")
        return False
    summary["reference"] = {"seconds": round(time.monotonic() - start, 1)}
    return True


# ------------------------------------------------------------------ 4.-6. the steps

def run_step(cmd: list[str], log: Path, timeout: float, stop: signal.Signals = signal.SIGINT) -> dict:
    """Run `cmd` in its own process group with its output in `log`; at `timeout`, send the step's own
    process `stop` (SIGINT: pytest still writes its report; the notebook step takes SIGTERM and shuts its
    kernel down, which a SIGINT to the whole group would reach first), then kill the group."""
    start = time.monotonic()
    timed_out = False
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.send_signal(stop)
            try:
                rc = proc.wait(timeout=RESERVE_S - 5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.wait()
    return {"rc": rc, "seconds": round(time.monotonic() - start, 1), "timed_out": timed_out,
            "timeout_s": round(timeout)}


def notebook_step(result: Path, deadline: float | None = None) -> int:
    """Chapter 05's solution notebook, made from its text form beside the reference of chapters 01-04
    (what the build puts in source/05_backend/), run in a fresh kernel and judged as check_notebook()
    judges it: one verdict per exercise. Stopped early (at `deadline`, run_step's SIGTERM, on which
    nbclient shuts the kernel down; or a dead kernel), the exercises whose tests did not run are "not run",
    never passed."""
    started = time.time()
    import shutil

    import torch

    from autograder.build.release import declared_files
    from autograder.chapters import discover
    from autograder.build.reference import package_files
    from autograder.build.source_format import dumps, notebook_from_text
    from course.check import run_fresh, verdicts_of_executed
    from course.notebook import exercises, read_notebook
    from course.verdicts import NOT_RUN, error_of

    chapters = discover(REPO / "source")
    n = [c.id for c in chapters].index(imports.CHAPTER)
    chapter = chapters[n]
    stopped = None
    with tempfile.TemporaryDirectory(prefix="gpu-check-notebook-") as tmp:
        folder = Path(tmp) / chapter.id
        folder.mkdir()
        text = notebook_from_text(chapter.text_form, chapter.id)
        (folder / chapter.notebook.name).write_text(dumps(text))
        for rel, code in package_files(chapters[:n]).items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(code)
        for name in declared_files(chapter, text):
            shutil.copy(chapter.source_dir / name, folder / name)
        nb = read_notebook(folder / chapter.notebook.name)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        start = time.monotonic()
        try:
            run_fresh(nb, folder)
        except BaseException as e:  # noqa: B036 (nbclient shuts the kernel down on run_step's SIGTERM)
            if deadline is not None and time.time() >= deadline - 1:
                stopped = f"its share of --budget ({deadline - started:.0f} s) ran out"
            else:
                import traceback
                traceback.print_exc()
                stopped = f"{type(e).__name__}: {e}"
        seconds = time.monotonic() - start
    verdicts = verdicts_of_executed(nb)
    found = exercises(nb)
    for v in verdicts:
        ex = found[v.exercise]
        cut = [i for i in ex.solution_cells + ex.test_cells if (error_of(nb.cells[i]) or ("",))[0] == "KeyboardInterrupt"]
        if stopped and ex.test_cells and (cut or all(nb.cells[i].get("execution_count") is None for i in ex.test_cells)):
            v.status, v.points = NOT_RUN, 0.0
            v.message = f"the notebook stopped {'in' if cut else 'before'} these tests: {stopped}"
    record = {"chapter": chapter.id, "seconds": round(seconds, 1), "stopped": stopped,
              "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
              "verdicts": [{"exercise": v.exercise, "status": v.status, "points": v.points,
                            "max_points": v.max_points, "message": v.message} for v in verdicts]}
    result.write_text(json.dumps(record, indent=2))
    for v in verdicts:
        print(f"{v.exercise:24s} {v.status:16s} {v.points:g}/{v.max_points:g} {v.message[:300]}")
    if stopped:
        print(f"stopped after {seconds:.0f} s: {stopped}")
    return 0 if all(v.ok for v in verdicts) and not stopped else 1


def steps(out: Path, quick: bool) -> dict[str, list[str]]:
    py = sys.executable
    tests = [str(p.relative_to(REPO)) for p in imports.gpu_test_files()]
    return {
        "tests": [py, "-m", "pytest", "-m", "gpu", "-q", "-rfEs", "-p", "no:cacheprovider",
                  f"--junitxml={out / 'gpu-tests.xml'}", *tests],
        "notebook": [py, str(HERE / "gpu_check.py"), "--notebook-step", str(out / "notebook.json")],
        "bench": [py, str(REPO / "benchmarks" / "run.py"), "gpu", *(["--quick"] if quick else []),
                  "--json", str(out / "gpu-bench.json")],
        # (always --quick: its emulator cases alone take minutes at full size)
        "compile": [py, str(REPO / "benchmarks" / "run.py"), "compile", "--quick", "--json", str(out / "compile-bench.json")],
    }


LOGS = {"tests": "gpu-tests.log", "notebook": "notebook.log", "bench": "gpu-bench.log", "compile": "compile-bench.log"}


# ------------------------------------------------------------------ 7. the table

def tests_lines(out: Path, step: dict) -> tuple[list[str], bool]:
    try:
        root = ET.parse(out / "gpu-tests.xml").getroot()
    except Exception as e:
        return [f"GPU tests: no report ({type(e).__name__}); rc={step['rc']}, see gpu-tests.log"], False
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    count = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    passed = count["tests"] - count["failures"] - count["errors"] - count["skipped"]
    lines = [f"GPU tests (pytest -m gpu): {passed} passed, {count['failures']} failed, {count['errors']} errors, "
             f"{count['skipped']} skipped in {step['seconds']:g} s" + (" (TIMED OUT)" if step["timed_out"] else "")]
    bad, skips = [], {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        for kind in ("failure", "error"):
            found = case.find(kind)
            if found is not None:
                why = (found.get("message") or "").strip().splitlines()
                bad.append(f"    {kind:8s} {name}  {why[0][:200] if why else ''}")
        skipped = case.find("skipped")
        if skipped is not None:
            reason = (skipped.get("message") or "").strip()
            skips[reason] = skips.get(reason, 0) + 1
    lines += bad[:30] + ([f"    ... and {len(bad) - 30} more in gpu-tests.xml"] if len(bad) > 30 else [])
    lines += [f"    skipped  {n} x {reason[:200]}" for reason, n in sorted(skips.items(), key=lambda kv: -kv[1])[:5]]
    ok = step["rc"] == 0 and not step["timed_out"] and count["failures"] == count["errors"] == 0 and passed > 0
    return lines, ok


def notebook_lines(out: Path, step: dict) -> tuple[list[str], bool]:
    try:
        record = json.loads((out / "notebook.json").read_text())
    except Exception:
        return [f"notebook {imports.CHAPTER}: no verdicts (rc={step['rc']}"
                + (", TIMED OUT" if step["timed_out"] else "") + "); see notebook.log"], False
    from course.verdicts import MANUAL, PASSED
    verdicts = record["verdicts"]
    passed = [v for v in verdicts if v["status"] == PASSED]
    auto = [v for v in verdicts if v["status"] != MANUAL]
    lines = [f"notebook {record['chapter']} on {record['device'] or 'the CPU (no GPU)'}: {len(passed)} of {len(auto)} exercises passed, "
             f"{sum(v['points'] for v in auto):g}/{sum(v['max_points'] for v in auto):g} points, "
             f"{record['seconds']:g} s" + (f" (STOPPED: {record['stopped'][:100]})" if record.get("stopped") else "")]
    lines += [f"    {v['exercise']:22s} {v['status']:14s} {v['message'][:200]}" for v in auto if v["status"] != PASSED]
    return lines, len(passed) == len(auto) and step["rc"] == 0


def bench_lines(out: Path, step: dict, suite: str = "gpu", name: str = "bench") -> tuple[list[str], bool]:
    try:
        records = json.loads((out / f"{suite}-bench.json").read_text())
        assert records, "the suite measured nothing"
    except Exception:
        tail = (out / LOGS[name]).read_text()[-1500:] if (out / LOGS[name]).exists() else ""
        return ([f"benchmark {suite}: no results (rc={step['rc']}" + (", TIMED OUT" if step["timed_out"] else "")
                 + f"); end of {LOGS[name]}:"] + ["    " + l for l in tail.splitlines()]), False
    device = records[0].get("device", "?") if records else "?"
    lines = [f"benchmark suite {suite} on {device} ({step['seconds']:g} s):",
             f"  {'case':44s} {'ours (ms)':>10s} {'torch (ms)':>10s} {'vs torch':>9s} {'target':>8s} {'meets':>6s}"]
    for r in records:
        lines.append(f"  {r['case']:44s} {r['ours_s'] * 1e3:10.3f} {r['baseline_s'] * 1e3:10.3f} "
                     f"{r.get('vs_torch', ''):>9s} {r.get('target', ''):>8s} {r.get('meets', ''):>6s}"
                     + (f"   {r['ours_tflops']} vs {r['torch_tflops']} TFLOP/s" if "ours_tflops" in r else ""))
    return lines, step["rc"] == 0 and bool(records)


# ------------------------------------------------------------------ the whole

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the benchmark's smaller sizes")
    parser.add_argument("--out", type=Path, default=None, help="where the results go (default: $OUT, else "
                        "benchmarks/results/gpu)")
    parser.add_argument("--budget", type=float, default=270.0, help="seconds for the whole check (default 270)")
    parser.add_argument("--missing", action="store_true",
                        help="only list the distributions of wheels.txt this Python lacks (exit 1 if any)")
    parser.add_argument("--notebook-step", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.missing:
        missing = missing_distributions()
        print(" ".join(missing))
        return 1 if missing else 0
    if args.notebook_step:
        return notebook_step(args.notebook_step, args.deadline)

    out = (args.out or default_out()).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        kernel_env(Path(tmp))
        return check(out, args.budget, args.quick)


def check(out: Path, budget: float, quick: bool) -> int:
    began = time.monotonic()
    summary = {"environment": {"python": sys.version.split()[0], "executable": sys.executable}, "steps": {}}

    def save() -> None:
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))

    print(f"GPU check under Python {summary['environment']['python']} ({sys.executable}); results in {out}")
    if not setup(summary):
        save()
        problems = summary["setup"]["problems"]
        print("the set-up is incomplete (above).")
        if any(not p.startswith("import torch ") for p in problems):
            print("The wheels: run benchmarks/device/prepare.sh where pip reaches a registry, and carry "
                  "build/device-wheels (the top of benchmarks/gpu_check.sh says how).")
        if any(p.startswith("import torch ") for p in problems):
            print("torch is not carried: it comes with the interpreter (the lent machine's python3 has it).")
        return SETUP
    if not probe_gpu(summary):
        summary["result"] = "no CUDA GPU"
        save()
        return NO_GPU
    if not assemble(summary):
        save()
        return SETUP
    save()

    commands = steps(out, quick)
    names = list(commands)
    for i, name in enumerate(names):
        left = budget - (time.monotonic() - began) - RESERVE_S
        share = SHARES[name] / sum(SHARES[n] for n in names[i:])
        print(f"{name}: running (at most {left * share:.0f} s) ...", flush=True)
        cmd, stop = commands[name], signal.SIGINT
        if name == "notebook":
            cmd, stop = cmd + ["--deadline", f"{time.time() + left * share:.1f}"], signal.SIGTERM
        summary["steps"][name] = run_step(cmd, out / LOGS[name], left * share, stop)
        save()

    lines, ok = [], True
    compile_lines = lambda out, step: bench_lines(out, step, "compile", "compile")  # noqa: E731
    for name, summarise in (("tests", tests_lines), ("notebook", notebook_lines), ("bench", bench_lines),
                            ("compile", compile_lines)):
        try:
            part, good = summarise(out, summary["steps"][name])
        except Exception as e:  # the table is printed whatever a step left behind
            part, good = [f"{name}: its results could not be read ({type(e).__name__}: {e}); see {LOGS[name]}"], False
        lines += part + [""]
        ok &= good
    lines.append(f"GPU check {'passed' if ok else 'FAILED'} in {time.monotonic() - began:.0f} s on "
                 f"{summary['environment'].get('gpu')} (Python {summary['environment']['python']}, "
                 f"torch {summary['environment'].get('torch')}, cupy {summary['environment'].get('cupy')})")
    table = "\n".join(lines)
    (out / "table.txt").write_text(table + "\n")
    summary["result"] = "passed" if ok else "failed"
    save()
    print()
    print(table)
    return OK if ok else FAILED


if __name__ == "__main__":
    sys.exit(main())
