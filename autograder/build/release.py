"""`autograder build`: source/ -> release/, byte-stable, through nbgrader.

For each chapter the build derives, in this order:
1. source/NN/NN.ipynb from the text form NN.py (the nbgrader source notebook);
2. source/NN/picotorch/ from the reference cells of the chapters before NN;
3. release/NN/ from nbgrader's generate_assignment on the notebook, the files the
   chapter declares (`course: files:` in its header) and that package, run in a
   throwaway course folder with a throwaway gradebook.
With --check nothing is written: each stale, missing or stray file is named.

Each chapter's module of the reference is committed once. Chapter N's package holds the
modules of every chapter before N, so the last chapter's release/LAST/picotorch/ holds
them all; in every earlier chapter's release/NN/picotorch/ the module files are
relative symbolic links into it (`ch01_tensor.py -> ../../LAST/picotorch/ch01_tensor.py`),
and only the package's `__init__.py`, a few lines naming that chapter's modules, is a
file of its own. Whatever copies a chapter folder follows the links (shutil.copytree,
nbgrader's release_assignment and fetch, `course copy-release`, the hub's course folder),
so a student's chapter folder holds the same files as before, and never a module of
its own chapter or a later one. --check checks the links' targets as it checks bytes.

source/NN/picotorch/ is the one derived file that is not committed (git ignores it):
its bytes are release/NN/picotorch/'s. The build writes it for the tools that run a
chapter's source folder as it is (`course check source/NN/NN.ipynb`, nbgrader's own
commands on this repository); the grader makes its own (grade/grader.py,
prepare_course). --check leaves it out: a fresh clone has none, and
release/NN/picotorch/ is checked.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import nbformat

from autograder import nbgrader_env
from autograder.chapters import Chapter, discover
from autograder.build.reference import PACKAGE, package_files
from autograder.build.source_format import SourceError, dumps, notebook_from_text


def declared_files(chapter: Chapter, nb) -> list[str]:
    """The files the chapter's header declares (`course: files:`); SourceError for one not in its source folder."""
    files = list(nb.metadata.get("course", {}).get("files", []))
    for name in files:
        if not (chapter.source_dir / name).is_file():
            raise SourceError(f"{chapter.text_form}: declares file {name!r}, which is not in {chapter.source_dir}.")
    return files


def _release_files(chapter: Chapter, notebook_text: str, support: dict[str, bytes]) -> dict[str, bytes]:
    """What nbgrader's generate_assignment makes of the chapter, as {relative path: bytes}."""
    with tempfile.TemporaryDirectory(prefix="course-build-") as tmp:
        root = Path(tmp)
        src = root / "source" / chapter.id
        src.mkdir(parents=True)
        (src / chapter.notebook.name).write_text(notebook_text)
        for rel, data in support.items():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes(data)
        nbgrader_env.stamp_in_process()  # the throwaway gradebook's alembic stamp without the `alembic` command (4 s a chapter)
        with nbgrader_env.quiet():
            result = nbgrader_env.api(root).generate_assignment(chapter.id)
        nbgrader_env.check(result, f"generate_assignment {chapter.id}")
        out: dict[str, bytes] = {}
        for path in sorted((root / "release" / chapter.id).rglob("*")):
            if path.is_file():
                rel = path.relative_to(root / "release" / chapter.id).as_posix()
                data = path.read_bytes()
                if path.suffix == ".ipynb":  # one serialisation, whatever nbgrader's
                    data = dumps(nbformat.reads(data.decode(), as_version=4)).encode()
                out[rel] = data
        return out


class Link(str):
    """A derived file committed as a relative symbolic link to this target (the module docstring says why)."""


def _links_to_last(chapters: list[Chapter], n: int, reference: dict[str, bytes]) -> dict[str, Link]:
    """{relative path: link} for chapter n's reference modules: each is a link to the same module in the
    last chapter's package, which holds every earlier chapter's (its __init__.py, which differs per
    chapter, stays a file). The last chapter's own package is files."""
    if n == len(chapters) - 1:
        return {}
    last = chapters[-1].id
    return {rel: Link(f"../../{last}/{rel}") for rel in reference
            if rel.startswith(f"{PACKAGE}/") and not rel.endswith("/__init__.py")}


def expected_files(repo: Path) -> dict[Path, bytes | Link]:
    """Every file the build owns, with the bytes it must hold (or the target it must link to)."""
    chapters = discover(repo / "source")
    expected: dict[Path, bytes | Link] = {}
    for n, chapter in enumerate(chapters):
        nb = notebook_from_text(chapter.text_form, chapter.id)
        notebook_text = dumps(nb)
        expected[chapter.notebook] = notebook_text.encode()
        reference = {rel: text.encode() for rel, text in package_files(chapters[:n]).items()}
        for rel, data in reference.items():
            expected[chapter.source_dir / rel] = data
        support = {name: (chapter.source_dir / name).read_bytes() for name in declared_files(chapter, nb)}
        support.update(reference)
        released = _release_files(chapter, notebook_text, support)
        released.update(_links_to_last(chapters, n, reference))
        for rel, data in released.items():
            expected[repo / "release" / chapter.id / rel] = data
    return expected


def _holds(path: Path, want: bytes | Link) -> bool:
    """Whether `path` is what the build makes: that link, or a file (not a link) with those bytes."""
    if isinstance(want, Link):
        return path.is_symlink() and os.readlink(path) == want
    return not path.is_symlink() and path.read_bytes() == want


def _write(path: Path, want: bytes | Link) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()  # never write through a link: its target is another chapter's file
    if isinstance(want, Link):
        path.symlink_to(want)
    else:
        path.write_bytes(want)


def owned_files(repo: Path) -> set[Path]:
    """Files on disk that the build writes: all of release/, and the generated parts of source/."""
    owned = {p for p in (repo / "release").rglob("*") if (p.is_file() or p.is_symlink())
             and "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts}
    for chapter in discover(repo / "source"):
        if chapter.notebook.exists():
            owned.add(chapter.notebook)
        owned |= {p for p in (chapter.source_dir / PACKAGE).rglob("*.py")}
    return owned


def uncommitted(repo: Path, path: Path) -> bool:
    """Whether `path` is a derived file that git ignores: source/NN/picotorch/ (release/NN/picotorch/ is
    its committed copy)."""
    rel = path.relative_to(repo).parts
    return len(rel) > 3 and rel[0] == "source" and rel[2] == PACKAGE


def build(repo: Path, check: bool = False) -> list[str]:
    """Bring the derived files up to date (or, with check, list what is out of date among the committed
    ones)."""
    expected = expected_files(repo)
    problems = []
    for path, data in sorted(expected.items()):
        if check and uncommitted(repo, path):
            continue
        rel = path.relative_to(repo)
        if not path.exists() and not path.is_symlink():
            problems.append(f"missing: {rel}")
        elif not _holds(path, data):
            problems.append(f"stale: {rel}" + (f" (must be a link to {data})" if isinstance(data, Link) else ""))
        else:
            continue
        if not check:
            _write(path, data)
    for path in sorted(owned_files(repo) - set(expected)):
        if check and uncommitted(repo, path):
            continue
        problems.append(f"stray: {path.relative_to(repo)}")
        if not check:
            path.unlink()
    if not check:
        _remove_empty_dirs(repo / "release")
    return problems


def _remove_empty_dirs(top: Path) -> None:
    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(d.iterdir()):
            d.rmdir()


def assemble_reference(repo: Path, out: Path) -> Path:
    """The whole reference framework, for the project's own tests and benchmarks."""
    files = package_files(discover(repo / "source"))
    if (out / PACKAGE).exists():
        shutil.rmtree(out / PACKAGE)
    for rel, text in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    return out
