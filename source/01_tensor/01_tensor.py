# ---
# jupyter:
#   course:
#     chapter: 01_tensor
#     title: Tensor
#     files:
#     - figures/storage_strides.svg
#     - figures/transpose_view.svg
#     - figures/narrow_view.svg
#     - figures/broadcasting.svg
#     - figures/dispatch_add.svg
# ---

# %% [markdown]
# # Chapter 01 — Tensor
#
# A tensor is not an array. It is a **view**: a shape, a list of strides and an
# offset, laid over a flat, typed **storage**. Transposing, slicing, adding a
# dimension of size 1 or broadcasting to a bigger shape copy nothing: they only
# change the numbers that say where each element lives.
#
# In this chapter you build that object — `picotorch.Tensor` — and every test
# checks it against `torch.Tensor`: the values, and also `stride()`,
# `storage_offset()`, `is_contiguous()` and whether two results share memory.
#
# **Time:** about 6 hours — thirteen exercises, most of them short once the strides click.
#
# **How this notebook works.** Cells with *YOUR CODE HERE* are yours; each is
# followed by a test cell. The visible tests check every rule the exercise
# states, on small inputs you can read; at grading, hidden tests try the same
# rules on random shapes and random chains of views, so "visible tests passed"
# means your code follows the rules on those inputs, not yet on all. Run
# `check("ex_view")` to re-run one exercise's visible tests, and `check()` (last
# cell) to check the whole saved notebook as the grader will.
#
# Your code becomes the `Tensor` that later chapters extend with autograd,
# modules and a CUDA backend (those chapters run on the course's reference
# version of this chapter, so a mistake here never fails them).

# %%
import numpy as np
import torch

from course import Checker, compare, inputs
from course.testing import (Op, call_yours, describe, fail, for_random_inputs, layout, random_dim, random_index,
                            random_layout, random_shape, same_chain, same_outcome, same_random_chain)

check = Checker("01_tensor")

# %% [markdown]
# ## 1. Where an element lives
#
# Element `[i0, i1, ..., ik]` of a tensor lives at storage position
#
#     storage_offset + i0 * stride[0] + i1 * stride[1] + ... + ik * stride[k]
#
# A 3×4 tensor over a storage of 12 numbers, in the usual (contiguous,
# row-major) layout, has strides `(4, 1)`: one step down a column skips a whole
# row of 4, one step along a row moves by 1.
#
# ![The storage of x = arange(12).view(3, 4) as a row of 12 cells, positions 0 to 11, and the 3 by 4 tensor as a grid below it, each row in its own colour in both: row 0 is storage 0 to 3, row 1 is 4 to 7, row 2 is 8 to 11. One step along dim 1 moves 1 cell (stride 1), one step along dim 0 moves 4 (stride 4). The element at index (1, 2) is outlined at position 0 + 1×4 + 2×1 = 6](figures/storage_strides.svg)
#
# Its transpose is the same storage with the strides swapped: shape `(4, 3)`,
# strides `(1, 4)`. Nothing moves. That is the whole idea of this chapter.
#
# ![x.T over the same storage: shape (4, 3), stride (1, 4), offset 0. Its rows, each in its colour, read storage positions 0, 4, 8, then 1, 5, 9, then 2, 6, 10, then 3, 7, 11: one step along dim 1 now jumps 4 cells, one step along dim 0 moves 1. The element at index (2, 1) is at 0 + 2×1 + 1×4 = 6, the same cell as x's element (1, 2)](figures/transpose_view.svg)
#
# Exercise 1 asks for the two functions behind that arithmetic; nothing else is needed yet.

# %% [markdown]
# ## Exercise 1 — contiguous strides, and where an element lives
#
# A fresh tensor is **contiguous**: its last dim has stride 1, and each dim's
# stride is the previous stride times the previous size, going right to left.
# For shape `(2, 3, 4)`:
#
# | dim | 0 | 1 | 2 |
# |---|---|---|---|
# | size | 2 | 3 | 4 |
# | stride | 3·4 = 12 | 4 | 1 |
#
# One rule from torch: a dim of size 0 counts as size 1 when computing the
# strides of the dims before it, so `(2, 0, 3)` has strides `(3, 3, 1)`.
#
# Write `contiguous_strides(shape)` (a tuple; `()` for shape `()`) and
# `storage_position(index, stride, offset)`: the storage position of the
# element at `index` (a tuple of non-negative ints, one per dim).
#
# Real PyTorch: `c10/core/TensorImpl.h` (`empty_tensor_restride`), and the
# contiguity rule in [`c10/core/Contiguity.h`](https://github.com/pytorch/pytorch/blob/main/c10/core/Contiguity.h).

# %% solution="ex_strides" reference=true
def contiguous_strides(shape) -> tuple:
    """The strides of a fresh (contiguous, row-major) tensor of this shape."""
    ### BEGIN SOLUTION
    strides, step = (), 1
    for size in reversed(tuple(shape)):
        strides = (step,) + strides
        if size > 1:  # a dim of size 0 or 1 never steps: it leaves the step as it is
            step *= size
    return strides
    ### END SOLUTION


def storage_position(index, stride, offset: int = 0) -> int:
    """Where element `index` lives in the storage: offset + sum of index[d] * stride[d]."""
    ### BEGIN SOLUTION
    position = offset
    for i, s in zip(index, stride):
        position += i * s
    return position
    ### END SOLUTION

# %% tests="ex_strides" points=1
STRIDE_RULES = {(): "shape () has strides ()", (2, 0, 3): "a dim of size 0 counts as size 1 for the dims before it",
         (1, 1): "a dim of size 1 counts as size 1"}
for shape in [(3, 4), (2, 3, 4), (5,), (), (2, 0, 3), (1, 1)]:
    what = f"contiguous_strides({shape})" + (f" ({STRIDE_RULES[shape]})" if shape in STRIDE_RULES else "")
    compare.assert_equal(tuple(call_yours(what, contiguous_strides, shape)), torch.empty(shape).stride(), what)
x = torch.arange(24.).reshape(2, 3, 4).transpose(0, 2)[1:]
what = f"storage_position((1, 2, 0), stride={x.stride()}, offset={x.storage_offset()})"
compare.assert_equal(call_yours(what, storage_position, (1, 2, 0), x.stride(), x.storage_offset()),
                     x[1, 2, 0].storage_offset(), what)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_strides(draw):
    shape = random_shape(draw, max_dims=5, max_size=5)
    what = f"contiguous_strides({shape})"
    compare.assert_equal(tuple(call_yours(what, contiguous_strides, shape)), torch.empty(shape).stride(), what)
    t = random_layout(draw)
    if t.numel():
        index = tuple(draw(0, s - 1) for s in t.shape)
        what = f"storage_position({index}, stride={t.stride()}, offset={t.storage_offset()})"
        compare.assert_equal(call_yours(what, storage_position, index, t.stride(), t.storage_offset()),
                             t[index].storage_offset(), what)


for_random_inputs(test_strides, 150)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Storage and dtype
#
# A **storage** is a flat buffer of numbers of one type. Ours is a 1-D NumPy
# array, so it is *typed*: it knows its dtype, and a tensor's dtype is its
# storage's. Torch's storage is untyped bytes (`t.untyped_storage()`), and the
# dtype lives on the tensor, so two tensors of different dtypes can view the
# same bytes (`t.view(torch.int32)`); picotorch cannot do that, and asks the
# storage for the dtype. A storage also says where its memory is: `t.device` is
# its storage's device, `"cpu"` for a NumPy array (chapter 05, which brings
# devices, makes it a `Device` with the given hook `register_device`). A **dtype** says how to read the bytes; picotorch
# knows four:
#
# | picotorch | torch | bytes per element | kind |
# |---|---|---|---|
# | `float32` | `torch.float32` | 4 | floating point |
# | `float64` | `torch.float64` | 8 | floating point |
# | `int64` | `torch.int64` | 8 | integer |
# | `bool_` | `torch.bool` | 1 | boolean |
#
# The next cell is given: the four dtypes, and `promote_types`, which exercise 10
# uses.

# %% reference=true
import functools
import math
import threading
import warnings
from collections import namedtuple

import numpy as np
import torch


class DType:
    """A picotorch dtype: its name, the NumPy type that stores it, its size in bytes and its
    category (0 bool, 1 integer, 2 floating point: type promotion never goes down a category)."""

    def __init__(self, name: str, numpy_type, category: int):
        self.name = name
        self.numpy = np.dtype(numpy_type)
        self.itemsize = self.numpy.itemsize
        self.category = category
        self.is_floating_point = category == 2

    def __repr__(self):
        return f"picotorch.{self.name}"


bool_ = DType("bool", np.bool_, 0)
int64 = DType("int64", np.int64, 1)
float32 = DType("float32", np.float32, 2)
float64 = DType("float64", np.float64, 2)
DTYPES = [bool_, int64, float32, float64]  # in promotion order: each holds all the values of those before it
_DTYPE_OF_NUMPY = {d.numpy: d for d in DTYPES}
TORCH_DTYPE = {bool_: torch.bool, int64: torch.int64, float32: torch.float32, float64: torch.float64}
DTYPE_OF_TORCH = {t: d for d, t in TORCH_DTYPE.items()}
PROMOTE_PAIRS = {}  # (a, b) -> the dtype of a pair that the order does not decide (chapter 08's two 16-bit floats)
BRIDGES = {}        # dtype -> the torch integer dtype of its width that carries its bits between NumPy and torch


def promote_types(a: DType, b: DType) -> DType:
    """The smallest of our dtypes that holds both: torch.promote_types."""
    if a is not b and (a, b) in PROMOTE_PAIRS:
        return PROMOTE_PAIRS[a, b]
    return a if DTYPES.index(a) >= DTYPES.index(b) else b


def register_dtype(dtype: DType, torch_dtype: torch.dtype, before: DType, bridge: torch.dtype = None) -> None:
    """A later chapter's dtype (chapter 08's float16): stored as dtype.numpy, torch's torch_dtype, just below `before`
    in the promotion order. `bridge`, for a dtype that NumPy and torch cannot hand each other (bfloat16), is the
    integer dtype of its width whose bits they exchange instead. Running it again replaces the dtype of that name."""
    DTYPES[:] = [d for d in DTYPES if d.name != dtype.name]
    DTYPES.insert(DTYPES.index(before), dtype)
    _DTYPE_OF_NUMPY[dtype.numpy] = dtype
    TORCH_DTYPE[dtype] = torch_dtype
    DTYPE_OF_TORCH[torch_dtype] = dtype
    if bridge is not None:
        BRIDGES[dtype] = bridge

# %% [markdown]
# A storage also names the **dispatch key** of its memory: `CPU` for a NumPy
# array. Every operation on a tensor is looked up by the keys of its arguments
# (section 5 builds that lookup). The course's keys are declared once, in the
# table below, each with its priority (the higher one is served first) and the
# chapter that brings it; this chapter uses only `CPU`.

# %% reference=true
# Every dispatch key of the course, highest priority first: name -> (priority, what it is for, the chapter that
# brings it). A chapter declares its key by name (`DispatchKey.declare("Autograd")`) when it brings it; the
# priorities live here only, so that no two chapters can disagree about the order.
DISPATCH_KEYS = {
    "Profiler": (10, "records each call as it enters the dispatcher, the calls it makes nested inside", "08_precision"),
    "Autocast": (9, "casts floating inputs to the operator's precision, then hands the call on (AMP)", "08_precision"),
    "Autograd": (8, "records the backward graph, then hands the call to the keys below it", "02_autograd"),
    "Trace": (6, "captures the operators eager code runs into a graph", "06_compile"),
    "Python": (4, "a mode: sees every call below autograd (logging, TorchDispatchMode)", "05_backend"),
    "CUDA": (1, "kernels on a GPU, or on the CUDA emulator", "05_backend"),
    "CPU": (0, "NumPy kernels on CPU memory", "01_tensor"),
}


class DispatchKey:
    """A key of the dispatcher: a name and a priority, which is its bit in a key set (section 5). The keys are
    attributes of this class (`DispatchKey.CPU`) once declared."""
    _by_priority = {}

    def __init__(self, name: str, priority: int):
        self.name, self.priority, self.bit = name, priority, 1 << priority

    @classmethod
    def declare(cls, name: str, priority: int = None) -> "DispatchKey":
        """The key `name`, at its priority in DISPATCH_KEYS (or at `priority`, for a key of a test or a student's
        experiment); the same key again when it exists: cells may be run twice."""
        if priority is None:
            priority = DISPATCH_KEYS[name][0]
        key = cls._by_priority.get(priority)
        if key is None:
            key = cls._by_priority[priority] = cls(name, priority)
            setattr(cls, name, key)
        elif key.name != name:
            raise ValueError(f"priority {priority} is the key {key.name}'s")
        return key

    @classmethod
    def of(cls, priority: int) -> "DispatchKey":
        return cls._by_priority[priority]

    def __repr__(self):
        return f"DispatchKey.{self.name}"


DispatchKey.declare("CPU")

# %% reference=true
DEVICE_OF_TYPE = {"cpu": "cpu"}  # device type -> what `t.device` is for its storages (register_device)


def register_device(device_type: str, device) -> None:
    """From now on `t.device` is `device` for every tensor over a storage of `device_type` ("cpu" here): the hook
    with which chapter 05 makes the CPU's device a `Device`, as it is in torch (`c10::Device`)."""
    DEVICE_OF_TYPE[device_type] = device


class Storage:
    """A flat, typed buffer: one 1-D NumPy array. Several tensors may share one storage."""
    dispatch_keys = DispatchKey.CPU.bit  # the key set of the tensors over it: {CPU} (section 3)

    def __init__(self, data: np.ndarray):
        if data.ndim != 1:
            raise ValueError(f"a storage is flat (1-D); got an array of shape {data.shape}")
        dtype = _DTYPE_OF_NUMPY.get(data.dtype)
        if dtype is None:
            raise TypeError(f"picotorch stores {', '.join(d.name for d in DTYPES)}; not {data.dtype}")
        self.data = data
        self.dtype = dtype

    @staticmethod
    def empty(size: int, dtype: DType = float32) -> "Storage":
        return Storage(np.empty(size, dtype.numpy))

    @property
    def device(self):
        return DEVICE_OF_TYPE["cpu"]  # a NumPy array is CPU memory

    def __len__(self) -> int:
        return self.data.shape[0]

    def element_size(self) -> int:
        return self.dtype.itemsize

    def nbytes(self) -> int:
        return len(self) * self.element_size()

    def __getitem__(self, position: int):
        return self.data[position].item()

    def __setitem__(self, position: int, value) -> None:
        self.data[position] = value

    def __repr__(self):
        return f"Storage({self.data.tolist()}, dtype={self.dtype})"

# %% [markdown]
# ## 3. The tensor: a view onto a storage
#
# The `Tensor` class is given, in two pieces after three small helpers.
# `wrap_dim(dim, ndim)` turns a negative dim into a positive one and raises
# torch's `IndexError` when it is out of range, and `shape_arg(args)` lets a
# method accept both `t.view(2, 3)` and `t.view((2, 3))`. `add_methods(Tensor)`
# adds the methods of a small class to `Tensor`: the second piece below and
# exercise 2 use it.

# %% reference=true
def add_methods(cls):
    """Class decorator: copy the methods and properties of the decorated class into `cls`."""
    def copy_into(group):
        for name, value in vars(group).items():
            if name not in ("__module__", "__qualname__", "__dict__", "__weakref__", "__doc__",
                            "__firstlineno__", "__static_attributes__"):
                setattr(cls, name, value)
        return group
    return copy_into


def wrap_dim(dim: int, ndim: int) -> int:
    """torch's rule for a dim argument: -1 is the last dim, and a 0-dim tensor accepts 0 and -1."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def shape_arg(args) -> tuple:
    """(2, 3) from f(2, 3), f((2, 3)) or f([2, 3])."""
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        return tuple(args[0])
    return tuple(args)


# A memory format names an order in which a dense tensor's elements may lie (torch's own torch.memory_format values,
# so that torch.channels_last is accepted as it is). Each maps to its strides for a shape and its rule for "lies in
# this order"; row-major's rule is is_contiguous's own (exercise 2). Chapter 07 registers channels_last.
contiguous_format = torch.contiguous_format
MEMORY_FORMATS = {}


def register_memory_format(memory_format, strides, is_in) -> None:
    """Make `memory_format` known: strides(shape) -> its strides; is_in(shape, stride) -> whether they follow it."""
    MEMORY_FORMATS[memory_format] = (strides, is_in)


def memory_format_rules(memory_format) -> tuple:
    """(strides, is_in) of a registered memory format; torch's RuntimeError for one picotorch does not know."""
    if memory_format not in MEMORY_FORMATS:
        raise RuntimeError(f"picotorch knows the memory formats {', '.join(map(str, MEMORY_FORMATS))}, not "
                           f"{memory_format}")
    return MEMORY_FORMATS[memory_format]


# (looked up at each call: the student's contiguous_strides as its exercise cell last defined it; row-major's
# rule is is_contiguous's own, so it registers none)
register_memory_format(contiguous_format, lambda shape: contiguous_strides(shape), None)

# %% [markdown]
# First, what a tensor *is*. A `Tensor` holds `_storage`, `_shape`, `_stride`
# and `_offset`, and answers `shape`, `size()`, `stride()`, `storage_offset()`,
# `dtype` and `device` from them. Nothing here computes: it only describes
# which elements of the storage the tensor shows.

# %% reference=true
class Tensor:
    """A view onto a Storage: element [i0, i1, ...] is storage[offset + i0*stride[0] + i1*stride[1] + ...]."""

    def __init__(self, storage: Storage, shape, stride, offset: int = 0):
        self._storage = storage
        self._shape = tuple(shape)
        self._stride = tuple(stride)
        self._offset = offset

    # --- what a tensor is ---------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self._shape

    def size(self, dim=None):
        return self._shape if dim is None else self._shape[wrap_dim(dim, len(self._shape))]

    def stride(self, dim=None):
        return self._stride if dim is None else self._stride[wrap_dim(dim, len(self._stride))]

    def storage_offset(self) -> int:
        return self._offset

    def untyped_storage(self) -> Storage:
        return self._storage

    @property
    def dtype(self) -> DType:
        return self._storage.dtype

    @property
    def device(self) -> str:
        return self._storage.device

    @property
    def ndim(self) -> int:
        return self.dim()

    __hash__ = object.__hash__  # by identity, as torch's (modules keep tensors in sets and dicts)

# %% [markdown]
# Second, the bridge to NumPy and three of Python's protocols. `t.numpy()` asks
# NumPy for an array over the same memory with the tensor's shape, strides and
# offset (NumPy counts strides in bytes): that is how the arithmetic on values
# will run at NumPy speed. `len(t)`, `t[key] = value` and `bool(t)` behave as
# torch's.

# %% reference=true
@add_methods(Tensor)
class TensorBridges:
    """The bridge to NumPy for arithmetic, and len(), item assignment, bool(), float() and int() of a tensor."""
    # Every kernel asks for its inputs' arrays, and making one costs more than most of the arithmetic on a
    # small tensor: a tensor keeps the array it last made (from_numpy: the one it was made from), with the
    # layout it was made for, so that a tensor given new memory (`p.data = q`, chapter 03) makes a new one.
    _numpy = None  # (storage, shape, stride, offset, array)

    def numpy(self) -> np.ndarray:
        """A NumPy array over the same memory, with this tensor's shape, strides and offset.
        Writing to it writes to the storage."""
        included = LOCAL_KEYS.included
        if included and included & ~(LOCAL_KEYS.excluded | LOCAL_KEYS.unwatched):
            # A mode watches this thread's calls (chapter 05's logging, chapter 06's tracer), and the program
            # itself leaves picotorch for NumPy: the mode must see that. Kernels run with the mode's key
            # excluded, so their own numpy() calls (most of them) skip the dispatcher.
            return dispatch("numpy", self)
        made = self._numpy  # (numpy_array's first test, here: every kernel asks, and most ask again)
        if made is not None and made[0] is self._storage and made[1] == self._shape and made[2] == self._stride \
                and made[3] == self._offset and made[4].shape == self._shape:
            return made[4]
        return numpy_array(self)

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __setitem__(self, key, value):
        """t[key] = value writes through the view t[key] (exercise 8) into the storage."""
        dispatch("setitem", self, key, value)

    def __bool__(self):
        return bool(self.item())

    def __float__(self):
        return float(self._one_number())

    def __int__(self):
        return int(self._one_number())

    def _one_number(self):
        """The value of a one-element tensor (float(t), int(t)), with torch's error for more elements."""
        if self.numel() != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return self.item()

# %% [markdown]
# ## 4. Bridges to torch, and a few ways to make tensors
#
# `from_torch(t)` makes a picotorch `Tensor` over **the same memory** as a CPU
# `torch.Tensor`, with torch's shape, strides and offset; `t.to_torch()` goes
# back. The tests use them to compare your layouts with torch's byte for byte —
# and you can use them to experiment. `empty`, `zeros`, `tensor` and `arange`
# make fresh, contiguous tensors; `from_numpy` wraps a NumPy result. They call
# your `contiguous_strides` from exercise 1.
# (`t.to_torch()` works once section 5's dispatcher is in.)

# %% reference=true
def from_torch(t: torch.Tensor) -> Tensor:
    """A picotorch Tensor sharing the memory of the CPU tensor t, with its shape, strides and offset."""
    if t.device.type != "cpu":
        raise ValueError(f"from_torch needs a CPU tensor; this one is on {t.device}")
    if t.dtype not in DTYPE_OF_TORCH:
        raise TypeError(f"picotorch has no dtype for {t.dtype}; it knows {', '.join(d.name for d in DTYPES)}")
    t = t.detach()
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = t.as_strided((n,), (1,), 0)  # the whole storage, as a 1-D tensor over the same memory
    dtype = DTYPE_OF_TORCH[t.dtype]
    flat = flat.numpy() if dtype not in BRIDGES else flat.view(BRIDGES[dtype]).numpy().view(dtype.numpy)
    return Tensor(Storage(flat), tuple(t.shape), t.stride(), t.storage_offset())


def empty(*shape, dtype: DType = float32) -> Tensor:
    shape = shape_arg(shape)
    return Tensor(Storage.empty(math.prod(shape), dtype), shape, contiguous_strides(shape), 0)


def zeros(*shape, dtype: DType = float32) -> Tensor:
    t = empty(*shape, dtype=dtype)
    t._storage.data[:] = 0
    return t


# from_numpy wraps the result of every kernel, so it remembers the strides of the shapes it has seen; the memo
# belongs to one contiguous_strides (it starts afresh when exercise 1's cell is run again with a new answer).
_STRIDES_SEEN = [None, {}]  # [the contiguous_strides that computed them, {shape: strides}]


def from_numpy(array) -> Tensor:
    """A contiguous Tensor holding the values of a NumPy array (sharing its memory when it is
    already C-contiguous, copying it otherwise)."""
    array = np.asarray(array, order="C")  # copies only when the array is not C-contiguous (one C call: it runs per op)
    shape, seen = array.shape, _STRIDES_SEEN
    if seen[0] is not contiguous_strides or len(seen[1]) > 4096:
        seen[:] = [contiguous_strides, {}]
    stride = seen[1].get(shape)
    if stride is None:
        stride = seen[1][shape] = contiguous_strides(shape)
    t = Tensor(Storage(array.ravel()), shape, stride, 0)  # (ravel: a view, here)
    if array.size:
        t._numpy = (t._storage, shape, stride, 0, array)  # what t.numpy() would make (see Tensor.numpy)
    return t


def tensor(data, dtype: DType = None) -> Tensor:
    """A new tensor from (nested lists of) Python numbers: floats give float32, as in torch."""
    array = np.array(data)
    if dtype is None:
        dtype = {"b": bool_, "i": int64, "u": int64, "f": float32}[array.dtype.kind]
    return from_numpy(array.astype(dtype.numpy))


def arange(n: int, dtype: DType = int64) -> Tensor:
    return from_numpy(np.arange(n, dtype=dtype.numpy))

# %% [markdown]
# The tests of this chapter apply *chains* of operations — say
# `x.transpose(0, 1)[1:, ::2].unsqueeze(0)` — to a torch tensor and to your
# tensor over the same memory, and compare after every step. Their inputs are
# random, small ones first; when one fails, the test shrinks it to the simplest
# input that still fails before it tells you. The machinery is the course's test
# kit, `course.testing` (every chapter uses it); its messages name the chain
# that went wrong, with its layout: shape, strides and offset.

# %%
def check_chain(base: torch.Tensor, ops, name="x"):
    """Apply ops step by step to base and to from_torch(base); compare after every step."""
    same_chain(base, ops, ours=from_torch, name=name)


def check_chain_of(draw, x, names, length):
    """A random chain of `length` ops among `names` (each fitting the result of the one before), checked."""
    same_random_chain(draw, x, names, length, ours=from_torch)

# %% [markdown]
# ### The stride explorer
#
# Choose a shape and a chain of view operations, and see the storage as a row
# of cells and the tensor as a grid. Select an element (or hover over it) to
# see `offset + Σ index × stride = position`. Torch's shape, strides and offset
# for the same chain are shown beside yours (it runs your `from_torch` and your
# methods; where one is not written yet, it says so). It stays live: come back
# to it after exercises 4 to 8, and your `view`, `transpose`, `narrow` and
# indexing appear beside torch's.

# %%
from course.widgets.stride_explorer import explore

explore(from_torch)

# %% [markdown]
# ## Exercise 2 — what a tensor knows about itself
#
# Add four methods to `Tensor`:
#
# - `numel()`: the number of elements (the product of the shape; `1` for shape `()`);
# - `dim()`: the number of dims;
# - `element_size()`: bytes per element (ask the storage);
# - `is_contiguous()`: whether the strides are those of a fresh tensor of this
#   shape — with torch's two exceptions: a tensor with no elements is always
#   contiguous, and **the stride of a dim of size 1 never matters** (you never
#   step along it), so it is skipped. (Its `memory_format` argument and the two
#   lines that use it are given: they ask about other orders of the elements,
#   which chapter 07 brings. Yours is torch's default, `contiguous_format`.)
#
# ```
# shape (3, 1) stride (1, 7)     -> contiguous (dim 1 has size 1)
# shape (4, 3) stride (1, 4)     -> not contiguous (a transpose)
# shape (2, 2) stride (4, 2)     -> not contiguous (every other column)
# ```
#
# Real PyTorch: `_compute_contiguous` in [`c10/core/Contiguity.h`](https://github.com/pytorch/pytorch/blob/main/c10/core/Contiguity.h).

# %% solution="ex_tensor_basics" reference=true
@add_methods(Tensor)
class TensorBasics:
    def numel(self) -> int:
        ### BEGIN SOLUTION
        return math.prod(self._shape)
        ### END SOLUTION

    def dim(self) -> int:
        ### BEGIN SOLUTION
        return len(self._shape)
        ### END SOLUTION

    def element_size(self) -> int:
        ### BEGIN SOLUTION
        return self._storage.element_size()
        ### END SOLUTION

    def is_contiguous(self, memory_format=contiguous_format) -> bool:
        if memory_format is not contiguous_format:  # another order's own rule (chapter 07's channels_last)
            return memory_format_rules(memory_format)[1](self._shape, self._stride)
        ### BEGIN SOLUTION
        if self.numel() == 0:
            return True
        expected = 1
        for size, stride in zip(reversed(self._shape), reversed(self._stride)):
            if size != 1:
                if stride != expected:
                    return False
                expected *= size
        return True
        ### END SOLUTION

# %% tests="ex_tensor_basics" points=2
def expect_basics(t: torch.Tensor, what: str):
    ours = from_torch(t)
    for name in ("numel", "dim", "element_size", "is_contiguous"):
        call = f"{name}() of {what} ({layout(t)})"
        compare.assert_equal(call_yours(call, getattr(ours, name)), getattr(t, name)(), call)


base = torch.arange(12.).reshape(3, 4)
for what, t in {"x": base, "x.T": base.T, "x[:, ::2]": base[:, ::2], "x[1]": base[1], "x[1, 2]": base[1, 2],
                "x[:, :1]": base[:, :1], "an int64 x": base.long(), "a bool x": base > 5}.items():
    expect_basics(t, what)
# the stride of a size-1 dim never matters: x.T[:, :1] has shape (4, 1) and stride (1, 4), and is contiguous
expect_basics(base.T[:, :1], "x.T[:, :1] (the stride of a size-1 dim is skipped)")
# a tensor with no elements is always contiguous, whatever its strides: x.T[:0] has shape (0, 3) stride (1, 4)
expect_basics(base.T[:0], "x.T[:0] (no elements: always contiguous)")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_basics(draw):
    t = random_layout(draw)
    expect_basics(t, "a tensor")
    if t.dim():  # sizes of 1 with odd strides are still contiguous
        odd = t.contiguous().as_strided(t.shape, [s if n != 1 else draw(0, 9) for n, s in
                                                   zip(t.shape, torch.empty(t.shape).stride())])
        expect_basics(odd, "a tensor with arbitrary strides on its size-1 dims")


for_random_inputs(test_basics, 150)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. The dispatcher: one table for every operation
#
# Every method of `Tensor` that computes — `x + y`, `x.sum(1)`, `x.view(2, 3)`,
# `x[0]` — is one line, `dispatch(op, *args)`. None of them knows how the work
# is done. That is PyTorch's design: between the Python method and the code that
# touches memory sits the **dispatcher**, a table with one row per operator and,
# in each row, one kernel per **dispatch key**. Chapter 00's six levels, for
# `z = x + y` in picotorch:
#
# ![z = x + y in picotorch, six levels: your code; Tensor.__add__ calls dispatch("add", x, y); the dispatcher, highlighted, takes the keys of the call from the storages of x and y, the set {CPU}, and the highest key with a kernel in the row of "add", CPU; the CPU kernel of "add", your _binary from exercise 11; np.add over two strided views; one CPU core's vector units](figures/dispatch_add.svg)
#
# In this chapter every tensor brings the one key `CPU`, so every call runs a
# CPU kernel. The table is ready for more: a **key set** is a bit mask (bit
# `priority` for each key), and `dispatch` serves the highest key of the set
# that has a kernel. The thread's `LOCAL_KEYS` and the tables `TENSOR_KEYS`,
# `FALLTHROUGH` and `FALLBACKS` stay empty here; chapter 02 fills them when it
# puts autograd in front of `CPU`, chapter 05 when a mode watches every call.
#
# Where PyTorch differs: its keys are a fixed C++ enum,
# [`c10/core/DispatchKey.h`](https://github.com/pytorch/pytorch/blob/main/c10/core/DispatchKey.h),
# and its sets a 64-bit mask, [`c10/core/DispatchKeySet.h`](https://github.com/pytorch/pytorch/blob/main/c10/core/DispatchKeySet.h);
# the table is [`aten/src/ATen/core/dispatch/Dispatcher.h`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/core/dispatch/Dispatcher.h)
# with one `OperatorEntry` per operator ([`OperatorEntry.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/core/dispatch/OperatorEntry.cpp)),
# which precomputes the kernel of every key, as our `Operator` caches the
# kernel of every key set it has seen.

# %% [markdown]
# The table: an `Operator` per operator name, holding its kernels by key and
# remembering which kernel each key set it has seen runs.

# %% reference=true
class LocalDispatchKeySet(threading.local):
    """The keys this thread adds to every call's key set (`included`) and takes out of it (`excluded`)."""
    included = 0
    excluded = 0
    unwatched = 0  # included keys that need not see a program leave for NumPy (chapter 08's Autocast sets it)


LOCAL_KEYS = LocalDispatchKeySet()
TENSOR_KEYS = []      # (attribute, key bit): a tensor whose attribute is true also brings that key (chapter 02)
FALLTHROUGH = set()  # priorities of the keys an operator with no kernel for them falls through (chapter 02)
FALLBACKS = {}       # key priority -> fallback(op, *args, **kwargs): that key's kernel for every operator (05)
OPS = {}           # operator name -> Operator: the dispatcher's table


class Operator:
    """One row of the table: an operator's kernels by key, and the kernel each key set runs (computed once)."""

    def __init__(self, name: str):
        self.name = name
        self.kernels = {}  # key priority -> kernel
        self.table = {}    # key set -> the kernel it runs

    def kernel_for(self, keys: int):
        kernel = self.table.get(keys)
        if kernel is None:
            kernel = self.table[keys] = self.compute(keys)
        return kernel

    def compute(self, keys: int):
        remaining = keys or DispatchKey.CPU.bit  # no tensor argument (and no key included): the CPU
        while remaining:
            priority = remaining.bit_length() - 1
            kernel = self.kernels.get(priority)
            if kernel is not None:
                return kernel
            if priority in FALLBACKS:
                return functools.partial(FALLBACKS[priority], self.name)
            if priority not in FALLTHROUGH:
                return self.missing(DispatchKey.of(priority))
            remaining &= ~(1 << priority)
        return self.missing(DispatchKey.CPU)

    def missing(self, key):
        def refuse(*args, **kwargs):
            raise NotImplementedError(f"Could not run '{self.name}' with arguments from the '{key.name}' backend: "
                                      f"picotorch has no {key.name} kernel for {self.name!r}")
        return refuse

    def __repr__(self):
        keys = ", ".join(DispatchKey.of(p).name for p in sorted(self.kernels, reverse=True))
        return f"<operator {self.name!r}: kernels for {keys or 'no key'}>"


# %% [markdown]
# Registering a kernel, the key set of a call, and `dispatch` itself:

# %% reference=true
def operator(op: str) -> Operator:
    entry = OPS.get(op)
    if entry is None:
        entry = OPS[op] = Operator(op)
    return entry


def forget_kernel_choices() -> None:
    """Empty every operator's cache of the kernel per key set: after a change of FALLTHROUGH or FALLBACKS."""
    for entry in OPS.values():
        entry.table.clear()


def register_kernel(op: str, *keys: DispatchKey):
    """Decorator: the function is the kernel of `op` for each of `keys` (the newest registration wins)."""
    def put(kernel):
        entry = operator(op)
        for key in keys:
            entry.kernels[key.priority] = kernel
        entry.table.clear()
        return kernel
    return put


def key_set(*args) -> int:
    """The key set of a call with these arguments: the keys of every tensor argument, plus the keys this
    thread includes, minus the keys it excludes."""
    keys = LOCAL_KEYS.included
    for a in args:
        if isinstance(a, Tensor):
            keys |= a._storage.dispatch_keys
            for attribute, bit in TENSOR_KEYS:
                if getattr(a, attribute):
                    keys |= bit
    return keys & ~LOCAL_KEYS.excluded


def key_names(keys: int) -> list:
    """The names of the keys of a key set, highest priority first."""
    return [DispatchKey.of(p).name for p in range(keys.bit_length() - 1, -1, -1) if keys >> p & 1]


# dispatch runs on every operation, so it computes the key set inline (the loop of key_set, without a call) and
# looks the kernel up in the operator's table directly (kernel_for only on a miss).
def dispatch(op: str, *args, **kwargs):
    """Call the kernel of `op` for the highest key of the call's key set."""
    local = LOCAL_KEYS
    keys = local.included
    for a in args:
        if isinstance(a, Tensor):
            keys |= a._storage.dispatch_keys
            for attribute, bit in TENSOR_KEYS:
                if getattr(a, attribute):
                    keys |= bit
    keys &= ~local.excluded
    entry = OPS.get(op) or operator(op)
    kernel = entry.table.get(keys) or entry.kernel_for(keys)
    return kernel(*args, **kwargs)

# %% [markdown]
# `@register_kernel(op, key)` puts one function in the table. The cells of your
# exercises are decorated with `@register_kernels(DispatchKey.CPU)`: each method
# you write there becomes the CPU kernel of the operator of its name
# (`__getitem__` serves `getitem`; your `_unary`, `_binary` and `_inplace` serve
# every elementwise operator). Helpers of yours (names with a leading `_`) and
# properties such as `T` join `Tensor` itself, so your kernels can call them.

# %% reference=true
# Your exercises write the CPU kernels as methods of a small class; register_kernels files them in the table.
KERNEL_OF_METHOD = {"__getitem__": "getitem"}
_GROUP_ATTRIBUTES = ("__module__", "__qualname__", "__dict__", "__weakref__", "__doc__", "__firstlineno__",
                     "__static_attributes__")


def _unary_kernel(unary, op):
    return lambda x: unary(x, op)


def _binary_kernel(binary, op):
    def kernel(a, b):
        return binary(a, op, b) if isinstance(a, Tensor) else binary(b, op, a, True)
    return kernel


def _inplace_kernel(inplace, op):
    return lambda t, other: inplace(t, op, other)


def _given(value) -> bool:
    """Is this attribute of Tensor the given code's (the class Tensor or a given group `Tensor...`)? Those stay."""
    return getattr(value, "__qualname__", "").split(".")[0].startswith("Tensor")


def register_kernels(*keys: DispatchKey):
    """Class decorator: each method of the class is the kernel of the operator of its name for each of `keys`;
    `_unary`, `_binary` and `_inplace` serve every elementwise operator; helpers (a leading `_`) and properties
    join `Tensor`, so that the kernels can call them."""
    def put(group):
        for name, value in vars(group).items():
            if name in _GROUP_ATTRIBUTES:
                continue
            if name == "_unary":
                for op in UNARY_KERNELS:
                    register_kernel(op, *keys)(_unary_kernel(value, op))
            elif name == "_binary":
                for op in BINARY_KERNELS:
                    register_kernel(op, *keys)(_binary_kernel(value, op))
            elif name == "_inplace":
                for op in INPLACE_OPS:
                    register_kernel(op + "_", *keys)(_inplace_kernel(value, op))
            elif name in KERNEL_OF_METHOD or not (name.startswith("_") or isinstance(value, property)):
                register_kernel(KERNEL_OF_METHOD.get(name, name), *keys)(value)
                continue
            if name not in vars(Tensor) or not _given(vars(Tensor)[name]):
                setattr(Tensor, name, value)
        return group
    return put

# %% [markdown]
# A few CPU kernels are given: the bridges to NumPy and to torch, printing, and
# writing through a view (`t[key] = value` writes into `t[key]`, the view of
# exercise 8).

# %% reference=true
# The given CPU kernels: the bridges to NumPy and torch, printing, and writing through a view.
@register_kernel("numpy", DispatchKey.CPU)
def numpy_array(t: Tensor) -> np.ndarray:
    """A NumPy array over t's memory (Tensor.numpy's work: what it runs directly when no mode watches)."""
    made = t._numpy  # (the array's own shape too: from_numpy's caller may still reshape it in place)
    if (made is not None and made[0] is t._storage and made[1] == t._shape and made[2] == t._stride
            and made[3] == t._offset and made[4].shape == t._shape):
        return made[4]
    data = t._storage.data
    if 0 in t._shape:
        return np.empty(t._shape, data.dtype)
    item = data.itemsize
    array = np.ndarray(t._shape, data.dtype, buffer=data, offset=t._offset * item,
                       strides=[s * item for s in t._stride])  # (a list: quicker to build than a tuple(...))
    t._numpy = (t._storage, t._shape, t._stride, t._offset, array)
    return array


@register_kernel("to_torch", DispatchKey.CPU)
def _to_torch_cpu(t: Tensor) -> torch.Tensor:
    storage = t._storage
    if storage.dtype in BRIDGES:  # bits NumPy and torch exchange as integers (chapter 08's bfloat16)
        flat = torch.from_numpy(storage.data.view(f"i{storage.dtype.itemsize}")).view(TORCH_DTYPE[storage.dtype])
        return flat.as_strided(t._shape, t._stride, t._offset)
    return torch.from_numpy(storage.data).as_strided(t._shape, t._stride, t._offset)


REPR_FIELDS = []  # functions t -> "" or ", name=value": what later chapters add inside tensor(...)


def tensor_repr(t: Tensor, values: np.ndarray) -> str:
    """torch's repr of t, whose values (on the CPU) are `values`."""
    body = np.array2string(values, separator=", ", prefix="tensor(")
    return f"tensor({body}, dtype={t.dtype}{''.join(field(t) for field in REPR_FIELDS)})"


@register_kernel("repr", DispatchKey.CPU)
def _repr_cpu(t: Tensor) -> str:
    return tensor_repr(t, t.numpy())


@register_kernel("setitem", DispatchKey.CPU)
def _setitem_cpu(t: Tensor, key, value) -> None:
    view = t[key]
    view.numpy()[...] = value.numpy() if isinstance(value, Tensor) else value

# %% [markdown]
# And the methods that make copies and views, each one dispatch call. Their CPU
# kernels are yours: exercises 3 to 8. Until an exercise is done, its method
# says so: `Could not run 'view' ...: picotorch has no CPU kernel for 'view'`.

# %% reference=true
@add_methods(Tensor)
class TensorCopiesAndViews:
    """Every method of Tensor that computes is one call of the dispatcher: the work is the kernel of its operator."""
    def to_torch(self) -> torch.Tensor:
        """A torch.Tensor over the same memory, with the same shape, strides and offset."""
        return dispatch("to_torch", self)

    def __repr__(self): return dispatch("repr", self)
    def item(self): return dispatch("item", self)
    def tolist(self): return dispatch("tolist", self)
    def contiguous(self, memory_format=contiguous_format):
        if memory_format is contiguous_format:
            return dispatch("contiguous", self)
        return self if self.is_contiguous(memory_format) else in_memory_format(self, memory_format)

    def clone(self): return dispatch("clone", self)
    def view(self, *shape): return dispatch("view", self, shape_arg(shape))
    def reshape(self, *shape): return dispatch("reshape", self, shape_arg(shape))
    def transpose(self, dim0, dim1): return dispatch("transpose", self, dim0, dim1)
    def permute(self, *dims): return dispatch("permute", self, shape_arg(dims))
    def unsqueeze(self, dim): return dispatch("unsqueeze", self, dim)
    def squeeze(self, dim=None): return dispatch("squeeze", self, dim)
    def flatten(self, start_dim=0, end_dim=-1): return dispatch("flatten", self, start_dim, end_dim)
    def narrow(self, dim, start, length): return dispatch("narrow", self, dim, start, length)
    def __getitem__(self, key): return dispatch("getitem", self, key)
    def expand(self, *sizes): return dispatch("expand", self, shape_arg(sizes))
    def broadcast_to(self, shape): return dispatch("broadcast_to", self, tuple(shape))
    def as_strided(self, size, stride, storage_offset=None):
        return dispatch("as_strided", self, tuple(size), tuple(stride), storage_offset)

# %% [markdown]
# ## Exercise 3 — copies: `contiguous`, `clone`, `item`, `tolist`
#
# Most operations in this chapter copy nothing. These four are the exceptions,
# and each has a rule worth knowing:
#
# - `contiguous()` returns **the tensor itself** (`t.contiguous() is t`) when it
#   is already contiguous; otherwise a new contiguous tensor with the same
#   values: fresh storage, offset 0.
# - `clone()` always copies, into fresh storage, and **keeps the layout**: the
#   clone of a transposed tensor is transposed too (torch's
#   `memory_format=torch.preserve_format`). The given `dense_strides_like(shape,
#   stride)` below is torch's rule for those strides; allocate `numel()`
#   elements and write the values with NumPy (`out.numpy()[...] = ...`).
# - `item()`: the single element of a one-element tensor (of any shape) as a
#   Python number; `RuntimeError` otherwise. Where does the one element live?
#   (Every index is 0.)
# - `tolist()`: nested Python lists (a plain number for a 0-dim tensor). Walk
#   the indices and read the storage at `storage_position(...)`.
#
# Real PyTorch: `contiguous` in [`aten/src/ATen/native/TensorProperties.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/TensorProperties.cpp),
# `clone` and `empty_like` in [`aten/src/ATen/native/TensorFactories.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/TensorFactories.cpp).

# %% reference=true
def dense_strides_like(shape, stride) -> tuple:
    """torch's strides for a copy that keeps a tensor's layout (empty_like with preserve_format):
    the same strides if they already cover the elements exactly once without gaps, otherwise
    contiguous strides with the dims ordered as the given strides order them."""
    n = len(shape)
    if stride == contiguous_strides(shape) or math.prod(shape) == 0 or _non_overlapping_and_dense(shape, stride):
        return tuple(stride)  # (contiguous, the most common layout, is answered first: clone runs per gradient)
    perm = list(range(n - 1, -1, -1))  # innermost dim first
    for i in range(1, n):  # a stable insertion sort; stride-0 dims keep their place
        dim1 = i
        for dim0 in range(i - 1, -1, -1):
            a, b = perm[dim0], perm[dim1]
            if stride[a] == 0 or stride[b] == 0:
                continue
            if stride[a] > stride[b] or (stride[a] == stride[b] and shape[a] > shape[b]):
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif stride[a] < stride[b]:
                break
    result, step = [0] * n, 1
    for d in perm:
        result[d] = step
        step *= max(shape[d], 1) if shape[d] > 1 else 1
    return tuple(result)


def in_memory_format(t: "Tensor", memory_format) -> "Tensor":
    """t's values with exactly the strides `memory_format` gives t's shape (torch's empty_like with that format):
    a view where t's elements already lie in that order, one copy otherwise. Made of permute, contiguous and view
    (not a kernel of its own), so that autograd and every backend follow."""
    strides = memory_format_rules(memory_format)[0]
    probe = strides(tuple(range(2, 2 + t.dim())))  # distinct sizes: the format's order of dims, free of ties
    order = sorted(range(t.dim()), key=lambda d: probe[d], reverse=True)
    back = sorted(range(t.dim()), key=order.__getitem__)
    moved = t.permute(*order).contiguous()
    if t.numel() == 0:  # (no element to place: torch's strides multiply the sizes, zeros included)
        return moved.permute(*back).as_strided(t.shape, strides(t.shape), 0)
    # contiguous() may keep a size-1 dim's odd stride (it never matters there); flattened and viewed back, every
    # dim has the stride of a fresh tensor, as torch's copy into a format has
    return moved.reshape(-1).view(moved.shape).permute(*back)


def _non_overlapping_and_dense(shape, stride) -> bool:
    if len(shape) == 1:
        return shape[0] < 2 or stride[0] == 1
    order = sorted(range(len(shape)), key=lambda d: (shape[d] < 2, stride[d] if shape[d] >= 2 else 0))
    expected = 1
    for d in order:
        if shape[d] < 2:
            return True
        if stride[d] != expected:
            return False
        expected *= shape[d]
    return True

# %% solution="ex_copies" reference=true
@register_kernels(DispatchKey.CPU)
class Copies:
    def contiguous(self) -> "Tensor":
        ### BEGIN SOLUTION
        if self.is_contiguous():
            return self
        out = empty(self._shape, dtype=self.dtype)
        out.numpy()[...] = self.numpy()
        return out
        ### END SOLUTION

    def clone(self) -> "Tensor":
        ### BEGIN SOLUTION
        out = Tensor(Storage.empty(self.numel(), self.dtype), self._shape,
                     dense_strides_like(self._shape, self._stride), 0)
        out.numpy()[...] = self.numpy()
        return out
        ### END SOLUTION

    def item(self):
        ### BEGIN SOLUTION
        if self.numel() != 1:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        return self._storage.data[self._offset].item()
        ### END SOLUTION

    def tolist(self):
        ### BEGIN SOLUTION
        data, shape, stride = self._storage.data, self._shape, self._stride

        def build(d, position):
            if d == len(shape):
                return data[position].item()
            return [build(d + 1, position + i * stride[d]) for i in range(shape[d])]

        return build(0, self._offset)
        ### END SOLUTION

# %% tests="ex_copies" points=2
def expect_copies(t: torch.Tensor, what: str):
    ours = from_torch(t)
    result = same_outcome(lambda: ours.contiguous(), lambda: t.contiguous(), f"{what}.contiguous()", layout=True, base=t)
    if t.is_contiguous():
        assert result[0] is ours, f"{what}.contiguous() made a new tensor, but torch returns the tensor itself when it is already contiguous ({layout(t)})"
    same_outcome(lambda: ours.clone(), lambda: t.clone(), f"{what}.clone()", layout=True, base=t)
    got, want = call_yours(f"{what}.tolist()", ours.tolist), t.tolist()
    compare.assert_equal(got, want, f"{what}.tolist() ({layout(t)})")
    if t.numel() == 1:
        got = call_yours(f"{what}.item()", ours.item)
        compare.assert_equal((type(got).__name__, got), (type(t.item()).__name__, t.item()), f"{what}.item() ({layout(t)})")
    else:
        compare.assert_raises(RuntimeError, ours.item, f"{what}.item() with {t.numel()} elements")


x = torch.arange(12.).reshape(3, 4)
for what, t in {"x": x, "x.T": x.T, "x[1:, ::2]": x[1:, ::2], "x[2, 1:2]": x[2, 1:2], "x[1, 3]": x[1, 3],
                "an int64 x.T": x.long().T, "x[0].expand(2, 4)": x[0].expand(2, 4)}.items():
    expect_copies(t, what)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_copies(draw):
    expect_copies(random_layout(draw), "x")


for_random_inputs(test_copies, 150)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 4 — `view` and `reshape`
#
# `t.view(*shape)` shows the same elements, in the same (row-major) order, in a
# new shape — **without copying**. One size may be `-1`: it is inferred from the
# others. When it is possible, the new strides follow from the old ones; when it
# is not, `view` raises `RuntimeError` and `reshape` copies instead.
#
# When is it possible? Group the old dims into **chunks**: neighbouring dims
# where stepping off the end of the inner dim lands exactly on the next step of
# the outer one (`stride[d-1] == size[d] * stride[d]`). Inside a chunk the
# elements are evenly spaced, like one long dim. Every new dim must fall inside
# one chunk.
#
# ```
# x = arange(12).view(3, 4)   shape (3, 4) stride (4, 1): one chunk of 12   -> x.view(2, 6) has stride (6, 1)
# x.T                          shape (4, 3) stride (1, 4): two chunks        -> x.T.view(12) is impossible
# x[:, :2]                     shape (3, 2) stride (4, 1): two chunks        -> x[:, :2].view(6) is impossible,
#                                                                             but .view(3, 2, 1) and .view(3, 1, 2) are fine
# ```
#
# Write:
#
# - `infer_size(shape, numel)`: the shape with its `-1` filled in. Raise
#   `RuntimeError` for two `-1`s, a negative size other than `-1`, a shape with
#   the wrong number of elements, and a `-1` that could be anything (0 elements,
#   and another size is 0);
# - `view_strides(old_shape, old_stride, new_shape)`: the strides of the view,
#   or `None` if there are none. This is torch's `computeStride`; port it from
#   [`aten/src/ATen/TensorUtils.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/TensorUtils.cpp).
#   Two special cases come first there: an old shape of `()` (every new stride
#   is 1), and tensors with no elements (the old strides if the shape is the
#   same, contiguous strides otherwise);
# - `view(*shape)`, and `reshape(*shape)`: a view when `view_strides` finds one,
#   else a contiguous copy (`contiguous()` from exercise 3) viewed in the new
#   shape.
#
# Real PyTorch: `view` and `reshape` in [`aten/src/ATen/native/TensorShape.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/TensorShape.cpp),
# `infer_size` in [`aten/src/ATen/InferSize.h`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/InferSize.h).

# %% solution="ex_view" reference=true
def infer_size(shape, numel: int) -> tuple:
    """shape with its one -1 replaced, so that it has numel elements; RuntimeError where torch raises."""
    ### BEGIN SOLUTION
    shape = tuple(shape)
    if -1 not in shape and math.prod(shape) == numel and (not shape or min(shape) >= 0):
        return shape  # nothing to infer and nothing wrong (most calls): skip the walk below
    inferred, known = None, 1
    for i, size in enumerate(shape):
        if size == -1:
            if inferred is not None:
                raise RuntimeError("only one dimension can be inferred")
            inferred = i
        elif size < 0:
            raise RuntimeError(f"invalid shape dimension {size} at index {i} of shape {list(shape)}")
        else:
            known *= size
    if numel == known or (inferred is not None and known > 0 and numel % known == 0):
        if inferred is None:
            return shape
        if known == 0:
            raise RuntimeError(f"cannot reshape tensor of 0 elements into shape {list(shape)} because the "
                               "unspecified dimension size -1 can be any value and is ambiguous")
        return shape[:inferred] + (numel // known,) + shape[inferred + 1:]
    raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    ### END SOLUTION


def view_strides(old_shape, old_stride, new_shape):
    """torch's computeStride: strides that show the same elements in new_shape, or None."""
    ### BEGIN SOLUTION
    return _view_strides(tuple(old_shape), tuple(old_stride), tuple(new_shape))


# A program views the same few layouts again and again (every training step reshapes the same shapes), and
# the walk below costs Python a microsecond where torch's C++ takes nanoseconds: the answers are remembered.
@functools.lru_cache(maxsize=4096)
def _view_strides(old_shape: tuple, old_stride: tuple, new_shape: tuple):
    if not old_shape:
        return (1,) * len(new_shape)
    if math.prod(old_shape) == 0:
        return old_stride if old_shape == new_shape else contiguous_strides(new_shape)
    new_stride = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = old_stride[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[tensor_d]
        if tensor_d == 0 or (old_shape[tensor_d - 1] != 1
                             and old_stride[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_stride[view_d] = view_numel * chunk_base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = old_stride[tensor_d - 1]
                tensor_numel = view_numel = 1
    if view_d != -1:
        return None
    return tuple(new_stride)
    ### END SOLUTION


@register_kernels(DispatchKey.CPU)
class Views:
    def view(self, *shape) -> "Tensor":
        ### BEGIN SOLUTION
        shape = infer_size(shape_arg(shape), self.numel())
        stride = view_strides(self._shape, self._stride, shape)
        if stride is None:
            raise RuntimeError("view size is not compatible with input tensor's size and stride (at least one "
                               "dimension spans across two contiguous subspaces). Use .reshape(...) instead.")
        return Tensor(self._storage, shape, stride, self._offset)
        ### END SOLUTION

    def reshape(self, *shape) -> "Tensor":
        ### BEGIN SOLUTION
        shape = infer_size(shape_arg(shape), self.numel())
        stride = view_strides(self._shape, self._stride, shape)
        if stride is not None:
            return Tensor(self._storage, shape, stride, self._offset)
        return self.contiguous().view(shape)
        ### END SOLUTION

# %% tests="ex_view" points=3
x = torch.arange(24.).reshape(2, 3, 4)
check_chain(x, [Op("view", 6, 4)])
check_chain(x, [Op("view", 4, -1, 2)])
check_chain(x, [Op("view", (24,))])
check_chain(x, [Op("view", 5, -1)])                               # torch: RuntimeError (24 is not a multiple of 5)
check_chain(x.transpose(0, 2), [Op("view", 24)], "y")             # torch: RuntimeError (not viewable)
check_chain(x.transpose(0, 2), [Op("reshape", 24)], "y")          # a copy
check_chain(x[:, :, :2], [Op("view", 2, 3, 1, 2)], "y")
check_chain(x[1, 1:], [Op("view", 8)], "y")                       # a view keeps the offset (16)
check_chain(x[1, 1:], [Op("reshape", 8)], "y")
check_chain(x[0, 0, 0], [Op("view", 1, 1)], "y")                  # old shape (): every new stride is 1
check_chain(x[:, :0], [Op("view", 2, 0, 4)], "y")                 # no elements, same shape: the old strides
check_chain(x[:, :0], [Op("view", 0, 8)], "y")                    # no elements, new shape: contiguous strides


def expect_infer_size(shape, numel):
    what = f"infer_size({shape}, {numel})"
    result = same_outcome(lambda: infer_size(shape, numel), lambda: tuple(torch.empty(numel).view(shape).shape), what)
    if result is not None:
        compare.assert_equal(tuple(result[0]), result[1], what)


for shape, numel in [((2, -1), 6), ((2, 3), 6), ((-1, 4, 1), 8), ((0, 3), 0), ((-1,), 0)]:
    expect_infer_size(shape, numel)
# where torch raises RuntimeError: 5 does not divide 24, the wrong number of elements, two -1s, a negative size
# (even one whose product is right), and a -1 that could be anything (0 elements, and another size is 0)
for shape, numel in [((5, -1), 24), ((2, 2), 5), ((-1, -1), 4), ((-2, 2), 4), ((-2, -2), 4), ((0, -1), 0)]:
    expect_infer_size(shape, numel)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_views(draw):
    x = random_layout(draw)
    check_chain_of(draw, x, ("view", "reshape"), draw(1, 3))
    shape = list(random_shape(draw, max_dims=3))
    if shape and draw(0, 1):
        shape[draw(0, len(shape) - 1)] = [-1, -1, -2][draw(0, 2)]
    expect_infer_size(tuple(shape), [math.prod(shape) if min(shape, default=0) >= 0 else draw(0, 12), draw(0, 12)][draw(0, 1)])


for_random_inputs(test_views, 150)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5 — `transpose`, `permute`, `T`, `mT`
#
# Reordering dims reorders the shape **and the strides** together, and leaves
# the storage and the offset alone:
#
# ```
# x         shape (2, 3, 4)  stride (12, 4, 1)
# x.transpose(0, 2)  shape (4, 3, 2)  stride (1, 4, 12)
# x.permute(2, 0, 1) shape (4, 2, 3)  stride (1, 12, 4)    dim i of the result is dim dims[i] of x
# ```
#
# - `transpose(dim0, dim1)` swaps two dims (negative dims allowed: use `wrap_dim`);
# - `permute(*dims)`: `dims` must name every dim exactly once — `RuntimeError` if
#   there are too few or too many, or one repeats; `IndexError` (from `wrap_dim`)
#   if one is out of range;
# - `T` (a property) reverses all dims (torch only allows it for up to 2 dims
#   without a warning; reverse them anyway);
# - `mT` (a property) swaps the last two dims: `RuntimeError` below 2 dims.
#
# Real PyTorch: `transpose`, `permute` and `matrix_H`/`mT` in
# [`aten/src/ATen/native/TensorShape.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/TensorShape.cpp).

# %% solution="ex_transpose" reference=true
@register_kernels(DispatchKey.CPU)
class Transposes:
    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        ### BEGIN SOLUTION
        n = self.dim()
        d0, d1 = wrap_dim(dim0, n), wrap_dim(dim1, n)
        if n == 0:
            return Tensor(self._storage, (), (), self._offset)
        shape, stride = list(self._shape), list(self._stride)
        shape[d0], shape[d1] = shape[d1], shape[d0]
        stride[d0], stride[d1] = stride[d1], stride[d0]
        return Tensor(self._storage, shape, stride, self._offset)
        ### END SOLUTION

    def permute(self, *dims) -> "Tensor":
        ### BEGIN SOLUTION
        dims = shape_arg(dims)
        n = self.dim()
        if len(dims) != n:
            raise RuntimeError(f"permute(): number of dims don't match: the tensor has {n}, got {len(dims)}")
        dims = [wrap_dim(d, n) for d in dims]
        if len(set(dims)) != n:
            raise RuntimeError("permute(): duplicate dims are not allowed.")
        return Tensor(self._storage, [self._shape[d] for d in dims], [self._stride[d] for d in dims], self._offset)
        ### END SOLUTION

    @property
    def T(self) -> "Tensor":
        ### BEGIN SOLUTION
        return self.permute(*range(self.dim() - 1, -1, -1))
        ### END SOLUTION

    @property
    def mT(self) -> "Tensor":
        ### BEGIN SOLUTION
        if self.dim() < 2:
            raise RuntimeError(f"tensor.mT is only supported on matrices or batches of matrices. Got {self.dim()}-D tensor.")
        return self.transpose(-2, -1)
        ### END SOLUTION

# %% tests="ex_transpose" points=2
x = torch.arange(24.).reshape(2, 3, 4)
check_chain(x, [Op("transpose", 0, 1)])
check_chain(x, [Op("transpose", -1, 0), Op("transpose", 1, 2)])
check_chain(x, [Op("permute", 2, 0, 1)])
check_chain(x, [Op("permute", 1, 2, 0), Op("permute", 1, 2, 0)])
check_chain(x, [Op("mT")])
check_chain(x[1, :, 1:], [Op("T"), Op("T")], "y")
check_chain(x, [Op("permute", 0, 0, 1)])                          # torch: RuntimeError
check_chain(x, [Op("permute", 0, -3, 1)])                         # torch: RuntimeError (-3 is dim 0: a repeat)
check_chain(x, [Op("permute", 1, 0)])                             # torch: RuntimeError (too few dims)
check_chain(x, [Op("permute", 2, 1, 0, 3)])                       # torch: RuntimeError (too many dims)
check_chain(x, [Op("permute", 0, 1, 3)])                          # torch: IndexError
check_chain(x, [Op("transpose", 0, 3)])                           # torch: IndexError
check_chain(x[0, 0], [Op("mT")], "y")                             # torch: RuntimeError (1 dim)
with warnings.catch_warnings():  # torch warns that .T of 3 dims is deprecated; it still reverses them all
    warnings.simplefilter("ignore", UserWarning)
    check_chain(x, [Op("T")])
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_transposes(draw):
    x = random_layout(draw)
    check_chain_of(draw, x, ("transpose", "permute", "T", "mT"), draw(1, 4))


for_random_inputs(test_transposes, 150)
for shape, dims in [((3, 4), (0, -2)), ((3, 4), (-1, 1)), ((2, 3, 4), (2, 0, -1)), ((2, 3, 4), (-3, 1, 0))]:
    check_chain(torch.arange(24.)[:math.prod(shape)].reshape(shape), [Op("permute", *dims)])  # one dim in two spellings
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 6 — dims of size 1: `unsqueeze`, `squeeze`, `flatten`
#
# A dim of size 1 holds no information about the layout: you never step along
# it, so its stride is never used. Still, torch picks one, and so must you:
#
# - `unsqueeze(dim)` inserts a dim of size 1 at position `dim` (from `-ndim-1`
#   to `ndim`: `wrap_dim(dim, ndim + 1)`). Its stride is **the size times the
#   stride of the dim it is inserted before**, or 1 at the end:
#   `(3, 4)/(4, 1).unsqueeze(1)` has stride `(4, 4, 1)`;
# - `squeeze(dim=None)` removes dims of size 1: all of them, or only `dim` (an
#   int or a tuple of ints) — and only where the size really is 1; asking to
#   squeeze a dim of size 3 is allowed and does nothing, naming a dim twice
#   (in any spelling: `-1` is the last dim) is a `RuntimeError`;
# - `flatten(start_dim=0, end_dim=-1)` merges the dims from `start_dim` to
#   `end_dim` (both included) into one, with `reshape` — so it is a view when it
#   can be and **a copy when it must**. A 0-dim tensor flattens to shape `(1,)`;
#   `start_dim == end_dim` returns the tensor itself; `start_dim` after
#   `end_dim` is a `RuntimeError`.
#
# Real PyTorch: `unsqueeze` (`inferUnsqueezeGeometry`), `squeeze` and `flatten`
# in [`aten/src/ATen/native/TensorShape.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/TensorShape.cpp).

# %% solution="ex_unsqueeze" reference=true
@register_kernels(DispatchKey.CPU)
class SizeOneDims:
    def unsqueeze(self, dim: int) -> "Tensor":
        ### BEGIN SOLUTION
        n = self.dim()
        d = wrap_dim(dim, n + 1)
        new_stride = self._shape[d] * self._stride[d] if d < n else 1
        return Tensor(self._storage, self._shape[:d] + (1,) + self._shape[d:],
                      self._stride[:d] + (new_stride,) + self._stride[d:], self._offset)
        ### END SOLUTION

    def squeeze(self, dim=None) -> "Tensor":
        ### BEGIN SOLUTION
        n = self.dim()
        if dim is None:
            dims = list(range(n))
        else:
            dims = [wrap_dim(d, n) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))]
            for d in dims:
                if dims.count(d) > 1:
                    raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        keep = [d for d in range(n) if not (d in dims and self._shape[d] == 1)]
        return Tensor(self._storage, [self._shape[d] for d in keep], [self._stride[d] for d in keep], self._offset)
        ### END SOLUTION

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        ### BEGIN SOLUTION
        n = self.dim()
        start, end = wrap_dim(start_dim, n), wrap_dim(end_dim, n)
        if n == 0:
            return self.reshape(1)
        if start > end:
            raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
        if start == end:
            return self
        merged = math.prod(self._shape[start:end + 1])
        return self.reshape(self._shape[:start] + (merged,) + self._shape[end + 1:])
        ### END SOLUTION

# %% tests="ex_unsqueeze" points=2
x = torch.arange(24.).reshape(2, 3, 4)
check_chain(x, [Op("unsqueeze", 1)])
check_chain(x.transpose(0, 2), [Op("unsqueeze", 1), Op("unsqueeze", -1)], "y")
check_chain(x[:, 0:1], [Op("squeeze")], "y")
check_chain(x, [Op("unsqueeze", 0), Op("squeeze", (0, 1))])
check_chain(x, [Op("flatten")])
check_chain(x.transpose(0, 1), [Op("flatten", 1)], "y")
check_chain(x.transpose(1, 2), [Op("flatten")], "y")              # a copy
check_chain(x, [Op("flatten", 2, 1)])                              # torch: RuntimeError
check_chain(x, [Op("unsqueeze", -4)])                             # -ndim - 1: a new first dim
check_chain(x, [Op("unsqueeze", 4)])                              # torch: IndexError (dims -4 to 3)
check_chain(x[:, 0:1], [Op("squeeze", -2)], "y")
check_chain(x, [Op("squeeze", -1)])                               # size 4: nothing to squeeze
check_chain(x[:1, :, :1], [Op("squeeze", (2, -1))], "y")          # torch: RuntimeError (-1 is dim 2: a repeat)
check_chain(x[0, 0, 0], [Op("flatten")], "y")                     # 0 dims: shape (1,)
ours = from_torch(x)
if call_yours("x.flatten(1, 1)", ours.flatten, 1, 1) is not ours:
    fail("x.flatten(1, 1)", "made a new tensor, but torch returns the tensor itself when start_dim == end_dim")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_size_one_dims(draw):
    x = random_layout(draw)
    check_chain_of(draw, x, ("unsqueeze", "squeeze", "flatten"), draw(1, 4))


for_random_inputs(test_size_one_dims, 150)
y = x[:1, :, :1]                                                   # shape (1, 3, 1)
for dims in [(0, -3), (2, -1, 0), (-1, 2), (1, -2)]:               # one dim in two spellings: torch raises
    check_chain(y, [Op("squeeze", dims)], "y")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 7 — windows: `narrow` and `as_strided`
#
# `t.narrow(dim, start, length)` keeps `length` elements of `dim` from `start`
# on. The strides stay; the **offset moves** to where element `start` of that
# dim is:
#
# ```
# x = arange(12).view(3, 4)    offset 0, stride (4, 1)
# x.narrow(1, 1, 2)            offset 0 + 1*1 = 1, shape (3, 2), stride (4, 1)
# x.narrow(1, 1, 2).narrow(0, 2, 1)   offset 1 + 2*4 = 9     <- add to the offset you have, never reset it
# ```
#
# ![x.narrow(1, 1, 2) over the storage of x = arange(12).view(3, 4): offset 1, shape (3, 2), stride (4, 1). It reads positions 1, 2, then 5, 6, then 9, 10; the cells between stay unread. The element at index (2, 1) is at 1 + 2×4 + 1×1 = 10](figures/narrow_view.svg)
#
# Torch's checks, in order: a 0-dim tensor — `RuntimeError`; `length < 0` —
# `RuntimeError`; `dim` out of range — `IndexError`; `start` outside
# `[-size, size]` — `IndexError` (a negative start counts from the end);
# `start + length > size` — `RuntimeError`.
#
# `t.as_strided(size, stride, storage_offset=None)` is the raw tool: any shape,
# strides and offset over the same storage. Without `storage_offset`, the offset
# is **the tensor's own**. Refuse (`RuntimeError`) a `size` and `stride` of
# different lengths, a negative stride, and a view that would reach past the end
# of the storage (a view with no elements reaches nothing).
#
# Real PyTorch: `narrow` and `as_strided` in [`aten/src/ATen/native/TensorShape.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/TensorShape.cpp).

# %% solution="ex_narrow" reference=true
@register_kernels(DispatchKey.CPU)
class Windows:
    def narrow(self, dim: int, start: int, length: int) -> "Tensor":
        ### BEGIN SOLUTION
        if self.dim() == 0:
            raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
        if length < 0:
            raise RuntimeError("narrow(): length must be non-negative.")
        d = wrap_dim(dim, self.dim())
        size = self._shape[d]
        if not -size <= start <= size:
            raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], but got {start})")
        if start < 0:
            start += size
        if start + length > size:
            raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
        shape = self._shape[:d] + (length,) + self._shape[d + 1:]
        return Tensor(self._storage, shape, self._stride, self._offset + start * self._stride[d])
        ### END SOLUTION

    def as_strided(self, size, stride, storage_offset=None) -> "Tensor":
        ### BEGIN SOLUTION
        size, stride = tuple(size), tuple(stride)
        if len(size) != len(stride):
            raise RuntimeError("mismatch in length of strides and shape")
        if any(s < 0 for s in stride):
            raise RuntimeError(f"as_strided: Negative strides are not supported at the moment, got strides: {list(stride)}")
        offset = self._offset if storage_offset is None else storage_offset
        if all(n > 0 for n in size):
            needed = offset + 1 + sum((n - 1) * s for n, s in zip(size, stride))
            if needed > len(self._storage):
                raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset} "
                                   f"requiring a storage size of {needed} are out of bounds for storage of size "
                                   f"{len(self._storage)}")
        return Tensor(self._storage, size, stride, offset)
        ### END SOLUTION

# %% tests="ex_narrow" points=2
x = torch.arange(24.).reshape(2, 3, 4)
check_chain(x, [Op("narrow", 2, 1, 2)])
check_chain(x, [Op("narrow", 2, 1, 2), Op("narrow", 1, -2, 2)])
check_chain(x.transpose(0, 2), [Op("narrow", 0, 3, 1), Op("narrow", 2, 1, 1)], "y")
check_chain(x, [Op("narrow", 1, 2, 2)])                            # torch: RuntimeError
check_chain(x, [Op("as_strided", (3, 3), (1, 1))])
check_chain(x, [Op("narrow", 0, 1, 1), Op("as_strided", (2, 2), (4, 1))])
check_chain(x, [Op("as_strided", (2, 2), (4, 1), 20)])
check_chain(x, [Op("as_strided", (5, 5), (6, 1))])                # torch: RuntimeError (out of bounds)
check_chain(x, [Op("narrow", 2, 4, 0)])                            # start == size: an empty window
check_chain(x[0, 0, 0], [Op("narrow", 0, 0, 1)], "y")              # torch: RuntimeError (0 dims)
check_chain(x, [Op("narrow", 3, 0, -1)])                           # torch: RuntimeError (length < 0, before dim)
check_chain(x, [Op("narrow", 3, 0, 1)])                            # torch: IndexError (no dim 3)
check_chain(x, [Op("narrow", 2, 5, 0)])                            # torch: IndexError (start outside [-4, 4])
check_chain(x, [Op("narrow", 2, -5, 1)])                           # torch: IndexError
check_chain(x, [Op("as_strided", (2, 3), (1,))])                   # torch: RuntimeError (2 sizes, 1 stride)
check_chain(x, [Op("as_strided", (2, 2), (-1, 1), 5)])             # torch: RuntimeError (a negative stride)
check_chain(x, [Op("as_strided", (0, 50), (1, 1), 30)])            # no elements: reaches nothing, allowed
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_windows(draw):
    x = random_layout(draw)
    check_chain_of(draw, x, ("narrow", "narrow", "as_strided"), draw(1, 4))


for_random_inputs(test_windows, 150)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 8 — indexing: `t[1, ::2, None, ...]`
#
# Basic indexing is a chain of the views you already have, applied left to
# right; each item of the key eats one dim of the tensor, except `None` and
# `...`:
#
# | item | what it does to the dim it meets | like |
# |---|---|---|
# | `i` (an int) | removes the dim; the offset moves by `i * stride` (a negative `i` counts from the end; out of range: `IndexError`) | `select` |
# | `a:b:c` (a slice) | keeps elements `a, a+c, ...` before `b`: size `len(range(a, b, c))`, stride `stride * c`, offset moves by `a * stride` | `narrow`, with a step |
# | `None` | inserts a dim of size 1 here, with `unsqueeze`'s stride; eats nothing | `unsqueeze` |
# | `...` | stands for as many `:` as needed so that the key covers every dim | |
#
# Slices clamp like Python's: `slice(a, b, c).indices(size)` gives the real
# `(start, stop, step)`. Torch refuses a step of 0 or below (`ValueError`), and
# more ints and slices than the tensor has dims (`IndexError`). A key that is
# not a tuple is a tuple of one item.
#
# ```
# x = arange(24).view(2, 3, 4)        stride (12, 4, 1), offset 0
# x[1, ::2]                           shape (2, 4) stride (8, 1) offset 12
# x[:, None, 1:]                      shape (2, 1, 2, 4) stride (12, 24, 4, 1) offset 4
# x[..., 3]                           shape (2, 3) stride (12, 4) offset 3
# ```
#
# Once `__getitem__` works, the given `__setitem__` (`t[key] = value`) writes
# through the view — into the storage every other view of it sees.
#
# Real PyTorch: `applySlicing` in [`aten/src/ATen/TensorIndexing.h`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/TensorIndexing.h),
# called from [`torch/csrc/autograd/python_variable_indexing.cpp`](https://github.com/pytorch/pytorch/blob/main/torch/csrc/autograd/python_variable_indexing.cpp).

# %% solution="ex_indexing" reference=true
@register_kernels(DispatchKey.CPU)
class Indexing:
    def __getitem__(self, key) -> "Tensor":
        ### BEGIN SOLUTION
        key = key if isinstance(key, tuple) else (key,)
        for k in key:
            if not (k is None or k is Ellipsis or isinstance(k, slice) or (isinstance(k, int) and not isinstance(k, bool))):
                raise TypeError(f"picotorch indexes with ints, slices, None and ... only; got {type(k).__name__}")
            if isinstance(k, slice) and k.step is not None and k.step <= 0:
                raise ValueError("step must be greater than zero")
        n = self.dim()
        eaten = sum(1 for k in key if k is not None and k is not Ellipsis)
        if eaten > n:
            raise IndexError(f"too many indices for tensor of dimension {n}")
        if Ellipsis in key:
            i = key.index(Ellipsis)
            key = key[:i] + (slice(None),) * (n - eaten) + tuple(k for k in key[i + 1:] if k is not Ellipsis)
        shape, stride, offset, d = [], [], self._offset, 0
        for k in key:
            if k is None:
                shape.append(1)
                stride.append(self._shape[d] * self._stride[d] if d < n else 1)
            elif isinstance(k, slice):
                start, stop, step = k.indices(self._shape[d])
                shape.append(len(range(start, stop, step)))
                stride.append(self._stride[d] * step)
                offset += start * self._stride[d]
                d += 1
            else:
                size = self._shape[d]
                if not -size <= k < size:
                    raise IndexError(f"index {k} is out of bounds for dimension {d} with size {size}")
                offset += (k + size if k < 0 else k) * self._stride[d]
                d += 1
        return Tensor(self._storage, tuple(shape) + self._shape[d:], tuple(stride) + self._stride[d:], offset)
        ### END SOLUTION

# %% tests="ex_indexing" points=3
x = torch.arange(24.).reshape(2, 3, 4)
for key in [1, (1, 2), (1, 2, 3), (slice(None), 1), (1, slice(None, None, 2)), (slice(None), None, slice(1, None)),
            (Ellipsis, 3), (-1, slice(-2, None)), (None, Ellipsis, None), (slice(5, None),), (0, 0, 0, 0)]:
    check_chain(x, [Op("getitem", key)])
# torch raises: IndexError for an int out of range (2 of size 2, -4 of size 3), ValueError for a step below 1
for key in [2, (slice(None), -4), slice(None, None, -1)]:
    check_chain(x, [Op("getitem", key)])
check_chain(x.transpose(0, 2), [Op("getitem", (slice(1, None, 2), 1)), Op("getitem", (Ellipsis, None))], "y")
ours = from_torch(x.clone())
ours[1, ::2] = -1.0
y = x.clone()
y[1, ::2] = -1.0
compare.assert_matches(ours.to_torch(), y, "x after x[1, ::2] = -1.0 (the write must go through the view)")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_indexing(draw):
    x = random_layout(draw)
    check_chain_of(draw, x, ("getitem",), draw(1, 3))
    key = random_index(draw, tuple(x.shape))
    try:
        x[key]
    except Exception:
        return
    theirs, base = x.clone(), x.clone()  # writing through a view changes the base, in the same places
    ours = from_torch(base)
    value = [0, 1][draw(0, 1)]
    theirs[key] = value
    ours[key] = value
    compare.assert_matches(ours.to_torch(), theirs, f"x after x{Op('getitem', key)} = {value}, where x has {layout(x)}")


for_random_inputs(test_indexing, 250)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 9 — broadcasting: `broadcast_shapes`, `expand`, `broadcast_to`
#
# Two shapes broadcast when, **aligned on the right**, each pair of sizes is
# equal or one of them is 1; missing dims on the left count as 1. The result
# takes the larger size of each pair (a 1 against a 0 gives 0):
#
# ```
#        (   4, 1, 3)
#        (5, 1, 2, 1)
#   ->   (5, 4, 2, 3)
#        (2, 3) and (3, 2): the last dims are 3 and 2 -> RuntimeError
# ```
#
# ![Broadcasting a of shape (3, 1) holding 0, 10, 20 with b of shape (4,) holding 0, 1, 2, 3. Aligned on the right, the shapes give (3, 4). a.expand(3, 4) has stride (1, 0): its one column repeats across, drawn dashed, without a copy; b.expand(3, 4) has stride (0, 1): its one row repeats down. Their sum is a new (3, 4) tensor, 0 to 3, 10 to 13, 20 to 23](figures/broadcasting.svg)
#
# `t.expand(*sizes)` shows `t` in a bigger shape **without copying**: a dim of
# size 1 becomes any size with **stride 0** — every step along it lands on the
# same element. Rules, from the right: `-1` keeps a dim's size; a dim of size 1
# may become any size (stride 0); other sizes must stay as they are; new dims
# on the left are allowed (not `-1`): one of size 1 gets the stride it would
# have in a contiguous layout of the dims to its right (`size * stride` of the
# next dim), any other size gets stride 0. Fewer sizes than dims is an error. A
# 0-dim tensor expands with stride 0 in every dim. All errors are
# `RuntimeError`. `broadcast_to(shape)` is `expand(shape)`.
#
# ```
# y = arange(3)         shape (3,)       stride (1,)
# y.expand(2, 3)        shape (2, 3)     stride (0, 1)
# y.expand(1, 3)        shape (1, 3)     stride (3, 1)
# ```
#
# Real PyTorch: `infer_size` and `inferExpandGeometry` in
# [`aten/src/ATen/ExpandUtils.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/ExpandUtils.cpp).

# %% solution="ex_broadcast" reference=true
def broadcast_shapes(*shapes) -> tuple:
    """The shape that all of shapes broadcast to; RuntimeError if they do not."""
    ### BEGIN SOLUTION
    ndim = max((len(s) for s in shapes), default=0)
    result = [1] * ndim
    for shape in shapes:
        for i in range(1, len(shape) + 1):
            size = shape[-i]
            if size == 1:
                continue
            if result[-i] == 1:
                result[-i] = size
            elif result[-i] != size:
                raise RuntimeError(f"Attempting to broadcast a dimension of length {size} at {-i}! Mismatching "
                                   f"argument had {tuple(shape)}; but expected shape should be broadcastable to "
                                   f"{tuple(result)}")
    return tuple(result)
    ### END SOLUTION


@register_kernels(DispatchKey.CPU)
class Broadcasting:
    def expand(self, *sizes) -> "Tensor":
        ### BEGIN SOLUTION
        sizes = shape_arg(sizes)
        n, m = self.dim(), len(sizes)
        if m < n:
            raise RuntimeError(f"expand: the number of sizes provided ({m}) must be greater or equal to the "
                               f"number of dimensions in the tensor ({n})")
        if n == 0:
            if any(s < 0 for s in sizes):
                raise RuntimeError(f"The expanded size of the tensor ({min(sizes)}) isn't allowed in a leading, "
                                   "non-existing dimension")
            return Tensor(self._storage, sizes, (0,) * m, self._offset)
        shape, stride = [0] * m, [0] * m
        for i in range(m - 1, -1, -1):
            d = i - (m - n)
            size = self._shape[d] if d >= 0 else 1
            step = self._stride[d] if d >= 0 else shape[i + 1] * stride[i + 1]
            target = sizes[i]
            if target == -1:
                if d < 0:
                    raise RuntimeError(f"The expanded size of the tensor (-1) isn't allowed in a leading, "
                                       f"non-existing dimension {i}")
                target = size
            if size != target:
                if size != 1:
                    raise RuntimeError(f"The expanded size of the tensor ({target}) must match the existing size "
                                       f"({size}) at non-singleton dimension {i}.  Target sizes: {list(sizes)}.  "
                                       f"Tensor sizes: {list(self._shape)}")
                size, step = target, 0
            shape[i], stride[i] = size, step
        return Tensor(self._storage, shape, stride, self._offset)
        ### END SOLUTION

    def broadcast_to(self, shape) -> "Tensor":
        ### BEGIN SOLUTION
        return self.expand(tuple(shape))
        ### END SOLUTION

# %% tests="ex_broadcast" points=2
def expect_broadcast_shapes(*shapes):
    what = f"broadcast_shapes{shapes}"
    result = same_outcome(lambda: broadcast_shapes(*shapes), lambda: tuple(torch.broadcast_shapes(*shapes)), what)
    if result is not None:
        compare.assert_equal(tuple(result[0]), result[1], what)


for shapes in [((4, 1, 3), (5, 1, 2, 1)), ((2, 3), (3,)), ((2, 3), (3, 2)), ((1,), (0,)), ((), (2, 2)), ((3, 1), (1, 3), (2, 1, 1))]:
    expect_broadcast_shapes(*shapes)
y = torch.arange(6.).reshape(2, 3)
check_chain(y[0], [Op("expand", 4, 3)], "z")
check_chain(y[:, 1:2], [Op("expand", 2, 2, -1, 5)], "z")
check_chain(y[0], [Op("broadcast_to", (1, 3))], "z")
check_chain(y, [Op("expand", 3, 3)])                               # torch: RuntimeError
check_chain(y, [Op("expand", -1, 2, 3)])                           # torch: RuntimeError (-1 in a new dim)
check_chain(y, [Op("expand", 3)])                                  # torch: RuntimeError (fewer sizes than dims)
check_chain(y[1, 1], [Op("expand", 1, 3)], "z")                    # 0 dims: stride 0 in every dim
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def broadcastable_shapes(draw, k):
    """k shapes that often broadcast (and sometimes do not)."""
    full = random_shape(draw, max_dims=4)
    shapes = []
    for _ in range(k):
        s = list(full[draw(0, len(full)):])
        s = [1 if draw(0, 2) == 0 else size for size in s]
        if s and draw(0, 9) == 0:
            s[draw(0, len(s) - 1)] = draw(2, 5)
        shapes.append(tuple(s))
    return shapes


def test_broadcasting(draw):
    expect_broadcast_shapes(*broadcastable_shapes(draw, draw(1, 3)))
    x = random_layout(draw)
    check_chain_of(draw, x, ("expand", "broadcast_to"), draw(1, 3))


for_random_inputs(test_broadcasting, 200)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 10 — type promotion
#
# What is the dtype of `a + b`? Torch's answer has one idea and one refinement.
#
# **The idea:** the result is the smallest dtype that holds both operands'
# values: `promote_types` (given) — bool < int64 < float32 < float64 for our
# four.
#
# **The refinement:** operands of three kinds take part with decreasing weight:
#
# 1. tensors with at least one dim,
# 2. 0-dim tensors,
# 3. Python numbers (`True` counts as bool, `3` as int64, `2.5` as **float32**,
#    torch's default float type).
#
# A lighter kind only matters when it is of a **higher category**
# (bool < integer < floating point) than the heavier kinds: then the result is
# promoted to hold it; otherwise the heavier kinds decide alone.
#
# | `a` | `b` | result | why |
# |---|---|---|---|
# | int64 tensor `(3,)` | `2.5` | float32 | a float number lifts the integers to the default float |
# | float32 tensor `(3,)` | float64 0-dim tensor | float32 | same category: the 0-dim tensor does not count |
# | float32 tensor `(3,)` | float64 tensor `(1,)` | float64 | two dimensioned tensors promote as usual |
# | bool tensor `(3,)` | `3` | int64 | integer beats bool |
# | int64 tensor `(3,)` | `True` | int64 | bool is a lower category |
#
# Write `result_type(a, b)` (each a `Tensor` or a Python `bool`/`int`/`float`):
# promote within each kind first, then combine from the lightest up. Also write
# `can_cast(from_, to)`: whether an in-place operation may write a `from_`
# result into a `to` tensor — never down a category (float into int64, int64 or
# float into bool). `torch.result_type` and `torch.can_cast` are the oracles.
#
# Real PyTorch: `result_type` and `can_cast` in [`aten/src/ATen/native/TypeProperties.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/TypeProperties.cpp).

# %% solution="ex_promotion" reference=true
def result_type(a, b) -> DType:
    """The dtype torch computes `a op b` in; a and b are Tensors or Python bool/int/float."""
    ### BEGIN SOLUTION
    if isinstance(a, Tensor):
        if isinstance(b, Tensor) and a.dtype is b.dtype:
            return a.dtype  # the most common call, answered at once: nothing to promote
        if a.dtype.is_floating_point and (type(b) is float or type(b) is int):
            return a.dtype  # a float tensor and a number (x * 0.5): the tensor's dtype, also answered at once
    elif isinstance(b, Tensor) and b.dtype.is_floating_point and (type(a) is float or type(a) is int):
        return b.dtype
    kinds = {"dim": None, "zero": None, "number": None}
    for x in (a, b):
        if isinstance(x, Tensor):
            kind, dtype = ("dim" if x.dim() > 0 else "zero"), x.dtype
        elif isinstance(x, bool):
            kind, dtype = "number", bool_
        elif isinstance(x, int):
            kind, dtype = "number", int64
        elif isinstance(x, float):
            kind, dtype = "number", float32
        else:
            raise TypeError(f"unsupported operand type {type(x).__name__}")
        kinds[kind] = dtype if kinds[kind] is None else promote_types(kinds[kind], dtype)

    def combine(higher, lower):
        if higher is None or lower is None:
            return higher or lower
        if higher.category < lower.category:
            return promote_types(higher, lower)
        return higher

    return combine(kinds["dim"], combine(kinds["zero"], kinds["number"]))
    ### END SOLUTION


def can_cast(from_: DType, to: DType) -> bool:
    """Whether a result of dtype from_ may be written into a tensor of dtype to."""
    ### BEGIN SOLUTION
    return from_.category <= to.category
    ### END SOLUTION

# %% tests="ex_promotion" points=2
TORCH_DTYPES = [torch.bool, torch.int64, torch.float32, torch.float64]


def operand(kind, dtype):
    """(picotorch operand, torch operand, text) of a kind: 'tensor', '0-dim' or 'number'."""
    if kind == "number":
        value = {torch.bool: True, torch.int64: 3, torch.float32: 2.5, torch.float64: 2.5}[dtype]
        return value, value, repr(value)
    t = torch.ones((2,) if kind == "tensor" else (), dtype=dtype)
    return from_torch(t), t, f"a {kind} of {dtype}"


def expect_result_type(a, b):
    (pa, ta, na), (pb, tb, nb) = a, b
    what = f"result_type({na}, {nb})"
    got = call_yours(what, result_type, pa, pb)
    want = torch.result_type(ta, tb)
    compare.assert_equal(getattr(got, "name", got), str(want).replace("torch.", ""), what)


expect_result_type(operand("tensor", torch.int64), operand("number", torch.float32))
expect_result_type(operand("tensor", torch.float32), operand("0-dim", torch.float64))
expect_result_type(operand("tensor", torch.bool), operand("number", torch.int64))
expect_result_type(operand("0-dim", torch.int64), operand("tensor", torch.float32))
expect_result_type(operand("tensor", torch.float32), operand("tensor", torch.float64))  # two tensors with dims
expect_result_type(operand("tensor", torch.int64), operand("number", torch.bool))       # True: a lower category
expect_result_type(operand("tensor", torch.bool), operand("number", torch.bool))        # True counts as bool
expect_result_type(operand("0-dim", torch.int64), operand("0-dim", torch.float64))      # one kind: promote_types
expect_result_type(operand("tensor", torch.int64), operand("0-dim", torch.float64))     # a higher category lifts
expect_result_type(operand("0-dim", torch.bool), operand("number", torch.float32))      # numbers lift 0-dim ones
for f in TORCH_DTYPES:
    for t in TORCH_DTYPES:
        what = f"can_cast({DTYPE_OF_TORCH[f]}, {DTYPE_OF_TORCH[t]})"
        compare.assert_equal(call_yours(what, can_cast, DTYPE_OF_TORCH[f], DTYPE_OF_TORCH[t]), torch.can_cast(f, t), what)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
for ka in ("tensor", "0-dim", "number"):
    for kb in ("tensor", "0-dim", "number"):
        if ka == kb == "number":
            continue
        for da in TORCH_DTYPES[:3] if ka == "number" else TORCH_DTYPES:
            for db in TORCH_DTYPES[:3] if kb == "number" else TORCH_DTYPES:
                expect_result_type(operand(ka, da), operand(kb, db))
### END HIDDEN TESTS

# %% [markdown]
# The arithmetic methods of `Tensor` are given, each one call of the dispatcher
# (`x + y` is `dispatch("add", x, y)`, `2 - x` is `dispatch("sub", 2, x)`).

# %% reference=true
@add_methods(Tensor)
class TensorArithmetic:
    """The elementwise operators: each one dispatch call, served by your _unary, _binary and _inplace."""
    def neg(self): return dispatch("neg", self)
    def abs(self): return dispatch("abs", self)
    def exp(self): return dispatch("exp", self)
    def log(self): return dispatch("log", self)
    def sqrt(self): return dispatch("sqrt", self)
    def relu(self): return dispatch("relu", self)
    def sigmoid(self): return dispatch("sigmoid", self)
    def tanh(self): return dispatch("tanh", self)
    def __neg__(self): return dispatch("neg", self)
    def __abs__(self): return dispatch("abs", self)

    def add(self, other): return dispatch("add", self, other)
    def sub(self, other): return dispatch("sub", self, other)
    def mul(self, other): return dispatch("mul", self, other)
    def div(self, other): return dispatch("div", self, other)
    def pow(self, other): return dispatch("pow", self, other)
    def maximum(self, other): return dispatch("maximum", self, other)
    def __add__(self, other): return dispatch("add", self, other)
    def __radd__(self, other): return dispatch("add", other, self)
    def __sub__(self, other): return dispatch("sub", self, other)
    def __rsub__(self, other): return dispatch("sub", other, self)
    def __mul__(self, other): return dispatch("mul", self, other)
    def __rmul__(self, other): return dispatch("mul", other, self)
    def __truediv__(self, other): return dispatch("div", self, other)
    def __rtruediv__(self, other): return dispatch("div", other, self)
    def __pow__(self, other): return dispatch("pow", self, other)
    def __rpow__(self, other): return dispatch("pow", other, self)
    __hash__ = object.__hash__  # (a class that defines __eq__ gets __hash__ = None, which add_methods would copy)
    def __eq__(self, other): return dispatch("eq", self, other) if _is_operand(other) else NotImplemented
    def __ne__(self, other): return dispatch("ne", self, other) if _is_operand(other) else NotImplemented
    def __lt__(self, other): return dispatch("lt", self, other)
    def __le__(self, other): return dispatch("le", self, other)
    def __gt__(self, other): return dispatch("gt", self, other)
    def __ge__(self, other): return dispatch("ge", self, other)

    def add_(self, other): return dispatch("add_", self, other)
    def sub_(self, other): return dispatch("sub_", self, other)
    def mul_(self, other): return dispatch("mul_", self, other)
    def div_(self, other): return dispatch("div_", self, other)
    def __iadd__(self, other): return dispatch("add_", self, other)
    def __isub__(self, other): return dispatch("sub_", self, other)
    def __imul__(self, other): return dispatch("mul_", self, other)
    def __itruediv__(self, other): return dispatch("div_", self, other)


def _is_operand(x) -> bool:
    return isinstance(x, (Tensor, bool, int, float))

# %% [markdown]
# Behind those calls, the NumPy function that computes each operator on
# values: `UNARY_KERNELS` and `BINARY_KERNELS`. The sets beside them name the
# operators with a rule of their own: `FLOAT_RESULT` (an integer input gives a
# float result), `COMPARISONS` (a bool result) and `INPLACE_OPS` (the ones with
# an in-place form `x.add_(y)`). Your kernels in exercise 11 look them up.

# %% reference=true
# The NumPy kernels of the elementwise operations: they get NumPy arrays of equal shapes
# (or a NumPy scalar) already in the dtype to compute in.
UNARY_KERNELS = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "relu": lambda x: np.maximum(x, x.dtype.type(0)),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
}
FLOAT_RESULT = {"exp", "log", "sqrt", "sigmoid", "tanh"}  # integer and bool inputs give float32, as in torch
BINARY_KERNELS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide, "pow": np.power,
    "maximum": np.maximum, "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}
COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge"}
INPLACE_OPS = ("add", "sub", "mul", "div")  # x.add_(y) is the operator "add_"

# %% [markdown]
# ## Exercise 11 — elementwise operations
#
# Now the values. An elementwise operation on two operands of possibly
# different layouts, shapes and dtypes takes four steps — this is what torch's
# `TensorIterator` does:
#
# 1. **dtype**: compute in `result_type(a, b)`; a division of integers or bools
#    computes in float32; a comparison computes in the promoted dtype and gives
#    `bool_`;
# 2. **shape**: `broadcast_shapes` of the two shapes (a Python number has shape `()`);
# 3. **layout**: `broadcast_to` that shape (stride 0, no copy), then `.numpy()` —
#    NumPy now sees two arrays of the same shape, each with its own strides;
# 4. **kernel**: cast to the compute dtype, call the NumPy kernel
#    (`BINARY_KERNELS[op]`, given) and wrap the new array (`from_numpy`).
#
# Unary operations (`UNARY_KERNELS`) are steps 1, 3 and 4 with one operand;
# `exp`, `log`, `sqrt`, `sigmoid`, `tanh` of integers or bools compute in
# float32. Torch refuses a few things with bools, and so do you
# (`RuntimeError`): `-` of a bool tensor, `abs`/`relu` of one, and a
# subtraction where either operand is a bool (a bool tensor or `True`/`False`).
#
# **In place** (`x.add_(y)`, `x += y`) writes into `x`'s own storage through its
# own strides — so writing into a view changes its base. Torch's rules, all
# `RuntimeError`: the result dtype must be castable to `x.dtype` (`can_cast`);
# the broadcast shape must be `x`'s shape (`x` cannot grow); and `x` must not
# have a dim of size > 1 with stride 0 (an expanded tensor: several elements
# would be the same memory) — unless it has no elements at all.
#
# Write `_unary(op)`, `_binary(op, other, reverse=False)` (with `reverse`, the
# operands are `other op self`: that is how `2 - x` arrives) and
# `_inplace(op, other)`, which returns `self`. The `@np.errstate(all="ignore")`
# over `_unary` and `_binary` (keep it) runs them with NumPy's warnings off:
# `log(-1)` is `nan` and `1/0` is `inf`, as in torch, without warnings.
#
# Real PyTorch: [`aten/src/ATen/TensorIterator.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/TensorIterator.cpp)
# (`compute_types`, `compute_shape`, `compute_strides`) and the kernels in
# [`aten/src/ATen/native/BinaryOps.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/BinaryOps.cpp).

# %% solution="ex_elementwise" reference=true
@register_kernels(DispatchKey.CPU)
class Elementwise:
    # (np.errstate as a decorator: the whole kernel runs with NumPy's warnings off, at half the cost of a
    # `with` block inside it, whose object is made, entered and left on every call; this runs for every op)
    @np.errstate(all="ignore")
    def _unary(self, op: str) -> "Tensor":
        ### BEGIN SOLUTION
        if self.dtype is bool_ and op in ("neg", "abs", "relu"):
            raise RuntimeError(f"{op} is not supported for bool tensors")
        dtype = float32 if op in FLOAT_RESULT and not self.dtype.is_floating_point else self.dtype
        out = UNARY_KERNELS[op](self.numpy().astype(dtype.numpy, copy=False))
        return from_numpy(np.asarray(out, dtype.numpy))
        ### END SOLUTION

    @np.errstate(all="ignore")
    def _binary(self, op: str, other, reverse: bool = False) -> "Tensor":
        ### BEGIN SOLUTION
        a, b = (other, self) if reverse else (self, other)
        dtype = result_type(a, b)
        if op == "sub" and any(isinstance(x, bool) or isinstance(x, Tensor) and x.dtype is bool_ for x in (a, b)):
            raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported.")
        if op == "div" and not dtype.is_floating_point:
            dtype = float32
        if isinstance(a, Tensor) and isinstance(b, Tensor) and a._shape != b._shape:
            broadcast_shapes(a._shape, b._shape)  # torch's error for shapes that do not broadcast
        # NumPy broadcasts by the same rules, so the operands go to the ufunc as they are (without two more calls
        # each to make the broadcast views first): a tensor's array in the compute dtype, a number as a NumPy
        # scalar of that dtype. This kernel runs for every elementwise operation, forward and backward.
        compute = dtype.numpy
        x = a.numpy().astype(compute, copy=False) if isinstance(a, Tensor) else compute.type(a)
        y = b.numpy().astype(compute, copy=False) if isinstance(b, Tensor) else compute.type(b)
        out = BINARY_KERNELS[op](x, y)
        return from_numpy(np.asarray(out, bool_.numpy if op in COMPARISONS else compute))
        ### END SOLUTION

    def _inplace(self, op: str, other) -> "Tensor":
        ### BEGIN SOLUTION
        if self.numel() and any(size > 1 and stride == 0 for size, stride in zip(self._shape, self._stride)):
            raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers to a "
                               "single memory location. Please clone() the tensor before performing the operation.")
        result = self._binary(op, other)
        if not can_cast(result.dtype, self.dtype):
            raise RuntimeError(f"result type {result.dtype.name} can't be cast to the desired output type {self.dtype.name}")
        if result.shape != self._shape:
            raise RuntimeError(f"output with shape {list(self._shape)} doesn't match the broadcast shape {list(result.shape)}")
        self.numpy()[...] = result.numpy()
        return self
        ### END SOLUTION

# %% tests="ex_elementwise" points=3
UNARY = ["neg", "abs", "exp", "log", "sqrt", "relu", "sigmoid", "tanh"]
BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
          "pow": lambda a, b: a ** b, "maximum": lambda a, b: a.maximum(b) if hasattr(a, "_storage") else torch.maximum(a, b),
          "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
          "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}
INPLACE = {"add_": lambda a, b: a.add_(b), "sub_": lambda a, b: a.sub_(b), "mul_": lambda a, b: a.mul_(b),
           "div_": lambda a, b: a.div_(b), "+=": lambda a, b: a.__iadd__(b), "*=": lambda a, b: a.__imul__(b)}
SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
          "gt": ">", "ge": ">="}


def binary_text(op, a_text, b_text):
    return f"{a_text} {SYMBOL[op]} {b_text}" if op in SYMBOL else f"{a_text}.{op}({b_text})"


def expect_binary(op, a, b, a_text="a", b_text="b"):
    """a and b: torch tensors or Python numbers; our side gets from_torch of the tensors."""
    pa = from_torch(a) if isinstance(a, torch.Tensor) else a
    pb = from_torch(b) if isinstance(b, torch.Tensor) else b
    what = binary_text(op, f"{a_text} ({describe(a)})", f"{b_text} ({describe(b)})")
    same_outcome(lambda: BINARY[op](pa, pb), lambda: BINARY[op](a, b), what)


def twin(a: torch.Tensor):
    """(whole storage, view): a copy of a's whole storage, and a view of it with a's exact layout."""
    n = a.untyped_storage().nbytes() // a.element_size()
    flat = a.as_strided((n,), (1,), 0).clone()
    return flat, flat.as_strided(a.shape, a.stride(), a.storage_offset())


def expect_inplace(op, a, b, a_text="a"):
    """The in-place op on a (a view, in any layout): the storage under a must change as torch's does,
    through a's strides, and nowhere else."""
    pb = from_torch(b) if isinstance(b, torch.Tensor) else b
    mine, mine_view = twin(a)
    theirs, theirs_view = twin(a)
    ours = from_torch(mine_view)
    what = (f"{a_text}.{op}(b)" if op[-1] == "_" else f"{a_text} {op} b") + f" where {a_text}: {describe(a)}, b: {describe(b)}"
    try:
        INPLACE[op](theirs_view, b)
    except Exception as e:
        try:
            INPLACE[op](ours, pb)
        except NotImplementedError:
            raise
        except type(e):
            return
        except Exception as e2:
            fail(what, f"raised {type(e2).__name__} ({e2}) but torch raises {type(e).__name__} ({e})")
        fail(what, f"wrote into {a_text}, but torch raises {type(e).__name__} ({e})")
    try:
        result = INPLACE[op](ours, pb)
    except NotImplementedError:
        raise
    except Exception as e:
        fail(what, f"raised {type(e).__name__} ({e}); torch writes the result into {a_text}")
    assert result is ours, f"{what}: an in-place operation returns the tensor it wrote into (self)"
    compare.assert_matches(mine, theirs, f"{what}: the whole storage under {a_text} afterwards "
                                         f"(in place means: write through {a_text}'s own strides, nowhere else)")


x = torch.tensor([[1.0, -2.0, 3.0], [0.5, 4.0, -1.5]])
for op in UNARY:
    same_outcome(lambda: getattr(from_torch(x.T), op)(), lambda: getattr(x.T, op)(), f"x.T.{op}() where x: {describe(x)}")
expect_binary("add", x, x[0], "x", "x[0]")
expect_binary("mul", x.T, torch.tensor([2, 3]), "x.T", "an int64 tensor")
expect_binary("sub", 1, x, "1", "x")
expect_binary("div", torch.tensor([1, 2, 3]), 2, "an int64 tensor", "2")
expect_binary("lt", x, 0.5, "x", "0.5")
expect_binary("add", x, torch.ones(3, 2), "x", "ones(3, 2)")           # torch: RuntimeError
expect_inplace("add_", x[:, 1:], torch.tensor([10.0, 20.0]), "x[:, 1:]")
expect_inplace("add_", torch.tensor([1, 2]), 0.5)                      # torch: RuntimeError (float into int64)
ints, bools = torch.tensor([[1, -2], [3, 4]]), torch.tensor([True, False])
for op in UNARY:  # exp, log, sqrt, sigmoid, tanh of integers compute in float32; the others keep int64
    same_outcome(lambda: getattr(from_torch(ints), op)(), lambda: getattr(ints, op)(), f"i.{op}() where i: {describe(ints)}")
same_outcome(lambda: from_torch(bools).exp(), lambda: bools.exp(), f"b.exp() where b: {describe(bools)}")
for op in ("neg", "abs", "relu"):  # torch refuses these of bools (RuntimeError; abs: NotImplementedError)
    same_outcome(lambda: getattr(from_torch(bools), op)(), lambda: getattr(bools, op)(),
                 f"b.{op}() where b: {describe(bools)} (of a bool tensor: RuntimeError)", error=RuntimeError)
expect_binary("add", ints, 2.5, "an int64 tensor", "2.5")                # 2.5 is never rounded to 2: float32
expect_binary("lt", ints, 2.5, "an int64 tensor", "2.5")                 # compared in float32
expect_binary("sub", bools, 1, "a bool tensor", "1")                     # torch: RuntimeError
expect_binary("sub", x, True, "x", "True")                               # torch: RuntimeError
expect_inplace("mul_", x[0], torch.ones(2, 3), "x[0]")                   # torch: RuntimeError (x[0] cannot grow)
expect_inplace("add_", x[0].expand(2, 3), 1.0, "x[0].expand(2, 3)")      # torch: RuntimeError (shared memory)
expect_inplace("add_", torch.zeros(1, 0).expand(3, 0), 1.0, "zeros(1, 0).expand(3, 0)")  # no elements: allowed
with warnings.catch_warnings():  # torch gives nan and inf without a warning, and so must you (np.errstate)
    warnings.simplefilter("error", RuntimeWarning)
    same_outcome(lambda: from_torch(x).log(), lambda: x.log(), f"x.log() where x: {describe(x)}, without a warning")
    expect_binary("div", x, 0, "x", "0 (without a warning)")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def operand_pair(draw):
    """Two torch tensors (or a tensor and a number), random layouts and dtypes, shapes that usually broadcast."""
    dtypes = [torch.float32, torch.float64, torch.int64, torch.bool]
    a = random_layout(draw, dtype=dtypes[draw(0, 3)], max_dims=3, values="random")
    kind = draw(0, 3)
    if kind == 0:
        b = [True, draw(-3, 3), draw(-30, 30) / 8][draw(0, 2)]
    else:
        shape = list(a.shape[draw(0, a.dim()):])
        shape = [1 if draw(0, 2) == 0 else s for s in shape]
        if draw(0, 4) == 0:
            shape = [draw(1, 3)] + shape
        if shape and draw(0, 14) == 0:
            shape[draw(0, len(shape) - 1)] = draw(2, 5)
        b = draw.values(tuple(shape), dtypes[draw(0, 3)])
        if b.dim() >= 2 and draw(0, 1):
            b = b.mT.contiguous().mT
        if kind == 1 and b.dim() == a.dim():
            b = b[()]  # a 0-dim operand now and then
    if draw(0, 1):
        a, b = b, a
    return a, b


def usable(op, a, b):
    """Leave out the calls where torch's answer is not a rule of this chapter."""
    kinds = [x.dtype if isinstance(x, torch.Tensor) else type(x) for x in (a, b)]
    if op == "pow" and (torch.bool in kinds or bool in kinds):
        return False  # torch: NotImplementedError
    if op == "pow" and all(k in (torch.int64, int) for k in kinds):
        exponent = b if not isinstance(b, torch.Tensor) else b.min().item() if b.numel() else 0
        return exponent >= 0
    if op == "maximum":
        return all(isinstance(x, torch.Tensor) for x in (a, b))
    return any(isinstance(x, torch.Tensor) for x in (a, b))


def test_elementwise(draw):
    a, b = operand_pair(draw)
    op = list(BINARY)[draw(0, len(BINARY) - 1)]
    if usable(op, a, b):
        expect_binary(op, a, b)
    t = a if isinstance(a, torch.Tensor) else b
    unary = UNARY[draw(0, len(UNARY) - 1)]
    if not (t.dtype == torch.bool and unary in ("neg", "abs", "relu")):
        same_outcome(lambda: getattr(from_torch(t), unary)(), lambda: getattr(t, unary)(), f"a.{unary}() where a: {describe(t)}")
    if isinstance(a, torch.Tensor):
        name = list(INPLACE)[draw(0, len(INPLACE) - 1)]
        if not (name in ("sub_",) and (a.dtype == torch.bool or getattr(b, "dtype", None) == torch.bool)):
            expect_inplace(name, a, b)


for_random_inputs(test_elementwise, 300)
y = torch.arange(3.)
expect_inplace("add_", y.expand(2, 3), 1.0, "y.expand(2, 3)")           # torch: RuntimeError (overlapping memory)
expect_inplace("mul_", y, torch.ones(2, 3), "y")                        # torch: RuntimeError (y cannot grow)
expect_inplace("add_", torch.tensor([True, False]), 1)                  # torch: RuntimeError (int64 into bool)
expect_binary("sub", torch.tensor([True, False]), 1)                    # torch: RuntimeError
# a number of a higher kind than the tensor's lifts the result to its kind: 2.5 is never rounded to an integer
for t in (torch.tensor([[3, -2, 0], [1, 5, -4]]), torch.tensor([[True, False, True], [False, False, True]])):
    for number in (2.5, -0.75, 3):
        for op in BINARY:
            kind = f"the Python {type(number).__name__}"
            for a, b, a_text, b_text in ((t, number, "a", kind), (number, t, kind, "a")):
                if usable(op, a, b):
                    expect_binary(op, a, b, a_text, b_text)
### END HIDDEN TESTS

# %% [markdown]
# The reduction methods and `matmul`, given: one dispatch call each. `x.max(dim)`
# returns a pair `(values, indices)`, a named tuple as torch's.

# %% reference=true
MaxResult = namedtuple("max", ["values", "indices"])


@add_methods(Tensor)
class TensorReductions:
    """Reductions and matmul: one dispatch call each."""
    def sum(self, dim=None, keepdim=False): return dispatch("sum", self, dim, keepdim)
    def mean(self, dim=None, keepdim=False): return dispatch("mean", self, dim, keepdim)
    def max(self, dim=None, keepdim=False): return dispatch("max", self, dim, keepdim)
    def argmax(self, dim=None, keepdim=False): return dispatch("argmax", self, dim, keepdim)
    def matmul(self, other): return dispatch("matmul", self, other)
    def __matmul__(self, other): return dispatch("matmul", self, other)

# %% [markdown]
# ## Exercise 12 — reductions: `sum`, `mean`, `max`, `argmax`
#
# A reduction folds one or more dims into one value each. `dim=None` means all
# dims; `keepdim=True` keeps each reduced dim with size 1, so that the result
# still broadcasts against the input (`x - x.max(1, keepdim=True).values`).
#
# | call | dims | result dtype | torch's errors |
# |---|---|---|---|
# | `sum(dim=None, keepdim=False)` | an int, a tuple of ints, or all | int64 for bool and int64, else the input's | a dim twice: `RuntimeError` |
# | `mean(dim=None, keepdim=False)` | same | the input's | an integer or bool input: `RuntimeError` |
# | `max()` | all | the input's, 0-dim | no elements: `RuntimeError` |
# | `max(dim, keepdim=False)` | one int | `MaxResult(values, indices)`; indices int64 | the dim has size 0: `IndexError` |
# | `argmax(dim=None, keepdim=False)` | one int, or all (the index into the flattened tensor) | int64 | bool input: `RuntimeError`; no elements: `IndexError` |
#
# Dims out of range raise `IndexError` (`wrap_dim`); a 0-dim tensor accepts
# `dim=0` and `dim=-1`. NumPy does the folding: `np.sum(a, axis=..., dtype=...,
# keepdims=...)`, `np.max`, `np.argmax` (ties go to the first maximum, as in
# torch). The result of a `max(dim)` is `MaxResult` (given), a named tuple.
#
# Real PyTorch: [`aten/src/ATen/native/ReduceOps.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/ReduceOps.cpp)
# and [`TensorCompare.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/TensorCompare.cpp) (`max`).

# %% solution="ex_reductions" reference=true
def reduction_dims(dim, ndim: int) -> tuple:
    """The dims a reduction folds, as NumPy axes (non-negative, distinct)."""
    ### BEGIN SOLUTION
    if dim is None:
        return tuple(range(ndim))
    dims = [wrap_dim(d, ndim) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))]
    for d in dims:
        if dims.count(d) > 1:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    return tuple(dims) if ndim else ()
    ### END SOLUTION


@register_kernels(DispatchKey.CPU)
class Reductions:
    def sum(self, dim=None, keepdim: bool = False) -> "Tensor":
        ### BEGIN SOLUTION
        dtype = self.dtype if self.dtype.is_floating_point else int64
        axes = reduction_dims(dim, self.dim())
        # np.einsum(values, [0, 1], [0]) keeps axis 0 and sums axis 1: the same sum as np.sum(values, axis=1),
        # but with the CPU's vector instructions along every axis (np.sum adds along a contiguous last axis one
        # number at a time: 3-4x slower than torch for the sum(1) of a 1000x1000 float32 tensor).
        kept = [d for d in range(self.dim()) if d not in axes]
        out = np.einsum(self.numpy().astype(dtype.numpy, copy=False), list(range(self.dim())), kept)
        if keepdim:  # the summed dims come back with size 1
            out = np.reshape(out, tuple(1 if d in axes else size for d, size in enumerate(self._shape)))
        return from_numpy(out)
        ### END SOLUTION

    def mean(self, dim=None, keepdim: bool = False) -> "Tensor":
        ### BEGIN SOLUTION
        if not self.dtype.is_floating_point:
            raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating point "
                               f"or complex dtype. Got: {self.dtype.name}")
        axes = reduction_dims(dim, self.dim())
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the mean of nothing is nan, as in torch
            out = np.mean(self.numpy(), axis=axes, keepdims=keepdim)
        return from_numpy(np.asarray(out, self.dtype.numpy))
        ### END SOLUTION

    def max(self, dim=None, keepdim: bool = False):
        ### BEGIN SOLUTION
        if dim is None:
            if self.numel() == 0:
                raise RuntimeError("max(): Expected reduction dim to be specified for input.numel() == 0. "
                                   "Specify the reduction dim with the 'dim' argument.")
            return from_numpy(np.asarray(np.max(self.numpy())))
        d = wrap_dim(dim, self.dim())
        if self.dim() and self._shape[d] == 0:
            raise IndexError(f"max(): Expected reduction dim {d} to have non-zero size.")
        axis = d if self.dim() else None
        values = np.max(self.numpy(), axis=axis, keepdims=keepdim)
        indices = np.argmax(self.numpy(), axis=axis, keepdims=keepdim)
        return MaxResult(from_numpy(np.asarray(values)), from_numpy(np.asarray(indices, np.int64)))
        ### END SOLUTION

    def argmax(self, dim=None, keepdim: bool = False) -> "Tensor":
        ### BEGIN SOLUTION
        if self.dtype is bool_:
            raise RuntimeError("argmax(): does not support bool input")
        if dim is None:
            if self.numel() == 0:
                raise IndexError("argmax(): Expected reduction dim to be specified for input.numel() == 0.")
            out = np.argmax(self.numpy(), axis=None, keepdims=keepdim)
        else:
            d = wrap_dim(dim, self.dim())
            if self.dim() and self._shape[d] == 0:
                raise IndexError(f"argmax(): Expected reduction dim {d} to have non-zero size.")
            out = np.argmax(self.numpy(), axis=d if self.dim() else None, keepdims=keepdim)
        return from_numpy(np.asarray(out, np.int64))
        ### END SOLUTION

# %% tests="ex_reductions" points=2
def reduce_call(name, args, kwargs):
    text = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    return f".{name}({text})"


def expect_reduction(t, name, *args, **kwargs):
    ours = from_torch(t)
    what = f"x{reduce_call(name, args, kwargs)} where x: {describe(t)}"
    result = same_outcome(lambda: getattr(ours, name)(*args, **kwargs), lambda: getattr(t, name)(*args, **kwargs),
                          what)
    if result is not None and name == "max" and (args or "dim" in kwargs):
        (got, want) = result
        if not isinstance(got, tuple) or len(got) != 2:
            fail(what, f"returned {type(got).__name__}, but torch returns (values, indices)")
        compare.assert_matches(got[0], want.values, what + ".values")
        compare.assert_matches(got[1], want.indices, what + ".indices")


x = torch.tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])
for name, args, kwargs in [("sum", (), {}), ("sum", (0,), {}), ("sum", ((0, 1),), {}), ("sum", (-1,), {"keepdim": True}),
                           ("mean", (1,), {}), ("max", (), {}), ("max", (1,), {}), ("max", (0,), {"keepdim": True}),
                           ("argmax", (), {}), ("argmax", (1,), {}), ("sum", ((1, 1),), {})]:
    expect_reduction(x, name, *args, **kwargs)
    expect_reduction(x.T, name, *args, **kwargs)
expect_reduction(torch.tensor([True, False, True]), "sum")
expect_reduction(torch.tensor([1, 2]), "mean")                          # torch: RuntimeError
expect_reduction(torch.tensor([True, False]), "mean")                   # torch: RuntimeError
expect_reduction(x, "sum", (1, -1))                                     # torch: RuntimeError (-1 is dim 1: twice)
expect_reduction(x, "mean", (-2, 0), keepdim=True)                      # torch: RuntimeError (-2 is dim 0: twice)
expect_reduction(x, "sum", 2)                                           # torch: IndexError
expect_reduction(x, "max", -3)                                          # torch: IndexError
expect_reduction(torch.empty(0, 3), "max")                              # torch: RuntimeError (no elements)
expect_reduction(torch.empty(0, 3), "max", 0)                           # torch: IndexError (dim 0 has size 0)
expect_reduction(torch.empty(0, 3), "argmax")                           # torch: IndexError (no elements)
expect_reduction(torch.tensor([True, False]), "argmax")                 # torch: RuntimeError (bool)
expect_reduction(torch.tensor(2.5), "max", 0)                           # a 0-dim tensor accepts dim 0 and -1
expect_reduction(torch.tensor(2.5), "sum", -1)
expect_reduction(torch.tensor([[1, 7, 7]]), "argmax", 1, keepdim=True)  # ties: the first
expect_reduction(torch.tensor([[1, 7, 7]]), "max", 1)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_reductions(draw):
    x = random_layout(draw, dtype=[torch.float32, torch.float64, torch.int64, torch.bool][draw(0, 3)], values="random")
    n = x.dim()
    name = ["sum", "mean", "max", "argmax"][draw(0, 3)]
    kwargs = {"keepdim": True} if draw(0, 1) else {}
    kind = draw(0, 3)
    if kind == 0 and (name == "argmax" or not kwargs):
        expect_reduction(x, name, **kwargs)
    elif kind == 1 or name in ("max", "argmax"):
        expect_reduction(x, name, random_dim(draw, n), **kwargs)
    else:
        dims = sorted({draw(0, max(n, 1) - 1) for _ in range(draw(1, 3))})
        dims = [d - max(n, 1) if draw(0, 1) else d for d in dims]
        if draw(0, 5) == 0:  # a dim named twice, in its other spelling: torch refuses it
            dims.insert(draw(0, len(dims)), dims[0] + max(n, 1) if dims[0] < 0 else dims[0] - max(n, 1))
        expect_reduction(x, name, tuple(dims), **kwargs)


for_random_inputs(test_reductions, 250)
expect_reduction(torch.empty(0, 3), "sum", 0)
for t, dims in [(x, (1, -1)), (x, (-2, 0)), (torch.ones(2, 3, 4), (0, 2, -3)), (torch.tensor(2.5), (0, -1))]:
    for name in ("sum", "mean"):                                         # one dim in two spellings: torch raises
        expect_reduction(t, name, dims)
        expect_reduction(t, name, dims, keepdim=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 13 — `matmul`
#
# `a @ b` follows torch's rules (you met them in chapter 00):
#
# - both operands need at least one dim, and the same dtype (`RuntimeError`:
#   torch does not promote here);
# - a 1-D left operand is a row (`unsqueeze(0)`, removed from the result); a
#   1-D right operand is a column (`unsqueeze(-1)`, removed from the result);
# - `a.shape[-1]` must equal `b.shape[-2]` (`RuntimeError`);
# - the dims before the last two are batch dims: `broadcast_shapes` them and
#   `expand` both operands to them — stride 0, no copy;
# - then `np.matmul` on the two `.numpy()` arrays does the arithmetic.
#
# ```
# (2, 1, 3, 4) @ (5, 4, 2)   ->  batch (2, 5), matrices (3, 4) @ (4, 2)  ->  (2, 5, 3, 2)
# (4,) @ (2, 4, 3)            ->  (1, 4) @ ...  ->  (2, 1, 3)  ->  (2, 3)
# ```
#
# Real PyTorch: `matmul` in [`aten/src/ATen/native/LinearAlgebra.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/LinearAlgebra.cpp).

# %% solution="ex_matmul" reference=true
@register_kernels(DispatchKey.CPU)
class MatMul:
    def matmul(self, other: "Tensor") -> "Tensor":
        ### BEGIN SOLUTION
        if self.dim() == 0 or other.dim() == 0:
            raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {self.dim()}D "
                               f"and {other.dim()}D")
        if self.dtype is not other.dtype:
            raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {self.dtype.name} != {other.dtype.name}")
        a = self.unsqueeze(0) if self.dim() == 1 else self
        b = other.unsqueeze(-1) if other.dim() == 1 else other
        if a.shape[-1] != b.shape[-2]:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape[-2]}x{a.shape[-1]} and "
                               f"{b.shape[-2]}x{b.shape[-1]})")
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        if a.shape[:-2] != batch:  # (two matrices, the common case, have no batch dims to expand)
            a = a.expand(batch + a.shape[-2:])
        if b.shape[:-2] != batch:
            b = b.expand(batch + b.shape[-2:])
        out = from_numpy(np.matmul(a.numpy(), b.numpy()))
        if self.dim() == 1:
            out = out.squeeze(-2)
        if other.dim() == 1:
            out = out.squeeze(-1)
        return out
        ### END SOLUTION

# %% tests="ex_matmul" points=2
def expect_matmul(a, b, a_text="a", b_text="b"):
    what = f"{a_text} @ {b_text} where {a_text}: {describe(a)}, {b_text}: {describe(b)}"
    same_outcome(lambda: from_torch(a) @ from_torch(b), lambda: a @ b, what)


g = inputs.generator()
for sa, sb in [((3, 4), (4, 2)), ((4,), (4, 2)), ((3, 4), (4,)), ((4,), (4,)), ((2, 1, 3, 4), (5, 4, 2)), ((3, 4), (3, 4))]:
    expect_matmul(torch.randn(sa, generator=g), torch.randn(sb, generator=g))
m = torch.randn(4, 3, generator=g)
expect_matmul(m.T, m, "m.T", "m")
expect_matmul(m, m.double().T, "m", "m.double().T")                      # torch: RuntimeError (dtypes differ)
expect_matmul(torch.tensor(2.0), torch.ones(3), "a 0-dim tensor", "b")   # torch: RuntimeError (0 dims)
expect_matmul(torch.ones(3), torch.tensor(2.0), "a", "a 0-dim tensor")   # torch: RuntimeError (0 dims)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
from course.testing import matmul_operand, matmul_shapes


def test_matmul(draw):
    a, b = matmul_shapes(draw)
    if draw(0, 11) == 0:  # now and then, shapes torch rejects
        b = b[:-2] + (b[-2] + 1,) + b[-1:] if len(b) > 1 else (b[0] + 1,)
    dtype = [torch.float32, torch.float64, torch.int64][draw(0, 2)]
    other = dtype if draw(0, 11) else [torch.float32, torch.float64][draw(0, 1)]
    if other != dtype:  # torch checks the dtypes only when there is something to multiply
        a, b = tuple(max(s, 1) for s in a), tuple(max(s, 1) for s in b)
    expect_matmul(matmul_operand(draw, a, dtype), matmul_operand(draw, b, other))


for_random_inputs(test_matmul, 200)
### END HIDDEN TESTS

# %% reference=true
# The names of this chapter that later chapters may use (`from picotorch import ...`).
__all__ = ["DType", "bool_", "int64", "float32", "float64", "DTYPES", "TORCH_DTYPE", "DTYPE_OF_TORCH", "PROMOTE_PAIRS",
           "BRIDGES", "register_dtype", "promote_types",
           "DISPATCH_KEYS", "DispatchKey", "DEVICE_OF_TYPE", "register_device", "Storage", "add_methods", "wrap_dim", "shape_arg",
           "MaxResult", "Tensor", "UNARY_KERNELS",
           "FLOAT_RESULT", "BINARY_KERNELS", "COMPARISONS", "INPLACE_OPS", "LocalDispatchKeySet", "LOCAL_KEYS",
           "TENSOR_KEYS", "FALLTHROUGH", "FALLBACKS", "OPS", "Operator", "operator", "forget_kernel_choices",
           "register_kernel", "key_set", "key_names", "dispatch", "KERNEL_OF_METHOD", "register_kernels", "numpy_array", "REPR_FIELDS", "tensor_repr",
           "from_torch", "empty", "zeros", "from_numpy", "tensor", "arange", "contiguous_strides",
           "storage_position", "dense_strides_like", "in_memory_format", "contiguous_format", "MEMORY_FORMATS",
           "register_memory_format", "memory_format_rules", "infer_size", "view_strides", "broadcast_shapes",
           "result_type", "can_cast", "reduction_dims"]

# %% [markdown]
# ## Check your work
#
# Save the notebook (Ctrl+S), then run the cell below: it re-runs the saved
# file in a fresh kernel, as the grader will, and lists every exercise.

# %%
check()
