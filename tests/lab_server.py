"""Start the course's own `make lab` on a free loopback port, and stop it afterwards."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_lab(release: Path | None = None, lab_args: str = ""):
    """Yield (base URL, token) of `make lab` serving `release` (default: the repository's)."""
    port = free_port()
    cmd = ["make", "--no-print-directory", "lab", f"PORT={port}"]
    if release is not None:
        cmd.append(f"RELEASE={release}")
    if lab_args:
        cmd.append(f"LAB_ARGS={lab_args}")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    found, seen, deadline = None, [], time.time() + 120
    try:
        while found is None and time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            m = re.search(rf"(http://127\.0\.0\.1:{port})/lab\?token=(\w+)", line)
            found = m.groups() if m else None
        assert found, "make lab printed no URL:\n" + "".join(seen[-20:])
        yield found
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
