"""Compare a student's result with real PyTorch's, and say what differs in the
chapter's own terms ("stride (1, 3) but torch has (3, 1) after transpose(0, 1)").

Every helper raises AssertionError with a teaching message; the checks and the
grader show that message, never a traceback. Tolerances come from the dtype, as
`torch.testing.assert_close` chooses them.

The helpers never ask a student's object whether it is right. A result is first
turned into values of exact built-in or torch types that the helper makes
itself (an int from an int subclass, a tuple from a tuple subclass, a plain
`torch.Tensor` from a tensor subclass or a framework's tensor), and only those
are compared, with torch's function and dispatch modes off: an `int` whose
`__eq__` says yes to everything, a tensor subclass with `__torch_function__` or
a `TorchFunctionMode` left active cannot make a wrong answer pass. The message
says so when a result was not of the type torch gives ("got a subclass of int").

Where a helper has made the student's result into its own values (the last moment any of the
student's code runs in it), it raises the audit event "course.verify" through `sys.audit` itself,
held as a constant of its code (no name a student could rebind is looked up for it): while a
notebook is graded, the sandbox checks there that nothing the comparison uses was changed. The
comparison itself uses torch's C functions captured here, and no Python code of torch's.
"""
from __future__ import annotations

import functools
import sys
import types

import torch

from course.inputs import replay_hint
from course.verdicts import NOT_RUN_ERRORS

try:
    import numpy as _np
except ImportError:  # numpy is optional for torch
    _np = None

_Tensor = torch.Tensor
_TensorBase = torch._C.TensorBase
_C = torch._C
_len_function_modes, _function_mode_at = _C._len_torch_function_stack, _C._get_function_stack_at
_len_dispatch_modes, _dispatch_mode_at = _C._len_torch_dispatch_stack, _C._get_dispatch_stack_at
_dispatch_mode_in = getattr(_C, "_get_dispatch_mode", None)
_MODE_SLOTS = tuple((k.lower(), getattr(_C._TorchDispatchModeKey, k)) for k in ("FAKE", "PROXY", "FUNCTIONAL")
                    if hasattr(getattr(_C, "_TorchDispatchModeKey", None), k))
_dispatch_keys, _PYTHON_KEY = _C._dispatch_keys, _C.DispatchKey.Python
_isclose, _promote_types = torch.isclose, torch.promote_types
_VERIFY = "<course.verify>"  # in the helpers' code: replaced by sys.audit when this module loads (see the end)
_as_plain = _TensorBase.as_subclass  # the C method itself: no student override is consulted
_detach = _TensorBase.detach
_class_name = type.__dict__["__name__"].__get__  # a class's own name, whatever its metaclass claims
_exact_str = str.__str__
_NoTorchFunction = torch._C.DisableTorchFunction
_SCALARS = frozenset({int, float, bool, complex, str, bytes, type(None)})
_TORCH_VALUES = frozenset({torch.dtype, torch.device, torch.layout, torch.memory_format})
_BASE_COPY = ((int, int.__int__), (float, float.__float__), (complex, complex.__complex__),
              (str, str.__str__), (bytes, lambda b: bytes.__getitem__(b, slice(None))))
_NUMPY_SCALARS = frozenset(t for t in getattr(_np, "sctypeDict", {}).values()) if _np is not None else frozenset()
_MAX_ITEMS = 100_000
try:  # torch.set_default_device's mode: torch's own, it only picks where new tensors go
    from torch.utils._device import DeviceContext as _DeviceContext
except ImportError:
    _DeviceContext = None  # a result bigger than this is not compared element by element


def _name(value) -> str:
    """The name of value's class, as an exact str (never the student's own __name__ machinery)."""
    return _exact_str(_class_name(type(value)))


def fail(what: str, detail: str) -> None:
    """Fail a check: what was being checked, what differs, and how to replay random inputs."""
    __tracebackhide__ = True
    raise ending_at_the_test(AssertionError(f"{what}: {detail}{replay_hint()}"))


# The helpers mark their frames with `__tracebackhide__ = True` (pytest's and IPython's convention), so that
# a failing test's traceback ends at the test's own line. IPython skips such frames except the last one, the
# frame that raised, which is always one of ours: a failure of ours carries `_render_traceback_`, IPython's
# hook for an exception that draws its own traceback, which leaves every marked frame out. The message is the
# same; pytest and the grader, which never call the hook, see the exception as it is.
def ending_at_the_test(error: BaseException) -> BaseException:
    """`error`, shown by IPython without the course's own frames."""
    error._render_traceback_ = functools.partial(_traceback_without_hidden_frames, error)  # picklable, as error is
    return error


def _traceback_without_hidden_frames(error: BaseException) -> list[str]:
    from IPython import get_ipython

    formatter = get_ipython().InteractiveTB
    try:
        return formatter.structured_traceback(type(error), error, _without_hidden_frames(error.__traceback__))
    except Exception:  # never lose the failure over its traceback
        return formatter.structured_traceback(type(error), error, error.__traceback__)


def _without_hidden_frames(tb):
    kept = []
    while tb is not None:
        if tb.tb_frame.f_locals.get("__tracebackhide__") is not True:  # IPython's own marks another value
            kept.append(tb)
        tb = tb.tb_next
    shown = None
    for entry in reversed(kept):
        shown = types.TracebackType(shown, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return shown


def _modes_off(what: str) -> None:
    """Fail unless torch's extension points are quiet: no TorchFunctionMode (but torch's own
    default-device one) and no TorchDispatchMode may decide what the comparison computes."""
    __tracebackhide__ = True
    for i in range(_len_function_modes()):
        mode = _function_mode_at(i)
        if type(mode) is not _DeviceContext:
            fail(what, f"a torch function mode ({_name(mode)}) was active when your result was compared; "
                        "modes change what torch computes, so exit it before returning")
    if _len_dispatch_modes():
        mode = _dispatch_mode_at(0)
        fail(what, f"a torch dispatch mode ({_name(mode)}) was active when your result was compared; "
                    "modes change what torch computes, so exit it before returning")
    for name, slot in _MODE_SLOTS:
        if _dispatch_mode_in is not None and _dispatch_mode_in(slot) is not None:
            fail(what, f"torch's {name} dispatch mode was active when your result was compared")


def _plain_tensor(x, what: str, notes: list | None = None, allow_foreign: bool = True):
    """x as a plain torch.Tensor that this module made (sharing x's memory), or None if x is not
    a tensor. A torch.Tensor subclass is stripped of its class (and so of __torch_function__); a
    framework's tensor comes through its to_torch(); a tensor with __torch_dispatch__ is refused."""
    __tracebackhide__ = True
    kind = type(x)
    if kind is not _Tensor:
        if issubclass(kind, _Tensor):
            if notes is not None:
                notes.append(f"got a subclass of torch.Tensor ({_name(x)}); compared as a plain tensor")
        elif allow_foreign and hasattr(x, "to_torch"):
            return _plain_tensor(x.to_torch(), what, notes, allow_foreign=False)
        else:
            return None
    with _NoTorchFunction():
        t = _detach(_as_plain(x, _Tensor))
        if _dispatch_keys(t).has(_PYTHON_KEY):
            fail(what, f"got a tensor subclass with __torch_dispatch__ ({_name(x)}), whose values torch cannot "
                        "read directly; return a plain tensor")
    return t


def as_torch(x):
    """A plain torch tensor for x: torch tensors (subclasses stripped), the course framework's
    tensors through their `to_torch()`, numbers and lists through torch.tensor."""
    __tracebackhide__ = True
    t = _plain_tensor(x, "as_torch")
    if t is not None:
        return t
    with _NoTorchFunction():
        return _detach(torch.tensor(x))


def _plain(value, notes: list, budget: list):
    """value as exact built-in (or torch's own C) types, made here; a subclass of a built-in
    becomes its base type (noted), a tensor a plain tensor of this module's. Objects of any other
    class stay as they are, wrapped, and are compared by identity or by the expected side's __eq__."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooBig()
    kind = type(value)
    if kind in _SCALARS or kind in _TORCH_VALUES:
        return value
    if kind is list:
        return [_plain(v, notes, budget) for v in list.copy(value)]
    if kind is tuple:
        return tuple([_plain(v, notes, budget) for v in value])
    if kind is torch.Size:
        return tuple([int.__int__(v) for v in value])
    if kind is dict:
        return {_plain(k, notes, budget): _plain(v, notes, budget) for k, v in list(dict.items(value))}
    if kind is set or kind is frozenset:
        return frozenset([_plain(v, notes, budget) for v in list(kind.__iter__(value))])
    if kind in _NUMPY_SCALARS:
        return value.item()
    if _np is not None and issubclass(kind, _np.ndarray):
        return _np.ndarray.view(value, _np.ndarray).tolist()
    if issubclass(kind, _Tensor) or (kind not in _SCALARS and hasattr(value, "to_torch")):
        return _PlainTensor(_plain_tensor(value, "", notes))
    for base, copy in _BASE_COPY:
        if issubclass(kind, base):
            notes.append(f"got a subclass of {base.__name__} ({_name(value)}); compared as a plain {base.__name__}")
            return copy(value)
    for base in (tuple, list):
        if issubclass(kind, base):
            if not _is_namedtuple(kind):
                notes.append(f"got a subclass of {base.__name__} ({_name(value)}); compared as a plain "
                             f"{base.__name__}")
            items = [_plain(v, notes, budget) for v in list(base.__iter__(value))]
            return tuple(items) if base is tuple else items
    if issubclass(kind, dict):
        notes.append(f"got a subclass of dict ({_name(value)}); compared as a plain dict")
        return {_plain(k, notes, budget): _plain(v, notes, budget) for k, v in list(dict.items(value))}
    for base in (set, frozenset):
        if issubclass(kind, base):
            notes.append(f"got a subclass of {base.__name__} ({_name(value)}); compared as a plain frozenset")
            return frozenset([_plain(v, notes, budget) for v in list(base.__iter__(value))])
    return _Opaque(value)


def _is_namedtuple(kind) -> bool:
    """torch's return types and collections.namedtuple: tuples with field names, as torch returns them."""
    return type(type.__dict__["__dict__"].__get__(kind).get("_fields")) is tuple or \
        type(kind).__module__ == "torch.return_types" or kind.__module__ == "torch.return_types"


class _TooBig(Exception):
    pass


class _Opaque:
    """An object of a class that is neither built-in nor torch's: it is the same as the expected
    value only if it *is* that value, or the expected value's own class says so."""
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __repr__(self):
        return _short(self.obj)

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return type(other) is _Opaque and self.obj is other.obj


class _PlainTensor:
    """A plain torch.Tensor made here, compared by torch: with a tensor by shape and values, with
    a number (when it has one element) or a list (its values) as torch's == would."""
    __slots__ = ("t",)

    def __init__(self, t):
        self.t = t

    def __repr__(self):
        with _NoTorchFunction():
            return _short(self.t.tolist())

    def __hash__(self):
        return id(self.t)

    def __eq__(self, other):
        return type(other) is _PlainTensor and self.t is other.t


def _same(ours, expected) -> bool:
    """Equality of two plain values, asking no object of the student's."""
    ko, ke = type(ours), type(expected)
    if ke is _Opaque:
        if ko is _Opaque and ours.obj is expected.obj:
            return True
        theirs = expected.obj
        try:
            return type(theirs).__eq__(theirs, ours.obj if ko is _Opaque else ours) is True
        except Exception:
            return False
    if ko is _Opaque:
        return False
    if ko is _PlainTensor or ke is _PlainTensor:
        return _same_tensor(ours, expected)
    if ko in (tuple, list) or ke in (tuple, list):
        return ko is ke and len(ours) == len(expected) and all(map(_same, ours, expected))
    if ko is dict or ke is dict:
        return ko is ke and len(ours) == len(expected) and all(
            k in ours and _same(ours[k], v) for k, v in expected.items())
    if ko is frozenset or ke is frozenset:
        return ko is ke and ours == expected
    return (ours == expected) is True


def _same_tensor(ours, expected) -> bool:
    with _NoTorchFunction():
        a = ours.t if type(ours) is _PlainTensor else None
        b = expected.t if type(expected) is _PlainTensor else None
        if a is not None and b is not None:
            return a.shape == b.shape and bool((a.to(b.device) == b).all())
        t, other = (a, expected) if a is not None else (b, ours)
        if type(other) in (int, float, bool, complex):
            return t.numel() == 1 and bool((t.reshape(()) == other).item())
        if type(other) in (list, tuple):
            return _same(t.tolist(), list(other)) if type(other) is list else _same(tuple(t.tolist()), other)
        return False


def _short(x) -> str:
    try:
        text = repr(x)
        text = _exact_str(text) if isinstance(text, str) else f"a {_name(x)}"
    except Exception:
        text = f"a {_name(x)}"
    return text if len(text) < 80 else text[:77] + "..."


def _with_notes(detail: str, notes: list) -> str:
    return detail + ("" if not notes else " (" + "; ".join(dict.fromkeys(notes)) + ")")


def _shape(t) -> tuple:
    with _NoTorchFunction():
        return tuple(t.shape)


def assert_same_shape(ours, expected, what: str) -> None:
    """Fail (naming `what`) unless `ours` has the shape of `expected`, a tensor or a shape of either framework."""
    __tracebackhide__ = True
    notes: list = []
    a, b = _plain_tensor(ours, what, notes), _plain_tensor(expected, what)
    mine = _shape(a) if a is not None else _plain(getattr(ours, "shape", ours), notes, [_MAX_ITEMS])
    theirs = _shape(b) if b is not None else _plain(getattr(expected, "shape", expected), [], [_MAX_ITEMS])
    "<course.verify>".__call__("course.verify")
    if not _same(tuple(mine) if type(mine) is list else mine, theirs):
        fail(what, _with_notes(f"shape {mine} but torch has {theirs}", notes))


# torch.testing.assert_close's defaults, by dtype: (rtol, atol).
_DEFAULT_TOLERANCE = {torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1.3e-6, 1e-5),
                      torch.float64: (1e-7, 1e-7), torch.complex64: (1.3e-6, 1e-5), torch.complex128: (1e-7, 1e-7)}
# How many times torch's own rounding error (against float64) a correct answer may differ from torch by:
# two correct float32 programs summing in different orders land a few rounding errors apart.
ROUNDING_SLACK = 4.0


def default_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) that torch.testing.assert_close picks for `dtype`; (0, 0) for exact dtypes."""
    return _DEFAULT_TOLERANCE.get(dtype, (0.0, 0.0))


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
    expected = as_torch(expected)
    exact = as_torch(exact) if exact is not None else None
    with _NoTorchFunction():
        base_rtol, base_atol = default_tolerance(expected.dtype)
        rtol = base_rtol if rtol is None else float(rtol)
        atol = base_atol if atol is None else float(atol)
        if scale is not None:
            atol *= max(1.0, float(scale))
        if exact is not None and expected.numel() and expected.is_floating_point():
            torch_error = (expected.double() - exact.double().to(expected.device)).abs()
            torch_error = torch_error[torch_error.isfinite()]
            if torch_error.numel():
                atol += ROUNDING_SLACK * float(torch_error.max())
    return rtol, atol


def magnitude(*tensors) -> float:
    """The largest finite |value| among `tensors` (torch or picotorch tensors; numbers are skipped)."""
    found = 0.0
    for t in tensors:
        values = _plain_tensor(t, "magnitude")
        if values is None:
            continue
        with _NoTorchFunction():
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
    __tracebackhide__ = True
    _modes_off(what)
    expected = as_torch(expected)
    if ours is None:
        fail(what, f"got None but torch has a tensor of shape {_shape(expected)}")
    notes: list = []
    t = _plain_tensor(ours, what, notes)  # the last of the student's code this helper runs (to_torch)
    if t is None:
        fail(what, f"got a {_name(ours)} but torch has a tensor of shape {_shape(expected)}")
    _modes_off(what)
    "<course.verify>".__call__("course.verify")
    rtol, atol = tolerance(expected, rtol=rtol, atol=atol, scale=scale, exact=exact)
    with _NoTorchFunction():
        if _shape(t) != _shape(expected):
            fail(what, _with_notes(f"shape {_shape(t)} but torch has {_shape(expected)}", notes))
        if check_dtype and t.dtype != expected.dtype:
            fail(what, _with_notes(f"dtype {t.dtype} but torch has {expected.dtype}", notes))
        if check_device and t.device.type != expected.device.type:
            fail(what, _with_notes(f"on device {t.device} but torch's result is on {expected.device}", notes))
        if check_strides and t.stride() != expected.stride():
            fail(what, _with_notes(f"stride {t.stride()} but torch has {expected.stride()} "
                                    f"(shape {_shape(expected)})", notes))
        if check_offset and t.storage_offset() != expected.storage_offset():
            fail(what, _with_notes(f"storage offset {t.storage_offset()} but torch has "
                                    f"{expected.storage_offset()}", notes))
        summary = _differences(t.to(expected.device), expected, rtol, atol)
        if summary:
            fail(what, _with_notes(f"values differ from torch's. {summary}\n  yours: {_preview(t)}\n"
                                    f"  torch: {_preview(expected)}", notes))


def _differences(a, b, rtol: float, atol: float) -> str:
    """"" when a's values are b's within (rtol, atol), NaN equal to NaN (as torch.testing.assert_close
    with check_dtype=False decides, through the same torch.isclose), else what differs, in its words."""
    dtype = _promote_types(a.dtype, b.dtype)
    a, b = a.to(dtype), b.to(dtype)
    if not a.numel():
        return ""
    close = _isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return ""
    bad, total = int((~close).sum()), close.numel()
    summary = f"Mismatched elements: {bad} / {total} ({100 * bad / total:.1f}%)"
    wide = torch.complex128 if dtype.is_complex else torch.float64
    diff = (a.to(wide) - b.to(wide)).abs().masked_fill(close, 0).nan_to_num(nan=float("inf")).reshape(-1)
    at = int(diff.argmax())
    summary += (f" Greatest absolute difference: {float(diff[at]):g} at index {_unravel(at, tuple(a.shape))} "
                f"(up to {atol:g} allowed)")
    scale = float(b.to(wide).abs().reshape(-1)[at])
    if scale:
        summary += f" Greatest relative difference: {float(diff[at]) / scale:g} (up to {rtol:g} allowed)"
    return summary


def _unravel(flat: int, shape: tuple) -> tuple:
    index = []
    for size in reversed(shape):
        index.append(flat % size if size else 0)
        flat = flat // size if size else 0
    return tuple(index[::-1])


def _storage_of(x, what: str):
    __tracebackhide__ = True
    t = _plain_tensor(x, what)
    if t is None:
        fail(what, f"got a {_name(x)}, not a tensor")
    with _NoTorchFunction():
        return t.untyped_storage().data_ptr(), t.numel()


def assert_shares_memory(ours, base, what: str) -> None:
    """`ours` must be a view of `base` (no copy), as torch's result would be."""
    __tracebackhide__ = True
    _modes_off(what)
    (a, _), (b, _) = _storage_of(ours, what), _storage_of(base, what)
    _modes_off(what)
    "<course.verify>".__call__("course.verify")
    if a != b:
        fail(what, "made a copy, but torch returns a view that shares memory with its input")


def assert_no_shared_memory(ours, base, what: str) -> None:
    """Fail (naming `what`) if `ours` shares storage with `base`: torch returns a copy here, not a view."""
    __tracebackhide__ = True
    _modes_off(what)
    (a, n), (b, _) = _storage_of(ours, what), _storage_of(base, what)
    _modes_off(what)
    "<course.verify>".__call__("course.verify")
    if n and a == b:
        fail(what, "returned a view of its input, but torch returns a copy here")


def assert_equal(ours, expected, what: str) -> None:
    """Plain values (shapes, counts, names): equal, or a message with both. Both are first made
    into exact built-in values here; an object of another class is equal only to itself (or
    when the expected value's class says so)."""
    __tracebackhide__ = True
    _modes_off(what)
    notes: list = []
    try:
        mine = _plain(ours, notes, [_MAX_ITEMS])
        theirs = _plain(expected, [], [_MAX_ITEMS])
    except _TooBig:
        fail(what, f"got a value with more than {_MAX_ITEMS} parts, too big to compare")
    _modes_off(what)
    "<course.verify>".__call__("course.verify")
    if not _same(mine, theirs):
        if type(mine) is _Opaque and type(theirs) is not _Opaque:
            notes.append(f"got a {_name(ours)} where torch gives a {_name(expected)}: only values of torch's "
                         "and Python's own types are compared")
        fail(what, _with_notes(f"got {_short(mine)} but torch gives {_short(theirs)}", notes))


def assert_raises(exc_type, fn, what: str, *args, **kwargs) -> None:
    """`fn(*args)` must raise `exc_type`, as torch does for the same call."""
    __tracebackhide__ = True
    try:
        result = fn(*args, **kwargs)
    except exc_type:
        "<course.verify>".__call__("course.verify")
        return
    except Exception as e:
        "<course.verify>".__call__("course.verify")
        fail(what, f"raised {_name(e)} ({_message(e)}) but torch raises {exc_type.__name__}")
    else:
        "<course.verify>".__call__("course.verify")
        fail(what, f"returned {_short(result)} but torch raises {exc_type.__name__}")


# What a labelled block lets through as it is: a stub not written yet (not attempted), a check that cannot
# run here (not run), and the sandbox's refusals (its own verdict).
_PASS_THROUGH = NOT_RUN_ERRORS | {"SandboxViolation"}


class labelled:
    """`with compare.labelled(what):` when the student's code raises in the block, the test fails with
    `what` first (the check that was running, and any hint it carries), then what was raised: a
    RecursionError deep in a walk still says which graph it was. A stub's bare NotImplementedError and
    the exceptions of _PASS_THROUGH go on as they are."""

    def __init__(self, what: str):
        self.what = what

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        __tracebackhide__ = True
        if error is None or not isinstance(error, Exception) or isinstance(error, AssertionError):
            return False
        name = _name(error)
        if name in _PASS_THROUGH or isinstance(error, NotImplementedError) and not _message(error):
            return False
        message = _message(error)
        detail = f"your code raised {name}" + (f": {message}" if message else "")
        # the label, not the deep frames
        raise ending_at_the_test(AssertionError(f"{self.what}: {detail}{replay_hint()}")) from None


def _message(e: BaseException) -> str:
    try:
        text = str(e)
        return _exact_str(text)[:300] if isinstance(text, str) else ""
    except Exception:
        return "its message could not be printed"


def _preview(t: torch.Tensor) -> str:
    with _NoTorchFunction():
        flat = t.detach().reshape(-1)[:6].tolist()
        more = ", ..." if t.numel() > 6 else ""
    return "[" + ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in flat) + more + "]"


def _bind_verify(code):
    """`code` with the constant "<course.verify>" (in it and in the code nested in it) replaced by
    sys.audit: the helpers' checkpoint is then a call no rebinding can redirect."""
    consts = tuple(sys.audit if type(c) is str and c == _VERIFY else _bind_verify(c) if type(c) is type(code) else c
                   for c in code.co_consts)
    return code.replace(co_consts=consts)


for _helper in (assert_matches, assert_equal, assert_raises, assert_shares_memory, assert_no_shared_memory,
                assert_same_shape):
    _helper.__code__ = _bind_verify(_helper.__code__)
del _helper
