"""The GPU path only: cupy on torch.cuda tensors, on torch's current stream.
Every test here is marked gpu and is skipped (never passed) without a GPU;
the kernels of the chapter run on both paths in test_cuda_kernels.py."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from course.cuda import Kernel, KernelArgumentError, KernelCompileError, Where, run_check
from course.cuda.status import gpu_available

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU with cupy here: not run")]

SCALE = r"""
extern "C" __global__ void scale(float* x, float alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= alpha;
}
"""


def test_launch_runs_on_torchs_current_stream():
    kernel = Kernel(SCALE, "scale")
    stream = torch.cuda.Stream()
    x = torch.ones(1 << 20, device="cuda")
    with torch.cuda.stream(stream):
        # Work queued on `stream` before and after the kernel: if the kernel
        # ran on another stream, the fill and the kernel could reorder.
        x.fill_(2.0)
        report = kernel((4096,), (256,), (x, np.float32(3), np.int32(x.numel())))
        y = x * 1.0
    stream.synchronize()
    assert report.where is Where.GPU and report.counts is None
    assert torch.all(y == 6.0).item()


def test_same_argument_checks_on_the_gpu():
    x = torch.ones(10, device="cuda")
    with pytest.raises(KernelArgumentError, match="numpy.float32"):
        Kernel(SCALE, "scale")((1,), (32,), (x, 3.0, np.int32(10)))


def test_checks_refuse_gpu_tensors_and_say_what_to_do():
    x = torch.ones(10, device="cuda")
    with pytest.raises(ValueError, match=r"\.cpu\(\)"):
        Kernel(SCALE, "scale")((1,), (32,), (x, np.float32(3), np.int32(10)), check="bounds")


def test_large_dynamic_shared_memory_is_opted_into():
    src = r"""
    extern "C" __global__ void big(float* out) {
        extern __shared__ float s[];
        s[threadIdx.x * 16000 / blockDim.x] = threadIdx.x;
        __syncthreads();
        out[threadIdx.x] = s[threadIdx.x * 16000 / blockDim.x];
    }"""
    out = torch.zeros(64, device="cuda")
    Kernel(src, "big")((1,), (64,), (out,), shared_mem=64_000)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, torch.arange(64.0, device="cuda"))


def test_compile_error_through_cupy_is_on_the_students_line():
    src = SCALE.replace("x[i] *= alpha;", "x[i] *= beta;")
    line = next(i for i, t in enumerate(src.splitlines(), start=1) if "beta" in t)
    with pytest.raises(KernelCompileError) as err:
        Kernel(src, "scale")((1,), (32,), (torch.ones(4, device="cuda"), np.float32(1), np.int32(4)))
    assert any(d.line == line for d in err.value.diagnostics), err.value


def test_a_gpu_check_reports_the_gpu():
    def check(device):
        x = torch.ones(100, device=device)
        Kernel(SCALE, "scale")((1,), (128,), (x, np.float32(2), np.int32(100)))
        torch.testing.assert_close(x, torch.full((100,), 2.0, device=device))

    outcome = run_check("scale on cuda", check, "cuda")
    assert outcome.status == "passed" and outcome.where is Where.GPU and outcome.launches == 1
