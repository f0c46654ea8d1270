"""Turn what a test cell printed into a verdict a student can act on.

The same rules serve the student's check and the grader's feedback, so that a
student sees the same words before and after submitting.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Status(str, Enum):
    """How an exercise went: the one set of words the student's check, the grader, its feedback
    pages, results/*.json and the class report use. A str: it compares, hashes, formats and
    is written to JSON as its word ("passed")."""
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    NOT_ATTEMPTED = "not attempted"
    NOT_RUN = "not run"  # the check cannot run here (no GPU and no emulator for it): never passed
    MANUAL = "manually graded"

    __str__ = str.__str__
    __repr__ = str.__repr__  # a list of verdicts prints as the words a student reads
    __format__ = str.__format__


PASSED, FAILED, ERROR, NOT_ATTEMPTED, NOT_RUN, MANUAL = (Status.PASSED, Status.FAILED, Status.ERROR,
                                                         Status.NOT_ATTEMPTED, Status.NOT_RUN, Status.MANUAL)

# Stubs raise this until the student writes code; nbgrader's stub does the same.
_NOT_ATTEMPTED = {"NotImplementedError"}
# The exceptions of a check that cannot run here (no GPU and no emulator for it): never passed, never failed.
NOT_RUN_ERRORS = frozenset({"SkipTest", "Skipped", "NotRun", "GPUNotAvailable", "GpuNotAvailable", "NoGPU"})


@dataclass
class Verdict:
    exercise: str
    status: str  # a Status
    message: str = ""
    points: float = 0.0
    max_points: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether the exercise needs nothing more: passed, or left to manual grading."""
        return self.status in (PASSED, MANUAL)


def error_of(cell) -> tuple[str, str] | None:
    """The (exception name, message) a code cell ended with, if it raised."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return out.get("ename", "Error"), out.get("evalue", "")
    return None


_UNDEFINED = re.compile(r"name '(\w+)' is not defined")


def earlier_exercise_missing(exercise: str, evalue: str, defined: dict | None) -> tuple[int, str, str] | None:
    """(number, id, name) of the other exercise whose answer cell defines the name a NameError names
    (`defined`: course.notebook.exercise_defining), or None."""
    found = _UNDEFINED.search(evalue or "")
    where = (defined or {}).get(found.group(1)) if found else None
    if where is None or where[1] == exercise:
        return None
    return where[0], where[1], found.group(1)


def needs_earlier_exercise(exercise: str, evalue: str, defined: dict | None, why: str = "") -> str | None:
    """The message for a NameError of a name another exercise defines: the exercise to do first, not only
    the name that is missing; None when the name is no exercise's."""
    missing = earlier_exercise_missing(exercise, evalue, defined)
    if missing is None:
        return None
    number, other, name = missing
    return (f"this exercise needs exercise {number} ({other}) first: its tests use `{name}`, which "
            f"exercise {number}'s answer cell defines, and it was not defined when they ran{why}. Make that "
            f"cell run without an error (and keep the name it defines), then run these tests again.")


def verdict_from_error(exercise: str, error: tuple[str, str] | None,
                       defined: dict | None = None) -> tuple[str, str]:
    """(status, message) for a test cell that ended with `error` (None: it passed); with `defined`
    (course.notebook.exercise_defining), a NameError names the exercise to do first."""
    if error is None:
        return PASSED, ""
    ename, evalue = error
    if ename == "NameError" and (needs := needs_earlier_exercise(exercise, evalue, defined)):
        return ERROR, needs
    if ename in _NOT_ATTEMPTED:
        return NOT_ATTEMPTED, "not attempted yet: the exercise still raises NotImplementedError."
    if ename == "AssertionError":
        return FAILED, evalue or (
            "a test failed without a message. Compare your result with torch's on the "
            "inputs of the visible tests above."
        )
    return ERROR, f"your code raised {ename}: {evalue}" if evalue else f"your code raised {ename}"
