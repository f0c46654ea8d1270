"""Run many variants of a chapter notebook in one Python process, sharing what they share.

A Jupyter kernel per variant costs seconds of start-up; the typical-mistake tests
run dozens of variants per chapter, so they execute each variant's cells here
instead, as a kernel would (an error in one cell does not stop the next).

Variants of one chapter differ in one or two cells and agree on everything before:
the cells they share run once, and where the variants part, the process forks, one
child per distinct next cell, each child carrying on with its own variants. A child
starts in exactly the state a fresh run of its variants would have reached (the
same cells ran in the same order, random streams included), so its verdicts are a
fresh run's; and since each group of variants lives in its own process, nothing one
variant does (a patched module, a leaked global, even a crash) reaches another.

CUDA does not survive a fork (nor do autograd's device threads): once the shared
cells have used a GPU (chapter 05 on a machine that has one), each group starts a
fresh runner of its own instead, which runs its variants from the first cell.
Slower, and the same verdicts.

Input (stdin): {"cwd": folder, "variants": [[cell source, ...], ...]}
Output (stdout): one JSON list per variant: [[cell index, exception name, message], ...]

`--serve` keeps one process per chapter for all of a test worker's runs of it (tests/support/notebook_runs.py):
the cells before the chapter's first exercise (its imports and given code, the same in every variant, a mutant,
an alternative or the solution under many seeds) run once, and each request is served by a child forked from
that state, as a fresh runner would have run it from the first cell. Requests and replies are a JSON line each:
first {"cwd": folder, "prefix": [cell source, ...]}, answered {"ready": true}; then {"variants": [...]} or
{"sweep": {"cells", "test_cells", "seeds"}} (tests/support/seed_sweep.py), answered {"result": ...}, or
{"refused": why} for a request that does not start with the prefix or cannot be forked (the caller then runs
it in a fresh process).
"""
from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import signal
import subprocess
import sys

VARIANT_TIMEOUT_S = 120


class VariantTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise VariantTimeout(f"still running after {VARIANT_TIMEOUT_S} s")


def _run_cell(index: int, source: str, namespace: dict) -> list | None:
    """None, or [index, exception name, message] if the cell raised."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, f"<cell {index}>", "exec"), namespace)
    except VariantTimeout:
        raise
    except Exception as e:  # noqa: BLE001 - every error is a verdict, as in a kernel
        return [index, type(e).__name__, str(e)]
    return None


def _in_child(work) -> dict:
    """work() in a forked child; its result ({variant: errors}) read back through a pipe. A child that
    dies gives None."""
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        status = 0
        try:
            data = json.dumps(work()).encode()
            while data:
                data = data[os.write(write_end, data):]
        except BaseException:  # noqa: BLE001 - the parent reads a missing result as a death
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 1 << 16):
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    try:
        return {int(k): v for k, v in json.loads(b"".join(chunks)).items()} if status == 0 else None
    except ValueError:
        return None


def _run_group(variants: dict[int, list[str]], start: int, namespace: dict, errors: list) -> dict:
    """{variant: errors} for `variants` ({number: cells}), which all ran cells[:start] in this process,
    with `errors` their errors so far. Runs the cells they share here, then forks where they part."""
    signal.alarm(VARIANT_TIMEOUT_S)
    try:
        index = start
        while True:
            ended = [v for v, cells in variants.items() if len(cells) <= index]
            going = {v: cells for v, cells in variants.items() if len(cells) > index}
            if ended and going:  # some stop here: they keep what they have, the rest go on
                done = {v: list(errors) for v in ended}
                return done | _run_group(going, index, namespace, errors)
            if not going:
                return {v: list(errors) for v in ended}
            parts: dict[str, list[int]] = {}
            for v, cells in going.items():
                parts.setdefault(cells[index], []).append(v)
            if len(parts) > 1:
                break
            error = _run_cell(index, next(iter(parts)), namespace)
            if error:
                errors = errors + [error]
            index += 1
    except VariantTimeout as e:
        return {v: errors + [[index, "TimeoutError", str(e)]] for v in variants}
    finally:
        signal.alarm(0)
    # What the cells so far made stays for every child: frozen, the collector no longer walks it in each child
    # (a child's gc.collect() then costs what that child made, and its pages stay shared with this process).
    gc.freeze()
    results = {}
    for group in parts.values():  # each in a child of its own, from the state the cells before left
        members = {v: variants[v] for v in group}
        if _fork_is_safe():
            found = _in_child(lambda: _run_group(members, index, namespace, errors))
        else:
            found = _in_fresh_runner(members)
        if found is None:  # a crash (os._exit, a segfault) costs its own group only
            found = {v: errors + [[index, "KernelDied", "the variant's process died"]] for v in group}
        results |= found
    return results


def _fork_is_safe() -> bool:
    """False once this process has used CUDA: a forked child could not use the GPU again."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    return cuda is None or not cuda.is_initialized()


def _in_fresh_runner(members: dict[int, list[str]]) -> dict | None:
    """{variant: errors} for `members`, each run from its first cell by a new process of this runner;
    None if that process dies or gives no answer."""
    spec = {"cwd": os.getcwd(), "variants": list(members.values())}
    try:
        done = subprocess.run([sys.executable, os.path.abspath(__file__)], input=json.dumps(spec),
                              capture_output=True, text=True, timeout=VARIANT_TIMEOUT_S * 4)
        found = json.loads(done.stdout) if done.returncode == 0 else None
    except (subprocess.TimeoutExpired, ValueError):
        found = None
    return None if found is None else dict(zip(members, found))


def run_variants(variants: list[list[str]]) -> list[list]:
    """Each variant's errors, in order."""
    signal.signal(signal.SIGALRM, _alarm)
    found = _in_child(lambda: _run_group(dict(enumerate(variants)), 0, {"__name__": "__main__"}, []))
    if found is None:
        raise RuntimeError("the variant runner died before the variants parted (a cell they all share "
                           "ended the process)")
    return [found[v] for v in range(len(variants))]


def _enter(cwd: str) -> None:
    """Work where a kernel of the chapter would: in its folder, its packages importable."""
    os.chdir(cwd)
    sys.path.insert(0, cwd)
    os.environ["COURSE_CHECK_RUNNING"] = "1"  # a check() in a cell must not start another check
    # Forked children must not inherit a busy OpenMP pool (libgomp does not survive fork); one
    # thread is also what the grading sandbox gives each kernel. Set before the cells import torch or
    # NumPy, which size their pools from these when they load (importing torch here instead would cost
    # every runner seconds, runners whose cells never use it included).
    for threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[threads] = "1"


def _stream_watch() -> list[bool]:
    """[flag] set when a cell draws from course.inputs or reads its seed (its audit event); a prefix that did
    could not be shared by requests whose stream starts at another seed."""
    asked = [False]

    def hook(event, args):
        if event == "course.inputs" and args[0] not in ("drawn", "repeating"):
            asked[0] = True

    sys.addaudithook(hook)
    return asked


def _serve_one(request: dict, prefix: list[str], namespace: dict, errors: list) -> dict:
    """The reply to one request, computed in a child forked from the prefix's state."""
    if "sweep" in request:
        import seed_sweep
        spec = request["sweep"]
        if spec["cells"][: len(prefix)] != prefix:
            return {"refused": "the notebook does not start with the prefix"}
        test_cells = {int(i): e for i, e in spec["test_cells"].items()}
        found = _in_child(lambda: {0: seed_sweep.sweep(spec["cells"], test_cells, spec["seeds"], namespace,
                                                       start=len(prefix), setup=errors)})
        return {"refused": "the sweep's process died"} if found is None else {"result": found[0]}
    variants = request["variants"]
    if any(cells[: len(prefix)] != prefix for cells in variants):
        return {"refused": "a variant does not start with the prefix"}
    found = _in_child(lambda: _run_group(dict(enumerate(variants)), len(prefix), namespace, errors))
    if found is None:
        return {"refused": "the runner died before the variants parted"}
    return {"result": [found[v] for v in range(len(variants))]}


def _import_what_torch_imports_late() -> None:
    """torch imports its compiler (torch._dynamo, 1.6 s) when a process makes its first optimizer: every child
    forked before a chapter's first optimizer would pay that again. Imported once here, as the grading sandbox's
    warm-up imports it; an import changes no variant's verdict."""
    if "torch" in sys.modules:
        try:
            import torch._dynamo  # noqa: F401
        except Exception:  # noqa: BLE001  (a torch without it: the children import what they need)
            pass


def serve() -> None:
    """`--serve`: the module docstring's protocol, until stdin closes."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what a cell prints must not land in the protocol
    spec = json.loads(sys.stdin.readline())
    _enter(spec["cwd"])
    signal.signal(signal.SIGALRM, _alarm)
    prefix, namespace, asked = spec["prefix"], {"__name__": "__main__"}, _stream_watch()
    signal.alarm(VARIANT_TIMEOUT_S)
    errors = [e for i, source in enumerate(prefix) if (e := _run_cell(i, source, namespace))]
    signal.alarm(0)
    _import_what_torch_imports_late()
    gc.freeze()
    refused = ("the prefix drew from course.inputs" if asked[0] else
               "the prefix used CUDA, which a fork cannot use again" if not _fork_is_safe() else None)
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        reply = {"refused": refused} if refused else _serve_one(request, prefix, namespace, errors)
        out.write(json.dumps(reply) + "\n")


def main() -> None:
    spec = json.load(sys.stdin)
    _enter(spec["cwd"])
    sys.stdout.write(json.dumps(run_variants(spec["variants"])))


if __name__ == "__main__":
    serve() if sys.argv[1:] == ["--serve"] else main()
