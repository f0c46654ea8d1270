"""Grade many submissions at once: long-lived worker processes, each with its own
Grader (a throwaway nbgrader course folder and gradebook, and a warm sandbox).

Start-up (nbgrader's import, generate_assignment, the sandbox importing torch)
is paid once per worker, not once per submission as with one `nbgrader
autograde` per student. Workers are started with `spawn`: a clean interpreter,
nothing inherited from the parent but the job description.
"""
from __future__ import annotations

import multiprocessing
import os
import resource
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.util import Finalize
from pathlib import Path

_grader = None


def _start(chapter, limits) -> None:
    global _grader
    from autograder.grade import Grader
    workdir = Path(tempfile.mkdtemp(prefix="course-worker-"))
    # a pool's worker leaves through os._exit, which skips atexit; multiprocessing's own
    # finalizers still run
    Finalize(None, shutil.rmtree, (workdir, True), exitpriority=10)
    _grader = Grader(chapter, workdir, limits=limits)
    Finalize(None, _grader.close, exitpriority=20)
    Finalize(None, shutil.rmtree, (_grader.sandbox.staging, True), exitpriority=15)


def _grade(submission):
    result = _grader.grade(submission.student, submission.notebook, submission.timestamp, submission.problem)
    return result, os.getpid(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def grade_all(chapter, submissions, workers: int, limits=None, on_result=None):
    """Results in the order of `submissions`; `on_result(result, done, total)` as each lands.

    Returns (results, {worker pid: peak RSS in KiB of the worker itself})."""
    results = {}
    worker_rss: dict[int, int] = {}
    pending = list(submissions)
    context = multiprocessing.get_context("spawn")
    attempts = 0
    while pending:
        attempts += 1
        with ProcessPoolExecutor(max_workers=max(1, min(workers, len(pending))), mp_context=context,
                                 initializer=_start, initargs=(chapter, limits)) as pool:
            futures = {pool.submit(_grade, s): s for s in pending}
            try:
                for future in as_completed(futures):
                    result, pid, rss = future.result()
                    worker_rss[pid] = max(worker_rss.get(pid, 0), rss)
                    results[result.student] = result
                    if on_result:
                        on_result(result, len(results), len(submissions))
            except BrokenProcessPool:
                if attempts >= 3:  # a worker that keeps dying is the grader's problem, not a student's
                    raise
        pending = [s for s in pending if s.student not in results]
    return [results[s.student] for s in submissions], worker_rss
