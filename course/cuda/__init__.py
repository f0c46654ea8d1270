"""CUDA kernels for the course, with or without a GPU.

    from course.cuda import Kernel
    k = Kernel(source, "add")
    k((blocks,), (threads,), (out, x, y, numpy.int32(n)))

- Kernel / Module       one API: cupy on torch.cuda tensors, the emulator on CPU tensors
- compile_check         (gpu_compiler.py) NVRTC (or nvcc) for sm_90/sm_100 without a GPU: errors, registers, spills
- checking("bounds"|"races")  the emulator's diagnostic modes for every launch in a block
- status                where kernels run here: "gpu", "emulator" or "not run"
- LIMITS                what the emulator does not model, in a student's words
"""
from course.cuda.gpu_compiler import CompileReport, KernelResources, compile_check, compile_check_archs
from course.cuda.emulator import LIMITS
from course.cuda.errors import (
    BackendUnavailable, CudaError, DataRaceError, Diagnostic, KernelArgumentError, KernelCheckError,
    KernelCompileError, KernelLaunchError, KernelSourceError, LaunchConfigError, OutOfBoundsError,
)
from course.cuda.kernel import Kernel, KernelWarning, Module, checking
from course.cuda.report import Finding, LaunchReport, MemoryCounts
from course.cuda.signature import Param, Signature, parse_signature
from course.cuda.status import CheckOutcome, Where, run_check, tally, where_for

__all__ = [
    "Kernel", "Module", "checking", "KernelWarning",
    "compile_check", "compile_check_archs", "CompileReport", "KernelResources",
    "LaunchReport", "MemoryCounts", "Finding",
    "Param", "Signature", "parse_signature",
    "Where", "where_for", "run_check", "tally", "CheckOutcome",
    "LIMITS",
    "CudaError", "KernelSourceError", "KernelArgumentError", "LaunchConfigError", "BackendUnavailable",
    "KernelCompileError", "Diagnostic", "KernelLaunchError", "KernelCheckError", "OutOfBoundsError",
    "DataRaceError",
]
