"""Honest GPU status: each check says whether it ran on a GPU, on the
emulator, or not at all, and nothing that did not run counts as passed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from course.cuda import Kernel, Where, run_check, tally, where_for
from course.cuda import status

REPO = Path(__file__).resolve().parents[2]

FILL = r"""
extern "C" __global__ void fill(float* out, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v;
}
"""


def fill_check(device):
    out = torch.zeros(100, device=device)
    Kernel(FILL, "fill")((1,), (128,), (out, np.float32(3), np.int32(100)))
    torch.testing.assert_close(out, torch.full((100,), 3.0, device=device))


def test_where_kernels_run_here():
    assert where_for("cpu") is (Where.EMULATOR if status.emulator_available() else Where.NOT_RUN)
    assert where_for("cuda") is (Where.GPU if status.gpu_available() else Where.NOT_RUN)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what happens where there is no GPU")
def test_a_gpu_check_without_a_gpu_is_not_run_and_not_passed():
    called = []
    outcome = run_check("fill on cuda", lambda d: called.append(d), "cuda")
    assert outcome.status == "not run" and outcome.where is Where.NOT_RUN
    assert not outcome.counts_as_passed and not called
    assert "no CUDA GPU" in outcome.message


@pytest.mark.skipif(not status.emulator_available(), reason="no g++ here: the CUDA emulator cannot run")
def test_a_check_on_the_emulator_says_so():
    outcome = run_check("fill on cpu", fill_check, "cpu")
    assert outcome.status == "passed" and outcome.counts_as_passed
    assert outcome.where is Where.EMULATOR and outcome.launches == 1
    assert "emulator" in str(outcome)


@pytest.mark.skipif(not status.emulator_available(), reason="no g++ here: the CUDA emulator cannot run")
def test_failures_and_errors_are_not_passes():
    def wrong(device):
        out = torch.zeros(10)
        Kernel(FILL, "fill")((1,), (32,), (out, np.float32(1), np.int32(10)))
        torch.testing.assert_close(out, torch.zeros(10))

    def broken(device):
        Kernel(FILL, "fill")((1,), (32,), (torch.zeros(10), 1.0, np.int32(10)))

    failed = run_check("wrong", wrong, "cpu")
    errored = run_check("broken", broken, "cpu")
    assert failed.status == "failed" and failed.where is Where.EMULATOR and "Mismatched" in failed.message
    assert errored.status == "error" and "numpy.float32" in errored.message
    assert not failed.counts_as_passed and not errored.counts_as_passed


def test_tally_counts_only_real_passes():
    outcomes = [
        status.CheckOutcome("a", Where.EMULATOR, "passed", launches=1),
        status.CheckOutcome("b", Where.GPU, "passed", launches=2),
        status.CheckOutcome("c", Where.NOT_RUN, "not run", "no GPU"),
        status.CheckOutcome("d", Where.NOT_RUN, "passed"),          # a pass that never ran is not one
        status.CheckOutcome("e", Where.EMULATOR, "failed", "wrong", 1),
    ]
    counts = tally(outcomes)
    assert counts["passed"] == 2 and counts["not run"] == 2 and counts["failed"] == 1
    assert counts["on gpu"] == 1 and counts["on emulator"] == 2


def test_environment_reports_every_dependency():
    env = status.environment()
    for key in ("torch", "torch.cuda.is_available", "cupy", "nvrtc", "nvcc", "emulator compiler", "kernels run on"):
        assert key in env
    text = status.describe()
    if not torch.cuda.is_available():
        assert "emulator" in text and "warp lock-step" in text


def test_the_package_imports_without_cupy():
    # cupy is optional (the `gpu` extra): importing and using the emulator
    # must not need it, even where it is installed.
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, *args):\n"
        "        if name == 'cupy' or name.startswith('cupy.'):\n"
        "            raise ImportError('cupy is blocked for this test')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import course.cuda, course.cuda.kernel, course.cuda.gpu_compiler, course.cuda.emulator.launch\n"
        "assert 'cupy' not in sys.modules\n"
        "print(course.cuda.where_for('cpu').value)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() in ("emulator", "not run")
