"""What the CUDA tests share: line numbers as the student counts them (the run's kernel cache is tests/conftest.py's
`cuda_cache`)."""
from __future__ import annotations


def line_of(source: str, needle: str) -> int:
    """The 1-based line of `source` that contains `needle` (the student's numbering)."""
    hits = [i for i, text in enumerate(source.splitlines(), start=1) if needle in text]
    assert len(hits) == 1, f"{needle!r} is on lines {hits}"
    return hits[0]
