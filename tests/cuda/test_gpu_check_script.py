"""benchmarks/gpu_check.sh, checked where no GPU is: it must run on the lent GPU machine's own Python, which
holds torch, cupy, pytest and hypothesis but none of the notebook tooling and reaches no registry, so what
it lacks travels as the wheels of benchmarks/device/wheels.txt. Here: the scripts parse, the check stops
cleanly with "no CUDA GPU", and the wheel list covers every third-party module the code run there imports
(found by reading that code, not listed by hand), with what those distributions require."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import pytest
import torch

from benchmarks.device import imports

REPO = imports.REPO
SCRIPT = REPO / "benchmarks" / "gpu_check.sh"
PREPARE = REPO / "benchmarks" / "device" / "prepare.sh"


@pytest.fixture(scope="module")
def third_party():
    return imports.third_party()


@pytest.mark.parametrize("script", [SCRIPT, PREPARE], ids=lambda p: p.name)
def test_the_scripts_parse_and_are_executable(script):
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, f"bash -n {script.name}: {result.stderr}"
    assert os.access(script, os.X_OK), f"{script.name} is not executable"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the check would run in full")
def test_without_a_gpu_the_check_says_so_and_runs_nothing(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_WHEELS": str(tmp_path / "no-wheels")}
    env.pop("OUT", None)
    result = subprocess.run([str(SCRIPT), "--out", str(out)], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=120)
    said = result.stdout + result.stderr
    assert result.returncode == 3, f"exit {result.returncode}, not 3 (no CUDA GPU):\n{said}"
    assert "no CUDA GPU" in result.stdout, said
    assert "problem:" not in said, f"this venv should hold everything the check imports:\n{said}"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["result"] == "no CUDA GPU" and summary["setup"]["problems"] == [], summary
    assert summary["steps"] == {} and sorted(p.name for p in out.iterdir()) == ["summary.json"]


def test_the_scan_reads_the_files_the_device_runs(third_party):
    files, _ = imports.scan()
    rel = {f.relative_to(REPO).as_posix() for f in files}
    expected = {"benchmarks/device/gpu_check.py", "benchmarks/suites/gpu.py", "tests/conftest.py",
                f"source/{imports.CHAPTER}/{imports.CHAPTER}.py", f"release/{imports.CHAPTER}/picotorch/__init__.py",
                "course/check.py", "course/cuda/gpu.py", "autograder/build/release.py"}
    assert expected <= rel, f"not followed: {sorted(expected - rel)}"
    gpu_tests = {p.name for p in imports.gpu_test_files()}
    assert {"test_cuda_gpu.py", "test_backend_reference.py"} <= gpu_tests, gpu_tests
    # what the notebook check and the build need, which the device image lacks
    assert {"nbformat", "nbclient", "ipykernel", "jupytext", "torch", "pytest"} <= set(third_party), third_party


def test_every_module_the_device_imports_is_in_its_image_or_carried(third_party):
    image, pins = imports.read_device_image(), imports.read_wheels()
    by_import = {m: d for d, mods in image.items() for m in mods}
    providers = imports._packages_distributions()
    uncovered = []
    for module, where in third_party.items():
        dists = [by_import[module]] if module in by_import else [imports.normalise(d) for d in providers.get(module, [])]
        if not dists or not all(d in image or d in pins for d in dists):
            uncovered.append(f"{module} (imported at {where[0]}; distributions {dists or 'unknown here'})")
    assert not uncovered, ("neither the device image nor benchmarks/device/wheels.txt gives: "
                           + "; ".join(uncovered))


def test_the_wheel_list_is_closed_under_requirements_and_carries_only_what_the_image_lacks():
    problems, _ = imports.check_wheels()
    assert not problems, "\n".join(problems)
    image, pins = imports.read_device_image(), imports.read_wheels()
    lines = [l.split("#")[0].strip() for l in imports.WHEELS.read_text().splitlines()]
    names = [imports.normalise(l.partition("==")[0]) for l in lines if l]
    assert len(names) == len(set(names)), "one version of each distribution, or the install stops"
    assert all(re.fullmatch(r"[0-9][0-9a-zA-Z.+!-]*", v) for v in pins.values()), pins
    for dist in pins:
        unmet = [r for r in imports.requirements(dist) if r not in pins and r not in image]
        assert not unmet, f"{dist} requires {unmet} on Python 3.12, carried by nobody"


def test_imports_the_device_never_reaches_stay_inside_functions():
    for (file, module), why in imports.NOT_REACHED.items():
        found = [i for i in imports.imports_in(REPO / file) if i.module.split(".")[0] == module]
        assert found, f"{file} no longer imports {module}: drop it from NOT_REACHED"
        assert all(i.in_function for i in found), (f"{file} imports {module} at module level now, so the device "
                                                    f"needs it: carry it ({why})")


def test_the_scanner_resolves_relative_optional_and_lazy_imports(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "helper.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text(textwrap.dedent("""\
        from typing import TYPE_CHECKING
        from . import helper
        from .helper import thing
        import alpha.beta
        try:
            import gamma
        except ImportError:
            gamma = None
        if TYPE_CHECKING:
            import delta
        def later():
            from epsilon import zeta
        """))
    found = {i.module: i for i in imports.imports_in(tmp_path / "pkg" / "mod.py", tmp_path)}
    assert {"pkg", "pkg.helper", "alpha.beta", "gamma", "epsilon", "typing"} <= set(found), found
    assert "delta" not in found
    assert found["gamma"].optional and not found["alpha.beta"].optional
    assert found["epsilon"].in_function and not found["alpha.beta"].in_function


def test_the_documented_device_command_is_the_same_in_the_script_and_the_readme():
    command = re.search(r"run\(command=\"bash benchmarks/gpu_check\.sh\"[^)]*\)", SCRIPT.read_text())
    assert command, "the top of gpu_check.sh shows the device tool's run(...) call"
    assert command.group(0) in (REPO / "README.md").read_text(), command.group(0)
    timeout = int(re.search(r"timeout_s=(\d+)", command.group(0)).group(1))
    budget = float(re.search(r'"--budget", type=float, default=([0-9.]+)',
                             (REPO / "benchmarks" / "device" / "gpu_check.py").read_text()).group(1))
    assert budget + 20 <= timeout and 2 * timeout + 240 <= 15 * 60, (
        f"a {timeout} s call around a {budget:g} s check: the check must end inside the call, and two calls "
        "with their machine starts must fit in the 15 minutes of device time")
