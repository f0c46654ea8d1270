"""How a failure message names a value: `describe(x)` for what a test passed in, `layout(t)` where the
layout is the point, `short(x)` for what came back."""
from __future__ import annotations

__all__ = ["describe", "layout", "short"]


def _dtype_name(t) -> str:
    text = str(t.dtype)
    return text.rpartition(".")[2] if text.startswith(("torch.", "picotorch.")) else text


def layout(t) -> str:
    """'shape (2, 3), stride (1, 2), offset 0' for any tensor with torch's layout methods."""
    return f"shape {tuple(t.shape)}, stride {tuple(t.stride())}, offset {t.storage_offset()}"


def describe(x) -> str:
    """'float32 (2, 3)' for a tensor (torch's or a framework's), with ' stride (1, 2)' when it is not
    contiguous, ' offset 4' when it starts past its storage's first element and ' on cuda:0' off the CPU;
    'the number 2.5' for a number; repr for anything else."""
    if isinstance(x, (bool, int, float, complex)):
        return f"the number {x!r}"
    try:
        shape, dtype = tuple(x.shape), _dtype_name(x)
    except Exception:
        return repr(x)
    text = f"{dtype} {shape}"
    try:
        if not x.is_contiguous():
            text += f" stride {tuple(x.stride())}"
        if x.storage_offset():
            text += f" offset {x.storage_offset()}"
    except Exception:  # a framework's tensor before its layout methods are written
        pass
    device = getattr(x, "device", None)
    if device is not None and str(device) != "cpu":
        text += f" on {device}"
    return text


def short(x, limit: int = 60) -> str:
    """x's repr cut at `limit` characters; a tensor's layout where its repr fails (strides past its
    storage)."""
    try:
        text = repr(x)
    except Exception:
        try:
            text = f"a tensor of {layout(x)}"
        except Exception:
            text = f"a {type(x).__name__}"
    return text if len(text) <= limit else text[:limit]
