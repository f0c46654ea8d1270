"""Grade one chapter's submissions with nbgrader, in a sandbox, into verdicts that teach.

nbgrader does what it is good at: it restores the locked cells and hidden tests
from its gradebook, scores each test cell from its outputs, and records the
scores (nbgrader export and formgrader read them). What it must not do is run
the student's code in a kernel the student can reconfigure, with the
instructor's file access: its Execute step is replaced by `SandboxExecute`,
which hands the cells to the bubblewrap sandbox (autograder/sandbox/bubblewrap.py), where a
kernel the grader controls runs them and reports each test's outcome over a
channel student code cannot forge. The test cells' outputs nbgrader scores are
written from those trusted outcomes.

Before nbgrader sees a submission it is repaired against the release
(autograder/grade/repair.py); afterwards every exercise gets one Verdict with a
teaching message, and the result carries the gradebook rows that the class-wide
gradebook receives (autograder/grade/gradebook.py).
"""
from __future__ import annotations

import ast
import json
import os
import random
import re
import shutil
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from autograder import nbgrader_env
from autograder.chapters import Chapter, discover
from autograder.grade.repair import repair, sanitize
from autograder.sandbox.bubblewrap import Limits, Sandbox, SandboxError, grader_cache_dir
from course.notebook import NotebookError, exercise_defining, exercises, expect_chapter, read_notebook
from course.verdicts import (ERROR, FAILED, MANUAL, NOT_ATTEMPTED, NOT_RUN, NOT_RUN_ERRORS, PASSED, Verdict,
                             earlier_exercise_missing, needs_earlier_exercise)

MESSAGE_LIMIT = 2000
_GRADER_ERRORS = {"CellTimeoutError", "KernelDied", "GradingIntegrityError"}


@dataclass
class Result:
    student: str
    chapter: str
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    grades: list[dict] = field(default_factory=list)  # gradebook rows: notebook, name, auto_score, ...
    timestamp: str | None = None
    autograded: str | None = None  # the executed notebook, for formgrader (holds hidden tests: instructor only)
    seconds: float = 0.0
    seed: int | None = None
    kernel_peak_rss_kb: int = 0
    folder: str = ""  # the student's folder as handed in, where it differs from `student`

    @property
    def score(self) -> float:
        """Points earned, all exercises together."""
        return sum(v.points for v in self.verdicts)

    @property
    def max_score(self) -> float:
        """Points possible, all exercises together."""
        return sum(v.max_points for v in self.verdicts)

    def to_json(self) -> dict:
        """The result as written to results/STUDENT.json."""
        return {"student": self.student, "folder": self.folder or self.student, "chapter": self.chapter,
                "score": self.score, "max_score": self.max_score, "notes": self.notes, "exercises": [asdict(v) for v in self.verdicts], "seed": self.seed,
                "seconds": round(self.seconds, 3)}


def _cut(text: str, limit: int = MESSAGE_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 20] + " ... (cut)"


def zero_verdicts(source_nb, message: str) -> list[Verdict]:
    """Every exercise of the chapter at 0 points with `message` (manual ones left to the instructor)."""
    return [Verdict(ex.id, MANUAL if ex.manual else ERROR, "graded by your instructor" if ex.manual else message,
                    0.0, ex.points) for ex in exercises(source_nb).values()]


def zero_grades(source_nb, verdicts: list[Verdict]) -> list[dict]:
    """Gradebook rows that give every automatically graded test cell 0 points."""
    ids = {ex.id: [source_nb.cells[i].metadata.nbgrader.grade_id for i in ex.test_cells]
           for ex in exercises(source_nb).values()}
    return [{"notebook": None, "name": t, "auto_score": 0.0, "needs_manual_grade": False}
            for v in verdicts if v.status != MANUAL for t in ids.get(v.exercise, [])]


def failed_result(chapter: Chapter, student: str, note: str, source_nb=None) -> Result:
    """The result of a submission the grader could not grade: 0 points and `note`."""
    source_nb = source_nb if source_nb is not None else read_notebook(chapter.notebook)
    result = Result(student, chapter.id, notes=[note])
    result.verdicts = zero_verdicts(source_nb, "not graded: see the note")
    result.grades = [r | {"notebook": chapter.id} for r in zero_grades(source_nb, result.verdicts)]
    return result


def grader_failure_note(e: BaseException) -> str:
    """The note a student gets when the grader itself failed on their notebook: what to do next."""
    return (f"the grader could not grade this notebook ({type(e).__name__}: {_cut(str(e), 300)}). Your work "
            "is not lost: fetch a fresh copy of the notebook from release/, paste your answers into it in "
            "Jupyter and submit again, and tell your instructor, who can regrade it")


def _chapter_check(nb, chapter_id: str, path: Path) -> None:
    """expect_chapter, after making sure the notebook's metadata has the shape it reads."""
    fix = (f"Restore it (JupyterLab: the property inspector's notebook metadata) or copy your answers into a "
           f"fresh release/{chapter_id}/{chapter_id}.ipynb and submit that.")
    meta = nb.get("metadata")
    if not isinstance(meta, dict):
        raise NotebookError(f"{path.name}'s notebook metadata is a {type(meta).__name__}, not an object, so the "
                            f"grader cannot tell which chapter it is. {fix}")
    course = meta.get("course", {})
    if not isinstance(course, dict):
        raise NotebookError(f"{path.name}'s metadata.course is a {type(course).__name__} ({course!r:.60}), not the "
                            f"object the release has ({{\"chapter\": \"{chapter_id}\", ...}}), so the grader "
                            f"cannot tell which chapter it is. {fix}")
    if not isinstance(course.get("chapter"), (str, type(None))):
        raise NotebookError(f"{path.name}'s metadata.course.chapter is a {type(course['chapter']).__name__}, not "
                            f"the chapter's name ({chapter_id!r}). {fix}")
    expect_chapter(nbformat.from_dict({"metadata": meta}), chapter_id, path.name)


def load_submission(path: Path, chapter_id: str) -> tuple[nbformat.NotebookNode, list[str]]:
    """(notebook, notes) of a submitted file: checked for the chapter, and sanitized
    (autograder/grade/repair.py) before nbformat reads it, since nbformat itself fails, with
    messages that do not help a student, on cells that are not objects, metadata that
    is a list, and the like. Raises NotebookError with a message that names the problem."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise NotebookError(f"{path.name} is JSON nested too deeply to be a notebook: the file is damaged. Fetch a "
                            "fresh copy from release/ and paste your answers into it, in Jupyter.") from None
    except (OSError, ValueError):  # not there, not text, not JSON: read_notebook says which, in its words
        read_notebook(path)
        raise NotebookError(f"{path} cannot be read as a notebook") from None
    if not isinstance(raw, dict) or "cells" not in raw:
        read_notebook(path)
        raise NotebookError(f"{path} is JSON but not a Jupyter notebook (it has no 'cells').")
    _chapter_check(raw, chapter_id, path)
    notes = sanitize(raw)
    text = json.dumps(raw, ensure_ascii=False)
    if re.search("[\ud800-\udfff]", text):  # lone surrogates (JSON escapes) cannot be written as UTF-8
        raw = json.loads(re.sub("[\ud800-\udfff]", "\ufffd", text))
        notes.append("the notebook held characters that are not valid text (unpaired \\ud800-\\udfff escapes): "
                     "each was replaced by \ufffd")
    if raw.get("nbformat") == 4 and not isinstance(raw.get("nbformat_minor"), int):
        raw["nbformat_minor"] = 5
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # nbformat's own complaints; the notes say what matters
            nb = nbformat.reads(json.dumps(raw), as_version=4)
    except Exception as e:
        raise NotebookError(f"{path.name} is not a valid notebook ({type(e).__name__}: {_cut(str(e), 300)}). "
                            "Fetch a fresh copy from release/ and paste your answers into it, in Jupyter.") from None
    return nb, notes


class SandboxExecute:
    """Stands in for nbgrader's Execute preprocessor (Autograde.autograde_preprocessors)."""
    active: "Grader | None" = None

    def __init__(self, **kwargs):
        pass

    def __call__(self, nb, resources):
        return self.preprocess(nb, resources)

    def preprocess(self, nb, resources):
        """nbgrader's Execute step, replaced: run the notebook in the active Grader's sandbox."""
        if SandboxExecute.active is None:
            raise RuntimeError("SandboxExecute runs only inside Grader.grade")
        return SandboxExecute.active._execute(nb), resources


def _imports(sources: list[str]) -> list[str]:
    names = []
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.append(node.module)
    return sorted(set(names))


def _transform_magics(source: str) -> str:
    if "%" not in source and "!" not in source:
        return source
    from IPython.core.inputtransformer2 import TransformerManager
    try:
        return TransformerManager().transform_cell(source)
    except Exception:
        return source


class Grader:
    """A course folder for one chapter, set up once, then any number of submissions."""

    def __init__(self, chapter: Chapter, workdir: Path, db_url: str | None = None, limits: Limits | None = None,
                 generated: Path | None = None):
        """`generated`: a folder where the course folder generate_assignment makes is kept for the
        next grader of the same chapter version, so that only the first pays for generating it (5-10 s
        of nbgrader); by default this machine's (`machine_generated`), which every run shares. A
        gradebook elsewhere (`db_url`) is not this folder's to copy: then none."""
        self.chapter = chapter
        self.root = workdir
        self.source_nb = read_notebook(chapter.notebook)
        nbgrader_env.stamp_in_process()  # its throwaway gradebook's alembic stamp, without a command per grader
        self.api = nbgrader_env.api(workdir, db_url, **{"Autograde.autograde_preprocessors": _preprocessors()})
        generated = None if db_url else (generated or machine_generated(chapter))
        if not copy_generated(generated, workdir):
            prepare_course(chapter, workdir)
            with nbgrader_env.quiet():
                result = self.api.generate_assignment(chapter.id)
            nbgrader_env.check(result, f"generate_assignment {chapter.id}")
            keep_generated(workdir, generated)
        self.release_nb = read_notebook(workdir / "release" / chapter.id / chapter.notebook.name)
        source = workdir / "source" / chapter.id
        self.support = {p.relative_to(source).as_posix(): p for p in sorted(source.rglob("*"))
                        if p.is_file() and p.suffix != ".ipynb" and p.name != chapter.text_form.name
                        and "__pycache__" not in p.parts}
        trusted = [c.source for c in self.source_nb.cells if c.cell_type == "code"
                   and not c.metadata.get("nbgrader", {}).get("solution")]
        code = [c.source for c in self.source_nb.cells if c.cell_type == "code"]
        limits = limits or Limits()
        self.sandbox = Sandbox(preload=_imports(trusted), limits=limits,
                               warmup=code, warmup_files=self.support, staging=workdir / ".sandbox-in")
        self._run: dict | None = None
        # For tests: {grade_id or cell index: [moment, ...]} makes the supervisor kill the kernel at that
        # moment of the n-th time the cell is sent ("before_send", "after_send", "after_reply"; None: no
        # death that time). See autograder/sandbox/supervisor.py.
        self.kernel_deaths: dict = {}

    def close(self) -> None:
        """Stop the grader's sandbox."""
        self.sandbox.close()

    def grade(self, student: str, notebook: Path | None, timestamp: str | None = None,
              problem: str | None = None, notes: list[str] | None = None) -> Result:
        """Grade one student's notebook; bad input becomes a note, never an exception.

        Only a sandbox that cannot run at all (SandboxError) is raised: that is the
        grader's problem, not this student's."""
        started = time.monotonic()
        result = Result(student, self.chapter.id, notes=list(notes or []))
        try:
            return self._grade(result, started, notebook, timestamp, problem)
        except SandboxError:
            raise
        except Exception as e:  # whatever the notebook holds, it costs this submission only
            self._run = None
            result.notes.append(grader_failure_note(e))
            result.verdicts = self._zero_verdicts("not graded: see the note")
            result.autograded = None
            return self._finish(result, started, graded=False)

    def _grade(self, result: Result, started: float, notebook: Path | None, timestamp: str | None,
               problem: str | None) -> Result:
        student = result.student
        try:
            if notebook is None:
                raise NotebookError(problem or f"no {self.chapter.notebook.name} was submitted")
            nb, notes = load_submission(notebook, self.chapter.id)
            result.notes += notes
        except NotebookError as e:
            result.notes.append(str(e))
            result.verdicts = self._zero_verdicts("not graded: " + str(e))
            return self._finish(result, started, graded=False)
        nb, repairs = repair(nb, self.release_nb, self.source_nb)
        result.notes += repairs
        target = self.root / "submitted" / student / self.chapter.id
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        nbformat.write(nb, target / self.chapter.notebook.name)
        if timestamp:
            (target / "timestamp.txt").write_text(timestamp)
        result.seed = random.SystemRandom().randrange(2 ** 31)
        self._run = {"seed": result.seed}
        SandboxExecute.active = self
        try:
            with nbgrader_env.quiet():
                outcome = self.api.autograde(self.chapter.id, student)
        finally:
            SandboxExecute.active = None
        run, self._run = self._run, None
        if run.get("fatal") is not None:  # nbgrader turned it into a failed autograde; it is the grader's
            raise run["fatal"]
        result.notes += run.get("notes", [])
        result.kernel_peak_rss_kb = run.get("kernel_peak_rss_kb", 0)
        if not outcome.get("success"):
            result.notes.append("nbgrader could not grade this notebook: " + _last_line(outcome))
            result.verdicts = self._zero_verdicts("not graded: see the note")
            return self._finish(result, started, graded=False)
        result.grades, result.timestamp, scores = self._gradebook_rows(student)
        result.verdicts = self._verdicts(student, run, scores)
        autograded = self.root / "autograded" / student / self.chapter.id / self.chapter.notebook.name
        result.autograded = autograded.read_text()
        return self._finish(result, started, graded=True)

    def _finish(self, result: Result, started: float, graded: bool) -> Result:
        if not graded:
            result.grades = [r | {"notebook": self.chapter.id} for r in zero_grades(self.source_nb, result.verdicts)]
        result.seconds = time.monotonic() - started
        return result

    def failed(self, student: str, note: str, notes: list[str] | None = None) -> Result:
        """A submission that could not be graded: 0 points, `note` after `notes`."""
        result = failed_result(self.chapter, student, note, self.source_nb)
        result.notes[:0] = list(notes or [])
        return result

    def _zero_verdicts(self, message: str) -> list[Verdict]:
        return zero_verdicts(self.source_nb, message)

    # -- running the notebook -------------------------------------------------
    def _execute(self, nb):
        """Run the sanitized notebook (hidden tests restored) in the sandbox; fill in outputs."""
        known = {c.metadata.nbgrader.grade_id: c.metadata.nbgrader for c in self.source_nb.cells
                 if "nbgrader" in c.metadata}
        cells = []
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            meta = known.get(cell.metadata.get("nbgrader", {}).get("grade_id"))
            if meta and meta.get("grade") and not meta.get("solution"):
                kind = "test"
            elif meta and meta.get("locked") and not meta.get("solution"):
                kind = "given"
            else:
                kind = "student"
            cells.append({"index": index, "kind": kind, "source": _transform_magics(cell.source)})
            deaths = self.kernel_deaths.get(cell.metadata.get("nbgrader", {}).get("grade_id"),
                                            self.kernel_deaths.get(index))
            if deaths:
                cells[-1]["deaths"] = list(deaths)
        try:
            reply = self.sandbox.run(cells, self.support, seed=self._run["seed"])
        except SandboxError as e:  # nbgrader would report it as this notebook's failure: keep it for grade()
            self._run["fatal"] = e
            raise
        notes = []
        if "error" in reply:
            notes.append("the grading sandbox failed on this notebook: " + reply["error"])
            reply = {"cells": [{"index": c["index"], "status": "error", "ename": "KernelDied",
                                "evalue": "the grading sandbox failed; see the notes"} for c in cells]}
        notes += reply.get("notes", [])
        by_index = {c["index"]: c for c in reply["cells"]}
        kinds = {c["index"]: c["kind"] for c in cells}
        for count, (index, outcome) in enumerate(sorted(by_index.items()), 1):
            cell = nb.cells[index]
            cell.execution_count = count
            cell.outputs = _outputs(outcome)
            where = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index}"
            if outcome.get("dropped"):
                notes.append(f"{where}: the output was cut after {self.sandbox.limits.output_chars} characters "
                             f"({outcome['dropped']} more were not kept)")
            text = f"{outcome.get('ename')}: {outcome.get('evalue')}"
            if (outcome.get("ename") == "MemoryError" or "can't allocate memory" in text
                    or outcome.get("memory_full") is True):
                notes.append(f"{where}: ran out of memory (the limit is "
                             f"{self.sandbox.limits.memory_bytes / 1024 ** 3:g} GiB per process)")
            if outcome.get("ename") in ("BlockingIOError", "OSError") and "Resource temporarily unavailable" in text:
                notes.append(f"{where}: reached the process limit ({self.sandbox.limits.processes} processes)")
            elif outcome.get("ename") == "KernelError" and "could not start" in text:
                notes.append(f"{where}: could not start: the memory limit or the process limit "
                             f"({self.sandbox.limits.processes} processes) was used up by what earlier cells left")
            if outcome.get("blocked"):
                notes.append(f"{where}: refused {', '.join(sorted(set(outcome['blocked'])))}: "
                             "not allowed while grading")
            if outcome.get("changed") and kinds[index] != "test":
                notes.append(f"{where}: your code replaced {', '.join(outcome['changed'][:5])}; "
                             "the original was put back before the tests ran")
            if outcome.get("rebound"):
                notes.append(f"{where}: your code rebound {', '.join(outcome['rebound'])}, which the notebook "
                             "defines for its tests; the notebook's own was used")
        self._run["cells"] = by_index
        self._run["notes"] = notes
        self._run["kernel_peak_rss_kb"] = reply.get("kernel_peak_rss_kb", 0)
        return nb

    # -- reading the results --------------------------------------------------
    def _verdicts(self, student: str, run: dict, scores: dict[str, float | None]) -> list[Verdict]:
        """Scores from the gradebook (`scores`: each grade cell's, by name), statuses and messages from
        the sandbox's outcomes."""
        executed = nbformat.read(self.root / "autograded" / student / self.chapter.id / self.chapter.notebook.name, 4)
        index_of = {c.metadata.get("nbgrader", {}).get("grade_id"): i for i, c in enumerate(executed.cells)}
        outcomes = run.get("cells", {})
        verdicts = []
        defined = exercise_defining(self.source_nb)
        for ex in exercises(self.source_nb).values():
            if ex.manual:
                verdicts.append(Verdict(ex.id, MANUAL, "graded by your instructor", 0.0, ex.points))
                continue
            test_ids = [self.source_nb.cells[i].metadata.nbgrader.grade_id for i in ex.test_cells]
            points = sum(float(scores.get(t) or 0.0) for t in test_ids)
            tests = [outcomes.get(index_of.get(t), {"status": NOT_RUN, "ename": "NotRun",
                                                     "evalue": "the test cell did not run"}) for t in test_ids]
            answer = outcomes.get(index_of.get(ex.id), {})
            status, message = _status(ex.id, tests, answer, defined, outcomes, index_of)
            if status == PASSED and points < ex.points:
                stderr = next((t.get("stderr") for t in tests if t.get("stderr")), "")
                status, message = ERROR, ("the tests passed but wrote to stderr, which nbgrader counts as a "
                                          f"failure: {stderr.strip().splitlines()[-1] if stderr.strip() else ''}")
            verdicts.append(Verdict(ex.id, status, _cut(message), points if status == PASSED else 0.0,
                                    ex.points))
        return verdicts

    def _gradebook_rows(self, student: str) -> tuple[list[dict], str | None, dict[str, float | None]]:
        """What nbgrader recorded for this submission, read in one session: the rows the class's
        gradebook gets, the timestamp, and each grade cell's score by name."""
        from nbgrader.api import Gradebook
        rows, scores = [], {}
        with Gradebook(self.api.coursedir.db_url) as gb:
            submission = gb.find_submission(self.chapter.id, student)
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    rows.append({"notebook": notebook.name, "name": grade.name, "auto_score": grade.auto_score,
                                 "needs_manual_grade": grade.needs_manual_grade})
                    scores[grade.name] = grade.score
                for comment in notebook.comments:
                    rows.append({"notebook": notebook.name, "comment": comment.name,
                                 "auto_comment": comment.auto_comment})
            timestamp = submission.timestamp.isoformat() if submission.timestamp else None
        return rows, timestamp, scores


def _status(exercise: str, tests: list[dict], answer: dict, defined: dict | None = None,
            outcomes: dict | None = None, index_of: dict | None = None) -> tuple[str, str]:
    if answer.get("ename") == "NotImplementedError":
        return NOT_ATTEMPTED, "not attempted yet: the exercise still raises NotImplementedError."
    for t in tests:
        if t.get("status") == "ok":
            continue
        ename, evalue = t.get("ename") or "Error", (t.get("evalue") or "").strip()
        if ename in NOT_RUN_ERRORS or t.get("status") == NOT_RUN and ename != "NotRun":
            return NOT_RUN, (f"not run here: {evalue or 'this check needs a GPU'}. A check that cannot run "
                             "earns no points; it runs where a GPU is present.")
        if ename == "NotRun":
            return NOT_RUN, evalue or "the tests did not run"
        if ename == "NotImplementedError":
            return NOT_ATTEMPTED, "not attempted yet: the exercise still raises NotImplementedError."
        if ename in _GRADER_ERRORS:
            return ERROR, evalue
        if ename == "AssertionError":
            return FAILED, evalue or ("a test failed without a message. Compare your result with torch's on "
                                      "the inputs of the visible tests above.")
        if ename == "NameError" and (missing := earlier_exercise_missing(exercise, evalue, defined)):
            return ERROR, needs_earlier_exercise(exercise, evalue, defined, _how_it_ended(missing, outcomes, index_of))
        if answer.get("status") == "error" and ename == "NameError":
            return ERROR, (f"your answer cell raised {answer.get('ename')}: {answer.get('evalue')}; "
                           f"so the tests could not use it ({evalue})")
        return ERROR, f"your code raised {ename}: {evalue}" if evalue else f"your code raised {ename}"
    return PASSED, ""


def _how_it_ended(missing: tuple[int, str, str], outcomes: dict | None, index_of: dict | None) -> str:
    """", because that cell raised X: ..." when the answer cell of the exercise a NameError points to
    (`missing`: course.verdicts.earlier_exercise_missing) ended with an error."""
    answer = (outcomes or {}).get((index_of or {}).get(missing[1]))
    if not answer or answer.get("status") == "ok" or not answer.get("ename"):
        return ""
    return f", because that cell raised {answer['ename']}: {_cut(answer.get('evalue') or '', 200)}"


def _outputs(outcome: dict) -> list:
    out = []
    for name in ("stdout", "stderr"):
        if outcome.get(name):
            out.append(nbformat.v4.new_output("stream", name=name, text=outcome[name]))
    if outcome.get("status") == "ok":
        if outcome.get("result") is not None:
            out.append(nbformat.v4.new_output("execute_result", data={"text/plain": outcome["result"]},
                                              execution_count=None))
    else:
        out.append(nbformat.v4.new_output("error", ename=outcome.get("ename") or "Error",
                                          evalue=outcome.get("evalue") or "", traceback=[]))
    return out


def _preprocessors() -> list:
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import AssignLatePenalties, IgnorePattern, LimitOutput, SaveAutoGrades
    # nbgrader's list with the sandbox for Execute, and without its last CheckCellMetadata: the
    # sanitize step before has validated the same metadata, which nothing since can change (the
    # sandbox sends back outputs only), and each validation costs ~0.1 s of jsonschema per notebook.
    return [SandboxExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput, SaveAutoGrades,
            AssignLatePenalties]


_GENERATED = ("source", "release", "gradebook.db")  # what generate_assignment leaves that grading reads
GENERATED_KEPT_S = 7 * 24 * 3600  # machine_generated: how long a chapter's older version stays


def machine_generated(chapter: Chapter, version: dict | None = None) -> Path | None:
    """The folder of this machine's cache ($COURSE_GRADER_GENERATED, else ~/.cache/picotorch-grader/generated; 0700:
    it holds the hidden tests) for the chapter at its current version (grade/version.py's course_version, computed
    here unless given: the chapter's files, the earlier chapters' text forms, the grader's code) and nbgrader's;
    None where no such folder can be made (no home, a read-only one)."""
    import hashlib
    from importlib.metadata import version as installed
    from autograder.grade.version import course_version
    try:
        base = grader_cache_dir("generated", "COURSE_GRADER_GENERATED")
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        version = version or course_version(chapter.source_dir.parent.parent, chapter.id)
        stamp = json.dumps([version, installed("nbgrader")])
    except (OSError, RuntimeError):
        return None
    here = base / f"{chapter.id}-{hashlib.sha256(stamp.encode()).hexdigest()[:24]}"
    for old in base.glob(f"{chapter.id}-*"):  # the chapter's other versions, once unused for a week
        try:
            if old != here and time.time() - old.stat().st_mtime > GENERATED_KEPT_S:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass
    return here


def copy_generated(generated: Path | None, workdir: Path) -> bool:
    """Copy a course folder kept by `keep_generated` into `workdir`; False when there is none (or it went while
    being copied: the caller generates its own)."""
    if generated is None or not (generated / "complete").is_file():
        return False
    try:
        os.utime(generated)  # in use: machine_generated prunes only versions unused for a week
        for name in _GENERATED:
            if (generated / name).is_dir():
                shutil.copytree(generated / name, workdir / name, dirs_exist_ok=True)
            else:
                shutil.copyfile(generated / name, workdir / name)
    except OSError:
        for name in _GENERATED:
            if (workdir / name).is_dir():
                shutil.rmtree(workdir / name, ignore_errors=True)
            else:
                (workdir / name).unlink(missing_ok=True)
        return False
    return True


def keep_generated(workdir: Path, generated: Path | None) -> None:
    """Keep what generate_assignment made in `workdir` at `generated`, whole or not at all: it is
    copied beside it and renamed into place, and a grader that got there first keeps its own."""
    if generated is None or generated.exists():
        return
    scratch = generated.with_name(f"{generated.name}.{os.getpid()}.tmp")
    try:
        scratch.mkdir(parents=True)
        for name in _GENERATED:
            if (workdir / name).is_dir():
                shutil.copytree(workdir / name, scratch / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copyfile(workdir / name, scratch / name)
        (scratch / "complete").write_text("")
        os.rename(scratch, generated)
    except OSError:  # another grader kept its copy first, or the folder cannot be written: no harm done
        pass
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def prepare_course(chapter: Chapter, root: Path) -> None:
    """The chapter's source folder in a throwaway nbgrader course folder at `root`."""
    # here, not at the top: they import jupytext (0.2 s), and the client of a cluster, which only reads
    # Results, never prepares a course
    from autograder.build.reference import package_files
    from autograder.build.release import declared_files
    source = root / "source" / chapter.id
    source.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(chapter.notebook, source / chapter.notebook.name)
    nb = read_notebook(chapter.notebook)
    for name in declared_files(chapter, nb):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(chapter.source_dir / name, source / name)
    earlier = [c for c in discover(chapter.source_dir.parent) if c.number < chapter.number]
    for rel, text in package_files(earlier).items():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text(text)


def _last_line(outcome: dict) -> str:
    text = (outcome.get("error") or outcome.get("log") or "").strip().splitlines()
    return text[-1] if text else "no reason given"
