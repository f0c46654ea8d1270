"""`autograder build`: source/ -> release/, byte-stable, checked, leaking nothing."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import nbformat
import pytest

from autograder.build.release import build
from autograder.build.source_format import SourceError
from conftest import CHAPTERS
from course.notebook import exercises
from course.cli import copy_missing_chapters
from two_chapter_course import BETA, write


def test_release_is_in_sync(repo):
    done = subprocess.run([sys.executable, "-m", "autograder.cli", "build", "--check", "--repo", str(repo)],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"release/ is stale; run `make build`:\n{done.stdout}{done.stderr}"


def _secret_lines(chapter):
    """Code lines that only occur inside ### BEGIN SOLUTION / HIDDEN TESTS regions of a chapter's text form."""
    inside, secret, public = False, set(), set()
    for line in chapter.text_form.read_text().splitlines():
        if re.match(r"\s*### BEGIN (SOLUTION|HIDDEN TESTS)", line):
            inside = True
        elif re.match(r"\s*### END (SOLUTION|HIDDEN TESTS)", line):
            inside = False
        elif len(line.strip()) > 25:  # short lines (return x) may occur anywhere
            (secret if inside else public).add(line.strip())
    return secret - public


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.id for c in CHAPTERS])
def test_release_holds_no_solution_and_no_hidden_test(chapter, repo):
    release = repo / "release" / chapter.id
    text = "\n".join(p.read_text() for p in release.rglob("*") if p.is_file() and p.suffix in (".ipynb", ".py"))
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN" not in text
    nb = nbformat.read(release / chapter.notebook.name, as_version=4)
    # Whole lines: a hidden check may well be the start of a longer visible one (the same call with a message).
    lines = {line.strip() for c in nb.cells for line in c.source.splitlines()}
    leaked = [line for line in _secret_lines(chapter) if line in lines]
    assert not leaked, f"solution or hidden-test lines in release/{chapter.id}: {leaked[:3]}"
    assert not (release / chapter.text_form.name).exists()


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.id for c in CHAPTERS])
def test_release_has_every_exercise_with_its_visible_tests(chapter, repo):
    source = exercises(nbformat.read(chapter.notebook, as_version=4))
    release = exercises(nbformat.read(repo / "release" / chapter.id / chapter.notebook.name, as_version=4))
    assert list(source) == list(release)
    assert all(release[e].test_cells or release[e].manual for e in release)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = write(tmp_path_factory.mktemp("course"))
    build(root)
    return root


def test_only_declared_files_reach_release(built):
    files = sorted(p.relative_to(built / "release").as_posix() for p in (built / "release").rglob("*") if p.is_file())
    assert files == ["01_alpha/01_alpha.ipynb", "01_alpha/data.txt",
                     "02_beta/02_beta.ipynb", "02_beta/picotorch/__init__.py", "02_beta/picotorch/ch01_alpha.py"]


def test_later_chapter_carries_reference_of_earlier_ones(built):
    code = (built / "release" / "02_beta" / "picotorch" / "ch01_alpha.py").read_text()
    assert "return Box(box.value * 2)" in code and "BEGIN SOLUTION" not in code
    assert "read_data" not in code, "only cells marked reference=true join the framework"
    done = subprocess.run([sys.executable, "-c", "from picotorch import Box, double; print(double(Box(5)).value)"],
                          cwd=built / "release" / "02_beta", capture_output=True, text=True)
    assert done.stdout.strip() == "10", done.stderr
    assert not (built / "release" / "01_alpha" / "picotorch").exists(), "the first chapter needs no reference"


def test_each_reference_module_is_committed_once(tmp_path):
    """With three chapters, the last one's release holds the framework's modules and an earlier one's are
    links to them (its __init__.py, which names its own modules, a file); a copy of the chapter folder, as
    `course copy-release` and nbgrader's release make it, holds the module itself; the build wants the link."""
    root = write(tmp_path / "course")
    (root / "source" / "03_gamma").mkdir()
    (root / "source" / "03_gamma" / "03_gamma.py").write_text(BETA.replace("02_beta", "03_gamma"))
    assert build(root) != []
    package = root / "release" / "02_beta" / "picotorch"
    target = root / "release" / "03_gamma" / "picotorch" / "ch01_alpha.py"
    assert os.readlink(package / "ch01_alpha.py") == "../../03_gamma/picotorch/ch01_alpha.py"
    assert not target.is_symlink() and not (package / "__init__.py").is_symlink()
    assert "return Box(box.value * 2)" in target.read_text()
    copy_missing_chapters(root / "release", tmp_path / "work")
    copied = tmp_path / "work" / "02_beta" / "picotorch" / "ch01_alpha.py"
    assert not copied.is_symlink() and copied.read_bytes() == target.read_bytes()
    (package / "ch01_alpha.py").unlink()
    (package / "ch01_alpha.py").write_bytes(b"# edited\n")  # a copy where the link belongs (one build: it
    # names what --check names, and mends it)
    assert build(root) == ["stale: release/02_beta/picotorch/ch01_alpha.py (must be a link to "
                           "../../03_gamma/picotorch/ch01_alpha.py)"]
    assert (package / "ch01_alpha.py").is_symlink()
    assert target.read_text() == copied.read_text(), "the rebuild must replace the copy, not write through it"


def test_rebuild_changes_no_byte(built):
    before = {p: p.read_bytes() for p in built.rglob("*") if p.is_file()}
    assert build(built) == []
    after = {p: p.read_bytes() for p in built.rglob("*") if p.is_file()}
    assert before == after


def test_cell_ids_are_deterministic(built):
    nb = nbformat.read(built / "release" / "01_alpha" / "01_alpha.ipynb", as_version=4)
    assert [c.id for c in nb.cells] == ["01-alpha-c00", "01-alpha-c01", "ex-double", "ex-double-tests",
                                        "ex-text", "ex-text-tests"]


def test_check_names_stale_and_stray_files(built):
    notebook = built / "release" / "01_alpha" / "01_alpha.ipynb"
    original = notebook.read_bytes()
    notebook.write_bytes(original.replace(b"Alpha", b"Alfa"))
    (built / "release" / "02_beta" / "extra.txt").write_text("stray")
    (built / "release" / "01_alpha" / "data.txt").unlink()
    try:
        problems = build(built, check=True)
        assert problems == ["stale: release/01_alpha/01_alpha.ipynb", "missing: release/01_alpha/data.txt",
                            "stray: release/02_beta/extra.txt"]
        done = subprocess.run([sys.executable, "-m", "autograder.cli", "build", "--check", "--repo", str(built)],
                              capture_output=True, text=True)
        assert done.returncode == 1 and "stale: release/01_alpha/01_alpha.ipynb" in done.stdout
    finally:
        build(built)
    assert notebook.read_bytes() == original and not (built / "release" / "02_beta" / "extra.txt").exists()


def test_check_notices_a_source_edit(built):
    text_form = built / "source" / "02_beta" / "02_beta.py"
    original = text_form.read_text()
    text_form.write_text(original.replace("quadruple(Box(1)).value == 4", "quadruple(Box(2)).value == 8"))
    try:
        assert set(build(built, check=True)) == {"stale: source/02_beta/02_beta.ipynb",
                                                 "stale: release/02_beta/02_beta.ipynb"}
    finally:
        text_form.write_text(original)


@pytest.mark.parametrize("edit,message", [
    (lambda s: s.replace('tests="ex_double" points=1', 'tests="ex_double"'), "needs points=N"),
    (lambda s: s.replace('solution="ex_text"', 'solution="ex_double"'), "used twice"),
    (lambda s: s.replace("chapter: 01_alpha", "chapter: 03_gamma"), "must say `course: chapter: 01_alpha`"),
    (lambda s: s.replace("files: [data.txt]", "files: [missing.csv]"), "declares file 'missing.csv'"),
    (lambda s: s.replace('# %% solution="ex_text"', '# %% solution="ex_text" pionts=2'), "unknown header keys"),
])
def test_bad_source_gets_a_clear_error(tmp_path, edit, message):
    root = write(tmp_path)
    text_form = root / "source" / "01_alpha" / "01_alpha.py"
    text_form.write_text(edit(text_form.read_text()))
    with pytest.raises(SourceError, match=re.escape(message)):
        build(root)
    assert not (root / "release").exists(), "a failed build must not leave a half-written release/"
