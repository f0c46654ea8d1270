"""Grading a class on a Dask cluster.

    dask scheduler --port 8786                                 on one machine
    dask worker tcp://HOST:8786 --nthreads 1                   on each grading machine (or core pair)
    autograder grade CHAPTER SUBMISSIONS --out DIR --scheduler tcp://HOST:8786

The client (the `autograder grade` process) reads the submissions, sends each
notebook as one task, and alone writes the gradebook, grades.csv, results/ and
feedback/, exactly as the local run does (autograder/grade/pipeline.py). Each Dask
worker holds one warm grader, set up by `GraderPlugin`: the worker's own
checkout of the course, a throwaway nbgrader course folder and the bubblewrap
sandbox with torch imported and the reference notebook run once: exactly the
local grader (autograder/grade/grader.py), with the limits the client asked for.

Before it grades, a worker checks that it can do so as the client would:
bubblewrap must be there (nothing is ever graded outside the sandbox), and the
chapter's files (source/ and release/, and the earlier chapters the reference
package is made of) and the grader's own code must hash to what the client
computed from its checkout. A worker that fails a check refuses, and says why;
the client prints that and grades on the others, or stops (exit 2) when no
worker can grade. A worker that passes advertises a Dask resource named after
the chapter, its version and the limits; every task needs one unit of it, so a
task only ever runs on a worker whose grader is warm and matches, one at a time.

A worker that dies in the middle of a submission (killed, out of memory, its
machine gone) loses nothing: the scheduler gives the task to another worker, and
the client records each student once, whichever worker finished.

Every result is also written, as it arrives, to OUT/.resume/CHAPTER/STUDENT.json
(grade/journal.py, shared with the local pool), keyed by the notebook's content,
the course version and the limits. A run stopped by Ctrl-C leaves those and no
half-written file; `--resume` takes the recorded results whose key still
matches and grades only the rest (new students, changed notebooks).
"""
from __future__ import annotations

import asyncio
import json
import os
import resource
import secrets
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

from distributed import WorkerPlugin

from autograder.chapters import REPO, Chapter
from autograder.grade.version import course_version, grader_key

PLUGIN = "autograder-grader"
STATUS_EVERY_S = 3.0
NO_WORKER_TIMEOUT_S = 120.0


# The grader's code as this process first imported it for grading: a warm worker whose files change
# under it would otherwise grade with old code while its files hash as new.
_LOADED: dict[str, str] = {}


class ClusterError(RuntimeError):
    """The cluster cannot grade this class; the message says why (the CLI exits 2)."""


class GraderUnavailable(RuntimeError):
    """A task reached a worker whose grader is not the one it was sent for."""


# -- the worker side --------------------------------------------------------------------------------

class GraderPlugin(WorkerPlugin):
    """A Dask worker plugin holding one warm Grader for one chapter, version and set of limits.

    `setup` returns at once; the grader warms up in a thread (nbgrader, the sandbox, the
    reference run: 10-20 s) while the worker stays responsive, and only then does the worker
    advertise the resource the tasks need. A worker that cannot grade as the client would
    (no bubblewrap, another course version, a sandbox that does not start) never builds a
    grader and never advertises it; `status()` says why."""

    name = PLUGIN

    def __init__(self, chapter_id: str, version: dict, limits):
        self.chapter_id = chapter_id
        self.version = version
        self.limits = limits
        self.key = grader_key(chapter_id, version, limits)

    @property
    def resource(self) -> str:
        """The Dask resource this grader advertises once warm, named after chapter, version and limits."""
        return f"grader-{self.chapter_id}-{self.key}"

    def __getstate__(self):
        return {"chapter_id": self.chapter_id, "version": self.version, "limits": self.limits, "key": self.key}

    def __setstate__(self, state):
        self.__dict__.update(state)

    async def setup(self, worker) -> None:
        """Start warming the grader in the background; return at once."""
        self.state, self.reason, self.grader, self.closed = "warming", "", None, False
        self.lock = threading.Lock()
        self.workdir = Path(worker.local_directory) / f"grader-{self.key}"
        self._warming = asyncio.ensure_future(self._warm(worker))

    async def _warm(self, worker) -> None:
        loop = asyncio.get_running_loop()
        try:
            reason = await loop.run_in_executor(None, self._build)
        except BaseException as e:  # noqa: BLE001  (whatever it was, this worker will not grade)
            reason = f"its grader did not start: {type(e).__name__}: {e}"
        if self.closed:
            self._close_grader()
            return
        if reason:
            self.state, self.reason = "refused", reason
            return
        await worker.set_resources(**{self.resource: 1})
        self.state = "ready"
        # The scheduler looks again at the tasks no worker could run when a worker starts running,
        # not when its resources change: say so, with a pause that lasts no time at all.
        from distributed.core import Status
        if worker.status == Status.running:
            worker.status = Status.paused
            worker.status = Status.running

    def _build(self) -> str:
        """'' once the grader is warm, else why this worker refuses."""
        from autograder.sandbox.bubblewrap import SandboxError, bwrap
        try:
            bwrap()
        except SandboxError as e:
            return str(e)
        repo = Path(os.environ.get("AUTOGRADER_REPO") or REPO).resolve()
        source = repo / "source" / self.chapter_id
        if not (source / f"{self.chapter_id}.ipynb").is_file():
            return (f"its course checkout ({repo}) has no built chapter {self.chapter_id}: check out the course "
                    f"there and run `autograder build`, or point AUTOGRADER_REPO at the checkout")
        mine = course_version(repo, self.chapter_id)
        differ = [what for what in ("chapter", "grader") if mine[what] != self.version[what]]
        if differ:
            words = {"chapter": f"chapter {self.chapter_id}'s files (source/, release/)",
                     "grader": "the grader's code (the course and autograder packages)"}
            return ("a different course version: " + " and ".join(words[w] for w in differ) +
                    " differ from the client's (" + ", ".join(f"{w} {mine[w][:12]} on this worker, "
                                                               f"{self.version[w][:12]} on the client"
                                                               for w in differ) +
                    "): update this worker's checkout to the client's commit")
        loaded = _LOADED.setdefault("grader", mine["grader"])  # the code this process is about to import
        if loaded != mine["grader"]:
            return ("this worker process imported the grader's code before it changed on disk "
                    f"(grader {loaded[:12]} loaded, {mine['grader'][:12]} on disk): restart the worker")
        from autograder.grade.grader import Grader
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir(parents=True)
        try:
            self.grader = Grader(Chapter(self.chapter_id, source), self.workdir / "course", limits=self.limits)
            if self.grader.sandbox.proc is None:  # start it now: a sandbox that cannot run refuses here
                self.grader.sandbox._start()
        except SandboxError as e:
            self._close_grader()
            return str(e)
        return ""

    def _close_grader(self) -> None:
        grader, self.grader = self.grader, None
        if grader is not None:
            grader.close()
            shutil.rmtree(grader.sandbox.staging, ignore_errors=True)
        shutil.rmtree(self.workdir, ignore_errors=True)

    async def teardown(self, worker) -> None:
        """Stop advertising the resource and close the grader and its sandbox."""
        self.closed = True
        if self.state == "ready":
            try:
                await worker.set_resources(**{self.resource: 0})
            except Exception:  # noqa: BLE001  (the scheduler may be gone already)
                pass
        self.state = "closed"
        if not self._warming.done():
            return  # _warm closes it when the thread ends
        with self.lock:
            self._close_grader()

    def status(self) -> dict:
        """The grader's key, chapter and state (warming, ready or closed, or why it refused), as plain data."""
        return {"key": self.key, "chapter": self.chapter_id, "state": self.state, "reason": self.reason}

    def _grade(self, payload: dict, path: Path | None):
        """Exactly what the local pool's worker process does with one submission
        (autograder/grade/workers.py): this worker process holds one grader, as that one does."""
        from types import SimpleNamespace

        from autograder.grade import workers
        workers._grader = self.grader
        submission = SimpleNamespace(student=payload["student"], notebook=path, timestamp=payload["timestamp"],
                                     problem=payload["problem"], notes=payload.get("notes"))
        return workers._grade(submission)[0]

    def grade(self, payload: dict):
        """Grade one submission sent as a task (its notebook's bytes, or none), one at a time; GraderUnavailable
        if this worker's grader is not warm."""
        with self.lock:
            if self.grader is None:
                raise GraderUnavailable(f"the grader of this worker is {self.state}")
            intake = self.workdir / "intake" / secrets.token_hex(8)
            intake.mkdir(parents=True)
            try:
                path = None
                if payload["data"] is not None:
                    path = intake / payload["name"]
                    path.write_bytes(payload["data"])
                result = self._grade(payload, path)
            finally:
                shutil.rmtree(intake, ignore_errors=True)
        if path is not None and payload["shown_as"]:  # messages name the file as the client knows it
            here, there = str(path), payload["shown_as"]
            result.notes = [n.replace(here, there) for n in result.notes]
            for v in result.verdicts:
                v.message = v.message.replace(here, there)
        return result, f"{socket.gethostname()}:{os.getpid()}", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _plugin(dask_worker):
    plugin = dask_worker.plugins.get(PLUGIN)
    return plugin if isinstance(plugin, GraderPlugin) and hasattr(plugin, "state") else None


def worker_status(dask_worker) -> dict:
    """Run on each worker by the client (Client.run): its grader's state, and its pid."""
    plugin = _plugin(dask_worker)
    status = plugin.status() if plugin else {"key": None, "state": "none", "reason": ""}
    return {**status, "pid": os.getpid()}


def grade_task(key: str, payload: dict):
    """One submission, on whichever worker the scheduler chose (it holds the resource)."""
    from distributed import get_worker
    plugin = _plugin(get_worker())
    if plugin is None or plugin.key != key:
        raise GraderUnavailable("this worker's grader was replaced by another run's (a different chapter, "
                                "version or limits) while the task waited")
    return plugin.grade(payload)


# -- the client side ----------------------------------------------------------------------------------

class ForgedResult(ValueError):
    """A worker's answer that no honest grader of this chapter can give; the message says why."""


def _exact(value, kinds, what: str):
    if type(value) not in kinds:  # exact types: a subclass could answer == or < as it likes
        raise ForgedResult(f"{what} is a {type(value).__name__}")
    return value


def _number(value, what: str) -> float:
    _exact(value, (int, float), what)
    if value != value or value in (float("inf"), float("-inf")):
        raise ForgedResult(f"{what} is {value}")
    return float(value)


def check_result(answer, student: str, chapter_id: str, source_nb) -> None:
    """Raise ForgedResult unless `answer` (what a worker's task returned) is a result an honest grader
    of `chapter_id` could give `student`: exact types, the chapter's exercises with their points from the
    client's own source notebook, no exercise or gradebook row above its points, points only for a
    pass. A worker is not trusted with the gradebook: this bounds what a forged result can write."""
    from autograder.grade.grader import Result
    from course.notebook import exercises
    from course.verdicts import Status, Verdict
    _exact(answer, (tuple,), "the answer")
    if len(answer) != 3:
        raise ForgedResult(f"the answer has {len(answer)} parts, not 3")
    result = _exact(answer[0], (Result,), "the result")
    _exact(answer[1], (str,), "the worker's name")
    _exact(answer[2], (int,), "the worker's peak memory")
    if _exact(result.student, (str,), "the student") != student or result.chapter != chapter_id:
        raise ForgedResult(f"it is {result.student!r}'s result of {result.chapter!r}, not {student!r}'s of "
                           f"{chapter_id!r}")
    expected = {ex.id: ex for ex in exercises(source_nb).values()}
    got = [_exact(v, (Verdict,), "a verdict") for v in _exact(result.verdicts, (list,), "the verdicts")]
    if [v.exercise for v in got] != list(expected):
        raise ForgedResult(f"its exercises {[v.exercise for v in got]} are not the chapter's {list(expected)}")
    for v in got:
        status = _exact(v.status, (Status,), f"{v.exercise}'s status")
        points, most = _number(v.points, f"{v.exercise}'s points"), _number(v.max_points, f"{v.exercise}'s most")
        _exact(v.message, (str,), f"{v.exercise}'s message")
        if most != expected[v.exercise].points or not 0 <= points <= most or (points and status != Status.PASSED):
            raise ForgedResult(f"{v.exercise} has {points:g} of {most:g} points ({status}); the chapter gives it "
                               f"{expected[v.exercise].points:g}, and points only for a pass")
    cells = {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"].get("points", 0))
             for c in source_nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    for row in _exact(result.grades, (list,), "the gradebook rows"):
        _exact(row, (dict,), "a gradebook row")
        if "comment" in row:
            continue
        name, score = row.get("name"), row.get("auto_score")
        if name not in cells or (score is not None and not 0 <= _number(score, f"{name}'s score") <= cells[name]):
            raise ForgedResult(f"its gradebook row {name!r} has {score!r} points; the chapter's cell "
                               f"{'gives ' + format(cells[name], 'g') if name in cells else 'does not exist'}")
    for note in _exact(result.notes, (list,), "the notes"):
        _exact(note, (str,), "a note")
    for text, what in ((result.timestamp, "the timestamp"), (result.autograded, "the graded notebook")):
        _exact(text, (str, type(None)), what)


def _payload(submission, notebook_name: str) -> dict:
    data, problem = None, submission.problem
    if submission.notebook is not None:
        try:
            data = Path(submission.notebook).read_bytes()
        except OSError as e:
            problem = f"{submission.notebook} cannot be read ({e.strerror or e})"
    return {"student": submission.student, "name": notebook_name, "data": data, "problem": problem,
            "timestamp": submission.timestamp, "notes": list(getattr(submission, "notes", None) or []),
            "shown_as": str(submission.notebook) if submission.notebook is not None else None}


def connect(address: str, timeout: float = 20.0, security=None):
    """A Dask client of the scheduler at `address` (with `security`: TLS, as Dask's Security; None: Dask's
    configuration), or a ClusterError saying why not."""
    try:
        from distributed import Client
    except ImportError:
        raise ClusterError("--scheduler needs the `distributed` package (pip install distributed)") from None
    host, _, port = address.rpartition("://")[2].rpartition(":")
    if host and port.isdigit():  # nothing listening: say so now, not after the client's retries
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        except OSError as e:
            raise ClusterError(f"cannot reach the Dask scheduler at {address} ({e.strerror or e}). Start it with "
                               f"`dask scheduler --port {port}` and workers with `dask worker {address} "
                               "--nthreads 1`.") from None
    try:
        return Client(address, timeout=timeout, set_as_default=False, security=security)
    except (OSError, TimeoutError) as e:
        raise ClusterError(f"cannot reach the Dask scheduler at {address} ({e}). Start it with "
                           f"`dask scheduler --port PORT` and workers with `dask worker {address} "
                           "--nthreads 1`.") from None


def _statuses(client) -> dict[str, dict]:
    replies = client.run(worker_status, on_error="return")
    return {w: s for w, s in replies.items() if isinstance(s, dict)}


def ensure_graders(client, plugin: GraderPlugin) -> None:
    """Register the plugin, unless every worker already holds this very grader (a warm rerun)."""
    statuses = _statuses(client)
    registered = client.run_on_scheduler(lambda dask_scheduler: PLUGIN in dask_scheduler.worker_plugins)
    if registered and statuses and all(s.get("key") == plugin.key and s["state"] in ("ready", "warming")
                                       for s in statuses.values()):
        return
    client.register_plugin(plugin, name=PLUGIN)


def _refuse(client, ac, future, submission, why, distrusted: set, futures: dict, plugin, notebook_name: str,
            failed: dict, log) -> None:
    """A worker answered with a result no honest grader gives: trust it no more in this run, and grade the
    submission again on a worker not distrusted (or name the student as not graded, when none is left)."""
    holders = client.who_has([future]).get(future.key) or ()
    distrusted.update(holders)
    where = ", ".join(holders) or "a worker that has left"
    trusted = [w for w in client.scheduler_info()["workers"] if w not in distrusted]
    if not trusted:
        log(f"warning: the worker at {where} returned a result for {submission.student} that cannot be "
            f"{plugin.chapter_id}'s ({why}): refused, and no other worker is left to grade it")
        failed[submission.student] = f"ForgedResult: {why}"
        return
    log(f"warning: the worker at {where} returned a result for {submission.student} that cannot be "
        f"{plugin.chapter_id}'s ({why}): refused; that worker is not trusted again in this run, and the "
        f"submission is graded again on another")
    again = client.submit(grade_task, plugin.key, _payload(submission, notebook_name),
                          key=f"{future.key}-again-{secrets.token_hex(2)}", pure=False,
                          resources={plugin.resource: 1}, workers=trusted, allow_other_workers=False)
    futures[again.key] = (again, submission)
    ac.add(again)


def _told_refusals(statuses: dict, told: dict, plugin, address: str, log) -> bool:
    """Say each worker's new reason to refuse; raise ClusterError when every worker refuses. Whether
    a worker's grader of this run is ready."""
    for worker, s in statuses.items():
        if s["state"] == "refused" and told.get(worker) != s["reason"]:
            told[worker] = s["reason"]
            log(f"warning: the worker at {worker} refuses to grade {plugin.chapter_id}: {s['reason']}")
    mine = [s for s in statuses.values() if s.get("key") == plugin.key]
    if statuses and mine and all(s["state"] == "refused" for s in mine) and len(mine) == len(statuses):
        reasons = "; ".join(f"{w}: {s['reason']}" for w, s in sorted(statuses.items()))
        raise ClusterError(f"no worker of the cluster at {address} can grade {plugin.chapter_id}: {reasons}")
    return any(s["state"] == "ready" for s in mine)


def grade_on_cluster(address: str, chapter: Chapter, submissions, limits, on_result=None, version=None,
                     repo: Path = REPO, log=None, security=None):
    """Grade `submissions` on the Dask cluster at `address` (connected with `security`, Dask's Security, when
    given: the standing graders' TLS); `on_result(result, done, total)` as each lands.

    Returns (results in the order of `submissions`, {worker address: peak RSS in KiB}). Raises
    ClusterError when no worker can grade, or when some submissions could not be graded after
    their workers died repeatedly (the others are passed to on_result all the same)."""
    from autograder.sandbox.bubblewrap import Limits
    from course.notebook import read_notebook
    from distributed import as_completed
    from distributed.client import FutureCancelledError

    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    limits = limits or Limits()
    version = version or course_version(repo, chapter.id)
    plugin = GraderPlugin(chapter.id, version, limits)
    client = connect(address, security=security)
    futures = {}
    try:
        ensure_graders(client, plugin)
        token = secrets.token_hex(4)
        for s in submissions:
            future = client.submit(grade_task, plugin.key, _payload(s, chapter.notebook.name),
                                   key=f"grade-{chapter.id}-{s.student}-{token}", pure=False,
                                   resources={plugin.resource: 1})
            futures[future.key] = (future, s)
        results, worker_rss, failed = {}, {}, {}
        source_nb = read_notebook(chapter.notebook)
        distrusted: set[str] = set()
        told: dict[str, str] = {}
        started = last_poll = time.monotonic()
        ever_ready = False
        ac = as_completed([f for f, _ in futures.values()], loop=client.loop)
        while not ac.is_empty():
            batch = ac.next_batch(block=False)
            for future in batch:
                _, submission = futures[future.key]
                if future.status == "finished":
                    answer = future.result()
                    if submission.student in results:
                        continue  # never twice, whatever the scheduler did
                    try:
                        check_result(answer, submission.student, chapter.id, source_nb)
                    except ForgedResult as e:
                        _refuse(client, ac, future, submission, e, distrusted, futures, plugin,
                                chapter.notebook.name, failed, log)
                        continue
                    result, pid, rss = answer
                    worker_rss[pid] = max(worker_rss.get(pid, 0), rss)
                    results[result.student] = result
                    if on_result:
                        on_result(result, len(results), len(submissions))
                else:
                    try:
                        error = future.exception()
                    except FutureCancelledError:
                        error = "cancelled"
                    failed[submission.student] = f"{type(error).__name__}: {error}"
            if batch:
                continue
            time.sleep(0.1)
            if time.monotonic() - last_poll < STATUS_EVERY_S:
                continue
            last_poll = time.monotonic()
            statuses = _statuses(client)
            ever_ready = _told_refusals(statuses, told, plugin, address, log) or ever_ready
            if not statuses and time.monotonic() - started > NO_WORKER_TIMEOUT_S and not ever_ready:
                raise ClusterError(f"the Dask cluster at {address} has had no worker for "
                                   f"{NO_WORKER_TIMEOUT_S:g} s: start some with `dask worker {address} --nthreads 1`")
        if failed:
            names = ", ".join(f"{student} ({why[:200]})" for student, why in sorted(failed.items()))
            raise ClusterError(f"{len(failed)} of {len(submissions)} submissions could not be graded: {names}. "
                               "The others are recorded: run the same command with --resume to grade only these.")
        return [results[s.student] for s in submissions], worker_rss
    finally:
        for future, _ in futures.values():
            future.release()
        client.close()
