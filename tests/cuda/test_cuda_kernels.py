"""Every kind of kernel chapter 05 teaches, run through the one kernel API and
compared with torch: on the emulator over CPU tensors always, and through cupy
on torch.cuda tensors where there is a GPU (those cases are marked gpu and
reported as skipped elsewhere, never as passed).

Sizes are ragged on purpose (1, primes, one past a block) so that bounds
checks and partial blocks are exercised.  Floating-point sums are compared
with float64 torch using the textbook error bound of recursive summation,
|error| <= n * eps * sum|terms|, which depends on the dtype and the data only.
"""
from __future__ import annotations


import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from benchmarks.suites.gpu_kernels_smoke import TILED_MATMUL
from course.cuda import Kernel, Module, Where
from course.cuda.status import emulator_available, gpu_available

DEVICES = [
    pytest.param("cpu", marks=pytest.mark.skipif(
        not emulator_available(), reason="no g++ here: the CUDA emulator cannot run (not counted as passed)")),
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
        not gpu_available(), reason="no CUDA GPU with cupy here: not run (not counted as passed)")]),
]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def expected_where(device: str) -> Where:
    return Where.GPU if device == "cuda" else Where.EMULATOR


def blocks(n: int, threads: int) -> int:
    return max(1, (n + threads - 1) // threads)


def assert_within_sum_bound(got: torch.Tensor, terms_abs_sum: torch.Tensor, ref: torch.Tensor, n: int):
    """|got - ref| <= n * eps * sum|terms|, elementwise (ref computed in float64)."""
    eps = torch.finfo(got.dtype).eps
    bound = n * eps * terms_abs_sum.double() + torch.finfo(got.dtype).tiny
    err = (got.double().cpu() - ref.double().cpu()).abs()
    worst = (err - bound.cpu()).max().item()
    assert worst <= 0, (
        f"error {err.max().item():.3g} exceeds the float32 summation bound {bound.max().item():.3g} "
        f"(n={n}) at {int((err - bound.cpu()).argmax())}")


# --------------------------------------------------------------------- fill

FILL = r"""
extern "C" __global__ void fill(float* out, float value, long long n) {
    long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = value;
}
"""


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 3000), value=st.floats(-1e6, 1e6, width=32), grid=st.integers(1, 5))
def test_fill_grid_stride_on_emulator(n, value, grid):
    if not emulator_available():
        pytest.skip("no g++ here: the CUDA emulator cannot run")
    out = torch.full((n,), float("nan"))
    report = Kernel(FILL, "fill")((grid,), (128,), (out, np.float32(value), np.int64(n)))
    torch.testing.assert_close(out, torch.full((n,), value, dtype=torch.float32))
    assert report.where is Where.EMULATOR


def test_fill(device):
    n = 1001
    out = torch.empty(n, device=device)
    report = Kernel(FILL, "fill")((3,), (256,), (out, np.float32(2.5), np.int64(n)))
    torch.testing.assert_close(out, torch.full((n,), 2.5, device=device))
    assert report.where is expected_where(device)


# ------------------------------------------------------- elementwise, strided

ADD_2D = r"""
// out is contiguous; x and y are any 2-D views, given by their strides (in elements).
extern "C" __global__ void add_strided(float* out, const float* __restrict__ x, const float* __restrict__ y,
                                       int rows, int cols,
                                       long long xs0, long long xs1, long long ys0, long long ys1) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols)
        out[(long long)r * cols + c] = x[r * xs0 + c * xs1] + y[r * ys0 + c * ys1];
}
"""


def _views(base: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "transposed":
        return base.t()
    if kind == "sliced":
        return base[::2, 1::3]
    return base


@pytest.mark.parametrize("kind_x,kind_y", [("contiguous", "transposed"), ("sliced", "contiguous"),
                                           ("transposed", "sliced")])
def test_elementwise_over_strides(device, kind_x, kind_y):
    g = torch.Generator().manual_seed(5)
    shapes = {"contiguous": (13, 7), "transposed": (7, 13), "sliced": (26, 21)}
    x = _views(torch.randn(*shapes[kind_x], generator=g), kind_x).to(device)
    y = _views(torch.randn(*shapes[kind_y], generator=g), kind_y).to(device)
    assert x.shape == y.shape == (13, 7)
    rows, cols = x.shape
    out = torch.empty(rows, cols, device=device)
    Kernel(ADD_2D, "add_strided")(
        (blocks(cols, 8), blocks(rows, 8)), (8, 8),
        (out, x, y, np.int32(rows), np.int32(cols), *map(np.int64, x.stride()), *map(np.int64, y.stride())))
    torch.testing.assert_close(out, x + y)


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 40), step=st.integers(1, 3), transpose=st.booleans())
def test_elementwise_over_strides_random_views(rows, cols, step, transpose):
    if not emulator_available():
        pytest.skip("no g++ here: the CUDA emulator cannot run")
    base = torch.randn(cols * step, rows * step) if transpose else torch.randn(rows * step, cols * step)
    x = (base.t() if transpose else base)[::step, ::step]
    y = torch.randn(rows, 1).expand(rows, cols)      # a broadcast view: stride 0
    out = torch.empty(rows, cols)
    Kernel(ADD_2D, "add_strided")(
        (blocks(cols, 16), blocks(rows, 16)), (16, 16),
        (out, x, y, np.int32(rows), np.int32(cols), *map(np.int64, x.stride()), *map(np.int64, y.stride())))
    torch.testing.assert_close(out, x + y)


# ---------------------------------------------------------------- broadcast

BROADCAST = r"""
extern "C" __global__ void mul_broadcast(float* out, const float* a, const float* b,
                                         const long long* shape, const long long* astride,
                                         const long long* bstride, int ndim, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long rest = i, ao = 0, bo = 0;
    for (int d = ndim - 1; d >= 0; --d) {
        long long idx = rest % shape[d];
        rest /= shape[d];
        ao += idx * astride[d];
        bo += idx * bstride[d];
    }
    out[i] = a[ao] * b[bo];
}
"""


@pytest.mark.parametrize("shape_a,shape_b", [((5, 1, 7), (3, 1)), ((1,), (4, 6)), ((2, 3, 1, 5), (3, 4, 1)),
                                             ((0, 3), (1, 3))])
def test_broadcast(device, shape_a, shape_b):
    a = torch.randn(shape_a, device=device)
    b = torch.randn(shape_b, device=device)
    shape = torch.broadcast_shapes(a.shape, b.shape)
    out = torch.empty(shape, device=device)
    n = out.numel()
    if n == 0:
        return  # nothing to launch: a GPU refuses a grid of zero blocks
    ea, eb = a.expand(shape), b.expand(shape)
    meta = [torch.tensor(v, dtype=torch.int64, device=device) for v in (shape, ea.stride(), eb.stride())]
    Kernel(BROADCAST, "mul_broadcast")((blocks(n, 128),), (128,),
                                       (out, a, b, *meta, np.int32(len(shape)), np.int64(n)))
    torch.testing.assert_close(out, a * b)


# ---------------------------------------------------------------- reductions

BLOCK_SUM = r"""
// Each block sums 2 * blockDim.x elements in dynamic shared memory.
extern "C" __global__ void block_sum(const float* x, float* partial, long long n) {
    extern __shared__ float s[];
    unsigned t = threadIdx.x;
    long long i = blockIdx.x * (long long)blockDim.x * 2 + t;
    float v = 0.0f;
    if (i < n) v = x[i];
    if (i + blockDim.x < n) v += x[i + blockDim.x];
    s[t] = v;
    __syncthreads();
    for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x] = s[0];
}
"""


@pytest.mark.parametrize("n", [1, 255, 256, 257, 3001])
def test_shared_memory_reduction(device, n):
    threads = 128
    x = torch.randn(n, device=device)
    nblocks = blocks(n, 2 * threads)
    partial = torch.empty(nblocks, device=device)
    Kernel(BLOCK_SUM, "block_sum")((nblocks,), (threads,), (x, partial, np.int64(n)), shared_mem=threads * 4)
    padded = torch.zeros(nblocks * 2 * threads, dtype=torch.float64, device=device)
    padded[:n] = x.double()
    per_block = padded.view(nblocks, 2 * threads)
    assert_within_sum_bound(partial, per_block.abs().sum(1), per_block.sum(1), 2 * threads)


WARP_SUM = r"""
__device__ float warp_sum(float v) {
    for (int offset = warpSize / 2; offset > 0; offset >>= 1)
        v += __shfl_down_sync(0xffffffff, v, offset);
    return v;
}

extern "C" __global__ void warp_reduce(const float* x, float* out, int n) {
    __shared__ float partial[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    v = warp_sum(v);
    int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (blockDim.x + warpSize - 1) / warpSize ? partial[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) atomicAdd(out, v);
    }
}
"""


@pytest.mark.parametrize("n,threads", [(1, 32), (100, 64), (1000, 256), (4097, 128)])
def test_warp_shuffle_reduction(device, n, threads):
    x = torch.randn(n, device=device)
    out = torch.zeros(1, device=device)
    Kernel(WARP_SUM, "warp_reduce")((blocks(n, threads),), (threads,), (x, out, np.int32(n)))
    assert_within_sum_bound(out, x.abs().sum().reshape(1), x.double().sum().reshape(1), n)


HISTOGRAM = r"""
extern "C" __global__ void histogram(const long long* values, int* counts, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&counts[values[i]], 1);
}
"""


def test_atomic_histogram(device):
    values = torch.randint(0, 17, (2049,), device=device)
    counts = torch.zeros(17, dtype=torch.int32, device=device)
    Kernel(HISTOGRAM, "histogram")((blocks(2049, 256),), (256,), (values, counts, np.int64(2049)))
    torch.testing.assert_close(counts, torch.bincount(values, minlength=17).int())


# ------------------------------------------------------------------- matmul

MATMUL = r"""
extern "C" __global__ void matmul_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k)
            acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
}
""" + TILED_MATMUL
MATMUL_SIZES = [(1, 1, 1), (17, 33, 9), (40, 24, 37)]


def _check_matmul(C, A, B):
    K = A.shape[1]
    ref = A.double() @ B.double()
    assert_within_sum_bound(C, A.double().abs() @ B.double().abs(), ref, K)


@pytest.mark.parametrize("M,N,K", MATMUL_SIZES)
def test_naive_matmul(device, M, N, K):
    A, B = torch.randn(M, K, device=device), torch.randn(K, N, device=device)
    C = torch.full((M, N), float("nan"), device=device)
    Kernel(MATMUL, "matmul_naive")((blocks(N, 16), blocks(M, 16)), (16, 16),
                                   (A, B, C, np.int32(M), np.int32(N), np.int32(K)))
    _check_matmul(C, A, B)


@pytest.mark.parametrize("tile", [8, 16])
@pytest.mark.parametrize("M,N,K", MATMUL_SIZES)
def test_tiled_matmul(device, tile, M, N, K):
    A, B = torch.randn(M, K, device=device), torch.randn(K, N, device=device)
    C = torch.full((M, N), float("nan"), device=device)
    module = Module(MATMUL, [f"matmul_tiled<{tile}>"])
    module.get_function(f"matmul_tiled<{tile}>")((blocks(N, tile), blocks(M, tile)), (tile, tile),
                                                 (A, B, C, np.int32(M), np.int32(N), np.int32(K)))
    _check_matmul(C, A, B)


SCALE = r"""
template <typename T>
__global__ void scale(T* x, T alpha, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] *= alpha;
}
"""


@pytest.mark.parametrize("dtype,ctype,np_type", [(torch.float32, "float", np.float32),
                                                 (torch.float64, "double", np.float64)])
def test_template_kernel_by_name_expression(device, dtype, ctype, np_type):
    x = torch.randn(333, dtype=dtype, device=device)
    expected = x * 1.5
    Kernel(SCALE, f"scale<{ctype}>")((blocks(333, 64),), (64,), (x, np_type(1.5), np.int64(333)))
    torch.testing.assert_close(x, expected)


# ------------------------------------------------------------------ softmax

SOFTMAX = r"""
#define THREADS 128
// One block per row: a max and a sum, each reduced in shared memory.
extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
    __shared__ float red[THREADS];
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = y + (long long)blockIdx.x * cols;
    int t = threadIdx.x;

    float m = __int_as_float(0xff800000);   // -inf: NVRTC has no INFINITY
    for (int c = t; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    red[t] = m;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) red[t] = fmaxf(red[t], red[t + k]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();

    float s = 0.0f;
    for (int c = t; c < cols; c += blockDim.x) s += expf(xr[c] - m);
    red[t] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) red[t] += red[t + k];
        __syncthreads();
    }
    s = red[0];
    for (int c = t; c < cols; c += blockDim.x) yr[c] = expf(xr[c] - m) / s;
}
"""


@pytest.mark.parametrize("rows,cols", [(1, 1), (5, 37), (3, 300)])
def test_row_softmax(device, rows, cols):
    x = torch.randn(rows, cols, device=device) * 4
    y = torch.empty_like(x)
    report = Kernel(SOFTMAX, "softmax_rows")((rows,), (128,), (x, y, np.int32(rows), np.int32(cols)))
    ref = torch.softmax(x.double(), dim=1)
    # Each output is exp(.)/sum: a few roundings plus the sum's, which is at most cols * eps relative.
    eps = torch.finfo(torch.float32).eps
    torch.testing.assert_close(y.double(), ref, rtol=(cols + 4) * eps, atol=torch.finfo(torch.float32).tiny)
    assert report.where is expected_where(device)
