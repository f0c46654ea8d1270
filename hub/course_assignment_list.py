"""The students' Assignment List says which submission is late and which one counts.

A Jupyter server extension of the students' servers: hub/start.py enables it, hub/runtime.py
puts this file in the servers' runtime as the module `course_assignment_list`.

nbgrader's Assignment List shows each submission by its time only. The due dates live in the
instructor's gradebook, and the late policies in the hub's state, neither of which a student
can read: hub/classroom.py publishes both in HUB_STATE/config/student/course-due.json
(`publish_due_dates`, whenever a due date or a policy is set, a chapter graded or the grader
page shown). This extension reads that file each time the list is asked for, and writes after
each submission's time whether it was on time or how late, and, where a student submitted
more than once or late, whether it is the one that counts under the chapter's late policy:
    2026-12-01 18:12:03 UTC  (late by 1 h 12 min: due 2026-12-01 17:00 UTC; not graded: your
    submission of 2026-12-01 16:40:00 UTC, the latest on time, counts)
The rule is hub/classroom.py's `_pick`: under `latest` the latest submission counts; under
`on-time` the latest before the due date counts when the latest is late and one was on time.
"""
from __future__ import annotations

import datetime
import functools
import json
from pathlib import Path

DUE_FILE = "course-due.json"


def duration(seconds: float) -> str:
    """1 d 2 h 5 min, as hub/classroom.py writes it."""
    minutes = int(seconds // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{minutes} min"]
    return " ".join(p for p in parts if p) if seconds >= 60 else f"{int(seconds)} s"


def counted(stamps: list[datetime.datetime], due: datetime.datetime | None, policy: str) -> int:
    """The index of the submission that counts among `stamps` (in time order)."""
    late = [due is not None and t > due for t in stamps]
    if policy == "on-time" and late[-1] and not all(late):
        return max(i for i, was_late in enumerate(late) if not was_late)
    return len(stamps) - 1


def notes(stamps: list[datetime.datetime], texts: list[str], due: datetime.datetime | None,
          policy: str) -> list[str]:
    """What to write after each submission's time (`texts`: the times as shown), in time order."""
    if not stamps:
        return []
    counts = counted(stamps, due, policy)
    said = []
    for i, stamp in enumerate(stamps):
        parts = []
        if due is not None:
            when = f"due {due:%Y-%m-%d %H:%M} UTC"
            parts.append(f"late by {duration((stamp - due).total_seconds())}: {when}" if stamp > due
                         else f"on time: {when}")
        if len(stamps) > 1 or (due is not None and stamp > due):
            if i == counts:
                parts.append("this one counts" + (", graded as it is" if due is not None and stamp > due else ""))
            elif policy == "on-time" and counts < i:
                parts.append(f"not graded: your submission of {texts[counts]}, the latest on time, counts")
            else:
                parts.append(f"not graded: your submission of {texts[counts]} counts")
        said.append("; ".join(parts))
    return said


def annotate(assignments: list[dict], dates: dict) -> list[dict]:
    """nbgrader's list of submitted assignments with each submission's time followed by its note."""
    from nbgrader.utils import parse_utc
    for assignment in assignments:
        info = dates.get(assignment.get("assignment_id")) or {}
        due = datetime.datetime.fromisoformat(info["due"]).astimezone(datetime.timezone.utc).replace(tzinfo=None) \
            if info.get("due") else None
        submissions = sorted(assignment.get("submissions") or [], key=lambda x: x["timestamp"])
        texts = [s["timestamp"] for s in submissions]
        for submission, note in zip(submissions, notes([parse_utc(t) for t in texts], texts, due,
                                                       info.get("policy", "latest"))):
            if note:
                submission["timestamp"] = f"{submission['timestamp']}  ({note})"
    return assignments


def read_dates(folders) -> dict:
    """The published due dates and policies: the first course-due.json among `folders` (the server's
    Jupyter config path), {} when there is none or it cannot be read."""
    for folder in folders:
        try:
            return json.loads((Path(folder) / DUE_FILE).read_text())
        except (OSError, ValueError):
            continue
    return {}


def patch(assignment_list, dates) -> None:
    """nbgrader's AssignmentList.list_submitted_assignments annotated with `dates()`'s due dates."""
    listed = assignment_list.list_submitted_assignments
    if getattr(listed, "course_assignment_list", False):
        return

    @functools.wraps(listed)
    def list_submitted_assignments(self, course_id=None):
        answer = listed(self, course_id=course_id)
        if answer.get("success"):
            try:
                annotate(answer["value"], dates())
            except Exception:  # noqa: BLE001  (the list as nbgrader gives it beats no list)
                self.log.exception("course_assignment_list: could not annotate the submissions")
        return answer
    list_submitted_assignments.course_assignment_list = True
    assignment_list.list_submitted_assignments = list_submitted_assignments


def _jupyter_server_extension_points():
    return [{"module": "course_assignment_list"}]


def _load_jupyter_server_extension(serverapp) -> None:
    from jupyter_core.paths import jupyter_config_path
    from nbgrader.server_extensions.assignment_list.handlers import AssignmentList
    patch(AssignmentList, lambda: read_dates(jupyter_config_path()))
    serverapp.log.info("course_assignment_list: submissions say whether they are late and which counts")
