"""The emulator compiles a count-mode kernel against a precompiled cuda_emu.h (course/cuda/emulator/build.py,
_precompiled_header): the same module and the same messages as without it, and a precompiled header g++ cannot
use (damaged, or made for other options) is ignored, never a failed or wrong build."""
from __future__ import annotations

import shutil
import uuid

import pytest

from course.cuda.emulator import build as emulator_build
from course.cuda.errors import KernelCompileError

pytestmark = pytest.mark.skipif(not shutil.which("g++"), reason="the emulator needs g++")

KERNEL = 'extern "C" __global__ void scale_{tag}(float* x, int n) {{\n' \
         '    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) x[i] = 2.0f * x[i];\n}}\n'


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_CUDA_CACHE", str(tmp_path))
    return tmp_path


def _fresh(tag_source: str) -> tuple[str, tuple[str, ...]]:
    tag = uuid.uuid4().hex[:8]  # build() is memoized per source: each test compiles its own
    return tag_source.format(tag=tag), (f"scale_{tag}",)


def test_a_kernel_compiles_against_the_precompiled_header(cache):
    source, names = _fresh(KERNEL)
    built = emulator_build.build(source, names)
    assert built.path.is_file()
    assert list(cache.glob("pch-*/cuda_emu.h.gch")), "no precompiled header was made"


def test_an_unusable_precompiled_header_is_ignored(cache):
    emulator_build.build(*_fresh(KERNEL))
    for gch in cache.glob("pch-*/cuda_emu.h.gch"):
        gch.write_bytes(b"not a precompiled header")
    built = emulator_build.build(*_fresh(KERNEL))
    assert built.path.is_file()


def test_a_compile_error_is_still_on_the_students_line(cache):
    emulator_build.build(*_fresh(KERNEL))  # the precompiled header exists now
    broken = KERNEL.replace("2.0f * x[i]", "2.0f * y[i]")
    with pytest.raises(KernelCompileError) as raised:
        emulator_build.build(*_fresh(broken))
    errors = [d for d in raised.value.diagnostics if d.severity == "error"]
    assert errors and errors[0].line == 3 and "y" in errors[0].message, raised.value


def test_the_sandbox_keeps_only_a_folder_that_is_one_precompiled_header(tmp_path):
    """In a grading sandbox the reference run's precompiled header is left to the kernels, read-only
    (autograder/sandbox/kernel_cache.py, after_warmup); anything else shaped like it is not."""
    import os
    import stat

    from autograder.sandbox.kernel_cache import _keep_header_folder
    good = tmp_path / f"pch-{'a' * 32}"
    good.mkdir()
    (good / "cuda_emu.h.gch").write_bytes(b"header")
    assert _keep_header_folder(str(good))
    assert stat.S_IMODE(good.stat().st_mode) == 0o755 and stat.S_IMODE((good / "cuda_emu.h.gch").stat().st_mode) == 0o644
    crowded = tmp_path / f"pch-{'b' * 32}"
    crowded.mkdir()
    (crowded / "cuda_emu.h.gch").write_bytes(b"header")
    (crowded / "other").write_bytes(b"")
    linked = tmp_path / f"pch-{'c' * 32}"
    linked.mkdir()
    os.symlink("/etc/passwd", linked / "cuda_emu.h.gch")
    misnamed = tmp_path / "pch-notahash"
    misnamed.mkdir()
    (misnamed / "cuda_emu.h.gch").write_bytes(b"header")
    assert not any(_keep_header_folder(str(p)) for p in (crowded, linked, misnamed))
