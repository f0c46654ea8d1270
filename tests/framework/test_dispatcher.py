"""picotorch's dispatcher (chapter 01, section 3; chapter 02's Autograd key), against torch's.

- every computing method of Tensor is one call of the dispatcher: a logging mode (a fallback on a key
  below Autograd, as torch's Python key is) sees the same operators that torch's TorchDispatchMode
  sees for the same program, forward and backward, where picotorch's operators map to aten's;
- the key set of a call: the backend key of its tensors, as in `torch._C._dispatch_keys`, and Autograd
  while one of them requires grad and grad mode is on;
- grad mode is the Autograd key in this thread's exclude set: per thread, as torch's;
- redispatch goes below the key it names; a key without a kernel falls through only when declared so.
"""
from __future__ import annotations

import threading

import pytest
import torch

ATEN_NAME = {"matmul": "mm"}  # picotorch's operator -> torch's, where they differ (torch transposes more: not compared)


@pytest.fixture(scope="module")
def pt(reference_picotorch):
    return reference_picotorch


@pytest.fixture(scope="module")
def torch_log():
    """course.testing's TorchLog, the TorchDispatchMode that logs the aten operators it sees: its tests' other side."""
    from course.testing.dispatch_log import TorchLog
    return TorchLog


@pytest.fixture(scope="module")
def logging_mode(pt):
    """A TorchDispatchMode-like logger: a key below Autograd and above the backends, whose fallback logs the
    operator and redispatches below itself with itself excluded (torch runs __torch_dispatch__ with its mode off)."""
    key = pt.DispatchKey.declare("TestLoggingMode", 5)  # chapter 05 declares Python at 4
    log = []

    def logger(op, *args, **kwargs):
        log.append(op)
        with pt.ExcludeDispatchKeys(key):
            return pt.redispatch(op, key, *args, **kwargs)

    pt.register_fallback(key, logger)

    class Logging:
        def __enter__(self):
            log.clear()
            self.including = pt.IncludeDispatchKeys(key)
            self.including.__enter__()
            return log

        def __exit__(self, *exc):
            return self.including.__exit__(*exc)

    return Logging


def _common(ours, theirs):
    """Both logs restricted to the operators both have (picotorch's named as aten's)."""
    ours = [ATEN_NAME.get(op, op) for op in ours]
    shared = set(ours) & set(theirs)
    return [op for op in ours if op in shared], [op for op in theirs if op in shared]


def test_a_mode_sees_every_operator_as_torch_dispatch_mode_does(pt, logging_mode, torch_log):
    x_torch = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    x = pt.from_torch(x_torch.detach().clone()).requires_grad_()
    with torch_log() as theirs:
        y_torch = (x_torch @ x_torch.T).exp().sum()
    forward_theirs = list(theirs.ops)
    with logging_mode() as ours:
        y = (x @ x.T).exp().sum()
        forward_ours = list(ours)
    assert [ATEN_NAME.get(op, op) for op in forward_ours] == [op for op in forward_theirs if op != "detach"], \
        f"forward of (x @ x.T).exp().sum(): picotorch's mode saw {forward_ours}, torch's {forward_theirs}"
    with torch_log() as theirs:
        y_torch.backward()
    with logging_mode() as ours:
        y.backward()
        backward_ours = list(ours)
    mine, torchs = _common(backward_ours, theirs.ops)
    assert mine == torchs, (f"backward: picotorch's mode saw {backward_ours}, torch's {theirs.ops} (in common: "
                            f"{mine} and {torchs})")
    assert {"ones_like", "mul", "mm", "permute", "add"} <= set(torchs), torchs
    torch.testing.assert_close(x.grad.to_torch(), x_torch.grad)


def test_the_key_set_of_a_call(pt):
    t_torch = torch.randn(2, 3)
    t = pt.from_torch(t_torch)
    torch_keys = repr(torch._C._dispatch_keys(t_torch))
    assert pt.key_names(pt.key_set(t)) == ["CPU"] and "CPU" in torch_keys, (pt.key_names(pt.key_set(t)), torch_keys)
    assert pt.key_names(pt.key_set(2.0, "add", None)) == []
    w = pt.from_torch(torch.randn(3)).requires_grad_()
    assert pt.key_names(pt.key_set(t, w)) == ["Autograd", "CPU"]
    assert pt.key_names(pt.key_set(w.detach())) == ["CPU"]
    with pt.no_grad():
        assert pt.key_names(pt.key_set(t, w)) == ["CPU"]
        assert not (w * 2).requires_grad
    with torch.inference_mode():  # torch's way of taking the autograd keys out: new tensors lack them
        assert "AutogradCPU" not in repr(torch._C._dispatch_keys(torch.randn(2)))
    assert (w * 2).requires_grad and (w * 2).grad_fn is not None


def test_grad_mode_is_per_thread_as_in_torch(pt):
    seen = {}

    def look(framework):
        seen[framework.__name__] = framework.is_grad_enabled()

    for framework, no_grad in ((torch, torch.no_grad), (pt, pt.no_grad)):
        with no_grad():
            other = threading.Thread(target=look, args=(framework,))
            other.start()
            other.join()
            assert not framework.is_grad_enabled()
        assert framework.is_grad_enabled()
    assert seen == {"torch": True, "picotorch": True}, seen
    assert pt.GradMode.enabled
    pt.GradMode.enabled = False
    try:
        assert not pt.is_grad_enabled() and pt.LOCAL_KEYS.excluded & pt.DispatchKey.Autograd.bit
    finally:
        pt.GradMode.enabled = True


def test_redispatch_fallthrough_and_missing_kernels(pt):
    key = pt.DispatchKey.declare("TestOnly", 12)
    x = pt.from_torch(torch.arange(4.0))
    calls = []

    @pt.register_kernel("test_only_op", key)
    def above(t):
        calls.append("TestOnly")
        return pt.redispatch("test_only_op", key, t)

    @pt.register_kernel("test_only_op", pt.DispatchKey.CPU)
    def below(t):
        calls.append("CPU")
        return "done"

    with pt.IncludeDispatchKeys(key):
        assert pt.dispatch("test_only_op", x) == "done"
        assert calls == ["TestOnly", "CPU"]
        with pytest.raises(NotImplementedError, match="exp.*TestOnly"):
            x.exp()  # TestOnly has no kernel for exp, no fallback, and is no fallthrough
        pt.register_fallthrough(key)
        torch.testing.assert_close(x.exp().to_torch(), torch.arange(4.0).exp())
    with pytest.raises(NotImplementedError, match="no_such_op"):
        pt.dispatch("no_such_op", x)
    assert pt.dispatch("test_only_op", x) == "done" and calls[-1] == "CPU"


def test_no_method_of_tensor_computes_outside_the_dispatcher(pt, logging_mode):
    x = pt.from_torch(torch.randn(2, 3))
    cases = {"neg": lambda: -x, "add": lambda: x + 1, "mul": lambda: 2 * x, "sum": lambda: x.sum(1),
             "view": lambda: x.view(3, 2), "getitem": lambda: x[0], "matmul": lambda: x @ x.mT,
             "max": lambda: x.max(), "item": lambda: x[0, 0].item(), "tolist": lambda: x.tolist(),
             "clone": lambda: x.clone(), "to_torch": lambda: x.to_torch(), "add_": lambda: x.clone().add_(1)}
    for op, call in cases.items():
        with logging_mode() as log:
            call()
        assert op in log, f"{op}: the mode saw {log}"
