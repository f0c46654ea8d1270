"""What can go wrong with a kernel, as exceptions a student can act on.

A kernel that gives a wrong answer or touches memory it should not is a
failed check, so those errors are AssertionErrors (the grader counts them as
"failed", with their message).  A kernel that cannot be built or launched is
an error in the ordinary sense.
"""
from __future__ import annotations

from dataclasses import dataclass


class CudaError(Exception):
    """Base of every error of course.cuda."""


class KernelSourceError(CudaError, ValueError):
    """The source does not declare the kernel asked for as the API can read it."""


class KernelArgumentError(CudaError, TypeError):
    """A launch's arguments do not match the kernel's parameters."""


class LaunchConfigError(CudaError, ValueError):
    """Grid, block or shared memory sizes a GPU would refuse."""


class BackendUnavailable(CudaError, RuntimeError):
    """Neither a GPU (with cupy) nor the emulator (with g++) can run the kernel here."""


@dataclass(frozen=True)
class Diagnostic:
    """One compiler message, on the student's own line."""

    line: int | None
    severity: str        # "error" or "warning"
    message: str
    source_line: str = ""

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        text = f"{where}{self.severity}: {self.message}"
        if self.source_line.strip():
            text += f"\n    {self.source_line.strip()}"
        return text


class KernelCompileError(CudaError):
    """The compiler refused the source; `diagnostics` are on the student's lines."""

    def __init__(self, compiler: str, diagnostics: list[Diagnostic], log: str):
        self.compiler = compiler
        self.diagnostics = diagnostics
        self.log = log
        errors = [d for d in diagnostics if d.severity == "error"] or diagnostics
        if errors:
            body = "\n".join(str(d) for d in errors[:10])
            more = f"\n... and {len(errors) - 10} more" if len(errors) > 10 else ""
        else:
            body, more = log.strip()[-3000:], ""
        super().__init__(f"your kernel does not compile ({compiler}):\n{body}{more}")


class KernelLaunchError(CudaError, RuntimeError):
    """The launch started but could not finish: a deadlock, a timeout, an interrupt."""


class KernelCheckError(CudaError, AssertionError):
    """A diagnostic run (check="bounds" or check="races") found bugs; see `findings`."""

    def __init__(self, message: str, findings: list):
        self.findings = findings
        super().__init__(message)


class OutOfBoundsError(KernelCheckError):
    """The kernel read or wrote memory outside the tensors or shared arrays it was given."""


class DataRaceError(KernelCheckError):
    """Threads of a block touched the same memory, at least one writing, with no barrier between."""
