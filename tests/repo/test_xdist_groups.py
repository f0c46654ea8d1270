"""`make test` runs `pytest -n auto --dist loadgroup`: the tests of one xdist_group run on one worker, so
a module's expensive fixtures (a Dask cluster, a PostgreSQL server, a sandboxed course) start once."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_a_group_runs_on_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text(
        "import importlib.util, pytest\n"
        f"spec = importlib.util.spec_from_file_location('course_conftest', {str(TESTS / 'conftest.py')!r})\n"
        "course_conftest = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(course_conftest)\n"
        "@pytest.hookimpl(trylast=True)\ndef pytest_collection_modifyitems(config, items):\n"
        "    course_conftest._group_for_xdist(config, items)\n")
    (tmp_path / "test_grouped.py").write_text(
        "import os, pytest\n"
        "@pytest.mark.xdist_group('one')\n@pytest.mark.parametrize('i', range(8))\n"
        "def test_grouped(i):\n    print('WORKER', os.environ['PYTEST_XDIST_WORKER'])\n"
        "@pytest.mark.parametrize('i', range(8))\ndef test_free(i):\n    pass\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-rA", "-p",
                           "no:cacheprovider", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    workers = {line.split()[-1] for line in done.stdout.splitlines() if line.startswith("WORKER")}
    assert len(workers) == 1, done.stdout[-3000:]
    assert done.stdout.count("PASSED") == 16
