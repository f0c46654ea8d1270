"""Start the course's own `make lab` on a free loopback port, and stop it afterwards."""
from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def started_make(target: str, args: list[str], pattern: str, *, seconds: float, output: list[str] | None = None):
    """`make <target> <args>` in a process group of its own; yields the first re.Match of `pattern` in what
    it prints (failing with its last lines if none comes within `seconds`), then stops the whole group.
    Its output is read all along, into `output`: a server whose pipe nobody reads stalls once the pipe
    is full (a browser test's requests fill it with log lines)."""
    output = [] if output is None else output
    proc = subprocess.Popen(["make", "--no-print-directory", target, *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    matches: queue.Queue = queue.Queue()

    def read():
        matched = False
        for line in proc.stdout:
            output.append(line)
            if not matched and (m := re.search(pattern, line)):
                matched = True
                matches.put(m)
        matches.put(None)  # the output ended

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        try:
            found = matches.get(timeout=seconds)
        except queue.Empty:
            found = None
        assert found, f"make {target} printed no URL in {seconds:.0f} s:\n" + "".join(output[-30:])
        yield found
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=10)


@contextlib.contextmanager
def running_lab(release: Path | None = None, lab_args: str = "", work: Path | None = None):
    """Yield (base URL, token) of `make lab`: serving `release` itself (RELEASE=), or else the working copy
    `work` (WORK=; default the repository's work/) that it makes from the repository's release/."""
    for attempt in (1, 2):
        port = free_port()
        args = [f"PORT={port}"] + ([f"RELEASE={release}"] if release is not None else []) \
            + ([f"WORK={work}"] if work is not None else []) + ([f"LAB_ARGS={lab_args}"] if lab_args else [])
        output: list[str] = []
        with started_make("lab", args, rf"(http://127\.0\.0\.1:{port})/lab\?token=(\w+)", seconds=120,
                          output=output) as found:
            base, token = found.groups()
            if _answers(f"{base}/api/status?token={token}", seconds=60):
                yield base, token
                return
        # It printed its URL, then stopped answering (seen once at a suite's busy start): say what it printed,
        # and try once more on another port.
        if attempt == 2:
            raise AssertionError("make lab printed its URL but never answered on it:\n" + "".join(output[-30:]))


def _answers(url: str, seconds: float) -> bool:
    """Whether `url` answers 200 within `seconds`."""
    import urllib.request
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.5)
    return False
