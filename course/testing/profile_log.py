"""The other side of the tests of chapter 08's profiler: what `torch.profiler.profile` records.

`torch_profile_of(program, args)` runs a program under torch's profiler (shapes and memory recorded) and gives
back its result and the operator calls torch recorded, as plain `TorchCall`s: the aten name, the shapes and
dtypes of the tensor inputs (named as picotorch names its dtypes), the bytes the call and its children
allocated, and its start, end and parent. A test aid, not part of picotorch.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["TorchCall", "torch_profile_of", "torch_counts", "TORCH_DTYPE_NAMES"]

# c10's scalar type names, as torch's profiler writes them (FunctionEvent.input_dtypes) -> picotorch's dtype names
TORCH_DTYPE_NAMES = {"float": "float32", "double": "float64", "long int": "int64", "long": "int64", "bool": "bool",
                     "c10::Half": "float16", "c10::BFloat16": "bfloat16", "int": "int32"}


@dataclass
class TorchCall:
    name: str           # "aten::linear", or a record_function range's name
    shapes: list        # the tensor inputs' shapes, as tuples
    dtypes: list        # the tensor inputs' dtypes, picotorch's names
    bytes: int          # what the call and its children allocated (torch's cpu_memory_usage)
    start_us: float
    end_us: float
    parent: int = None  # index of the enclosing call in the list, None at the top
    children: list = field(default_factory=list)


class _QuietStderr:
    """`with _QuietStderr():` nothing on file descriptor 2 meanwhile. Torch's profiler library (kineto) writes
    "profiler_start" lines there, and c10 its warnings about memory allocated before the profile: plain nbgrader
    gives a test cell that wrote to stderr no points."""

    def __enter__(self):
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # read when the library starts, at a process's first profile
        self.saved = os.dup(2)
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        return self

    def __exit__(self, *exc):
        os.dup2(self.saved, 2)
        os.close(self.saved)
        return False


def torch_profile_of(program, args=()):
    """(program(*args), [TorchCall, ...] in the order the calls began): torch's profiler is on only inside."""
    from torch.profiler import ProfilerActivity, profile

    with _QuietStderr():
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
            out = program(*args)
        events = sorted(prof.events(), key=lambda e: (e.time_range.start, -e.time_range.end))
    index = {id(e): i for i, e in enumerate(events)}
    calls = []
    for e in events:
        dtypes = list(getattr(e, "input_dtypes", None) or [""] * len(e.input_shapes))
        tensors = [(tuple(s), TORCH_DTYPE_NAMES[d]) for s, d in zip(e.input_shapes, dtypes) if d in TORCH_DTYPE_NAMES]
        calls.append(TorchCall(e.name, [s for s, _ in tensors], [d for _, d in tensors], e.cpu_memory_usage,
                               e.time_range.start, e.time_range.end,
                               index.get(id(e.cpu_parent)) if e.cpu_parent is not None else None))
    for i, call in enumerate(calls):
        if call.parent is not None:
            calls[call.parent].children.append(i)
    return out, calls


def torch_counts(calls, names) -> dict:
    """{name: how many calls of it torch recorded} for each of names (0 where none)."""
    counts = Counter(c.name for c in calls)
    return {name: counts[name] for name in names}
