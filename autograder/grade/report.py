"""The class report: `autograder report CHAPTER --out DIR`, also written by every grading run.

Reads what `autograder grade ... --out DIR` left in DIR/results/ (every student's
verdicts, notes and grading time) and, where it holds the chapter, the gradebook
(for the points graded by hand in formgrader), and writes

    DIR/report/CHAPTER.html          one self-contained page for the instructor: the score
                                     distribution, each exercise's pass rate, the most common
                                     failure messages per exercise, time per submission and the
                                     students who need a look; the pictures are inline SVG
    DIR/report/CHAPTER-figures.csv   the same figures, one per row: figure, item, measure, value
    DIR/report/CHAPTER-canvas.csv    the grades in the layout of Canvas's gradebook import

A student is named by the id that grades.csv, results/, feedback/ and the gradebook
use; the page also shows the folder name each id came from where they differ, and
the folder names that look alike (intake.look_alike_groups) with their code points.
Both CSVs go through grade/csv_cells.py: no cell is a formula.

Everything on the page comes from the verdicts the students' feedback pages are
built from (never from the executed notebooks), so it shows no hidden test.
"""
from __future__ import annotations

import datetime
import html
import json
import math
import re
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from autograder.grade.csv_cells import csv_text
from autograder.grade.intake import code_points, look_alike_groups
from course.verdicts import ERROR, FAILED, MANUAL, NOT_ATTEMPTED, NOT_RUN, PASSED

STATUSES = [PASSED, FAILED, ERROR, NOT_ATTEMPTED, NOT_RUN]
COLOURS = {PASSED: "#1a7f37", FAILED: "#cf222e", ERROR: "#bf8700", NOT_ATTEMPTED: "#8c959f", NOT_RUN: "#d0d7de"}

# What the grader's notes say (autograder/grade/repair.py and grader.py, autograder/sandbox/supervisor.py and
# executor.py), sorted into what an instructor looks for. A note that matches none is a grading problem ("error").
_TAMPERING = re.compile(r"could not be trusted|your code replaced|your code rebound|not allowed while grading|"
                        r"grading channel|tampered|Changing the grader's tools")
_REPAIR = re.compile(r"appears more than once|pasted copy of the locked cell|is not part of this chapter|"
                     r"answer cell \S+ was deleted|was turned into a|test cell \S+ was (deleted|edited)")
_NOT_GRADED = "not graded: "
# intake's note to a student whose folder became another id: the page lists those in a section of their own
# (_names_html), so it is no grading problem to look at.
_RENAMED = re.compile(r"^your folder .* was graded under the id ", re.S)
_SEED = re.compile(r"\s*\(random inputs, seed \d+:.*?to replay them\)", re.S)
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(\.\d+)?(e[-+]?\d+)?(?![\w])", re.I)
KINDS = {"not graded": "the notebook could not be graded at all",
         "tampering": "code that changed the grader's tools or channel",
         "error": "the kernel died, a limit was reached, or the grader failed on a cell",
         "repaired": "the notebook was repaired against the release before grading",
         "look-alike": "a folder name that looks like another student's (each was graded as its own student: "
                       "check that they are different people)"}


class ReportError(Exception):
    """There is nothing to report, or it cannot be read: the message says why."""


@dataclass
class Student:
    name: str
    score: float
    max_score: float
    auto_max: float
    seconds: float
    exercises: list[dict]
    notes: list[str]
    display_name: str = ""
    gradebook_score: float | None = None
    look: list[tuple[str, str]] = field(default_factory=list)  # (kind, what)
    folder: str = ""  # the folder as handed in (printable); the id `name` where nothing changed it
    hand_pending: bool = False  # answers of this submission still wait to be graded by hand (the gradebook)


@dataclass
class ClassReport:
    chapter: str
    students: list[Student]
    exercises: list[str]           # in the chapter's order
    max_points: dict[str, float]
    manual: set[str]
    gradebook: str | None = None   # where the hand-graded points came from, if anywhere
    look_alikes: list[list[Student]] = field(default_factory=list)  # students whose folder names look alike
    roster: dict | None = None  # OUT/roster.json: lateness and who never submitted (written by the hub)

    @property
    def auto_exercises(self) -> list[str]:
        """The exercises graded automatically (not by hand)."""
        return [e for e in self.exercises if e not in self.manual]

    @property
    def auto_max(self) -> float:
        """Points possible on the automatically graded exercises."""
        return sum(self.max_points[e] for e in self.auto_exercises)

    @property
    def total_max(self) -> float:
        """Points possible on every exercise, manual ones included."""
        return sum(self.max_points.values())

    def counts(self, exercise: str) -> Counter:
        """How many students got each status on `exercise`."""
        return Counter(_by_exercise(s).get(exercise, {}).get("status", NOT_RUN) for s in self.students)

    def failures(self, exercise: str) -> tuple[list[tuple[str, int, list[str], bool]], int]:
        """The messages of `exercise`'s non-passing verdicts, most common first:
        (message, how many students, who, whether the numbers in it varied); and how many were not graded."""
        groups: dict[str, list[tuple[str, str]]] = defaultdict(list)
        not_graded = 0
        for s in self.students:
            v = _by_exercise(s).get(exercise)
            if v is None or v["status"] in (PASSED, MANUAL):
                continue
            message = v.get("message") or v["status"]
            if message.startswith(_NOT_GRADED):
                not_graded += 1
                continue
            text = _SEED.sub("", message).strip()
            groups[_NUMBER.sub("#", " ".join(text.split()))].append((text, s.name))
        out = []
        for members in groups.values():
            texts = Counter(t for t, _ in members)
            out.append((texts.most_common(1)[0][0], len(members), sorted(n for _, n in members), len(texts) > 1))
        out.sort(key=lambda g: (-g[1], g[0]))
        return out, not_graded


def _by_exercise(student: Student) -> dict[str, dict]:
    return {v["exercise"]: v for v in student.exercises}


# -- reading ---------------------------------------------------------------------
def load_results(out: Path, chapter: str) -> list[dict]:
    """The results of `chapter` in out/results/ (one JSON per student), by student name."""
    folder = out / "results"
    found: dict[str, dict] = {}
    for path in sorted(folder.glob("*.json")) + sorted(folder.glob(f"{chapter}/*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ReportError(f"{path} cannot be read ({e}); grade the class again to rewrite it") from e
        if isinstance(data, dict) and data.get("chapter") == chapter and data.get("student"):
            found[data["student"]] = data
    return [found[k] for k in sorted(found)]


def _sqlite_path(db_url: str) -> Path | None:
    return Path(db_url[len("sqlite:///"):]) if db_url.startswith("sqlite:///") else None


def gradebook_rows(db_url: str, chapter: str) -> dict[str, dict]:
    """{student: {score, max_score, first_name, last_name}} from nbgrader's gradebook, or {} when the
    gradebook does not hold the chapter (or is not there: nothing is created to find out)."""
    path = _sqlite_path(db_url)
    if path is not None and not path.is_file():
        return {}
    from sqlalchemy import create_engine, inspect
    from autograder.grade.gradebook import GradebookError, check, engine_url
    if path is None:
        try:
            check(db_url)
        except GradebookError as e:
            raise ReportError(str(e)) from e
    engine = create_engine(engine_url(db_url))
    try:
        if "submitted_assignment" not in inspect(engine).get_table_names():
            return {}
    finally:
        engine.dispose()
    from nbgrader.api import Gradebook, MissingEntry
    rows = {}
    with Gradebook(engine_url(db_url)) as gb:
        try:
            assignment = gb.find_assignment(chapter)
        except MissingEntry:
            return {}
        for submission in assignment.submissions:
            student = submission.student
            rows[student.id] = {"score": float(submission.score or 0.0), "max_score": float(submission.max_score or 0.0),
                                "first_name": student.first_name or "", "last_name": student.last_name or "",
                                "hand_pending": any(g.needs_manual_grade and g.manual_score is None
                                                    for nb in submission.notebooks for g in nb.grades)}
    return rows


def build(chapter: str, results: list[dict], gradebook: dict[str, dict] | None = None,
          gradebook_name: str | None = None) -> ClassReport:
    """The class report of `chapter` from the graded results (and the gradebook's manual points); ReportError when
    there are none."""
    if not results:
        raise ReportError(f"no graded submissions of {chapter}")
    exercises: list[str] = []
    max_points: dict[str, float] = {}
    manual: set[str] = set()
    for r in results:
        for v in r.get("exercises", []):
            if v["exercise"] not in max_points:
                exercises.append(v["exercise"])
                max_points[v["exercise"]] = float(v.get("max_points", 0))
            if v["status"] == MANUAL:
                manual.add(v["exercise"])
    gradebook = gradebook or {}
    students = []
    for r in results:
        verdicts = r.get("exercises", [])
        auto = [v for v in verdicts if v["status"] != MANUAL]
        row = gradebook.get(r["student"])
        name = ", ".join(p for p in ((row or {}).get("last_name", ""), (row or {}).get("first_name", "")) if p)
        s = Student(r["student"], sum(float(v.get("points", 0)) for v in auto), float(r.get("max_score", 0)),
                    sum(float(v.get("max_points", 0)) for v in auto), float(r.get("seconds") or 0.0), verdicts,
                    list(r.get("notes", [])), name, row["score"] if row else None)
        s.folder = str(r.get("folder") or r["student"])
        s.hand_pending = bool((row or {}).get("hand_pending"))
        s.look = _needs_a_look(s)
        students.append(s)
    report = ClassReport(chapter, students, exercises, max_points, manual, gradebook_name if gradebook else None)
    _mark_look_alikes(report)
    return report


def _mark_look_alikes(report: ClassReport) -> None:
    """Group the students whose folder names look alike, and put each in "needs a look": two rows that
    read the same may be one person submitting twice, or two people the instructor must not confuse."""
    by_folder: dict[str, list[Student]] = defaultdict(list)
    for s in report.students:
        by_folder[s.folder].append(s)
    for group in look_alike_groups(list(by_folder)):
        members = [s for folder in group for s in by_folder[folder]]
        report.look_alikes.append(members)
        for s in members:
            others = "; ".join(f"{o.folder!r} ({code_points(o.folder)}), id {o.name!r}" for o in members if o is not s)
            s.look.append(("look-alike", f"the folder {s.folder!r} ({code_points(s.folder)}) looks like {others}"))


def _needs_a_look(s: Student) -> list[tuple[str, str]]:
    found = []
    if any(v.get("message", "").startswith(_NOT_GRADED) for v in s.exercises):
        found += [("not graded", n) for n in s.notes] or [("not graded", "no verdicts")]
        return found
    for note in (n for n in s.notes if not _RENAMED.match(n)):
        kind = "tampering" if _TAMPERING.search(note) else "repaired" if _REPAIR.search(note) else "error"
        found.append((kind, note))
    for v in s.exercises:
        if v["status"] == ERROR and _TAMPERING.search(v.get("message", "")):
            found.append(("tampering", f"{v['exercise']}: {v['message']}"))
    order = list(KINDS)
    return sorted(found, key=lambda kn: order.index(kn[0]))


# -- figures -----------------------------------------------------------------------
def score_bins(report: ClassReport) -> list[tuple[str, int]]:
    """(label, students) over the automatic points: one bar per point up to 20 points (a bar holds the
    scores from its label up to the next), then about 20 bars; the top score has a bar of its own."""
    top = report.auto_max
    width = 1 if top <= 20 else int(math.ceil(top / 20))
    n = int(math.ceil(top / width)) + 1 if top > 0 else 1
    counts = [0] * n
    for s in report.students:
        counts[n - 1 if s.score >= top else min(n - 2, int(s.score // width))] += 1
    whole = all(float(s.score).is_integer() for s in report.students)

    def label(i: int) -> str:
        low = i * width
        if i == n - 1:
            return _fmt(top)
        high = min(top, low + width)
        if width == 1:
            return _fmt(low)
        return f"{_fmt(low)}–{_fmt(high - 1)}" if whole else f"{_fmt(low)}–<{_fmt(high)}"
    return [(label(i), c) for i, c in enumerate(counts)]


def time_bins(report: ClassReport, bins: int = 10) -> list[tuple[str, int]]:
    """(label, submissions) over the seconds each submission took, in about `bins` round-numbered bars."""
    seconds = [s.seconds for s in report.students]
    top = max(seconds, default=0.0)
    step = _nice_step(top / bins) if top > 0 else 1.0
    n = max(1, int(math.ceil(top / step)) if top > 0 else 1)
    counts = [0] * n
    for t in seconds:
        counts[min(n - 1, int(t // step))] += 1
    return [(f"{_fmt(round(i * step, 3))}–{_fmt(round((i + 1) * step, 3))}", c) for i, c in enumerate(counts)]


def _nice_step(x: float) -> float:
    magnitude = 10 ** math.floor(math.log10(x))
    for m in (1, 2, 2.5, 5, 10):
        if m * magnitude >= x:
            return m * magnitude
    return 10 * magnitude


def _fmt(x: float) -> str:
    return f"{x:g}" if abs(x - round(x)) > 1e-9 else str(int(round(x)))


def figures(report: ClassReport) -> list[tuple[str, str, str, str]]:
    """Every figure of the page as (figure, item, measure, value) rows."""
    rows = [("class", report.chapter, "students", str(len(report.students))),
            ("class", report.chapter, "automatic_points_possible", _fmt(report.auto_max)),
            ("class", report.chapter, "points_possible", _fmt(report.total_max))]
    scores = [s.score for s in report.students]
    rows += [("class", report.chapter, "mean_score", f"{statistics.mean(scores):.3f}"),
             ("class", report.chapter, "median_score", _fmt(statistics.median(scores)))]
    for label, count in score_bins(report):
        rows.append(("score_distribution", label, "students", str(count)))
    for ex in report.exercises:
        if ex in report.manual:
            rows.append(("exercise", ex, "graded_by_hand", str(len(report.students))))
            continue
        counts = report.counts(ex)
        for status in STATUSES:
            rows.append(("exercise", ex, status.replace(" ", "_"), str(counts.get(status, 0))))
        rows.append(("exercise", ex, "pass_rate", f"{counts.get(PASSED, 0) / len(report.students):.3f}"))
        messages, not_graded = report.failures(ex)
        for message, count, _, _ in messages:
            rows.append(("failure", ex, message, str(count)))
        if not_graded:
            rows.append(("failure", ex, "not graded (see the students who need a look)", str(not_graded)))
    for s in sorted(report.students, key=lambda s: -s.seconds):
        rows.append(("seconds", s.name, "grading_time", f"{s.seconds:.2f}"))
    for s in report.students:
        for kind, what in s.look:
            rows.append(("needs_a_look", s.name, kind, what))
    return rows


def figures_csv(report: ClassReport) -> str:
    """The report's figures as CSV text: figure, item, measure, value."""
    return csv_text(figures(report), ["figure", "item", "measure", "value"])


def canvas_csv(report: ClassReport) -> str:
    """Canvas's gradebook import layout: the columns Student, ID, SIS User ID, SIS Login ID, Section,
    then one column per assignment, and a "Points Possible" row under the header. Canvas matches a row
    by ID (its own user id), then SIS User ID, then SIS Login ID, then the name: the nbgrader student id
    goes in SIS Login ID (the login the hub knows), ID and SIS User ID stay empty. An assignment column
    named after an existing assignment is matched by name ("Title (canvas id)" also works); one that
    matches nothing becomes a new assignment. Scores include the points graded by hand when the
    gradebook has them."""
    rows = [["Points Possible", "", "", "", "", _fmt(report.total_max)]]
    for s in report.students:
        score = s.gradebook_score if s.gradebook_score is not None else s.score
        rows.append([s.display_name or s.name, "", "", s.name, "", _fmt(score)])
    return csv_text(rows, ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", report.chapter])


# -- pictures (inline SVG: no script, no network) ---------------------------------------
def _svg_histogram(bins: list[tuple[str, int]], xlabel: str, colour: str) -> str:
    width, height, left, bottom, top = 720, 240, 44, 46, 16
    plot_w, plot_h = width - left - 12, height - bottom - top
    peak = max((c for _, c in bins), default=0) or 1
    bar_w = plot_w / max(1, len(bins))
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             f'xmlns="http://www.w3.org/2000/svg" aria-label="{html.escape(xlabel)}">']
    ticks = sorted({0, peak} | {round(peak * f) for f in (0.25, 0.5, 0.75)})
    for t in ticks:
        y = top + plot_h - plot_h * t / peak
        parts.append(f'<line x1="{left}" x2="{width - 12}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eaeef2"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{t}</text>')
    for i, (label, count) in enumerate(bins):
        h = plot_h * count / peak
        x = left + i * bar_w
        parts.append(f'<g><title>{html.escape(label)}: {count} student{"s" if count != 1 else ""}</title>'
                     f'<rect x="{x + 1:.1f}" y="{top + plot_h - h:.1f}" width="{max(1.0, bar_w - 2):.1f}" '
                     f'height="{h:.1f}" fill="{colour}"/>')
        if count:
            parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{top + plot_h - h - 4:.1f}" text-anchor="middle" '
                         f'class="count">{count}</text>')
        if len(bins) <= 24 or i % max(1, len(bins) // 12) == 0:
            parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{top + plot_h + 16:.1f}" text-anchor="middle" '
                         f'class="tick">{html.escape(label)}</text>')
        parts.append("</g>")
    parts.append(f'<line x1="{left}" x2="{width - 12}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#57606a"/>'
                 f'<text x="{left + plot_w / 2:.1f}" y="{height - 8}" text-anchor="middle" class="axis">'
                 f'{html.escape(xlabel)}</text></svg>')
    return "".join(parts)


def _svg_pass_rates(report: ClassReport) -> str:
    rows = report.auto_exercises
    name_w, bar_w, row_h = 190, 420, 26
    width = name_w + bar_w + 160
    height = row_h * len(rows) + 40
    n = len(report.students)
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             f'xmlns="http://www.w3.org/2000/svg" aria-label="pass rate per exercise">']
    for i, ex in enumerate(rows):
        y = 8 + i * row_h
        counts = report.counts(ex)
        parts.append(f'<text x="{name_w - 8}" y="{y + 15}" text-anchor="end" class="name">{html.escape(ex)}</text>')
        x = float(name_w)
        for status in STATUSES:
            c = counts.get(status, 0)
            if not c:
                continue
            w = bar_w * c / n
            parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h - 8}" fill="{COLOURS[status]}">'
                         f'<title>{html.escape(ex)}: {c} of {n} {html.escape(status)}</title></rect>')
            x += w
        passed = counts.get(PASSED, 0)
        parts.append(f'<text x="{name_w + bar_w + 8}" y="{y + 15}" class="count">{passed}/{n} passed '
                     f'({100 * passed / n:.0f}%)</text>')
    legend_y = height - 14
    x = float(name_w)
    for status in STATUSES:
        parts.append(f'<rect x="{x:.1f}" y="{legend_y - 10}" width="10" height="10" fill="{COLOURS[status]}"/>'
                     f'<text x="{x + 14:.1f}" y="{legend_y}" class="tick">{status}</text>')
        x += 14 + 7.2 * len(status) + 18
    parts.append("</svg>")
    return "".join(parts)


# -- the page --------------------------------------------------------------------------
def _e(text) -> str:
    return html.escape(str(text))


def render(report: ClassReport, generated: str | None = None) -> str:
    """The class report's page: the summary, then one section per figure (each built by a helper below)."""
    n = len(report.students)
    scores = [s.score for s in report.students]
    full = sum(1 for s in report.students if s.score >= report.auto_max > 0)
    zero = sum(1 for s in report.students if s.score == 0)
    generated = generated or datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    manual_max = report.total_max - report.auto_max
    hand = (f" (+ {_fmt(manual_max)} graded by hand in formgrader: "
            f"{', '.join(_e(e) for e in report.exercises if e in report.manual)})") if report.manual else ""
    look = [s for s in report.students if s.look]
    source = (f"Gradebook: <code>{_e(report.gradebook)}</code>"
              + (" (the points graded by hand in the Canvas CSV come from it)." if report.manual else ".")
              if report.gradebook else "")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(report.chapter)}: class report</title>
<style>{_STYLE}</style></head>
<body>
<h1>{_e(report.chapter)}: class report</h1>
<p class="small">{n} students, generated {_e(generated)}. Automatic points out of {_fmt(report.auto_max)}{hand}.
{source}</p>
<div class="summary">
<div><strong id="students">{n}</strong>students</div>
<div><strong id="mean">{statistics.mean(scores):.1f}</strong>mean score</div>
<div><strong id="median">{_fmt(statistics.median(scores))}</strong>median score</div>
<div><strong id="full">{full}</strong>full marks</div>
<div><strong id="zero">{zero}</strong>no points</div>
<div><strong id="look">{len(look)}</strong>need a look</div>
</div>
{_distribution_html(report)}
{_pass_rates_html(report)}
{_failures_html(report)}
{_time_html(report)}
{_look_html(report, look)}
{_roster_html(report)}
{_names_html(report)}
</body></html>
"""


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 64rem; margin: 2rem auto; padding: 0 1rem; color: #1f2328; }
table { border-collapse: collapse; margin: .5rem 0 1rem; }
td, th { border-bottom: 1px solid #d0d7de; padding: .3rem .6rem; text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; }
td.passed { color: #1a7f37; font-weight: 600; }
pre { margin: 0; white-space: pre-wrap; font-size: .88rem; }
.summary { display: flex; gap: 1.5rem; flex-wrap: wrap; }
.summary div { background: #f6f8fa; border-radius: 6px; padding: .6rem 1rem; }
.summary strong { display: block; font-size: 1.5rem; }
svg.chart { max-width: 100%; height: auto; font-size: 12px; }
svg .tick { fill: #57606a; font-size: 11px; } svg .axis { fill: #1f2328; }
svg .count, svg .name { fill: #1f2328; }
.small, small { color: #57606a; font-size: .85rem; }
"""


def _distribution_html(report: ClassReport) -> str:
    histogram = _svg_histogram(score_bins(report), f"automatic points (out of {_fmt(report.auto_max)})", "#0969da")
    score_rows = "".join(f"<tr><td>{_e(label)}</td><td class='num'>{c}</td></tr>" for label, c in score_bins(report))
    return (f"<h2 id=\"distribution\">Score distribution</h2>\n{histogram}\n<details><summary>as a table</summary>"
            f"<table><tr><th>automatic points</th><th>students</th></tr>{score_rows}</table>\n</details>")


def _pass_rates_html(report: ClassReport) -> str:
    n = len(report.students)
    exercise_rows = []
    for ex in report.exercises:
        if ex in report.manual:
            exercise_rows.append(f"<tr><td><code>{_e(ex)}</code></td><td>{_fmt(report.max_points[ex])}</td>"
                                 f"<td colspan='6'>graded by hand (formgrader)</td></tr>")
            continue
        c = report.counts(ex)
        exercise_rows.append(
            f"<tr><td><code>{_e(ex)}</code></td><td>{_fmt(report.max_points[ex])}</td>"
            f"<td class='passed'>{c.get(PASSED, 0)}/{n} passed</td>"
            + "".join(f"<td>{c.get(st, 0)}</td>" for st in STATUSES[1:])
            + f"<td>{100 * c.get(PASSED, 0) / n:.0f}%</td></tr>")
    return (f"<h2 id=\"pass-rates\">Pass rate per exercise</h2>\n{_svg_pass_rates(report)}\n"
            "<table><tr><th>exercise</th><th>points</th><th>passed</th><th>failed</th><th>error</th>"
            f"<th>not attempted</th>\n<th>not run</th><th>pass rate</th></tr>{''.join(exercise_rows)}</table>")


def _failures_html(report: ClassReport) -> str:
    parts = []
    for ex in report.auto_exercises:
        messages, not_graded = report.failures(ex)
        if not messages and not not_graded:
            continue
        items = "".join(
            f"<tr><td class='num'>{count}</td><td><pre>{_e(message[:600])}{' …' if len(message) > 600 else ''}"
            f"</pre>{'<small>(the numbers differ from student to student)</small>' if varied else ''}</td>"
            f"<td>{_e(', '.join(who[:8]))}{f' and {len(who) - 8} more' if len(who) > 8 else ''}</td></tr>"
            for message, count, who, varied in messages[:5])
        more = f"<p class='small'>{len(messages) - 5} other messages; all in the figures CSV.</p>" \
            if len(messages) > 5 else ""
        ng = f"<p class='small'>and {not_graded} submission(s) not graded at all (below).</p>" if not_graded else ""
        parts.append(f"<h3><code>{_e(ex)}</code></h3><table><tr><th>students</th><th>message</th>"
                     f"<th>who</th></tr>{items}</table>{more}{ng}")
    failures = "".join(parts) or "<p>Every automatically graded exercise passed for every student.</p>"
    return ("<h2 id=\"failures\">Most common failure messages</h2>\n<p class=\"small\">Per exercise, what the "
            "students who did not pass were told, grouped by message (the numbers\nand the random seed in a "
            f"message may differ); at most five per exercise.</p>\n{failures}")


def _time_html(report: ClassReport) -> str:
    n = len(report.students)
    seconds = sorted(s.seconds for s in report.students)
    times = _svg_histogram(time_bins(report), "seconds to grade one submission", "#8250df")
    slowest = "".join(f"<tr><td>{_e(s.name)}</td><td class='num'>{s.seconds:.1f} s</td></tr>"
                      for s in sorted(report.students, key=lambda s: -s.seconds)[:5])
    median_t = statistics.median(seconds) if seconds else 0.0
    p90 = seconds[min(n - 1, int(math.ceil(0.9 * n)) - 1)] if seconds else 0.0
    return (f"<h2 id=\"time\">Time per submission</h2>\n<p>median {median_t:.1f} s, 90th percentile {p90:.1f} s, "
            f"slowest {seconds[-1] if seconds else 0:.1f} s,\n{sum(seconds):.0f} s of grading in all.</p>\n{times}\n"
            f"<table><tr><th>slowest</th><th class=\"num\">seconds</th></tr>{slowest}</table>")


def _look_html(report: ClassReport, look: list[Student]) -> str:
    look_rows = "".join(
        f"<tr><td><a href='../feedback/{_e(s.name)}/{_e(report.chapter)}.html'>{_e(s.name)}</a>{_folder_note(s)}</td>"
        f"<td>{_fmt(s.score)}/{_fmt(report.auto_max)}</td>"
        f"<td>{_e(', '.join(sorted({k for k, _ in s.look}, key=list(KINDS).index)))}</td>"
        f"<td><ul>{''.join(f'<li>{_e(what[:400])}</li>' for _, what in s.look[:6])}</ul>"
        f"{f'<small>and {len(s.look) - 6} more notes</small>' if len(s.look) > 6 else ''}</td></tr>"
        for s in look)
    look_html = (f"<table><tr><th>student</th><th>score</th><th>why</th><th>what the grader noted</th></tr>"
                 f"{look_rows}</table>" if look else "<p>No submission needs a look: nothing was repaired, "
                 "no tampering, no grading errors.</p>")
    kinds = "".join(f"<li><strong>{_e(k)}</strong>: {_e(v)}</li>" for k, v in KINDS.items())
    return f"<h2 id=\"needs-a-look\">Students who need a look</h2>\n<ul class=\"small\">{kinds}</ul>\n{look_html}"


def _roster_html(report: ClassReport) -> str:
    """Who was late, who never submitted (from the class list the hub leaves in OUT/roster.json), and who
    still has answers to grade by hand (from the gradebook)."""
    roster = report.roster or {}
    parts = []
    late = [(name, r) for name, r in sorted(roster.get("students", {}).items()) if r.get("late_by")]
    if roster:
        rows = "".join(f"<tr><td>{_e(name)}</td><td>{_e(r['late_by'])}</td><td>{_e(r.get('submitted', ''))}</td>"
                       f"<td>{_e(r.get('note', ''))}</td></tr>" for name, r in late)
        parts.append(f"<h3>Late</h3><p class='small'>Due {_e(roster.get('due') or 'not set')}; late policy "
                     f"{_e(roster.get('policy', 'latest'))}.</p>"
                     + (f"<table id='late'><tr><th>student</th><th>late by</th><th>submitted</th><th>note</th></tr>"
                        f"{rows}</table>" if late else "<p>Nobody submitted late.</p>"))
        never = roster.get("never_submitted", [])
        parts.append("<h3>Never submitted</h3>" + (f"<p id='never'>{_e(', '.join(never))}</p>" if never
                                                   else "<p>Everyone on the class list submitted.</p>"))
    pending = sorted(s.name for s in report.students if s.hand_pending)
    if report.manual:
        parts.append("<h3>Hand grading</h3>" + (
            f"<p id='hand-pending'>{len(pending)} student(s) still have answers to grade by hand in formgrader: "
            f"{_e(', '.join(pending))}</p>" if pending else "<p>Every answer graded by hand is graded.</p>"))
    return ("<h2 id='roster'>Lateness, missing work, hand grading</h2>" + "".join(parts)) if parts else ""


def _folder_note(s: Student) -> str:
    """The folder a student's id came from, where the id differs from it."""
    return f"<br><small>folder <code>{_e(repr(s.folder))}</code></small>" if s.folder != s.name else ""


def _names_html(report: ClassReport) -> str:
    """The sections on names: the folder names that look alike (with their code points, the only way to
    tell them apart on a page) and the folders graded under an id other than their name."""
    parts = []
    if report.look_alikes:
        rows = "".join(
            f"<tr><td><code>{_e(repr(s.folder))}</code></td><td><code>{_e(code_points(s.folder))}</code></td>"
            f"<td>{_e(s.name)}</td><td>{_fmt(s.score)}/{_fmt(report.auto_max)}</td></tr>"
            + ("<tr><td colspan='4'></td></tr>" if i == len(group) - 1 else "")
            for group in report.look_alikes for i, s in enumerate(group))
        parts.append("<h2 id='look-alike'>Names that look alike</h2><p>These student folders differ only in "
                     "case, white space, invisible, confusable or differently encoded characters (one group "
                     "per block). Each was "
                     "graded as its own student, under the id shown: check that they are different people."
                     f"</p><table><tr><th>folder</th><th>code points</th><th>id</th><th>score</th></tr>{rows}"
                     "</table>")
    renamed = [s for s in report.students if s.folder != s.name]
    if renamed:
        rows = "".join(f"<tr><td><code>{_e(repr(s.folder))}</code></td><td>{_e(s.name)}</td></tr>" for s in renamed)
        parts.append("<h2 id='renamed'>Folders graded under another id</h2><p class='small'>Folder names that "
                     "nbgrader's gradebook or a spreadsheet cannot take as they are; grades.csv, results/, "
                     "feedback/, the gradebook and the Canvas CSV use the id.</p>"
                     f"<table><tr><th>folder</th><th>id</th></tr>{rows}</table>")
    return "\n".join(parts)


# -- writing and the command -----------------------------------------------------------
def write(out: Path, chapter: str, db_url: str | None = None) -> list[Path]:
    """Write the report of `chapter` from `out`'s results (and gradebook); the paths written."""
    from autograder.grade.files import write_atomic
    from autograder.grade.gradebook import describe
    results = load_results(out, chapter)
    if not results:
        where = out / "results"
        raise ReportError(f"{chapter} was never graded into {out}: no results of {chapter} in {where}. "
                          f"Grade it first: autograder grade {chapter} SUBMISSIONS --out {out}")
    db_url = db_url or f"sqlite:///{(out / 'gradebook.db').resolve()}"
    report = build(chapter, results, gradebook_rows(db_url, chapter), describe(db_url))
    try:  # the class list's lateness and non-submitters, where the hub left them (hub/classroom.py)
        report.roster = json.loads((out / "roster.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        report.roster = None
    folder = out / "report"
    paths = [folder / f"{chapter}.html", folder / f"{chapter}-figures.csv", folder / f"{chapter}-canvas.csv"]
    for path, text in zip(paths, (render(report), figures_csv(report), canvas_csv(report))):
        write_atomic(path, text)
    return paths


def add_report_parser(sub) -> None:
    """Add `autograder report` and its options to the command's subparsers."""
    from autograder.chapters import REPO
    p = sub.add_parser("report", help="the class report of one graded chapter (HTML, figures CSV, Canvas CSV)",
                       description=__doc__, formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("chapter")
    p.add_argument("--out", required=True, help="the folder `autograder grade CHAPTER ... --out` wrote")
    p.add_argument("--db", help="the gradebook's SQLAlchemy URL, if grading used --db (default: OUT/gradebook.db)")
    p.add_argument("--repo", default=str(REPO))
    p.set_defaults(func=run)


def run(args) -> int:
    """`autograder report`: write the class report of a graded chapter; the exit status."""
    from autograder.chapters import discover
    repo = Path(args.repo).resolve()
    known = [c.id for c in discover(repo / "source")]
    if known and args.chapter not in known:
        print(f"autograder report: no chapter {args.chapter!r} in {repo / 'source'}. Chapters: {', '.join(known)}.",
              file=sys.stderr)
        return 2
    try:
        paths = write(Path(args.out), args.chapter, args.db)
    except ReportError as e:
        print(f"autograder report: {e}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
