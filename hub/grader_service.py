"""The hub's grader page, /services/grader/: the instructor's buttons for the loop.

A JupyterHub service that the hub starts (as root, like the hub: grading reads
the repository's source/ and runs the bubblewrap sandbox). Login is the hub's
own (OAuth); the hub grants access to the instructor's account alone, and the
page checks the name again. Each button runs `hub/classroom.py` (the same
command an instructor can type as root), one at a time, and the page shows its
output as it comes:

    Collect and grade      nbgrader collect --update, autograder grade, feedback staged
    Release feedback       nbgrader release_feedback: students fetch it from the Assignment List
The class report and the class's table of the latest grading are linked from it.
"""
from __future__ import annotations

import asyncio
import html
import os
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
PREFIX = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/grader/")
ACTIONS = {"grade": "Collect and grade", "release-feedback": "Release feedback"}


class Job:
    def __init__(self, action: str, chapter: str):
        self.action, self.chapter = action, chapter
        self.lines: list[str] = []
        self.code: int | None = None
        self.started = time.time()

    async def run(self) -> None:
        argv = [sys.executable, str(Path(__file__).resolve().parent / "classroom.py"), "--state", str(S.state),
                self.action, self.chapter]
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT)
        async for line in proc.stdout:
            self.lines.append(line.decode(errors="replace").rstrip("\n"))
        self.code = await proc.wait()


JOB: Job | None = None

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Grader: {course}</title>{refresh}
<style>
body {{ font-family: system-ui, sans-serif; max-width: 72rem; margin: 1.5rem auto; padding: 0 1rem; }}
table {{ border-collapse: collapse; }} td, th {{ border-bottom: 1px solid #d0d7de; padding: .35rem .7rem; text-align: left; }}
pre {{ background: #f6f8fa; padding: .8rem; white-space: pre-wrap; font-size: .85rem; }}
button {{ padding: .25rem .7rem; }} .ok {{ color: #1a7f37; }} .bad {{ color: #cf222e; }}
</style></head><body>
<h1>Grader: {course}</h1>
<p>Signed in as <strong>{user}</strong> (instructor). <a href="{hub}">Back to the hub</a>.
Release a chapter from formgrader (<em>Manage Assignments</em>); collect, grade and hand back feedback here.</p>
<table><tr><th>chapter</th><th>released</th><th>submissions</th><th>students</th><th>graded</th><th></th><th></th></tr>
{rows}</table>
{job}
</body></html>"""


class GraderPage(HubOAuthenticated, RequestHandler):
    def _instructor(self) -> str:
        user = self.current_user
        if not user or user.get("name") != S.instructor:
            raise HTTPError(403, "the grader page is the instructor's")
        return user["name"]

    def _page(self, user: str) -> str:
        subs = classroom.inbound(S)
        rows = []
        xsrf = self.xsrf_form_html()
        for chapter in classroom.released(S):
            mine = [i for i in subs if i.chapter == chapter]
            work = S.state / "grading" / chapter
            graded = (work / "class.csv").is_file()
            links = []
            if graded:
                links.append(f"<a href='{PREFIX}files/{chapter}/class.csv'>class table</a>")
            report = work / "out" / "report" / f"{chapter}.html"
            if report.is_file():
                links.append(f"<a href='{PREFIX}files/{chapter}/report'>class report</a>")
                # The report's section of folder names that look alike (autograder/grade/report.py): said
                # here too, so that the instructor opens it before handing grades on.
                if "id='look-alike'" in report.read_text(encoding="utf-8", errors="replace"):
                    links.append(f"<strong class='bad'><a href='{PREFIX}files/{chapter}/report#look-alike'>"
                                 "names that look alike</a></strong>")
            buttons = "".join(
                f"<td><form method='post' action='{PREFIX}'>{xsrf}<input type='hidden' name='chapter' "
                f"value='{chapter}'><button name='action' value='{action}' data-chapter='{chapter}'>{label}"
                f"</button></form></td>" for action, label in ACTIONS.items())
            rows.append(f"<tr><td><code>{chapter}</code></td><td>yes</td><td>{len(mine)}</td>"
                        f"<td>{len({i.student for i in mine})} of {len(S.students)}</td>"
                        f"<td>{'yes' if graded else 'no'} {' '.join(links)}</td>{buttons}</tr>")
        if not rows:
            rows.append("<tr><td colspan='7'>No chapter released yet: release one from formgrader.</td></tr>")
        job, refresh = "", ""
        if JOB is not None:
            if JOB.code is None:
                state, refresh = "running ...", "<meta http-equiv='refresh' content='2'>"
            elif JOB.code == 0:
                state = "<span class='ok'>done</span>"
            else:
                state = f"<span class='bad'>failed (exit {JOB.code})</span>"
            job = (f"<h2 id='job'>{ACTIONS[JOB.action]} {JOB.chapter}: <span id='job-state'>{state}</span></h2>"
                   f"<pre id='log'>{html.escape(chr(10).join(JOB.lines))}</pre>")
        return PAGE.format(course=html.escape(S.course_id), user=html.escape(user), rows="".join(rows), job=job,
                           refresh=refresh, hub=os.environ.get("JUPYTERHUB_BASE_URL", "/") + "hub/home")

    @authenticated
    def get(self):
        self.write(self._page(self._instructor()))

    @authenticated
    def post(self):
        global JOB
        self._instructor()
        action = self.get_body_argument("action")
        chapter = self.get_body_argument("chapter")
        if action not in ACTIONS or chapter not in classroom.chapters(S):
            raise HTTPError(400, "no such action or chapter")
        if JOB is None or JOB.code is not None:
            JOB = Job(action, chapter)
            IOLoop.current().spawn_callback(JOB.run)
        self.redirect(PREFIX + "#job")


class GradingFiles(HubOAuthenticated, RequestHandler):
    """The latest grading's class table and class report, for the instructor."""

    @authenticated
    def get(self, chapter: str, what: str):
        if not self.current_user or self.current_user.get("name") != S.instructor:
            raise HTTPError(403)
        if chapter not in classroom.chapters(S):
            raise HTTPError(404)
        work = S.state / "grading" / chapter
        path = {"class.csv": work / "class.csv", "report": work / "out" / "report" / f"{chapter}.html"}.get(what)
        if path is None or not path.is_file():
            raise HTTPError(404, f"{chapter} has no {what} yet: grade it first")
        self.set_header("Content-Type", "text/csv" if what.endswith(".csv") else "text/html; charset=utf-8")
        self.write(path.read_bytes())


def main() -> None:
    app = Application([
        (PREFIX, GraderPage),
        (url_path_join(PREFIX, "oauth_callback"), HubOAuthCallbackHandler),
        (url_path_join(PREFIX, r"files/([0-9a-z_]+)/(class\.csv|report)"), GradingFiles),
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
