#!/usr/bin/env bash
# Chapter 05 on a lent GPU, in one call: the GPU tests (pytest -m gpu, JUnit XML; chapter 07's im2col and
# col2im kernels, conv2d and its backward on torch.cuda memory among them, tests/framework/test_conv_device.py),
# chapter 05's solution notebook checked on the GPU (its tests on torch.cuda tensors), the `gpu` benchmark suite
# (JSON records naming the device; chapter 07's im2col, conv2d, col2im and conv2d backward cases at its end) and
# chapter 06's `compile` suite (fused kernels, torch.compile), then a short table. benchmarks/device/gpu_check.py
# does the work; this script picks the Python and gives it what it lacks.
#
# On the lent GPU machine, which runs its own python3 (3.12, torch, cupy, pytest, hypothesis) and reaches no
# package registry. First, here, once (where pip reaches a registry; about 16 MB of wheels, ignored by git):
#
#     benchmarks/device/prepare.sh          # the wheels the device lacks (device/wheels.txt) -> build/device-wheels
#
# then the device tool's call, with 300 s of its 15 minutes (one more try fits, machine starts included):
#
#     run(command="bash benchmarks/gpu_check.sh", carry=["build/device-wheels"], timeout_s=300)
#
# There the wheels install offline (pip --no-index --no-deps) into a temporary folder put on PYTHONPATH, and
# the results go to $OUT, which comes back: summary.json, gpu-tests.xml/.log, notebook.json/.log,
# gpu-bench.json/.log, compile-bench.json/.log (chapter 06), table.txt. The check keeps to 270 s (--budget) and prints the table last.
#
# Here (or anywhere with the repository's .venv, which holds everything): results in benchmarks/results/gpu/.
#
#     benchmarks/gpu_check.sh             # everything
#     benchmarks/gpu_check.sh --quick     # the benchmark's smaller sizes
#
# PYTHON=... picks another interpreter; GPU_CHECK_WHEELS=... another wheel folder. Exit status: 0 passed,
# 1 something failed, 2 the set-up is incomplete (a module missing: it says which), 3 no CUDA GPU here.
set -u
cd "$(dirname "$0")/.." || exit 2
REPO=$PWD
WHEELS=${GPU_CHECK_WHEELS:-build/device-wheels}

if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3
fi
command -v "$PY" >/dev/null 2>&1 || { echo "no Python here ($PY)"; exit 2; }
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

# The distributions of benchmarks/device/wheels.txt this Python lacks (all of them on the device, none in .venv).
missing=$("$PY" benchmarks/device/gpu_check.py --missing) || {
    if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
        echo "$PY lacks: $missing"
        echo "and there are no wheels in $WHEELS: run benchmarks/device/prepare.sh where pip reaches a registry,"
        echo "then carry $WHEELS (see the top of $0)"
        exit 2
    fi
    site=${TMPDIR:-/tmp}/course-gpu-check-site
    stamp="$("$PY" -c 'import sys; print(sys.executable)') $(cd "$WHEELS" && ls ./*.whl | sort | cksum)"
    if [ "$(cat "$site/.wheels" 2>/dev/null)" != "$stamp" ]; then
        echo "$PY lacks $(echo "$missing" | wc -w) of wheels.txt; installing the $(ls "$WHEELS"/*.whl | wc -l) wheels of $WHEELS offline into $site"
        rm -rf "$site"
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
            --target "$site" "$WHEELS"/*.whl || { echo "installing the wheels of $WHEELS failed"; exit 2; }
        echo "$stamp" > "$site/.wheels"
    fi
    export PYTHONPATH="$REPO:$site${PYTHONPATH#"$REPO"}"
}

exec "$PY" benchmarks/device/gpu_check.py "$@"
