"""What the GPU check runs on the lent machine, and which third-party modules that code imports.

The lent GPU machine has its own Python (3.12, torch, cupy, pytest, hypothesis: its image's packages are
listed in device_image.txt) and reaches no package registry, so whatever else the check needs travels as
wheels (wheels.txt, downloaded here by prepare.sh). This module finds what that is, from the code itself:
it reads every file the check runs there (the driver, the GPU test files with conftest, chapter 05's
notebook, the `gpu` benchmark suite) and follows each import of the repository's own modules to their
files, collecting the imports of everything else. Standard library only: the driver runs it on the
device, before anything else, to say at once which module is missing.

    python -m benchmarks.device.imports            # the third-party modules, and where each is imported
    python -m benchmarks.device.imports --wheels   # the distributions to carry, pinned to this venv's
                                                   # versions (the content of wheels.txt)
    python -m benchmarks.device.imports --check    # what is wrong with wheels.txt (exit 1 if anything)
    python -m benchmarks.device.imports --image    # the device image's distributions the check relies on
"""
from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CHAPTER = "05_backend"  # the chapter graded on the GPU
PACKAGE = "picotorch"   # the framework the chapters build (course/framework_package.py)
WHEELS = HERE / "wheels.txt"
DEVICE_IMAGE = HERE / "device_image.txt"

# Imports in code the check loads but never calls there: each must stay inside a function (a test checks).
NOT_REACHED = {
    ("autograder/nbgrader_env.py", "nbgrader"):
        "nbgrader_env.api() generates release/ and grades; the check only assembles the reference",
    ("autograder/nbgrader_env.py", "traitlets"): "the same function's configuration",
    ("autograder/nbgrader_env.py", "alembic"): "stamp_in_process(), for the gradebooks of the build and the grader",
}

# The interpreter the device runs, for requirement markers.
DEVICE_MARKERS = {
    "python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
    "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
    "os_name": "posix", "platform_machine": "x86_64", "extra": "",
}


@dataclass(frozen=True)
class Import:
    module: str        # as written, made absolute
    file: str          # relative to the repository
    line: int
    in_function: bool  # runs only when the function does
    optional: bool     # inside a try that catches ImportError (or broader)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" + (" (in a function)" if self.in_function else "")


def gpu_test_files(repo: Path = REPO) -> list[Path]:
    """The test files with tests marked gpu: what `pytest -m gpu` runs on the device."""
    return sorted(p for p in (repo / "tests").rglob("test_*.py") if "pytest.mark.gpu" in p.read_text())


def entry_files(repo: Path = REPO) -> list[Path]:
    """The files the device runs directly (everything else it runs, it reaches through their imports)."""
    device = repo / "benchmarks" / "device"
    return [device / "gpu_check.py", device / "imports.py", repo / "benchmarks" / "run.py",
            repo / "benchmarks" / "suites" / "gpu.py", repo / "tests" / "conftest.py",
            *gpu_test_files(repo), chapter_text_form(repo)]


def chapter_text_form(repo: Path = REPO, chapter: str = CHAPTER) -> Path:
    return repo / "source" / chapter / f"{chapter}.py"


def _local_roots(repo: Path) -> set[str]:
    tops = {p.parent.name for p in repo.glob("*/__init__.py")}
    tops |= {p.stem for p in (repo / "tests").rglob("*.py")}  # test modules and helpers: imported by name
    return tops | {PACKAGE}


def resolve(module: str, repo: Path = REPO) -> Path | None:
    """The repository file that `import module` loads on the device, or None if it is not ours."""
    parts = module.split(".")
    # release/NN/picotorch/: the committed copy (git ignores source/NN/picotorch/); its modules may be links
    if parts[0] == PACKAGE:
        package = repo / "release" / CHAPTER / PACKAGE
        if len(parts) == 1:
            return package / "__init__.py"
        if len(parts) == 2 and (package / f"{parts[1]}.py").exists():
            return package / f"{parts[1]}.py"
        if len(parts) == 2 and parts[1] == "ch" + CHAPTER:  # made from the chapter's own reference cells
            return chapter_text_form(repo)
        return None
    for base in (repo, repo / "tests", repo / "tests" / "support"):
        path = base.joinpath(*parts)
        if (path / "__init__.py").exists():
            return path / "__init__.py"
        if path.with_suffix(".py").exists():
            return path.with_suffix(".py")
    return None


def module_name_of(path: Path, repo: Path = REPO) -> str:
    if path == chapter_text_form(repo):
        return f"{PACKAGE}.ch{CHAPTER}"
    package = repo / "release" / CHAPTER / PACKAGE
    if path.is_relative_to(repo / "tests"):  # no packages there: conftest, the test modules and tests/support/
        return path.stem  # are imported by name, their folder on the path
    rel = path.relative_to(package.parent if path.is_relative_to(package) else repo)
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _catches_import_error(node: ast.Try) -> bool:
    names = set()
    for handler in node.handlers:
        if handler.type is None:
            return True
        for t in (handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]):
            names.add(getattr(t, "id", getattr(t, "attr", "")))
    return bool(names & {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def imports_in(path: Path, repo: Path = REPO) -> list[Import]:
    """Every import statement of one file, made absolute."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = module_name_of(path, repo)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    rel = path.relative_to(repo).as_posix()
    found: list[Import] = []

    def visit(node, in_function: bool, optional: bool) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return  # never runs
        if isinstance(node, ast.Import):
            found.extend(Import(a.name, rel, node.lineno, in_function, optional) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found.append(Import(module, rel, node.lineno, in_function, optional))
            # `from package import submodule` loads the submodule's file too
            found.extend(Import(f"{module}.{a.name}", rel, node.lineno, in_function, optional)
                         for a in node.names if a.name != "*" and resolve(f"{module}.{a.name}", repo))
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(node, ast.Try):
            for child in node.body:
                visit(child, inner, optional or _catches_import_error(node))
            for child in node.handlers + node.orelse + node.finalbody:
                visit(child, inner, optional)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, inner, optional)

    visit(tree, False, False)
    return found


@lru_cache(maxsize=None)
def scan(repo: Path = REPO) -> tuple[list[Path], list[Import]]:
    """(the repository files the device loads, the imports of modules that are not the repository's),
    following the repository's own modules from entry_files()."""
    local = _local_roots(repo)
    stdlib = set(sys.stdlib_module_names)
    todo = [p for p in entry_files(repo) if p.exists()]
    seen: set[Path] = set()
    outside: list[Import] = []
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for imp in imports_in(path, repo):
            top = imp.module.split(".")[0]
            if top in stdlib or top == "__future__":
                continue
            if top in local:
                parts = imp.module.split(".")
                for n in range(1, len(parts) + 1):  # a module's packages load first
                    target = resolve(".".join(parts[:n]), repo)
                    if target is not None and target not in seen:
                        todo.append(target)
                continue
            outside.append(imp)
    return sorted(seen), sorted(outside, key=lambda i: (i.module, i.in_function, i.file, i.line))


def third_party(repo: Path = REPO, include_optional: bool = False) -> dict[str, list[Import]]:
    """{top-level module: where it is imported} for what the device must be able to import."""
    result: dict[str, list[Import]] = {}
    for imp in scan(repo)[1]:
        top = imp.module.split(".")[0]
        if (imp.file, top) in NOT_REACHED and imp.in_function:
            continue
        if imp.optional and not include_optional:
            continue
        result.setdefault(top, []).append(imp)
    return dict(sorted(result.items()))


# ------------------------------------------------------------------ the lists

def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _entries(path: Path, separator: str) -> list[tuple[str, str]]:
    """(normalised name, the rest) of each line of `path` that holds more than a # comment, split at `separator`."""
    entries = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, rest = line.partition(separator)
            entries.append((normalise(name), rest))
    return entries


def read_wheels(path: Path = WHEELS) -> dict[str, str]:
    """{distribution: version} of wheels.txt (lines `name==version`, # comments)."""
    return {name: version.strip() for name, version in _entries(path, "==")}


def read_device_image(path: Path = DEVICE_IMAGE) -> dict[str, list[str]]:
    """{distribution: the import names it gives, where listed} of the device image's packages
    (lines `name` or `name: module module`, # comments)."""
    return {name: modules.split() for name, modules in _entries(path, ":")}


def requirements(dist: str) -> list[str]:
    """The names a distribution installed here needs on the device's Python (markers evaluated there)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    needed = []
    for text in metadata.requires(dist) or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(DEVICE_MARKERS):
            needed.append(normalise(req.name))
    return needed


@lru_cache(maxsize=None)
def _packages_distributions() -> dict[str, list[str]]:
    from importlib import metadata

    return metadata.packages_distributions()


@lru_cache(maxsize=None)
def distributions(repo: Path = REPO) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """({distribution the device lacks: why it is needed}, {distribution of the device image the check uses:
    why}), from the imports and, through this venv's metadata, what those distributions require in turn.
    Runs where the project's venv is (it reads the installed distributions' metadata)."""
    from importlib import metadata

    image = read_device_image()
    by_import = {m: name for name, mods in image.items() for m in mods}
    providers = {m: [normalise(d) for d in ds] for m, ds in _packages_distributions().items()}
    carried: dict[str, list[str]] = {}
    used: dict[str, list[str]] = {}
    todo = []
    for module, where in third_party(repo).items():
        dists = [by_import[module]] if module in by_import else providers.get(module)
        if not dists:
            raise LookupError(f"no installed distribution provides {module!r} (imported at {where[0]}): "
                              f"install it in this venv, or name it in {DEVICE_IMAGE.name} if the device has it")
        for d in dists:
            (used if d in image else carried).setdefault(d, []).append(f"import {module} ({where[0].file})")
            if d not in image:
                todo.append(d)
    while todo:
        dist = todo.pop()
        for req in requirements(dist):
            into = used if req in image else carried
            if req not in into:
                into[req] = [f"required by {dist}"]
                if req not in image:
                    todo.append(req)
    return dict(sorted(carried.items())), dict(sorted(used.items()))


def check_wheels(repo: Path = REPO) -> tuple[list[str], list[str]]:
    """(what is wrong with wheels.txt, judged by the code and this venv's metadata; where its pins differ
    from this venv's versions, which the project's tests ran with)."""
    from importlib import metadata

    carried, _ = distributions(repo)
    pins = read_wheels()
    image = read_device_image()
    problems = [f"{d} is needed on the device ({why[0]}) and neither the device image nor {WHEELS.name} has it"
                for d, why in carried.items() if d not in pins]
    problems += [f"{d} is in {WHEELS.name} and in the device image: carry only what the image lacks"
                 for d in pins if d in image]
    drift = []
    for d, version in pins.items():
        try:
            here = metadata.version(d)
        except metadata.PackageNotFoundError:
            continue
        if here != version:
            drift.append(f"{d}: {WHEELS.name} pins {version}, this venv has {here}")
    return problems, drift


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", action="store_true", help="print wheels.txt's content for this venv")
    parser.add_argument("--image", action="store_true", help="print the device image's distributions it uses")
    parser.add_argument("--check", action="store_true", help="say what is wrong with wheels.txt (exit 1 if any)")
    args = parser.parse_args(argv)
    if args.check:
        problems, drift = check_wheels()
        for p in problems:
            print(f"{WHEELS.relative_to(REPO)}: {p}")
        for d in drift:
            print(f"{WHEELS.relative_to(REPO)}: note: {d}")
        if problems or drift:
            print("regenerate it: python -m benchmarks.device.imports --wheels > benchmarks/device/wheels.txt")
        return 1 if problems else 0
    if args.wheels or args.image:
        from importlib import metadata

        carried, used = distributions()
        if args.wheels:
            print("# The distributions benchmarks/gpu_check.sh needs on the lent GPU machine that its image lacks,\n"
                  "# pinned to the project venv's versions; made by `python -m benchmarks.device.imports --wheels`,\n"
                  "# downloaded as CPython 3.12 wheels by benchmarks/device/prepare.sh.")
        for dist, why in (carried if args.wheels else used).items():
            version = metadata.version(dist) if args.wheels else ""
            print(f"{dist + ('==' + version if version else ''):34s} # {why[0]}")
        return 0
    for module, where in third_party().items():
        print(f"{module:20s} {', '.join(map(str, where[:3]))}{' ...' if len(where) > 3 else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
