"""The devices a test runs on: the CPU always, CUDA when a GPU is really there."""
from __future__ import annotations


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (torch is imported only when asked)."""
    import torch  # here, not at the top: `import course` (every grader, CLI and worker process) needs no torch
    return torch.cuda.is_available()


def devices() -> list[str]:
    """Device types to compare on, in order; never pretends a GPU is present."""
    return ["cpu"] + (["cuda"] if cuda_available() else [])
