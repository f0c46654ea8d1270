"""How far a correct float32 answer may land from torch's, measured at the inputs of the test.

Two correct float32 programs that add the same terms in different orders (gradients accumulated in
another topological order, a sum taken one dim at a time) land a few rounding errors apart, and how
large a rounding error is depends on the computation: a deep chain of powers with paths that cancel
rounds by many ulps where a single add rounds by half of one. A fixed rtol is either too tight for the
first or too loose for the second.

So the tolerance is measured: torch's float32 result against the same computation in float64, at the
test's inputs and at a few neighbours of them (each element moved by an ulp or two). One such distance
can be lucky (torch's sum happened to land on the exact value); the largest of several is what a
correct program's rounding is like here. Each neighbour is compared with float64 *at the same
neighbour*, never with the original inputs, so a kink (relu at 0, a tie of maximum) never widens a
tolerance: only rounding does.
"""
from __future__ import annotations

import torch

from course.compare import ROUNDING_SLACK, default_tolerance

__all__ = ["float32_tolerances", "ROUNDING_SLACK", "tame"]

_BASE_RTOL, _BASE_ATOL = default_tolerance(torch.float32)
_NEIGHBOURS = 6
_MAX_ULPS = 2


def _leaves(args, requires_grad, dtype):
    return [a.detach().to(dtype).requires_grad_(r) if isinstance(a, torch.Tensor) and a.is_floating_point()
            else a for a, r in zip(args, requires_grad)]


def _results(f, args, requires_grad, gradient, dtype):
    """[f(*args), then each argument's .grad after backward(gradient)] with floating tensors in `dtype`;
    None where torch cannot compute it."""
    leaves = _leaves(args, requires_grad, dtype)
    try:
        out = f(*leaves)
        if gradient is not None and getattr(out, "requires_grad", False):
            out.backward(gradient.to(dtype))
    except Exception:
        return None
    grads = [a.grad if isinstance(a, torch.Tensor) else None for a in leaves]
    return [out.detach() if isinstance(out, torch.Tensor) else None] + grads


def _neighbour(a, generator: torch.Generator):
    """a float32 tensor with each element moved by 0 to _MAX_ULPS ulps up or down (a number: itself)."""
    if not (isinstance(a, torch.Tensor) and a.dtype == torch.float32 and a.numel()):
        return a
    a = a.detach()
    steps = torch.randint(-_MAX_ULPS, _MAX_ULPS + 1, a.shape, generator=generator)
    bits = a.view(torch.int32)
    if bool(((bits & 0x7FFFFFFF) <= _MAX_ULPS).any()) or not bool(a.isfinite().all()):
        return _neighbour_ulp_by_ulp(a, steps)  # a step may cross zero or leave the finite floats
    # A finite float32's bits, read as an int32, count ulps away from zero on either side of it: a step up
    # is +1 for a positive number, -1 for a negative one. One integer add instead of 2 * _MAX_ULPS nextafters.
    moved = torch.empty(a.shape, dtype=a.dtype)  # contiguous, as the nextafter steps leave it
    moved.view(torch.int32).copy_(bits + torch.where(a < 0, -steps, steps))
    return moved


def _neighbour_ulp_by_ulp(a, steps):
    moved = a.clone()
    for _ in range(_MAX_ULPS):
        up, down = steps > 0, steps < 0
        moved = torch.where(up, torch.nextafter(moved, torch.full_like(moved, float("inf"))), moved)
        moved = torch.where(down, torch.nextafter(moved, torch.full_like(moved, -float("inf"))), moved)
        steps = steps - up.long() + down.long()
    return moved


def _distance(low, high) -> float:
    if low is None or high is None or not low.is_floating_point() or not low.numel():
        return 0.0
    # the largest finite distance: an inf or nan one counts as 0 (distances are never negative)
    return float((low.double() - high.double()).abs().nan_to_num(0.0, 0.0, 0.0).max())


def float32_tolerances(f, args, requires_grad=None, gradient=None) -> list[dict]:
    """[tolerance for f(*args), then one for each argument's .grad], each {"rtol", "atol"} for
    course.compare.assert_matches: float32's defaults, with atol widened by ROUNDING_SLACK times the
    largest distance between torch's float32 and float64 results at args and at a few neighbours of
    args. {} (the dtype's defaults) everywhere when no argument is float32. Deterministic: the
    neighbours come from a generator of their own, not from the test's random stream."""
    n = 1 + len(args)
    if not any(isinstance(a, torch.Tensor) and a.dtype == torch.float32 for a in args):
        return [{} for _ in range(n)]
    requires_grad = requires_grad or [False] * len(args)
    generator = torch.Generator().manual_seed(0)
    worst = [0.0] * n
    points = [list(args)] + [[_neighbour(a, generator) for a in args] for _ in range(_NEIGHBOURS)]
    for point in points:
        low = _results(f, point, requires_grad, gradient, torch.float32)
        high = _results(f, point, requires_grad, gradient, torch.float64)
        if low is None or high is None:
            continue
        worst = [max(w, _distance(lo, hi)) for w, lo, hi in zip(worst, low, high)]
    return [{"rtol": _BASE_RTOL, "atol": _BASE_ATOL + ROUNDING_SLACK * w} for w in worst]


def tame(f, args, limit=1e4) -> bool:
    """Are f's values and gradients at args (in torch, float64) finite and below `limit`? Random graphs that
    overflow or round badly test nothing but rounding; a test draws another instead (chapter 02's random
    graphs)."""
    leaves = [a.detach().double().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
              for a in args]
    try:
        out = f(*leaves)
        out.backward(torch.ones_like(out))
    except Exception:
        return True  # an error: let the test compare it
    values = [out.detach()] + [a.grad for a in leaves if isinstance(a, torch.Tensor) and a.grad is not None]
    return all(bool(torch.isfinite(v).all()) and (v.numel() == 0 or v.abs().max() < limit) for v in values)
