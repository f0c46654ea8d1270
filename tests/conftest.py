"""Shared fixtures: the repository, its chapters, and the GPU marker's honesty."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from autograder.chapters import discover  # noqa: E402

CHAPTERS = discover(REPO / "source")


def pytest_collection_modifyitems(config, items):
    # A GPU test is skipped where there is no GPU: reported as skipped, never as passed.
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU here: not run (and not counted as passed)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
