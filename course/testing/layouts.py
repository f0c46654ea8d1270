"""Random tensors in the layouts that break a framework: transposed, sliced with steps, expanded, with an
offset, with size-0 and size-1 dims; shapes that broadcast together; and copies that keep a layout. Every
generator takes `draw` (course.testing.Draws) first, so that a failing input can be replayed and shrunk."""
from __future__ import annotations

import math

import torch

from course.testing.views import LAYOUT_OPS, random_op

__all__ = ["random_shape", "random_layout", "broadcast_family", "matmul_shapes", "matmul_operand", "same_layout_copy",
           "leaf_copy"]


def random_shape(draw, max_dims: int = 4, max_size: int = 4) -> tuple[int, ...]:
    """0..max_dims dims of 1..max_size, one time in twelve 0 (shrinks to the scalar shape ())."""
    return tuple(0 if draw(0, 11) == 0 else draw(1, max_size) for _ in range(draw(0, max_dims)))


def random_layout(draw, dtype=None, max_dims: int = 4, values: str = "positions") -> torch.Tensor:
    """A torch tensor in a random layout, made by a few layout ops (LAYOUT_OPS) from a fresh storage. With
    values="positions" each element's value is its storage position (a wrong stride shows as a wrong
    value); with "random", random values of the dtype. dtype None: float32, float64, int64 or bool."""
    dtype = dtype or draw.choice([torch.float32, torch.float64, torch.int64, torch.bool])
    shape = random_shape(draw, max_dims=max_dims)
    if values == "positions":
        n = math.prod(shape)
        t = (torch.arange(n).to(dtype) if dtype != torch.bool else torch.arange(n) % 3 == 0).reshape(shape)
    else:
        t = draw.values(shape, dtype)
    for _ in range(draw(0, 3)):
        op = random_op(draw, t, LAYOUT_OPS, errors=False)
        try:
            t = op(t)
        except (RuntimeError, IndexError, ValueError, TypeError):
            pass
    return t


def broadcast_family(draw, k: int, allow_zero: bool | None = None) -> list[tuple[int, ...]]:
    """k shapes that broadcast together: tails of one shape (0..3 dims of 1..4), each dim sometimes 1.
    With allow_zero None, the shape has a 0 dim one time in ten."""
    if allow_zero is None:
        allow_zero = draw.coin(10)
    full = draw.shape(ndim=(0, 3), size=(1, 4), allow_zero=allow_zero)
    shapes = []
    for _ in range(k):
        tail = full[draw(0, len(full)):]
        shapes.append(tuple(1 if draw(0, 2) == 0 else n for n in tail))
    return shapes


def matmul_shapes(draw) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shapes (a, b) that `a @ b` accepts: 1 to 4 dims each, m and n of 0 to 4, k of 1 to 4, and batch dims
    that broadcast (the tails of one batch shape, each dim sometimes 1)."""
    m, k, n = draw(0, 4), draw(1, 4), draw(0, 4)
    rank_a, rank_b = draw(1, 4), draw(1, 4)
    batch = [draw(1, 3) for _ in range(max(rank_a, rank_b) - 2)]

    def shape(rank, matrix):
        if rank == 1:
            return (k,)
        tail = batch[len(batch) - (rank - 2):]
        return tuple(tail[i] if draw(0, 2) else 1 for i in range(rank - 2)) + matrix

    a = shape(rank_a, (m, k))
    return a, shape(rank_b, (k, n))


def matmul_operand(draw, shape, dtype) -> torch.Tensor:
    """Random values of `shape` and `dtype` in one of the layouts a matmul meets: contiguous, the last two
    dims column-major, non-contiguous (transposed or stepped), or a batch dim of stride 0."""
    t = draw.values(shape, dtype)
    kind = draw(0, 3)
    if kind == 1 and t.dim() >= 2:
        t = t.mT.contiguous().mT
    elif kind == 2:
        t = draw.noncontiguous(t)
    elif kind == 3 and t.dim() >= 3 and t.shape[0] > 1:
        t = t[:1].expand(t.shape)
    return t


def same_layout_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of t's whole storage, viewed with t's exact shape, strides and offset (on t's device): equal
    values and layout, no shared memory."""
    n = t.untyped_storage().nbytes() // t.element_size()
    return t.detach().as_strided((n,), (1,), 0).clone().as_strided(t.shape, t.stride(), t.storage_offset())


def leaf_copy(t: torch.Tensor, requires_grad: bool = True) -> torch.Tensor:
    """A leaf tensor (torch can give it a .grad) with t's values and strides, sharing no memory with t."""
    leaf = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    with torch.no_grad():
        leaf.copy_(t)
    return leaf.requires_grad_(requires_grad)
