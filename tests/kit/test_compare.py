"""The comparison helpers every chapter's tests use: they fail on wrong results, with teaching messages."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from course import compare, inputs
from course.devices import devices


def test_matching_result_passes():
    x = inputs.randn(3, 4)
    compare.assert_matches(x.clone(), x, "clone")
    compare.assert_matches(x + 1e-7, x, "nearly equal within float32 tolerance")


@pytest.mark.parametrize("ours,expected,needle", [
    (torch.ones(3, 4), torch.ones(4, 3), "shape (3, 4) but torch has (4, 3)"),
    (torch.ones(3, dtype=torch.float64), torch.ones(3), "dtype torch.float64 but torch has torch.float32"),
    (torch.ones(3) * 1.001, torch.ones(3), "values differ from torch's"),
    (None, torch.ones(2), "got None"),
    ([1.0, 2.0], torch.ones(2), "got a list"),
])
def test_mismatch_is_named(ours, expected, needle):
    inputs.reseed(7)
    inputs.randn(2)  # a test that drew random inputs (what the replay hint is for), whatever ran before
    with pytest.raises(AssertionError, match="f\\(x\\): ") as e:
        compare.assert_matches(ours, expected, "f(x)")
    assert needle in str(e.value)
    assert "COURSE_SEED=" in str(e.value), "every failure after random draws says how to replay them"
    inputs.reseed(7)  # fixed inputs only: a seed would mean nothing
    with pytest.raises(AssertionError) as e:
        compare.assert_matches(ours, expected, "f(x)")
    assert needle in str(e.value) and "COURSE_SEED=" not in str(e.value)


def test_tolerance_follows_the_dtype():
    a = torch.tensor([1.0], dtype=torch.float64)
    compare.assert_matches(a + 1e-9, a, "float64 within its tolerance")
    with pytest.raises(AssertionError):
        compare.assert_matches(a + 1e-5, a, "float64 beyond its tolerance")
    compare.assert_matches(torch.tensor([1.0]) + 1e-6, torch.tensor([1.0]), "float32 within its tolerance")


def test_layout_checks():
    x = torch.arange(12.0).reshape(3, 4)
    with pytest.raises(AssertionError, match=r"stride \(1, 4\) but torch has \(3, 1\)"):
        compare.assert_matches(x.t(), x.t().contiguous(), "transpose(0, 1)", check_strides=True)
    with pytest.raises(AssertionError, match="storage offset 4 but torch has 0"):
        compare.assert_matches(x[1], x[1].clone(), "x[1]", check_offset=True)
    compare.assert_shares_memory(x[1], x, "x[1]")
    with pytest.raises(AssertionError, match="made a copy"):
        compare.assert_shares_memory(x[1].clone(), x, "x[1]")
    with pytest.raises(AssertionError, match="returned a view"):
        compare.assert_no_shared_memory(x[1], x, "x[1].clone()")


def test_assert_raises_names_what_happened():
    compare.assert_raises(ValueError, int, "int('x')", "x")
    with pytest.raises(AssertionError, match="returned 3 but torch raises ValueError"):
        compare.assert_raises(ValueError, int, "int('3')", "3")
    with pytest.raises(AssertionError, match="raised TypeError .* but torch raises ValueError"):
        compare.assert_raises(ValueError, int, "int(None)", None)


def test_frameworks_tensor_is_compared_through_to_torch():
    class Foreign:
        def __init__(self, t):
            self.t = t

        def to_torch(self):
            return self.t
    compare.assert_matches(Foreign(torch.ones(2)), torch.ones(2), "a picotorch tensor")
    with pytest.raises(AssertionError):
        compare.assert_matches(Foreign(torch.zeros(2)), torch.ones(2), "a picotorch tensor")


def _draw(seed):
    code = "from course import inputs; print(inputs.randn(4).tolist(), inputs.shape())"
    env = {"COURSE_SEED": str(seed)} if seed is not None else {}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **env}).stdout


def test_inputs_differ_per_run_and_replay_with_the_seed():
    assert _draw(None) != _draw(None)
    assert _draw(1234) == _draw(1234)


def test_noncontiguous_keeps_values():
    for _ in range(20):
        t = inputs.randn(inputs.shape(ndim=(1, 3)))
        n = inputs.noncontiguous(t)
        assert torch.equal(n, t)
        if max(t.shape) > 1:
            assert not n.is_contiguous(), f"noncontiguous({tuple(t.shape)}) gave strides {n.stride()}"


def test_devices_never_pretend():
    assert devices()[0] == "cpu"
    assert ("cuda" in devices()) == torch.cuda.is_available()


def test_reseed_replays_the_same_inputs():
    inputs.reseed(99)
    first = inputs.randn(5), inputs.shape()
    inputs.reseed(99)
    again = inputs.randn(5), inputs.shape()
    assert torch.equal(first[0], again[0]) and first[1] == again[1]
    assert "reseed(99)" in inputs.replay_hint()


def test_the_replay_hint_shows_only_after_random_inputs():
    """A failure on fixed inputs names no seed (replaying it would mean nothing); one after a draw does."""
    inputs.reseed(7)
    with pytest.raises(AssertionError) as fixed:
        compare.assert_equal(1, 2, "a fixed input")
    assert "seed" not in str(fixed.value) and inputs.replay_hint() == ""
    inputs.randint(0, 3)
    with pytest.raises(AssertionError) as drawn:
        compare.assert_equal(1, 2, "after a draw")
    assert "reseed(7)" in str(drawn.value)


def test_a_labelled_block_keeps_its_label_when_the_code_raises():
    """The check that was running comes first; a stub's bare NotImplementedError is left as it is."""
    def deep(n):
        return deep(n + 1)

    with pytest.raises(AssertionError) as raised:
        with compare.labelled("a chain of 5000 nodes (a recursive walk runs out of stack here)"):
            deep(0)
    message = str(raised.value)
    assert message.startswith("a chain of 5000 nodes (a recursive walk runs out of stack here): your code raised "
                              "RecursionError"), message
    with pytest.raises(NotImplementedError):
        with compare.labelled("a stub"):
            raise NotImplementedError()
    with pytest.raises(AssertionError, match="^a check: your code raised KeyError: 'x'"):
        with compare.labelled("a check"):
            {}["x"]


def test_values_are_compared_as_plain_values_made_by_the_helper():
    """Issue 14, item 4: a result that says yes to every comparison is compared by its value."""
    class Yes(int):
        __eq__ = lambda self, other: True  # noqa: E731
        __ne__ = lambda self, other: False  # noqa: E731
        __hash__ = int.__hash__

    class Always:
        __eq__ = lambda self, other: True  # noqa: E731
        __ne__ = lambda self, other: False  # noqa: E731

    with pytest.raises(AssertionError, match="got a subclass of int"):
        compare.assert_equal(Yes(5), 3, "n")
    with pytest.raises(AssertionError, match="got an? Always"):
        compare.assert_equal(Always(), [1, 2], "xs")
    compare.assert_equal(Yes(3), 3, "an int subclass with the right value")
    compare.assert_equal([torch.tensor(1), 2], [1, 2], "tensors as numbers")
    compare.assert_equal(torch.Size([2, 3]), (2, 3), "torch.Size is a tuple")
    compare.assert_equal(torch.tensor(0.1), 0.1, "a float32 number against a float, as torch's == compares")
    marker = object()
    compare.assert_equal(marker, marker, "an object is equal to itself")


def test_tensor_subclasses_and_modes_cannot_answer_for_torch():
    """Issue 14, item 3: __torch_function__ and torch's modes do not reach the comparison."""
    from torch.overrides import TorchFunctionMode

    class Agree(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return True

    class Yes(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return True

    with pytest.raises(AssertionError, match="values differ"):
        compare.assert_matches(torch.zeros(3).as_subclass(Agree), torch.ones(3), "a subclass")
    compare.assert_matches(torch.ones(3).as_subclass(Agree), torch.ones(3), "a subclass with the right values")
    zeros, ones = torch.zeros(3), torch.ones(3)
    with Yes():
        with pytest.raises(AssertionError, match="torch function mode"):
            compare.assert_matches(zeros, ones, "under a mode")
        with pytest.raises(AssertionError, match="torch function mode"):
            compare.assert_equal(3, 4, "under a mode")
    compare.assert_matches(torch.nn.Parameter(torch.ones(2)), torch.ones(2), "a Parameter is a tensor")
