"""The class's loop on the course hub, in a real browser, and `make hub` itself: `make hub` on a
loopback port for a test class (an instructor and two students with fresh Unix accounts), each person in a browser context
of their own. The instructor releases 00_tour from formgrader; each student logs in, fetches it
from the Assignment List, pastes an answer (one the solution, one a typical mistake), saves and
submits; the instructor collects and grades from the grader page and sees the class report; the
feedback is released, and each student fetches theirs and reads their own points and messages,
with no hidden test in it. The due date passes, the instructor chooses the late policy on the grader page, one
student submits again, late, and is graded alone (the other's unchanged submission is not). Then, on the same hub, what `make hub` must hold for everyone (logins, each
account closed to the others, roles: tests/platform/test_hub.py's the_hub_keeps_each_account_to_itself)
and, once it stops, that nothing it started is left. Screenshots of each step land in test-artifacts/hub/ (the README
shows three of them, copied to docs/screenshots/hub-*.png).

Needs root (the hub makes Unix accounts), Debian's chromium and Playwright's Python package.
"""
from __future__ import annotations

import datetime
import shutil
import sys
import time
from pathlib import Path

import nbformat
import pytest

from conftest import REPO
from course.notebook import exercises

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "platform"))  # test_hub, whose checks this reuses
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from hub_server import classroom, cleanup, make_class, running_hub  # noqa: E402
from test_hub import (CHAPTER, _mode, hidden_test_lines, the_hub_keeps_each_account_to_itself,  # noqa: E402
                      the_hub_stopped_everything_it_started, typical_mistake)

playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hub"),
              pytest.mark.skipif(__import__("os").geteuid() != 0, reason="the hub makes Unix accounts: root only")]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run"]
ARTIFACTS = REPO / "test-artifacts" / "hub"
SCREENSHOTS = REPO / "docs" / "screenshots"


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def log_in(browser, url: str, name: str, password: str):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.goto(f"{url}hub/login")
    page.fill("#username_input", name)
    page.fill("#password_input", password)
    page.click("#login_submit")
    page.wait_for_url(lambda u: "/hub/login" not in u, timeout=60_000)
    return page


def lab_after_login(page, name: str) -> None:
    """JupyterLab, where the hub's login leads (the spawner's default URL is /lab). Each person loads it once; every
    later step (a notebook, the Assignment List, the feedback) opens inside that page, as a student clicks through it."""
    page.wait_for_url(lambda u: f"/user/{name}/lab" in u, timeout=240_000)
    page.wait_for_function("window.jupyterapp?.shell", timeout=240_000)
    page.wait_for_selector(".jp-LabShell", timeout=60_000)


_OPEN = "async (path) => { await window.jupyterapp.commands.execute('docmanager:open', {path}); }"


def open_notebook(page, path: str) -> None:
    """Open `path` in the JupyterLab page, as a double-click in the file browser does (its tab, if open, comes
    to the front)."""
    page.evaluate(_OPEN, path)
    page.wait_for_function("window.jupyterapp.shell.currentWidget?.content?.widgets?.length > 0", timeout=120_000)


def assignment_list(page, refresh: bool = False):
    """The Assignment List's tab (Nbgrader menu), opened or brought to the front; with `refresh`, its Refresh
    button pressed, for what changed on the server since it was drawn (feedback released)."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    page.locator(".lm-Menu-itemLabel", has_text="Assignment List").click()
    panel = page.locator("#nbgrader-assignment-list, .nbgrader-AssignmentList, [id*='assignment']").last
    page.get_by_text("Released assignments").first.wait_for(timeout=60_000)
    if refresh:
        page.locator("#refresh_assignments_list").click()
    return panel


def click_in_list(page, list_id: str, button: str, timeout: float = 120_000) -> None:
    row = page.locator(f"#{list_id} .list_item", has_text=CHAPTER).first
    row.wait_for(timeout=timeout)
    row.get_by_role("button", name=button, exact=True).click()


def wait_for_job(page, url: str, timeout: float, seen: list[str] | None = None) -> tuple[str, str]:
    """The grader page refreshes itself while a job runs; look again every few seconds until it ends.
    `seen` collects the progress lines shown on the way."""
    deadline = time.monotonic() + timeout
    seen = [] if seen is None else seen
    while True:
        try:
            page.goto(f"{url}services/grader/", timeout=60_000)
            state = page.locator("#job-state").inner_text(timeout=10_000)
            log = page.locator("#log").text_content(timeout=10_000)  # the raw log is folded away
            progress = page.locator("#progress").all_inner_texts()
        except playwright.Error:  # the page refreshed itself under us (or during the goto)
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
            continue
        if progress:
            seen.append(progress[0])
        if "running" not in state or time.monotonic() > deadline:
            return state.strip(), log
        time.sleep(3)


def answer(wrong: dict[str, str] | None) -> dict[int, str]:
    """{cell index in the release notebook: the code a student pastes}."""
    source = nbformat.read(REPO / "source" / CHAPTER / f"{CHAPTER}.ipynb", 4)
    release = nbformat.read(REPO / "release" / CHAPTER / f"{CHAPTER}.ipynb", 4)
    cells = {}
    for ex_id, ex in exercises(source).items():
        if not ex.manual:
            cells[exercises(release)[ex_id].solution_cells[0]] = \
                (wrong or {}).get(ex_id) or source.cells[ex.solution_cells[0]].source
        elif wrong is None:  # the student with the solution also writes the answer graded by hand
            cells[exercises(release)[ex_id].solution_cells[0]] = "Each call builds its graph anew."
    return cells


_PASTE_AND_SAVE = """async (cells) => {
  const panel = window.jupyterapp.shell.currentWidget;
  await panel.context.ready;
  for (const [index, code] of Object.entries(cells)) {
    panel.content.widgets[Number(index)].model.sharedModel.setSource(code);
  }
  for (let i = 0; i < 10 && panel.context.model.dirty; i++) {
    await panel.context.save();
    await new Promise(resolve => setTimeout(resolve, 500));
  }
  return !panel.context.model.dirty;
}"""


def test_the_class_loop_in_the_browser(tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is missing: run scripts/setup.sh as root, or apt-get install chromium")
    tc = make_class(("ana", "bo"))
    ana, bo = tc.students
    mode = _mode(REPO)
    try:
        with running_hub(tc) as url, playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            try:
                _loop(browser, url, tc, ana, bo)
            finally:
                browser.close()
            # `make hub` itself, on the same hub (one start serves both): accounts kept apart, roles enforced
            the_hub_keeps_each_account_to_itself(tc, url)
        the_hub_stopped_everything_it_started(tc, mode)
    finally:
        cleanup(tc)


def _loop(browser, url, tc, ana, bo):
    # the instructor releases 00_tour from formgrader's Manage Assignments
    teacher = log_in(browser, url, tc.instructor, tc.passwords[tc.instructor])
    lab_after_login(teacher, tc.instructor)
    teacher.goto(f"{url}user/{tc.instructor}/formgrader/manage_assignments", timeout=120_000)
    row = teacher.locator("tr", has_text=CHAPTER).first
    row.locator("td.release a").first.wait_for(timeout=60_000)
    # the buttons the grader page replaces are hidden (hub/course_formgrader.py); Release stays
    shown = [h.inner_text().strip() for h in teacher.locator("thead th").all() if h.is_visible()]
    assert "Release" in shown and not {"Generate", "Collect", "Generate Feedback", "Release Feedback"} & set(shown), shown
    assert row.locator("td.collect").is_hidden() and row.locator("td.assign").is_hidden()
    assert "grader page" in teacher.locator("#course-formgrader-note").inner_text()
    row.locator("td.release a").first.click(timeout=60_000)
    teacher.get_by_text(f"Successfully released '{CHAPTER}'").wait_for(timeout=120_000)
    teacher.wait_for_timeout(1000)  # the dialog fades in
    shot(teacher, "01-instructor-releases-in-formgrader")
    teacher.keyboard.press("Escape")

    students = {}
    for name, wrong in ((ana, None), (bo, typical_mistake())):
        page = log_in(browser, url, name, tc.passwords[name])
        lab_after_login(page, name)
        assignment_list(page)
        click_in_list(page, "released_assignments_list", "Fetch")
        page.locator("#fetched_assignments_list .list_item", has_text=CHAPTER).first.wait_for(timeout=120_000)
        shot(page, f"02-{'a' if name == ana else 'b'}-student-fetched")
        open_notebook(page, f"{CHAPTER}/{CHAPTER}.ipynb")
        assert page.evaluate(_PASTE_AND_SAVE, {str(k): v for k, v in answer(wrong).items()}), "the notebook did not save"
        shot(page, f"03-{'a' if name == ana else 'b'}-student-answered")
        assignment_list(page)
        click_in_list(page, "fetched_assignments_list", "Submit")
        page.locator("#submitted_assignments_list .list_item", has_text=CHAPTER).first.wait_for(timeout=120_000)
        shot(page, f"04-{'a' if name == ana else 'b'}-student-submitted")
        students[name] = page

    _grade_and_release(teacher, url, tc, ana, bo)
    _students_read_their_feedback(students, url, ana, bo)
    _a_late_resubmission_is_graded_alone(teacher, students[bo], url, tc, ana, bo)


def _grade_and_release(teacher, url, tc, ana, bo):
    # the instructor collects and grades the class, then releases the feedback, from the grader page
    teacher.goto(f"{url}services/grader/", timeout=60_000)
    assert "2 of 2" in teacher.locator("tr", has_text=CHAPTER).first.inner_text()
    teacher.locator(f"button[value='grade'][data-chapter='{CHAPTER}']").click()
    progress: list[str] = []
    state, log = wait_for_job(teacher, url, 900, progress)
    assert state == "done", log
    assert "15/17" in log and "13/17" in log, log
    assert "2 new or changed, 0 unchanged" in log and "/tmp/course-hub-" not in log, log
    assert "on the standing graders at tls://127.0.0.1:" in log, log  # the hub's, started with it (hub/start.py)
    assert progress and progress[-1].startswith("graded 2 of 2"), progress
    # the class's table: a row per student, a mark per exercise with its status, the feedback one click away
    table = teacher.locator("table#class")
    rows = {r.get_attribute("data-student"): r for r in table.locator("tbody tr").all()}
    assert set(rows) == {ana, bo}, list(rows)
    assert rows[bo].locator("td[title^='ex_count_parameters: failed']").count() == 1
    assert "answers to grade by hand" in teacher.locator("table#chapters").inner_text()
    table.locator("th", has_text="score").click()  # sorted by score, lowest first
    assert table.locator("tbody tr").first.get_attribute("data-student") == bo
    shot(teacher, "05-instructor-grades-the-class")
    feedback = teacher.context.new_page()
    feedback.goto(f"{url}services/grader/files/{CHAPTER}/feedback/{bo}", timeout=60_000)
    assert "13 / 15" in feedback.locator("body").inner_text() and "not graded yet" in feedback.content()
    feedback.close()
    teacher.locator("a", has_text="class report").first.click()
    teacher.wait_for_load_state()
    report = teacher.content()
    assert ana in report and bo in report, "the class report does not show both students"
    shot(teacher, "06-instructor-class-report")
    teacher.goto(f"{url}services/grader/", timeout=60_000)
    asked = []  # the written answers are not graded by hand yet: the page asks before releasing

    def answer_dialog(dialog):
        asked.append(dialog.message)
        dialog.accept()
    teacher.on("dialog", answer_dialog)
    teacher.locator(f"button[value='release-feedback'][data-chapter='{CHAPTER}']").click()
    state, log = wait_for_job(teacher, url, 300)
    assert state == "done" and "released the feedback" in log, log
    assert asked and "grade by hand" in asked[0], asked
    shot(teacher, "07-instructor-releases-feedback")



def _a_late_resubmission_is_graded_alone(teacher, page, url, tc, ana, bo):
    """The due date passes (`hub/classroom.py due`) and the instructor chooses on the grader page that the latest
    submission counts; bo corrects his mistake and submits again: his Assignment List says the new submission is
    late and counts, and the next grading grades him alone, late, with every point."""
    due = datetime.datetime.now(datetime.timezone.utc)
    r = classroom(tc, "due", CHAPTER, due.strftime("%Y-%m-%d %H:%M:%S"))
    assert r.returncode == 0, r.stdout + r.stderr
    time.sleep(1.1)
    teacher.goto(f"{url}services/grader/", timeout=60_000)
    policy = teacher.locator("form", has=teacher.locator(f"button[value='policy'][data-chapter='{CHAPTER}']"))
    policy.locator("select").select_option("latest")
    policy.locator("button[value='policy']").click()
    teacher.wait_for_load_state()
    assert "latest" in teacher.locator("tr", has_text=CHAPTER).first.inner_text()

    open_notebook(page, f"{CHAPTER}/{CHAPTER}.ipynb")
    assert page.evaluate(_PASTE_AND_SAVE, {str(k): v for k, v in answer(None).items()}), "the notebook did not save"
    assignment_list(page)
    click_in_list(page, "fetched_assignments_list", "Submit")
    submitted = page.locator("#submitted_assignments_list")
    submitted.get_by_text("late by").first.wait_for(timeout=120_000)
    shot(page, "09-b-student-resubmits-late")

    teacher.goto(f"{url}services/grader/", timeout=60_000)
    teacher.locator(f"button[value='grade'][data-chapter='{CHAPTER}']").click()
    state, log = wait_for_job(teacher, url, 900)
    assert state == "done", log
    assert "1 new or changed, 1 unchanged" in log and "15/17" in log and "13/17" not in log, log
    assert "on the standing graders at tls://127.0.0.1:" in log, log  # still warm from the first grading
    rows = {r.get_attribute("data-student"): r for r in teacher.locator("table#class tbody tr").all()}
    headers = [h.strip() for h in teacher.locator("table#class thead th").all_inner_texts()]
    late_by = next(i for i, h in enumerate(headers) if h.startswith("late by"))
    assert rows[bo].locator("td").nth(late_by).inner_text().strip(), "bo's late submission is not shown late"
    assert not rows[ana].locator("td").nth(late_by).inner_text().strip(), "ana submitted on time"
    shot(teacher, "10-instructor-grades-the-late-resubmission")


def _students_read_their_feedback(students, url, ana, bo):
    # each student fetches their feedback from the Assignment List and reads it
    hidden = hidden_test_lines()
    for name, expect in ((ana, "15 / 15"), (bo, "13 / 15")):
        page = students[name]
        assignment_list(page, refresh=True)
        click_in_list(page, "submitted_assignments_list", "Fetch Feedback")
        link = page.locator("#submitted_assignments_list a", has_text="view feedback").first
        link.wait_for(timeout=120_000)
        link.click()
        item = page.locator(".jp-DirListing-item", has_text=f"{CHAPTER}.html").first
        item.wait_for(timeout=60_000)
        item.dblclick()
        frame = page.frame_locator(".jp-HTMLViewer iframe, iframe").last
        frame.locator("h1").wait_for(timeout=60_000)
        text = frame.locator("body").inner_text()
        assert expect in text and name in text, text[:1000]
        other = bo if name == ana else ana
        assert other not in text
        assert not [line for line in hidden if line in text], "a hidden test reached the feedback"
        if name == bo:
            assert "count_parameters" in text and "failed" in text, text[:2000]
        shot(page, f"08-{'a' if name == ana else 'b'}-student-reads-feedback")



def test_readme_shows_the_hub_loop():
    readme = (REPO / "README.md").read_text()
    for name in ("hub-student-assignment-list", "hub-grader-page", "hub-student-feedback"):
        assert f"docs/screenshots/{name}.png" in readme
        assert (SCREENSHOTS / f"{name}.png").exists()
