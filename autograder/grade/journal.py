"""The record that lets a grading run resume or grade only what changed: OUT/.resume/CHAPTER/.

Every result is written, as it arrives, to OUT/.resume/CHAPTER/STUDENT.json (a
temporary file renamed into place) with the digest of what was graded (the
notebook's bytes, its timestamp) and the grader's key (the chapter's files, the
grader's code, the limits: grade/version.py's `grader_key`). `--resume` and
`--only-changed` keep the recorded results whose digest and key still match.
The local pool and a Dask cluster (grade/distributed.py) share it; this module
imports no Dask, so that a local run does not pay for importing it.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict
from pathlib import Path

from autograder.grade.files import write_atomic

RESUME = ".resume"


# -- the record of results, for --resume ----------------------------------------------------------

def _result_to_json(result) -> dict:
    return asdict(result)


def _result_from_json(data: dict):
    from autograder.grade.grader import Result
    from course.verdicts import Status, Verdict
    data = dict(data)
    # statuses come back as the words JSON holds; a resumed result carries the same Status as a fresh one
    data["verdicts"] = [Verdict(**{**v, "status": Status(v["status"])}) for v in data.get("verdicts", [])]
    return Result(**data)


def submission_digest(submission) -> str:
    """Of what is graded: the notebook's bytes, or the reason there is none."""
    h = hashlib.sha256(submission.student.encode() + b"\0")
    if submission.notebook is None:
        h.update(b"problem\0" + (submission.problem or "").encode())
    else:
        try:
            h.update(b"notebook\0" + Path(submission.notebook).read_bytes())
        except OSError as e:
            h.update(b"unreadable\0" + str(e).encode())
    h.update(b"\0" + (submission.timestamp or "").encode())
    return h.hexdigest()


class Journal:
    """OUT/.resume/CHAPTER/: one file per graded student, written as each result arrives."""

    def __init__(self, out: Path, chapter_id: str, key: str):
        self.folder = Path(out) / RESUME / chapter_id
        self.key = key
        self.digests: dict[str, str] = {}

    def _path(self, student: str) -> Path:
        return self.folder / f"{student}.json"

    @property
    def generated(self) -> Path:
        """Where the graders of this key keep the course folder nbgrader generates for them
        (grader.py's keep_generated): the first grader of a run, or of the run before, makes it."""
        from importlib.metadata import version
        return self.folder / f".generated-{self.key}-nbgrader-{version('nbgrader')}"

    def start(self, submissions, resume: bool) -> dict:
        """{student: Result} already graded (with --resume), and the record made ready."""
        self.digests = {s.student: submission_digest(s) for s in submissions}
        if not resume:
            shutil.rmtree(self.folder, ignore_errors=True)
            return {}
        for old in self.folder.glob(".generated-*"):  # another course version's, or a grader's half-made copy
            if old != self.generated:
                shutil.rmtree(old, ignore_errors=True)
        kept = {}
        for s in submissions:
            path = self._path(s.student)
            try:
                entry = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if entry.get("key") == self.key and entry.get("digest") == self.digests[s.student]:
                try:
                    kept[s.student] = _result_from_json(entry["result"])
                except (KeyError, TypeError):
                    continue
        return kept

    def add(self, result) -> None:
        """Record one result as it arrives (written atomically)."""
        entry = {"key": self.key, "digest": self.digests.get(result.student), "result": _result_to_json(result)}
        write_atomic(self._path(result.student), json.dumps(entry) + "\n")
