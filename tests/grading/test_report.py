"""The class report (issue 18, item 4): `autograder report CHAPTER --out DIR`, also
written by every grading run. A real class of chapter 00 (the fastest chapter to
grade) graded by the real command: ana pastes the solution, bo makes a typical
mistake in count_parameters and deletes a test cell, cy submits the release
untouched. The page must hold their counts, the CSVs the same figures and Canvas's
import layout, and nothing of the hidden tests. The figures' logic is also checked
on made-up results (grading errors, tampering, many points, fractions)."""
from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.grade import report as rep
from conftest import CHAPTERS
from notebook_runs import mutants_of

REPO = Path(__file__).resolve().parents[2]
AUTOGRADER = [sys.executable, "-m", "autograder.cli"]
CHAPTER = "00_tour"
# One worker holds the module: the class is graded once (a module fixture), not once per worker.
pytestmark = pytest.mark.xdist_group("report")


def _mutant(exercise: str, name: str) -> str:
    chapter = next(c for c in CHAPTERS if c.id == CHAPTER)
    return mutants_of(chapter)[exercise][name].code.strip("\n")


def _class(folder: Path) -> None:
    source = nbformat.read(REPO / "source" / CHAPTER / f"{CHAPTER}.ipynb", 4)
    release = nbformat.read(REPO / "release" / CHAPTER / f"{CHAPTER}.ipynb", 4)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
               if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")}

    def notebook(wrong: dict[str, str] | None, drop: str | None = None):
        nb = nbformat.from_dict(nbformat.reads(nbformat.writes(release), 4))
        if wrong is not None:
            for cell in nb.cells:
                gid = cell.metadata.get("nbgrader", {}).get("grade_id")
                if gid in answers:
                    cell.source = wrong.get(gid, answers[gid])
        nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != drop]
        return nb

    students = {"ana": notebook({}),
                "bo": notebook({"ex_count_parameters": _mutant("ex_count_parameters", "counts the top level only")},
                               drop="ex_gradient_tests"),
                "cy": notebook(None)}
    for name, nb in students.items():
        (folder / name).mkdir(parents=True)
        nbformat.write(nb, folder / name / f"{CHAPTER}.ipynb")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    _class(tmp / "class")
    done = subprocess.run(AUTOGRADER + ["grade", CHAPTER, str(tmp / "class"), "--out", str(tmp / "out"),
                                        "--workers", "1"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp / "out", done.stdout


def _figures(out: Path) -> list[dict]:
    return list(csv.DictReader(open(out / "report" / f"{CHAPTER}-figures.csv", newline="")))


def _value(rows, figure, item, measure) -> str:
    found = [r["value"] for r in rows if (r["figure"], r["item"], r["measure"]) == (figure, item, measure)]
    assert len(found) == 1, (figure, item, measure, found)
    return found[0]


def test_every_grading_run_writes_the_report(graded):
    out, stdout = graded
    for name in (f"{CHAPTER}.html", f"{CHAPTER}-figures.csv", f"{CHAPTER}-canvas.csv"):
        assert (out / "report" / name).is_file(), name
    assert f"class report: {out / 'report' / (CHAPTER + '.html')}" in stdout
    assert not list(out.rglob("*.tmp"))


def test_the_figures_hold_the_class_counts(graded):
    out, _ = graded
    rows = _figures(out)
    assert _value(rows, "class", CHAPTER, "students") == "3"
    assert _value(rows, "class", CHAPTER, "automatic_points_possible") == "15"
    assert _value(rows, "class", CHAPTER, "points_possible") == "17"
    histogram = {r["item"]: int(r["value"]) for r in rows if r["figure"] == "score_distribution"}
    assert histogram == {str(p): (1 if p in (0, 13, 15) else 0) for p in range(16)}
    exercises = {r["item"] for r in rows if r["figure"] == "exercise"}
    assert len(exercises) == 8 and _value(rows, "exercise", "written_dynamic_graphs", "graded_by_hand") == "3"
    for ex in exercises - {"written_dynamic_graphs"}:
        passed = 1 if ex == "ex_count_parameters" else 2
        assert _value(rows, "exercise", ex, "passed") == str(passed), ex
        assert _value(rows, "exercise", ex, "not_attempted") == "1", ex
        assert _value(rows, "exercise", ex, "failed") == ("1" if ex == "ex_count_parameters" else "0"), ex
    failures = [r for r in rows if r["figure"] == "failure" and r["item"] == "ex_count_parameters"]
    assert sorted(int(r["value"]) for r in failures) == [1, 1]
    bo = next(r["measure"] for r in failures if "NotImplementedError" not in r["measure"])
    assert "count_parameters" in bo and "seed" not in bo  # the replay hint differs per student: left out
    assert {r["item"] for r in rows if r["figure"] == "seconds"} == {"ana", "bo", "cy"}
    look = [(r["item"], r["measure"], r["value"]) for r in rows if r["figure"] == "needs_a_look"]
    assert look == [("bo", "repaired", "the test cell ex_gradient_tests was deleted: it was put back and graded")]


def test_the_page_shows_the_same_counts_with_pictures_and_no_network(graded):
    out, _ = graded
    page = (out / "report" / f"{CHAPTER}.html").read_text()
    assert '<strong id="students">3</strong>' in page and '<strong id="look">1</strong>' in page
    assert page.count("<svg") == 3  # score histogram, pass rates, time per submission
    assert "1/3 passed (33%)" in page and page.count("2/3 passed (67%)") == 6
    assert "<title>13: 1 student</title>" in page and "<title>ex_count_parameters: 1 of 3 failed</title>" in page
    section = page.split('id="failures"')[1].split('id="time"')[0]
    block = section.split("<code>ex_count_parameters</code>")[1].split("<h3>")[0]
    assert "count_parameters" in block and "<td>bo</td>" in block and "<td>cy</td>" in block
    look = page.split('id="needs-a-look"')[1]
    assert "feedback/bo/00_tour.html" in look and "repaired" in look and "feedback/cy/" not in look
    # self-contained: nothing fetched at view time
    assert not re.search(r"<script|<link|<img|@import|url\(|src=", page)
    assert "https://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_no_hidden_test_reaches_the_report(graded):
    out, _ = graded
    source = (REPO / "source" / CHAPTER / f"{CHAPTER}.ipynb").read_text()
    nb = json.loads(source)
    hidden = []
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        for block in re.findall(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", text, re.S):
            hidden += [line.strip() for line in block.splitlines() if len(line.strip()) >= 25]
    assert len(hidden) > 10
    for name in (f"{CHAPTER}.html", f"{CHAPTER}-figures.csv", f"{CHAPTER}-canvas.csv"):
        text = (out / "report" / name).read_text()
        for leak in ["BEGIN HIDDEN TESTS", "Traceback", *hidden]:
            assert leak not in text, (name, leak)


def test_the_grades_csv_is_in_canvas_import_layout(graded):
    out, _ = graded
    rows = list(csv.reader(open(out / "report" / f"{CHAPTER}-canvas.csv", newline="")))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", CHAPTER]
    assert rows[1] == ["Points Possible", "", "", "", "", "17"]
    assert rows[2:] == [["ana", "", "", "ana", "", "15"], ["bo", "", "", "bo", "", "13"],
                        ["cy", "", "", "cy", "", "0"]]


def test_the_report_command_rewrites_the_same_figures(graded):
    out, _ = graded
    before = {p.name: p.read_text() for p in (out / "report").iterdir()}
    done = subprocess.run(AUTOGRADER + ["report", CHAPTER, "--out", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("wrote ") and f"{CHAPTER}.html" in done.stdout
    for name in (f"{CHAPTER}-figures.csv", f"{CHAPTER}-canvas.csv"):
        assert (out / "report" / name).read_text() == before[name]


def test_a_chapter_never_graded_gets_a_clear_message(graded, tmp_path):
    out, _ = graded
    done = subprocess.run(AUTOGRADER + ["report", "01_tensor", "--out", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert f"01_tensor was never graded into {out}" in done.stderr and "autograder grade 01_tensor" in done.stderr
    assert not list((out / "report").glob("01_tensor*"))
    done = subprocess.run(AUTOGRADER + ["report", CHAPTER, "--out", str(tmp_path / "nothing")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "was never graded into" in done.stderr and not (tmp_path / "nothing").exists()
    done = subprocess.run(AUTOGRADER + ["report", "07_nope", "--out", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "no chapter '07_nope'" in done.stderr


# -- the figures' logic on made-up results (no grading) ---------------------------------
def _result(student, statuses, notes=(), seconds=1.0, points=None, messages=None):
    exercises = []
    for i, status in enumerate(statuses):
        ex = f"ex_{i}"
        earned = (points or {}).get(ex, 2.0 if status == "passed" else 0.0)
        exercises.append({"exercise": ex, "status": status, "points": earned, "max_points": 2.0,
                          "message": (messages or {}).get(ex, "" if status == "passed" else f"{status} here")})
    return {"student": student, "chapter": "09_made_up", "score": sum(e["points"] for e in exercises),
            "max_score": 2.0 * len(statuses), "notes": list(notes), "exercises": exercises, "seconds": seconds}


def test_needs_a_look_sorts_the_notes_into_what_an_instructor_looks_for():
    results = [
        _result("ok", ["passed", "passed"]),
        _result("cheat", ["error", "passed"], messages={
            "ex_0": "the tests could not be trusted: while they ran, your code replaced torch.allclose. "
                    "Changing the grader's tools earns no points."}),
        _result("patch", ["passed", "passed"], notes=[
            "ex_1: your code replaced numpy.allclose; the original was put back before the tests ran"]),
        _result("crash", ["error", "passed"], notes=["cell 4: the kernel died (signal 11) while running this cell",
                                                     "cell 4: restarted the kernel and replayed the cells before it"]),
        _result("paste", ["passed", "passed"], notes=[
            "the answer cell ex_0 appears more than once: the last copy was graded, the others ran as ordinary code"]),
        _result("gone", ["error", "error"], notes=["no 09_made_up.ipynb in the student's folder"],
                messages={"ex_0": "not graded: no notebook", "ex_1": "not graded: no notebook"}),
    ]
    report = rep.build("09_made_up", results)
    kinds = {s.name: sorted({k for k, _ in s.look}) for s in report.students}
    assert kinds == {"ok": [], "cheat": ["tampering"], "patch": ["tampering"], "crash": ["error"],
                     "paste": ["repaired"], "gone": ["not graded"]}
    messages, not_graded = report.failures("ex_0")
    assert not_graded == 1 and sorted((m[1], m[2]) for m in messages) == [(1, ["cheat"]), (1, ["crash"])]
    page = rep.render(report)
    assert '<strong id="look">5</strong>' in page and "the kernel died (signal 11)" in page


def test_failure_messages_group_across_seeds_and_numbers():
    hint = "\n  (random inputs, seed {}: run course.inputs.reseed({}) before the tests, or set COURSE_SEED={}, " \
           "to replay them)"
    results = [_result(f"s{i}", ["failed"], messages={"ex_0": f"sum of a tensor of shape (3,): got {i}.5 but "
                                                            f"torch gives 7.25" + hint.format(i, i, i)})
               for i in range(4)]
    results.append(_result("t", ["failed"], messages={"ex_0": "sum over dim=1: wrong shape"}))
    messages, _ = rep.build("09_made_up", results).failures("ex_0")
    (first, count, who, varied), (second, count2, _, varied2) = messages
    assert count == 4 and who == ["s0", "s1", "s2", "s3"] and varied and "seed" not in first
    assert first.startswith("sum of a tensor of shape (3,): got ") and (second, count2, varied2) == (
        "sum over dim=1: wrong shape", 1, False)


def test_score_bins_for_many_points_and_fractions():
    results = [_result(f"s{i}", ["failed"] * 30, points={"ex_0": 0.5 * i}) for i in range(5)]
    results.append(_result("top", ["passed"] * 30))
    report = rep.build("09_made_up", results)
    bins = rep.score_bins(report)
    assert report.auto_max == 60 and bins[0] == ("0–<3", 5) and bins[-1] == ("60", 1)
    assert sum(c for _, c in bins) == 6 and len(bins) == 21
    rows = list(csv.reader(io.StringIO(rep.figures_csv(report))))
    assert rows[0] == ["figure", "item", "measure", "value"]
    assert ["class", "09_made_up", "mean_score", f"{(0 + .5 + 1 + 1.5 + 2 + 60) / 6:.3f}"] in rows


def test_the_report_lists_the_late_the_missing_and_the_hand_grading_still_to_do():
    """Issue 43: the hub leaves OUT/roster.json (lateness, who never submitted); the gradebook says whose
    answers wait to be graded by hand."""
    results = [_result("ana", ["passed", "manually graded"]), _result("bo", ["failed", "manually graded"])]
    report = rep.build("09_made_up", results, {"bo": {"score": 0, "max_score": 4, "hand_pending": True}})
    report.roster = {"due": "2026-12-01 17:00 UTC", "policy": "on-time", "never_submitted": ["dee"],
                     "students": {"ana": {"late_by": "", "submitted": "x"},
                                  "bo": {"late_by": "2 h 5 min", "submitted": "y", "note": "the latest counts"}}}
    page = rep.render(report, generated="now")
    roster = page.split("id='roster'", 1)[1]
    assert "<td>bo</td><td>2 h 5 min</td>" in roster and "<td>ana</td>" not in roster, roster
    assert "<p id='never'>dee</p>" in roster and "late policy on-time" in roster
    assert "1 student(s) still have answers to grade by hand in formgrader: bo" in roster


def test_feedback_shows_an_answer_graded_by_hand_as_not_graded_yet_never_as_zero():
    from autograder.grade import feedback
    from autograder.grade.grader import Result
    from course.verdicts import MANUAL, PASSED, Verdict
    result = Result("ana", "09_made_up", [Verdict("ex_a", PASSED, "", 2, 2),
                                          Verdict("q1", MANUAL, "graded by your instructor", 0, 2)])
    page = feedback.render(result)
    assert "<strong>2 / 2</strong>" in page and "<td class='hand' data-exercise='q1'>not graded yet / 2</td>" in page
    assert "0 / 2" not in page and "it is not a zero" in page
