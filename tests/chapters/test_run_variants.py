"""tests/support/run_variants.py: variants that share cells run them once, and each gets a fresh run's errors."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

RUNNER = Path(__file__).resolve().parents[1] / "support" / "run_variants.py"


def run(variants: list[list[str]], cwd: Path) -> list[list]:
    done = subprocess.run([sys.executable, str(RUNNER)], input=json.dumps({"cwd": str(cwd), "variants": variants}),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_each_variant_gets_the_errors_of_a_run_of_its_own(tmp_path):
    shared = "import random, math\nrandom.seed(7)\ndrawn = random.random()\ncount = 0"
    variants = [
        [shared, "def f():\n    return drawn", "assert f() == drawn, 'f'", "count += 1\nassert count == 1"],
        [shared, "def f():\n    return 0", "assert f() == drawn, 'f is wrong'", "count += 1\nassert count == 1"],
        # patches a module the others use: it must not reach them
        [shared, "math.sqrt = lambda x: 0\ndef f():\n    return drawn", "assert math.sqrt(4) == 2, 'patched'"],
        [shared, "def f():\n    import os\n    os._exit(3)", "f()", "never = 1"],  # ends its own process
        [shared, "def f():\n    return drawn"],  # ends where the first goes on
        [shared, "raise ValueError('broken')", "assert f() == drawn, 'no f'"],
    ]
    results = run(variants, tmp_path)
    fresh = []
    for cells in variants[:3] + variants[4:]:  # what each gives run alone, in a namespace of its own
        done = run([cells], tmp_path)[0]
        fresh.append(done)
    assert results[0] == [] == fresh[0]
    assert results[1] == [[2, "AssertionError", "f is wrong"]] == fresh[1]
    assert results[2] == [[2, "AssertionError", "patched"]] == fresh[2]
    assert results[3] == [[1, "KernelDied", "the variant's process died"]]
    assert results[4] == [] == fresh[3]
    assert results[5] == [[1, "ValueError", "broken"], [2, "NameError", "name 'f' is not defined"]] == fresh[4]


def test_a_variant_past_its_time_limit_stops_alone(tmp_path):
    variants = [["x = 1", "while True:\n    pass", "y = 2"], ["x = 1", "y = 2"]]
    code = RUNNER.read_text().replace("VARIANT_TIMEOUT_S = 120", "VARIANT_TIMEOUT_S = 2")
    quick = tmp_path / "run_variants.py"
    quick.write_text(code)
    done = subprocess.run([sys.executable, str(quick)], input=json.dumps({"cwd": str(tmp_path), "variants": variants}),
                          capture_output=True, text=True, timeout=60)
    first, second = json.loads(done.stdout)
    assert [e[:2] for e in first] == [[1, "TimeoutError"]], first
    assert second == []


def test_after_cuda_each_group_runs_in_a_fresh_runner_with_the_same_verdicts(tmp_path):
    """CUDA does not survive a fork: once the shared cells used the GPU, the runner starts fresh processes.
    Here the shared cell stands for a GPU's first use by a torch whose cuda says it is initialized (CI has
    no GPU); each variant, run fresh, must still get its own errors and nothing of its neighbours'."""
    gpu_used = ("import sys, types\n"
                "sys.modules['torch'] = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: True))\n"
                "import os\npids = [os.getpid()]")
    variants = [
        [gpu_used, "x = 1", "assert x == 1, 'x'\npids.append(os.getpid())\nassert pids[0] == pids[1], 'forked after the GPU was used'"],
        [gpu_used, "x = 2", "assert x == 1, 'x is 2'"],
        [gpu_used, "import os\nos._exit(3)", "never = 1"],
        [gpu_used, "x = 1", "import math\nmath.sqrt = None", "assert math.sqrt is None"],
    ]
    results = run(variants, tmp_path)
    assert results[0] == [], "a variant must run on in the process that used the GPU, never in a fork of it"
    assert results[1] == [[2, "AssertionError", "x is 2"]]
    assert results[2] == [[1, "KernelDied", "the variant's process died"]]
    assert results[3] == []


def test_the_chapter_runner_serves_each_request_as_a_fresh_run_would(tmp_path):
    """`run_variants.py --serve` (notebook_runs.ChapterRunner): the shared first cells run once, every request forks
    from there and gets a fresh run's errors, whatever a request before did (patched a module, ended its process);
    a request that does not start with those cells is refused (the caller runs it fresh), and a seed sweep gets
    what tests/support/seed_sweep.py alone gives."""
    import seed_sweep
    prefix = ["import math\nfrom course import inputs\ncount = 0"]
    server = subprocess.Popen([sys.executable, str(RUNNER), "--serve"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)

    def ask(message: dict) -> dict:
        server.stdin.write(json.dumps(message) + "\n")
        server.stdin.flush()
        return json.loads(server.stdout.readline())

    try:
        assert ask({"cwd": str(tmp_path), "prefix": prefix}) == {"ready": True}
        patching = [prefix + ["math.sqrt = None\ncount += 1", "assert count == 1, 'count'"],
                    prefix + ["import os\nos._exit(3)", "never = 1"]]
        assert ask({"variants": patching})["result"] == run(patching, tmp_path)[:1] + [
            [[1, "KernelDied", "the variant's process died"]]]
        after = [prefix + ["assert math.sqrt(4) == 2, 'patched by a request before'\ncount += 1",
                           "assert count == 1, 'count'"]]
        assert ask({"variants": after})["result"] == [[]] == run(after, tmp_path)
        assert "refused" in ask({"variants": [["x = 1"]]})
        cells = prefix + ["value = inputs.seed()", "assert value % 2 == 0, f'odd seed {value}'"]
        sweep = {"cells": cells, "test_cells": {"2": "ex_even"}, "seeds": [2, 3, 4]}
        assert ask({"sweep": sweep})["result"] == seed_sweep.sweep(cells, {2: "ex_even"}, [2, 3, 4])
    finally:
        server.stdin.close()
        assert server.wait(timeout=60) == 0
