"""`autograder graders start|status|stop`: standing graders on this machine (autograder/grade/standing.py),
real processes in a temporary folder.

What must hold: `autograder grade` without --scheduler grades on them when they run, says so in a line, and
gives the local pool's grades; a second run with --only-changed grades the one resubmission on the same warm
graders; nothing connects without the certificates (plain tcp, TLS without a certificate, a certificate of
another CA), to the scheduler or to a worker; the folder and the keys are the user's alone (0700, 0600), a
state in a folder others can write is ignored and `start` refuses a folder of another user's;
`stop` leaves no process; a state file whose processes are gone is removed and what it names that still
runs stopped, and a recycled pid is never trusted; they stop by themselves when idle, or when the process
given to --stop-with ends (the hub's)."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_grading_dask import grades_rows, verdicts, write_class

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("standing_graders")]
REPO = Path(__file__).resolve().parents[2]
AUTOGRADER = [sys.executable, "-m", "autograder.cli"]
CHAPTER = "00_tour"
STUDENTS = {"s00": "right", "s01": "wrong", "s02": "blank"}


def run(folder: Path, *args, expect: int = 0, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, AUTOGRADER_GRADERS=str(folder))
    done = subprocess.run(AUTOGRADER + list(args), capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == expect, done.stdout[-4000:] + done.stderr[-4000:]
    return done


def state(folder: Path) -> dict:
    return json.loads((folder / "state.json").read_text())


def _alive(pid: int) -> bool:
    import psutil
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _tree(pid: int) -> list[int]:
    """`pid` and every process under it now (the workers, their sandboxes)."""
    import psutil
    try:
        root = psutil.Process(pid)
        return [pid] + [p.pid for p in root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _wait_gone(pids: list[int], timeout: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


@pytest.fixture(scope="module")
def graders(tmp_path_factory):
    """Standing graders of one worker in a temporary folder; stopped at the end, and every process they
    ran (gathered before the stop) must be gone."""
    folder = tmp_path_factory.mktemp("home") / "standing"
    run(folder, "graders", "start", "--workers", "1", "--idle-timeout", "10m")
    seen: set[int] = set()
    try:
        yield folder, seen
    finally:
        if (folder / "state.json").exists():
            seen.update(_tree(state(folder)["supervisor"]["pid"]))
        run(folder, "graders", "stop")
        assert not _wait_gone(sorted(seen), timeout=30), "processes left running after `autograder graders stop`"


def test_graders_grade_as_the_local_pool_and_stay_warm(graders, tmp_path):
    folder, seen = graders
    klass = write_class(tmp_path / "class", CHAPTER, STUDENTS)
    local = run(tmp_path / "none", "grade", CHAPTER, str(klass), "--out", str(tmp_path / "local"), "--workers", "1")
    assert "with 1 worker(s)" in local.stdout
    out = tmp_path / "standing-out"
    first = run(folder, "grade", CHAPTER, str(klass), "--out", str(out), "--only-changed")
    address = state(folder)["address"]
    assert f"on the standing graders at {address}" in first.stdout and address.startswith("tls://127.0.0.1:")
    assert verdicts(out) == verdicts(tmp_path / "local") and grades_rows(out) == grades_rows(tmp_path / "local")
    seen.update(_tree(state(folder)["supervisor"]["pid"]))  # the worker's sandbox runs by now
    # s02 resubmits the right answer: graded again, on the same warm grader, the others kept
    shutil.copyfile(klass / "s00" / f"{CHAPTER}.ipynb", klass / "s02" / f"{CHAPTER}.ipynb")
    again = run(folder, "grade", CHAPTER, str(klass), "--out", str(out), "--only-changed")
    assert f"on the standing graders at {address}" in again.stdout
    assert "1 new or changed, 2 unchanged" in again.stdout and "[3/3]" in again.stdout
    after = verdicts(out)
    assert after["s02"] == after["s00"] and after["s01"] == verdicts(tmp_path / "local")["s01"]
    status = run(folder, "graders", "status")
    assert f"a grader of {CHAPTER}: ready" in status.stdout
    # --scheduler naming them connects with their certificates too
    named = run(folder, "grade", CHAPTER, str(klass), "--out", str(tmp_path / "named"), "--scheduler", address)
    assert f"on the Dask cluster at {address}" in named.stdout and verdicts(tmp_path / "named") == after
    # --local grades on local processes all the same
    assert "with 1 worker(s)" in run(folder, "grade", CHAPTER, str(klass), "--out", str(tmp_path / "l2"),
                                     "--workers", "1", "--local").stdout


async def _try(address: str, security) -> str:
    from distributed.comm import connect
    args = security.get_connection_args("client") if security is not None else {}
    try:
        comm = await connect(address, timeout=5, **args)
    except Exception as e:  # noqa: BLE001  (any refusal will do; what must not happen is a connection)
        return f"refused: {type(e).__name__}"
    try:
        await comm.write({"op": "identity"})
        answer = await comm.read()
    except Exception as e:  # noqa: BLE001
        return f"refused: {type(e).__name__}"
    finally:
        comm.abort()
    return f"ANSWERED {str(answer)[:100]}"


def test_nothing_connects_without_the_certificates(graders):
    from distributed import Client
    from distributed.security import Security
    folder, _ = graders
    s = state(folder)
    with Client(s["address"], timeout=30, set_as_default=False,
                security=Security(tls_ca_file=s["tls"]["ca"], tls_client_cert=s["tls"]["cert"],
                                  tls_client_key=s["tls"]["key"], require_encryption=True)) as client:
        listening = [s["address"], *client.scheduler_info()["workers"]]
        assert len(listening) == 2
        assert asyncio.run(_try(s["address"], client.security)).startswith("ANSWERED")  # the check itself works
    for address in listening:
        plain = address.replace("tls://", "tcp://")
        for how, security in (("plain tcp", None), ("a certificate of another CA", Security.temporary())):
            target = plain if security is None else address
            assert asyncio.run(_try(target, security)).startswith("refused"), (address, how)
        with pytest.raises(Exception):  # TLS with no certificate at all
            Client(address, timeout=5, set_as_default=False, security=Security(require_encryption=True))


def test_the_folder_and_the_keys_are_the_users_alone(graders):
    folder, _ = graders
    for path in (folder, folder / "tls", folder / "workers"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
        assert path.stat().st_uid == os.geteuid()
    for path in [*(folder / "tls").iterdir(), folder / "state.json"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert {p.name for p in (folder / "tls").iterdir()} == {"ca.pem", "node.pem", "node-key.pem"}
    assert b"PRIVATE KEY" not in (folder / "tls" / "ca.pem").read_bytes()  # the CA's key is never written


def test_missing_certificates_are_named(graders, tmp_path):
    folder, _ = graders
    copy = tmp_path / "copy"  # the same running graders, as a state whose key is gone
    copy.mkdir(mode=0o700)
    s = state(folder)
    s["tls"]["key"] = str(copy / "gone.pem")
    (copy / "state.json").write_text(json.dumps(s))
    said = run(copy, "graders", "status")
    assert "certificates are missing" in said.stdout and "autograder graders stop" in said.stdout
    (copy / "state.json").unlink()  # never `stop` it: that would stop the real ones


def test_a_folder_others_can_write_or_own_is_never_trusted(graders, tmp_path):
    folder, _ = graders
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # anyone could have put this state here, naming a scheduler of theirs
    (shared / "state.json").write_text((folder / "state.json").read_text())
    said = run(shared, "graders", "status", expect=1)
    assert "not a folder of yours alone" in said.stdout and (shared / "state.json").exists()
    other = tmp_path / "other"  # another user's folder: `start` puts no key there
    other.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(other, 65534, 65534)
    else:
        other = Path("/")
    refused = run(other, "graders", "start", "--workers", "1", expect=2)
    assert "not to you" in refused.stderr and not (other / "tls").exists()


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "300"], start_new_session=True)


def test_a_stale_state_file_is_removed_and_never_trusted(tmp_path):
    from autograder.grade.standing import identity
    folder = tmp_path / "standing"
    folder.mkdir(mode=0o700)
    (folder / "tls").mkdir(mode=0o700)
    left, recycled = _sleeper(), _sleeper()
    try:
        # the supervisor's pid is a running process's (this one), but not the process recorded: a recycled pid
        (folder / "state.json").write_text(json.dumps({
            "address": "tls://127.0.0.1:1", "tls": {}, "supervisor": {"pid": os.getpid(), "id": "another-boot:1"},
            "processes": [{"pid": left.pid, "id": identity(left.pid), "name": "scheduler"},
                          {"pid": recycled.pid, "id": "another-boot:2", "name": "worker 1"}]}))
        said = run(folder, "graders", "status", expect=1)
        assert "removed the state of standing graders that no longer run" in said.stdout
        assert not (folder / "state.json").exists() and not (folder / "tls").exists()
        assert left.wait(timeout=20) is not None  # what it named that still ran, the same process, is stopped
        assert recycled.poll() is None  # a process that only has a recorded pid is left alone
    finally:
        for p in (left, recycled):
            p.kill()
            p.wait()


def test_they_stop_when_idle_and_with_the_process_they_serve(tmp_path):
    idle, hub = tmp_path / "idle" / "standing", tmp_path / "hub" / "standing"
    run(idle, "graders", "start", "--workers", "1", "--idle-timeout", "3s")
    trees = {idle: _tree(state(idle)["supervisor"]["pid"])}
    watched = _sleeper()
    try:
        run(hub, "graders", "start", "--workers", "1", "--idle-timeout", "0", "--stop-with", str(watched.pid))
        trees[hub] = _tree(state(hub)["supervisor"]["pid"])
        assert not _wait_gone(trees[idle], timeout=90), "idle standing graders did not stop"
        assert not (idle / "state.json").exists() and not (idle / "tls").exists()
        assert all(_alive(p) for p in trees[hub])
        watched.send_signal(signal.SIGKILL)
        watched.wait()
        assert not _wait_gone(trees[hub], timeout=60), "standing graders outlived the process given to --stop-with"
        assert not (hub / "state.json").exists()
    finally:
        for f in (idle, hub):
            run(f, "graders", "stop")
        if watched.poll() is None:
            watched.kill()
            watched.wait()
