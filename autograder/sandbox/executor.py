"""The executor: the process that runs one student's notebook, cell by cell, inside the sandbox.

It is forked by the supervisor (autograder/sandbox/supervisor.py) from a warm
interpreter, drops to an unprivileged uid with resource limits, and then obeys
one message at a time: RUN(cell) -> DONE(cell). It is *not* an IPython kernel:
cells are compiled and executed here, so there are no input transformers,
`pre_run_cell` hooks or custom exception handlers through which a cell could
rewrite, skip or excuse the cells after it; each cell's code arrives only when
it is its turn, so no earlier cell can see or alter a later one.

Between cells the kernel runs the grader's own code, and that stretch is
guarded: signals are blocked, the garbage collector is paused, every value the
student displaced is kept alive (no finalizer runs), and the snapshot of the
loaded modules is restored before anything else (autograder/sandbox/integrity.py). The
DONE message carries the nonce that came with RUN, so a message a student's code
writes on the channel itself is recognised as forged.
"""
from __future__ import annotations

import ast
import builtins
import gc
import json
import marshal
import mmap
import operator
import os
import resource
import signal
import socket
import sys
import tempfile
import time
import types

from autograder.sandbox.integrity import (TOOLS, SandboxViolation, Snapshot, critical, exact_str, install_guard,
                                         tag_reader, version_tags)

TEXT_LIMIT_DEFAULT = 100_000
# Address space the kernel keeps back from the student's code for its own work between cells and for
# the cells after one that filled the memory limit (a list that grows until MemoryError, kept in a
# global): without it the grader's next step fails for want of a few bytes and the kernel dies, and
# every replay after a restart fills the memory again. The student's code can use the limit less this.
MEMORY_RESERVE_BYTES = 64 * 1024 ** 2


class _Capture:
    """A text stream that keeps the first `limit` characters and counts the rest, in `parts` and
    `counts` ([kept, dropped]): lists the kernel made and reads itself, checking every item's type,
    so that nothing a student does to this object (its attributes, its class) is asked anything."""

    def __init__(self, limit: int, parts: list | None = None, counts: list | None = None):
        self.parts: list[str] = [] if parts is None else parts
        self.counts: list[int] = [0, 0] if counts is None else counts
        self.limit = limit

    @property
    def kept(self) -> int:
        return self.counts[0]

    @property
    def dropped(self) -> int:
        return self.counts[1]

    def write(self, text) -> int:
        if type(text) is not str:
            text = str(text)
            if type(text) is not str:
                return 0
        room = self.limit - self.counts[0]
        if room > 0:
            self.parts.append(text[:room])
            self.counts[0] += min(room, len(text))
        self.counts[1] += max(0, len(text) - max(room, 0))
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:
        return "utf-8"

    def text(self) -> str:
        return "".join(p for p in self.parts if type(p) is str)


def _memory_reserve():
    """(take, give_back, room): take() maps MEMORY_RESERVE_BYTES of untouched address space, or
    returns None when there is not that much left under the memory limit; room(n) says whether n
    more bytes could be mapped now. Bound to mmap as imported here, before any student code runs."""
    new, close, private = mmap.mmap, mmap.mmap.close, mmap.MAP_PRIVATE
    size = MEMORY_RESERVE_BYTES

    def take(n=size):
        try:
            return new(-1, n, flags=private)
        except (OSError, MemoryError, ValueError):
            return None

    def room(n) -> bool:
        probe = take(n)
        if probe is None:
            return False
        close(probe)
        return True

    return take, close, room


def _limits(job: dict) -> None:
    limits = job["limits"]
    for name, value in (("RLIMIT_AS", limits["memory_bytes"]), ("RLIMIT_NPROC", limits["processes"]),
                        ("RLIMIT_FSIZE", limits["file_bytes"]), ("RLIMIT_CORE", 0),
                        ("RLIMIT_NOFILE", 256), ("RLIMIT_CPU", int(limits["submission_timeout_s"]) + 5)):
        resource.setrlimit(getattr(resource, name), (value, value))


def _drop_privileges(uid: int | None) -> None:
    if uid is not None and os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    try:  # not dumpable: no other process of this uid may ptrace it or read its memory
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass


def _split_last_expression(source: str, filename: str, verify=None, every_statement: bool = True):
    """(body code, last-expression code or None), as IPython displays a cell's last value.
    With `verify` (a callable), a call to it is put before every statement, or only at the start of
    every loop's body (see _with_checks)."""
    tree = ast.parse(source, filename=filename, mode="exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    if verify is not None:
        tree = _with_checks(tree, every_statement)
    body = compile(tree, filename, "exec", dont_inherit=True)
    last = compile(last, filename, "eval", dont_inherit=True) if last is not None else None
    if verify is not None:
        body = _bind_mark(body, verify)
    return body, last


VERIFY_MARK = "<course.verify>"  # a constant the compiled test code holds, then replaced by sys.audit itself


def _with_checks(tree: ast.Module, every_statement: bool = True) -> ast.Module:
    """`tree` with `VERIFY_MARK.__call__("course.verify", "statement")` before each of its statements, at every
    depth (loop bodies, branches, the functions a test defines): once compiled and bound
    (_bind_mark), each is a call of sys.audit that no name lookup reaches, so no rebinding or
    patch can skip it, and the audit hook checks the tests' tools there (integrity.install_guard)."""

    def check(at):
        call = ast.Expr(ast.Call(func=ast.Attribute(value=ast.Constant(VERIFY_MARK), attr="__call__", ctx=ast.Load()),
                                 args=[ast.Constant("course.verify"), ast.Constant("statement")], keywords=[]))
        return ast.copy_location(call, at)

    for node in ast.walk(tree):
        if not every_statement:  # the given cells' helpers: once per round of each of their loops
            if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) and node.body:
                node.body.insert(0, check(node.body[0]))
            continue
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and all(isinstance(st, ast.stmt) for st in stmts):
                checked = []
                for st in stmts:
                    if not (isinstance(st, ast.ImportFrom) and st.module == "__future__"):
                        checked.append(check(st))
                    checked.append(st)
                setattr(node, field, checked)
    return ast.fix_missing_locations(tree)


def _bind_mark(code: types.CodeType, value) -> types.CodeType:
    """`code` (and the code nested in it) with the constant VERIFY_MARK replaced by `value`."""
    consts = tuple(value if type(c) is str and c == VERIFY_MARK
                   else _bind_mark(c, value) if type(c) is types.CodeType else c for c in code.co_consts)
    return code.replace(co_consts=consts)


def _bound_names(source: str) -> set[str]:
    """Names a cell binds at module level: the ones the grader treats as the cell's own."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
              ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)

    def visit(node) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            return
        if isinstance(node, scopes):
            if not isinstance(node, ast.Lambda):  # a comprehension's := binds in the cell
                names.update(n.target.id for n in ast.walk(node) if isinstance(n, ast.NamedExpr))
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif type(node).__name__ in ("MatchAs", "MatchStar", "MatchMapping"):  # case captures
            names.update(n for n in (getattr(node, "name", None), getattr(node, "rest", None)) if n)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _torch_quiet():
    """(enter, check, set_aside) for torch's extension points around a test cell: enter() switches
    off __torch_function__ (subclasses and modes alike) and returns what leaves it; check() names a
    mode left on a stack (function, dispatch or torch's own dispatch slots; torch's default-device
    mode aside) or the switch turned back on, or returns "" when torch is as the tests need it;
    set_aside() takes every mode off both stacks and returns a function that puts them back (modes
    an answer cell entered stay the student's, outside the tests). No-ops without torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return (lambda: None), (lambda: ""), (lambda: (lambda: None))
    C = torch._C  # its functions, captured now: torch._C's names can be rebound later, these cannot
    disable = C.DisableTorchFunction
    len_functions, function_at, pop_function, push_function = (
        C._len_torch_function_stack, C._get_function_stack_at, C._pop_torch_function_stack,
        C._push_on_torch_function_stack)
    len_dispatches, dispatch_at, pop_dispatch_stack, push_dispatch = (
        C._len_torch_dispatch_stack, C._get_dispatch_stack_at, C._pop_torch_dispatch_stack,
        C._push_on_torch_dispatch_stack)
    slots = [getattr(C._TorchDispatchModeKey, k) for k in ("FAKE", "PROXY", "FUNCTIONAL")
             if hasattr(getattr(C, "_TorchDispatchModeKey", None), k)]
    get_slot = getattr(C, "_get_dispatch_mode", None)
    all_disabled = getattr(C, "_is_torch_function_all_disabled", None)
    name_of = type.__dict__["__name__"].__get__
    try:
        from torch.utils._device import DeviceContext as default_device
    except ImportError:
        default_device = None

    def pop_dispatch():
        try:
            return pop_dispatch_stack(None)  # None: the user stack, not torch's own mode slots
        except TypeError:  # older torch: no argument
            return pop_dispatch_stack()

    def set_aside():
        functions = [pop_function() for _ in range(len_functions())]
        dispatches = [pop_dispatch() for _ in range(len_dispatches())]

        def put_back():
            for mode in reversed(functions):
                push_function(mode)
            for mode in reversed(dispatches):
                push_dispatch(mode)
        return put_back

    def enter():
        context = disable()
        context.__enter__()
        return context

    def check() -> str:
        for i in range(len_functions()):
            kind = type(function_at(i))
            if kind is not default_device:
                return f"torch's function mode stack (a {str.__str__(name_of(kind))})"
        if len_dispatches():
            return f"torch's dispatch mode stack (a {str.__str__(name_of(type(dispatch_at(0))))})"
        if get_slot is not None and any(get_slot(k) is not None for k in slots):
            return "torch's dispatch modes"
        if all_disabled is not None and not all_disabled():
            return "torch's __torch_function__ switch"
        return ""

    return enter, check, set_aside


def _quiet_signals() -> None:
    """No Python code of anyone's runs on a signal in the kernel. Cells run in a thread of their own
    (_cell_thread), and Python lets only the main thread install signal handlers, so a student's
    code cannot install one; the handlers Python itself installed are taken out here, the signals a
    process can be sent to stop, interrupt or kill it politely are ignored (the supervisor kills
    with SIGKILL), and the main thread, where the grader's own code runs, blocks every signal for
    good. Faults (SIGSEGV, SIGBUS, SIGFPE, ...) and the CPU limit keep their default: they end the
    kernel, and the supervisor restarts it."""
    for sig in signal.valid_signals():
        try:
            if callable(signal.getsignal(sig)):
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, TypeError):
            pass
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM",
                 "SIGPROF", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGPOLL", "SIGPWR"):
        if hasattr(signal, name):
            try:
                signal.signal(getattr(signal, name), signal.SIG_IGN)
            except (OSError, ValueError):
                pass


def _scrub(error) -> None:
    """Clear the frames of `error`'s tracebacks (and of the exceptions it was raised from), and drop
    the tracebacks: frames of the tests and their helpers must not outlive the cell where the
    collector could hand them out (gc.garbage). Clearing releases their locals, so the student's
    finalizers run here, in the cell's thread, under the guard. Registered with the audit hook as a
    consumer of frames: it reads tb_frame, and hands no frame to anyone."""
    todo, done = [error], 0
    while todo and done < 64:
        e = todo.pop()
        done += 1
        if not issubclass(type(e), BaseException):
            continue
        tb = BaseException.__dict__["__traceback__"].__get__(e)
        while tb is not None and type(tb) is types.TracebackType:
            try:
                tb.tb_frame.clear()
            except RuntimeError:  # still running: the cell thread's own frames
                pass
            tb = tb.tb_next
        BaseException.__dict__["__traceback__"].__set__(e, None)
        todo.append(BaseException.__dict__["__context__"].__get__(e))
        todo.append(BaseException.__dict__["__cause__"].__get__(e))


def _cell_thread(original_mask):
    """(allocate_lock, start, tools): start(task) runs a cell in a new thread whose frames lead back to
    nothing of the kernel's (a frame's f_back ends at the thread's own start) and returns a handle to
    join, or None when the thread sets task["sentinel"] (a lock released once its state is gone).
    Thread-local state of the student's (torch's modes; grad mode aside) ends with each cell."""
    import _thread
    import contextvars
    try:
        _thread.stack_size(32 * 1024 * 1024)  # as deep as the main thread may go
    except (ValueError, RuntimeError):
        pass
    torch = sys.modules.get("torch")
    set_grad = torch.set_grad_enabled if torch is not None else (lambda flag: None)
    is_grad = torch.is_grad_enabled if torch is not None else (lambda: True)
    set_sentinel = getattr(_thread, "_set_sentinel", None)
    joinable = getattr(_thread, "start_joinable_thread", None)
    tools = {"context": contextvars.copy_context(), "sigmask": signal.pthread_sigmask,
             "SIG_SETMASK": signal.SIG_SETMASK, "mask": original_mask, "set_sentinel": set_sentinel,
             "set_grad": set_grad, "is_grad": is_grad, "scrub": _scrub, "BaseException": BaseException}

    def start(task):
        if set_sentinel is not None or joinable is None:
            _thread.start_new_thread(_run_cell, (task,))
            return None
        return joinable(lambda: _run_cell(task))

    return _thread.allocate_lock, start, tools


def _run_cell(task: dict) -> None:
    """The cell's thread (see _cell_thread): wait for the go, run the cell, write the outcome in `task`.
    "ready" is released whatever happens, so that the kernel never waits on a thread that could not
    make its sentinel (no memory left): it finds task["sentinel"] unset and runs nothing."""
    try:
        if task["set_sentinel"] is not None:
            sentinel = task["set_sentinel"]()  # unlocked; this thread holds it until its state is deleted
            sentinel.acquire()
            task["sentinel"] = sentinel
            sentinel = None
    finally:
        task["ready"].release()
    task["go"].acquire()
    task["context"].run(_cell_body, task)


def _cell_body(t: dict) -> None:
    base = t["BaseException"]
    try:
        t["sigmask"](t["SIG_SETMASK"], t["mask"])  # this thread takes the signals (faults end the kernel)
        t["set_grad"](t["grad"])  # grad mode is per thread in torch: it goes on from cell to cell, as in Jupyter
        t["graveyard"].clear()  # finalizers of what the last restore displaced run here, under the guard
        ns, where = t["ns"], t["where"]
        try:
            compiled = t["compiled"]
            t["compiled"] = None
            if compiled is None:
                compiled = _split_last_expression(t["source"], t["filename"])
            elif type(compiled) is not tuple:
                raise compiled
            body, last = compiled
            compiled = None
            quiet = put_back = None
            if t["test"]:  # no __torch_function__ while tests run, and no mode an answer cell entered
                put_back = t["torch_set_aside"]()
                quiet = t["torch_quiet"]()
            try:
                exec(body, where)
                result = None
                if last is not None:
                    value = eval(last, where)
                    if value is not None:
                        result = repr(value)
                        if type(result) is not str:
                            result = "<repr did not return a str>"
                    value = None
                t["status"], t["ename"], t["evalue"], t["result"] = "ok", "", "", result
            finally:
                if quiet is not None:
                    t["torch_left"] = t["torch_check"]()  # a mode the student's code left on, or the switch back on
                    quiet.__exit__(None, None, None)
                    t["graveyard"].append(t["torch_set_aside"]())  # what the test left on is dropped
                    put_back()
        except base as e:  # SystemExit and KeyboardInterrupt too: a cell cannot end the run
            t["status"], t["ename"] = "error", type(e).__name__
            t["evalue"] = "<the exception's message could not be printed>"
            try:
                t["evalue"] = str(e)
            except base:
                pass
            try:
                t["scrub"](e)
            finally:
                e = None
        for key in [k for k in list(ns) if type(k) is not str]:  # keys with code in __hash__/__eq__
            t["graveyard"].append(ns.pop(key, None))
        t["grad"] = t["is_grad"]()
    except base:  # a hostile __hash__, a finalizer raising late
        t["status"], t["ename"], t["evalue"] = "error", "KeyboardInterrupt", "the cell was interrupted"


def _make_get_ipython(ns: dict):
    """Magics in student cells (`%timeit`) need an IPython shell; one is made on demand.
    The kernel never runs cells through it, so hooks registered on it have no effect."""
    shell = []

    def get_ipython():
        if not shell:
            from traitlets.config import Config
            from IPython.core.interactiveshell import InteractiveShell
            cfg = Config()
            cfg.HistoryManager.enabled = False
            shell.append(InteractiveShell.instance(config=cfg, user_ns=ns))
        return shell[0]

    return get_ipython


def _start_after_ending_strays(start_cell_thread, task, _kill=os.kill, _wait=os.waitpid, _sleep=time.sleep,
                               _sigkill=signal.SIGKILL, _nohang=os.WNOHANG):
    """Kill every other process of the kernel's throwaway uid, reap those that were the kernel's, and start the
    cell's thread again: (handle, None), or (None, the last error). A classic fork bomb's children fork on
    after its cell has ended, so that the process limit stays used up and no later cell could start; the
    supervisor kills them all at the end of the notebook, and this, when they are in the way, sooner.
    (The defaults are bound when the module loads, before any student code could replace os.kill.)"""
    failure = None
    for _attempt in range(20):  # orphans of the bomb are reaped by the sandbox's init, a moment later
        try:
            _kill(-1, _sigkill)  # every process this uid may signal, but not the caller (kill(2))
        except (ProcessLookupError, PermissionError):
            pass
        for _ in range(200):  # the kernel's own children turn zombies, which hold their slots until reaped
            try:
                if _wait(-1, _nohang) == (0, 0):
                    _sleep(0.001)  # killed, not yet dead
            except ChildProcessError:
                break
        try:
            return start_cell_thread(task), None
        except RuntimeError as e:
            failure = e
            _sleep(0.05)
    return None, failure


def _isolate(sock: socket.socket, job: dict, uid: int | None) -> tuple[int, bool]:
    """Cut the kernel's process off before anything of the notebook's runs: (the channel's fd, whether it runs as
    a throwaway uid, every other process of which is the student's). Guards: no file descriptor but the channel
    (stdio on /dev/null), the notebook's folder as home and working folder, a session of its own, the resource
    limits, an unprivileged uid, and no channel in any child it forks, under any fd number."""
    fd = sock.fileno()
    os.set_inheritable(fd, False)
    devnull = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(devnull, target)
    os.closerange(3, fd)
    os.closerange(fd + 1, 65536)
    workdir = job["workdir"]
    os.chdir(workdir)
    sys.path.insert(0, workdir)  # as in Jupyter: the notebook's folder is importable (picotorch/ lives there)
    os.environ.update({"HOME": workdir, "TMPDIR": os.path.join(workdir, ".tmp"), "COURSE_SEED": str(job["seed"]),
                       "COURSE_CHECK_RUNNING": "1", "MPLBACKEND": "Agg"})
    tempfile.tempdir = None  # tempfile cached the supervisor's TMPDIR, which the student's user cannot write
    os.setsid()
    _limits(job)
    _drop_privileges(uid)
    own_uid = uid is not None and os.getuid() == uid  # a throwaway uid: every other process of it is the student's
    channel = os.fstat(fd)

    def close_channel_in_child() -> None:  # a forked child gets no channel, under any fd number
        for other in range(256):
            try:
                st = os.fstat(other)
                if (st.st_dev, st.st_ino) == (channel.st_dev, channel.st_ino):
                    os.close(other)
            except OSError:
                pass

    os.register_at_fork(after_in_child=close_channel_in_child)
    return fd, own_uid


def _cell_seeds(job: dict, snapshot: Snapshot):
    """cell_seed(index): the seed of each test cell's inputs, fresh from the grader's secret, which leaves `job`
    here, before any notebook code could see it. First course.inputs is reseeded with the submission's own seed
    (the supervisor imported it once for all submissions) and the snapshot accepts that."""
    try:
        from course import inputs
        inputs.reseed(int(job["seed"]))
        snapshot.refresh("course.inputs")
    except (ImportError, AttributeError):
        pass
    secret = bytes.fromhex(job["secret"]) if job.get("secret") else os.urandom(16)
    job.pop("secret", None)
    from hashlib import blake2b

    def cell_seed(index: int, _hash=blake2b, _key=secret) -> int:
        return int.from_bytes(_hash(b"%d" % index, key=_key, digest_size=4).digest(), "big") & 0x7FFFFFFF

    return cell_seed


def _guard(job: dict, snapshot: Snapshot):
    """(set_untrusted, blocked, controls) of the audit hook, installed now (integrity.install_guard), with the
    submission's seed in its input stream. Guards which frames count as the grader's: the bottom of every cell's
    thread, and every frame under this call (the kernel's main, the supervisor's)."""
    set_untrusted, blocked, controls = install_guard(snapshot.code_ids, snapshot.object_ids)
    controls["reseed"](int(job["seed"]))
    controls["consumer"](_scrub)
    trust_code = controls["trust_code"]
    trust_code(_run_cell.__code__)  # the bottom of every cell's thread
    trust_code(_cell_body.__code__)
    frame = sys._getframe()
    while frame is not None:  # the kernel's own loop and the supervisor's frames under it
        trust_code(frame.f_code)
        frame = frame.f_back
    del frame
    return set_untrusted, blocked, controls


def _interpreters(name: str) -> bool:
    """A name Python itself keeps in a module's namespace (__warningregistry__, __annotations__)."""
    return name.startswith("__") and name.endswith("__") and name != "__builtins__"


def _namespaces():
    """(ns, gns, base): the student's namespace (a fresh __main__, with get_ipython), the grader's namespace and
    what the grader's starts from. The given and test cells run in gns, so their code (and the helpers they
    define, whose globals it is) sees the real builtins and the notebook's own names whatever the student's
    namespace holds (a module-level `range`, a replaced `__builtins__`). Before each of those cells it is
    rebuilt: `base` (the real builtins, taken now, before any student code), then the student's names that
    shadow none of them, then what the given and test cells bound (theirs win)."""
    main_module = types.ModuleType("__main__")
    ns = main_module.__dict__
    ns["__builtins__"] = builtins
    ns["get_ipython"] = _make_get_ipython(ns)
    sys.modules["__main__"] = main_module
    base = dict(builtins.__dict__)  # as the snapshot has them: no student code has run yet
    base.update({"__name__": "__main__", "__doc__": None, "__package__": None, "__loader__": None,
                 "__spec__": None, "__builtins__": builtins, "get_ipython": ns["get_ipython"]})
    return ns, {}, base


def _tool_watch(snapshot: Snapshot):
    """(watched, other_tables, table_changes): the tests' tools as the snapshot holds them (integrity.TOOLS), each
    with the check that names what changed in it: [(check, entry)] for the modules' namespaces, their classes
    (immutable ones aside) and their dict tables, whose version tags verify() reads; the list and set tables,
    compared every time. Every check compares by identity, with builtins captured now, and asks no object of
    the student's anything: they run with the guard's policy off, while a test runs."""
    immutable = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: such a class cannot be patched at all
    owners = dict(snapshot.owner)
    mods = tuple((n, d, k, v, frozenset(k)) for n, d, k, v in snapshot.modules if n in TOOLS)
    classes = tuple((w, cd, k, v, frozenset(k)) for w, klass, meta, bases, cd, k, v in snapshot.classes
                    if owners.get(w) in TOOLS and not klass.__flags__ & immutable)
    builtin_names = frozenset(k for k in builtins.__dict__ if not k.startswith("__"))
    is_, len_, all_, map_, zip_, type_, list_, callable_, id_ = (operator.is_, len, all, map, zip, type, list,
                                                                 callable, id)
    str_type, dict_type, list_type, missing = str, dict, list, object()
    dict_keys, dict_values, dict_get = dict.keys, dict.values, dict.get
    proxy_keys, proxy_values, proxy_get = types.MappingProxyType.keys, types.MappingProxyType.values, \
        types.MappingProxyType.get

    def module_changes(name, d, keys, values, key_set) -> list[str]:
        if len_(d) == len_(keys) and all_(map_(is_, values, dict_values(d))) and all_(map_(is_, keys, dict_keys(d))):
            return []
        present = list_(dict_keys(d))
        if not all_([type_(k) is str_type for k in present]):
            return [f"{name}[a key that is not a name]"]
        moved = [k for k, v in zip_(keys, values) if dict_get(d, k, missing) is not v]
        shadows = [k for k in present if k not in key_set and k in builtin_names]  # for the module's code
        return [f"{name}.{k}" for k in moved + shadows]

    def class_changes(where, cd, keys, values, key_set) -> list[str]:
        if len_(cd) == len_(keys) and all_(map_(is_, values, proxy_values(cd))):
            return []
        return ([f"{where}.{k}" for k, v in zip_(keys, values) if proxy_get(cd, k, missing) is not v]
                + [f"{where}.{k}" for k in list_(proxy_keys(cd)) if k not in key_set
                   and not k.startswith("__") and callable_(proxy_get(cd, k))])

    tables = tuple((w, c, items, keys) for w, c, items, keys in snapshot.containers if owners.get(w) in TOOLS)

    def table_changes(where, table, items, keys) -> list[str]:
        """A module-level table (torch's tolerances, compare's), edited in place: by identity. (Not by
        id() where it can be helped: each call of id() is an audit event, a call of the hook.)"""
        kind = type_(table)
        if kind is dict_type:
            same = len_(table) == len_(items) and all_(map_(is_, keys, dict_keys(table))) \
                and all_(map_(is_, [v for _, v in items], dict_values(table)))
        elif kind is list_type:
            same = len_(table) == len_(items) and all_(map_(is_, items, table))
        else:  # a set: unchanged, it iterates in the order it had; else its members are looked up by id
            same = len_(table) == len_(items) and (all_(map_(is_, items, table)) or all_(
                map_(table_ids[id_(table)].__contains__, map_(id_, table))))
        return [] if same else [where]

    # The tools' dict tables are watched by version tag like the namespaces (comparing each of them in full at
    # every statement of a test cell was a third of a submission's grading time); lists and sets have no tag.
    dict_tables = tuple(entry for entry in tables if type_(entry[1]) is dict)
    other_tables = tuple(entry for entry in tables if type_(entry[1]) is not dict)
    table_ids = {id_(entry[1]): frozenset(map(id, entry[2]))  # a set table's members, taken once
                 for entry in other_tables if type_(entry[1]) is not list}
    watched = [(module_changes, entry) for entry in mods] + [(class_changes, entry) for entry in classes] \
        + [(table_changes, entry) for entry in dict_tables]
    return watched, other_tables, table_changes


def _names_watch(gns: dict):
    """(changes, expect): expect(pairs) tells which (name, value) pairs of the grader's namespace `gns` a test
    starts with (() when none is running); changes() names those no longer there, by identity, running no code
    of the student's (every key is checked to be an exact str before any is looked up)."""
    expected: list = [(), ((), None)]  # the (name, value) pairs; then the values and a getter of the names
    is_, all_, map_, type_, list_ = operator.is_, all, map, type, list
    str_type, missing, itemgetter = str, object(), operator.itemgetter
    dict_keys, dict_get = dict.keys, dict.get
    from itertools import repeat

    def expect(pairs: tuple) -> None:
        expected[0] = pairs
        if pairs:  # the first name twice: an itemgetter of one name would not give a tuple
            names = [k for k, _ in pairs]
            expected[1] = (tuple(v for _, v in pairs) + (pairs[0][1],), itemgetter(*names, names[0]))

    def changes() -> list[str]:
        pairs = expected[0]
        if not pairs:
            return []
        if not all_(map_(is_, map_(type_, list_(dict_keys(gns))), repeat(str_type))):
            return ["the notebook's namespace (a key that is not a name)"]
        # Every key is an exact str now, so looking ours up runs no code of the student's; in C, as
        # this runs before every statement of a test (a loop of 100,000 rounds in chapter 02).
        values, look_up = expected[1]
        try:
            if all_(map_(is_, look_up(gns), values)):
                return []
        except KeyError:
            pass
        return [f"the notebook's {k!r}" for k, v in pairs if dict_get(gns, k, missing) is not v]

    return changes, expect


def _verifier(snapshot: Snapshot, gns: dict, torch_check):
    """(verify, start_test, end_test). Checked where they are used: while a test runs, each "course.verify"
    audit event (the comparison helpers raise one once they hold the student's result as values of their own;
    the test cell's code, one before each of its statements) calls verify(), which checks, by identity, the
    namespaces and classes of the tools the tests use, the notebook's names and torch's modes. A change found
    there (a patch that would undo itself before the cell ends) raises SandboxViolation into the test, and
    end_test() names it: tampering. start_test(pairs) arms it for a test cell whose namespace holds `pairs`."""
    watched, other_tables, table_changes = _tool_watch(snapshot)
    gns_changes, expect = _names_watch(gns)
    list_, map_, enumerate_, type_, violation = list, map, enumerate, type, SandboxViolation
    found: list[str] = []
    # Each watched dict's version tag (PEP 509's ma_version_tag, which CPython bumps on every change of a dict):
    # a check reads one number per dict and looks closer only at one that changed. All of the tools' tags are read
    # at once (integrity.tag_reader: one C call) and compared with what was read when every tool was last seen
    # as it should be; only when that differs are they read one by one. Before every statement of a test this
    # was most of a submission's grading time. Where the tag cannot be read (another Python), every check
    # compares all.
    tags = version_tags([entry[1] for _, entry in watched] + [gns])
    seen = [cell.value for cell in tags] if tags else []
    tag_value = type_(tags[0]).value.__get__ if tags else None
    tools_seen = seen[:-1]
    tool_tags, gns_tag = (tags[:-1], tags[-1]) if tags else ([], None)
    read_tools = tag_reader(tool_tags) if tool_tags else (lambda: None)
    tools_read = [read_tools()]  # what read_tools() gave when every tool was as tools_seen has it

    def verify(args) -> None:
        changed = []
        if tags:
            if read_tools() != tools_read[0]:
                now_all = list_(map_(tag_value, tool_tags))
                for i, (check, entry) in enumerate_(watched):
                    now = now_all[i]
                    if now != tools_seen[i]:
                        changes = check(*entry)
                        if changes:
                            changed += changes
                        else:
                            tools_seen[i] = now  # a change the library made to itself (a cache, a lazy import)
                if not changed:
                    tools_read[0] = read_tools()
            now = tag_value(gns_tag)
            if now != seen[-1]:  # the notebook's namespace: the test's own names change it too
                changes = gns_changes()
                changed += changes
                if not changes:
                    seen[-1] = now
            for entry in other_tables:
                changed += table_changes(*entry)
        else:
            for check, entry in watched:
                changed += check(*entry)
            for entry in other_tables:
                changed += table_changes(*entry)
            changed += gns_changes()
        left = torch_check()
        if left:
            changed.append(left)
        if changed:
            found.extend(changed)
            raise violation("the tests' tools were changed while they ran (" + ", ".join(changed[:3])
                                   + "); the test cannot be trusted")

    def start_test(pairs: tuple) -> None:
        expect(pairs)
        if tags:
            seen[-1] = -1  # the first check of this test looks
        del found[:]

    def end_test() -> list[str]:
        """What verify() found since start_test, once each; disarmed until the next start_test."""
        expect(())
        changes = list_(dict.fromkeys(found))
        del found[:]
        return changes

    return verify, start_test, end_test


def _channel(fd: int):
    """(receive, send_text) on the supervisor's channel, over functions captured now: receive() the next message
    (8 digits of length, then marshal; the kernel exits when the channel closes), send_text(pairs) one JSON
    object per line, built from exact strs, ints and lists of strs only, so no object of the student's is
    asked to describe itself."""
    read, write, loads, leave = os.read, os.write, marshal.loads, os._exit
    encode = json.encoder.encode_basestring_ascii

    def receive():
        head = b""
        while len(head) < 8:
            chunk = read(fd, 8 - len(head))
            if not chunk:
                leave(0)
            head += chunk
        size = int(head)
        body = b""
        while len(body) < size:
            chunk = read(fd, size - len(body))
            if not chunk:
                leave(0)
            body += chunk
        return loads(body)

    def send_text(pairs: list[tuple[str, object]]) -> None:
        parts = []
        for key, value in pairs:
            if type(value) is str:
                text = encode(value)
            elif type(value) is int or type(value) is bool:
                text = "true" if value is True else "false" if value is False else int.__repr__(value)
            elif value is None:
                text = "null"
            else:
                text = "[" + ",".join(encode(v) for v in value if type(v) is str) + "]"
            parts.append(encode(key) + ":" + text)
        data = ("{" + ",".join(parts) + "}\n").encode("ascii")
        while data:
            data = data[write(fd, data):]

    return receive, send_text


def _namespace_keeper(ns: dict, gns: dict, base: dict, graveyard: list):
    """(before, tidy, keep_own): the notebook's names around a cell. before(kind, source) puts back, for a test,
    the names the given and test cells bound that the student rebound, and rebuilds the grader's namespace for a
    given or test cell: (where the cell runs, that namespace's fresh contents, the names the cell binds, the
    rebound names). tidy(kind) drops keys that are not names (they could run code when names are looked up),
    unhashed, and says whether a test saw one. keep_own(own) makes what a given or test cell bound the grader's,
    whatever students rebind later. Nothing displaced is dropped: it goes to `graveyard`."""
    trusted_names: dict[str, object] = {}
    bound_names, module_type, str_type, list_type = _bound_names, types.ModuleType, str, list
    dict_clear, dict_update = dict.clear, dict.update

    def before(kind: str, source: str):
        rebound = []
        if kind == "test":
            for name, value in trusted_names.items():
                if ns.get(name, graveyard) is not value:
                    graveyard.append(ns.get(name))
                    ns[name] = value
                    if callable(value) or type(value) is module_type:  # data names are reused freely
                        rebound.append(name)
        own = bound_names(source) if kind != "student" else set()
        if kind == "student":
            return ns, None, own, rebound
        fresh = dict(base)  # the grader's namespace, rebuilt: real builtins < student's names < the notebook's
        for key, value in list(ns.items()):
            if type(key) is str_type and key not in base:
                fresh[key] = value
        fresh.update(trusted_names)
        graveyard.append(list(gns.items()))
        dict_clear(gns)
        dict_update(gns, fresh)
        return gns, fresh, own, rebound

    def drop_odd_keys(d: dict) -> bool:
        """Rebuild d without its keys that are not exact strs, hashing none of them."""
        items = list_type(d.items())
        if all(type(k) is str_type for k, _ in items):
            return False
        graveyard.append(items)
        dict_clear(d)
        dict_update(d, {k: v for k, v in items if type(k) is str_type})
        return True

    def tidy(kind: str) -> tuple[bool, bool]:
        """(whether the student's namespace had a key that is not a name, whether the grader's had one)."""
        in_ns = drop_odd_keys(ns)
        return in_ns, kind != "student" and drop_odd_keys(gns)

    def keep_own(own: set) -> None:
        for name in own:
            if name in gns:
                graveyard.append((trusted_names.get(name), ns.get(name)))
                trusted_names[name] = ns[name] = gns[name]

    return before, tidy, keep_own


def _compiler(trust_code, audit):
    """compile_cell(kind, source, filename): a given or test cell compiled by the grader (its frames then count
    as the grader's), with a check before every statement of a test cell and in every loop of a given one
    (_with_checks); the exception if it does not compile; None for a student's cell, which its own thread
    compiles. A SyntaxWarning of the tests' must not reach a warnings filter of the student's."""
    from warnings import catch_warnings, simplefilter
    split = _split_last_expression

    def compile_cell(kind: str, source: str, filename: str):
        if kind == "student":
            return None
        try:
            with catch_warnings():
                simplefilter("ignore")
                compiled = split(source, filename, audit, every_statement=kind == "test")
        except BaseException as e:
            return e
        for code in compiled:
            if code is not None:
                trust_code(code)
        return compiled

    return compile_cell


def _cell_runner(own_uid: bool, set_untrusted, inputs_testing, graveyard: list, cell_tools: dict):
    """(new_task, run): new_task(...) the dict a cell's thread works in; run(task, stdout, stderr) runs the cell in
    its own thread with the guard's policy on, waits for the thread to be gone (its state and finalizers
    included), and then enters the guarded stretch: collector paused, policy off, the memory reserve kept for
    the grader's own work, and the thread's answers read as exact types only: (status, ename, evalue, result,
    torch_left, memory_full). Everything it uses after the thread ends was captured here, before any student
    code ran: until restore, a name looked up in a module or in builtins could be the student's."""
    allocate_lock, start_cell_thread, tools = cell_tools
    take_reserve, give_back, room = _memory_reserve()
    reserve = [take_reserve()]
    grad_mode = [True]
    reserve_bytes, strays, sysd = MEMORY_RESERVE_BYTES, _start_after_ending_strays, sys.__dict__
    gc_enable, gc_disable, exact, str_type, type_ = gc.enable, gc.disable, exact_str, str, type

    def new_task(compiled, source: str, filename: str, where: dict, ns: dict, test: bool) -> dict:
        return {"compiled": compiled, "source": source, "filename": filename, "where": where, "ns": ns,
                "test": test, "graveyard": graveyard, "grad": grad_mode[0], **tools,
                "status": "error", "ename": "KernelError", "evalue": "the cell did not finish", "result": None,
                "torch_left": "", "ready": allocate_lock(), "go": allocate_lock(), "sentinel": None}

    def start(task: dict):
        """The cell's thread, up and holding its sentinel but running nothing of the student's yet: (whether it
        started, its handle to join or None); task["evalue"] says why not."""
        try:
            handle, failure = start_cell_thread(task), None
        except RuntimeError as e:  # "can't start new thread": out of memory or of processes
            handle, failure = None, e
            if own_uid:  # processes an earlier cell left running may hold every slot (a fork bomb's children)
                handle, failure = strays(start_cell_thread, task)
        if failure is not None:
            task["evalue"] = f"this cell could not start ({failure}): the memory or the process limit is used up"
            return False, None
        task["ready"].acquire()  # the thread is up and has made its sentinel; it runs nothing of the student's yet
        started = handle is not None or task["sentinel"] is not None
        if not started:
            task["evalue"] = "this cell could not start: the kernel had no memory left for it"
        return started, handle

    def run(task: dict, stdout: _Capture, stderr: _Capture):
        task["ready"].acquire()
        task["go"].acquire()
        if reserve[0] is None and room(2 * reserve_bytes):  # the student's code gave memory back
            reserve[0] = take_reserve()
        sysd["stdout"], sysd["stderr"] = stdout, stderr
        started, handle = start(task)
        if started:
            set_untrusted(True)
            gc_enable()
            task["go"].release()
            if handle is None:
                task["sentinel"].acquire()  # released once the thread is gone, its state and finalizers included
            else:
                handle.join()
        # ---- the guarded stretch: no student code runs until the next cell starts.
        gc_disable()
        set_untrusted(False)
        memory_full = reserve[0] is not None and not room(reserve_bytes)
        if memory_full:  # the cell filled the memory limit and holds on to it: the reserve is for what follows
            give_back(reserve[0])
            reserve[0] = None
        inputs_testing(False)
        status, ename, evalue, result = (exact(task["status"], "error"), exact(task["ename"], "Exception"),
                                         exact(task["evalue"]), task["result"])
        status = status if status in ("ok", "error") else "error"
        result = result if type_(result) is str_type else None
        torch_left = exact(task["torch_left"])
        grad_mode[0] = task["grad"] is True
        graveyard.append(task)  # whatever of the student's the task holds is released in the next cell's thread
        return status, ename, evalue, result, torch_left, memory_full

    return new_task, run


def _interpreter_restorer(snapshot: Snapshot, graveyard: list, functions_written):
    """put_back() -> (sensitive, other): the interpreter as the snapshot holds it (integrity's restore: modules,
    classes, functions, sys.modules), the sys hooks and streams the kernel started with (the student's set ones
    are kept, not dropped), the collector's saved garbage moved to the graveyard and its debug flags off.
    Captured now, after the snapshot's last refresh."""
    restore = snapshot._restore  # a closure: no attribute of a class is asked
    sysd = sys.__dict__
    sys_get = sysd.get
    hook_names = ("stdin", "stdout", "stderr", "__stdin__", "__stdout__", "__stderr__", "displayhook", "excepthook",
                  "unraisablehook", "breakpointhook", "__displayhook__", "__excepthook__", "__breakpointhook__",
                  "__unraisablehook__")
    kernel_hooks = {name: sys_get(name) for name in hook_names}  # Python's own, as the kernel started
    garbage, gc_set_debug, list_type = gc.garbage, gc.set_debug, list

    def put_back() -> tuple[list[str], list[str]]:
        sensitive, other = restore(graveyard, functions_written())
        for name, value in kernel_hooks.items():
            current = sys_get(name, graveyard)
            if current is not value:
                graveyard.append(current)
                sysd[name] = value
        if garbage:  # what the collector saved for the student (gc.DEBUG_SAVEALL)
            graveyard.append(list_type(garbage))
            del garbage[:]
        gc_set_debug(0)
        return sensitive, other

    return put_back


def _tampering(snapshot: Snapshot, gns: dict, graveyard: list):
    """tampered(fresh, own, sensitive, found, torch_left): what a test cell's run changed of what the tests rely
    on, once each: the tools where verify() found a change (`found`), a torch mode left on, a change to a
    critical module's code (restore's `sensitive`), and the notebook's names in the grader's namespace that are
    not what the cell started with (`fresh`, less the names the cell binds itself, `own`)."""
    module_of, interpreters, is_critical = snapshot._module_of, _interpreters, critical

    def tampered(fresh: dict, own: set, sensitive: list, found: list, torch_left: str) -> list[str]:
        names = list(found)
        if torch_left:
            names.append(torch_left)
        names += [where for where in sensitive if is_critical(module_of(where))]
        for key, value in list(gns.items()):  # the test's own namespace, changed behind its back
            if key not in own and fresh.get(key, graveyard) is not value and not interpreters(key):
                names.append(f"the notebook's {key!r}")
        names += [f"the notebook's {name!r}" for name in fresh
                  if name not in own and name not in gns and not interpreters(name)]
        return list(dict.fromkeys(names))

    return tampered


def _stepper(ns: dict, parts: dict, capture_limit: int):
    """step(message) -> its locals: one cell, from the supervisor's message to the kernel's reply, made of the
    pieces in `parts` (each captured before any student code ran). The caller keeps the locals in the graveyard:
    whatever of the student's they hold is released in the next cell's thread, never in the kernel's."""
    before, tidy, keep_own = parts["names"]
    new_task, run = parts["runner"]
    verify_start, verify_end = parts["verifier"]
    compile_cell, put_back, tampering, send_text = parts["compile"], parts["put_back"], parts["tampering"], \
        parts["send_text"]
    blocked, reseed_inputs, inputs_testing, cell_seed = parts["blocked"], parts["reseed"], parts["testing"], \
        parts["cell_seed"]
    capture, interpreters, str_type, list_type, int_type, join = _Capture, _interpreters, str, list, int, "".join

    def captured(parts: list, counts: list) -> tuple[str, int]:
        """What a cell printed, read from the lists the kernel made (the stream object itself is the student's to
        change, so nothing of it is asked), cut at the limit, and how many characters were dropped."""
        text = join([p for p in list_type(parts) if type(p) is str_type])[:capture_limit]
        dropped = counts[1] if len(counts) == 2 and type(counts[1]) is int_type else 0
        return text, dropped

    def step(message) -> dict:
        index, kind, source, nonce = message["index"], message["kind"], message["source"], message["nonce"]
        where, fresh, own, rebound = before(kind, source)
        out_parts, err_parts, out_counts, err_counts = [], [], [0, 0], [0, 0]
        stdout = capture(capture_limit, out_parts, out_counts)
        stderr = capture(capture_limit, err_parts, err_counts)
        del blocked[:]
        filename = f"<cell {index}>"
        compiled = compile_cell(kind, source, filename)
        if kind == "test":  # fresh inputs from the grader's secret, drawn only by the grader's code
            reseed_inputs(cell_seed(index))
            inputs_testing(True)
            verify_start(tuple((k, v) for k, v in fresh.items() if k not in own and not interpreters(k)))
        # ---- the student's turn, in a thread of its own: everything it runs may be hostile.
        task = new_task(compiled, source, filename, where, ns, kind == "test")
        compiled = None
        status, ename, evalue, result, torch_left, memory_full = run(task, stdout, stderr)
        task = None
        sensitive, other = put_back()
        odd_in_ns, odd_in_gns = tidy(kind)
        if odd_in_ns and kind == "test":
            sensitive.append("the notebook's namespace (a key that is not a name)")
        tampered = []
        if odd_in_gns and kind == "test":
            tampered.append("the notebook's namespace (a key that is not a name)")
        found = verify_end()  # changed where the tests used it
        if kind == "test":
            tampered = list(dict.fromkeys(tampered + tampering(fresh, own, sensitive, found, torch_left)))
            if tampered:
                status, ename = "error", "GradingIntegrityError"
                evalue = ("the tests could not be trusted: while they ran, your code replaced "
                          + ", ".join(tampered[:5]) + ("..." if len(tampered) > 5 else "")
                          + ". Changing the grader's tools earns no points.")
        keep_own(own)  # what a given or test cell binds is the grader's, whatever students rebind later
        out_text, out_dropped = captured(out_parts, out_counts)
        err_text, err_dropped = captured(err_parts, err_counts)
        send_text([("index", index), ("nonce", nonce), ("status", status), ("ename", ename),
                   ("evalue", evalue), ("stdout", out_text), ("stderr", err_text),
                   ("dropped", out_dropped + err_dropped), ("result", result),
                   ("changed", sensitive), ("tampered", tampered), ("rebound", rebound),
                   ("blocked", [b for b in blocked if type(b) is str_type]), ("memory_full", memory_full)])
        return locals()

    return step


def main(sock: socket.socket, job: dict, snapshot: Snapshot, uid: int | None) -> None:
    """Run until the supervisor closes the channel. Never returns normally. Everything the guarded stretch
    between cells uses is captured here, by the factories above, before student code can rebind it."""
    fd, own_uid = _isolate(sock, job, uid)
    cell_seed = _cell_seeds(job, snapshot)
    receive, send_text = _channel(fd)
    sigmask, all_signals = signal.pthread_sigmask, signal.valid_signals()
    torch_quiet, torch_check, torch_set_aside = _torch_quiet()
    _quiet_signals()
    capture_limit = int(job["limits"].get("output_chars", TEXT_LIMIT_DEFAULT))
    set_untrusted, blocked, controls = _guard(job, snapshot)
    compile_cell = _compiler(controls["trust_code"], sys.audit)
    ns, gns, base = _namespaces()
    graveyard: list = []
    verify, verify_start, verify_end = _verifier(snapshot, gns, torch_check)
    controls["verifier"](verify)
    original_mask = sigmask(signal.SIG_BLOCK, all_signals)  # for good, in this thread: see _quiet_signals
    allocate_lock, start_cell_thread, cell_tools = _cell_thread(original_mask)
    cell_tools.update({"torch_quiet": torch_quiet, "torch_check": torch_check, "torch_set_aside": torch_set_aside})
    parts = {"names": _namespace_keeper(ns, gns, base, graveyard),
             "runner": _cell_runner(own_uid, set_untrusted, controls["testing"], graveyard,
                                    (allocate_lock, start_cell_thread, cell_tools)),
             "verifier": (verify_start, verify_end), "compile": compile_cell,
             "put_back": _interpreter_restorer(snapshot, graveyard, controls["functions_written"]),
             "tampering": _tampering(snapshot, gns, graveyard), "send_text": send_text, "blocked": blocked,
             "reseed": controls["reseed"], "testing": controls["testing"], "cell_seed": cell_seed}
    step = _stepper(ns, parts, capture_limit)
    while True:
        graveyard.append(step(receive()))
