"""Where the chapters are: one folder per chapter in source/, named NN_name,
whose text form NN_name.py is the one place its prose, solutions and tests live."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CHAPTER_NAME", "REPO", "Chapter", "ChapterNotFound", "discover", "find"]

CHAPTER_NAME = re.compile(r"^\d\d_[a-z0-9_]+$")
REPO = Path(__file__).resolve().parent.parent


class ChapterNotFound(LookupError):
    """No chapter of that id; the message names the ones there are (the command exits 1)."""


@dataclass(frozen=True)
class Chapter:
    id: str
    source_dir: Path

    @property
    def text_form(self) -> Path:
        """source/NN_name/NN_name.py, the chapter's single source of truth."""
        return self.source_dir / f"{self.id}.py"

    @property
    def notebook(self) -> Path:
        """source/NN_name/NN_name.ipynb, the nbgrader source notebook the build derives."""
        return self.source_dir / f"{self.id}.ipynb"

    @property
    def number(self) -> int:
        """The chapter's number (NN)."""
        return int(self.id[:2])


def discover(source: Path) -> list[Chapter]:
    """Chapters in order; a folder without its NN_name.py is not a chapter."""
    if not source.is_dir():
        return []
    return [Chapter(d.name, d) for d in sorted(source.iterdir())
            if d.is_dir() and CHAPTER_NAME.match(d.name) and (d / f"{d.name}.py").is_file()]


def find(source: Path, chapter_id: str) -> Chapter:
    """The chapter `chapter_id` of `source`; ChapterNotFound if there is none."""
    for ch in discover(source):
        if ch.id == chapter_id:
            return ch
    known = ", ".join(c.id for c in discover(source)) or "none"
    raise ChapterNotFound(f"no chapter {chapter_id!r} in {source}. Chapters: {known}.")
