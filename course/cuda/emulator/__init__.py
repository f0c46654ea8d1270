"""The CUDA C emulator: kernels compiled by g++ against cuda_emu.h and run on
the CPU, one block at a time, each CUDA thread a fiber (a user-level thread) of
one OS thread; the check="bounds"/"races" harnesses run one OS thread per CUDA
thread, which is what AddressSanitizer and ThreadSanitizer watch.

- build.py     rewrites, compiles and caches (shared library or sanitizer executable)
- launch.py    ordinary launches, with memory counters, run by host.py/host.cpp in a launch process of
               their own (a student's machine code never runs in the notebook's process)
- sanitize.py  check="bounds" (AddressSanitizer) and check="races" (ThreadSanitizer)
- cuda_emu.h   the CUDA builtins; runtime.cpp the threads, barriers, warps, atomics
"""

LIMITS = """\
The emulator runs your kernel on the CPU, one block at a time, each CUDA thread
a thread of its own that runs until it waits (a barrier, a shuffle) or stores
to global memory, where the others get their turn. It checks what a GPU does not (barriers every thread reaches,
shuffles from lanes that exist, and with check="bounds"/"races" out-of-bounds
accesses and missing barriers), but it does NOT model:
  - warp lock-step: the 32 threads of a warp run independently here;
  - weak memory ordering: the CPU orders memory more strictly than a GPU;
  - timing: how long a launch takes here says nothing about a GPU;
  - blocks running side by side: a race between two blocks is never seen.
A kernel that passes here can still be wrong on a GPU for those reasons."""

__all__ = ["LIMITS"]
