"""`autograder grade --scheduler` on a real Dask cluster (issue 19): a `dask scheduler`
and two `dask worker` processes on loopback ports (tests/support/dask_cluster.py), grading
a class of twelve on chapters 00 and 01, against the local pool on chapter 00's class.

What must hold: the same verdicts and notes as the local run, one gradebook entry
and one feedback page per student; a worker killed in the middle of a submission
costs nothing and doubles nothing; a client stopped by Ctrl-C leaves no
half-written file and `--resume` grades only what is missing; workers without
bubblewrap or with another version of the course refuse, saying why, and nothing
is graded. Every process these tests start is stopped (process groups, killed in
finalizers)."""
from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from conftest import CHAPTERS as ALL_CHAPTERS
from dask_cluster import DaskCluster
from notebook_runs import mutants_of

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("grading_dask")]
REPO = Path(__file__).resolve().parents[2]
AUTOGRADER = [sys.executable, "-m", "autograder.cli"]
CHAPTERS = ("00_tour", "01_tensor")
ORACLE_CHAPTER = "00_tour"
SLOW_S = 15  # a submission slow enough to be caught in the middle

if not shutil.which("bwrap") or not all((REPO / "source" / c / f"{c}.ipynb").exists() for c in CHAPTERS):
    pytest.skip("needs bubblewrap and the built chapters 00 and 01", allow_module_level=True)

# Twelve students; per chapter, what each handed in. The heavy kinds (a notebook that runs) come
# first in both chapters: each kind once in chapter 00 (graded twice, locally and on the cluster);
# chapter 01, the slower one, runs three and gets the kinds that never reach the sandbox (not JSON,
# no notebook, another chapter's notebook) for the rest.
KINDS = {
    "00_tour": ["right", "wrong", "blank", "cheat", "death", "wrong2", "not json", "no notebook",
                "other chapter", "not a notebook", "not json", "no notebook"],
    "01_tensor": ["right", "wrong", "death", "not json", "no notebook", "other chapter",
                  "not json", "no notebook", "not a notebook", "other chapter", "not json", "no notebook"],
}
STUDENTS = [f"s{n:02d}" for n in range(12)]
CHEAT = ("\nimport torch.testing, course.compare\ntorch.testing.assert_close = lambda *a, **k: None\n"
         "course.compare.assert_matches = lambda *a, **k: None\ncourse.compare.assert_equal = lambda *a, **k: None\n")


def _mutants(chapter: str) -> list[tuple[str, str]]:
    found = next(c for c in ALL_CHAPTERS if c.id == chapter)
    return [(ex, m.code) for ex, cases in mutants_of(found).items() for m in cases.values()]


def notebook(chapter: str, kind: str):
    """The notebook (or raw text, or None for an empty folder) a student of this kind hands in."""
    if kind == "not json":
        return "{ this is not a notebook"
    if kind == "not a notebook":
        return '{"cells": "none"}'
    if kind == "no notebook":
        return None
    if kind == "other chapter":
        other = next(c for c in CHAPTERS if c != chapter)
        return nbformat.read(REPO / "release" / other / f"{other}.ipynb", 4)
    source = nbformat.read(REPO / "source" / chapter / f"{chapter}.ipynb", 4)
    nb = nbformat.read(REPO / "release" / chapter / f"{chapter}.ipynb", 4)
    if kind == "blank":
        return nb
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
               if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")}
    mutants = _mutants(chapter)
    first = list(answers)[0]
    change = {}
    if kind in ("wrong", "cheat"):
        change[mutants[0][0]] = mutants[0][1].strip("\n") + (CHEAT if kind == "cheat" else "")
    elif kind == "wrong2":
        change[mutants[-1][0]] = mutants[-1][1].strip("\n")
    elif kind == "death":
        change[list(answers)[1]] = answers[list(answers)[1]] + "\nimport os\nos._exit(3)\n"
    elif kind == "slow":
        change[first] = answers[first] + f"\nimport time\ntime.sleep({SLOW_S})\n"
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = change.get(gid, answers[gid])
    return nb


def write_class(folder: Path, chapter: str, kinds: dict[str, str]) -> Path:
    for student, kind in kinds.items():
        (folder / student).mkdir(parents=True, exist_ok=True)
        nb = notebook(chapter, kind)
        target = folder / student / f"{chapter}.ipynb"
        if isinstance(nb, str):
            target.write_text(nb)
        elif nb is not None:
            nbformat.write(nb, target)
    return folder


def grade(chapter: str, submissions: Path, out: Path, *extra, expect: int = 0, timeout: float = 900,
          cluster: DaskCluster | None = None):
    """One `autograder grade` run. On `cluster`, once more on fresh workers if the grader's code
    changed on disk under the warm ones (a working tree others edit): they rightly refuse then."""
    for attempt in (1, 2):
        done = subprocess.run(AUTOGRADER + ["grade", chapter, str(submissions), "--out", str(out), *extra],
                              capture_output=True, text=True, timeout=timeout)
        if cluster is None or attempt == 2 or "restart the worker" not in done.stderr:
            break
        cluster.restart_workers()
    assert done.returncode == expect, done.stdout[-4000:] + done.stderr[-4000:]
    return done


def verdicts(out: Path) -> dict[str, dict]:
    """{student: {exercises: [(id, status, points)], notes, score}}: what must agree (not the messages,
    which name each run's random seed)."""
    found = {}
    for path in sorted((out / "results").glob("*.json")):
        r = json.loads(path.read_text())
        found[r["student"]] = {"exercises": [(e["exercise"], e["status"], e["points"]) for e in r["exercises"]],
                               "notes": r["notes"], "score": r["score"]}
    return found


def grades_rows(out: Path) -> list[dict]:
    with open(out / "grades.csv", newline="") as f:
        return list(csv.DictReader(f))


def gradebook_submissions(out: Path, chapter: str) -> dict[str, int]:
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        return {s.id: sum(1 for sub in s.submissions if sub.assignment.name == chapter) for s in gb.students}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = DaskCluster(tmp_path_factory.mktemp("dask"))
    try:
        c.start_worker()
        c.start_worker()
        c.wait_for_workers(2)
        yield c
    finally:
        pids = c.pids()
        c.stop()
        alive = [p for p in pids if _alive(p)]
        assert not alive, f"processes left running: {alive}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def graded(cluster, tmp_path_factory):
    """Both chapters graded on the cluster, chapter 00 locally too: {chapter: (local out or None, dask out, dask
    stdout)}. The local pool is the oracle for chapter 00, whose class holds every kind that runs; chapter 01's
    verdicts are checked against what each kind must get (a local run of it would add minutes and no kind)."""
    tmp = tmp_path_factory.mktemp("class")
    runs = {}
    for chapter in reversed(CHAPTERS):  # chapter 00 last: its graders stay warm for the tests below
        folder = write_class(tmp / chapter, chapter, dict(zip(STUDENTS, KINDS[chapter])))
        local = None
        if chapter == ORACLE_CHAPTER:
            local = tmp / f"{chapter}-local"
            grade(chapter, folder, local, "--workers", "1")  # the oracle: one grader is enough
        dask = grade(chapter, folder, tmp / f"{chapter}-dask", "--scheduler", cluster.address, cluster=cluster)
        runs[chapter] = (local, tmp / f"{chapter}-dask", dask.stdout)
    return runs


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_cluster_gives_the_local_verdicts(graded, chapter):
    local, dask, stdout = graded[chapter]
    ours = verdicts(dask)
    assert set(ours) == set(STUDENTS)
    if local is not None:
        assert ours == verdicts(local)
    kinds = dict(zip(STUDENTS, KINDS[chapter]))
    full = {s: v for s, v in ours.items() if kinds[s] == "right"}
    assert full and all(all(status in ("passed", "manually graded") for _, status, _ in v["exercises"])
                        for v in full.values())
    for s, v in ours.items():
        statuses = [status for _, status, _ in v["exercises"]]
        if kinds[s] in ("blank",):
            assert v["score"] == 0 and "not attempted" in statuses
        if kinds[s] in ("wrong", "wrong2", "cheat"):
            assert 0 < v["score"] < max(r["score"] for r in full.values()) and "failed" in statuses, (s, v)
        if kinds[s] == "death":
            assert "error" in statuses and any("kernel" in n for n in v["notes"]), v
        if kinds[s] in ("not json", "no notebook", "not a notebook", "other chapter"):
            assert v["score"] == 0 and v["notes"]
    assert f"on the Dask cluster at tcp://127.0.0.1:" in stdout and "[12/12]" in stdout
    assert "2 workers" in stdout  # the summary counts the workers that graded


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_one_gradebook_entry_and_one_feedback_page_per_student(graded, chapter):
    local, dask, _ = graded[chapter]
    assert sorted(r["student"] for r in grades_rows(dask)) == STUDENTS
    if local is not None:
        assert grades_rows(dask) == grades_rows(local)
    assert gradebook_submissions(dask, chapter) == {s: 1 for s in STUDENTS}
    for s in STUDENTS:
        page = (dask / "feedback" / s / f"{chapter}.html").read_text()
        assert "BEGIN HIDDEN TESTS" not in page and "Traceback" not in page
    not_json = next(s for s, k in zip(STUDENTS, KINDS[chapter]) if k == "not json")
    note = verdicts(dask)[not_json]["notes"][0]
    assert f"{not_json}/{chapter}.ipynb is not valid JSON" in note and "course-worker" not in note
    assert not list(dask.rglob("*.tmp"))


def _executing(client) -> dict[str, list[str]]:
    return client.run(lambda dask_worker: [ts.key for ts in dask_worker.state.executing])


def _at_a_terminal() -> None:
    # Ctrl-C as at a terminal: a suite started in the background (`make test &`, nohup, some CI runners)
    # passes SIGINT on ignored, and Python then never turns it into KeyboardInterrupt
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(chapter: str, submissions: Path, out: Path, *extra) -> subprocess.Popen:
    return subprocess.Popen(AUTOGRADER + ["grade", chapter, str(submissions), "--out", str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_at_a_terminal)


def _finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _workers_with_the_code_on_disk(cluster: DaskCluster) -> None:
    """Workers that grade with the grader's code as it is on disk now, since the run that follows cannot be
    retried (a worker is killed, the client stopped): a worker whose grader was built from code that has changed
    on disk since (a working tree others edit) would refuse it. Such workers are restarted (fresh processes
    import the code on disk); workers that already run it keep their warm graders."""
    from autograder.grade.version import course_version
    on_disk = course_version(REPO, "00_tour")["grader"]
    with cluster.client() as client:  # a lambda: sent by value (the workers cannot import this module)
        loaded = client.run(lambda dask_worker: getattr(sys.modules.get("autograder.grade.distributed"),
                                                        "_LOADED", {}).get("grader"))
    if any(h not in (None, on_disk) for h in loaded.values()):
        cluster.restart_workers()


def _every_grader_warm(cluster: DaskCluster, chapter_id: str) -> None:
    """Both workers hold a warm grader of the chapter before the run starts: a run whose workers warm up as it
    goes may hand every submission to the first one ready (the forging test needs the forger to get some)."""
    from autograder.grade import distributed
    from autograder.grade.version import course_version
    from autograder.sandbox.bubblewrap import Limits
    plugin = distributed.GraderPlugin(chapter_id, course_version(REPO, chapter_id), Limits())
    states: dict = {}
    with cluster.client() as client:
        distributed.ensure_graders(client, plugin)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            replies = client.run(distributed.worker_status, on_error="return")
            states = {w: (s.get("key"), s.get("state")) for w, s in replies.items() if isinstance(s, dict)}
            if len(states) == 2 and all(v == (plugin.key, "ready") for v in states.values()):
                return
            time.sleep(0.5)
    raise AssertionError(f"the workers' graders of {chapter_id} did not warm up in 300 s: {states}")


def test_a_worker_killed_in_the_middle_of_a_submission_loses_and_doubles_nothing(cluster, graded, tmp_path):
    _workers_with_the_code_on_disk(cluster)
    kinds = {"k00": "slow", "k01": "wrong", "k02": "blank", "k03": "right"}
    folder = write_class(tmp_path / "class", "00_tour", kinds)
    out = tmp_path / "out"
    proc = _start("00_tour", folder, out, "--scheduler", cluster.address)
    killed = None
    try:
        with cluster.client() as client:
            deadline = time.monotonic() + 300
            while killed is None and time.monotonic() < deadline and proc.poll() is None:
                for worker, keys in _executing(client).items():
                    if any(k.startswith("grade-00_tour-k00-") for k in keys):
                        time.sleep(2)  # well inside its 15 s of sleep
                        from autograder.grade.distributed import worker_status
                        killed = client.run(worker_status, workers=[worker])[worker]["pid"]
                        os.kill(killed, signal.SIGKILL)
                        break
                time.sleep(0.5)
        stdout, stderr = _finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert killed, "the slow submission was never seen running"
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert sum(line.startswith("[") and "] k00:" in line for line in stdout.splitlines()) == 1
    assert sorted(r["student"] for r in grades_rows(out)) == sorted(kinds)
    assert gradebook_submissions(out, "00_tour") == {s: 1 for s in kinds}
    ours = verdicts(out)
    local = verdicts(graded["00_tour"][0])
    by_kind = {KINDS["00_tour"][i]: local[s] for i, s in enumerate(STUDENTS)}
    assert ours["k00"]["exercises"] == by_kind["right"]["exercises"]  # graded again, in full
    for s, kind in kinds.items():
        if kind != "slow":
            assert ours[s] == by_kind[kind]
    cluster.wait_for_workers(2)  # the nanny started a fresh worker in its place


def test_an_interrupted_client_leaves_no_half_written_file_and_resume_grades_the_rest(cluster, graded, tmp_path):
    _workers_with_the_code_on_disk(cluster)
    kinds = {"r00": "right", "r01": "blank", "r02": "slow", "r03": "wrong", "r04": "blank"}
    folder = write_class(tmp_path / "class", "00_tour", kinds)
    out = tmp_path / "out"
    proc = _start("00_tour", folder, out, "--scheduler", cluster.address)
    try:
        seen = []
        while proc.poll() is None:
            line = proc.stdout.readline()
            seen.append(line)
            if line.startswith("[2/5]"):
                proc.send_signal(signal.SIGINT)  # Ctrl-C
                break
        stdout, stderr = _finish(proc, timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, "".join(seen) + stdout + stderr
    assert "--resume" in stderr
    assert not (out / "grades.csv").exists() and not (out / "results").exists()
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    recorded = sorted(p.stem for p in (out / ".resume" / "00_tour").glob("*.json"))
    assert 2 <= len(recorded) < 5

    again = grade("00_tour", folder, out, "--scheduler", cluster.address, "--resume", cluster=cluster)
    assert f"resuming: {len(recorded)} graded before, {5 - len(recorded)} to grade" in again.stdout
    graded_now = [line.split("]")[1].split(":")[0].strip() for line in again.stdout.splitlines()
                  if line.startswith("[")]
    assert sorted(graded_now) == sorted(set(kinds) - set(recorded))
    assert sorted(r["student"] for r in grades_rows(out)) == sorted(kinds)
    assert gradebook_submissions(out, "00_tour") == {s: 1 for s in kinds}
    local = verdicts(graded["00_tour"][0])
    by_kind = {KINDS["00_tour"][i]: local[s] for i, s in enumerate(STUDENTS)}
    ours = verdicts(out)
    for s, kind in kinds.items():
        assert ours[s]["exercises"] == by_kind["right" if kind == "slow" else kind]["exercises"]


def test_a_worker_that_forges_results_is_refused_and_its_submissions_graded_again(cluster, graded, tmp_path):
    """Issue 42, item 6: one worker of the module's cluster is made to inflate every result it returns (ten
    times each exercise's points). The client refuses each such result, trusts that worker no more in the run,
    and has the other grade the submission again: every student gets the local run's verdicts, once."""
    from autograder.grade.distributed import PLUGIN
    _workers_with_the_code_on_disk(cluster)
    _every_grader_warm(cluster, "00_tour")

    def forge(dask_worker):  # nested: sent to the worker by value
        plugin = dask_worker.plugins[PLUGIN]
        honest = type(plugin).grade

        def grade(payload):
            result, where, rss = honest(plugin, payload)
            for v in result.verdicts:
                v.points = 10 * v.max_points
            return result, where, rss
        plugin.grade = grade

    def unforge(dask_worker):
        dask_worker.plugins[PLUGIN].__dict__.pop("grade", None)

    kinds = {f"f{n}": "no notebook" for n in range(4)}  # the quickest to grade: a result all the same
    folder = write_class(tmp_path / "class", "00_tour", kinds)
    with cluster.client() as client:
        forger = sorted(client.scheduler_info()["workers"])[0]
        client.run(forge, workers=[forger])
        try:
            done = subprocess.run(AUTOGRADER + ["grade", "00_tour", str(folder), "--out", str(tmp_path / "out"),
                                                "--scheduler", cluster.address], capture_output=True, text=True,
                                  timeout=600)
        finally:
            client.run(unforge, workers=[forger])
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-4000:]
    assert f"the worker at {forger} returned a result for f" in said and "cannot be 00_tour's" in said, said[-3000:]
    assert "refused; that worker is not trusted again in this run" in said
    honest = verdicts(graded["00_tour"][0])[STUDENTS[KINDS["00_tour"].index("no notebook")]]
    ours = verdicts(tmp_path / "out")
    assert set(ours) == set(kinds) and all(v["exercises"] == honest["exercises"] for v in ours.values()), ours
    assert gradebook_submissions(tmp_path / "out", "00_tour") == {s: 1 for s in kinds}


def test_the_client_refuses_results_no_honest_grader_gives():
    """The check behind the test above, on every kind of forgery: exact types (a subclass answers == as it
    likes), the chapter's exercises and points from the client's own source notebook, points only for a pass,
    gradebook rows within their cells' points, the task's own student."""
    from autograder.grade.distributed import ForgedResult, check_result
    from autograder.grade.grader import Result, zero_grades, zero_verdicts
    from course.notebook import read_notebook
    from course.verdicts import Status

    source_nb = read_notebook(REPO / "source" / "00_tour" / "00_tour.ipynb")

    def honest(passed=True):
        verdicts = zero_verdicts(source_nb, "not graded")
        for v in verdicts:
            if passed and v.status != Status.MANUAL:
                v.status, v.points = Status.PASSED, v.max_points
        return Result("ana", "00_tour", verdicts, grades=zero_grades(source_nb, verdicts))

    class Sly(float):
        def __le__(self, other):
            return True

    def forged(change):
        result = honest()
        change(result)
        return result

    check_result((honest(), "host:1", 1), "ana", "00_tour", source_nb)
    check_result((honest(False), "host:1", 1), "ana", "00_tour", source_nb)
    forgeries = {
        "points above the exercise's": lambda r: setattr(r.verdicts[0], "points", 3 * r.verdicts[0].max_points),
        "more points claimed possible": lambda r: [setattr(v, "max_points", 99.0) for v in r.verdicts],
        "points without a pass": lambda r: setattr(r.verdicts[0], "status", Status.FAILED),
        "negative points": lambda r: setattr(r.verdicts[0], "points", -1.0),
        "an exercise left out": lambda r: r.verdicts.pop(),
        "an exercise made up": lambda r: setattr(r.verdicts[0], "exercise", "ex_free_points"),
        "a float subclass": lambda r: setattr(r.verdicts[0], "points", Sly(100.0)),
        "a bool for points": lambda r: setattr(r.verdicts[0], "points", True),
        "not a number": lambda r: setattr(r.verdicts[0], "points", float("nan")),
        "a status that is a plain str": lambda r: setattr(r.verdicts[0], "status", "passed"),
        "a gradebook row above its cell": lambda r: r.grades.append({"notebook": None, "name": r.grades[0]["name"],
                                                                     "auto_score": 1000.0}),
        "a gradebook row of no cell": lambda r: r.grades.append({"notebook": None, "name": "free", "auto_score": 0}),
        "another student's result": lambda r: setattr(r, "student", "bo"),
        "another chapter's result": lambda r: setattr(r, "chapter", "01_tensor"),
    }
    for what, change in forgeries.items():
        with pytest.raises(ForgedResult):
            check_result((forged(change), "host:1", 1), "ana", "00_tour", source_nb)
            pytest.fail(f"{what} was accepted")
    for answer in ([honest(), "host:1", 1], (honest(),), ({"student": "ana"}, "host:1", 1), (honest(), 1, 1)):
        with pytest.raises(ForgedResult):
            check_result(answer, "ana", "00_tour", source_nb)


def test_workers_without_bubblewrap_or_with_another_course_version_refuse(tmp_path):
    other = tmp_path / "other-checkout"
    for part in ("source", "release"):
        shutil.copytree(REPO / part / "00_tour", other / part / "00_tour")
    text = other / "source" / "00_tour" / "00_tour.py"
    text.write_text(text.read_text() + "\n# an edit the client does not have\n")
    folder = write_class(tmp_path / "class", "00_tour", {"a": "blank"})
    bare_path = f"{Path(sys.executable).parent}:{tmp_path / 'no-bwrap-here'}"
    with DaskCluster(tmp_path / "dask") as refusing:
        refusing.start_worker("no-bwrap", env={"PATH": bare_path})
        refusing.start_worker("old-course", env={"AUTOGRADER_REPO": str(other)})
        refusing.wait_for_workers(2)
        done = grade("00_tour", folder, tmp_path / "out", "--scheduler", refusing.address, expect=2, timeout=300)
        pids = refusing.pids()
    assert "bubblewrap is not installed" in done.stderr
    assert "a different course version: chapter 00_tour's files" in done.stderr
    assert "no worker of the cluster" in done.stderr
    assert not (tmp_path / "out" / "grades.csv").exists() and not (tmp_path / "out" / "results").exists()
    assert not [p for p in pids if _alive(p)]


def test_an_unreachable_scheduler_exits_2_with_a_message(tmp_path):
    from dask_cluster import free_port
    folder = write_class(tmp_path / "class", "00_tour", {"a": "not json"})
    done = grade("00_tour", folder, tmp_path / "out", "--scheduler", f"tcp://127.0.0.1:{free_port()}", expect=2,
                 timeout=120)
    assert "cannot reach the Dask scheduler" in done.stderr and "dask scheduler" in done.stderr


def test_a_result_read_back_for_resume_carries_the_same_statuses_as_a_fresh_one():
    from autograder.grade.journal import _result_from_json, _result_to_json
    from autograder.grade.grader import Result
    from course.verdicts import Status, Verdict
    fresh = Result("ana", "00_tour", [Verdict("ex_double", Status.PASSED, "", 2.0, 2.0),
                                      Verdict("ex_count", Status.FAILED, "off by one", 0.0, 3.0)])
    back = _result_from_json(json.loads(json.dumps(_result_to_json(fresh))))
    assert back == fresh
    assert [type(v.status) for v in back.verdicts] == [Status, Status]
    assert back.verdicts[0].ok and not back.verdicts[1].ok
