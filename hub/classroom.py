"""The instructor's side of the loop on the course hub, after the chapter is released.

    python hub/classroom.py grade CHAPTER [--workers N]    collect, then grade the class with `autograder grade`
    python hub/classroom.py release-feedback CHAPTER       hand each graded student their feedback page
    python hub/classroom.py status                         chapters released, submitted, graded
    python hub/classroom.py due CHAPTER "YYYY-MM-DD HH:MM" [--tz UTC]   set the due date (formgrader can too)

Run as root, where `make hub` ran (HUB_STATE or --state says which hub). The
grader page of the hub (/services/grader/, the instructor's alone) runs the same
commands.

grade:   `nbgrader collect --update`, as the instructor, takes each student's
         latest submission into ~INSTRUCTOR/course/submitted/ (every earlier one
         stays in the exchange's inbound); `autograder grade` grades them in its
         sandbox into the course's gradebook (formgrader sees them) and
         HUB_STATE/grading/CHAPTER/; each page of feedback (no hidden test in it)
         is staged in the course's feedback/ for nbgrader's release_feedback. A
         submission after the due date is graded, marked late with how late, and
         not penalised (nbgrader's default). A student on the list who never
         submitted is in the class's table with 0 and gets no feedback.
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


def as_user(s, name: str, argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `argv` as the class's account `name`, in the environment its hub server has."""
    entry = pwd.getpwnam(name)
    role = s.roles.get(name, "student")
    env = {"HOME": entry.pw_dir, "USER": name, "LOGNAME": name, "LANG": "C.UTF-8",
           "JUPYTER_CONFIG_PATH": str(s.state / "config" / role), **runtime.environment(s.runtime)}
    return subprocess.run(["runuser", "-u", name, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()], *argv],
                          cwd=cwd or entry.pw_dir, capture_output=True, text=True)


def course_folder(s) -> Path:
    return s.course_dir(Path(pwd.getpwnam(s.instructor).pw_dir))


def chapters(s) -> list[str]:
    return sorted(p.name for p in (s.repo / "release").iterdir() if p.is_dir())


def released(s) -> list[str]:
    outbound = s.exchange / s.course_id / "outbound"
    return sorted(p.name for p in outbound.iterdir() if p.is_dir()) if outbound.is_dir() else []


def inbound(s) -> list[Inbound]:
    """Every submission in the exchange (root reads the instructor's inbound), oldest first."""
    folder = s.exchange / s.course_id / "inbound"
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


def refuse_forged(s, chapter: str, out=print) -> dict[str, list[tuple]]:
    """Move every inbound entry of `chapter` that is not its named student's own out of the exchange (into
    HUB_STATE/grading/refused/, root's alone), saying why, before `nbgrader collect` runs; returns the
    stamps of the entries kept, for `changed_while_collected`."""
    folder = s.exchange / s.course_id / "inbound"
    kept = {}
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        if not fnmatch.fnmatchcase(entry.name, f"*+{chapter}+*"):  # what nbgrader collect takes
            continue
        stamps = _stamps(entry) if entry.is_dir() and not entry.is_symlink() else []  # before the check
        why = _entry_problem(entry)
        if why is None:
            kept[entry.name] = stamps
            continue
        target = s.state / "grading" / "refused" / chapter / entry.name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(s.state / "grading", 0o700)
        shutil.rmtree(target, ignore_errors=True)
        shutil.move(str(entry), str(target))  # a link is moved as a link
        out(f"warning: refused {entry.name} from the exchange's inbound: {why}. Not collected nor graded; "
            f"moved to {target}")
    return kept


def changed_while_collected(s, chapter: str, kept: dict[str, list[tuple]], out=print) -> None:
    """An entry that changed between the check and the end of `nbgrader collect` (a link swapped in while the
    instructor's account copied it): its student's collected copy is not graded."""
    folder = s.exchange / s.course_id / "inbound"
    now = [p.name for p in folder.iterdir() if fnmatch.fnmatchcase(p.name, f"*+{chapter}+*")]
    for name in sorted(set(kept) | set(now)):
        entry = folder / name
        if name in kept and not entry.is_symlink() and entry.is_dir() and _stamps(entry) == kept[name]:
            continue
        student = name.rsplit("+", 3)[0]  # changed, gone or new (not checked): collect may have copied it
        shutil.rmtree(course_folder(s) / "submitted" / student / chapter, ignore_errors=True)
        out(f"warning: {name} in the exchange's inbound changed or arrived while it was being collected; "
            f"{student}'s submission is not graded this time: grade again")


def _check_chapter(s, chapter: str) -> None:
    if chapter not in chapters(s):
        raise ClassroomError(f"no chapter {chapter!r} in this course; its chapters: {', '.join(chapters(s))}.")
    if chapter not in released(s):
        raise ClassroomError(f"{chapter} has not been released to the class (released: "
                             f"{', '.join(released(s)) or 'nothing yet'}). Release it first: formgrader's Manage "
                             f"Assignments, or `nbgrader release_assignment {chapter}` in the instructor's terminal.")


def _gradebook_url(s) -> str:
    return f"sqlite:///{course_folder(s) / 'gradebook.db'}"


def _chown_course(s) -> None:
    entry = pwd.getpwnam(s.instructor)
    for root, dirs, files in os.walk(course_folder(s)):
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


def _due_date(s, chapter: str):
    from nbgrader.api import Gradebook, MissingEntry
    path = course_folder(s) / "gradebook.db"
    if not path.exists():
        return None
    with Gradebook(_gradebook_url(s)) as gb:
        try:
            return gb.find_assignment(chapter).duedate
        except MissingEntry:
            return None


def _late_note(html: str, note: str) -> str:
    import html as html_mod
    paragraph = f"<p class='course-late'><strong>{html_mod.escape(note)}</strong></p>"
    at = html.find("</h1>")
    return html[:at + 5] + "\n" + paragraph + html[at + 5:] if at >= 0 else paragraph + html


def grade(s, chapter: str, workers: int | None = None, out=print) -> int:
    _check_chapter(s, chapter)
    mine = [i for i in inbound(s) if i.chapter == chapter]
    others = sorted({i.chapter for i in inbound(s) if i.chapter != chapter})
    if not mine:
        elsewhere = f" (the exchange holds submissions of {', '.join(others)})" if others else ""
        raise ClassroomError(f"no submissions of {chapter} in the exchange yet{elsewhere}: nothing was collected "
                             f"and nothing graded. Students submit from the Assignment List.")
    unknown = sorted({i.student for i in mine} - set(s.students))
    for name in unknown:
        out(f"warning: {name} submitted {chapter} but is not a student of the class list; not graded")
    for name in sorted({i.student for i in inbound(s) if i.chapter not in chapters(s)}):
        wrong = sorted({i.chapter for i in inbound(s) if i.student == name and i.chapter not in chapters(s)})
        out(f"warning: {name} submitted {', '.join(wrong)}, which is no chapter of this course; ignored")

    course = course_folder(s)
    kept = refuse_forged(s, chapter, out)
    collected = as_user(s, s.instructor, ["nbgrader", "collect", "--update", chapter], cwd=course)
    changed_while_collected(s, chapter, kept, out)
    for line in collected.stdout.splitlines() + collected.stderr.splitlines():
        if "WARNING" in line or "ERROR" in line or "cheating" in line:
            out("nbgrader collect: " + line.strip())
    if collected.returncode != 0:
        raise ClassroomError(f"nbgrader collect {chapter} failed:\n{collected.stderr.strip()[-2000:]}")

    submitted = {name: course / "submitted" / name / chapter for name in s.students
                 if (course / "submitted" / name / chapter).is_dir()}
    work = s.state / "grading" / chapter
    intake = work / "intake" / "submitted"
    shutil.rmtree(work / "intake", ignore_errors=True)
    for name, folder in submitted.items():
        shutil.copytree(folder, intake / name / chapter, symlinks=True)
    os.chmod(s.state / "grading", 0o700)
    results_dir = work / "out"
    argv = [str(s.repo / ".venv" / "bin" / "autograder"), "grade", chapter, str(intake), "--out", str(results_dir),
            "--db", _gradebook_url(s), "--repo", str(s.repo)]
    if workers:
        argv += ["--workers", str(workers)]
    out(f"collected the latest submission of {len(submitted)} student(s); grading with autograder grade ...")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        out("  " + line.rstrip())
    if proc.wait() != 0:
        _chown_course(s)
        raise ClassroomError(f"autograder grade {chapter} failed (exit {proc.returncode}); see its output above. "
                             f"Nothing was staged for feedback.")

    due = _due_date(s, chapter)
    counts = {}
    for i in inbound(s):
        if i.chapter == chapter:
            counts[i.student] = counts.get(i.student, 0) + 1
    rows = []
    for name in s.students:
        if name not in submitted:
            rows.append({"student": name, "status": "never submitted", "score": 0, "max_score": "",
                         "submitted": "", "late_by": "", "submissions": 0})
            continue
        result_file = results_dir / "results" / f"{name}.json"
        result = json.loads(result_file.read_text()) if result_file.is_file() else {}
        stamp = (submitted[name] / "timestamp.txt").read_text().strip()
        late = ""
        if due is not None:
            seconds = (_parse_stamp(stamp) - due).total_seconds()
            late = _duration(seconds) if seconds > 0 else ""
        rows.append({"student": name, "status": "late" if late else "graded", "score": result.get("score", 0),
                     "max_score": result.get("max_score", ""), "submitted": stamp, "late_by": late,
                     "submissions": counts.get(name, 1), "notes": result.get("notes", [])})
        page = results_dir / "feedback" / name / f"{chapter}.html"
        if page.is_file():
            html = page.read_text()
            if late:
                html = _late_note(html, f"Submitted {stamp}, {late} after the due date "
                                        f"({due:%Y-%m-%d %H:%M} UTC): graded as it is, marked late.")
            target = course / "feedback" / name / chapter
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            (target / f"{chapter}.html").write_text(html)
            for name_ in ("timestamp.txt", "submission_secret.txt"):
                if (submitted[name] / name_).is_file():
                    shutil.copyfile(submitted[name] / name_, target / name_)
        autograded = results_dir / "autograded" / name / chapter
        if autograded.is_dir():
            shutil.copytree(autograded, course / "autograded" / name / chapter, dirs_exist_ok=True)

    _add_students(s)
    _chown_course(s)
    fields = ["student", "status", "score", "max_score", "submitted", "late_by", "submissions"]
    (work / "class.csv").write_text(_csv_cells().csv_text([[r.get(f) for f in fields] for r in rows], fields))

    out("")
    out(f"{chapter}: {len(submitted)} of {len(s.students)} students submitted"
        + (f"; due {due:%Y-%m-%d %H:%M} UTC" if due else "; no due date set"))
    for r in rows:
        if r["status"] == "never submitted":
            out(f"  {r['student']:<20} never submitted: 0 points, no feedback to release")
            continue
        line = f"  {r['student']:<20} {r['score']:g}/{r['max_score']:g}"
        if r["submissions"] > 1:
            line += f"  ({r['submissions']} submissions: the latest counts, the earlier ones stay in the exchange)"
        if r["late_by"]:
            line += f"  late by {r['late_by']} (no penalty)"
        for note in r.get("notes", []):
            line += f"\n  {'':<20}   note: {note}"
        out(line)
    staged = sum(1 for r in rows if r["status"] != "never submitted")
    out(f"feedback staged for {staged} student(s) in {course / 'feedback'}; release it with "
        f"`hub/classroom.py release-feedback {chapter}` or the grader page. Table: {work / 'class.csv'}")
    return 0


def _csv_cells():
    """autograder/grade/csv_cells.py, the course's one CSV writer (no cell a spreadsheet reads as a formula),
    loaded by its path: this script may run on the hub's Python, which need not have the repository on its
    path, and the module needs only the standard library."""
    path = Path(__file__).resolve().parents[1] / "autograder" / "grade" / "csv_cells.py"
    spec = importlib.util.spec_from_file_location("course_csv_cells", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _add_students(s) -> None:
    """Every student of the list in the gradebook: nbgrader export and formgrader show who never submitted."""
    from nbgrader.api import Gradebook
    with Gradebook(_gradebook_url(s)) as gb:
        for name in s.students:
            gb.update_or_create_student(name)


def release_feedback(s, chapter: str, out=print) -> int:
    _check_chapter(s, chapter)
    course = course_folder(s)
    staged = sorted(p.parent.parent.name for p in (course / "feedback").glob(f"*/{chapter}/{chapter}.html"))
    if not staged:
        raise ClassroomError(f"{chapter} has no graded feedback to release: grade it first "
                             f"(`hub/classroom.py grade {chapter}` or the grader page).")
    done = as_user(s, s.instructor, ["nbgrader", "release_feedback", chapter], cwd=course)
    if done.returncode != 0:
        raise ClassroomError(f"nbgrader release_feedback {chapter} failed:\n{done.stderr.strip()[-2000:]}")
    out(f"released the feedback of {chapter} to {len(staged)} student(s): {', '.join(staged)}. "
        f"They fetch it from the Assignment List (Fetch Feedback) and open it from there.")
    return 0


def set_due(s, chapter: str, when: str, tz: str = "UTC", out=print) -> int:
    from nbgrader.api import Gradebook
    from zoneinfo import ZoneInfo
    if chapter not in chapters(s):
        raise ClassroomError(f"no chapter {chapter!r} in this course; its chapters: {', '.join(chapters(s))}.")
    try:
        local = datetime.datetime.fromisoformat(when).replace(tzinfo=ZoneInfo(tz))
    except ValueError:
        raise ClassroomError(f"{when!r} is not a date and time like 2026-12-01 17:00") from None
    due = local.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    with Gradebook(_gradebook_url(s)) as gb:
        gb.update_or_create_assignment(chapter, duedate=due)
    _chown_course(s)
    out(f"{chapter} is due {due:%Y-%m-%d %H:%M} UTC")
    return 0


def status(s, out=print) -> int:
    subs = inbound(s)
    course = course_folder(s)
    out(f"course {s.course_id}: instructor {s.instructor}, {len(s.students)} students; exchange {s.exchange}")
    for chapter in chapters(s):
        mine = [i for i in subs if i.chapter == chapter]
        students = sorted({i.student for i in mine})
        graded = (s.state / "grading" / chapter / "class.csv").is_file()
        shown = "released" if chapter in released(s) else "not released"
        feedback = len(list((course / "feedback").glob(f"*/{chapter}/{chapter}.html")))
        out(f"  {chapter:<14} {shown:<13} {len(mine)} submission(s) from {len(students)} student(s)"
            + (f"; graded, feedback for {feedback}" if graded else ""))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="hub/classroom.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state", help="the hub's HUB_STATE (default: $HUB_STATE or /srv/course-hub)")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade")
    g.add_argument("chapter")
    g.add_argument("--workers", type=int)
    f = sub.add_parser("release-feedback")
    f.add_argument("chapter")
    d = sub.add_parser("due")
    d.add_argument("chapter")
    d.add_argument("when")
    d.add_argument("--tz", default="UTC")
    sub.add_parser("status")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("hub/classroom.py: run it as root, where `make hub` ran (it reads the repository's source/ and "
              "acts as the instructor's account).", file=sys.stderr)
        return 2
    try:
        s = hub_settings.load(args.state)
    except hub_settings.NoHub as e:
        print(f"hub/classroom.py: {e}", file=sys.stderr)
        return 2
    # nbgrader's gradebook runs `alembic` as a command: this environment's bin/ must be on PATH
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    try:
        if args.command == "grade":
            return grade(s, args.chapter, args.workers)
        if args.command == "release-feedback":
            return release_feedback(s, args.chapter)
        if args.command == "due":
            return set_due(s, args.chapter, args.when, args.tz)
        return status(s)
    except ClassroomError as e:
        print(f"hub/classroom.py {args.command}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
