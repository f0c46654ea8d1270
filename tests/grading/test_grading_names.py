"""Student folder names against the files the grader writes (issue 42, items 1-3).

One real `autograder grade` run, on the small chapter of test_grading_sandbox.py, of a
class whose folder names are formulas (`=HYPERLINK(...)`, `@SUM(...)`, `+1`, `-2`),
a name with a leading space, and look-alikes (josé in NFC and NFD, a zero-width
space, a Cyrillic о). Each look-alike pair holds one right and one blank notebook,
so that two rows that read the same have different scores.

    item 1  no cell of any CSV written (grades.csv, the report's figures and Canvas
            CSVs) is one a spreadsheet would read as a formula
    item 2  grades.csv, results/, feedback/, the gradebook, the report and the Canvas
            CSV name each student by the same id; grades.csv and the report also show
            the folder; the run's output says which names were changed and why
    item 3  look-alikes are named before grading, with their code points, and marked
            in the report; each is graded as its own student

The writer and the look-alike key are also checked alone (no grading).
"""
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
from autograder.grade.csv_cells import FORMULA_STARTS, cell, csv_text, is_formula
from autograder.grade.intake import code_points, id_problem, look_alike_groups, look_alike_key, student_ids
from test_grading_cli import released
from test_grading_sandbox import RIGHT, answer, make_chapter

REPO = Path(__file__).resolve().parents[2]
AUTOGRADER = [sys.executable, "-m", "autograder.cli"]
FULL = 3 + (1 if __import__("torch").cuda.is_available() else 0)  # ex_double + ex_half (+ ex_gpu)

FORMULAS = ['=HYPERLINK("x",1)', "@SUM(1+1)", "+1", "-2"]
NFC, NFD = "jos\u00e9", "jose\u0301"
ZERO_WIDTH, PLAIN = "ann\u200ba", "anna"
CYRILLIC, LATIN = "b\u043eb", "bob"
# {folder: right answers?}: in each look-alike pair one is right and one blank
CLASS = {**{f: True for f in FORMULAS}, " lead space": True, NFC: True, NFD: False, ZERO_WIDTH: True,
         PLAIN: False, CYRILLIC: True, LATIN: False}
LOOK_ALIKE_PAIRS = [(NFC, NFD), (ZERO_WIDTH, PLAIN), (CYRILLIC, LATIN)]


def unquote(text: str) -> str:
    """A CSV cell as the spreadsheet shows it: the `'` that marks text is not part of it."""
    return text[1:] if text.startswith("'") and is_formula(text[1:]) else text


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """(out, stdout) of `autograder grade` on the class."""
    root = tmp_path_factory.mktemp("repo")
    blank = released(make_chapter(root), tmp_path_factory.mktemp("release"))
    tmp = tmp_path_factory.mktemp("names")
    for folder, right in CLASS.items():
        nb = answer(answer(blank, "ex_double", RIGHT["ex_double"]), "ex_half", RIGHT["ex_half"]) if right else blank
        (tmp / "class" / folder).mkdir(parents=True)
        nbformat.write(nb, tmp / "class" / folder / "01_mini.ipynb")
    done = subprocess.run(AUTOGRADER + ["grade", "01_mini", str(tmp / "class"), "--out", str(tmp / "out"),
                                        "--workers", "1", "--repo", str(root)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp / "out", done.stdout


def grades(out: Path) -> dict[str, dict]:
    """grades.csv's rows by the folder each came from (the `'` of a neutralised cell taken off)."""
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        return {unquote(r["folder"]): r for r in csv.DictReader(f)}


# ---------------------------------------------------------------- item 1: CSV cells are data

@pytest.mark.slow
@pytest.mark.xdist_group("grading_names")
def test_no_cell_of_any_csv_written_is_a_formula(graded):
    out, _ = graded
    written = sorted(out.rglob("*.csv"))
    assert {p.name for p in written} >= {"grades.csv", "01_mini-figures.csv", "01_mini-canvas.csv"}
    for path in written:
        for row in csv.reader(open(path, newline="", encoding="utf-8")):
            for text in row:
                assert not text.startswith(FORMULA_STARTS) and not is_formula(text), (path.name, text)
    by_folder = grades(out)
    assert set(by_folder) == set(CLASS)  # every folder is there, and reads back as it was
    assert by_folder['=HYPERLINK("x",1)']["folder"] == '\'=HYPERLINK("x",1)' and by_folder["-2"]["folder"] == "'-2"
    for folder in FORMULAS:  # the ids themselves never start like a formula: they need no quote
        assert not is_formula(by_folder[folder]["student"]) and by_folder[folder]["student"] != folder
        assert float(by_folder[folder]["score"]) == FULL  # the score columns are numbers, untouched


# ---------------------------------------------------------------- item 2: one id everywhere

@pytest.mark.slow
@pytest.mark.xdist_group("grading_names")
def test_each_student_has_one_id_in_every_file(graded):
    out, stdout = graded
    by_folder = grades(out)
    ids = {folder: r["student"] for folder, r in by_folder.items()}
    assert len(set(ids.values())) == len(CLASS)
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        book = {s.id: gb.find_submission("01_mini", s.id).score for s in gb.students}
    canvas = list(csv.reader(open(out / "report" / "01_mini-canvas.csv", newline="", encoding="utf-8")))
    page = (out / "report" / "01_mini.html").read_text(encoding="utf-8")
    assert {r[3] for r in canvas[2:]} == set(ids.values())  # SIS Login ID
    for folder, sid in ids.items():
        result = json.loads((out / "results" / f"{sid}.json").read_text(encoding="utf-8"))
        assert (result["student"], result["folder"]) == (sid, folder)
        assert (out / "feedback" / sid / "01_mini.html").is_file()
        assert book[sid] == result["score"] == float(by_folder[folder]["score"]), folder
        assert rep._e(sid) in page, sid
    figures = list(csv.DictReader(open(out / "report" / "01_mini-figures.csv", newline="", encoding="utf-8")))
    assert {r["item"] for r in figures if r["figure"] == "seconds"} == set(ids.values())
    renamed = [f for f in CLASS if id_problem(f)]
    assert sorted(renamed) == sorted(FORMULAS + [" lead space"])
    assert "student ids: 5 folder name(s) cannot be nbgrader student ids and were changed" in stdout
    for folder in renamed:  # the output says which, why and into what; the report shows both names
        line = next(x for x in stdout.splitlines() if f"the student folder {folder!r} cannot be" in x)
        assert f"graded as {ids[folder]!r}" in line and ("white space" in line or "formula" in line
                                                          or "separators" in line), line
        section = page.split("id='renamed'")[1]
        assert f"<td><code>{rep._e(repr(folder))}</code></td><td>{rep._e(ids[folder])}</td>" in section


# ---------------------------------------------------------------- item 3: look-alikes

@pytest.mark.slow
@pytest.mark.xdist_group("grading_names")
def test_look_alikes_are_named_before_grading_and_marked_in_the_report(graded):
    out, stdout = graded
    by_folder = grades(out)
    before = stdout.split("grading 11 submissions")[0]
    assert before.count("names that look alike:") == 3, before
    page = (out / "report" / "01_mini.html").read_text(encoding="utf-8")
    section = page.split("id='look-alike'")[1].split("<h2")[0]
    figures = list(csv.DictReader(open(out / "report" / "01_mini-figures.csv", newline="", encoding="utf-8")))
    flagged = {r["item"] for r in figures if r["figure"] == "needs_a_look" and r["measure"] == "look-alike"}
    for right, blank in LOOK_ALIKE_PAIRS:
        # graded as two students, with their own scores
        assert (float(by_folder[right]["score"]), float(by_folder[blank]["score"])) == (FULL, 0)
        assert by_folder[right]["student"] != by_folder[blank]["student"]
        for name in (right, blank):
            assert f"{name!r} ({code_points(name)})" in before
            assert f"<code>{code_points(name)}</code>" in section
            assert by_folder[name]["student"] in flagged
    assert "U+006F" in section and "U+043E" in section and "U+200B" in section and "U+0301" in section
    assert len(flagged) == 6  # the formulas and the leading space look like no one
    assert '<strong id="look">6</strong>' in page


# ---------------------------------------------------------------- the parts alone (no grading)

def test_the_writer_quotes_text_that_starts_like_a_formula_and_leaves_numbers():
    for text in ["=1+1", "+1", "-2", "@SUM(A1)", "\tx", "\rx", "  =1", '=HYPERLINK("http://x","y")']:
        assert cell(text) == "'" + text and not is_formula(cell(text))
    for text in ["amy", "1.5", "", "a=b", "'=x"]:
        assert cell(text) == text
    assert [cell(v) for v in (-0.5, 3.0, 2, None)] == ["-0.5", "3", "2", ""]
    rows = list(csv.reader(io.StringIO(csv_text([["=x", 1.5], ["ok", -1]], ["@h", "n"]))))
    assert rows == [["'@h", "n"], ["'=x", "1.5"], ["ok", "-1"]]


def test_every_csv_of_the_tools_goes_through_the_one_writer():
    """A CSV written with csv.writer or DictWriter directly would let a formula through."""
    found = []
    for folder in ("autograder", "hub"):
        for path in (REPO / folder).rglob("*.py"):
            if path.name == "csv_cells.py":
                continue
            text = path.read_text(encoding="utf-8")
            found += [f"{path.relative_to(REPO)}: {m}" for m in re.findall(r"csv\.(?:writer|DictWriter)\(", text)]
    assert not found, found


def test_the_report_csvs_quote_what_students_and_the_gradebook_wrote():
    """Failure messages, notes and the gradebook's names reach the figures and Canvas CSVs."""
    results = [{"student": sid, "folder": folder, "chapter": "09_x", "score": 0, "max_score": 2,
                "notes": ["-note"], "seconds": 1.0,
                "exercises": [{"exercise": "ex_0", "status": "failed", "points": 0, "max_points": 2,
                               "message": "=cmd|' /C calc'!A0"}]}
               for sid, folder in (("a", "a"), ("x-1", "=x"))]
    report = rep.build("09_x", results, {"a": {"score": 0, "max_score": 2, "first_name": "=f", "last_name": "@l"}})
    for text in (rep.figures_csv(report), rep.canvas_csv(report)):
        cells = [c for row in csv.reader(io.StringIO(text)) for c in row]
        assert "'=cmd|' /C calc'!A0" in cells or "'@l, =f" in cells
        assert not any(is_formula(c) for c in cells), cells


def test_look_alike_keys():
    assert look_alike_groups([NFC, NFD, ZERO_WIDTH, PLAIN, CYRILLIC, LATIN, "jose", "Anna "]) == [
        sorted([ZERO_WIDTH, PLAIN, "Anna "]), sorted([LATIN, CYRILLIC]), sorted([NFC, NFD])]
    assert look_alike_key("\u0397\u0391\u039d\u039d\u0391") == "hanna"  # Greek capitals read as HANNA
    assert look_alike_key("\uff41\uff4d\uff59") == "amy"  # full-width letters
    assert look_alike_key("jose") != look_alike_key(NFC)  # an accent is a different name
    assert code_points(CYRILLIC) == "U+0062 U+043E U+0062"


def test_ids_never_start_like_a_formula():
    ids = student_ids(FORMULAS + ["-", "=", "ok-name"])
    assert ids["ok-name"] == "ok-name"
    for name in FORMULAS + ["-", "="]:
        assert id_problem(name) and not is_formula(ids[name]) and id_problem(ids[name]) is None
