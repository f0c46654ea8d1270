"""Compiled CUDA-emulator kernels shared between the submissions one sandbox grades.

Chapter 05's notebooks compile CUDA C kernels for the CPU emulator
(course/cuda/emulator/build.py), 2-10 s a kernel with g++. Builds are cached by
the SHA-256 of everything that goes into them, but the student's kernel writes
its cache in its own working folder, which is wiped after every submission: each
student paid for every kernel, the given ones included.

Here the supervisor (the trusted process in the sandbox, autograder/sandbox/supervisor.py)
keeps one more cache, /grading/cuda-cache, on the sandbox's own filesystem. It
belongs to the supervisor's user; the kernel, which runs as another uid without
capabilities, can read it and never write it. The emulator looks there first
($COURSE_CUDA_SHARED_CACHE) and builds in its own cache on a miss.

It is filled only by trusted code:
  * the reference notebook the supervisor runs once at start-up compiles the
    chapter's given kernels and its solutions' straight into it;
  * a kernel the student compiled that was not there is compiled again after the
    submission, from the inputs the emulator recorded (request-KEY.json in the
    student's cache), by a child of the supervisor, once every process of the
    student's uid is dead and the working folder, /tmp and /dev/shm are wiped, so
    that nothing of the student's can touch the build. The key is computed again
    from those inputs: a forged request can only make an honest build of some
    source, never put another build under a key. Only then is it copied in.
So a class that shares the given kernels, or hands in the same kernel, compiles
it once per sandbox (one per grader worker), not once per student.

As an ordinary user (no uid of its own for the kernel) the sandbox is restarted
for every submission, and so is this cache: only the reference run's builds are
shared, within one submission.

Across sandboxes, the reference run's builds are kept by the grader itself (the host
side, autograder/sandbox/bubblewrap.py): the supervisor hands them over in its
"ready" line, before any submission has run, and the next sandbox gets them back,
read-only, at /grading/cuda-trusted, copied into its shared cache before its own
reference run, which then compiles nothing it compiled before. Only those builds
travel: never one made after a submission started. A grader restarted for every
submission (an ordinary user) thus compiles the given kernels once, not once per
student; the builds are the same files at the same path (/grading/cuda-cache, which
a kernel's link to its runtime names), and their names are the SHA-256 of what went
into them, the compiler's version included.
"""
from __future__ import annotations

import base64
import json
import os
import re
import resource
import shutil
import signal
import stat
import time

SHARED = "/grading/cuda-cache"
TRUSTED = "/grading/cuda-trusted"  # the grader's builds from earlier sandboxes (read-only)
STAGING = "/grading/cuda-staging"
MAX_REQUESTS = 16  # per submission
MAX_REQUEST_BYTES = 1 << 20
MAX_SHARED_BYTES = 512 * 1024 ** 2
MAX_HANDED_OVER_BYTES = 64 * 1024 ** 2  # in the ready line, base64
_BUILD_NAME = re.compile(r"^(kernel-(?:(?:bounds|races)-)?[0-9a-f]{32}(?:\.so)?|libpicotorch-cuda-emu-[0-9a-f]{32}\.so"
                         r"|emu-host-[0-9a-f]{32}"
                         r"|(?:runtime|harness)-(?:bounds|races)-[0-9a-f]{32}\.o)$")


def build_timeout_s() -> float:
    """The whole rebuild after a submission gets the emulator's compile-time limit (one compilation's),
    so that one student's template bomb holds the worker no longer than it held the student's notebook;
    a build that does not finish in time is simply not shared."""
    from course.cuda.emulator.build import compile_timeout_s
    return compile_timeout_s()


def is_build_name(name: str) -> bool:
    """Whether `name` is the name of an emulator build (what the shared cache and the grader's copy may hold)."""
    return bool(_BUILD_NAME.match(name))


def build_mode(name: str) -> int:
    """The mode a build is kept with: objects readable, libraries and programs also executable."""
    return 0o644 if name.endswith(".o") else 0o755


def enabled() -> bool:
    """Whether this process runs inside a grading sandbox (where the shared kernel cache is)."""
    return os.path.isdir("/grading")  # inside a grading sandbox


def prepare() -> set[str]:
    """Before the reference run: its builds go to the shared cache, which starts with the grader's builds of
    earlier sandboxes (their names are returned)."""
    if not enabled():
        return set()
    os.makedirs(SHARED, mode=0o755, exist_ok=True)
    os.chmod(SHARED, 0o755)
    os.environ["COURSE_CUDA_CACHE"] = SHARED
    return _seed_from_trusted()


def _seed_from_trusted() -> set[str]:
    """Copy the grader's builds of earlier sandboxes into the shared cache; the names copied."""
    seeded = set()
    if not os.path.isdir(TRUSTED):
        return seeded
    for name in os.listdir(TRUSTED):
        path = os.path.join(TRUSTED, name)
        if _BUILD_NAME.match(name) and stat.S_ISREG(os.lstat(path).st_mode):
            shutil.copyfile(path, os.path.join(SHARED, name))
            os.chmod(os.path.join(SHARED, name), build_mode(name))
            seeded.add(name)
    return seeded


def reference_builds(seeded: set[str]) -> dict[str, str]:
    """After the reference run, before any submission: {name: base64 of the file} of the builds it made that
    the grader did not hand in (`seeded`), for the grader to keep for its next sandboxes."""
    if not enabled():
        return {}
    handed, total = {}, 0
    for name in sorted(os.listdir(SHARED)):
        path = os.path.join(SHARED, name)
        if name in seeded or not _BUILD_NAME.match(name) or not stat.S_ISREG(os.lstat(path).st_mode):
            continue
        with open(path, "rb") as f:
            data = f.read()
        total += len(data)
        if total > MAX_HANDED_OVER_BYTES:
            break
        handed[name] = base64.b64encode(data).decode("ascii")
    return handed


_HEADER_FOLDER = re.compile(r"^pch-[0-9a-f]{32}$")  # the emulator's precompiled header (build.py), one file inside


def _keep_header_folder(path: str) -> bool:
    """Whether `path` is a folder of the reference run's precompiled header: kept for the kernels, read-only."""
    gch = os.path.join(path, "cuda_emu.h.gch")
    if not (_HEADER_FOLDER.match(os.path.basename(path)) and stat.S_ISDIR(os.lstat(path).st_mode)
            and os.listdir(path) == ["cuda_emu.h.gch"] and stat.S_ISREG(os.lstat(gch).st_mode)):
        return False
    os.chmod(path, 0o755)
    os.chmod(gch, 0o644)
    return True


def after_warmup() -> None:
    """Before any kernel: the shared cache is read-only to it, its own cache is its working folder's."""
    if not enabled():
        return
    os.environ.pop("COURSE_CUDA_CACHE", None)
    os.environ["COURSE_CUDA_SHARED_CACHE"] = SHARED
    for name in os.listdir(SHARED):  # the emulator writes its builds 0600 (mkstemp): let the kernel read them
        path = os.path.join(SHARED, name)
        if _keep_header_folder(path):
            continue
        if not _BUILD_NAME.match(name) or not stat.S_ISREG(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.unlink(path)
            continue
        os.chmod(path, build_mode(name))


def _read_untrusted(path: str) -> dict | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_REQUEST_BYTES:
            return None
        data = os.read(fd, MAX_REQUEST_BYTES + 1)
    finally:
        os.close(fd)
    try:
        request = json.loads(data)
    except ValueError:
        return None
    if not isinstance(request, dict):
        return None
    source, names, options, mode = (request.get(k) for k in ("source", "name_expressions", "options", "mode"))
    if not (isinstance(source, str) and isinstance(names, list) and all(isinstance(n, str) for n in names)
            and isinstance(options, list) and all(isinstance(o, str) for o in options) and mode in
            ("count", "bounds", "races")):
        return None
    return {"source": source, "name_expressions": names, "options": options, "mode": mode}


def collect(job: dict) -> list[dict]:
    """The builds the student's kernel asked for that the shared cache lacked (read before the wipe)."""
    if not enabled() or job.get("uid") is None:
        return []
    work = os.path.realpath(job["workdir"])
    folder = os.path.join(work, ".cache", "picotorch-cuda")
    if not os.path.realpath(folder).startswith(work + os.sep) or not os.path.isdir(folder):
        return []
    requests = []
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith("request-") and n.endswith(".json"))
    except OSError:
        return []
    for name in names[:MAX_REQUESTS]:
        request = _read_untrusted(os.path.join(folder, name))
        if request and request not in requests:
            requests.append(request)
    return requests


def _shared_bytes() -> int:
    total = 0
    for name in os.listdir(SHARED):
        try:
            total += os.lstat(os.path.join(SHARED, name)).st_size
        except OSError:
            pass
    return total


def _build_child(requests: list[dict], uid: int) -> None:
    os.setsid()
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    for name, value in (("RLIMIT_AS", 8 * 1024 ** 3), ("RLIMIT_FSIZE", 256 * 1024 ** 2), ("RLIMIT_CORE", 0),
                        ("RLIMIT_CPU", int(build_timeout_s()) + 1)):
        resource.setrlimit(getattr(resource, name), (value, value))
    os.environ["COURSE_CUDA_CACHE"] = STAGING
    os.environ["COURSE_CUDA_SHARED_CACHE"] = SHARED
    os.environ["TMPDIR"] = STAGING
    os.environ["HOME"] = STAGING
    os.chdir(STAGING)
    from course.cuda.emulator import build
    for r in requests:
        try:
            made = build.build(r["source"], r["name_expressions"], r["options"], r["mode"])
        except BaseException:  # a kernel that does not compile is the student's to see, not ours
            continue
        if made.runtime is not None and str(made.runtime.parent) != SHARED:
            os.unlink(made.path)  # it would look for its runtime here, in a folder about to go


def share(requests: list[dict], uid: int | None) -> int:
    """Build `requests` as trusted code and copy the results into the shared cache; how many files.

    Runs after the submission: its processes are dead and its files wiped."""
    if not requests or uid is None or not enabled() or _shared_bytes() > MAX_SHARED_BYTES:
        return 0
    shutil.rmtree(STAGING, ignore_errors=True)
    os.makedirs(STAGING, mode=0o700)
    os.chown(STAGING, uid, uid)
    pid = os.fork()
    if pid == 0:
        try:
            _build_child(requests, uid)
        finally:
            os._exit(0)
    deadline = time.monotonic() + build_timeout_s()
    while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)  # the compilers it may have left (it made itself a group)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    copied = 0
    for name in os.listdir(STAGING):
        path = os.path.join(STAGING, name)
        target = os.path.join(SHARED, name)
        if not _BUILD_NAME.match(name) or os.path.exists(target):
            continue
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            continue
        tmp = os.path.join(SHARED, f".{name}.{os.getpid()}.tmp")
        shutil.copyfile(path, tmp)  # a copy: the supervisor's own file, not the builder's
        os.chmod(tmp, build_mode(name))
        os.replace(tmp, target)
        copied += 1
    shutil.rmtree(STAGING, ignore_errors=True)
    return copied
