"""Formgrader as this course uses it: a Jupyter server extension of the instructor's server.

hub/start.py enables it for the instructor (jpserver_extensions), and hub/runtime.py puts
this file in the servers' runtime as the module `course_formgrader`.

The course does some of formgrader's jobs its own way, and formgrader's buttons for them
do harm here:
  Generate              `autograder build` makes release/; nbgrader's would replace it
  Collect, Autograde    the grader page collects and grades in the sandbox; formgrader's
                        Autograde runs the students' code as the instructor, unsandboxed
  Generate / Release    the grader page stages feedback without hidden tests; nbgrader's
  Feedback              feedback pages show them
Those columns are hidden on formgrader's pages (Manage Assignments, Manage Submissions),
and the requests behind them are refused with a message that says what to use instead.
Release, Preview, Edit, the due date and manual grading stay as they are.
"""
from __future__ import annotations

import functools
import html
import json
import re

# The column headings of formgrader's tables (nbgrader's templates) whose buttons are hidden.
HIDDEN_COLUMNS = ("Generate", "Collect", "Autograde", "Generate Feedback", "Release Feedback")
# formgrader's API handlers behind those buttons, and what to do instead of each.
REFUSED = {
    "AssignHandler": "release/ is made by `autograder build` in the course repository, not by nbgrader",
    "CollectHandler": "collect and grade on the hub's grader page (/services/grader/)",
    "AutogradeHandler": "grade on the hub's grader page (/services/grader/): it grades in the sandbox",
    "GenerateAllFeedbackHandler": "the grader page stages feedback without hidden tests",
    "ReleaseAllFeedbackHandler": "release feedback on the hub's grader page (/services/grader/)",
    "GenerateFeedbackHandler": "the grader page stages feedback without hidden tests",
    "ReleaseFeedbackHandler": "release feedback on the hub's grader page (/services/grader/)",
}
NOTE = ("This course grades on the hub's grader page (Services, grader): it collects, grades in the sandbox "
        "and releases feedback. Use formgrader to release chapters, set due dates and grade written "
        "answers by hand; its Generate, Collect, Autograde and Feedback buttons are hidden.")


def hidden_columns_css(page: str) -> str:
    """CSS that hides the columns of `page`'s table whose heading is one of HIDDEN_COLUMNS (their header
    and, by position, every cell formgrader's scripts put under it)."""
    header = re.search(r"<thead>(.*?)</thead>", page, re.S)
    headings = re.findall(r"<th[^>]*>(.*?)</th>", header.group(1), re.S) if header else []
    positions = [n for n, text in enumerate(headings, 1) if html.unescape(text).strip() in HIDDEN_COLUMNS]
    return "".join(f"table th:nth-child({n}), #main-table > tr > td:nth-child({n}) {{ display: none; }}\n"
                   for n in positions)


def course_page(page: str) -> str:
    """A formgrader page with the columns hidden and the course's note at the top of its body."""
    css = hidden_columns_css(page)
    if css:
        page = page.replace("</head>", f"<style id='course-formgrader'>\n{css}</style>\n</head>", 1)
        page = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + f"\n<div class='alert alert-info' "
                      f"id='course-formgrader-note'>{html.escape(NOTE)}</div>", page, count=1)
    return page


def _refuse(why: str):
    def post(self, *args):
        self.set_status(403)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"success": False, "error": f"Not in this course's formgrader: {why}."}))
    return post


def patch(base, apihandlers) -> None:
    """formgrader's pages through course_page, and the REFUSED handlers refusing: done on nbgrader's classes,
    so it holds whichever extension the server loads first."""
    if getattr(base.BaseHandler.render, "course_formgrader", False):
        return
    render = base.BaseHandler.render

    @functools.wraps(render)
    def course_render(self, name, **ns):
        return course_page(render(self, name, **ns))
    course_render.course_formgrader = True
    base.BaseHandler.render = course_render
    for name, why in REFUSED.items():
        getattr(apihandlers, name).post = _refuse(why)


def _jupyter_server_extension_points():
    return [{"module": "course_formgrader"}]


def _load_jupyter_server_extension(serverapp) -> None:
    from nbgrader.server_extensions.formgrader import apihandlers, base
    patch(base, apihandlers)
    serverapp.log.info("course_formgrader: formgrader's Generate, Collect, Autograde and Feedback are hidden")
