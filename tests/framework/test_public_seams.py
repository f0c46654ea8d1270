"""The chapters extend picotorch through public seams only (issue 16, COURSE.md §7).

- No chapter's text form imports a `_private` name of an earlier chapter, or imports an earlier
  chapter's module to reach into it (`import picotorch.ch02_autograd as _autograd`).
- Each chapter module declares `__all__`, a list of names it defines.
- After importing chapter 05's picotorch (chapters 01-04), each attribute of `Tensor` was set by one
  chapter only: a later chapter adds methods, or registers kernels, but never replaces a method.
- The same for every other class a chapter exports (`Storage`, the `Function`s, `Module`...): no later
  chapter assigns an attribute that the class already has (`Storage.device = ...`,
  `LinearFunction.forward = ...`); it registers a kernel or calls a hook instead.
"""
from __future__ import annotations

import ast
import functools
import importlib
import re
import sys
import types
from pathlib import Path

import pytest

from autograder.chapters import discover

REPO = Path(__file__).resolve().parents[2]
CHAPTERS = discover(REPO / "source")
PACKAGE = "picotorch"


def _code_of(chapter) -> ast.Module:
    return ast.parse(Path(chapter.text_form).read_text())


def private_reaches(tree: ast.Module) -> list[str]:
    """What the code takes from picotorch that is private: `_names` imported from it, earlier chapters'
    modules imported (whose attributes then reach their private names), `_attributes` of picotorch."""
    found = []
    modules = set()  # local names bound to picotorch or one of its modules
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == PACKAGE:
            if node.module != PACKAGE:
                found.append(f"line {node.lineno}: from {node.module} import ... (a chapter's module, not picotorch)")
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    if alias.name != PACKAGE:
                        found.append(f"line {node.lineno}: import {alias.name} (a chapter's module)")
                    modules.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and node.attr.startswith("_")):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda ch: ch.id)
def test_no_chapter_imports_a_private_name_of_an_earlier_one(chapter):
    found = private_reaches(_code_of(chapter))
    assert not found, (f"{chapter.id} reaches into earlier chapters' private names (make the hook public, named "
                       f"in the chapter that introduces it): " + "; ".join(found))


def test_the_check_sees_private_imports():
    code = ("from picotorch import Tensor, _helper\nfrom picotorch.ch01_tensor import TORCH_DTYPE\n"
            "import picotorch.ch02_autograd as _autograd\n_autograd._where = 1\n")
    found = private_reaches(ast.parse(code))
    assert len(found) == 4, found
    assert not private_reaches(ast.parse("from picotorch import Tensor, dispatch\nimport picotorch\n"))


def _module_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


@functools.lru_cache(maxsize=None)
def _reference_modules():
    """Parsed once per process: every chapter's text form read through jupytext (seconds), not once per test."""
    from autograder.build.reference import package_files

    files = package_files(CHAPTERS)
    return {path: text for path, text in files.items() if not path.endswith("__init__.py")}


def _module_paths() -> list[str]:
    """The package's module of each chapter whose text form has framework cells (`reference=true`): named
    without parsing the chapters at collection, as _reference_modules() would in every worker."""
    from course.framework_package import PACKAGE, module_name
    return sorted(f"{PACKAGE}/{module_name(c.id)}.py" for c in CHAPTERS
                  if re.search(r"^# %%.*\breference=true\b", c.text_form.read_text(), re.M))


def test_the_modules_named_are_the_modules_built():
    assert _module_paths() == sorted(_reference_modules())


def _all_of(tree: ast.Module) -> list | None:
    """The module's __all__ as its top-level statements build it: `__all__ = [...]`, then any later section's
    `__all__ += [...]` or `__all__ = __all__ + [...]` (a chapter's sections each add their names); None if none."""
    names = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            value = node.value
            if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add) and \
                    isinstance(value.left, ast.Name) and value.left.id == "__all__":
                names = (names or []) + list(ast.literal_eval(value.right))
            else:
                names = list(ast.literal_eval(value))
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == "__all__":
            names = (names or []) + list(ast.literal_eval(node.value))
    return names


def test_all_counts_what_every_section_adds():
    tree = ast.parse("__all__ = ['a']\n__all__ += ['b']\n__all__ = __all__ + ['c']\n")
    assert _all_of(tree) == ["a", "b", "c"] and _all_of(ast.parse("x = 1\n")) is None


@pytest.mark.parametrize("path", _module_paths())
def test_each_chapter_module_declares_all(path):
    tree = ast.parse(_reference_modules()[path])
    names = _all_of(tree)
    assert names is not None, f"{path} declares no __all__ (its public names, for `from picotorch import ...`)"
    assert all(isinstance(n, str) for n in names), f"{path}: __all__ is a list of str"
    missing = sorted(set(names) - _module_names(tree))
    assert not missing, f"{path}: __all__ names what the module does not define: {missing}"
    assert len(set(names)) == len(names), f"{path}: __all__ names something twice"


_DUNDERS = ("__dict__", "__weakref__", "__doc__")


def _exported_classes(package) -> dict:
    """{class name: dict(vars(class))} for each class in the package's namespace (what the chapters export), named
    by where it is defined (chapter 02's `Tanh`, a Function, is not chapter 03's `Tanh`, a Module)."""
    return {f"{value.__module__.split('.')[-1]}.{value.__qualname__}": dict(vars(value))
            for name, value in vars(package).items()
            if isinstance(value, type) and not name.startswith("_") and value.__module__.startswith(PACKAGE + ".")}


def replaced_attributes(snapshots) -> list[str]:
    """`Class.name (set by A, set again by B)` for each attribute whose value a later chapter changed, from
    [(chapter, {class name: vars})] in import order. Attributes a later chapter adds are fine."""
    replaced, before, owner = [], {}, {}
    for chapter, classes in snapshots:
        for cls, attributes in classes.items():
            seen = before.get(cls, {})
            for name, value in attributes.items():
                if name in _DUNDERS:
                    continue
                if name in seen and seen[name] is not value:
                    replaced.append(f"{cls}.{name} (set by {owner[cls, name]}, set again by {chapter})")
                if name not in seen or seen[name] is not value:
                    owner[cls, name] = chapter
            before[cls] = attributes
    return replaced


def test_the_check_sees_a_replaced_class_attribute():
    forward, patched = object(), object()
    snapshots = [("ch01", {"Storage": {"device": "cpu"}}), ("ch03", {"Storage": {"device": "cpu"},
                                                                      "LinearFunction": {"forward": forward}}),
                 ("ch05", {"Storage": {"device": "a Device"}, "LinearFunction": {"forward": patched, "new": 1}})]
    assert replaced_attributes(snapshots) == ["Storage.device (set by ch01, set again by ch05)",
                                              "LinearFunction.forward (set by ch03, set again by ch05)"]


def _load_chapter_by_chapter(folder: Path):
    """Import the picotorch in `folder` one chapter module at a time, as its __init__ does (`from .chNN import *`
    in order), and yield (chapter module name, vars(Tensor) after it)."""
    init = (folder / "__init__.py").read_text()
    order = [line.split()[1][1:] for line in init.splitlines() if line.startswith("from .")]
    saved = {name: module for name, module in sys.modules.items() if name == PACKAGE or name.startswith(PACKAGE + ".")}
    for name in saved:
        del sys.modules[name]
    package = types.ModuleType(PACKAGE)
    package.__path__ = [str(folder)]
    sys.modules[PACKAGE] = package
    try:
        for name in order:
            module = importlib.import_module(f"{PACKAGE}.{name}")
            exported = getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")])
            for n in exported:
                setattr(package, n, getattr(module, n))
            yield name, dict(vars(package.Tensor)), _exported_classes(package)
    finally:
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]
        sys.modules.update(saved)


def _reference_package(tmp_path) -> Path:
    from autograder.build.release import assemble_reference

    return assemble_reference(REPO, tmp_path / "reference") / PACKAGE


@pytest.mark.parametrize("which", ["release/05_backend", "every chapter"])
def test_no_chapter_replaces_a_method_of_tensor(which, tmp_path):
    folder = REPO / which / PACKAGE if which.startswith("release") else _reference_package(tmp_path)
    if not folder.is_dir():
        pytest.skip(f"no {folder}")
    replaced, before, owner = [], {}, {}
    for chapter, attributes, _ in _load_chapter_by_chapter(folder):
        for name, value in attributes.items():
            if name in before and before[name] is not value and name not in ("__dict__", "__weakref__", "__doc__"):
                replaced.append(f"Tensor.{name} (set by {owner[name]}, set again by {chapter})")
            if name not in before or before[name] is not value:
                owner[name] = chapter
        before = attributes
    assert len(before) > 50, "Tensor has too few attributes: the walk did not see the chapters"
    assert not replaced, "later chapters replace methods of Tensor instead of registering kernels: " + \
        "; ".join(replaced)


@pytest.mark.parametrize("which", ["release/05_backend", "every chapter"])
def test_no_chapter_replaces_an_attribute_of_an_earlier_class(which, tmp_path):
    folder = REPO / which / PACKAGE if which.startswith("release") else _reference_package(tmp_path)
    if not folder.is_dir():
        pytest.skip(f"no {folder}")
    snapshots = [(chapter, classes) for chapter, _, classes in _load_chapter_by_chapter(folder)]
    classes = snapshots[-1][1]
    assert {"ch01_tensor.Storage", "ch02_autograd.Function", "ch03_module.LinearFunction",
            "ch03_module.Module"} <= set(classes), \
        f"the walk did not see the chapters' classes: {sorted(classes)}"
    replaced = replaced_attributes(snapshots)
    assert not replaced, ("later chapters assign attributes of earlier chapters' classes instead of registering "
                          "kernels or calling a public hook: " + "; ".join(replaced))
