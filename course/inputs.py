"""Fresh random inputs for tests: different on every run, replayable on demand.

Each process draws one seed (or takes COURSE_SEED) and every failure message
ends with it, so a student can replay exactly the inputs that failed.

While a notebook is graded the stream is not this module's: every draw is an
audit event (`sys.audit("course.inputs", ...)`) that the grading sandbox answers
from a stream of its own, which no notebook code can reach, which it reseeds
from the grader's secret before every test cell, and from which a student's
code may not draw (nor reseed it) while a test runs (docs/grading.md, "Threat
model"). Outside grading nobody answers the event and the draws come from this
module's own generator, with the same algorithm, so that `reseed(seed)` with a
seed from a failure message replays exactly what the grader drew.
"""
from __future__ import annotations

import os
import random
import sys
from _random import Random as _MersenneTwister

import torch

SEED_ENV = "COURSE_SEED"
_seed = int(os.environ[SEED_ENV]) if os.environ.get(SEED_ENV) else random.SystemRandom().randrange(2**31)
_rng = _MersenneTwister(_seed)


def _draw(getrandbits, uniform, op, args):
    """One draw from a Mersenne Twister given by its C methods, as random.Random draws: "random"
    (a float in [0, 1)), "randint" (low, high: both ends included) or "randrange" (n: [0, n)).
    The grading sandbox draws with this very function from its own stream, so both agree.
    Uses no global name: nothing a notebook rebinds can change what it returns."""
    if op == "random":
        return uniform()
    if op == "randint":
        low, n = args[0], args[1] - args[0] + 1
    else:
        low, n = 0, args[0]
    if n <= 0:
        raise ValueError(f"empty range for a random draw: {op}{tuple(args)}")
    k = n.bit_length()
    r = getrandbits(k)
    while r >= n:
        r = getrandbits(k)
    return low + r


def _ask(op: str, args: tuple, _audit=sys.audit, _local=_rng, _draw=_draw, _drawn=[0],  # noqa: B006
         _repeating=[False]):  # noqa: B006
    """The stream's answer: the grading sandbox's when it answers (it fills the box), else ours.

    `_drawn[0]` counts the draws from this module's own stream since it was last (re)seeded, and
    `_repeating[0]` says whether a seed sweep is rerunning test cells (`repeating()`). They live only in
    these defaults, not in a module-level table: the grader's integrity check holds every table of the
    course's modules to its contents when grading began, and both change outside the sandbox's stream."""
    box: list = []
    _audit("course.inputs", op, args, box)
    if box:
        return box[0]
    if op == "seed":
        return _seed
    if op == "drawn":
        return _drawn[0]
    if op == "repeating":
        if args:
            _repeating[0] = bool(args[0])
        return _repeating[0]
    if op == "reseed":
        _drawn[0] = 0
        return None  # outside grading: reseed() reseeds this module's own stream
    _drawn[0] += 1
    return _draw(_local.getrandbits, _local.random, op, args)


def seed() -> int:
    """The seed of the inputs drawn now (while a notebook is graded: of this test cell)."""
    return _ask("seed", ())


def reseed(new_seed: int) -> None:
    """Draw the same inputs as the run whose failure message named `new_seed`."""
    global _seed
    new_seed = int(new_seed)
    _ask("reseed", (new_seed,))  # the grading sandbox reseeds its own stream (outside a test) or refuses
    _seed = new_seed
    _rng.seed(new_seed)


def repeating() -> bool:
    """Whether the test cells are running again, on another seed, after a run that checked everything: a
    seed sweep (the project's tests/support/seed_sweep.py) says so, so that a check with fixed inputs, whose verdict
    no seed can change, runs once (`course.testing.with_fixed_inputs`). False while a notebook is graded:
    the grading sandbox answers, and nothing a student writes changes its answer."""
    return bool(_ask("repeating", ()))


def set_repeating(flag: bool) -> None:
    """For a seed sweep: from now on (flag true), the test cells run again on other seeds."""
    _ask("repeating", (int(bool(flag)),))


def drawn() -> int:
    """How many random draws the tests made since the stream was last seeded (while a notebook is graded:
    in this test cell)."""
    return _ask("drawn", ())


def replay_hint() -> str:
    """How to replay the random inputs of a failure; nothing when none was drawn (fixed inputs replay
    themselves, and a seed would mean nothing)."""
    if not drawn():
        return ""
    s = seed()
    return (f"\n  (random inputs, seed {s}: run course.inputs.reseed({s}) before the tests, "
            f"or set COURSE_SEED={s}, to replay them)")


def generator(device: str = "cpu") -> torch.Generator:
    """A torch generator seeded from this run's stream."""
    g = torch.Generator(device=device)
    g.manual_seed(_ask("randrange", (2**63,)))
    return g


def randint(low: int, high: int) -> int:
    """An int in [low, high], both ends included."""
    return _ask("randint", (int(low), int(high)))


def choice(options):
    """One of `options`, drawn from the course's stream."""
    options = list(options)
    return options[_ask("randrange", (len(options),))]


def shape(ndim: tuple[int, int] = (1, 4), size: tuple[int, int] = (1, 5), allow_zero: bool = False) -> tuple[int, ...]:
    """A random shape; with allow_zero, a dimension is sometimes 0."""
    dims = [randint(*size) for _ in range(randint(*ndim))]
    if allow_zero and dims and _ask("random", ()) < 0.2:
        dims[_ask("randrange", (len(dims),))] = 0
    return tuple(dims)


def randn(*shape, dtype=torch.float32, device: str = "cpu", requires_grad: bool = False) -> torch.Tensor:
    """Standard normal values; randn(2, 3), randn((2, 3)) and randn() (a scalar) all work."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = tuple(shape[0])
    t = torch.randn(tuple(shape), generator=generator(), dtype=dtype).to(device)
    return t.requires_grad_(requires_grad)


def noncontiguous(t: torch.Tensor) -> torch.Tensor:
    """The same values as `t` in a non-contiguous layout (transposed or stepped), chosen at
    random. A tensor with no dimension longer than 1 has no such layout and comes back as is."""
    long_dims = [d for d in range(t.dim()) if t.shape[d] > 1]
    if not long_dims:
        return t
    if len(long_dims) >= 2 and _ask("random", ()) < 0.5:
        return transposed_copy(t, long_dims[0], long_dims[-1])
    return stepped_copy(t, long_dims[_ask("randrange", (len(long_dims),))])


def transposed_copy(t: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """t's values in memory laid out with dims a and b swapped: the same shape, non-contiguous strides."""
    return t.transpose(a, b).contiguous().transpose(a, b)


def stepped_copy(t: torch.Tensor, d: int) -> torch.Tensor:
    """t's values at every other element of a buffer twice as long along dim d: a stride of 2 there."""
    shape = list(t.shape)
    shape[d] *= 2
    big = torch.zeros(shape, dtype=t.dtype, device=t.device)
    index = [slice(None)] * t.dim()
    index[d] = slice(None, None, 2)
    big[tuple(index)] = t
    return big[tuple(index)]
