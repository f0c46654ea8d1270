"""Compiling for a real GPU with no GPU: NVRTC (or nvcc) for sm_90 and sm_100,
errors on the student's lines, registers, shared memory and spills per kernel.

Each test runs with every GPU compiler found here; where there is neither
NVRTC nor nvcc the tests are skipped and say so, and the one test below
checks that the compile check itself then reports "not run"."""
from __future__ import annotations

import pytest

from course.cuda import Kernel, Module, compile_check, compile_check_archs
from course.cuda import gpu_compiler as cc

COMPILERS = []
if cc.nvrtc_version():
    COMPILERS.append("nvrtc")
if cc.nvcc_path():
    COMPILERS.append("nvcc")

needs_compiler = pytest.mark.skipif(
    not COMPILERS, reason="neither NVRTC nor nvcc is installed here: GPU compile checks cannot run "
                          "(not counted as passed)")


@pytest.fixture(params=COMPILERS or ["none"])
def compiler(request):
    return request.param


TILED = r"""
template <int TILE>
__global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        As[threadIdx.y][threadIdx.x] = (row < M && t * TILE + threadIdx.x < K) ? A[row * K + t * TILE + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (t * TILE + threadIdx.y < K && col < N) ? B[(t * TILE + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

extern "C" __global__ void add(float* out, const float* x, const float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}
"""

# Thirty-two values live at once and an 8-round data dependence between them:
# with registers capped, ptxas must spill to local memory.
PRESSURE = r"""
extern "C" __global__ void pressure(float* out, const float* x, int n) {
    float acc[32];
    #pragma unroll
    for (int j = 0; j < 32; ++j) acc[j] = x[threadIdx.x + j * n];
    #pragma unroll
    for (int k = 0; k < 8; ++k) {
        #pragma unroll
        for (int j = 0; j < 32; ++j) acc[j] = acc[j] * acc[(j + k + 1) % 32] + 1.0f;
    }
    float r = 0.0f;
    #pragma unroll
    for (int j = 0; j < 32; ++j) r += acc[j];
    out[threadIdx.x] = r;
}
"""


@needs_compiler
def test_resources_per_kernel_for_sm_90(compiler):
    report = compile_check(TILED, ["matmul_tiled<16>", "add"], arch="sm_90", compiler=compiler)
    assert report.ran and report.ok, report.log
    tiled, add = report.kernel("matmul_tiled<16>"), report.kernel("add")
    assert tiled.shared_bytes == 2 * 16 * 16 * 4
    assert add.shared_bytes == 0
    assert tiled.barriers >= 1 and add.barriers == 0
    for k in (tiled, add):
        assert 0 < k.registers <= 255 and not k.spills and k.arch == "sm_90"
    assert "registers" in str(report) and compiler.upper()[:4] in report.compiler.upper()


@needs_compiler
def test_spills_are_reported(compiler):
    free = compile_check(PRESSURE, arch="sm_90", compiler=compiler).kernel("pressure")
    capped = compile_check(PRESSURE, arch="sm_90", options=["--maxrregcount=16"], compiler=compiler)
    k = capped.kernel("pressure")
    assert not free.spills
    assert k.spills and k.spill_store_bytes > 0 and k.spill_load_bytes > 0
    assert k.registers < free.registers
    assert "SPILLS" in str(k)


@needs_compiler
def test_compile_error_is_on_the_students_line(compiler):
    src = TILED.replace("out[i] = x[i] + y[i];", "out[i] = x[i] + undefined_thing;")
    line = next(i for i, t in enumerate(src.splitlines(), start=1) if "undefined_thing" in t)
    report = compile_check(src, ["add"], compiler=compiler)
    assert report.ran and not report.ok
    first = report.errors[0]
    assert first.line == line and "undefined_thing" in first.message
    assert "undefined_thing" in first.source_line
    with pytest.raises(Exception) as err:
        report.raise_for_errors()
    assert f"line {line}" in str(err.value)


@needs_compiler
def test_sm_100_is_compiled_where_the_compiler_knows_it(compiler):
    reports = compile_check_archs(TILED, ["matmul_tiled<8>"], compiler=compiler)
    assert [r.arch for r in reports] == ["sm_90", "sm_100"]
    assert reports[0].ran and reports[0].ok
    knows = "sm_100" in (cc.nvrtc_archs() if compiler == "nvrtc" else cc._nvcc_info(cc.nvcc_path())[1])
    assert reports[1].ran == knows
    if knows:
        assert reports[1].ok and reports[1].kernel("matmul_tiled<8>").shared_bytes == 2 * 8 * 8 * 4
    else:
        assert "does not know sm_100" in reports[1].reason


@needs_compiler
def test_kernel_and_module_check_themselves():
    kernel = Kernel(TILED, "matmul_tiled<16>")
    assert kernel.compile_check().kernel("matmul_tiled<16>").shared_bytes == 2048
    module = Module(TILED, ["add", "matmul_tiled<8>"])
    assert {k.name for k in module.compile_check().kernels} == {"add", "matmul_tiled<8>"}


def test_without_any_gpu_compiler_the_check_says_it_did_not_run(monkeypatch):
    monkeypatch.setattr(cc, "_nvrtc", lambda: None)
    monkeypatch.setattr(cc, "nvcc_path", lambda: None)
    report = compile_check(TILED, ["add"])
    assert not report.ran and not report.ok
    assert "no GPU compiler here" in report.reason
    assert "not run" in str(report)
    report.raise_for_errors()    # nothing ran, so nothing to raise; callers must look at .ran
