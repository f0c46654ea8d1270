"""The chapters' figures (scripts/figures): up to date with the script that draws them, valid SVG,
at least three in each chapter's prose with alt text, and shipped to release/ beside the notebook."""
from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET

import nbformat
import pytest

from conftest import CHAPTERS, REPO

sys.path.insert(0, str(REPO / "scripts"))
import figures  # noqa: E402  (scripts/figures, the generator)

SVG = "{http://www.w3.org/2000/svg}"
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def drawn():
    return figures.figures()


def references(chapter) -> list[tuple[str, str]]:
    """(alt text, path) of every image in the chapter's markdown cells, from its text form's notebook."""
    nb = nbformat.read(chapter.notebook, as_version=4)
    return [m.groups() for c in nb.cells if c.cell_type == "markdown" for m in IMAGE.finditer(c.source)]


def test_every_chapter_has_a_module_of_figures():
    assert sorted(figures.CHAPTERS) == sorted(c.id for c in CHAPTERS)


def test_the_committed_figures_are_what_the_script_draws(drawn):
    stale = [str(p.relative_to(REPO)) for p, text in drawn.items() if not p.exists() or p.read_text() != text]
    assert not stale, f"run `.venv/bin/python scripts/figures` (then `autograder build`): {stale}"
    for chapter in CHAPTERS:
        on_disk = set((chapter.source_dir / "figures").glob("*.svg"))
        stray = sorted(str(p.relative_to(REPO)) for p in on_disk - set(drawn))
        assert not stray, f"figures no script draws: {stray}"


def test_each_figure_is_an_svg_with_a_title(drawn):
    for path, text in drawn.items():
        root = ET.fromstring(text)
        assert root.tag == f"{SVG}svg", f"{path.name}: the root is {root.tag}, not svg"
        assert float(root.get("width")) > 0 and float(root.get("height")) > 0, path.name
        assert root.get("viewBox"), f"{path.name} has no viewBox: it would not scale"
        title = root.find(f"{SVG}title")
        assert title is not None and len(title.text or "") > 20, f"{path.name} has no title for screen readers"
        assert any(e.tag == f"{SVG}text" for e in root.iter()), f"{path.name} draws no text"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.id for c in CHAPTERS])
def test_each_chapter_shows_three_figures_with_alt_text(chapter):
    refs = references(chapter)
    assert len({path for _, path in refs}) >= 3, f"{chapter.id} shows {len(refs)} figures; at least 3 wanted"
    for alt, path in refs:
        assert path.startswith("figures/") and path.endswith(".svg"), f"{chapter.id}: image {path} not under figures/"
        assert len(alt.split()) >= 8, f"{chapter.id}: the alt text of {path} says too little: {alt!r}"
        assert "[" not in alt, f"{chapter.id}: brackets in the alt text of {path} end it early in some renderers"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.id for c in CHAPTERS])
def test_each_shown_figure_is_drawn_declared_and_released(chapter):
    nb = nbformat.read(chapter.notebook, as_version=4)
    declared = set(nb.metadata.get("course", {}).get("files", []))
    shown = {path for _, path in references(chapter)}
    for path in sorted(shown):
        assert (chapter.source_dir / path).is_file(), f"{chapter.id} shows {path}, which scripts/figures does not draw"
        assert path in declared, f"{chapter.id} shows {path} but its header's `files:` does not list it"
        released = REPO / "release" / chapter.id / path
        assert released.is_file(), f"release/{chapter.id}/{path} is missing: run `autograder build`"
        same = released.read_bytes() == (chapter.source_dir / path).read_bytes()
        assert same, f"release/{chapter.id}/{path} is stale: run `autograder build`"
    unused = sorted(p for p in declared if p.startswith("figures/") and p not in shown)
    assert not unused, f"{chapter.id} ships figures its prose never shows: {unused}"
