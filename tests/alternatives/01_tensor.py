"""Correct answers to chapter 01 written differently from the course's solution.

ALTERNATIVES = {what is different: {exercise: the cell's code}}. tests/chapters/test_alternative_solutions.py puts
each alternative's cells in place of the solution cells, runs the whole source notebook (hidden tests
included) and expects every exercise to earn its points: the tests check what torch does, not how the
course's solution happens to do it (other loops, other algorithms, other error messages where torch's
exception type is all the chapter asks for).
"""
from solution_text import solution

_STRIDES_BY_INDEX = '''
def contiguous_strides(shape) -> tuple:
    """The strides of a fresh (contiguous, row-major) tensor of this shape."""
    shape = tuple(shape)
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * max(shape[d + 1], 1)
    return tuple(strides)


def storage_position(index, stride, offset: int = 0) -> int:
    """Where element `index` lives in the storage: offset + sum of index[d] * stride[d]."""
    return offset + sum(i * s for i, s in zip(index, stride))
'''

_COPIES_WITHOUT_RECURSION = '''
@register_kernels(DispatchKey.CPU)
class Copies:
    def contiguous(self) -> "Tensor":
        return self if self.is_contiguous() else self._copy_with(contiguous_strides(self._shape))

    def clone(self) -> "Tensor":
        return self._copy_with(dense_strides_like(self._shape, self._stride))

    def _copy_with(self, stride) -> "Tensor":
        out = Tensor(Storage.empty(self.numel(), self.dtype), self._shape, stride, 0)
        np.copyto(out.numpy(), self.numpy())
        return out

    def item(self):
        if self.numel() != 1:
            raise RuntimeError(f"only one element tensors can be converted to Python scalars (this one has {self.numel()})")
        return self._storage[storage_position((0,) * self.dim(), self._stride, self._offset)]

    def tolist(self):
        # every element in row-major order, then grouped into lists from the last dim outwards
        values = [self._storage[storage_position(index, self._stride, self._offset)] for index in np.ndindex(*self._shape)]
        if not self._shape:
            return values[0]
        for d in range(self.dim() - 1, 0, -1):
            size, groups = self._shape[d], math.prod(self._shape[:d])
            values = [values[g * size:(g + 1) * size] for g in range(groups)]
        return values
'''

_TRANSPOSES_BY_PERMUTE = '''
@register_kernels(DispatchKey.CPU)
class Transposes:
    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        n = self.dim()
        order = list(range(n))
        d0, d1 = wrap_dim(dim0, n), wrap_dim(dim1, n)
        if n:
            order[d0], order[d1] = order[d1], order[d0]
        return self.permute(order)

    def permute(self, *dims) -> "Tensor":
        dims = shape_arg(dims)
        n = self.dim()
        if len(dims) != n:
            raise RuntimeError("number of dimensions in the tensor input does not match the length of the desired "
                               f"ordering of dimensions: {n} != {len(dims)}")
        order = [wrap_dim(d, n) for d in dims]
        if sorted(order) != list(range(n)):
            raise RuntimeError(f"permute{tuple(dims)} names a dim more than once")
        shape, stride = [], []
        for d in order:
            shape.append(self._shape[d])
            stride.append(self._stride[d])
        return Tensor(self._storage, shape, stride, self._offset)

    @property
    def T(self) -> "Tensor":
        return self.permute(list(reversed(range(self.dim()))))

    @property
    def mT(self) -> "Tensor":
        n = self.dim()
        if n < 2:
            raise RuntimeError(f"mT needs at least 2 dims, not {n}")
        return self.permute(list(range(n - 2)) + [n - 1, n - 2])
'''

_SIZE_ONE_DIMS_WITH_A_SET = '''
@register_kernels(DispatchKey.CPU)
class SizeOneDims:
    def unsqueeze(self, dim: int) -> "Tensor":
        n = self.dim()
        d = wrap_dim(dim, n + 1)
        shape, stride = list(self._shape), list(self._stride)
        shape.insert(d, 1)
        stride.insert(d, self._shape[d] * self._stride[d] if d < n else 1)
        return Tensor(self._storage, shape, stride, self._offset)

    def squeeze(self, dim=None) -> "Tensor":
        n = self.dim()
        chosen = set(range(n)) if dim is None else set()
        for d in (() if dim is None else dim if isinstance(dim, (tuple, list)) else (dim,)):
            wrapped = wrap_dim(d, n)
            if wrapped in chosen:
                raise RuntimeError(f"squeeze: dim {d} is named twice")
            chosen.add(wrapped)
        shape, stride = [], []
        for d in range(n):
            if d in chosen and self._shape[d] == 1:
                continue
            shape.append(self._shape[d])
            stride.append(self._stride[d])
        return Tensor(self._storage, shape, stride, self._offset)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        n = self.dim()
        start, end = wrap_dim(start_dim, n), wrap_dim(end_dim, n)
        if n == 0:
            return self.reshape(1)
        if start > end:
            raise RuntimeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        if start == end:
            return self
        merged = 1
        for size in self._shape[start:end + 1]:
            merged *= size
        return self.reshape(*self._shape[:start], merged, *self._shape[end + 1:])
'''

_ELEMENTWISE_WITH_FULL_ARRAYS = '''
@register_kernels(DispatchKey.CPU)
class Elementwise:
    def _unary(self, op: str) -> "Tensor":
        if self.dtype is bool_ and op in ("neg", "abs", "relu"):
            raise RuntimeError(f"{op}() of a bool tensor")
        dtype = self.dtype
        if op in FLOAT_RESULT and dtype.category < 2:
            dtype = float32
        with np.errstate(all="ignore"):
            out = UNARY_KERNELS[op](np.array(self.numpy(), dtype=dtype.numpy))
        return from_numpy(np.asarray(out).astype(dtype.numpy, copy=False))

    def _binary(self, op: str, other, reverse: bool = False) -> "Tensor":
        left, right = (other, self) if reverse else (self, other)
        if op == "sub" and bool_ in [x.dtype if isinstance(x, Tensor) else bool_ if isinstance(x, bool) else None
                                     for x in (left, right)]:
            raise RuntimeError("subtraction with bools")
        dtype = result_type(left, right)
        if op == "div" and dtype.category < 2:
            dtype = float32
        shapes = [x.shape if isinstance(x, Tensor) else () for x in (left, right)]
        shape = broadcast_shapes(*shapes)
        arrays = []
        for x in (left, right):  # a number becomes a full array of the compute dtype, like a broadcast 0-dim tensor
            arrays.append(x.broadcast_to(shape).numpy().astype(dtype.numpy) if isinstance(x, Tensor)
                          else np.full(shape, x, dtype=dtype.numpy))
        with np.errstate(all="ignore"):
            out = BINARY_KERNELS[op](*arrays)
        return from_numpy(np.asarray(out).astype(bool_.numpy if op in COMPARISONS else dtype.numpy, copy=False))

    def _inplace(self, op: str, other) -> "Tensor":
        result = self._binary(op, other)
        if tuple(result.shape) != tuple(self._shape):
            raise RuntimeError(f"in-place {op}: the result's shape {result.shape} is not the tensor's {self._shape}")
        if not can_cast(result.dtype, self.dtype):
            raise RuntimeError(f"in-place {op}: cannot write {result.dtype} into {self.dtype}")
        for size, stride in zip(self._shape, self._stride):
            if size > 1 and stride == 0 and self.numel():
                raise RuntimeError(f"in-place {op} into an expanded tensor (stride 0)")
        np.copyto(self.numpy(), result.numpy(), casting="unsafe")
        return self
'''

_REDUCTIONS_WITH_OTHER_WORDS = '''
def reduction_dims(dim, ndim: int) -> tuple:
    """The dims a reduction folds, as NumPy axes (non-negative, distinct)."""
    if dim is None:
        return tuple(range(ndim))
    seen = []
    for d in (list(dim) if isinstance(dim, (tuple, list)) else [dim]):
        wrapped = wrap_dim(d, ndim)
        if wrapped in seen:
            raise RuntimeError(f"the dims to reduce name dim {wrapped} twice")
        seen.append(wrapped)
    return tuple(seen) if ndim else ()


@register_kernels(DispatchKey.CPU)
class Reductions:
    def sum(self, dim=None, keepdim: bool = False) -> "Tensor":
        dtype = int64 if self.dtype.category < 2 else self.dtype
        out = np.add.reduce(self.numpy().astype(dtype.numpy), axis=reduction_dims(dim, self.dim()), keepdims=keepdim)
        return from_numpy(np.asarray(out, dtype.numpy))

    def mean(self, dim=None, keepdim: bool = False) -> "Tensor":
        if self.dtype.category < 2:
            raise RuntimeError(f"mean() of a {self.dtype.name} tensor: only floating point tensors have a mean")
        axes = reduction_dims(dim, self.dim())
        count = math.prod(self._shape[d] for d in axes)
        with np.errstate(all="ignore"):  # the mean of nothing: 0 / 0, nan as in torch
            out = np.sum(self.numpy(), axis=axes, keepdims=keepdim) / self.dtype.numpy.type(count)
        return from_numpy(np.asarray(out, self.dtype.numpy))

    def max(self, dim=None, keepdim: bool = False):
        values = self.numpy()
        if dim is None:
            if values.size == 0:
                raise RuntimeError("max() of a tensor with no elements needs a dim")
            return from_numpy(np.asarray(values.max()))
        d = wrap_dim(dim, self.dim())
        if self.dim() == 0:
            return MaxResult(from_numpy(np.array(values)), from_numpy(np.zeros((), np.int64)))
        if self._shape[d] == 0:
            raise IndexError(f"max(): dim {d} has no elements")
        indices = np.expand_dims(np.argmax(values, axis=d), d)
        found = np.take_along_axis(values, indices, axis=d)
        if not keepdim:
            found, indices = found.squeeze(d), indices.squeeze(d)
        return MaxResult(from_numpy(np.array(found)), from_numpy(np.array(indices, np.int64)))

    def argmax(self, dim=None, keepdim: bool = False) -> "Tensor":
        if self.dtype is bool_:
            raise RuntimeError("argmax of a bool tensor")
        values = self.numpy()
        if dim is None:
            if values.size == 0:
                raise IndexError("argmax() of a tensor with no elements")
            flat = int(np.argmax(values.reshape(-1)))
            return from_numpy(np.full((1,) * self.dim() if keepdim else (), flat, np.int64))
        d = wrap_dim(dim, self.dim())
        if self.dim() == 0:
            return from_numpy(np.zeros((), np.int64))
        if self._shape[d] == 0:
            raise IndexError(f"argmax(): dim {d} has no elements")
        return from_numpy(np.asarray(np.argmax(values, axis=d, keepdims=keepdim), np.int64))
'''

_BROADCAST_BY_PADDING = '''
def broadcast_shapes(*shapes) -> tuple:
    """The shape that all of shapes broadcast to; RuntimeError if they do not."""
    ndim = max([len(s) for s in shapes] + [0])
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    result = []
    for sizes in zip(*padded):
        big = {s for s in sizes if s != 1}
        if len(big) > 1:
            raise RuntimeError(f"shapes {[tuple(s) for s in shapes]} do not broadcast: sizes {sorted(big)} in one dim")
        result.append(big.pop() if big else 1)
    return tuple(result)


@register_kernels(DispatchKey.CPU)
class Broadcasting:
    def expand(self, *sizes) -> "Tensor":
        sizes = list(shape_arg(sizes))
        n, m = self.dim(), len(sizes)
        if m < n:
            raise RuntimeError(f"expand to {tuple(sizes)}: fewer sizes than the tensor's {n} dims")
        if n == 0:  # every dim is new, and every step lands on the one element
            if any(s < 0 for s in sizes):
                raise RuntimeError(f"expand: a negative size in {tuple(sizes)} for a 0-dim tensor")
            return Tensor(self._storage, sizes, [0] * m, self._offset)
        lead = m - n
        shape, stride = [None] * m, [None] * m
        for i in reversed(range(m)):
            if i >= lead:
                size, step = self._shape[i - lead], self._stride[i - lead]
            else:
                if sizes[i] < 0:
                    raise RuntimeError(f"expand: size {sizes[i]} for the new leading dim {i}")
                size, step = 1, (shape[i + 1] * stride[i + 1] if i + 1 < m else 1)
            want = size if sizes[i] == -1 else sizes[i]
            if want != size and size != 1:
                raise RuntimeError(f"expand: dim {i} of size {size} cannot become {want}")
            shape[i], stride[i] = want, (step if want == size else 0)
        return Tensor(self._storage, shape, stride, self._offset)

    def broadcast_to(self, shape) -> "Tensor":
        return self.expand(*shape)
'''

_MATMUL_ONE_MATRIX_AT_A_TIME = '''
@register_kernels(DispatchKey.CPU)
class MatMul:
    def matmul(self, other: "Tensor") -> "Tensor":
        if min(self.dim(), other.dim()) == 0:
            raise RuntimeError("matmul needs operands with at least one dim")
        if self.dtype is not other.dtype:
            raise RuntimeError(f"matmul of {self.dtype} and {other.dtype}")
        a = self if self.dim() > 1 else self.unsqueeze(0)
        b = other if other.dim() > 1 else other.unsqueeze(1)
        m, k = a.shape[-2:]
        k2, n = b.shape[-2:]
        if k != k2:
            raise RuntimeError(f"matmul: {m}x{k} times {k2}x{n}")
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        left, right = a.expand(*batch, m, k).numpy(), b.expand(*batch, k, n).numpy()
        out = np.zeros(batch + (m, n), dtype=self.dtype.numpy)
        for index in np.ndindex(*batch):  # one matrix product per batch element
            out[index] = np.dot(left[index], right[index])
        shape = batch + ((m,) if self.dim() > 1 else ()) + ((n,) if other.dim() > 1 else ())
        return from_numpy(out).reshape(shape)
'''

_BASICS_BY_COMPARISON = """
@add_methods(Tensor)
class TensorBasics:
    def numel(self) -> int:
        count = 1
        for size in self._shape:
            count *= size
        return count

    def dim(self) -> int:
        return len(self.shape)

    def element_size(self) -> int:
        return self._storage.dtype.itemsize

    def is_contiguous(self) -> bool:
        # a fresh tensor's strides, compared only on the dims that are ever stepped along (size > 1)
        fresh = contiguous_strides(self._shape)
        return self.numel() == 0 or all(n == 1 or s == f for n, s, f in zip(self._shape, self._stride, fresh))
"""

# infer_size counted the other way round (the -1s and the negative sizes first); view_strides and the methods are
# the solution's (a port of torch's computeStride leaves little room for another algorithm).
_INFER_SIZE_COUNTING_FIRST = """
def infer_size(shape, numel: int) -> tuple:
    shape = list(shape)
    if shape.count(-1) > 1:
        raise RuntimeError(f"at most one -1 in a shape, not {shape.count(-1)}")
    if any(size < -1 for size in shape):
        raise RuntimeError(f"negative size in {shape}")
    known = math.prod(size for size in shape if size != -1)
    if -1 not in shape:
        if known != numel:
            raise RuntimeError(f"shape {shape} holds {known} elements, not {numel}")
        return tuple(shape)
    if known == 0:
        raise RuntimeError(f"the -1 of {shape} could be any size: there are no elements")
    if numel % known:
        raise RuntimeError(f"shape {shape} cannot hold {numel} elements")
    shape[shape.index(-1)] = numel // known
    return tuple(shape)
"""


def _view_with_other_infer_size() -> str:
    code = solution("01_tensor", "ex_view")
    start = code.index("def view_strides(")
    return _INFER_SIZE_COUNTING_FIRST + "\n\n" + code[start:]


_WINDOWS_BY_AS_STRIDED = """
@register_kernels(DispatchKey.CPU)
class Windows:
    def narrow(self, dim: int, start: int, length: int) -> "Tensor":
        if not self._shape:
            raise RuntimeError("narrow() of a 0-dim tensor")
        if length < 0:
            raise RuntimeError(f"narrow() of a negative length {length}")
        d = wrap_dim(dim, len(self._shape))
        size = self._shape[d]
        if start < -size or start > size:
            raise IndexError(f"narrow(): start {start} is outside [{-size}, {size}]")
        start = start + size if start < 0 else start
        if start + length > size:
            raise RuntimeError(f"narrow(): elements {start} to {start + length - 1} of a dim of size {size}")
        shape = list(self._shape)
        shape[d] = length
        return self.as_strided(shape, self._stride, self._offset + start * self._stride[d])

    def as_strided(self, size, stride, storage_offset=None) -> "Tensor":
        size, stride = list(size), list(stride)
        if len(size) != len(stride):
            raise RuntimeError(f"as_strided: {len(size)} sizes but {len(stride)} strides")
        if min(stride, default=0) < 0:
            raise RuntimeError(f"as_strided: negative stride in {stride}")
        offset = self.storage_offset() if storage_offset is None else storage_offset
        if min(size, default=1) > 0:
            last = offset + sum((n - 1) * s for n, s in zip(size, stride))  # where the farthest element lives
            if last >= len(self._storage):
                raise RuntimeError(f"as_strided: element at {last}, past a storage of {len(self._storage)}")
        return Tensor(self._storage, tuple(size), tuple(stride), offset)
"""

_INDEXING_BY_CHAINED_VIEWS = """
@register_kernels(DispatchKey.CPU)
class Indexing:
    def __getitem__(self, key) -> "Tensor":
        # one view per item, left to right: narrow and squeeze for an int, as_strided for a slice, unsqueeze for None
        items = list(key) if isinstance(key, tuple) else [key]
        for k in items:
            if isinstance(k, bool) or not (k is None or k is Ellipsis or isinstance(k, (int, slice))):
                raise TypeError(f"cannot index a tensor with {k!r}")
            if isinstance(k, slice) and k.step is not None and k.step < 1:
                raise ValueError("step must be greater than zero")
        eaten = len([k for k in items if k is not None and k is not Ellipsis])
        if eaten > self.dim():
            raise IndexError(f"{eaten} indices for a tensor of {self.dim()} dims")
        t, d, ellipsis_seen = self, 0, False
        for k in items:
            if k is None:
                t = t.unsqueeze(d)
                d += 1
            elif k is Ellipsis:
                if not ellipsis_seen:
                    d += self.dim() - eaten
                ellipsis_seen = True
            elif isinstance(k, slice):
                start, stop, step = k.indices(t.shape[d])
                shape, stride = list(t.shape), list(t.stride())
                shape[d], stride[d] = len(range(start, stop, step)), stride[d] * step
                t = t.as_strided(shape, stride, t.storage_offset() + start * t.stride(d))
                d += 1
            else:
                size = t.shape[d]
                if not -size <= k < size:
                    raise IndexError(f"index {k} is out of range for a dim of size {size}")
                t = t.narrow(d, k, 1).squeeze(d)
        return Tensor(t._storage, t._shape, t._stride, t._offset)
"""

_PROMOTION_BY_WEIGHT = """
def result_type(a, b) -> DType:
    def weight_and_dtype(x):  # tensors with dims weigh most, then 0-dim tensors, then Python numbers
        if isinstance(x, Tensor):
            return (2 if x.dim() else 1), x.dtype
        if isinstance(x, bool):
            return 0, bool_
        if isinstance(x, int):
            return 0, int64
        if isinstance(x, float):
            return 0, float32
        raise TypeError(f"result_type of a {type(x).__name__}")

    (wa, da), (wb, db) = weight_and_dtype(a), weight_and_dtype(b)
    if wa == wb:
        return promote_types(da, db)
    heavy, light = (da, db) if wa > wb else (db, da)
    return promote_types(heavy, light) if light.category > heavy.category else heavy


def can_cast(from_: DType, to: DType) -> bool:
    rank = {bool_: 0, int64: 1, float32: 2, float64: 2}
    return rank[from_] <= rank[to]
"""

ALTERNATIVES = {
    "loops where the solution slices, an iterative tolist, other error messages": {
        "ex_strides": _STRIDES_BY_INDEX,
        "ex_copies": _COPIES_WITHOUT_RECURSION,
        "ex_transpose": _TRANSPOSES_BY_PERMUTE,
        "ex_unsqueeze": _SIZE_ONE_DIMS_WITH_A_SET,
        "ex_elementwise": _ELEMENTWISE_WITH_FULL_ARRAYS,
    },
    "other algorithms: padded broadcasting, take_along_axis, a matmul per batch element": {
        "ex_reductions": _REDUCTIONS_WITH_OTHER_WORDS,
        "ex_broadcast": _BROADCAST_BY_PADDING,
        "ex_matmul": _MATMUL_ONE_MATRIX_AT_A_TIME,
    },
    "views made of other views, another contiguity test, infer_size counting first, promotion by weight": {
        "ex_tensor_basics": _BASICS_BY_COMPARISON,
        "ex_view": _view_with_other_infer_size(),
        "ex_narrow": _WINDOWS_BY_AS_STRIDED,
        "ex_indexing": _INDEXING_BY_CHAINED_VIEWS,
        "ex_promotion": _PROMOTION_BY_WEIGHT,
    },
}
