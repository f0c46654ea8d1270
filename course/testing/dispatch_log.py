"""The other side of the tests of a dispatch mode: what torch's own dispatcher sees.

`TorchLog` is a `TorchDispatchMode` that logs the name of every aten operator torch dispatches while it is
on; `torch_log_of(program, args)` runs a program under it. Chapter 05's tests of `LoggingMode` and the
project's tests of the dispatcher compare picotorch's log with it. A test aid, not part of picotorch.
"""
from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["TorchLog", "torch_log_of"]


class TorchLog(TorchDispatchMode):
    """`with TorchLog() as log:` log.ops is the aten operators (overload packets' names) torch ran, in order."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def torch_log_of(program, args):
    """(program(*args), the aten operators a TorchDispatchMode saw); the mode is on only inside this call."""
    with TorchLog() as log:
        out = program(*args)
    return out, log.ops
