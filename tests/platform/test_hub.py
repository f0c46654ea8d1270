"""The course hub (`make hub`, hub/): the user list, the accounts and their isolation, nbgrader's
exchange, and the class's loop on the command line, each step as the account that takes it:
release, fetch, submit (resubmit, late, wrong chapter, never), collect and grade, feedback back.

Needs root (the hub makes Unix accounts); the accounts are made with random names and deleted
with their homes afterwards. tests/browser/test_hub_in_browser.py drives the same loop in Chromium.
"""
from __future__ import annotations

import datetime
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from conftest import CHAPTERS, REPO
from course.notebook import exercises
from notebook_runs import mutants_of
from hub_server import HubUser, as_user, classroom, cleanup, make_class, prepare, running_hub

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
        nbformat.write(nb, "/tmp/" + name + ".ipynb")
        os.chmod("/tmp/" + name + ".ipynb", 0o644)
        r = as_user(tc, name, f"cp /tmp/{name}.ipynb {nb_name} && nbgrader submit {CHAPTER}")
        os.unlink("/tmp/" + name + ".ipynb")
        assert r.returncode == 0 and "Submitted as" in r.stderr, r.stderr
        time.sleep(1.1)  # nbgrader's timestamps tell submissions apart

    submit(ana, solved())
    submit(bo, nbformat.read(REPO / "release" / nb_name, 4))  # first: the blank notebook
    submit(bo, solved(typical_mistake()))  # then again, with one typical mistake: this one counts
    due = datetime.datetime.now(datetime.timezone.utc)
    r = classroom(tc, "due", CHAPTER, due.strftime("%Y-%m-%d %H:%M:%S"))
    assert r.returncode == 0, r.stderr
    time.sleep(1.1)
    wrong = nbformat.read(REPO / "release" / "01_tensor" / "01_tensor.ipynb", 4)
    submit(cy, wrong)  # late, and another chapter's notebook under 00_tour's name

    r = classroom(tc, "grade", CHAPTER, "--workers", "1", timeout=1200)  # 2 to run: 1 grader
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    summary = out.split(" students submitted", 1)[1]  # the class's lines, after autograder grade's own table
    lines = {name: next(line for line in summary.splitlines() if line.strip().startswith(name + " "))
             for name in (ana, bo, cy, dee)}
    assert "15/17" in lines[ana] and "late" not in lines[ana], out
    assert "13/17" in lines[bo] and "2 submissions: the latest counts" in lines[bo], out
    assert "0/17" in lines[cy] and "late by" in lines[cy], out
    assert re.search(rf"{cy} .*\n(\s+note: .*\n)*\s+note: [^\n]*01_tensor", summary), "the wrong chapter is not named"
    assert "never submitted" in lines[dee], out
    inbound = os.listdir(tc.exchange / "picotorch" / "inbound")
    assert sum(n.startswith(bo + "+") for n in inbound) == 2, "the earlier submission must stay in the exchange"
    csv_text = (tc.state / "grading" / CHAPTER / "class.csv").read_text()
    assert f"{dee},never submitted" in csv_text and f"{cy},late" in csv_text

    r = classroom(tc, "release-feedback", CHAPTER)
    assert r.returncode == 0 and "to 3 student(s)" in r.stdout, r.stdout + r.stderr
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
    assert "after the due date" in pages[cy] and "after the due date" not in pages[ana]
    for name in (ana, bo, cy):
        assert name in pages[name] and all(n not in pages[name] for n in (ana, bo, cy) if n != name)
        leaked = [line for line in hidden if line in pages[name]]
        assert not leaked, f"hidden test lines in {name}'s feedback: {leaked[:3]}"
    r = as_user(tc, ana, f"ls {tc.exchange}/picotorch/feedback")
    assert "Permission denied" in r.stderr, "students must not list the feedback exchange"


# ---------------------------------------------------------------- the hub itself

@needs_root
def test_make_hub_serves_the_class_and_stops_with_everything_it_started():
    tc = make_class(("ana", "bo"))
    try:
        with running_hub(tc) as url:
            ana, bo = tc.students
            assert not HubUser(url, ana, "not-the-password").logged_in
            assert not HubUser(url, "root", "x").logged_in
            student = HubUser(url, ana, tc.passwords[ana])
            assert student.logged_in
            student.start_server()
            out = student.terminal(
                f"id -un; python -c 'import course, torch, nbgrader; print(course.__file__)'; "
                f"cat {REPO}/source/{CHAPTER}/{CHAPTER}.py; ls {REPO}; ls {tc.homes / bo}; "
                f"ls {tc.course()}; ls {tc.exchange}/picotorch/inbound; echo end-of-checks")
            assert ana in [line.strip() for line in re.split(r"[\r\n]|\x1b\[\?2004l", out)], out
            assert "/tmp/course-hub-tests/runtime/src/course/__init__.py" in out, out
            assert out.count("Permission denied") == 5, out
            assert student.http.get(f"{url}user/{ana}/formgrader", timeout=30).status_code == 404
            assert student.http.get(f"{url}services/grader/", timeout=30).status_code == 403
            assert student.http.get(f"{url}user/{bo}/api/contents", timeout=30).status_code in (403, 404)

            teacher = HubUser(url, tc.instructor, tc.passwords[tc.instructor])
            teacher.start_server()
            assert teacher.http.get(f"{url}user/{tc.instructor}/formgrader", timeout=60).status_code == 200
            page = teacher.http.get(f"{url}services/grader/", timeout=30)
            assert page.status_code == 200 and "Grader: picotorch" in page.text
        for name in [tc.instructor, *tc.students]:
            left = subprocess.run(["ps", "-u", name, "-o", "pid="], capture_output=True, text=True).stdout.split()
            assert not left, f"{name} still has processes after the hub stopped: {left}"
        log = (tc.state.parent / "make-hub.log").read_text()
        assert "hub: stopped" in log, log[-2000:]
    finally:
        cleanup(tc)
