"""The class's accounts: the user list file, and the Unix accounts made from it.

Every hub user is a Unix account of its own (JupyterHub's LocalProcessSpawner runs
each server as its user), with a home folder only its owner can enter (0700).
That is what keeps one student's work from another, and the instructor's course
folder (source/, the gradebook, the submissions) from every student.

    python hub/accounts.py list   USERS            check a user list and show it
    python hub/accounts.py remove --state STATE    delete the accounts the hub created (and their homes)
    python hub/accounts.py password --state STATE NAME   give NAME a new random password
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
ROLES = ("instructor", "student")
FIRST_UID = 1000  # below it: system accounts, never a hub user


class UserListError(ValueError):
    pass


def parse(path: Path) -> dict[str, str]:
    """{name: role} from a user list; raises UserListError naming the line at fault."""
    if not path.is_file():
        raise UserListError(f"no user list at {path}: copy hub/users.example.txt there and edit it "
                            f"(one `NAME ROLE` a line), or pass HUB_USERS=FILE.")
    roles: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        where = f"{path}, line {number}"
        if len(parts) != 2:
            raise UserListError(f"{where}: expected `NAME ROLE`, got {line!r}")
        name, role = parts
        if not NAME.match(name):
            raise UserListError(f"{where}: {name!r} is not a usable account name (a lowercase letter, then "
                                f"lowercase letters, digits, '_' or '-'; 32 at most)")
        if role not in ROLES:
            raise UserListError(f"{where}: the role of {name} is {role!r}; it must be instructor or student")
        if name in roles:
            raise UserListError(f"{where}: {name} is listed twice")
        roles[name] = role
    instructors = [n for n, r in roles.items() if r == "instructor"]
    if len(instructors) != 1:
        raise UserListError(f"{path}: {len(instructors)} instructors ({', '.join(instructors) or 'none'}); the list "
                            f"needs exactly one, who owns the course in nbgrader's exchange")
    if len(roles) == 1:
        raise UserListError(f"{path}: no students in the list")
    return roles


def _registry(state: Path) -> Path:
    return state / "accounts.json"


def created_accounts(state: Path) -> list[str]:
    path = _registry(state)
    return json.loads(path.read_text())["created"] if path.is_file() else []


def _remember(state: Path, names: list[str]) -> None:
    path = _registry(state)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"created": sorted(set(names))}, indent=2) + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _set_password(name: str) -> str:
    password = secrets.token_urlsafe(9)
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)
    return password


def _record_password(state: Path, name: str, password: str) -> None:
    path = state / "passwords.txt"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a") as f:
        f.write(f"{name} {password}\n")
    os.chmod(path, 0o600)


def passwords(state: Path) -> dict[str, str]:
    """The latest password handed out for each account the hub created."""
    path = state / "passwords.txt"
    out = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                name, password = line.split(None, 1)
                out[name] = password
    return out


def ensure(roles: dict[str, str], homes: Path, state: Path) -> list[str]:
    """Make the missing accounts; returns lines saying what was done. Needs root."""
    said = []
    created = created_accounts(state)
    homes.mkdir(parents=True, exist_ok=True)
    for name, role in roles.items():
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            entry = None
        if entry is not None:
            if entry.pw_uid < FIRST_UID:
                raise UserListError(f"{name} is a system account (uid {entry.pw_uid}); it cannot be a hub user. "
                                    f"Rename them in the user list.")
            home = Path(entry.pw_dir)
            if not home.is_dir():
                raise UserListError(f"the account {name} exists but its home {home} does not")
            os.chmod(home, 0o700)
            if name not in created:
                said.append(f"{name}: existing account, password unchanged")
            continue
        home = homes / name
        subprocess.run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/bash",
                        "--user-group", "--comment", f"course hub {role}", name],
                       check=True, capture_output=True, text=True)
        os.chmod(home, 0o700)
        created.append(name)
        _remember(state, created)
        _record_password(state, name, _set_password(name))
        said.append(f"{name}: new {role} account, home {home}")
    return said


def remove(state: Path, names: list[str] | None = None) -> list[str]:
    """Delete accounts the hub created (all of them by default) with their homes."""
    created = created_accounts(state)
    targets = [n for n in (names or created) if n in created]
    gone = []
    for name in targets:
        result = subprocess.run(["userdel", "--remove", name], capture_output=True, text=True)
        if result.returncode not in (0, 6):  # 6: no such user; 8: still running processes (stop the hub first)
            raise RuntimeError(f"userdel {name}: {result.stderr.strip()}")
        gone.append(name)
        created.remove(name)
        _remember(state, created)
    return gone


def _uid_of(proc: Path) -> int:
    """The effective uid of the process at /proc/PID (what `ps -u` selects by; the folder's owner is root for a
    process that is not dumpable)."""
    for line in (proc / "status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[2])
    raise OSError(f"no Uid line in {proc}/status")


def _processes_of(uids: dict[int, str], created: set[str]) -> list[int]:
    """Processes the hub's users still run: every one of an account the hub made, and of an account it found
    only those a hub server started (they carry JUPYTERHUB_USER): their owner's own logins are left alone."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name = uids.get(_uid_of(entry))
            if name is None:
                continue
            if name not in created and b"JUPYTERHUB_USER=" not in (entry / "environ").read_bytes():
                continue
        except (OSError, ValueError):  # it ended while we looked
            continue
        found.append(int(entry.name))
    return found


def end_leftover_processes(names: list[str], state: Path, seconds: float = 10) -> list[str]:
    """After JupyterHub stopped: end what its servers left running (a kernel or a terminal's child that
    outlived its server), SIGTERM first, SIGKILL after `seconds`; returns the accounts that had any."""
    uids = {}
    for name in names:
        with contextlib.suppress(KeyError):
            uids[pwd.getpwnam(name).pw_uid] = name
    created = set(created_accounts(state))
    owners: set[str] = set()
    for sig, wait in ((signal.SIGTERM, seconds), (signal.SIGKILL, 5)):
        pids = _processes_of(uids, created)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError, ValueError):
                owners.add(uids.get(_uid_of(Path(f"/proc/{pid}")), "?"))
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _processes_of(uids, created):
            time.sleep(0.2)
    return sorted(owners - {"?"})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="hub/accounts.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list")
    ls.add_argument("users", type=Path)
    rm = sub.add_parser("remove")
    rm.add_argument("--state", type=Path, required=True)
    rm.add_argument("names", nargs="*")
    pw = sub.add_parser("password")
    pw.add_argument("--state", type=Path, required=True)
    pw.add_argument("name")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            for name, role in parse(args.users).items():
                print(f"{name:<32} {role}")
        elif args.command == "remove":
            gone = remove(args.state, args.names)
            print(f"removed {len(gone)} account(s): {', '.join(gone) or 'none'}")
        else:
            pwd.getpwnam(args.name)
            password = _set_password(args.name)
            _record_password(args.state, args.name, password)
            print(f"{args.name}: new password {password}")
    except (UserListError, KeyError) as e:
        print(f"hub/accounts.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
