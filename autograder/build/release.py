"""`autograder build`: source/ -> release/, byte-stable, through nbgrader.

For each chapter the build derives, in this order:
1. source/NN/NN.ipynb from the text form NN.py (the nbgrader source notebook);
2. source/NN/picotorch/ from the reference cells of the chapters before NN;
3. release/NN/ from nbgrader's generate_assignment on the notebook, the files the
   chapter declares (`course: files:` in its header) and that package, run in a
   throwaway course folder with a throwaway gradebook.
With --check nothing is written: each stale, missing or stray file is named.

source/NN/picotorch/ is the one derived file that is not committed (git ignores it):
its bytes are release/NN/picotorch/'s, the committed copy that the project's tests
read. The build writes it for the tools that run a chapter's source folder as it is
(`course check source/NN/NN.ipynb`, nbgrader's own commands on this repository); the
grader makes its own (grade/grader.py, prepare_course). --check leaves it out: a
fresh clone has none, and release/NN/picotorch/ is checked.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import nbformat

from autograder import nbgrader_env
from autograder.chapters import Chapter, discover
from autograder.build.reference import PACKAGE, package_files
from autograder.build.source_format import SourceError, dumps, notebook_from_text


def declared_files(chapter: Chapter, nb) -> list[str]:
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


def expected_files(repo: Path) -> dict[Path, bytes]:
    """Every file the build owns, with the bytes it must hold."""
    chapters = discover(repo / "source")
    expected: dict[Path, bytes] = {}
    for n, chapter in enumerate(chapters):
        nb = notebook_from_text(chapter.text_form, chapter.id)
        notebook_text = dumps(nb)
        expected[chapter.notebook] = notebook_text.encode()
        reference = {rel: text.encode() for rel, text in package_files(chapters[:n]).items()}
        for rel, data in reference.items():
            expected[chapter.source_dir / rel] = data
        support = {name: (chapter.source_dir / name).read_bytes() for name in declared_files(chapter, nb)}
        support.update(reference)
        for rel, data in _release_files(chapter, notebook_text, support).items():
            expected[repo / "release" / chapter.id / rel] = data
    return expected


def owned_files(repo: Path) -> set[Path]:
    """Files on disk that the build writes: all of release/, and the generated parts of source/."""
    owned = {p for p in (repo / "release").rglob("*") if p.is_file() and "__pycache__" not in p.parts
             and ".ipynb_checkpoints" not in p.parts}
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
        if not path.exists():
            problems.append(f"missing: {rel}")
        elif path.read_bytes() != data:
            problems.append(f"stale: {rel}")
        else:
            continue
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
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
