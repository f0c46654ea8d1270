"""A real Dask cluster on this machine, for tests and benchmarks: `dask scheduler` and
`dask worker` processes on loopback ports, each in its own process group, all of
which `stop()` kills (a finalizer does it too, should a test forget).

    with DaskCluster(tmp_path) as cluster:
        cluster.start_worker()
        cluster.start_worker(env={"PATH": "..."})
        cluster.wait_for_workers(2)
        ... autograder grade ... --scheduler cluster.address
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import weakref
from pathlib import Path

DASK = str(Path(sys.executable).parent / "dask")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Send `sig` to `proc`'s process group, then give its leader 10 s to exit (a group already gone is fine)."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
    # whatever the group's leader left behind (a nanny's worker, a worker's sandbox)
    _signal_group(proc, signal.SIGKILL)


def _stop_all(procs: list) -> None:
    for proc, log in reversed(procs):
        _kill_group(proc)
        log.close()
    procs.clear()


class DaskCluster:
    def __init__(self, folder: Path, port: int | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.procs: list[tuple[subprocess.Popen, object]] = []
        self.workers: list[subprocess.Popen] = []
        self._finalizer = weakref.finalize(self, _stop_all, self.procs)
        self._start(["scheduler", "--host", "127.0.0.1", "--port", str(self.port), "--no-dashboard",
                     "--no-show"], "scheduler")
        self._wait_for_port()

    def _start(self, args: list[str], name: str, env: dict | None = None) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "ab")
        environ = dict(os.environ, **(env or {}))
        environ["DASK_DISTRIBUTED__ADMIN__TICK__LIMIT"] = "60s"  # a busy 2-core test machine is slow, not stuck
        proc = subprocess.Popen([DASK, *args], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=environ, start_new_session=True, cwd=self.folder)
        self.procs.append((proc, log))
        return proc

    def _wait_for_port(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.procs[0][0].poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError("the dask scheduler did not start:\n" + self.log("scheduler"))

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def start_worker(self, name: str | None = None, env: dict | None = None, nanny: bool = True) -> subprocess.Popen:
        name = name or f"worker{len(self.workers) + 1}"
        local = self.folder / f"{name}-scratch"
        local.mkdir(exist_ok=True)
        proc = self._start([ "worker", self.address, "--nthreads", "1", "--host", "127.0.0.1", "--name", name,
                            "--no-dashboard", "--local-directory", str(local),
                            *([] if nanny else ["--no-nanny"])], name, env)
        self.workers.append(proc)
        return proc

    def client(self):
        from distributed import Client
        return Client(self.address, timeout=60, set_as_default=False)

    def wait_for_workers(self, n: int, timeout: float = 120) -> None:
        with self.client() as c:
            c.wait_for_workers(n, timeout=timeout)

    def restart_workers(self, timeout: float = 180) -> None:
        """Fresh worker processes (through their nannies), importing the code as it is on disk now."""
        with self.client() as c:
            c.restart(timeout=timeout, wait_for_workers=True)

    def stop(self) -> None:
        self._finalizer()

    def pids(self) -> list[int]:
        return [p.pid for p, _ in self.procs]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
