"""The feedback page a student gets back: per exercise, the points and the teaching
message, and what the grader noticed about the submission as a whole.

Built from verdicts only, never from the executed notebook, so a hidden test's
source and traceback cannot reach it (nbgrader's own generate_feedback shows
both). A failed hidden test shows its message, which names the computation and
what torch gives.
"""
from __future__ import annotations

import html

from course.verdicts import ERROR, FAILED, MANUAL, NOT_ATTEMPTED, NOT_RUN, PASSED

__all__ = ["render"]

_COLOURS = {PASSED: "#1a7f37", FAILED: "#cf222e", ERROR: "#9a6700", NOT_ATTEMPTED: "#57606a",
            MANUAL: "#0969da", NOT_RUN: "#57606a"}


def render(result, title: str | None = None) -> str:
    """The feedback page of one result: points, each exercise's message and the grader's notes, never a hidden test."""
    auto = [v for v in result.verdicts if v.status != MANUAL]
    earned = sum(v.points for v in auto)
    possible = sum(v.max_points for v in auto)
    rows = "".join(_row(v) for v in result.verdicts)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in result.notes)
    notes_html = f"<h2>Notes from the grader</h2><ul>{notes}</ul>" if notes else ""
    seed = (f"<p>Random inputs of this grading: seed {result.seed}. Each test cell draws its own, and a "
            f"failed test's message names the seed that replays them (<code>course.inputs.reseed(...)</code>)."
            f"</p>") if result.seed else ""
    heading = html.escape(title or f"{result.chapter}: feedback for {result.student}")
    pending = ("; <em>not graded yet</em> means your instructor has not graded it yet: it is not a zero"
               if any(v.status == MANUAL for v in result.verdicts) else "")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{heading}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; }}
table {{ border-collapse: collapse; width: 100%; }}
td, th {{ border-bottom: 1px solid #d0d7de; padding: .4rem .6rem; text-align: left; vertical-align: top; }}
pre {{ margin: 0; white-space: pre-wrap; font-size: .9rem; }}
</style></head>
<body>
<h1>{heading}</h1>
<p><strong>{earned:g} / {possible:g}</strong> automatic points.
Exercises graded by your instructor are marked as such and scored separately{pending}.</p>
<table><tr><th>exercise</th><th>status</th><th>points</th><th>message</th></tr>{rows}</table>
{notes_html}{seed}
</body></html>
"""


def _row(v) -> str:
    """One exercise. An answer graded by hand shows "not graded yet" (never "0 / 2", which reads as a
    zero) in a cell the hub fills with the instructor's points when it releases the feedback
    (hub/classroom.py, release-feedback)."""
    if v.status == MANUAL:
        status = "graded by your instructor"
        points = (f"<td class='hand' data-exercise='{html.escape(v.exercise, quote=True)}'>not graded yet / "
                  f"{v.max_points:g}</td>")
        message = ""
    else:
        status, points, message = v.status, f"<td>{v.points:g} / {v.max_points:g}</td>", v.message
    return (f"<tr><td><code>{html.escape(v.exercise)}</code></td>"
            f"<td style='color:{_COLOURS.get(v.status, '#000')};font-weight:bold'>{html.escape(status)}</td>"
            f"{points}<td><pre>{html.escape(message)}</pre></td></tr>")
