"""Chapter code as a Python module: the cells marked as part of the framework.

A chapter's framework cells (given code and solution cells, marked
`course: {reference: true}` in their metadata) are what later chapters build
on. The build turns the *solution* notebook's cells into the course's reference
`picotorch`; a self-learner can turn their *own* completed notebooks into it
instead (`course use-mine`), to run the next chapter on their own code.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

PACKAGE = "picotorch"
_MARKER = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")


def module_name(chapter_id: str) -> str:
    """The module of the package that holds chapter `chapter_id`'s framework code: ch<id>."""
    return "ch" + chapter_id


def framework_cells(nb) -> list[str]:
    """The sources of the notebook's code cells marked `reference`, which later chapters build on."""
    return [c.source for c in nb.cells
            if c.cell_type == "code" and c.metadata.get("course", {}).get("reference")]


def module_source(nb, header: str) -> str | None:
    """The framework cells as one module (solution markers dropped), or None if there are none."""
    cells = framework_cells(nb)
    if not cells:
        return None
    body = "\n\n\n".join("\n".join(line for line in src.splitlines() if not _MARKER.match(line)).strip()
                         for src in cells)
    return f'"""{header}"""\n\n{body}\n'


def package_files(modules: dict[str, str]) -> dict[str, str]:
    """{relative path: text} of a `picotorch` package made of {chapter id: module source}, in order."""
    if not modules:
        return {}
    files = {f"{PACKAGE}/{module_name(ch)}.py": text for ch, text in modules.items()}
    imports = "\n".join(f"from .{module_name(ch)} import *  # noqa: F401,F403" for ch in modules)
    files[f"{PACKAGE}/__init__.py"] = (f'"""picotorch made of chapters {", ".join(modules)}. Generated; '
                                       f'do not edit."""\n{imports}\n')
    return files


def use_mine(release: Path, chapter_id: str) -> list[str]:
    """Replace release/<chapter>/picotorch with one made from your own notebooks of the earlier
    chapters; the course's reference is kept aside in picotorch.reference/ for `use_reference`."""
    from course.notebook import NotebookError, read_notebook

    target = release / chapter_id
    if not target.is_dir():
        raise NotebookError(f"{target} does not exist: give the folder that holds your chapters (release/).")
    modules = {}
    for folder in sorted(p for p in release.iterdir() if p.is_dir() and p.name < chapter_id):
        notebook = folder / f"{folder.name}.ipynb"
        if not notebook.exists():
            continue
        source = module_source(read_notebook(notebook), f"Your own code from {notebook}, gathered by `course use-mine`.")
        if source is None:
            continue
        if "raise NotImplementedError()" in source:
            raise NotebookError(f"{notebook} still has unfinished exercises that later chapters need: "
                                "finish them (check() shows which) or keep the course's reference.")
        modules[folder.name] = source
    if not modules:
        raise NotebookError(f"no earlier chapter in {release} has framework code for {chapter_id} to run on.")
    package, backup = target / PACKAGE, target / f"{PACKAGE}.reference"
    if package.exists() and not backup.exists():
        package.rename(backup)
    elif package.exists():
        shutil.rmtree(package)
    written = []
    for rel, text in package_files(modules).items():
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        (target / rel).write_text(text)
        written.append(rel)
    return written


def use_reference(release: Path, chapter_id: str) -> bool:
    """Undo `use_mine`: put the course's reference picotorch back. False if it was already in place."""
    target = release / chapter_id
    package, backup = target / PACKAGE, target / f"{PACKAGE}.reference"
    if not backup.exists():
        return False
    if package.exists():
        shutil.rmtree(package)
    backup.rename(package)
    return True
