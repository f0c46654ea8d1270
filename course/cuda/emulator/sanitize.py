"""The two diagnostic modes: a launch run under AddressSanitizer ("bounds")
or ThreadSanitizer ("races"), in a process of its own, on copies of the
tensors, with the sanitizer's report turned into the student's terms.

"bounds": every tensor is copied into a heap block of exactly its size, so
one element past the end lands in the sanitizer's red zone; shared arrays
have red zones too, and dynamic shared memory past the launch's shared_mem
is poisoned.  "races": ThreadSanitizer sees the runtime's barriers as the
synchronisation they are, so two threads touching the same address, one of
them writing, with no __syncthreads() between them, is a data race.

When the run finishes, the copies are written back into the tensors, so the
results are there as after an ordinary launch.
"""
from __future__ import annotations

import os
import re
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from course.cuda.emulator.build import STUDENT_FILE, Build, shared_variable_names, work_dir
from course.cuda.emulator.host import byte_view
from course.cuda.emulator.launch import tensor_extent
from course.cuda.errors import DataRaceError, KernelLaunchError, OutOfBoundsError
from course.cuda.report import Finding, LaunchReport, describe_element
from course.cuda.signature import PackedArg, POINTEE_DTYPES, Signature
from course.cuda.status import Where

ASAN_OPTIONS = ("halt_on_error=0:detect_leaks=0:abort_on_error=0:print_legend=0:print_summary=0:color=never:"
                "detect_stack_use_after_return=0:symbolize=1")
TSAN_OPTIONS = "halt_on_error=0:exitcode=0:report_signal_unsafe=0:color=never"


@dataclass
class _Buffer:
    lo: int
    hi: int
    params: list  # (name, offset from lo, element size, element count)
    members: list = None  # (tensor, offset from lo, bytes): what the copy is made of, and written back to


def _group(packed: list[PackedArg]) -> tuple[list[_Buffer], list]:
    """One heap block per set of overlapping tensors, so that aliased
    arguments (an in-place kernel) still alias in the copy."""
    spans = []
    for i, a in enumerate(packed):
        if a.is_pointer and a.tensor is not None:
            lo, hi = tensor_extent(a.tensor)
            spans.append((lo, hi, i))
    spans.sort()
    buffers: list[_Buffer] = []
    owner = {}
    for lo, hi, i in spans:
        if buffers and lo < buffers[-1].hi:
            buffers[-1].hi = max(buffers[-1].hi, hi)
        else:
            buffers.append(_Buffer(lo, hi, []))
        owner[i] = len(buffers) - 1
    for lo, hi, i in spans:
        b = buffers[owner[i]]
        t = packed[i].tensor
        b.members = (b.members or []) + [(t, lo - b.lo, hi - lo)]
        span = (hi - lo) // t.element_size()
        b.params.append((packed[i].param.name, lo - b.lo, t.element_size(), span, span == t.numel()))
    args = []
    for i, a in enumerate(packed):
        if not a.is_pointer:
            args.append(("scalar", a.scalar))
        elif a.tensor is None:
            args.append(("null", None))
        else:
            b = owner[i]
            args.append(("pointer", (b, a.tensor.data_ptr() - buffers[b].lo)))
    return buffers, args


def _write_args(path: Path, index: int, grid, block, shared_mem: int, timeout_s: float, buffers, args) -> None:
    with open(path, "wb") as f:
        f.write(b"EMUARGS1")
        f.write(struct.pack("<I3I3IQd", index, *grid, *block, shared_mem, timeout_s))
        f.write(struct.pack("<I", len(buffers)))
        for b in buffers:
            f.write(struct.pack("<Q", b.hi - b.lo))
            f.write(_read_bytes(b))
        f.write(struct.pack("<I", len(args)))
        for kind, value in args:
            if kind == "scalar":
                f.write(struct.pack("<II", 0, len(value)) + value)
            elif kind == "pointer":
                f.write(struct.pack("<IIQ", 1, *value))
            else:
                f.write(struct.pack("<I", 2))


def _read_result(path: Path, buffers) -> tuple[int, str, str] | None:
    if not path.exists():
        return None
    data = path.read_bytes()
    pos = 0

    def take(n):
        nonlocal pos
        chunk = data[pos:pos + n]
        pos += n
        return chunk

    status = struct.unpack("<i", take(4))[0]
    message = take(struct.unpack("<I", take(4))[0]).decode(errors="replace")
    warnings = take(struct.unpack("<I", take(4))[0]).decode(errors="replace")
    for b in buffers:
        chunk = take(b.hi - b.lo)
        if chunk and len(chunk) == b.hi - b.lo:
            _write_bytes(b, chunk)
    return status, message, warnings


def _read_bytes(b: _Buffer) -> bytes:
    """The buffer's bytes, read through its tensors (no raw addresses: no ctypes in the notebook's process)."""
    data = np.zeros(b.hi - b.lo, dtype=np.uint8)
    for t, at, n in b.members or ():
        if n:
            data[at:at + n] = byte_view(t, n).numpy()
    return data.tobytes()


def _write_bytes(b: _Buffer, chunk: bytes) -> None:
    data = torch.frombuffer(bytearray(chunk), dtype=torch.uint8)
    for t, at, n in b.members or ():
        if n:
            byte_view(t, n).copy_(data[at:at + n])


# ------------------------------------------------------------------ reports

_FRAME = re.compile(r"#\d+\s+(?:0x[0-9a-f]+\s+in\s+)?(?P<func>.+?)\s+(?P<file>\S+?):(?P<line>\d+)(?::\d+)?(?:\s|$)")


def _student_frame(lines: list[str]) -> int | None:
    for line in lines:
        m = _FRAME.search(line)
        if m and m.group("file").endswith(STUDENT_FILE):
            return int(m.group("line"))
    return None


def _code(source_lines: list[str], line: int | None) -> str:
    if line and 0 < line <= len(source_lines):
        return source_lines[line - 1].strip()
    return ""


def _thread_of(linear: int, block) -> str:
    bx, by, _ = block
    return f"({linear % bx},{(linear // bx) % by},{linear // (bx * by)})"


def _buffer_addresses(stderr: str) -> dict[int, int]:
    """Heap address of each copied buffer -> its index, from the harness's log."""
    found = {}
    for m in re.finditer(r"^EMU-BUFFER (\d+) (0x[0-9a-f]+|\(nil\)) (\d+)$", stderr, re.M):
        if m.group(2) != "(nil)":
            found[int(m.group(2), 16)] = int(m.group(1))
    return found


def _describe_place(buffers, index: int, offset: int, size: int, verb: str) -> str:
    """Which argument a bad address of a copied buffer is nearest to, and where."""
    best = min(buffers[index].params, key=lambda p: abs(offset - p[1]))
    name, start, elsize, span, dense = best
    return f"{verb} {describe_element(name, offset - start, size, elsize, span, dense)}"


def _shared_addresses(stderr: str) -> dict[int, tuple[str, int]]:
    """Heap address of each shared array of a "bounds" run -> (name, bytes)."""
    return {int(m.group(1), 16): (m.group(3), int(m.group(2)))
            for m in re.finditer(r"^EMU-SHARED (0x[0-9a-f]+) (\d+) (\w+)$", stderr, re.M)}


def parse_asan(stderr: str, source: str, buffers, shared_mem: int = 0) -> list[Finding]:
    """AddressSanitizer's reports in `stderr` as Findings: which buffer (or shared memory) was read or written out
    of bounds, at which source line."""
    source_lines = source.splitlines()
    addresses = _buffer_addresses(stderr)
    shared = _shared_addresses(stderr)
    findings: list[Finding] = []
    lines = stderr.splitlines()
    starts = [i for i, l in enumerate(lines) if "ERROR: AddressSanitizer:" in l]
    for n, s in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        block = lines[s:end]
        fault = re.match(r"EMU-FAULT-THREAD block (\S+) thread (\S+)", lines[s - 1]) if s > 0 else None
        who = f"thread {fault.group(2)} in block {fault.group(1)}" if fault else ""
        head = re.search(r"AddressSanitizer: ([\w-]+)", block[0])
        kind = head.group(1) if head else "error"
        access = next((re.search(r"(READ|WRITE) of size (\d+) at 0x([0-9a-f]+)", l) for l in block
                       if re.search(r"(READ|WRITE) of size", l)), None)
        line = _student_frame(block)
        op = "read" if access and access.group(1) == "READ" else "write"
        size = int(access.group(2)) if access else 0
        verb = "reads" if op == "read" else "writes"
        place = ""
        for l in block:
            region = re.search(r"is located (\d+) bytes (to the right|to the left|inside) of (\d+)-byte region "
                               r"\[0x([0-9a-f]+),", l)
            glob = re.search(r"is located (\d+) bytes (to the right|to the left|inside) of global variable "
                             r"'([^']+)'(?: defined in '[^']*')? \(0x[0-9a-f]+\) of size (\d+)", l)
            if region:
                dist, side, _, lo = int(region.group(1)), region.group(2), int(region.group(3)), int(region.group(4), 16)
                offset = {"to the right": int(region.group(3)) + dist, "to the left": -dist}.get(side, dist)
                if lo in addresses:
                    place = _describe_place(buffers, addresses[lo], offset, size, verb)
                elif lo in shared:
                    var, total = shared[lo]
                    if size and total % size == 0 and offset % size == 0:
                        place = (f"{verb} element {offset // size} of the shared array `{var}`, which has "
                                 f"{total // size} elements of {size} bytes")
                    else:
                        place = f"{verb} {size} bytes at byte offset {offset} of the shared array `{var}` ({total} bytes)"
                break
            if glob:
                var = glob.group(3).split("::")[-1]
                dist, side, total = int(glob.group(1)), glob.group(2), int(glob.group(4))
                if var == "emu_dynamic_shared":
                    place = (f"{verb} dynamic shared memory (extern __shared__) at byte {dist}, past the "
                             f"shared_mem={shared_mem} bytes the launch asked for")
                else:
                    past = "past the end of" if side == "to the right" else "before the start of"
                    place = f"{verb} {size} bytes {dist} bytes {past} the shared array `{var}` ({total} bytes)"
                break
        if kind == "use-after-poison" and not place:
            place = f"{verb} dynamic shared memory (extern __shared__) past the shared_mem={shared_mem} bytes the launch asked for"
        if kind == "SEGV":
            what = "invalid memory access (a null or wild pointer?)"
            op_m = next((re.search(r"caused by a (READ|WRITE)", l) for l in block if "caused by a" in l), None)
            if op_m:
                what = f"invalid memory {op_m.group(1).lower()} (a null or wild pointer?)"
            kind_text = what
        else:
            kind_text = f"out-of-bounds {op}"
        where = f" at line {line} of your kernel: `{_code(source_lines, line)}`" if line else ""
        detail = []
        if who:
            detail.append(who)
        if place:
            detail.append(place)
        message = kind_text + where + ("\n  " + ", ".join(detail) if detail else "")
        same = next((i for i, f in enumerate(findings) if f.line == line and f.kind == kind_text), None)
        if same is not None:
            # Another array on the same line (x[i] and y[i]): one finding, every array named.
            if place and place not in findings[same].message:
                old = findings[same]
                findings[same] = Finding(kind=old.kind, line=old.line, code=old.code,
                                         message=old.message + f"; {place}", threads=old.threads)
            continue
        findings.append(Finding(kind=kind_text, line=line, code=_code(source_lines, line), message=message,
                                threads=(who,) if who else ()))
    return findings


_TSAN_ACCESS = re.compile(r"^\s+(?P<prev>Previous )?(?P<op>[Aa]tomic write|[Aa]tomic read|[Ww]rite|[Rr]ead) of size "
                          r"(?P<size>\d+) at 0x(?P<addr>[0-9a-f]+) by (?:thread T(?P<t>\d+)|main thread)")


def parse_tsan(stderr: str, source: str, block, buffers) -> list[Finding]:
    """ThreadSanitizer's race reports in `stderr` as Findings: the two CUDA threads, the buffer and the source
    lines (a missing barrier)."""
    source_lines = source.splitlines()
    addresses = _buffer_addresses(stderr)
    names = {int(m.group(1)): m.group(2)
             for m in re.finditer(r"Thread T(\d+) '([^']*)'", stderr)}
    findings: list[Finding] = []
    chunks = stderr.split("WARNING: ThreadSanitizer: ")[1:]
    for chunk in chunks:
        if not chunk.startswith("data race"):
            continue
        lines = chunk.splitlines()
        accesses = []
        for i, l in enumerate(lines):
            m = _TSAN_ACCESS.match(l)
            if m:
                frames = []
                for f in lines[i + 1:]:
                    if not f.strip().startswith("#"):
                        break
                    frames.append(f)
                thread = names.get(int(m.group("t")), "") if m.group("t") else "main"
                accesses.append((m.group("op").lower(), _student_frame(frames), thread))
        if len(accesses) < 2:
            continue
        location = ""
        for l in lines:
            g = re.search(r"Location is global '([^']+)'", l)
            h = re.search(r"Location is heap block of size (\d+) at 0x([0-9a-f]+)", l)
            if g:
                var = g.group(1).split("::")[-1]
                if var == "emu_dynamic_shared":
                    location = "dynamic shared memory (extern __shared__)"
                elif var in shared_variable_names(source):
                    location = f"shared memory `{var}`"
                else:
                    location = f"the global variable `{var}`"
                break
            if h and int(h.group(2), 16) in addresses:
                params = buffers[addresses[int(h.group(2), 16)]].params
                location = f"global memory `{params[0][0]}`" if len(params) == 1 else \
                    "global memory (" + ", ".join(f"`{p[0]}`" for p in params) + ")"
                break
        (op1, line1, t1), (op2, line2, t2) = accesses[0], accesses[1]

        def who(t):
            m = re.match(r"cuda-t(\d+)$", t)
            return f"thread {_thread_of(int(m.group(1)), block)}" if m else "a thread"

        def verb(op):
            return "writes" if "write" in op else "reads"

        first = line1 if line1 is not None else line2
        message = (f"data race on {location or 'memory'} at line {first} of your kernel: "
                   f"`{_code(source_lines, first)}`\n"
                   f"  {who(t1)} {verb(op1)} it at line {line1} (`{_code(source_lines, line1)}`) while "
                   f"{who(t2)} {verb(op2)} it at line {line2} "
                   f"(`{_code(source_lines, line2)}`), with no __syncthreads() between the two.\n"
                   f"  A __syncthreads() is missing?")
        key = tuple(sorted((line1 or 0, line2 or 0)))
        if any(tuple(sorted((f.line or 0, f.other_line or 0))) == key for f in findings):
            continue
        findings.append(Finding(kind="data race", line=line1, code=_code(source_lines, line1), message=message,
                                other_line=line2, threads=(t1, t2)))
    return findings


# ------------------------------------------------------------------ running


def run(build: Build, index: int, sig: Signature, source: str, grid, block, packed: list[PackedArg],
        shared_mem: int, timeout_s: float) -> LaunchReport:
    """Run one launch of a sanitizer build (bounds: AddressSanitizer, races: ThreadSanitizer) in a child process;
    the report with what it found."""
    mode = build.mode
    buffers, args = _group(packed)
    with work_dir(".check-") as work:
        args_path, out_path = Path(work) / "args.bin", Path(work) / "out.bin"
        _write_args(args_path, index, grid, block, shared_mem, timeout_s, buffers, args)
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = ASAN_OPTIONS
        env["TSAN_OPTIONS"] = TSAN_OPTIONS
        start = time.perf_counter()
        try:
            proc = subprocess.run([str(build.path), str(args_path), str(out_path)], capture_output=True, text=True,
                                  errors="replace", env=env, timeout=timeout_s + 60)
        except subprocess.TimeoutExpired:
            raise KernelLaunchError(
                f"{sig.kernel}: the check={'bounds' if mode == 'bounds' else 'races'} run did not finish within "
                f"{timeout_s + 60:.0f} s (an endless loop?)") from None
        seconds = time.perf_counter() - start
        result = _read_result(out_path, buffers)
    output = proc.stdout
    if mode == "bounds":
        findings = parse_asan(proc.stderr, source, buffers, shared_mem)
        check = "bounds"
    else:
        findings = parse_tsan(proc.stderr, source, tuple(block), buffers)
        check = "races"
    if result is None and not findings:
        tail = "\n".join(proc.stderr.strip().splitlines()[-25:])
        raise KernelLaunchError(f"{sig.kernel}: the {check} check crashed (exit status {proc.returncode}):\n{tail}")
    status, message, warnings = result if result else (1, "", "")
    report = LaunchReport(kernel=sig.kernel, where=Where.EMULATOR, grid=tuple(grid), block=tuple(block),
                          shared_mem=shared_mem, seconds=seconds, warnings=[w for w in warnings.splitlines() if w],
                          check=check, findings=findings, output=output)
    if output:
        print(output, end="")
    if findings:
        what = "out-of-bounds accesses" if mode == "bounds" else "data races"
        text = f"{sig.kernel}: check={check!r} found {len(findings)} problem(s) ({what}):\n" + \
            "\n".join(f.message for f in findings)
        if mode == "bounds":
            raise OutOfBoundsError(text, findings)
        raise DataRaceError(text, findings)
    if status != 0:
        raise KernelLaunchError(f"{sig.kernel}: {message.strip() or 'the launch failed'}")
    return report


__all__ = ["run", "parse_asan", "parse_tsan"]
