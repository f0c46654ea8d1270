# ---
# jupyter:
#   course:
#     chapter: 07_conv
#     title: Convolution
#     files:
#     - figures/windows.svg
#     - figures/im2col.svg
#     - figures/col2im.svg
#     - figures/batch_norm.svg
# ---

# %% [markdown]
# # Chapter 07 — Convolution: sliding windows as views
#
# A convolution slides a small kernel over an image and takes, at every
# position, the dot product of the kernel with the window under it. Written
# as loops, that is six nested `for`s and thousands of times slower than
# torch. Written the way torch's own CPU code writes it, it is two steps you
# already have:
#
# 1. **im2col**: the windows, all of them, as **one view** of the input — no
#    copy: a window is a rectangle of the storage, and stepping from one
#    window to the next is one more stride (chapter 01's `as_strided`);
# 2. **a matrix product** of that view with the weights (one GEMM).
#
# Its backward is two more products, and **col2im**: each window's gradient
# added back onto the pixels it came from, overlapping windows summing.
#
# | piece | in torch | exercise |
# |---|---|---|
# | the windows as one view, `F.unfold` | `unfold` in [`TensorShape.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/TensorShape.cpp), [`Im2Col.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/Im2Col.cpp) and [`im2col.h`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/im2col.h) | 1 |
# | memory formats: `channels_last` as a permutation of strides, `contiguous(memory_format=...)` | `get_channels_last_strides_2d` in [`MemoryFormat.h`](https://github.com/pytorch/pytorch/blob/main/c10/core/MemoryFormat.h), [`Contiguity.h`](https://github.com/pytorch/pytorch/blob/main/c10/core/Contiguity.h) | 2 |
# | `conv2d`: stride, padding (`"same"`, `"valid"`), dilation, groups; the `convolution` operator; its result's memory format | `_convolution` in [`Convolution.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/Convolution.cpp), [`ConvolutionMM2d.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/ConvolutionMM2d.cpp) | 3 |
# | the backward: `convolution_backward`, `F.fold` (col2im) | [`Col2Im.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/Col2Im.cpp), `convolution_backward` in [`derivatives.yaml`](https://github.com/pytorch/pytorch/blob/main/tools/autograd/derivatives.yaml) | 4 |
# | `max_pool2d` (indices, ties), `avg_pool2d`, `ceil_mode` | [`DilatedMaxPool2d.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/DilatedMaxPool2d.cpp), [`AveragePool2d.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/AveragePool2d.cpp) | 5 |
# | `adaptive_avg_pool2d`, `AdaptiveAvgPool2d` | [`AdaptiveAveragePooling.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/AdaptiveAveragePooling.cpp) | 6 |
# | `Conv2d`, `MaxPool2d`, `AvgPool2d`; a LeNet on the digits | [`torch/nn/modules/conv.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/conv.py) | 7 |
# | `batch_norm` as one operator: its forward and backward kernels | `batch_norm_cpu` in [`Normalization.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/Normalization.cpp), `native_batch_norm` in [`derivatives.yaml`](https://github.com/pytorch/pytorch/blob/main/tools/autograd/derivatives.yaml) | 8 |
# | `BatchNorm2d`; a CNN trained with chapter 04's `fit` | [`torch/nn/modules/batchnorm.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/batchnorm.py) | 9 |
# | on the device: an im2col and a col2im kernel in CUDA C; `conv2d` and its backward on the CUDA key | [`cuda/im2col.cuh`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cuda/im2col.cuh), [`ConvolutionMM2d.cu`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cuda/ConvolutionMM2d.cu) | 10, 11 |
#
# `Convolution.cpp`'s `_convolution` chooses an algorithm for each call: on a
# GPU, cuDNN (which has its own im2col-free and Winograd/FFT kernels); on the
# CPU, oneDNN (mkldnn) when it is built in, and otherwise `ConvolutionMM2d.cpp`,
# the "slow" path — im2col and one GEMM per image, exactly what you build here.
#
# **Time:** about 8 hours — ten exercises.
#
# **How this notebook works.** Cells with *YOUR CODE HERE* are yours, each
# followed by its tests. The visible tests name each rule the prose states;
# at grading, hidden tests try the same rules on random shapes, strides,
# paddings, groups and non-contiguous layouts. `check()` (last cell) checks
# the saved notebook as the grader will.
#
# **Your chapters 01–06.** `picotorch` in this folder is the course's reference
# solution of chapters 01 to 06 (`course use-mine 07_conv` runs this chapter
# on yours).

# %%
import os

# One thread each for NumPy's BLAS and torch: the products here are small, and a pool of threads waiting for a
# busy core makes every one of them slow (the grader asks for one too).
for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

import numpy as np
import torch

from course import Checker, compare, inputs
from course.testing import call_yours, describe, for_random_inputs, same_call, same_layout_copy, same_outcome

check = Checker("07_conv")

# %% [markdown]
# ## 1. What we start from
#
# The next cell imports what chapters 01–06 built, and gives two small
# things this chapter needs:
#
# - `pair(value, name)`: torch takes `stride=2` or `stride=(2, 1)`; this
#   turns either into a pair, and refuses anything else as torch does;
# - `conv_output_size`, how many windows fit along a dim.

# %% reference=true
import math

import numpy as np
import torch

from picotorch import (DispatchKey, Function, Tensor, dispatch, from_numpy, from_torch, redispatch, register,
                       register_kernel)


def pair(value, name: str) -> tuple:
    """(a, b) from an int or a sequence of two ints: how torch reads conv2d's stride, padding, dilation, kernel."""
    if isinstance(value, int):
        return (value, value)
    value = tuple(value)
    if len(value) == 1:
        return (value[0], value[0])
    if len(value) != 2:
        raise RuntimeError(f"expected {name} to be a single integer value or a list of 2 values to match the "
                           f"convolution dimensions, but got {name}={list(value)}")
    return value


def conv_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """How many window positions fit along one dim: the output's size there (torch's conv_output_size)."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


# %% [markdown]
# And the operator `"constant_pad_nd"` (torch's `aten::constant_pad_nd`, what
# `F.pad` calls): `pad(x, (left, right, top, bottom))` is a **new** tensor,
# zeros around a copy of `x`, with its autograd kernel (its backward crops the
# gradient: a pad by a negative amount).

# %% reference=true
def pad_regions(shape: tuple, pads: tuple) -> tuple:
    """(the padded shape, where x's kept part lands in it, which part of x is kept) for F.pad's `pads`: pads[0]
    before and pads[1] after the last dim, pads[2], pads[3] around the one before...; a negative pad crops.
    Torch's errors for a pad that leaves nothing."""
    out, target, source = list(shape), [slice(None)] * len(shape), [slice(None)] * len(shape)
    for i in range(len(pads) // 2):
        before, after = pads[2 * i], pads[2 * i + 1]
        d = len(shape) - 1 - i
        size = shape[d]
        out[d] = size + before + after
        if out[d] < 0:
            raise RuntimeError(f"The input size {size}, plus negative padding {before} and {after} resulted in a "
                               f"negative output size, which is invalid. Check dimension {d} of your input.")
        # the part of x that is kept (torch crops x first: negative pads that remove more than x holds are refused)
        start, end = max(-before, 0), size - max(-after, 0)
        if end < start:
            raise RuntimeError("narrow(): length must be non-negative.")
        source[d] = slice(start, end)
        target[d] = slice(max(before, 0), max(before, 0) + end - start)
    return tuple(out), tuple(target), tuple(source)


@register_kernel("constant_pad_nd", DispatchKey.CPU)
def constant_pad_cpu(x: Tensor, pads: tuple, value: float = 0.0) -> Tensor:
    """A new tensor: x padded (or cropped) by `pads` as F.pad's constant mode, the padding `value`."""
    shape, target, source = pad_regions(tuple(x.shape), pads)
    # (one fill and one copy: np.pad, in Python, cost ten times as much on the CNN's small images)
    out = np.full(shape, value, dtype=x.dtype.numpy)
    out[target] = x.numpy()[source]
    return from_numpy(out)


@register("constant_pad_nd")
class ConstantPadNd(Function):
    @staticmethod
    def forward(ctx, x: Tensor, pads: tuple, value: float = 0.0) -> Tensor:
        ctx.pads = tuple(pads)
        return redispatch("constant_pad_nd", DispatchKey.Autograd, x, ctx.pads, value)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return dispatch("constant_pad_nd", grad, tuple(-p for p in ctx.pads), 0.0), None, None


def pad(x: Tensor, pads, value: float = 0.0) -> Tensor:
    """F.pad(x, pads, value=value) for the constant mode: one operator call, one copy."""
    return dispatch("constant_pad_nd", x, tuple(pads), value)


# %% [markdown]
# The tests use two helpers of their own: `ours(t)` makes your tensor from a
# torch tensor (a copy with the same values *and* the same layout — strides,
# offset), and `F` is `torch.nn.functional`, the oracle.

# %%
import warnings

F = torch.nn.functional
# torch warns that an even kernel with padding="same" pads a copy of the input: so does yours; the tests say nothing
warnings.filterwarnings("ignore", message="Using padding='same'")


def ours(t: torch.Tensor, requires_grad: bool = False) -> Tensor:
    """Your leaf tensor holding a copy of torch's t, with its exact shape, strides and offset."""
    return from_torch(same_layout_copy(t)).requires_grad_(requires_grad)


# %% [markdown]
# ## 2. The windows are a view
#
# Take an input `x` of shape `(N, C, H, W)` and a `kH × kW` kernel sliding
# with stride `(sH, sW)`. The window at output position `(i, j)` starts at
# row `i·sH`, column `j·sW`. Element `[n, c, i, j, p, q]` of "all the
# windows" is the pixel `x[n, c, i·sH + p, j·sW + q]`, which lives at
#
# $$\text{offset} + n\,s_N + c\,s_C + (i\,s_H' + p)\,s_H + (j\,s_W' + q)\,s_W$$
#
# in the storage, writing $s_N, s_C, s_H, s_W$ for `x.stride()` and $s_H', s_W'$
# for the convolution's stride. That is linear in each of the six indices: the
# windows are **one strided view** of `x`'s storage, of shape
# `(N, C, H_out, W_out, kH, kW)` and strides
#
# ```
# (s_N, s_C, s_H·sH, s_W·sW, s_H·dH, s_W·dW)
# ```
#
# where **dilation** `(dH, dW)` spaces the kernel's taps apart (a 3×3 kernel
# with dilation 2 covers 5×5 pixels). The strides come from **`x`'s own
# strides**, not from its shape: a transposed or sliced input has other
# strides, and the view must follow them.
#
# ![A 1×1×4×5 input with its storage cells numbered; the window at output (0, 1) of a 3×3 kernel with stride (1, 2) highlighted in the image and in the storage, and its nine cells as one row of the im2col matrix](figures/windows.svg)
#
# How many positions fit: $H_\text{out} = \lfloor (H + 2p_H - d_H(k_H - 1) - 1) / s_H \rfloor + 1$,
# `conv_output_size` in the cell above. Torch raises a `RuntimeError` when no
# window fits (a kernel larger than the padded input).
#
# **Padding** adds zeros around the image. Zeros that are not in the storage
# cannot be part of a view: pad first (`pad`, one copy — `F.pad` in torch),
# then take the windows of the padded copy. Torch's `F.unfold` (im2col) is
# the same view laid out as a matrix: `(N, C·kH·kW, L)` with `L = H_out·W_out`
# columns, one per window; that reshape copies (the view's elements are not
# evenly spaced), as torch's does.
#
# ![The im2col matrix of a 1×2×4×4 input and a 2×2 kernel: each column is a window, its rows channel by channel; overlapping windows repeat pixels, which is why the matrix is bigger than the image](figures/im2col.svg)
#
# Write:
#
# - `unfold_view(x, kernel_size, dilation=1, padding=0, stride=1)`: for a 4-D
#   `x`, the windows as **one** `as_strided` view, shape `(N, C, H_out, W_out,
#   kH, kW)`; with padding 0 it shares `x`'s storage (no copy); with padding,
#   it is a view of `pad(x, ...)`. The same view torch gives with
#   `x.unfold(2, kH, sH).unfold(3, kW, sW)` (for dilation 1). A `RuntimeError`
#   when no window fits, or when `x` is not 4-D;
# - `unfold(x, kernel_size, dilation=1, padding=0, stride=1)`: `F.unfold`, the
#   `(N, C·kH·kW, L)` matrix, from your view.
#
# Each argument is an int or a pair (`pair` reads it).
#
# Real PyTorch: `unfold` in [`TensorShape.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/TensorShape.cpp)
# computes the window view with `as_strided`, exactly as here; `F.unfold` is
# `im2col` ([`Im2Col.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/Im2Col.cpp)),
# which copies the windows into the matrix with a loop in C++.

# %% solution="ex_unfold" reference=true
def unfold_view(x: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """The sliding windows of x (N, C, H, W) as one view of shape (N, C, H_out, W_out, kH, kW)."""
    ### BEGIN SOLUTION
    (kh, kw), (dh, dw) = pair(kernel_size, "kernel_size"), pair(dilation, "dilation")
    (ph, pw), (sh, sw) = pair(padding, "padding"), pair(stride, "stride")
    if x.dim() != 4:
        raise RuntimeError(f"Expected 4D input (N, C, H, W), but got input of size: {list(x.shape)}")
    if ph or pw:
        x = pad(x, (pw, pw, ph, ph))
    n, c, h, w = x.shape
    ho, wo = conv_output_size(h, kh, sh, 0, dh), conv_output_size(w, kw, sw, 0, dw)
    if ho <= 0 or wo <= 0:
        raise RuntimeError(f"Given input with spatial size ({h - 2 * ph}, {w - 2 * pw}), kernel_size=({kh}, {kw}), "
                           f"dilation=({dh}, {dw}), padding=({ph}, {pw}), calculated shape of the array of sliding "
                           f"blocks as ({ho}, {wo})")
    s_n, s_c, s_h, s_w = x.stride()
    return x.as_strided((n, c, ho, wo, kh, kw), (s_n, s_c, s_h * sh, s_w * sw, s_h * dh, s_w * dw),
                        x.storage_offset())
    ### END SOLUTION


def unfold(x: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """F.unfold (im2col): the windows as a (N, C*kH*kW, L) matrix, one column per window."""
    ### BEGIN SOLUTION
    windows = unfold_view(x, kernel_size, dilation, padding, stride)
    n, c, ho, wo, kh, kw = windows.shape
    return windows.permute(0, 1, 4, 5, 2, 3).reshape(n, c * kh * kw, ho * wo)
    ### END SOLUTION


# %% tests="ex_unfold" points=3
def torch_windows(x: torch.Tensor, kernel_size, dilation=1, padding=0, stride=1) -> torch.Tensor:
    """torch's view of the windows: Tensor.unfold twice (a window of the dilated span, then every dH-th tap)."""
    (kh, kw), (dh, dw) = pair(kernel_size, "kernel_size"), pair(dilation, "dilation")
    (ph, pw), (sh, sw) = pair(padding, "padding"), pair(stride, "stride")
    if ph or pw:
        x = F.pad(x, (pw, pw, ph, ph)).contiguous()  # (a copy, as yours: its strides are a fresh tensor's)
    return x.unfold(2, dh * (kh - 1) + 1, sh).unfold(3, dw * (kw - 1) + 1, sw)[..., ::dh, ::dw]


def expect_windows(x: torch.Tensor, kernel_size, dilation=1, padding=0, stride=1, what="", draw=inputs) -> None:
    args = f"kernel_size={kernel_size}, dilation={dilation}, padding={padding}, stride={stride}"
    what = f"unfold_view(x, {args}) for x: {describe(x)}{what}"
    mine = ours(x)
    result = same_outcome(lambda: unfold_view(mine, kernel_size, dilation, padding, stride),
                          lambda: torch_windows(x, kernel_size, dilation, padding, stride), what)
    if result is None:
        return
    view, theirs = result
    compare.assert_equal(tuple(view.shape), tuple(theirs.shape), f"{what}: the shape (N, C, H_out, W_out, kH, kW)")
    if pair(padding, "padding") == (0, 0) and theirs.numel():
        compare.assert_shares_memory(view, mine, f"{what}: the windows are a view of x's storage, not a copy")
        compare.assert_equal(tuple(view.stride()), tuple(theirs.stride()), f"{what}: the view's strides")
        compare.assert_equal(view.storage_offset(), theirs.storage_offset(), f"{what}: the view's storage_offset()")
    elif theirs.numel():
        compare.assert_no_shared_memory(view, mine, f"{what}: with padding, a view of the padded copy")
        compare.assert_equal(tuple(view.stride()), tuple(theirs.stride()),
                             f"{what}: the strides of the view of the padded copy")
    same_outcome(lambda: unfold(mine, kernel_size, dilation, padding, stride),
                 lambda: F.unfold(x, kernel_size, dilation, padding, stride), f"unfold(x, {args}) for x: {describe(x)}")


x = torch.arange(2 * 3 * 5 * 6, dtype=torch.float32).reshape(2, 3, 5, 6)
expect_windows(x, 3)
expect_windows(x, (2, 3), what=" (a kernel that is not square)")
expect_windows(x, 2, stride=2, what=" (stride 2: the window steps two pixels)")
expect_windows(x, 2, stride=(1, 3), what=" (stride (1, 3))")
expect_windows(x, 3, stride=3, what=" (stride equal to the kernel: windows side by side)")
expect_windows(x, 2, dilation=2, what=" (dilation 2: the taps two pixels apart)")
expect_windows(x, 3, dilation=(1, 2), stride=(2, 1), what=" (dilation (1, 2) and stride (2, 1))")
expect_windows(x.transpose(2, 3), 2, what=" (a transposed x: the strides come from x.stride(), not from its shape)")
expect_windows(x[:, ::2, :, 1:], 2, stride=2, what=" (x sliced with a step and an offset)")
expect_windows(x, 3, padding=1, what=" (padding 1: a view of the padded copy)")
expect_windows(x, 2, padding=(2, 1), stride=3, what=" (padding (2, 1) and stride 3)")
expect_windows(x, (5, 6), what=" (a kernel as large as the image: one window)")
expect_windows(x, 6, what=" (a kernel larger than the image: torch raises RuntimeError)")
expect_windows(x, 4, dilation=2, what=" (a dilated kernel that spans more than the image: RuntimeError)")
compare.assert_raises(RuntimeError, unfold_view, "unfold_view(x, 2) for a 3-D x (C, H, W): a RuntimeError (4-D only)",
                      ours(x[0]), 2)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_windows(draw):
    n, c, h, w = draw(0, 3) if draw.coin(6) else draw(1, 3), draw(1, 3), draw(1, 7), draw(1, 7)
    x = draw.randn((n, c, h, w), dtype=draw.choice([torch.float32, torch.float64]))
    if draw.coin(3):
        x = x.transpose(2, 3) if draw.coin() else x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    x = draw.noncontiguous(x)
    kernel = (draw(1, 4), draw(1, 4)) if draw.coin() else draw(1, 4)
    dilation = (draw(1, 3), draw(1, 2)) if draw.coin() else draw(1, 2)
    padding = (draw(0, 2), draw(0, 2)) if draw.coin() else draw(0, 1) * draw(0, 2)
    stride = (draw(1, 4), draw(1, 3)) if draw.coin() else draw(1, 3)
    expect_windows(x, kernel, dilation, padding, stride, draw=draw)


for_random_inputs(random_windows, 40)
### END HIDDEN TESTS

# %% [markdown]
# ### The convolution explorer
#
# Choose an input, a kernel, a stride, a padding and a dilation, and slide
# the window with the first button. The padded image shows the window's
# taps (the receptive field of one output pixel); the im2col matrix below
# it names, in each entry, the storage cell it copies. Pick a row of the
# matrix: the cells it reads are evenly spaced in the storage — a row is a
# strided view too. It runs on torch's `F.unfold`, and compares your
# `unfold` with it once your cell above runs.

# %%
from course.widgets.conv_explorer import explore

explore(unfold, from_torch)

# %% [markdown]
# ## 3. Memory formats: the same image, channels last
#
# A batch of images `(N, C, H, W)` is usually stored row-major: a row's `W`
# pixels side by side, then the rows, then the channels. **`channels_last`**
# stores the same shape in another order: the `C` values of one pixel side by
# side, then the pixels of a row, the rows, the images — NHWC in memory while
# the shape stays NCHW. Nothing new is needed to represent it: it is a
# **permutation of strides**, chapter 01's view rules at work. For
# `(N, C, H, W)` the strides are `(H·W·C, 1, W·C, C)`. Convolution libraries
# like it (cuDNN's Tensor Cores, oneDNN on the CPU): one tap of a window,
# across every channel, is one contiguous run of memory.
#
# Chapter 01 keeps a small registry, `MEMORY_FORMATS`: a memory format
# (torch's own values: `torch.contiguous_format`, `torch.channels_last`) →
# its strides for a shape and its rule for "lies in this order".
# `x.is_contiguous(memory_format=...)` asks the rule;
# `x.contiguous(memory_format=...)` returns `x` itself when the rule says
# yes, else a copy with exactly the format's strides. You register
# `channels_last` (the cell's last line does) by writing its two functions:
#
# - `channels_last_strides(shape)`, torch's `get_channels_last_strides_2d`:
#   for `(N, C, H, W)`, stride 1 for `C`, then `C` for `W`, `W·C` for `H`,
#   `H·W·C` for `N` — products of the sizes **as they are**: a dim of size 1
#   still gets its place's stride, and a size 0 makes every stride outside it
#   0. Any number of dims but 4: `RuntimeError("required rank 4 tensor to use
#   channels_last format")`.
# - `is_channels_last_contiguous(shape, stride)`, torch's
#   `_compute_channels_last_contiguous_2d`: walk the dims in the order `C, W,
#   H, N` with `expected = 1`; **a dim of size 1 is skipped** (its stride never
#   matters, as in chapter 01); every other dim must have stride `expected`,
#   and then `expected *= size`. Not 4-D: `False`. Unlike chapter 01's rule,
#   **no elements is no exception**: an empty tensor passes only if its
#   strides do.
#
# **The ambiguous cases.** A tensor can lie in both orders at once: a
# row-major `(N, 1, H, W)` (one channel: the channel's stride never matters)
# or `(N, C, 1, 1)` is also channels-last contiguous, so
# `contiguous(memory_format=torch.channels_last)` returns it as it is, with
# its row-major strides — while a **fresh** channels-last tensor of that shape
# (a copy, `torch.empty(..., memory_format=...)`) has
# `channels_last_strides`, size-1 dims included: `(2, 1, 4, 5)` gets
# `(20, 1, 5, 1)`, not `(20, 20, 5, 1)`.
#
# Which order does an operator give its result? Torch guesses from the
# input's strides: `suggest_memory_format` says channels_last when
# `is_channels_last_strides_2d` accepts them — strides that order the dims
# `C, W, H, N` from the smallest, not only dense ones, with row-major as the
# fallback in the cases strides cannot tell apart (`(N, 1, 1, 1)`). It is
# given below as `suggests_channels_last(t)`. A convolution on the CPU gives a
# channels-last result when its input **or** its weight suggests channels
# last (`convolution_memory_format(input, weight)`, given: you use it in the
# next section).
#
# Real PyTorch: `get_channels_last_strides_2d` and `is_channels_last_strides_2d`
# (with its Note [Ambiguous is_channels_last_strides_xd]) in
# [`c10/core/MemoryFormat.h`](https://github.com/pytorch/pytorch/blob/main/c10/core/MemoryFormat.h),
# `_compute_channels_last_contiguous_2d` in [`c10/core/Contiguity.h`](https://github.com/pytorch/pytorch/blob/main/c10/core/Contiguity.h),
# `suggest_memory_format` in [`TensorBase.h`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/core/TensorBase.h),
# `_determine_backend_memory_format` in [`Convolution.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/Convolution.cpp).

# %% reference=true
from picotorch import contiguous_format, in_memory_format, register_memory_format

channels_last = torch.channels_last  # (torch's value itself, as chapter 01's contiguous_format)


def suggests_channels_last(t: Tensor) -> bool:
    """torch's is_channels_last_strides_2d (what suggest_memory_format asks): t's strides order its dims C, W, H, N
    from the smallest, falling back to row-major where strides cannot tell (see the prose)."""
    if t.dim() != 4 or t.stride(1) == 0:
        return False
    least = 0
    for d in (1, 3, 2, 0):
        size, stride = t.shape[d], t.stride(d)
        if size == 0 or stride < least or (d == 0 and least == t.stride(1)):
            return False
        least = stride * size if size > 1 else stride
    return True


def convolution_memory_format(input: Tensor, weight: Tensor):
    """The order of a convolution's result on the CPU (torch's _determine_backend_memory_format for its slow and
    oneDNN paths): channels_last when the input or the weight suggests it."""
    return channels_last if suggests_channels_last(input) or suggests_channels_last(weight) else contiguous_format


# %% solution="ex_channels_last" reference=true
def channels_last_strides(shape) -> tuple:
    """torch's strides for a fresh channels_last tensor of this 4-D shape (N, C, H, W)."""
    ### BEGIN SOLUTION
    if len(shape) != 4:
        raise RuntimeError("required rank 4 tensor to use channels_last format")
    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)
    ### END SOLUTION


def is_channels_last_contiguous(shape, stride) -> bool:
    """Whether a tensor of this shape and these strides lies channels-last contiguous (torch's rule)."""
    ### BEGIN SOLUTION
    if len(shape) != 4:
        return False
    expected = 1
    for d in (1, 3, 2, 0):
        if shape[d] != 1:
            if stride[d] != expected:
                return False
            expected *= shape[d]
    return True
    ### END SOLUTION


register_memory_format(channels_last, channels_last_strides, is_channels_last_contiguous)

# %% tests="ex_channels_last" points=3
def expect_channels_last_strides(shape, what="") -> None:
    """channels_last_strides(shape) against the strides of torch's fresh channels_last tensor, or torch's error."""
    what = f"channels_last_strides({tuple(shape)}){what}"
    same_outcome(lambda: tuple(channels_last_strides(tuple(shape))),
                 lambda: torch.empty(shape, memory_format=torch.channels_last).stride(), what)


def expect_channels_last_rule(shape, stride, what="") -> None:
    """is_channels_last_contiguous(shape, stride) against torch's is_contiguous(memory_format=torch.channels_last)."""
    what = f"is_channels_last_contiguous({tuple(shape)}, {tuple(stride)}){what}"
    wanted = torch.empty_strided(shape, stride).is_contiguous(memory_format=torch.channels_last)
    compare.assert_equal(call_yours(what, is_channels_last_contiguous, tuple(shape), tuple(stride)), wanted, what)


def expect_memory_format_calls(x: torch.Tensor, what: str, draw=inputs) -> None:
    """Tensor.contiguous and is_contiguous with memory_format=torch.channels_last, against torch's: values,
    strides, the tensor itself when already in that order, the gradient through the copy."""
    what = f"{what} ({describe(x)})"
    mine = ours(x)
    compare.assert_equal(call_yours(what, mine.is_contiguous, memory_format=torch.channels_last),
                         x.is_contiguous(memory_format=torch.channels_last),
                         f"x.is_contiguous(memory_format=torch.channels_last) for x: {what}")
    result = same_outcome(lambda: mine.contiguous(memory_format=torch.channels_last),
                          lambda: x.contiguous(memory_format=torch.channels_last),
                          f"x.contiguous(memory_format=torch.channels_last) for x: {what}", layout=True)
    if result is not None and (result[1] is x) != (result[0] is mine):
        raise AssertionError(f"x.contiguous(memory_format=torch.channels_last) for x: {what}: "
                             f"{'a copy' if result[1] is x else 'x itself'}, but torch returns "
                             f"{'x itself (already channels-last contiguous)' if result[1] is x else 'a copy'}")
    if result is not None and x.dim() == 4 and x.numel():
        same_call(lambda t: t.contiguous(memory_format=torch.channels_last) * 2, [x], f"the gradient through "
                  f"x.contiguous(memory_format=torch.channels_last) * 2 for x: {what}", ours=ours, grad=True, draw=draw)


for shape, why in [((2, 3, 4, 5), ""), ((2, 1, 4, 5), " (one channel: C's stride is still 1)"),
                   ((2, 3, 1, 5), " (H of size 1 keeps its place's stride W·C)"), ((2, 3, 4, 1), " (W of size 1)"),
                   ((1, 1, 1, 1), " (every dim of size 1)"), ((2, 0, 3, 3), " (C of size 0: the strides outside it 0)"),
                   ((2, 3, 0, 4), " (H of size 0)"), ((2, 3, 4), " (3-D: torch raises RuntimeError)"),
                   ((2, 3, 4, 5, 6), " (5-D: RuntimeError)")]:
    expect_channels_last_strides(shape, why)
for shape, stride, why in [((2, 3, 4, 5), (60, 1, 15, 3), " (channels_last's own strides)"),
                           ((2, 3, 4, 5), (60, 20, 5, 1), " (row-major: not channels last)"),
                           ((2, 3, 4, 5), (60, 1, 3, 12), " (H and W's strides swapped: the walk goes C, W, H, N)"),
                           ((2, 1, 4, 5), (20, 20, 5, 1), " (row-major with one channel: both orders at once)"),
                           ((2, 3, 1, 1), (3, 1, 1, 1), " (row-major (N, C, 1, 1): both orders at once)"),
                           ((2, 3, 1, 5), (15, 1, 7, 3), " (the stride of a dim of size 1 never matters)"),
                           ((2, 3, 4, 5), (120, 1, 15, 3), " (a gap between images: not contiguous)"),
                           ((2, 3, 4, 5), (60, 1, 30, 6), " (every other pixel: not contiguous)"),
                           ((2, 3, 4, 5), (0, 1, 15, 3), " (expanded along N: stride 0)"),
                           ((2, 0, 3, 3), (9, 9, 3, 1), " (no elements, row-major strides: no exception, False)"),
                           ((2, 0, 3, 3), (0, 1, 0, 0), " (no elements, channels_last's strides: True)"),
                           ((3, 4, 5), (1, 15, 3), " (3-D: never channels last)"),
                           ((2, 1, 3), (3, 3, 1), " (3-D with one channel: never channels last)")]:
    expect_channels_last_rule(shape, stride, why)
x = torch.randn(2, 3, 4, 5)
expect_memory_format_calls(x, "a row-major x")
expect_memory_format_calls(x.contiguous(memory_format=torch.channels_last), "a channels-last x: x itself")
expect_memory_format_calls(torch.randn(2, 1, 4, 5), "a row-major x of one channel: already channels last, x itself")
expect_memory_format_calls(torch.randn(2, 1, 4, 5).transpose(2, 3), "a transposed x of one channel: a fresh copy "
                           "gets channels_last_strides, size-1 dims included")
expect_memory_format_calls(x[:, :, ::2], "x sliced with a step")
expect_memory_format_calls(torch.randn(2, 3, 1, 5).permute(0, 2, 3, 1), "a permuted x")
expect_memory_format_calls(torch.randn(2, 0, 3, 3), "an empty x")
expect_memory_format_calls(torch.randn(2, 3, 4), "a 3-D x: contiguous raises RuntimeError, is_contiguous is False")
compare.assert_equal(ours(x).is_contiguous(torch.contiguous_format), True,
                     "x.is_contiguous(torch.contiguous_format) for a row-major x (chapter 01's rule)")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_memory_format(draw):
    shape = tuple(draw(1, 3) if draw.coin(3) else draw(0, 4) for _ in range(4))
    if draw.coin(8):
        shape = shape[:draw(1, 3)] if draw.coin() else shape + (draw(1, 3),)
    expect_channels_last_strides(shape)
    if len(shape) == 4:
        strides = [channels_last_strides(shape), torch.empty(shape).stride()]
        stride = list(draw.choice(strides))
        for d in range(4):
            if draw.coin(4):
                stride[d] = draw(0, 30)
        expect_channels_last_rule(shape, stride)
    x = draw.randn(shape)
    if draw.coin() and len(shape) == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    expect_memory_format_calls(draw.noncontiguous(x), "a random x", draw=draw)


for_random_inputs(random_memory_format, 40)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Convolution = windows × weights
#
# `conv2d(input, weight, bias, stride, padding, dilation, groups)` with `input`
# of shape `(N, C, H, W)` and `weight` of shape `(O, C/groups, kH, kW)`:
#
# $$\text{out}[n, o, i, j] = \text{bias}[o] + \sum_{c, p, q} \text{weight}[o, c, p, q]\;
#   \text{windows}[n, c, i, j, p, q]$$
#
# a contraction of the window view's `(C, kH, kW)` with the weight's: one
# matrix product (`np.tensordot`, or `np.einsum` with `optimize=True`), whose
# result `(N, H_out, W_out, O)` you lay out as `(N, O, H_out, W_out)`. NumPy
# copies the windows into a matrix once, inside the product — im2col — and
# hands it to BLAS. (A loop over the kernel's `kH·kW` taps, each a product
# of a shifted slice, also works: the "direct" convolution.)
#
# The matrix is large — `C·kH·kW` rows by `H_out·W_out` columns per image,
# tens of MB for a batch — and the product reads it right after the copy
# wrote it. Copied a few images at a time (`cache_batches`, given below: as
# many as fit in half a MiB), it is still in the CPU's cache when the
# product reads it; the whole batch's would go out to memory and back (a
# fifth of the time, here).
#
# **Groups** cut the channels into `groups` independent convolutions: input
# channels `[g·C/G, (g+1)·C/G)` meet only the output channels
# `[g·O/G, (g+1)·O/G)`, and the weight's second dim is `C/G`. `groups=C`
# (one filter per channel) is a *depthwise* convolution. A group must never
# see another group's channels.
#
# **Padding** is an int, a pair, or a string: `"valid"` is padding 0, and
# `"same"` pads so that the output has the input's size (stride 1 only): a
# total of `d·(k − 1)` zeros per dim, half before and half after — and when
# that total is odd, the extra zero goes **after** (right, bottom), as torch
# does: `pad` the input by the extra one first, then convolve with the
# symmetric part.
#
# **One operator.** `conv2d` checks and reads its arguments, then makes one
# call, `dispatch("convolution", input, weight, bias, stride, padding,
# dilation, groups)` (torch's `aten::convolution`, without its arguments for
# transposed convolutions), each of the last four a pair or an int. The next
# cell gives its autograd kernel, `ConvolutionFunction`; you write the CPU
# kernel `convolution_cpu`, which computes with NumPy over your window view.
# A 3-D `input` `(C, H, W)` is one image: add a batch dim of 1 and take it off
# the result.
#
# Torch's errors (all `RuntimeError`), which `conv2d` raises before it
# dispatches:
#
# - an input that is not 3-D or 4-D;
# - a stride or a dilation below 1, a negative padding, `groups` below 1;
# - a padding string other than `"same"` or `"valid"`; `"same"` with a stride
#   other than 1;
# - `weight.shape[0]` not divisible by `groups`; the input's channels not
#   `weight.shape[1] * groups`;
# - a `bias` that is not 1-D with `weight.shape[0]` elements;
# - input and weight of different dtypes;
# - a kernel (dilated) larger than the padded input.
#
# **The result's memory format** is torch's: channels last when the input
# or the weight suggests it (section 3). Decide it with
# `convolution_memory_format(input, weight)` before any padding, and give
# the operator's result exactly that format's strides with chapter 01's
# `in_memory_format(out, memory_format)` — not `contiguous(memory_format=...)`,
# which keeps a result that already lies channels last with its row-major
# strides (a `(N, O, 1, 1)` output: torch's has `(O, 1, O, O)`).
#
# Real PyTorch: `conv2d` in [`torch/nn/functional.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/functional.py)
# is `at::conv2d`; `_convolution_mode` in [`Convolution.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/Convolution.cpp)
# turns `"same"` into (possibly asymmetric) padding, `check_shape_forward`
# raises the errors above, and `_convolution` picks the backend.

# %% reference=true
@register("convolution")
class ConvolutionFunction(Function):
    """The Autograd kernel of "convolution": one node. Forward and backward are operators of the dispatcher,
    "convolution" and "convolution_backward" (torch's aten::convolution, aten::convolution_backward)."""

    @staticmethod
    def forward(ctx, input, weight, bias, stride, padding, dilation, groups):
        ctx.save_for_backward(input, weight)
        ctx.arguments = (stride, padding, dilation, groups)
        ctx.has_bias = bias is not None
        return redispatch("convolution", DispatchKey.Autograd, input, weight, bias, stride, padding, dilation, groups)

    @staticmethod
    def backward(ctx, grad):
        input, weight = ctx.saved_tensors
        needs = ctx.needs_input_grad
        grads = dispatch("convolution_backward", grad, input, weight, *ctx.arguments,
                         (needs[0], needs[1], ctx.has_bias and needs[2]))
        return grads + (None, None, None, None)


# The products read the im2col matrix right after it is written: a few images at a time, so that it is still
# in the CPU's cache (the whole batch's, tens of MB, would go out to memory and come back).
CACHE_BYTES = 1 << 19  # half a MiB: about one core's L2 cache


def cache_batches(n: int, bytes_per_image: int) -> list:
    """Slices of range(n), each as many images as fit in CACHE_BYTES at bytes_per_image (at least one)."""
    step = max(1, CACHE_BYTES // max(bytes_per_image, 1))
    return [slice(start, start + step) for start in range(0, n, step)]


# %% solution="ex_conv" reference=true
@register_kernel("convolution", DispatchKey.CPU)
def convolution_cpu(input: Tensor, weight: Tensor, bias, stride, padding, dilation, groups: int) -> Tensor:
    """The convolution of a 4-D input (arguments already checked), with NumPy over unfold_view."""
    ### BEGIN SOLUTION
    windows = unfold_view(input, tuple(weight.shape[2:]), dilation, padding, stride).numpy()
    n, c, ho, wo, kh, kw = windows.shape
    o = weight.shape[0]
    cg, og, k = c // groups, o // groups, c // groups * kh * kw
    filters = weight.numpy().reshape(groups, og, k)  # each group's filters, one per row
    out = np.empty((n, groups, og, ho * wo), dtype=filters.dtype)
    for part in cache_batches(n, c * kh * kw * ho * wo * filters.itemsize):
        chunk = windows[part]
        m = chunk.shape[0]
        # im2col: these images' windows copied once, as (images, G, C/G·kH·kW, H_out·W_out); then one product per
        # image and group, written straight into the output
        taps = chunk.reshape(m, groups, cg, ho, wo, kh, kw).transpose(0, 1, 2, 5, 6, 3, 4)
        cols = taps.reshape(m, groups, k, ho * wo)
        np.matmul(filters, cols, out=out[part])
    if bias is not None:
        out += bias.numpy().reshape(1, groups, og, 1)
    return from_numpy(out.reshape(n, o, ho, wo))
    ### END SOLUTION


def conv2d(input: Tensor, weight: Tensor, bias=None, stride=1, padding=0, dilation=1, groups: int = 1) -> Tensor:
    """F.conv2d: torch's checks, "same"/"valid" padding, a 3-D input as a batch of one; one "convolution" call."""
    ### BEGIN SOLUTION
    if input.dim() not in (3, 4):
        raise RuntimeError(f"Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: "
                           f"{list(input.shape)}")
    if input.dim() == 3:
        return conv2d(input.unsqueeze(0), weight, bias, stride, padding, dilation, groups).squeeze(0)
    layout = convolution_memory_format(input, weight)  # (before "same" pads a row-major copy of the input)
    stride, dilation = pair(stride, "stride"), pair(dilation, "dilation")
    if min(stride) < 1:
        raise RuntimeError("non-positive stride is not supported")
    if min(dilation) < 1:
        raise RuntimeError("non-positive dilation is not supported")
    if groups < 1:
        raise RuntimeError("non-positive groups is not supported")
    o, cg, kh, kw = weight.shape
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0, 0)
        elif padding == "same":
            if stride != (1, 1):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            totals = (dilation[0] * (kh - 1), dilation[1] * (kw - 1))
            padding = (totals[0] // 2, totals[1] // 2)
            extra = (totals[0] - 2 * padding[0], totals[1] - 2 * padding[1])
            if extra != (0, 0):  # an odd total: the extra zero goes after (right, bottom)
                input = pad(input, (0, extra[1], 0, extra[0]))
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    padding = pair(padding, "padding")
    if min(padding) < 0:
        raise RuntimeError("negative padding is not supported")
    n, c, h, w = input.shape
    if o % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
                           f"but got weight of size {list(weight.shape)} instead")
    if c != cg * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, expected input"
                           f"{list(input.shape)} to have {cg * groups} channels, but got {c} channels instead")
    if bias is not None and tuple(bias.shape) != (o,):
        raise RuntimeError(f"Given weight of size {list(weight.shape)}, expected bias to be 1-dimensional with {o} "
                           f"elements, but got bias of size {list(bias.shape)} instead")
    if input.dtype is not weight.dtype or (bias is not None and bias.dtype is not weight.dtype):
        raise RuntimeError(f"Input type ({input.dtype.name}) and weight type ({weight.dtype.name}) should be the same")
    spans = (dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1)
    if h + 2 * padding[0] < spans[0] or w + 2 * padding[1] < spans[1]:
        raise RuntimeError(f"Calculated padded input size per channel: ({h + 2 * padding[0]} x {w + 2 * padding[1]}). "
                           f"Kernel size: ({spans[0]} x {spans[1]}). Kernel size can't be greater than actual input size")
    out = dispatch("convolution", input, weight, bias, stride, padding, dilation, groups)
    return out if layout is contiguous_format else in_memory_format(out, layout)
    ### END SOLUTION


# %% tests="ex_conv" points=4
from picotorch import LoggingMode


def expect_conv(x: torch.Tensor, w: torch.Tensor, b=None, what="", draw=inputs, grad=False, **kwargs) -> None:
    """conv2d(x, w, b, **kwargs) against F.conv2d: values (and with grad=True every gradient), or torch's error."""
    args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    tensors = [x, w] if b is None else [x, w, b]
    call = (lambda p, q, r=None: (conv2d if isinstance(p, Tensor) else F.conv2d)(p, q, r, **kwargs))
    same_call(call, tensors, f"conv2d(x, weight{'' if b is None else ', bias'}{', ' + args if args else ''}){what}",
              ours=ours, grad=grad, draw=draw)


torch.manual_seed(0)
x, w, b = torch.randn(2, 4, 6, 7), torch.randn(6, 4, 3, 3), torch.randn(6)
expect_conv(x, w, b)
expect_conv(x, w, what=" (no bias)")
expect_conv(x, w, b, stride=2, what=" (stride 2)")
expect_conv(x, w, b, stride=(1, 3), what=" (stride (1, 3))")
expect_conv(x, w, b, padding=1, what=" (padding 1)")
expect_conv(x, w, b, padding=(2, 0), what=" (padding (2, 0))")
expect_conv(x, w, b, padding="valid", what=" (padding 'valid' is padding 0)")
expect_conv(x, w, b, padding="same", what=" (padding 'same': the output keeps the input's size)")
expect_conv(x, torch.randn(6, 4, 2, 4), b, padding="same",
            what=" (padding 'same' with even kernels: the extra zero after, on the right and bottom)")
expect_conv(x, w, b, padding="same", dilation=(2, 1), what=" (padding 'same' with dilation (2, 1))")
expect_conv(x, w, b, dilation=2, what=" (dilation 2)")
expect_conv(x, torch.randn(6, 2, 3, 3), b, groups=2, what=" (groups 2: two convolutions, the channels never mix)")
expect_conv(x, torch.randn(4, 1, 3, 3), groups=4, what=" (groups 4: depthwise, one filter per channel)")
expect_conv(x.transpose(2, 3), w, b, what=" (a transposed input)")
expect_conv(x[0], w, b, what=" (a 3-D input (C, H, W): one image)")
expect_conv(x.double(), w.double(), b.double(), what=" (float64)")
expect_conv(x[:0], w, b, what=" (an empty batch)")
for bad, text in [(dict(stride=0), "stride 0"), (dict(dilation=0), "dilation 0"), (dict(padding=-1), "negative padding"),
                  (dict(groups=0), "groups 0"), (dict(padding="full"), "padding 'full'"),
                  (dict(padding="same", stride=2), "padding 'same' with stride 2"),
                  (dict(stride=(1, 2, 3)), "a stride of three values")]:
    expect_conv(x, w, b, what=f" ({text}: torch raises RuntimeError)", **bad)
expect_conv(x, torch.randn(6, 3, 3, 3), b, what=" (weight for 3 input channels, input with 4: RuntimeError)")
expect_conv(x, torch.randn(6, 2, 3, 3), b, groups=3, what=" (groups 3 and input channels 4: RuntimeError)")
expect_conv(x, torch.randn(5, 2, 3, 3), groups=2, what=" (5 output channels for groups 2: RuntimeError)")
expect_conv(x, w, torch.randn(5), what=" (a bias of 5 for 6 output channels: RuntimeError)")
expect_conv(x, w.double(), what=" (a float32 input and a float64 weight: RuntimeError)")
expect_conv(x, torch.randn(6, 4, 7, 7), what=" (a 7×7 kernel on a 6×7 image: RuntimeError)")
expect_conv(x, torch.randn(6, 4, 7, 7), padding=1, what=" (a 7×7 kernel on the 8×9 padded image: it fits)")
expect_conv(x, w, dilation=3, what=" (a 3×3 kernel with dilation 3 spans 7×7, more than 6×7: RuntimeError)")
expect_conv(x[0, 0], torch.randn(6, 1, 3, 3), what=" (a 2-D input: RuntimeError, even for a weight of 1 channel)")
with LoggingMode() as log:
    conv2d(ours(x), ours(w), ours(b), padding=1)
if "convolution" not in log:
    raise AssertionError(f"conv2d(x, w, b, padding=1) called the operators {log}: it must dispatch the one "
                         "operator 'convolution' (torch's aten::convolution), so that every key sees it")
x_cl, w_cl = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
for args, kwargs, why in [((x_cl, w, b), {}, "a channels-last input: a channels-last result"),
                          ((x, w_cl, b), {}, "a channels-last weight: a channels-last result"),
                          ((x_cl, w), dict(stride=2, padding=1), "a channels-last input, stride 2, padding 1"),
                          ((x_cl, torch.randn(6, 4, 2, 2)), dict(padding="same"),
                           "padding 'same' with an even kernel: the format decided before the padded copy"),
                          ((x_cl, torch.randn(5, 4, 6, 7), b[:5]), {},
                           "a (2, 5, 1, 1) result: channels_last_strides exactly, size-1 dims included"),
                          ((torch.randn(2, 6, 7, 1).permute(0, 3, 1, 2), torch.randn(6, 1, 3, 3)), {},
                           "one channel with strides (42, 1, 7, 1): it suggests channels last"),
                          ((torch.randn(2, 1, 6, 7), torch.randn(6, 1, 3, 3)), {},
                           "one channel, row-major: ambiguous, so row-major")]:
    same_call(lambda *t: (conv2d if isinstance(t[0], Tensor) else F.conv2d)(*t, **kwargs), list(args),
              f"conv2d(x, w{', b' if len(args) > 2 else ''}, {kwargs}) ({why}): its result's strides",
              ours=ours, layout=True)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_conv(draw):
    groups = draw.choice([1, 1, 2, 3])
    n, c, o = draw(0, 3) if draw.coin(6) else draw(1, 3), groups * draw(1, 3), groups * draw(1, 3)
    kh, kw = draw(1, 4), draw(1, 4)
    dtype = draw.choice([torch.float32, torch.float64])
    x = draw.noncontiguous(draw.randn((n, c, draw(1, 8), draw(1, 8)), dtype=dtype))
    w = draw.noncontiguous(draw.randn((o, c // groups, kh, kw), dtype=dtype))
    b = draw.randn((o,), dtype=dtype) if draw.coin() else None
    kwargs = dict(groups=groups)
    if draw.coin():
        kwargs["padding"] = draw.choice(["same", "valid", (draw(0, 2), draw(0, 2)), draw(0, 2)])
    if kwargs.get("padding") != "same" and draw.coin():
        kwargs["stride"] = (draw(1, 5), draw(1, 3)) if draw.coin() else draw(1, 3)
    if draw.coin():
        kwargs["dilation"] = (draw(1, 3), draw(1, 2)) if draw.coin() else draw(1, 2)
    expect_conv(x if draw(0, 4) or n == 0 else x[0], w, b, draw=draw, **kwargs)


def random_conv_layout(draw):
    n, c, o, kh, kw = draw(1, 3), draw(1, 3), draw(1, 3), draw(1, 3), draw(1, 3)
    x, w = draw.randn((n, c, draw(kh, 6), draw(kw, 6))), draw.randn((o, c, kh, kw))
    x, w = [t.contiguous(memory_format=torch.channels_last) if draw.coin() else draw.noncontiguous(t) for t in (x, w)]
    padding = draw.choice([0, 1, "same"])
    same_call(lambda p, q: (conv2d if isinstance(p, Tensor) else F.conv2d)(p, q, padding=padding), [x, w],
              f"conv2d(x, w, padding={padding!r}): its result's strides", ours=ours, layout=True, draw=draw)


for_random_inputs(random_conv, 40)
for_random_inputs(random_conv_layout, 20)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. The backward: two products and col2im
#
# With `g` the gradient of the output, `(N, O, H_out, W_out)`, the backward
# of the contraction is two more contractions (as for `linear`, chapter 03):
#
# - **the weight's gradient**: `g` contracted with the windows over `(N,
#   H_out, W_out)`: $\nabla W[o, c, p, q] = \sum_{n,i,j} g[n, o, i, j]\,
#   \text{windows}[n, c, i, j, p, q]$ — your view again, no copy;
# - **the bias's**: `g` summed over `(N, H_out, W_out)`;
# - **the input's**: first the gradient of every window, `g` contracted with
#   the weight over `O` — a `(N, C·kH·kW, L)` matrix, one column per window
#   — then each window's gradient **added back** onto the pixels the window
#   came from. That is **col2im**, torch's `F.fold`: the inverse placement of
#   `F.unfold`. Where windows overlap, a pixel gets the sum of every window's
#   share; a pixel that no window covers (stride larger than the kernel) gets
#   zero; the padding's share is cut off at the end.
#
# ![col2im of a 1×1×3×4 image, 2×2 kernel, stride 1: each window's gradient added back onto its pixels; the count of windows covering each pixel, 1 at the corners up to 4 in the middle](figures/col2im.svg)
#
# A scatter-**add**, not a write: a write keeps only the last window's share.
# Fold cannot add through a strided view of the output either (`view += cols`
# on overlapping windows: NumPy reads every element once and loses all but
# one of the sums). Loop instead over the `kH·kW` kernel taps: for one tap
# `(p, q)`, the windows touch pixels `p·dH + i·sH`, `q·dW + j·sW` — a
# slice with step `(sH, sW)` of the padded image, each pixel at most once —
# and add that tap's `(N, C, H_out, W_out)` block to it.
#
# Write `fold(cols, output_size, kernel_size, dilation=1, padding=0,
# stride=1)` (`F.fold` for `cols` of shape `(N, C·kH·kW, L)`; a `RuntimeError`
# as torch's when `C·kH·kW` is not a multiple of `kH·kW` or `L` is not the
# number of windows), then the CPU kernel
# `convolution_backward_cpu(grad, input, weight, stride, padding, dilation,
# groups, output_mask)`: the three gradients `(grad_input, grad_weight,
# grad_bias)`, each `None` where `output_mask` (three booleans) does not ask
# for it. Groups again stay apart.
#
# Real PyTorch: `convolution_backward` in [`derivatives.yaml`](https://github.com/pytorch/pytorch/blob/main/tools/autograd/derivatives.yaml)
# and [`Convolution.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/Convolution.cpp);
# col2im in [`Col2Im.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/Col2Im.cpp)
# and [`im2col.h`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/im2col.h)
# (its loop adds, `data_im[...] += data_col[...]`).

# %% solution="ex_conv_backward" reference=true
def fold(cols: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """F.fold (col2im): cols (N, C*kH*kW, L) added back into an image (N, C, H, W) of size output_size."""
    ### BEGIN SOLUTION
    (h, w), (kh, kw) = pair(output_size, "output_size"), pair(kernel_size, "kernel_size")
    (dh, dw), (ph, pw), (sh, sw) = pair(dilation, "dilation"), pair(padding, "padding"), pair(stride, "stride")
    n, rows, length = cols.shape
    if rows % (kh * kw):
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, "
                           f"but got input.size(1)={rows} and kernel_size=({kh}, {kw}).")
    ho, wo = conv_output_size(h, kh, sh, ph, dh), conv_output_size(w, kw, sw, pw, dw)
    if ho * wo != length or ho <= 0 or wo <= 0:
        raise RuntimeError(f"Given output_size=({h}, {w}), kernel_size=({kh}, {kw}), expected size of input's "
                           f"dimension 2 to match the calculated number of sliding blocks {ho} * {wo} = {ho * wo}, "
                           f"but got input.size(2)={length}.")
    c = rows // (kh * kw)
    blocks = cols.numpy().reshape(n, c, kh, kw, ho, wo)
    image = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=blocks.dtype)
    for p in range(kh):
        for q in range(kw):
            image[:, :, p * dh:p * dh + sh * (ho - 1) + 1:sh, q * dw:q * dw + sw * (wo - 1) + 1:sw] += blocks[:, :, p, q]
    return from_numpy(image[:, :, ph:ph + h, pw:pw + w])
    ### END SOLUTION


@register_kernel("convolution_backward", DispatchKey.CPU)
def convolution_backward_cpu(grad: Tensor, input: Tensor, weight: Tensor, stride, padding, dilation, groups: int,
                             output_mask) -> tuple:
    """(grad_input, grad_weight, grad_bias), each None where output_mask says it is not needed."""
    ### BEGIN SOLUTION
    g, w = grad.numpy(), weight.numpy()
    n, o, ho, wo = g.shape
    c, kh, kw = input.shape[1], w.shape[2], w.shape[3]
    cg, og, k = c // groups, o // groups, c // groups * kh * kw  # k: a group's rows of the im2col matrix
    grads, filters = g.reshape(n, groups, og, ho * wo), w.reshape(groups, og, k)
    batches = cache_batches(n, c * kh * kw * ho * wo * g.itemsize)  # an image's im2col matrix, in bytes
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        image = np.empty(tuple(input.shape), dtype=g.dtype)
        for part in batches:  # every window's gradient, (C/G·kH·kW, O/G) @ (O/G, H_out·W_out), then col2im
            cols = np.matmul(filters.transpose(0, 2, 1), grads[part])
            image[part] = fold(from_numpy(cols.reshape(cols.shape[0], c * kh * kw, ho * wo)), tuple(input.shape[2:]),
                               (kh, kw), dilation, padding, stride).numpy()
        grad_input = from_numpy(image)
    if output_mask[1]:
        windows = unfold_view(input, (kh, kw), dilation, padding, stride).numpy()
        gw = np.zeros((groups, og, k), dtype=g.dtype)
        for part in batches:  # these images' im2col matrices (one copy), then (O/G, L) @ (L, C/G·kH·kW), summed
            chunk = windows[part]
            m = chunk.shape[0]
            taps = chunk.reshape(m, groups, cg, ho, wo, kh, kw).transpose(0, 1, 2, 5, 6, 3, 4)
            cols = taps.reshape(m, groups, k, ho * wo)
            gw += np.matmul(grads[part], cols.transpose(0, 1, 3, 2)).sum(axis=0)
        grad_weight = from_numpy(gw.reshape(w.shape))
    if output_mask[2]:
        grad_bias = from_numpy(g.sum(axis=(0, 2, 3)))
    return grad_input, grad_weight, grad_bias
    ### END SOLUTION


# %% tests="ex_conv_backward" points=4
def expect_fold(cols: torch.Tensor, output_size, kernel_size, what="", **kwargs) -> None:
    args = ", ".join([repr(output_size), repr(kernel_size)] + [f"{k}={v!r}" for k, v in kwargs.items()])
    same_call(lambda c: (fold if isinstance(c, Tensor) else F.fold)(c, output_size, kernel_size, **kwargs), [cols],
              f"fold(cols, {args}){what}", ours=ours)


def expect_mask(x, w, b, mask, what) -> None:
    """convolution_backward_cpu with output_mask: None exactly where the mask is False."""
    g = torch.randn(F.conv2d(x, w, b).shape)
    got = convolution_backward_cpu(ours(g), ours(x), ours(w), (1, 1), (0, 0), (1, 1), 1, mask)
    if not isinstance(got, tuple) or len(got) != 3:
        raise AssertionError(f"{what}: convolution_backward_cpu must return a tuple of three, got {got!r:.80}")
    for name, wanted, value in zip(("grad_input", "grad_weight", "grad_bias"), mask, got):
        if (value is None) == wanted:
            raise AssertionError(f"{what}: {name} is {'None' if value is None else 'computed'}, but output_mask="
                                 f"{mask} {'asks for it' if wanted else 'does not ask for it (None)'}")


torch.manual_seed(1)
c = torch.randn(2, 3 * 2 * 2, 12)
expect_fold(c, (4, 5), 2, what=" (overlapping windows: a pixel sums every window's share)")
expect_fold(torch.randn(1, 4, 6), (3, 4), 2, stride=(2, 1), what=" (stride (2, 1))")
expect_fold(torch.randn(1, 4, 4), (5, 5), 2, stride=3, what=" (stride 3 > kernel 2: pixels no window covers stay 0)")
expect_fold(torch.randn(2, 9, 9), (5, 5), 3, dilation=2, padding=2,
            what=" (dilation 2 and padding 2: the padding's share is cut off)")
expect_fold(torch.randn(1, 8, 4), (3, 3), 2, padding=(1, 0), stride=(2, 1), what=" (padding (1, 0))")
expect_fold(torch.randn(2, 7, 12), (4, 5), 2, what=" (7 rows for a 2×2 kernel: torch raises RuntimeError)")
expect_fold(torch.randn(2, 8, 11), (4, 5), 2, what=" (11 columns where 12 windows fit: torch raises RuntimeError)")
x, w, b = torch.randn(2, 4, 6, 7), torch.randn(6, 4, 3, 3), torch.randn(6)
expect_conv(x, w, b, grad=True, what=" and its gradients")
expect_conv(torch.randn(3, 16, 28, 28).double(), torch.randn(4, 16, 3, 3).double(), torch.randn(4).double(), grad=True,
            padding=1, what=" and its gradients (im2col matrices of 0.9 MB an image: the batch in several cache_batches)")
expect_conv(x, w, b, grad=True, stride=2, what=" and its gradients (stride 2)")
expect_conv(x, torch.randn(6, 4, 2, 2), b, grad=True, stride=3,
            what=" and its gradients (stride 3 > kernel 2: the pixels no window sees get 0)")
expect_conv(x, w, b, grad=True, padding=2, what=" and its gradients (padding 2)")
expect_conv(x, w, b, grad=True, dilation=(2, 1), padding=1, what=" and its gradients (dilation (2, 1), padding 1)")
expect_conv(x, torch.randn(6, 2, 3, 3), b, grad=True, groups=2, what=" and its gradients (groups 2)")
expect_conv(x, torch.randn(6, 4, 2, 2), grad=True, padding="same", what=" and its gradients (padding 'same', 2×2)")
expect_conv(x.transpose(2, 3), w, grad=True, what=" and its gradients (a transposed input, no bias)")
expect_conv(x[1], w, b, grad=True, what=" and its gradients (a 3-D input)")
expect_conv(x.contiguous(memory_format=torch.channels_last), w, b, grad=True, padding=1,
            what=" and its gradients (a channels-last input: the gradient through the result's copy too)")
for mask in [(True, False, False), (False, True, False), (False, False, True), (True, True, False)]:
    expect_mask(x, w, b, mask, f"convolution_backward_cpu(g, x, w, ..., output_mask={mask})")
with LoggingMode() as log:
    y = conv2d(ours(x, True), ours(w, True), ours(b, True))
    y.sum().backward()
if "convolution_backward" not in log:
    raise AssertionError(f"backward of conv2d(x, w, b) called the operators {log}: it must call the operator "
                         "'convolution_backward' (torch's aten::convolution_backward)")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_fold(draw):
    (kh, kw), (dh, dw) = (draw(1, 3), draw(1, 3)), (draw(1, 2), draw(1, 2))
    (ph, pw), (sh, sw) = (draw(0, 2), draw(0, 1)), (draw(1, 4), draw(1, 3))
    h, w = draw(dh * (kh - 1) + 1, 7), draw(dw * (kw - 1) + 1, 7)
    length = conv_output_size(h, kh, sh, ph, dh) * conv_output_size(w, kw, sw, pw, dw)
    cols = draw.noncontiguous(draw.randn((draw(1, 2), draw(1, 3) * kh * kw, length)))
    expect_fold(cols, (h, w), (kh, kw), dilation=(dh, dw), padding=(ph, pw), stride=(sh, sw))


def random_conv_grad(draw):
    groups = draw.choice([1, 1, 2])
    n, c, o = draw(1, 3), groups * draw(1, 3), groups * draw(1, 3)
    kh, kw = draw(1, 3), draw(1, 3)
    dtype = draw.choice([torch.float32, torch.float64])
    x = draw.noncontiguous(draw.randn((n, c, draw(3, 8), draw(3, 8)), dtype=dtype))
    w = draw.noncontiguous(draw.randn((o, c // groups, kh, kw), dtype=dtype))
    b = draw.randn((o,), dtype=dtype) if draw.coin() else None
    kwargs = dict(groups=groups, padding=(draw(0, 2), draw(0, 1)), stride=(draw(1, 4), draw(1, 3)),
                  dilation=(draw(1, 2), draw(1, 2)))
    if draw.coin(4):
        kwargs.update(padding="same", stride=1)
    expect_conv(x, w, b, draw=draw, grad=True, **kwargs)


for_random_inputs(random_fold, 15)
for_random_inputs(random_conv_grad, 20)
### END HIDDEN TESTS

# %% [markdown]
# ## 6. Pooling
#
# A pooling layer shrinks an image by summarising each window: its maximum
# (`max_pool2d`) or its mean (`avg_pool2d`). The windows are the same view
# again; `stride` defaults to the kernel size (windows side by side).
#
# **Max pooling** keeps, for each window, its largest value and **where** it
# was: `indices`, torch's flat position `row·W + col` in the input's `H × W`
# plane (`return_indices=True`). When a window holds the maximum twice, torch
# keeps the **first** in the window's row-major order (and a NaN beats any
# number). Padding is `-inf`, never a maximum. Its backward sends each
# output's gradient to the pixel its index names — and adds, where windows
# that overlap chose the same pixel.
#
# The operators: `"max_pool2d"` (the value; its autograd kernel
# `MaxPool2dFunction` is given) and `"max_pool2d_with_indices"` (value and
# indices: torch's `aten::max_pool2d_with_indices`), both computed by your
# `max_pool2d_cpu(x, kernel, stride, padding, dilation)`, which returns
# `(out, indices)`; the backward `max_pool2d_backward_cpu(grad, input,
# indices)`. Torch's errors (`RuntimeError`): a padding more than half the
# (dilated) kernel, and no window fitting ("Output size is too small").
#
# **`ceil_mode`.** By default the count of windows rounds down, as for a
# convolution: a last strip too narrow for a whole window is dropped. With
# `ceil_mode=True` it rounds **up**, and the last window hangs over the
# right (bottom) edge — but only if it **starts** inside the image or its
# left padding; a window that would start in the right padding is dropped
# again. Write `pool_output_size(size, kernel, stride, padding, dilation,
# ceil_mode)` for that count (the given `pool_arguments` calls it) and
# `overhang(size, kernel, stride, padding, dilation, count)`, how far the
# last of `count` windows reaches past the padded image (0 if it does not);
# your max-pool kernel pads that much more `-inf` on the right and bottom.
# The overhang is not the image: it is never a maximum, and never counted in
# an average.
#
# **Average pooling** is a convolution: each channel on its own, with a
# kernel of ones everywhere — the window's sum — divided by how many pixels
# the window counts. Write `avg_pool2d` as that composite of your `conv2d`
# (autograd then comes for free). A window counts its pixels inside the
# padded image: `kH·kW`, except where `ceil_mode`'s overhang cuts it. With
# `count_include_pad=False`, only the real pixels count, not the padding's
# zeros. Both counts are separable: a window's count is its rows' count
# times its columns' count, a product of two small NumPy vectors.
#
# Real PyTorch: [`DilatedMaxPool2d.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/DilatedMaxPool2d.cpp),
# [`AveragePool2d.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/AveragePool2d.cpp),
# the shape checks in [`Pool.h`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/Pool.h).

# %% reference=true
@register("max_pool2d")
class MaxPool2dFunction(Function):
    """The Autograd kernel of "max_pool2d": the forward keeps the indices for the backward."""

    @staticmethod
    def forward(ctx, x, kernel, stride, padding, dilation, ceil_mode=False):
        out, ctx.indices = redispatch("max_pool2d_with_indices", DispatchKey.Autograd, x, kernel, stride, padding,
                                      dilation, ceil_mode)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return dispatch("max_pool2d_with_indices_backward", grad, x, ctx.indices), None, None, None, None, None


def pool_arguments(x: Tensor, kernel_size, stride, padding, dilation=1, ceil_mode: bool = False) -> tuple:
    """(kernel, stride, padding, dilation) as pairs, with torch's checks of a pooling's arguments."""
    kernel = pair(kernel_size, "kernel_size")
    stride = kernel if stride is None or stride == () else pair(stride, "stride")
    padding, dilation = pair(padding, "padding"), pair(dilation, "dilation")
    if x.dim() != 4:
        raise RuntimeError(f"non-empty 3D or 4D input tensor expected; got input of size {list(x.shape)}")
    for k, p, d in zip(kernel, padding, dilation):
        if p > ((k - 1) * d + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={p}, "
                               f"kernel_size={k} and dilation={d}")
    sizes = [pool_output_size(x.shape[2 + i], kernel[i], stride[i], padding[i], dilation[i], ceil_mode)
             for i in range(2)]
    if min(sizes) < 1:
        raise RuntimeError(f"Given input size: ({'x'.join(map(str, x.shape[1:]))}). Calculated output size: "
                           f"({x.shape[1]}x{sizes[0]}x{sizes[1]}). Output size is too small")
    return kernel, stride, padding, dilation


def unbatched(function, x: Tensor, *args):
    """function(x, *args) for a batch (4-D x), or for one image (3-D x: a batch of one, taken off again)."""
    if x.dim() == 3:
        out = function(x.unsqueeze(0), *args)
        return tuple(o.squeeze(0) for o in out) if isinstance(out, tuple) else out.squeeze(0)
    return function(x, *args)


# %% solution="ex_pool" reference=true
def pool_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool) -> int:
    """How many pooling windows fit along one dim: rounded down, or up with ceil_mode (torch's
    pooling_output_shape)."""
    ### BEGIN SOLUTION
    span = dilation * (kernel - 1) + 1
    count = (size + 2 * padding - span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (count - 1) * stride >= size + padding:
        count -= 1  # the last window would start in the right padding: dropped
    return count
    ### END SOLUTION


def overhang(size: int, kernel: int, stride: int, padding: int, dilation: int, count: int) -> int:
    """How far the last of `count` windows reaches past the padded image (ceil_mode's overhang), 0 if it does not."""
    ### BEGIN SOLUTION
    return max((count - 1) * stride + dilation * (kernel - 1) + 1 - (size + 2 * padding), 0)
    ### END SOLUTION


@register_kernel("max_pool2d_with_indices", DispatchKey.CPU)
def max_pool2d_cpu(x: Tensor, kernel, stride, padding, dilation, ceil_mode: bool = False) -> tuple:
    """(out, indices): each window's maximum, and its flat position row * W + col in x's H x W plane."""
    ### BEGIN SOLUTION
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    n, c, h, w = x.shape
    ho, wo = pool_output_size(h, kh, sh, ph, dh, ceil_mode), pool_output_size(w, kw, sw, pw, dw, ceil_mode)
    padded = pad(x, (pw, pw, ph, ph), float("-inf")) if ph or pw else x
    below, right = overhang(h, kh, sh, ph, dh, ho), overhang(w, kw, sw, pw, dw, wo)
    if below or right:  # ceil_mode: the last windows hang over the edge, into more -inf
        padded = pad(padded, (0, right, 0, below), float("-inf"))
    windows = unfold_view(padded, kernel, dilation, 0, stride).numpy()[:, :, :ho, :wo]
    flat = windows.reshape(n, c, ho, wo, kh * kw)
    best = flat.argmax(axis=-1)  # the first maximum in row-major order (and the first NaN), as torch
    out = np.take_along_axis(flat, best[..., None], axis=-1)[..., 0]
    p, q = np.divmod(best, kw)
    rows = np.arange(ho)[:, None] * sh + p * dh - ph
    cols = np.arange(wo)[None, :] * sw + q * dw - pw
    return from_numpy(out), from_numpy((rows * w + cols).astype(np.int64))
    ### END SOLUTION


@register_kernel("max_pool2d", DispatchKey.CPU)
def max_pool2d_value_cpu(x: Tensor, kernel, stride, padding, dilation, ceil_mode: bool = False) -> Tensor:
    return max_pool2d_cpu(x, kernel, stride, padding, dilation, ceil_mode)[0]


@register_kernel("max_pool2d_with_indices_backward", DispatchKey.CPU)
def max_pool2d_backward_cpu(grad: Tensor, input: Tensor, indices: Tensor) -> Tensor:
    """The gradient of the input: each output's gradient added to the pixel its index names."""
    ### BEGIN SOLUTION
    n, c, h, w = input.shape
    g, where = grad.numpy().reshape(n * c, -1), indices.numpy().reshape(n * c, -1)
    flat = (np.arange(n * c)[:, None] * (h * w) + where).ravel()
    sums = np.bincount(flat, weights=g.ravel(), minlength=n * c * h * w)  # adds where windows chose one pixel
    return from_numpy(sums.astype(g.dtype).reshape(n, c, h, w))
    ### END SOLUTION


def max_pool2d(x: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """F.max_pool2d: the output, or (output, indices) with return_indices."""
    ### BEGIN SOLUTION
    def batched(t):
        args = pool_arguments(t, kernel_size, stride, padding, dilation, ceil_mode) + (ceil_mode,)
        out = dispatch("max_pool2d", t, *args)
        return (out, dispatch("max_pool2d_with_indices", t, *args)[1]) if return_indices else out
    return unbatched(batched, x)
    ### END SOLUTION


def avg_pool2d(x: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """F.avg_pool2d: each channel's window sums (a convolution with a kernel of ones) over each window's count."""
    ### BEGIN SOLUTION
    def batched(t):
        kernel, steps, pads, _ = pool_arguments(t, kernel_size, stride, padding, 1, ceil_mode)
        n, c, h, w = t.shape
        counts, overhangs = [], []
        for size, k, s, p in zip((h, w), kernel, steps, pads):
            count = pool_output_size(size, k, s, p, 1, ceil_mode)
            starts = np.arange(count) * s - p
            ends = np.minimum(starts + k, size + p)  # the overhang past the padding never counts
            if not count_include_pad:
                starts, ends = np.maximum(starts, 0), np.minimum(ends, size)
            counts.append(ends - starts)
            overhangs.append(overhang(size, k, s, p, 1, count))
        flat = t.reshape(n * c, 1, h, w)
        if overhangs != [0, 0]:
            flat = pad(flat, (0, overhangs[1], 0, overhangs[0]))
        dtype = t.dtype.numpy
        sums = conv2d(flat, from_numpy(np.ones((1, 1) + kernel, dtype=dtype)), None, steps, pads)
        out = sums / from_numpy(np.outer(counts[0], counts[1]).astype(dtype))
        return out.reshape(n, c, out.shape[2], out.shape[3])
    return unbatched(batched, x)
    ### END SOLUTION


# %% tests="ex_pool" points=3
def expect_pool(ours_fn, torch_fn, x: torch.Tensor, what: str, draw=inputs, grad=True) -> None:
    same_call(lambda t: (ours_fn if isinstance(t, Tensor) else torch_fn)(t), [x], what, ours=ours, grad=grad, draw=draw)


x = torch.randn(2, 3, 6, 7)
expect_pool(lambda t: max_pool2d(t, 2), lambda t: F.max_pool2d(t, 2), x, "max_pool2d(x, 2)")
expect_pool(lambda t: max_pool2d(t, 3, 2, 1), lambda t: F.max_pool2d(t, 3, 2, 1), x,
            "max_pool2d(x, 3, stride=2, padding=1) (the padding is -inf, never a maximum)")
expect_pool(lambda t: max_pool2d(t, 3, 1), lambda t: F.max_pool2d(t, 3, 1), x,
            "max_pool2d(x, 3, stride=1) (overlapping windows: a pixel's gradient adds every window that chose it)")
expect_pool(lambda t: max_pool2d(t, 2, dilation=2), lambda t: F.max_pool2d(t, 2, dilation=2), x,
            "max_pool2d(x, 2, dilation=2)")
expect_pool(lambda t: max_pool2d(t, (2, 3), 1, return_indices=True)[1],
            lambda t: F.max_pool2d(t, (2, 3), 1, return_indices=True)[1], x,
            "max_pool2d(x, (2, 3), 1, return_indices=True)[1] (the indices: row * W + col in x's plane)", grad=False)
expect_pool(lambda t: max_pool2d(t, 3, 2, 1, return_indices=True)[1],
            lambda t: F.max_pool2d(t, 3, 2, 1, return_indices=True)[1], x,
            "max_pool2d(x, 3, 2, padding=1, return_indices=True)[1] (indices count from the unpadded image)", grad=False)
ties = torch.tensor([[[[1.0, 3.0, 3.0, 0.0], [3.0, 2.0, 3.0, 3.0], [0.0, 0.0, 5.0, 5.0]]]])
expect_pool(lambda t: max_pool2d(t, 2, 1, return_indices=True)[1],
            lambda t: F.max_pool2d(t, 2, 1, return_indices=True)[1], ties,
            "max_pool2d(x, 2, 1, return_indices=True)[1] for windows with tied maxima (torch keeps the first)", grad=False)
expect_pool(lambda t: max_pool2d(t, 2, 1), lambda t: F.max_pool2d(t, 2, 1), ties,
            "max_pool2d(x, 2, 1) and its gradient for windows with tied maxima")
expect_pool(lambda t: max_pool2d(t, 2), lambda t: F.max_pool2d(t, 2), x[0], "max_pool2d(x, 2) for a 3-D x (C, H, W)")
expect_pool(lambda t: max_pool2d(t, 2, padding=2), lambda t: F.max_pool2d(t, 2, padding=2), x,
            "max_pool2d(x, 2, padding=2) (more than half the kernel: RuntimeError)")
expect_pool(lambda t: max_pool2d(t, 7), lambda t: F.max_pool2d(t, 7), x,
            "max_pool2d(x, 7) on a 6×7 image (no window fits: RuntimeError)")
expect_pool(lambda t: avg_pool2d(t, 2), lambda t: F.avg_pool2d(t, 2), x, "avg_pool2d(x, 2)")
expect_pool(lambda t: avg_pool2d(t, 3, 2, 1), lambda t: F.avg_pool2d(t, 3, 2, 1), x,
            "avg_pool2d(x, 3, 2, padding=1) (count_include_pad=True: the zeros count)")
expect_pool(lambda t: avg_pool2d(t, 3, 2, 1, count_include_pad=False),
            lambda t: F.avg_pool2d(t, 3, 2, 1, count_include_pad=False), x,
            "avg_pool2d(x, 3, 2, padding=1, count_include_pad=False) (divide by the real pixels only)")
expect_pool(lambda t: avg_pool2d(t, (2, 3), (1, 2)), lambda t: F.avg_pool2d(t, (2, 3), (1, 2)), x.transpose(2, 3),
            "avg_pool2d(x, (2, 3), (1, 2)) of a transposed x")
expect_pool(lambda t: avg_pool2d(t, 2, padding=2), lambda t: F.avg_pool2d(t, 2, padding=2), x,
            "avg_pool2d(x, 2, padding=2) (more than half the kernel: RuntimeError)")
for size, kernel, stride, padding, ceil in [(7, 2, 2, 0, True), (6, 3, 2, 1, True), (5, 2, 2, 1, True),
                                            (6, 3, 2, 1, False), (4, 2, 3, 1, True), (7, 3, 3, 1, True)]:
    args = (size, kernel, stride, padding, 1, ceil)
    compare.assert_equal(call_yours(f"pool_output_size{args}", pool_output_size, *args),
                         F.max_pool2d(torch.zeros(1, 1, 1, size), (1, kernel), (1, stride), (0, padding),
                                      ceil_mode=ceil).shape[-1],
                         f"pool_output_size{args} (the windows torch's max_pool2d makes"
                         f"{': rounded up, but a window never starts in the right padding' if ceil else ''})")
below = -x.abs() - 1  # every pixel negative: a zero in the overhang would beat them all
expect_pool(lambda t: max_pool2d(t, 2, ceil_mode=True), lambda t: F.max_pool2d(t, 2, ceil_mode=True), below,
            "max_pool2d(x, 2, ceil_mode=True) of a 6×7 x (one more column of windows, over the edge; the overhang is -inf)")
expect_pool(lambda t: max_pool2d(t, 3, 2, 1, ceil_mode=True, return_indices=True)[1],
            lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=True, return_indices=True)[1], x,
            "max_pool2d(x, 3, 2, padding=1, ceil_mode=True, return_indices=True)[1]", grad=False)
expect_pool(lambda t: max_pool2d(t, 2, 2, 1, ceil_mode=True), lambda t: F.max_pool2d(t, 2, 2, 1, ceil_mode=True),
            x[:, :, :5, :5], "max_pool2d(x, 2, 2, padding=1, ceil_mode=True) of a 5×5 x (a window would start in the "
            "right padding: dropped)")
expect_pool(lambda t: avg_pool2d(t, 2, ceil_mode=True), lambda t: F.avg_pool2d(t, 2, ceil_mode=True), x,
            "avg_pool2d(x, 2, ceil_mode=True) of a 6×7 x (the last column's windows count 2 pixels, not 4)")
expect_pool(lambda t: avg_pool2d(t, 3, 2, 1, ceil_mode=True), lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True),
            x[:, :, :6, :6], "avg_pool2d(x, 3, 2, padding=1, ceil_mode=True) (the padding counts, the overhang not)")
expect_pool(lambda t: avg_pool2d(t, 3, 2, 1, True, count_include_pad=False),
            lambda t: F.avg_pool2d(t, 3, 2, 1, True, count_include_pad=False), x,
            "avg_pool2d(x, 3, 2, padding=1, ceil_mode=True, count_include_pad=False)")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_pool(draw):
    x = draw.randn((draw(1, 2), draw(1, 3), draw(2, 7), draw(2, 7)), dtype=draw.choice([torch.float32, torch.float64]))
    if draw.coin(3):
        x = torch.randint(-2, 3, tuple(x.shape), generator=draw.generator()).to(x.dtype)  # many ties
    x = draw.noncontiguous(x)
    kernel = (draw(1, 3), draw(1, 3)) if draw.coin() else draw(1, 3)
    stride = draw.choice([None, draw(1, 3), (draw(1, 3), draw(1, 2))])
    k = pair(kernel, "kernel")
    padding = (draw(0, k[0] // 2), draw(0, k[1] // 2)) if draw.coin() else 0
    dilation = draw.choice([1, 1, 2])
    args = f"x, {kernel}, {stride}, {padding}"
    expect_pool(lambda t: max_pool2d(t, kernel, stride, padding, dilation),
                lambda t: F.max_pool2d(t, kernel, stride, padding, dilation), x, f"max_pool2d({args}, {dilation})",
                draw)
    ceil = draw.coin()
    expect_pool(lambda t: max_pool2d(t, kernel, stride, padding, dilation, ceil, return_indices=True)[1],
                lambda t: F.max_pool2d(t, kernel, stride, padding, dilation, ceil, return_indices=True)[1], x,
                f"max_pool2d({args}, {dilation}, ceil_mode={ceil}, return_indices=True)[1]", draw, grad=False)
    expect_pool(lambda t: max_pool2d(t, kernel, stride, padding, dilation, ceil),
                lambda t: F.max_pool2d(t, kernel, stride, padding, dilation, ceil), x,
                f"max_pool2d({args}, {dilation}, ceil_mode={ceil})", draw)
    include = draw.coin()
    expect_pool(lambda t: avg_pool2d(t, kernel, stride, padding, ceil, include),
                lambda t: F.avg_pool2d(t, kernel, stride, padding, ceil, count_include_pad=include), x,
                f"avg_pool2d({args}, ceil_mode={ceil}, count_include_pad={include})", draw)


for_random_inputs(random_pool, 30)
### END HIDDEN TESTS

# %% [markdown]
# ### Adaptive average pooling
#
# A classifier's head must not care about the image's size: **adaptive**
# pooling is given the output's size, `(out_H, out_W)`, and chooses the
# windows. Output row `i` of `out_H` averages the input rows from
# $\lfloor i \cdot H / \text{out}_H \rfloor$ up to (not including)
# $\lceil (i + 1) \cdot H / \text{out}_H \rceil$: windows that tile the image,
# of unequal sizes when `H` is not a multiple of `out_H`, overlapping by a row
# where they must, and repeating rows when `out_H > H`. The same along the
# columns. `AdaptiveAvgPool2d((1, 1))` is the global average of each channel.
#
# The windows' rows do not depend on their columns: the average is
# **separable**. With `A` the `(out_H, H)` matrix whose row `i` holds
# `1/size` over window `i`'s rows (zeros elsewhere), and `B` the same
# `(out_W, W)` matrix for the columns,
#
# $$\text{out}[n, c] = A \; x[n, c] \; B^\top$$
#
# two matrix products of chapter 01's broadcasting `@`, whose backward
# autograd already knows. Write `adaptive_avg_pool2d(x, output_size)` so
# (`output_size` an int, or a pair in which `None` keeps the input's size;
# a 3-D `x` is one image) and the module `AdaptiveAvgPool2d(output_size)`
# (`repr` `AdaptiveAvgPool2d(output_size=(2, 3))`). Torch's errors
# (`RuntimeError`): an input that is not 3-D or 4-D, an empty non-batch
# dim, an `output_size` of other than two values or with a negative one.
#
# Real PyTorch: `start_index`/`end_index` in [`AdaptiveAveragePooling.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/AdaptiveAveragePooling.cpp)
# (there a loop over each window; here two products).

# %% solution="ex_adaptive" reference=true
from picotorch import Module


def averaging_matrix(size: int, out: int, dtype) -> np.ndarray:
    """The (out, size) matrix whose row i averages adaptive window i: 1/len over [floor(i*size/out),
    ceil((i+1)*size/out))."""
    ### BEGIN SOLUTION
    matrix = np.zeros((out, size), dtype=dtype)
    for i in range(out):
        start, end = (i * size) // out, -(-((i + 1) * size) // out)
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix
    ### END SOLUTION


def adaptive_avg_pool2d(x: Tensor, output_size) -> Tensor:
    """F.adaptive_avg_pool2d: the average of each adaptive window, as A @ x @ B^T."""
    ### BEGIN SOLUTION
    if x.dim() not in (3, 4):
        raise RuntimeError(f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got {list(x.shape)}")
    size = (output_size, output_size) if isinstance(output_size, int) or output_size is None else tuple(output_size)
    if len(size) != 2:
        raise RuntimeError("adaptive_avg_pool2d: output_size must be 2")
    h, w = x.shape[-2:]
    out_h, out_w = h if size[0] is None else size[0], w if size[1] is None else size[1]
    if out_h < 0 or out_w < 0:
        raise RuntimeError("adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0")
    if 0 in x.shape[x.dim() - 3:]:
        raise RuntimeError(f"adaptive_avg_pool2d(): Expected input to have non-zero size for non-batch dimensions, "
                           f"but input has sizes {list(x.shape)}")
    rows = from_numpy(averaging_matrix(h, out_h, x.dtype.numpy))
    cols = from_numpy(averaging_matrix(w, out_w, x.dtype.numpy).T.copy())
    return rows @ x @ cols
    ### END SOLUTION


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size):
        super().__init__()
        ### BEGIN SOLUTION
        self.output_size = output_size
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return adaptive_avg_pool2d(x, self.output_size)
        ### END SOLUTION

    def extra_repr(self) -> str:
        ### BEGIN SOLUTION
        return f"output_size={self.output_size}"
        ### END SOLUTION


# %% tests="ex_adaptive" points=2
def expect_adaptive(x: torch.Tensor, output_size, what="", draw=inputs) -> None:
    expect_pool(lambda t: adaptive_avg_pool2d(t, output_size), lambda t: F.adaptive_avg_pool2d(t, output_size), x,
                f"adaptive_avg_pool2d(x, {output_size!r}) for x: {describe(x)}{what}", draw)


x = torch.randn(2, 3, 6, 8)
expect_adaptive(x, (3, 4), " (the sizes divide: windows side by side, as avg_pool2d(x, 2))")
expect_adaptive(x, (4, 3), " (6 rows into 4: windows [0, 2), [1, 3), [3, 5), [4, 6) of unequal overlap)")
expect_adaptive(x[:, :, :5, :7], (2, 3), " (5 rows into 2: [0, 3) and [2, 5) share row 2)")
expect_adaptive(x, 1, " (an int: the global average of each channel)")
expect_adaptive(x, (2, None), " (None keeps the input's width)")
expect_adaptive(x[:, :, :3, :2], (5, 4), " (more outputs than inputs: rows and columns repeat)")
expect_adaptive(x.transpose(2, 3), (3, 2), " (a transposed x)")
expect_adaptive(x[0], (4, 5), " (a 3-D x (C, H, W): one image)")
expect_adaptive(x.double(), (4, 5), " (float64)")
expect_adaptive(x[:0], (2, 2), " (an empty batch)")
for bad, why in [((2, 3, 4), "three values"), (-1, "a negative size")]:
    expect_adaptive(x, bad, f" ({why}: torch raises RuntimeError)")
expect_adaptive(x[:, :, :0], 2, " (an image with no rows: RuntimeError)")
expect_adaptive(x[0, 0], 2, " (a 2-D x: RuntimeError)")
for size in [2, (2, 3), (3, None)]:
    compare.assert_equal(repr(AdaptiveAvgPool2d(size)), repr(torch.nn.AdaptiveAvgPool2d(size)),
                         f"repr(AdaptiveAvgPool2d({size!r}))")
layer = AdaptiveAvgPool2d((2, 3))
same_call(lambda t: (layer if isinstance(t, Tensor) else torch.nn.AdaptiveAvgPool2d((2, 3)))(t), [x],
          "AdaptiveAvgPool2d((2, 3))(x)", ours=ours, grad=True)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_adaptive(draw):
    x = draw.randn((draw(1, 3), draw(1, 3), draw(1, 9), draw(1, 9)), dtype=draw.choice([torch.float32, torch.float64]))
    x = draw.noncontiguous(x)
    size = draw.choice([draw(1, 6), (draw(1, 6), draw(1, 6)), (None, draw(1, 5)), (draw(1, 5), None)])
    expect_adaptive(x if draw(0, 3) else x[0], size, draw=draw)


for_random_inputs(random_adaptive, 25)
### END HIDDEN TESTS

# %% [markdown]
# ## 7. Layers, and a CNN on the digits
#
# The modules around the functions, with torch's parameters, defaults and
# `repr`:
#
# - `Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=0,
#   dilation=1, groups=1, bias=True, dtype=None)`: `weight` of shape
#   `(out, in/groups, kH, kW)` and `bias` of shape `(out,)`, initialised as
#   torch does (`reset_parameters`: chapter 03's `kaiming_uniform_(weight,
#   a=√5)`, then the bias uniform in `±1/√fan_in`, `fan_in = in/groups·kH·kW`);
#   `kernel_size`, `stride`, `dilation` kept as pairs, `padding` as a pair or
#   its string; `repr` as torch's: `Conv2d(1, 4, kernel_size=(3, 3),
#   stride=(1, 1))`, then `padding=...`, `dilation=...`, `groups=...`,
#   `bias=False` only where they differ from the defaults. Torch refuses
#   `groups` that do not divide both channel counts (`ValueError`);
# - `MaxPool2d(kernel_size, stride=None, padding=0, dilation=1,
#   return_indices=False, ceil_mode=False)` and `AvgPool2d(kernel_size,
#   stride=None, padding=0, ceil_mode=False, count_include_pad=True)`,
#   whose `stride` is the kernel size when not given; `repr`
#   `MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1,
#   ceil_mode=False)` and `AvgPool2d(kernel_size=2, stride=2, padding=0)`.
#
# Then they make a small LeNet-style network for chapter 04's 8×8 digits,
# which the tests load from a torch `state_dict`: the same logits, the same
# gradients for every parameter.
#
# Real PyTorch: [`torch/nn/modules/conv.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/conv.py),
# [`torch/nn/modules/pooling.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/pooling.py).

# %% solution="ex_layers" reference=true
from picotorch import Module, Parameter, dtype_arg, empty, float32, kaiming_uniform_, no_grad


class Conv2d(Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, dtype=None):
        super().__init__()
        ### BEGIN SOLUTION
        if in_channels % groups or out_channels % groups:
            raise ValueError("in_channels and out_channels must be divisible by groups")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride = pair(kernel_size, "kernel_size"), pair(stride, "stride")
        self.padding = padding if isinstance(padding, str) else pair(padding, "padding")
        self.dilation = pair(dilation, "dilation")
        dtype = dtype_arg(dtype) or float32
        self.weight = Parameter(empty(out_channels, in_channels // groups, *self.kernel_size, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        ### END SOLUTION

    def reset_parameters(self) -> None:
        ### BEGIN SOLUTION
        kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * self.kernel_size[0] * self.kernel_size[1]
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            with no_grad():
                self.bias.uniform_(-bound, bound)
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        ### END SOLUTION

    def extra_repr(self) -> str:
        ### BEGIN SOLUTION
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s
        ### END SOLUTION


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False):
        super().__init__()
        ### BEGIN SOLUTION
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                          self.return_indices)
        ### END SOLUTION

    def extra_repr(self) -> str:
        ### BEGIN SOLUTION
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")
        ### END SOLUTION


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True):
        super().__init__()
        ### BEGIN SOLUTION
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.ceil_mode, self.count_include_pad = padding, ceil_mode, count_include_pad
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)
        ### END SOLUTION

    def extra_repr(self) -> str:
        ### BEGIN SOLUTION
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
        ### END SOLUTION


# %% tests="ex_layers" points=3
import picotorch
from course.datasets import load_digits

OUR_NN = type("nn", (), {name: getattr(picotorch, name) for name in ("Sequential", "ReLU", "Flatten", "Linear")})
for layer in (Conv2d, MaxPool2d, AvgPool2d):
    setattr(OUR_NN, layer.__name__, layer)


def expect_same_init(make, what: str, seed: int) -> None:
    """make(nn) in both worlds after the same seed: the same state_dict keys, shapes and values, and repr."""
    torch.manual_seed(seed)
    theirs = make(torch.nn)
    torch.manual_seed(seed)
    mine = call_yours_safely(make, what)
    compare.assert_equal(list(mine.state_dict()), list(theirs.state_dict()), f"the keys of {what}.state_dict()")
    for key, value in theirs.state_dict().items():
        compare.assert_matches(mine.state_dict()[key], value, f"{what}.state_dict()[{key!r}] after "
                               f"torch.manual_seed({seed}) (torch's initialisation, exactly)")
    compare.assert_equal(repr(mine), repr(theirs), f"repr({what})")


def call_yours_safely(make, what: str):
    try:
        return make(OUR_NN)
    except NotImplementedError:
        raise
    except Exception as e:
        raise AssertionError(f"{what} raised {type(e).__name__} ({e}), but torch builds it{inputs.replay_hint()}")


def expect_same_model(make, x: torch.Tensor, what: str, draw=inputs) -> None:
    """torch's model, its state_dict loaded into yours: the same output on x, the same gradient of every parameter."""
    theirs = make(torch.nn)
    mine = call_yours_safely(make, what)
    mine.load_state_dict(theirs.state_dict())
    out_theirs, out = theirs(x), mine(ours(x))
    compare.assert_matches(out, out_theirs.detach(), f"{what}(x) for x: {describe(x)}, with torch's state_dict")
    if not out_theirs.requires_grad:  # a layer without parameters: nothing more to compare
        return
    g = draw.randn(tuple(out_theirs.shape))
    out_theirs.backward(g)
    out.backward(ours(g))
    params = dict(mine.named_parameters())
    for name, p in theirs.named_parameters():
        compare.assert_matches(params[name].grad, p.grad, f"{what}.{name}.grad after backward(g)")


def lenet(nn):
    return nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 12, 3, padding="same"),
                         nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(), nn.Linear(48, 10))


expect_same_init(lambda nn: nn.Conv2d(1, 4, 3), "Conv2d(1, 4, 3)", 0)
expect_same_init(lambda nn: nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, dilation=2, groups=2, bias=False),
                 "Conv2d(4, 6, (3, 2), stride=2, padding=1, dilation=2, groups=2, bias=False)", 1)
expect_same_init(lambda nn: nn.Conv2d(2, 3, 5, padding="same"), "Conv2d(2, 3, 5, padding='same')", 2)
expect_same_init(lambda nn: nn.MaxPool2d(2), "MaxPool2d(2)", 0)
expect_same_init(lambda nn: nn.MaxPool2d(3, 1, 1), "MaxPool2d(3, 1, 1)", 0)
expect_same_init(lambda nn: nn.AvgPool2d(2), "AvgPool2d(2)", 0)
expect_same_init(lambda nn: nn.AvgPool2d((2, 3), 1, 1, count_include_pad=False),
                 "AvgPool2d((2, 3), 1, 1, count_include_pad=False)", 0)
expect_same_model(lambda nn: nn.AvgPool2d(3, 2, 1, count_include_pad=False), torch.randn(2, 3, 6, 5),
                  "AvgPool2d(3, 2, 1, count_include_pad=False)")
expect_same_init(lambda nn: nn.MaxPool2d(2, ceil_mode=True), "MaxPool2d(2, ceil_mode=True)", 0)
expect_same_model(lambda nn: nn.MaxPool2d(2, ceil_mode=True), torch.randn(2, 3, 5, 5), "MaxPool2d(2, ceil_mode=True)")
expect_same_model(lambda nn: nn.AvgPool2d(2, 2, 0, True), torch.randn(2, 3, 5, 5),
                  "AvgPool2d(2, 2, 0, True) (the fourth argument is ceil_mode, as torch's)")
compare.assert_raises(ValueError, Conv2d, "Conv2d(3, 4, 3, groups=2) (groups must divide both channel counts)",
                      3, 4, 3, groups=2)
expect_same_model(lambda nn: nn.Conv2d(3, 4, 3, stride=2, padding=1), torch.randn(2, 3, 7, 6),
                  "Conv2d(3, 4, 3, stride=2, padding=1)")
images = torch.from_numpy(load_digits(split=False)[0][:32]).reshape(32, 1, 8, 8)
expect_same_model(lenet, images, "a LeNet on 32 digits")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_layers(draw):
    groups = draw.choice([1, 1, 2])
    i, o = groups * draw(1, 3), groups * draw(1, 3)
    kernel = (draw(1, 3), draw(1, 3))
    kwargs = dict(stride=draw(1, 2), padding=draw.choice([0, 1, (1, 0)]), dilation=draw(1, 2), groups=groups,
                  bias=draw.coin())
    text = f"Conv2d({i}, {o}, {kernel}, " + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"
    make = (lambda nn: nn.Conv2d(i, o, kernel, **kwargs))
    expect_same_init(make, text, draw(0, 10 ** 6))
    x = draw.noncontiguous(draw.randn((draw(1, 3), i, draw(5, 8), draw(5, 8))))
    expect_same_model(make, x, text, draw)


for_random_inputs(random_layers, 10)
### END HIDDEN TESTS

# %% [markdown]
# ### One operator for the normalisation
#
# Chapter 03's `BatchNorm1d` is a composition: a mean, a subtraction, a
# square, another mean, a square root, a division, a scale and a shift —
# about twenty operator calls, a dozen of them recorded by autograd, each
# node with its own backward. On the CNN's small images (`8×8`, batches of
# 32) that bookkeeping costs more than the arithmetic: the two
# `BatchNorm2d` layers took 40 % of a training step.
#
# Torch does not compose. `BatchNorm2d.forward` calls `F.batch_norm`, **one
# operator** (`aten::native_batch_norm`), whose backward is **one formula**
# derived by hand (`native_batch_norm_backward` in `derivatives.yaml`). You
# write its two CPU kernels; the autograd kernel `BatchNormFunction`, which
# calls them, the functional `batch_norm` and `channel_dims(x)` (the dims a
# channel's statistics run over, and the shape that broadcasts a channel's
# vector against `x`) are given.
#
# ![Two backward graphs of one training step of batch norm. Left, chapter 03's composition: 11 nodes from the output down (Add, Mul, View, Div, View, Sqrt, Add, Mean, Mul, Sub, Mean) before the leaves x, weight and bias. Right, torch's F.batch_norm: one node, NativeBatchNormBackward0, with an edge to each of x, weight and bias](figures/batch_norm.svg)
#
# **Forward**, `native_batch_norm_cpu(x, weight, bias, running_mean,
# running_var, training, momentum, eps)`: `x` has the channels in dim 1 and
# any number of dims after (`(N, C)`, `(N, C, L)`, `(N, C, H, W)`); each
# channel's statistics are over every other dim, `n` values.
#
# - in **training**: the batch's mean $\mu$ and **biased** variance
#   $\sigma^2$ (divide by `n`); the running statistics, where given, are
#   updated **in place**: `running_mean = (1 − momentum)·running_mean +
#   momentum·μ`, and the same for `running_var` with the **unbiased**
#   variance $\sigma^2 \cdot n / (n - 1)$;
# - in **eval**: $\mu$ and $\sigma^2$ are `running_mean` and `running_var`,
#   and nothing is updated.
#
# Then $\text{invstd} = 1 / \sqrt{\sigma^2 + \varepsilon}$,
# $\hat x = (x - \mu) \cdot \text{invstd}$, and $y = \hat x \cdot w + b$
# (`weight` and `bias` may be `None`: no scale, no shift). Return
# `(y, mean, invstd)` — the two per-channel vectors are what the backward
# needs, in `x`'s dtype.
#
# **Backward**, `native_batch_norm_backward_cpu(grad, x, weight, mean,
# invstd, training, output_mask)` returns `(grad_input, grad_weight,
# grad_bias)`, each `None` where `output_mask` says it is not needed. With
# $g$ the output's gradient and sums over a channel's `n` values:
#
# $$\frac{\partial L}{\partial b} = \sum g, \qquad \frac{\partial L}{\partial w} = \sum g\,\hat x, \qquad
# \frac{\partial L}{\partial x} = w \cdot \text{invstd} \cdot \Bigl(g - \frac{1}{n}\sum g - \hat x \cdot \frac{1}{n}\sum g\,\hat x\Bigr)$$
#
# The two subtracted terms are there because in training $\mu$ and
# $\sigma^2$ are computed **from** `x`: moving one pixel moves every output
# of its channel. In **eval** they are constants, and the map is affine:
# $\partial L / \partial x = w \cdot \text{invstd} \cdot g$. (Without
# `weight`, $w = 1$.)
#
# Real PyTorch: `batch_norm_cpu` and `batch_norm_backward_cpu` in
# [`aten/src/ATen/native/Normalization.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/Normalization.cpp);
# `native_batch_norm` in [`derivatives.yaml`](https://github.com/pytorch/pytorch/blob/main/tools/autograd/derivatives.yaml);
# `F.batch_norm` in [`torch/nn/functional.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/functional.py).

# %% reference=true
from picotorch import size_text


@register("batch_norm")
class BatchNormFunction(Function):
    """The Autograd kernel of "batch_norm": one node, whose backward is one formula."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, training, momentum, eps):
        out, mean, invstd = redispatch("native_batch_norm", DispatchKey.Autograd, x, weight, bias, running_mean,
                                       running_var, training, momentum, eps)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.training = training
        return out

    @staticmethod
    def backward(ctx, grad):
        x, weight, mean, invstd = ctx.saved_tensors
        needs = ctx.needs_input_grad
        grads = dispatch("native_batch_norm_backward", grad, x, weight, mean, invstd, ctx.training, needs[:3])
        return grads + (None,) * 5


def channel_dims(x: Tensor) -> tuple:
    """(the dims a channel's statistics run over, the shape that broadcasts a channel's vector against x)."""
    return (0,) + tuple(range(2, x.dim())), (1, x.shape[1]) + (1,) * (x.dim() - 2)


@register_kernel("batch_norm", DispatchKey.CPU)
def batch_norm_cpu(x, weight, bias, running_mean, running_var, training, momentum, eps) -> Tensor:
    """Without autograd, "batch_norm" is native_batch_norm's output alone."""
    return dispatch("native_batch_norm", x, weight, bias, running_mean, running_var, training, momentum, eps)[0]


def batch_norm(input: Tensor, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """F.batch_norm: torch's checks, then the "batch_norm" operator (an empty batch changes nothing)."""
    if training and input.shape[0] * math.prod(input.shape[2:]) == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                         f"{size_text(input.shape)}")
    for name, t in (("running_mean", running_mean), ("running_var", running_var)):
        if not training and t is None:
            raise RuntimeError(f"{name} must be defined in evaluation mode")
    channels = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
        if t is not None and t.numel() != channels:
            raise RuntimeError(f"{name} should contain {channels} elements not {t.numel()}")
    if input.numel() == 0:
        return input * 1.0
    return dispatch("batch_norm", input, weight, bias, running_mean, running_var, training, momentum, eps)


# %% solution="ex_batch_norm" reference=true
@register_kernel("native_batch_norm", DispatchKey.CPU)
def native_batch_norm_cpu(x: Tensor, weight, bias, running_mean, running_var, training: bool, momentum: float,
                          eps: float) -> tuple:
    """(y, mean, invstd): each channel (dim 1) normalised over every other dim, scaled and shifted."""
    ### BEGIN SOLUTION
    a = x.numpy()
    axes, shape = channel_dims(x)
    if training:
        n = a.size // a.shape[1]
        mean = a.mean(axis=axes)
        centered = a - mean.reshape(shape)
        var = (centered * centered).mean(axis=axes)  # biased: this batch's own spread
        if running_mean is not None:  # in place: the module's buffers are these very tensors
            running = running_mean.numpy()
            running *= 1 - momentum
            running += momentum * mean
        if running_var is not None:
            running = running_var.numpy()
            running *= 1 - momentum
            running += momentum * var * (n / (n - 1))  # unbiased: an estimate for all the data
    else:
        mean, var = running_mean.numpy().astype(a.dtype), running_var.numpy().astype(a.dtype)
    invstd = 1 / np.sqrt(var + eps)
    # y = (x - mean) * invstd * weight + bias as torch computes it: one scale and one shift per channel, then one
    # pass over x
    scale = invstd if weight is None else invstd * weight.numpy()
    shift = -mean * scale if bias is None else bias.numpy() - mean * scale
    y = a * scale.reshape(shape) + shift.reshape(shape)
    return tuple(from_numpy(v.astype(a.dtype, copy=False)) for v in (y, mean, invstd))
    ### END SOLUTION


@register_kernel("native_batch_norm_backward", DispatchKey.CPU)
def native_batch_norm_backward_cpu(grad: Tensor, x: Tensor, weight, mean: Tensor, invstd: Tensor, training: bool,
                                   output_mask) -> tuple:
    """(grad_input, grad_weight, grad_bias), each None where output_mask says it is not needed."""
    ### BEGIN SOLUTION
    g, a = grad.numpy(), x.numpy()
    axes, shape = channel_dims(x)
    x_hat = (a - mean.numpy().reshape(shape)) * invstd.numpy().reshape(shape)
    sum_g, sum_g_x_hat = g.sum(axis=axes), (g * x_hat).sum(axis=axes)
    grad_input = None
    if output_mask[0]:
        scale = invstd.numpy() if weight is None else invstd.numpy() * weight.numpy()
        if training:  # the statistics move with x: each pixel's share of the channel's mean and variance
            n = a.size // a.shape[1]
            g = g - (sum_g / n).reshape(shape) - x_hat * (sum_g_x_hat / n).reshape(shape)
        grad_input = from_numpy((g * scale.reshape(shape)).astype(a.dtype, copy=False))
    return (grad_input, from_numpy(sum_g_x_hat.astype(a.dtype, copy=False)) if output_mask[1] else None,
            from_numpy(sum_g.astype(a.dtype, copy=False)) if output_mask[2] else None)
    ### END SOLUTION


# %% tests="ex_batch_norm" points=4
def expect_batch_norm(shape, training: bool, what: str = "", weight: bool = True, bias: bool = True,
                      running: bool = True, momentum: float = 0.1, eps: float = 1e-5, dtype=torch.float64,
                      draw=inputs) -> None:
    """batch_norm (your kernels, through the given operator) against F.batch_norm: the output, the running
    statistics after the call (updated in place in training, untouched in eval), every gradient."""
    c = shape[1]
    x = draw.noncontiguous(draw.randn(*shape, dtype=dtype) * 2 + 1)
    w = draw.randn(c, dtype=dtype) if weight else None
    b = draw.randn(c, dtype=dtype) if bias else None
    stats = [draw.randn(c, dtype=dtype), draw.randn(c, dtype=dtype).abs() + 0.5] if running else [None, None]
    label = (f"batch_norm(x, {'running_mean, running_var' if running else 'None, None'}, "
             f"{'weight' if w is not None else 'None'}, {'bias' if b is not None else 'None'}, training={training}, "
             f"momentum={momentum}, eps={eps}) for x: {describe(x)}{what}")
    # torch's own backward is wrong for some channels_last-like strides with a size-1 dim (an (N, C, 2, 1) x of
    # strides (2C, 1, C, 1)): its oracle gets x's values in NCHW, yours x's layout
    theirs = [None if t is None else t.contiguous().clone().requires_grad_(dtype == torch.float64) for t in (x, w, b)]
    mine = [None if t is None else ours(t, requires_grad=dtype == torch.float64) for t in (x, w, b)]
    their_stats = [None if t is None else t.clone() for t in stats]
    my_stats = [None if t is None else ours(t) for t in stats]
    result = same_outcome(lambda: batch_norm(mine[0], *my_stats, mine[1], mine[2], training, momentum, eps),
                          lambda: F.batch_norm(theirs[0], *their_stats, theirs[1], theirs[2], training, momentum, eps),
                          label)
    if result is None:
        return
    for name, o, t in zip(("running_mean", "running_var"), my_stats, their_stats):
        if t is not None:
            compare.assert_matches(o, t, f"{label}: {name} after the call (updated in place in training only)")
    out, out_theirs = result
    if dtype == torch.float64 and out_theirs.numel():
        g = draw.randn(*out_theirs.shape, dtype=dtype)
        out_theirs.backward(g)
        call_yours(f"{label}: out.backward(g)", out.backward, ours(g))
        for name, o, t in zip(("x", "weight", "bias"), mine, theirs):
            if t is not None:
                compare.assert_matches(o.grad, t.grad, f"{label}: {name}.grad")


def expect_backward_mask(mask) -> None:
    """native_batch_norm_backward_cpu with output_mask: None exactly where the mask is False."""
    x, w = ours(torch.randn(4, 3, 2, 2)), ours(torch.randn(3))
    _, mean, invstd = native_batch_norm_cpu(x, w, None, None, None, True, 0.1, 1e-5)
    got = native_batch_norm_backward_cpu(ours(torch.randn(4, 3, 2, 2)), x, w, mean, invstd, True, mask)
    if not isinstance(got, tuple) or len(got) != 3:
        raise AssertionError(f"native_batch_norm_backward_cpu must return a tuple of three, got {got!r:.80}")
    for name, wanted, value in zip(("grad_input", "grad_weight", "grad_bias"), mask, got):
        if (value is None) == wanted:
            raise AssertionError(f"native_batch_norm_backward_cpu(..., output_mask={mask}): {name} is "
                                 f"{'None' if value is None else 'computed'}, but the mask "
                                 f"{'asks for it' if wanted else 'does not ask for it (None)'}")


torch.manual_seed(2)
expect_batch_norm((4, 3, 5, 6), True, " (training: the batch's statistics)")
expect_batch_norm((4, 3, 5, 6), False, " (eval: the running statistics, constants for the backward)")
expect_batch_norm((6, 4), True, " (an (N, C) input)")
expect_batch_norm((3, 2, 5), True, " (an (N, C, L) input)")
expect_batch_norm((2, 3, 4), False, " (an (N, C, L) input in eval)")
expect_batch_norm((5, 3, 2, 2), True, " (no weight, no bias)", weight=False, bias=False)
expect_batch_norm((5, 3, 2, 2), False, " (eval, no weight, no bias)", weight=False, bias=False)
expect_batch_norm((3, 4, 3, 2), True, " (a weight and no bias)", bias=False)
expect_batch_norm((3, 4, 3, 2), True, " (a bias and no weight: each may be None)", weight=False)
expect_batch_norm((3, 4, 3), False, " (eval, a bias and no weight)", weight=False)
expect_batch_norm((3, 4, 3, 2), True, " (no running statistics)", running=False)
expect_batch_norm((2, 3, 3, 3), True, " (momentum 0.5, eps 0.1)", momentum=0.5, eps=0.1)
expect_batch_norm((1, 3, 2, 1), True, " (one image of two pixels: two values per channel)")
expect_batch_norm((8, 3, 4, 4), True, " (float32)", dtype=torch.float32)
expect_batch_norm((0, 3, 2, 2), True, " (an empty batch: nothing to normalise, nothing updated)")
expect_batch_norm((1, 3, 1, 1), True, " (one value per channel in training: ValueError)")
expect_batch_norm((1, 3), True, " (one sample of (N, C) in training: ValueError)")
expect_batch_norm((1, 3), False, " (one sample in eval: the running statistics, no error)")
expect_batch_norm((3, 2), False, " (eval without running statistics: torch raises RuntimeError)", running=False)
x = torch.randn(2, 4, 3, 3)
for args, text in [((torch.zeros(3), torch.ones(3)), "running statistics of 3 for 4 channels"),
                   ((None, None, torch.ones(4), torch.zeros(3)), "a bias of 3 for 4 channels")]:
    same_outcome(lambda: batch_norm(ours(x), *[None if t is None else ours(t) for t in args], training=True),
                 lambda: F.batch_norm(x, *args, training=True), f"batch_norm(x, ...) for x of 4 channels and {text} "
                 "(torch raises RuntimeError)")
for mask in [(True, True, True), (False, True, True), (True, False, False), (False, False, True)]:
    expect_backward_mask(mask)


def expect_kernels_keep_float32(training: bool) -> None:
    """Every tensor both kernels return for float32 inputs is float32 (y, mean, invstd; the three gradients)."""
    x, w, b = ours(torch.randn(4, 3, 2, 2)), ours(torch.randn(3)), ours(torch.randn(3))
    rm, rv = ours(torch.randn(3)), ours(torch.rand(3) + 0.5)
    what = f"native_batch_norm_cpu and native_batch_norm_backward_cpu on float32 tensors (training={training})"
    outs = call_yours(what, native_batch_norm_cpu, x, w, b, rm, rv, training, 0.1, 1e-5)
    grads = call_yours(what, native_batch_norm_backward_cpu, ours(torch.randn(4, 3, 2, 2)), x, w, outs[1], outs[2],
                       training, (True, True, True))
    for name, t in zip(("y", "mean", "invstd", "grad_input", "grad_weight", "grad_bias"), (*outs, *grads)):
        compare.assert_equal(t.dtype.name, "float32", f"{what}: the dtype of {name} (x's)")


expect_kernels_keep_float32(True)
expect_kernels_keep_float32(False)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_batch_norm(draw):
    shape = (draw(1, 4), draw(1, 4)) + tuple(draw(1, 4) for _ in range(draw(0, 2)))
    if shape[0] * math.prod(shape[2:]) == 1:
        shape = (2,) + shape[1:]
    expect_batch_norm(shape, draw.choice([True, True, False]), weight=draw.choice([True, True, False]),
                      bias=draw.choice([True, True, False]), running=draw.choice([True, True, False]),
                      momentum=draw.choice([0.1, 0.3, 1.0]), eps=draw.choice([1e-5, 0.01]),
                      dtype=draw.choice([torch.float64, torch.float64, torch.float32]), draw=draw)


for_random_inputs(random_batch_norm, 16)
### END HIDDEN TESTS


# %% [markdown]
# ### BatchNorm2d, and the CNN trained
#
# Chapter 03's `BatchNorm1d` normalises each channel of an `(N, C)` or
# `(N, C, L)` input over every other dim. `BatchNorm2d` is the same for
# images `(N, C, H, W)`: one mean and one variance **per channel**, over
# `N`, `H` and `W` together — every pixel of every image is a sample of its
# channel. Its state is chapter 03's: `weight` and `bias` of shape `(C,)`,
# the buffers `running_mean`, `running_var`, `num_batches_tracked` — so the
# `state_dict` has torch's keys and shapes, and loads torch's.
#
# Write `BatchNorm2d` as a subclass of your `BatchNorm1d` (which gives it
# `__init__` and `extra_repr`), whose `forward` is torch's
# `_BatchNorm.forward`: the module keeps the books, and one `batch_norm`
# call does the arithmetic.
#
# - anything but a 4-D input is `ValueError(f"expected 4D input (got {d}D
#   input)")`;
# - in training with running statistics, `num_batches_tracked += 1` (inside
#   `no_grad()`, even when the batch is then refused); the factor is
#   `momentum`, or with `momentum=None` `1 / num_batches_tracked` (a
#   cumulative average);
# - the batch's statistics are used in training, and in eval when there are
#   no running statistics; otherwise the running ones;
# - the running statistics go to `batch_norm` in eval, and in training only
#   when the module tracks them (`track_running_stats`).
#
# Then the milestone: a small CNN with `BatchNorm2d` on chapter 04's digits,
# trained with chapter 04's `fit` — the same initial weights and the same
# batches as the same CNN in torch. The tests train both for one epoch and
# compare their test accuracy (within half a point), and with chapter 04's
# MLP trained on the same batches (the CNN must do at least as well).
#
# Real PyTorch: [`torch/nn/modules/batchnorm.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/batchnorm.py)
# (`_BatchNorm.forward`, `BatchNorm2d._check_input_dim`; the 1-D, 2-D and 3-D
# ones share the forward).

# %% solution="ex_batchnorm2d" reference=true
from picotorch import BatchNorm1d, no_grad


class BatchNorm2d(BatchNorm1d):
    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        if x.dim() != 4:
            raise ValueError(f"expected 4D input (got {x.dim()}D input)")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative average
                factor = 1.0 / float(self.num_batches_tracked.item())
        batch_statistics = self.training or self.running_mean is None
        tracked = not self.training or self.track_running_stats
        return batch_norm(x, self.running_mean if tracked else None, self.running_var if tracked else None,
                          self.weight, self.bias, batch_statistics, factor, self.eps)
        ### END SOLUTION


# %% tests="ex_batchnorm2d" points=3
import re

from course.testing import with_fixed_inputs

setattr(OUR_NN, "BatchNorm2d", BatchNorm2d)
setattr(OUR_NN, "AdaptiveAvgPool2d", AdaptiveAvgPool2d)


def without_bias_field(text: str) -> str:
    """repr without the ', bias=...' that newer torch prints for BatchNorm (as chapter 03 compares it)."""
    return re.sub(r", bias=(True|False)", "", text)


def expect_batchnorm2d_steps(make, shapes, modes, what, dtype=torch.float64, draw=inputs) -> None:
    """Both worlds from torch's random state_dict; at each step the same output, gradients (float64) and buffers."""
    theirs = make(torch.nn).to(dtype)
    mine = call_yours_safely(make, what).to(dtype)
    compare.assert_equal([(k, tuple(v.shape)) for k, v in mine.state_dict().items()],
                         [(k, tuple(v.shape)) for k, v in theirs.state_dict().items()],
                         f"the keys and shapes of {what}.state_dict()")
    compare.assert_equal(without_bias_field(repr(mine)), without_bias_field(repr(theirs)), f"repr({what})")
    state = {k: (draw.randn(tuple(v.shape), dtype=dtype) if v.is_floating_point() and "running" not in k else v)
             for k, v in theirs.state_dict().items()}
    theirs.load_state_dict(state)
    mine.load_state_dict(state)
    for step, (shape, mode) in enumerate(zip(shapes, modes)):
        getattr(theirs, mode)()
        getattr(mine, mode)()
        x = draw.noncontiguous(draw.randn(shape, dtype=dtype) * 2 + 1)
        label = f"{what} in {mode} mode, step {step + 1}, x: {describe(x)}"
        # torch's own backward is wrong for some channels_last-like strides with a size-1 dim (its weight's gradient
        # for an (N, C, 2, 1) x of strides (2C, 1, C, 1)): its oracle gets x's values in NCHW, yours x's layout
        grad = dtype == torch.float64
        x_theirs, x_mine = x.contiguous().clone().requires_grad_(grad), ours(x, requires_grad=grad)
        out_theirs, out = theirs(x_theirs), call_yours(label, mine, x_mine)
        compare.assert_matches(out, out_theirs.detach(), f"{label}: the output")
        if grad:
            g = draw.randn(tuple(out_theirs.shape), dtype=dtype)
            out_theirs.backward(g)
            out.backward(ours(g))
            compare.assert_matches(x_mine.grad, x_theirs.grad, f"{label}: x.grad")
            params = dict(mine.named_parameters())
            for name, p in theirs.named_parameters():
                compare.assert_matches(params[name].grad, p.grad, f"{label}: {name}.grad")
                params[name].grad, p.grad = None, None
        for key, value in theirs.state_dict().items():
            compare.assert_matches(mine.state_dict()[key], value, f"{what}.{key} after step {step + 1} ({mode} mode)")


expect_batchnorm2d_steps(lambda nn: nn.BatchNorm2d(3), [(4, 3, 5, 6), (2, 3, 4, 4), (3, 3, 5, 2)],
                         ["train", "train", "eval"], "BatchNorm2d(3)")
expect_batchnorm2d_steps(lambda nn: nn.BatchNorm2d(2, momentum=None), [(2, 2, 3, 3)] * 3, ["train"] * 3,
                         "BatchNorm2d(2, momentum=None) (a cumulative average)")
expect_batchnorm2d_steps(lambda nn: nn.BatchNorm2d(4, affine=False, eps=0.1), [(2, 4, 3, 2), (1, 4, 2, 3)],
                         ["train", "eval"], "BatchNorm2d(4, affine=False, eps=0.1)")
expect_batchnorm2d_steps(lambda nn: nn.BatchNorm2d(2, momentum=None), [(2, 2, 3, 3)] * 2, ["eval", "train"],
                         "BatchNorm2d(2, momentum=None) in eval before any training step (no batch counted yet)")


def untracked(module):
    """A module whose running statistics exist but are no longer updated (torch's attribute, set after __init__)."""
    module.track_running_stats = False
    return module


expect_batchnorm2d_steps(lambda nn: untracked(nn.BatchNorm2d(3)), [(2, 3, 4, 4), (3, 3, 2, 3)], ["train", "eval"],
                         "BatchNorm2d(3) with track_running_stats set False after __init__ (training leaves the "
                         "running statistics as they are; eval uses them)")
expect_batchnorm2d_steps(lambda nn: nn.BatchNorm2d(3, track_running_stats=False), [(2, 3, 4, 4), (3, 3, 2, 3)],
                         ["train", "eval"], "BatchNorm2d(3, track_running_stats=False) (the batch's statistics in eval too)")
expect_batchnorm2d_steps(lambda nn: nn.BatchNorm2d(3), [(1, 3, 2, 1)], ["train"],
                         "BatchNorm2d(3) on one image of two pixels (two values per channel: it trains)")
expect_batchnorm2d_steps(lambda nn: nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU()),
                         [(2, 2, 5, 4), (2, 2, 5, 4)], ["train", "eval"], "Conv2d, BatchNorm2d, ReLU")
expect_batchnorm2d_steps(lambda nn: nn.BatchNorm2d(3), [(4, 3, 3, 3)], ["train"], "BatchNorm2d(3) (float32)",
                         dtype=torch.float32)
for shape, mode, why in [((2, 3, 4), "train", "a 3-D input"), ((2, 3, 2, 2, 2), "eval", "a 5-D input"),
                         ((1, 3, 1, 1), "train", "one value per channel in training"),
                         ((2, 4, 3, 3), "train", "4 channels for BatchNorm2d(3)")]:
    theirs, mine = torch.nn.BatchNorm2d(3), BatchNorm2d(3)
    getattr(theirs, mode)(), getattr(mine, mode)()
    bad = torch.randn(shape)
    what = f"BatchNorm2d(3) in {mode} mode on x of shape {tuple(shape)} ({why}: torch raises)"
    same_outcome(lambda: mine(ours(bad)), lambda: theirs(bad), what)
    # torch refuses a wrong number of dims before it counts the batch, and the rest after
    compare.assert_equal(mine.num_batches_tracked.item(), theirs.num_batches_tracked.item(),
                         f"{what}: num_batches_tracked after the refusal")
mine = BatchNorm2d(3).eval()
same_outcome(lambda: mine(ours(torch.ones(1, 3, 1, 1))), lambda: torch.nn.BatchNorm2d(3).eval()(torch.ones(1, 3, 1, 1)),
             "BatchNorm2d(3).eval() on one pixel (the running statistics: no ValueError)")


def digits_cnn(nn):
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.Flatten(),
                         nn.Linear(256, 10))


def train_in_torch(model, images, labels, test, seed: int, epochs: int) -> float:
    """Adam at 3e-3, torch's DataLoader of batches of 32 shuffled by torch.Generator().manual_seed(seed) (as
    chapter 04's DataLoader shuffles): the test accuracy after `epochs` epochs."""
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    data = torch.utils.data
    loader = data.DataLoader(data.TensorDataset(images, labels), batch_size=32, shuffle=True,
                             generator=torch.Generator().manual_seed(seed))
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        return (model(test[0]).argmax(1) == test[1]).double().mean().item()


def expect_cnn_trains_as_torch(seed: int, epochs: int = 1) -> None:
    """digits_cnn trained with your fit and with torch from the same weights on the same batches: the same test
    accuracy within half a point, and at least that of chapter 04's MLP on the same batches."""
    d = load_digits()
    mean, std = d.train_images.mean(0), d.train_images.std(0) + np.float32(0.1)
    train_x = torch.from_numpy(((d.train_images - mean) / std).astype(np.float32)).reshape(-1, 1, 8, 8)
    test_x = torch.from_numpy(((d.test_images - mean) / std).astype(np.float32)).reshape(-1, 1, 8, 8)
    train_y, test_y = torch.from_numpy(d.train_labels), torch.from_numpy(d.test_labels)
    torch.manual_seed(seed)
    theirs = digits_cnn(torch.nn)
    mine = call_yours_safely(digits_cnn, "digits_cnn")
    mine.load_state_dict(theirs.state_dict())
    loader = picotorch.DataLoader(picotorch.TensorDataset(ours(train_x), ours(train_y)), batch_size=32, shuffle=True,
                                  generator=torch.Generator().manual_seed(seed))
    test_loader = picotorch.DataLoader(picotorch.TensorDataset(ours(test_x), ours(test_y)), batch_size=512)
    optimizer = picotorch.Adam(mine.parameters(), lr=3e-3)
    what = f"digits_cnn trained {epochs} epoch{'s' * (epochs != 1)} with fit (Adam lr 3e-3, batches of 32, seed {seed})"
    history = call_yours(what, picotorch.fit, mine, optimizer, picotorch.cross_entropy, loader, test_loader, epochs)
    accuracy = history[-1]["val_accuracy"]
    wanted = train_in_torch(theirs, train_x, train_y, (test_x, test_y), seed, epochs)
    if abs(accuracy - wanted) > 0.005:
        raise AssertionError(f"{what}: test accuracy {accuracy:.2%}, but the same CNN trained in torch on the same "
                             f"batches reaches {wanted:.2%} (more than half a point apart)")
    torch.manual_seed(seed)
    mlp = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    baseline = train_in_torch(mlp, train_x, train_y, (test_x, test_y), seed, epochs)
    if accuracy < baseline:
        raise AssertionError(f"{what}: test accuracy {accuracy:.2%}, below chapter 04's MLP 64-128-10 trained on the "
                             f"same batches ({baseline:.2%})")


with_fixed_inputs(expect_cnn_trains_as_torch, 0)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_batchnorm2d(draw):
    c = draw(1, 4)
    kwargs = draw.choice([{}, {"momentum": draw.choice([None, 0.5])}, {"affine": False}, {"eps": 0.01},
                          {"track_running_stats": False}])
    steps = draw(1, 3)
    shapes = [(draw(1, 3), c, draw(2, 4), draw(1, 4)) for _ in range(steps)]
    modes = [draw.choice(["train", "train", "eval"]) for _ in range(steps)]
    args = ", ".join([str(c)] + [f"{k}={v}" for k, v in kwargs.items()])
    expect_batchnorm2d_steps(lambda nn: nn.BatchNorm2d(c, **kwargs), shapes, modes, f"BatchNorm2d({args})", draw=draw)


for_random_inputs(random_batchnorm2d, 12)
with_fixed_inputs(expect_cnn_trains_as_torch, 1)
### END HIDDEN TESTS

# %% reference=true
# The names of this chapter that later chapters (and the course's benchmarks and widgets) may use.
__all__ = ["pair", "conv_output_size", "CACHE_BYTES", "cache_batches", "pad_regions", "constant_pad_cpu",
           "ConstantPadNd", "pad", "unfold_view", "unfold",
           "channels_last", "suggests_channels_last", "convolution_memory_format", "channels_last_strides",
           "is_channels_last_contiguous",
           "ConvolutionFunction", "convolution_cpu", "conv2d", "fold", "convolution_backward_cpu", "MaxPool2dFunction",
           "pool_arguments", "unbatched", "max_pool2d_cpu", "max_pool2d_value_cpu", "max_pool2d_backward_cpu",
           "max_pool2d", "avg_pool2d", "Conv2d", "MaxPool2d", "AvgPool2d", "pool_output_size", "overhang",
           "averaging_matrix", "adaptive_avg_pool2d", "AdaptiveAvgPool2d", "BatchNorm2d",
           "BatchNormFunction", "channel_dims", "batch_norm_cpu", "batch_norm", "native_batch_norm_cpu",
           "native_batch_norm_backward_cpu"]

# %% [markdown]
# ## 8. On the device
#
# Chapter 05's backend has no convolution yet: `conv2d` on an `emu` (or
# `cuda`) tensor reaches the `CUDA` key, finds no kernel there, and says so.
# Torch's own fallback on the GPU is what you built on the CPU:
# `slow_conv2d_forward` in [`ConvolutionMM2d.cu`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cuda/ConvolutionMM2d.cu)
# copies each image's windows into the im2col matrix with a kernel, then
# multiplies it by the weight, one GEMM per image. (cuDNN, which
# `_convolution` prefers when it can, has faster algorithms of its own.)
#
# On a device the windows cannot stay a view: the matmul kernel wants a
# matrix. So a kernel **writes** the matrix `cols` of `F.unfold`, shape
# `(N, C·kH·kW, L)`, contiguous. One thread per window position
# `(n, c, i, j)` — `N·C·H_out·W_out` of them, in a grid-stride loop — copies
# its window's `kH·kW` taps into column `i·W_out + j`, rows `c·kH·kW + p·kW + q`:
#
# ```
# cols[n, c·kH·kW + p·kW + q, i·W_out + j] = x[n, c, i·sH − pH + p·dH, j·sW − pW + q·dW]
# ```
#
# **Padding is a bounds check**, not a copy: a tap whose row or column falls
# outside the image is written as 0 and never read. (On the emulator, a read
# outside `x` stops the launch and names your line.) `x` comes in any layout:
# read it through its strides `sN, sC, sH, sW`, as the window view did.
#
# Write the body of `im2col<T>`, and `launch_im2col(cols, x, kernel_size,
# dilation=1, padding=0, stride=1, max_blocks=MAX_BLOCKS)` for a 4-D torch
# tensor `x` and a contiguous `cols`: `launch_1d` for one thread per window
# position (at most `max_blocks` blocks), no launch when there is nothing to
# do, the kernel of `x`'s C type (`IM2COL("im2col", C_TYPES[x.dtype])`), every
# integer as `np.int64`.
#
# **The least memory traffic.** Each element of `cols` is written once; each
# pixel is read once per window that covers it; padding is never read. The
# emulator counts every access of your one launch, and the tests compare the
# counts with exactly that.
#
# Real PyTorch: `im2col_kernel` in [`im2col.cuh`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cuda/im2col.cuh)
# is this kernel, for one contiguous image: one thread per `(c, h_out, w_out)`,
# a loop over the taps, the same bounds check. Its `col2im_kernel`, beside
# it, is the backward: your next kernel, after this one.

# %% reference=true
# What this section takes from chapter 05: its kernel API and launch geometry, the CUDA key's registration, the
# backend's allocation, fill, copy and matmul launchers.
from picotorch import (C_TYPES, MATMULS, MAX_BLOCKS, USE, Kernels, copy_into, cuda_source, empty_on, float32, float64,
                       launch_1d, launch_fill, register_cuda_kernel)

# %% solution="ex_device" reference=true
IM2COL = Kernels(cuda_source(r"""
template <typename T>
__global__ void im2col(T* cols, const T* x, long long N, long long C, long long H, long long W,
                       long long sN, long long sC, long long sH, long long sW, long long kH, long long kW,
                       long long dH, long long dW, long long pH, long long pW, long long strideH,
                       long long strideW, long long Hout, long long Wout) {
    ### BEGIN SOLUTION
    long long L = Hout * Wout, windows = N * C * L;
    for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < windows;
         index += (long long)blockDim.x * gridDim.x) {
        long long j = index % Wout, i = index / Wout % Hout, c = index / L % C, n = index / L / C;
        const T* image = x + n * sN + c * sC;
        T* column = cols + (n * C + c) * kH * kW * L + i * Wout + j;  // row c*kH*kW, column i*Wout + j
        for (long long p = 0; p < kH; ++p)
            for (long long q = 0; q < kW; ++q) {
                long long h = i * strideH - pH + p * dH, w = j * strideW - pW + q * dW;
                column[(p * kW + q) * L] = (h >= 0 && h < H && w >= 0 && w < W) ? image[h * sH + w * sW] : T(0);
            }
    }
    ### END SOLUTION
}
"""), extra="")


def launch_im2col(cols: torch.Tensor, x: torch.Tensor, kernel_size, dilation=1, padding=0, stride=1,
                  max_blocks: int = MAX_BLOCKS) -> None:
    """cols (N, C*kH*kW, L), contiguous = F.unfold(x, ...) for a 4-D x in any layout, on x's device."""
    ### BEGIN SOLUTION
    (kh, kw), (dh, dw) = pair(kernel_size, "kernel_size"), pair(dilation, "dilation")
    (ph, pw), (sh, sw) = pair(padding, "padding"), pair(stride, "stride")
    n, c, h, w = x.shape
    ho, wo = conv_output_size(h, kh, sh, ph, dh), conv_output_size(w, kw, sw, pw, dw)
    geometry = launch_1d(n * c * ho * wo, max_blocks=max_blocks)
    if geometry is not None:
        sizes = (n, c, h, w, *x.stride(), kh, kw, dh, dw, ph, pw, sh, sw, ho, wo)
        IM2COL("im2col", C_TYPES[x.dtype])(*geometry, (cols, x, *(np.int64(v) for v in sizes)))
    ### END SOLUTION


# %% [markdown]
# The next cell registers your kernel's use for the `CUDA` key, as
# `slow_conv2d_forward` does: `convolution` is one im2col launch, then one
# launch of chapter 05's matmul (`MATMULS[USE["matmul"]]`) per image and
# group, then the bias by the backend's elementwise add. `constant_pad_nd`
# (which `"same"` padding with an even kernel calls) gets a device kernel too:
# a fill, then a copy into the middle.

# %% reference=true
@register_cuda_kernel("convolution")
def convolution_cuda(input: Tensor, weight: Tensor, bias, stride, padding, dilation, groups: int) -> Tensor:
    """conv2d on the device: im2col (your kernel), a matmul per image and group, the bias added."""
    if input.dtype not in (float32, float64):
        raise RuntimeError(f"picotorch's CUDA backend convolves float32 and float64 tensors, not {input.dtype.name}")
    stride, padding, dilation = pair(stride, "stride"), pair(padding, "padding"), pair(dilation, "dilation")
    (n, c, h, w), (o, cg, kh, kw) = input.shape, weight.shape
    ho, wo = (conv_output_size(h, kh, stride[0], padding[0], dilation[0]),
              conv_output_size(w, kw, stride[1], padding[1], dilation[1]))
    cols = empty_on((n, c * kh * kw, ho * wo), input.dtype, input.device).to_torch()
    out = empty_on((n, o, ho, wo), input.dtype, input.device)
    launch_im2col(cols, input.to_torch(), (kh, kw), dilation, padding, stride)
    filters = weight.contiguous().to_torch().reshape(groups, o // groups, cg * kh * kw)
    rows, result = cols.view(n, groups, cg * kh * kw, ho * wo), out.to_torch().view(n, groups, o // groups, ho * wo)
    if ho * wo:
        for image, group in np.ndindex(n, groups):  # out[image, group] (O/G, L) = filters (O/G, K) @ cols (K, L)
            MATMULS[USE["matmul"]](result[image, group], filters[group], rows[image, group])
    return out if bias is None else out + bias.reshape(1, o, 1, 1)


@register_cuda_kernel("constant_pad_nd")
def constant_pad_cuda(x: Tensor, pads: tuple, value: float = 0.0) -> Tensor:
    """F.pad's constant mode on the device: a new tensor full of `value`, x's overlap copied into its middle."""
    shape, inside, source = pad_regions(tuple(x.shape), pads)
    out = empty_on(shape, x.dtype, x.device)
    launch_fill(out.to_torch(), value)
    if out.numel() and x.numel():
        copy_into(out[inside], x[source])
    return out


# %% tests="ex_device" points=3
from course.cuda.status import gpu_available, recording
from picotorch import wrap_torch

ON_GPU = gpu_available()
CONV_DEVICE = "cuda" if ON_GPU else "emu"   # the picotorch device of these tests (emu: chapter 05's emulator)
TORCH_DEVICE = "cuda" if ON_GPU else "cpu"  # where their torch tensors live (an emu tensor's memory is the CPU's)
torch.backends.cudnn.allow_tf32 = False     # torch's GPU convolution in full float32, as yours
torch.backends.cuda.matmul.allow_tf32 = False


def on_device(t: torch.Tensor) -> torch.Tensor:
    """t's values with t's exact layout (strides, offset), in new memory on TORCH_DEVICE."""
    whole = t.detach().as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)
    return whole.to(TORCH_DEVICE, copy=True).as_strided(t.shape, t.stride(), t.storage_offset())


def expect_im2col(x: torch.Tensor, kernel_size, dilation=1, padding=0, stride=1, what="", max_blocks=MAX_BLOCKS):
    """launch_im2col into a poisoned cols against F.unfold; on the emulator, its one launch's memory accesses."""
    x = on_device(x)
    args = f"kernel_size={kernel_size}, dilation={dilation}, padding={padding}, stride={stride}"
    name = f"launch_im2col(cols, x, {args}{', max_blocks=%d' % max_blocks if max_blocks != MAX_BLOCKS else ''})"
    what = f"{name} for x: {describe(x)} on {TORCH_DEVICE}{what}"
    expected = F.unfold(x, kernel_size, dilation, padding, stride)
    cols = torch.full(expected.shape, float("nan"), dtype=x.dtype, device=TORCH_DEVICE)
    with recording() as launches, compare.labelled(what):
        launch_im2col(cols, x, kernel_size, dilation, padding, stride, max_blocks)
    if bool(cols.isnan().any()):
        missed = cols.isnan().nonzero()[0].tolist()
        raise AssertionError(f"{what}: {int(cols.isnan().sum())} of the {cols.numel()} elements of cols were never "
                             f"written, the first at {missed}: a window or a tap of it missed (is there a grid-stride "
                             f"loop over every window?){inputs.replay_hint()}")
    compare.assert_matches(cols, expected, what, exact=True)
    if len(launches) != (1 if expected.numel() else 0):
        raise AssertionError(f"{what}: {len(launches)} launches; im2col is one launch (none when cols is empty)")
    if launches and launches[0].grid[0] > max_blocks:
        raise AssertionError(f"{what}: a grid of {launches[0].grid[0]} blocks; at most max_blocks={max_blocks}, the "
                             "grid-stride loop takes the windows past the grid (launch_1d(..., max_blocks=max_blocks))")
    if launches and not ON_GPU:  # the emulator counted every access: compare with the least there can be
        counts, taps = launches[0].counts, int(F.unfold(torch.ones_like(x), kernel_size, dilation, padding, stride).sum())
        compare.assert_equal(counts.global_stores, cols.numel(),
                             f"{what}: the global stores (each element of cols written once)")
        compare.assert_equal(counts.global_loads, taps,
                             f"{what}: the global loads (each pixel read once per window over it, padding never)")


def expect_conv_on_device(x: torch.Tensor, w: torch.Tensor, b=None, what="", **kwargs) -> None:
    """conv2d on CONV_DEVICE tensors (with x's layout) against torch's F.conv2d in float64: values, and the device."""
    x, w, b = on_device(x), on_device(w), None if b is None else on_device(b)
    call = f"conv2d(x, w, {'b' if b is not None else 'None'}, " + ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    what = f"{call}) for x: {describe(x)}, w: {describe(w)} on '{CONV_DEVICE}'{what}"
    with compare.labelled(what):
        got = conv2d(wrap_torch(x, CONV_DEVICE), wrap_torch(w, CONV_DEVICE),
                     None if b is None else wrap_torch(b, CONV_DEVICE), **kwargs)
    compare.assert_equal(str(got.device), str(wrap_torch(x, CONV_DEVICE).device), f"{what}: the result's device")
    b64 = None if b is None else b.double()
    expected = F.conv2d(x.double(), w.double(), b64, **kwargs)
    # a sum of K products (and the bias) lands within (K + 1) * eps * (the sum of their sizes) of the exact one
    k = w.shape[1] * w.shape[2] * w.shape[3] + 1
    sizes = F.conv2d(x.double().abs(), w.double().abs(), None if b is None else b64.abs(), **kwargs)
    bound = k * torch.finfo(x.dtype).eps * float(sizes.max()) + torch.finfo(x.dtype).tiny
    compare.assert_matches(got, expected.to(x.dtype), what, rtol=0, atol=bound)


torch.manual_seed(7)
x = torch.randn(2, 3, 5, 6)
expect_im2col(x, 3)
expect_im2col(x, (2, 3), stride=(2, 1), what=" (stride (2, 1))")
expect_im2col(x, 3, padding=1, what=" (padding 1: the zeros of the padding are written, never read)")
expect_im2col(x, 2, padding=(2, 1), stride=3, what=" (padding (2, 1), stride 3)")
expect_im2col(x, 2, dilation=2, what=" (dilation 2: the taps two pixels apart)")
expect_im2col(x, (3, 2), dilation=(2, 1), padding=(1, 2), stride=(1, 2), what=" (dilation (2, 1), padding, stride)")
expect_im2col(x.transpose(2, 3), 2, what=" (a transposed x: read it through its strides)")
expect_im2col(x[:, ::2, :, 1:], 2, padding=1, what=" (x sliced with a step and an offset)")
expect_im2col(x.double(), 3, padding=1, what=" (float64)")
expect_im2col(torch.randn(3, 4, 9, 8), 3, padding=1, max_blocks=2,
              what=" (a grid of 2 blocks for 864 windows: each thread takes several, a grid-stride loop)")
expect_im2col(x[:0], 3, what=" (an empty batch: no launch)")
w, b = torch.randn(6, 3, 3, 3), torch.randn(6)
expect_conv_on_device(x, w, b)
expect_conv_on_device(x, w, stride=2, padding=1, what=" (stride 2, padding 1, no bias)")
expect_conv_on_device(x, w, b, dilation=(2, 1), padding=(2, 1), what=" (dilation (2, 1))")
expect_conv_on_device(torch.randn(2, 4, 5, 6), torch.randn(6, 2, 2, 3), b, groups=2,
                      what=" (groups 2: one matmul per image and group)")
expect_conv_on_device(x, torch.randn(6, 3, 2, 2), b, padding="same",
                      what=" (padding 'same' with an even kernel: the device's constant_pad_nd)")
expect_conv_on_device(x.transpose(2, 3), w, b, what=" (a transposed input)")
expect_conv_on_device(x.contiguous(memory_format=torch.channels_last), w, b, padding=1,
                      what=" (a channels-last input: im2col reads it through its strides)")
expect_conv_on_device(x[0], w, b, what=" (a 3-D input)")
expect_conv_on_device(x.double(), w.double(), b.double(), what=" (float64)")
with recording() as launches:
    conv2d(wrap_torch(on_device(x), CONV_DEVICE), wrap_torch(on_device(w), CONV_DEVICE))
names = [launch.kernel.split("<")[0] for launch in launches]
if names.count("im2col") != 1:
    raise AssertionError(f"conv2d of a (2, 3, 5, 6) x on '{CONV_DEVICE}' launched {names}: im2col is one launch")
print(f"conv2d of x (2, 3, 5, 6) by w (6, 3, 3, 3) on '{CONV_DEVICE}': {len(names)} launches, {', '.join(names)}")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_im2col(draw):
    n, c, h, w = draw(1, 3), draw(1, 3), draw(1, 8), draw(1, 8)
    x = draw.noncontiguous(draw.randn((n, c, h, w), dtype=draw.choice([torch.float32, torch.float64])))
    (kh, kw), (dh, dw) = (draw(1, 3), draw(1, 3)), (draw(1, 2), draw(1, 2))
    (ph, pw), (sh, sw) = (draw(0, 2), draw(0, 2)), (draw(1, 3), draw(1, 3))
    if h + 2 * ph < dh * (kh - 1) + 1 or w + 2 * pw < dw * (kw - 1) + 1:
        return
    expect_im2col(x, (kh, kw), (dh, dw), (ph, pw), (sh, sw), max_blocks=draw.choice([1, 3, MAX_BLOCKS]))


def random_conv_on_device(draw):
    groups = draw.choice([1, 1, 2])
    n, c, o, kh, kw = draw(1, 2), groups * draw(1, 2), groups * draw(1, 3), draw(1, 3), draw(1, 3)
    x = draw.noncontiguous(draw.randn((n, c, draw(kh + 2, 7), draw(kw + 2, 7))))
    kwargs = dict(groups=groups, stride=(draw(1, 2), draw(1, 2)), padding=(draw(0, 1), draw(0, 2)),
                  dilation=(draw(1, 2), draw(1, 1)))
    expect_conv_on_device(x, draw.randn((o, c // groups, kh, kw)), draw.randn((o,)) if draw.coin() else None, **kwargs)


for_random_inputs(random_im2col, 12)
for_random_inputs(random_conv_on_device, 6)
### END HIDDEN TESTS

# %% [markdown]
# ### The backward on the device: col2im
#
# `conv2d`'s backward on a device needs the same three gradients as on the
# CPU (section 5). Two of them are products chapter 05 already has: the
# weight's gradient is the output's gradient times the im2col matrix of the
# input (your `im2col` kernel again), and the bias's is a sum. The input's
# gradient needs the one new kernel: **col2im**, `F.fold`, every window's
# gradient added back onto the pixels it came from.
#
# On the CPU you scattered: one tap at a time, a block added onto a slice of
# the image. On a GPU a scatter is a race: two threads adding their window's
# share onto the same pixel at the same moment lose one of the sums (unless
# every add is an atomic, which is slow and sums in no fixed order). So turn
# it around — a **gather**: one thread per pixel `(n, c, h, w)` of the
# image, summing the entries of `cols` that came from it, and writing the
# pixel **once**. Which entries? Tap `(p, q)` of window `(i, j)` read the
# pixel where
#
# ```
# h = i·sH − pH + p·dH   and   w = j·sW − pW + q·dW
# ```
#
# so for each tap `(p, q)` the window is `i = (h + pH − p·dH) / sH` — if that
# is a whole number (stride > 1 skips rows), not negative, and below `H_out`
# — and the same for `j`. A tap with no such window adds nothing; a pixel no
# window covers (stride larger than the kernel) is written as 0.
#
# Write the body of `col2im<T>` and `launch_col2im(image, cols, kernel_size,
# dilation=1, padding=0, stride=1, max_blocks=MAX_BLOCKS)` for a contiguous
# `image` `(N, C, H, W)` and a contiguous `cols` `(N, C·kH·kW, L)`: one
# thread per pixel in a grid-stride loop, no launch when the image is empty,
# every integer as `np.int64`, at most `max_blocks` blocks.
#
# **The least memory traffic.** Each pixel is written once; each entry of
# `cols` that came from a pixel is read once; an entry that came from the
# padding is never read. The emulator counts, and the tests compare.
#
# Real PyTorch: `col2im_batched_kernel` in [`im2col.cuh`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cuda/im2col.cuh)
# (what `F.fold` launches on a GPU) is this gather, one thread per pixel of
# the whole batch, "to avoid involving atomic operations"; it loops over the
# windows that can cover the pixel rather than over the taps (the same sum).
# `slow_conv2d_backward` in [`ConvolutionMM2d.cu`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cuda/ConvolutionMM2d.cu)
# launches its one-image sibling `col2im_kernel` after one GEMM per image.

# %% solution="ex_col2im" reference=true
COL2IM = Kernels(cuda_source(r"""
template <typename T>
__global__ void col2im(T* image, const T* cols, long long N, long long C, long long H, long long W,
                       long long kH, long long kW, long long dH, long long dW, long long pH, long long pW,
                       long long strideH, long long strideW, long long Hout, long long Wout) {
    ### BEGIN SOLUTION
    long long L = Hout * Wout, pixels = N * C * H * W;
    for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < pixels;
         index += (long long)blockDim.x * gridDim.x) {
        long long w = index % W, h = index / W % H, plane = index / (H * W);  // plane = n * C + c
        const T* column = cols + plane * kH * kW * L;
        T sum = T(0);
        for (long long p = 0; p < kH; ++p) {
            long long top = h + pH - p * dH;  // where window row i starts: i * strideH
            if (top < 0 || top % strideH != 0 || top / strideH >= Hout)
                continue;
            for (long long q = 0; q < kW; ++q) {
                long long left = w + pW - q * dW;
                if (left < 0 || left % strideW != 0 || left / strideW >= Wout)
                    continue;
                sum += column[(p * kW + q) * L + (top / strideH) * Wout + left / strideW];
            }
        }
        image[index] = sum;
    }
    ### END SOLUTION
}
"""), extra="")


def launch_col2im(image: torch.Tensor, cols: torch.Tensor, kernel_size, dilation=1, padding=0, stride=1,
                  max_blocks: int = MAX_BLOCKS) -> None:
    """image (N, C, H, W), contiguous = F.fold(cols, (H, W), ...) for a contiguous cols (N, C*kH*kW, L)."""
    ### BEGIN SOLUTION
    (kh, kw), (dh, dw) = pair(kernel_size, "kernel_size"), pair(dilation, "dilation")
    (ph, pw), (sh, sw) = pair(padding, "padding"), pair(stride, "stride")
    n, c, h, w = image.shape
    ho, wo = conv_output_size(h, kh, sh, ph, dh), conv_output_size(w, kw, sw, pw, dw)
    geometry = launch_1d(n * c * h * w, max_blocks=max_blocks)
    if geometry is not None:
        sizes = (n, c, h, w, kh, kw, dh, dw, ph, pw, sh, sw, ho, wo)
        COL2IM("col2im", C_TYPES[image.dtype])(*geometry, (image, cols, *(np.int64(v) for v in sizes)))
    ### END SOLUTION


# %% [markdown]
# The next cell registers `convolution_backward` for the `CUDA` key, as
# `slow_conv2d_backward` does: the windows' gradients by chapter 05's matmul
# (the weight's transpose times the output's gradient, per image and group),
# then your col2im; the weight's gradient from your im2col and the batched
# matmul, summed over the images; the bias's by the device's `sum`.

# %% reference=true
@register_cuda_kernel("convolution_backward")
def convolution_backward_cuda(grad: Tensor, input: Tensor, weight: Tensor, stride, padding, dilation, groups: int,
                              output_mask) -> tuple:
    """(grad_input, grad_weight, grad_bias) on the device, each None where output_mask does not ask for it."""
    if input.dtype not in (float32, float64):
        raise RuntimeError(f"picotorch's CUDA backend convolves float32 and float64 tensors, not {input.dtype.name}")
    (n, c, h, w), (o, cg, kh, kw), (ho, wo) = input.shape, weight.shape, grad.shape[2:]
    rows, og = cg * kh * kw, o // groups  # a group's rows of the im2col matrix, its output channels
    grads = grad.reshape(n, groups, og, ho * wo)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        filters = weight.reshape(groups, og, rows)
        cols = (filters.mT @ grads).contiguous()  # (N, G, rows, L): every window's gradient
        grad_input = empty_on((n, c, h, w), input.dtype, input.device)
        launch_col2im(grad_input.to_torch(), cols.to_torch().view(n, c * kh * kw, ho * wo), (kh, kw), dilation,
                      padding, stride)
    if output_mask[1]:
        cols = empty_on((n, groups, rows, ho * wo), input.dtype, input.device)
        launch_im2col(cols.to_torch().view(n, c * kh * kw, ho * wo), input.to_torch(), (kh, kw), dilation, padding,
                      stride)
        grad_weight = (grads @ cols.mT).sum(0).reshape(o, cg, kh, kw)
    if output_mask[2]:
        grad_bias = grad.sum((0, 2, 3))
    return grad_input, grad_weight, grad_bias


# %% tests="ex_col2im" points=3
def expect_col2im(n: int, c: int, output_size, kernel_size, dilation=1, padding=0, stride=1, what="",
                  max_blocks=MAX_BLOCKS, dtype=torch.float32, draw=inputs) -> None:
    """launch_col2im of random cols (n, c*kH*kW, L) into a poisoned image against F.fold; on the emulator, its one
    launch's memory accesses."""
    (h, w), (kh, kw), (dh, dw) = output_size, pair(kernel_size, "k"), pair(dilation, "d")
    (ph, pw), (sh, sw) = pair(padding, "p"), pair(stride, "s")
    length = conv_output_size(h, kh, sh, ph, dh) * conv_output_size(w, kw, sw, pw, dw)
    cols = draw.randn((n, c * kh * kw, length), dtype=dtype).to(TORCH_DEVICE)
    args = f"kernel_size={kernel_size}, dilation={dilation}, padding={padding}, stride={stride}"
    name = f"launch_col2im(image, cols, {args}{', max_blocks=%d' % max_blocks if max_blocks != MAX_BLOCKS else ''})"
    what = f"{name} for cols: {describe(cols)} into an image of size {output_size} on {TORCH_DEVICE}{what}"
    expected = F.fold(cols, output_size, kernel_size, dilation, padding, stride)
    image = torch.full(expected.shape, float("nan"), dtype=cols.dtype, device=TORCH_DEVICE)
    with recording() as launches, compare.labelled(what):
        launch_col2im(image, cols, kernel_size, dilation, padding, stride, max_blocks)
    if bool(image.isnan().any()):
        missed = image.isnan().nonzero()[0].tolist()
        raise AssertionError(f"{what}: {int(image.isnan().sum())} of the {image.numel()} pixels were never written, "
                             f"the first at {missed}: every pixel is written once, 0 where no window covers it (is "
                             f"there a grid-stride loop over every pixel?){inputs.replay_hint()}")
    compare.assert_matches(image, expected, what)
    if len(launches) != (1 if expected.numel() else 0):
        raise AssertionError(f"{what}: {len(launches)} launches; col2im is one launch (none when the image is empty)")
    if launches and launches[0].grid[0] > max_blocks:
        raise AssertionError(f"{what}: a grid of {launches[0].grid[0]} blocks; at most max_blocks={max_blocks}, the "
                             "grid-stride loop takes the pixels past the grid (launch_1d(..., max_blocks=max_blocks))")
    if launches and not ON_GPU:  # the emulator counted every access: compare with the least there can be
        counts = launches[0].counts
        taps = int(F.unfold(torch.ones(expected.shape), kernel_size, dilation, padding, stride).sum())
        compare.assert_equal(counts.global_stores, image.numel(), f"{what}: the global stores (each pixel written once)")
        compare.assert_equal(counts.global_loads, taps, f"{what}: the global loads (each entry of cols that came from a "
                             "pixel read once, the padding's never)")


def expect_conv_grads_on_device(x: torch.Tensor, w: torch.Tensor, b=None, what="", needs=(True, True, True),
                                draw=inputs, **kwargs) -> None:
    """conv2d's backward on CONV_DEVICE tensors (x with its layout) against torch autograd in float64: each .grad
    asked for (needs: input, weight, bias), within the rounding of its sums; None for the others."""
    x, w, b = on_device(x), on_device(w), None if b is None else on_device(b)
    g = on_device(draw.randn(tuple(F.conv2d(x, w, b, **kwargs).shape), dtype=x.dtype))
    call = f"conv2d(x, w, {'b' if b is not None else 'None'}, " + ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    what = f"{call}).backward(g) for x: {describe(x)}, w: {describe(w)} on '{CONV_DEVICE}'{what}"
    leaves = [t if t is None else wrap_torch(t, CONV_DEVICE).requires_grad_(need) for t, need in zip((x, w, b), needs)]
    with compare.labelled(what):
        conv2d(*leaves, **kwargs).backward(wrap_torch(g, CONV_DEVICE))
    exact = [t if t is None else t.to(torch.float64, copy=True).requires_grad_(need) for t, need in zip((x, w, b), needs)]
    sizes = [t if t is None else t.double().abs().requires_grad_(need) for t, need in zip((x, w, b), needs)]
    F.conv2d(*exact, **kwargs).backward(g.double())
    F.conv2d(*sizes, **kwargs).backward(g.double().abs())  # the same sums over the terms' sizes: their rounding
    n, (o, cg, kh, kw), (ho, wo) = x.shape[0], w.shape, g.shape[2:]
    terms = max(o * kh * kw, n * ho * wo) + 1
    for name, mine, theirs, size in zip(("input", "weight", "bias"), leaves, exact, sizes):
        if mine is None:
            continue
        if theirs.grad is None:
            if mine.grad is not None:
                raise AssertionError(f"{what}: {name}.grad is computed, but torch leaves it None ({name} does not "
                                     "require grad)")
            continue
        bound = terms * torch.finfo(x.dtype).eps * float(size.grad.max()) + torch.finfo(x.dtype).tiny
        compare.assert_matches(mine.grad, theirs.grad.to(x.dtype), f"{what}: {name}.grad", rtol=0, atol=bound)


torch.manual_seed(8)
expect_col2im(2, 3, (4, 5), 2, what=" (overlapping windows: a pixel sums every window's share)")
expect_col2im(1, 2, (5, 4), 2, stride=(2, 1), what=" (stride (2, 1): a row between two windows' starts gets no "
              "window of that tap)")
expect_col2im(1, 2, (5, 5), 2, stride=3, what=" (stride 3 > kernel 2: pixels no window covers are 0)")
expect_col2im(2, 2, (2, 3), (1, 3), padding=(1, 2), what=" (padding (1, 2): a window starts pH rows above the "
              "image, the padding's entries never read)")
expect_col2im(2, 1, (5, 5), 3, dilation=2, padding=2, what=" (dilation 2 and padding 2)")
expect_col2im(1, 2, (4, 5), (2, 3), dilation=(2, 1), padding=(1, 0), stride=(1, 2),
              what=" (dilation (2, 1), padding (1, 0), stride (1, 2))")
expect_col2im(2, 1, (4, 4), 3, padding=(0, 1), stride=(2, 1), what=" (padding on the columns only)")
expect_col2im(3, 4, (9, 8), 3, padding=1, max_blocks=2,
              what=" (a grid of 2 blocks for 864 pixels: each thread takes several, a grid-stride loop)")
expect_col2im(2, 3, (5, 6), 2, dtype=torch.float64, what=" (float64)")
expect_col2im(0, 3, (5, 6), 2, what=" (an empty batch: no launch)")
x, w, b = torch.randn(2, 3, 6, 7), torch.randn(4, 3, 3, 3), torch.randn(4)
expect_conv_grads_on_device(x, w, b)
expect_conv_grads_on_device(x, torch.randn(4, 3, 2, 2), b, stride=3,
                            what=" (stride 3 > kernel 2: the pixels no window sees get 0)")
expect_conv_grads_on_device(x, w, b, dilation=(2, 1), padding=(1, 2), what=" (dilation (2, 1), padding (1, 2))")
expect_conv_grads_on_device(torch.randn(2, 4, 5, 6), torch.randn(6, 2, 2, 3), b=torch.randn(6), groups=2,
                            what=" (groups 2: the channels of one group never mix with another's)")
expect_conv_grads_on_device(x, torch.randn(4, 3, 2, 2), padding="same",
                            what=" (padding 'same' with an even kernel: the device's constant_pad_nd backward)")
expect_conv_grads_on_device(x.transpose(2, 3), w, b, stride=2, what=" (a transposed input, stride 2)")
expect_conv_grads_on_device(x.contiguous(memory_format=torch.channels_last), w, b, padding=1,
                            what=" (a channels-last input, its result copied into channels last on the device)")
expect_conv_grads_on_device(x, w, b, needs=(True, False, False), what=" (only the input requires grad)")
expect_conv_grads_on_device(x, w, b, needs=(False, True, True), what=" (the input does not require grad)")
expect_conv_grads_on_device(x.double(), w.double(), b.double(), padding=1, what=" (float64)")
leaves = [wrap_torch(on_device(t), CONV_DEVICE).requires_grad_() for t in (x, w)]
y = conv2d(*leaves, padding=1)
with recording() as launches:
    y.sum().backward()
names = [launch.kernel.split("<")[0] for launch in launches]
if names.count("col2im") != 1 or names.count("im2col") != 1:
    raise AssertionError(f"the backward of conv2d(x, w, padding=1) for a (2, 3, 6, 7) x on '{CONV_DEVICE}' launched "
                         f"{names}: one col2im (the input's gradient) and one im2col (the weight's)")
print(f"the backward of conv2d on '{CONV_DEVICE}': {len(names)} launches, {', '.join(names)}")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_col2im(draw):
    n, c, h, w = draw(0, 2) if draw.coin(6) else draw(1, 2), draw(1, 3), draw(1, 8), draw(1, 8)
    (kh, kw), (dh, dw) = (draw(1, 3), draw(1, 3)), (draw(1, 2), draw(1, 2))
    (ph, pw), (sh, sw) = (draw(0, 2), draw(0, 2)), (draw(1, 4), draw(1, 3))
    ho, wo = conv_output_size(h, kh, sh, ph, dh), conv_output_size(w, kw, sw, pw, dw)
    if ho <= 0 or wo <= 0:
        return
    expect_col2im(n, c, (h, w), (kh, kw), (dh, dw), (ph, pw), (sh, sw), max_blocks=draw.choice([1, 3, MAX_BLOCKS]),
                  dtype=draw.choice([torch.float32, torch.float64]), draw=draw)


def random_conv_grads_on_device(draw):
    groups = draw.choice([1, 1, 2])
    n, c, o, kh, kw = draw(1, 2), groups * draw(1, 2), groups * draw(1, 3), draw(1, 3), draw(1, 3)
    x = draw.noncontiguous(draw.randn((n, c, draw(kh + 2, 7), draw(kw + 2, 7))))
    kwargs = dict(groups=groups, stride=(draw(1, 4), draw(1, 3)), padding=(draw(0, 1), draw(0, 2)),
                  dilation=(draw(1, 2), draw(1, 2)))
    if draw.coin(4):
        kwargs.update(padding="same", stride=1)
    needs = draw.choice([(True, True, True), (True, False, True), (False, True, False)])
    expect_conv_grads_on_device(x, draw.randn((o, c // groups, kh, kw)), draw.randn((o,)) if draw.coin() else None,
                                needs=needs, draw=draw, **kwargs)


for_random_inputs(random_col2im, 12)
for_random_inputs(random_conv_grads_on_device, 6)
### END HIDDEN TESTS

# %% [markdown]
# Last, batch norm on the device, so that the CNN runs there whole: its two
# operators composed of the backend's operators (the arithmetic of your CPU
# kernels, written with tensors; each call still one autograd node). Torch
# has a kernel for each (`batch_norm_cuda` in
# [`Normalization.cu`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cuda/Normalization.cu)):
# a reduction per channel, then an elementwise pass — chapter 05's patterns.

# %% reference=true
@register_cuda_kernel("native_batch_norm")
def native_batch_norm_cuda(x: Tensor, weight, bias, running_mean, running_var, training: bool, momentum: float,
                           eps: float) -> tuple:
    dims, shape = channel_dims(x)
    if training:
        n = x.numel() // x.shape[1]
        mean = x.mean(dims)
        centered = x - mean.reshape(shape)
        var = (centered * centered).mean(dims)
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean * momentum)
        if running_var is not None:
            running_var.mul_(1 - momentum).add_(var * (momentum * n / (n - 1)))
    else:
        mean, var = running_mean.to(x.dtype), running_var.to(x.dtype)
        centered = x - mean.reshape(shape)
    invstd = 1.0 / (var + eps).sqrt()
    y = centered * invstd.reshape(shape)
    if weight is not None:
        y = y * weight.reshape(shape)
    return (y if bias is None else y + bias.reshape(shape)), mean, invstd


@register_cuda_kernel("native_batch_norm_backward")
def native_batch_norm_backward_cuda(grad: Tensor, x: Tensor, weight, mean: Tensor, invstd: Tensor, training: bool,
                                    output_mask) -> tuple:
    dims, shape = channel_dims(x)
    x_hat = (x - mean.reshape(shape)) * invstd.reshape(shape)
    sum_g, sum_g_x_hat = grad.sum(dims), (grad * x_hat).sum(dims)
    grad_input = None
    if output_mask[0]:
        scale = invstd if weight is None else invstd * weight
        if training:
            n = x.numel() // x.shape[1]
            grad = grad - (sum_g / n).reshape(shape) - x_hat * (sum_g_x_hat / n).reshape(shape)
        grad_input = grad * scale.reshape(shape)
    return grad_input, sum_g_x_hat if output_mask[1] else None, sum_g if output_mask[2] else None


# %% reference=true
__all__ += ["IM2COL", "launch_im2col", "convolution_cuda", "constant_pad_cuda", "COL2IM", "launch_col2im",
            "convolution_backward_cuda", "native_batch_norm_cuda", "native_batch_norm_backward_cuda"]

# %% [markdown]
# ## Check your work
#
# Save the notebook (Ctrl+S), then run the cell below: it re-runs the saved
# file in a fresh kernel, as the grader will, and lists every exercise.

# %%
check()
