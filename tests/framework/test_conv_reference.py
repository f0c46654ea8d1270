"""Chapter 07's reference convolution against torch at the sizes the course trains on (the notebook's tests use
small random shapes): conv2d forward and backward on a batch of 16→32 channels, 3×3, 28×28, a strided and a
dilated case, the operators the dispatcher sees, and a max-pool + conv network's gradients. Cheap: a second."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course import compare


@pytest.fixture(scope="module")
def pt(reference_picotorch):
    return reference_picotorch


def _leaf(pt, t):
    return pt.from_torch(t.detach().clone()).requires_grad_()


@pytest.mark.parametrize("kwargs", [{}, {"padding": 1}, {"stride": 2, "padding": 1}, {"dilation": 2, "padding": "same"},
                                    {"groups": 4}], ids=str)
def test_conv2d_forward_and_backward_at_training_size(pt, kwargs):
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 16, 28, 28), torch.randn(32, 16 // kwargs.get("groups", 1), 3, 3), torch.randn(32)
    xt, wt, bt = (t.clone().requires_grad_() for t in (x, w, b))
    out_t = F.conv2d(xt, wt, bt, **kwargs)
    xs, ws, bs = (_leaf(pt, t) for t in (x, w, b))
    out = pt.conv2d(xs, ws, bs, **kwargs)
    compare.assert_matches(out, out_t.detach(), f"conv2d(x, w, b, {kwargs})", scale=compare.magnitude(out_t))
    g = torch.randn(out_t.shape)
    out_t.backward(g)
    out.backward(pt.from_torch(g))
    for name, mine, theirs in [("x", xs, xt), ("w", ws, wt), ("b", bs, bt)]:
        compare.assert_matches(mine.grad, theirs.grad, f"the gradient of {name} of conv2d(..., {kwargs})",
                               scale=compare.magnitude(theirs.grad))


def test_the_dispatcher_sees_the_convolution_operators(pt):
    x = _leaf(pt, torch.randn(2, 3, 9, 9))
    w = _leaf(pt, torch.randn(4, 3, 3, 3))
    with pt.LoggingMode() as log:
        y = pt.max_pool2d(pt.conv2d(x, w, padding=1), 2)
        y.sum().backward()
    for op in ("convolution", "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "convolution_backward"):
        assert op in log, f"{op} is not among the operators the LoggingMode saw: {log}"
