"""Ordinary emulator launches: the kernel's shared library runs in the
emulator's launch process (emulator/host.py, host.cpp), never in this one, on
copies of the tensors' bytes in memory both processes map; the results are
copied back into the tensors.

The C side (runtime.cpp) runs the blocks; this side packs the arguments the
way cuLaunchKernel takes them (each argument's bytes), passes the tensors'
address ranges so that the runtime can tell global memory from everything
else, and turns the result into a LaunchReport. An interrupt (Ctrl-C,
Jupyter's stop button) while a launch runs stops the launch process; the next
launch starts another. A kernel that crashes it (a wild pointer, abort()) is a
failed launch, with what ended it.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import torch

from course.cuda.emulator import host as hosts
from course.cuda.emulator.build import STUDENT_FILE, Build, shared_variable_names
from course.cuda.errors import DataRaceError, KernelLaunchError, KernelSourceError, OutOfBoundsError
from course.cuda.report import Finding, LaunchReport, MemoryCounts, describe_element
from course.cuda.signature import PackedArg, Signature, SCALAR_TYPES
from course.cuda.status import Where

MAX_DYNAMIC_SHARED = 232448   # runtime.h, EMU_MAX_DYNAMIC_SHARED


def _request(build: Build, ask):
    """ask(host) on this thread's launch process; a helper that died before answering is replaced once."""
    for attempt in (0, 1):
        host = hosts.host_for(build)
        try:
            return ask(host)
        except hosts.HostDied as e:
            hosts.discard(host)
            if attempt:
                raise KernelLaunchError(f"the emulator's launch process failed: {e.why}") from None
        except BaseException:
            hosts.discard(host)
            raise


def verify_signature(build: Build, index: int, sig: Signature) -> None:
    """Check the Python reading of the parameters against the compiler's."""
    seen = _request(build, lambda h: h.describe(str(build.path), index))
    n = len(seen)
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


def _out_of_bounds(cfg: SimpleNamespace, sig: Signature, packed: list[PackedArg], source: str) -> OutOfBoundsError:
    tensors = [a for a in packed if a.is_pointer and a.tensor is not None]
    if not 0 <= cfg.fault_buffer < len(tensors):  # the reply came from the launch process: trust no index
        return OutOfBoundsError(f"{sig.kernel}: an out-of-bounds access was stopped", [])
    arg = tensors[cfg.fault_buffer]
    lo, hi = tensor_extent(arg.tensor)
    elsize = arg.tensor.element_size()
    op = "write" if cfg.fault_store else "read"
    line = source_line_of(cfg.fault_module, cfg.fault_pc)
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


def _shared_race(cfg: SimpleNamespace, sig: Signature, source: str) -> DataRaceError:
    """The first data race on shared memory the launch saw, in the student's terms."""
    module = cfg.race_module
    line = source_line_of(module, cfg.race_pc)
    other = source_line_of(module, cfg.race_other_pc) if cfg.race_other_pc else None
    lines = source.splitlines()

    def code(n):
        return lines[n - 1].strip() if n and 0 < n <= len(lines) else ""

    name = cfg.race_variable
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
    """Run kernel `index` of `build` on the emulator in the launch process: place the tensors, launch, copy back;
    the LaunchReport."""
    tensors = [(a.tensor, *tensor_extent(a.tensor)) for a in packed if a.is_pointer and a.tensor is not None]
    placement = hosts.place(tensors)
    offsets = iter(lo for lo, _ in placement.ranges)
    args = []
    for a in packed:
        if not a.is_pointer:
            args.append((0, bytes(a.scalar)))
        elif a.tensor is None:
            args.append((2, b""))
        else:
            args.append((1, next(offsets).to_bytes(8, "little")))
    # The launch process gives up a launch past timeout_s itself; past that and a margin it is stopped.
    deadline = time.monotonic() + (timeout_s if timeout_s > 0 else 3600) + 30

    used = {}

    def ask(host: hosts.Host):
        used["host"] = host
        view = host.ensure_arena(placement.size)
        hosts.copy_in(view, placement)
        handle = host.load(str(build.path))
        host.send(hosts.launch_request(handle, index, grid, block, shared_mem, timeout_s, placement.ranges, args))
        start = time.perf_counter()
        try:
            reply = hosts.read_reply(host, deadline)
        except hosts.HostDied as e:
            _show_output(host, capture_printf)
            raise KernelLaunchError(
                f"{sig.kernel}: the launch failed: the emulator's launch process, where your kernel runs, ended "
                f"before the kernel finished: {e.why}. Nothing of this notebook was touched; the tensors keep the "
                f"values they had before the launch.") from None
        seconds = time.perf_counter() - start
        hosts.copy_out(view, placement)
        _show_output(host, capture_printf)
        return reply, seconds

    reply, seconds = _request(build, ask)
    cfg = SimpleNamespace(**reply)
    if cfg.rc != 0 and not cfg.fault and not cfg.race:
        # Given up (a deadlock, the time limit, an interrupt): a CUDA thread that never touches memory again
        # may still run in the launch process. The next launch gets a fresh one.
        hosts.discard(used["host"])
    warnings = [w for w in cfg.warnings.splitlines() if w.strip()]
    if cfg.fault:
        raise _out_of_bounds(cfg, sig, packed, source)
    if cfg.race:
        raise _shared_race(cfg, sig, source)
    if cfg.rc != 0:
        message = cfg.message.strip() or "the launch failed"
        raise KernelLaunchError(f"{sig.kernel}: {message}")
    return LaunchReport(
        kernel=sig.kernel, where=Where.EMULATOR, grid=tuple(grid), block=tuple(block), shared_mem=shared_mem,
        seconds=seconds, counts=MemoryCounts.from_counters(cfg.counts),
        static_shared_bytes=int(cfg.static_shared_bytes), warnings=warnings)


def _show_output(host: hosts.Host, show: bool) -> None:
    """The kernel's printf (the launch process's output) on sys.stdout, where a notebook shows it."""
    data, more = host.take_output()
    if data:  # printf, and what the C library says before a crash
        sys.stdout.write(data.decode(errors="replace"))
        if more:
            sys.stdout.write(f"\n... ({more} more bytes of output from the kernel not shown)\n")
        sys.stdout.flush()


__all__ = ["launch", "verify_signature", "tensor_extent", "MAX_DYNAMIC_SHARED"]
