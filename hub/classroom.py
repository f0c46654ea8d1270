"""The instructor's side of the loop on the course hub, after the chapter is released.

    python hub/classroom.py grade CHAPTER [--workers N] [--all]   collect, then grade what changed (--all: everyone)
    python hub/classroom.py release-feedback CHAPTER [--yes]     hand each graded student their feedback page
    python hub/classroom.py status                               chapters released, submitted, graded
    python hub/classroom.py due CHAPTER "YYYY-MM-DD HH:MM" [--tz UTC] [--late-policy latest|on-time]
                                                                 set the due date (formgrader can too)

Run as root, where `make hub` ran (HUB_STATE or --state says which hub). The
grader page of the hub (/services/grader/, the instructor's alone) runs the same
commands.

grade:   `nbgrader collect --update`, as the instructor, takes each student's
         latest submission into ~INSTRUCTOR/course/submitted/ (every earlier one
         stays in the exchange's inbound); `autograder grade` grades them in its
         sandbox into the course's gradebook (formgrader sees them) and
         HUB_STATE/grading/CHAPTER/; each page of feedback (no hidden test in it)
         is staged in the course's feedback/ for nbgrader's release_feedback. Only
         submissions new or changed since the last grading are graded (by their
         content, the course version and the limits); --all grades everyone again.
         A submission after the due date is marked late with how late, and not
         penalised (nbgrader's default). The late policy of a chapter (`due
         --late-policy`) says which submission counts: the latest (default), or
         the latest on time, the later ones kept and noted. A student on the list
         who never submitted is in the class's table with 0 and gets no feedback.
release-feedback: refuses while answers wait to be graded by hand in formgrader
         (names them), unless --yes; their pages say "not graded yet".
"""
from __future__ import annotations

import argparse
import datetime
import fnmatch
import importlib.util
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtime  # noqa: E402
import settings as hub_settings  # noqa: E402


class ClassroomError(Exception):
    """Bad input or a state the command cannot work from; the message says what to do."""


@dataclass
class Inbound:
    student: str
    chapter: str
    timestamp: str
    path: Path


def as_user(settings, name: str, argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `argv` as the class's account `name`, in the environment its hub server has."""
    entry = pwd.getpwnam(name)
    role = settings.roles.get(name, "student")
    env = {"HOME": entry.pw_dir, "USER": name, "LOGNAME": name, "LANG": "C.UTF-8",
           "JUPYTER_CONFIG_PATH": str(settings.state / "config" / role), **runtime.environment(settings.runtime)}
    return subprocess.run(["runuser", "-u", name, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()], *argv],
                          cwd=cwd or entry.pw_dir, capture_output=True, text=True)


def course_folder(settings) -> Path:
    return settings.course_dir(Path(pwd.getpwnam(settings.instructor).pw_dir))


def chapters(settings) -> list[str]:
    return sorted(p.name for p in (settings.repo / "release").iterdir() if p.is_dir())


def released(settings) -> list[str]:
    outbound = settings.exchange / settings.course_id / "outbound"
    return sorted(p.name for p in outbound.iterdir() if p.is_dir()) if outbound.is_dir() else []


def inbound(settings) -> list[Inbound]:
    """Every submission in the exchange (root reads the instructor's inbound), oldest first."""
    folder = settings.exchange / settings.course_id / "inbound"
    found = []
    for entry in folder.iterdir() if folder.is_dir() else []:
        parts = entry.name.split("+")
        if len(parts) >= 3 and entry.is_dir():
            found.append(Inbound(parts[0], parts[1], parts[2], entry))
    return sorted(found, key=lambda i: i.timestamp)


def _entry_problem(entry: Path) -> str | None:
    """Why an entry of the exchange's inbound cannot be its named student's own submission, or None.
    Everyone may write into the inbound (nbgrader's design): `nbgrader submit --student NAME` files a
    submission under any name, and a link (to the instructor's source/, which `nbgrader collect` reads as the
    instructor) or a FIFO (which blocks the copy) can be put there by hand. The entry is looked at with lstat:
    a link is never followed."""
    named = entry.name.rsplit("+", 3)[0]  # nbgrader collect's own reading of the name
    info = entry.lstat()
    if not stat.S_ISDIR(info.st_mode):
        return f"it is not a folder but {'a link' if stat.S_ISLNK(info.st_mode) else 'a special file'}"
    try:
        owner = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        owner = f"uid {info.st_uid}"
    if owner != named:
        return f"it was made by {owner}'s account in the name of {named}"
    for root, dirs, files in os.walk(entry):
        for name in dirs + files:
            mode = os.lstat(os.path.join(root, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                kind = "a link" if stat.S_ISLNK(mode) else "a special file"
                return f"it holds {kind}, {os.path.relpath(os.path.join(root, name), entry)}"
    return None


def _stamps(entry: Path) -> list[tuple]:
    """What changes whenever anything in `entry` changes: (path, inode, ctime) of it and all it holds.
    ctime is the kernel's: its owner can set mtime, never ctime back."""
    found = []
    for root, dirs, files in os.walk(entry):
        for name in ["", *dirs, *files]:
            info = os.lstat(os.path.join(root, name))
            found.append((os.path.join(root, name), info.st_ino, info.st_ctime_ns))
    return sorted(found)


def refuse_forged(settings, chapter: str, out=print) -> dict[str, list[tuple]]:
    """Move every inbound entry of `chapter` that is not its named student's own out of the exchange (into
    HUB_STATE/grading/refused/, root's alone), saying why, before `nbgrader collect` runs; returns the
    stamps of the entries kept, for `changed_while_collected`."""
    folder = settings.exchange / settings.course_id / "inbound"
    kept = {}
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        if not fnmatch.fnmatchcase(entry.name, f"*+{chapter}+*"):  # what nbgrader collect takes
            continue
        stamps = _stamps(entry) if entry.is_dir() and not entry.is_symlink() else []  # before the check
        why = _entry_problem(entry)
        if why is None:
            kept[entry.name] = stamps
            continue
        target = settings.state / "grading" / "refused" / chapter / entry.name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(settings.state / "grading", 0o700)
        shutil.rmtree(target, ignore_errors=True)
        shutil.move(str(entry), str(target))  # a link is moved as a link
        out(f"warning: refused {entry.name} from the exchange's inbound: {why}. Not collected nor graded; "
            f"moved to grading/refused/{chapter}/{entry.name} in the hub's state")
    return kept


def changed_while_collected(settings, chapter: str, kept: dict[str, list[tuple]], out=print) -> None:
    """An entry that changed between the check and the end of `nbgrader collect` (a link swapped in while the
    instructor's account copied it): its student's collected copy is not graded."""
    folder = settings.exchange / settings.course_id / "inbound"
    now = [p.name for p in folder.iterdir() if fnmatch.fnmatchcase(p.name, f"*+{chapter}+*")]
    for name in sorted(set(kept) | set(now)):
        entry = folder / name
        if name in kept and not entry.is_symlink() and entry.is_dir() and _stamps(entry) == kept[name]:
            continue
        student = name.rsplit("+", 3)[0]  # changed, gone or new (not checked): collect may have copied it
        shutil.rmtree(course_folder(settings) / "submitted" / student / chapter, ignore_errors=True)
        out(f"warning: {name} in the exchange's inbound changed or arrived while it was being collected; "
            f"{student}'s submission is not graded this time: grade again")


def _check_chapter(settings, chapter: str) -> None:
    if chapter not in chapters(settings):
        raise ClassroomError(f"no chapter {chapter!r} in this course; its chapters: {', '.join(chapters(settings))}.")
    if chapter not in released(settings):
        raise ClassroomError(f"{chapter} has not been released to the class (released: "
                             f"{', '.join(released(settings)) or 'nothing yet'}). Release it first: formgrader's "
                             f"Manage Assignments, or `nbgrader release_assignment {chapter}` in the instructor's "
                             f"terminal.")


def _gradebook_url(settings) -> str:
    return f"sqlite:///{course_folder(settings) / 'gradebook.db'}"


def _chown_course(settings) -> None:
    entry = pwd.getpwnam(settings.instructor)
    for root, dirs, files in os.walk(course_folder(settings)):
        os.chown(root, entry.pw_uid, entry.pw_gid)
        for name in files:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid, follow_symlinks=False)


def _duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{minutes} min"]
    return " ".join(p for p in parts if p) if seconds >= 60 else f"{int(seconds)} s"


def _parse_stamp(text: str) -> datetime.datetime:
    from nbgrader.utils import parse_utc
    return parse_utc(text)


def _due_date(settings, chapter: str):
    from nbgrader.api import Gradebook, MissingEntry
    path = course_folder(settings) / "gradebook.db"
    if not path.exists():
        return None
    with Gradebook(_gradebook_url(settings)) as gb:
        try:
            return gb.find_assignment(chapter).duedate
        except MissingEntry:
            return None


def _late_note(html: str, note: str) -> str:
    import html as html_mod
    paragraph = f"<p class='course-late'><strong>{html_mod.escape(note)}</strong></p>"
    at = html.find("</h1>")
    return html[:at + 5] + "\n" + paragraph + html[at + 5:] if at >= 0 else paragraph + html


POLICIES = {"latest": "the latest submission counts, on time or late",
            "on-time": "the latest submission before the due date counts; later ones are kept, not graded"}


@dataclass
class Picked:
    """The submission of one student that this grading grades, and why that one."""
    folder: Path
    stamp: str
    count: int  # the student's submissions of the chapter in the exchange
    late_by: str = ""
    note: str = ""  # which submission counts, when there is a choice


def grade(settings, chapter: str, workers: int | None = None, out=print, regrade_all: bool = False) -> int:
    """Collect, pick each student's submission (the late policy), grade what changed, stage feedback."""
    _check_chapter(settings, chapter)
    _check_inbound(settings, chapter, out)
    course = course_folder(settings)
    _collect(settings, chapter, course, out)
    due, policy = _due_date(settings, chapter), late_policy(settings, chapter)
    publish_due_dates(settings)  # one set in formgrader since: the students' Assignment List shows it from now on
    picked = _pick(settings, chapter, course, due, policy)
    work = settings.state / "grading" / chapter
    _stage_intake(settings, work, chapter, picked)
    _write_roster(settings, work, picked, due, policy)
    said = _run_autograder(settings, chapter, work, workers, regrade_all, out)
    rows = [_row(settings, chapter, work, name, picked.get(name)) for name in settings.students]
    for row in rows:
        if row["status"] != "never submitted":
            _stage_feedback(course, work, chapter, row, picked[row["student"]], due)
    _add_students(settings)
    _chown_course(settings)
    _write_class_table(settings, chapter, work, rows, due, policy, said)
    _tell_class(settings, chapter, rows, due, policy, out)
    return 0


def _check_inbound(settings, chapter: str, out) -> None:
    mine = [i for i in inbound(settings) if i.chapter == chapter]
    others = sorted({i.chapter for i in inbound(settings) if i.chapter != chapter})
    if not mine:
        elsewhere = f" (the exchange holds submissions of {', '.join(others)})" if others else ""
        raise ClassroomError(f"no submissions of {chapter} in the exchange yet{elsewhere}: nothing was collected "
                             f"and nothing graded. Students submit from the Assignment List.")
    for name in sorted({i.student for i in mine} - set(settings.students)):
        out(f"warning: {name} submitted {chapter} but is not a student of the class list; not graded")
    for name in sorted({i.student for i in inbound(settings) if i.chapter not in chapters(settings)}):
        known = chapters(settings)
        wrong = sorted({i.chapter for i in inbound(settings) if i.student == name and i.chapter not in known})
        out(f"warning: {name} submitted {', '.join(wrong)}, which is no chapter of this course; ignored")



def _collect(settings, chapter: str, course: Path, out) -> None:
    kept = refuse_forged(settings, chapter, out)  # entries not their student's own leave the inbound first
    collected = as_user(settings, settings.instructor, ["nbgrader", "collect", "--update", chapter], cwd=course)
    changed_while_collected(settings, chapter, kept, out)
    for line in collected.stdout.splitlines() + collected.stderr.splitlines():
        if "WARNING" in line or "ERROR" in line or "cheating" in line:
            out("nbgrader collect: " + plain(settings, line.strip()))
    if collected.returncode != 0:
        raise ClassroomError(f"nbgrader collect {chapter} failed:\n{plain(settings, collected.stderr.strip()[-2000:])}")


def _pick(settings, chapter: str, course: Path, due, policy: str) -> dict[str, Picked]:
    """{student: the submission to grade}. nbgrader's collect took the latest; under the on-time policy a
    student whose latest is late and who submitted before the due date gets that one instead (copied from
    the exchange into submitted/, so that formgrader shows the same)."""
    picked = {}
    for name in settings.students:
        folder = course / "submitted" / name / chapter
        if not folder.is_dir():
            continue
        mine = [i for i in inbound(settings) if i.chapter == chapter and i.student == name]
        late = [i for i in mine if due is not None and _parse_stamp(i.timestamp) > due]
        on_time = [i for i in mine if i not in late]
        note = f"{len(mine)} submissions: the latest counts" if len(mine) > 1 else ""
        if policy == "on-time" and late and on_time and late[-1] is mine[-1]:
            shutil.rmtree(folder)
            shutil.copytree(on_time[-1].path, folder, symlinks=True)
            note = (f"{len(mine)} submissions: the latest before the due date ({on_time[-1].timestamp}) counts; "
                    f"{len(late)} after it kept, not graded (late policy: on time)")
        stamp = (folder / "timestamp.txt").read_text().strip() if (folder / "timestamp.txt").is_file() else ""
        late_by = ""
        if due is not None and stamp:
            seconds = (_parse_stamp(stamp) - due).total_seconds()
            late_by = _duration(seconds) if seconds > 0 else ""
        picked[name] = Picked(folder, stamp, max(1, len(mine)), late_by, note)
    return picked


def _stage_intake(settings, work: Path, chapter: str, picked: dict[str, Picked]) -> None:
    intake = work / "intake" / "submitted"
    shutil.rmtree(work / "intake", ignore_errors=True)
    for name, p in picked.items():
        shutil.copytree(p.folder, intake / name / chapter, symlinks=True)
    os.chmod(settings.state / "grading", 0o700)


def _write_roster(settings, work: Path, picked: dict[str, Picked], due, policy: str) -> None:
    """work/out/roster.json: who was late and who never submitted, for the class report (grade/report.py)."""
    roster = {"due": f"{due:%Y-%m-%d %H:%M} UTC" if due else "", "policy": policy,
              "never_submitted": [n for n in settings.students if n not in picked],
              "students": {n: {"late_by": p.late_by, "submitted": p.stamp, "submissions": p.count, "note": p.note}
                           for n, p in picked.items()}}
    (work / "out").mkdir(parents=True, exist_ok=True)
    (work / "out" / "roster.json").write_text(json.dumps(roster, indent=1) + "\n")


def _run_autograder(settings, chapter: str, work: Path, workers: int | None, regrade_all: bool, out) -> str:
    """`autograder grade` into work/out, incrementally unless `regrade_all`; its lines relayed without the
    server's paths (the grader page shows them). Returns its line on what was graded and what kept."""
    argv = [str(settings.repo / ".venv" / "bin" / "autograder"), "grade", chapter, str(work / "intake"),
            "--out", str(work / "out"), "--db", _gradebook_url(settings), "--repo", str(settings.repo)]
    argv += ["--workers", str(workers)] if workers else []
    argv += [] if regrade_all else ["--only-changed"]
    out(f"collected the latest submissions; grading {'everyone again' if regrade_all else 'what changed'} "
        f"with autograder grade ...")
    said = ""
    # on the hub's standing graders (hub/start.py starts them) when they run; else it starts its own
    env = dict(os.environ, AUTOGRADER_GRADERS=str(settings.state / "graders"))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    for line in proc.stdout:
        line = plain(settings, line.rstrip())
        said = line if " new or changed, " in line else said
        out("  " + line)
    if proc.wait() != 0:
        _chown_course(settings)
        raise ClassroomError(f"autograder grade {chapter} failed (exit {proc.returncode}); see its output above. "
                             f"Nothing was staged for feedback.")
    return said


def plain(settings, text: str) -> str:
    """`text` with the server's folders named as the instructor knows them, not by their absolute paths."""
    course = course_folder(settings)
    for path, name in ((settings.state / "grading", "grading"), (course, "~/course"),
                       (settings.state, "the hub's state"), (settings.repo, "the course repository"),
                       (settings.exchange, "the exchange")):
        text = text.replace(str(path), name)
    return text


def _row(settings, chapter: str, work: Path, name: str, p: Picked | None) -> dict:
    """One student's line of the class table: status, score, each exercise, lateness, notes."""
    if p is None:
        return {"student": name, "status": "never submitted", "score": 0, "max_score": "", "submitted": "",
                "late_by": "", "submissions": 0, "notes": [], "exercises": {}, "folder": name}
    result_file = work / "out" / "results" / f"{name}.json"
    result = json.loads(result_file.read_text()) if result_file.is_file() else {}
    exercises = {v["exercise"]: {"status": v["status"], "points": v.get("points", 0),
                                 "max_points": v.get("max_points", 0)} for v in result.get("exercises", [])}
    notes = ([p.note] if p.note else []) + [plain(settings, n) for n in result.get("notes", [])]
    return {"student": name, "status": "late" if p.late_by else "graded", "score": result.get("score", 0),
            "max_score": result.get("max_score", ""), "submitted": p.stamp, "late_by": p.late_by,
            "submissions": p.count, "notes": notes, "exercises": exercises,
            "folder": result.get("folder") or name}


def _stage_feedback(course: Path, work: Path, chapter: str, row: dict, p: Picked, due) -> None:
    """The student's page into the course's feedback/ (for nbgrader's release_feedback), with the lateness
    and the choice of submission said at its top; the executed notebook for formgrader."""
    name = row["student"]
    page = work / "out" / "feedback" / name / f"{chapter}.html"
    if page.is_file():
        html = page.read_text()
        if p.late_by:
            html = _late_note(html, f"Submitted {p.stamp}, {p.late_by} after the due date "
                                    f"({due:%Y-%m-%d %H:%M} UTC): graded as it is, marked late.")
        if p.note and "late policy" in p.note:
            html = _late_note(html, f"This grade is of your submission of {p.stamp}, the latest before the due "
                                    f"date; what you submitted after it is kept but not graded.")
        target = course / "feedback" / name / chapter
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        (target / f"{chapter}.html").write_text(html)
        for file in ("timestamp.txt", "submission_secret.txt"):
            if (p.folder / file).is_file():
                shutil.copyfile(p.folder / file, target / file)
    autograded = work / "out" / "autograded" / name / chapter
    if autograded.is_dir():
        shutil.copytree(autograded, course / "autograded" / name / chapter, dirs_exist_ok=True)


def _write_class_table(settings, chapter: str, work: Path, rows: list[dict], due, policy: str, said: str) -> None:
    """class.csv (for a spreadsheet) and class.json (the grader page's table), with what this run graded."""
    fields = ["student", "status", "score", "max_score", "submitted", "late_by", "submissions"]
    (work / "class.csv").write_text(_csv_cells().csv_text([[r.get(f) for f in fields] for r in rows], fields))
    stamps = [i.timestamp for i in inbound(settings) if i.chapter == chapter]
    table = {"chapter": chapter, "graded_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
             "newest_submission": max(stamps, default=""), "inbound": len(stamps),
             "due": f"{due:%Y-%m-%d %H:%M} UTC" if due else "", "policy": policy, "run": said, "rows": rows}
    tmp = work / "class.json.tmp"
    tmp.write_text(json.dumps(table, indent=1) + "\n")
    os.replace(tmp, work / "class.json")


def _tell_class(settings, chapter: str, rows: list[dict], due, policy: str, out) -> None:
    submitted = [r for r in rows if r["status"] != "never submitted"]
    out("")
    out(f"{chapter}: {len(submitted)} of {len(settings.students)} students submitted"
        + (f"; due {due:%Y-%m-%d %H:%M} UTC, late policy: {policy}" if due else "; no due date set"))
    for r in rows:
        if r["status"] == "never submitted":
            out(f"  {r['student']:<20} never submitted: 0 points, no feedback to release")
            continue
        line = f"  {r['student']:<20} {r['score']:g}/{r['max_score']:g}"
        if r["submissions"] > 1 and not any("late policy" in n for n in r["notes"]):
            line += f"  ({r['submissions']} submissions: the latest counts, the earlier ones stay in the exchange)"
        if r["late_by"]:
            line += f"  late by {r['late_by']} (no penalty)"
        for note in r["notes"]:
            if not note.startswith(f"{r['submissions']} submissions: the latest counts"):
                line += f"\n  {'':<20}   note: {note}"
        out(line)
    out(f"feedback staged for {len(submitted)} student(s) in ~/course/feedback/; release it with "
        f"`hub/classroom.py release-feedback {chapter}` or the grader page.")


def late_policy(settings, chapter: str) -> str:
    """The chapter's late policy ("latest" unless `due --late-policy on-time` chose otherwise)."""
    try:
        return json.loads((settings.state / "late-policy.json").read_text()).get(chapter, "latest")
    except (OSError, ValueError):
        return "latest"


def _set_late_policy(settings, chapter: str, policy: str) -> None:
    path = settings.state / "late-policy.json"
    try:
        chosen = json.loads(path.read_text())
    except (OSError, ValueError):
        chosen = {}
    chosen[chapter] = policy
    path.write_text(json.dumps(chosen, indent=1) + "\n")
    publish_due_dates(settings)


def publish_due_dates(settings) -> None:
    """HUB_STATE/config/student/course-due.json (readable by the class): each chapter's due date (UTC) and
    late policy, from the gradebook and the hub's state, which students cannot read. The students'
    Assignment List (hub/course_assignment_list.py) says with it which submission is late and which
    counts. Called whenever either may have changed: `due`, a policy set, a grading, the grader page
    shown (formgrader sets due dates too), the hub's start."""
    from nbgrader.api import Gradebook
    from course_assignment_list import DUE_FILE
    folder = settings.state / "config" / "student"
    if not folder.is_dir():
        return
    dates = {}
    if (course_folder(settings) / "gradebook.db").exists():
        with Gradebook(_gradebook_url(settings)) as gb:
            for assignment in gb.assignments:
                if assignment.duedate is not None:
                    due = assignment.duedate.replace(tzinfo=datetime.timezone.utc)
                    dates[assignment.name] = {"due": due.isoformat(), "policy": late_policy(settings, assignment.name)}
    text = json.dumps(dates, indent=1, sort_keys=True) + "\n"
    path = folder / DUE_FILE
    if path.is_file() and path.read_text() == text:
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _csv_cells():
    """autograder/grade/csv_cells.py, the course's one CSV writer (no cell a spreadsheet reads as a formula),
    loaded by its path: this script may run on the hub's Python, which need not have the repository on its
    path, and the module needs only the standard library."""
    path = Path(__file__).resolve().parents[1] / "autograder" / "grade" / "csv_cells.py"
    spec = importlib.util.spec_from_file_location("course_csv_cells", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _add_students(settings) -> None:
    """Every student of the list in the gradebook: nbgrader export and formgrader show who never submitted."""
    from nbgrader.api import Gradebook
    with Gradebook(_gradebook_url(settings)) as gb:
        for name in settings.students:
            gb.update_or_create_student(name)


def hand_grading_pending(settings, chapter: str) -> dict[str, list[str]]:
    """{student: the answers of `chapter` still to be graded by hand in formgrader}, from the gradebook."""
    from nbgrader.api import Gradebook, MissingEntry
    if not (course_folder(settings) / "gradebook.db").exists():
        return {}
    pending = {}
    with Gradebook(_gradebook_url(settings)) as gb:
        try:
            submissions = gb.find_assignment(chapter).submissions
        except MissingEntry:
            return {}
        for submission in submissions:
            names = sorted(g.name for nb in submission.notebooks for g in nb.grades
                           if g.needs_manual_grade and g.manual_score is None)
            if names:
                pending[submission.student.id] = names
    return pending


def release_feedback(settings, chapter: str, out=print, confirmed: bool = False) -> int:
    _check_chapter(settings, chapter)
    course = course_folder(settings)
    staged = sorted(p.parent.parent.name for p in (course / "feedback").glob(f"*/{chapter}/{chapter}.html"))
    if not staged:
        raise ClassroomError(f"{chapter} has no graded feedback to release: grade it first "
                             f"(`hub/classroom.py grade {chapter}` or the grader page).")
    pending = {k: v for k, v in hand_grading_pending(settings, chapter).items() if k in staged}
    if pending and not confirmed:
        raise ClassroomError(
            f"{len(pending)} student(s) still have answers to grade by hand in formgrader: "
            + "; ".join(f"{k} ({', '.join(v)})" for k, v in sorted(pending.items()))
            + ". Their feedback would show those answers as not graded yet. Grade them first, or release "
              "anyway with --yes (the grader page asks).")
    _mark_hand_grades(settings, chapter, course, staged)
    done = as_user(settings, settings.instructor, ["nbgrader", "release_feedback", chapter], cwd=course)
    if done.returncode != 0:
        said = plain(settings, done.stderr.strip()[-2000:])
        raise ClassroomError(f"nbgrader release_feedback {chapter} failed:\n{said}")
    out(f"released the feedback of {chapter} to {len(staged)} student(s): {', '.join(staged)}. "
        f"They fetch it from the Assignment List (Fetch Feedback) and open it from there."
        + (f" Not graded by hand yet, and shown so: {', '.join(sorted(pending))}." if pending else ""))
    return 0


def _mark_hand_grades(settings, chapter: str, course: Path, staged: list[str]) -> None:
    """Each staged page's answers graded by hand: the instructor's points where formgrader has them, "not
    graded yet" where not (autograder/grade/feedback.py marks those cells)."""
    import re
    from nbgrader.api import Gradebook, MissingEntry
    with Gradebook(_gradebook_url(settings)) as gb:
        for name in staged:
            try:
                submission = gb.find_submission(chapter, name)
            except MissingEntry:
                continue
            # graded by hand: the instructor's points; an answer left as released: nbgrader's 0, no hand grade
            said = {g.name: f"{g.manual_score:g} / {{}} (graded by your instructor)" for nb in submission.notebooks
                    for g in nb.grades if g.manual_score is not None}
            said.update({g.name: "0 / {} (no answer written)" for nb in submission.notebooks for g in nb.grades
                         if g.manual_score is None and not g.needs_manual_grade and not g.auto_score})
            page = course / "feedback" / name / chapter / f"{chapter}.html"
            html = page.read_text()
            for exercise, text in said.items():
                html = re.sub(rf"(<td class='hand' data-exercise='{re.escape(exercise)}'>)[^<]*/ ([0-9.]+)</td>",
                              lambda m, text=text: f"{m.group(1)}{text.format(m.group(2))}</td>", html)
            page.write_text(html)


def set_due(settings, chapter: str, when: str, tz: str = "UTC", out=print, policy: str | None = None) -> int:
    from nbgrader.api import Gradebook
    from zoneinfo import ZoneInfo
    if chapter not in chapters(settings):
        raise ClassroomError(f"no chapter {chapter!r} in this course; its chapters: {', '.join(chapters(settings))}.")
    try:
        local = datetime.datetime.fromisoformat(when).replace(tzinfo=ZoneInfo(tz))
    except ValueError:
        raise ClassroomError(f"{when!r} is not a date and time like 2026-12-01 17:00") from None
    due = local.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    with Gradebook(_gradebook_url(settings)) as gb:
        gb.update_or_create_assignment(chapter, duedate=due)
    _chown_course(settings)
    if policy:
        _set_late_policy(settings, chapter, policy)
    policy = late_policy(settings, chapter)
    publish_due_dates(settings)
    out(f"{chapter} is due {due:%Y-%m-%d %H:%M} UTC; late policy {policy}: {POLICIES[policy]}")
    return 0


def status(settings, out=print) -> int:
    subs = inbound(settings)
    course = course_folder(settings)
    out(f"course {settings.course_id}: instructor {settings.instructor}, {len(settings.students)} students; "
        f"exchange {settings.exchange}")
    for chapter in chapters(settings):
        mine = [i for i in subs if i.chapter == chapter]
        students = sorted({i.student for i in mine})
        graded = (settings.state / "grading" / chapter / "class.csv").is_file()
        shown = "released" if chapter in released(settings) else "not released"
        feedback = len(list((course / "feedback").glob(f"*/{chapter}/{chapter}.html")))
        try:
            newest = json.loads((settings.state / "grading" / chapter / "class.json").read_text())["newest_submission"]
        except (OSError, ValueError, KeyError):
            newest = ""
        newer = sum(1 for i in mine if i.timestamp > newest) if graded and newest else 0
        out(f"  {chapter:<14} {shown:<13} {len(mine)} submission(s) from {len(students)} student(s)"
            + (f"; graded, feedback for {feedback}" if graded else "")
            + (f"; {newer} newer submission(s) not graded yet" if newer else ""))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="hub/classroom.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state", help="the hub's HUB_STATE (default: $HUB_STATE or /srv/course-hub)")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade")
    g.add_argument("chapter")
    g.add_argument("--workers", type=int)
    g.add_argument("--all", action="store_true", help="grade every submission again, not only what changed")
    f = sub.add_parser("release-feedback")
    f.add_argument("chapter")
    f.add_argument("--yes", action="store_true", help="release even while answers wait to be graded by hand")
    d = sub.add_parser("due")
    d.add_argument("chapter")
    d.add_argument("when")
    d.add_argument("--tz", default="UTC")
    d.add_argument("--late-policy", choices=sorted(POLICIES), help="; ".join(f"{k}: {v}" for k, v in POLICIES.items()))
    sub.add_parser("status")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("hub/classroom.py: run it as root, where `make hub` ran (it reads the repository's source/ and "
              "acts as the instructor's account).", file=sys.stderr)
        return 2
    try:
        settings = hub_settings.load(args.state)
    except hub_settings.NoHub as e:
        print(f"hub/classroom.py: {e}", file=sys.stderr)
        return 2
    # nbgrader's gradebook runs `alembic` as a command: this environment's bin/ must be on PATH
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    try:
        if args.command == "grade":
            return grade(settings, args.chapter, args.workers, regrade_all=args.all)
        if args.command == "release-feedback":
            return release_feedback(settings, args.chapter, confirmed=args.yes)
        if args.command == "due":
            return set_due(settings, args.chapter, args.when, args.tz, policy=args.late_policy)
        return status(settings)
    except ClassroomError as e:
        print(f"hub/classroom.py {args.command}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
