"""The emulator itself: what it counts, what it warns about, how it fails, and
how it caches.  Results are still checked against torch where there is one."""
from __future__ import annotations

import _thread
import gc
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from course.cuda import (
    LIMITS, Kernel, KernelCompileError, KernelLaunchError, KernelWarning, LaunchConfigError, Module, Where,
)
from course.cuda.emulator import build as emu_build
from course.cuda.status import emulator_available
from cuda_helpers import line_of

pytestmark = pytest.mark.skipif(
    not emulator_available(), reason="no g++ here: the CUDA emulator cannot run (not counted as passed)")

REPO = Path(__file__).resolve().parents[2]


ADD = r"""
extern "C" __global__ void add(float* out, const float* x, const float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}
"""


# ----------------------------------------------------------------- counters

def test_counts_global_loads_and_stores_of_an_elementwise_kernel():
    n = 1000
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    report = Kernel(ADD, "add")((4,), (256,), (out, x, y, np.int32(n)))
    torch.testing.assert_close(out, x + y)
    c = report.counts
    assert (c.global_loads, c.global_stores) == (2 * n, n)
    assert (c.global_load_bytes, c.global_store_bytes) == (8 * n, 4 * n)
    assert c.shared_accesses == 0 and c.global_atomics == 0


TILING = r"""
#define TILE 16
extern "C" __global__ void naive(const float* A, const float* B, float* C, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
}
extern "C" __global__ void tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < K / TILE; ++t) {
        As[threadIdx.y][threadIdx.x] = A[row * K + t * TILE + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(t * TILE + threadIdx.y) * N + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[row * N + col] = acc;
}
"""


def test_counts_show_why_tiling_helps():
    M = N = K = 32
    tile = 16
    A, B = torch.randn(M, K), torch.randn(K, N)
    args_for = lambda C: (A, B, C, np.int32(M), np.int32(N), np.int32(K))  # noqa: E731
    module = Module(TILING)
    C1, C2 = torch.empty(M, N), torch.empty(M, N)
    naive = module.get_function("naive")((N // tile, M // tile), (tile, tile), args_for(C1))
    tiled = module.get_function("tiled")((N // tile, M // tile), (tile, tile), args_for(C2))
    ref = A @ B
    torch.testing.assert_close(C1, ref, rtol=K * torch.finfo().eps, atol=1e-5)
    torch.testing.assert_close(C2, ref, rtol=K * torch.finfo().eps, atol=1e-5)
    # Naive: every output reads a row of A and a column of B from global memory.
    assert naive.counts.global_loads == 2 * M * N * K
    # Tiled: each element is read from global memory once per tile it serves,
    # TILE times fewer; the rest comes from shared memory.
    assert tiled.counts.global_loads == 2 * M * N * K // tile
    assert tiled.counts.shared_stores == 2 * M * N * K // tile
    assert tiled.counts.shared_loads == 2 * M * N * K
    assert naive.counts.global_stores == tiled.counts.global_stores == M * N
    assert tiled.static_shared_bytes == 2 * tile * tile * 4


def test_counts_atomics_by_memory_space():
    src = r"""
    extern "C" __global__ void count(const int* flags, int* total, int n) {
        __shared__ int local;
        if (threadIdx.x == 0) local = 0;
        __syncthreads();
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n && flags[i]) atomicAdd(&local, 1);
        __syncthreads();
        if (threadIdx.x == 0) atomicAdd(total, local);
    }"""
    flags = (torch.rand(300) > 0.5).int()
    total = torch.zeros(1, dtype=torch.int32)
    report = Kernel(src, "count")((3,), (128,), (flags, total, np.int32(300)))
    assert total.item() == flags.sum().item()
    assert report.counts.shared_atomics == flags.sum().item()
    assert report.counts.global_atomics == 3


# ------------------------------------------------------- how a block's threads take turns

def test_a_racy_read_modify_write_of_global_memory_loses_updates_every_time():
    """Each thread's turn ends before its store to global memory, so the block's threads all read
    before any writes: `total[0] += 1` without an atomic comes out visibly wrong on every run, never
    right by luck of the timing. The same with atomicAdd counts every thread."""
    src = r"""
    extern "C" __global__ void racy(float* total) { total[0] += 1.0f; }
    extern "C" __global__ void atomic(float* total) { atomicAdd(total, 1.0f); }"""
    module = Module(src)
    for _ in range(3):
        racy, atomic = torch.zeros(1), torch.zeros(1)
        module.get_function("racy")((2,), (64,), (racy,))
        module.get_function("atomic")((2,), (64,), (atomic,))
        assert racy.item() < 64, racy.item()
        assert atomic.item() == 128


def test_a_thread_spinning_on_memory_lets_the_thread_it_waits_for_run():
    """A thread that waits for another's store (a flag in global memory) gets no turn forever: after a
    slice of memory accesses the others run, so the flag is set and the launch ends, as on a GPU."""
    src = r"""
    extern "C" __global__ void handshake(volatile int* flag, int* seen) {
        if (threadIdx.x == 0) {
            while (flag[0] == 0) {}
            seen[0] = 1;
        } else if (threadIdx.x == blockDim.x - 1) {
            flag[0] = 1;
        }
    }"""
    flag, seen = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    Kernel(src, "handshake")((1,), (256,), (flag, seen), timeout=20)
    assert flag.item() == 1 and seen.item() == 1


def test_every_thread_of_a_large_block_runs_with_its_own_index_and_stack():
    """1024 threads, each with a local array on its own stack and a barrier between writing and reading
    it: every thread sees its own values back, and its own threadIdx after each switch."""
    src = r"""
    extern "C" __global__ void own(int* out) {
        int local[64];
        for (int k = 0; k < 64; ++k) local[k] = threadIdx.x * 64 + k;
        __syncthreads();
        int sum = 0;
        for (int k = 0; k < 64; ++k) sum += local[k];
        __syncthreads();
        out[blockIdx.x * blockDim.x + threadIdx.x] = sum - 64 * 63 / 2 - (int)threadIdx.x * 64 * 64;
    }"""
    out = torch.full((2 * 1024,), -1, dtype=torch.int32)
    Kernel(src, "own")((2,), (1024,), (out,))
    assert torch.equal(out, torch.zeros_like(out)), out.nonzero()[:5]


# ------------------------------------------------------- what a GPU leaves undefined

def test_uninitialised_shared_memory_reads_as_nan():
    src = r"""
    extern "C" __global__ void forgot(float* out) {
        __shared__ float s[64];
        if (threadIdx.x < 32) s[threadIdx.x] = 1.0f;   // the other half is never written
        __syncthreads();
        out[threadIdx.x] = s[threadIdx.x];
    }"""
    out = torch.zeros(64)
    for _ in range(2):  # every block starts with poisoned shared memory, not just the first
        Kernel(src, "forgot")((1,), (64,), (out,))
        assert torch.all(out[:32] == 1.0) and torch.all(torch.isnan(out[32:]))


def test_barrier_skipped_by_returned_threads_is_a_warning_with_its_line():
    src = r"""
    extern "C" __global__ void early(float* out, int n) {
        __shared__ float s[64];
        int i = threadIdx.x;
        if (i >= n) return;
        s[i] = i;
        __syncthreads();
        out[i] = s[(i + 1) % n];
    }"""
    out = torch.zeros(64)
    with pytest.warns(KernelWarning) as caught:
        report = Kernel(src, "early")((1,), (64,), (out, np.int32(40)))
    line = line_of(src, "__syncthreads()")
    text = str(caught[0].message)
    assert f"__syncthreads() on line {line}" in text and "40 of the 64 threads" in text
    assert report.warnings
    torch.testing.assert_close(out[:40], torch.roll(torch.arange(40.0), -1))


def test_shuffle_from_a_lane_outside_the_block_warns_and_gives_nan():
    src = r"""
    extern "C" __global__ void tail(float* out) {
        float v = 1.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
        out[threadIdx.x] = v;
    }"""
    out = torch.zeros(48)
    with pytest.warns(KernelWarning, match=r"__shfl_down_sync on line 4.*did not take part"):
        Kernel(src, "tail")((1,), (48,), (out,))
    assert out[0].item() == 32.0            # a full warp sums to 32
    assert torch.isnan(out[32]).item()       # lane 0 of the 16-thread warp read lane 16, which does not exist


def test_deadlock_is_reported_with_where_each_thread_waits():
    src = r"""
    extern "C" __global__ void stuck(float* out) {
        float v = threadIdx.x;
        if ((threadIdx.x & 31) < 16)
            v = __shfl_sync(0xffffffff, v, 0);
        else
            __syncthreads();
        out[threadIdx.x] = v;
    }"""
    kernel = Kernel(src, "stuck")
    start = time.perf_counter()
    with pytest.raises(KernelLaunchError) as err:
        kernel((1,), (32,), (torch.zeros(32),))
    assert time.perf_counter() - start < 5
    text = str(err.value)
    assert "deadlock" in text
    assert f"wait at __shfl_sync on line {line_of(src, '__shfl_sync')}" in text
    assert f"wait at __syncthreads() on line {line_of(src, '__syncthreads')}" in text


def test_endless_loop_times_out_and_the_emulator_keeps_working():
    src = r"""
    extern "C" __global__ void spin(float* out, const float* x) {
        while (x[0] > -1.0f) out[threadIdx.x] += 1.0f;
    }"""
    with pytest.raises(KernelLaunchError, match="did not finish within 0.3 s"):
        Kernel(src, "spin")((1,), (32,), (torch.zeros(32), torch.ones(1)), timeout=0.3)
    n = 100
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    Kernel(ADD, "add")((1,), (128,), (out, x, y, np.int32(n)))
    torch.testing.assert_close(out, x + y)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="an interrupt reaches only the main thread")
def test_interrupting_a_launch_stops_it():
    # What Jupyter's stop button does: KeyboardInterrupt in the main thread
    # while the kernel spins; the launch is given up and the interrupt goes on.
    src = r"""
    extern "C" __global__ void spin_forever(float* out, const float* x) {
        while (x[0] > -1.0f) out[threadIdx.x] += 1.0f;
    }"""
    kernel = Kernel(src, "spin_forever")
    kernel.module.emulator_build()          # compile before the clock starts: interrupt the run, not g++
    # The stop button pressed again every half second until the launch gives up: an interrupt that lands while
    # the collector runs an object's __del__ (a finished test's sandbox, say) is reported there and lost, as
    # in Jupyter, where the student presses the button again (one suite run here saw the first interrupt lost).
    gc.collect()
    # the stop button's signal turns into KeyboardInterrupt, as in a Jupyter kernel: a suite started in the
    # background (`make test &`, nohup, some CI runners) inherits SIGINT ignored, and interrupt_main() then does
    # nothing (a fresh clone's run so started lost every press for the launch's whole minute)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    stopped = threading.Event()

    def press_stop():
        while not stopped.wait(0.5):
            _thread.interrupt_main()

    presser = threading.Thread(target=press_stop, daemon=True)
    start = time.perf_counter()
    presser.start()
    try:
        with pytest.raises(KeyboardInterrupt) as err:
            kernel((1,), (64,), (torch.zeros(64), torch.ones(1)), timeout=60)
    finally:
        stopped.set()
        presser.join()
        try:
            time.sleep(0.01)  # an interrupt pressed just before the presser stopped is delivered here, not later
        except KeyboardInterrupt:
            pass
        signal.signal(signal.SIGINT, handler)
    assert time.perf_counter() - start < 10
    # it was the launch that was stopped: the interrupt came while the emulator waited on its launch process
    assert any("cuda/emulator" in str(entry.path) for entry in err.traceback), [e.name for e in err.traceback]
    x, out = torch.randn(5), torch.empty(5)
    Kernel(ADD, "add")((1,), (32,), (out, x, x, np.int32(5)))
    torch.testing.assert_close(out, 2 * x)


# -------------------------------------------------------------- the language

def test_three_dimensional_grid_and_block_indices():
    src = r"""
    extern "C" __global__ void ids(int* out, int X, int Y, int Z) {
        int x = blockIdx.x * blockDim.x + threadIdx.x;
        int y = blockIdx.y * blockDim.y + threadIdx.y;
        int z = blockIdx.z * blockDim.z + threadIdx.z;
        if (x < X && y < Y && z < Z) out[(z * Y + y) * X + x] = x + 100 * y + 10000 * z + 1000000 * (gridDim.x * blockDim.x);
    }"""
    X, Y, Z = 7, 5, 3
    out = torch.zeros(Z, Y, X, dtype=torch.int32)
    Kernel(src, "ids")((2, 3, 2), (4, 2, 2), (out, np.int32(X), np.int32(Y), np.int32(Z)))
    z, y, x = torch.meshgrid(torch.arange(Z), torch.arange(Y), torch.arange(X), indexing="ij")
    torch.testing.assert_close(out, (x + 100 * y + 10000 * z + 1000000 * 8).int())


def test_vector_types_and_votes():
    src = r"""
    extern "C" __global__ void copy4(float4* out, const float4* in, int n4) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n4) { float4 v = in[i]; out[i] = make_float4(v.w, v.z, v.y, v.x); }
    }
    extern "C" __global__ void votes(const float* x, unsigned* ballot, int* any_all) {
        int lane = threadIdx.x;
        unsigned b = __ballot_sync(0xffffffff, x[lane] > 0.0f);
        int a = __any_sync(0xffffffff, x[lane] > 2.0f), l = __all_sync(0xffffffff, x[lane] > -100.0f);
        if (lane == 0) { *ballot = b; any_all[0] = a; any_all[1] = l; }
    }"""
    module = Module(src)
    x = torch.randn(64)
    out = torch.empty(64)
    report = module.get_function("copy4")((1,), (16,), (out, x, np.int32(16)))
    torch.testing.assert_close(out, x.view(16, 4).flip(1).reshape(64))
    # Bytes are exact; the CPU may split a float4 load into four.
    assert report.counts.global_load_bytes == report.counts.global_store_bytes == 256
    ballot, any_all = torch.zeros(1, dtype=torch.int32), torch.zeros(2, dtype=torch.int32)
    module.get_function("votes")((1,), (32,), (x, ballot, any_all))
    expected = sum(1 << i for i in range(32) if x[i] > 0)
    assert ballot.item() & 0xFFFFFFFF == expected
    assert any_all.tolist() == [int(bool((x[:32] > 2).any())), 1]


def test_kernel_printf_reaches_python_stdout(capsys):
    src = r"""
    extern "C" __global__ void hello(int* out) {
        if (threadIdx.x == 0) printf("hello from block %d\n", blockIdx.x);
        out[blockIdx.x] = blockIdx.x;
    }"""
    out = torch.zeros(3, dtype=torch.int32)
    Kernel(src, "hello")((3,), (32,), (out,))
    printed = capsys.readouterr().out
    assert sorted(printed.splitlines()) == [f"hello from block {b}" for b in range(3)]


def test_compile_error_is_on_the_students_line():
    src = "\n".join([
        'extern "C" __global__ void broken(float* out, int n) {',
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;",
        "    if (i < n) out[i] = undefined_name * 2.0f;",
        "}",
    ])
    with pytest.raises(KernelCompileError) as err:
        Kernel(src, "broken")((1,), (32,), (torch.zeros(4), np.int32(4)))
    first = err.value.diagnostics[0]
    assert first.line == 3 and "undefined_name" in first.message
    assert "out[i] = undefined_name" in first.source_line
    assert "line 3" in str(err.value)


def test_error_inside_a_builtin_points_at_the_call():
    src = "\n".join([
        "struct Big { double a, b; };",
        'extern "C" __global__ void bad(float* out) {',
        "    Big v = {1.0, 2.0};",
        "    v = __shfl_sync(0xffffffff, v, 0);",
        "    out[threadIdx.x] = v.a;",
        "}",
    ])
    with pytest.raises(KernelCompileError) as err:
        Kernel(src, "bad")((1,), (32,), (torch.zeros(32),))
    assert any(d.line == 4 for d in err.value.diagnostics), err.value.diagnostics


def test_launch_sizes_a_gpu_refuses_are_refused_here_too():
    kernel = Kernel(ADD, "add")
    args = (torch.zeros(1), torch.zeros(1), torch.zeros(1), np.int32(1))
    with pytest.raises(LaunchConfigError, match="zero blocks"):
        kernel((0,), (32,), args)
    with pytest.raises(LaunchConfigError, match="at most 1024 threads"):
        kernel((1,), (64, 32), args)


def test_limits_are_stated_for_students():
    for phrase in ("warp lock-step", "weak memory ordering", "timing"):
        assert phrase in LIMITS
    header = (REPO / "course" / "cuda" / "emulator" / "cuda_emu.h").read_text()
    assert "warp lock-step" in header and "weak memory ordering" in header


# ------------------------------------------------------------------- cache

def test_a_cached_kernel_launches_without_compiling(monkeypatch):
    # How fast a cached launch is belongs to benchmarks/ (gpu_kernels_smoke); what must hold is that it
    # never runs the compiler again: a new Kernel object of the same source loads the cached build.
    src = ADD.replace("out[i] = x[i] + y[i];", "out[i] = x[i] + y[i];  // cache test")
    n = 100
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    first = Kernel(src, "add")
    first((1,), (128,), (out, x, y, np.int32(n)))        # compiles, once
    built = first.module.emulator_build().path

    def no_compiler(cmd, cwd):
        raise AssertionError(f"a cached kernel was compiled again: {cmd}")

    monkeypatch.setattr(emu_build, "_run_compiler", no_compiler)
    for _ in range(3):
        out.zero_()
        again = Kernel(src, "add")    # a new object: from the cache
        again((1,), (128,), (out, x, y, np.int32(n)))
        torch.testing.assert_close(out, x + y)
        assert again.module.emulator_build().path == built
    # the cache is the run's, which the other workers fill at the same time: this build's own files are looked at
    assert built.is_file() and not list(built.parent.glob(f".{built.name}.*")), "a temporary file was left behind"


def test_cache_key_follows_source_and_flags():
    key = lambda src, opts: emu_build.build(src, ["add"], opts).path  # noqa: E731
    base = key(ADD, ())
    assert key(ADD, ()) == base
    assert key(ADD + "\n// changed\n", ()) != base
    assert key(ADD, ("-DTILE=8",)) != base


def test_processes_building_the_same_kernel_at_once_both_succeed(monkeypatch):
    # A kernel no one has built yet, built by two processes at the same time
    # into one cache: each writes its own temporary file and renames it.
    src = ADD.replace("x[i] + y[i]", f"x[i] + y[i] + 0.0f /* {time.time_ns()} */")
    script = (
        "import numpy as np, torch\n"
        "from course.cuda import Kernel\n"
        f"src = {src!r}\n"
        "x = torch.arange(10.0); out = torch.empty(10)\n"
        "Kernel(src, 'add')((1,), (32,), (out, x, x, np.int32(10)))\n"
        "assert torch.equal(out, 2 * x)\n"
    )
    Kernel(ADD, "add")                       # the shared runtime is built already
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err

    def no_compiler(cmd, cwd):
        raise AssertionError(f"the two processes left the kernel unbuilt: {cmd}")

    monkeypatch.setattr(emu_build, "_run_compiler", no_compiler)
    built = Kernel(src, "add").module.emulator_build().path  # one build, in place, found without compiling
    assert built.parent == Path(os.environ["COURSE_CUDA_CACHE"])
    assert not list(built.parent.glob(f".{built.name}.*")), "a temporary file was left behind"


def test_shared_rewrite_keeps_every_line_in_place():
    src = "\n".join([
        "template <typename T, int N>",
        "__global__ void k(T* out) {",
        "    extern __shared__ __align__(16) T dyn[];",
        "    __shared__ T a[N], b[N][N + 1];",
        "    static __shared__ int",
        "        count;",
        "    out[0] = dyn[0] + a[0] + b[0][0] + count;",
        "}",
    ])
    for heap in (False, True):
        out = emu_build.rewrite_shared(src, heap=heap)
        assert out.count("\n") == src.count("\n")
        assert out.splitlines()[0] == src.splitlines()[0]
        assert out.splitlines()[6] == src.splitlines()[6]
        assert "__shared__" not in out
    plain = emu_build.rewrite_shared(src)
    assert "T* const dyn = reinterpret_cast<T*>(emu_dynamic_shared);" in plain
    assert "EMU_SHARED(a) EMU_SHARED(b)" in plain and "EMU_SHARED(count)" in plain


# ------------------------------------------------ where the grader runs kernels

def test_a_process_forked_after_launches_launches_too():
    # The grader forks each kernel from a process that ran the chapter once: the child
    # inherits the thread pool's bookkeeping but none of its threads.
    x, out = torch.arange(300.0), torch.zeros(300)
    Kernel(ADD, "add")((3,), (128,), (out, x, x, np.int32(300)))
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            Kernel(ADD, "add")((3,), (128,), (out, x, x + 1, np.int32(300)))
            code = 0 if torch.equal(out, 2 * x + 1) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_builds_and_launches_where_the_temporary_folder_is_not_writable(tmp_path, monkeypatch):
    # A grading sandbox's /tmp belongs to root: builds work inside the cache folder instead.
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    monkeypatch.setenv("TMPDIR", str(locked))
    monkeypatch.setattr("tempfile.tempdir", str(locked))
    src = ADD.replace("x[i] + y[i]", f"x[i] + y[i] + 0.0f /* {time.time_ns()} */")
    x, out = torch.arange(10.0), torch.zeros(10)
    Kernel(src, "add")((1,), (32,), (out, x, x, np.int32(10)))
    assert torch.equal(out, 2 * x)
    assert not list(locked.iterdir())


def test_a_check_run_launches_without_a_helper_thread(monkeypatch):
    # Under a check or the grader (COURSE_CHECK_RUNNING) nobody presses Ctrl-C, and a
    # sandbox may refuse threads: the launch runs in the calling thread.
    monkeypatch.setenv("COURSE_CHECK_RUNNING", "1")

    def refuse(self):
        raise RuntimeError("starting threads is not allowed here")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    x, out = torch.arange(10.0), torch.zeros(10)
    Kernel(ADD, "add")((1,), (32,), (out, x, x, np.int32(10)))
    assert torch.equal(out, 2 * x)


def test_the_cache_folder_needs_no_home(monkeypatch):
    # A sandbox may have neither $HOME nor a password entry: Path.home() fails, the temporary folder serves.
    monkeypatch.delenv("COURSE_CUDA_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert emu_build.cache_dir().name == f"picotorch-cuda-{os.getuid()}"
