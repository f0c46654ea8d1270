"""Fresh random inputs for tests: different on every run, replayable on demand.

Each process draws one seed (or takes COURSE_SEED) and every failure message
ends with it, so a student can replay exactly the inputs that failed.
"""
from __future__ import annotations

import os
import random

import torch

SEED_ENV = "COURSE_SEED"
_seed = int(os.environ[SEED_ENV]) if os.environ.get(SEED_ENV) else random.SystemRandom().randrange(2**31)
_rng = random.Random(_seed)


def seed() -> int:
    return _seed


def reseed(new_seed: int) -> None:
    """Draw the same inputs as the run whose failure message named `new_seed`."""
    global _seed, _rng
    _seed, _rng = new_seed, random.Random(new_seed)


def replay_hint() -> str:
    return (f"\n  (random inputs, seed {_seed}: run course.inputs.reseed({_seed}) before the tests, "
            f"or set COURSE_SEED={_seed}, to replay them)")


def generator(device: str = "cpu") -> torch.Generator:
    """A torch generator seeded from this run's stream."""
    g = torch.Generator(device=device)
    g.manual_seed(_rng.randrange(2**63))
    return g


def randint(low: int, high: int) -> int:
    """An int in [low, high], both ends included."""
    return _rng.randint(low, high)


def choice(options):
    return _rng.choice(list(options))


def shape(ndim: tuple[int, int] = (1, 4), size: tuple[int, int] = (1, 5), allow_zero: bool = False) -> tuple[int, ...]:
    """A random shape; with allow_zero, a dimension is sometimes 0."""
    dims = [randint(*size) for _ in range(randint(*ndim))]
    if allow_zero and dims and _rng.random() < 0.2:
        dims[_rng.randrange(len(dims))] = 0
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
    if len(long_dims) >= 2 and _rng.random() < 0.5:
        a, b = long_dims[0], long_dims[-1]
        return t.transpose(a, b).contiguous().transpose(a, b)
    d = _rng.choice(long_dims)
    shape = list(t.shape)
    shape[d] *= 2
    big = torch.zeros(shape, dtype=t.dtype, device=t.device)
    index = [slice(None)] * t.dim()
    index[d] = slice(None, None, 2)
    big[tuple(index)] = t
    return big[tuple(index)]
