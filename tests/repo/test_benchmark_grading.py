"""benchmarks/suites/grading.py's smallest piece, as `python benchmarks/run.py grading` runs it: from the
repository root, in a plain Python where tests/ is not on the path. Each chapter's class of right, wrong (a
typical mistake from tests/mutants/, whose modules import a tests/ helper) and blank notebooks is made; the
grading itself is the suite's to time (it starts sandboxes, nbgrader and a Dask cluster: minutes)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

MAKE_CLASSES = """
import json, sys, tempfile
from pathlib import Path
from benchmarks.suites import grading
from autograder.chapters import discover
made = {}
with tempfile.TemporaryDirectory() as tmp:
    for chapter in discover(grading.REPO / "source"):
        if (grading.REPO / "tests" / "mutants" / f"{chapter.id}.py").exists():
            folder = Path(tmp) / chapter.id
            students = grading.make_class(folder, 3, chapter.id)
            made[chapter.id] = [(folder / s / f"{chapter.id}.ipynb").read_text() for s in students]
print(json.dumps({"path": sys.path, "made": made}))
"""


def test_the_grading_suite_makes_every_chapters_class_outside_pytest():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", MAKE_CLASSES], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert str(REPO / "tests" / "support") not in out["path"], "the suite must not rely on tests/ being on the path"
    made = out["made"]
    assert "00_tour" in made and "01_tensor" in made, sorted(made)
    for chapter, (right, wrong, blank) in made.items():
        assert len({right, wrong, blank}) == 3, f"{chapter}: the right, wrong and blank notebooks must differ"
