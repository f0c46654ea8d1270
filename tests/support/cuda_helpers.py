"""What the CUDA tests share: a private kernel cache, and line numbers as the student counts them."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def cuda_cache(tmp_path_factory):
    """Compiled kernels go to this run's temp folder, unless COURSE_CUDA_CACHE already says where: one folder for
    all of the run's xdist workers (each worker's own folder is inside the run's), so that the emulator's runtime,
    its launch process and a chapter's kernels are compiled once a run, not once a worker (builds are renamed into
    place whole: workers building the same one at once both succeed)."""
    if os.environ.get("COURSE_CUDA_CACHE"):
        yield
        return
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    os.environ["COURSE_CUDA_CACHE"] = str(base / "cuda-cache")
    yield
    os.environ.pop("COURSE_CUDA_CACHE", None)


def line_of(source: str, needle: str) -> int:
    """The 1-based line of `source` that contains `needle` (the student's numbering)."""
    hits = [i for i, text in enumerate(source.splitlines(), start=1) if needle in text]
    assert len(hits) == 1, f"{needle!r} is on lines {hits}"
    return hits[0]
