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


@pytest.fixture(scope="module")
def reference_picotorch(tmp_path_factory):
    """The reference picotorch of every chapter so far, assembled by the build into a temporary
    folder and imported in place of any other picotorch while the test module runs."""
    from autograder.build import assemble_reference

    root = assemble_reference(REPO, tmp_path_factory.mktemp("reference"))
    ours = lambda name: name == "picotorch" or name.startswith("picotorch.")  # noqa: E731
    saved = {k: v for k, v in sys.modules.items() if ours(k)}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, str(root))
    import picotorch
    yield picotorch
    sys.path.remove(str(root))
    for k in [k for k in sys.modules if ours(k)]:
        del sys.modules[k]
    sys.modules.update(saved)
