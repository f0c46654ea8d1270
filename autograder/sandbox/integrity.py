"""What a student's code may not change while it is graded, and what it may not do.

Runs inside the grading sandbox (docs/grading.md, "Threat model").

- `Snapshot` records, before any student code runs, every loaded module's
  namespace, the classes and functions defined there (their dicts, bases,
  code, defaults) and the import machinery. `Snapshot.restore()` puts all of it
  back and names what had changed, so a monkeypatched `torch`, `numpy`,
  `course.compare` or builtin is undone before every test cell, and a patch made
  while a test cell runs is caught when it ends.
- `install_guard()` adds an audit hook (PEP 578: it cannot be removed) that,
  while notebook code runs, refuses what could reach past the namespace into the
  grader: frames (so the kernel's own locals), the garbage collector's object
  walks, trace and profile hooks, new audit hooks, threads, sub-interpreters and
  (unless a chapter allows native code) ctypes.

Everything here must work while the objects it inspects are hostile: values are
compared by identity only (`operator.is_`, never `==`, which a student's class
can define), and only exact built-in types are trusted.
"""
from __future__ import annotations

import builtins
import operator
import sys
import types

_is = operator.is_
_MISSING = object()

# Keys that libraries add to or rebind on classes and modules in normal use (pickle
# and copy cache __slotnames__, abc and typing keep caches); never part of a verdict.
_CLASS_CACHE_KEYS = frozenset({"__slotnames__", "_abc_impl", "__abstractmethods__", "__parameters__",
                               "_is_protocol", "__protocol_attrs__", "__weakref__", "__doc__"})
_MODULE_SKIP = frozenset({"__main__", "sys"})
_SYS_LISTS = ("meta_path", "path_hooks")


class SandboxViolation(ValueError):
    """Raised into student code for an operation the grader does not allow.

    A ValueError, because the standard library's own frame users (logging,
    typing, collections.namedtuple) already treat ValueError from sys._getframe
    as "no frame available" and carry on."""


def _behaviour(value) -> bool:
    """A class attribute that is code: a function, a method wrapper, a property or other descriptor."""
    return callable(value) or issubclass(type(value), (property, staticmethod, classmethod, types.GetSetDescriptorType,
                                                       types.MemberDescriptorType))


def _sensitive(value) -> bool:
    """Whether replacing `value` changes behaviour (functions, classes, modules) rather than data."""
    return callable(value) or type(value) is types.ModuleType


class Snapshot:
    """Identity snapshot of the interpreter's loaded code, taken before student code runs."""

    def __init__(self):
        self.modules: list[tuple[str, dict, tuple, tuple]] = []
        self.classes: list[tuple[str, type, type, tuple, types.MappingProxyType, tuple, tuple]] = []
        self.module_objects: list[tuple[str, types.ModuleType, type]] = []
        self.functions: list[tuple[str, types.FunctionType, object, object, object]] = []
        self.containers: list[tuple[str, object, tuple, tuple]] = []
        self.sys_modules: dict = {}
        self.sys_lists: dict = {}
        self.owner: dict[str, str] = {}  # dotted name of a class, function or table -> its module
        self.module_names: set[str] = set()
        self.code_ids: frozenset[int] = frozenset()  # every code object of the functions above (nested ones too)
        self.object_ids: frozenset[int] = frozenset()  # the modules and classes above

    @classmethod
    def take(cls, roots: tuple[str, ...] = ()) -> "Snapshot":
        """Snapshot the modules loaded from `roots` (and built-in ones). A chapter's own
        packages in the working folder (picotorch/) are the student's to extend, not the grader's.
        The grader's own modules are in it when they are loaded: the supervisor imports the kernel's
        (autograder.sandbox.executor) right before it takes the snapshot."""
        snap = cls()
        seen_classes: set[int] = set()
        seen_functions: set[int] = set()
        current_module = [""]

        def add_function(where: str, fn) -> None:
            if type(fn) is types.FunctionType and id(fn) not in seen_functions:
                seen_functions.add(id(fn))
                snap.functions.append((where, fn, fn.__code__, fn.__defaults__, fn.__kwdefaults__))
                snap.owner[where] = current_module[0]
                # a wrapper (functools.wraps) runs the function it wraps: that one is the grader's code too
                # (torch wraps every TorchDispatchMode's __torch_dispatch__, the kit's TorchLog's included)
                add_function(f"{where}.__wrapped__", fn.__dict__.get("__wrapped__"))

        for name, module in list(sys.modules.items()):
            if name in _MODULE_SKIP or type(module) is not types.ModuleType:
                continue
            origin = module.__dict__.get("__file__")
            if roots and type(origin) is str and not origin.startswith(roots):
                continue
            d = module.__dict__
            current_module[0] = name
            snap.modules.append((name, d, tuple(d.keys()), tuple(d.values())))
            snap.module_objects.append((name, module, type(module)))
            caches = d.get("__course_caches__", ())
            caches = caches if type(caches) is tuple else ()
            for key, value in list(d.items()):
                # Module-level tables (tolerances, registries) can be edited in place. A table the module
                # declares a cache in __course_caches__ (the emulator's loaded libraries) fills itself
                # while the tests run; it is neither put back nor held against the student.
                if type(value) in (dict, list, set) and not key.startswith("__") and critical(name) \
                        and key not in caches:
                    items = tuple(value.items()) if type(value) is dict else tuple(value)
                    snap.containers.append((f"{name}.{key}", value, items, tuple(value) if type(value) is dict else ()))
                    snap.owner[f"{name}.{key}"] = name
                if issubclass(type(value), type) and id(value) not in seen_classes and \
                        type(value.__dict__) is types.MappingProxyType and value.__dict__.get("__module__") == name:
                    seen_classes.add(id(value))
                    cd = value.__dict__
                    snap.classes.append((f"{name}.{value.__qualname__}", value, type(value), value.__bases__,
                                         cd, tuple(cd.keys()), tuple(cd.values())))
                    snap.owner[f"{name}.{value.__qualname__}"] = name
                    for attr, member in list(cd.items()):
                        if type(member) in (staticmethod, classmethod):
                            member = member.__func__
                        if type(member) is property:  # its getter is the grader's code too: trusted, restored
                            for part, fn in (("fget", member.fget), ("fset", member.fset), ("fdel", member.fdel)):
                                add_function(f"{name}.{value.__qualname__}.{attr}.{part}", fn)
                            continue
                        add_function(f"{name}.{value.__qualname__}.{attr}", member)
                elif type(value) is types.FunctionType and value.__globals__ is d:
                    add_function(f"{name}.{key}", value)
        snap.module_objects.append(("sys", sys, type(sys)))  # its namespace is the interpreter's, its class is not
        snap.module_names = {m[0] for m in snap.modules}
        snap.code_ids = frozenset(id(c) for f in snap.functions for c in _code_objects(f[2]))
        snap.object_ids = frozenset([id(m[1]) for m in snap.module_objects] + [id(c[1]) for c in snap.classes])
        snap.sys_modules = {k: v for k, v in sys.modules.items() if k not in _MODULE_SKIP}
        snap.sys_lists = {name: (getattr(sys, name), list(getattr(sys, name))) for name in _SYS_LISTS}
        snap._restore, snap._module_of = _restorer(snap)
        return snap

    def refresh(self, module_name: str) -> None:
        """Accept the current state of one module's namespace (after the grader itself changed it)."""
        for i, (name, d, _, _) in enumerate(self.modules):
            if name == module_name:
                self.modules[i] = (name, d, tuple(d.keys()), tuple(d.values()))
        self._restore, self._module_of = _restorer(self)

    def module_of(self, where: str) -> str:
        """The module a name reported by restore() belongs to."""
        return self._module_of(where)

    def restore(self, graveyard: list, functions: bool = True) -> tuple[list[str], list[str]]:
        """Put everything back. Returns (sensitive changes, other changes) as dotted names.

        Displaced values go to `graveyard` rather than being dropped here, so that no
        student finalizer (__del__) runs while the grader's own code is on the stack.
        `functions=False` skips the functions' code and defaults: for when the guard saw no
        write to any function's (install_guard's control "functions_written")."""
        return self._restore(graveyard, functions)


# The restorers below run with the guard off, after a student's code, and so never run it: each captures,
# when the snapshot is taken, the data it puts back and the built-ins it uses (nothing a student's code
# rebinds later, a module's globals, a builtin, an attribute of the Snapshot class, changes what they do);
# no object's __hash__, __eq__ or __getattribute__ is asked anything (a dict with a key that is not an exact
# str is rebuilt from its str-keyed items, sets are compared by identity), and nothing displaced is dropped:
# it goes to `keep`, the graveyard's append, which the caller keeps alive. Each adds the dotted names of what
# it put back to `sensitive` (behaviour: code, classes, modules) or `other` (data).
_BUILTINS = (operator.is_, len, all, map, zip, type, list, str, id, dict)


def _cleaner():
    """clean(d, keep) -> bool: rebuild `d` without the keys that are not exact strs, without hashing any of them;
    whether there was one."""
    is_, len_, all_, map_, zip_, type_, list_, str_, id_, dict_ = _BUILTINS
    dict_items, dict_clear, dict_update = dict.items, dict.clear, dict.update

    def clean(d, keep) -> bool:
        items = list_(dict_items(d))
        if all_(type_(k) is str_ for k, _ in items):
            return False
        keep(items)
        dict_clear(d)
        dict_update(d, {k: v for k, v in items if type_(k) is str_})
        return True

    return clean


def version_tags(dicts: list, partial: bool = False) -> list | None:
    """For each dict (or mappingproxy, for a class's namespace) a ctypes view of its version tag, which CPython
    (3.11, 3.12) takes from one global counter on every change of the dict, so that an unchanged tag means an
    unchanged dict; None where that does not hold (another Python), and the callers compare everything. With
    `partial`, a namespace that is not an exact dict (ctypes' classes keep theirs in a subclass) gets None in
    the list, and its caller compares that one every time."""
    try:
        import ctypes
        where = ctypes.c_uint64.from_address  # the tag follows the object header and ma_used

        def tag_of(d):
            if type(d) is types.MappingProxyType:
                d = ctypes.cast(ctypes.c_void_p.from_address(id(d) + 16).value, ctypes.py_object).value
            if type(d) is not dict:
                raise TypeError("not a dict")
            return where(id(d) + 24)

        probe = {}
        cell = tag_of(probe)

        class Probe:
            pass

        class_cell = tag_of(Probe.__dict__)
        marks = [cell.value, class_cell.value]
        probe["a"] = 1
        Probe.a = 1
        marks += [cell.value, class_cell.value]
        probe["a"] = 2
        marks.append(cell.value)
        if marks[2] == marks[0] or marks[3] == marks[1] or marks[4] == marks[2]:
            return None
        if not partial:
            return [tag_of(d) for d in dicts]
        found = []
        for d in dicts:
            try:
                found.append(tag_of(d))
            except TypeError:
                found.append(None)
        return found
    except Exception:
        return None


def tag_reader(tags: list):
    """read() -> the current values of `tags` (version_tags' views), as one value that compares equal only
    while none of them has moved. It is called before every statement of a test, so where NumPy is there it
    gathers all of them in one C call over a view of the memory that spans them; else one ctypes read each."""
    value, list_, map_ = type(tags[0]).value.__get__, list, map
    try:
        import ctypes

        import numpy.ctypeslib
        addresses = [ctypes.addressof(t) for t in tags]
        low = min(addresses)
        if any((a - low) % 8 for a in addresses):
            raise ValueError("a tag out of step with the others")
        memory = numpy.ctypeslib.as_array(ctypes.cast(low, ctypes.POINTER(ctypes.c_uint64)),
                                          shape=((max(addresses) - low) // 8 + 1,))
        index = numpy.array([(a - low) // 8 for a in addresses], dtype=numpy.intp)
        out = numpy.empty(len(addresses), dtype=numpy.uint64)
        take, to_bytes = memory.take, out.tobytes

        def gather() -> bytes:
            take(index, None, out, "clip")
            return to_bytes()

        if numpy.frombuffer(gather(), dtype=numpy.uint64).tolist() != [t.value for t in tags]:
            raise ValueError("the gathered tags are not the tags")
        return gather
    except Exception:  # no NumPy, or memory laid out otherwise: the plain reads, a few times slower
        return lambda: list_(map_(value, tags))


def _changed_since(tags: list | None, count: int):
    """changed() -> the indices of the dicts whose tag moved since mark(i) last recorded it (all of them at
    first, and every time where there are no tags); mark(i) records dict i's tag as the one it has now, after
    a restorer has put it back. A restorer that skips an unchanged dict skips a pass that would change nothing:
    restoring is idempotent, and the tag moves with every change made since."""
    if tags is None:
        everything = range(count)
        return (lambda: everything), (lambda i: None)
    list_, map_, range_, zip_, len_, sorted_ = list, map, range, zip, len, sorted  # captured: see the note above _cleaner
    untagged = [i for i, t in enumerate(tags) if t is None]  # compared every time
    taggable = [t for t in tags if t is not None]
    at = [i for i, t in enumerate(tags) if t is not None]  # where each of `taggable` is in the list
    position = {i: k for k, i in enumerate(at)}
    value = type(taggable[0]).value.__get__ if taggable else None
    read = tag_reader(taggable) if taggable else (lambda: None)
    seen = [-1] * len(taggable)  # no tag is -1: the first pass looks at every dict
    last = [None]  # what read() gave when every dict was as `seen` has it

    def changed():
        if read() == last[0]:
            return untagged
        now = list_(map_(value, taggable))
        if now == seen:
            last[0] = read()
            return untagged
        return sorted_([at[k] for k, a, b in zip_(range_(len_(now)), now, seen) if a != b] + untagged)

    def mark(i: int) -> None:
        k = position.get(i)
        if k is not None:
            seen[k] = value(taggable[k])

    return changed, mark


def _modules_restorer(snap: Snapshot, clean):
    """back(keep, sensitive, other): each module's class (a module class whose __getattribute__ would answer for
    it) and namespace as the snapshot has them; in a module that is not critical, only its code."""
    modules, module_objects = tuple(snap.modules), tuple(snap.module_objects)
    is_, len_, all_, map_, zip_, type_, list_, str_, id_, dict_ = _BUILTINS
    dict_keys, dict_values, dict_get, dict_setitem = dict.keys, dict.values, dict.get, dict.__setitem__
    object_setattr, missing, is_critical, sensitive_value = object.__setattr__, _MISSING, critical, _sensitive

    changed, mark = _changed_since(version_tags([m[1] for m in modules], partial=True), len(modules))

    def back(keep, sensitive: list, other: list) -> None:
        for name, module, kind in module_objects:
            if type_(module) is not kind:
                keep(type_(module))
                object_setattr(module, "__class__", kind)
                sensitive.append(f"{name}.__class__")
        for i in changed():
            name, d, keys, values = modules[i]
            if len_(d) == len_(keys) and all_(map_(is_, keys, dict_keys(d))) and all_(map_(is_, values, dict_values(d))):
                mark(i)
                continue
            if clean(d, keep):
                sensitive.append(f"{name}[a key that is not a name]")
            guarded = is_critical(name)
            for key, value in zip_(keys, values):
                current = dict_get(d, key, missing)
                if current is not value and (guarded or sensitive_value(value)):
                    keep(current)
                    dict_setitem(d, key, value)
                    (sensitive if sensitive_value(value) else other).append(f"{name}.{key}")
            mark(i)

    return back


def _tables_restorer(snap: Snapshot):
    """back(keep, sensitive, other): the module-level tables (dicts, lists, sets) of critical modules, edited in
    place, as they were; the tests' own tables count as sensitive."""
    containers = tuple(snap.containers)
    is_, len_, all_, map_, zip_, type_, list_, str_, id_, dict_ = _BUILTINS
    dict_items, dict_keys, dict_values = dict.items, dict.keys, dict.values
    dict_clear, dict_update, list_setitem, set_clear, set_update = (dict.clear, dict.update, list.__setitem__,
                                                                    set.clear, set.update)
    slice_all, tools = slice(None), ("course.", "autograder.", "torch.testing.", "numpy.testing.")

    def back(keep, sensitive: list, other: list) -> None:
        for where, container, items, keys in containers:
            kind = type_(container)
            if kind is dict_:
                if len_(container) == len_(items) and all_(map_(is_, keys, dict_keys(container))) \
                        and all_(map_(is_, [v for _, v in items], dict_values(container))):
                    continue
                keep(list_(dict_items(container)))
                dict_clear(container)
                dict_update(container, items)
            elif kind is list_:
                if len_(container) == len_(items) and all_(map_(is_, items, container)):
                    continue
                keep(list_(container))
                list_setitem(container, slice_all, items)
            else:  # a set: compared by identity, never by its members' __eq__ (unchanged, in its own order)
                if len_(container) == len_(items) and all_(map_(is_, items, container)):
                    continue
                ids = {id_(x) for x in items}
                if len_(container) == len_(items) and all_([id_(x) in ids for x in container]):
                    continue
                keep(list_(container))
                set_clear(container)
                set_update(container, items)
            (sensitive if where.startswith(tools) else other).append(where)  # the tests' own tables are tools

    return back


def _metaclass_slot(meta: type, name: str, default):
    """The `name` (__setattr__ or __delattr__) that sets a class of metaclass `meta`: type's, unless a built-in
    metaclass has its own (ctypes' refuse type.__setattr__ on their classes), taken now from that C type, which
    no student code can change; a metaclass written in Python gets type's, which it cannot replace."""
    for klass in meta.__mro__:
        own = klass.__dict__.get(name)
        if own is not None:
            immutable = klass.__flags__ & (1 << 8)  # Py_TPFLAGS_IMMUTABLETYPE: a C type, its slots fixed
            return own if immutable and klass is not type and type(own) is types.WrapperDescriptorType else default
    return default


def _classes_restorer(snap: Snapshot):
    """back(keep, sensitive): each class's metaclass, bases and behaviour (methods and descriptors, added,
    replaced or removed) as the snapshot has them. Class-level data (counters such as torch's
    RemovableHandle.next_id) is the library's own business, and so are the caches libraries keep on classes."""
    classes = tuple(snap.classes)
    is_, len_, all_, map_, zip_, type_, list_, str_, id_, dict_ = _BUILTINS
    dict_items = dict.items
    proxy_keys, proxy_values, proxy_get = types.MappingProxyType.keys, types.MappingProxyType.values, \
        types.MappingProxyType.get
    type_setattr, type_delattr, bases_of = type.__setattr__, type.__delattr__, type.__dict__["__bases__"].__get__
    missing, cache_keys, behaviour = _MISSING, _CLASS_CACHE_KEYS, _behaviour

    changed, mark = _changed_since(version_tags([c[4] for c in classes], partial=True), len(classes))
    klasses, metas, all_bases = tuple(c[1] for c in classes), tuple(c[2] for c in classes), tuple(c[3] for c in classes)
    setters = tuple(_metaclass_slot(meta, "__setattr__", type_setattr) for meta in metas)
    deleters = tuple(_metaclass_slot(meta, "__delattr__", type_delattr) for meta in metas)
    enumerate_, sorted_ = enumerate, sorted

    def back(keep, sensitive: list) -> None:
        todo = changed()
        # a new metaclass or new bases leave the namespace's tag alone: those two are looked at every time
        if not (all_(map_(is_, map_(type_, klasses), metas)) and all_(map_(is_, map_(bases_of, klasses), all_bases))):
            todo = sorted_({*todo, *[i for i, klass in enumerate_(klasses)
                                     if type_(klass) is not metas[i] or bases_of(klass) is not all_bases[i]]})
        for i in todo:
            where, klass, meta, bases, cd, keys, values = classes[i]
            if type_(klass) is meta and bases_of(klass) is bases and len_(cd) == len_(keys) \
                    and all_(map_(is_, keys, proxy_keys(cd))) and all_(map_(is_, values, proxy_values(cd))):
                mark(i)
                continue
            if type_(klass) is not meta:
                keep(type_(klass))
                type_setattr(klass, "__class__", meta)
                sensitive.append(f"{where}.__class__")
            if bases_of(klass) is not bases:
                keep(bases_of(klass))
                type_setattr(klass, "__bases__", bases)
                sensitive.append(f"{where}.__bases__")
            known = dict_(zip_(keys, values))
            for key in [k for k in list_(proxy_keys(cd)) if type_(k) is not str_ or k not in known]:
                if type_(key) is str_ and key in cache_keys or not behaviour(proxy_get(cd, key)):
                    continue
                keep(proxy_get(cd, key))
                deleters[i](klass, key)
                sensitive.append(f"{where}.{key}")
            for key, value in dict_items(known):
                current = proxy_get(cd, key, missing)
                if current is not value and key not in cache_keys and behaviour(value):
                    keep(current)
                    setters[i](klass, key, value)
                    sensitive.append(f"{where}.{key}")
            mark(i)

    return back


def _functions_restorer(snap: Snapshot):
    """back(keep, sensitive): each function's __code__, __defaults__ and __kwdefaults__ as the snapshot has them."""
    functions = tuple(snap.functions)
    code_of = types.FunctionType.__code__.__get__
    defaults_of = types.FunctionType.__defaults__.__get__
    kwdefaults_of = types.FunctionType.__kwdefaults__.__get__

    def back(keep, sensitive: list) -> None:
        for where, fn, code, defaults, kwdefaults in functions:
            if code_of(fn) is not code:
                keep(code_of(fn))
                fn.__code__ = code
                sensitive.append(f"{where}.__code__")
            if defaults_of(fn) is not defaults:
                keep(defaults_of(fn))
                fn.__defaults__ = defaults
                sensitive.append(f"{where}.__defaults__")
            if kwdefaults_of(fn) is not kwdefaults:
                keep(kwdefaults_of(fn))
                fn.__kwdefaults__ = kwdefaults
                sensitive.append(f"{where}.__kwdefaults__")

    return back


def _sys_restorer(snap: Snapshot):
    """back(keep, sensitive): sys.modules' entries of the snapshot's modules, and the import machinery's lists
    (sys.meta_path, sys.path_hooks), the same objects with the same members."""
    sys_modules, sys_lists = dict(snap.sys_modules), dict(snap.sys_lists)
    sysd, modules_dict = sys.__dict__, sys.modules
    is_, len_, all_, map_, zip_, type_, list_, str_, id_, dict_ = _BUILTINS
    dict_items, dict_get, dict_setitem = dict.items, dict.get, dict.__setitem__
    list_setitem, slice_all, missing = list.__setitem__, slice(None), _MISSING

    def back(keep, sensitive: list) -> None:
        for name, module in dict_items(sys_modules):
            current = dict_get(modules_dict, name, missing)
            if current is not module:
                keep(current)
                dict_setitem(modules_dict, name, module)
                sensitive.append(f"sys.modules[{name!r}]")
        for name, (lst, items) in dict_items(sys_lists):
            if dict_get(sysd, name, missing) is not lst:
                keep(dict_get(sysd, name, missing))
                dict_setitem(sysd, name, lst)
                sensitive.append(f"sys.{name}")
            if len_(lst) != len_(items) or not all_(map_(is_, lst, items)):
                keep(list_(lst))
                list_setitem(lst, slice_all, items)
                sensitive.append(f"sys.{name}")

    return back


def _module_namer(snap: Snapshot):
    """module_of(where): the module a dotted name that restore() reported belongs to ("" for none)."""
    owner, module_names, dict_get, missing = dict(snap.owner), frozenset(snap.module_names), dict.get, _MISSING

    def module_of(where: str) -> str:
        if where.startswith("sys.") or where.startswith("sys["):
            return "sys"
        head = where.split("[")[0]
        while head:
            found = dict_get(owner, head, missing)
            if found is not missing:
                return found
            if head in module_names:
                return head
            head = head.rpartition(".")[0]
        return ""

    return module_of


def _restorer(snap: Snapshot):
    """(restore, module_of) for `snap`: restore(graveyard, functions=True) -> (sensitive, other) puts the
    interpreter back as the snapshot has it (sys's own tables first, so that no odd key takes part in a lookup
    below; then modules, tables, classes, functions unless told that none was written, sys.modules and the
    import machinery), each piece a closure captured now (see the note above _cleaner)."""
    clean, sysd, modules_dict = _cleaner(), sys.__dict__, sys.modules
    modules_back, tables_back = _modules_restorer(snap, clean), _tables_restorer(snap)
    classes_back, functions_back, sys_back = _classes_restorer(snap), _functions_restorer(snap), _sys_restorer(snap)

    def restore(graveyard: list, functions: bool = True) -> tuple[list[str], list[str]]:
        sensitive: list[str] = []
        other: list[str] = []
        keep = graveyard.append
        if clean(sysd, keep):
            sensitive.append("sys[a key that is not a name]")
        if clean(modules_dict, keep):
            sensitive.append("sys.modules[a key that is not a name]")
        modules_back(keep, sensitive, other)
        tables_back(keep, sensitive, other)
        classes_back(keep, sensitive)
        if functions:
            functions_back(keep, sensitive)
        sys_back(keep, sensitive)
        return sensitive, other

    return restore, _module_namer(snap)


# Where a change made while a test cell runs is taken as tampering: the tests' own
# tools and what they compare against. Elsewhere libraries do patch themselves in
# normal use (torch.optim wraps Optimizer.step on first use), so a change there is
# undone before the next test but not held against the student.
_CRITICAL_EXACT = frozenset({"builtins", "sys", "torch", "numpy", "math", "operator", "copy", "functools",
                             "itertools", "random", "torch._tensor", "torch.functional", "torch.nn.functional",
                             "torch.nn", "torch.nn.parameter", "torch.autograd", "torch.autograd.grad_mode"})
_CRITICAL_PREFIXES = ("course.", "autograder.", "picotorch.", "torch.testing.", "numpy.testing.", "torch.nn.modules.",
                      "torch.autograd.", "numpy.core.", "numpy._core.")


# The tests' tools: the modules (and their classes) whose state is checked, while a test runs, at
# every "course.verify" event: where the comparison helpers use it, before each statement of a test
# cell and at each round of a given helper's loops (see the kernel's verify()).
TESTING_KIT = ("course.testing", "course.testing.describe", "course.testing.dispatch_log", "course.testing.draws",
               "course.testing.layouts", "course.testing.model_pair", "course.testing.profile_log",
               "course.testing.rounding", "course.testing.same_call", "course.testing.views")
TOOLS = frozenset({"builtins", "course", "course.compare", "course.inputs", *TESTING_KIT, "torch._tensor",
                   "torch", "torch.functional", "torch.nn.functional", "torch.testing",
                   "torch.testing._comparison", "numpy", "numpy.testing", "numpy.testing._private.utils", "math",
                   "operator", "random", "functools", "itertools", "copy"})


def critical(module: str) -> bool:
    """Whether the tests rely on module `module` (its namespace is snapshotted and restored)."""
    return module in _CRITICAL_EXACT or module == "course" or module == "picotorch" \
        or (module + ".").startswith(_CRITICAL_PREFIXES) or module.startswith(_CRITICAL_PREFIXES)


FRAME_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "sys._current_exceptions",
                          "sys.settrace", "sys.setprofile", "sys.addaudithook",
                          "gc.get_objects", "gc.get_referrers", "gc.get_referents",
                          "_thread.start_new_thread", "cpython.PyInterpreterState_New",
                          "cpython._PySys_ClearAuditHooks"})
FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
_WHY = {
    "sys._getframe": "reading the interpreter's frames",
    "sys._current_frames": "reading the interpreter's frames",
    "sys._current_exceptions": "reading the interpreter's frames",
    "object.__getattr__": "reading the interpreter's frames",
    "sys.settrace": "installing a trace function",
    "sys.setprofile": "installing a profile function",
    "sys.addaudithook": "installing an audit hook",
    "gc.get_objects": "walking the garbage collector's objects",
    "gc.get_referrers": "walking the garbage collector's objects",
    "gc.get_referents": "walking the garbage collector's objects",
    "_thread.start_new_thread": "starting threads",
    "cpython.PyInterpreterState_New": "creating sub-interpreters",
    "ctypes": "calling native code through ctypes",
}


def _frame_helpers():
    """(returners, consumers): {id(code): globals} of the standard library's frame users.

    A frame may be taken only on behalf of a consumer, a function that turns frames
    into text or names and gives no frame back (traceback.format_stack, which
    torch.manual_seed calls; logging's findCaller; typing and namedtuple's module
    lookup). Returners (inspect.currentframe, traceback.walk_stack) hand frames to
    their caller, so they are looked through to whoever called them."""
    import collections
    import inspect
    import logging
    import traceback
    import typing

    def code_map(functions):
        found = {}
        for fn in functions:
            fn = getattr(fn, "__func__", fn)
            if type(fn) is types.FunctionType:
                found[id(fn.__code__)] = fn.__globals__
        return found

    extra = []
    try:  # torch's operator registry records where an operator was defined (lazy imports do this)
        import torch._library.utils
        import torch.library
        extra = [torch.library.Library.__init__, torch.library.Library._register_fake, torch._library.utils.get_source]
    except (ImportError, AttributeError):
        pass
    returners = code_map([inspect.currentframe, logging.currentframe, traceback.walk_stack, traceback.walk_tb,
                          getattr(traceback, "_walk_tb_with_full_positions", None)])
    consumers = code_map([traceback.extract_stack, traceback.format_stack, traceback.print_stack,
                          traceback.StackSummary.extract,
                          getattr(traceback.StackSummary, "_extract_from_extended_frame_gen", None),
                          logging.Logger.findCaller, getattr(typing, "_caller", None), collections.namedtuple,
                          typing.TypeVar.__init__, *extra])
    return returners, consumers


def _code_objects(code) -> list:
    """`code` and every code object nested in its constants (functions, classes, comprehensions)."""
    found, todo = [], [code]
    while todo:
        c = todo.pop()
        found.append(c)
        todo.extend(k for k in c.co_consts if type(k) is types.CodeType)
    return found


def pointer_hash():
    """h(id) -> what object.__hash__ gives the object with that id (CPython: its address rotated right by 4
    bits, one to one), or None where a probe says otherwise. The stack check looks each frame's code up with
    object.__hash__ instead of id(), which is an audit event: a call of the hook for every frame of every draw."""
    def h(i: int) -> int:
        y = ((i >> 4) | (i << 60)) & 0xFFFF_FFFF_FFFF_FFFF
        x = y - (1 << 64) if y >= 1 << 63 else y
        return -2 if x == -1 else x
    try:
        probes = [object(), compile("0", "<probe>", "eval"), type("Probe", (), {})]
        if sys.maxsize == 2 ** 63 - 1 and all(object.__hash__(p) == h(id(p)) for p in probes):
            return h
    except Exception:
        pass
    return None


def _stack_checks(grader_codes: set, grader_hashes: set | None = None):
    """(on_behalf_of_consumer, only_grader_on_stack, add_consumer): what the hook asks of the stack that raised an
    event. Each is called by the hook itself (only_grader_on_stack through inputs_event), so the event's raiser
    is two frames up: the depth is part of the contract. `grader_hashes`, where given, holds object.__hash__ of
    the same code objects as `grader_codes` (ids): an identity, read without an audit event."""
    returners, consumers = _frame_helpers()
    getframe, get_id, object_hash = sys._getframe, id, object.__hash__

    def on_behalf_of_consumer() -> bool:
        f = getframe(2)  # 0: this function, 1: the hook, 2: whoever raised the event
        while f is not None and returners.get(get_id(f.f_code)) is f.f_globals:
            f = f.f_back
        if f is None or consumers.get(get_id(f.f_code)) is not f.f_globals:
            return False
        return not f.f_locals.get("capture_locals")  # reprs of the grader's locals are no better

    def only_grader_on_stack() -> bool:
        """Whether every frame that led to this event is the grader's: the given and test cells'
        code, the libraries and the course. A student's function anywhere on the way (even one
        that calls a given helper that draws) is not."""
        f = getframe(2)
        if grader_hashes is not None:
            while f is not None:
                if object_hash(f.f_code) not in grader_hashes:
                    return False
                f = f.f_back
            return True
        while f is not None:
            if get_id(f.f_code) not in grader_codes:
                return False
            f = f.f_back
        return True

    def add_consumer(fn) -> None:
        consumers[get_id(fn.__code__)] = fn.__globals__

    return on_behalf_of_consumer, only_grader_on_stack, add_consumer


def _inputs_guard(busy: list, blocked: list, only_grader_on_stack):
    """(inputs_event, reseed, testing): the random-input stream the tests draw from, held by the hook alone.
    inputs_event(args) answers course.inputs' "course.inputs" audit event (draw, seed, count); while a test runs
    (testing[0]) only the grader's own code may draw from it or reseed it, and a draw from anywhere else is
    refused and named in `blocked`. reseed(seed) starts the stream again for a test cell."""
    len_, type_, all_, str_type, tuple_type, list_type, int_type = len, type, all, str, tuple, list, int
    violation, append = SandboxViolation, blocked.append
    try:
        from course.inputs import _draw as draw
    except ImportError:  # a course without the inputs module: nothing draws
        draw = None
    from _random import Random as MersenneTwister
    stream, stream_seed, testing, drawn = MersenneTwister(0), [0], [False], [0]  # drawn: since the last seed

    def inputs_event(args) -> None:
        if len_(args) != 3 or type_(args[2]) is not list_type or type_(args[1]) is not tuple_type:
            return
        op, params, box = args
        if type_(op) is not str_type or not all_(type_(p) is int_type for p in params):
            return
        if op == "repeating":  # never a seed sweep here: every check runs, whatever a notebook asks
            box.append(False)
            return
        if testing[0] and op != "seed" and op != "drawn":  # reading the seed or the count draws nothing
            busy[0] = True
            try:
                ours = only_grader_on_stack()
            finally:
                busy[0] = False
            if not ours:
                append("course.inputs")
                raise violation("drawing from the tests' random inputs (or reseeding them) while a test runs is "
                                "not allowed: they are the tests' own; see the course's grading guide")
        if op == "seed":
            box.append(stream_seed[0])
        elif op == "drawn":
            box.append(drawn[0])
        elif op == "reseed" and len_(params) == 1:
            reseed(params[0])
        elif draw is not None and op in ("random", "randint", "randrange"):
            drawn[0] += 1
            box.append(draw(stream.getrandbits, stream.random, op, params))

    def reseed(seed: int) -> None:
        stream.seed(seed)
        stream_seed[0], drawn[0] = seed, 0

    return inputs_event, reseed, testing


def _code_writes_guard(busy: list, blocked: list, grader_codes: set, protected_ids: frozenset):
    """setattr_event(args): refuses, while notebook code runs, what would patch the grader's code where it cannot be
    checked later: a new __code__, __defaults__ or __kwdefaults__ for a function whose code is the grader's
    (`grader_codes`), a new __class__ for a module or class of the snapshot's (`protected_ids`)."""
    len_, type_, str_type, get_id = len, type, str, id
    violation, append = SandboxViolation, blocked.append
    function_type, code_of = types.FunctionType, types.FunctionType.__code__.__get__
    code_attrs = frozenset({"__code__", "__defaults__", "__kwdefaults__"})

    def setattr_event(args) -> None:
        if len_(args) < 2 or type_(args[1]) is not str_type:
            return
        name, obj = args[1], args[0]
        if name in code_attrs and type_(obj) is function_type:
            busy[0] = True  # reading __code__ is an audit event too
            try:
                ours = get_id(code_of(obj)) in grader_codes
            finally:
                busy[0] = False
            if not ours:
                return
            what = f"changing the grader's code ({name} of one of its functions)"
        elif name == "__class__" and get_id(obj) in protected_ids:
            what = "changing the class of one of the grader's modules or classes"
        else:
            return
        append("object.__setattr__")  # the name students read in the notes, for a deletion too
        raise violation(f"{what} is not allowed while the notebook is graded; see the course's grading guide")

    return setattr_event


def _audit_hook(blocked: list, flags: dict, events: dict):
    """The audit hook: `flags` holds the lists it shares with the grader ("untrusted": notebook code is running,
    "busy": the hook's own work raises events, "testing", "verifier", "function_writes"), `events` its handlers
    ("inputs", "setattr", "on_behalf_of_consumer"). Outside notebook code it only counts writes of functions'
    code and serves the input stream; inside, it refuses frames, the collector's walks, trace and profile hooks,
    new audit hooks, threads, sub-interpreters and (unless allowed) ctypes, and calls the verifier."""
    untrusted, busy, testing, verifier, function_writes = (flags["untrusted"], flags["busy"], flags["testing"],
                                                           flags["verifier"], flags["function_writes"])
    inputs_event, setattr_event, on_behalf_of_consumer = (events["inputs"], events["setattr"],
                                                          events["on_behalf_of_consumer"])
    frame_events, frame_attrs, why = FRAME_EVENTS, FRAME_ATTRS, dict(_WHY)
    frame_giving = frozenset({"sys._getframe", "object.__getattr__"})
    code_attrs = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
    attr_writes = frozenset({"object.__setattr__", "object.__delattr__"})
    violation, str_type, append, len_, type_ = SandboxViolation, str, blocked.append, len, type

    def hook(event, args):
        if event in attr_writes and len_(args) > 1 and type_(args[1]) is str_type and args[1] in code_attrs:
            function_writes[0] += 1  # counted even from trusted code: restore then looks at every function
        if busy[0]:
            return
        if event == "course.inputs":
            return inputs_event(args)
        if not untrusted[0]:
            return
        if event == "course.verify":
            if testing[0] and verifier[0] is not None:
                busy[0] = True
                try:
                    verifier[0](args)
                finally:
                    busy[0] = False
            return
        if event in attr_writes:  # setting __defaults__ to None is an "object.__delattr__"
            return setattr_event(args)
        if event in frame_events:
            pass
        elif event == "object.__getattr__":
            if len_(args) < 2 or type_(args[1]) is not str_type or args[1] not in frame_attrs:
                return
        elif event.startswith("ctypes."):
            event = "ctypes"
        else:
            return
        if event in frame_giving:
            busy[0] = True
            try:
                if on_behalf_of_consumer():
                    return
            finally:
                busy[0] = False
        append(event)
        raise violation(f"{why.get(event, event)} is not allowed while the notebook is graded "
                        "(it could reach into the grader); see the course's grading guide")

    return hook


def install_guard(trusted_codes=(), protected=()):
    """Install the audit hook; return (set_untrusted, blocked, controls) where set_untrusted(bool)
    switches the policy on around notebook code, `blocked` lists what was refused, and
    `controls` (a dict of functions) is the grader's handle on what only the hook holds:

    - the random-input stream the tests draw from (course.inputs asks it through the
      "course.inputs" audit event): "reseed"(seed) before a test cell, "testing"(flag) while
      one runs, when only the grader's own code may draw from it or reseed it;
    - "trust_code"(code): code compiled from the notebook's given and test cells, or the kernel's
      own, whose frames count as the grader's (with `trusted_codes`, the ids of the libraries' code);
    - "consumer"(function): one of the grader's that may read frames and hands none out;
    - "functions_written"(): whether restore() must look at the functions' code and defaults
      (reading each function's __code__ is an audit event, so looking at all of them through this
      hook costs more than the rest of a restore);
    - "verifier"(function): called, while a test runs, for every "course.verify" audit event (the
      comparison helpers raise one where they use what they compare with, and the kernel one before
      every statement of a test cell); it raises when the tests' tools were changed.

    While notebook code runs, the hook also refuses what would patch the grader's code where it
    cannot be checked later: a new __code__, __defaults__ or __kwdefaults__ for a function of the
    libraries, the course or the notebook's given and test cells, and a new __class__ for a module
    or class in `protected` (ids of the snapshot's)."""
    untrusted, busy = [False], [False]
    blocked: list[str] = []
    # Ids of the code objects whose frames are the grader's: the snapshot's functions (the libraries,
    # the course) and what trust_code() adds (the given and test cells, the kernel's own loop).
    grader_codes: set[int] = set(trusted_codes)
    keep_codes: list = []  # alive, so that their ids are never reused by a student's code
    to_hash = pointer_hash()
    grader_hashes = {to_hash(i) for i in grader_codes} if to_hash else None  # the same codes, for the stack walk
    on_behalf_of_consumer, only_grader_on_stack, consumer = _stack_checks(grader_codes, grader_hashes)
    inputs_event, reseed, testing = _inputs_guard(busy, blocked, only_grader_on_stack)
    setattr_event = _code_writes_guard(busy, blocked, grader_codes, frozenset(protected))
    verifier: list = [None]
    function_writes, writes_checked = [0], [0]
    sys.addaudithook(_audit_hook(blocked,
                                 {"untrusted": untrusted, "busy": busy, "testing": testing, "verifier": verifier,
                                  "function_writes": function_writes},
                                 {"inputs": inputs_event, "setattr": setattr_event,
                                  "on_behalf_of_consumer": on_behalf_of_consumer}))
    get_id, object_hash = id, object.__hash__

    def set_untrusted(flag: bool) -> None:
        untrusted[0] = flag

    def set_testing(flag: bool) -> None:
        testing[0] = flag

    def trust_code(code) -> None:
        for c in _code_objects(code):
            keep_codes.append(c)
            grader_codes.add(get_id(c))
            if grader_hashes is not None:
                grader_hashes.add(object_hash(c))

    def set_verifier(fn) -> None:
        verifier[0] = fn

    def functions_written() -> bool:
        """Whether a function's __code__, __defaults__ or __kwdefaults__ was set since the last ask.
        Every such write is an audit event (ctypes, which could write without one, is refused)."""
        seen, writes_checked[0] = writes_checked[0], function_writes[0]
        return seen != function_writes[0]

    controls = {"reseed": reseed, "testing": set_testing, "trust_code": trust_code, "consumer": consumer,
                "verifier": set_verifier, "functions_written": functions_written}
    return set_untrusted, blocked, controls


def exact_str(value, default: str = "") -> str:
    """`value` if it is exactly a str (a subclass could run code later), else `default`."""
    return value if type(value) is str else default


__all__ = ["Snapshot", "SandboxViolation", "install_guard", "exact_str", "builtins"]
