"""One random-input protocol for every chapter's tests: a test is a function of `draw`, run on many
fresh inputs, and a failing input is simplified before it is reported.

    @for_random_inputs(examples=50)
    def _(draw):
        shape = draw.shape(ndim=(1, 3))
        x = draw.noncontiguous(draw.randn(shape))
        compare.assert_matches(my_op(x), torch_op(x), f"my_op(x) for {describe(x)}")

Every value a test draws goes through `draw(low, high)`, an int in [low, high]. Fresh draws come from
the course's stream (`course.inputs`: while a notebook is graded, the grader's, reseeded before each test
cell), so a failure message names the seed that replays it. When an example fails, the recorded choices
are shrunk (dropped, set to their lowest, halved) and the test rerun on them while it still fails with an
AssertionError: the report is the simplest failing input found, in the test's own message. This is
MiniTorch's and Hypothesis's idea (a choice sequence that is both the input and its shrinker), without
Hypothesis, which reads frames the grading sandbox refuses.
"""
from __future__ import annotations

import time

import torch

from course import compare, inputs

__all__ = ["Draws", "for_random_inputs", "with_fixed_inputs"]


class Draws:
    """draw(low, high): an int in [low, high], fresh (at most `scale` of the way from low to high, so that
    early examples are small) or replayed from recorded choices (clamped into range; `low` once they run
    out). Every other method is built on it, so that a replay decides every value."""

    def __init__(self, scale: float = 1.0, replay: list[int] | None = None, source=None):
        """source: where fresh draws come from, source(low, high) (the project's hypothesis tests pass one
        of hypothesis's, which then shrinks); the course's stream when None."""
        self.scale, self.replay, self.source, self.made = scale, replay, source, []

    def __call__(self, low: int, high: int) -> int:
        low, high = int(low), int(high)
        if high < low:
            raise ValueError(f"draw({low}, {high}): an empty range")
        if self.replay is not None:
            i = len(self.made)
            value = min(max(self.replay[i], low), high) if i < len(self.replay) else low
        elif self.source is not None:
            value = self.source(low, high)
        else:
            value = inputs.randint(low, low + round((high - low) * self.scale))
        self.made.append(value)
        return value

    randint = __call__

    def coin(self, odds: int = 2) -> bool:
        """True one time in `odds` (shrinks to False)."""
        return self(0, odds - 1) == odds - 1

    def choice(self, options):
        """One of options (shrinks to the first)."""
        options = list(options)
        return options[self(0, len(options) - 1)]

    def shape(self, ndim: tuple[int, int] = (1, 4), size: tuple[int, int] = (1, 5),
              allow_zero: bool = False) -> tuple[int, ...]:
        """A shape of ndim[0]..ndim[1] dims of size[0]..size[1]; with allow_zero, sometimes a 0 dim."""
        dims = [self(*size) for _ in range(self(*ndim))]
        if allow_zero and dims and self.coin(5):
            dims[self(0, len(dims) - 1)] = 0
        return tuple(dims)

    def generator(self, device: str = "cpu") -> torch.Generator:
        """A torch generator from one draw: the values it makes shrink as that draw does."""
        g = torch.Generator(device=device)
        g.manual_seed(self(0, 2**31 - 1))
        return g

    def randn(self, *shape, dtype=torch.float32, device: str = "cpu", requires_grad: bool = False) -> torch.Tensor:
        """Standard normal values; randn(2, 3), randn((2, 3)) and randn() (a scalar) all work."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])
        t = torch.randn(tuple(shape), generator=self.generator(), dtype=dtype).to(device)
        return t.requires_grad_(requires_grad)

    def values(self, shape, dtype=torch.float32) -> torch.Tensor:
        """Random values of any dtype: normal floats, small ints (-5..5), fair bools."""
        shape = tuple(shape)
        if dtype == torch.bool:
            return torch.rand(shape, generator=self.generator()) < 0.5
        if not dtype.is_floating_point:
            return torch.randint(-5, 6, shape, generator=self.generator()).to(dtype)
        return torch.randn(shape, generator=self.generator(), dtype=dtype)

    def noncontiguous(self, t: torch.Tensor) -> torch.Tensor:
        """The same values as t in a non-contiguous layout (transposed or stepped); t itself when no dim
        is longer than 1, and now and then (shrinking towards it) t as it is."""
        long_dims = [d for d in range(t.dim()) if t.shape[d] > 1]
        if not long_dims or not self(0, 7):
            return t
        if len(long_dims) >= 2 and self.coin():
            return inputs.transposed_copy(t, long_dims[0], long_dims[-1])
        return inputs.stepped_copy(t, self.choice(long_dims))


def for_random_inputs(test=None, examples: int = 100, *, shrink_seconds: float = 3.0):
    """Run test(draw) on `examples` fresh inputs, small ones first; on an AssertionError, simplify the
    input while the test still fails and raise the simplest failure found, with the seed that replays it. Usable as a call,
    `for_random_inputs(test, examples=20)`, or as a decorator, `@for_random_inputs(examples=20)`, which
    runs the test at once. Any other exception propagates as it is: it is not the failure being reported."""
    __tracebackhide__ = True
    if test is None:
        def decorator(t):
            __tracebackhide__ = True
            return for_random_inputs(t, examples=examples, shrink_seconds=shrink_seconds)
        return decorator
    for i in range(examples):
        draws = Draws(scale=min(1.0, 3 * (i + 1) / examples))
        try:
            test(draws)
        except AssertionError as error:
            failure = _with_replay_hint(_simplest_failure(test, draws.made, error, shrink_seconds))
            raise compare.ending_at_the_test(failure) from None
    return None


def with_fixed_inputs(check, *args, **kwargs):
    """check(*args, **kwargs), a check whose inputs are fixed (a 100,000-step chain, one named edge case):
    its verdict is the same on every seed, so when a seed sweep reruns the test cells on other seeds
    (`course.inputs.repeating()`) it is not run again. It must draw nothing: a RuntimeError says so if it
    does, since a check that draws belongs in `for_random_inputs`."""
    __tracebackhide__ = True
    if inputs.repeating():
        return None
    before = inputs.drawn()
    result = check(*args, **kwargs)
    if inputs.drawn() != before:
        raise RuntimeError(f"{getattr(check, '__name__', check)} drew random inputs: it is not a check with fixed "
                           "inputs (run it with for_random_inputs instead of with_fixed_inputs)")
    return result


def _with_replay_hint(error: AssertionError) -> AssertionError:
    """The failure, ending with how to replay its inputs (a bare `assert` in a test does not say it)."""
    text = BaseException.__str__(error)  # not a student's exception class's own __str__
    hint = inputs.replay_hint()
    return error if not hint or hint.strip() in text else AssertionError(text + hint)


def _fails(test, choices: list[int]) -> AssertionError | None:
    __tracebackhide__ = True
    try:
        test(Draws(replay=choices))
    except AssertionError as e:
        return e
    except Exception:  # a different problem: not the failure being simplified
        return None
    return None


def _candidates(choices: list[int]):
    """Simpler choice sequences, most aggressive first: cut the tail, then set one choice to 0, halve it,
    or take one off it."""
    for j in range(len(choices)):
        yield choices[:j]
    for j in range(len(choices)):
        for smaller in (0, choices[j] // 2, choices[j] - 1 if choices[j] > 0 else choices[j] + 1):
            if abs(smaller) < abs(choices[j]):
                yield choices[:j] + [smaller] + choices[j + 1:]


def _simplest_failure(test, choices: list[int], error: AssertionError, seconds: float) -> AssertionError:
    __tracebackhide__ = True
    deadline = time.monotonic() + seconds
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for candidate in _candidates(choices):
            if time.monotonic() > deadline:
                break
            found = _fails(test, candidate)
            if found is not None:
                choices, error, improved = candidate, found, True
                break
    return error

