"""A self-learner runs a later chapter on their own earlier code (COURSE.md §2.3), and back."""
from __future__ import annotations

import shutil
import subprocess
import sys

import nbformat
import pytest

from autograder.build.release import build
from course.notebook import exercises
from two_chapter_course import write


@pytest.fixture()
def release(tmp_path):
    root = write(tmp_path / "course")
    build(root)
    student = tmp_path / "student"
    shutil.copytree(root / "release", student)
    return student


def _course(*args):
    return subprocess.run([sys.executable, "-m", "course.cli", *args], capture_output=True, text=True)


def _run_beta(release):
    code = "from picotorch import Box, double; print(double(Box(5)).value)"
    return subprocess.run([sys.executable, "-c", code], cwd=release / "02_beta", capture_output=True, text=True)


def test_use_mine_then_use_reference(release):
    alpha = release / "01_alpha" / "01_alpha.ipynb"
    done = _course("use-mine", "02_beta", "--release", str(release))
    assert done.returncode == 2 and "unfinished exercises" in done.stderr, "a blank chapter 01 is refused"
    nb = nbformat.read(alpha, 4)
    cell = nb.cells[exercises(nb)["ex_double"].solution_cells[0]]
    cell.source = "def double(box):\n    return Box(box.value * 3)  # the student's own (wrong) version"
    nbformat.write(nb, alpha)
    done = _course("use-mine", "02_beta", "--release", str(release))
    assert done.returncode == 0, done.stderr
    assert _run_beta(release).stdout.strip() == "15", "02_beta now runs on the student's own double()"
    done = _course("use-reference", "02_beta", "--release", str(release))
    assert done.returncode == 0 and "again" in done.stdout
    assert _run_beta(release).stdout.strip() == "10"
    assert not (release / "02_beta" / "picotorch.reference").exists()


def test_use_mine_on_a_missing_chapter_says_so(release):
    done = _course("use-mine", "07_nothing", "--release", str(release))
    assert done.returncode == 2 and "does not exist" in done.stderr
