"""The one kernel API of the course: CUDA C source plus a name, launched with a
grid, a block, dynamic shared memory and arguments.

    from course.cuda import Kernel
    add = Kernel(r'''
    extern "C" __global__ void add(float* out, const float* x, const float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = x[i] + y[i];
    }''', "add")
    add(((n + 255) // 256,), (256,), (out, x, y, numpy.int32(n)))

The call looks like cupy's RawKernel call on purpose.  Where it runs follows
the tensors: torch.cuda tensors run on the GPU through cupy, on torch's
current stream; CPU tensors run on the emulator.  So a notebook cell that
allocates on `device` works on a laptop and on an H200 alike.  Templates are
named by their name expression: Kernel(src, "scale<float>").

On the emulator a launch also counts global and shared memory accesses
(LaunchReport.counts), stops an access just past a tensor before it corrupts
memory, and warns about what a GPU leaves undefined.  What it does not model
is in course.cuda.LIMITS: warp lock-step, weak memory ordering, timing.
"""
from __future__ import annotations

import contextvars
import os
import warnings
from contextlib import contextmanager

import torch

from course.cuda import status
from course.cuda.gpu_compiler import CompileReport, compile_check, kernel_names
from course.cuda.errors import BackendUnavailable, KernelSourceError, LaunchConfigError
from course.cuda.report import LaunchReport
from course.cuda.signature import PackedArg, Signature, check_args, parse_signature

CHECKS = (None, "bounds", "races")
MAX_DYNAMIC_SHARED = 232448          # 227 KiB, the most an H100/H200 block can have
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
DEFAULT_TIMEOUT_S = float(os.environ.get("COURSE_CUDA_TIMEOUT", "60"))

_check_default: contextvars.ContextVar[str | None] = contextvars.ContextVar("course_cuda_check", default=None)


class KernelWarning(UserWarning):
    """Something the kernel did that a GPU leaves undefined (seen by the emulator)."""


@contextmanager
def checking(mode: str | None):
    """Run every launch inside the block with check=mode ("bounds" or "races"),
    e.g. around a whole forward pass whose kernels are launched deep inside."""
    if mode not in CHECKS:
        raise ValueError(f"check must be one of {CHECKS}, not {mode!r}")
    token = _check_default.set(mode)
    try:
        yield
    finally:
        _check_default.reset(token)


def _dims(value, what: str) -> tuple[int, int, int]:
    if isinstance(value, int) or hasattr(value, "__index__") and not isinstance(value, (tuple, list)):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not 1 <= len(value) <= 3:
        raise LaunchConfigError(f"{what} must be an int or a tuple of 1 to 3 ints, like (256,) or (16, 16)")
    dims = []
    for v in value:
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise LaunchConfigError(f"{what} must hold ints, got {v!r} ({type(v).__name__})")
        dims.append(int(v))
    return tuple(dims + [1] * (3 - len(dims)))


def validate_launch(grid, block, shared_mem) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
    """The sizes a GPU accepts, checked with the GPU's own limits (an H200's)."""
    g, b = _dims(grid, "grid"), _dims(block, "block")
    if min(g) < 1 or min(b) < 1:
        raise LaunchConfigError(
            f"grid {g} and block {b} must be at least 1 in every dimension: a GPU refuses a launch of zero blocks "
            f"or threads ('invalid configuration argument'). With nothing to do, do not launch")
    threads = b[0] * b[1] * b[2]
    if threads > 1024 or any(x > m for x, m in zip(b, MAX_BLOCK)):
        raise LaunchConfigError(
            f"block {b} has {threads} threads; a block has at most 1024 threads and at most {MAX_BLOCK} per dimension")
    if any(x > m for x, m in zip(g, MAX_GRID)):
        raise LaunchConfigError(f"grid {g} is larger than a GPU allows ({MAX_GRID})")
    if isinstance(shared_mem, bool) or not hasattr(shared_mem, "__index__") or int(shared_mem) < 0:
        raise LaunchConfigError(f"shared_mem must be a number of bytes (an int >= 0), got {shared_mem!r}")
    if int(shared_mem) > MAX_DYNAMIC_SHARED:
        raise LaunchConfigError(
            f"shared_mem={int(shared_mem)} bytes is more than a block can have ({MAX_DYNAMIC_SHARED} on an H200)")
    return g, b, int(shared_mem)


class Module:
    """CUDA C source holding one or more kernels, like cupy.RawModule.

    name_expressions: the kernels to make available, e.g. ["add", "scale<float>"];
    by default every non-template __global__ of the source.  options: compiler
    options as NVRTC takes them; -D/-U/-I mean the same to the emulator.
    """

    def __init__(self, source: str, name_expressions=None, *, options=()):
        if not isinstance(source, str):
            raise TypeError("source must be the kernel's CUDA C code, as a str")
        self.source = source
        names = list(name_expressions) if name_expressions is not None else kernel_names(source)
        if not names:
            raise KernelSourceError("the source declares no __global__ kernel (templates need a name expression)")
        self.name_expressions = tuple(names)
        self.options = tuple(options)
        self._signatures: dict[str, Signature] = {}
        self._builds: dict[str, object] = {}
        self._verified: set[int] = set()
        self._gpu = None

    def signature(self, name: str) -> Signature:
        """The parsed signature of kernel `name`; KernelSourceError if it is not one of this module's kernels."""
        if name not in self.name_expressions:
            raise KernelSourceError(f"{name!r} is not one of this module's kernels {list(self.name_expressions)}")
        sig = self._signatures.get(name)
        if sig is None:
            sig = self._signatures[name] = parse_signature(self.source, name)
        return sig

    def get_function(self, name: str) -> "Kernel":
        """The kernel `name` of this module, ready to launch (as CuPy's RawModule.get_function)."""
        self.signature(name)
        return Kernel(self.source, name, module=self)

    def compile_check(self, arch: str = "sm_90", *, compiler: str = "auto") -> CompileReport:
        """Compile for a GPU architecture with no GPU: errors, registers, shared memory, spills."""
        return compile_check(self.source, list(self.name_expressions), arch=arch, options=self.options,
                             compiler=compiler)

    # -- where it runs

    def emulator_build(self, mode: str = "count"):
        """This module compiled for the emulator in `mode` ("count", or a sanitizer's), built once per mode."""
        from course.cuda.emulator.build import build

        b = self._builds.get(mode)
        if b is None:
            b = self._builds[mode] = build(self.source, self.name_expressions, self.options, mode)
        return b

    def _launch_emulator(self, name: str, grid, block, packed: list[PackedArg], shared_mem: int, check,
                         timeout: float) -> LaunchReport:
        from course.cuda.emulator import launch as emu_launch

        index = self.name_expressions.index(name)
        sig = self.signature(name)
        if check is None:
            b = self.emulator_build("count")
            if index not in self._verified:
                emu_launch.verify_signature(b, index, sig)
                self._verified.add(index)
            return emu_launch.launch(b, index, sig, grid, block, packed, shared_mem, timeout,
                                     capture_printf="printf" in self.source, source=self.source)
        from course.cuda.emulator import sanitize

        b = self.emulator_build(check)
        return sanitize.run(b, index, sig, self.source, grid, block, packed, shared_mem, timeout)

    def _launch_gpu(self, name: str, grid, block, packed, shared_mem: int, device) -> LaunchReport:
        from course.cuda.gpu import GpuModule

        if not status.cupy_installed():
            raise BackendUnavailable(
                "these tensors are on the GPU, and kernels run there through cupy, which is not installed: "
                "pip install cupy-cuda13x (the course's `gpu` extra)")
        if self._gpu is None:
            self._gpu = GpuModule(self.source, self.name_expressions, self.options)
        return self._gpu.launch(name, grid, block, packed, shared_mem, device)


class Kernel:
    """One kernel of a source: `Kernel(source, "add")(grid, block, args, shared_mem=0)`.

    check: None for an ordinary launch; "bounds" to find out-of-bounds
    accesses (AddressSanitizer) or "races" to find missing barriers
    (ThreadSanitizer), both on the emulator, for every call of this kernel.
    """

    def __init__(self, source: str, name: str, *, options=(), check: str | None = None,
                 timeout: float | None = None, module: Module | None = None):
        if check not in CHECKS:
            raise ValueError(f"check must be one of {CHECKS}, not {check!r}")
        self.module = module if module is not None else Module(source, [name], options=options)
        self.name = name
        self.check = check
        self.timeout = timeout
        self.last_launch: LaunchReport | None = None
        self.signature = self.module.signature(name)

    @property
    def source(self) -> str:
        """The CUDA C source of the module this kernel belongs to."""
        return self.module.source

    def __repr__(self) -> str:
        return f"<Kernel {self.signature}>"

    def compile_check(self, arch: str = "sm_90", *, compiler: str = "auto") -> CompileReport:
        """Compile for a GPU architecture with no GPU: errors, registers, shared memory, spills."""
        return compile_check(self.source, [self.name], arch=arch, options=self.module.options, compiler=compiler)

    def __call__(self, grid, block, args, *, shared_mem: int = 0, check: str | None = None,
                 timeout: float | None = None) -> LaunchReport:
        g, b, smem = validate_launch(grid, block, shared_mem)
        packed = check_args(self.signature, args)
        mode = check if check is not None else (self.check if self.check is not None else _check_default.get())
        if mode not in CHECKS:
            raise ValueError(f"check must be one of {CHECKS}, not {mode!r}")
        limit = timeout if timeout is not None else (self.timeout if self.timeout is not None else DEFAULT_TIMEOUT_S)

        devices = {a.tensor.device for a in packed if a.tensor is not None}
        device = next(iter(devices)) if devices else torch.device("cuda" if status.gpu_available() else "cpu")
        if device.type == "cuda":
            if mode is not None:
                raise ValueError(
                    f"check={mode!r} runs on the emulator, on CPU tensors: pass .cpu() copies of the tensors to "
                    f"find the problem, then run on the GPU again")
            report = self.module._launch_gpu(self.name, g, b, packed, smem, device)
        elif device.type == "cpu":
            report = self.module._launch_emulator(self.name, g, b, packed, smem, mode, limit)
        else:
            raise BackendUnavailable(f"kernels run on cuda or cpu tensors, not on {device.type}")
        for w in report.warnings:
            warnings.warn(f"{self.name}: {w}", KernelWarning, stacklevel=2)
        self.last_launch = report
        status.record(report)
        return report
