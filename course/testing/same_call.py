"""Run your framework and torch on the same inputs and compare everything torch decides, so that most
tests are a line (tinygrad's `helper_test_op`):

    same_call(lambda a, b: a @ b, [x, y], "a @ b", ours=from_torch)                 # values, dtype, shape
    same_call(lambda t: t.transpose(0, 1), [x], "x.T", ours=from_torch, layout=True, aliasing=True)
    same_call(lambda a, b: (a * b).sum(), [x, y], "(a * b).sum()", ours=leaf, grad=True)   # and the .grads

`same_outcome(ours_call, torch_call, what)` is the step under it, for calls that are not one function of
converted arguments (a chain of views, a module's method): where torch raises, yours must raise the same
type of exception; where torch returns, the results are compared. A stub's NotImplementedError goes on as
it is (the exercise is not attempted yet). Messages name the call and both outcomes in the chapter's terms.
"""
from __future__ import annotations

import torch

from course import compare, inputs
from course.compare import fail
from course.testing.describe import describe, layout as layout_text, short
from course.testing.layouts import leaf_copy
from course.testing.views import chain_text, random_op

__all__ = ["same_outcome", "same_error", "same_call", "same_chain", "same_random_chain", "call_yours", "fail"]


def call_yours(what: str, fn, *args, **kwargs):
    """fn(*args, **kwargs), the student's code: an exception it raises becomes a failure that names the
    call (a stub's NotImplementedError goes on as it is)."""
    __tracebackhide__ = True
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise
    except Exception as e:
        fail(what, f"raised {type(e).__name__} ({e})")


def _what_torch_gives(theirs) -> str:
    return f"a tensor of {layout_text(theirs)}" if isinstance(theirs, torch.Tensor) else repr(theirs)


def _shares(a, b, what: str) -> bool:
    """Whether two tensors (torch's or a framework's with to_torch()) start in the same storage."""
    def pointer(x):
        t = compare.as_torch(x)
        return t.untyped_storage().data_ptr(), t.numel()
    (p, n), (q, _) = pointer(a), pointer(b)
    return bool(n) and p == q


def _compare_tensor(ours, theirs: torch.Tensor, what: str, layout: bool, allow_torch: bool, tolerance: dict) -> None:
    __tracebackhide__ = True
    if isinstance(ours, torch.Tensor) and not allow_torch:
        fail(what, f"returned a torch.Tensor, but it must be a tensor of yours (like torch's: {layout_text(theirs)})")
    if not hasattr(ours, "to_torch") and not isinstance(ours, torch.Tensor):
        fail(what, f"returned a {type(ours).__name__}, but torch returns {_what_torch_gives(theirs)}")
    if layout:
        compare.assert_equal(tuple(ours.shape), tuple(theirs.shape), f"{what}: shape")
        compare.assert_equal(tuple(ours.stride()), tuple(theirs.stride()),
                             f"{what} (shape {tuple(theirs.shape)}): stride()")
        compare.assert_equal(ours.storage_offset(), theirs.storage_offset(), f"{what}: storage_offset()")
        compare.assert_matches(ours, theirs.detach(), what, check_strides=True, check_offset=True, **tolerance)
    else:
        compare.assert_matches(ours, theirs.detach(), what, **tolerance)


def _compare(ours, theirs, what: str, layout: bool, allow_torch: bool, tolerance: dict) -> None:
    __tracebackhide__ = True
    if isinstance(theirs, torch.Tensor):
        _compare_tensor(ours, theirs, what, layout, allow_torch, tolerance)
    elif isinstance(theirs, (tuple, list)) and any(isinstance(t, torch.Tensor) for t in theirs):
        if not isinstance(ours, (tuple, list)) or len(ours) != len(theirs):
            fail(what, f"returned {short(ours)}, but torch returns {type(theirs).__name__} of {len(theirs)}")
        for i, (o, t) in enumerate(zip(ours, theirs)):
            _compare(o, t, f"{what}[{i}]", layout, allow_torch, tolerance)
    else:
        compare.assert_equal(ours, theirs, what)


def _both(ours_call, torch_call, what: str, error=None):
    """(raised, yours, torch's): torch_call() and ours_call(), where torch raises, yours must raise the same
    type of exception (or `error`) and raised is True; otherwise yours must not raise."""
    __tracebackhide__ = True
    try:
        theirs = torch_call()
    except Exception as e:
        expected = error or type(e)
        names = expected.__name__ if isinstance(expected, type) else " or ".join(t.__name__ for t in expected)
        try:
            got = ours_call()
        except NotImplementedError:
            raise
        except expected:
            return True, None, None
        except Exception as e2:
            fail(what, f"raised {type(e2).__name__} ({e2}) but torch raises {names} ({e})")
        fail(what, f"returned {short(got)} but torch raises {names} ({e})")
    try:
        ours = ours_call()
    except NotImplementedError:
        raise
    except Exception as e:
        fail(what, f"raised {type(e).__name__} ({e}) but torch returns {_what_torch_gives(theirs)}")
    return False, ours, theirs


def same_error(ours_call, torch_call, what: str, *, error=None) -> bool:
    """Call torch_call() and ours_call(): where torch raises, yours must raise the same type of exception
    (or `error`); where it does not, neither may yours. Returns whether torch raised. For calls whose
    results a test compares its own way (a module, an optimizer's state)."""
    __tracebackhide__ = True
    return _both(ours_call, torch_call, what, error)[0]


def same_outcome(ours_call, torch_call, what: str, *, layout: bool = False, base=None, error=None,
                 allow_torch: bool = False, **tolerance):
    """Call torch_call() and ours_call() and compare. Where torch raises, yours must raise the same type of
    exception (or `error`, a type or tuple of types, where the chapter asks no more). Otherwise the results
    must match (values, dtype, shape; tuples and lists element by element); with layout=True also strides
    and storage offset; with `base` (a tensor both sides' inputs share memory with: chapter 01's tensors
    over torch's memory), the result shares base's memory exactly when torch's does (a view, not a copy).
    `tolerance`: rtol/atol/scale/exact for compare.assert_matches. A tensor of yours must be your framework's
    (with to_torch()), not torch's, unless allow_torch (the kit's own tests). Returns (yours, torch's), or None when
    torch raised and so did yours."""
    __tracebackhide__ = True
    raised, ours, theirs = _both(ours_call, torch_call, what, error)
    if raised:
        return None
    _compare(ours, theirs, what, layout, allow_torch, tolerance)
    if base is not None and isinstance(theirs, torch.Tensor) and theirs.numel() > 0:
        if _shares(theirs, base, what):
            compare.assert_shares_memory(ours, base, what)
        else:
            compare.assert_no_shared_memory(ours, base, what)
    return ours, theirs


def same_call(fn, args, what: str, *, ours, kwargs=None, layout: bool = False, aliasing: bool = False,
              grad: bool = False, gradient=None, draw=None, error=None, allow_torch: bool = False, **tolerance):
    """fn(*args, **kwargs) on torch's tensors and on yours, compared by same_outcome; `ours(t)` is the
    chapter's conversion of a torch tensor to yours (same values and layout); numbers and other arguments
    go to both sides as they are. The message names each tensor argument (a: float32 (2, 3) ...).

    aliasing=True: the result shares memory with an argument exactly when torch's does with the same one.
    grad=True: every floating-point tensor argument is a leaf that requires grad (torch's a `leaf_copy`,
    yours `ours(t).requires_grad_()`), and after `backward(gradient)` on both results (a random gradient,
    non-contiguous now and then, from `draw` or the course's stream, when None), every leaf's .grad must
    be torch's. Returns (yours, torch's), or None when both raised."""
    __tracebackhide__ = True
    kwargs = kwargs or {}
    tensors = [isinstance(a, torch.Tensor) for a in args]
    needs_grad = [t and grad and a.is_floating_point() for a, t in zip(args, tensors)]
    theirs_args = [leaf_copy(a) if g else a for a, g in zip(args, needs_grad)]
    ours_args = [(ours(a.detach()).requires_grad_() if g else ours(a)) if t else a
                 for a, t, g in zip(args, tensors, needs_grad)]
    named = [f"{chr(97 + i)}: {describe(a)}" for i, a in enumerate(args) if tensors[i]]
    if named:
        what = f"{what} where {', '.join(named)}"
    result = same_outcome(lambda: fn(*ours_args, **kwargs), lambda: fn(*theirs_args, **kwargs), what,
                          layout=layout, error=error, allow_torch=allow_torch, **tolerance)
    if result is None:
        return None
    mine, theirs = result
    if aliasing and isinstance(theirs, torch.Tensor) and theirs.numel() > 0:
        for i in range(len(args)):
            if tensors[i] and _shares(theirs, theirs_args[i], what):
                compare.assert_shares_memory(mine, ours_args[i], f"{what} (sharing {chr(97 + i)}'s memory)")
            elif tensors[i]:
                compare.assert_no_shared_memory(mine, ours_args[i], f"{what} (sharing {chr(97 + i)}'s memory)")
    if grad and isinstance(theirs, torch.Tensor) and theirs.requires_grad:
        _same_gradients(mine, theirs, ours, theirs_args, ours_args, needs_grad, gradient, draw, what, tolerance)
    elif grad and getattr(mine, "requires_grad", False):
        fail(what, "the result requires grad, but torch's does not")
    return mine, theirs


def _same_gradients(mine, theirs, ours, theirs_args, ours_args, needs_grad, gradient, draw, what, tolerance):
    __tracebackhide__ = True
    if not getattr(mine, "requires_grad", False):
        fail(what, "the result does not require grad, but torch's does")
    if gradient is None:
        source = draw if draw is not None else inputs
        gradient = source.noncontiguous(source.randn(tuple(theirs.shape), dtype=theirs.dtype))
    with compare.labelled(f"{what}: backward(g) for g: {describe(gradient)}"):
        mine.backward(ours(gradient))
    theirs.backward(gradient)
    for i, g in enumerate(needs_grad):
        if not g:
            continue
        grad_what = f"the gradient of {chr(97 + i)} (its .grad) after backward(g) of {what}"
        if theirs_args[i].grad is None:
            if ours_args[i].grad is not None:
                fail(grad_what, "torch gives none, but yours has one")
        else:
            compare.assert_matches(ours_args[i].grad, theirs_args[i].grad, grad_what, **tolerance)


def same_chain(base: torch.Tensor, ops, *, ours, name: str = "x") -> None:
    """Apply ops (course.testing.Op) step by step to base and to ours(base), a tensor of yours over base's
    memory; after every step the same outcome, layout and sharing of base's memory as torch's."""
    __tracebackhide__ = True
    theirs, mine = base, ours(base)
    for i in range(len(ops)):
        what = f"{chain_text(ops[:i + 1], name)} where {name} has {layout_text(base)}"
        result = same_outcome(lambda: ops[i](mine), lambda: ops[i](theirs), what, layout=True, base=base)
        if result is None:
            return
        mine, theirs = result


def same_random_chain(draw, base: torch.Tensor, names, length: int, *, ours) -> None:
    """A random chain of `length` ops among `names`, each fitting the result of the one before (now and then
    one torch rejects: the chain ends there), checked by same_chain."""
    __tracebackhide__ = True
    ops, t = [], base
    for _ in range(length):
        op = random_op(draw, t, names)
        ops.append(op)
        try:
            t = op(t)
        except Exception:
            break
    same_chain(base, ops, ours=ours)
