"""Compare a student's result with real PyTorch's, and say what differs in the
chapter's own terms ("stride (1, 3) but torch has (3, 1) after transpose(0, 1)").

Every helper raises AssertionError with a teaching message; the checks and the
grader show that message, never a traceback. Tolerances come from the dtype, as
`torch.testing.assert_close` chooses them.
"""
from __future__ import annotations

import torch

from course.inputs import replay_hint


def as_torch(x):
    """A torch tensor for x: torch tensors as they are, the course framework's
    tensors through their `to_torch()`, numbers and lists through torch.tensor."""
    if isinstance(x, torch.Tensor):
        return x
    if hasattr(x, "to_torch"):
        return x.to_torch()
    return torch.tensor(x)


def _fail(what: str, detail: str) -> None:
    raise AssertionError(f"{what}: {detail}{replay_hint()}")


def _shape(t) -> tuple:
    return tuple(t.shape)


def assert_same_shape(ours, expected, what: str) -> None:
    if _shape(ours) != _shape(expected):
        _fail(what, f"shape {_shape(ours)} but torch has {_shape(expected)}")


def assert_matches(ours, expected, what: str, *, check_dtype: bool = True, check_device: bool = True,
                   check_strides: bool = False, check_offset: bool = False, rtol=None, atol=None) -> None:
    """`ours` equals torch's `expected`: type, shape, dtype, device and values (and the
    layout, when asked). `what` names the computation, e.g. "gradient_of(f, x) for x of shape (3,)"."""
    if ours is None:
        _fail(what, f"got None but torch has a tensor of shape {_shape(expected)}")
    if not isinstance(ours, torch.Tensor) and not hasattr(ours, "to_torch"):
        _fail(what, f"got a {type(ours).__name__} but torch has a tensor of shape {_shape(expected)}")
    t = as_torch(ours)
    assert_same_shape(t, expected, what)
    if check_dtype and t.dtype != expected.dtype:
        _fail(what, f"dtype {t.dtype} but torch has {expected.dtype}")
    if check_device and t.device.type != expected.device.type:
        _fail(what, f"on device {t.device} but torch's result is on {expected.device}")
    if check_strides and t.stride() != expected.stride():
        _fail(what, f"stride {t.stride()} but torch has {expected.stride()} (shape {_shape(expected)})")
    if check_offset and t.storage_offset() != expected.storage_offset():
        _fail(what, f"storage offset {t.storage_offset()} but torch has {expected.storage_offset()}")
    if t.requires_grad:
        t = t.detach()
    try:
        torch.testing.assert_close(t.to(expected.device), expected.detach(), rtol=rtol, atol=atol,
                                   check_dtype=False, equal_nan=True)
    except AssertionError as e:
        summary = " ".join(line.strip() for line in str(e).splitlines()[1:4] if line.strip())
        _fail(what, f"values differ from torch's. {summary}\n  yours: {_preview(t)}\n  torch: {_preview(expected)}")


def assert_shares_memory(ours, base, what: str) -> None:
    """`ours` must be a view of `base` (no copy), as torch's result would be."""
    a, b = as_torch(ours), as_torch(base)
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        _fail(what, "made a copy, but torch returns a view that shares memory with its input")


def assert_no_shared_memory(ours, base, what: str) -> None:
    a, b = as_torch(ours), as_torch(base)
    if a.numel() and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr():
        _fail(what, "returned a view of its input, but torch returns a copy here")


def assert_equal(ours, expected, what: str) -> None:
    """Plain values (shapes, counts, names): equal, or a message with both."""
    if ours != expected:
        _fail(what, f"got {ours!r} but torch gives {expected!r}")


def assert_raises(exc_type, fn, what: str, *args, **kwargs) -> None:
    """`fn(*args)` must raise `exc_type`, as torch does for the same call."""
    try:
        result = fn(*args, **kwargs)
    except exc_type:
        return
    except Exception as e:
        _fail(what, f"raised {type(e).__name__} ({e}) but torch raises {exc_type.__name__}")
    else:
        _fail(what, f"returned {_short(result)} but torch raises {exc_type.__name__}")


def _short(x) -> str:
    text = repr(x)
    return text if len(text) < 80 else text[:77] + "..."


def _preview(t: torch.Tensor) -> str:
    flat = t.detach().reshape(-1)[:6].tolist()
    more = ", ..." if t.numel() > 6 else ""
    return "[" + ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in flat) + more + "]"
