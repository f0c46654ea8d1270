"""The course hub (`make hub`, hub/): the user list, the accounts and their isolation, nbgrader's
exchange, and the class's loop on the command line, each step as the account that takes it:
release, fetch, submit (resubmit, late, wrong chapter, never), collect and grade, feedback back.

Needs root (the hub makes Unix accounts); the accounts are made with random names and deleted
with their homes afterwards. tests/browser/test_hub_in_browser.py drives the same loop in Chromium.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from conftest import CHAPTERS, REPO
from course.notebook import exercises
from notebook_runs import mutants_of
from hub_server import HubUser, as_user, classroom, cleanup, make_class, prepare

sys.path.insert(0, str(REPO / "hub"))
import accounts  # noqa: E402

pytestmark = [pytest.mark.xdist_group("hub")]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the hub makes Unix accounts: root only")
CHAPTER = "00_tour"


def solved(wrong: dict[str, str] | None = None) -> nbformat.NotebookNode:
    """The release notebook with every automatic exercise's solution pasted in (or `wrong`'s code)."""
    source = nbformat.read(REPO / "source" / CHAPTER / f"{CHAPTER}.ipynb", 4)
    nb = nbformat.read(REPO / "release" / CHAPTER / f"{CHAPTER}.ipynb", 4)
    for ex_id, ex in exercises(source).items():
        if ex.manual:
            continue
        target = exercises(nb)[ex_id].solution_cells[0]
        nb.cells[target].source = (wrong or {}).get(ex_id) or source.cells[ex.solution_cells[0]].source
    return nb


def typical_mistake() -> dict[str, str]:
    chapter = next(c for c in CHAPTERS if c.id == CHAPTER)
    return {"ex_count_parameters": next(iter(mutants_of(chapter)["ex_count_parameters"].values())).code}


def hidden_test_lines() -> list[str]:
    source = nbformat.read(REPO / "source" / CHAPTER / f"{CHAPTER}.ipynb", 4)
    lines = []
    for cell in source.cells:
        if "### BEGIN HIDDEN TESTS" in cell.source:
            hidden = cell.source.split("### BEGIN HIDDEN TESTS", 1)[1].split("### END HIDDEN TESTS", 1)[0]
            lines += [line.strip() for line in hidden.splitlines() if len(line.strip()) > 25]
    return lines


# ---------------------------------------------------------------- the user list (no root needed)

@pytest.mark.parametrize("text, message", [
    ("ada instructor\n", "no students"),
    ("ana student\nbo student\n", "0 instructors"),
    ("ada instructor\nbob instructor\nana student\n", "2 instructors"),
    ("ada instructor\nAna student\n", "not a usable account name"),
    ("ada instructor\nana pupil\n", "must be instructor or student"),
    ("ada instructor\nana student\nana student\n", "listed twice"),
    ("ada instructor\nana student extra\n", "expected `NAME ROLE`"),
])
def test_a_bad_user_list_is_refused_naming_the_line(tmp_path, text, message):
    users = tmp_path / "users.txt"
    users.write_text("# the class\n" + text)
    with pytest.raises(accounts.UserListError, match=re.escape(message)):
        accounts.parse(users)


def test_the_example_user_list_parses_and_a_missing_one_says_what_to_do(tmp_path):
    roles = accounts.parse(REPO / "hub" / "users.example.txt")
    assert list(roles.values()).count("instructor") == 1 and len(roles) >= 3
    with pytest.raises(accounts.UserListError, match="copy hub/users.example.txt"):
        accounts.parse(tmp_path / "missing.txt")


def test_the_classroom_command_without_a_hub_says_what_to_do(tmp_path):
    """Pointed at a folder where no `make hub` ran, the instructor's command exits 2 with a sentence."""
    import settings as hub_settings
    with pytest.raises(hub_settings.NoHub, match="start one with `make hub`"):
        hub_settings.load(tmp_path)
    done = subprocess.run([sys.executable, str(REPO / "hub" / "classroom.py"), "--state", str(tmp_path), "status"],
                          capture_output=True, text=True, timeout=60)
    expected = "start one with `make hub`" if os.geteuid() == 0 else "run it as root"
    assert done.returncode == 2 and expected in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_stopping_gives_the_repository_back_its_mode(tmp_path):
    """What `make hub` closed (chmod o-rwx), `make hub-stop` (or the hub's own stop) opens again, once; a
    second start keeps the mode from before the first."""
    import start
    from settings import Settings
    repo, state = tmp_path / "repo", tmp_path / "state"
    repo.mkdir(mode=0o755)
    state.mkdir()
    s = Settings(state=state, repo=repo, runtime_dir=tmp_path / "runtime")
    start.close_repository(s)
    start.close_repository(s)  # a second start: the mode to restore is still 755
    assert _mode(repo) == 0o750
    done = subprocess.run([sys.executable, str(REPO / "hub" / "start.py"), "--stop", "--state", str(state)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "no hub of" in done.stdout and "back its mode 755" in done.stdout, done.stdout
    assert _mode(repo) == 0o755 and start.restore_repository(state) is None


def test_stopping_ends_what_the_servers_left_and_no_ones_own_login(tmp_path):
    """After JupyterHub stops, `make hub` ends what its servers left running: for an account it did not make
    ('nobody' here), only processes a hub server started (they carry JUPYTERHUB_USER), never the owner's own."""
    import pwd
    import accounts
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' account here")
    own = subprocess.Popen(["runuser", "-u", "nobody", "--", "sleep", "120"])
    left = subprocess.Popen(["runuser", "-u", "nobody", "--", "env", "JUPYTERHUB_USER=nobody", "sleep", "120"])
    try:
        time.sleep(1)
        assert accounts.end_leftover_processes(["nobody"], tmp_path, seconds=5) == ["nobody"]
        assert left.wait(timeout=10) is not None
        assert own.poll() is None, "the account's own process was ended"
    finally:
        own.kill()
        left.kill()
        own.wait()
        left.wait()


# ---------------------------------------------------------------- formgrader as the course uses it (no hub)

FORMGRADER_HIDDEN = {"manage_assignments.tpl": {"Generate", "Collect", "Generate Feedback", "Release Feedback"},
                     "manage_submissions.tpl": {"Autograde", "Generate Feedback", "Release Feedback"}}


@pytest.mark.parametrize("template", sorted(FORMGRADER_HIDDEN))
def test_formgrader_pages_hide_the_buttons_the_course_replaces(template):
    """nbgrader's own template, rendered and passed through the course's extension: the columns of the
    buttons the grader page replaces are hidden (heading and cells, by position), the rest stay."""
    import course_formgrader
    from jinja2 import Environment, FileSystemLoader
    from nbgrader.server_extensions.formgrader import handlers
    env = Environment(loader=FileSystemLoader([handlers.template_path]))
    page = course_formgrader.course_page(env.get_template(template).render(base_url="/user/ada", url_prefix="course"))
    thead = re.search(r"<thead>(.*?)</thead>", page, re.S).group(1)
    headings = [h.strip() for h in re.findall(r"<th[^>]*>(.*?)</th>", thead, re.S)]
    style = re.search(r"<style id='course-formgrader'>(.*?)</style>", page, re.S)
    assert style, f"{template}: no style block was added"
    hidden = {headings[int(n) - 1] for n in re.findall(r"th:nth-child\((\d+)\)", style.group(1))}
    cells = {headings[int(n) - 1] for n in re.findall(r"td:nth-child\((\d+)\)", style.group(1))}
    assert hidden == cells == FORMGRADER_HIDDEN[template], (template, headings, style.group(1))
    assert "course-formgrader-note" in page and "grader page" in page


def test_formgrader_refuses_the_requests_behind_the_hidden_buttons(monkeypatch):
    """Each hidden button's API handler (nbgrader's class, patched whichever extension loads first) answers
    403 with what to use instead; the handlers the course still uses (release, grades) are untouched."""
    import course_formgrader
    from nbgrader.server_extensions.formgrader import apihandlers, base
    routes = {handler.__name__ for _, handler in apihandlers.default_handlers}
    assert set(course_formgrader.REFUSED) <= routes, "a refused handler is no longer one of formgrader's routes"
    for name in [*course_formgrader.REFUSED, "ReleaseHandler", "GradeHandler"]:
        monkeypatch.setattr(getattr(apihandlers, name), "post", getattr(apihandlers, name).post)
    monkeypatch.setattr(base.BaseHandler, "render", base.BaseHandler.render)
    release, grade = apihandlers.ReleaseHandler.post, apihandlers.GradeHandler.post
    course_formgrader.patch(base, apihandlers)
    course_formgrader.patch(base, apihandlers)  # twice (a second load): no render wrapped twice
    assert base.BaseHandler.render.__wrapped__.__name__ == "render"
    assert apihandlers.ReleaseHandler.post is release and apihandlers.GradeHandler.post is grade

    class Request:
        def set_status(self, code):
            self.status = code

        def set_header(self, name, value):
            pass

        def finish(self, body):
            self.body = json.loads(body)

    for name, why in course_formgrader.REFUSED.items():
        request = Request()
        getattr(apihandlers, name).post(request, "00_tour", "ana")
        assert request.status == 403 and request.body == {"success": False, "error": request.body["error"]}
        assert why in request.body["error"], (name, request.body)


def test_the_instructors_server_loads_the_course_formgrader_and_the_runtime_carries_it(tmp_path):
    """hub/start.py enables the extension for the instructor alone; hub/runtime.py copies its module into the
    servers' runtime (whose fingerprint follows the file, so an edit reaches the next `make hub`)."""
    import runtime
    import start
    from settings import Settings
    s = Settings(state=tmp_path / "state", repo=REPO, exchange=tmp_path / "exchange")
    start.write_role_config(s, tmp_path / "course")
    extensions = {role: json.loads((s.state / "config" / role / "jupyter_server_config.json").read_text())
                  ["ServerApp"]["jpserver_extensions"] for role in ("student", "instructor")}
    assert extensions["instructor"].get("course_formgrader") is True
    assert "course_formgrader" not in extensions["student"]
    assert extensions["student"]["nbgrader.server_extensions.formgrader"] is False
    assert all((REPO / "hub" / name).is_file() for name in runtime.SERVER_MODULES)
    assert {"course_formgrader.py", "course_assignment_list.py"} <= set(runtime.SERVER_MODULES)
    assert extensions["student"].get("course_assignment_list") is True


# ---------------------------------------------------------------- the students' Assignment List (no hub)

def _listed(*stamps: str) -> list[dict]:
    return [{"assignment_id": CHAPTER, "submissions": [{"timestamp": t} for t in stamps]}]


@pytest.mark.parametrize("policy, stamps, expected", [
    # on time, once: the due date, nothing about which counts
    ("latest", ["2026-12-01 16:00:00.000000 UTC"], ["on time: due 2026-12-01 17:00 UTC"]),
    # late, once: how late, and that it counts as it is
    ("on-time", ["2026-12-01 18:12:03.000000 UTC"],
     ["late by 1 h 12 min: due 2026-12-01 17:00 UTC; this one counts, graded as it is"]),
    # on time then late, policy latest: the late one counts
    ("latest", ["2026-12-01 16:40:00.000000 UTC", "2026-12-02 17:00:00.000000 UTC"],
     ["on time: due 2026-12-01 17:00 UTC; not graded: your submission of 2026-12-02 17:00:00.000000 UTC counts",
      "late by 1 d 0 min: due 2026-12-01 17:00 UTC; this one counts, graded as it is"]),
    # on time then late, policy on-time: the on-time one counts, the late one is kept, not graded
    ("on-time", ["2026-12-01 16:40:00.000000 UTC", "2026-12-01 17:00:30.000000 UTC"],
     ["on time: due 2026-12-01 17:00 UTC; this one counts",
      "late by 30 s: due 2026-12-01 17:00 UTC; not graded: your submission of 2026-12-01 16:40:00.000000 UTC, "
      "the latest on time, counts"]),
])
def test_the_assignment_list_says_which_submission_is_late_and_which_counts(policy, stamps, expected):
    import course_assignment_list as listing
    dates = {CHAPTER: {"due": "2026-12-01T17:00:00+00:00", "policy": policy}}
    shown = [s["timestamp"] for s in listing.annotate(_listed(*stamps), dates)[0]["submissions"]]
    assert shown == [f"{t}  ({note})" for t, note in zip(stamps, expected)], shown
    # with no due date published, one submission is shown as nbgrader shows it
    assert listing.annotate(_listed(stamps[0]), {})[0]["submissions"][0]["timestamp"] == stamps[0]


def test_the_assignment_list_extension_wraps_nbgrader_once_and_keeps_its_list_on_a_bad_file(tmp_path):
    import course_assignment_list as listing

    class Lister:  # nbgrader's AssignmentList, as far as the extension uses it
        log = SimpleNamespace(exception=lambda *a: None)

        def list_submitted_assignments(self, course_id=None):
            return {"success": True, "value": _listed("2026-12-01 18:00:00.000000 UTC")}

    (tmp_path / listing.DUE_FILE).write_text(json.dumps({CHAPTER: {"due": "2026-12-01T17:00:00+00:00"}}))
    listing.patch(Lister, lambda: listing.read_dates([tmp_path / "none", tmp_path]))
    listing.patch(Lister, lambda: {})  # a second load wraps nothing again
    shown = Lister().list_submitted_assignments("picotorch")["value"][0]["submissions"][0]["timestamp"]
    assert shown.endswith("(late by 1 h 0 min: due 2026-12-01 17:00 UTC; this one counts, graded as it is)"), shown
    (tmp_path / listing.DUE_FILE).write_text(json.dumps({CHAPTER: {"due": "not a date"}}))
    shown = Lister().list_submitted_assignments("picotorch")["value"][0]["submissions"][0]["timestamp"]
    assert shown == "2026-12-01 18:00:00.000000 UTC", shown


def test_due_dates_and_policies_are_published_for_the_students_readable(tmp_path, monkeypatch):
    """classroom.publish_due_dates: the gradebook's due dates (set by `due` or formgrader) and the policies,
    in HUB_STATE/config/student/course-due.json, mode 644; a policy set later is published at once."""
    import classroom
    from nbgrader.api import Gradebook
    from settings import Settings
    s = Settings(state=tmp_path / "state", repo=REPO, roles={"ada": "instructor", "ana": "student"})
    (s.state / "config" / "student").mkdir(parents=True)
    monkeypatch.setattr(classroom, "course_folder", lambda s: tmp_path / "course")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")  # alembic
    from autograder.nbgrader_env import stamp_in_process
    stamp_in_process()  # the new gradebook's alembic stamp without a 3 s `alembic heads` command
    (tmp_path / "course").mkdir()
    with Gradebook(f"sqlite:///{tmp_path / 'course' / 'gradebook.db'}") as gb:
        gb.update_or_create_assignment(CHAPTER, duedate=datetime.datetime(2026, 12, 1, 17, 0))
        gb.update_or_create_assignment("01_tensor")  # no due date: not published
    classroom.publish_due_dates(s)
    path = s.state / "config" / "student" / "course-due.json"
    assert json.loads(path.read_text()) == {CHAPTER: {"due": "2026-12-01T17:00:00+00:00", "policy": "latest"}}
    assert _mode(path) == 0o644
    classroom._set_late_policy(s, CHAPTER, "on-time")
    assert json.loads(path.read_text())[CHAPTER]["policy"] == "on-time"


# ---------------------------------------------------------------- the command-line loop

@pytest.fixture(scope="module")
def klass():
    if os.geteuid() != 0:
        pytest.skip("the hub makes Unix accounts: root only")
    tc = make_class(("ana", "bo", "cy", "dee"))
    try:
        done = prepare(tc)
        assert done.returncode == 0, done.stdout + done.stderr
        yield tc
    finally:
        cleanup(tc)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@needs_root
def test_accounts_homes_exchange_and_repository_are_closed_as_nbgrader_expects(klass):
    tc = klass
    for name in [tc.instructor, *tc.students]:
        assert _mode(tc.homes / name) == 0o700, name
        assert tc.passwords.get(name), f"{name} has no first password"
    assert _mode(tc.state / "passwords.txt") == 0o600
    assert _mode(tc.exchange) == 0o1777  # nbgrader's ugo+rw, and the sticky bit
    course = tc.exchange / "picotorch"
    assert {p.name: _mode(p) for p in course.iterdir()} == {"outbound": 0o755, "inbound": 0o2733, "feedback": 0o711}
    assert all(p.owner() == tc.instructor for p in [course, *course.iterdir()])
    assert _mode(REPO) & 0o007 == 0, "the repository (solutions, hidden tests) must be closed to other users"
    assert _mode(tc.course()) == 0o700 and (tc.course() / "release" / CHAPTER / f"{CHAPTER}.ipynb").is_file()
    assert not list((tc.course() / "source").rglob("[0-9][0-9]_*.py")), "the chapter's text form stays in the repo"


@needs_root
def test_the_class_loop_on_the_command_line(klass):
    tc = klass
    ana, bo, cy, dee = tc.students
    nb_name = f"{CHAPTER}/{CHAPTER}.ipynb"

    r = classroom(tc, "grade", CHAPTER)
    assert r.returncode == 1 and "has not been released" in r.stderr, r.stderr
    r = as_user(tc, tc.instructor, f"cd course && nbgrader release_assignment {CHAPTER}", role="instructor")
    assert r.returncode == 0 and "Released as" in r.stderr, r.stderr
    r = classroom(tc, "grade", CHAPTER)
    assert r.returncode == 1 and f"no submissions of {CHAPTER} in the exchange yet" in r.stderr, r.stderr
    r = classroom(tc, "grade", "07_nothing")
    assert r.returncode == 1 and "no chapter '07_nothing'" in r.stderr, r.stderr

    for name in (ana, bo, cy):
        r = as_user(tc, name, f"nbgrader fetch_assignment {CHAPTER}")
        assert r.returncode == 0 and (tc.homes / name / nb_name).exists(), r.stderr
    # a student cannot see the others' work, the instructor's course folder, nor list the inbound
    r = as_user(tc, ana, f"cat {tc.homes / bo / nb_name}; ls {tc.course()}; ls {tc.exchange}/picotorch/inbound; "
                         f"cat {REPO}/source/{CHAPTER}/{CHAPTER}.py")
    assert r.stderr.count("Permission denied") == 4, r.stderr

    def submit(name, nb):
        _submit(tc, name, nb)

    written = solved()
    for ex in exercises(written).values():  # ana also writes her answer to the question graded by hand
        if ex.manual:
            written.cells[ex.solution_cells[0]].source = "Each call builds its graph anew, so Python decides."
    submit(ana, written)
    submit(bo, nbformat.read(REPO / "release" / nb_name, 4))  # first: the blank notebook
    submit(bo, solved(typical_mistake()))  # then again, with one typical mistake: this one counts
    forged = forge_submissions(tc)  # ana's in bo's name, and dee's links to the instructor's source/
    due = datetime.datetime.now(datetime.timezone.utc)
    r = classroom(tc, "due", CHAPTER, due.strftime("%Y-%m-%d %H:%M:%S"), "--late-policy", "on-time")
    assert r.returncode == 0 and "late policy on-time" in r.stdout, r.stdout + r.stderr
    time.sleep(1.1)
    wrong = nbformat.read(REPO / "release" / "01_tensor" / "01_tensor.ipynb", 4)
    submit(cy, wrong)  # late, and another chapter's notebook under 00_tour's name
    submit(ana, nbformat.read(REPO / "release" / nb_name, 4))  # late, blank: the on-time one counts

    r = classroom(tc, "grade", CHAPTER, "--workers", "1", timeout=1200)  # 2 to run: 1 grader
    assert r.returncode == 0, r.stdout + r.stderr
    _the_first_grading_says(tc, r.stdout, forged)
    _the_assignment_list_says_which_submission_counts(tc)
    _feedback_is_released(tc)
    _a_resubmission_is_graded_alone(tc)


def _submit(tc, name, nb):
    nb_name = f"{CHAPTER}/{CHAPTER}.ipynb"
    nbformat.write(nb, "/tmp/" + name + ".ipynb")
    os.chmod("/tmp/" + name + ".ipynb", 0o644)
    r = as_user(tc, name, f"cp /tmp/{name}.ipynb {nb_name} && nbgrader submit {CHAPTER}")
    os.unlink("/tmp/" + name + ".ipynb")
    assert r.returncode == 0 and "Submitted as" in r.stderr, r.stderr
    time.sleep(1.1)  # nbgrader's timestamps tell submissions apart


def _the_assignment_list_says_which_submission_counts(tc):
    """ana's Assignment List, as her server lists it (nbgrader's AssignmentList with the course's extension,
    in the runtime, reading the due date the hub published): her late resubmission is late and not graded,
    her submission on time counts (late policy on-time)."""
    ana = tc.students[0]
    code = ("import json, os, course_assignment_list as c; from jupyter_core.paths import jupyter_config_path; "
            "from nbgrader.server_extensions.assignment_list.handlers import AssignmentList; "
            "c.patch(AssignmentList, lambda: c.read_dates(jupyter_config_path())); m = AssignmentList(); "
            "m.root_dir = os.getcwd(); print(json.dumps(m.list_submitted_assignments(course_id='picotorch')))")
    r = as_user(tc, ana, f'python -c "{code}"')
    listed = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    assert listed.get("success"), r.stdout + r.stderr
    shown = [s["timestamp"] for a in listed["value"] if (a["assignment_id"], a["student_id"]) == (CHAPTER, ana)
             for s in a["submissions"]]  # nbgrader lists her submission in bo's name (forged) apart
    assert len(shown) == 2 and "on time: due" in shown[0] and "this one counts" in shown[0], shown
    assert "late by" in shown[1] and "the latest on time, counts" in shown[1], shown


def _the_first_grading_says(tc, out, forged):
    ana, bo, cy, dee = tc.students
    assert "3 new or changed, 0 unchanged" in out, out
    assert str(tc.state) not in out and str(tc.homes) not in out and str(REPO) not in out, "server paths shown"
    summary = out.split(" students submitted", 1)[1]  # the class's lines, after autograder grade's own table
    lines = {name: next(line for line in summary.splitlines() if line.strip().startswith(name + " "))
             for name in (ana, bo, cy, dee)}
    assert "15/17" in lines[ana] and "late" not in lines[ana], out
    assert re.search(rf"{ana} .*\n\s+note: 2 submissions: the latest before the due date .* counts; 1 after it "
                     r"kept, not graded", summary), summary
    assert "13/17" in lines[bo] and "2 submissions: the latest counts" in lines[bo], out
    assert "0/17" in lines[cy] and "late by" in lines[cy], out
    assert re.search(rf"{cy} .*\n(\s+note: .*\n)*\s+note: [^\n]*01_tensor", summary), "the wrong chapter is not named"
    assert "never submitted" in lines[dee], out
    inbound = os.listdir(tc.exchange / "picotorch" / "inbound")
    assert sum(n.startswith(bo + "+") for n in inbound) == 2, "the earlier submission must stay in the exchange"
    refused_as_forged(tc, forged, out, inbound)
    csv_text = (tc.state / "grading" / CHAPTER / "class.csv").read_text()
    assert f"{dee},never submitted" in csv_text and f"{cy},late" in csv_text

    report = (tc.state / "grading" / CHAPTER / "out" / "report" / f"{CHAPTER}.html").read_text()
    assert f"<p id='never'>{dee}</p>" in report and f"<td>{cy}</td>" in report.split("id='late'")[1], report
    pending = report.split("id='hand-pending'>", 1)[1].split("</p>", 1)[0]
    assert ana in pending and bo not in pending, pending  # bo wrote nothing: nbgrader gives 0, nothing to grade


def _feedback_is_released(tc):
    ana, bo, cy, dee = tc.students
    r = classroom(tc, "release-feedback", CHAPTER)  # ana's written answer is not graded by hand yet
    assert r.returncode == 1 and "still have answers to grade by hand" in r.stderr and ana in r.stderr, r.stderr
    r = classroom(tc, "release-feedback", CHAPTER, "--yes")
    assert r.returncode == 0 and "to 3 student(s)" in r.stdout and "Not graded by hand yet" in r.stdout, \
        r.stdout + r.stderr
    hidden = hidden_test_lines()
    assert hidden
    pages = {}
    for name in (ana, bo, cy, dee):
        r = as_user(tc, name, f"nbgrader fetch_feedback {CHAPTER}")
        found = list((tc.homes / name / CHAPTER / "feedback").glob(f"*/{CHAPTER}.html")) \
            if (tc.homes / name / CHAPTER).exists() else []
        pages[name] = found[0].read_text() if found else None
    assert pages[dee] is None
    assert "15 / 15" in pages[ana] and "<strong>13 / 15</strong>" in pages[bo]
    assert "count_parameters" in pages[bo] and "failed" in pages[bo]
    assert "after the due date" in pages[cy] and "Submitted" not in pages[ana].split("<table")[0]
    assert "the latest before the due date" in pages[ana] and "not graded yet / 2" in pages[ana]
    assert "0 / 2" not in pages[ana], "an answer not graded by hand yet must not read as a zero"
    assert "0 / 2 (no answer written)" in pages[bo], "an answer left blank is a zero, and says why"
    for name in (ana, bo, cy):
        assert name in pages[name] and all(n not in pages[name] for n in (ana, bo, cy) if n != name)
        leaked = [line for line in hidden if line in pages[name]]
        assert not leaked, f"hidden test lines in {name}'s feedback: {leaked[:3]}"
    r = as_user(tc, ana, f"ls {tc.exchange}/picotorch/feedback")
    assert "Permission denied" in r.stderr, "students must not list the feedback exchange"


def forge_submissions(tc) -> dict[str, str]:
    """What a student can put into the exchange's inbound, which everyone may write (nbgrader's design):
    ana submits her notebook in bo's name (`nbgrader submit --student`), and dee, who never submits, files a
    link to the instructor's source/ (which `nbgrader collect` would copy as the instructor: the solutions) and
    a folder whose notebook is such a link. Each is later than bo's own submission; {entry: why refused}."""
    ana, bo, cy, dee = tc.students
    r = as_user(tc, ana, f"nbgrader submit {CHAPTER} --student {bo}")
    assert r.returncode == 0 and "Submitted as" in r.stderr, r.stderr  # nbgrader itself lets it through
    inbound = tc.exchange / "picotorch" / "inbound"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    source = tc.course() / "source" / CHAPTER
    r = as_user(tc, dee, f"cd {inbound} && ln -s {source} '{dee}+{CHAPTER}+{stamp}+a' && "
                         f"mkdir '{dee}+{CHAPTER}+{stamp}+b' && cd '{dee}+{CHAPTER}+{stamp}+b' && "
                         f"ln -s {source}/{CHAPTER}.ipynb {CHAPTER}.ipynb && echo '{stamp}' > timestamp.txt")
    assert r.returncode == 0, r.stderr
    by_ana = next(n for n in os.listdir(inbound) if n.startswith(f"{bo}+") and inbound.joinpath(n).owner() == ana)
    time.sleep(1.1)
    return {by_ana: f"it was made by {ana}'s account in the name of {bo}",
            f"{dee}+{CHAPTER}+{stamp}+a": "it is not a folder but a link",
            f"{dee}+{CHAPTER}+{stamp}+b": f"it holds a link, {CHAPTER}.ipynb"}


def refused_as_forged(tc, forged: dict[str, str], out: str, inbound: list[str]) -> None:
    """Each forged entry was named and moved out of the exchange; the graded notebooks (with the hidden
    tests) stay out of a student's reach."""
    for name, why in forged.items():
        assert f"warning: refused {name} from the exchange's inbound: {why}" in out, out
        assert name not in inbound and (tc.state / "grading" / "refused" / CHAPTER / name).exists()
    ana = tc.students[0]
    r = as_user(tc, ana, f"ls {tc.state}/grading; cat {tc.course()}/autograded/{ana}/{CHAPTER}/{CHAPTER}.ipynb")
    assert r.stderr.count("Permission denied") == 2, "the graded notebooks hold the hidden tests: " + r.stderr


def test_an_inbound_entry_that_is_not_its_students_own_is_refused_before_collect(tmp_path, monkeypatch):
    """hub/classroom.py's check alone (no hub, no root): an entry in another account's name, a link, a folder
    holding a link or a FIFO (which would block `nbgrader collect`'s copy) leave the inbound before collect;
    the entry of the account that made it stays; one changed while collected costs that copy."""
    import pwd
    import classroom
    me = pwd.getpwuid(os.geteuid()).pw_name
    s = SimpleNamespace(exchange=tmp_path / "exchange", course_id="picotorch", state=tmp_path / "state")
    inbound = s.exchange / "picotorch" / "inbound"
    own, other = inbound / f"{me}+{CHAPTER}+2026-12-01 10:00:00 UTC+x", inbound / f"nobody+{CHAPTER}+t+y"
    link, fifo = inbound / f"{me}+{CHAPTER}+t+link", inbound / f"{me}+{CHAPTER}+t+fifo"
    for folder in (own, other, fifo):
        folder.mkdir(parents=True)
        (folder / f"{CHAPTER}.ipynb").write_text("{}")
    os.mkfifo(fifo / "timestamp.txt")
    link.symlink_to(tmp_path)
    (inbound / f"{me}+01_tensor+t+z").symlink_to(tmp_path)  # another chapter's: not this collect's business
    said = []
    kept = classroom.refuse_forged(s, CHAPTER, said.append)
    assert list(kept) == [own.name] and own.is_dir() and (inbound / f"{me}+01_tensor+t+z").is_symlink()
    assert sorted(p.name for p in (s.state / "grading" / "refused" / CHAPTER).iterdir()) == \
        sorted([other.name, link.name, fifo.name])
    assert any(f"made by {me}'s account in the name of nobody" in line for line in said), said
    assert any("not a folder but a link" in line for line in said) and \
        any("holds a special file, timestamp.txt" in line for line in said), said
    collected = tmp_path / "course" / "submitted" / me / CHAPTER
    collected.mkdir(parents=True)
    monkeypatch.setattr(classroom, "course_folder", lambda s: tmp_path / "course")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")  # alembic
    from autograder.nbgrader_env import stamp_in_process
    stamp_in_process()  # the new gradebook's alembic stamp without a 3 s `alembic heads` command
    classroom.changed_while_collected(s, CHAPTER, kept, said.append)
    assert collected.is_dir(), "an entry that did not change keeps its collected copy"
    (own / f"{CHAPTER}.ipynb").unlink()
    (own / f"{CHAPTER}.ipynb").symlink_to(tmp_path)  # swapped in while the instructor's account copied
    classroom.changed_while_collected(s, CHAPTER, kept, said.append)
    assert not collected.exists() and "changed or arrived while it was being collected" in said[-1]
    collected.mkdir(parents=True)
    kept = classroom.refuse_forged(s, CHAPTER, said.append)
    (inbound / f"{me}+{CHAPTER}+t+late").symlink_to(tmp_path)  # put there after the check
    classroom.changed_while_collected(s, CHAPTER, kept, said.append)
    assert not collected.exists() and f"{me}+{CHAPTER}+t+late" in said[-1]


def _a_resubmission_is_graded_alone(tc):
    """cy resubmits, right this time: grading again grades cy alone, and keeps the others' grades; the
    grader page's table shows the class, and a submission after the grading says the grading is not current."""
    ana, bo, cy, dee = tc.students
    _submit(tc, cy, solved())
    r = classroom(tc, "grade", CHAPTER, "--workers", "1", timeout=600)
    assert r.returncode == 0 and "1 new or changed, 2 unchanged" in r.stdout, r.stdout + r.stderr
    assert re.search(rf"{cy} +15/17 .*late by", r.stdout) and re.search(rf"{bo} +13/17", r.stdout), r.stdout
    table, state = _grader_page(tc)
    _the_table_shows_the_class(tc, table)
    assert "graded" in state and "wait" not in state, state
    _submit(tc, bo, solved())
    _, state = _grader_page(tc)
    assert "graded, but 1 newer submission(s) wait" in state and bo in state, state


def _the_table_shows_the_class(tc, table):
    ana, bo, cy, dee = tc.students
    rows = re.findall(r"<tr data-student='([^']+)'>(.*?)</tr>", table)
    assert [name for name, _ in rows] == [ana, bo, cy, dee], table
    by = dict(rows)
    assert "never submitted" in by[dee] and ">late<" in by[cy] and ">graded<" in by[ana]
    assert "title='ex_count_parameters: failed, 0/" in by[bo] and f"files/{CHAPTER}/feedback/{bo}" in by[bo]
    assert table.count("<th class='ex'") == len(exercises(nbformat.read(REPO / "release" / CHAPTER /
                                                                        f"{CHAPTER}.ipynb", 4)))
    assert str(tc.state) not in table and str(tc.homes) not in table


def _grader_page(tc):
    """The grader page's class table and state from the grading above, rendered without a hub (the browser
    test clicks through the same page)."""
    env = {"HUB_STATE": str(tc.state), "JUPYTERHUB_SERVICE_PREFIX": "/services/grader/"}
    code = ("import grader_service as g, json, classroom\n"
            f"subs = [i for i in classroom.inbound(g.S) if i.chapter == {CHAPTER!r}]\n"
            f"print(json.dumps([g.class_table({CHAPTER!r}), "
            f"g.chapter_state({CHAPTER!r}, g.load_table({CHAPTER!r}), subs)]))")
    done = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-c", code], cwd=REPO / "hub", text=True,
                          capture_output=True, env={**os.environ, **env}, timeout=120)
    assert done.returncode == 0, done.stderr
    return __import__("json").loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the hub itself

def the_hub_keeps_each_account_to_itself(tc, url: str) -> None:
    """What `make hub` serves, asked for as the class's students and instructor would, with the hub running
    (tests/browser/test_hub_in_browser.py calls this on its hub, after the class's loop: one hub start for both):
    logins, a student's terminal (their own account; the repository, the others' homes, the course folder, the
    inbound and the hub's own files closed), the server's token opening nothing of the others', the instructor's
    formgrader and grader page."""
    ana, bo = tc.students[:2]
    assert not HubUser(url, ana, "not-the-password").logged_in
    assert not HubUser(url, "root", "x").logged_in
    student = HubUser(url, ana, tc.passwords[ana])
    assert student.logged_in
    student.start_server()
    # the hub's own files too: its database (users, servers, tokens' hashes) and its log
    out = student.terminal(
        f"id -un; python -c 'import course, torch, nbgrader; print(course.__file__)'; "
        f"cat {REPO}/source/{CHAPTER}/{CHAPTER}.py; ls {REPO}; ls {tc.homes / bo}; "
        f"ls {tc.course()}; ls {tc.exchange}/picotorch/inbound; "
        f"cat {tc.state}/jupyterhub.sqlite {tc.state}/jupyterhub.log > /dev/null; echo end-of-checks")
    assert ana in [line.strip() for line in re.split(r"[\r\n]|\x1b\[\?2004l", out)], out
    assert "/tmp/course-hub-tests/runtime/src/course/__init__.py" in out, out
    assert out.count("Permission denied") == 7, out
    # the server's own token (in every process of the student's server) opens nothing of the others'
    api = "curl -s -H \"Authorization: token $JUPYTERHUB_API_TOKEN\""
    out = student.terminal(f"{api} {url}hub/api/users; echo; for u in services/grader/ user/$(echo {bo[:-2]})"
                           f"{bo[-2:]}/api/contents; do {api} -L -o /dev/null -w 'status:%{{http_code}}\\n' "
                           f"{url}$u; done")
    assert not re.search(rf'"name":\s*"{bo}"', out) and bo not in out, out
    codes = re.findall(r"status:(\d+)", out)  # bo's server refuses ana's token (or, stopped, the hub answers)
    assert len(codes) == 2 and codes[0] == "403" and codes[1] in ("403", "404"), out
    assert student.http.get(f"{url}user/{ana}/formgrader", timeout=30).status_code == 404
    assert student.http.get(f"{url}services/grader/", timeout=30).status_code == 403
    assert student.http.get(f"{url}user/{bo}/api/contents", timeout=30).status_code in (403, 404)
    # the grader page's button and its files, asked for directly: refused for a student
    xsrf = student.http.cookies.get("_xsrf", path="/services/grader/") or ""
    pressed = student.http.post(f"{url}services/grader/", data={"action": "grade", "chapter": CHAPTER,
                                                                 "_xsrf": xsrf}, timeout=30)
    assert pressed.status_code == 403, (pressed.status_code, pressed.text[:300])
    for what in ("class.csv", "report"):
        assert student.http.get(f"{url}services/grader/files/{CHAPTER}/{what}", timeout=30).status_code == 403

    teacher = HubUser(url, tc.instructor, tc.passwords[tc.instructor])
    teacher.start_server()
    assert teacher.http.get(f"{url}user/{tc.instructor}/formgrader", timeout=60).status_code == 200
    page = teacher.http.get(f"{url}services/grader/", timeout=30)
    assert page.status_code == 200 and "Grader: picotorch" in page.text


def the_hub_stopped_everything_it_started(tc, mode: int) -> None:
    """After `make hub` stopped: no process of the class's accounts left, the stop logged, and the repository
    given back the mode it had before the hub closed it."""
    for name in [tc.instructor, *tc.students]:
        left = subprocess.run(["ps", "-u", name, "-o", "pid="], capture_output=True, text=True).stdout.split()
        assert not left, f"{name} still has processes after the hub stopped: {left}"
    log = (tc.state.parent / "make-hub.log").read_text()
    assert "hub: stopped" in log, log[-2000:]
    assert _mode(REPO) == mode, "stopping the hub must give the repository back its mode"
    assert "back its mode" in log or not mode & 0o007, log[-2000:]
