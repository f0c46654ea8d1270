"""The trusted process inside a grading sandbox: `python -m autograder.sandbox.supervisor`.

Started once per grader worker inside bubblewrap (autograder/sandbox/bubblewrap.py), it
imports torch, the course package and whatever the chapter's own cells import,
snapshots the interpreter (autograder/sandbox/integrity.py), and then grades one job at
a time: for each submission it forks a kernel (autograder/sandbox/executor.py) that runs
as a throwaway uid with resource limits, sends it the cells one by one, and
enforces the time limits. It never runs student code itself, and it reads the
kernel's messages only as JSON.

When the kernel dies (os._exit, a segfault, the memory limit) or a cell runs past
its limit, the supervisor kills every process of that uid, forks a fresh kernel,
replays the cells that had completed (skipping the one that failed) and carries
on, so one bad cell costs that cell, not the notebook. A death at any other
moment is treated the same way: one while a cell is being sent or its reply
read is a death in that cell; one between cells (found when the next cell
cannot be sent) costs no cell: the fresh kernel replays and runs that cell; one
while cells are replayed is another restart. Only when the restarts are used up
are the remaining cells "not run".

Protocol with the worker outside: one JSON object per line on stdin (a job) and
on the original stdout (the result, or {"ready": ...} once warm).
"""
from __future__ import annotations

import json
import os
import resource
import secrets
import select
import shutil
import signal
import socket
import struct
import sys
import time

from autograder.sandbox import kernel_cache

MAX_MESSAGE = 8 * 1024 * 1024


def _warm(preload: list[str]) -> list[str]:
    """Import what the chapter uses, then run its reference notebook once, so that every
    lazy import and every patch libraries make to themselves on first use (torch.optim
    wraps Optimizer.step) happens before the snapshot, not while a student is graded."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    failed = []
    import torch  # noqa: F401  (first: everything else in the course needs it)
    torch.set_num_threads(1)
    # numpy.ctypeslib: the kernel's integrity checks read dicts' version tags through it (integrity.tag_reader)
    for name in ["numpy", "numpy.ctypeslib", "course", "course.compare", "course.inputs", "course.testing",
                 "IPython.display", *preload]:
        try:
            __import__(name)
        except Exception:
            failed.append(name)
    warmup = "/grading/in/.warmup.json"
    if os.path.exists(warmup):
        with open(warmup) as f:
            cells = json.load(f)
        here = os.getcwd()
        scratch = "/tmp/warmup"
        shutil.copytree("/grading/in", scratch, ignore=shutil.ignore_patterns(".warmup.json"))
        os.chdir(scratch)
        sys.path.insert(0, scratch)  # as the kernel will: the chapter's packages (picotorch/) import from here
        os.environ["COURSE_CHECK_RUNNING"] = "1"
        import contextlib
        import io
        ns = {"__name__": "__warmup__"}
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            for source in cells:
                try:
                    exec(compile(source, "<warm-up>", "exec"), ns)
                except BaseException:
                    pass
        os.chdir(here)
        sys.path.remove(scratch)
        for name, module in list(sys.modules.items()):  # the chapter's own packages: each kernel imports its own
            origin = getattr(module, "__file__", None)
            if isinstance(origin, str) and origin.startswith(scratch):
                del sys.modules[name]
        shutil.rmtree(scratch, ignore_errors=True)
        ns.clear()
    return failed


class Kernel:
    def __init__(self, job, snapshot, uid):
        from autograder.sandbox import executor
        parent, child = socket.socketpair()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                parent.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                executor.main(child, job, snapshot, uid)
            finally:
                os._exit(70)
        child.close()
        # The kernel attaches its pid to every write (SCM_CREDENTIALS, checked by the OS):
        # a process the student started that got hold of the channel is recognised.
        parent.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock = parent
        self.buffer = b""
        self.status = None
        self.intruder = None

    def send(self, message: dict) -> bool:
        """False when the kernel is gone (its end of the channel is closed)."""
        import marshal
        data = marshal.dumps(message)
        try:
            self.sock.sendall(b"%08d" % len(data) + data)
            return True
        except OSError:  # BrokenPipeError, ConnectionResetError: it died before or while it was sent
            return False

    def receive(self, deadline: float):
        """The next line from the kernel, or ("timeout" | "died", None)."""
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout", None
            ready, _, _ = select.select([self.sock], [], [], min(left, 0.5))
            if not ready:
                if self.exited():
                    return "died", None
                continue
            try:
                chunk, ancillary, _, _ = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(struct.calcsize("3i")))
            except OSError:  # ConnectionResetError: it died with part of a cell still unread
                chunk, ancillary = b"", []
            if not chunk:
                self.exited(wait=True)
                return "died", None
            sender = None
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    sender = struct.unpack("3i", data[:struct.calcsize("3i")])[0]
            if sender != self.pid:
                self.intruder = sender
                return "intruder", None
            self.buffer += chunk
            if len(self.buffer) > MAX_MESSAGE:
                return "garbage", None
        line, _, self.buffer = self.buffer.partition(b"\n")
        return "message", line

    def exited(self, wait: bool = False) -> bool:
        """Whether the kernel process has exited (waiting up to 2 s with `wait`); its status is kept."""
        if self.status is not None:
            return True
        deadline = time.monotonic() + (2.0 if wait else 0)
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def how_it_died(self) -> str:
        """How the kernel ended, in words (the signal or exit status)."""
        if self.status is None:
            return "the kernel stopped answering"
        if os.WIFSIGNALED(self.status):
            sig = os.WTERMSIG(self.status)
            name = {signal.SIGSEGV: "a segmentation fault (SIGSEGV)", signal.SIGKILL: "SIGKILL",
                    signal.SIGABRT: "an abort (SIGABRT)", signal.SIGXCPU: "the CPU time limit (SIGXCPU)",
                    signal.SIGBUS: "a bus error (SIGBUS)"}.get(sig, signal.Signals(sig).name)
            return f"the kernel died of {name}"
        return f"the kernel exited with status {os.WEXITSTATUS(self.status)} (os._exit or a crash)"


def _die(kernel: Kernel) -> None:
    """For tests (a cell's "deaths"): kill the kernel now, and wait until it is dead
    without reaping it, as a death the supervisor has not noticed yet."""
    os.kill(kernel.pid, signal.SIGKILL)
    os.waitid(os.P_PID, kernel.pid, os.WEXITED | os.WNOWAIT)


def _kill_all(uid: int | None, kernel: Kernel | None) -> None:
    """Every process the job left behind, however it detached itself."""
    if kernel is not None and kernel.status is None:
        try:
            os.killpg(kernel.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.kill(kernel.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        kernel.exited(wait=True)
    if uid is not None:
        helper = os.fork()
        if helper == 0:
            try:
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                # kill(-1) reaches every process of this uid but the caller, in one pass
                # under the kernel's task-list lock; a process with SIGKILL pending cannot
                # fork, so nothing survives a sweep. Three sweeps are for good measure.
                for _ in range(3):
                    try:
                        os.kill(-1, signal.SIGKILL)
                    except ProcessLookupError:
                        break
                    time.sleep(0.001)
            finally:
                os._exit(0)
        os.waitpid(helper, 0)
    while True:  # reap whatever was re-parented to us
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break


def _prepare_workdir(job: dict, uid: int | None) -> str:
    work = job["workdir"]
    if os.path.exists(work):
        shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(job["inputs"], work, symlinks=False)
    os.makedirs(os.path.join(work, ".tmp"), exist_ok=True)
    if uid is not None:
        for root, dirs, files in os.walk(work):
            for name in [root, *(os.path.join(root, f) for f in dirs + files)]:
                os.lchown(name, uid, uid)
    return work


def _clean(paths: list[str]) -> None:
    for top in paths:
        if not os.path.isdir(top):
            continue
        for name in os.listdir(top):
            path = os.path.join(top, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


class _Run:
    """One notebook's run in the sandbox: the job, the kernel now running it, the cells' results, the notes a
    teacher reads, and the restarts; the methods are the steps of supervisor.grade()."""

    def __init__(self, job: dict, snapshot):
        self.job, self.snapshot, self.limits, self.uid = job, snapshot, job["limits"], job.get("uid")
        self.started = time.monotonic()
        self.deadline = self.started + self.limits["submission_timeout_s"]
        self.results: dict[int, dict] = {}
        self.notes: list[str] = []
        self.completed: list[dict] = []
        self.restarts = 0
        self.peak_kb = 0
        # Tests make the kernel die at awkward moments: a cell's "deaths" lists, for each time the
        # cell is sent (first run, then replays), None or "before_send" / "after_send" / "after_reply".
        self.deaths = {c["index"]: list(c.get("deaths") or []) for c in job["cells"]}
        self.kernel: Kernel | None = None

    def run(self, k: Kernel, cell: dict, until: float) -> dict:
        """The kernel's reply to one cell, or {"status": why there is none}: undelivered, timeout, died, intruder,
        garbage, forged (a reply without this cell's nonce)."""
        nonce = secrets.token_hex(16)
        deaths = self.deaths[cell["index"]]
        death = deaths.pop(0) if deaths else None
        if death == "before_send":
            _die(k)
        elif death == "after_send":  # stopped, it cannot read the cell: it dies with the cell unread
            os.kill(k.pid, signal.SIGSTOP)
        if not k.send({"index": cell["index"], "kind": cell["kind"], "source": cell["source"], "nonce": nonce}):
            return {"status": "undelivered"}
        if death == "after_send":
            _die(k)
        what, line = k.receive(until)
        if what != "message":
            return {"status": what}
        if death == "after_reply":
            _die(k)
        try:
            reply = json.loads(line)
        except ValueError:
            return {"status": "forged", "why": "the grading channel carried something that was not the kernel's reply"}
        if not isinstance(reply, dict) or reply.get("nonce") != nonce or reply.get("index") != cell["index"]:
            return {"status": "forged", "why": "a reply on the grading channel did not carry this cell's secret"}
        return reply

    def start(self) -> Kernel | None:
        try:
            return Kernel(self.job, self.snapshot, self.uid)
        except OSError as e:  # fork() failed: the machine is out of processes or memory
            self.notes.append(f"a kernel could not be started ({e})")
            return None

    def restart(self) -> Kernel | None:
        """A fresh kernel in the state of the cells completed so far, or None when the
        restarts are used up. A kernel that dies while replaying is restarted again."""
        self.peak_kb = max(self.peak_kb, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
        _kill_all(self.uid, self.kernel)
        while self.restarts < self.limits["max_restarts"]:
            self.restarts += 1
            fresh = self.start()
            if fresh is None:
                return None
            if self.replay(fresh):
                return fresh
        return None

    def replay(self, fresh: Kernel) -> bool:
        """Run the completed cells again in `fresh` (the notebook's state up to here, without the cell that
        failed); False, with a note, when it dies or runs past a limit while doing so."""
        for earlier in self.completed:
            reply = self.run(fresh, earlier, min(self.deadline, time.monotonic() + self.limits["cell_timeout_s"]))
            status = reply.get("status")
            if status not in ("ok", "error"):
                if status in ("died", "undelivered"):
                    fresh.exited(wait=True)
                what = ("ran past its time limit" if status == "timeout"
                        else fresh.how_it_died().removeprefix("the kernel "))
                self.notes.append(f"cell {earlier['index']}: while the cells before were replayed, the kernel "
                                  f"{what}; restarting it again")
                _kill_all(self.uid, fresh)
                return False
        return True

    def not_run(self, cells: list[dict], why: str) -> None:
        for rest in cells:
            self.results[rest["index"]] = {"status": "not run", "ename": "NotRun", "evalue": why}

    def stop_before(self, position: int) -> None:
        """No kernel, or no time: the cells from `position` on are not run, and a note says from which on."""
        cells, limit = self.job["cells"], self.limits["submission_timeout_s"]
        why = (f"not run: the notebook reached its time limit of {limit:g} s"
               if self.kernel is not None else "not run: the kernel could not be restarted")
        self.not_run(cells[position:], why)
        self.notes.append(why.replace("not run: ", "cells from here on were not run: ", 1) +
                          f" (first cell not run: {cells[position]['index']})")

    def died_between_cells(self, cell: dict) -> None:
        """The kernel died before `cell` reached it: this cell costs nothing, it runs again in a fresh kernel."""
        self.kernel.exited(wait=True)
        after = f"after cell {self.completed[-1]['index']}" if self.completed else "before the first cell"
        self.notes.append(f"cell {cell['index']}: {self.kernel.how_it_died()} between cells ({after}), before this "
                          "cell reached it")
        self.kernel = self.restart()
        if self.kernel is not None:
            self.notes.append(f"cell {cell['index']}: restarted the kernel, replayed the cells before it and "
                              "ran this cell again")

    def out_of_time(self, position: int) -> None:
        """The notebook's own time limit ran out in the cell at `position`: nothing after it runs either."""
        cells, limit = self.job["cells"], self.limits["submission_timeout_s"]
        cell = cells[position]
        self.results[cell["index"]] = {"status": "error", "ename": "CellTimeoutError",
                                       "evalue": f"this cell was stopped: the notebook reached its time limit "
                                                 f"of {limit:g} s"}
        self.not_run(cells[position + 1:], f"not run: the notebook reached its time limit of {limit:g} s")
        self.notes.append(f"cell {cell['index']}: stopped when the notebook reached its time limit of "
                          f"{limit:g} s; the cells after it were not run")

    def failed(self, cell: dict, reply: dict) -> None:
        """The cell cost the kernel (its time limit, a death, an intruder or garbage on the channel, a forged
        reply): the cell gets an error that says so, and a fresh kernel replays the cells before it."""
        status = reply.get("status")
        if status == "timeout":
            why = (f"this cell was stopped after {self.limits['cell_timeout_s']:g} s "
                   "(the per-cell time limit): an endless loop?")
            ename = "CellTimeoutError"
        elif status == "died":
            self.kernel.exited(wait=True)
            why = self.kernel.how_it_died() + " while running this cell"
            ename = "KernelDied"
        elif status == "intruder":
            why = ("another process wrote on the grading channel while this cell ran (pid "
                   f"{self.kernel.intruder}); only the kernel may report results")
            ename = "GradingIntegrityError"
        elif status == "garbage":
            why, ename = "this cell wrote more than the grading channel accepts", "GradingIntegrityError"
        else:
            why, ename = reply.get("why", "the grading channel was tampered with"), "GradingIntegrityError"
        self.results[cell["index"]] = {"status": "error", "ename": ename, "evalue": why}
        self.notes.append(f"cell {cell['index']}: {why}")
        self.kernel = self.restart()
        if self.kernel is not None:
            self.notes.append(f"cell {cell['index']}: restarted the kernel and replayed the cells before it")

    def run_cells(self) -> None:
        """Every cell in turn, each with its own time limit within the notebook's."""
        cells = self.job["cells"]
        self.kernel = self.start()
        position = 0
        while position < len(cells):
            cell = cells[position]
            now = time.monotonic()
            if self.kernel is None or now >= self.deadline:
                self.stop_before(position)
                return
            until = min(self.deadline, now + self.limits["cell_timeout_s"])
            reply = self.run(self.kernel, cell, until)
            status = reply.get("status")
            if status in ("ok", "error"):
                self.results[cell["index"]] = reply
                self.completed.append(cell)
            elif status == "undelivered":  # it died between cells: this cell never reached it, so it costs nothing
                self.died_between_cells(cell)
                continue
            elif status == "timeout" and until >= self.deadline:
                self.out_of_time(position)
                return
            else:
                self.failed(cell, reply)
            position += 1


def grade(job: dict, snapshot) -> dict:
    """Run one notebook's cells in a fresh kernel (restarted and replayed as the module's docstring says), then
    clear away everything the job left: {"cells": each cell's outcome, "notes", "restarts", "seconds",
    "kernel_peak_rss_kb"}."""
    _prepare_workdir(job, job.get("uid"))
    state = _Run(job, snapshot)
    state.run_cells()
    _kill_all(state.uid, state.kernel)
    peak_kb = max(state.peak_kb, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    shareable = kernel_cache.collect(job)  # compiled kernels to share, asked for by the student's kernel
    _clean([job["workdir"], "/tmp", "/dev/shm"])
    kernel_cache.share(shareable, state.uid)  # built again by trusted code, now that nothing of the student's is left
    return {"cells": [state.results.get(c["index"], {"status": "not run"}) | {"index": c["index"]}
                      for c in job["cells"]],
            "notes": state.notes, "restarts": state.restarts, "seconds": round(time.monotonic() - state.started, 3),
            "kernel_peak_rss_kb": peak_kb}


def main() -> int:
    """The supervisor inside the sandbox: warm up, take the integrity snapshot, then grade each job read from
    stdin, one JSON reply a line."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything a library prints must not land in the protocol
    preload = json.loads(os.environ.get("COURSE_PRELOAD", "[]"))
    seeded = kernel_cache.prepare()  # the reference run's compiled kernels are shared with every submission
    failed = _warm(preload)
    builds = kernel_cache.reference_builds(seeded)  # for the grader's next sandboxes: no submission has run yet
    kernel_cache.after_warmup()
    from autograder.sandbox import executor  # noqa: F401  (the kernel's code is the grader's: in the snapshot)
    from autograder.sandbox.integrity import Snapshot
    import importlib.util
    roots = {sys.prefix, sys.base_prefix, os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)}
    for package in ("course", "autograder"):
        spec = importlib.util.find_spec(package)
        roots.update(os.path.dirname(p) for p in spec.submodule_search_locations)
    snapshot = Snapshot.take(tuple(sorted(r.rstrip("/") + "/" for r in roots)))
    out.write(json.dumps({"ready": True, "preload_failed": failed, "uid": os.getuid(), "builds": builds}) + "\n")
    for line in sys.stdin:
        job = json.loads(line)
        try:
            reply = grade(job, snapshot)
        except Exception as e:  # the worker turns this into a note; the supervisor stays up
            import traceback
            reply = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        out.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
