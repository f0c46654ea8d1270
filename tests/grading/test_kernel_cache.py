"""Compiled emulator kernels shared between the submissions one grader grades
(issue 19, item 3; autograder/sandbox/kernel_cache.py): the given kernels are compiled once,
by the reference run; a student's kernel that another student hands in again is
compiled once more by trusted code after the first submission, and never again; the
student's code can read the shared cache and cannot write it."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from autograder.grade.grader import Grader
from solution_text import solution_cells
from test_grading_sandbox import answer, make_chapter

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kernel_cache")]

if not shutil.which("bwrap") or not shutil.which("g++"):
    pytest.skip("needs bubblewrap and g++ (the CUDA emulator's compiler)", allow_module_level=True)
if os.geteuid() != 0:
    pytest.skip("as an ordinary user the sandbox, and so its cache, is new for every submission",
                allow_module_level=True)

TEXT = '''# ---
# jupyter:
#   course:
#     chapter: 01_kernels
#     title: a CUDA-kernel chapter for the kernel cache's tests
#     files: []
# ---

# %%
import numpy as np
import torch
from course.cuda import Kernel
GIVEN = r"""
extern "C" __global__ void fill(float* out, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v;
}"""
fill = Kernel(GIVEN, "fill")
SHARED = "/grading/cuda-cache/"

# %% solution="ex_scale"
SCALE = r"""
extern "C" __global__ void scale(float* out, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i];
}"""
scale_kernel = Kernel(SCALE, "scale")


def scale(x, a):
    ### BEGIN SOLUTION
    out = torch.empty_like(x)
    scale_kernel((1,), (32,), (out, x, np.float32(a), np.int32(x.numel())))
    return out
    ### END SOLUTION


# %% tests="ex_scale" points=1
out = torch.empty(4)
fill((1,), (32,), (out, np.float32(1.5), np.int32(4)))
assert torch.equal(scale(out, 2.0), torch.full((4,), 3.0)), "scale(1.5, 2) should be 3"

# %% solution="ex_where"
def where_built():
    ### BEGIN SOLUTION
    return str(scale_kernel.module.emulator_build().path)
    ### END SOLUTION


# %% tests="ex_where" points=1
assert str(fill.module.emulator_build().path).startswith(SHARED), "given: " + str(fill.module.emulator_build().path)
assert where_built().startswith(SHARED), "own: " + where_built()

# %% solution="ex_readonly"
def nothing():
    ### BEGIN SOLUTION
    return None
    ### END SOLUTION


# %% tests="ex_readonly" points=1
import os
refused = []
existing = sorted(os.listdir(SHARED))
assert existing, "the shared cache is empty"
# The supervisor's warm-up runs this cell too, as the cache's owner: there the writes would succeed and
# delete a build the tests above look for (which one depends on the hashes), so they are tried only
# in a student's kernel, whose namespace is __main__.
attempts = () if __name__ == "__warmup__" else (
    lambda: open(SHARED + "forged.so", "wb"), lambda: open(SHARED + existing[0], "r+b"),
    lambda: os.chmod(SHARED + existing[0], 0o777), lambda: os.unlink(SHARED + existing[0]),
    lambda: os.rename(SHARED + existing[0], SHARED + "x"))
for attempt in attempts:
    try:
        attempt()
    except PermissionError:
        refused.append(True)
assert len(refused) == len(attempts), f"only {len(refused)} of {len(attempts)} writes were refused"
assert __name__ == "__warmup__" or len(attempts) == 5
'''


REFERENCE_SCALE = """    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i];"""


def own_scale(chapter) -> str:
    """The reference's answer to ex_scale with a kernel of the student's own: not the reference's, so only
    the first submission compiles it."""
    mine = "    // my own way of writing it\n    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = x[i] * a;"
    own = solution_cells(chapter.text_form, chapter.id)["ex_scale"].replace(REFERENCE_SCALE, mine)
    assert REFERENCE_SCALE not in own and "my own way" in own, own
    return own


@pytest.fixture(scope="module")
def grader(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    chapter = make_chapter(root, TEXT, "01_kernels")
    g = Grader(chapter, tmp_path_factory.mktemp("course"))
    yield g, chapter
    g.close()


def statuses(result) -> dict[str, str]:
    return {v.exercise: (v.status, v.message) for v in result.verdicts}


def test_given_kernels_come_from_the_shared_cache_and_a_repeated_own_kernel_is_compiled_once(grader, tmp_path):
    g, chapter = grader
    import nbformat
    nb = nbformat.read(g.root / "release" / chapter.id / chapter.notebook.name, 4)
    mine = answer(answer(nb, "ex_scale", own_scale(chapter)), "ex_where", "def where_built():\n"
                                                        "    return str(scale_kernel.module.emulator_build().path)\n")
    path = tmp_path / "a.ipynb"
    nbformat.write(mine, path)
    first = statuses(g.grade("first", path))
    assert first["ex_scale"][0] == "passed", first["ex_scale"][1]
    assert first["ex_where"][0] == "failed" and "own: /grading/work/" in first["ex_where"][1], first  # built here
    assert first["ex_readonly"][0] == "passed", first
    second = statuses(g.grade("second", path))
    assert second["ex_where"][0] == "passed", second  # the first one's kernel, built again by the supervisor
    assert second["ex_scale"][0] == "passed" and second["ex_readonly"][0] == "passed", second


NATIVE_ATTACK = r'''import numpy as np
import torch
from course.cuda import Kernel
ATTACK = r"""
extern "C" void* dlsym(void* handle, const char* name);
extern "C" int system(const char* command);
typedef int (*run_t)(const char*);
extern "C" __global__ void scale(float* out, const float* x, float a, int n) {
    // In the grading kernel's process these would run Python there and read every thread's frames.
    run_t run = (run_t)dlsym((void*)0, "PyRun_SimpleString");
    if (run) run("import os; os._exit(0)");
    void* frames = dlsym((void*)0, "_PyThread_CurrentFrames");
    if (frames) *(volatile int*)frames = 0;
    for (int i = 0; i < n; ++i) out[i] = a * x[i];
    *(volatile float*)(out + (1 << 28)) = a;   // a wild write, far past the tensor
    system("kill -9 $PPID");                     // the process that runs this kernel
}"""
attack_kernel = Kernel(ATTACK, "scale")


def scale(x, a):
    out = torch.empty_like(x)
    attack_kernel((1,), (32,), (out, x, np.float32(a), np.int32(x.numel())))
    return out
'''


def test_a_native_attack_costs_its_exercise_only(grader, tmp_path):
    """Issue 42, item 4: the kernel calls Python's C API and reads the frames through dlsym, writes through
    a wild pointer and kills the process it runs in. It runs in the emulator's launch process, not the
    grading kernel: its exercise fails with the emulator's message, the kernel lives on, the other
    exercises keep their points."""
    g, chapter = grader
    import nbformat
    nb = nbformat.read(g.root / "release" / chapter.id / chapter.notebook.name, 4)
    honest = answer(answer(nb, "ex_scale", NATIVE_ATTACK), "ex_where", "def where_built():\n"
                    "    return str(fill.module.emulator_build().path)\n")
    path = tmp_path / "attack.ipynb"
    nbformat.write(honest, path)
    result = g.grade("attacker", path)
    seen = statuses(result)
    assert seen["ex_scale"][0] != "passed" and "launch process" in seen["ex_scale"][1], seen["ex_scale"]
    assert seen["ex_where"][0] == "passed" and seen["ex_readonly"][0] == "passed", seen
    assert not any("died" in n or "tamper" in n for n in result.notes), result.notes


def test_a_new_sandbox_starts_with_the_reference_builds_of_the_last_and_never_a_students(tmp_path, monkeypatch):
    """The reference run's builds outlive their sandbox: the grader keeps those the supervisor handed over
    before any submission ran, and the next sandbox's reference run compiles nothing; a build made after a
    submission (the student's own kernel, built again by the supervisor) is never handed over."""
    import nbformat
    monkeypatch.setenv("COURSE_GRADER_BUILDS", str(tmp_path / "builds"))
    chapter = make_chapter(tmp_path / "repo", TEXT, "01_kernels")
    first = Grader(chapter, tmp_path / "one")
    try:
        nb = nbformat.read(first.root / "release" / chapter.id / chapter.notebook.name, 4)
        mine = tmp_path / "mine.ipynb"
        nbformat.write(answer(nb, "ex_scale", own_scale(chapter)), mine)
        assert statuses(first.grade("first", mine))["ex_scale"][0] == "passed"
        handed = set(first.sandbox.handed_over)
        kept = {p.name for p in (tmp_path / "builds").iterdir()}
        assert handed and kept == handed, (handed, kept)
        assert any(n.startswith("libpicotorch-cuda-emu-") for n in kept) and any(n.startswith("kernel-") for n in kept)
        statuses(first.grade("second", mine))  # the supervisor now has the student's kernel: not the grader's
        assert {p.name for p in (tmp_path / "builds").iterdir()} == kept
    finally:
        first.close()
    second = Grader(chapter, tmp_path / "two")
    try:
        seen = statuses(second.grade("solution", chapter.notebook))
        assert all(status == "passed" for status, _ in seen.values()), seen
        assert second.sandbox.handed_over == {}, f"compiled again: {sorted(second.sandbox.handed_over)}"
    finally:
        second.close()
