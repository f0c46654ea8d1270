"""Where a submission's code runs while it is graded, and what it may not do there.

    bubblewrap     the grader's side: the bwrap command line, Limits, the warm Sandbox
    supervisor     the trusted process inside bwrap (`python -m autograder.sandbox.supervisor`)
    executor       the process the supervisor forks per submission, which runs its cells
    integrity      the snapshot of the interpreter and the audit hook that guards it
    kernel_cache   compiled CUDA-emulator kernels shared between the submissions of one sandbox

The package imports none of its modules: the supervisor and the executor run inside
the sandbox, where every module loaded is part of what the snapshot guards.
"""

__all__ = ["bubblewrap", "executor", "integrity", "kernel_cache", "supervisor"]
