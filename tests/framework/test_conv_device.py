"""Chapter 07's convolution on the device outside the notebook: its im2col and col2im kernels compiled for sm_90
by a GPU compiler (no C library there, unlike the emulator's g++), and, marked gpu (skipped, never passed,
without one), the kernels, conv2d and its backward on torch.cuda memory against torch.cuda, a batch that needs
the grid-stride loop included. The emulator's path, with its counts of loads and stores against the least there
can be, is the notebook's."""
from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F

from course.cuda import compile_check
from course.cuda.status import gpu_available


@pytest.fixture(scope="module")
def conv(reference_picotorch):
    return importlib.import_module("picotorch.ch07_conv")


@pytest.mark.parametrize("kernels,name", [("IM2COL", "im2col"), ("COL2IM", "col2im")])
def test_the_kernel_compiles_for_sm_90_without_spills(conv, kernels, name):
    report = compile_check(getattr(conv, kernels).source, [f"{name}<float>", f"{name}<double>"], arch="sm_90")
    if not report.ran:
        pytest.skip(f"no GPU compiler (NVRTC or nvcc) here: {report.reason} (not counted as passed)")
    assert report.ok, str(report)
    assert not [str(k) for k in report.kernels if k.spills or k.stack_bytes], str(report)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU with cupy here: not run (not counted as passed)")
class TestConvOnTheGpu:
    @pytest.mark.parametrize("shape,args", [
        ((2, 3, 9, 8), (3, 1, 1, 1)),
        ((1, 2, 11, 7), ((2, 3), (2, 1), (1, 2), (1, 2))),
        ((64, 16, 28, 28), (3, 1, 1, 1)),  # 802,816 windows, more threads than a grid of MAX_BLOCKS has
    ])
    def test_im2col_matches_f_unfold_on_cuda(self, conv, shape, args):
        x = torch.randn(shape, device="cuda").transpose(2, 3)
        want = F.unfold(x, *args)
        cols = torch.full(want.shape, float("nan"), device="cuda")
        conv.launch_im2col(cols, x, *args)
        torch.testing.assert_close(cols, want, rtol=0, atol=0)

    @pytest.mark.parametrize("kwargs", [dict(padding=1), dict(stride=2, dilation=(2, 1)), dict(groups=2),
                                        dict(padding="same")])
    def test_conv2d_on_cuda_tensors_matches_torch_cuda(self, reference_picotorch, conv, kwargs):
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        x, b = torch.randn(8, 4, 13, 12, device="cuda"), torch.randn(6, device="cuda")
        w = torch.randn(6, 4 // kwargs.get("groups", 1), 2 if kwargs.get("padding") == "same" else 3, 3, device="cuda")
        wrap = reference_picotorch.wrap_torch
        got = conv.conv2d(wrap(x, "cuda"), wrap(w, "cuda"), wrap(b, "cuda"), **kwargs)
        assert str(got.device).startswith("cuda")
        want = F.conv2d(x.double(), w.double(), b.double(), **kwargs)
        bound = (w[0].numel() + 1) * torch.finfo().eps * F.conv2d(x.abs(), w.abs(), b.abs(), **kwargs).max().item()
        torch.testing.assert_close(got.to_torch(), want.float(), rtol=0, atol=bound)

    @pytest.mark.parametrize("shape,args", [
        ((2, 3, 9, 8), (3, 1, 1, 1)),
        ((1, 2, 11, 7), ((2, 3), (2, 1), (1, 2), (1, 2))),
        ((2, 3, 10, 9), (2, 1, 0, 3)),  # stride 3 > kernel 2: pixels no window covers
        ((64, 16, 28, 28), (3, 1, 1, 1)),  # 802,816 pixels, more threads than a grid of MAX_BLOCKS has
    ])
    def test_col2im_matches_f_fold_on_cuda(self, conv, shape, args):
        n, c, h, w = shape
        (kh, kw), (dh, dw), (ph, pw), (sh, sw) = (conv.pair(a, "arg") for a in args)
        length = conv.conv_output_size(h, kh, sh, ph, dh) * conv.conv_output_size(w, kw, sw, pw, dw)
        cols = torch.randn(n, c * kh * kw, length, device="cuda")
        want = F.fold(cols, (h, w), *args)
        image = torch.full(want.shape, float("nan"), device="cuda")
        conv.launch_col2im(image, cols, *args)
        assert not image.isnan().any()
        torch.testing.assert_close(image, want)

    @pytest.mark.parametrize("kwargs", [dict(padding=1), dict(stride=3), dict(stride=2, dilation=(2, 1)),
                                        dict(groups=2, padding=(0, 2)), dict(padding="same")])
    def test_conv2d_backward_on_cuda_tensors_matches_torch_cuda(self, reference_picotorch, conv, kwargs):
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        x, b = torch.randn(8, 4, 13, 12, device="cuda").transpose(2, 3), torch.randn(6, device="cuda")
        w = torch.randn(6, 4 // kwargs.get("groups", 1), 2 if kwargs.get("padding") == "same" else 3, 3, device="cuda")
        g = torch.randn(F.conv2d(x, w, b, **kwargs).shape, device="cuda")
        wrap = reference_picotorch.wrap_torch
        leaves = [wrap(t, "cuda").requires_grad_() for t in (x, w, b)]
        conv.conv2d(*leaves, **kwargs).backward(wrap(g, "cuda"))
        exact = [t.double().requires_grad_() for t in (x, w, b)]
        sizes = [t.double().abs().requires_grad_() for t in (x, w, b)]
        F.conv2d(*exact, **kwargs).backward(g.double())
        F.conv2d(*sizes, **kwargs).backward(g.double().abs())
        terms = max(6 * w.shape[2] * w.shape[3], g.shape[0] * g.shape[2] * g.shape[3]) + 1
        for name, mine, want, size in zip(("input", "weight", "bias"), leaves, exact, sizes):
            assert str(mine.grad.device).startswith("cuda"), name
            bound = terms * torch.finfo().eps * size.grad.max().item()
            torch.testing.assert_close(mine.grad.to_torch(), want.grad.float(), rtol=0, atol=bound,
                                       msg=lambda m, name=name: f"{name}.grad on cuda against torch.cuda: {m}")
