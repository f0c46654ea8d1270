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


# torch.testing.assert_close's defaults, by dtype: (rtol, atol).
_DEFAULT_TOLERANCE = {torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1.3e-6, 1e-5),
                      torch.float64: (1e-7, 1e-7), torch.complex64: (1.3e-6, 1e-5), torch.complex128: (1e-7, 1e-7)}
# How many times torch's own rounding error (against float64) a correct answer may differ from torch by:
# two correct float32 programs summing in different orders land a few rounding errors apart.
_ROUNDING_SLACK = 4.0


def tolerance(expected: torch.Tensor, *, rtol=None, atol=None, scale=None, exact=None) -> tuple[float, float]:
    """(rtol, atol) for comparing with torch's `expected`: the dtype's defaults (as `assert_close` picks
    them), widened by how much float rounding the computation itself carries at these inputs.

    scale: the magnitude of the values `expected` was computed from (the largest |input|, say). Their
        rounding reaches the result as an absolute error proportional to it, however small the result
        is: the mean of float32 terms of size 1e4 that nearly cancel is 43.58 +- 1e-3. atol grows by it.
    exact: torch's result for the same inputs computed in float64. How far torch's own `expected` lies
        from it measures how ill-conditioned the computation is here (tanh near 1, then exp twice);
        a correct answer may lie a few times as far from torch's.
    """
    base_rtol, base_atol = _DEFAULT_TOLERANCE.get(expected.dtype, (0.0, 0.0))
    rtol = base_rtol if rtol is None else rtol
    atol = base_atol if atol is None else atol
    if scale is not None:
        atol *= max(1.0, float(scale))
    if exact is not None and expected.numel() and expected.is_floating_point():
        torch_error = (expected.detach().double() - exact.detach().double().to(expected.device)).abs()
        torch_error = torch_error[torch_error.isfinite()]
        if torch_error.numel():
            atol += _ROUNDING_SLACK * float(torch_error.max())
    return rtol, atol


def magnitude(*tensors) -> float:
    """The largest finite |value| among `tensors` (torch or picotorch tensors; numbers are skipped)."""
    found = 0.0
    for t in tensors:
        if isinstance(t, torch.Tensor) or hasattr(t, "to_torch"):
            values = as_torch(t).detach()
            if values.is_floating_point() and values.numel():
                values = values.abs()[values.isfinite()]
                found = max(found, float(values.max()) if values.numel() else 0.0)
    return found


def assert_matches(ours, expected, what: str, *, check_dtype: bool = True, check_device: bool = True,
                   check_strides: bool = False, check_offset: bool = False, rtol=None, atol=None,
                   scale=None, exact=None) -> None:
    """`ours` equals torch's `expected`: type, shape, dtype, device and values (and the
    layout, when asked). `what` names the computation, e.g. "gradient_of(f, x) for x of shape (3,)".
    Values are compared at `tolerance(expected, rtol=, atol=, scale=, exact=)`."""
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
        rtol, atol = tolerance(expected, rtol=rtol, atol=atol, scale=scale, exact=exact)
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
