"""The student's view, in a real browser: JupyterLab from `make lab` on a copy of
release/, a chapter's notebook run cell by cell, its widgets clicked, the
course's check and nbgrader's Validate button used as a student would.

`make test` makes that pass on the first chapter and the last, `make sweep` on every chapter (conftest's
EVERY_CHAPTER): what the browser adds to tests/widgets/ (a widget renders, a click reaches the kernel and redraws,
the prose renders, check()'s table shows) is the same machinery in every chapter, and a chapter's pass costs a
JupyterLab kernel, check()'s fresh run and Chromium's rendering (its renderer alone some 14 CPU-seconds), about
27 CPU-seconds in all.

Needs Debian's chromium (scripts/setup.sh installs it) and Playwright's Python
package (the dev extra); Playwright's own browser download is not used.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest

from conftest import CHAPTERS, EVERY_CHAPTER, REPO
from course.notebook import exercises
from lab_server import running_lab

playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run"]
ARTIFACTS = REPO / "test-artifacts" / "browser"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """`make lab` on a temporary copy of release/; yields (base URL, token)."""
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is missing: run scripts/setup.sh as root, or apt-get install chromium")
    release = tmp_path_factory.mktemp("lab") / "release"
    shutil.copytree(REPO / "release", release)
    with running_lab(release, "--LabApp.expose_app_in_browser=True") as found:
        yield found


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield b
        b.close()


_RUN_ALL_ONE_BY_ONE = """async () => {
  // JupyterLab's Run All stops at the first error; a student's blank notebook has
  // many, so run each cell in turn, as a student pressing Shift+Enter would.
  const panel = window.jupyterapp.shell.currentWidget;
  await panel.sessionContext.ready;
  const nb = panel.content;
  for (let i = 0; i < nb.widgets.length; i++) {
    nb.activeCellIndex = i;
    await window.jupyterapp.commands.execute('notebook:run-cell');
  }
  return nb.widgets.length;
}"""


_PASTE_AND_SAVE = """async ([index, code]) => {
  // Paste `code` into cell `index` and save until the file on disk holds it. Neither the model's dirty
  // flag nor one save is proof: on a busy machine the edit can reach the model after a save (which then
  // writes the old cell), or the flag can still read clean when checked. The server's copy is the proof.
  const panel = window.jupyterapp.shell.currentWidget;
  await panel.context.ready;
  panel.content.widgets[index].model.sharedModel.setSource(code);
  const contents = window.jupyterapp.serviceManager.contents;
  for (let i = 0; i < 90; i++) {
    await panel.context.save();
    const onDisk = await contents.get(panel.context.path, {content: true});
    const cell = onDisk.content.cells[index];
    const text = Array.isArray(cell.source) ? cell.source.join('') : cell.source;
    if (text === code) return true;
    await new Promise(resolve => setTimeout(resolve, 1000));
  }
  return false;
}"""


def open_notebook(browser, lab, chapter):
    base, token = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    # ?reset: start from an empty workspace, not the tabs an earlier test left open
    page.goto(f"{base}/lab/tree/{chapter.id}/{chapter.notebook.name}?reset&token={token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", state="attached", timeout=60_000)
    page.wait_for_function("window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel",
                           timeout=60_000)
    panel_id = page.evaluate("window.jupyterapp.shell.currentWidget.id")
    return page, page.locator(f"[id='{panel_id}']")


@pytest.fixture(scope="module")
def lab_page(browser, lab):
    """One JupyterLab page for every chapter's pass, as a student keeps one tab open: loading JupyterLab costs
    Chromium more CPU than running most chapters' cells does, so it is loaded once."""
    base, token = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{base}/lab?reset&token={token}")  # ?reset: an empty workspace
    page.wait_for_function("window.jupyterapp?.restored", timeout=120_000)
    page.evaluate("async () => { await window.jupyterapp.started; await window.jupyterapp.restored; }")
    yield page
    page.close()


def open_in_lab_page(page, chapter):
    """Open the chapter's notebook in the lab page, as a double click in the file browser does; returns the
    locator of its panel once its kernel is there."""
    page.evaluate("async path => { await window.jupyterapp.commands.execute('docmanager:open', {path}); }",
                  f"{chapter.id}/{chapter.notebook.name}")
    page.wait_for_function("path => { const w = window.jupyterapp.shell.currentWidget;"
                           " return w?.context?.path === path && w.sessionContext?.session?.kernel; }",
                           arg=f"{chapter.id}/{chapter.notebook.name}", timeout=60_000)
    page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell", state="attached",
                           timeout=60_000)
    panel_id = page.evaluate("window.jupyterapp.shell.currentWidget.id")
    return page.locator(f"[id='{panel_id}']")


_CLOSE_AND_SHUT_DOWN = """async () => {
  // the chapter's tab closes with its kernel, unsaved outputs dropped (what the test ran is not the student's)
  const panel = window.jupyterapp.shell.currentWidget;
  if (!panel || !panel.sessionContext) return;
  await panel.sessionContext.shutdown();
  panel.context.model.dirty = false;
  panel.dispose();
}"""


# nbgrader's Validate button runs the whole notebook once more in nbgrader's own kernel: the button and its
# dialog are the same for every chapter, so one chapter's pass shows a student what it says; that nbgrader
# gives every chapter the course's points is tests/chapters/test_chapters.py::test_plain_nbgrader_gives_the_same_verdicts.
VALIDATED_IN_THE_BROWSER = CHAPTERS[0].id
BROWSER_CHAPTERS = CHAPTERS if EVERY_CHAPTER else [CHAPTERS[0], CHAPTERS[-1]]


def widget_cells(chapter) -> int:
    nb = nbformat.read(REPO / "release" / chapter.id / chapter.notebook.name, 4)
    return sum("course.widgets" in c.source for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("chapter", BROWSER_CHAPTERS, ids=[c.id for c in BROWSER_CHAPTERS])
def test_a_student_runs_the_release_notebook_clicks_its_widgets_and_checks_a_solution(lab_page, chapter):
    """One pass as a student makes it (one pass per chapter keeps the suite's time in bounds): paste the
    first exercise's solution and save, run every cell in turn, see the prose, the stubs failing and the
    widgets answering a click, then `check()` (the last cell) passes it; in VALIDATED_IN_THE_BROWSER, nbgrader's
    Validate agrees."""
    source = nbformat.read(chapter.notebook, 4)
    nb = nbformat.read(REPO / "release" / chapter.id / chapter.notebook.name, 4)
    auto = [e for e, ex in exercises(nb).items() if not ex.manual]
    first = next(ex for ex in exercises(source).values() if not ex.manual)
    solution = source.cells[first.solution_cells[0]].source
    test_cell_source = source.cells[first.test_cells[0]].source.split("\n")[0]
    page = lab_page
    panel = open_in_lab_page(page, chapter)
    try:
        saved = page.evaluate(_PASTE_AND_SAVE, [first.solution_cells[0], solution])
        assert saved, f"the pasted solution of {first.id} never reached the file on disk (90 saves in 90 s)"
        n_cells = page.evaluate(_RUN_ALL_ONE_BY_ONE)  # the last cell is `check()`
        assert n_cells == len(nb.cells)
        title = nb.metadata["course"].get("title", "")
        assert title in panel.locator(".jp-MarkdownOutput h1").first.text_content(), "the prose did not render"
        text = panel.locator(".jp-Notebook").text_content()
        assert text.count("raise NotImplementedError()") >= len(auto) - 1, "the exercise stubs are not shown"
        errors = panel.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        failed = sum("NotImplementedError" in errors.nth(i).text_content() for i in range(errors.count()))
        assert failed >= len(auto) - 1, \
            f"{failed} visible test cells failed on the notebook with one exercise solved; expected {len(auto) - 1}"

        widgets = panel.locator(".jp-OutputArea-output .widget-vbox")
        assert widgets.count() >= widget_cells(chapter), "a widget did not render"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        for i in range(widget_cells(chapter)):
            widget = widgets.nth(i)
            widget.scroll_into_view_if_needed()
            widget.screenshot(path=str(ARTIFACTS / f"{chapter.id}-widget{i}.png"))
            before = widget.inner_text()
            widget.locator("button").first.click()
            page.wait_for_function("([el, before]) => el.innerText !== before",
                                   arg=[widget.element_handle(), before], timeout=30_000)
            widget.screenshot(path=str(ARTIFACTS / f"{chapter.id}-widget{i}-after-click.png"))

        table = panel.locator("table.course-check")
        table.wait_for(timeout=180_000)
        # textContent, not innerText: JupyterLab does not lay out cells out of view, and their innerText is ''
        row = table.locator("tr", has_text=first.id)
        assert "passed" in row.text_content(), row.text_content()
        others = table.locator("tr", has_text="not attempted")
        assert others.count() >= 1, "the other exercises are still blank"

        if chapter.id != VALIDATED_IN_THE_BROWSER:
            return
        panel.locator(".jp-NotebookPanel-toolbar").get_by_text("Validate", exact=True).click()
        dialog = page.locator(".jp-Dialog")
        dialog.wait_for(timeout=180_000)
        page.wait_for_function("!document.querySelector('.jp-Dialog').innerText.includes('Validating')",
                               timeout=180_000)
        report = dialog.inner_text()
        page.screenshot(path=str(ARTIFACTS / f"{chapter.id}-validate.png"))
        assert "NotImplementedError" in report, "Validate must report the blank exercises as failing"
        assert test_cell_source not in report, f"Validate reports {first.id} as failing, but check() passed it"
        page.keyboard.press("Escape")  # the Validate dialog
    finally:
        page.evaluate(_CLOSE_AND_SHUT_DOWN)


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if widget_cells(c)], ids=lambda c: c.id)
def test_readme_shows_a_screenshot_of_each_chapters_widgets(chapter):
    readme = (REPO / "README.md").read_text()
    shots = re.findall(rf"docs/screenshots/({chapter.id}-[\w-]+\.png)", readme)
    assert shots, f"the README shows no screenshot of {chapter.id}'s widgets"
    assert all((REPO / "docs" / "screenshots" / s).exists() for s in shots)
