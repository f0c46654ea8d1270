"""Chapter 07's batch norm on a device (the CUDA key: its two operators composed of chapter 05's), against torch:
BatchNorm2d in training and eval mode, its output, running statistics and every gradient, on the emulator and,
marked gpu (skipped, never passed, without one), on a GPU; the CPU kernels' speed is the conv benchmark's."""
from __future__ import annotations

import pytest
import torch

from course.cuda.status import emulator_available, gpu_available

DEVICES = [pytest.param("emu", marks=pytest.mark.skipif(not emulator_available(), reason="no g++ here: the CUDA "
                                                        "emulator cannot run (not counted as passed)")),
           pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="no CUDA "
                                                                          "GPU with cupy here: not run (not counted as passed)")])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batchnorm2d_on_the_device_steps_as_torchs(reference_picotorch, device, dtype):
    pt = reference_picotorch
    gen = torch.Generator().manual_seed(3)
    theirs = torch.nn.BatchNorm2d(4).to(dtype)
    state = {k: (torch.randn(v.shape, generator=gen, dtype=dtype) if v.is_floating_point() else v)
             for k, v in theirs.state_dict().items()}
    state["running_var"] = state["running_var"].abs() + 0.5  # a variance
    theirs.load_state_dict(state)
    mine = pt.BatchNorm2d(4, dtype=pt.float64 if dtype == torch.float64 else pt.float32)
    mine.load_state_dict(theirs.state_dict())
    mine.to(device)
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    for mode in ("train", "train", "eval"):
        getattr(theirs, mode)(), getattr(mine, mode)()
        x = torch.randn(3, 4, 5, 2, generator=gen, dtype=dtype) * 2 + 1
        g = torch.randn(3, 4, 5, 2, generator=gen, dtype=dtype)
        x_theirs, x_mine = x.clone().requires_grad_(), pt.from_torch(x.clone()).to(device).requires_grad_(True)
        out_theirs, out = theirs(x_theirs), mine(x_mine)
        assert out.device.type == device
        torch.testing.assert_close(out.to_torch().cpu(), out_theirs.detach(), **tolerance)
        out_theirs.backward(g)
        out.backward(pt.from_torch(g.clone()).to(device))
        torch.testing.assert_close(x_mine.grad.to_torch().cpu(), x_theirs.grad, **tolerance)
        params = dict(mine.named_parameters())
        for name, p in theirs.named_parameters():
            torch.testing.assert_close(params[name].grad.to_torch().cpu(), p.grad, **tolerance)
            params[name].grad, p.grad = None, None
        for key, value in theirs.state_dict().items():
            torch.testing.assert_close(mine.state_dict()[key].to_torch().cpu(), value, **tolerance)
