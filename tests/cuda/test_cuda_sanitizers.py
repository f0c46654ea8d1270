"""The emulator's two diagnostic modes, on the bugs students make: an
off-by-one bound (check="bounds", AddressSanitizer) and a missing
__syncthreads() (check="races", ThreadSanitizer), each reported on the
student's own line; and correct kernels that pass both, with their results
written back into the tensors."""
from __future__ import annotations


import numpy as np
import pytest
import torch

from benchmarks.suites.gpu_kernels_smoke import TILED_MATMUL
from course.cuda import DataRaceError, Kernel, OutOfBoundsError, checking
from course.cuda.status import emulator_available
from cuda_helpers import line_of

pytestmark = pytest.mark.skipif(
    not emulator_available(), reason="no g++ here: the CUDA emulator cannot run (not counted as passed)")


OFF_BY_ONE = r"""
extern "C" __global__ void add(float* out, const float* x, const float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n)
        out[i] = x[i] + y[i];
}
"""


def test_off_by_one_is_caught_with_its_line():
    n = 1000
    x, y, out = torch.randn(n), torch.randn(n), torch.zeros(n)
    with pytest.raises(OutOfBoundsError) as err:
        Kernel(OFF_BY_ONE, "add")((4,), (256,), (out, x, y, np.int32(n)), check="bounds")
    line = line_of(OFF_BY_ONE, "out[i] = x[i] + y[i];")
    kinds = {f.kind for f in err.value.findings}
    assert kinds == {"out-of-bounds read", "out-of-bounds write"}
    assert all(f.line == line for f in err.value.findings)
    text = str(err.value)
    assert f"out-of-bounds write at line {line} of your kernel: `out[i] = x[i] + y[i];`" in text
    assert "element 1000 of `out`, which has 1000" in text
    assert "element 1000 of `x`" in text and "element 1000 of `y`" in text
    assert "thread (232,0,0) in block (3,0,0)" in text      # i == 1000 == 3 * 256 + 232
    assert isinstance(err.value, AssertionError)            # graded as a failed check


def test_correct_kernel_passes_the_bounds_check_and_keeps_its_results():
    src = OFF_BY_ONE.replace("i <= n", "i < n")
    n = 777
    x, y, out = torch.randn(n), torch.randn(n), torch.zeros(n)
    report = Kernel(src, "add")((4,), (256,), (out, x, y, np.int32(n)), check="bounds")
    assert report.findings == [] and report.check == "bounds"
    torch.testing.assert_close(out, x + y)


def test_in_place_kernel_keeps_its_aliasing_under_the_check():
    src = r"""
    extern "C" __global__ void shift(float* out, const float* x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = x[i] + 1.0f;
    }"""
    base = torch.arange(20.0)
    view = base[5:15]
    Kernel(src, "shift")((1,), (32,), (view, view, np.int32(10)), check="bounds")
    torch.testing.assert_close(base, torch.cat([torch.arange(5.0), torch.arange(5.0, 15.0) + 1,
                                                torch.arange(15.0, 20.0)]))


def test_overflowing_a_shared_array_of_a_template_kernel_is_caught():
    src = r"""
    template <int N>
    __global__ void rotate(float* out) {
        __shared__ float s[N];
        s[threadIdx.x] = threadIdx.x;
        __syncthreads();
        out[threadIdx.x] = s[threadIdx.x + 1];
    }"""
    out = torch.zeros(64)
    with pytest.raises(OutOfBoundsError) as err:
        Kernel(src, "rotate<64>")((1,), (64,), (out,), check="bounds")
    finding, = err.value.findings
    assert finding.line == line_of(src, "s[threadIdx.x + 1]")
    assert "element 64 of the shared array `s`" in finding.message
    assert "thread (63,0,0)" in finding.message


def test_dynamic_shared_memory_beyond_the_launch_size_is_caught():
    src = r"""
    extern "C" __global__ void stage(const float* x, float* out) {
        extern __shared__ float s[];
        s[threadIdx.x] = x[threadIdx.x];
        __syncthreads();
        out[threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
    }"""
    x, out = torch.randn(64), torch.zeros(64)
    kernel = Kernel(src, "stage")
    report = kernel((1,), (64,), (x, out), shared_mem=64 * 4, check="bounds")   # right size: clean
    assert report.findings == []
    torch.testing.assert_close(out, x.flip(0))
    with pytest.raises(OutOfBoundsError) as err:
        kernel((1,), (64,), (x, out), shared_mem=32 * 4, check="bounds")         # half of what it uses
    lines = {f.line for f in err.value.findings}
    assert line_of(src, "s[threadIdx.x] = x[threadIdx.x];") in lines
    assert "shared_mem=128 bytes" in str(err.value)


def without_barrier(comment: str) -> str:
    """The tiled matmul with the __syncthreads() whose comment is `comment` taken out."""
    barrier = f"__syncthreads();  // {comment}"
    assert TILED_MATMUL.count(barrier) == 1, f"the tiled matmul has no barrier marked {comment!r}"
    return TILED_MATMUL.replace(barrier, "// (barrier removed)")


def _matmul(src, check):
    M, N, K = 12, 10, 19
    A, B, C = torch.randn(M, K), torch.randn(K, N), torch.zeros(M, N)
    report = Kernel(src, "matmul_tiled<8>")(((N + 7) // 8, (M + 7) // 8), (8, 8),
                                            (A, B, C, np.int32(M), np.int32(N), np.int32(K)), check=check)
    return report, C, A @ B


def test_tiled_matmul_with_its_barriers_has_no_race():
    report, C, ref = _matmul(TILED_MATMUL, "races")
    assert report.findings == [] and report.check == "races"
    torch.testing.assert_close(C, ref, rtol=19 * torch.finfo().eps, atol=1e-5)


def test_tiled_matmul_with_one_barrier_removed_is_reported_as_a_race():
    src = without_barrier("after the products")
    with pytest.raises(DataRaceError) as err:
        _matmul(src, "races")
    store_a = line_of(src, "As[threadIdx.y][threadIdx.x] =")
    store_b = line_of(src, "Bs[threadIdx.y][threadIdx.x] =")
    product = line_of(src, "acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];")
    pairs = {frozenset((f.line, f.other_line)) for f in err.value.findings}
    assert pairs & {frozenset((store_a, product)), frozenset((store_b, product))}, pairs
    text = str(err.value)
    assert "data race on shared memory `As`" in text or "data race on shared memory `Bs`" in text
    assert "A __syncthreads() is missing?" in text
    assert isinstance(err.value, AssertionError)


def test_race_on_global_memory_names_the_tensor():
    src = r"""
    extern "C" __global__ void last_wins(float* out, const float* x) {
        out[0] = x[threadIdx.x];
    }"""
    with pytest.raises(DataRaceError) as err:
        Kernel(src, "last_wins")((1,), (32,), (torch.zeros(1), torch.randn(32)), check="races")
    assert "data race on global memory `out`" in str(err.value)
    assert err.value.findings[0].line == line_of(src, "out[0] = x[threadIdx.x];")


def test_ordinary_launch_stops_an_off_by_one_before_it_corrupts_memory():
    src = r"""
    extern "C" __global__ void ones(float* out, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i <= n) out[i] = 1.0f;
    }"""
    storage = torch.full((20,), 7.0)
    out = storage[:10]                     # the element after the view is real memory: a silent bug on a GPU
    with pytest.raises(OutOfBoundsError) as err:
        Kernel(src, "ones")((1,), (32,), (out, np.int32(10)))
    finding, = err.value.findings
    assert finding.kind == "out-of-bounds write" and finding.line == line_of(src, "out[i] = 1.0f;")
    assert "writes element 10 of `out`, which has 10" in str(err.value)
    assert "stopped before that access" in str(err.value)
    assert storage[10].item() == 7.0       # never written


def test_checking_switches_a_mode_on_for_every_launch_in_a_block():
    src = r"""
    extern "C" __global__ void rotate(float* out) {
        __shared__ float s[32];
        s[threadIdx.x] = threadIdx.x;
        __syncthreads();
        out[threadIdx.x] = s[threadIdx.x + 1];
    }"""
    kernel = Kernel(src, "rotate")
    out = torch.zeros(32)
    kernel((1,), (32,), (out,))             # shared arrays are guarded by check="bounds" only
    with checking("bounds"):
        with pytest.raises(OutOfBoundsError):
            kernel((1,), (32,), (out,))


# ------------------------------------------- shared-memory races in every ordinary launch
# No sanitizer needed (so they are found where one cannot run, as inside the grader's
# address-space limit): the emulator follows each thread's barriers and warp syncs.

def _ordinary_matmul(src):
    M, N, K = 12, 10, 19
    A, B, C = torch.randn(M, K), torch.randn(K, N), torch.zeros(M, N)
    Kernel(src, "matmul_tiled<8>")(((N + 7) // 8, (M + 7) // 8), (8, 8),
                                   (A, B, C, np.int32(M), np.int32(N), np.int32(K)))
    return C, A @ B


def test_ordinary_launch_finds_no_race_in_the_correct_tiled_matmul():
    C, ref = _ordinary_matmul(TILED_MATMUL)
    torch.testing.assert_close(C, ref, rtol=19 * torch.finfo().eps, atol=1e-5)


@pytest.mark.parametrize("removed", ["after the products", "after the loads"])
def test_ordinary_launch_reports_a_missing_barrier_of_the_tiled_matmul(removed):
    src = without_barrier(removed)
    with pytest.raises(DataRaceError) as err:
        _ordinary_matmul(src)
    finding, = err.value.findings
    product = line_of(src, "acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];")
    stores = {line_of(src, "As[threadIdx.y][threadIdx.x] ="), line_of(src, "Bs[threadIdx.y][threadIdx.x] =")}
    assert {finding.line, finding.other_line} & stores and product in {finding.line, finding.other_line}
    text = str(err.value)
    assert "data race on shared memory `As`" in text or "data race on shared memory `Bs`" in text
    assert "A __syncthreads() is missing?" in text and isinstance(err.value, AssertionError)


WARP_SUM = r"""
extern "C" __global__ void warp_sum(float* out, const float* x) {
    __shared__ float s[32];
    s[threadIdx.x] = x[threadIdx.x];
    SYNC
    for (int step = 16; step > 0; step /= 2) {
        float other = threadIdx.x < step ? s[threadIdx.x + step] : 0.0f;
        SYNC
        if (threadIdx.x < step) s[threadIdx.x] += other;
        SYNC
    }
    if (threadIdx.x == 0) out[0] = s[0];
}
"""


def test_lanes_of_one_warp_ordered_by_syncwarp_do_not_race():
    x, out = torch.randn(32), torch.zeros(1)
    Kernel(WARP_SUM.replace("SYNC", "__syncwarp();"), "warp_sum")((1,), (32,), (out, x))
    torch.testing.assert_close(out[0], x.sum(), rtol=32 * torch.finfo().eps, atol=1e-5)


def test_lanes_of_one_warp_without_a_sync_race():
    x, out = torch.randn(32), torch.zeros(1)
    with pytest.raises(DataRaceError, match=r"shared memory `s`"):
        Kernel(WARP_SUM.replace("SYNC", ""), "warp_sum")((1,), (32,), (out, x))


def test_a_race_on_dynamic_shared_memory_is_named_by_its_declaration():
    src = r"""
    extern "C" __global__ void shift(float* out, const float* x) {
        extern __shared__ float buffer[];
        buffer[threadIdx.x] = x[threadIdx.x];
        out[threadIdx.x] = buffer[(threadIdx.x + 1) % blockDim.x];
    }"""
    with pytest.raises(DataRaceError) as err:
        Kernel(src, "shift")((1,), (64,), (torch.zeros(64), torch.randn(64)), shared_mem=64 * 4)
    assert "data race on shared memory `buffer`" in str(err.value)
    fixed = src.replace("        out[threadIdx.x]", "        __syncthreads();\n        out[threadIdx.x]")
    x, out = torch.randn(64), torch.zeros(64)
    Kernel(fixed, "shift")((1,), (64,), (out, x), shared_mem=64 * 4)
    torch.testing.assert_close(out, torch.roll(x, -1))


def test_many_readers_then_a_writer_race_unless_a_barrier_separates_them():
    # (An index the compiler cannot see through: accesses it proves in bounds, like a scalar
    # __shared__ variable's, are not instrumented, so neither counted nor checked.)
    src = r"""
    extern "C" __global__ void broadcast(float* out, int k) {
        __shared__ float v[2];
        if (threadIdx.x == 0) v[k] = 1.0f;
        __syncthreads();
        out[threadIdx.x] = v[k];
        BARRIER
        if (threadIdx.x == 40) v[k] = 2.0f;
    }"""
    Kernel(src.replace("BARRIER", "__syncthreads();"), "broadcast")((1,), (64,), (torch.zeros(64), np.int32(1)))
    with pytest.raises(DataRaceError) as err:
        Kernel(src.replace("BARRIER", ""), "broadcast")((1,), (64,), (torch.zeros(64), np.int32(1)))
    assert f"it at line {line_of(src, 'v[k] = 2.0f;')}" in str(err.value)
