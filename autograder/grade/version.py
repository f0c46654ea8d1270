"""What a grader must match: the course version (the chapter's files, the earlier chapters' text forms, the
grader's code) and the limits. The client and every worker compute it (grade/journal.py, grade/distributed.py),
and it names the course folder a grader generates (grade/grader.py's machine_generated)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

__all__ = ["course_version", "grader_digest", "grader_key"]


def _digest_files(h, root: Path, files) -> None:
    for path in sorted(files):
        rel = path.relative_to(root).as_posix()
        h.update(rel.encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())


def _tree(folder: Path):
    if not folder.is_dir():
        return []
    return [p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
            and ".ipynb_checkpoints" not in p.parts and p.suffix not in (".pyc", ".tmp")]


def course_version(repo: Path, chapter_id: str) -> dict[str, str]:
    """{"chapter": sha256 of source/CH, release/CH and the earlier chapters' text forms (the
    reference package is generated from them), "grader": sha256 of the course and autograder
    packages' code}. Two checkouts that agree on both grade alike."""
    repo = Path(repo).resolve()
    h = hashlib.sha256(chapter_id.encode() + b"\0")
    earlier = [d / f"{d.name}.py" for d in (repo / "source").iterdir()
               if d.is_dir() and d.name[:2].isdigit() and d.name < chapter_id and (d / f"{d.name}.py").is_file()]
    _digest_files(h, repo, _tree(repo / "source" / chapter_id) + _tree(repo / "release" / chapter_id) + earlier)
    return {"chapter": h.hexdigest(), "grader": grader_digest()}


def grader_digest() -> str:
    """sha256 of the course and autograder packages' code, as it is on disk now."""
    g = hashlib.sha256()
    for package in ("course", "autograder"):
        folder = Path(__import__(package).__file__).resolve().parent
        _digest_files(g, folder.parent, [p for p in _tree(folder) if p.suffix in (".py", ".h", ".cpp", ".cu")])
    return g.hexdigest()


def _limits_key(limits) -> str:
    return hashlib.sha256(json.dumps(asdict(limits), sort_keys=True).encode()).hexdigest()


def grader_key(chapter_id: str, version: dict, limits) -> str:
    """What a worker's grader must match: the chapter, its version and the limits."""
    text = json.dumps({"chapter": chapter_id, "version": version, "limits": _limits_key(limits)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]
