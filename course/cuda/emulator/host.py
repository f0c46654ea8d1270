"""The emulator's launch process: where a kernel's machine code runs.

A kernel compiled for the emulator is native code the student wrote. Loaded
into the notebook's own Python process, it could call anything there
(Python's C API through dlsym, every thread's frames, libc's system) and
write anywhere, and in a grading run that process holds the tests, the
cell's secret and the channel that reports verdicts. So it never runs there:
ordinary launches go to a small program of the emulator's (host.cpp), started
from this process and tied to the thread that started it (PR_SET_PDEATHSIG:
in the grader each cell runs in a thread of its own, so the helper dies with
its cell; in Jupyter it lives as long as the kernel).

What crosses over:
  * tensors: the bytes each launch can reach are copied into the "arena", a
    memfd both processes map, and copied back into the tensors after the
    launch (overlapping tensors share their copy, so an in-place kernel still
    sees one buffer); tensors sit 8 KiB apart there, so an access just past
    one is caught by the runtime, as it was in this process;
  * requests and replies: a pipe each way (the protocol is at the top of
    host.cpp); the kernel's printf goes to a file read after each launch.
If the helper dies (a wild pointer, abort(), a signal), the launch fails with
the emulator's message and the next launch starts a fresh helper; nothing of
this process is touched. The helper inherits this process's limits (memory,
processes, file size, CPU) and its user.

No ctypes here: a grading sandbox refuses it in the notebook's process.
"""
from __future__ import annotations

import atexit
import mmap
import os
import select
import signal
import struct
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field

import torch

from course.cuda.emulator.build import Build, cache_dir, host_executable

GAP = 8192            # bytes between two tensors' copies: more than the runtime's "just past a tensor" (4096)
ALIGN = 256           # a copy keeps its tensor's address modulo this (vector loads, float4)
MAX_OUTPUT = 1 << 20  # printf bytes shown per launch; the rest is counted
REPLY = struct.Struct("<iiiiIIqQ3I3I10QQQii3I3I3IQQQ")
REPLY_FIELDS = ("rc", "status", "fault", "fault_store", "fault_size", "fault_buffer", "fault_offset", "fault_pc",
                "fault_block", "fault_thread", "counts", "static_shared_bytes", "race", "race_store",
                "race_other_store", "race_thread", "race_other_thread", "race_block", "race_pc", "race_other_pc",
                "race_offset")
REPLY_STRINGS = ("fault_module", "message", "warnings", "race_module", "race_variable")
_TRIPLES = {"fault_block": 3, "fault_thread": 3, "counts": 10, "race_thread": 3, "race_other_thread": 3,
            "race_block": 3}

# The grader puts the course's module-level tables back after every test cell; this one holds the running
# helper (a cache that refills itself), so it is declared one.
__course_caches__ = ("_state",)
_state: dict = {}
_lock = threading.Lock()


class HostDied(Exception):
    """The launch process ended during a request: `why` in the student's terms."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


def _signal_name(rc: int | None) -> str:
    if rc is None:
        return "it stopped answering"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        meaning = {"SIGSEGV": "an access to memory that does not exist: a wild or NULL pointer?",
                   "SIGBUS": "a misaligned or invalid memory access",
                   "SIGABRT": "abort() was called, or the C library found its memory corrupted",
                   "SIGKILL": "killed: out of memory, past the CPU limit, or its cell ended",
                   "SIGXFSZ": "it wrote more output than the file size limit allows",
                   "SIGFPE": "an integer division by zero",
                   "SIGILL": "an illegal instruction"}.get(name, "")
        return f"it was ended by {name}" + (f" ({meaning})" if meaning else "")
    return f"it exited with status {rc} (the kernel called exit()?)"


@dataclass
class Host:
    proc: subprocess.Popen
    reply: int                 # read end of the reply pipe
    arena_fd: int
    output: int                # the file the helper's stdout and stderr go to
    thread: int                # the thread that started it (its death kills the helper)
    runtime: str
    arena: mmap.mmap | None = None
    view: torch.Tensor | None = None
    libs: dict = field(default_factory=dict)   # kernel library path -> handle

    # -- plumbing

    def alive(self) -> bool:
        """Whether the launch process is still running."""
        return self.proc.poll() is None

    def send(self, data: bytes) -> None:
        """Write a request to the launch process; HostDied (naming its signal) if it is gone."""
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise HostDied(_signal_name(self.proc.wait())) from None

    def recv(self, n: int, deadline: float | None = None) -> bytes:
        """Exactly `n` bytes of the launch process's reply; past `deadline` it is killed and HostDied raised."""
        chunks, left = [], n
        while left:
            wait = 0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic()))
            ready, _, _ = select.select([self.reply], [], [], wait)
            if not ready:
                if deadline is not None and time.monotonic() >= deadline:
                    self.kill()
                    raise HostDied("it did not answer in time and was stopped")
                continue
            chunk = os.read(self.reply, left)
            if not chunk:
                raise HostDied(_signal_name(self._reap()))
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _reap(self) -> int | None:
        try:
            return self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def recv_string(self, deadline: float | None = None) -> str:
        """A length-prefixed string of the reply (at most 1 MiB read), decoded leniently."""
        (n,) = struct.unpack("<I", self.recv(4, deadline))
        return self.recv(min(n, 1 << 20), deadline).decode(errors="replace") if n else ""

    def kill(self) -> None:
        """Kill the launch process and reap it (never raises)."""
        try:
            self.proc.kill()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        """Kill the launch process and release its pipes, arena mapping and file descriptors."""
        self.kill()
        self.view = None
        for closer in (lambda: self.arena.close() if self.arena is not None else None,
                       lambda: self.proc.stdin.close(), lambda: os.close(self.reply),
                       lambda: os.close(self.arena_fd), lambda: os.close(self.output)):
            try:
                closer()
            except (OSError, ValueError, BufferError):
                pass

    # -- requests

    def load(self, path: str) -> int:
        """The launch process's handle of the compiled kernel library at `path` (loaded once); OSError with its
        reason if it does not load."""
        handle = self.libs.get(path)
        if handle is None:
            data = path.encode()
            self.send(struct.pack("<II", 1, len(data)) + data)
            (handle,) = struct.unpack("<i", self.recv(4))
            why = self.recv_string()
            if handle < 0:
                raise OSError(f"the emulator's launch process cannot load {path}: {why}")
            self.libs[path] = handle
        return handle

    def describe(self, path: str, index: int) -> list[tuple[int, int]]:
        """[(size, alignment)] of kernel `index`'s parameters as the compiled library reports them (empty if
        unknown)."""
        handle = self.load(path)
        self.send(struct.pack("<III", 2, handle, index))
        values = struct.unpack("<129i", self.recv(4 * 129))
        n = values[0]
        return [(values[1 + i], values[65 + i]) for i in range(max(0, min(n, 64)))] if n >= 0 else []

    def ensure_arena(self, size: int) -> torch.Tensor:
        """The shared memory mapping that carries tensors to the launch process, grown to at least `size` bytes; a
        uint8 view of it."""
        if self.arena is None or len(self.arena) < size:
            size = max(size, 2 * len(self.arena) if self.arena is not None else 0, 1 << 20)
            size = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
            self.view = None  # the old mapping closes once no view of it is left
            os.ftruncate(self.arena_fd, size)
            self.arena = mmap.mmap(self.arena_fd, size)
            self.view = torch.frombuffer(self.arena, dtype=torch.uint8)
            self.send(struct.pack("<IQ", 3, size))
            (rc,) = struct.unpack("<i", self.recv(4))
            if rc != 0:
                raise MemoryError(f"the emulator's launch process could not map {size} bytes for the tensors")
        return self.view

    def take_output(self) -> tuple[bytes, int]:
        """What the helper printed since the last call (at most MAX_OUTPUT bytes) and how many more."""
        size = os.fstat(self.output).st_size
        if not size:
            return b"", 0
        data = os.pread(self.output, min(size, MAX_OUTPUT), 0)
        os.ftruncate(self.output, 0)
        os.lseek(self.output, 0, os.SEEK_SET)
        return data, max(0, size - len(data))


def _start(runtime: str) -> Host:
    exe = str(host_executable())
    reply_r, reply_w = os.pipe()
    arena_fd = os.memfd_create("picotorch-emu-arena", os.MFD_CLOEXEC) if hasattr(os, "memfd_create") else None
    if arena_fd is None:  # not Linux: a file in the cache folder, unlinked at once
        fd, path = tempfile.mkstemp(prefix=".arena-", dir=cache_dir())
        os.unlink(path)
        arena_fd = fd
    out_fd, out_path = tempfile.mkstemp(prefix=".emu-output-", dir=cache_dir())
    os.unlink(out_path)
    try:
        proc = subprocess.Popen([exe, runtime, str(reply_w), str(arena_fd), str(os.getpid())],
                                stdin=subprocess.PIPE, stdout=out_fd, stderr=out_fd,
                                pass_fds=(reply_w, arena_fd), close_fds=True, cwd=str(cache_dir()))
    except BaseException:
        for fd in (reply_r, reply_w, arena_fd, out_fd):
            os.close(fd)
        raise
    os.close(reply_w)
    host = Host(proc, reply_r, arena_fd, out_fd, threading.get_ident(), runtime)
    try:
        (ready,) = struct.unpack("<i", host.recv(4, time.monotonic() + 60))
    except HostDied as e:
        text, _ = host.take_output()
        host.close()
        raise OSError(f"the emulator's launch process did not start: {e.why} {text.decode(errors='replace')}")
    if ready != 0x454D5531:
        host.close()
        raise OSError("the emulator's launch process did not start")
    return host


def host_for(build: Build) -> Host:
    """This thread's running helper (a new one if there is none, or it died): one per thread, since a
    helper dies with the thread that started it."""
    runtime = str(build.runtime)
    me = threading.get_ident()
    with _lock:
        for ident, other in list(_state.items()):  # helpers whose thread ended are dead: reap them
            if other.proc.poll() is not None or (ident == me and other.runtime != runtime):
                _state.pop(ident, None)
                other.close()
        host = _state.get(me)
        if host is None:
            host = _state[me] = _start(runtime)
        return host


def discard(host: Host) -> None:
    """Forget a helper that died or was stopped; the next launch starts another."""
    with _lock:
        if _state.get(host.thread) is host:
            _state.pop(host.thread, None)
    host.close()


def shutdown() -> None:
    """Close every launch process this process started (at exit, and in tests)."""
    with _lock:
        running = list(_state.values())
        _state.clear()
    for host in running:
        host.close()


atexit.register(shutdown)


# ------------------------------------------------------------ tensor bytes


def byte_view(t: torch.Tensor, nbytes: int) -> torch.Tensor:
    """The `nbytes` bytes from t's first element on, as a uint8 tensor over t's own storage (no copy)."""
    storage = t.untyped_storage()
    try:
        with torch.no_grad():
            whole = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))
    except RuntimeError:  # an inference tensor's storage is set only in inference mode
        with torch.inference_mode():
            whole = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))
    start = t.data_ptr() - storage.data_ptr()
    return whole[start:start + nbytes]


@dataclass
class Placement:
    """Where each tensor argument's bytes sit in the arena."""

    size: int                       # arena bytes needed
    copies: list                    # (tensor, nbytes, arena offset) per tensor argument
    ranges: list                    # (lo, hi) arena offsets per tensor argument, in argument order


def place(tensors: list[tuple[torch.Tensor, int, int]]) -> Placement:
    """Lay out the tensors ((tensor, lo, hi) address extents) in the arena: one copy per set of overlapping
    extents, keeping their relative addresses, each copy GAP bytes from the next."""
    order = sorted(range(len(tensors)), key=lambda i: tensors[i][1])
    offset_of: dict[int, int] = {}
    cursor, group_lo, group_hi, group_at = GAP, None, None, 0
    for i in order:
        _, lo, hi = tensors[i]
        if group_hi is None or lo >= group_hi:  # a new group, unless it overlaps the last one
            if group_hi is not None:
                cursor = group_at + (group_hi - group_lo) + GAP
            group_at = (cursor + ALIGN - 1) // ALIGN * ALIGN + lo % ALIGN
            group_lo, group_hi = lo, hi
        else:
            group_hi = max(group_hi, hi)
        offset_of[i] = group_at + (lo - group_lo)
    end = (group_at + (group_hi - group_lo) if group_hi is not None else cursor) + GAP
    copies = [(t, hi - lo, offset_of[i]) for i, (t, lo, hi) in enumerate(tensors)]
    ranges = [(offset_of[i], offset_of[i] + hi - lo) for i, (_, lo, hi) in enumerate(tensors)]
    return Placement(end, copies, ranges)


def copy_in(view: torch.Tensor, placement: Placement) -> None:
    """Copy each placed tensor's bytes into the shared arena `view`, before a launch."""
    for t, n, at in placement.copies:
        if n:
            view[at:at + n].copy_(byte_view(t, n))


def copy_out(view: torch.Tensor, placement: Placement) -> None:
    """Copy each placed tensor's bytes back from the shared arena `view`, after a launch."""
    for t, n, at in placement.copies:
        if n:
            byte_view(t, n).copy_(view[at:at + n])


def launch_request(handle: int, index: int, grid, block, shared_mem: int, timeout_s: float, ranges,
                   args: list[tuple[int, bytes]]) -> bytes:
    """The bytes of one launch request: kernel, grid, block, shared memory, time limit, the tensors' address
    ranges and the arguments."""
    parts = [struct.pack("<III3I3IQd", 4, handle, index, *grid, *block, shared_mem, timeout_s),
             struct.pack("<I", len(ranges))]
    parts += [struct.pack("<QQ", lo, hi) for lo, hi in ranges]
    parts.append(struct.pack("<I", len(args)))
    for kind, data in args:
        parts.append(struct.pack("<II", kind, len(data)) + data.ljust(16, b"\0")[:16])
    return b"".join(parts)


def read_reply(host: Host, deadline: float) -> dict:
    """The launch process's reply to a launch as {field: value}, its strings included; HostDied past `deadline`."""
    values = REPLY.unpack(host.recv(REPLY.size, deadline))
    reply, pos = {}, 0
    for name in REPLY_FIELDS:
        n = _TRIPLES.get(name, 1)
        reply[name] = values[pos] if n == 1 else tuple(values[pos:pos + n])
        pos += n
    for name in REPLY_STRINGS:
        reply[name] = host.recv_string(deadline)
    return reply


__all__ = ["Host", "HostDied", "host_for", "discard", "shutdown", "byte_view", "place", "copy_in", "copy_out",
           "launch_request", "read_reply"]
