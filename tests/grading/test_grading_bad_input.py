"""A bad file must never cost the class its grades (issue 14, items 8-11).

Two real `autograder grade` runs, on the small chapter of test_grading_sandbox.py
(ex_double 2 points, ex_half 1, ex_secret and ex_gpu that no honest answer earns
here): a folder class whose notebooks are damaged in every way the grader reads
them (item 8) and whose folder names nbgrader cannot hold (item 10), and a zip
whose members are bad in every way an archive can be (item 9). Each student,
the damaged ones and their correct neighbours, must be in grades.csv, results/,
feedback/ and the gradebook with the right score, and the warnings and notes
must name the problem. The archive cases are also checked on unpack() alone,
with the zip's index intact and cut off. Item 11 kills the kernel at each
awkward moment through the supervisor's test hook (a cell's "deaths") and
once from the student's own code.
"""
from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder.grade.intake import _mapped, collect, id_problem, printable, student_ids, unpack
from test_grading_cli import HIDDEN_WRONG
from test_grading_sandbox import RIGHT, answer, make_chapter

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("grading_bad_input")]
AUTOGRADER = [sys.executable, "-m", "autograder.cli"]
GPU = __import__("torch").cuda.is_available()
FULL = 3 + (1 if GPU else 0)  # ex_double + ex_half (+ ex_gpu where there is a GPU)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """(repo root, chapter) of the small chapter."""
    root = tmp_path_factory.mktemp("repo")
    return root, make_chapter(root)


@pytest.fixture(scope="module")
def grader(course, tmp_path_factory):
    """A Grader of the small chapter; its release notebook is what the classes are made of."""
    from autograder.grade.grader import Grader
    from autograder.sandbox.bubblewrap import Limits
    g = Grader(course[1], tmp_path_factory.mktemp("grader"), limits=Limits(cell_timeout_s=10,
                                                                            submission_timeout_s=90))
    yield g
    g.close()


@pytest.fixture(scope="module")
def notebook(course):
    """Any notebook of the chapter, for what only unpacks (the source: no nbgrader needed)."""
    return nbformat.read(course[1].notebook, 4)


def right(release):
    return answer(answer(release, "ex_double", RIGHT["ex_double"]), "ex_half", RIGHT["ex_half"])


def as_json(nb) -> dict:
    return json.loads(nbformat.writes(nb))


def cell(raw: dict, grade_id: str) -> dict:
    return next(c for c in raw["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)


def damaged(release) -> dict[str, tuple[object, float, str]]:
    """{folder: (notebook JSON or text, score, a phrase the notes must hold)}: item 8."""
    cases = {}

    def case(name, score, phrase, change):
        raw = as_json(right(release))
        change(raw)
        cases[name] = (raw, score, phrase)

    case("course-is-a-string", 0, "metadata.course is a str", lambda r: r["metadata"].update(course="01_mini"))
    case("course-is-a-list", 0, "metadata.course is a list", lambda r: r["metadata"].update(course=["01_mini"]))
    case("marks-are-a-string", FULL - 1, "nbgrader marks (metadata.nbgrader) are a string",
         lambda r: cell(r, "ex_half")["metadata"].update(nbgrader="ex_half"))
    case("test-marks-are-a-list", FULL, "nbgrader marks (metadata.nbgrader) are a list",
         lambda r: cell(r, "ex_double_tests")["metadata"].update(nbgrader=["tests"]))
    case("grade-id-is-a-list", FULL - 2, "grade_id is a list",
         lambda r: cell(r, "ex_double")["metadata"]["nbgrader"].update(grade_id=["ex_double"]))
    case("grade-id-is-a-number", FULL - 1, "grade_id is a number",
         lambda r: cell(r, "ex_half")["metadata"]["nbgrader"].update(grade_id=7))
    case("grade-id-is-null", FULL - 1, "marked for grading but has no grade_id",
         lambda r: cell(r, "ex_half")["metadata"]["nbgrader"].update(grade_id=None))
    case("cells-not-cells", FULL, "cell 2 is a string, not a notebook cell",
         lambda r: r["cells"].__setitem__(slice(2, 2), ["a string", 42, None, {"source": "no cell_type"}]))
    case("answer-without-source", FULL - 1, "has no source", lambda r: cell(r, "ex_half").pop("source"))
    case("source-is-a-number", FULL - 2, "source is a number", lambda r: cell(r, "ex_double").update(source=12))
    case("metadata-lists-and-junk", FULL, "metadata is a list",
         lambda r: (cell(r, "ex_half")["metadata"]["nbgrader"].update(checksum=[1], points="lots"),
                    r["cells"][0].update(metadata=[], outputs="junk", id=["x"])))
    case("cells-is-an-object", 0, "'cells' is an object", lambda r: r.update(cells={"a": 1}))
    cases["nested-too-deeply"] = ('{"cells": ' + "[" * 50000 + "]" * 50000 + "}", 0, "nested too deeply")
    return cases


def odd_names(release) -> dict[str, tuple[object, float]]:
    """{folder name: (notebook, score)}: item 10. `amy ` meets `amy` once nbgrader strips it."""
    nb, wrong = right(release), answer(right(release), "ex_double", HIDDEN_WRONG)
    return {"amy": (nb, FULL), "amy ": (release, 0), " lead": (nb, FULL), ".hidden": (wrong, FULL - 2),
            "glob[1]*?": (nb, FULL), "plus+comma,": (wrong, FULL - 2), "jos\udce9": (nb, FULL),
            "new\nline": (nb, FULL), "x" * 150: (wrong, FULL - 2)}


def write(folder: Path, notebook) -> None:
    path = folder / "01_mini.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(notebook if isinstance(notebook, str) else
                    json.dumps(notebook) if isinstance(notebook, dict) else nbformat.writes(notebook))


def good_zip(release) -> tuple[bytes, dict[str, float], list[str]]:
    """A class zip with a bad member of each kind next to good ones: (archive, {folder:
    score}, phrases the warnings must hold)."""
    nb = nbformat.writes(right(release)).encode()
    wrong = nbformat.writes(answer(right(release), "ex_double", HIDDEN_WRONG)).encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate
        zf.writestr("class/amy/01_mini.ipynb", nb)
        zf.writestr(".", b"a member named '.'")
        zf.writestr("class/bo/01_mini.ipynb", wrong)
        zf.writestr("class/bo/01_mini.ipynb", nb)  # a duplicate: the last copy counts
        zf.writestr("class/cy", b"a file where there is also a folder")
        zf.writestr("class/cy/01_mini.ipynb", nb)
        zf.writestr(zipfile.ZipInfo("class/dan/01_mini.ipynb"), b"CRC" + wrong)  # stored: corrupted below
        zf.writestr("class/eve/01_mini.ipynb", wrong)
        zf.writestr("class/eve/" + "n" * 300 + ".txt", b"a name longer than 255 bytes")
        zf.writestr("class/fay/01_mini.ipynb", nb)  # encrypted below
        zf.writestr("class/ gus/01_mini.ipynb", nb)  # item 10 inside a zip
        zf.writestr("class/josX/01_mini.ipynb", nb)  # a cp437 name below
    raw = bytearray(buffer.getvalue())
    at = bytes(raw).index(b"CRC" + wrong)
    raw[at] ^= 0xFF
    name = b"class/fay/01_mini.ipynb"
    raw[bytes(raw).rfind(b"PK\x03\x04", 0, bytes(raw).index(name)) + 6] |= 1  # local header: encrypted
    raw[bytes(raw).rfind(b"PK\x01\x02", 0, bytes(raw).rindex(name)) + 8] |= 1  # central directory: encrypted
    raw = bytes(raw).replace(b"josX", b"jos\x82")  # not UTF-8 (and not flagged so): cp437 says 'josé'
    scores = {"amy": FULL, "bo": FULL, "cy": FULL, "dan": 0, "eve": FULL - 2, "fay": 0, " gus": FULL,
              "josé": FULL}
    phrases = ["skipped '.'", "skipped 'class/bo/01_mini.ipynb' in class.zip: the archive holds this name more "
               "than once", "skipped 'class/cy' in class.zip: the archive also has a folder",
               "skipped 'class/dan/01_mini.ipynb'", "Bad CRC-32", "longer than the 255",
               "skipped 'class/fay/01_mini.ipynb' in class.zip: it is encrypted", "b'class/jos\\x82/01_mini.ipynb'",
               "' gus' cannot be a student id"]
    return raw, scores, phrases


@pytest.fixture(scope="module")
def graded(course, grader, tmp_path_factory):
    """Both classes graded by `autograder grade`, at the same time."""
    root, release = course[0], grader.release_nb
    tmp = tmp_path_factory.mktemp("bad-input")
    folders = tmp / "folders"
    expected = {}
    for name, (nb, score, _) in damaged(release).items():
        write(folders / name, nb)
        expected[name] = score
    for name, (nb, score) in odd_names(release).items():
        write(folders / name, nb)
        expected[printable(name)] = score
    write(folders / "late", right(release))
    (folders / "late" / "timestamp.txt").write_bytes(b"\xffnot a time")
    expected["late"] = FULL
    (folders / "empty").mkdir()
    expected["empty"] = 0
    (folders / ".cache").mkdir()  # hidden, no notebook: skipped with a warning
    (folders / "__MACOSX").mkdir()
    (folders / "README.txt").write_text("not a student")
    archive, zip_expected, phrases = good_zip(release)
    (tmp / "class.zip").write_bytes(archive)
    runs = {}
    for label, where, workers in (("folders", folders, 1), ("zip", tmp / "class.zip", 1)):
        runs[label] = subprocess.Popen(AUTOGRADER + ["grade", "01_mini", str(where), "--out", str(tmp / label),
                                                     "--workers", str(workers), "--repo", str(root)],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = {}
    for label, proc in runs.items():
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stdout + stderr
        done[label] = (tmp / label, stdout, stderr)
    return done, expected, zip_expected, phrases


def everything_agrees(out: Path, expected: dict[str, float]) -> dict[str, dict]:
    """grades.csv (its `folder` column), results/, feedback/ and the gradebook hold every student
    with the expected score, under the same id; returns {folder: results JSON}."""
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        table = {r["folder"]: r for r in csv.DictReader(f)}
    assert {folder: float(r["score"]) for folder, r in table.items()} == expected
    results = {}
    for path in (out / "results").glob("*.json"):
        result = json.loads(path.read_text())
        assert path.stem == result["student"] and id_problem(result["student"]) is None, path
        assert (out / "feedback" / result["student"] / "01_mini.html").is_file()
        results[result["folder"]] = result
        assert table[result["folder"]]["student"] == result["student"]
    assert {folder: r["score"] for folder, r in results.items()} == expected
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        book = {s.id: gb.find_submission("01_mini", s.id).score for s in gb.students}
    assert book == {r["student"]: r["score"] for r in results.values()}
    return results


# ---------------------------------------------------------------- item 8: damaged notebooks

def test_every_damaged_notebook_is_its_own_zero_and_its_neighbours_keep_their_points(graded, grader):
    done, expected, _, _ = graded
    out, stdout, stderr = done["folders"]
    results = everything_agrees(out, expected)
    assert "Traceback" not in stderr
    for name, (_, score, phrase) in damaged(grader.release_nb).items():
        notes = " | ".join(results[name]["notes"])
        assert phrase in notes, (name, notes)
    assert "timestamp.txt is not a time nbgrader can read" in results["late"]["notes"][0]
    assert "no 01_mini.ipynb" in results["empty"]["notes"][0]


def test_any_exception_while_grading_is_that_submissions_error(grader, tmp_path, monkeypatch):
    """A failure nobody foresaw (here: repair raising) costs that notebook, not the next one."""
    import autograder.grade.grader as grade_module
    write(tmp_path / "a", right(grader.release_nb))

    def broken(*args, **kwargs):
        raise KeyError("something nobody foresaw")
    with monkeypatch.context() as patch:
        patch.setattr(grade_module, "repair", broken)
        failed = grader.grade("unlucky", tmp_path / "a" / "01_mini.ipynb")
    assert failed.score == 0 and "could not grade this notebook (KeyError: 'something nobody foresaw')" \
        in failed.notes[-1] and all(v.points == 0 for v in failed.verdicts)
    assert {r["name"] for r in failed.grades} == {"ex_double_tests", "ex_half_tests", "ex_secret_tests",
                                                  "ex_gpu_tests"}


# ---------------------------------------------------------------- item 10: folder names

def test_folder_names_nbgrader_cannot_hold_are_graded_under_ids_it_can(graded):
    done, expected, _, _ = graded
    out, stdout, stderr = done["folders"]
    results = everything_agrees(out, expected)
    assert results["amy"]["student"] == "amy" and results["amy"]["score"] == FULL
    assert results["amy "]["student"] != "amy" and results["amy "]["score"] == 0  # no collision after stripping
    for name in ("amy ", " lead", ".hidden", "glob[1]*?", "plus+comma,", "jos\\xe9", "new\nline", "x" * 150):
        assert results[name]["student"] != name and f"the student folder {name!r} cannot be a student id" in stdout
    assert "skipped '.cache'" in stderr and "hidden folder without 01_mini.ipynb" in stderr
    assert "skipped '__MACOSX'" in stderr and "skipped 'README.txt'" in stderr and "a file, not" in stderr
    assert "[" + f"{len(expected)}/{len(expected)}" + "]" in stdout


def test_student_ids_are_deterministic_and_collision_free():
    names = ["amy", "amy ", " amy", ".amy", "a*y", "jos\udce9", "", "x" * 300, "ok-name", "Zoë"]
    names.append(_mapped(" amy", 8))  # a real folder that is what " amy" would map to
    ids = student_ids(names)
    assert ids == student_ids(list(reversed(names)))
    assert len(set(ids.values())) == len(names) and all(id_problem(i) is None for i in ids.values())
    assert ids["amy"] == "amy" and ids["ok-name"] == "ok-name" and ids["Zoë"] == "Zoë"
    assert ids[_mapped(" amy", 8)] == _mapped(" amy", 8) and ids[" amy"] == _mapped(" amy", 16)
    assert student_ids([" amy"]) == {" amy": _mapped(" amy", 8)}


# ---------------------------------------------------------------- item 9: zip members

def test_bad_zip_members_are_skipped_by_name_and_the_class_is_graded(graded):
    done, _, expected, phrases = graded
    out, stdout, stderr = done["zip"]
    results = everything_agrees(out, expected)
    assert "Bad CRC-32" in results["dan"]["notes"][0] and "encrypted" in results["fay"]["notes"][0]
    for phrase in phrases:  # what the zip held on stderr; the ids a folder name became on stdout
        assert phrase in (stdout if "cannot be a student id" in phrase else stderr), phrase
    assert "Traceback" not in stderr


@pytest.mark.parametrize("index", ["intact", "cut off", "undecodable"])
def test_unpack_skips_each_bad_member_and_keeps_the_rest(notebook, tmp_path, index):
    archive, expected, phrases = good_zip(notebook)
    if index == "cut off":  # an upload that stopped before the central directory
        archive = archive[:archive.index(b"PK\x01\x02")]
    elif index == "undecodable":  # a name flagged UTF-8 that is not: zipfile cannot read the index
        archive = archive.replace(b"class/amy/", b"class/\xe9my/").replace(
            b"PK\x03\x04\x14\x00\x00\x00", b"PK\x03\x04\x14\x00\x00\x08", 1)
        central = archive.index(b"PK\x01\x02")
        archive = archive[:central + 8] + bytes([archive[central + 8]]) + b"\x08" + archive[central + 10:]
        phrases = phrases + ["is marked UTF-8 but is not"]
        expected = {("\u0398my" if k == "amy" else k): v for k, v in expected.items()}
    (tmp_path / "class.zip").write_bytes(archive)
    into = tmp_path / "out"
    into.mkdir()
    skipped = {}
    found = unpack(tmp_path / "class.zip", into, skipped)
    text = "\n".join(found)
    for phrase in phrases:
        if "gus" not in phrase:
            assert phrase in text, (phrase, text)
    if index != "intact":
        assert "index is damaged or missing" in found[0]
    submissions = {s.folder: s for s in collect(into, "01_mini", "01_mini.ipynb", skipped=skipped)}
    assert set(submissions) == set(expected)
    assert "could not be taken from the zip it came in: it cannot be read" in submissions["dan"].problem
    assert "it is encrypted" in submissions["fay"].problem
    assert [s for s, v in expected.items() if v == 0] == ["dan", "fay"]
    assert submissions["dan"].notebook is None and submissions["fay"].notebook is None
    assert all(submissions[s].notebook is not None for s, v in expected.items() if v)
    assert b"a file where" not in (into / "class" / "cy" / "01_mini.ipynb").read_bytes()


def test_a_zip_cut_inside_a_member_keeps_the_members_before_it(notebook, tmp_path):
    archive, _, _ = good_zip(notebook)
    cut = archive.index(b"class/ gus/01_mini.ipynb") + 200  # inside gus's compressed notebook
    (tmp_path / "class.zip").write_bytes(archive[:cut])
    (tmp_path / "out").mkdir()
    found = unpack(tmp_path / "class.zip", tmp_path / "out")
    assert any("'class/ gus/01_mini.ipynb'" in w and "cut off" in w for w in found), found
    submissions = {s.folder: s for s in collect(tmp_path / "out", "01_mini", "01_mini.ipynb")}
    assert {"amy", "bo", "cy", "eve"} <= set(submissions) and "josé" not in submissions
    assert submissions[" gus"].notebook is None  # graded 0, with a note, not lost


def test_a_file_that_is_not_a_zip_still_stops_the_run(tmp_path):
    from autograder.grade.intake import IntakeError
    (tmp_path / "bad.zip").write_bytes(b"not a zip at all")
    with pytest.raises(IntakeError, match="not a readable zip file"):
        unpack(tmp_path / "bad.zip", tmp_path)


# ---------------------------------------------------------------- item 11: kernel deaths

DEATHS = {  # where the kernel dies -> (points of ex_double, ex_half), a phrase of the notes
    "between two cells": ({"ex_double": ["after_reply"]}, (2, 1), "between cells (after cell 1)"),
    "just before a test cell is sent": ({"ex_double_tests": ["before_send"]}, (2, 1), "between cells"),
    "with a test cell sent but unread": ({"ex_double_tests": ["after_send"]}, (0, 1), "died of SIGKILL while running"),
    "with an answer cell sent but unread": ({"ex_half": ["after_send"]}, (2, 0), "died of SIGKILL while running"),
    "again while the cells are replayed": ({"ex_double_tests": ["after_send"], "ex_double": [None, "after_send"]},
                                           (0, 1), "while the cells before were replayed, the kernel died"),
    "every time": ({"ex_double": ["before_send"] * 5}, (0, 0), "the kernel could not be restarted"),
}


@pytest.mark.parametrize("moment", list(DEATHS))
def test_a_kernel_that_dies_at_any_moment_costs_at_most_the_cell_it_had(grader, tmp_path, moment):
    deaths, (double, half), phrase = DEATHS[moment]
    write(tmp_path / "s", right(grader.release_nb))
    grader.kernel_deaths = deaths
    try:
        result = grader.grade("dies", tmp_path / "s" / "01_mini.ipynb")
    finally:
        grader.kernel_deaths = {}
    points = {v.exercise: v.points for v in result.verdicts}
    notes = " | ".join(result.notes)
    assert (points["ex_double"], points["ex_half"]) == (double, half), (result.verdicts, notes)
    assert phrase in notes and "sandbox failed" not in notes
    if double == 0 and moment != "every time":
        verdict = next(v for v in result.verdicts if v.exercise == "ex_double")
        assert verdict.status == "error" and "the kernel died" in verdict.message


def test_a_kernel_killed_by_the_students_own_child_process_is_restarted(grader, tmp_path):
    """No hook: the answer cell forks a child that SIGKILLs the kernel at once (once: a file
    remembers it), while the kernel finishes the cell, reports, or receives the next."""
    killer = ("import os\nif not os.path.exists('killed-once'):\n    open('killed-once', 'w').close()\n"
              "    _kernel = os.getpid()\n    if os.fork() == 0:\n        os.kill(_kernel, 9)\n        os._exit(0)\n")
    write(tmp_path / "s", answer(right(grader.release_nb), "ex_double", killer + RIGHT["ex_double"]))
    result = grader.grade("kills-itself", tmp_path / "s" / "01_mini.ipynb")
    points = {v.exercise: v.points for v in result.verdicts}
    notes = " | ".join(result.notes)
    assert "sandbox failed" not in notes and "died of SIGKILL" in notes and "restarted the kernel" in notes
    assert points["ex_double"] in (0, 2) and points["ex_half"] == 1, (result.verdicts, notes)
