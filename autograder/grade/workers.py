"""Grade many submissions at once: long-lived worker processes, each with its own
Grader (a throwaway nbgrader course folder and gradebook, and a warm sandbox).

Start-up (nbgrader's import, generate_assignment, the sandbox importing torch)
is paid once per worker, not once per submission as with one `nbgrader
autograde` per student. Workers are started with `spawn`: a clean interpreter,
nothing inherited from the parent but the job description.

No submission can cost the others their grades: an exception while grading one
is that one's result (0 points and a note), and a worker process that dies takes
the submissions it had with it only until they are graded again; one that kills
its worker every time is found by grading the rest one at a time, and gets 0
with a note. Only a grader that cannot start (SandboxError) stops the run.
"""
from __future__ import annotations

import multiprocessing
import os
import resource
import shutil
import tempfile
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.util import Finalize
from pathlib import Path

_grader = None
_start_error: str | None = None
# Pools that break while grading in parallel before the rest is graded one at a time.
PARALLEL_ATTEMPTS = 2


def _start(chapter, limits, generated=None) -> None:
    global _grader, _start_error
    try:
        from autograder.grade.grader import Grader
        workdir = Path(tempfile.mkdtemp(prefix="course-worker-"))
        # a pool's worker leaves through os._exit, which skips atexit; multiprocessing's own
        # finalizers still run
        Finalize(None, shutil.rmtree, (workdir, True), exitpriority=10)
        _grader = Grader(chapter, workdir, limits=limits, generated=generated)
        Finalize(None, _grader.close, exitpriority=20)
        Finalize(None, shutil.rmtree, (_grader.sandbox.staging, True), exitpriority=15)
    except Exception as e:  # reported by _grade, as the grader's problem, not a submission's
        _start_error = f"{type(e).__name__}: {e}"


def _grade(submission):
    from autograder.grade.grader import grader_failure_note
    from autograder.sandbox.bubblewrap import SandboxError
    if _grader is None:
        raise SandboxError(f"a grader worker could not start: {_start_error}")
    notes = getattr(submission, "notes", None)
    try:
        result = _grader.grade(submission.student, submission.notebook, submission.timestamp, submission.problem,
                               notes)
    except SandboxError:
        raise
    except Exception as e:  # Grader.grade turns bad input into notes; this is the last line of defence
        result = _grader.failed(submission.student, grader_failure_note(e), notes)
    return result, os.getpid(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def grade_all(chapter, submissions, workers: int, limits=None, on_result=None, generated=None):
    """Results in the order of `submissions`; `on_result(result, done, total)` as each lands.
    `generated`: where the workers keep and find the course folder nbgrader generated (Grader's).

    Returns (results, {worker pid: peak RSS in KiB of the worker itself}). Raises
    SandboxError when the graders cannot start or run at all."""
    from autograder.grade.grader import failed_result, grader_failure_note
    from autograder.sandbox.bubblewrap import SandboxError

    results = {}
    worker_rss: dict[int, int] = {}
    context = multiprocessing.get_context("spawn")

    def land(result, pid=None, rss=0):
        if pid is not None:
            worker_rss[pid] = max(worker_rss.get(pid, 0), rss)
        results[result.student] = result
        if on_result:
            on_result(result, len(results), len(submissions))

    def pool(size: int) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=size, mp_context=context, initializer=_start,
                                   initargs=(chapter, limits, generated))

    def collect(future, submission) -> None:
        try:
            land(*future.result())
        except (SandboxError, BrokenProcessPool):
            raise
        except Exception as e:  # the result could not come back (it did not pickle, ...)
            land(failed_result(chapter, submission.student, grader_failure_note(e)))

    attempts = 0
    pending = list(submissions)
    while pending and attempts < PARALLEL_ATTEMPTS:
        attempts += 1
        with pool(max(1, min(workers, len(pending)))) as executor:
            futures = {executor.submit(_grade, s): s for s in pending}
            try:
                waiting = set(futures)
                while waiting:
                    done, waiting = wait(waiting, return_when=FIRST_COMPLETED)
                    for future in sorted(done, key=lambda f: f.exception() is not None):
                        collect(future, futures[future])
            except BrokenProcessPool:  # a worker died: keep what was graded, grade the rest again
                for future, s in futures.items():
                    if s.student not in results and future.done() and not future.cancelled() \
                            and future.exception() is None:
                        collect(future, s)
            except BaseException:
                executor.shutdown(wait=True, cancel_futures=True)
                raise
        pending = [s for s in pending if s.student not in results]
    # Still not graded: one at a time, so that a submission whose grading kills its worker is
    # known, and the rest still get graded.
    executor = None
    try:
        for s in pending:
            for attempt in (1, 2):
                if executor is None:
                    executor = pool(1)
                try:
                    collect(executor.submit(_grade, s), s)
                    break
                except BrokenProcessPool:
                    executor.shutdown(wait=True)
                    executor = None
                    if attempt == 2:
                        if not results:  # nothing was ever graded: the grader, not this submission
                            raise SandboxError("the grader's worker processes keep dying before any "
                                               "submission is graded; run one grading by hand "
                                               "(autograder.grade.grader.Grader) to see why") from None
                        land(failed_result(chapter, s.student, "the grader's worker process died every time "
                                           "it graded this notebook (it is not your code's fault: that runs in "
                                           "the sandbox). Tell your instructor, who can regrade it"))
    finally:
        if executor is not None:
            executor.shutdown(wait=True)
    return [results[s.student] for s in submissions], worker_rss
