"""Chapter 07's reference convolution against torch at the sizes the course trains on (the notebook's tests use
small random shapes): conv2d forward and backward on a batch of 16→32 channels, 3×3, 28×28, a strided and a
dilated case, the operators the dispatcher sees, and a max-pool + conv network's gradients; and channels_last
(its strides, contiguity and a convolution's result format) on every small shape hypothesis draws. A few seconds."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course import compare
from course.cuda.status import emulator_available


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


_SIZES = st.lists(st.integers(0, 3), min_size=4, max_size=4).map(tuple)


def _strides(data, shape):
    """Strides for shape: channels_last's, row-major's, or either with some dims' strides redrawn (size-1 dims'
    strides, gaps, zeros: the cases torch's rules tell apart)."""
    start = data.draw(st.sampled_from([torch.empty(shape, memory_format=torch.channels_last).stride(),
                                       torch.empty(shape).stride()]))
    return tuple(data.draw(st.integers(0, 40)) if data.draw(st.booleans()) else s for s in start)


def _strided(shape, stride):
    """Random values viewed with these sizes and strides (over a storage just large enough)."""
    return torch.randn(max(sum((n - 1) * s for n, s in zip(shape, stride)) + 1, 1)).as_strided(shape, stride)


@settings(max_examples=300, deadline=None)
@given(shape=_SIZES, data=st.data())
def test_channels_last_strides_and_contiguity_match_torch(pt, shape, data):
    stride = _strides(data, shape)
    ours, theirs = tuple(pt.channels_last_strides(shape)), torch.empty(shape, memory_format=torch.channels_last).stride()
    assert ours == theirs, f"channels_last_strides({shape}) is {ours}, torch's fresh channels_last tensor has {theirs}"
    t = _strided(shape, stride)
    mine = pt.from_torch(t)
    for fmt in (torch.channels_last, torch.contiguous_format):
        ours, theirs = mine.is_contiguous(memory_format=fmt), t.is_contiguous(memory_format=fmt)
        assert ours == theirs, f"is_contiguous(memory_format={fmt}) for {shape} stride {stride}: {ours}, torch {theirs}"
    got, want = mine.contiguous(memory_format=torch.channels_last), t.contiguous(memory_format=torch.channels_last)
    ours, theirs = (tuple(got.shape), got.stride(), got is mine), (tuple(want.shape), want.stride(), want is t)
    assert ours == theirs, (f"contiguous(memory_format=torch.channels_last) for {shape} stride {stride}: (shape, "
                            f"strides, itself) {ours}, torch {theirs}")
    compare.assert_matches(got, want, f"x.contiguous(memory_format=torch.channels_last) for {shape} stride {stride}")


@settings(max_examples=150, deadline=None)
@given(shape=st.lists(st.integers(1, 3), min_size=4, max_size=4).map(tuple), data=st.data())
def test_a_convolution_gives_its_result_torchs_memory_format(pt, shape, data):
    """conv2d by a row-major 1x1 weight: channels last exactly when the input's strides suggest it (torch's
    is_channels_last_strides_2d, size-1 and ambiguous cases included), with torch's strides and values."""
    stride = _strides(data, shape)
    x = _strided(shape, stride)
    w = torch.randn(2, shape[1], 1, 1)
    got, want = pt.conv2d(pt.from_torch(x), pt.from_torch(w)), F.conv2d(x, w)
    assert got.stride() == want.stride(), (f"conv2d(x, w) for x of shape {shape} stride {stride}: strides "
                                           f"{got.stride()}, torch's {want.stride()}")
    compare.assert_matches(got, want, f"conv2d(x, w) for x of shape {shape} stride {stride}")


def _padded(pt, x: torch.Tensor, pads: tuple, device: str | None):
    ours = pt.from_torch(x.clone())
    ours = ours if device is None else ours.to(device)
    return pt.ch07_conv.pad(ours, pads, 7.0).to_torch().cpu()


def _same_pad(pt, x: torch.Tensor, pads: tuple, device: str | None = None) -> None:
    """pad (constant_pad_nd) against F.pad: the values, or torch's error type (a crop larger than the input)."""
    try:
        want = F.pad(x, pads, value=7.0)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            _padded(pt, x, pads, device)
        return
    torch.testing.assert_close(_padded(pt, x, pads, device), want, rtol=0, atol=0, msg=f"pad {pads} of {x.shape}")


def test_pad_crops_and_pads_every_way_as_torch(pt):
    """Every pair of pads from -5 to 3 on every length from 0 to 4, and 4-D pads: constant_pad_cpu's slices."""
    for size in range(5):
        for before in range(-5, 4):
            for after in range(-5, 4):
                _same_pad(pt, torch.arange(float(size)).reshape(1, size), (before, after))
    x = torch.randn(2, 3, 4, 5)
    for pads in [(1, 2, 0, 3), (-1, 1, 2, -2), (1, 1, 1, 1, 1, 1), (0, 0, -4, 1), (2, -3, -1, -1)]:
        _same_pad(pt, x, pads)


@pytest.mark.skipif(not emulator_available(),
                    reason="no g++ here: the CUDA emulator cannot run (not counted as passed)")
def test_pad_on_the_device_as_torch(pt):
    """The CUDA kernel of constant_pad_nd (a fill, then the kept part copied in) shares the CPU's slices."""
    x = torch.randn(2, 3, 4, 5)
    for pads in [(1, 2, 0, 3), (-1, 1, 2, -2), (0, 0, -4, 1), (2, -3), (-6, 0)]:
        _same_pad(pt, x, pads, "emu")
