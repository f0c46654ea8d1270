"""Random view operations for tests: an `Op` is one step of a chain (a method call like .transpose(0, 1), a
property like .T, an index [1:, ::2]) that applies to a torch tensor and to a framework's alike, and prints
as the code it is. `random_op(draw, t, names)` makes one that fits t, now and then one that torch rejects,
so that tests check the errors too. Chapters 01 and 02 check chains of them step by step."""
from __future__ import annotations

import math

__all__ = ["Op", "LAYOUT_OPS", "chain_text", "index_text", "random_op", "random_index", "random_dim",
           "random_view_shape"]


class Op:
    """One step of a chain: a method call like .transpose(0, 1), a property like .T, or an index [1:, ::2]."""

    def __init__(self, name, *args):
        self.name, self.args = name, args

    def __call__(self, x):
        if self.name == "getitem":
            return x[self.args[0]]
        if self.name in ("T", "mT"):
            return getattr(x, self.name)
        return getattr(x, self.name)(*self.args)

    def __str__(self):
        if self.name == "getitem":
            key = self.args[0] if isinstance(self.args[0], tuple) else (self.args[0],)
            return "[" + ", ".join(index_text(k) for k in key) + ("," if len(key) == 1 and isinstance(self.args[0], tuple) else "") + "]"
        if self.name in ("T", "mT"):
            return "." + self.name
        return f".{self.name}({', '.join(repr(a) for a in self.args)})"

    __repr__ = __str__


def index_text(k) -> str:
    """One index item as it is written in Python (None, ..., a slice as a:b:c, an int)."""
    if k is None:
        return "None"
    if k is Ellipsis:
        return "..."
    if isinstance(k, slice):
        text = ("" if k.start is None else str(k.start)) + ":" + ("" if k.stop is None else str(k.stop))
        return text + ("" if k.step is None else f":{k.step}")
    return repr(k)


def chain_text(ops, name: str = "x") -> str:
    """The chain as code: chain_text([Op("transpose", 0, 1), Op("getitem", 0)]) == "x.transpose(0, 1)[0]"."""
    return name + "".join(str(op) for op in ops)


def random_dim(draw, n: int, extra: int = 0) -> int:
    """A dim of an n-dim tensor (of n + extra, for unsqueeze), in either spelling (1 or -n + 1)."""
    m = max(n + extra, 1)
    d = draw(0, m - 1)
    return d - m if draw(0, 1) else d


def _permutation(draw, n):
    dims = list(range(n))
    for i in range(n - 1, 0, -1):
        j = draw(0, i)
        dims[i], dims[j] = dims[j], dims[i]
    return [d - n if draw(0, 2) == 0 else d for d in dims]


def random_view_shape(draw, shape) -> list[int]:
    """A shape with as many elements, made by merging and splitting dims (often viewable) or at random."""
    numel = math.prod(shape)
    dims = list(shape)
    if numel == 0 or draw(0, 1):
        for _ in range(draw(1, 3)):
            kind = draw(0, 3)
            if kind == 0 and len(dims) >= 2:
                i = draw(0, len(dims) - 2)
                dims[i:i + 2] = [dims[i] * dims[i + 1]]
            elif kind == 1 and dims:
                i = draw(0, len(dims) - 1)
                f = [k for k in range(1, dims[i] + 1) if dims[i] % k == 0] if dims[i] else [0, 1, 2]
                k = f[draw(0, len(f) - 1)]
                dims[i:i + 1] = [k, dims[i] // k if k else draw(0, 3)] if dims[i] else [k, 0]
            elif kind == 2:
                dims.insert(draw(0, len(dims)), 1)
            elif 1 in dims:
                dims.remove(1)
    else:
        factors, m, p = [], numel, 2
        while m > 1:
            while m % p == 0:
                factors.append(p)
                m //= p
            p += 1
        dims = [1] * draw(1, 4)
        for f in factors:
            dims[draw(0, len(dims) - 1)] *= f
    if dims and draw(0, 2) == 0:
        dims[draw(0, len(dims) - 1)] = -1
    return dims


def _permute_op(draw, t, name, bad):
    n = t.dim()
    dims = _permutation(draw, n)
    if bad and n < 2:
        dims = dims + [0]
    elif bad:  # a dim named twice, often in its other spelling (0 and -n are the same dim)
        dims = dims[:-1] + [dims[0] + n if dims[0] < 0 else dims[0] - n if draw(0, 1) else dims[0]]
    return Op(name, *dims)


def _view_op(draw, t, name, bad):
    dims = random_view_shape(draw, tuple(t.shape))
    if bad:
        dims = dims + [2] if dims else [2]
    return Op(name, *dims) if dims and draw(0, 1) else Op(name, tuple(dims))


def _squeeze_op(draw, t, name, bad):
    n, shape = t.dim(), tuple(t.shape)
    ones = [d for d in range(n) if shape[d] == 1]
    kind = draw(0, 3)
    if bad:
        return Op(name, max(n, 1))
    if kind == 0:
        return Op(name)
    if kind == 1 or not ones:
        return Op(name, random_dim(draw, n))
    if kind == 2:
        return Op(name, ones[draw(0, len(ones) - 1)])
    dims = [d - n if draw(0, 1) else d for d in ones[:draw(1, len(ones))]]
    if draw(0, 5) == 0:  # a dim named twice, in its other spelling: torch refuses it
        dims.append(dims[0] + n if dims[0] < 0 else dims[0] - n)
    return Op(name, tuple(dims))


def _flatten_op(draw, t, name, bad):
    n = t.dim()
    a, b = sorted([draw(0, max(n, 1) - 1), draw(0, max(n, 1) - 1)])
    if bad and a < b:
        a, b = b, a
    a, b = (a - max(n, 1) if draw(0, 2) == 0 else a), (b - max(n, 1) if draw(0, 2) == 0 else b)
    return [Op(name), Op(name, a), Op(name, a, b)][draw(0, 2)]


def _narrow_op(draw, t, name, bad):
    n, shape = t.dim(), tuple(t.shape)
    if n == 0:
        return Op(name, 0, 0, 1)
    d = draw(0, n - 1)
    size = shape[d]
    start = draw(-size, size)
    length = draw(0, size - (start + size if start < 0 else start))
    if bad:
        length = size + 1
    return Op(name, d - n if draw(0, 1) else d, start, length)


def _as_strided_op(draw, t, name, bad):
    room = t.untyped_storage().nbytes() // t.element_size()
    k = draw(0, 3)
    size = [draw(0, 3) for _ in range(k)]
    stride = [draw(0, 4) for _ in range(k)]

    def span():
        return sum((a - 1) * s for a, s in zip(size, stride)) if all(size) else 0

    if room == 0 and k:
        size[0] = 0
    while room > 0 and span() >= room:
        i = max(range(k), key=lambda d: (size[d] - 1) * stride[d])
        stride[i] //= 2
    if draw(0, 2) == 0 and t.storage_offset() + span() < room:
        offset = None
    else:
        offset = draw(0, max(room - 1 - span(), 0))
    if bad:
        offset, size = room, [max(a, 1) for a in size]
    if offset is None:
        return Op(name, tuple(size), tuple(stride))
    return Op(name, tuple(size), tuple(stride), offset)


def _expand_op(draw, t, name, bad):
    n, shape = t.dim(), tuple(t.shape)
    sizes = [draw(0, 3) if s == 1 and draw(0, 1) else (-1 if name == "expand" and draw(0, 3) == 0 else s)
             for s in shape]
    lead = [draw(0, 3) for _ in range(draw(0, 2))] if n else [draw(1, 3) for _ in range(draw(0, 2))]
    if bad and any(s > 1 for s in shape):
        i = max(range(n), key=lambda d: shape[d])
        sizes[i] = shape[i] + 1
    elif bad:
        lead = [-1] + lead if name == "expand" else lead + [2, 3][:max(0, 1 - n)]
    target = lead + sizes
    return Op(name, *target) if name == "expand" and target and draw(0, 1) else Op(name, tuple(target))


def _no_arguments_op(draw, t, name, bad):
    return Op(name)


def _transpose_op(draw, t, name, bad):
    if bad:
        return Op(name, max(t.dim(), 1), 0)
    return Op(name, random_dim(draw, t.dim()), random_dim(draw, t.dim()))


def _unsqueeze_op(draw, t, name, bad):
    return Op(name, t.dim() + 1 if bad else random_dim(draw, t.dim(), extra=1))


def _getitem_op(draw, t, name, bad):
    return Op(name, random_index(draw, tuple(t.shape), bad))


# The arguments of each op, drawn (draw, t, name, bad) -> Op; `bad`: ones torch rejects. Named module
# functions, no lambdas: the grading sandbox trusts the kit's frames by the code objects of its modules'
# functions, and a lambda kept only in this dict would be a stranger there (its draws refused).
_OP_ARGUMENTS = {
    "T": _no_arguments_op, "mT": _no_arguments_op, "contiguous": _no_arguments_op, "clone": _no_arguments_op,
    "transpose": _transpose_op, "permute": _permute_op, "view": _view_op, "reshape": _view_op,
    "unsqueeze": _unsqueeze_op, "squeeze": _squeeze_op, "flatten": _flatten_op, "narrow": _narrow_op,
    "as_strided": _as_strided_op, "expand": _expand_op, "broadcast_to": _expand_op, "getitem": _getitem_op,
}


def random_op(draw, t, names, errors=True):
    """An Op of one of `names` with arguments that fit t; now and then (errors=True) one torch rejects."""
    name = names[draw(0, len(names) - 1)]
    n = t.dim()
    bad = errors and draw(0, 11) == 0
    if name == "T" and n != 2:
        name = "mT"  # torch warns about T for other than 2 dims
    if name == "permute" and n == 0:
        name = "transpose"
    if name == "mT" and n < 2 and not (bad and n == 1):
        name = "transpose"
    if name not in _OP_ARGUMENTS:
        raise ValueError(name)
    return _OP_ARGUMENTS[name](draw, t, name, bad)


def random_index(draw, shape, bad=False):
    """A random index for a tensor of `shape` (ints, slices, None, Ellipsis); with `bad`, one meant to be refused
    (out of range, too many indices, a negative step)."""
    n = len(shape)
    left = draw(0, n)
    right = draw(0, n - left) if draw(0, 2) == 0 else 0
    ellipsis = right > 0 or draw(0, 3) == 0

    def item(size):
        if size > 0 and draw(0, 2) == 0:
            return draw(-size, size - 1)
        start = None if draw(0, 1) else draw(-size - 2, size + 2)
        stop = None if draw(0, 1) else draw(-size - 2, size + 2)
        return slice(start, stop, [None, 1, 2, 3][draw(0, 3)])

    key = [item(shape[d]) for d in range(left)]
    tail = [item(shape[n - right + d]) for d in range(right)]
    if bad:
        kind = draw(0, 2)
        if kind == 0 and n:
            key = [shape[0]] + key[1:] if left else [shape[0]]
        elif kind == 1:
            key = key + [0] * (n - left - right + 1)
        elif left + right < n:
            key = key + [slice(None, None, -1)]
    key = key + ([Ellipsis] if ellipsis else []) + tail
    for _ in range(draw(0, 2)):
        key.insert(draw(0, len(key)), None)
    return tuple(key) if len(key) != 1 or draw(0, 1) else key[0]


# The ops that change only a layout and never fail on a fitting tensor: random_layout's steps.
LAYOUT_OPS = ("transpose", "permute", "getitem", "getitem", "narrow", "expand", "unsqueeze", "T")
