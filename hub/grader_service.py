"""The hub's grader page, /services/grader/: the instructor's buttons for the loop.

A JupyterHub service that the hub starts (as root, like the hub: grading reads
the repository's source/ and runs the bubblewrap sandbox). Login is the hub's
own (OAuth); the hub grants access to the instructor's account alone, and the
page checks the name again. Each button runs `hub/classroom.py` (the same
command an instructor can type as root), one at a time, and the page shows its
output as it comes:

    Collect and grade      nbgrader collect --update, autograder grade of what changed (or everyone),
                           feedback staged; its progress shows as it runs (graded / to grade)
    Release feedback       nbgrader release_feedback: students fetch it from the Assignment List; the
                           page asks first when answers still wait to be graded by hand
The class's table of the latest grading (one row per student, one column per
exercise, sortable), each student's feedback page and the class report are
linked from it; the late policy of each chapter is set here.
"""
from __future__ import annotations

import asyncio
import html
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

from tornado.ioloop import IOLoop
from tornado.web import Application, HTTPError, RequestHandler, authenticated

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
from jupyterhub.utils import url_path_join

sys.path.insert(0, str(Path(__file__).resolve().parent))
import classroom  # noqa: E402
import settings as hub_settings  # noqa: E402

S = hub_settings.load(os.environ["HUB_STATE"])
# nbgrader's gradebook (read for the answers still to grade by hand) runs `alembic` as a command
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
PREFIX = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/grader/")
ACTIONS = {"grade": "Collect and grade", "release-feedback": "Release feedback"}


class Job:
    def __init__(self, action: str, chapter: str, extra: list[str] | None = None):
        self.action, self.chapter, self.extra = action, chapter, extra or []
        self.lines: list[str] = []
        self.code: int | None = None
        self.started = time.time()

    async def run(self) -> None:
        argv = [sys.executable, str(Path(__file__).resolve().parent / "classroom.py"), "--state", str(S.state),
                self.action, self.chapter, *self.extra]
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT)
        async for line in proc.stdout:
            self.lines.append(classroom.plain(S, line.decode(errors="replace").rstrip("\n")))
        self.code = await proc.wait()

    def progress(self) -> tuple[int, int, list[str]]:
        """(graded, to grade, "student: score" as each finished) from autograder grade's "[k/n] ..." lines."""
        done, total, who = 0, 0, []
        for line in self.lines:
            m = PROGRESS.match(line)
            if m:
                done, total = int(m.group(1)), int(m.group(2))
                who.append(m.group(3))
        return done, total, who


JOB: Job | None = None
PROGRESS = re.compile(r"^\s*\[(\d+)/(\d+)\] (.*)$")
MARKS = {"passed": ("✓", "ok"), "failed": ("✗", "bad"), "error": ("!", "bad"), "not attempted": ("–", "dim"),
         "not run": ("·", "dim"), "manually graded": ("✎", "hand")}

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Grader: {course}</title>{refresh}
<style>
body {{ font-family: system-ui, sans-serif; max-width: 90rem; margin: 1.5rem auto; padding: 0 1rem; }}
table {{ border-collapse: collapse; }} td, th {{ border-bottom: 1px solid #d0d7de; padding: .3rem .55rem;
  text-align: left; vertical-align: top; }}
#class td, #class th {{ white-space: nowrap; }} #class td.notes {{ white-space: normal; min-width: 12rem; }}
#class th.ex {{ writing-mode: vertical-rl; transform: rotate(180deg); font-weight: normal; font-size: .8rem; }}
#class td.ex {{ text-align: center; }} #class th[data-sort] {{ cursor: pointer; }}
pre {{ background: #f6f8fa; padding: .8rem; white-space: pre-wrap; font-size: .85rem; }}
button {{ padding: .25rem .7rem; }} .ok {{ color: #1a7f37; }} .bad {{ color: #cf222e; }} .dim {{ color: #8c959f; }}
.hand {{ color: #0969da; }} .warn {{ background: #fff8c5; padding: .4rem .7rem; border-radius: 6px; }}
progress {{ width: 20rem; }}
</style></head><body>
<h1>Grader: {course}</h1>
<p>Signed in as <strong>{user}</strong> (instructor). <a href="{hub}">Back to the hub</a>.
Release a chapter from formgrader (<em>Manage Assignments</em>); collect, grade and hand back feedback here.
Grading grades only the submissions new or changed since the last grading; tick <em>everyone</em> to grade
all again.</p>
<table id="chapters"><tr><th>chapter</th><th>submissions</th><th>students</th><th>state</th><th>late policy</th>
<th></th><th></th></tr>
{rows}</table>
{job}
{table}
<script>
document.querySelectorAll("form[data-pending]").forEach(f => f.addEventListener("submit", e => {{
  const n = Number(f.dataset.pending);
  if (n && !confirm(n + " student(s) still have answers to grade by hand in formgrader; their feedback will "
                    + "say 'not graded yet'. Release the feedback anyway?")) e.preventDefault();
}}));
document.querySelectorAll("#class th[data-sort]").forEach((th, col) => th.addEventListener("click", () => {{
  const body = th.closest("table").tBodies[0], rows = Array.from(body.rows);
  const key = r => r.cells[th.cellIndex].dataset.key ?? r.cells[th.cellIndex].innerText;
  const num = rows.every(r => key(r) === "" || !isNaN(Number(key(r))));
  const dir = th.dataset.dir === "up" ? -1 : 1; th.dataset.dir = dir === 1 ? "up" : "down";
  rows.sort((a, b) => dir * (num ? Number(key(a)) - Number(key(b)) : String(key(a)).localeCompare(key(b))));
  rows.forEach(r => body.appendChild(r));
}}));
</script>
</body></html>"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def load_table(chapter: str) -> dict | None:
    path = S.state / "grading" / chapter / "class.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def chapter_state(chapter: str, table: dict | None, mine) -> str:
    """"graded", or how many submissions came in since the grading (the state must not say graded then)."""
    if table is None:
        return "not graded"
    newer = [i for i in mine if i.timestamp > table.get("newest_submission", "")]
    if newer:
        who = sorted({i.student for i in newer})
        return (f"<strong class='bad'>graded, but {len(newer)} newer submission(s) wait</strong> "
                f"({_e(', '.join(who))}): grade again")
    return "<span class='ok'>graded</span>"


class GraderPage(HubOAuthenticated, RequestHandler):
    def _instructor(self) -> str:
        user = self.current_user
        if not user or user.get("name") != S.instructor:
            raise HTTPError(403, "the grader page is the instructor's")
        return user["name"]

    def _chapter_row(self, chapter: str, subs, xsrf: str) -> str:
        mine = [i for i in subs if i.chapter == chapter]
        table = load_table(chapter)
        links = []
        if table is not None:
            links.append(f"<a href='{PREFIX}?chapter={chapter}#class'>class table</a>")
            links.append(f"<a href='{PREFIX}files/{chapter}/class.csv'>CSV</a>")
        report = S.state / "grading" / chapter / "out" / "report" / f"{chapter}.html"
        if report.is_file():
            links.append(f"<a href='{PREFIX}files/{chapter}/report'>class report</a>")
            # The report's section of folder names that look alike (autograder/grade/report.py): said
            # here too, so that the instructor opens it before handing grades on.
            if "id='look-alike'" in report.read_text(encoding="utf-8", errors="replace"):
                links.append(f"<strong class='bad'><a href='{PREFIX}files/{chapter}/report#look-alike'>"
                             "names that look alike</a></strong>")
        pending = len(classroom.hand_grading_pending(S, chapter)) if table is not None else 0
        hidden = f"{xsrf}<input type='hidden' name='chapter' value='{chapter}'>"
        policy = classroom.late_policy(S, chapter)
        options = "".join(f"<option value='{k}'{' selected' if k == policy else ''}>{k}</option>"
                          for k in classroom.POLICIES)
        due = (table or {}).get("due") or ""
        return (f"<tr><td><code>{chapter}</code></td><td>{len(mine)}</td>"
                f"<td>{len({i.student for i in mine})} of {len(S.students)}</td>"
                f"<td>{chapter_state(chapter, table, mine)} {' '.join(links)}"
                + (f"<br><span class='hand'>{pending} student(s) with answers to grade by hand</span>"
                   if pending else "") + "</td>"
                f"<td><form method='post' action='{PREFIX}'>{hidden}<select name='policy' "
                f"title='{_e(chr(10).join(f'{k}: {v}' for k, v in classroom.POLICIES.items()))}'>{options}</select>"
                f"<button name='action' value='policy' data-chapter='{chapter}'>set</button></form>"
                + (f"<small>due {_e(due)}</small>" if due else "") + "</td>"
                f"<td><form method='post' action='{PREFIX}'>{hidden}<button name='action' value='grade' "
                f"data-chapter='{chapter}'>{ACTIONS['grade']}</button> <label><input type='checkbox' name='all' "
                f"value='1'> everyone</label></form></td>"
                f"<td><form method='post' action='{PREFIX}' data-pending='{pending}'>{hidden}"
                f"<input type='hidden' name='yes' value='1'><button name='action' value='release-feedback' "
                f"data-chapter='{chapter}'>{ACTIONS['release-feedback']}</button></form></td></tr>")

    def _page(self, user: str, shown: str | None) -> str:
        classroom.publish_due_dates(S)  # a due date set in formgrader reaches the students' Assignment List
        subs = classroom.inbound(S)
        xsrf = self.xsrf_form_html()
        rows = [self._chapter_row(chapter, subs, xsrf) for chapter in classroom.released(S)]
        if not rows:
            rows.append("<tr><td colspan='7'>No chapter released yet: release one from formgrader.</td></tr>")
        job, running = job_html(JOB)
        refresh = "<meta http-equiv='refresh' content='2'>" if running else ""
        if shown is None and JOB is not None:
            shown = JOB.chapter
        table = class_table(shown) if shown else ""
        return PAGE.format(course=_e(S.course_id), user=_e(user), rows="".join(rows), job=job, table=table,
                           refresh=refresh, hub=os.environ.get("JUPYTERHUB_BASE_URL", "/") + "hub/home")

    @authenticated
    def get(self):
        shown = self.get_argument("chapter", None)
        if shown is not None and shown not in classroom.chapters(S):
            raise HTTPError(404)
        self.write(self._page(self._instructor(), shown))

    @authenticated
    def post(self):
        global JOB
        self._instructor()
        action = self.get_body_argument("action")
        chapter = self.get_body_argument("chapter")
        if action not in (*ACTIONS, "policy") or chapter not in classroom.chapters(S):
            raise HTTPError(400, "no such action or chapter")
        if action == "policy":
            policy = self.get_body_argument("policy")
            if policy not in classroom.POLICIES:
                raise HTTPError(400, "no such late policy")
            classroom._set_late_policy(S, chapter, policy)
            self.redirect(PREFIX)
            return
        extra = []
        if action == "grade" and self.get_body_argument("all", ""):
            extra = ["--all"]
        if action == "release-feedback" and self.get_body_argument("yes", ""):
            extra = ["--yes"]  # the page asked (the form's confirm) when answers wait to be graded by hand
        if JOB is None or JOB.code is not None:
            JOB = Job(action, chapter, extra)
            IOLoop.current().spawn_callback(JOB.run)
        self.redirect(PREFIX + "#job")


def job_html(job: Job | None) -> tuple[str, bool]:
    """The running or last job: its state, the progress of a grading, the raw log one click away."""
    if job is None:
        return "", False
    running = job.code is None
    if running:
        state = "running ..."
    elif job.code == 0:
        state = "<span class='ok'>done</span>"
    else:
        state = f"<span class='bad'>failed (exit {job.code})</span>"
    progress = ""
    if job.action == "grade":
        done, total, who = job.progress()
        run = next((line.strip() for line in job.lines if " new or changed, " in line), "")
        progress = (f"<p id='progress'>graded <strong id='graded'>{done}</strong> of <strong id='to-grade'>"
                    f"{total}</strong> <progress value='{done}' max='{max(total, 1)}'></progress> "
                    f"<span id='run'>{_e(run)}</span></p>"
                    + (f"<p class='small'>just graded: {_e(', '.join(who[-8:]))}</p>" if running and who else ""))
    log = _e("\n".join(job.lines))
    return (f"<h2 id='job'>{ACTIONS[job.action]} {job.chapter}: <span id='job-state'>{state}</span></h2>{progress}"
            f"<details id='log-box'{' open' if job.code not in (None, 0) else ''}><summary>the log</summary>"
            f"<pre id='log'>{log}</pre></details>"), running


def class_table(chapter: str) -> str:
    """One row per student: id, name, status, score, each exercise as a mark, lateness, submissions, hand
    grading, notes, and a link to the feedback page."""
    table = load_table(chapter)
    if table is None:
        return ""
    rows = table["rows"]
    exercises = list(dict.fromkeys(ex for r in rows for ex in r.get("exercises", {})))
    pending = classroom.hand_grading_pending(S, chapter)
    head = ("<tr><th data-sort>student</th><th data-sort>name</th><th>feedback</th><th data-sort>status</th>"
            "<th data-sort>score</th>"
            + "".join(f"<th class='ex' data-sort title='{_e(ex)}'>{_e(ex)}</th>" for ex in exercises)
            + "<th data-sort>late by</th><th data-sort>submissions</th><th data-sort>by hand</th><th>notes</th></tr>")
    body = "".join(_student_row(chapter, r, exercises, pending.get(r["student"], [])) for r in rows)
    legend = " ".join(f"<span class='{cls}'>{mark}</span> {_e(status)}" for status, (mark, cls) in MARKS.items())
    legend = legend.replace("manually graded", "to grade by hand") + " <span class='hand'>✔</span> graded by hand " \
        "(or left blank: nothing to grade)"
    return (f"<h2 id='class'>{_e(chapter)}: the class</h2><p class='small'>{_e(table.get('run') or '')} "
            f"Due {_e(table.get('due') or 'not set')}; late policy {_e(table.get('policy', 'latest'))}. "
            f"{legend}. Click a heading to sort.</p>"
            f"<div style='overflow-x:auto'><table id='class'><thead>{head}</thead><tbody>{body}</tbody></table></div>")


def _student_row(chapter: str, r: dict, exercises: list[str], hand: list[str]) -> str:
    cells = []
    for ex in exercises:
        v = r.get("exercises", {}).get(ex)
        if v is None:
            cells.append("<td class='ex dim' data-key='-1'>·</td>")
            continue
        mark, cls = MARKS.get(v["status"], ("?", ""))
        if v["status"] == "manually graded" and ex not in hand:
            mark = "✔"
        cells.append(f"<td class='ex {cls}' data-key='{v['points']}' title='{_e(ex)}: {_e(v['status'])}, "
                     f"{v['points']:g}/{v['max_points']:g}'>{mark}</td>")
    score = f"{r['score']:g}/{r['max_score']:g}" if r["max_score"] != "" else "0"
    feedback = (f"<a href='{PREFIX}files/{chapter}/feedback/{_e(r['student'])}'>feedback</a>"
                if r["status"] != "never submitted" else "")
    return (f"<tr data-student='{_e(r['student'])}'><td>{_e(r['student'])}</td><td>{_e(r.get('folder', ''))}</td>"
            f"<td>{feedback}</td><td class='{'bad' if r['status'] != 'graded' else ''}'>{_e(r['status'])}</td>"
            f"<td data-key='{r['score']}'>{score}</td>{''.join(cells)}"
            f"<td>{_e(r['late_by'])}</td><td>{r['submissions']}</td>"
            f"<td class='hand'>{_e(', '.join(hand)) or ''}</td>"
            f"<td class='notes'>{'<br>'.join(_e(n) for n in r.get('notes', []))}</td></tr>")


class GradingFiles(HubOAuthenticated, RequestHandler):
    """The latest grading's class table, class report and each student's feedback page, for the instructor."""

    @authenticated
    def get(self, chapter: str, what: str, student: str | None = None):
        if not self.current_user or self.current_user.get("name") != S.instructor:
            raise HTTPError(403)
        if chapter not in classroom.chapters(S) or (student is not None and student not in S.students):
            raise HTTPError(404)
        work = S.state / "grading" / chapter
        path = {"class.csv": work / "class.csv", "report": work / "out" / "report" / f"{chapter}.html",
                "feedback": classroom.course_folder(S) / "feedback" / str(student) / chapter / f"{chapter}.html",
                }.get(what)
        if path is None or not path.is_file():
            raise HTTPError(404, f"{chapter} has no {what} yet: grade it first")
        self.set_header("Content-Type", "text/csv" if what.endswith(".csv") else "text/html; charset=utf-8")
        self.write(path.read_bytes())


def main() -> None:
    app = Application([
        (PREFIX, GraderPage),
        (url_path_join(PREFIX, "oauth_callback"), HubOAuthCallbackHandler),
        (url_path_join(PREFIX, r"files/([0-9a-z_]+)/(class\.csv|report)"), GradingFiles),
        (url_path_join(PREFIX, r"files/([0-9a-z_]+)/(feedback)/([a-z][a-z0-9_-]*)"), GradingFiles),
    ], cookie_secret=os.urandom(32))
    url = os.environ["JUPYTERHUB_SERVICE_URL"]
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    app.listen(port, "127.0.0.1")
    loop = IOLoop.current()
    for signum in (signal.SIGINT, signal.SIGTERM):  # the hub stops its services with these: stop at once
        signal.signal(signum, lambda *_: loop.add_callback_from_signal(loop.stop))
    loop.start()


if __name__ == "__main__":
    main()
