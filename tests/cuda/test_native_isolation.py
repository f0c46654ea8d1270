"""Students' native code runs outside the notebook's process (issue 42, items 4 and 5).

A kernel compiled for the CUDA emulator is machine code the student wrote. It runs in the emulator's
launch process (course/cuda/emulator/host.py, host.cpp), never in the Python process that launched it,
which in a grading run holds the tests, the cell's secret and the verdict channel. Here, without a
sandbox: the attacks of issue 42 (Python's C API through dlsym, every thread's frames, system(), wild
pointer writes) find nothing of Python and touch nothing of this process, a crash is a failed launch
with the emulator's message, the next launch works, and the launch process dies with the thread that
started it. A template bomb is a failed compile naming the limit, between two honest kernels that are
not held up. (Graded in the sandbox: tests/grading/test_kernel_cache.py, test_a_native_attack_costs_its_exercise_only.)
"""
from __future__ import annotations

import os
import shutil
import threading
import time

import numpy as np
import pytest
import torch

if not shutil.which("g++"):
    pytest.skip("needs g++ (the CUDA emulator's compiler)", allow_module_level=True)

from course.cuda import Kernel, KernelCompileError, KernelLaunchError, Module  # noqa: E402
from course.cuda.emulator import host as hosts  # noqa: E402

ATTACKS = r"""
extern "C" void* dlsym(void* handle, const char* name);
extern "C" int system(const char* command);
extern "C" int getpid(void);
typedef int (*run_t)(const char*);

// What a kernel in the notebook's process could reach: Python's C API and every thread's frames.
extern "C" __global__ void reach_python(long long* out) {
    run_t run = (run_t)dlsym((void*)0, "PyRun_SimpleString");
    out[0] = run != 0;
    out[1] = dlsym((void*)0, "_PyThread_CurrentFrames") != 0;
    out[2] = dlsym((void*)0, "Py_IsInitialized") != 0;
    out[3] = getpid();
    if (run) run("import builtins; builtins.NATIVE_ATTACK_RAN = True");
}

extern "C" __global__ void shell(long long* out) {
    out[0] = system("exit 7");   // the shell runs, as a child of the launch process
    out[1] = getpid();
}

extern "C" __global__ void wild_write(float* out, long long address) {
    *(volatile float*)address = 42.0f;   // an address of the notebook's process
    out[0] = 1.0f;
}

extern "C" __global__ void null_write(float* out) {
    *(volatile float*)16 = 1.0f;
    out[0] = 1.0f;
}

extern "C" __global__ void honest(float* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i];
}
"""

BOMB = r"""
// Three template parameters: 200^3 distinct instantiations, each nesting no deeper than g++'s limit (900).
template <int A, int B, int C> struct Bomb {
    static constexpr long long value = Bomb<A - 1, B, C>::value + Bomb<A, B - 1, C>::value + Bomb<A, B, C - 1>::value;
};
template <int B, int C> struct Bomb<0, B, C> { static constexpr long long value = 1; };
template <int A, int C> struct Bomb<A, 0, C> { static constexpr long long value = 1; };
template <int A, int B> struct Bomb<A, B, 0> { static constexpr long long value = 1; };

extern "C" __global__ void bomb(long long* out) { out[0] = Bomb<200, 200, 200>::value; }
"""


@pytest.fixture(scope="module")
def module():
    return Module(ATTACKS)


def honest_launch(module) -> None:
    x = torch.arange(100, dtype=torch.float32)
    out = torch.empty(100)
    module.get_function("honest")((1,), (128,), (out, x, np.int32(100)))
    torch.testing.assert_close(out, 2 * x, msg="the honest kernel's result after the attack")


def test_a_kernel_finds_no_python_to_call(module):
    out = torch.zeros(4, dtype=torch.int64)
    module.get_function("reach_python")((1,), (1,), (out,))
    import builtins
    assert not hasattr(builtins, "NATIVE_ATTACK_RAN"), "the kernel ran Python in this process"
    assert out[:3].tolist() == [0, 0, 0], (
        f"dlsym found PyRun_SimpleString, _PyThread_CurrentFrames, Py_IsInitialized: {out[:3].tolist()}; "
        f"the process that runs kernels should hold no Python")
    assert int(out[3]) not in (0, os.getpid()), "the kernel ran in the notebook's own process"


def test_system_runs_in_the_launch_process_not_here(module):
    out = torch.zeros(2, dtype=torch.int64)
    module.get_function("shell")((1,), (1,), (out,))
    assert int(out[1]) != os.getpid(), "system() was called from the notebook's process"
    assert (int(out[0]) >> 8) == 7, f"system('exit 7') returned {int(out[0])}"


def test_a_wild_write_cannot_reach_this_process(module):
    victim = torch.zeros(16)
    out = torch.zeros(1)
    try:
        module.get_function("wild_write")((1,), (1,), (out, np.int64(victim.data_ptr())))
    except KernelLaunchError as e:  # the address is (almost surely) not mapped in the launch process
        assert "launch process" in str(e), str(e)
    assert torch.equal(victim, torch.zeros(16)), f"the kernel wrote into this process's tensor: {victim}"
    honest_launch(module)


def test_a_crash_is_a_failed_launch_with_the_emulators_message_and_the_next_launch_works(module):
    out = torch.zeros(1)
    with pytest.raises(KernelLaunchError) as caught:
        module.get_function("null_write")((1,), (1,), (out,))
    message = str(caught.value)
    assert "null_write" in message and "SIGSEGV" in message and "launch process" in message, message
    assert torch.equal(out, torch.zeros(1)), "a crashed launch changed its tensor"
    honest_launch(module)


def test_the_launch_process_dies_with_the_thread_that_started_it(module):
    seen = {}

    def cell():
        honest_launch(module)
        seen["pid"] = hosts._state[threading.get_ident()].proc.pid

    worker = threading.Thread(target=cell)
    worker.start()
    worker.join()
    pid = seen["pid"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":  # dead, not yet reaped by this process
            break
        time.sleep(0.02)
    else:
        pytest.fail(f"the launch process {pid} outlived the thread that started it")
    honest_launch(module)  # this thread gets a launch process of its own


def test_a_template_bomb_is_a_failed_compile_naming_the_limit_between_two_honest_kernels(module, monkeypatch):
    honest_launch(module)  # built before, with the default limit
    monkeypatch.setenv("COURSE_CUDA_COMPILE_TIMEOUT", "2")
    start = time.monotonic()
    with pytest.raises(KernelCompileError) as caught:
        Kernel(BOMB, "bomb")((1,), (1,), (torch.zeros(1, dtype=torch.int64),))
    took = time.monotonic() - start
    message = str(caught.value)
    assert "limit of 2 s" in message and "COURSE_CUDA_COMPILE_TIMEOUT" in message, message
    assert took < 30, f"the bomb held the caller {took:.0f} s with a limit of 2 s"
    honest_launch(module)
