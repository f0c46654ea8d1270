"""Ordinary emulator launches: the kernel's shared library is loaded into this
Python process and run on the memory of torch CPU tensors, in place.

The C side (runtime.cpp) runs the blocks; this side packs the arguments the
way cuLaunchKernel takes them (an array of pointers to each argument's
bytes), passes the tensors' address ranges so that the runtime can tell
global memory from everything else, and turns the result into a
LaunchReport.  The launch runs in a helper thread so that an interrupt
(Ctrl-C, Jupyter's stop button) reaches Python and can ask the runtime to
give the launch up; in a check or a grading run (COURSE_CHECK_RUNNING),
where nobody can interrupt and a sandbox may refuse threads, it runs in the
calling thread.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager

import numpy as np
import torch

from course.cuda.emulator.build import STUDENT_FILE, Build, shared_variable_names
from course.cuda.errors import DataRaceError, KernelLaunchError, KernelSourceError, OutOfBoundsError
from course.cuda.report import Finding, LaunchReport, MemoryCounts, describe_element
from course.cuda.signature import PackedArg, Signature, SCALAR_TYPES
from course.cuda.status import Where

MAX_DYNAMIC_SHARED = 232448   # runtime.h, EMU_MAX_DYNAMIC_SHARED


class Range(ctypes.Structure):
    _fields_ = [("lo", ctypes.c_ulonglong), ("hi", ctypes.c_ulonglong)]


class LaunchConfig(ctypes.Structure):
    """runtime.h's emu_launch_config, field for field."""

    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared_mem", ctypes.c_ulonglong),
        ("buffers", ctypes.POINTER(Range)),
        ("n_buffers", ctypes.c_uint),
        ("timeout_s", ctypes.c_double),
        ("counts", ctypes.c_ulonglong * 10),
        ("static_shared_bytes", ctypes.c_ulonglong),
        ("status", ctypes.c_int),
        ("fault", ctypes.c_int),
        ("fault_store", ctypes.c_int),
        ("fault_size", ctypes.c_uint),
        ("fault_buffer", ctypes.c_uint),
        ("fault_offset", ctypes.c_longlong),
        ("fault_pc", ctypes.c_ulonglong),
        ("fault_module", ctypes.c_char * 1024),
        ("fault_block", ctypes.c_uint * 3),
        ("fault_thread", ctypes.c_uint * 3),
        ("message", ctypes.c_char * 8192),
        ("warnings", ctypes.c_char * 8192),
        ("race", ctypes.c_ulonglong),
        ("race_store", ctypes.c_int),
        ("race_other_store", ctypes.c_int),
        ("race_thread", ctypes.c_uint * 3),
        ("race_other_thread", ctypes.c_uint * 3),
        ("race_block", ctypes.c_uint * 3),
        ("race_pc", ctypes.c_ulonglong),
        ("race_other_pc", ctypes.c_ulonglong),
        ("race_module", ctypes.c_char * 1024),
        ("race_variable", ctypes.c_char * 64),
        ("race_offset", ctypes.c_ulonglong),
    ]


# The grader puts the course's module-level tables back after every test cell and counts a change as
# tampering; this one is a cache that fills as kernels are first launched, so it is declared one.
__course_caches__ = ("_loaded",)
_loaded: dict[str, ctypes.CDLL] = {}
_load_lock = threading.Lock()


def _load(path, mode=ctypes.RTLD_LOCAL) -> ctypes.CDLL:
    key = str(path)
    with _load_lock:
        lib = _loaded.get(key)
        if lib is None:
            lib = ctypes.CDLL(key, mode=mode)
            _loaded[key] = lib
        return lib


def load_module(build: Build) -> ctypes.CDLL:
    # The runtime goes in first and globally: the kernel library finds its
    # symbols (and its one thread pool) there.
    runtime = _load(build.runtime, ctypes.RTLD_GLOBAL)
    runtime.emu_request_abort.restype = None
    return _load(build.path)


def verify_signature(lib: ctypes.CDLL, index: int, sig: Signature) -> None:
    """Check the Python reading of the parameters against the compiler's."""
    fn = getattr(lib, f"emu_describe_{index}")
    sizes = (ctypes.c_int * 64)()
    kinds = (ctypes.c_int * 64)()
    n = fn(sizes, kinds, 64)
    seen = [(sizes[i], kinds[i]) for i in range(min(n, 64))]
    expected = []
    for p in sig.params:
        if p.pointer:
            expected.append((8, 1))
        else:
            t = np.dtype(SCALAR_TYPES[p.base]) if p.base in SCALAR_TYPES else None
            kind = 2 if t is not None and t.kind == "f" else 3
            expected.append((t.itemsize if t is not None else -1, kind))
    if n != len(sig.params) or any(e[0] != s[0] or e[1] != s[1] for e, s in zip(expected, seen)):
        raise KernelSourceError(
            f"the parameters of {sig.kernel} were read as ({', '.join(p.declared for p in sig.params)}), but the "
            f"compiler sees {n} parameters of sizes {[s[0] for s in seen]}. Declare the parameters with plain "
            f"types (float*, const float*, int, long long, float, ...) so that the launch can check them.")


def tensor_extent(t: torch.Tensor) -> tuple[int, int]:
    """The bytes a view can reach: [data_ptr, data_ptr + span)."""
    ptr = t.data_ptr()
    if t.numel() == 0:
        return ptr, ptr
    last = sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    return ptr, ptr + (last + 1) * t.element_size()


@contextmanager
def _capture_c_stdout(enabled: bool):
    """Kernel printf writes to the process's file descriptor 1, which a
    notebook does not show; copy it to sys.stdout instead."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            if text:
                sys.stdout.write(text)
                sys.stdout.flush()


def source_line_of(module: str, offset: int) -> int | None:
    """The student's line of a code offset in a kernel library (built with -g)."""
    tool = shutil.which("addr2line")
    if not tool or not module:
        return None
    # The offset is a return address: the access is in the instruction before it.
    out = subprocess.run([tool, "-e", module, hex(max(0, offset - 1))], capture_output=True, text=True,
                         timeout=60).stdout
    m = re.search(rf"{re.escape(STUDENT_FILE)}:(\d+)", out)
    return int(m.group(1)) if m else None


def _out_of_bounds(cfg: LaunchConfig, sig: Signature, packed: list[PackedArg], source: str) -> OutOfBoundsError:
    tensors = [a for a in packed if a.is_pointer and a.tensor is not None]
    arg = tensors[cfg.fault_buffer]
    lo, hi = tensor_extent(arg.tensor)
    elsize = arg.tensor.element_size()
    op = "write" if cfg.fault_store else "read"
    line = source_line_of(cfg.fault_module.decode(errors="replace"), cfg.fault_pc)
    lines = source.splitlines()
    code = lines[line - 1].strip() if line and 0 < line <= len(lines) else ""
    place = describe_element(arg.param.name, cfg.fault_offset, cfg.fault_size, elsize, (hi - lo) // elsize,
                             (hi - lo) // elsize == arg.tensor.numel())
    block = tuple(cfg.fault_block)
    thread = tuple(cfg.fault_thread)
    where = f" at line {line} of your kernel: `{code}`" if line else ""
    message = (f"out-of-bounds {op}{where}\n"
               f"  thread ({thread[0]},{thread[1]},{thread[2]}) in block ({block[0]},{block[1]},{block[2]}) "
               f"{'writes' if cfg.fault_store else 'reads'} {place}")
    finding = Finding(kind=f"out-of-bounds {op}", line=line, code=code, message=message,
                      threads=(f"thread {thread} in block {block}",))
    return OutOfBoundsError(
        f"{sig.kernel}: {message}\nThe launch was stopped before that access (it would have corrupted memory "
        f"outside the tensor). Run with check=\"bounds\" to see every out-of-bounds access.", [finding])


def _shared_race(cfg: LaunchConfig, sig: Signature, source: str) -> DataRaceError:
    """The first data race on shared memory the launch saw, in the student's terms."""
    module = cfg.race_module.decode(errors="replace")
    line = source_line_of(module, cfg.race_pc)
    other = source_line_of(module, cfg.race_other_pc) if cfg.race_other_pc else None
    lines = source.splitlines()

    def code(n):
        return lines[n - 1].strip() if n and 0 < n <= len(lines) else ""

    name = cfg.race_variable.decode(errors="replace")
    if name:
        place = f"shared memory `{name}`"
    else:
        dynamic = [n for n in shared_variable_names(source) if re.search(rf"extern\s[^;]*\b{n}\s*\[", source)]
        place = (f"shared memory `{dynamic[0]}`" if len(dynamic) == 1 else "dynamic shared memory (extern __shared__)")
    place += f" (byte {cfg.race_offset})"

    def who(xyz):
        return f"thread ({xyz[0]},{xyz[1]},{xyz[2]})"

    def verb(store):
        return "writes" if store else "reads"

    block = "({},{},{})".format(*cfg.race_block)
    first = other if other is not None else line
    message = (f"data race on {place} at line {first} of your kernel: `{code(first)}`\n"
               f"  in block {block}, {who(cfg.race_other_thread)} "
               f"{verb(cfg.race_other_store)} it at line {other} (`{code(other)}`) and then "
               f"{who(cfg.race_thread)} {verb(cfg.race_store)} it at line {line} (`{code(line)}`), with no "
               f"__syncthreads() between the two: on a GPU they may happen in either order.\n"
               f"  A __syncthreads() is missing?")
    if cfg.race > 1:
        message += f" ({cfg.race} racing accesses in all)"
    finding = Finding(kind="data race", line=first, code=code(first), message=message,
                      other_line=line if first == other else other,
                      threads=(f"{who(cfg.race_other_thread)} in block {block}", f"{who(cfg.race_thread)} in block {block}"))
    return DataRaceError(f"{sig.kernel}: {message}\n(Found by the emulator, which follows every launch's "
                         f"__syncthreads(); the results of this launch were computed but cannot be trusted.)",
                         [finding])


def launch(build: Build, index: int, sig: Signature, grid, block, packed: list[PackedArg], shared_mem: int,
           timeout_s: float, capture_printf: bool, source: str = "") -> LaunchReport:
    lib = load_module(build)
    fn = getattr(lib, f"emu_launch_{index}")
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.POINTER(ctypes.c_void_p)]

    # Each argument's bytes in 16 aligned bytes, as a GPU launch copies them.
    slots = (ctypes.c_ulonglong * (2 * max(1, len(packed))))()
    argv = (ctypes.c_void_p * max(1, len(packed)))()
    ranges = []
    for i, a in enumerate(packed):
        addr = ctypes.addressof(slots) + 16 * i
        if a.is_pointer:
            ptr = a.tensor.data_ptr() if a.tensor is not None else 0
            ctypes.memmove(addr, ctypes.byref(ctypes.c_void_p(ptr)), 8)
            if a.tensor is not None:
                ranges.append(Range(*tensor_extent(a.tensor)))
        else:
            ctypes.memmove(addr, a.scalar, len(a.scalar))
        argv[i] = addr
    range_array = (Range * max(1, len(ranges)))(*ranges)

    cfg = LaunchConfig()
    cfg.grid[:] = list(grid)
    cfg.block[:] = list(block)
    cfg.shared_mem = shared_mem
    cfg.buffers = range_array
    cfg.n_buffers = len(ranges)
    cfg.timeout_s = timeout_s

    outcome: dict = {}

    def run() -> None:
        try:
            outcome["status"] = fn(ctypes.byref(cfg), argv)
        except BaseException as e:  # handed to the waiting thread
            outcome["error"] = e

    start = time.perf_counter()
    with _capture_c_stdout(capture_printf):
        worker = None
        if os.environ.get("COURSE_CHECK_RUNNING") != "1":  # a check or the grader: nobody to press Ctrl-C
            worker = threading.Thread(target=run, name="cuda-emulator-launch", daemon=True)
            try:
                worker.start()
            except Exception:  # a sandbox that refuses threads: run here, without Ctrl-C
                worker = None
        if worker is None:
            run()
        try:
            while worker is not None and worker.is_alive():
                worker.join(0.05)
        except KeyboardInterrupt:
            build_runtime = _load(build.runtime, ctypes.RTLD_GLOBAL)
            build_runtime.emu_request_abort()
            worker.join()
            raise
    seconds = time.perf_counter() - start
    if "error" in outcome:
        raise outcome["error"]
    warnings = [w for w in cfg.warnings.decode(errors="replace").splitlines() if w.strip()]
    if cfg.fault:
        raise _out_of_bounds(cfg, sig, packed, source)
    if cfg.race:
        raise _shared_race(cfg, sig, source)
    if outcome.get("status", 1) != 0:
        message = cfg.message.decode(errors="replace").strip() or "the launch failed"
        raise KernelLaunchError(f"{sig.kernel}: {message}")
    return LaunchReport(
        kernel=sig.kernel, where=Where.EMULATOR, grid=tuple(grid), block=tuple(block), shared_mem=shared_mem,
        seconds=seconds, counts=MemoryCounts.from_counters(cfg.counts),
        static_shared_bytes=int(cfg.static_shared_bytes), warnings=warnings)


__all__ = ["launch", "load_module", "verify_signature", "tensor_extent", "MAX_DYNAMIC_SHARED", "LaunchConfig"]
