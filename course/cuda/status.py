"""Where kernels run, told honestly: on a GPU, on the emulator, or not at all.

Tests and the grader ask here before they count anything.  A check that
could not run is reported as "not run", never as passed; a check that ran on
the emulator says so, and one that was meant for the GPU but whose kernels
ran on the emulator says that too, because the launches themselves are
recorded while the check runs.
"""
from __future__ import annotations

import contextvars
import importlib.util
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum

import torch

from course.verdicts import Status


class Where(str, Enum):
    GPU = "gpu"
    EMULATOR = "emulator"
    NOT_RUN = "not run"


def cupy_installed() -> bool:
    """Whether cupy can be imported here (without importing it)."""
    return importlib.util.find_spec("cupy") is not None


def gpu_available() -> bool:
    """A CUDA GPU that torch sees, and cupy to compile kernels for it."""
    return torch.cuda.is_available() and cupy_installed()


def emulator_available() -> bool:
    """Whether the CUDA emulator can build kernels here (a C++ compiler is installed)."""
    from course.cuda.emulator.build import compiler
    return compiler() is not None


def where_for(device: str | torch.device | None = None) -> Where:
    """Where a launch on tensors of `device` runs (None: where one would run by default)."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    kind = torch.device(device).type
    if kind == "cuda":
        return Where.GPU if gpu_available() else Where.NOT_RUN
    return Where.EMULATOR if emulator_available() else Where.NOT_RUN


def environment() -> dict:
    """Everything the CUDA chapter depends on, as found on this machine."""
    from course.cuda import gpu_compiler
    from course.cuda.emulator.build import compiler

    cxx = compiler()
    cupy_version = None
    if cupy_installed():
        try:
            import cupy
            cupy_version = cupy.__version__
        except Exception as e:  # an installed but broken cupy is worth saying
            cupy_version = f"installed but fails to import: {e}"
    return {
        "torch": torch.__version__,
        "torch.cuda.is_available": torch.cuda.is_available(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cupy": cupy_version,
        "nvrtc": gpu_compiler.nvrtc_version(),
        "nvcc": gpu_compiler.nvcc_path(),
        "emulator compiler": cxx[1] if cxx else None,
        "kernels run on": where_for(None).value,
    }


def describe() -> str:
    """A few lines for a notebook: what runs where here."""
    env = environment()
    lines = [f"{k}: {v if v not in (None, False) else 'no'}" for k, v in env.items()]
    if not torch.cuda.is_available():
        lines.append("No GPU here: kernels on CPU tensors run on the emulator (each CUDA thread a thread of its own, one block at a time); "
                     "it does not model warp lock-step, the GPU's weak memory ordering, or timing.")
    return "\n".join(lines)


# ------------------------------------------------------------------ checks

_launches: contextvars.ContextVar[list | None] = contextvars.ContextVar("course_cuda_launches", default=None)


def record(report) -> None:
    """Called by every launch; a check in progress keeps the reports."""
    log = _launches.get()
    if log is not None:
        log.append(report)


@contextmanager
def recording():
    """Collect the LaunchReport of every launch made inside the block."""
    log: list = []
    token = _launches.set(log)
    try:
        yield log
    finally:
        _launches.reset(token)


PASSED, FAILED, ERROR, NOT_RUN = Status.PASSED, Status.FAILED, Status.ERROR, Status.NOT_RUN


@dataclass(frozen=True)
class CheckOutcome:
    name: str
    where: Where
    status: str               # a Status: passed, failed, error, not run
    message: str = ""
    launches: int = 0

    @property
    def counts_as_passed(self) -> bool:
        """Whether this outcome earns the check: passed, and actually run (a check not run never counts)."""
        return self.status == PASSED and self.where is not Where.NOT_RUN

    def __str__(self) -> str:
        text = f"{self.name}: {self.status} ({self.where.value}"
        text += f", {self.launches} launch{'es' if self.launches != 1 else ''})" if self.where is not Where.NOT_RUN else ")"
        return text + (f": {self.message}" if self.message else "")


def _where_of(reports, intended: Where) -> Where:
    places = {r.where for r in reports}
    if not places:
        return intended
    if places == {Where.GPU}:
        return Where.GPU
    return Where.EMULATOR


def run_check(name: str, check, device: str | torch.device = "cpu") -> CheckOutcome:
    """Run `check(device)` and say how it went and where its kernels ran.

    On a machine where `device` cannot run kernels (a CUDA device without a
    GPU, or the CPU without the emulator's compiler) the check is not called
    and its outcome is "not run".
    """
    from course.cuda.errors import BackendUnavailable

    intended = where_for(device)
    if intended is Where.NOT_RUN:
        reason = ("no CUDA GPU with cupy here" if torch.device(device).type == "cuda"
                  else "the emulator's compiler (g++) is missing")
        return CheckOutcome(name, Where.NOT_RUN, NOT_RUN, reason)
    with recording() as log:
        try:
            check(device)
        except BackendUnavailable as e:
            return CheckOutcome(name, Where.NOT_RUN, NOT_RUN, str(e))
        except AssertionError as e:
            return CheckOutcome(name, _where_of(log, intended), FAILED, str(e), len(log))
        except Exception as e:
            if type(e).__name__ in ("Skipped", "SkipTest"):
                return CheckOutcome(name, Where.NOT_RUN, NOT_RUN, str(e))
            return CheckOutcome(name, _where_of(log, intended), ERROR, f"{type(e).__name__}: {e}", len(log))
    return CheckOutcome(name, _where_of(log, intended), PASSED, "", len(log))


def tally(outcomes) -> dict:
    """Counts per status and per place; only `counts_as_passed` outcomes are passes."""
    result = {PASSED: 0, FAILED: 0, ERROR: 0, NOT_RUN: 0, "on gpu": 0, "on emulator": 0}
    for o in outcomes:
        status = o.status if (o.status != PASSED or o.counts_as_passed) else NOT_RUN
        result[status] += 1
        if o.where is Where.GPU:
            result["on gpu"] += 1
        elif o.where is Where.EMULATOR:
            result["on emulator"] += 1
    return result
