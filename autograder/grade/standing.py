"""Standing graders: a Dask cluster on this machine that outlives one grading run, for one user alone.

    autograder graders start [--workers N] [--idle-timeout MIN]    a scheduler on loopback and N workers
    autograder graders status                                      where they are, and their graders' state
    autograder graders stop                                        stop every process `start` started

A grading run on the local pool starts its graders (bubblewrap, torch imported, the reference notebook
run once: about 5 s per worker) and stops them at its end, so grading the 5 students who resubmitted
costs that start every time. Standing graders keep them: `autograder grade` without `--scheduler` grades
on them when they are up and run this checkout's code, and on the local pool otherwise. Each worker
holds one warm grader per chapter (grade/distributed.py's GraderPlugin), exactly as on a cluster.

Why mutual TLS: a Dask scheduler on plain tcp, even on loopback, lets every local user connect and run
code in the workers, as the instructor (or as root, under the hub). Here every process listens on TLS
only (`require-encryption`), and every connection must present a certificate of a CA made for this
start alone: its key never touches the disk, and the certificates and their key live in the
folder (0700, the user's; keys 0600), so only this user (and root) can connect.

The folder (default ~/.cache/picotorch-grader/standing, or $AUTOGRADER_GRADERS, or --folder) holds
    state.json        the address, the certificates' paths, the processes (pid and start time), the
                      checkout and the grader's code digest the workers imported
    tls/              ca.pem, node.pem and node-key.pem (one identity for the scheduler, the workers and
                      the client: all of them are this user)
    workers/          the workers' scratch folders (a submission's notebook lives there while graded)
    supervisor.log    what the processes said
`start` runs a supervisor (`python -m autograder.grade.standing supervise ...`, its own session): it
starts the scheduler and the workers, writes state.json once they are up, and stops them all, then
removes state.json and tls/, when the scheduler has been idle for --idle-timeout (default 30 minutes),
when the process given as --stop-with ends (the hub), or on SIGTERM (`stop`). A state file whose
supervisor is gone (killed, the machine rebooted: pids are checked with their start time and boot id)
is never trusted: whatever it names that still runs is stopped and the file removed.
"""
from __future__ import annotations

import argparse
import datetime
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ENV = "AUTOGRADER_GRADERS"
DEFAULT_FOLDER = Path("~/.cache/picotorch-grader/standing")
IDLE_TIMEOUT_MIN = 30.0
START_TIMEOUT_S = 180.0
STATE, TLS, WORKERS, LOG = "state.json", "tls", "workers", "supervisor.log"
RESTART = "restart them: `autograder graders stop` then `autograder graders start`"


class StandingError(RuntimeError):
    """The standing graders cannot be used, started or stopped; the message says why and what to do."""


def folder(given: str | Path | None = None) -> Path:
    """Where the standing graders of this user keep their state: `given`, $AUTOGRADER_GRADERS or the default."""
    return Path(given or os.environ.get(ENV) or DEFAULT_FOLDER).expanduser().absolute()


def _private(path: Path) -> Path:
    """`path`, a folder of this user's that no one else can enter (made 0700 if missing), or StandingError."""
    if path.is_symlink():
        raise StandingError(f"{path} is a symbolic link: the standing graders' keys must live in a folder of "
                            f"your own; remove the link or choose another folder with {ENV}")
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.geteuid():
        raise StandingError(f"{path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}): the standing "
                            f"graders' keys must be yours alone; choose another folder with {ENV}")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)  # ours: close it before a key is written into it
    return path


def _write_private(path: Path, data: bytes) -> None:
    """A new file only this user can read (0600 from its creation, never wider for an instant)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def make_certificates(where: Path) -> dict[str, str]:
    """A CA made for this start and one certificate it signs (loopback, server and client use), in `where`
    (0700): {"ca", "cert", "key"} paths. The CA's key stays in memory and is gone when this returns: no
    other certificate can ever be signed by it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    import ipaddress

    where = _private(where)
    now = datetime.datetime.now(datetime.timezone.utc)
    user = f"{os.geteuid()}@{os.uname().nodename}"

    def certificate(subject: str, key, issuer, signer, ca: bool):
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(issuer).public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=365))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True))
        if not ca:
            builder = (builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        return builder.sign(signer, hashes.SHA256())

    ca_key, node_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"picotorch standing graders CA {user}")])
    ca = certificate(f"picotorch standing graders CA {user}", ca_key, ca_name, ca_key, True)
    node = certificate(f"picotorch standing graders {user}", node_key, ca_name, ca_key, False)
    pem = serialization.Encoding.PEM
    paths = {"ca": where / "ca.pem", "cert": where / "node.pem", "key": where / "node-key.pem"}
    _write_private(paths["ca"], ca.public_bytes(pem))
    _write_private(paths["cert"], node.public_bytes(pem))
    _write_private(paths["key"], node_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    return {k: str(v) for k, v in paths.items()}


# -- processes, known by pid and start time ------------------------------------------------------------

def identity(pid: int) -> str | None:
    """The boot and start time of process `pid` ("BOOT:TICKS"), or None when it does not run: a pid alone
    may be another process's after a reboot or a long time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] == "Z":  # a zombie has ended; only its parent has not collected it yet
        return None
    return f"{boot}:{fields[19]}"


def _alive(entry: dict) -> bool:
    return entry.get("id") is not None and identity(entry["pid"]) == entry["id"]


@dataclass
class Standing:
    """The standing graders a state file describes, their supervisor checked to be running."""
    folder: Path
    state: dict

    @property
    def address(self) -> str:
        """The scheduler's address, tls://127.0.0.1:PORT."""
        return self.state["address"]

    def check_certificates(self) -> None:
        """StandingError, saying what to do, when a certificate or the key is gone (nothing can connect then)."""
        missing = [p for p in self.state["tls"].values() if not Path(p).is_file()]
        if missing:
            raise StandingError(f"the standing graders' certificates are missing ({', '.join(missing)}): nothing "
                                f"can connect to them; {RESTART}")

    def security(self):
        """Dask's Security for a client of these graders (mutual TLS, encryption required)."""
        self.check_certificates()
        from distributed.security import Security  # imports Dask (0.4 s): only where a client connects
        tls = self.state["tls"]
        return Security(tls_ca_file=tls["ca"], tls_client_cert=tls["cert"], tls_client_key=tls["key"],
                        require_encryption=True)

    def processes(self) -> list[dict]:
        """The supervisor, the scheduler and the workers' nannies, each as {"pid", "id", "name"}."""
        return [self.state["supervisor"], *self.state["processes"]]


def _read_state(where: Path) -> dict | None:
    try:
        return json.loads((where / STATE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        return {"unreadable": str(e)}


def _remove_state(where: Path) -> None:
    """What a stopped cluster leaves: its state and keys (never trusted again) and the workers' scratch."""
    (where / STATE).unlink(missing_ok=True)
    for name in (TLS, WORKERS):
        shutil.rmtree(where / name, ignore_errors=True)
    (where / "scheduler.json").unlink(missing_ok=True)


def _end(entries: list[dict], grace_s: float = 15.0) -> None:
    """SIGTERM to each process still the one recorded, then SIGKILL to those (and their process groups,
    when they lead one: a nanny's worker) that have not ended after `grace_s`."""
    live = [e for e in entries if _alive(e)]
    for e in live:
        _signal(e["pid"], signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(e) for e in live):
        time.sleep(0.2)
    for e in live:
        if _alive(e):
            try:
                if os.getpgid(e["pid"]) == e["pid"]:
                    _signal(-e["pid"], signal.SIGKILL)
            except ProcessLookupError:
                continue
            _signal(e["pid"], signal.SIGKILL)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def find(where: Path | None = None, say=None) -> Standing | None:
    """The standing graders of `where` (default: `folder()`) when their supervisor runs, else None. A state
    file whose supervisor is gone is stale: whatever it names that still runs is stopped, the file and
    the keys removed, and `say` told."""
    where = folder(where)
    try:
        st = where.lstat()
    except OSError:
        return None
    if st.st_uid != os.geteuid() or st.st_mode & 0o022 or where.is_symlink():
        # a state another user could have written would send this user's submissions (and code, through
        # Dask) to their scheduler: never read, never cleaned
        if say and (where / STATE).exists():
            say(f"warning: {where} is not a folder of yours alone: standing graders there are ignored")
        return None
    state = _read_state(where)
    if state is None:
        return None
    if "unreadable" in state or not _alive(state.get("supervisor", {})):
        _end(state.get("processes", []) if "unreadable" not in state else [], grace_s=5.0)
        _remove_state(where)
        if say:
            why = state.get("unreadable") or "their processes are gone (stopped, killed or the machine restarted)"
            say(f"removed the state of standing graders that no longer run ({where / STATE}: {why})")
        return None
    return Standing(where, state)


# -- the supervisor ------------------------------------------------------------------------------------

def _dask_env(repo: Path) -> dict:
    env = dict(os.environ, AUTOGRADER_REPO=str(repo), DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION="True",
               # a busy machine is slow, not stuck
               DASK_DISTRIBUTED__ADMIN__TICK__LIMIT="60s",
               # Dask's HTTP servers start even with --no-dashboard, on every interface, with pages that show
               # the workers' logs and call stacks to anyone: none of their routes, and loopback only
               DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES="[]", DASK_DISTRIBUTED__WORKER__HTTP__ROUTES="[]")
    env.pop(ENV, None)
    return env


def _tls_args(tls: dict) -> list[str]:
    return ["--protocol", "tls", "--tls-ca-file", tls["ca"], "--tls-cert", tls["cert"], "--tls-key", tls["key"]]


def _wait_for(test, what: str, procs: list, log: Path, timeout: float = START_TIMEOUT_S):
    """test()'s first true value; StandingError with the log's end when a process dies or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = test()
        if value:
            return value
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            break
        time.sleep(0.2)
    raise StandingError(f"{what} did not start; the end of {log}:\n" + log.read_text(errors="replace")[-3000:])


def _start_processes(where: Path, workers: int, idle_s: float, repo: Path, log) -> tuple[dict, list]:
    """The scheduler and `workers` workers, TLS only; (the state to write, their Popen objects)."""
    dask = str(Path(sys.executable).parent / "dask")
    tls = make_certificates(where / TLS)
    env = _dask_env(repo)
    scheduler_file = where / "scheduler.json"
    scheduler_file.unlink(missing_ok=True)
    idle = ["--idle-timeout", f"{idle_s:g}s"] if idle_s > 0 else []
    spawn = dict(stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=where)
    scheduler = subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", "0", *_tls_args(tls),
                                  "--no-dashboard", "--dashboard-address", "127.0.0.1:0", "--no-show",
                                  "--scheduler-file", str(scheduler_file), *idle], **spawn)
    procs = [scheduler]

    def address():
        try:
            return json.loads(scheduler_file.read_text())["address"]
        except (OSError, ValueError, KeyError):
            return None
    addr = _wait_for(address, "the standing graders' scheduler", procs, where / LOG)
    scratch = _private(where / WORKERS)
    from autograder.grade.version import grader_digest
    digest = grader_digest()  # before the workers start: each imports the code at its start (dask_setup)
    for n in range(workers):
        procs.append(subprocess.Popen(
            [dask, "worker", addr, "--nthreads", "1", "--host", "127.0.0.1", *_tls_args(tls), "--no-dashboard",
             "--dashboard-address", "127.0.0.1:0", "--name", f"standing-{n + 1}", "--local-directory", str(scratch),
             # a worker whose scheduler is gone (the supervisor killed with it) ends itself
             "--death-timeout", "120s", "--preload", "autograder.grade.standing"], **spawn))
    from distributed import Client
    sec = Standing(where, {"tls": tls}).security()
    with Client(addr, security=sec, timeout=60, set_as_default=False) as client:
        client.wait_for_workers(workers, timeout=START_TIMEOUT_S)
    state = {"address": addr, "tls": tls, "workers": workers, "idle_timeout_s": idle_s, "repo": str(repo),
             "python": sys.executable, "grader": digest, "started": time.time(),
             "supervisor": {"pid": os.getpid(), "id": identity(os.getpid())},
             "processes": [{"pid": p.pid, "id": identity(p.pid), "name": n}
                           for p, n in zip(procs, ["scheduler"] + [f"worker {i + 1}" for i in range(workers)])]}
    return state, procs


def supervise(where: Path, workers: int, idle_s: float, repo: Path, stop_with: int | None) -> int:
    """Run the standing graders until idle, told to stop, or `stop_with` ends; then stop them all and remove
    the state. The process `autograder graders start` leaves running."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append("stop"))
    signal.signal(signal.SIGINT, lambda *_: stopping.append("stop"))
    watched = {"pid": stop_with, "id": identity(stop_with)} if stop_with else None
    procs: list = []
    log = open(where / LOG, "ab")
    try:
        state, procs = _start_processes(where, workers, idle_s, repo, log)
        tmp = where / f".{STATE}.tmp"
        _write_private(tmp, (json.dumps(state, indent=1) + "\n").encode())
        os.replace(tmp, where / STATE)
        while not stopping and procs[0].poll() is None and (watched is None or _alive(watched)):
            time.sleep(1.0)
        return 0
    except StandingError as e:
        print(e, file=sys.stderr, flush=True)
        return 2
    finally:
        (where / STATE).unlink(missing_ok=True)  # no one connects while they stop
        _stop_children(procs)
        _remove_state(where)
        log.close()


def _stop_children(procs: list) -> None:
    """The workers (their nannies close them and their sandboxes), then the scheduler; then SIGKILL to every
    descendant left, the sandboxes included (they run in sessions of their own)."""
    import psutil
    left = psutil.Process().children(recursive=True)
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 20
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    left += psutil.Process().children(recursive=True)
    for child in left:
        try:
            child.kill()
        except psutil.Error:
            pass
    for p in procs:
        p.poll()


def dask_setup(worker) -> None:
    """`dask worker --preload autograder.grade.standing`: import the grader's code at the worker's start and
    record its digest, so that state.json's digest is the code every worker grades with (a worker whose files
    change later refuses: grade/distributed.py's _LOADED)."""
    from autograder.grade import distributed, grader  # noqa: F401  (imported now: what the digest names)
    from autograder.grade.version import grader_digest
    distributed._LOADED.setdefault("grader", grader_digest())


# -- start, stop, status, and their use by `autograder grade` --------------------------------------------

def start(where: Path | None = None, workers: int | None = None, idle_s: float = IDLE_TIMEOUT_MIN * 60,
          repo: Path | None = None, stop_with: int | None = None, say=print) -> Standing:
    """Start standing graders in `where` (or say they run already); StandingError when they cannot start."""
    from autograder.chapters import REPO
    where = _private(folder(where))
    repo = Path(repo or REPO).resolve()
    workers = max(1, workers or os.cpu_count() or 1)
    with open(where / ".lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StandingError(f"another `autograder graders start` is starting the standing graders of {where}: "
                                "wait for it, then see `autograder graders status`") from None
        running = find(where, say)
        if running:
            if running.state["repo"] != str(repo):
                raise StandingError(f"standing graders of {running.state['repo']} already run at {running.address} "
                                    f"(from {where}): stop them first (`autograder graders stop`)")
            say(f"the standing graders already run at {running.address} ({running.state['workers']} worker(s))")
            return running
        _remove_state(where)
        argv = [sys.executable, "-m", "autograder.grade.standing", "supervise", str(where), "--workers", str(workers),
                "--idle-timeout-s", str(idle_s), "--repo", str(repo)] + (["--stop-with", str(stop_with)]
                                                                         if stop_with else [])
        with open(where / LOG, "ab") as log:
            log.write(f"\n--- {time.ctime()}: {' '.join(argv)}\n".encode())
            log.flush()
            supervisor = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          cwd=where, start_new_session=True, env=_dask_env(repo))
        deadline = time.monotonic() + START_TIMEOUT_S + 60
        while supervisor.poll() is None and not (where / STATE).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        standing = find(where)
        if standing is None:
            _signal(supervisor.pid, signal.SIGTERM)
            supervisor.wait()
            raise StandingError(f"the standing graders did not start; the end of {where / LOG}:\n"
                                + (where / LOG).read_text(errors="replace")[-3000:])
        idle = f"they stop after {_duration(idle_s)} without grading" if idle_s > 0 else "no idle timeout"
        say(f"standing graders at {standing.address}: {workers} worker(s), TLS with certificates in {where / TLS} "
            f"(yours alone); {idle}; `autograder grade` uses them; `autograder graders stop` stops them")
        return standing


def _duration(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def stop(where: Path | None = None, say=print) -> bool:
    """Stop the standing graders of `where` and every process they started; whether any ran."""
    where = folder(where)
    state = _read_state(where)
    if state is None or "unreadable" in state:
        _remove_state(where)
        say(f"no standing graders run from {where}")
        return False
    supervisor = state.get("supervisor", {})
    ran = _alive(supervisor)
    if ran:
        _signal(supervisor["pid"], signal.SIGTERM)  # it stops the workers, then the scheduler
        deadline = time.monotonic() + 45
        while _alive(supervisor) and time.monotonic() < deadline:
            time.sleep(0.2)
    _end([supervisor, *state.get("processes", [])], grace_s=5.0)
    _remove_state(where)
    say(f"stopped the standing graders at {state.get('address')}" if ran else
        f"removed the state of standing graders that no longer ran ({where / STATE})")
    return ran


def status(where: Path | None = None, say=print) -> int:
    """Say where the standing graders are and what each worker's grader holds; 0 when they run, 1 when not."""
    where = folder(where)
    standing = find(where, say)
    if standing is None:
        say(f"no standing graders run from {where}: `autograder graders start` starts them")
        return 1
    s = standing.state
    idle = f"idle timeout {_duration(s['idle_timeout_s'])}" if s["idle_timeout_s"] > 0 else "no idle timeout"
    say(f"standing graders at {s['address']} since {time.ctime(s['started'])}: {s['workers']} worker(s), {idle}, "
        f"checkout {s['repo']}, folder {where}")
    say("processes: " + ", ".join(f"{p.get('name', 'supervisor')} {p['pid']}" for p in standing.processes()))
    try:
        from distributed import Client

        from autograder.grade.distributed import worker_status
        with Client(s["address"], security=standing.security(), timeout=20, set_as_default=False) as client:
            for worker, w in sorted(client.run(worker_status, on_error="return").items()):
                grader = (f"a grader of {w['chapter']}: {w['state']}" + (f" ({w['reason']})" if w["reason"] else "")
                          if isinstance(w, dict) and w.get("key") else "no grader yet")
                say(f"  {worker}: {grader}")
    except (OSError, TimeoutError, StandingError) as e:
        say(f"warning: cannot reach them ({e}); {RESTART}")
    return 0


def for_grading(repo: Path, version: dict, warn) -> Standing | None:
    """The standing graders `autograder grade` may grade on: running, of this checkout and Python, with the
    grader's code it has now; else None (and `warn` says why, when some run but do not fit)."""
    standing = find(None, warn)
    if standing is None:
        return None
    s = standing.state
    why = ""
    if s["repo"] != str(Path(repo).resolve()) or s["python"] != sys.executable:
        why = f"they grade for the checkout {s['repo']} with {s['python']}, not this one"
    elif s["grader"] != version["grader"]:
        why = (f"the grader's code changed since they started (theirs {s['grader'][:12]}, on disk "
               f"{version['grader'][:12]}); {RESTART}")
    else:
        try:
            standing.check_certificates()
        except StandingError as e:
            why = str(e)
    if why:
        warn(f"warning: not grading on the standing graders at {s['address']}: {why}. Grading on the local pool.")
        return None
    return standing


def security_for(address: str):
    """The Security of the standing graders at `address` (`--scheduler` naming them), or None."""
    standing = find()
    return standing.security() if standing is not None and standing.address == address else None


def _seconds(text: str) -> float:
    """'30' (minutes), '90s', '30m', '2h' or '0' (never) as seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text and text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text) * 60
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: minutes, or 90s, 30m, 2h; 0 for never")


def add_graders_parser(sub) -> None:
    """`autograder graders start|status|stop`."""
    g = sub.add_parser("graders", help="standing graders on this machine that stay warm between grading runs",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = g.add_subparsers(dest="action", required=True)
    for name, text in (("start", "start them (a TLS-only Dask scheduler on loopback and its workers)"),
                       ("status", "where they are and what each worker's grader holds"),
                       ("stop", "stop every process `start` started and remove their state and keys")):
        a = actions.add_parser(name, help=text)
        a.add_argument("--folder", help=f"their state and keys (default: ${ENV} or {DEFAULT_FOLDER})")
        if name == "start":
            a.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="workers (default: cores)")
            a.add_argument("--idle-timeout", type=_seconds, default=IDLE_TIMEOUT_MIN * 60, metavar="MINUTES",
                           help=f"stop after this long without grading (default {IDLE_TIMEOUT_MIN:g}; "
                                "90s, 2h; 0: never)")
            a.add_argument("--repo", help="the course checkout they grade for (default: this one)")
            a.add_argument("--stop-with", type=int, metavar="PID", help="stop them when this process ends")
    g.set_defaults(func=_run)


def _run(args) -> int:
    try:
        if args.action == "start":
            start(args.folder, args.workers, args.idle_timeout, args.repo and Path(args.repo), args.stop_with)
            return 0
        if args.action == "stop":
            stop(args.folder)
            return 0
        return status(args.folder)
    except StandingError as e:
        print(f"autograder graders {args.action}: {e}", file=sys.stderr)
        return 2


def main(argv=None) -> int:
    """`python -m autograder.grade.standing supervise FOLDER ...`: the supervisor `start` runs."""
    p = argparse.ArgumentParser(prog="python -m autograder.grade.standing")
    p.add_argument("command", choices=["supervise"])
    p.add_argument("folder", type=Path)
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--idle-timeout-s", type=float, required=True)
    p.add_argument("--repo", type=Path, required=True)
    p.add_argument("--stop-with", type=int)
    args = p.parse_args(argv)
    return supervise(args.folder, args.workers, args.idle_timeout_s, args.repo, args.stop_with)


if __name__ == "__main__":
    sys.exit(main())
