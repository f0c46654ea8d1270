#!/usr/bin/env bash
# Chapter 05 on a lent GPU, in one call: the GPU tests, the chapter's notebook graded on the GPU, and the
# `gpu` benchmark suite, then a short table. Installs nothing: it needs the repository's .venv (with cupy)
# already there, and a CUDA GPU that torch sees. About 5 minutes on an H200.
#
#     benchmarks/gpu_check.sh            # everything
#     benchmarks/gpu_check.sh --quick    # smaller benchmark sizes
#
# Writes benchmarks/results/gpu-check/ (JUnit XML of the tests, the notebook's verdicts, the benchmark's JSON).
set -u
cd "$(dirname "$0")/.."
PY=.venv/bin/python
OUT=benchmarks/results/gpu-check
mkdir -p "$OUT"
QUICK=""
[ "${1:-}" = "--quick" ] && QUICK="--quick"

if [ ! -x "$PY" ]; then echo "no .venv here: set up the repository first (make setup)"; exit 2; fi
"$PY" - <<'PY' || exit 2
import sys, torch
from course.cuda.status import environment, gpu_available
env = environment()
print("device:", env["gpu"], "| torch", env["torch"], "| cupy", env["cupy"], "| nvrtc", env["nvrtc"])
if not gpu_available():
    print("no CUDA GPU with cupy here: nothing to check (the emulator's checks run in the ordinary test suite)")
    sys.exit(1)
PY

# The assembled reference (build/reference) the tests and the benchmark import: regenerated if stale.
.venv/bin/autograder build > "$OUT/build.log" 2>&1 || { echo "autograder build failed: see $OUT/build.log"; exit 2; }

start=$(date +%s)
"$PY" -m pytest -m gpu -q -rs -p no:cacheprovider --junitxml="$OUT/gpu-tests.xml" \
    tests/test_backend_reference.py tests/test_cuda_gpu.py tests/test_cuda_kernels.py tests/test_cuda_gpu_glue.py \
    > "$OUT/gpu-tests.log" 2>&1
tests_rc=$?
tests_s=$(( $(date +%s) - start ))

start=$(date +%s)
"$PY" - > "$OUT/notebook.log" 2>&1 <<'PY'
# The solution notebook, hidden tests included, run as a student's check runs it: on this machine every
# kernel test uses torch.cuda tensors and the picotorch tests the "cuda" device.
from course.check import check_notebook
for v in check_notebook("source/05_backend/05_backend.ipynb", "05_backend"):
    print(f"{v.exercise:20s} {v.status:14s} {v.points:g}/{v.max_points:g} {v.message[:300]}")
PY
notebook_rc=$?
notebook_s=$(( $(date +%s) - start ))

start=$(date +%s)
"$PY" benchmarks/run.py gpu $QUICK --json "$OUT/gpu-bench.json" > "$OUT/gpu-bench.log" 2>&1
bench_rc=$?
bench_s=$(( $(date +%s) - start ))

"$PY" - "$OUT" "$tests_rc" "$tests_s" "$notebook_rc" "$notebook_s" "$bench_rc" "$bench_s" <<'PY'
import json, sys, xml.etree.ElementTree as ET
from pathlib import Path
out, tests_rc, tests_s, nb_rc, nb_s, bench_rc, bench_s = sys.argv[1:]
out = Path(out)
print()
try:
    suite = ET.parse(out / "gpu-tests.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    total, failures, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    print(f"GPU tests (pytest -m gpu): {total - failures - errors - skipped} passed, {failures} failed, "
          f"{errors} errors, {skipped} skipped, {tests_s} s  (log: {out}/gpu-tests.log)")
except Exception as e:
    print(f"GPU tests: no report ({e}); rc={tests_rc}, see {out}/gpu-tests.log")
lines = (out / "notebook.log").read_text().splitlines()
verdicts = [l for l in lines if l[:3] == "ex_"]
passed = sum(" passed " in l for l in verdicts)
print(f"notebook 05_backend on the GPU: {passed} of {len(verdicts)} exercises passed, {nb_s} s  (log: {out}/notebook.log)")
for l in verdicts:
    if " passed " not in l:
        print("   ", l)
print()
try:
    records = json.loads((out / "gpu-bench.json").read_text())
except Exception:
    print(f"benchmark: no results (rc={bench_rc}); see {out}/gpu-bench.log")
    print((out / "gpu-bench.log").read_text()[-3000:])
    sys.exit(1)
device = records[0].get("device", "?") if records else "?"
print(f"benchmark suite gpu on {device} ({bench_s} s):")
print(f"  {'case':44s} {'ours (ms)':>10s} {'torch (ms)':>10s} {'vs torch':>9s} {'target':>8s} {'meets':>6s}")
for r in records:
    print(f"  {r['case']:44s} {r['ours_s'] * 1e3:10.3f} {r['baseline_s'] * 1e3:10.3f} {r.get('vs_torch', ''):>9s} "
          f"{r.get('target', ''):>8s} {r.get('meets', ''):>6s}"
          + (f"   {r['ours_tflops']} vs {r['torch_tflops']} TFLOP/s" if "ours_tflops" in r else ""))
PY
