"""`make hub`: the course's multi-user JupyterHub for one class on this machine.

    make hub [PORT=8888] [HUB_USERS=hub/users.txt] [HUB_EXCHANGE=/srv/nbgrader/exchange]
             [HUB_STATE=/srv/course-hub] [HUB_HOMES=/home] [HUB_IP=127.0.0.1]

As root (it makes Unix accounts and runs each user's server as that user), it
  1. makes the missing accounts of the user list (hub/accounts.py), homes 0700;
  2. builds the students' runtime outside the repository (hub/runtime.py) and
     closes the repository to other users (chmod o-rwx): its source/, build/ and
     .git/ hold the solutions and the hidden tests;
  3. lays out nbgrader's exchange with nbgrader's permissions, and the
     instructor's course folder ~INSTRUCTOR/course with the chapters of release/;
  4. writes the per-role Jupyter configuration (students: Assignment List, no
     formgrader; the instructor: both);
  5. starts standing graders (`autograder graders start`, in HUB_STATE/graders, root's
     alone: a TLS-only Dask cluster on loopback), so that the grader page's *Collect
     and grade* grades on warm graders rather than starting them for every run;
  6. runs JupyterHub (hub/jupyterhub_config.py), prints its URL once it answers,
     and on Ctrl-C or SIGTERM stops it with everything it started, the graders too
     (which also stop by themselves when this process ends, however it ends).
`--prepare-only` does 1-4 and exits (the tests use it for the command-line loop).

Stopping (Ctrl-C, SIGTERM, or `make hub-stop` from another shell) gives the
repository back the mode it had before step 2 (kept in HUB_STATE/repository-mode.json);
`make hub-remove` also deletes the accounts the hub made and their homes. The
exchange, HUB_STATE (gradebook copies, grading output, passwords.txt) stay until
you delete them.
"""
from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accounts  # noqa: E402
import runtime  # noqa: E402
from settings import REPO, Settings  # noqa: E402

STUDENT_LAB_OFF = ["@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                   "@jupyter/nbgrader:course-list"]
STUDENT_SERVER_OFF = ["nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list"]
# formgrader without the buttons the course's own flow replaces (hub/course_formgrader.py), and the
# Assignment List saying which submission is late and which counts (hub/course_assignment_list.py)
INSTRUCTOR_SERVER_ON = ["course_formgrader"]
STUDENT_SERVER_ON = ["course_assignment_list"]
# As in the course folder's nbgrader_config.py: in a kernel nbgrader starts (autograde, Validate) the
# chapter's check() cell returns at once instead of running the whole notebook a second time.
CHECK_OFF_IN_NBGRADER_KERNELS = [
    "--IPKernelApp.exec_lines=__import__('os').environ.__setitem__('COURSE_CHECK_RUNNING', '1')"]
IGNORE = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "[0-9][0-9]_*.py"]


class HubError(Exception):
    pass


def say(message: str) -> None:
    print(f"hub: {message}", flush=True)


def _chown_tree(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        os.chown(root, entry.pw_uid, entry.pw_gid)
        for name in files:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid, follow_symlinks=False)


def _need_reachable(path: Path, what: str) -> None:
    for parent in reversed(path.resolve().parents):
        if not parent.stat().st_mode & 0o001:
            raise HubError(f"{what} {path} lies in {parent}, which other users cannot enter (mode "
                           f"{oct(parent.stat().st_mode & 0o777)}); the class's accounts must reach it. "
                           f"Choose a folder elsewhere, or `chmod o+x {parent}`.")


def prepare_exchange(settings: Settings) -> None:
    """nbgrader's exchange: the root writable by all (nbgrader's `chmod ugo+rw`), plus the sticky bit so that
    no one can rename or delete another's entry; the course's folders as nbgrader's release makes them."""
    settings.exchange.mkdir(parents=True, exist_ok=True)
    _need_reachable(settings.exchange, "the exchange")
    os.chmod(settings.exchange, 0o1777)
    instructor = pwd.getpwnam(settings.instructor)
    course = settings.exchange / settings.course_id
    if course.exists():
        owner = pwd.getpwuid(course.stat().st_uid).pw_name
        if owner != settings.instructor:
            raise HubError(f"{course} belongs to {owner}, not to the instructor {settings.instructor}: it is not this "
                           f"class's exchange. Move it away, or choose another HUB_EXCHANGE.")
    for path, mode in ((course, 0o755), (course / "outbound", 0o755), (course / "inbound", 0o2733),
                       (course / "feedback", 0o711)):
        path.mkdir(exist_ok=True)
        os.chown(path, instructor.pw_uid, instructor.pw_gid)
        os.chmod(path, mode)


def prepare_course_folder(settings: Settings) -> Path:
    """~INSTRUCTOR/course: nbgrader's course folder, with release/ and source/ of every chapter from the
    repository (source/ without the chapter's text form); the gradebook and submissions stay as they are."""
    home = Path(pwd.getpwnam(settings.instructor).pw_dir)
    course = settings.course_dir(home)
    for kind in ("release", "source"):
        for chapter in sorted((settings.repo / "release").iterdir()):
            if not chapter.is_dir():
                continue
            src = settings.repo / kind / chapter.name
            dst = course / kind / chapter.name
            shutil.copytree(src, dst, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns(*IGNORE[:3], f"{chapter.name}.py"))
            if kind == "source" and (chapter / "picotorch").is_dir():  # the reference package nbgrader's autograde
                # copies in: committed once, in release/ (git ignores source/NN/picotorch/)
                shutil.copytree(chapter / "picotorch", dst / "picotorch", dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns(*IGNORE[:3]))
    for folder in ("submitted", "autograded", "feedback"):
        (course / folder).mkdir(parents=True, exist_ok=True)
    _chown_tree(course, settings.instructor)
    os.chmod(course, 0o700)
    return course


def write_role_config(settings: Settings, course: Path) -> None:
    """HUB_STATE/config/{student,instructor}: the spawner points JUPYTER_CONFIG_PATH at one of them."""
    common = (f"c = get_config()  # noqa: F821\n"
              f"c.CourseDirectory.course_id = {settings.course_id!r}\n"
              f"c.Exchange.root = {str(settings.exchange)!r}\n"
              # check() returns at once in the kernels of autograde and Validate (see nbgrader_config.py)
              f"c.Execute.extra_arguments = {CHECK_OFF_IN_NBGRADER_KERNELS!r}\n")
    for role in ("student", "instructor"):
        folder = settings.state / "config" / role
        (folder / "labconfig").mkdir(parents=True, exist_ok=True)
        text = "# Written by `make hub` (hub/start.py).\n" + common
        if role == "instructor":
            text += (f"c.CourseDirectory.root = {str(course)!r}\n"
                     f"c.CourseDirectory.ignore = {IGNORE!r}\n")
        off_lab = STUDENT_LAB_OFF if role == "student" else []
        off_server = STUDENT_SERVER_OFF if role == "student" else []
        on_server = INSTRUCTOR_SERVER_ON if role == "instructor" else STUDENT_SERVER_ON
        files = {
            "nbgrader_config.py": text,
            # terminals: a plain bash, not a login shell, whose /etc/profile would drop the runtime from PATH
            "jupyter_server_config.json": json.dumps({"ServerApp": {
                "jpserver_extensions": {**{name: False for name in off_server},
                                        **{name: True for name in on_server}},
                "terminado_settings": {"shell_command": ["/bin/bash"]}},
                # window.jupyterapp in the user's own page: the browser test drives JupyterLab through it
                "LabApp": {"expose_app_in_browser": True}}, indent=2) + "\n",
            "labconfig/page_config.json": json.dumps({"disabledExtensions": {
                name: True for name in off_lab}}, indent=2) + "\n",
        }
        for name, content in files.items():
            (folder / name).write_text(content)
            os.chmod(folder / name, 0o644)
        for path in (settings.state / "config", folder, folder / "labconfig"):
            os.chmod(path, 0o755)


REPO_MODE = "repository-mode.json"  # in HUB_STATE: the repository's mode before the hub closed it


def close_repository(settings: Settings) -> None:
    """chmod o-rwx of the repository, its mode before kept in HUB_STATE so that stopping restores it
    (a second start keeps the first record: the mode to restore is the one before any hub)."""
    mode = settings.repo.stat().st_mode & 0o7777
    if mode & 0o007:
        record = settings.state / REPO_MODE
        if not record.exists():
            record.write_text(json.dumps({"path": str(settings.repo), "mode": mode}) + "\n")
        os.chmod(settings.repo, mode & ~0o007)
        say(f"closed {settings.repo} to other users (chmod o-rwx): it holds the solutions and hidden tests; "
            f"the class's servers run from {settings.runtime}; stopping the hub opens it again")


def restore_repository(state: Path) -> str | None:
    """Give the repository back the mode it had before the hub closed it; what was done, or None."""
    record = Path(state) / REPO_MODE
    try:
        saved = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    path, mode = Path(saved["path"]), int(saved["mode"])
    if path.exists():
        os.chmod(path, mode)
    record.unlink()
    return f"gave {path} back its mode {mode:o} (as before the hub)"


def stop_running(state: Path) -> str:
    """SIGTERM to the `make hub` of `state` (its pid in HUB_STATE/hub.pid): it stops JupyterHub, every
    server, and restores the repository's mode."""
    try:
        pid = int((Path(state) / "hub.pid").read_text())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return f"no hub of {state} is running"
    for _ in range(120):
        if not (Path(state) / "hub.pid").exists():
            return f"stopped the hub of {state} (pid {pid})"
        time.sleep(0.5)
    return f"asked the hub of {state} (pid {pid}) to stop; it has not finished yet"


def prepare(settings: Settings) -> None:
    if os.geteuid() != 0:
        raise HubError("the hub runs as root: it makes the class's Unix accounts and runs each user's server "
                       "as that user. Run `sudo make hub` (or as root).")
    settings.roles = accounts.parse(settings.users)
    settings.state.mkdir(parents=True, exist_ok=True)
    os.chmod(settings.state, 0o755)
    _need_reachable(settings.state, "HUB_STATE")
    settings.homes.mkdir(parents=True, exist_ok=True)
    _need_reachable(settings.homes, "HUB_HOMES")
    for line in accounts.ensure(settings.roles, settings.homes, settings.state):
        say(line)
    if (settings.state / "passwords.txt").exists():
        say(f"first passwords of the accounts made by the hub: {settings.state / 'passwords.txt'} (root only)")
    say("the students' runtime: " + str(settings.runtime))
    _need_reachable(settings.runtime.parent, "the runtime")
    runtime.build(settings.runtime)
    close_repository(settings)
    prepare_exchange(settings)
    course = prepare_course_folder(settings)
    write_role_config(settings, course)
    settings.save()
    import classroom  # the due dates a gradebook kept from an earlier run, for the students' Assignment List
    classroom.publish_due_dates(settings)
    say(f"exchange {settings.exchange / settings.course_id}; the instructor's course folder {course}")


GRADERS = "graders"  # in HUB_STATE: the standing graders' state and keys (autograder/grade/standing.py), 0700


def _graders(settings: Settings, action: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(settings.repo / ".venv" / "bin" / "autograder"), "graders", action, "--folder",
                           str(settings.state / GRADERS), *extra], capture_output=True, text=True, timeout=600)


def start_graders(settings: Settings) -> None:
    """Standing graders for hub/classroom.py's grading runs, stopped with the hub: no idle timeout, but
    --stop-with this process, so a hub that is killed does not leave them running. When they cannot
    start, grading starts its graders each run (the local pool), and the hub says so."""
    done = _graders(settings, "start", "--workers", str(os.cpu_count() or 1), "--idle-timeout", "0",
                    "--stop-with", str(os.getpid()), "--repo", str(settings.repo))
    if done.returncode == 0:
        say(f"for the grader page's runs: {done.stdout.strip()}")
    else:
        say(f"warning: the standing graders did not start, so each grading run starts its own: "
            f"{(done.stderr or done.stdout).strip()[-1500:]}")


def stop_graders(state: Path, repo: Path = REPO) -> None:
    """Stop the hub's standing graders (if any run) and remove their state and keys."""
    if (Path(state) / GRADERS / "state.json").exists():
        settings = Settings(state=Path(state), repo=repo)
        say(_graders(settings, "stop").stdout.strip())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(settings: Settings) -> int:
    ports = {"hub": _free_port(), "proxy_api": _free_port(), "grader": _free_port()}
    env = dict(os.environ, HUB_STATE=str(settings.state),
               HUB_INTERNAL_PORTS=",".join(f"{k}={v}" for k, v in ports.items()),
               PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    # HUB_STATE is open to the class (its config/ and runtime/): the hub's database (users, servers, tokens'
    # hashes) and its log are root's alone. SQLite keeps the mode of the file it is given, an empty one too.
    for name in ("jupyterhub.sqlite", "jupyterhub.log"):
        os.close(os.open(settings.state / name, os.O_CREAT | os.O_WRONLY, 0o600))
        os.chmod(settings.state / name, 0o600)
    (settings.state / "hub.pid").write_text(f"{os.getpid()}\n")  # for `make hub-stop`
    start_graders(settings)
    log = open(settings.state / "jupyterhub.log", "ab")
    hub = subprocess.Popen([str(Path(sys.executable).parent / "jupyterhub"), "-f",
                            str(REPO / "hub" / "jupyterhub_config.py")],
                           cwd=settings.state, env=env, stdout=log, stderr=subprocess.STDOUT)
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True
        if hub.poll() is None:
            hub.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    host = "127.0.0.1" if settings.ip in ("", "0.0.0.0") else settings.ip
    url = f"http://{host}:{settings.port}/"
    deadline = time.monotonic() + 120
    while not stopping and hub.poll() is None:
        try:
            with urllib.request.urlopen(url + "hub/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            stop(None, None)
            break
        time.sleep(0.5)
    if hub.poll() is None and not stopping:
        everywhere = settings.ip in ("", "0.0.0.0")
        shown = f"http://{socket.gethostname()}:{settings.port}/ (all interfaces)" if everywhere else url
        say(f"the course hub is at {shown}")
        say(f"log in as a user of {settings.users}: instructor {settings.instructor}, "
            f"{len(settings.students)} students; the instructor's grader page is {url}services/grader/ ; "
            f"log: {settings.state / 'jupyterhub.log'}")
    while True:
        try:
            code = hub.wait()
            break
        except KeyboardInterrupt:
            stop(None, None)
    stop_graders(settings.state, settings.repo)
    left = accounts.end_leftover_processes(list(settings.roles), settings.state)
    if left:
        say(f"ended what the servers of {', '.join(left)} left running")
    done = restore_repository(settings.state)
    if done:
        say(done)
    (settings.state / "hub.pid").unlink(missing_ok=True)
    if not stopping:
        say(f"JupyterHub stopped (exit {code}); its log: {settings.state / 'jupyterhub.log'}")
        return code or 1
    say("stopped")
    return 0


def undo(state: Path, remove: bool) -> int:
    """`make hub-stop` / `make hub-remove`: stop the hub, open the repository again and, with `remove`,
    delete the accounts the hub made (hub/accounts.py's record of them) with their homes."""
    say(stop_running(state))
    stop_graders(state)  # those of a hub that was killed stop by themselves; their state goes here
    done = restore_repository(state)  # also after --prepare-only, or a hub that was killed
    if done:
        say(done)
    if remove:
        gone = accounts.remove(state)
        say(f"removed {len(gone)} account(s) the hub made, with their homes: {', '.join(gone) or 'none'}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="make hub", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    d = Settings()
    parser.add_argument("--port", type=int, default=d.port)
    parser.add_argument("--ip", default=d.ip)
    parser.add_argument("--users", type=Path, default=d.users)
    parser.add_argument("--exchange", type=Path, default=d.exchange)
    parser.add_argument("--state", type=Path, default=d.state)
    parser.add_argument("--homes", type=Path, default=d.homes)
    parser.add_argument("--course-id", default=d.course_id)
    parser.add_argument("--runtime", type=Path, help="where the students' runtime goes (default: STATE/runtime)")
    parser.add_argument("--prepare-only", action="store_true")
    parser.add_argument("--stop", action="store_true", help="stop the running hub of --state (make hub-stop)")
    parser.add_argument("--remove", action="store_true",
                        help="stop it, then delete the accounts it made and their homes (make hub-remove)")
    args = parser.parse_args(argv)
    if args.stop or args.remove:
        return undo(args.state.absolute(), remove=args.remove)
    settings = Settings(state=args.state.absolute(), exchange=args.exchange.absolute(), homes=args.homes.absolute(),
                 users=args.users.absolute(), course_id=args.course_id, ip=args.ip, port=args.port,
                 runtime_dir=args.runtime.absolute() if args.runtime else None)
    try:
        prepare(settings)
    except (HubError, accounts.UserListError) as e:
        print(f"make hub: {e}", file=sys.stderr)
        return 2
    if args.prepare_only:
        return 0
    return serve(settings)


if __name__ == "__main__":
    sys.exit(main())
