"""A kernel that compiles on the emulator compiles on a GPU: the emulator's g++
sees the C library it includes for itself, NVRTC (cupy's compiler) has none,
so the emulator refuses what NVRTC would (course/cuda/portability.py).

Found on a lent H200: a softmax kernel written with `-INFINITY` passed on the
emulator and did not compile on the GPU."""
from __future__ import annotations

import pytest
import torch

from course.cuda import Kernel, compile_check
from course.cuda import gpu_compiler as cc
from course.cuda.errors import KernelCompileError
from course.cuda.portability import LACKED_NAMES, nvrtc_lacks


def kernel_with(body: str, before: str = "") -> str:
    return (f'{before}extern "C" __global__ void k(float* y) {{\n'
            f'    float m = 1.0f;\n    {body}\n    y[threadIdx.x] = m;\n}}\n')


@pytest.mark.parametrize("body,named,instead", [
    ("m = -INFINITY;", "INFINITY comes from math.h", "__int_as_float(0x7f800000)"),
    ("m = FLT_MAX;", "FLT_MAX comes from float.h", "3.402823466e+38f"),
    ("int n = INT_MAX; m = n;", "INT_MAX comes from limits.h", "2147483647"),
    ("int32_t n = 2; m = n;", "int32_t comes from stdint.h", "long long"),
    ("m = M_PI;", "M_PI comes from math.h", "pi the number"),
    ("m = std::numeric_limits<float>::max();", "std::numeric_limits does not exist on a GPU", "yourself"),
])
def test_the_emulator_refuses_what_nvrtc_lacks_on_the_students_line(body, named, instead):
    with pytest.raises(KernelCompileError) as e:
        Kernel(kernel_with(body), "k")((1,), (1,), (torch.zeros(1),))
    message = str(e.value)
    assert f"line 3: error: {named}" in message and instead in message, message
    assert body in message, "the message must quote the student's line"


def test_an_include_of_a_library_header_is_refused():
    source = "#include <cmath>\n#include <cupy/complex.cuh>\n" + kernel_with("m = expf(m);")
    found = nvrtc_lacks(source)
    assert [(d.line, d.severity) for d in found] == [(1, "error")], found
    assert "#include <cmath>" in found[0].message and "expf are built in" in found[0].message


@pytest.mark.parametrize("source", [
    kernel_with("m = expf(m) + fmaxf(m, 2.0f); if (isnan(m)) printf(\"nan\\n\");"),
    kernel_with("m = __int_as_float(0x7f800000);  // INFINITY is not on a GPU; neither is FLT_MAX"),
    kernel_with('printf("INT_MAX and std::vector are only words here\\n");'),
    kernel_with("/* M_PI\n   int32_t */ m = 3.14159265f;"),
    kernel_with("m = MY_INF;", before="#define INT_MAX 2147483647\n#define MY_INF __int_as_float(0x7f800000)\n"),
    kernel_with("size_t n = 3; unsigned long long w = n; m = (float)w;"),
    kernel_with("m = cuda::std::numeric_limits<float>::max();", before="#include <cuda/std/limits>\n"),
])
def test_what_nvrtc_has_stays_allowed(source):
    assert nvrtc_lacks(source) == []


def test_the_same_kernel_runs_once_it_says_what_it_means():
    y = torch.zeros(4)
    Kernel(kernel_with("m = -__int_as_float(0x7f800000);"), "k")((1,), (4,), (y,))
    assert torch.equal(y, torch.full((4,), -float("inf")))


@pytest.mark.skipif(not cc.nvcc_path(), reason="no nvcc here (not counted as passed)")
def test_the_compile_check_holds_nvcc_to_nvrtcs_rules():
    """nvcc includes the C library, so without the rule its check would pass what cupy refuses."""
    report = compile_check(kernel_with("m = -INFINITY;"), ["k"], compiler="nvcc")
    assert report.ran and not report.ok
    assert any("INFINITY comes from math.h" in d.message and d.line == 3 for d in report.errors), report.diagnostics


@pytest.mark.skipif(not cc.nvrtc_version(), reason="no NVRTC here: the list of lacked names is not checked "
                                                   "against the real compiler (not counted as passed)")
def test_nvrtc_really_lacks_every_name_the_emulator_refuses():
    """The list is NVRTC's truth, not a guess: each name fails there, the built-ins compile."""
    compiles = []
    for name, library in LACKED_NAMES.items():
        use = f"{name} n = 0; m = (float)n;" if name.endswith("_t") else f"m = (float)({name});"
        source = kernel_with(use)
        report = compile_check(source, ["k"], compiler="nvrtc")
        if report.ok:
            compiles.append(f"{name} ({library})")
    assert not compiles, f"NVRTC {cc.nvrtc_version()} has these after all: {compiles}"
    builtins = kernel_with("m = expf(m) + fmaxf(m, 2.0f) + __int_as_float(0x7f800000); size_t n = 1; "
                           "if (isnan(m)) printf(\"%d\\n\", (int)n); assert(n == 1);")
    assert compile_check(builtins, ["k"], compiler="nvrtc").ok
