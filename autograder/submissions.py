"""Where a class's submissions are: a folder or a zip, in either of two layouts.

    SUBMISSIONS/<student>/<chapter>.ipynb                 one folder per student
    SUBMISSIONS/[submitted/]<student>/<chapter>/<chapter>.ipynb   nbgrader's layout

A zip is unpacked first, member by member: absolute paths, `..`, links, devices
and oversized members are refused (and named), so an archive cannot write
outside its scratch folder or make the grader read a file it points to. A
student folder without the notebook, or with a link in its place, is still a
submission: it is graded zero with a note saying what was found.
"""
from __future__ import annotations

import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MAX_MEMBER_BYTES = 64 * 1024 ** 2
MAX_ARCHIVE_BYTES = 4 * 1024 ** 3
_SKIP = {"__MACOSX", ".ipynb_checkpoints", "__pycache__"}


class IntakeError(Exception):
    """The submissions cannot be read at all; the message says what to do."""


@dataclass
class Submission:
    student: str
    notebook: Path | None
    problem: str | None = None  # why there is no notebook to grade
    timestamp: str | None = None


def unpack(archive: Path, into: Path) -> list[str]:
    """Extract `archive` safely into `into`; returns warnings naming what was refused."""
    warnings = []
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as e:
        raise IntakeError(f"{archive} is not a readable zip file ({e}). Re-create it, e.g. "
                          f"`cd SUBMISSIONS && zip -r ../class.zip .`.") from None
    total = 0
    with zf:
        for info in zf.infolist():
            name = info.filename
            parts = PurePosixPath(name.replace("\\", "/")).parts
            mode = info.external_attr >> 16
            if name.startswith(("/", "\\")) or (parts and parts[0].endswith(":")) or ".." in parts:
                warnings.append(f"refused {name!r} in {archive.name}: it points outside the archive")
                continue
            kind = stat.S_IFMT(mode)  # 0 when the archiver recorded permissions only: a plain file
            if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
                warnings.append(f"refused {name!r} in {archive.name}: a link or special file, not a plain file")
                continue
            if info.is_dir():
                continue
            total += info.file_size
            if info.file_size > MAX_MEMBER_BYTES or total > MAX_ARCHIVE_BYTES:
                warnings.append(f"refused {name!r} in {archive.name}: larger than the grader accepts")
                continue
            target = into.joinpath(*parts)
            if not target.resolve().is_relative_to(into.resolve()):
                warnings.append(f"refused {name!r} in {archive.name}: it points outside the archive")
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                left = MAX_MEMBER_BYTES
                while chunk := src.read(1 << 20):  # the header's size can lie; count what comes out
                    left -= len(chunk)
                    if left < 0:
                        break
                    dst.write(chunk)
            if left < 0:
                target.unlink()
                warnings.append(f"refused {name!r} in {archive.name}: larger than the grader accepts")
    return warnings


def _layout_root(root: Path, chapter: str, notebook: str) -> Path:
    """Descend through wrapper folders (a zip of `class/`, nbgrader's `submitted/`)."""
    while True:
        if (root / "submitted").is_dir():
            return root / "submitted"
        entries = [p for p in root.iterdir() if p.name not in _SKIP and not p.name.startswith(".")]
        if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink() \
                and not (entries[0] / notebook).exists() and not (entries[0] / chapter).is_dir():
            root = entries[0]
            continue
        return root


def collect(folder: Path, chapter: str, notebook: str) -> list[Submission]:
    """One Submission per student folder, sorted by student."""
    root = _layout_root(folder, chapter, notebook)
    found = []
    for student_dir in sorted(p for p in root.iterdir() if p.is_dir() and p.name not in _SKIP
                              and not p.name.startswith(".")):
        student = student_dir.name
        if student_dir.is_symlink():
            found.append(Submission(student, None, f"{student}/ is a link, not a folder: not graded"))
            continue
        candidates = [student_dir / notebook, student_dir / chapter / notebook]
        path = next((c for c in candidates if c.exists() or c.is_symlink()), None)
        if path is None:
            others = sorted(p.relative_to(student_dir).as_posix() for p in student_dir.rglob("*.ipynb")
                            if ".ipynb_checkpoints" not in p.parts)
            seen = f" (found {', '.join(others[:5])})" if others else ""
            found.append(Submission(student, None, f"no {notebook} in the student's folder{seen}: "
                                                   f"submit {notebook}, the notebook from release/{chapter}/"))
            continue
        if path.is_symlink() or not path.is_file():
            found.append(Submission(student, None, f"{path.relative_to(root)} is a link or not a file: not graded"))
            continue
        stamp = path.parent / "timestamp.txt"
        timestamp = stamp.read_text().strip() if stamp.is_file() and not stamp.is_symlink() else None
        found.append(Submission(student, path, None, timestamp))
    return found
