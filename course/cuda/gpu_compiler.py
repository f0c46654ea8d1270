"""Compile a kernel for a real GPU architecture without a GPU, and report what
the GPU compiler says: errors on the student's lines, and per kernel the
registers, shared memory, stack and spills that ptxas reports.

NVRTC (the runtime compiler cupy uses) is called directly, because
``cupy.RawKernel.compile()`` asks the device for its architecture and fails
where there is none.  It is found in the `nvidia-cuda-nvrtc` wheel (which
cupy's CUDA 13 build uses too), through `cuda.pathfinder` when cupy brought
it, or in a CUDA toolkit.  Where there is no NVRTC, `nvcc` does the same
job; where there is neither, the report says so and `ran` is False.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from course.cuda.errors import Diagnostic, KernelCompileError
from course.cuda.portability import nvrtc_lacks
from course.cuda.signature import declared_kernels, split_name_expression

STUDENT_FILE = "kernel.cu"
INSTANTIATIONS_FILE = "picotorch-instantiations.cu"   # nvcc only: references that instantiate templates
DEFAULT_ARCH = "sm_90"          # H100/H200
ARCHS = ("sm_90", "sm_100")     # what the course checks; sm_100 where the compiler knows it


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one kernel."""

    name: str                # the name expression, e.g. "tiled<float, 16>", where known
    symbol: str              # the symbol in the binary (mangled for C++ kernels)
    arch: str
    registers: int = 0       # per thread
    shared_bytes: int = 0    # static __shared__ per block
    stack_bytes: int = 0     # stack frame per thread (local memory)
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    barriers: int = 0

    @property
    def spills(self) -> bool:
        """Whether the kernel spills registers to local memory (any spill load or store)."""
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0

    def __str__(self) -> str:
        text = (f"{self.name} ({self.arch}): {self.registers} registers, {self.shared_bytes} B shared, "
                f"{self.stack_bytes} B stack")
        if self.spills:
            text += f", SPILLS {self.spill_store_bytes} B stored / {self.spill_load_bytes} B loaded"
        else:
            text += ", no spills"
        return text


@dataclass
class CompileReport:
    ran: bool                       # False: no GPU compiler here (see `reason`)
    ok: bool                        # compiled without errors (False when not ran)
    arch: str
    compiler: str = ""              # "NVRTC 13.0" or "nvcc 13.0"
    diagnostics: list[Diagnostic] = field(default_factory=list)
    kernels: list[KernelResources] = field(default_factory=list)
    log: str = ""
    reason: str = ""

    @property
    def errors(self) -> list[Diagnostic]:
        """The compiler's diagnostics of severity error."""
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        """The compiler's diagnostics of severity warning."""
        return [d for d in self.diagnostics if d.severity == "warning"]

    def kernel(self, name: str) -> KernelResources:
        """The resources of kernel `name` (its name or mangled symbol); KeyError naming the kernels there are."""
        for k in self.kernels:
            if k.name == name or k.symbol == name:
                return k
        raise KeyError(f"no kernel {name!r} in this report (have: {[k.name for k in self.kernels]})")

    def raise_for_errors(self) -> "CompileReport":
        """This report, or KernelCompileError with the diagnostics if the compiler ran and failed."""
        if self.ran and not self.ok:
            raise KernelCompileError(self.compiler, self.diagnostics, self.log)
        return self

    def __str__(self) -> str:
        if not self.ran:
            return f"compile check for {self.arch}: not run ({self.reason})"
        head = f"compile check for {self.arch} with {self.compiler}: {'ok' if self.ok else 'FAILED'}"
        lines = [head] + [f"  {d}".replace("\n", "\n  ") for d in self.diagnostics]
        lines += [f"  {k}" for k in self.kernels]
        return "\n".join(lines)


# ------------------------------------------------------------------ finding compilers


def _nvrtc_candidates() -> list[str]:
    found = []
    try:  # cupy >= 14 brings cuda-pathfinder, which knows every layout of the wheels
        from cuda import pathfinder
        try:
            loaded = pathfinder.load_nvidia_dynamic_lib("nvrtc")
            if loaded.abs_path:
                found.append(loaded.abs_path)
        except Exception:
            pass
    except ImportError:
        pass
    for base in sys.path:
        for pattern in ("nvidia/cu13/lib/libnvrtc.so.*", "nvidia/cuda_nvrtc/lib/libnvrtc.so.*",
                        "nvidia/cu12/lib/libnvrtc.so.*"):
            found += sorted(glob.glob(os.path.join(base, pattern)))
    for env in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(env):
            found += sorted(glob.glob(os.path.join(os.environ[env], "lib64", "libnvrtc.so*")))
    found += sorted(glob.glob("/usr/local/cuda/lib64/libnvrtc.so*"))
    lib = ctypes.util.find_library("nvrtc")
    if lib:
        found.append(lib)
    return [f for f in found if "builtins" not in os.path.basename(f) and ".alt." not in os.path.basename(f)]


_nvrtc_lock = threading.Lock()


@lru_cache(maxsize=None)
def _nvrtc() -> ctypes.CDLL | None:
    for path in _nvrtc_candidates():
        try:
            # NVRTC opens libnvrtc-builtins by its bare name at compile time;
            # loading it first, globally, from the same folder makes that work
            # without LD_LIBRARY_PATH.
            folder = os.path.dirname(path)
            for builtins in sorted(glob.glob(os.path.join(folder, "libnvrtc-builtins.so.*"))):
                if ".alt." not in builtins:
                    ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            lib.nvrtcGetErrorString.restype = ctypes.c_char_p
            return lib
        except OSError:
            continue
    return None


def nvrtc_version() -> str | None:
    """NVRTC's version as "major.minor", or None when NVRTC is not installed."""
    lib = _nvrtc()
    if lib is None:
        return None
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


def nvrtc_archs() -> list[str]:
    """The GPU architectures NVRTC can compile for, as "sm_NN" (empty without NVRTC)."""
    lib = _nvrtc()
    if lib is None:
        return []
    n = ctypes.c_int()
    if lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)) != 0:
        return []
    archs = (ctypes.c_int * n.value)()
    lib.nvrtcGetSupportedArchs(archs)
    return [f"sm_{a}" for a in archs]


def nvcc_path() -> str | None:
    """The path of an executable nvcc (PATH, CUDA_PATH, CUDA_HOME, /usr/local/cuda), or None."""
    for candidate in (shutil.which("nvcc"),
                      *(os.path.join(os.environ[e], "bin", "nvcc") for e in ("CUDA_PATH", "CUDA_HOME")
                        if os.environ.get(e)),
                      "/usr/local/cuda/bin/nvcc"):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


@lru_cache(maxsize=None)
def _nvcc_info(path: str) -> tuple[str, tuple[str, ...]]:
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"release (\d+\.\d+)", version)
    archs = subprocess.run([path, "--list-gpu-arch"], capture_output=True, text=True, timeout=60).stdout
    return (m.group(1) if m else "?"), tuple(a.replace("compute_", "sm_") for a in archs.split())


def available() -> str | None:
    """The GPU compiler a compile check would use here, or None."""
    if nvrtc_version():
        return f"NVRTC {nvrtc_version()}"
    path = nvcc_path()
    if path:
        return f"nvcc {_nvcc_info(path)[0]}"
    return None


# ------------------------------------------------------------------ parsing

_DIAG = re.compile(r"^(?P<file>[^\n(]*)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning)"
                   r"(?: #[\w-]+)?: (?P<msg>.*)$")


def parse_diagnostics(log: str, source: str) -> list[Diagnostic]:
    """NVRTC's and nvcc's messages ("kernel.cu(7): error: ...") on the student's lines."""
    src_lines = source.splitlines()
    diags = []
    for raw in log.splitlines():
        m = _DIAG.match(raw.strip())
        if not m:
            continue
        line = int(m.group("line"))
        name = os.path.basename(m.group("file"))
        message = m.group("msg").strip()
        if name == INSTANTIATIONS_FILE:
            message = f"the kernel cannot be named this way: {message}"
        where = line if name == STUDENT_FILE and line <= len(src_lines) else None
        text = src_lines[where - 1] if where else ""
        sev = "error" if "error" in m.group("sev") else "warning"
        diags.append(Diagnostic(where, sev, message, text))
    return diags


def parse_ptxas(log: str, arch: str, names: dict[str, str]) -> list[KernelResources]:
    """The per-kernel lines of `ptxas -v`; `names` maps symbols to name expressions."""
    records: dict[str, dict] = {}
    order: list[str] = []
    current = props_for = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)' for '(\w+)'", line)
        if m:
            current = m.group(1)
            if current not in records:
                records[current] = {}
                order.append(current)
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            props_for = m.group(1)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and props_for in records:
            records[props_for].update(stack_bytes=int(m.group(1)), spill_store_bytes=int(m.group(2)),
                                      spill_load_bytes=int(m.group(3)))
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and current in records:
            r = records[current]
            r["registers"] = int(m.group(1))
            smem = re.search(r"(\d+) bytes smem", line)
            bars = re.search(r"used (\d+) barriers", line)
            r["shared_bytes"] = int(smem.group(1)) if smem else 0
            r["barriers"] = int(bars.group(1)) if bars else 0
    return [KernelResources(name=names.get(sym, sym), symbol=sym, arch=arch, **records[sym]) for sym in order]


def kernel_names(source: str) -> list[str]:
    """The non-template __global__ kernels of a source (templates need name expressions)."""
    return [name for name, template in declared_kernels(source) if not template]


# ------------------------------------------------------------------ compiling


def _nvrtc_compile(lib, source: str, names: list[str], arch: str, options) -> CompileReport:
    version = nvrtc_version()
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), STUDENT_FILE.encode(), 0, None, None)
    if rc != 0:
        return CompileReport(False, False, arch, f"NVRTC {version}",
                             reason=f"nvrtcCreateProgram failed: {lib.nvrtcGetErrorString(rc).decode()}")
    try:
        for n in names:
            lib.nvrtcAddNameExpression(prog, n.encode())
        opts = [f"--gpu-architecture={arch}", "--ptxas-options=-v", "-std=c++17", *options]
        argv = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        with _nvrtc_lock:
            rc = lib.nvrtcCompileProgram(prog, len(opts), argv)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value + 1)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        lowered = {}
        if rc == 0:
            for n in names:
                out = ctypes.c_char_p()
                if lib.nvrtcGetLoweredName(prog, n.encode(), ctypes.byref(out)) == 0 and out.value:
                    lowered[out.value.decode()] = n
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
    if rc != 0 and "libnvrtc-builtins" in log:
        return CompileReport(False, False, arch, f"NVRTC {version}", log=log,
                             reason="NVRTC is installed without its builtins library (libnvrtc-builtins)")
    diags = parse_diagnostics(log, source)
    kernels = parse_ptxas(log, arch, lowered) if rc == 0 else []
    return CompileReport(True, rc == 0, arch, f"NVRTC {version}", diags, kernels, log)


def _demangle(symbols: list[str]) -> dict[str, str]:
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    if not tool or not symbols:
        return {}
    out = subprocess.run([tool], input="\n".join(symbols), capture_output=True, text=True, timeout=60).stdout
    return dict(zip(symbols, out.splitlines()))


def _nvcc_compile(path: str, source: str, names: list[str], arch: str, options) -> CompileReport:
    version, _ = _nvcc_info(path)
    # nvcc has no name expressions: taking each kernel's address in host code
    # instantiates the templates, after a #line so that the student's lines stay.
    refs = "".join(f"static void* picotorch_reference_{i} = (void*)&{n};\n" for i, n in enumerate(names))
    text = source + f'\n#line 1 "{INSTANTIATIONS_FILE}"\n' + refs
    with tempfile.TemporaryDirectory(prefix="picotorch-nvcc-") as work:
        src = Path(work) / STUDENT_FILE
        src.write_text(text)
        cmd = [path, f"-arch={arch}", "-cubin", "-Xptxas", "-v", "-std=c++17", *options, "-o",
               str(Path(work) / "kernel.cubin"), str(src)]
        result = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=600)
    log = result.stdout + result.stderr
    diags = parse_diagnostics(log, source)
    kernels = []
    if result.returncode == 0:
        symbols = re.findall(r"Compiling entry function '([^']+)'", log)
        demangled = _demangle(symbols)
        mapping = {}
        for sym in symbols:
            plain = demangled.get(sym, sym)
            head = re.sub(r"^void\s+", "", plain).split("(")[0].replace(" ", "")
            for n in names:
                if n.replace(" ", "") == head or n == sym:
                    mapping[sym] = n
        kernels = parse_ptxas(log, arch, mapping)
    return CompileReport(True, result.returncode == 0, arch, f"nvcc {version}", diags, kernels, log)


def compile_check(source: str, name_expressions=None, *, arch: str = DEFAULT_ARCH, options=(),
                  compiler: str = "auto") -> CompileReport:
    """Compile `source` for `arch` as the GPU would, with no GPU needed.

    name_expressions: the kernels to report, e.g. ["add", "scale<float>"];
    by default every non-template __global__ in the source (templates need
    their arguments to be compiled at all).  compiler: "auto" (NVRTC, else
    nvcc), "nvrtc" or "nvcc".
    """
    names = list(name_expressions) if name_expressions is not None else kernel_names(source)
    for n in names:
        split_name_expression(n)
    if compiler not in ("auto", "nvrtc", "nvcc"):
        raise ValueError("compiler must be 'auto', 'nvrtc' or 'nvcc'")
    lib = _nvrtc() if compiler in ("auto", "nvrtc") else None
    if lib is not None:
        if arch not in nvrtc_archs():
            return CompileReport(False, False, arch, f"NVRTC {nvrtc_version()}",
                                 reason=f"NVRTC {nvrtc_version()} does not know {arch} "
                                        f"(it knows {', '.join(nvrtc_archs())})")
        return _nvrtc_compile(lib, source, names, arch, list(options))
    path = nvcc_path() if compiler in ("auto", "nvcc") else None
    if path is not None:
        version, archs = _nvcc_info(path)
        if arch not in archs:
            return CompileReport(False, False, arch, f"nvcc {version}",
                                 reason=f"nvcc {version} does not know {arch}")
        report = _nvcc_compile(path, source, names, arch, list(options))
        # nvcc includes the C library that NVRTC (cupy's compiler) lacks: hold it to NVRTC's rules
        lacking = nvrtc_lacks(source)
        return replace(report, ok=False, diagnostics=lacking + report.diagnostics) if lacking else report
    wanted = {"auto": "NVRTC or nvcc", "nvrtc": "NVRTC", "nvcc": "nvcc"}[compiler]
    return CompileReport(False, False, arch, reason=(
        f"no GPU compiler here: {wanted} not found. Install the NVRTC wheel "
        f"(pip install nvidia-cuda-nvrtc, or cupy-cuda13x) or a CUDA toolkit with nvcc"))


def compile_check_archs(source: str, name_expressions=None, *, archs=ARCHS, options=(),
                        compiler: str = "auto") -> list[CompileReport]:
    """One report per architecture; those the compiler does not know say so and did not run."""
    return [compile_check(source, name_expressions, arch=a, options=options, compiler=compiler) for a in archs]
