"""Start the course's own `make hub` for a test class on a loopback port, and stop it afterwards.

The class's accounts get names no one else has (a random prefix), homes and the
hub's state in a fresh folder under /tmp (the accounts must be able to enter it),
and are deleted again with their homes when the hub has stopped.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab_server import free_port, started_make

REPO = Path(__file__).resolve().parents[2]
HUB_DIR = REPO / "hub"
# One students' runtime for every test hub of this machine: building it costs about a minute, and
# hub/runtime.py rebuilds it only when .venv or course/ changed.
SHARED_RUNTIME = Path("/tmp/course-hub-tests/runtime")


@dataclass
class TestClass:
    state: Path
    exchange: Path
    homes: Path
    users: Path
    instructor: str
    students: list[str]
    passwords: dict[str, str] = field(default_factory=dict)
    url: str = ""

    def course(self) -> Path:
        return self.homes / self.instructor / "course"


def _hub_import():
    if str(HUB_DIR) not in sys.path:
        sys.path.insert(0, str(HUB_DIR))


def make_class(students=("ana", "bo", "cy")) -> TestClass:
    prefix = "t" + secrets.token_hex(3)
    root = Path(tempfile.mkdtemp(prefix="course-hub-", dir="/tmp"))
    os.chmod(root, 0o755)
    names = [f"{prefix}{s}" for s in students]
    instructor = f"{prefix}ins"
    users = root / "users.txt"
    users.write_text(f"# a test class\n{instructor} instructor\n" + "".join(f"{n} student\n" for n in names))
    return TestClass(state=root / "state", exchange=root / "exchange", homes=root / "homes", users=users,
                     instructor=instructor, students=names)


def _make_shared_folder() -> None:
    SHARED_RUNTIME.parent.mkdir(exist_ok=True)
    os.chmod(SHARED_RUNTIME.parent, 0o755)


def hub_args(tc: TestClass, port: int | None = None) -> list[str]:
    args = ["--users", str(tc.users), "--state", str(tc.state), "--homes", str(tc.homes),
            "--exchange", str(tc.exchange), "--runtime", str(SHARED_RUNTIME)]
    return args + (["--port", str(port)] if port else [])


def prepare(tc: TestClass) -> subprocess.CompletedProcess:
    """`make hub`'s preparation alone (accounts, runtime, exchange, course folder, configuration)."""
    _make_shared_folder()
    done = subprocess.run([str(REPO / ".venv" / "bin" / "python"), str(HUB_DIR / "start.py"), "--prepare-only",
                           *hub_args(tc)], cwd=REPO, capture_output=True, text=True, timeout=900)
    if done.returncode == 0:
        tc.passwords = _passwords(tc)
    return done


def _passwords(tc: TestClass) -> dict[str, str]:
    _hub_import()
    import accounts
    return accounts.passwords(tc.state)


def cleanup(tc: TestClass) -> None:
    """Delete the test class's accounts (and homes) and its folders."""
    _hub_import()
    import accounts
    import start
    start.restore_repository(tc.state)  # what `make hub-stop` does after --prepare-only
    if tc.state.exists():
        for attempt in range(10):
            try:
                accounts.remove(tc.state)
                break
            except RuntimeError:  # a process of the account is still exiting
                time.sleep(1)
        else:
            accounts.remove(tc.state)
    shutil.rmtree(tc.state.parent, ignore_errors=True)


@contextlib.contextmanager
def running_hub(tc: TestClass):
    """`make hub` for the class `tc` on a free loopback port; yields the hub's URL. Its output goes to
    make-hub.log beside the class's state."""
    _make_shared_folder()
    port = free_port()
    args = [f"PORT={port}", f"HUB_USERS={tc.users}", f"HUB_STATE={tc.state}", f"HUB_HOMES={tc.homes}",
            f"HUB_EXCHANGE={tc.exchange}", f"HUB_ARGS=--runtime {SHARED_RUNTIME}"]
    seen: list[str] = []
    try:
        with started_make("hub", args, rf"the course hub is at (http://127\.0\.0\.1:{port}/)", seconds=900,
                          output=seen) as found:
            tc.passwords = _passwords(tc)
            tc.url = found.group(1)
            yield tc.url
    finally:
        (tc.state.parent / "make-hub.log").write_text("".join(seen))


def as_user(tc: TestClass, name: str, command: str, role: str = "student", timeout: float = 300):
    """Run a shell command as the class's account `name`, in the environment its hub server has."""
    _hub_import()
    import runtime
    home = tc.homes / name
    env = {"HOME": str(home), "USER": name, "LANG": "C.UTF-8",
           "JUPYTER_CONFIG_PATH": str(tc.state / "config" / role), **runtime.environment(SHARED_RUNTIME)}
    return subprocess.run(["runuser", "-u", name, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()],
                           "bash", "-c", command], cwd=home, capture_output=True, text=True, timeout=timeout)


def classroom(tc: TestClass, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / ".venv" / "bin" / "python"), str(HUB_DIR / "classroom.py"),
                           "--state", str(tc.state), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


class HubUser:
    """One user's browser-less session on the hub: log in, start the server, use a terminal."""

    def __init__(self, url: str, name: str, password: str):
        import requests
        self.url, self.name = url.rstrip("/"), name
        self.http = requests.Session()
        self.http.get(f"{self.url}/hub/login", timeout=30)
        r = self.http.post(f"{self.url}/hub/login", timeout=60, allow_redirects=False,
                           data={"username": name, "password": password, "_xsrf": self.http.cookies.get("_xsrf")})
        self.logged_in = r.status_code == 302 and "/hub/login" not in r.headers.get("Location", "/hub/login")

    def _hub_xsrf(self) -> dict:
        return {"X-XSRFToken": self.http.cookies.get("_xsrf", path="/hub/") or ""}

    def start_server(self, timeout: float = 240) -> None:
        r = self.http.post(f"{self.url}/hub/api/users/{self.name}/server", headers=self._hub_xsrf(), timeout=60)
        assert r.status_code in (201, 202, 400), r.text  # 400: already running
        deadline = time.time() + timeout
        while time.time() < deadline:
            info = self.http.get(f"{self.url}/hub/api/users/{self.name}", headers=self._hub_xsrf(), timeout=30).json()
            server = info.get("servers", {}).get("", {})
            if server.get("ready"):
                break
            time.sleep(1)
        else:
            raise AssertionError(f"{self.name}'s server did not start in {timeout} s")
        self.http.get(f"{self.url}/user/{self.name}/lab", timeout=60)  # the OAuth round with the server
        r = self.http.get(f"{self.url}/user/{self.name}/api/status", timeout=60)
        assert r.status_code == 200, (r.status_code, r.text[:500])

    def terminal(self, command: str, timeout: float = 60) -> str:
        """Run `command` in a new terminal of the user's JupyterLab; returns what it printed."""
        import websocket
        base = f"{self.url}/user/{self.name}"
        xsrf = self.http.cookies.get("_xsrf", path=f"/user/{self.name}/") or ""
        r = self.http.post(f"{base}/api/terminals", headers={"X-XSRFToken": xsrf}, timeout=30)
        assert r.status_code == 200, (r.status_code, r.text[:300])
        term = r.json()["name"]
        cookie = "; ".join(f"{c.name}={c.value}" for c in self.http.cookies)
        ws = websocket.create_connection(f"{base.replace('http', 'ws', 1)}/terminals/websocket/{term}",
                                         header=[f"Cookie: {cookie}"], timeout=timeout)
        marker = "__done_" + secrets.token_hex(4)
        try:
            ws.send(json.dumps(["stdin", f"{command}; echo {marker[:7]}''{marker[7:]}\r"]))
            out, deadline = "", time.time() + timeout
            while marker not in out and time.time() < deadline:
                kind, *data = json.loads(ws.recv())
                if kind == "stdout":
                    out += data[0]
        finally:
            ws.close()
            self.http.delete(f"{base}/api/terminals/{term}", headers={"X-XSRFToken": xsrf}, timeout=30)
        assert marker in out, f"the terminal did not finish: {out[-2000:]}"
        return out.split(marker)[0]
