"""The bubblewrap sandbox a submission is graded in, seen from the grader's side.

One `Sandbox` per grader worker: a bwrap container with no network, its own
process tree, a tmpfs root holding only the Python installation, the virtual
environment and the `course` and `autograder` packages (read-only), and a small
tmpfs to work in. The course repository's source/, the gradebook, the hidden
tests on disk and the other submissions are simply not in it. Inside runs the
supervisor (autograder/sandbox/supervisor.py), warm, which grades one job at a time.

Run as root (CI, a course server), each kernel also gets a uid of its own, so
the process limit counts only its processes and the supervisor can kill every
one of them between submissions. As an ordinary user the sandbox is restarted
after every submission instead, which is slower but leaves nothing behind.
"""
from __future__ import annotations

import base64
import importlib.util
import json
import os
import random
import secrets
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

GIB = 1024 ** 3


class SandboxError(RuntimeError):
    """The sandbox cannot run here; the message says what to install or change."""


@dataclass
class Limits:
    """Per-submission limits. Every one is a test in tests/grading/test_grading_sandbox.py."""
    cell_timeout_s: float = 120.0
    submission_timeout_s: float = 600.0
    memory_bytes: int = 4 * GIB  # address space of each kernel process (torch alone maps ~1 GiB)
    processes: int = 64  # processes and threads of the kernel's uid
    file_bytes: int = 256 * 1024 ** 2  # largest file the kernel may write
    disk_bytes: int = 512 * 1024 ** 2  # its working folder, a tmpfs
    output_chars: int = 100_000  # per cell and stream; the rest is counted, not kept
    max_restarts: int = 3  # fresh kernels after a death or a timeout


def bwrap() -> str:
    """The bubblewrap executable; SandboxError saying how to install it if there is none."""
    path = shutil.which("bwrap")
    if not path:
        raise SandboxError("bubblewrap is not installed, and the grader runs student code only inside it. "
                           "Install it with `apt-get install bubblewrap` (scripts/system-packages.sh does this).")
    return path


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SandboxError(f"cannot find the {name} package to show it to the sandbox")
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def _gpu_devices() -> list[str]:
    return sorted(str(p) for p in Path("/dev").glob("nvidia*"))


def grader_cache_dir(name: str, variable: str) -> Path:
    """A folder of the grader's cache on this machine: $`variable`, else ~/.cache/picotorch-grader/`name`
    (RuntimeError where there is no home)."""
    env = os.environ.get(variable)
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "picotorch-grader" / name


def default_builds_dir() -> Path:
    """Where a grader keeps the CUDA-emulator builds of its sandboxes' reference runs (kernel_cache.py):
    $COURSE_GRADER_BUILDS, else ~/.cache/picotorch-grader/cuda-builds."""
    return grader_cache_dir("cuda-builds", "COURSE_GRADER_BUILDS")


def keep_builds(folder: Path, builds: dict) -> int:
    """Write the builds a supervisor handed over ({name: base64}) into `folder`, each whole or not at all;
    how many were new. A name that is not a build's is ignored."""
    from autograder.sandbox.kernel_cache import build_mode, is_build_name
    kept = 0
    for name, data in builds.items():
        if not (isinstance(name, str) and isinstance(data, str) and is_build_name(name)):
            continue
        target = folder / name
        if target.exists():
            continue
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        tmp.write_bytes(base64.b64decode(data))
        os.chmod(tmp, build_mode(name))
        os.replace(tmp, target)
        kept += 1
    return kept


def command(staging: Path, limits: Limits, root_mode: bool, builds: Path | None = None) -> list[str]:
    """The bwrap command line: what the sandbox can see, and nothing else."""
    args = [bwrap(), "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", "grading"]
    if root_mode:
        args += ["--cap-drop", "ALL"]
        for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER"):
            args += ["--cap-add", cap]
    else:
        args += ["--unshare-user", "--disable-userns"]
    args += ["--tmpfs", "/", "--ro-bind", "/usr", "/usr", "--dev", "/dev",
             "--size", str(64 * 1024 ** 2), "--tmpfs", "/dev/shm",
             "--size", str(64 * 1024 ** 2), "--tmpfs", "/tmp"]
    for link in ("bin", "lib", "lib64", "sbin"):
        target = Path("/") / link
        if target.is_symlink():
            args += ["--symlink", os.readlink(target), f"/{link}"]
        elif target.is_dir():
            args += ["--ro-bind", str(target), f"/{link}"]
    for extra in ("/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf"):
        if Path(extra).exists():
            args += ["--ro-bind", extra, extra]
    # /proc stays unmounted but for the CPU's description: torch's cpuinfo reads it before its first float32 <->
    # float16 conversion, which raises "Failed to initialize cpuinfo!" without it (chapter 08's float16).
    args += ["--ro-bind-try", "/proc/cpuinfo", "/proc/cpuinfo"]
    shown = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), Path(sys.prefix),
             _package_dir("course"), _package_dir("autograder")}
    executable = Path(sys.executable)
    made: set[Path] = {Path("/"), Path("/usr")}
    for path in sorted(shown, key=lambda p: len(p.parts)):
        for parent in reversed(path.parents):  # bwrap would make them 0700: unreachable for the kernel's uid
            if parent not in made and not any(parent.is_relative_to(p) for p in shown if p != path):
                args += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        args += ["--ro-bind", str(path), str(path)]
    if not any(executable.resolve().is_relative_to(p) for p in shown):
        args += ["--ro-bind", str(executable.resolve()), str(executable.resolve())]
    for device in _gpu_devices():  # a GPU is shown only where there is one: never faked
        args += ["--dev-bind", device, device]
    args += ["--perms", "0755", "--dir", "/grading", "--ro-bind", str(staging), "/grading/in"]
    if builds is not None and builds.is_dir():
        args += ["--ro-bind", str(builds), "/grading/cuda-trusted"]
    args += [
             "--size", str(limits.disk_bytes), "--perms", "0755", "--tmpfs", "/grading/work",
             "--chdir", "/grading", "--clearenv",
             "--setenv", "PATH", f"{executable.parent}:/usr/bin:/bin",
             "--setenv", "OMP_NUM_THREADS", "1", "--setenv", "MKL_NUM_THREADS", "1",
             "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--setenv", "LANG", "C.UTF-8",
             "--", str(executable), "-I", "-m", "autograder.sandbox.supervisor"]
    return args


class Sandbox:
    """A warm supervisor in bwrap, restarted when it stops answering."""

    def __init__(self, preload: list[str] | None = None, limits: Limits | None = None,
                 warmup: list[str] | None = None, warmup_files: dict[str, Path] | None = None,
                 staging: Path | None = None, builds: Path | None = None):
        self.preload = preload or []
        self.warmup = warmup or []
        self.warmup_files = warmup_files or {}
        self.limits = limits or Limits()
        self.root_mode = os.geteuid() == 0
        # what the sandbox reads (/grading/in). Given a folder in its owner's working folder, it goes when that
        # folder goes, even when the owner is killed before it can clean up (a Dask worker killed mid-grading)
        if staging is None:
            staging = Path(tempfile.mkdtemp(prefix="course-sandbox-"))
        staging.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.staging = staging
        # the reference runs' compiled kernels, kept between sandboxes (kernel_cache.py); None: none kept
        try:
            self.builds = default_builds_dir() if builds is None else builds
            self.builds.mkdir(mode=0o700, parents=True, exist_ok=True)
        except (OSError, RuntimeError):  # no home, or a read-only one: each sandbox compiles them, as before
            self.builds = None
        self.proc: subprocess.Popen | None = None
        self.handed_over: dict = {}  # the builds the last start's reference run made (name: base64)
        self.uid: int | None = None
        self.jobs = 0

    def _stage(self, files: dict[str, Path]) -> None:
        # empty the folder, never replace it: the sandbox's bind mount holds on to this very inode
        self.staging.mkdir(exist_ok=True)
        for entry in self.staging.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        for rel, src in files.items():
            target = self.staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target)

    def _start(self) -> None:
        self._stage(self.warmup_files)
        if self.warmup:
            (self.staging / ".warmup.json").write_text(json.dumps(self.warmup))
        env = dict(os.environ, COURSE_PRELOAD=json.dumps(self.preload))
        self.log = tempfile.TemporaryFile()
        cmd = command(self.staging, self.limits, self.root_mode, self.builds)
        # bwrap's --clearenv drops COURSE_PRELOAD: hand it over explicitly
        at = cmd.index("--clearenv") + 1
        cmd[at:at] = ["--setenv", "COURSE_PRELOAD", env["COURSE_PRELOAD"]]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     env=env, start_new_session=True)
        ready = self._read_line(deadline=time.monotonic() + 300)
        if not ready or not ready.get("ready"):
            self.close()
            raise SandboxError("the grading sandbox did not start: " + self._log_tail())
        self.handed_over = ready.get("builds") if isinstance(ready.get("builds"), dict) else {}
        if self.builds is not None:
            try:
                keep_builds(self.builds, self.handed_over)
            except (OSError, ValueError):  # a full disk costs the next sandbox its compile time, nothing else
                pass
        # a fresh uid per sandbox: its process limit and its kill-all reach no one else's processes
        self.uid = random.randrange(200_000, 2 ** 30) if self.root_mode else None

    def _log_tail(self) -> str:
        self.log.seek(0)
        text = self.log.read().decode(errors="replace").strip()
        return text[-2000:] or "no output (is bubblewrap allowed to create namespaces here?)"

    def _read_line(self, deadline: float) -> dict | None:
        out = self.proc.stdout
        buffer = b""
        while not buffer.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([out], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(out.fileno(), 1 << 20)
                if not chunk:
                    return None
                buffer += chunk
        return json.loads(buffer)

    def run(self, cells: list[dict], files: dict[str, Path], seed: int) -> dict:
        """Run `cells` ({index, kind: student|given|test, source}) with `files` in the working
        folder. Returns the supervisor's result, or one that says why there is none."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self._stage(files)
        self.jobs += 1
        # secret: what the kernel derives every test cell's random inputs from (course.inputs); no
        # notebook code sees it, so no answer cell can know the inputs a test will draw
        job = {"cells": cells, "limits": asdict(self.limits), "seed": seed, "secret": secrets.token_hex(16),
               "uid": self.uid,
               "inputs": "/grading/in", "workdir": f"/grading/work/job{self.jobs}"}
        try:
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.flush()
            reply = self._read_line(deadline=time.monotonic() + self.limits.submission_timeout_s + 60)
        except (BrokenPipeError, ValueError):
            reply = None
        if not self.root_mode:
            self.close()  # as an ordinary user, only a fresh sandbox is sure to hold none of this job
        if reply is None:
            self.close()
            return {"error": "the grading sandbox stopped answering; it has been restarted"}
        return reply

    def close(self) -> None:
        """Kill the sandbox's process group and close its pipes."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                stream.close()
            self.proc = None

    def __del__(self):
        try:
            self.close()
            shutil.rmtree(self.staging, ignore_errors=True)
        except Exception:
            pass
