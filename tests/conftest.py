"""Shared fixtures: the repository, its chapters, and the GPU marker's honesty."""
from __future__ import annotations

import os
import sys
from pathlib import Path

# One BLAS/OpenMP thread per test process, as the grading sandbox has (autograder/sandbox/bubblewrap.py): `make test` runs
# a worker per core, and a thread pool that must wait for a busy core makes every matmul of NumPy's OpenBLAS
# (above 2**18 multiply-adds) or torch take milliseconds. Set before numpy and torch load; subprocesses inherit it.
for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
# The helpers (servers, notebook runs, the mutants' solution_text ...) live in tests/support/, by concern beside the
# tests in the other folders (tests/README.md); test modules import them by name.
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

from autograder.chapters import discover  # noqa: E402

CHAPTERS = discover(REPO / "source")
# Checks of the course's machinery rather than of one chapter's content (that check() fails a wrong answer with its
# message; plain nbgrader's verdicts, on the last two of these) run in `make test` on three chapters that between
# them use all of it: the first, chapter 05 (a device: the CUDA emulator inside the kernel) and the last, the one on
# top of every other (tests/browser/ makes a student's pass on the first and the last). `make sweep`
# (COURSE_EVERY_CHAPTER=1) runs them on every chapter.
EVERY_CHAPTER = os.environ.get("COURSE_EVERY_CHAPTER") == "1"
MACHINERY_CHAPTERS = CHAPTERS if EVERY_CHAPTER else list(
    {c.id: c for c in [CHAPTERS[0], *[c for c in CHAPTERS if c.id == "05_backend"], CHAPTERS[-1]]}.values())


def pytest_xdist_auto_num_workers(config):
    """`make test`'s `-n auto`: one worker more than the cores. A third of the suite's time is spent waiting (on a
    JupyterLab or a hub to start, a browser to render, a Dask worker or a sandboxed kernel to answer): a worker
    per core left a core idle for that third (2 workers on 2 cores: 1.38 cores busy on average), and one more
    worker fills it. PYTEST_XDIST_AUTO_NUM_WORKERS, if set, still decides (pytest-xdist reads it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return len(os.sched_getaffinity(0)) + 1


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    _group_for_xdist(config, items)
    import torch  # here, not at the top: a pytest that only borrows _group_for_xdist (tests/repo/) need not load it

    # A GPU test is skipped where there is no GPU: reported as skipped, never as passed.
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU here: not run (and not counted as passed)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _group_for_xdist(config, items) -> None:
    """`--dist loadgroup` sends the tests of one `xdist_group` to one worker, so that a module's fixtures
    (a Dask cluster, a PostgreSQL server, a sandboxed course) start once. pytest-xdist marks a test's
    group by a suffix of its node id, set through `item._nodeid`, which pytest 9 no longer reads (the
    id is `item._id`): without this every group was spread over the workers and each started its own."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import coerce_node_id
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")


@pytest.fixture(scope="session", autouse=True)
def cuda_cache(tmp_path_factory):
    """Compiled CUDA-emulator kernels go to this run's temp folder, unless COURSE_CUDA_CACHE already says where: one
    folder for every test and every process a test starts (a chapter's runner, a kernel, check()), in all of the
    run's xdist workers (each worker's own folder is inside the run's), so that the emulator's runtime, its launch
    process and a chapter's kernels are compiled once a run, and a run depends on nothing a run before left in
    ~/.cache (builds are renamed into place whole: workers building the same one at once both succeed). The
    grading sandbox keeps its own (autograder/sandbox/kernel_cache.py)."""
    if os.environ.get("COURSE_CUDA_CACHE"):
        yield
        return
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    os.environ["COURSE_CUDA_CACHE"] = str(base / "cuda-cache")
    yield
    os.environ.pop("COURSE_CUDA_CACHE", None)


@pytest.fixture(scope="session", autouse=True)
def no_standing_graders(tmp_path_factory):
    """`autograder grade` without --scheduler grades on the user's standing graders when they run
    (autograder/grade/standing.py): the tests' runs must not depend on whether the person running them has
    some up, so their folder is one of this run's, empty unless a test starts graders in it."""
    os.environ["AUTOGRADER_GRADERS"] = str(tmp_path_factory.getbasetemp() / "standing-graders")
    yield
    os.environ.pop("AUTOGRADER_GRADERS", None)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="module")
def reference_picotorch(tmp_path_factory):
    """The reference picotorch of every chapter so far, assembled by the build into a temporary
    folder and imported in place of any other picotorch while the test module runs."""
    from autograder.build.release import assemble_reference

    root = assemble_reference(REPO, tmp_path_factory.mktemp("reference"))
    ours = lambda name: name == "picotorch" or name.startswith("picotorch.")  # noqa: E731
    saved = {k: v for k, v in sys.modules.items() if ours(k)}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, str(root))
    import picotorch
    yield picotorch
    sys.path.remove(str(root))
    for k in [k for k in sys.modules if ours(k)]:
        del sys.modules[k]
    sys.modules.update(saved)
