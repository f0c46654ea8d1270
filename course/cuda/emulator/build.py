"""Turn a kernel's CUDA C source into something the CPU runs: a shared library
for ordinary launches, or a sanitizer-built executable for the diagnostic
modes.

The student's source is compiled as written, with two line-preserving
rewrites (see `rewrite_shared`), after a ``#line 1 "kernel.cu"`` directive, so
that compiler errors, sanitizer reports and the emulator's own messages all
quote the student's line numbers.  Builds are cached under `cache_dir()`,
keyed by the SHA-256 of everything that goes into them (source, flags, the
emulator's own files, the compiler's version); a build is written to a
temporary name and renamed into place, so a process never sees half a file.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from course.cuda.errors import BackendUnavailable, Diagnostic, KernelCompileError
from course.cuda.portability import nvrtc_lacks
from course.cuda.signature import strip_comments

HERE = Path(__file__).resolve().parent
HEADER = HERE / "cuda_emu.h"
RUNTIME_H = HERE / "runtime.h"
RUNTIME = HERE / "runtime.cpp"
HARNESS = HERE / "harness.cpp"
HOST = HERE / "host.cpp"

STUDENT_FILE = "kernel.cu"
LAUNCHER_FILE = "picotorch-launchers.cpp"

MODES = ("count", "bounds", "races")

# DWARF 4: binutils' addr2line (which places an out-of-bounds access on its
# line) misnames files of DWARF 5 line tables that a #line directive switched.
_COMMON = ["-std=c++17", "-gdwarf-4", "-pthread", "-fno-omit-frame-pointer", "-Wno-unknown-pragmas"]
# Every load and store of the kernel becomes a call to __tsan_readN/writeN,
# which runtime.cpp implements as memory counters (and the check of shared
# memory races).  The module is compiled with ThreadSanitizer's
# instrumentation and linked without its library, so the calls are ours to
# define.  (AddressSanitizer's instrumentation, used before, leaves out an
# access to an address it has just checked, such as the store of
# `s[i] += x`: it would hide that store from the counts and the race check.)
COUNT_FLAGS = ["-O1", "-fsanitize=thread"]
SANITIZER_FLAGS = {
    "bounds": ["-O1", "-DEMU_SANITIZE", "-fsanitize=address", "-fsanitize-recover=address"],
    "races": ["-O1", "-DEMU_SANITIZE", "-fsanitize=thread"],
}


def cache_dir() -> Path:
    """Where builds are kept: $COURSE_CUDA_CACHE, else ~/.cache/picotorch-cuda;
    a per-user folder in the temporary directory where those cannot be
    written (a read-only home, as in a grading sandbox)."""
    env = os.environ.get("COURSE_CUDA_CACHE")
    try:
        path = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "picotorch-cuda"
        path.mkdir(parents=True, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    except (OSError, KeyError, RuntimeError):  # RuntimeError: no $HOME and no password entry (a sandbox)
        pass
    fallback = Path(tempfile.gettempdir()) / f"picotorch-cuda-{os.getuid()}"
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


def shared_cache_dir() -> Path | None:
    """$COURSE_CUDA_SHARED_CACHE: builds made by trusted code (the grader's sandbox
    supervisor, autograder/sandbox/kernel_cache.py) that this process may read and not
    write; looked up before `cache_dir()`."""
    env = os.environ.get("COURSE_CUDA_SHARED_CACHE")
    return Path(env) if env and os.path.isdir(env) else None


def _shared(name: str) -> Path | None:
    shared = shared_cache_dir()
    if shared is not None and shared != cache_dir() and (shared / name).is_file():
        return shared / name
    return None


def _record_request(key: str, source: str, names, options, mode: str) -> None:
    """Where there is a shared cache, what this build was, for the trusted process that
    fills it to build again after the submission (it never takes the build itself)."""
    if shared_cache_dir() is None:
        return
    try:
        (cache_dir() / f"request-{key}.json").write_text(json.dumps(
            {"source": source, "name_expressions": list(names), "options": [str(o) for o in options],
             "mode": mode}))
    except (OSError, TypeError, ValueError):
        pass


@lru_cache(maxsize=None)
def _compiler_for(cxx: str) -> tuple[str, str] | None:
    path = shutil.which(cxx)
    if not path:
        return None
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    first = version.splitlines()[0] if version else ""
    # The memory counters rely on GCC's thread-sanitizer instrumentation.
    if "clang" in version.lower() or not ("g++" in first or "GCC" in version or "Free Software" in version):
        return None
    return path, first


def compiler() -> tuple[str, str] | None:
    """(path, version line) of the C++ compiler the emulator uses: $CXX if it
    is GCC, else g++; None when there is none."""
    for cxx in filter(None, (os.environ.get("CXX"), "g++")):
        found = _compiler_for(cxx)
        if found:
            return found
    return None


def require_compiler() -> tuple[str, str]:
    """The C++ compiler the emulator builds kernels with (as `compiler()` finds it), or BackendUnavailable saying
    how to get one."""
    found = compiler()
    if not found:
        raise BackendUnavailable(
            "the CUDA emulator needs the GNU C++ compiler (g++), and there is none on this machine "
            "(install it, e.g. `apt-get install g++`), nor a GPU with cupy to run on instead")
    return found


# ----------------------------------------------------------------- rewrites

_EXTERN_SHARED = re.compile(
    r"\bextern\s+(?P<volatile>volatile\s+)?__shared__\s+"
    r"(?:(?:__align__|alignas|__attribute__)\s*\(\s*\(?[^()]*\)?\s*\)\s*)?"
    r"(?P<type>[A-Za-z_](?:[\w\s:<>,]*?[\w>])?)\s*\b(?P<name>[A-Za-z_]\w*)\s*\[\s*\]\s*;")
_SHARED = re.compile(r"(?:\bstatic\s+)?\b__shared__\b")


def _split_declarators(decl: str) -> list[str]:
    depth, part, parts = 0, [], []
    for ch in decl:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(part))
            part = []
        else:
            part.append(ch)
    parts.append("".join(part))
    return parts


_FIRST_DECLARATOR = re.compile(r"^(?P<base>.*?)(?P<stars>[\s*]*)\b(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\]]*\]\s*)*)$",
                               re.S)
_NEXT_DECLARATOR = re.compile(r"^(?P<stars>[\s*]*)\b(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\]]*\]\s*)*)$", re.S)
_ALIGN = re.compile(r"(?:__align__|alignas)\s*\([^()]*\)|__attribute__\s*\(\(.*?\)\)", re.S)


def _declarators(decl: str) -> list[tuple[str, str, str, str]] | None:
    """(base type, pointer stars, name, array dimensions) of each variable of a
    declaration such as ' float a[4][4], b[4]'; None if it reads otherwise."""
    parts = [p.split("=")[0] for p in _split_declarators(decl)]
    first = _FIRST_DECLARATOR.match(parts[0].strip())
    if not first or not first.group("base").strip():
        return None
    base = " ".join(_ALIGN.sub(" ", first.group("base")).split())
    out = [(base, first.group("stars").strip(), first.group("name"), first.group("dims").strip())]
    for p in parts[1:]:
        m = _NEXT_DECLARATOR.match(p.strip())
        if not m:
            return None
        out.append((base, m.group("stars").strip(), m.group("name"), m.group("dims").strip()))
    return out


def shared_variable_names(source: str) -> set[str]:
    """The names the source declares __shared__ (static and extern)."""
    clean = strip_comments(source)
    names = {m.group("name") for m in _EXTERN_SHARED.finditer(clean)}
    for m in _SHARED.finditer(clean):
        end = clean.find(";", m.end())
        decls = _declarators(clean[m.end():end]) if end > 0 else None
        names.update(d[2] for d in decls or ())
    return names


def rewrite_shared(source: str, heap: bool = False) -> str:
    """Give the runtime the addresses of shared memory, keeping every line
    where it was.

    ``extern __shared__ float s[];`` becomes a pointer to the runtime's
    dynamic shared memory.  ``__shared__ float t[16][16];`` becomes a static
    array (one per kernel, which is one per block as blocks run one at a time)
    followed, on the same line, by a registration the runtime uses to count
    shared accesses and to fill shared memory with NaN at the start of each
    block.

    heap=True (the "bounds" check) makes each shared variable a reference to a
    heap block of its size instead: AddressSanitizer guards heap blocks with
    red zones, but not the static variables of template functions.
    """
    clean = strip_comments(source)
    edits: list[tuple[int, int, str]] = []
    taken: list[tuple[int, int]] = []
    for m in _EXTERN_SHARED.finditer(clean):
        ctype = " ".join(m.group("type").split())
        if m.group("volatile"):
            ctype = "volatile " + ctype
        name = m.group("name")
        text = f"{ctype}* const {name} = reinterpret_cast<{ctype}*>(emu_dynamic_shared);"
        text += "\n" * clean.count("\n", m.start(), m.end())
        edits.append((m.start(), m.end(), text))
        taken.append((m.start(), m.end()))
    for m in _SHARED.finditer(clean):
        if any(a <= m.start() < b for a, b in taken):
            continue
        end = clean.find(";", m.end())
        if end < 0:
            continue
        decls = _declarators(clean[m.end():end])
        if heap and decls:
            text = " ".join(
                f'static {base} {stars}(&{name}){dims} = *::emu::shared_heap<{base} {stars}{dims}>("{name}");'
                for base, stars, name, dims in decls)
            edits.append((m.start(), end + 1, text + "\n" * clean.count("\n", m.start(), end)))
            continue
        edits.append((m.start(), m.end(), "static"))
        if decls:
            edits.append((end + 1, end + 1, " " + " ".join(f"EMU_SHARED({d[2]})" for d in decls)))
    out = source
    for start, end, text in sorted(edits, key=lambda e: e[0], reverse=True):
        out = out[:start] + text + out[end:]
    return out


# ----------------------------------------------------------------- sources


def translation_unit(source: str, name_expressions: list[str], mode: str = "count") -> str:
    """The file g++ compiles: the header, the student's source on its own line
    numbers, and a launcher per kernel that the runtime and the harness call."""
    lines = [
        '#include "cuda_emu.h"',
        '#include "runtime.h"',
        f'#line 1 "{STUDENT_FILE}"',
        rewrite_shared(source, heap=mode == "bounds"),
        f'#line 1 "{LAUNCHER_FILE}"',
    ]
    table = []
    for i, name in enumerate(name_expressions):
        lines += [
            f"static void emu_thunk_{i}(void** a) {{ ::emu::invoke(&{name}, a); }}",
            f'extern "C" int emu_launch_{i}(emu_launch_config* c, void** a) '
            f"{{ return emu_run(c, &emu_thunk_{i}, a, &__dso_handle); }}",
            f'extern "C" int emu_describe_{i}(int* sizes, int* kinds, int capacity) '
            f"{{ return ::emu::describe(&{name}, sizes, kinds, capacity); }}",
        ]
        table.append(f'{{"{name}", emu_launch_{i}}}')
    lines += [
        "struct emu_launcher_entry { const char* name; int (*launch)(emu_launch_config*, void**); };",
        f'extern "C" const emu_launcher_entry emu_launchers[] = {{{", ".join(table) or "{0, 0}"}}};',
        f'extern "C" const int emu_n_launchers = {len(name_expressions)};',
        "",
    ]
    return "\n".join(lines)


def _emulator_files_digest() -> str:
    h = hashlib.sha256()
    for f in (HEADER, RUNTIME_H, RUNTIME, HARNESS):
        h.update(f.read_bytes())
    return h.hexdigest()


def _key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def user_flags(options) -> list[str]:
    """The NVRTC/nvcc options that mean the same to g++: macros and include paths."""
    flags = []
    it = iter(options)
    for opt in it:
        if opt in ("-D", "-U", "-I", "--define-macro", "--undefine-macro", "--include-path"):
            value = next(it, "")
            flags.append({"--define-macro": "-D", "--undefine-macro": "-U", "--include-path": "-I"}.get(opt, opt)
                         + value)
        elif opt.startswith(("-D", "-U", "-I")):
            flags.append(opt)
        elif opt.startswith(("--define-macro=", "--undefine-macro=", "--include-path=")):
            name, value = opt.split("=", 1)
            flags.append({"--define-macro": "-D", "--undefine-macro": "-U", "--include-path": "-I"}[name] + value)
    return flags


# ----------------------------------------------------------------- compiling


def work_dir(prefix: str):
    """A temporary folder for one build or check, inside the cache folder: the
    system's temporary folder may not be writable (a grading sandbox's /tmp
    belongs to root), but the cache folder always is."""
    return tempfile.TemporaryDirectory(prefix=prefix, dir=cache_dir())


def compile_timeout_s() -> float:
    """The longest one compilation may take ($COURSE_CUDA_COMPILE_TIMEOUT, default 60 s): an honest kernel
    compiles in 2-10 s; a template or constexpr bomb would hold the notebook (or a grading worker) for
    minutes. The grader's rebuild of a student's kernels after a submission has the same limit."""
    try:
        value = float(os.environ.get("COURSE_CUDA_COMPILE_TIMEOUT", "60"))
    except ValueError:
        value = 60.0
    return value if value > 0 else 60.0


class CompileTimeout(Exception):
    """g++ ran past compile_timeout_s(); it and everything it started were killed."""

    def __init__(self, limit: float):
        super().__init__(limit)
        self.limit = limit


def _run_compiler(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # The compiler's own temporary files go to the cache folder too (TMPDIR), for the same reason. It runs in
    # a session of its own so that, past the limit, cc1plus and the assembler die with the driver.
    limit = compile_timeout_s()
    with work_dir(".cc-") as tmp:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, TMPDIR=tmp), start_new_session=True)
        try:
            out, err = proc.communicate(timeout=limit)
        except BaseException:  # the limit, or an interrupt: no compiler is left running either way
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.communicate()
            if isinstance(sys.exc_info()[1], subprocess.TimeoutExpired):
                raise CompileTimeout(limit) from None
            raise
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _atomic_build(target: Path, build) -> Path:
    """Run build(tmp_path) and move its output into place, unless another
    process already did."""
    if target.exists():
        return target
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        build(tmp_path)
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()
    return target


def parse_gcc_errors(log: str, source: str) -> list[Diagnostic]:
    """g++'s messages, each placed on the student's line: an error inside the
    emulator's header (a template instantiated from the student's code) is
    put on the student's line that led there."""
    src_lines = source.splitlines()
    diags = []
    last_student_line = None
    pattern = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>error|warning|note|fatal error)"
                         r": (?P<msg>.*)$")
    for raw in log.splitlines():
        ctx = re.search(rf"{re.escape(STUDENT_FILE)}:(\d+)", raw)
        m = pattern.match(raw.strip())
        if not m:
            if ctx:
                last_student_line = int(ctx.group(1))
            continue
        file, line, sev, msg = m.group("file"), int(m.group("line")), m.group("sev"), m.group("msg")
        if sev == "note":
            if file.endswith(STUDENT_FILE):
                last_student_line = line
            continue
        sev = "error" if "error" in sev else "warning"
        if file.endswith(STUDENT_FILE):
            where = line
        elif file.endswith(LAUNCHER_FILE):
            where = None
            msg = f"the kernel cannot be launched as named: {msg}"
        else:
            where = last_student_line
        text = src_lines[where - 1] if where and 0 < where <= len(src_lines) else ""
        diags.append(Diagnostic(where, sev, msg, text))
        if file.endswith(STUDENT_FILE):
            last_student_line = line
    return diags


def _compile(cmd: list[str], out: Path, source: str, cwd: Path) -> None:
    try:
        result = _run_compiler(cmd + ["-o", str(out)], cwd)
    except CompileTimeout as e:
        message = (f"the compilation took longer than the emulator's limit of {e.limit:g} s "
                   f"(COURSE_CUDA_COMPILE_TIMEOUT) and was stopped. An honest kernel compiles in seconds: look "
                   f"for a template or constexpr recursion that instantiates without end")
        raise KernelCompileError("g++ for the emulator", [Diagnostic(None, "error", message, "")], message) from None
    if result.returncode != 0:
        diags = parse_gcc_errors(result.stderr, source)
        raise KernelCompileError("g++ for the emulator", diags, result.stderr)


@dataclass(frozen=True)
class Build:
    """A compiled kernel module, ready to load or run."""

    path: Path
    runtime: Path | None       # the shared runtime library (count mode)
    mode: str
    name_expressions: tuple[str, ...]


def _runtime_library(cxx: str, version: str, digest: str) -> Path:
    key = _key("runtime", " ".join(_COMMON), version, digest)
    target = cache_dir() / f"libpicotorch-cuda-emu-{key}.so"
    if _shared(target.name):
        return _shared(target.name)

    def build(tmp: Path) -> None:
        # Without -g: the runtime is ours, not the student's, and builds in half the time.
        flags = [f for f in _COMMON if not f.startswith("-g")]
        cmd = [cxx, *flags, "-O1", "-fPIC", "-shared", f"-Wl,-soname,{target.name}", "-I", str(HERE),
               str(RUNTIME)]
        result = _run_compiler(cmd + ["-o", str(tmp)], HERE)
        if result.returncode != 0:
            raise RuntimeError(f"the emulator's runtime does not build with {version}:\n{result.stderr[-4000:]}")

    return _atomic_build(target, build)


def _precompiled_header(cxx: str, version: str, digest: str, compile_flags: list[str]) -> Path | None:
    """A folder holding cuda_emu.h.gch, the emulator's header (and the C++ library it includes) precompiled with
    `compile_flags`, a count-mode module's own: put before the header's own folder on the include path, it takes a
    kernel's compile from about 0.27 to 0.08 CPU-s. g++ ignores a precompiled header its options do not match and
    reads cuda_emu.h from the next folder, so a stale or odd one costs time, never a wrong build. In a grading
    sandbox, the one the reference run made (kernel_cache.py); None where it cannot be built (the module is
    compiled from the header then)."""
    key = _key("pch", " ".join(compile_flags), version, digest)
    shared = _shared(f"pch-{key}/cuda_emu.h.gch")
    if shared is not None:
        return shared.parent
    folder = cache_dir() / f"pch-{key}"
    target = folder / "cuda_emu.h.gch"
    if target.exists():
        return folder

    def build(tmp: Path) -> None:
        cmd = [cxx, *compile_flags, "-x", "c++-header", "-I", str(HERE), str(HEADER)]
        result = _run_compiler(cmd + ["-o", str(tmp)], HERE)
        if result.returncode != 0:
            raise RuntimeError(result.stderr[-2000:])

    try:
        folder.mkdir(exist_ok=True)
        _atomic_build(target, build)  # written beside the target under another name: g++ never reads it half-made
    except (OSError, RuntimeError, CompileTimeout):
        return None
    return folder


def _support_object(cxx: str, version: str, digest: str, mode: str, which: Path) -> Path:
    key = _key("support", which.name, mode, " ".join(_COMMON + SANITIZER_FLAGS[mode]), version, digest)
    target = cache_dir() / f"{which.stem}-{mode}-{key}.o"
    if _shared(target.name):
        return _shared(target.name)

    def build(tmp: Path) -> None:
        cmd = [cxx, *_COMMON, *SANITIZER_FLAGS[mode], "-c", "-I", str(HERE), str(which)]
        result = _run_compiler(cmd + ["-o", str(tmp)], HERE)
        if result.returncode != 0:
            raise RuntimeError(f"the emulator's {which.name} does not build for {mode}:\n{result.stderr[-4000:]}")

    return _atomic_build(target, build)


def host_executable() -> Path:
    """The program in which ordinary launches run (host.cpp; emulator/host.py starts it)."""
    cxx, version = require_compiler()
    key = _key("host", HOST.read_text(), RUNTIME_H.read_text(), " ".join(_COMMON), version)
    target = cache_dir() / f"emu-host-{key}"
    if _shared(target.name):
        return _shared(target.name)

    def build(tmp: Path) -> None:
        flags = [f for f in _COMMON if not f.startswith("-g")]
        cmd = [cxx, *flags, "-O1", "-I", str(HERE), str(HOST), "-ldl"]
        result = _run_compiler(cmd + ["-o", str(tmp)], HERE)
        if result.returncode != 0:
            raise RuntimeError(f"the emulator's launch process does not build with {version}:\n{result.stderr[-4000:]}")
        os.chmod(tmp, 0o755)

    return _atomic_build(target, build)


def build(source: str, name_expressions, options=(), mode: str = "count") -> Build:
    """Compile (or find in the cache) the module for `mode`: "count" is the
    ordinary library with memory counters (run by the launch process), "bounds" and "races" are
    AddressSanitizer and ThreadSanitizer executables."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    lacking = nvrtc_lacks(source)   # refused here as on a GPU, though g++ would take it
    if lacking:
        raise KernelCompileError("the emulator, which accepts only what NVRTC on a GPU accepts", lacking, "")
    cxx, version = require_compiler()
    names = tuple(name_expressions)
    digest = _emulator_files_digest()
    tu = translation_unit(source, list(names), mode)
    flags = user_flags(options)
    mode_flags = COUNT_FLAGS if mode == "count" else SANITIZER_FLAGS[mode]
    key = _key(mode, tu, " ".join(_COMMON + mode_flags + flags), version, digest)
    cache = cache_dir()
    shared = _shared(f"kernel-{key}.so" if mode == "count" else f"kernel-{mode}-{key}")
    if shared is None and not (cache / (f"kernel-{key}.so" if mode == "count" else f"kernel-{mode}-{key}")).exists():
        _record_request(key, source, names, options, mode)

    if mode == "count":
        runtime = _runtime_library(cxx, version, digest)
        if shared is not None:
            return Build(shared, runtime, mode, names)
        target = cache / f"kernel-{key}.so"
        if not target.exists():
            with work_dir(".build-") as work:
                tu_path = Path(work) / "module.cpp"
                tu_path.write_text(tu)

                compile_flags = [*_COMMON, *COUNT_FLAGS, *flags, "-fPIC"]  # the header's precompiled with the same
                pch = _precompiled_header(cxx, version, digest, compile_flags)
                include = ["-I", str(pch), "-I", str(HERE)] if pch else ["-I", str(HERE)]

                def compile_so(tmp: Path) -> None:
                    obj = Path(work) / "module.o"
                    _compile([cxx, *compile_flags, "-c", *include, str(tu_path)], obj, source, Path(work))
                    # Linked without -fsanitize: no sanitizer library, the runtime's counters instead.
                    _compile([cxx, *_COMMON, "-shared", str(obj), str(runtime), f"-Wl,-rpath,{runtime.parent}"], tmp,
                             source, Path(work))

                _atomic_build(target, compile_so)
        return Build(target, runtime, mode, names)

    if shared is not None:
        return Build(shared, None, mode, names)
    target = cache / f"kernel-{mode}-{key}"
    if not target.exists():
        support = [_support_object(cxx, version, digest, mode, RUNTIME),
                   _support_object(cxx, version, digest, mode, HARNESS)]
        with work_dir(".build-") as work:
            tu_path = Path(work) / "module.cpp"
            tu_path.write_text(tu)

            def compile_exe(tmp: Path) -> None:
                _compile([cxx, *_COMMON, *SANITIZER_FLAGS[mode], *flags, "-I", str(HERE), str(tu_path),
                          *map(str, support)], tmp, source, Path(work))

            _atomic_build(target, compile_exe)
    return Build(target, None, mode, names)
