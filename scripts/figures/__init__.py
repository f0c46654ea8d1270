"""The chapters' figures: `python scripts/figures` writes source/NN_name/figures/*.svg.

One module per chapter (ch00 ... ch08); each has FIGURES = {file name: function -> svg.Figure}.
The figures are drawn from the real numbers (strides, shapes, graphs and schedules computed
with torch), so a figure cannot disagree with what the chapter teaches. The build ships them
(each chapter header lists its figures under `files:`) into release/NN_name/figures/.

    .venv/bin/python scripts/figures           # write every figure
    .venv/bin/python scripts/figures --check   # list the figures that are missing or stale
"""
from __future__ import annotations

import importlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHAPTERS = {"00_tour": "ch00", "01_tensor": "ch01", "02_autograd": "ch02", "03_module": "ch03",
            "04_training": "ch04", "05_backend": "ch05", "06_compile": "ch06",
            "07_conv": "ch07", "08_precision": "ch08"}


def figures() -> dict[Path, str]:
    """{path of the SVG under source/: its text}, for every chapter."""
    import torch

    out = {}
    with torch.random.fork_rng():  # the figures seed torch's generator; whoever imports them keeps theirs
        for chapter, module in CHAPTERS.items():
            mod = importlib.import_module(f"figures.{module}")
            for name, draw in mod.FIGURES.items():
                out[REPO / "source" / chapter / "figures" / name] = draw().render()
    return out


def main(argv: list[str]) -> int:
    check = "--check" in argv
    problems = []
    for path, text in figures().items():
        if path.exists() and path.read_text() == text:
            continue
        problems.append(f"{'missing' if not path.exists() else 'stale'}: {path.relative_to(REPO)}")
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    for line in problems:
        print(line)
    return 1 if check and problems else 0
