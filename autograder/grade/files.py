"""Writing the grader's files: each through a temporary file renamed into place, so that an
interrupted run never leaves a half-written grades.csv, result, feedback page, report or journal.

A leaf module (it imports nothing of the grader's): the pipeline, the report and the resume
journal all write through it, without importing each other."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: Path, text: str) -> None:
    """`text` at `path` through a temporary file renamed into place; the temporary file is removed
    whatever stops the write (Ctrl-C included)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
