"""The students' runtime: the course's environment, outside the repository.

The repository holds every chapter's solutions and hidden tests (source/, build/,
.git/), so `make hub` closes it to other users (chmod o-rwx). The hub's servers
run as the class's own Unix accounts, and so run from a copy of `.venv` made
here, in HUB_STATE/runtime: the same packages (hard links where the file system
allows, so it costs no space), the `course` package copied in place of its
editable link into the repository, the scripts' `#!` lines pointing at the
copy, and, when the Python that `.venv` was made from is itself out of other
users' reach (pyenv under /root), that Python too.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from settings import REPO

SKIP_IN_VENV = {"proxy"}  # configurable-http-proxy runs with the hub, as root
LAYOUT_VERSION = "3"  # bump when build() changes what it makes
# modules of hub/ the servers import (a server extension): copied into the runtime's src/
SERVER_MODULES = ["course_formgrader.py", "course_assignment_list.py"]
# JupyterLab's defaults for the class, the ones `make lab` uses too: no prompt to fetch Jupyter's news
LAB_OVERRIDES = json.loads((REPO / "jupyter" / "lab" / "settings" / "overrides.json").read_text())


def reachable_by_others(path: Path) -> bool:
    """Can a user who is neither owner nor group of `path` and its folders read and enter it?"""
    path = path.resolve()
    for parent in [*reversed(path.parents), path]:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH or (parent == path and not mode & stat.S_IROTH):
            return False
    return True


def _link_tree(src: Path, dst: Path) -> None:
    """Copy `src` to `dst` as hard links (cp -al), or as a plain copy across file systems."""
    done = subprocess.run(["cp", "-al", str(src), str(dst)], capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(dst, ignore_errors=True)
        subprocess.run(["cp", "-a", str(src), str(dst)], check=True)


def _replace(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `path` anew: never in place, since it may be a hard link to the repository's file."""
    if path.exists() or path.is_symlink():
        path.unlink()
    path.write_text(text)
    os.chmod(path, mode)


def _fingerprint(venv: Path) -> str:
    """Changes when the packages or the course package change."""
    h = hashlib.sha256(LAYOUT_VERSION.encode())
    stamp = venv / ".course-installed"
    h.update(stamp.read_bytes() if stamp.is_file() else b"-")
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    h.update("\n".join(sorted(os.listdir(venv / "lib" / version / "site-packages"))).encode())
    for path in sorted([*(REPO / "course").rglob("*"), *(REPO / "hub" / name for name in SERVER_MODULES)]):
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def build(target: Path, venv: Path | None = None) -> dict:
    """(Re)make the runtime at `target` unless it is up to date; returns what the spawner needs to know."""
    venv = (venv or Path(sys.prefix)).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    state = target.parent
    fingerprint = _fingerprint(venv)
    if (target / "runtime.json").is_file():
        info = json.loads((target / "runtime.json").read_text())
        if info.get("fingerprint") == fingerprint:
            return info
    fresh = state / (target.name + ".new")
    shutil.rmtree(fresh, ignore_errors=True)
    _link_tree(venv, fresh)
    for name in SKIP_IN_VENV:
        shutil.rmtree(fresh / name, ignore_errors=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = fresh / "lib" / version / "site-packages"
    info: dict = {"python": str(target / "bin" / "python"), "ld_library_path": None, "fingerprint": fingerprint}

    base = Path(sys.base_prefix).resolve()
    interpreter = Path(os.path.realpath(venv / "bin" / "python"))
    if not reachable_by_others(interpreter):
        _link_tree(base, fresh / "python")
        shutil.rmtree(fresh / "python" / "lib" / version / "site-packages", ignore_errors=True)
        (fresh / "python" / "lib" / version / "site-packages").mkdir()
        inside = target / "python" / interpreter.relative_to(base)
        for link in (fresh / "bin").iterdir():
            if link.is_symlink() and os.path.realpath(link) == str(interpreter):
                link.unlink()
                link.symlink_to(inside)
        cfg = [line for line in (fresh / "pyvenv.cfg").read_text().splitlines()
               if not line.startswith(("home", "executable", "command"))]
        cfg += [f"home = {inside.parent}", f"executable = {inside}"]
        _replace(fresh / "pyvenv.cfg", "\n".join(cfg) + "\n")
        # its RUNPATH names the original lib/ folder; LD_LIBRARY_PATH comes first
        info["ld_library_path"] = str(target / "python" / "lib")

    for entry in site.glob("__editable__*"):  # the editable install points into the repository
        entry.unlink()
    shutil.copytree(REPO / "course", fresh / "src" / "course",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in SERVER_MODULES:
        shutil.copyfile(REPO / "hub" / name, fresh / "src" / name)
    _replace(site / "course_hub_runtime.pth", str(target / "src") + "\n")

    overrides = fresh / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    overrides.parent.mkdir(parents=True, exist_ok=True)
    current = json.loads(overrides.read_text()) if overrides.is_file() else {}
    _replace(overrides, json.dumps({**current, **LAB_OVERRIDES}, indent=2) + "\n")

    old_shebang = f"#!{venv}/bin/python".encode()
    for script in (fresh / "bin").iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        with open(script, "rb") as f:
            head = f.readline()
            rest = f.read()
        if head.startswith(old_shebang):
            text = (b"#!" + str(target).encode() + b"/bin/python" + head[len(old_shebang):] + rest).decode()
            _replace(script, text, 0o755)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(fresh / "src")], check=False)
    (fresh / "runtime.json").write_text(json.dumps(info, indent=2) + "\n")
    os.chmod(fresh, 0o755)

    old = state / (target.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    fresh.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return info


def environment(target: Path) -> dict[str, str]:
    """What a process needs in its environment to run from the runtime at `target`."""
    info = json.loads((target / "runtime.json").read_text())
    env = {"PATH": f"{target / 'bin'}:/usr/local/bin:/usr/bin:/bin"}
    if info.get("ld_library_path"):
        env["LD_LIBRARY_PATH"] = info["ld_library_path"]
    return env
