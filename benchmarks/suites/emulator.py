"""What a CUDA-emulator launch costs now that kernels run in a launch process of their own (issue 42,
item 4), against the in-process launch it replaced, in the same run.

    python benchmarks/run.py emulator [--quick]

ours: `course.cuda.Kernel` on CPU tensors: the tensors' bytes copied into the shared arena, a request
over a pipe, the launch in the emulator's launch process, the bytes copied back. baseline: the same
compiled library loaded into this process with ctypes and called on the tensors in place, as every
launch was before (kept here only to measure against; the course never loads a kernel in-process).
Cases: a launch of one thread (the fixed cost per launch), 16 blocks of 256 threads (a typical
exercise's launch) and 4 MiB tensors (the copies).
"""
from __future__ import annotations

import ctypes
import os

from benchmarks.run import best_of, record, torch_and_numpy_missing

SOURCE = r"""
extern "C" __global__ void add(float* out, const float* x, const float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}"""


def available() -> str | None:
    import shutil
    return torch_and_numpy_missing() or (None if shutil.which("g++") else "needs g++ (the emulator's compiler)")


class _Range(ctypes.Structure):
    _fields_ = [("lo", ctypes.c_ulonglong), ("hi", ctypes.c_ulonglong)]


class _Config(ctypes.Structure):
    """runtime.h's emu_launch_config, field for field (as launch.py had it before issue 42)."""

    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem", ctypes.c_ulonglong),
                ("buffers", ctypes.POINTER(_Range)), ("n_buffers", ctypes.c_uint), ("timeout_s", ctypes.c_double),
                ("counts", ctypes.c_ulonglong * 10), ("static_shared_bytes", ctypes.c_ulonglong),
                ("status", ctypes.c_int), ("fault", ctypes.c_int), ("fault_store", ctypes.c_int),
                ("fault_size", ctypes.c_uint), ("fault_buffer", ctypes.c_uint), ("fault_offset", ctypes.c_longlong),
                ("fault_pc", ctypes.c_ulonglong), ("fault_module", ctypes.c_char * 1024),
                ("fault_block", ctypes.c_uint * 3), ("fault_thread", ctypes.c_uint * 3),
                ("message", ctypes.c_char * 8192), ("warnings", ctypes.c_char * 8192), ("race", ctypes.c_ulonglong),
                ("race_store", ctypes.c_int), ("race_other_store", ctypes.c_int), ("race_thread", ctypes.c_uint * 3),
                ("race_other_thread", ctypes.c_uint * 3), ("race_block", ctypes.c_uint * 3),
                ("race_pc", ctypes.c_ulonglong), ("race_other_pc", ctypes.c_ulonglong),
                ("race_module", ctypes.c_char * 1024), ("race_variable", ctypes.c_char * 64),
                ("race_offset", ctypes.c_ulonglong)]


def _in_process(build):
    """A launcher that runs the kernel in this process, as before: (grid, block, tensors, n) -> None."""
    from course.cuda.emulator.launch import tensor_extent
    ctypes.CDLL(str(build.runtime), mode=ctypes.RTLD_GLOBAL)
    fn = getattr(ctypes.CDLL(str(build.path)), "emu_launch_0")
    fn.argtypes = [ctypes.POINTER(_Config), ctypes.POINTER(ctypes.c_void_p)]

    def launch(grid, block, tensors, n):
        slots = (ctypes.c_ulonglong * 8)()
        argv = (ctypes.c_void_p * 4)()
        for i, t in enumerate(tensors):
            slots[2 * i] = t.data_ptr()
        ctypes.memmove(ctypes.addressof(slots) + 48, ctypes.byref(ctypes.c_int32(n)), 4)
        for i in range(4):
            argv[i] = ctypes.addressof(slots) + 16 * i
        ranges = (_Range * 3)(*[_Range(*tensor_extent(t)) for t in tensors])
        cfg = _Config()
        cfg.grid[:], cfg.block[:] = [grid, 1, 1], [block, 1, 1]
        cfg.buffers, cfg.n_buffers, cfg.timeout_s = ranges, 3, 60.0
        if fn(ctypes.byref(cfg), argv) != 0:
            raise RuntimeError(cfg.message.decode())

    return launch


def run(quick: bool = False) -> list[dict]:
    import numpy as np
    import torch
    from course.cuda import Kernel

    os.environ.setdefault("COURSE_CHECK_RUNNING", "1")  # as in a check or the grader: the launch in this thread
    kernel = Kernel(SOURCE, "add")
    old = _in_process(kernel.module.emulator_build("count"))
    records = []
    for case, n, block, number in (("one thread", 1, 1, 200), ("16 blocks of 256 threads", 4096, 256, 10),
                                   ("4 MiB tensors, 4096 blocks", 1 << 20, 256, 1)):
        x, y = torch.randn(n), torch.randn(n)
        out, expected = torch.empty(n), x + y
        grid = (n + block - 1) // block
        ours = best_of(lambda: kernel((grid,), (block,), (out, x, y, np.int32(n))), repeat=3 if quick else 5,
                       number=max(1, number // (4 if quick else 1)))
        assert torch.equal(out, expected), "the launch process computed another sum"
        out.zero_()
        theirs = best_of(lambda: old(grid, block, (out, x, y), n), repeat=3 if quick else 5,
                         number=max(1, number // (4 if quick else 1)))
        assert torch.equal(out, expected), "the in-process launch computed another sum"
        records.append(record("emulator", f"launch: {case}", ours, "in-process launch (ctypes)", theirs))
    return records
