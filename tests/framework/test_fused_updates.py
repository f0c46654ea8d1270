"""The fused in-place updates of chapter 04 (`lerp_`, `addcmul_`, `addcdiv_`, torch's `_single_tensor_adam`
uses them), against torch: values, the tensor returned is the one updated, torch's error for a result that does
not fit in place; on the emulator's device (chapter 05's compositions of the elementwise kernels) too; and Adam
stepping on the device as on the CPU."""
import pytest
import torch

from course.cuda.status import emulator_available

CALLS = {  # name -> (ours, torch's): the same update with the same arguments
    "lerp_ (weight 0.1)": (lambda t, a, b: t.lerp_(a, 0.1), lambda t, a, b: t.lerp_(a, 0.1)),
    "lerp_ (weight 0.75: torch's second form)": (lambda t, a, b: t.lerp_(a, 0.75), lambda t, a, b: t.lerp_(a, 0.75)),
    "addcmul_": (lambda t, a, b: t.addcmul_(a, b, value=-0.5), lambda t, a, b: t.addcmul_(a, b, value=-0.5)),
    "addcdiv_": (lambda t, a, b: t.addcdiv_(a, b, value=2.0), lambda t, a, b: t.addcdiv_(a, b, value=2.0)),
}


def _operands(pt, device=None):
    gen = torch.Generator().manual_seed(0)
    theirs = [torch.randn(3, 4, generator=gen), torch.randn(3, 4, generator=gen), torch.rand(4, generator=gen) + 0.5]
    ours = [pt.from_torch(t.clone()) for t in theirs]
    return theirs, ours if device is None else [t.to(device) for t in ours]


@pytest.mark.parametrize("name", CALLS)
def test_each_update_is_torchs_in_place(reference_picotorch, name):
    pt = reference_picotorch
    mine, theirs_call = CALLS[name]
    theirs, ours = _operands(pt)
    got = mine(*ours)
    theirs_call(*theirs)
    assert got is ours[0], f"{name} must return the tensor it updated, as torch's in-place methods do"
    torch.testing.assert_close(ours[0].to_torch(), theirs[0], rtol=1e-6, atol=1e-6)


def test_a_result_that_does_not_fit_is_torchs_error(reference_picotorch):
    pt = reference_picotorch
    small, big = pt.from_torch(torch.ones(4)), pt.from_torch(torch.ones(3, 4))
    with pytest.raises(RuntimeError, match=r"output with shape \[4\] doesn't match the broadcast shape \[3, 4\]"):
        small.addcmul_(big, big)


@pytest.mark.skipif(not emulator_available(), reason="no g++ here: the CUDA emulator cannot run (not counted as passed)")
@pytest.mark.parametrize("name", CALLS)
def test_each_update_runs_on_the_device(reference_picotorch, name):
    pt = reference_picotorch
    mine, theirs_call = CALLS[name]
    theirs, ours = _operands(pt, "emu")
    assert mine(*ours) is ours[0]
    theirs_call(*theirs)
    assert ours[0].device.type == "emu"
    torch.testing.assert_close(ours[0].to_torch(), theirs[0], rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(not emulator_available(), reason="no g++ here: the CUDA emulator cannot run (not counted as passed)")
def test_adam_steps_on_the_device_as_torchs(reference_picotorch):
    pt = reference_picotorch
    start, grads = torch.randn(5, 3), [torch.randn(5, 3) for _ in range(3)]
    theirs = torch.nn.Parameter(start.clone())
    ours = pt.Parameter(pt.from_torch(start.clone()).to("emu"))
    opt_t, opt = torch.optim.Adam([theirs], lr=0.1, amsgrad=True), pt.Adam([ours], lr=0.1, amsgrad=True)
    for g in grads:
        theirs.grad, ours.grad = g.clone(), pt.from_torch(g.clone()).to("emu")
        opt_t.step()
        opt.step()
    assert ours.device.type == "emu"
    torch.testing.assert_close(ours.to_torch(), theirs.detach(), rtol=1e-5, atol=1e-6)
