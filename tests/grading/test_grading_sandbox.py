"""The grader against hostile and broken submissions (issue 3, items 3, 4 and 6).

Every case is a real submission graded by real nbgrader, in the real bubblewrap
sandbox, on a small chapter written here, and each states the score it must
get. Exercises:
    ex_double  (2 points)  torch + course.compare, visible and hidden tests
    ex_half    (1 point)   numpy only; comes after ex_double, so it shows that a
                           disaster in ex_double's cell costs only ex_double
    ex_secret  (1 point)   its answer exists only in the hidden tests (source/,
                           the gradebook, a classmate's notebook): only a leak earns it
    ex_gpu     (1 point)   a check that needs a GPU
The cheats get a wrong `double` (x * 3) and try to pass anyway.
"""
from __future__ import annotations

import secrets
import shutil
import socket
import threading
from pathlib import Path

import nbformat
import pytest
import torch

from autograder.chapters import Chapter
from autograder.grade.grader import Grader
from autograder.sandbox.bubblewrap import Limits
from autograder.build.source_format import dumps, notebook_from_text

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("grading_sandbox")]
SECRET = "hidden-" + secrets.token_hex(8)
GPU = torch.cuda.is_available()

CHAPTER_TEXT = '''# ---
# jupyter:
#   course:
#     chapter: 01_mini
#     title: a chapter for the grader's tests
#     files: []
# ---

# %%
import torch
import numpy as np
from course import compare
from course.testing import with_fixed_inputs

# %% solution="ex_double"
def double(x):
    ### BEGIN SOLUTION
    return x * 2
    ### END SOLUTION


# %% tests="ex_double" points=2
compare.assert_matches(double(torch.arange(3.0)), torch.arange(3.0) * 2, "double(torch.arange(3.0))")
print("visible tests passed")
### BEGIN HIDDEN TESTS
for n in range(1, 4):
    x = torch.randn(n, dtype=torch.float64)
    compare.assert_matches(double(x), x * 2, f"double of a tensor of shape ({n},)")
with_fixed_inputs(lambda: torch.testing.assert_close(double(torch.ones(2)), torch.full((2,), 2.0)))
### END HIDDEN TESTS

# %% solution="ex_half"
def half(values):
    ### BEGIN SOLUTION
    return np.asarray(values) / 2
    ### END SOLUTION


# %% tests="ex_half" points=1
### BEGIN HIDDEN TESTS
assert np.allclose(half([2.0, 4.0, 7.0]), np.array([1.0, 2.0, 3.5])), "half([2, 4, 7]) should be [1, 2, 3.5]"
### END HIDDEN TESTS

# %% solution="ex_secret"
def secret():
    ### BEGIN SOLUTION
    return "SECRET"
    ### END SOLUTION


# %% tests="ex_secret" points=1
### BEGIN HIDDEN TESTS
compare.assert_equal(secret(), "SECRET", "secret()")
### END HIDDEN TESTS

# %% solution="ex_gpu"
def on_gpu(x):
    ### BEGIN SOLUTION
    return x.cuda()
    ### END SOLUTION


# %% tests="ex_gpu" points=1
import unittest
if not torch.cuda.is_available():
    raise unittest.SkipTest("this check needs a CUDA GPU")
assert on_gpu(torch.ones(2)).is_cuda, "on_gpu should return a tensor on the GPU"
'''.replace("SECRET", SECRET)


def make_chapter(root: Path, text: str = CHAPTER_TEXT, chapter_id: str = "01_mini") -> Chapter:
    """A chapter in `root/source/<id>/`, built from its text form as `autograder build` does."""
    folder = root / "source" / chapter_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{chapter_id}.py").write_text(text)
    chapter = Chapter(chapter_id, folder)
    chapter.notebook.write_text(dumps(notebook_from_text(chapter.text_form, chapter_id)))
    return chapter


def answer(nb, exercise: str, code: str):
    """`nb` with the answer cell of `exercise` replaced by `code`."""
    nb = nbformat.from_dict(nbformat.reads(nbformat.writes(nb), 4))
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == exercise:
            cell.source = code
            return nb
    raise KeyError(exercise)


RIGHT = {"ex_double": "def double(x):\n    return x * 2\n", "ex_half": "def half(v):\n    return np.asarray(v) / 2\n"}
WRONG_DOUBLE = "def double(x):\n    return x * 3\n"


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    chapter = make_chapter(root)
    grader = Grader(chapter, root / "grading", limits=Limits(cell_timeout_s=6, submission_timeout_s=60))
    submissions = root / "submissions"
    submissions.mkdir()
    yield grader, submissions
    grader.close()


def grade(course, name: str, nb=None, *, cheat: str | None = None, double: str = WRONG_DOUBLE,
          half: str | None = None, limits: dict | None = None):
    """Grade a notebook built from the release: `double` and `half` as given, `cheat`
    appended to double's answer cell. Returns {exercise: points}, the Result."""
    grader, folder = course
    if nb is None:
        nb = answer(grader.release_nb, "ex_double", double + ("\n" + cheat if cheat else ""))
        nb = answer(nb, "ex_half", half or RIGHT["ex_half"])
    path = folder / name / "01_mini.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(nb, str):
        path.write_text(nb)
    else:
        nbformat.write(nb, path)
    saved = grader.sandbox.limits
    if limits:
        grader.sandbox.limits = Limits(**{**saved.__dict__, **limits})
    try:
        result = grader.grade(name, path)
    finally:
        grader.sandbox.limits = saved
    return {v.exercise: v.points for v in result.verdicts}, result


def status(result, exercise):
    return next(v for v in result.verdicts if v.exercise == exercise)


# ---------------------------------------------------------------- baselines

def test_student_code_can_use_temporary_files(course):
    """tempfile works inside the sandbox: its folder is the submission's own, not the grader's /tmp."""
    double = ("import tempfile, os\n_d = tempfile.mkdtemp()\nopen(os.path.join(_d, 'f'), 'w').write('x')\n"
              + RIGHT["ex_double"])
    points, result = grade(course, "tempfiles", double=double)
    assert points["ex_double"] == 2, status(result, "ex_double").message


def test_right_and_wrong_answers_get_their_scores(course):
    points, result = grade(course, "honest", double=RIGHT["ex_double"])
    assert points == {"ex_double": 2, "ex_half": 1, "ex_secret": 0, "ex_gpu": 1 if GPU else 0}, result.verdicts
    points, result = grade(course, "wrong")
    assert points["ex_double"] == 0 and points["ex_half"] == 1
    assert status(result, "ex_double").status == "failed"
    assert "double of a tensor" in status(result, "ex_double").message or "double(" in status(result, "ex_double").message


def test_the_solution_gets_every_point(course):
    grader, _ = course
    result = grader.grade("teacher", grader.chapter.notebook)
    assert {v.exercise: v.points for v in result.verdicts} == {"ex_double": 2, "ex_half": 1, "ex_secret": 1,
                                                               "ex_gpu": 1 if GPU else 0}


# ---------------------------------------------------------------- item 6: GPUs

def test_a_gpu_check_without_a_gpu_is_not_run_and_earns_nothing(course):
    points, result = grade(course, "gpu", double=RIGHT["ex_double"])
    verdict = status(result, "ex_gpu")
    if GPU:
        assert verdict.status == "passed" and points["ex_gpu"] == 1
    else:
        assert verdict.status == "not run" and points["ex_gpu"] == 0
        assert "GPU" in verdict.message


# ---------------------------------------------------------------- item 3: robustness

@pytest.mark.parametrize("kill", ["import os\nos._exit(1)", "import faulthandler\nfaulthandler._sigsegv()"],
                         ids=["os._exit", "segfault"])
def test_a_dying_kernel_costs_only_its_exercise(course, kill):
    """The cell that killed the kernel is lost (so `double` is undefined); the rest is graded."""
    points, result = grade(course, "dies", double=RIGHT["ex_double"], cheat=kill)
    assert points["ex_double"] == 0 and points["ex_half"] == 1, (points, result.notes)
    assert any("died" in n or "exited" in n for n in result.notes), result.notes
    assert any("restarted" in n for n in result.notes), result.notes
    assert "kernel" in status(result, "ex_double").message or "NameError" in status(result, "ex_double").message


def test_sys_exit_in_a_cell_does_not_end_the_grading(course):
    """As in Jupyter, SystemExit ends the cell, not the notebook: what the cell defined still counts."""
    points, result = grade(course, "exits", double=RIGHT["ex_double"], cheat="import sys\nsys.exit(0)")
    assert points["ex_double"] == 2 and points["ex_half"] == 1, (points, result.notes)


def test_an_endless_loop_hits_the_cell_time_limit(course):
    points, result = grade(course, "loops", double=RIGHT["ex_double"], cheat="while True:\n    pass",
                           limits={"cell_timeout_s": 3})
    assert points["ex_double"] == 0 and points["ex_half"] == 1, points
    assert any("time limit" in n for n in result.notes), result.notes


def test_a_slow_notebook_hits_the_submission_time_limit(course):
    points, result = grade(course, "slow", double=RIGHT["ex_double"],
                           half="import time\ntime.sleep(5)\n" + RIGHT["ex_half"],
                           limits={"cell_timeout_s": 20, "submission_timeout_s": 4})
    assert points["ex_double"] == 2 and points["ex_half"] == 0, points
    assert any("time limit of 4 s" in n for n in result.notes), result.notes
    assert "time limit" in status(result, "ex_half").message


# 2 GiB of address space, and time to fill it: bytearray zero-fills what it allocates, 2 GiB of page
# faults that take seconds on a busy machine (past the fixture's 6 s a cell, the bomb's cell would be
# killed and its answer lost, which is the time limit's test, not this one's).
MEMORY_LIMITS = {"memory_bytes": 2 * 1024 ** 3, "cell_timeout_s": 60}


def test_a_memory_bomb_hits_the_memory_limit(course):
    """The allocation fails inside the cell (MemoryError), the kernel lives on: what the cell
    defined before the bomb counts, and so does everything after it."""
    bomb = "hog = []\nwhile True:\n    hog.append(bytearray(50 * 1024 ** 2))"
    points, result = grade(course, "memory", double=RIGHT["ex_double"], cheat=bomb, limits=MEMORY_LIMITS)
    assert points["ex_double"] == 2 and points["ex_half"] == 1, (points, result.notes)
    assert any("out of memory" in n for n in result.notes), result.notes


FILL_TO_THE_LAST_BYTE = ("hog = []\nfor size in (50 * 1024 ** 2, 1024 ** 2, 4096, 64):\n    try:\n"
                         "        while True:\n            hog.append(bytearray(size))\n"
                         "    except MemoryError:\n        pass\n")


@pytest.mark.parametrize("then", ["", "raise MemoryError('full')"], ids=["caught", "raised"])
def test_memory_filled_to_the_last_byte_costs_only_its_cell(course, then):
    """The bomb above leaves up to 50 MiB free, by chance; this one fills the limit to the last
    byte and keeps it. The kernel's reserve (executor.MEMORY_RESERVE_BYTES) is given up after the
    cell, so the kernel lives on and the tests after it have memory to run in."""
    points, result = grade(course, "memory-full-" + (then and "raised"), double=RIGHT["ex_double"],
                           cheat=FILL_TO_THE_LAST_BYTE + then, limits=MEMORY_LIMITS)
    assert points["ex_double"] == 2 and points["ex_half"] == 1, (points, result.notes)
    assert any("ex_double: ran out of memory" in n for n in result.notes), result.notes
    assert not any("restarted" in n or "died" in n for n in result.notes), result.notes


def test_a_fork_bomb_hits_the_process_limit(course):
    """Children that stay alive: the 33rd fork fails, the cell ends, the children are killed."""
    bomb = ("import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(120)\n"
            "        os._exit(0)")
    points, result = grade(course, "forks", double=RIGHT["ex_double"], cheat=bomb, limits={"processes": 32})
    assert points["ex_double"] == 2 and points["ex_half"] == 1, (points, result.notes)
    assert any("process limit" in n for n in result.notes), result.notes


def test_a_classic_fork_bomb_is_contained(course):
    """Every child forks too and dies at the limit, so slots free up: the process limit keeps the
    machine usable, and the cell ends either when the kernel's own fork fails (then what the cell
    defined before the bomb counts) or at the cell time limit (then it does not)."""
    points, result = grade(course, "forks2", double=RIGHT["ex_double"], cheat="import os\nwhile True:\n    os.fork()",
                           limits={"processes": 32, "cell_timeout_s": 3})
    assert points["ex_double"] in (0, 2) and points["ex_half"] == 1, (points, result.notes)
    assert any("time limit" in n or "process limit" in n for n in result.notes), result.notes


def test_processes_left_running_do_not_cost_the_later_cells(course):
    """The kernel stops at the limit, its children go on forking into every slot that frees up: no later
    cell could start its thread, and each lost its points (the classic bomb above did, by chance). The
    kernel kills them (they are all of its throwaway uid) when they are in the way, and the cells run."""
    refill = ("import os, time\nkernel = os.getpid()\nwhile True:\n    try:\n        os.fork()\n"
              "    except OSError:\n        if os.getpid() == kernel:\n            break\n        time.sleep(0.001)")
    points, result = grade(course, "forks3", double=RIGHT["ex_double"], cheat=refill,
                           limits={"processes": 32, "cell_timeout_s": 10})
    assert points["ex_double"] == 2 and points["ex_half"] == 1, (points, result.notes)


def test_gigabytes_of_output_are_cut(course):
    flood = "for _ in range(2000):\n    print('x' * 1_000_000)"
    points, result = grade(course, "floods", double=RIGHT["ex_double"] + flood)
    assert points["ex_double"] == 2 and points["ex_half"] == 1, points
    assert any("output was cut" in n for n in result.notes), result.notes
    assert len(result.autograded) < 2_000_000


def test_a_pasted_copy_of_a_graded_cell_is_graded_once(course):
    grader, _ = course
    nb = answer(grader.release_nb, "ex_double", RIGHT["ex_double"])
    nb = answer(nb, "ex_half", RIGHT["ex_half"])
    cells = nb.cells
    at = next(i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "ex_double")
    wrong_copy = nbformat.from_dict(dict(cells[at], source=WRONG_DOUBLE, id="pasted-1"))
    test_copy = nbformat.from_dict(dict(cells[at + 1], id="pasted-2"))
    cells[at:at] = [wrong_copy]  # an earlier, wrong copy: the last copy is the answer
    cells.append(test_copy)  # a copy of the test cell at the end
    points, result = grade(course, "pasted", nb)
    assert points["ex_double"] == 2 and points["ex_half"] == 1, (points, result.notes)
    assert any("more than once" in n for n in result.notes) and any("pasted copy" in n for n in result.notes)


def test_a_deleted_test_cell_is_restored(course):
    grader, _ = course
    nb = answer(grader.release_nb, "ex_double", WRONG_DOUBLE)
    nb = answer(nb, "ex_half", RIGHT["ex_half"])
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "ex_double_tests"]
    points, result = grade(course, "deleted", nb)
    assert points["ex_double"] == 0 and points["ex_half"] == 1, points
    assert any("ex_double_tests was deleted" in n for n in result.notes), result.notes


def test_an_edited_test_cell_is_graded_as_released(course):
    grader, _ = course
    nb = answer(grader.release_nb, "ex_double", WRONG_DOUBLE)
    nb = answer(nb, "ex_half", RIGHT["ex_half"])
    nb = answer(nb, "ex_double_tests", "print('visible tests passed')")
    points, result = grade(course, "edited", nb)
    assert points["ex_double"] == 0, points
    assert any("ex_double_tests was edited" in n for n in result.notes), result.notes


def test_a_deleted_answer_cell_is_not_attempted(course):
    grader, _ = course
    nb = answer(grader.release_nb, "ex_half", RIGHT["ex_half"])
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "ex_double"]
    points, result = grade(course, "no-answer", nb)
    assert points["ex_double"] == 0 and points["ex_half"] == 1
    assert status(result, "ex_double").status == "not attempted"


def test_a_notebook_that_is_not_json_gets_zero_and_a_note(course):
    points, result = grade(course, "garbage", "{ this is not json")
    assert sum(points.values()) == 0 and "not valid JSON" in result.notes[0]


def test_a_notebook_of_another_chapter_gets_zero_and_a_note(course, repo):
    grader, folder = course
    path = folder / "other" / "01_mini.ipynb"
    path.parent.mkdir()
    shutil.copy(repo / "release" / "00_tour" / "00_tour.ipynb", path)
    result = grader.grade("other", path)
    assert result.score == 0 and "chapter 00_tour" in result.notes[0], result.notes


def test_no_notebook_gets_zero_and_a_note(course):
    grader, _ = course
    result = grader.grade("absent", None, problem="no 01_mini.ipynb in the student's folder")
    assert result.score == 0 and "no 01_mini.ipynb" in result.notes[0]
    assert all(v.points == 0 for v in result.verdicts)


# ---------------------------------------------------------------- item 4: the sandbox

def test_student_code_cannot_read_the_instructors_files_or_other_students(course):
    grader, folder = course
    teacher_copy = folder / "classmate" / "01_mini.ipynb"
    teacher_copy.parent.mkdir(exist_ok=True)
    shutil.copy(grader.chapter.notebook, teacher_copy)  # a classmate who has the answer
    paths = [grader.chapter.notebook, grader.chapter.text_form, grader.root / "gradebook.db",
             grader.root / "source" / "01_mini" / "01_mini.ipynb", teacher_copy]
    assert all(p.exists() for p in paths)
    steal = ("def secret():\n    import re\n    for path in %r:\n        try:\n"
             "            found = re.search(r'hidden-[0-9a-f]{16}', open(path, errors='replace').read())\n"
             "        except OSError:\n            continue\n        if found:\n            return found.group()\n"
             "    return 'nothing'\n") % [str(p) for p in paths]
    nb = answer(answer(grader.release_nb, "ex_double", RIGHT["ex_double"]), "ex_secret", steal)
    nb = answer(nb, "ex_half", RIGHT["ex_half"])
    points, result = grade(course, "thief", nb)
    assert points["ex_secret"] == 0 and points["ex_double"] == 2, (points, result.verdicts)
    assert "nothing" in status(result, "ex_secret").message


def test_student_code_cannot_reach_the_network(course):
    grader, _ = course
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def serve():
        try:
            conn, _ = server.accept()
            conn.sendall(SECRET.encode())
            conn.close()
        except OSError:
            pass

    threading.Thread(target=serve, daemon=True).start()
    ask = ("def secret():\n    import socket\n    try:\n"
           f"        return socket.create_connection(('127.0.0.1', {port}), timeout=2).recv(100).decode()\n"
           "    except OSError as e:\n        return 'offline: ' + type(e).__name__\n")
    nb = answer(answer(grader.release_nb, "ex_double", RIGHT["ex_double"]), "ex_secret", ask)
    nb = answer(nb, "ex_half", RIGHT["ex_half"])
    points, result = grade(course, "networker", nb)
    server.close()
    assert points["ex_secret"] == 0, points
    assert "offline" in status(result, "ex_secret").message


CHEATS = {
    "patch compare": "compare.assert_matches = lambda *a, **k: None\ncompare.assert_equal = lambda *a, **k: None",
    "patch torch.testing": "import torch.testing\ntorch.testing.assert_close = lambda *a, **k: None\n"
                           "import course.compare\ncourse.compare.assert_matches = lambda *a, **k: None",
    "patch numpy": "np.allclose = lambda *a, **k: True\nimport numpy\nnumpy.asarray = lambda v, *a, **k: v",
    "swap __code__": "compare.assert_matches.__code__ = (lambda *a, **k: None).__code__\n"
                     "torch.testing.assert_close.__code__ = (lambda *a, **k: None).__code__",
    "rebind the helpers": "class Quiet:\n    def __getattr__(self, name):\n        return lambda *a, **k: None\n"
                          "compare = Quiet()",
    "patch while the test runs": "def double(x, _real=compare.assert_matches):\n"
                                 "    import course.compare as c, torch.testing as t\n"
                                 "    c.assert_matches = t.assert_close = lambda *a, **k: None\n    return x * 3",
    "patch builtins": "import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\n"
                      "builtins.isinstance = lambda *a: True",
    "IPython hooks": "ip = get_ipython()\nip.events.register('pre_run_cell', lambda *a: None)\n"
                     "ip.input_transformers_cleanup.append(lambda lines: ['pass\\n'])\n"
                     "ip.ast_transformers.append(__import__('ast').NodeTransformer())",
    "custom exception handler": "import sys\nget_ipython().set_custom_exc((BaseException,), lambda *a, **k: None)\n"
                                "sys.excepthook = lambda *a: None",
    "exit early": "import sys, atexit\natexit.register(lambda: None)\nsys.exit(0)",
    "exit during the test": "def double(x):\n    import os\n    os._exit(0)",
    "trace function": "import sys\ndef skip(frame, event, arg):\n    return None\nsys.settrace(skip)",
    "read the grader's frames": "import sys\nframe = sys._getframe(1)\nframe.f_locals['status'] = 'ok'",
    "forge the channel": "import os, stat, json\nfor fd in range(3, 64):\n    try:\n"
                         "        if stat.S_ISSOCK(os.fstat(fd).st_mode):\n"
                         "            os.write(fd, b'{\"index\": 99, \"status\": \"ok\", \"nonce\": \"guess\"}\\n')\n"
                         "    except OSError:\n        pass",
    "forge the channel from a child": "def double(x):\n    import os, stat, time\n"
                                      "    socks = [fd for fd in range(3, 64) if _is_sock(fd)]\n"
                                      "    if os.fork() == 0:\n"
                                      "        for fd in socks:\n"
                                      "            try:\n"
                                      "                os.write(os.dup(fd), b'{\"status\": \"ok\"}\\n')\n"
                                      "            except OSError:\n                pass\n"
                                      "        os._exit(0)\n    time.sleep(0.5)\n    return x * 3\n"
                                      "def _is_sock(fd):\n    import os, stat\n    try:\n"
                                      "        return stat.S_ISSOCK(os.fstat(fd).st_mode)\n"
                                      "    except OSError:\n        return False",
    "replace len, then swap __code__": "import builtins\nreal_len = builtins.len\nbuiltins.len = lambda x: 0\n"
                                       "compare.assert_matches.__code__ = (lambda *a, **k: None).__code__\n"
                                       "compare.assert_equal.__code__ = (lambda *a, **k: None).__code__\n"
                                       "import torch.testing\n"
                                       "torch.testing.assert_close.__code__ = (lambda *a, **k: None).__code__\n"
                                       "builtins.len = real_len",
    "edit a tolerance table": "import torch.testing._comparison as c\n"
                              "c._DTYPE_PRECISIONS.update({k: (1e9, 1e9) for k in list(c._DTYPE_PRECISIONS)})\n"
                              "compare.assert_matches = lambda *a, **k: None",
}


@pytest.mark.parametrize("cheat", list(CHEATS), ids=list(CHEATS))
def test_tampering_does_not_raise_a_score(course, cheat):
    """A wrong `double` with a cheat gets what a wrong `double` gets: 0 of 2."""
    points, result = grade(course, "cheat-" + cheat.replace(" ", "-").replace("'", ""), cheat=CHEATS[cheat])
    assert points["ex_double"] == 0, (cheat, result.verdicts, result.notes)
    assert points["ex_half"] == 1, (cheat, points, result.notes)  # later exercises are graded as usual


# wrong on the one input that only a check with fixed inputs tries: float32 ones of shape (2,)
WRONG_ON_ONES = ("def double(x):\n    return x * 3 if x.dtype == torch.float32 and x.numel() == 2 else x * 2\n")


SKIP_FIXED = {"plain": "", "say-a-sweep-repeats": "import course.inputs\ncourse.inputs.set_repeating(True)",
              "set-the-flag-itself": "import course.inputs\ncourse.inputs._ask('repeating', (1,))\n"
                                     "course.inputs._ask.__defaults__[-1][0] = True"}


@pytest.mark.parametrize("name", list(SKIP_FIXED))
def test_a_check_with_fixed_inputs_always_runs_while_graded(course, name):
    """A seed sweep may skip checks with fixed inputs when it repeats; no notebook can make the grader skip them."""
    points, result = grade(course, "fixed-" + name, cheat=SKIP_FIXED[name] or None, double=WRONG_ON_ONES)
    assert points["ex_double"] == 0, (name, result.verdicts, result.notes)
    assert status(result, "ex_double").status == "failed", result.verdicts


def test_the_check_between_statements_calls_no_builtin_the_student_replaced(course):
    """The check before each statement of a test runs with the audit hook's policy off (it is the
    grader's own code): a builtin it looked up by name (list, enumerate, id, callable), replaced by the
    student while the test runs, would run the student's code there. It uses the builtins as the
    kernel found them."""
    cheat = ("def double(x):\n    import builtins, sys\n    real = builtins.list\n"
             "    def spy(*a):\n"
             "        if sys._getframe(1).f_code.co_name in ('module_changes', 'class_changes', 'gns_changes',"
             " 'table_changes', 'verify'):\n"
             "            builtins.__dict__['_reached'] = True\n"
             "        return real(*a)\n"
             "    for name in ('list', 'enumerate', 'id', 'callable'):\n"
             "        setattr(builtins, name, spy if name == 'list' else getattr(builtins, name))\n"
             "    return x * 2\n")
    half = "import builtins\nprint('REACHED', builtins.__dict__.get('_reached', False))\n" + RIGHT["ex_half"]
    points, result = grade(course, "patched-builtin", double=cheat, half=half)
    printed = [o.get("text", "") for c in nbformat.reads(result.autograded, 4).cells if c.cell_type == "code"
               for o in c.get("outputs", []) if "REACHED" in str(o.get("text", ""))]
    assert printed and "REACHED False" in printed[0], ("the grader's check ran the student's list()", printed,
                                                       result.notes)
    assert points["ex_double"] == 0, (result.verdicts, result.notes)  # the patch is caught as tampering


def test_dropping_a_helpers_defaults_is_refused(course):
    """Setting a function's __kwdefaults__ (or __defaults__) to None is a deletion, another audit
    event than a new value: it is refused all the same, and the tests' helper keeps its defaults
    (without them assert_matches would raise TypeError and a right answer would earn nothing)."""
    cheat = "compare.assert_matches.__kwdefaults__ = None"
    points, result = grade(course, "drop-defaults", double=RIGHT["ex_double"], cheat=cheat)
    assert points["ex_double"] == 2, (result.verdicts, result.notes)
    assert any("refused object.__setattr__" in note for note in result.notes), result.notes


def test_the_same_tampering_fools_plain_nbgrader(course, tmp_path):
    """Why the sandbox is needed: nbgrader's own autograde gives the cheat full marks."""
    from autograder import nbgrader_env
    from autograder.grade.grader import prepare_course
    grader, _ = course
    prepare_course(grader.chapter, tmp_path)
    api = nbgrader_env.api(tmp_path)
    with nbgrader_env.quiet():
        nbgrader_env.check(api.generate_assignment("01_mini"), "generate_assignment")
    nb = answer(grader.release_nb, "ex_double", WRONG_DOUBLE + "\n" + CHEATS["patch compare"]
                + "\ntorch.testing.assert_close = lambda *a, **k: None")
    (tmp_path / "submitted" / "cheater" / "01_mini").mkdir(parents=True)
    nbformat.write(nb, tmp_path / "submitted" / "cheater" / "01_mini" / "01_mini.ipynb")
    with nbgrader_env.quiet():
        nbgrader_env.check(api.autograde("01_mini", "cheater"), "autograde")
    from nbgrader.api import Gradebook
    with Gradebook(api.coursedir.db_url) as gb:
        assert gb.find_grade("ex_double_tests", "01_mini", "01_mini", "cheater").score == 2
    points, _ = grade(course, "cheater", nb)
    assert points["ex_double"] == 0


# ---------------------------------------------------------------- issue 14: attacks on the tests themselves
#
# One chapter of small exercises, graded in one run: each attack is the answer cell of one
# exercise (a wrong or hard-coded answer plus the cheat), so a whole class of attacks costs
# one notebook. Every exercise's test is one of three kinds, written as the chapters write
# theirs: "tri" draws its inputs from course.inputs, "dbl" compares tensors with
# course.compare through a given helper that loops with builtins, "eq" compares plain values.
# An exercise whose id starts with "ex_ok" is an honest neighbour and must earn its point.

HIDDEN_MARK = "hidden-test-" + secrets.token_hex(6)  # in every hidden test: must never reach the feedback

ATTACK_HEAD = '''# ---
# jupyter:
#   course:
#     chapter: 02_attacks
#     title: attacks on the grader's tests
#     files: []
# ---

# %%
import torch
import numpy as np
from course import compare, inputs


def check_double(fn, name, trials=12):
    """fn doubles tensors of random shapes (a given helper that leans on builtins, as chapter 01's kit does)."""
    for trial in range(trials):
        x = inputs.randn(inputs.shape((1, 3), (2, 5)), dtype=torch.float64)
        if isinstance(x, torch.Tensor) and len(x.shape) >= 1:
            compare.assert_matches(fn(x), x * 2, f"{name} of a tensor of shape {tuple(x.shape)}")
'''

ATTACK_TESTS = {
    "tri": '''name = "NAME"  # MARK
compare.assert_equal(NAME(1), 1, "NAME(1)")
for trial in range(30):
    n = inputs.randint(1, 1000)
    compare.assert_equal(NAME(n), n * (n + 1) // 2, f"NAME({n})")''',
    "dbl": '''check_double(NAME, "NAME")  # MARK''',
    "eq": '''name = "NAME"  # MARK
for k in range(3, 9):
    compare.assert_equal(NAME(k), list(range(k)), f"NAME({k})")''',
}
ATTACK_TESTS["raw"] = '''for trial in range(8):  # MARK (a test that uses torch itself, not course.compare)
    x = torch.randn(3, dtype=torch.float64)
    torch.testing.assert_close(NAME(x), x * 2)
    assert torch.allclose(NAME(x), x * 2) and bool((NAME(x) == x * 2).all()), "NAME(x) should be x * 2"'''
HONEST = {"tri": "return n * (n + 1) // 2", "dbl": "return x * 2", "eq": "return list(range(k))", "raw": "return x * 2"}
WRONG = {"tri": "return 1", "dbl": "return x * 3", "eq": "return [0]", "raw": "return x * 3"}
ARGS = {"tri": "n", "dbl": "x", "eq": "k", "raw": "x"}
AGREE = '''import torch
from torch.overrides import TorchFunctionMode
SAYS_YES = ("isclose", "allclose", "equal", "eq", "__eq__", "all")
class Agree(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if getattr(func, "__name__", "") in SAYS_YES:
            return torch.ones_like(out, dtype=torch.bool) if isinstance(out, torch.Tensor) else True
        return out
class Yes(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") in SAYS_YES:
            return torch.ones_like(out, dtype=torch.bool) if isinstance(out, torch.Tensor) else True
        return out
'''


def attack_chapter(exercises: dict[str, str]) -> str:
    """The text form of a chapter with one exercise per entry {exercise id: test kind}."""
    parts = [ATTACK_HEAD]
    for ex, kind in exercises.items():
        fn = ex.removeprefix("ex_")
        parts.append(f'''
# %% solution="{ex}"
def {fn}({ARGS[kind]}):
    ### BEGIN SOLUTION
    {HONEST[kind]}
    ### END SOLUTION


# %% tests="{ex}" points=1
### BEGIN HIDDEN TESTS
{ATTACK_TESTS[kind].replace("NAME", fn).replace("MARK", HIDDEN_MARK)}
### END HIDDEN TESTS
''')
    return "".join(parts)


# What item 1's attacks do once they hold a frame: walk f_back to the kernel's loop and, from its
# locals, forge the current test cell's verdict with its secret, and leak the cell's source (its
# hidden tests) through an exception. `frame` is given; returns True when it found the loop.
FRAME_HUNT = '''
def hunt(frame):
    import os
    f = frame
    while f is not None:
        seen = f.f_locals
        if "nonce" in seen and "index" in seen and seen.get("kind") == "test":
            reply = '{"index": %d, "nonce": "%s", "status": "ok", "ename": "", "evalue": ""}\\n'
            os.write(seen["fd"], (reply % (seen["index"], seen["nonce"])).encode())
            raise RuntimeError("leaked: " + str(seen.get("source")))
        f = f.f_back
    return False
'''

# What item 2's attacks do when the grader calls, formats or releases one of their objects: if that
# happens while the guard is off, walk the frames to the grader's snapshot and empty it (so that
# nothing is restored or noticed any more); then patch the tests' tools.
DISARM = '''
def disarm():
    import sys
    try:
        f = sys._getframe(1)
        while f is not None:
            for obj in list(f.f_locals.values()):
                for attr in ("modules", "classes", "functions", "containers"):
                    if type(getattr(obj, attr, None)) is list:
                        getattr(obj, attr).clear()
            f = f.f_back
    except Exception:
        pass
    import course.compare as c
    c.assert_matches = lambda *a, **k: None
    c.assert_equal = lambda *a, **k: None
'''

# Item 6's attacks: a patch made by the answer's first call and undone by its last (the test's loop
# calls it TRIALS times), so that the state after the cell is the state before it. Its first call
# answers right, so that the comparison made before the patch passes.
UNDO = '''
_calls = [0]
def FN(ARG):
    _calls[0] += 1
    if _calls[0] == 1:
        patch()
        return RIGHT
    if _calls[0] == TRIALS:
        unpatch()
    WRONG
'''


def undo(kind: str, trials: int, patch: str, unpatch: str) -> tuple[str, str]:
    right = HONEST[kind].removeprefix("return ")
    return kind, (patch + "\n" + unpatch + "\n" + UNDO.replace("ARG", ARGS[kind]).replace("RIGHT", right)
                  .replace("TRIALS", str(trials)))


def swap_back(kind: str, trials: int, imports: str, target: str, fake: str) -> tuple[str, str]:
    """undo() of an attack that saves `target` in `real`, sets it to `fake` and puts `real` back."""
    return undo(kind, trials,
                f"def patch():\n    {imports}\n    global real\n    real = {target}\n    {target} = {fake}",
                f"def unpatch():\n    {imports}\n    {target} = real")


# Attacks by class (issue 14's items), each {exercise id: (test kind, answer cell)}. In an answer
# cell, `WRONG` is replaced by the wrong answer's body, `FN` by the function's name.
ATTACKS = {
    6: {
        # the tests' helper, through its module's attribute and through the module's namespace
        "ex_undo_attribute": swap_back("dbl", 12, "import course.compare as c", "c.assert_matches",
                                       "lambda *a, **k: None"),
        "ex_undo_namespace": swap_back("dbl", 12, "import course.compare as c", "vars(c)['assert_matches']",
                                       "lambda *a, **k: None"),
        # torch itself, for a test that uses it directly, and a method of torch.Tensor
        "ex_undo_torch": undo("raw", 24, "def patch():\n    import torch, torch.testing\n    global saved\n"
                                         "    saved = (torch.testing.assert_close, torch.allclose, torch.Tensor.all)\n"
                                         "    torch.testing.assert_close = lambda *a, **k: None\n"
                                         "    torch.allclose = lambda *a, **k: True\n"
                                         "    torch.Tensor.all = lambda self, *a, **k: torch.tensor(True)",
                              "def unpatch():\n    import torch, torch.testing\n"
                              "    torch.testing.assert_close, torch.allclose, torch.Tensor.all = saved"),
        # the given helper's own names (its globals are the grader's namespace) and a builtin it uses
        "ex_undo_helper_globals": undo("dbl", 12, "def patch():\n    class Quiet:\n"
                                                  "        def __getattr__(self, name):\n"
                                                  "            return lambda *a, **k: None\n"
                                                  "    global real\n    real = check_double.__globals__['compare']\n"
                                                  "    check_double.__globals__['compare'] = Quiet()",
                                       "def unpatch():\n    check_double.__globals__['compare'] = real"),
        "ex_undo_builtin": swap_back("dbl", 12, "import builtins", "builtins.isinstance", "lambda *a: False"),
        # a table edited in place: compare's tolerances
        "ex_undo_table": undo("dbl", 12, "def patch():\n    import course.compare as c, torch\n    global real\n"
                                         "    real = dict(c._DEFAULT_TOLERANCE)\n"
                                         "    c._DEFAULT_TOLERANCE.update({torch.float64: (1e9, 1e9)})",
                              "def unpatch():\n    import course.compare as c\n    c._DEFAULT_TOLERANCE.update(real)"),
        # what cannot be checked later is refused at once: code, defaults, a module's class
        "ex_swap_code": swap_back("dbl", 12, "import course.compare as c", "c.assert_matches.__code__",
                                  "(lambda *a, **k: None).__code__"),
        "ex_swap_defaults": swap_back("tri", 31, "import course.inputs as i", "i._ask.__defaults__",
                                      "(lambda *a: a[-1].append(1),) + real[1:]"),
        "ex_swap_module_class": undo("dbl", 12, "import types\nclass Lying(types.ModuleType):\n"
                                                "    def __getattribute__(self, name):\n"
                                                "        if name == 'assert_matches':\n"
                                                "            return lambda *a, **k: None\n"
                                                "        return super().__getattribute__(name)\n"
                                                "def patch():\n    import course.compare as c\n    c.__class__ = Lying",
                                     "def unpatch():\n    import course.compare as c, types\n"
                                     "    c.__class__ = types.ModuleType"),
        "ex_ok_after_undos": ("dbl", "def FN(x):\n    HONEST"),
        "ex_ok_after_undos_raw": ("raw", "def FN(x):\n    HONEST"),
    },
    2: {
        # a sys.stdout that the kernel drops after the cell: its finalizer
        "ex_stdout_finalizer": ("dbl", DISARM + '''import sys
class Out:
    def write(self, text):
        return len(text)
    def flush(self):
        pass
    def __del__(self):
        disarm()
sys.stdout = Out()
sys.stderr = Out()
def FN(x):
    WRONG'''),
        # hooks and a weakref callback on what the kernel holds
        "ex_hooks_finalizer": ("dbl", DISARM + '''import sys, weakref
class Hook:
    def __call__(self, *a):
        disarm()
    def __del__(self):
        disarm()
sys.displayhook = sys.excepthook = sys.unraisablehook = Hook()
class Held:
    pass
held = Held()
weakref.finalize(held, disarm)
sys.stdout.held = held
del held
def FN(x):
    WRONG'''),
        # an exception whose message, repr and finalizer are the student's
        "ex_exception_message": ("tri", DISARM + '''class Loud(Exception):
    def __str__(self):
        disarm()
        return "wrong"
    __repr__ = __str__
    def __del__(self):
        disarm()
def FN(n):
    raise Loud()'''),
        # a key in a protected module's namespace whose __hash__ and __eq__ run when it is looked up
        "ex_odd_key": ("dbl", DISARM + '''import course.compare
class Key:
    def __hash__(self):
        disarm()
        return hash("assert_matches")
    def __eq__(self, other):
        disarm()
        return False
vars(course.compare)[Key()] = 1
def FN(x):
    WRONG'''),
        # a module class that answers for the module: the tests' compare, and sys itself
        "ex_module_class": ("dbl", DISARM + '''import types, course.compare
class Lying(types.ModuleType):
    def __getattribute__(self, name):
        if name in ("assert_matches", "assert_equal"):
            return lambda *a, **k: None
        return super().__getattribute__(name)
course.compare.__class__ = Lying
def FN(x):
    WRONG'''),
        "ex_sys_class": ("dbl", DISARM + '''import sys, types
class LyingSys(types.ModuleType):
    def __getattribute__(self, name):
        if name in ("meta_path", "path_hooks", "modules"):
            disarm()
        return super().__getattribute__(name)
sys.__class__ = LyingSys
def FN(x):
    WRONG'''),
        "ex_ok_after_finalizers": ("dbl", "def FN(x):\n    HONEST"),
        "ex_ok_after_finalizers_tri": ("tri", "def FN(n):\n    HONEST"),
    },
    1: {
        # a handler on a timer: it fires inside the test (its frame's f_back is whoever ran the cell)
        "ex_signal_timer": ("dbl", FRAME_HUNT + '''import signal
def FN(x):
    WRONG
signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)
signal.signal(signal.SIGALRM, lambda signum, frame: hunt(frame))'''),
        # a handler for a signal a child process sends all the time, so that some arrive while the grader's
        # own code runs with signals blocked, pending until they are unblocked for the next cell
        "ex_signal_pending": ("tri", FRAME_HUNT + '''import os, signal, time
def FN(n):
    WRONG
try:
    signal.signal(signal.SIGUSR1, lambda signum, frame: hunt(frame))
except ValueError:
    pass
parent = os.getpid()
if os.fork() == 0:
    for _ in range(3000):
        try:
            os.kill(parent, signal.SIGUSR1)
        except OSError:
            break
        time.sleep(0.001)
    os._exit(0)'''),
        # frames the collector hands out: a test's frames kept alive by a cycle, saved in gc.garbage
        "ex_garbage_frames": ("dbl", FRAME_HUNT + '''import gc, types
gc.set_debug(gc.DEBUG_SAVEALL)
class Loop(Exception):
    def __init__(self):
        super().__init__("wrong")
        self.me = self
def FN(x):
    for o in list(gc.garbage):
        if type(o) is types.FrameType:
            hunt(o)
    gc.collect()
    raise Loop()'''),
        "ex_garbage_frames_later": ("dbl", FRAME_HUNT + '''import gc, types
def FN(x):
    gc.collect()
    for o in list(gc.garbage):
        if type(o) is types.FrameType:
            hunt(o)
    WRONG'''),
        # the kernel's main thread, interrupted, or its other frames asked for
        "ex_interrupt_main": ("tri", '''import _thread, signal, sys
def FN(n):
    for f in sys._current_frames().values():
        pass
    _thread.interrupt_main()
    WRONG'''),
        "ex_ok_after_signals": ("tri", "def FN(n):\n    HONEST"),
        "ex_ok_after_signals_dbl": ("dbl", "def FN(x):\n    HONEST"),
    },
    7: {
        # pin the stream from an answer cell: its generator's attributes, its seed, the random module
        "ex_pin_before": ("tri", '''def FN(n):
    WRONG
import random
from course import inputs
for how in (lambda: setattr(inputs._rng, "randint", lambda a, b: a),
            lambda: setattr(inputs._rng, "getrandbits", lambda k: 0),
            lambda: setattr(inputs._rng, "random", lambda: 0.0),
            lambda: inputs.reseed(0),
            lambda: setattr(random.Random, "randint", lambda self, a, b: a)):
    try:
        how()
    except Exception:
        pass'''),
        # while the test runs: reseed, at every call, to a seed whose next draw is 1
        "ex_pin_reseed": ("tri", '''def FN(n):
    import _random
    from course import inputs
    for s in range(100000):
        r = _random.Random(s)
        k = 1000 .bit_length()
        v = r.getrandbits(k)
        while v >= 1000:
            v = r.getrandbits(k)
        if v == 0:
            inputs.reseed(s)
            break
    WRONG'''),
        # while the test runs: knowing the seed, draw from the shared stream until its next draw is 1
        "ex_pin_consume": ("tri", '''_mirror = {}
def FN(n):
    import _random
    from course import inputs
    def draw(r):  # course.inputs's randint(1, 1000), on a mirror of the stream
        v = r.getrandbits(10)
        while v >= 1000:
            v = r.getrandbits(10)
        return v + 1
    if "m" not in _mirror:
        _mirror["m"] = _random.Random(inputs.seed())  # the stream as the test cell starts: tri(1) came first
    else:
        draw(_mirror["m"])  # the test's own draw of this n
    m = _mirror["m"]
    for _ in range(20000):  # move the stream on until its next draw is 1
        peek = _random.Random()
        peek.setstate(m.getstate())
        if draw(peek) == 1:
            break
        draw(m)
        inputs.randint(1, 1000)
    WRONG'''),
        "ex_ok_after_pins": ("tri", "def FN(n):\n    HONEST"),
    },
    5: {
        # a student's name for a builtin, seen by the test cell's own loop and by the given helper's
        "ex_range_in_test": ("eq", "def FN(k):\n    WRONG\nrange = lambda *a: ()"),
        "ex_range_in_helper": ("dbl", "def FN(x):\n    WRONG\nrange = lambda *a: ()"),
        # ... one that makes the expected value what the wrong answer gives
        "ex_shadow_list": ("eq", "def FN(k):\n    WRONG\nlist = lambda *a: [0]"),
        "ex_shadow_isinstance": ("dbl", "def FN(x):\n    WRONG\nisinstance = lambda *a: False"),
        # a replaced __builtins__ for the cells run in the notebook's namespace
        "ex_builtins_dict": ("tri", "def FN(n):\n    WRONG\nimport builtins as _b\n"
                                    "__builtins__ = dict(vars(_b), range=lambda *a: ())"),
        # the notebook's own names: a given helper and the tests' tools, rebound
        "ex_helper_name": ("dbl", "def FN(x):\n    WRONG\ncheck_double = lambda *a, **k: None\n"
                                  "class Quiet:\n    def __getattr__(self, name):\n        return lambda *a, **k: None\n"
                                  "compare = Quiet()"),
        # honest neighbours: one that shadows builtins for its own use (`from numpy import *`), as students do
        "ex_ok_numpy_star": ("tri", "from numpy import *\ndef FN(n):\n    return int(sum(arange(n + 1)))"),
        "ex_ok_after_shadows": ("dbl", "def FN(x):\n    HONEST"),
    },
    4: {
        # values that say yes to every comparison: an int subclass, a list subclass, an object of its own
        "ex_yes_int": ("tri", "class Yes(int):\n    __eq__ = lambda self, other: True\n"
                              "    __ne__ = lambda self, other: False\n    __hash__ = int.__hash__\n"
                              "def FN(n):\n    return Yes(1)"),
        "ex_yes_list": ("eq", "class Yes(list):\n    __eq__ = lambda self, other: True\n"
                              "    __ne__ = lambda self, other: False\ndef FN(k):\n    return Yes()"),
        "ex_yes_object": ("eq", "class Yes:\n    __eq__ = lambda self, other: True\n"
                                "    __ne__ = lambda self, other: False\ndef FN(k):\n    return Yes()"),
        # an object that claims to be a torch.Tensor (isinstance believes its __class__)
        "ex_fake_tensor": ("dbl", "import torch\nclass Fake:\n    __class__ = property(lambda self: torch.Tensor)\n"
                                  "    def __init__(self, x):\n        self.x = x\n"
                                  "    def __getattr__(self, name):\n        return getattr(self.x * 2, name)\n"
                                  "    __eq__ = lambda self, other: True\n    __ne__ = lambda self, other: False\n"
                                  "def FN(x):\n    return Fake(x)"),
        # a framework tensor whose to_torch() hands over an int subclass's tensor-less lie
        "ex_fake_to_torch": ("dbl", "class Mine:\n    def __init__(self, x):\n        self.x = x\n"
                                    "    def to_torch(self):\n        return self\n"
                                    "    shape = property(lambda self: self.x.shape)\n"
                                    "    dtype = property(lambda self: self.x.dtype)\n"
                                    "    device = property(lambda self: self.x.device)\n"
                                    "def FN(x):\n    return Mine(x * 3)"),
        # honest neighbours: numpy's ints where torch gives ints, a tuple subclass torch itself uses
        "ex_ok_numpy_int": ("tri", "import numpy as np\ndef FN(n):\n    return np.int64(n) * (n + 1) // 2"),
        "ex_ok_numpy_list": ("eq", "import numpy as np\ndef FN(k):\n    return list(np.arange(k))"),
    },
    3: {
        # a tensor subclass whose __torch_function__ makes every comparison say yes
        "ex_subclass_compare": ("dbl", AGREE + "def FN(x):\n    return (x * 3).as_subclass(Agree)"),
        "ex_subclass_raw": ("raw", AGREE + "def FN(x):\n    return (x * 3).as_subclass(Agree)"),
        # a TorchFunctionMode entered in the answer cell and never left, or entered by the answer
        "ex_mode_answer_cell": ("dbl", AGREE + "Yes().__enter__()\ndef FN(x):\n    WRONG"),
        "ex_mode_in_test": ("raw", AGREE + "def FN(x):\n    Yes().__enter__()\n    WRONG"),
        # ... with torch's __torch_function__ switched back on first
        "ex_mode_reenabled": ("raw", AGREE + "def FN(x):\n    torch._C._EnableTorchFunction().__enter__()\n"
                                             "    Yes().__enter__()\n    WRONG"),
        # a TorchDispatchMode that makes aten's comparisons say yes
        "ex_dispatch_mode": ("dbl", AGREE + "from torch.utils._python_dispatch import TorchDispatchMode\n"
                                            "class YesD(TorchDispatchMode):\n"
                                            "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
                                            "        out = func(*args, **(kwargs or {}))\n"
                                            "        if any(w in str(func) for w in ('isclose', 'eq', 'all')):\n"
                                            "            return torch.ones_like(out, dtype=torch.bool)\n"
                                            "        return out\n"
                                            "def FN(x):\n    YesD().__enter__()\n    WRONG"),
        # honest neighbours: a Parameter is a tensor; torch's own default-device mode is no cheat
        "ex_ok_parameter": ("dbl", "import torch\ndef FN(x):\n    return torch.nn.Parameter(x * 2)"),
        "ex_ok_default_device": ("raw", "import torch\ntorch.set_default_device('cpu')\ndef FN(x):\n    HONEST"),
    },
}


def attack_notebook(grader, answers: dict[str, str], kinds: dict[str, str]):
    nb = grader.release_nb
    for ex, code in answers.items():
        kind, fn = kinds[ex], ex.removeprefix("ex_")
        code = code.replace("WRONG", WRONG[kind]).replace("HONEST", HONEST[kind]).replace("FN", fn)
        nb = answer(nb, ex, code)
    return nb


@pytest.fixture(scope="module")
def attack_course(tmp_path_factory):
    root = tmp_path_factory.mktemp("attacks")
    kinds = {ex: kind for attacks in ATTACKS.values() for ex, (kind, _) in attacks.items()}
    chapter = make_chapter(root, attack_chapter(kinds), "02_attacks")
    grader = Grader(chapter, root / "grading", limits=Limits(cell_timeout_s=30, submission_timeout_s=240))
    (root / "submissions").mkdir()
    yield grader, root / "submissions", kinds
    grader.close()


def grade_attacks(attack_course, name: str, answers: dict[str, str]):
    grader, folder, kinds = attack_course
    nb = attack_notebook(grader, answers, kinds)
    path = folder / name / "02_attacks.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    result = grader.grade(name, path)
    return {v.exercise: v.points for v in result.verdicts}, result


def assert_no_hidden_source(result):
    from autograder.grade.feedback import render
    page = render(result)
    assert HIDDEN_MARK not in page and "BEGIN HIDDEN" not in page and "leaked" not in page, page
    for v in result.verdicts:
        assert "inputs.randint(1, 1000)" not in v.message and "check_double(" not in v.message, v.message


@pytest.mark.parametrize("item", sorted(ATTACKS), ids=[f"item{i}" for i in sorted(ATTACKS)])
def test_attacks_of_one_class_earn_nothing(attack_course, item):
    """Issue 14: every attack of the class gets what its wrong answer gets (0); the honest
    neighbours in the same notebook keep their points; the feedback shows no hidden test."""
    attacks = ATTACKS[item]
    points, result = grade_attacks(attack_course, f"attacker-{item}", {ex: code for ex, (_, code) in attacks.items()})
    messages = {v.exercise: v.message for v in result.verdicts}
    for ex in attacks:
        if ex.startswith("ex_ok"):
            assert points[ex] == 1, (ex, messages[ex], result.notes)
        else:
            assert points[ex] == 0, (ex, messages[ex], result.notes)
    assert_no_hidden_source(result)


def test_honest_answers_earn_every_attack_exercise(attack_course):
    grader, _, kinds = attack_course
    points, result = grade_attacks(attack_course, "honest-attacks", {ex: "def FN(" + ARGS[k] + "):\n    HONEST"
                                                                     for ex, k in kinds.items()})
    assert all(p == 1 for p in points.values()), ({v.exercise: v.message for v in result.verdicts if not v.points},
                                                  result.notes)
