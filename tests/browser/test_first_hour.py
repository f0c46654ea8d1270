"""A student's first hour, in a real browser (issue 36): `make lab` on a fresh working copy, chapter 01 open
in JupyterLab, a typical mistake the prose warns about typed into an exercise cell (Exercise 1 says "a dim of
size 0 counts as size 1 when computing the strides of the dims before it"), its test cell run: a visible
failure that names the rule, with a traceback that ends at the test's line (none of the course's own frames).
Then the fix, `check("ex_strides")` saying what
its pass means and echoing nothing, and `course check --hidden` on the saved notebook giving the grader's
verdicts. Jupyter's news toast never shows. Screenshots land in test-artifacts/browser/first-hour-*.png.

Needs Debian's chromium and Playwright's Python package, as tests/browser/test_in_browser.py does.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from conftest import CHAPTERS
from course.check import PASSED_VISIBLE
from course.notebook import exercises
from lab_server import running_lab

playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]

from test_in_browser import ARTIFACTS, CHROMIUM, CHROMIUM_FLAGS, open_notebook  # noqa: E402

CHAPTER = next(c for c in CHAPTERS if c.id == "01_tensor")
EXERCISE = "ex_strides"
# The mistake: every size multiplies the step, 0 included; the prose says a size-0 dim counts as 1.
MISTAKE = """def contiguous_strides(shape) -> tuple:
    strides, step = (), 1
    for size in reversed(tuple(shape)):
        strides = (step,) + strides
        step *= size
    return strides


def storage_position(index, stride, offset: int = 0) -> int:
    return offset + sum(i * s for i, s in zip(index, stride))"""
FIX = MISTAKE.replace("        step *= size", "        step *= max(size, 1)")
RULE = "a dim of size 0 counts as size 1"

_SAVED = """async ([index, text]) => {
  // Save until the server's copy of cell `index` holds `text`: one save is no proof on a busy machine.
  const panel = window.jupyterapp.shell.currentWidget;
  for (let i = 0; i < 90; i++) {
    await panel.context.save();
    const onDisk = await window.jupyterapp.serviceManager.contents.get(panel.context.path, {content: true});
    const cell = onDisk.content.cells[index];
    const source = Array.isArray(cell.source) ? cell.source.join('') : cell.source;
    if (source.includes(text)) return true;
    await new Promise(resolve => setTimeout(resolve, 1000));
  }
  return false;
}"""

_RUN_CELL = """async (index) => {
  const panel = window.jupyterapp.shell.currentWidget;
  await panel.sessionContext.ready;
  panel.content.activeCellIndex = index;
  await window.jupyterapp.commands.execute('notebook:run-cell');
}"""


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("first-hour") / "work"


@pytest.fixture(scope="module")
def lab(work):
    """`make lab` as a student starts it: it makes the working copy, from release/, and serves it."""
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is missing: run scripts/setup.sh as root, or apt-get install chromium")
    with running_lab(work=work, lab_args="--LabApp.expose_app_in_browser=True") as found:
        yield found


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield b
        b.close()


def type_into(page, panel, index: int, code: str) -> None:
    """Click into cell `index`'s editor, select what is there and type `code` over it (inserted as typed
    text, so that the editor's auto-indent does not re-indent it)."""
    editor = panel.locator(".jp-Notebook .jp-Cell").nth(index).locator(".cm-content")
    editor.scroll_into_view_if_needed()
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(code)


def run(page, panel, index: int):
    """Run cell `index` as Shift+Enter does and wait for its prompt's number: its output area."""
    page.evaluate(_RUN_CELL, index)
    cell = panel.locator(".jp-Notebook .jp-Cell").nth(index)
    page.wait_for_function("el => /\\[\\d+\\]/.test(el.querySelector('.jp-InputPrompt').textContent)",
                           arg=cell.element_handle(), timeout=120_000)
    return cell.locator(".jp-OutputArea")


def test_a_students_first_hour(browser, lab, work):
    nb = nbformat.read(work / CHAPTER.id / CHAPTER.notebook.name, 4)  # make lab copied it from release/
    ex = exercises(nb)[EXERCISE]
    answer, tests = ex.solution_cells[0], ex.test_cells[0]
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")  # imports, check = Checker(...)
    page, panel = open_notebook(browser, lab, CHAPTER)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        run(page, panel, first)
        type_into(page, panel, answer, MISTAKE)
        run(page, panel, answer)
        output = run(page, panel, tests)
        output.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "first-hour-1-visible-failure.png"))
        failure = output.text_content()
        # the rule, in the message, with what came back and what torch gives
        assert "AssertionError" in failure and RULE in failure, failure
        assert "(0, 3, 1)" in failure and "(3, 3, 1)" in failure, failure
        # a short traceback: the test's own line, none of the course's frames
        assert "course/" not in failure and "compare.py" not in failure, failure
        assert len(re.findall(r"Cell In\[\d+\]", failure)) == 1 and "File " not in failure, failure

        type_into(page, panel, answer, FIX)
        run(page, panel, answer)
        assert "visible tests passed" in run(page, panel, tests).text_content()
        page.evaluate("window.jupyterapp.commands.execute('notebook:insert-cell-below')")
        type_into(page, panel, tests + 1, f'check("{EXERCISE}")')
        shown = run(page, panel, tests + 1)
        shown.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "first-hour-2-check-passed.png"))
        assert PASSED_VISIBLE in shown.text_content(), shown.text_content()
        assert shown.locator(".jp-OutputArea-executeResult").count() == 0, "check() must not echo an Out[n]"
        assert page.evaluate(_SAVED, [answer, "max(size, 1)"]), "the fix never reached the saved file"
        # Jupyter's news toast: off by the course's settings (it would ask within seconds of the start)
        assert page.get_by_text(re.compile("Jupyter news", re.I)).count() == 0, "the news toast is showing"
    finally:
        page.close()

    done = subprocess.run([sys.executable, "-m", "course.cli", "check", "--hidden",
                           str(work / CHAPTER.id / CHAPTER.notebook.name)], capture_output=True, text=True)
    assert done.returncode == 1, done.stdout + done.stderr  # the other exercises are not attempted yet
    rows = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines()[2:] if line.startswith("ex_")}
    assert rows[EXERCISE] == "passed", done.stdout
    assert {s for e, s in rows.items() if e != EXERCISE} == {"not"}, done.stdout  # "not attempted"
    assert PASSED_VISIBLE not in done.stdout, "the grader's pass is a pass of the hidden tests"
