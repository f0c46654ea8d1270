"""The grading kernel's restore and tool checks skip what has not changed since they last looked
(autograder/sandbox/integrity.py: version_tags, tag_reader, the restorers' _changed_since). A skip must never
hide a change: these tests patch a module and a class after a clean restore, and again after the next one; a
namespace without a version tag (ctypes keeps its classes' in a dict subclass) is looked at every time."""
from __future__ import annotations

import struct
import sys
import types

import pytest

from autograder.sandbox.integrity import Snapshot, _changed_since, pointer_hash, tag_reader, version_tags


@pytest.fixture
def module(tmp_path):
    """A module of the snapshot's (its file under the snapshot's root) with a function and a class, each with
    code a student could replace."""
    m = types.ModuleType("restore_probe")
    m.__file__ = str(tmp_path / "restore_probe.py")
    exec("def f():\n    return 'f'\n"
         "class Base:\n    pass\n"
         "class C(Base):\n    def g(self):\n        return 'g'\n", m.__dict__)
    sys.modules[m.__name__] = m
    try:
        yield m, str(tmp_path) + "/"
    finally:
        del sys.modules[m.__name__]


def _restore(snap: Snapshot) -> set[str]:
    sensitive, _ = snap.restore([], functions=False)
    return {name for name in sensitive if name.startswith("restore_probe.")}


def test_a_change_after_a_clean_restore_is_found_and_put_back(module):
    m, root = module
    snap = Snapshot.take(roots=(root,))
    assert _restore(snap) == set()
    f, g = m.f, m.C.__dict__["g"]
    m.f, m.C.g = (lambda: "patched"), (lambda self: "patched")
    assert _restore(snap) == {"restore_probe.f", "restore_probe.C.g"}
    assert (m.f, m.C.__dict__["g"]) == (f, g)
    assert _restore(snap) == set()  # put back: nothing left to find
    m.C.g = lambda self: "again"  # the class's tag was recorded after the last restore; it moves again
    assert _restore(snap) == {"restore_probe.C.g"}
    m.f = lambda: "again"
    assert _restore(snap) == {"restore_probe.f"}
    assert m.f() == "f" and m.C().g() == "g"


def test_new_bases_are_found_though_the_namespace_is_unchanged(module):
    m, root = module
    snap = Snapshot.take(roots=(root,))
    assert _restore(snap) == set()

    class Other:
        pass
    bases = m.C.__bases__
    m.C.__bases__ = (Other,)
    assert _restore(snap) == {"restore_probe.C.__bases__"}
    assert m.C.__bases__ == bases


def test_the_tag_reader_moves_with_every_change_of_any_of_its_dicts():
    dicts = [{"a": i} for i in range(50)] + [type("K", (), {}).__dict__]
    tags = version_tags(dicts)
    if tags is None:
        pytest.skip("this Python keeps no version tag in its dicts: the checks compare everything")
    read = tag_reader(tags)
    before = read()
    assert read() == before
    dicts[17]["b"] = 1
    after = read()
    assert after != before
    dicts[17]["b"] = 2
    assert read() != after
    read_now = read()  # the gathered bytes (NumPy), or the plain list: either way the tags' own values
    values = list(struct.unpack(f"{len(tags)}Q", read_now)) if isinstance(read_now, bytes) else read_now
    assert values == [t.value for t in tags]


def test_a_namespace_without_a_tag_is_looked_at_every_time():
    dicts = [{"a": 1}, {"b": 2}]
    tags = version_tags(dicts)
    if tags is None:
        pytest.skip("this Python keeps no version tag in its dicts: the checks compare everything")
    changed, mark = _changed_since([tags[0], None, tags[1]], 3)
    assert changed() == [0, 1, 2]  # at first, every one
    for i in range(3):
        mark(i)
    assert list(changed()) == [1]  # unchanged: only the one without a tag
    dicts[1]["b"] = 3
    assert changed() == [1, 2]


def test_the_stack_checks_identity_is_object_hash():
    """The stack check that guards the tests' random inputs looks each frame's code up by object.__hash__ (no
    audit event) in a set computed from the snapshot's ids: the two must name the same objects."""
    to_hash = pointer_hash()
    if to_hash is None:
        pytest.skip("object.__hash__ is not the rotated address here: the stack check uses id()")
    codes = [compile(f"x = {i}", "<c>", "exec") for i in range(100)] + [test_the_stack_checks_identity_is_object_hash.__code__]
    assert [to_hash(id(c)) for c in codes] == [object.__hash__(c) for c in codes]
    assert len({to_hash(id(c)) for c in codes}) == len(codes)


def test_a_patched_method_of_a_ctypes_class_is_put_back(module):
    """ctypes' metaclasses refuse type.__setattr__ on their classes; the restore sets theirs through their own."""
    import ctypes
    m, root = module

    class S(ctypes.Structure):
        _fields_ = [("x", ctypes.c_int)]

        def h(self):
            return "h"
    S.__module__ = m.__name__
    m.S = S
    snap = Snapshot.take(roots=(root,))
    assert _restore(snap) == set()
    S.h = lambda self: "patched"
    S.extra = lambda self: "added"
    assert {name.rpartition(".S.")[2] for name in _restore(snap)} == {"h", "extra"}
    assert S().h() == "h" and not hasattr(S, "extra")
