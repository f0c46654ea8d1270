# ---
# jupyter:
#   course:
#     chapter: 05_backend
#     title: Backend
#     files:
#     - figures/launch_grid.svg
#     - figures/grid_stride.svg
#     - figures/tree_reduction.svg
#     - figures/tiled_matmul.svg
# ---

# %% [markdown]
# # Chapter 05 — Backend: a dispatcher and CUDA kernels of your own
#
# PyTorch is fast because `torch.add(x, y)` is not one function. It is a name
# that the **dispatcher** looks up, by the devices of the arguments, in a table
# of **kernels**: one written for the CPU, one written for NVIDIA GPUs in CUDA
# C, one for Apple GPUs... Your picotorch has the dispatcher (chapter 01) and
# only the CPU kind of kernel (NumPy). In this chapter a device becomes one
# more key of that dispatcher, with a CUDA backend whose kernels you write
# yourself:
#
# | piece | in torch | you build it in |
# |---|---|---|
# | `Device`: `"cpu"`, `"cuda:0"` | `torch.device` (`c10/core/Device.h`) | exercise 1 |
# | the `CUDA` key: a call's keys from its tensors' devices, the device check | `DispatchKeySet.h`, `RegisterCUDA.cpp` | exercise 2 |
# | `Tensor.to(device)` | `aten/src/ATen/native/TensorConversions.cpp` | exercise 3 |
# | launch geometry: grid and block from sizes | every `<<<grid, block>>>` in `aten/src/ATen/native/cuda` | exercise 4 |
# | `fill`, elementwise kernels, over any strides, broadcasting | `Fill.cu`, `Loops.cuh`, `TensorIterator` | exercises 5–8 |
# | `sum` along a dim: shared-memory tree, warp shuffles | `Reduce.cuh` | exercises 9–10 |
# | `matmul`: naive, tiled, register-blocked | cuBLAS (which torch calls) | exercises 11–13 |
# | row `softmax`, numerically stable | `SoftMax.cu` | exercise 14 |
# | an MLP trained on the device with your kernels | — | exercise 15 |
# | a mode that logs every operator | `TorchDispatchMode` | exercise 16 |
#
# **Where your kernels run.** A kernel here is CUDA C, compiled and launched by
# `course.cuda.Kernel`. Given tensors that live on a GPU (`torch.cuda` tensors),
# it compiles the kernel with NVRTC (through `cupy.RawKernel`) and launches it
# on the GPU, on memory that torch's caching allocator owns. Given CPU tensors,
# it runs the **same source** on the course's CUDA **emulator**: the kernel is
# compiled with g++ and each CUDA thread becomes a fiber, a thread of its own
# that the emulator switches to and from itself (at a barrier, a shuffle, a
# store to global memory) rather than leaving it to the OS. The emulator
# checks more than a GPU does — an access just past a tensor, shared memory
# touched by two threads with no `__syncthreads()` between them, a barrier not
# every thread reaches — but it is slow, and it does not model how a warp's
# threads are scheduled, the GPU's weak memory ordering or timing
# (`course.cuda.LIMITS` says it all).
#
# **A GPU is optional, and never pretended.** Without one, picotorch has no
# `"cuda"` device: `x.to("cuda")` is an error that says so. What you get instead
# is the device **`"emu"`**: tensors whose memory is ordinary CPU memory (owned
# by a CPU torch tensor), but whose operations the dispatcher sends to the CUDA
# backend — your kernels — which then run on the emulator. It is picotorch's own
# device type, the way PyTorch lets an out-of-tree backend register one
# (`PrivateUse1`), and it claims nothing: `x.device.type` is `"emu"`, never
# `"cuda"`. Every exercise is graded here through the emulator; where a GPU is
# present the tests run the same kernels on it and compare with `torch.cuda`.
#
# **Time:** about 9 hours — sixteen exercises, many of them CUDA kernels; exercise 13 is marked advanced.
#
# **How this notebook works.** Cells with *YOUR CODE HERE* are yours; each is
# followed by a test cell. Kernel exercises hold a CUDA C string with the two
# lines `# YOUR CODE HERE` and `raise NotImplementedError()` inside the kernel:
# replace them by your C code (until you do, the cell says the exercise is not
# attempted). The visible tests are a first taste; at grading, hidden tests use
# random shapes and layouts. `check("ex_fill")` re-runs one exercise's visible
# tests; `check()` (last cell) checks the whole saved notebook as the grader will.
#
# **Your chapters 01–04.** `picotorch` in this folder is the course's reference
# solution of chapters 01 to 04. To run this chapter on your own code instead,
# run `course use-mine 05_backend` in a terminal (`course use-reference
# 05_backend` to go back).

# %%
import numpy as np
import torch

from course import Checker, compare, inputs
from course.testing import call_yours, describe, for_random_inputs, same_layout_copy

check = Checker("05_backend")

# %% [markdown]
# ## 1. What we start from
#
# The next cell imports chapters 01 to 04. Every operation of picotorch is
# already a call of chapter 01's dispatcher: chapter 01's NumPy kernels are
# registered for the `CPU` key, chapter 02's autograd for the `Autograd` key in
# front of it. This chapter declares a third key, `CUDA` — the key set of every
# tensor whose memory is on a GPU (or on the emulator) — and registers kernels
# for it, exactly as chapter 01 registered its kernels for `CPU`. No method of
# `Tensor` changes.

# %% reference=true
import math

import numpy as np
import torch

from course.cuda import CudaError, Kernel
from course.cuda import Module as CudaModule
from course.cuda.status import gpu_available
from picotorch import (COMPARISONS, DEVICES, DTYPE_OF_TORCH, FLOAT_RESULT, OPS, REPR_FIELDS, TORCH_DTYPE, DispatchKey,
                       Function, GradMode, Storage, Tensor, add_methods, bool_, broadcast_shapes,
                       can_cast, contiguous_strides, dense_strides_like, float32, float64, from_torch, int64, no_grad,
                       numpy_array, register_kernels, result_type, shape_arg, tensor_repr, wrap_dim)
from picotorch import (LOCAL_KEYS, ExcludeDispatchKeys, IncludeDispatchKeys, dispatch, key_names, key_set, log_softmax,
                       redispatch, register, register_device, register_fallback, register_kernel, softmax, where)
from picotorch import parse_to as _ch03_parse_to

DispatchKey.declare("CUDA")  # the backend key of "cuda" and "emu" tensors (priority 1 in DISPATCH_KEYS)

UNARY_OPS = ("neg", "abs", "exp", "log", "sqrt", "relu", "sigmoid", "tanh")
BINARY_OPS = ("add", "sub", "mul", "div", "pow", "maximum", "eq", "ne", "lt", "le", "gt", "ge")

# %% [markdown]
# ## Exercise 1 — `Device`
#
# A device is a **type** and an optional **index**: `"cuda:1"` is the second
# GPU, `"cuda"` is "the current GPU" (no index), `"cpu"` is the CPU. Write
# picotorch's `Device`, with `torch.device`'s rules, for the device types
# picotorch has: `"cpu"`, `"cuda"` and `"emu"`.
#
# - `Device("cuda:1")`, `Device("cuda", 1)`, `Device("cpu")`; also
#   `Device(other)` for a `Device` or a `torch.device`. The string must be a type
#   alone, or a type, a colon and an index: digits only, no sign, no spaces, no
#   leading zero (`"cuda:01"` is refused, `"cuda:0"` is fine). An index given
#   both in the string and as the argument, or a negative index, is an error.
#   All of these are `RuntimeError`s (with torch's messages, if you like); a
#   string naming a device type picotorch does not have (`"mps"`, `"CUDA"`) too.
# - `.type` and `.index` (`None` when not given).
# - `str()` is `"cuda:1"` or `"cuda"`; `repr()` is
#   `device(type='cuda', index=1)` or `device(type='cuda')`, as torch's.
# - `Device("cuda") == Device("cuda:0")` is **False** (in torch too: one says
#   "the current GPU", the other "GPU 0"); equal devices hash equally. Unlike
#   `torch.device`, ours also equals the string or `torch.device` that names it
#   (`Device("cpu") == "cpu"`), so that chapter 03's code comparing devices with
#   `"cpu"` keeps working. (A string that names no device is simply not equal.)
#
# Real PyTorch: [`c10/core/Device.cpp`](https://github.com/pytorch/pytorch/blob/main/c10/core/Device.cpp).

# %% solution="ex_device" reference=true
DEVICE_TYPES = ("cpu", "cuda", "emu")


class Device:
    """A device: its type ("cpu", "cuda" or "emu") and index (None: the current one)."""

    def __init__(self, type, index=None):
        ### BEGIN SOLUTION
        if isinstance(type, (Device, torch.device)):
            if index is not None:
                raise RuntimeError("Device(device, index): a device already has its index")
            type, index = type.type, type.index
            if type not in DEVICE_TYPES:
                raise RuntimeError(f"picotorch has no device type {type!r}: it has {', '.join(DEVICE_TYPES)}")
        elif isinstance(type, str):
            text = type
            if not text:
                raise RuntimeError("Device string must not be empty")
            name, colon, number = text.partition(":")
            if not name or not all(c.isascii() and (c.isalpha() or c == "_") for c in name):
                raise RuntimeError(f"Invalid device string: '{text}'")
            if colon:
                if not number or not number.isascii() or not number.isdigit() or (number[0] == "0" and len(number) > 1):
                    raise RuntimeError(f"Invalid device string: '{text}'")
                if index is not None:
                    raise RuntimeError(f"type (string) must not include an index because index was passed "
                                       f"explicitly: {text}")
                index = int(number)
            if name not in DEVICE_TYPES:
                raise RuntimeError(f"Expected one of {', '.join(DEVICE_TYPES)} device type at start of device "
                                   f"string: {text}")
            type = name
        else:
            raise TypeError(f"Device() takes a device string, a Device or a torch.device, not {type!r}")
        if index is not None:
            if isinstance(index, bool) or not isinstance(index, int):
                raise TypeError(f"Device(): the index must be an int, not {index!r}")
            if index < 0:
                raise RuntimeError("Device index must not be negative")
        self.type, self.index = type, index
        ### END SOLUTION

    def __str__(self) -> str:
        ### BEGIN SOLUTION
        return self.type if self.index is None else f"{self.type}:{self.index}"
        ### END SOLUTION

    def __repr__(self) -> str:
        ### BEGIN SOLUTION
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"
        ### END SOLUTION

    def __eq__(self, other) -> bool:
        ### BEGIN SOLUTION
        if isinstance(other, (str, torch.device)):
            try:
                other = Device(other)
            except (RuntimeError, TypeError):
                return False
        if not isinstance(other, Device):
            return NotImplemented
        return self.type == other.type and self.index == other.index
        ### END SOLUTION

    def __hash__(self) -> int:
        ### BEGIN SOLUTION
        return hash((self.type, self.index))
        ### END SOLUTION


# %% tests="ex_device" points=2
def torch_outcome(make):
    """(torch.device or None, exception type or None)."""
    try:
        return make(), None
    except Exception as e:
        return None, type(e)


def expect_device(*args, torch_args=None):
    """Device(*args) against torch.device(*args): the same .type, .index, str and repr, or an error where torch
    has one (and where torch names a device type picotorch does not have)."""
    what = f"Device({', '.join(map(repr, args))})"
    theirs, error = torch_outcome(lambda: torch.device(*(torch_args or args)))
    if error is not None or theirs.type not in DEVICE_TYPES:
        compare.assert_raises(RuntimeError, Device, what + (f" (torch gives {theirs!r}, a device type picotorch "
                                                            "does not have)" if error is None else ""), *args)
        return
    ours = Device(*args)
    compare.assert_equal((ours.type, ours.index), (theirs.type, theirs.index), f"{what}: (.type, .index)")
    compare.assert_equal(str(ours), str(theirs), f"str({what})")
    compare.assert_equal(repr(ours), repr(theirs), f"repr({what})")


for args in [("cpu",), ("cuda",), ("cuda:0",), ("cuda:3",), ("cuda", 2), ("cpu:0",), ("cuda:01",), ("cuda:-1",),
             ("cuda", -1), ("cuda:1", 1), ("gpu",), ("CUDA",), ("",), ("cuda:",), ("mps",)]:
    expect_device(*args)
expect_device(torch.device("cuda:2"))
for a, b in [("cuda", "cuda:0"), ("cuda:0", "cuda:0"), ("cpu", "cuda"), ("cuda:1", "cuda:2")]:
    compare.assert_equal(Device(a) == Device(b), torch.device(a) == torch.device(b), f"Device({a!r}) == Device({b!r})")
assert hash(Device("cuda:1")) == hash(Device("cuda", 1)), "equal devices must hash equally (a dict key, a set)"
assert Device("emu:1").type == "emu" and Device("emu:1").index == 1 and str(Device("emu", 0)) == "emu:0"
assert Device("cpu") == "cpu" and Device("cuda:0") == torch.device("cuda:0") and not Device("cpu") == "cpu:"
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
PARTS = {"type": ["cpu", "cuda", "emu", "CUDA", "gpu", "mps", "meta", "cu da", "", "xla"],
         "colon": [":", ":", ":", "", "", "::"],
         "index": ["0", "1", "7", "12", "01", "-1", "+1", " 1", "", "x", "1.0", "00"]}


def test_device_texts(draw):
    text = draw.choice(PARTS["type"]) + draw.choice(PARTS["colon"])
    if text.endswith(":"):
        text += draw.choice(PARTS["index"])
    index = draw.choice([None, None, None, 0, 3, -2])
    args = (text,) if index is None else (text, index)
    if text.startswith("emu"):  # torch has no "emu": the same rules as for "cuda"
        cuda = "cuda" + text[3:]
        theirs, error = torch_outcome(lambda: torch.device(cuda, *args[1:]))
        what = f"Device({', '.join(map(repr, args))}) (torch gives {'an error' if error else theirs!r} for {cuda!r})"
        if error:
            compare.assert_raises(RuntimeError, Device, what, *args)
        else:
            ours = Device(*args)
            compare.assert_equal((ours.type, ours.index), ("emu", theirs.index), what)
            compare.assert_equal(str(ours), str(theirs).replace("cuda", "emu"), f"str({what})")
            compare.assert_equal(repr(ours), repr(theirs).replace("cuda", "emu"), f"repr({what})")
    else:
        expect_device(*args)


def test_device_equality(draw):
    a, b = (draw.choice(["cpu", "cuda", "cuda:0", "cuda:1", "cpu:0"]) for _ in range(2))
    compare.assert_equal(Device(a) == Device(b), torch.device(a) == torch.device(b), f"Device({a!r}) == Device({b!r})")
    compare.assert_equal(Device(a) != Device(b), torch.device(a) != torch.device(b), f"Device({a!r}) != Device({b!r})")
    compare.assert_equal(Device(a) == b, Device(a) == Device(b), f"Device({a!r}) == {b!r} (a string)")
    if torch.device(a) == torch.device(b):
        assert hash(Device(a)) == hash(Device(b)), f"Device({a!r}) and Device({b!r}) are equal but hash differently"


for_random_inputs(test_device_texts, 150)
for_random_inputs(test_device_equality, 60)
compare.assert_equal(len({Device("cuda:1"), Device("cuda", 1), Device("cuda"), Device("cpu")}), 3,
                     "the number of distinct devices in {Device('cuda:1'), Device('cuda', 1), Device('cuda'), Device('cpu')}")
compare.assert_equal(repr(Device(Device("emu:2"))), "device(type='emu', index=2)", "repr(Device(Device('emu:2')))")
compare.assert_raises(RuntimeError, Device, "Device(torch.device('meta')) (a device type picotorch does not have)",
                      torch.device("meta"))
compare.assert_equal(Device("cpu") == "not a device", False, "Device('cpu') == 'not a device'")
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Tensors on a device
#
# A picotorch tensor is a view (shape, strides, offset) of a `Storage`. Until
# now a storage was a NumPy array. On a device it is a `DeviceStorage` (given
# below): a flat buffer whose memory is owned by a **torch tensor** on that
# device —
#
# - on `"cuda"`, a `torch.cuda` tensor: the memory comes from torch's caching
#   allocator, so your tensors and torch's live side by side on the GPU, and a
#   kernel gets the address of its first element (`data_ptr()`);
# - on `"emu"`, a CPU torch tensor: ordinary memory, which the kernels of the
#   CUDA backend reach through the emulator.
#
# Everything that only looks at the layout — `view`, `transpose`, `expand`,
# indexing — works unchanged on such a tensor: a cell below registers chapter
# 01's kernels of these operators for the `CUDA` key too (`VIEWS`). What touches
# values through NumPy does not: `t.numpy()` on a device tensor is torch's
# `TypeError`, and every operation must go through the dispatcher to a kernel
# of that device.
#
# The cells also give `t.device` (a `Device` now: for CPU tensors through
# chapter 01's hook `register_device("cpu", CPU)`), `t.to_torch()` (a torch view
# of the same memory, on the same torch device), `torch_device(device)` (where a
# picotorch device's memory lives, for torch) and `empty_on(shape, dtype,
# device)`.
#
# First, the device names: `"cuda"` and `"emu"` join chapter 03's list, and
# `torch_device(device)` says where a device's memory lives for torch. On a
# machine without a GPU, `torch_device(Device("cuda"))` raises
# `RuntimeError(NO_GPU)`.

# %% reference=true
try:
    CPU = Device("cpu")
except NotImplementedError:  # exercise 1 is not written yet: every device waits for it
    CPU = None
NO_GPU = ("picotorch has no device 'cuda' here: torch sees no CUDA GPU with cupy (torch.cuda.is_available() is "
          f"{torch.cuda.is_available()}). Your CUDA kernels still run, on the emulator: use the device 'emu' (memory "
          "on the CPU, every operation through the CUDA backend), e.g. x.to('emu').")
for _name in ("cuda", "emu"):  # chapter 03's .to() checks device names against this list
    if _name not in DEVICES:
        DEVICES.append(_name)


def torch_device(device) -> torch.device:
    """Where the memory of a picotorch device lives, as a torch device: cuda:i on a GPU, the CPU for cpu and emu."""
    device = Device(device)
    if device.type == "cuda":
        if not gpu_available():
            raise RuntimeError(NO_GPU)
        return torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
    return torch.device("cpu")

# %% [markdown]
# Then the storage of a device tensor: `DeviceStorage`, a flat buffer whose
# memory a 1-D torch tensor owns. It carries the key set its tensors bring to
# every call (your `device_keys` of exercise 2, next), and refuses NumPy.

# %% reference=true
class DeviceStorage:
    """A flat, typed buffer on a device, in memory owned by `owner`: a 1-D torch tensor on that device."""

    def __init__(self, owner: torch.Tensor, device: Device):
        if owner.dim() != 1 or not owner.is_contiguous():
            raise ValueError("a device storage is a flat (1-D, contiguous) torch tensor")
        self.owner = owner
        self.dtype = DTYPE_OF_TORCH[owner.dtype]
        self.device = device
        # The key set its tensors bring to every call (chapter 01's dispatch reads it): exercise 2's device_keys.
        self.dispatch_keys = device_keys(device)

    def __len__(self) -> int:
        return self.owner.numel()

    def element_size(self) -> int:
        return self.dtype.itemsize

    def nbytes(self) -> int:
        return len(self) * self.element_size()

    @property
    def data(self):
        raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the "
                        "tensor to host memory first.")

    def __repr__(self):
        return f"DeviceStorage({len(self)} x {self.dtype.name} on {self.device})"

# %% [markdown]
# Making device tensors: `wrap_torch(t, device)` puts a picotorch tensor over
# the memory of a torch tensor, with its layout; `empty_on(shape, dtype,
# device)` makes a new one.

# %% reference=true
def wrap_torch(t: torch.Tensor, device) -> Tensor:
    """A picotorch tensor over the memory of the torch tensor t (same shape, strides, offset), on `device`.
    A GPU is named by its index, as torch names the device of a tensor: "cuda" becomes "cuda:0"."""
    device = Device(device)
    if device.type == "cpu":
        return from_torch(t)
    if device.type == "cuda":
        device = Device("cuda", t.device.index)
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = t.detach().as_strided((n,), (1,), 0)
    return Tensor(DeviceStorage(flat, device), tuple(t.shape), t.stride(), t.storage_offset())


def empty_on(shape, dtype, device) -> Tensor:
    """A new contiguous tensor of `shape` and `dtype` on `device`, its values undefined."""
    shape = tuple(shape)
    owner = torch.empty(math.prod(shape), dtype=TORCH_DTYPE[dtype], device=torch_device(device))
    return wrap_torch(owner.view(shape), device)


if CPU is not None:
    register_device("cpu", CPU)  # chapter 01's storages are on the CPU device, now a Device (chapter 01's hook)

# %% [markdown]
# Last, what works on a device at once: the views (`VIEWS`), whose CPU
# kernels only compute a layout and are registered for the `CUDA` key too;
# `t.is_cuda`, `t.cpu()` and `t.cuda()`; and `.to()`'s arguments, which may now
# name a `Device`.

# %% reference=true
VIEWS = ("view", "reshape", "transpose", "permute", "unsqueeze", "squeeze", "expand", "getitem", "narrow",
         "as_strided", "flatten", "broadcast_to")


def cpu_kernel(op: str):
    """Chapter 01's (or 02's) kernel of `op` for the CPU key, from the dispatcher's table."""
    return OPS[op].kernels[DispatchKey.CPU.priority]


for _op in VIEWS:  # a view only computes a new layout: the same code for every backend
    register_kernel(_op, DispatchKey.CUDA)(cpu_kernel(_op))


@add_methods(Tensor)
class OnDevices:
    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self, device=None) -> "Tensor":
        index = device if device is None or isinstance(device, int) else Device(device).index
        return self.to(str(Device("cuda", index)))


def parse_to(*args, **kwargs) -> tuple:
    """Chapter 03's parse_to, which also takes a picotorch Device: (device name or None, dtype or None)."""
    args = tuple(str(a) if isinstance(a, Device) else a for a in args)
    if isinstance(kwargs.get("device"), Device):
        kwargs["device"] = str(kwargs["device"])
    return _ch03_parse_to(*args, **kwargs)


# %% [markdown]
# ## Exercise 2 — the `CUDA` key: a call's keys from its tensors' devices
#
# Chapter 01's dispatcher already chooses a kernel per call: the call's **key
# set** is the keys its tensors bring (each storage's `dispatch_keys`), plus
# the thread's; the highest key with a kernel runs. A device needs nothing
# more than that. A tensor on a device brings the key `CUDA`, and each
# operator's row in chapter 01's table gets a kernel for `CUDA`, which
# launches CUDA C:
#
# ```
# z = x + y            x, y on "emu", x requires grad
#   key set {Autograd, CUDA}
#   Autograd           chapter 02's Add.apply: records the node, redispatches below itself
#   CUDA               the CUDA kernel of "add": the device check, then your kernel (exercise 8)
# ```
#
# Write:
#
# - `device_keys(device)`: the key set (a bit mask, `key.bit`) that a storage
#   on `device` (a `Device` or a string) gives its tensors: `{CPU}` on
#   `"cpu"`, `{CUDA}` on `"cuda"` **and on `"emu"`** (the emulator runs the
#   CUDA backend's kernels; that is the whole point of it). The given
#   `DeviceStorage` takes its `dispatch_keys` from it.
# - `common_device(*args)`: the device a call computes on: the one device of
#   its **tensor** arguments (numbers, dims, names do not count), `CPU` when
#   there is none. Tensors on two devices are torch's `RuntimeError`:
#   `"Expected all tensors to be on the same device, but found at least two
#   devices, emu and cpu!"`. One exception, as in torch: a **CPU scalar** (a
#   0-dim tensor on the CPU) may join tensors on a device; a kernel reads it as
#   a number (`x.cuda() * torch.tensor(2.0)` works in torch). A 0-dim tensor on
#   a device is no exception.
# - `register_cuda_kernel(op)`: a decorator that registers, for
#   `DispatchKey.CUDA` in chapter 01's dispatcher (`register_kernel(op,
#   DispatchKey.CUDA)`), a kernel that first checks the devices
#   (`common_device(*args)`) and then calls the decorated function with all the
#   arguments; it returns the function unchanged.
#
# Why the check sits in the CUDA kernel: `x_cpu + x_emu` has the key set
# `{CUDA, CPU}`, so the CUDA kernel runs, and its check refuses the call.
# Torch does the same: the code generated from `native_functions.yaml`
# (`RegisterCUDA.cpp`, in the build tree) registers a small wrapper per CUDA
# kernel that checks the devices (`check_and_update_common_device`) before the
# kernel runs; the elementwise kernels let CPU scalars through instead
# (`TensorIterator`). An operator marked `device_check: NoCheck`, such as
# `copy_`, has no such check: copying between devices is its job.
#
# **Where torch differs.** Torch's tensors carry more keys:
# `torch._C._dispatch_keys(torch.ones(2))` is `DispatchKeySet(CPU,
# ADInplaceOrView, AutogradCPU, AutocastCPU)`. Its autograd key is per backend
# (`AutogradCPU`, `AutogradCUDA`) and on every tensor, whether it requires grad
# or not; picotorch's one `Autograd` key comes only with a tensor that requires
# grad (chapter 02).
#
# Real PyTorch: [`c10/core/DispatchKeySet.h`](https://github.com/pytorch/pytorch/blob/main/c10/core/DispatchKeySet.h)
# (a tensor's keys), [`aten/src/ATen/core/dispatch/Dispatcher.h`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/core/dispatch/Dispatcher.h),
# [`aten/src/ATen/core/op_registration/adaption.h`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/core/op_registration/adaption.h)
# (the device check), and [`native_functions.yaml`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/native_functions.yaml),
# from which `RegisterCUDA.cpp` is generated.

# %% solution="ex_dispatch" reference=true
def device_keys(device) -> int:
    """The key set that a storage on `device` gives its tensors."""
    ### BEGIN SOLUTION
    kind = Device(device).type
    return DispatchKey.CPU.bit if kind == "cpu" else DispatchKey.CUDA.bit  # "cuda", and "emu": the CUDA kernels
    ### END SOLUTION


def common_device(*args) -> Device:
    """The one device of the tensor arguments, where a CPU scalar beside tensors on a device does not count; CPU
    when there is no tensor."""
    ### BEGIN SOLUTION
    found = None
    for a in args:
        if isinstance(a, Tensor):
            d = a.device
            if d == CPU and a.dim() == 0:
                continue  # a CPU scalar: read as a number by any device's kernel
            if found is None:
                found = d
            elif d != found:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                                   f"{found} and {d}!")
    return CPU if found is None else found
    ### END SOLUTION


def register_cuda_kernel(op: str):
    """Decorator: the function, after the device check, is `op`'s kernel for the CUDA key."""
    ### BEGIN SOLUTION
    def put(kernel):
        def checked(*args, **kwargs):
            common_device(*args)
            return kernel(*args, **kwargs)
        register_kernel(op, DispatchKey.CUDA)(checked)
        return kernel
    return put
    ### END SOLUTION


# %% tests="ex_dispatch" points=3
import itertools

GPU = gpu_available()
DEVICE_CHOICES = ["cpu", "emu", "emu:0"] + (["cuda:0"] if GPU else [])  # "emu" and "emu:0" differ, as in torch


def tensor_on(device: str, values=(1.0, 2.0)) -> Tensor:
    """A picotorch tensor on `device` (a real one: "emu" memory is CPU memory; "cuda" only with a GPU); a 0-dim
    one for a single number."""
    t = torch.tensor(values)
    if device.startswith("cuda"):
        t = t.to(device)
    if device == "cpu":
        return from_torch(t)
    return Tensor(DeviceStorage(t.reshape(-1), Device(device)), tuple(t.shape), t.stride(), 0)


class KernelFailure:
    """`with launching(what):` turns an error of a kernel (it does not compile, a bad argument, an access out of
    bounds, a data race) and an op with no kernel into a failed test that names what was run."""

    def __init__(self, what):
        self.what = what

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        # (A NotImplementedError without a message is an exercise not written yet: it stays what it is.)
        if isinstance(error, CudaError) or isinstance(error, NotImplementedError) and str(error):
            raise AssertionError(f"{self.what}: {type(error).__name__}: {error}") from None
        return False


launching = KernelFailure
SCRATCH_OPS = itertools.count()  # fresh operators: a replayed input registers its own


def scratch_op(kernel) -> str:
    """A fresh operator whose CUDA kernel is `kernel`, registered with your register_cuda_kernel."""
    op = f"scratch_op_{next(SCRATCH_OPS)}"
    returned = register_cuda_kernel(op)(kernel)
    assert returned is kernel, f"register_cuda_kernel({op!r})(kernel) must return the kernel itself, unchanged"
    return op


def torch_twin(t: Tensor) -> torch.Tensor:
    """t's stand-in in torch, for its device rules: a CPU tensor stays one, a tensor of another device is on torch's
    "meta" device (a device that is not the CPU, on every machine)."""
    return t.to_torch() if t.device == CPU else torch.empty(t.shape, device="meta")


def torch_device_rule(tensors):
    """What torch says of a call with tensors on these devices: ("ok", index of the tensor whose device it
    computes on, or None for the CPU) or ("error", None). The elementwise add (addcmul for three) is the call."""
    twins = [torch_twin(t) for t in tensors]
    call = {1: torch.neg, 2: torch.add, 3: torch.addcmul}[len(twins)]
    metas = [i for i, t in enumerate(tensors) if t.device != CPU]
    if len({str(tensors[i].device) for i in metas}) > 1:
        return "error", None  # two devices that are not the CPU: torch has one "meta" to stand for both
    try:
        out = call(*twins)
    except RuntimeError:
        return "error", None
    return "ok", (metas[0] if out.device.type == "meta" else None)


def expect_common_device(args, what):
    """common_device(*args) against torch's rule for the same devices and dims, and the same call through
    chapter 01's dispatch to a CUDA kernel registered by register_cuda_kernel."""
    tensors = [a for a in args if isinstance(a, Tensor)]
    outcome, index = torch_device_rule(tensors) if tensors else ("ok", None)
    calls = []
    op = scratch_op(lambda *a, **k: calls.append((a, k)) or "the kernel's result")
    try:
        if outcome == "error":
            compare.assert_raises(RuntimeError, common_device, f"common_device{what} (torch refuses it)", *args)
            if any(t.device != CPU for t in tensors):
                compare.assert_raises(RuntimeError, dispatch, f"dispatch('{op}', {what[1:-1]}) to a CUDA kernel "
                                                              "registered by register_cuda_kernel (torch refuses it)",
                                      op, *args, keepdim=True)
            return
        want = CPU if index is None else tensors[index].device
        got = call_yours(f"common_device{what} (torch computes on {want})", common_device, *args)
        compare.assert_equal(got, want, f"common_device{what}")
        if want != CPU:
            with launching(f"dispatch('{op}', {what[1:-1]})"):
                result = dispatch(op, *args, keepdim=True)
            compare.assert_equal(result, "the kernel's result", f"dispatch('{op}', {what[1:-1]}): what it returns "
                                                                "(the result of the kernel you registered)")
            same = len(calls) == 1 and len(calls[0][0]) == len(args) and all(a is b for a, b in zip(calls[0][0], args))
            assert same and calls[0][1] == {"keepdim": True}, \
                (f"dispatch('{op}', {what[1:-1]}, keepdim=True) must call your kernel once with every argument, "
                 f"keepdim=True included: it was called {len(calls)} time(s)"
                 + (f", with {len(calls[0][0])} positional argument(s) and keywords {calls[0][1]}" if calls else ""))
    finally:
        OPS.pop(op, None)


def kernels_run(op: str, call):
    """(call()'s result, the keys whose kernel of `op` ran, in order): each kernel of the operator's row is
    wrapped, for this call only, to say its key when it runs."""
    entry = OPS[op]
    saved, walk = dict(entry.kernels), []

    def traced(priority, kernel):
        def run(*args, **kwargs):
            walk.append(DispatchKey.of(priority).name)
            return kernel(*args, **kwargs)
        return run

    try:
        entry.kernels.update({p: traced(p, k) for p, k in saved.items()})
        entry.table.clear()
        result = call()
    finally:
        entry.kernels.clear()
        entry.kernels.update(saved)
        entry.table.clear()
    return result, walk


for device, want in [("cpu", ["CPU"]), ("emu", ["CUDA"]), ("emu:0", ["CUDA"]), ("cuda", ["CUDA"]),
                     ("cuda:1", ["CUDA"])]:
    compare.assert_equal(key_names(device_keys(device)), want, f"key_names(device_keys({device!r}))")
    compare.assert_equal(key_names(device_keys(Device(device))), want, f"key_names(device_keys(Device({device!r})))")
x_cpu, x_emu, s_cpu, s_emu = tensor_on("cpu"), tensor_on("emu"), tensor_on("cpu", 2.0), tensor_on("emu", 2.0)
compare.assert_equal(key_names(key_set(x_emu)), ["CUDA"], "key_names(key_set(an emu tensor))")
compare.assert_equal(key_names(key_set(x_cpu, x_emu)), ["CUDA", "CPU"],
                     "key_names(key_set(a CPU tensor, an emu tensor))")
compare.assert_equal(common_device(3, "add", None), CPU, "common_device(3, 'add', None): no tensor at all")
compare.assert_equal(common_device(3, x_emu, None), Device("emu"), "common_device(3, an emu tensor, None)")
for args, what in [((x_emu, x_emu), "(an emu tensor, an emu tensor)"), ((x_cpu, 2.0), "(a CPU tensor, 2.0)"),
                   ((x_cpu, x_emu), "(a CPU tensor, an emu tensor)"), ((x_emu, x_cpu), "(an emu tensor, a CPU tensor)"),
                   ((x_emu, s_cpu), "(an emu tensor, a CPU scalar)"), ((s_cpu, x_emu), "(a CPU scalar, an emu tensor)"),
                   ((s_emu, x_cpu), "(an emu scalar, a CPU tensor)"), ((s_cpu, s_emu), "(a CPU scalar, an emu scalar)"),
                   ((x_cpu, s_cpu, x_emu), "(a CPU tensor, a CPU scalar, an emu tensor)"),
                   ((x_emu, tensor_on("emu:0")), "(an emu tensor, an emu:0 tensor)")]:
    expect_common_device(args, what)
try:
    common_device(x_emu, x_cpu)
except RuntimeError as e:
    assert "same device" in str(e) and "emu" in str(e) and "cpu" in str(e), \
        f"the message must be torch's, naming both devices: 'Expected all tensors to be on the same device, but " \
        f"found at least two devices, emu and cpu!'; it says: {e}"
# One call's path: x.unsqueeze(0) of an emu tensor that requires grad walks Autograd, then CUDA.
x = tensor_on("emu").requires_grad_()
_, walk = kernels_run("unsqueeze", lambda: x.unsqueeze(0))
compare.assert_equal(walk, ["Autograd", "CUDA"], "the kernels that x.unsqueeze(0) of an emu x that requires grad runs")
with no_grad():
    _, walk = kernels_run("unsqueeze", lambda: x.unsqueeze(0))
compare.assert_equal(walk, ["CUDA"], "the kernels that x.unsqueeze(0) runs under no_grad()")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_common_device(draw):
    args = [tensor_on(draw.choice(DEVICE_CHOICES), draw.choice([2.0, (1.0, 2.0)])) for _ in range(draw(1, 3))]
    args += [draw.choice([1.5, 2, "mean", None, (0, 1)]) for _ in range(draw(0, 2))]
    args = [args[i] for i in sorted(range(len(args)), key=lambda i: draw(0, 9))]
    shown = ", ".join(f"a {a.device} {'scalar' if a.dim() == 0 else 'tensor'}" if isinstance(a, Tensor) else repr(a)
                      for a in args)
    expect_common_device(tuple(args), f"({shown})")


for_random_inputs(test_common_device, 60)
for device in DEVICE_CHOICES:
    x = tensor_on(device).requires_grad_()
    _, walk = kernels_run("transpose", lambda: x.transpose(0, 0))
    want = ["Autograd", "CPU" if device == "cpu" else "CUDA"]
    compare.assert_equal(walk, want, f"the kernels that x.transpose(0, 0) of a {device} x that requires grad runs")
calls = []
op = scratch_op(lambda *a: calls.append(a) or "first")
try:
    register_cuda_kernel(op)(lambda *a: "newer")
    compare.assert_equal(dispatch(op, tensor_on("emu")), "newer", "dispatch after registering a second CUDA kernel "
                                                                 "for the same operator: the newer one")
    compare.assert_equal(DispatchKey.CPU.priority in OPS[op].kernels, False,
                         "register_cuda_kernel registers for the CUDA key only (a CPU kernel appeared)")
    compare.assert_raises(NotImplementedError, dispatch, f"dispatch('{op}', a CPU tensor): no CPU kernel", op,
                          tensor_on("cpu"))
finally:
    OPS.pop(op, None)
### END HIDDEN TESTS

# %% [markdown]
# The next two cells register, with your `register_cuda_kernel`, the `CUDA`
# kernels of the operators that must know about devices. First those that
# read a device tensor: `to_torch` (the torch view of a device tensor),
# `item`, `tolist` and `repr` (which now names the device).

# %% reference=true
@register_cuda_kernel("to_torch")
def _to_torch_cuda(t: Tensor) -> torch.Tensor:
    """A torch.Tensor over the same memory, with the same shape, strides and offset (on the same torch device)."""
    return t._storage.owner.as_strided(t._shape, t._stride, t._offset)


# t.numpy() under a mode: the CPU bridge, whose `_storage.data` is torch's TypeError for a device tensor.
register_cuda_kernel("numpy")(numpy_array)


@register_cuda_kernel("item")
def _item_cuda(t: Tensor):
    if t.numel() != 1:
        raise RuntimeError(f"a Tensor with {t.numel()} elements cannot be converted to Scalar")
    return t.to_torch().item()  # on a GPU this waits for the kernels that compute it


@register_cuda_kernel("tolist")
def _tolist_cuda(t: Tensor):
    return t.to_torch().tolist()


@register_cuda_kernel("repr")
def _repr_cuda(t: Tensor) -> str:
    return tensor_repr(t, t.to_torch().cpu().numpy())


def _device_field(t: Tensor) -> str:
    return f", device='{t.device}'" if isinstance(t._storage, DeviceStorage) else ""


REPR_FIELDS[:] = [_device_field] + [f for f in REPR_FIELDS if getattr(f, "__name__", "") != "_device_field"]

# %% [markdown]
# Then those that write one: `ones_like` (the engine's first gradient, made on
# the right device), `zeros_like` (chapter 04's optimizer state), chapter 03's `write`, and `copy_`, registered directly (no
# device check: like torch's `copy_`, it copies between devices, computing on
# the CPU and copying over when the source is there).

# %% reference=true
@register_kernel("full_like", DispatchKey.CPU)
def _full_like_cpu(t: Tensor, value) -> Tensor:
    return Tensor(Storage(np.full(t.numel(), value, t.dtype.numpy)), t.shape, contiguous_strides(t.shape), 0)


@register_cuda_kernel("ones_like")
def _ones_like_cuda(t: Tensor) -> Tensor:  # the engine's first gradient, of a scalar on a device
    return dispatch("full_like", t, 1)


@register_cuda_kernel("zeros_like")
def _zeros_like_cuda(t: Tensor) -> Tensor:  # chapter 04's optimizers' state, where the parameter is
    return dispatch("full_like", t, 0)


@register_cuda_kernel("write")
def _write_cuda(t: Tensor, values) -> None:
    if isinstance(values, (bool, int, float)):
        dispatch("setitem", t, (), values)
    else:  # computed on the CPU (random numbers, another tensor's values): copied over
        source = torch.as_tensor(np.asarray(values, dtype=t.dtype.numpy)).expand(t.shape)
        t.to_torch().copy_(source)


@register_kernel("copy_", DispatchKey.CUDA)  # no device check: copying across devices is what copy_ is for
def _copy_cuda(t: Tensor, src) -> Tensor:
    if isinstance(src, Tensor) and src.device != t.device:
        src = move(src, t.device)  # across devices: a transfer first
    if not isinstance(t._storage, DeviceStorage):
        return cpu_kernel("copy_")(t, src)
    if GradMode.enabled and t.requires_grad:
        raise RuntimeError("copy_() on a tensor that requires grad: picotorch's autograd does not record "
                           "in-place operations; do it inside no_grad()")
    if isinstance(src, torch.Tensor):
        src = wrap_torch(src.detach().to(torch_device(t.device)), t.device)
    if not isinstance(src, Tensor):  # numbers, NumPy arrays: computed on the CPU, copied over
        return t._write(src if isinstance(src, (bool, int, float)) else np.asarray(src), "copy_()")
    dispatch("setitem", t, (), src)
    return t


# %% [markdown]
# ## Exercise 3 — `Tensor.to(device)`
#
# Moving a tensor to another device is a **copy between memories**: from the
# CPU's to a GPU's over PCIe, or back. Torch does it with `cudaMemcpy` (when the
# layout allows) and a copy kernel. `x.to(...)` is two operators in torch:
# `to` reads the arguments and returns `x` itself when nothing changes; else it
# calls `_to_copy(x, dtype, device)`, the copy, which autograd records.
# Chapter 03 made `"_to_copy"(x, dtype, device)` convert; its Autograd kernel
# (`ToCopy`) already sends the gradient back converted to `x`'s dtype **and
# moved to `x`'s device**, by the same operator. Write:
#
# - `move(t, device)`: a new **contiguous** tensor on `device` with `t`'s
#   values, shape and dtype. `t` may be on any device, in any layout (a
#   transposed, sliced or expanded view). Let torch do the copy: `t.to_torch()`
#   is a torch view of `t`'s memory; allocate the destination with
#   `torch.empty(..., device=torch_device(device))` and `copy_` into it —
#   `torch.Tensor.copy_` copies across devices and layouts — then wrap it with
#   `wrap_torch(dest, device)`. (On `"emu"` the memory is the CPU's; the copy is
#   still a copy: the new tensor shares nothing with `t`.)
# - `to_copy(x, dtype=None, device=None)`, the kernel of `"_to_copy"` for both
#   keys, `CPU` and `CUDA` (`None`: `x`'s own): always a new tensor. A dtype
#   change converts with `dispatch("cast", t, dtype)`, the `"cast"` kernel of
#   `t`'s device; a device change is your `move`. When both change, convert
#   on the CPU if either end is the CPU — first when `x` is on the CPU, last
#   otherwise — and on the device when both ends are devices. (Your kernels
#   will do the conversion on a device from exercise 7 on; until then only the
#   CPU has a `"cast"` kernel.)
# - `Tensor.to(*args, **kwargs)`: your `to` is registered (for `CPU` and
#   `CUDA`) in place of chapter 03's CPU kernel of `"to"`; the arguments are
#   read by chapter 03's `parse_to` (`to("emu")`, `to(float64)`,
#   `to("cuda", float64)`, `to(device=..., dtype=...)`, `to(other_tensor)`).
#   It returns the tensor **itself** when neither the device nor the dtype
#   changes (as in torch: `x.to("cpu") is x` for a CPU tensor,
#   `x.to(x.dtype) is x`), else `dispatch("_to_copy", self, dtype, device)`.
#
# The given `cpu()` and `cuda()` call `to`. Without a GPU, `to("cuda")` fails in
# `torch_device` with `NO_GPU`, which says what to use instead.
#
# Real PyTorch: `to` and `_to_copy` in [`aten/src/ATen/native/TensorConversions.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/TensorConversions.cpp).

# %% solution="ex_to" reference=true
def move(t: Tensor, device) -> Tensor:
    """A contiguous copy of t's values in memory on `device`."""
    ### BEGIN SOLUTION
    source = t.to_torch()
    dest = torch.empty(tuple(t.shape), dtype=source.dtype, device=torch_device(device))
    dest.copy_(source)
    return wrap_torch(dest, device)
    ### END SOLUTION


def to_copy(x: Tensor, dtype=None, device=None) -> Tensor:
    """A new tensor with x's values converted to `dtype` and on `device` (None: x's own)."""
    ### BEGIN SOLUTION
    dtype = x.dtype if dtype is None else dtype
    device = x.device if device is None else Device(device)
    out = x
    if dtype is not out.dtype and out.device == CPU:
        out = dispatch("cast", out, dtype)
    if device != out.device:
        out = move(out, device)
    if dtype is not out.dtype:
        out = dispatch("cast", out, dtype)
    return move(x, device) if out is x else out  # nothing changed: still a copy, as torch's _to_copy
    ### END SOLUTION


register_kernel("_to_copy", DispatchKey.CPU, DispatchKey.CUDA)(to_copy)


@register_kernels(DispatchKey.CPU, DispatchKey.CUDA)
class To:
    def to(self, *args, **kwargs) -> "Tensor":
        ### BEGIN SOLUTION
        device, dtype = parse_to(*args, **kwargs)
        device = self.device if device is None else Device(device)
        where = torch_device(device)  # no GPU: the error that says so, before anything happens
        if device.type == "cuda":
            device = Device(where)  # "cuda" is the current GPU, as in torch: x.to("cuda") of x there is x
        if device == self.device and (dtype is None or dtype is self.dtype):
            return self
        return dispatch("_to_copy", self, dtype, device)
        ### END SOLUTION


# %% tests="ex_to" points=2
DEVICE = "cuda" if GPU else "emu"                 # the device of this chapter's picotorch tests
print(f"picotorch tests run on '{DEVICE}'" + ("" if GPU else " (no GPU here: the CUDA backend runs on the emulator)"))


def on_device(t: torch.Tensor, device=DEVICE) -> Tensor:
    """A picotorch tensor on `device` with t's values and t's exact layout (over a copy of t's memory)."""
    copy = same_layout_copy(t.to(torch_device(device)))
    return wrap_torch(copy, device)


def device_text(device) -> str:
    """How a tensor made on `device` names its device: "cuda" is "cuda:0" (the current GPU), as in torch."""
    d = Device(device)
    return str(torch_device(d)) if d.type == "cuda" else str(d)


def expect_moved(got, t: torch.Tensor, device, what):
    assert isinstance(got, Tensor), f"{what} returned {type(got).__name__}, not a picotorch Tensor"
    compare.assert_equal(str(got.device), device_text(device), f"{what}.device")
    compare.assert_equal(got.is_contiguous(), True, f"{what}.is_contiguous()")
    expected = t.detach().to(torch_device(device))
    compare.assert_matches(got, expected, what)


x = torch.tensor([[1.0, -2.0, 3.0], [0.5, 4.0, -1.5]])
for source, target in [("cpu", "emu"), ("emu", "cpu"), ("emu", "emu"), ("cpu", "cpu")]:
    for layout, view in [("", lambda t: t), (".T", lambda t: t.T), ("[:, ::2]", lambda t: t[:, ::2])]:
        t = on_device(x, source)
        src = view(t)
        with launching(f"move(x{layout} on {source}, '{target}')"):
            got = move(src, target)
        expect_moved(got, view(x), target, f"move(x{layout} on {source}, '{target}')")
        assert got.to_torch().data_ptr() != src.to_torch().data_ptr(), \
            f"move(x{layout} on {source}, '{target}') shares memory with x: it must copy"
xe = from_torch(x.clone()).to("emu")
expect_moved(xe, x, "emu", "x.to('emu')")
expect_moved(xe.to("cpu"), x, "cpu", "x.to('emu').to('cpu')")
assert xe.to("emu") is xe and xe.to(device="emu", dtype=float32) is xe, "x.to(its own device and dtype) must be x itself"
xc = from_torch(x.clone())
for what, got, own in [("x.to(float32) of a float32 x on the CPU", xc.to(float32), xc),
                       ("x.to(x) of x on the CPU", xc.to(xc), xc), ("x.to(x.device) of x on the CPU", xc.to(xc.device), xc),
                       ("x.to(float32) of a float32 x on emu", xe.to(float32), xe), ("x.to(x) of x on emu", xe.to(xe), xe)]:
    assert got is own, f"{what} must return x itself, as torch's x.to(x.dtype) is x; it returned a copy"
expect_moved(xe.to("cpu", float64), x.double(), "cpu", "x.to('emu').to('cpu', float64)")
for t, place in [(xc, "the CPU"), (xe, "emu")]:
    copied = dispatch("_to_copy", t, None, None)
    assert copied is not t and copied.to_torch().data_ptr() != t.to_torch().data_ptr(), \
        f"_to_copy(x) of x on {place} must be a new tensor, as torch's aten._to_copy(x) is; it returned x's memory"
    compare.assert_matches(copied, torch.ops.aten._to_copy(t.to_torch()), f"_to_copy(x) of x on {place}")
with launching("x.to('emu', torch.float64) of a float32 x on the CPU (convert on the CPU, then move)"):
    converted = from_torch(x.clone()).to("emu", torch.float64)
expect_moved(converted, x.double(), "emu", "x.to('emu', torch.float64)")
if not GPU:
    compare.assert_raises(RuntimeError, from_torch(x).to, "x.to('cuda') without a GPU", "cuda")
    try:
        from_torch(x).to("cuda")
    except RuntimeError as e:
        assert "emu" in str(e), f"without a GPU, to('cuda') must say what to use instead; it says: {e}"
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_moves(draw):
    t = draw.noncontiguous(draw.randn(draw.shape(ndim=(0, 3), allow_zero=True),
                                      dtype=draw.choice([torch.float32, torch.float64])))
    if draw(0, 3) == 0:
        t = (t * 3).to(draw.choice([torch.int64, torch.bool]))
    source, target = draw.choice(["cpu", DEVICE]), draw.choice(["cpu", DEVICE])
    what = f"move(x, '{target}') where x: {describe(t)} on {source}"
    ours = on_device(t, source)
    expect_moved(move(ours, target), t, target, what)
    if source == target:
        assert ours.to(target) is ours, f"{what.replace('move(x, ', 'x.to(')} must be x itself (nothing changes)"
    else:
        expect_moved(ours.to(target), t, target, what.replace("move(x, ", "x.to("))
    if t.is_floating_point() and "cpu" in (source, target):
        other = draw.choice([torch.float32, torch.float64, torch.int64])
        if source == target and other == t.dtype:
            return
        expect_moved(ours.to(target, other), t.to(other), target, f"x.to('{target}', {other}) where x: {describe(t)} on {source}")


for_random_inputs(test_moves, 40)
x = torch.randn(3, 4)
leaf = from_torch(x.clone()).requires_grad_()
y = leaf.to(DEVICE)
assert str(y.device) == device_text(DEVICE) and y.grad_fn is not None, "x.to(device) of a tensor that requires grad must be recorded"
g = torch.randn(3, 4)
y.backward(on_device(g))
compare.assert_matches(leaf.grad, g, f"x.grad after x.to('{DEVICE}').backward(g)")
assert leaf.grad.device == CPU, "the gradient of a CPU leaf must come back to the CPU"
e = from_torch(x.clone()).to(DEVICE)
assert e.to("cpu").to(DEVICE) is not e and e.to(e) is e, "x.to(x) is x itself; a round trip is a new tensor"
if GPU:
    expect_moved(from_torch(x.clone()).cuda(), x, "cuda", "x.cuda()")
    expect_moved(from_torch(x.clone()).to("cuda:0"), x, "cuda:0", "x.to('cuda:0')")
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Kernels, and where they run
#
# A CUDA kernel is a C function that **every thread of a grid** runs at once.
# The threads are grouped in **blocks** (up to 1024 threads each, which can
# share fast on-chip memory and wait for each other), and a launch names how
# many blocks (the **grid**) and how many threads per block (the **block**),
# in up to three dimensions. Inside, each thread finds out who it is:
#
# ```c
# blockIdx.x    // which block, 0 .. gridDim.x - 1
# threadIdx.x   // which thread of its block, 0 .. blockDim.x - 1
# long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;   // which element is mine
# ```
#
# In Python, `Kernel(source, "name")` compiles a kernel, and calling it launches
# it: `kernel(grid, block, args)`, where `args` are torch tensors (a kernel gets
# a pointer to their first element, `data_ptr()`) and NumPy scalars of the
# parameter's exact C type (`np.int64(n)` for a `long long`, `np.float32(v)`
# for a `float`: a Python float would arrive as a double, and the kernel would
# read garbage). Launched on `torch.cuda` tensors it runs on the GPU, on CPU
# tensors on the emulator; a wrong argument, an access past a tensor or a race
# is an error that says where, in your C.
#
# The given cells below have what every kernel exercise uses:
#
# - `cuda_source(text)`: your kernel's text, checked to be written;
# - `Kernels(source)`: a source of **template** kernels, compiled on first use
#   (with the other instantiations the backend will need, in one go):
#   `FILL("fill", "float")` is the `Kernel` of `fill<float>`. Templates are how
#   one C source serves every dtype
#   (torch's kernels do the same, which is one reason `libtorch_cuda.so` is over
#   a gigabyte);
# - `C_TYPES[torch_dtype]` (`"float"`, `"double"`, `"long long"`, `"bool"`) and
#   `scalar(value, torch_dtype)`, the NumPy scalar of that C type;
# - the **operation families** of the elementwise kernels (exercises 6–8):
#   `F::apply(op, a, b)` computes operation number `op` of `a` and `b` (`b` is
#   ignored by unary ops), for `F` one of `Arith` (`+ - * / pow maximum neg abs
#   exp log sqrt relu sigmoid tanh`, result of the inputs' type), `Compare`
#   (`== != < <= > >=`, result `bool`) and `Cast` (`a` itself, converted by the
#   assignment to the output's type). `OPS_SOURCE` is appended after your
#   source (so that its line numbers stay yours); `family(op)` and
#   `OP_CODES[op]` give `F` and `op` for an op name.

# %% [markdown]
# First, the C types a kernel's parameters have (`C_TYPES`, `scalar`) and
# `cuda_source`, which refuses a kernel whose text is not written yet.

# %% reference=true
C_TYPES = {torch.float32: "float", torch.float64: "double", torch.int64: "long long", torch.bool: "bool"}
NUMPY_TYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.int64: np.int64, torch.bool: np.bool_}
MATMULS = {}  # "naive", "tiled", "blocked" -> your matmul launchers, as exercises 11 to 13 define them
MAX_BLOCKS = 1024  # the most blocks a grid-stride kernel of the backend launches: a few waves of an H200's 132 SMs


def scalar(value, dtype: torch.dtype):
    """`value` as the NumPy scalar of the C type that holds `dtype`, as a kernel parameter must be passed."""
    return NUMPY_TYPES[dtype](value)


def cuda_source(text: str) -> str:
    """The CUDA C of an exercise; NotImplementedError while it still holds the lines put in place of the solution.
    (The course's own copy marks its solution with nbgrader's two marker lines: blank lines to C.)"""
    if "raise NotImplementedError()" in text:
        raise NotImplementedError("this kernel is not written yet: replace the lines `# YOUR CODE HERE` and "
                                  "`raise NotImplementedError()` inside it by your CUDA C")
    return "\n".join("" if line.strip() in _MARKERS else line for line in text.split("\n"))


_MARKERS = {f"### {word} SOLUTION" for word in ("BEGIN", "END")}

# %% [markdown]
# The operation families of the elementwise kernels, in two parts. First the
# math they call, one overload per C type: `float` calls `expf`, `double`
# calls `exp`, and the integer power is computed by squaring.

# %% reference=true
_MATH_SOURCE = r"""
// ---- given: the operation families of the elementwise kernels (appended after your source) ----
__device__ inline float op_exp(float a) { return expf(a); }
__device__ inline double op_exp(double a) { return exp(a); }
template <typename T> __device__ inline T op_exp(T a) { return T(exp((double)a)); }
__device__ inline float op_log(float a) { return logf(a); }
__device__ inline double op_log(double a) { return log(a); }
template <typename T> __device__ inline T op_log(T a) { return T(log((double)a)); }
__device__ inline float op_sqrt(float a) { return sqrtf(a); }
__device__ inline double op_sqrt(double a) { return sqrt(a); }
template <typename T> __device__ inline T op_sqrt(T a) { return T(sqrt((double)a)); }
__device__ inline float op_tanh(float a) { return tanhf(a); }
__device__ inline double op_tanh(double a) { return tanh(a); }
template <typename T> __device__ inline T op_tanh(T a) { return T(tanh((double)a)); }
__device__ inline float op_pow(float a, float b) { return powf(a, b); }
__device__ inline double op_pow(double a, double b) { return pow(a, b); }
template <typename T> __device__ inline T op_pow(T a, T b) {  // an integer power, by squaring
  if (b < 0) return a == 1 ? T(1) : (a == -1 ? ((b & 1) ? T(-1) : T(1)) : T(0));
  T result = 1;
  for (; b > 0; b >>= 1, a *= a)
    if (b & 1) result *= a;
  return result;
}
"""

# %% [markdown]
# Then the families themselves, `Arith`, `Compare` and `Cast`, each a
# `switch` on the operation's number; `OP_CODES[op]` gives that number and
# `family(op)` the family of an op name.

# %% reference=true
ARITH = ("add", "sub", "mul", "div", "pow", "maximum", "neg", "abs", "exp", "log", "sqrt", "relu", "sigmoid", "tanh")
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
OP_CODES = {**{op: i for i, op in enumerate(ARITH)}, **{op: i for i, op in enumerate(COMPARE)}, "copy": 0}
OPS_SOURCE = _MATH_SOURCE + r"""
struct Arith {  // add sub mul div pow maximum neg abs exp log sqrt relu sigmoid tanh
  template <typename T> __device__ static T apply(int op, T a, T b) {
    switch (op) {
      case 0: return a + b;
      case 1: return a - b;
      case 2: return a * b;
      case 3: return a / b;
      case 4: return op_pow(a, b);
      case 5: return a != a ? a : (b != b ? b : (a > b ? a : b));
      case 6: return -a;
      case 7: return a < T(0) ? -a : a;
      case 8: return op_exp(a);
      case 9: return op_log(a);
      case 10: return op_sqrt(a);
      case 11: return a < T(0) ? T(0) : a;
      case 12: return T(1) / (T(1) + op_exp(-a));
      default: return op_tanh(a);
    }
  }
};

struct Compare {  // eq ne lt le gt ge
  template <typename T> __device__ static bool apply(int op, T a, T b) {
    switch (op) {
      case 0: return a == b;
      case 1: return a != b;
      case 2: return a < b;
      case 3: return a <= b;
      case 4: return a > b;
      default: return a >= b;
    }
  }
};

struct Cast {  // a itself: the assignment converts it to the output's type
  template <typename T> __device__ static T apply(int, T a, T) { return a; }
};
"""


def family(op: str) -> str:
    """The operation family (a struct of OPS_SOURCE) that computes `op`."""
    return "Arith" if op in ARITH else "Compare" if op in COMPARE else "Cast"

# %% [markdown]
# Last, `Kernels(source)`: your template kernels with the families appended,
# compiled on first use, each instantiation with the others that
# `compiled_together` says the backend will need, in one compilation.

# %% reference=true
ALL_C_TYPES = ("float", "double", "long long", "bool")
FAMILY_TYPES = {  # the (To, From) instantiations of each family that the backend uses
    "Arith": [("float", "float"), ("double", "double"), ("long long", "long long")],
    "Compare": [("bool", "float"), ("bool", "double"), ("bool", "long long")],
    "Cast": [(to, source) for to in ALL_C_TYPES for source in ALL_C_TYPES],
}


def compiled_together(name: str, types: tuple) -> list:
    """The instantiations compiled with name<types>, in one compilation: for the elementwise kernels, every
    one of its family; for the others, every dtype they take."""
    if name.startswith("map_"):
        return [(*pair, types[2]) for pair in FAMILY_TYPES.get(types[2], [])]
    if name == "fill":
        return [(t,) for t in ALL_C_TYPES]
    if types in (("float",), ("double",)):
        return [("float",), ("double",)]
    return []


class Kernels:
    """The kernels of one CUDA C source (with OPS_SOURCE after it), compiled on first use: the instantiation
    asked for with those `compiled_together` lists, in one compilation (a compilation costs about a second on
    the emulator's g++, and not much more for a few instantiations than for one)."""

    def __init__(self, source: str, extra: str = OPS_SOURCE):
        self.source = source + extra
        self._compiled = {}

    def __call__(self, name: str, *types: str) -> Kernel:
        """The Kernel name<types...> (or `name` itself, for a kernel that is not a template)."""
        expression = f"{name}<{', '.join(types)}>" if types else name
        kernel = self._compiled.get(expression)
        if kernel is None:
            group = [expression] + [f"{name}<{', '.join(t)}>" for t in compiled_together(name, types) if t != types]
            module = CudaModule(self.source, group)
            for e in group:
                self._compiled.setdefault(e, module.get_function(e))
            kernel = self._compiled[expression]
        return kernel


# %% [markdown]
# ## Exercise 4 — launch geometry
#
# Before any kernel, the arithmetic of a launch. For `n` elements and `threads`
# threads per block, one element per thread needs ⌈n / threads⌉ blocks. The last
# block is usually **ragged**: some of its threads have no element, and the
# kernel must check (`if (i < n)`) before touching memory. Nothing at all to do
# (`n == 0`) is no launch: a GPU refuses a grid of zero blocks.
#
# ![A launch for n = 10 elements with blockDim.x = 4: ceil(10 / 4) = 3 blocks. Block 0's threads 0 to 3 compute elements 0 to 3, block 1's compute 4 to 7, block 2's threads 0 and 1 compute 8 and 9, and its threads 2 and 3 are idle: their i = 2 * 4 + threadIdx.x is at least n, so the kernel checks if (i < n) before touching memory](figures/launch_grid.svg)
#
# A huge tensor would need a huge grid, and a GPU runs only so many blocks at a
# time anyway, so kernels often launch at most `max_blocks` blocks and let each
# thread do several elements, one grid apart (a **grid-stride loop**, exercise
# 6): thread `i` does `i`, `i + grid_size`, `i + 2 * grid_size`...
#
# Write:
#
# - `launch_1d(n, threads=256, max_blocks=None)`: `((blocks,), (threads,))`
#   with ⌈n / threads⌉ blocks, but no more than `max_blocks` (when given) nor
#   than `2**31 - 1`, the most a grid has in x; `None` for `n == 0`. A `threads`
#   outside 1..1024 (the most a block has) is a `ValueError`.
# - `launch_2d(rows, cols, block=(16, 16))`: the grid for a `rows × cols` output
#   with one thread per element, `x` across the columns and `y` down the rows:
#   `((⌈cols / block[0]⌉, ⌈rows / block[1]⌉), block)`; `None` when there is
#   nothing to compute. A grid has at most 65535 blocks in `y`: more is a
#   `ValueError`.
#
# Compute ceilings with integers, `(n + threads - 1) // threads`: a float
# division rounds `n` above 2**53.

# %% solution="ex_launch" reference=true
def launch_1d(n: int, threads: int = 256, max_blocks: int = None):
    """((blocks,), (threads,)) covering n elements, one per thread (up to max_blocks blocks); None for n == 0."""
    ### BEGIN SOLUTION
    if not 1 <= threads <= 1024:
        raise ValueError(f"a block has 1 to 1024 threads, not {threads}")
    if n == 0:
        return None
    blocks = min((n + threads - 1) // threads, 2**31 - 1)
    if max_blocks is not None:
        blocks = min(blocks, max_blocks)
    return (blocks,), (threads,)
    ### END SOLUTION


def launch_2d(rows: int, cols: int, block=(16, 16)):
    """((blocks in x, blocks in y), block) covering a rows x cols output, one thread per element; None if empty."""
    ### BEGIN SOLUTION
    bx, by = block
    if rows == 0 or cols == 0:
        return None
    grid = ((cols + bx - 1) // bx, (rows + by - 1) // by)
    if grid[1] > 65535:
        raise ValueError(f"{rows} rows need {grid[1]} blocks in y; a grid has at most 65535")
    return grid, tuple(block)
    ### END SOLUTION


# %% tests="ex_launch" points=2
OWNERS = r"""
// Who computes element i: block_of[i], thread_of[i], and how many threads did (count[i]).
extern "C" __global__ void owners_1d(int* block_of, int* thread_of, int* count, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x) {
        block_of[i] = blockIdx.x;
        thread_of[i] = threadIdx.x;
        atomicAdd(&count[i], 1);
    }
}

extern "C" __global__ void owners_2d(int* block_of, int* count, int rows, int cols) {
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows && col < cols) {
        block_of[row * cols + col] = blockIdx.y * gridDim.x + blockIdx.x;
        atomicAdd(&count[row * cols + col], 1);
    }
}
"""
KERNEL_DEVICE = "cuda" if GPU else "cpu"  # where the kernel tests put their torch tensors (cpu: the emulator)


def ceil_div(a, b):
    return -(-a // b)


def expect_1d(n, threads=256, max_blocks=None):
    what = f"launch_1d({n}, threads={threads}, max_blocks={max_blocks})"
    got = launch_1d(n, threads, max_blocks)
    if n == 0:
        assert got is None, f"{what} returned {got!r}; with nothing to do there is no launch (None)"
        return
    blocks = min(ceil_div(n, threads), max_blocks or 2**31 - 1, 2**31 - 1)
    compare.assert_equal(got, ((blocks,), (threads,)), what)


def expect_2d(rows, cols, block=(16, 16)):
    what = f"launch_2d({rows}, {cols}, block={block})"
    got = launch_2d(rows, cols, block)
    if rows == 0 or cols == 0:
        assert got is None, f"{what} returned {got!r}; an empty output needs no launch (None)"
        return
    compare.assert_equal(got, ((ceil_div(cols, block[0]), ceil_div(rows, block[1])), tuple(block)), what)


def expect_every_element_once(n, threads, max_blocks=None):
    """Launch owners_1d with your geometry: every element computed by exactly one thread."""
    geometry = launch_1d(n, threads, max_blocks)
    count = torch.zeros(n, dtype=torch.int32, device=KERNEL_DEVICE)
    block_of, thread_of = torch.full_like(count, -1), torch.full_like(count, -1)
    Kernel(OWNERS, "owners_1d")(*geometry, (block_of, thread_of, count, np.int64(n)))
    twice = int((count != 1).sum())
    assert twice == 0, (f"launch_1d({n}, {threads}, {max_blocks}) = {geometry}: {twice} of the {n} elements were "
                        f"computed by {'no' if int(count.min()) == 0 else 'more than one'} thread")


for n in [1, 255, 256, 257, 1000, 0]:
    expect_1d(n)
expect_1d(10, threads=4)
expect_1d(10**6, threads=128, max_blocks=8)
expect_1d(2**40, threads=1024)
compare.assert_raises(ValueError, launch_1d, "launch_1d(10, threads=2048)", 10, 2048)
for rows, cols in [(1, 1), (16, 16), (17, 33), (5, 0), (100, 3)]:
    expect_2d(rows, cols)
expect_2d(40, 30, (32, 8))
compare.assert_raises(ValueError, launch_2d, "launch_2d(2**21, 4) (more than 65535 blocks in y)", 2**21, 4)
expect_every_element_once(1000, 128)
expect_every_element_once(1000, 64, max_blocks=3)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_launch_1d(draw):
    threads = draw.choice([1, 32, 64, 100, 128, 256, 512, 1024])
    n = draw.choice([0, 1, threads - 1, threads, threads + 1, draw(1, 10**6), draw(1, 2**45),
                     (2**31 - 1) * threads + draw(1, 5000)])
    expect_1d(max(n, 0), threads, draw.choice([None, None, 1, 7, 1024]))


def test_launch_2d(draw):
    block = draw.choice([(16, 16), (32, 8), (8, 8), (32, 32), (1, 1), (64, 4)])
    expect_2d(draw.choice([0, 1, draw(1, 500), 65535 * block[1]]), draw.choice([0, 1, draw(1, 5000)]), block)


def test_every_element_once(draw):
    threads = draw.choice([32, 64, 128])
    expect_every_element_once(draw(1, 700), threads, draw.choice([None, 2, 5]))


for_random_inputs(test_launch_1d, 200)
for bad in [0, -5, 1025, 4096]:
    compare.assert_raises(ValueError, launch_1d, f"launch_1d(100, threads={bad})", 100, bad)
for_random_inputs(test_launch_2d, 100)
for_random_inputs(test_every_element_once, 3)
rows, cols = inputs.randint(1, 40), inputs.randint(1, 40)
geometry = launch_2d(rows, cols, (8, 8))
count = torch.zeros(rows * cols, dtype=torch.int32, device=KERNEL_DEVICE)
Kernel(OWNERS, "owners_2d")(*geometry, (torch.full_like(count, -1), count, np.int32(rows), np.int32(cols)))
assert bool((count == 1).all()), f"launch_2d({rows}, {cols}, (8, 8)) = {geometry} leaves elements out"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5 — `fill`: your first kernel
#
# `fill<T>(out, value, n)` writes `value` into the `n` elements of the
# contiguous `out`, one element per thread. Write its body — which element is
# this thread's, and the bound check for the ragged last block — and
# `launch_fill(out, value)`, which launches it on a torch tensor: with
# `launch_1d`, no launch for an empty tensor, the kernel of `out`'s C type
# (`FILL("fill", C_TYPES[out.dtype])`), and every argument of the exact type of
# its parameter (`scalar(value, out.dtype)`, `np.int64(n)`).
#
# The tests fill tensors that hold poison (NaN) and check that no element still
# does; they also read the memory around the tensor, which must not change. On
# the emulator an access just past a tensor stops the launch with the line that
# made it.
#
# The given code after your function registers it: on a device, `ones`,
# `backward()`'s starting gradient and friends call it.

# %% solution="ex_fill" reference=true
FILL = Kernels(cuda_source(r"""
template <typename T>
__global__ void fill(T* out, T value, long long n) {
    ### BEGIN SOLUTION
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;  // this thread's element
    if (i < n)
        out[i] = value;
    ### END SOLUTION
}
"""))


def launch_fill(out: torch.Tensor, value) -> None:
    """Every element of the contiguous tensor `out` (on a GPU, or the CPU: the emulator) = value."""
    ### BEGIN SOLUTION
    geometry = launch_1d(out.numel())
    if geometry is not None:
        FILL("fill", C_TYPES[out.dtype])(*geometry, (out, scalar(value, out.dtype), np.int64(out.numel())))
    ### END SOLUTION


@register_cuda_kernel("full_like")
def full_like_cuda(t: Tensor, value) -> Tensor:
    out = empty_on(t.shape, t.dtype, t.device)
    launch_fill(out.to_torch(), value)
    return out


# %% tests="ex_fill" points=2
def poisoned(shape, dtype=torch.float32, device=KERNEL_DEVICE, margin=0):
    """(out, whole): `out` of `shape`, full of poison, inside `whole`, a buffer with `margin` poisoned elements
    on each side, so that a test sees both unwritten elements and writes outside the tensor."""
    n = math.prod(shape)
    if dtype == torch.bool:  # a bool has no poison value: bytes 0xAB, which a kernel that writes turns to 0 or 1
        whole = torch.full((n + 2 * margin,), 0xAB, dtype=torch.uint8, device=device)
        return whole[margin:margin + n].view(torch.bool).view(shape), whole
    if dtype in POISON_BITS:  # a NaN with a payload of its own: a kernel's 0 / 0 is another NaN
        bits_type, bits = POISON_BITS[dtype]
        whole = torch.full((n + 2 * margin,), bits, dtype=bits_type, device=device).view(dtype)
    else:
        whole = torch.full((n + 2 * margin,), float("nan") if dtype.is_floating_point else -77777, dtype=dtype,
                           device=device)
    return whole[margin:margin + n].view(shape), whole


POISON_BITS = {torch.float32: (torch.int32, 0x7FD1CE05), torch.float64: (torch.int64, 0x7FFADE0000000005)}


def unwritten(out: torch.Tensor) -> torch.Tensor:
    """Where `out` still holds poison."""
    if out.dtype in (torch.bool, torch.uint8):
        return out.view(torch.uint8) == 0xAB
    if out.dtype in POISON_BITS:
        return out.view(POISON_BITS[out.dtype][0]) == POISON_BITS[out.dtype][1]
    return torch.isnan(out) if out.dtype.is_floating_point else out == -77777


def expect_written(out: torch.Tensor, expected: torch.Tensor, what: str, **tolerance):
    poison_expected = torch.zeros_like(expected, dtype=torch.bool) if expected.dtype == torch.bool else unwritten(expected)
    missed = unwritten(out) & ~poison_expected
    if bool(missed.any()):
        first = tuple(int(i) for i in missed.nonzero()[0]) if out.dim() else ()
        raise AssertionError(f"{what}: {int(missed.sum())} of the {out.numel()} output elements were never written "
                             f"(they still hold the poison the test put there), the first at index {first}: a "
                             f"block, a thread or the tail of a loop missed them{inputs.replay_hint()}")
    compare.assert_matches(out, expected, what, **tolerance)


def expect_untouched(whole: torch.Tensor, margin: int, what: str):
    if margin and not (bool(unwritten(whole[:margin]).all()) and bool(unwritten(whole[-margin:]).all())):
        raise AssertionError(f"{what}: the kernel wrote outside the tensor (into the {margin} elements around it): "
                             f"is a bound check missing?{inputs.replay_hint()}")


def expect_fill(shape, value, dtype=torch.float32, margin=16):
    what = f"launch_fill(out, {value!r}) where out: {str(dtype).replace('torch.', '')} {tuple(shape)} on {KERNEL_DEVICE}"
    out, whole = poisoned(shape, dtype, margin=margin)
    with launching(what):
        launch_fill(out, value)
    expect_written(out, torch.full(shape, value, dtype=dtype, device=KERNEL_DEVICE), what)
    expect_untouched(whole, margin, what)


for shape, value in [((1000,), 2.5), ((1,), -1.0), ((3, 5), 0.0), ((256,), 7.0), ((257,), 1.5), ((0,), 3.0)]:
    expect_fill(shape, value)
expect_fill((300,), 0.25, torch.float64)
expect_fill((33,), 12, torch.int64)
expect_fill((20,), True, torch.bool)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_fill(draw):
    dtype = draw.choice([torch.float32, torch.float32, torch.float64, torch.int64, torch.bool])
    value = {torch.int64: draw(-10**12, 10**12), torch.bool: draw.choice([True, False])}.get(
        dtype, draw.choice([0.0, -2.5, 1e30, 3.0]))
    n = draw.choice([1, 255, 256, 257, 511, draw(1, 3000)])
    expect_fill((n,), value, dtype)


for_random_inputs(test_fill, 12)
expect_fill((2, 0, 3), 1.0)
e = from_torch(torch.zeros(5)).to(DEVICE)
ones = dispatch("full_like", e, 1)
compare.assert_equal(str(ones.device), str(e.device), f"dispatch('full_like', a tensor on {DEVICE}, 1).device")
compare.assert_matches(ones, torch.ones(5, device=torch_device(DEVICE)), f"dispatch('full_like', a tensor on {DEVICE}, 1)")
if GPU and torch.cuda.mem_get_info()[0] > 3 * 2**30:  # for real: more elements than a 32-bit index reaches
    n = 2**31 + 4096
    big = torch.zeros(n, dtype=torch.bool, device="cuda")
    with launching(f"launch_fill(out, True) of {n} bool elements"):
        launch_fill(big, True)
    missed = int((~big).sum())
    del big
    assert missed == 0, (f"launch_fill on {n} elements (more than 2**31) left {missed} unwritten: is the "
                         "element's index computed in 32 bits?")
### END HIDDEN TESTS

# %% [markdown]
# ### The launch visualiser
#
# Choose a size, threads per block and a number of blocks, and see which block
# and thread computes each element of a tensor: the ragged last block, the
# elements nobody computes when the grid is too small and the kernel has no
# grid-stride loop, and the loop's rounds when it has one. In matmul mode, step
# through the tiles of `A` and `B` a block loads, and see what the naive and the
# tiled kernels read from global and from shared memory: the expected counts,
# and — once exercises 11 and 12 run — your kernels' counts, from the emulator.
# It uses your `launch_1d` and `launch_2d` (exercise 4) and stays live: come
# back to it at exercises 6 and 12.

# %%
from course.widgets.launch_visualiser import explore

explore(launch_1d, launch_2d, MATMULS)

# %% [markdown]
# ## Exercise 6 — elementwise on contiguous tensors: a grid-stride loop, in 64 bits
#
# One kernel serves **every** elementwise operation: `map_contiguous<To, From,
# F>(out, a, b, op, n)` sets `out[i] = F::apply(op, a[i], b[i])` for every
# `i < n` (unary ops get `a` twice and ignore `b`). Its launch has at most
# `max_blocks` blocks, so each thread takes elements one **grid** apart:
#
# ```c
# for (long long i = first; i < n; i += step)   // step = all the threads of the grid
# ```
#
# ![A grid-stride loop for n = 20 elements with 2 blocks of 4 threads, 8 threads in all: in round 0 threads t0 to t7 compute elements 0 to 7, in round 1 elements 8 to 15, in round 2 threads t0 to t3 compute 16 to 19 and threads t4 to t7 stop, their next i being at least n. Elements are coloured by block: block 0 holds t0 to t3, block 1 t4 to t7](figures/grid_stride.svg)
#
# This is torch's own pattern (`aten/src/ATen/native/cuda/Loops.cuh`): with a
# grid of a fixed size, consecutive threads read consecutive addresses (the
# GPU merges them into few memory transactions), and one launch handles any `n`.
#
# **64 bits.** `blockIdx.x`, `blockDim.x` and `threadIdx.x` are 32-bit
# `unsigned int`s, and so is their product: `blockIdx.x * blockDim.x` wraps
# around at 2**32 (and an `int i` at 2**31), silently, in tensors of more than
# two billion elements — an H200 holds 35 billion floats. Convert to `long long`
# **before** multiplying. Write the two helpers, which the tests also call with
# huge values:
#
# - `first_index(block, threads, thread)`: the index of the first element of
#   thread `thread` of block `block` (blocks of `threads` threads);
# - `grid_step(threads, blocks)`: how many threads the grid has;
#
# the kernel, and `launch_map(op, out, a, b=None, max_blocks=MAX_BLOCKS)` for
# contiguous torch tensors of one shape (`b=None` for a unary op): the kernel
# `MAP("map_contiguous", C_TYPES[out.dtype], C_TYPES[a.dtype], family(op))`,
# the op's number `np.int32(OP_CODES[op])`, no launch when there is nothing to
# do.

# %% solution="ex_map" reference=true
MAP = Kernels(cuda_source(r"""
__device__ long long first_index(unsigned int block, unsigned int threads, unsigned int thread) {
    ### BEGIN SOLUTION
    return (long long)block * threads + thread;
    ### END SOLUTION
}

__device__ long long grid_step(unsigned int threads, unsigned int blocks) {
    ### BEGIN SOLUTION
    return (long long)threads * blocks;
    ### END SOLUTION
}

template <typename To, typename From, typename F>
__global__ void map_contiguous(To* out, const From* a, const From* b, int op, long long n) {
    ### BEGIN SOLUTION
    long long step = grid_step(blockDim.x, gridDim.x);
    for (long long i = first_index(blockIdx.x, blockDim.x, threadIdx.x); i < n; i += step)
        out[i] = (To)F::apply(op, a[i], b[i]);
    ### END SOLUTION
}
"""))


def launch_map(op: str, out: torch.Tensor, a: torch.Tensor, b: torch.Tensor = None, max_blocks: int = MAX_BLOCKS):
    """out = op(a, b) (or op(a)), elementwise, for contiguous tensors of one shape."""
    ### BEGIN SOLUTION
    geometry = launch_1d(out.numel(), max_blocks=max_blocks)
    if geometry is None:
        return
    kernel = MAP("map_contiguous", C_TYPES[out.dtype], C_TYPES[a.dtype], family(op))
    kernel(*geometry, (out, a, a if b is None else b, np.int32(OP_CODES[op]), np.int64(out.numel())))
    ### END SOLUTION


# %% tests="ex_map" points=3
from course.cuda.status import recording


def within_max_blocks(launches, max_blocks: int, what: str) -> None:
    """No launch of more than max_blocks blocks: past the grid, the kernel's grid-stride loop takes the rest."""
    for launch in launches:
        if launch.grid[0] > max_blocks:
            raise AssertionError(f"{what}: a grid of {launch.grid[0]} blocks, more than max_blocks={max_blocks}: launch "
                                 "at most max_blocks blocks (launch_1d(n, max_blocks=max_blocks)) and let the kernel's "
                                 "grid-stride loop take the elements past the grid")


TORCH_OPS = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
             "maximum": torch.maximum, "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log,
             "sqrt": torch.sqrt, "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
             "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
             "copy": lambda a: a}
UNARY = ("neg", "abs", "exp", "log", "sqrt", "relu", "sigmoid", "tanh", "copy")


def operands(op, shape, dtype, device=KERNEL_DEVICE, draw=inputs):
    """Random inputs (from `draw`) on which torch's op is tame: positive for log and sqrt and pow's base, small for exp."""
    a = draw.randn(shape, dtype=dtype if dtype.is_floating_point else torch.float32) * 2
    b = draw.randn(shape, dtype=a.dtype) * 2
    if op in ("log", "sqrt", "pow"):
        a = a.abs() + 0.5
    if not dtype.is_floating_point:
        a, b = (a * 3).round().to(dtype), (b * 3).round().to(dtype)
        if op == "pow":
            b = b.abs() % 4
    if op == "div":
        b = b + torch.where(b >= 0, 0.5, -0.5).to(b.dtype) if dtype.is_floating_point else b
    if draw.randint(0, 3) == 0 and op in ("eq", "ne", "le", "ge", "maximum"):
        b = a.clone()  # ties
    return a.to(device), b.to(device)


def expect_map(launch, op, shape, dtype=torch.float32, layout=lambda t: t, layout_text="", max_blocks=MAX_BLOCKS,
               out_dtype=None, draw=inputs):
    a, b = operands(op, shape, dtype, draw=draw)
    a, b = layout(a), layout(b)
    if op == "copy":
        expected = a.to(out_dtype or dtype)
    elif op in UNARY:
        expected = TORCH_OPS[op](a)
    else:
        expected = TORCH_OPS[op](a, b)
    out, whole = poisoned(tuple(expected.shape), expected.dtype, margin=8)
    args = (a,) if op in UNARY else (a, b)
    what = (f"{launch.__name__}({op!r}, out, {', '.join('ab'[:len(args)])}{', max_blocks=' + str(max_blocks) if max_blocks != MAX_BLOCKS else ''})"
            f" where a{', b' if len(args) == 2 else ''}: {str(dtype).replace('torch.', '')} {tuple(shape)}{layout_text}"
            f" on {KERNEL_DEVICE}")
    with launching(what), recording() as launches:
        launch(op, out, *args, max_blocks=max_blocks)
    expect_written(out, expected, what)
    within_max_blocks(launches, max_blocks, what)
    expect_untouched(whole, 8, what)


PROBE_INDEX = r"""
extern "C" __global__ void probe_index(long long* out, const long long* args, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        out[2 * i] = first_index((unsigned int)args[3 * i], (unsigned int)args[3 * i + 1], (unsigned int)args[3 * i + 2]);
        out[2 * i + 1] = grid_step((unsigned int)args[3 * i + 1], (unsigned int)args[3 * i]);
    }
}
"""


def expect_64_bit_indices(cases):
    """first_index and grid_step, called from a test kernel with (block, threads, thread) where 32 bits overflow."""
    args = torch.tensor([v for case in cases for v in case], dtype=torch.int64, device=KERNEL_DEVICE)
    out = torch.full((2 * len(cases),), -1, dtype=torch.int64, device=KERNEL_DEVICE)
    with launching("a test kernel calling your first_index and grid_step"):
        Kernel(MAP.source + PROBE_INDEX, "probe_index")((1,), (32,), (out, args, np.int32(len(cases))))
    for (block, threads, thread), first, step in zip(cases, out[0::2].tolist(), out[1::2].tolist()):
        compare.assert_equal(first, block * threads + thread, f"first_index({block}, {threads}, {thread}) "
                             "(computed in 32 bits it wraps around)")
        compare.assert_equal(step, threads * block, f"grid_step({threads}, {block})")


for op in ("add", "mul", "exp", "relu", "gt", "maximum"):
    expect_map(launch_map, op, (1000,))
expect_map(launch_map, "sub", (5, 7), max_blocks=2)
expect_map(launch_map, "div", (300,), torch.float64)
expect_map(launch_map, "add", (0,))
expect_map(launch_map, "mul", (1000,), max_blocks=1)   # one block: every thread loops over many elements
expect_64_bit_indices([(0, 256, 0), (3, 256, 7), (2**23, 256, 5), (2**31 - 1, 1024, 1023)])
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_map(draw):
    op = draw.choice(ARITH + COMPARE)
    dtype = draw.choice([torch.float32, torch.float32, torch.float64]
                        + ([torch.int64] if op in ("add", "sub", "mul", "maximum", "neg", "abs", "relu", "pow")
                           + COMPARE else []))
    n = draw.choice([1, 31, 256, 257, draw(1, 2000)])
    expect_map(launch_map, op, (n,), dtype, max_blocks=draw.choice([MAX_BLOCKS, 1, 2, 3]), draw=draw)


def test_64_bit_indices(draw):  # one example of six cases: they share one launch of the test kernel
    expect_64_bit_indices([(draw(2**22, 2**31 - 1), draw.choice([128, 256, 1024]), draw(0, 127)) for _ in range(6)]
                          + [(2**31 - 1, 1024, 1023), (2**22, 1024, 0), (5, 1, 0)])


for_random_inputs(test_map, 14)
expect_map(launch_map, "copy", (77,), torch.float32, out_dtype=torch.float64)
for_random_inputs(test_64_bit_indices, 1)
if GPU and torch.cuda.mem_get_info()[0] > 20 * 2**30:  # for real: more elements than a 32-bit index reaches
    n = 2**31 + 1000
    a = torch.zeros(n, device="cuda")
    a[-1000:] = 1.0
    out = torch.zeros(n, device="cuda")
    with launching(f"launch_map('neg', out, a) of {n} floats"):
        launch_map("neg", out, a)
    tail = out[-1000:].clone()
    del a, out
    assert bool((tail == -1.0).all()), f"launch_map on {n} elements (more than 2**31) missed the last ones"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 7 — elementwise over any strides
#
# A transposed, sliced or expanded tensor is not contiguous: element `i`
# (counted in row-major order over the shape) is not at `a[i]`. It is where
# chapter 01 put it: split `i` into one index per dim, from the last dim (the
# fastest) to the first, and add up index × stride:
#
# ```
# shape (2, 3), strides (1, 2) (a transpose), i = 4:   i % 3 = 1, i / 3 = 1 -> index (1, 1)
#                                                      offset = 1 * 1 + 1 * 2 = 3
# ```
#
# Write `offset_of(index, ndim, sizes, strides)`, that arithmetic in C (in
# 64 bits: strides and sizes are `long long`s), and the kernel
# `map_strided<To, From, F>(out, a, b, op, meta, ndim, n)`: the same loop as
# exercise 6 (at most `max_blocks` blocks), where element `i` of `out`, `a` and
# `b` is each at its own offset.
# `meta` is a small tensor of `4 * ndim` `long long`s on the same device: the
# sizes, then the strides of `out`, of `a` and of `b` (strides in elements, as
# `t.stride()` gives them; the pointers already point at each tensor's first
# element). A stride of 0 is fine: that is how an expanded (broadcast) operand
# looks. Then `launch_map_strided(op, out, a, b=None, max_blocks=MAX_BLOCKS)`
# for torch tensors of one shape, any layout, `out` not overlapping itself:
# build `meta` with `torch.tensor(..., dtype=torch.int64, device=out.device)`.
#
# This is what torch's `TensorIterator` does — plus a lot of cleverness this
# kernel does without: it merges dims that are contiguous with each other, and
# precomputes the divisions (`IntDivider`), because a 64-bit division is among
# the slowest things a GPU does.

# %% solution="ex_strided" reference=true
STRIDED = Kernels(cuda_source(r"""
__device__ long long offset_of(long long index, int ndim, const long long* sizes, const long long* strides) {
    ### BEGIN SOLUTION
    long long offset = 0;
    for (int d = ndim - 1; d >= 0; --d) {
        offset += (index % sizes[d]) * strides[d];
        index /= sizes[d];
    }
    return offset;
    ### END SOLUTION
}

template <typename To, typename From, typename F>
__global__ void map_strided(To* out, const From* a, const From* b, int op, const long long* meta, int ndim,
                            long long n) {
    ### BEGIN SOLUTION
    const long long* sizes = meta;
    long long step = (long long)blockDim.x * gridDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step) {
        From x = a[offset_of(i, ndim, sizes, meta + 2 * ndim)];
        From y = b[offset_of(i, ndim, sizes, meta + 3 * ndim)];
        out[offset_of(i, ndim, sizes, meta + ndim)] = (To)F::apply(op, x, y);
    }
    ### END SOLUTION
}
"""))


def launch_map_strided(op: str, out: torch.Tensor, a: torch.Tensor, b: torch.Tensor = None,
                       max_blocks: int = MAX_BLOCKS):
    """out = op(a, b) (or op(a)), elementwise, for tensors of one shape in any layout."""
    ### BEGIN SOLUTION
    geometry = launch_1d(out.numel(), max_blocks=max_blocks)
    if geometry is None:
        return
    b = a if b is None else b
    meta = torch.tensor([*out.shape, *out.stride(), *a.stride(), *b.stride()] or [0], dtype=torch.int64,
                        device=out.device)
    kernel = STRIDED("map_strided", C_TYPES[out.dtype], C_TYPES[a.dtype], family(op))
    kernel(*geometry, (out, a, b, np.int32(OP_CODES[op]), meta, np.int32(out.dim()), np.int64(out.numel())))
    ### END SOLUTION


# %% tests="ex_strided" points=3
PROBE_OFFSET = r"""
extern "C" __global__ void probe_offset(long long* out, const long long* index, const long long* meta, int ndim, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        out[i] = offset_of(index[i], ndim, meta, meta + ndim);
}
"""


def expect_offsets(sizes, strides, indices):
    """offset_of from a test kernel, against the same arithmetic in Python's exact integers."""
    meta = torch.tensor(list(sizes) + list(strides), dtype=torch.int64, device=KERNEL_DEVICE)
    index = torch.tensor(indices, dtype=torch.int64, device=KERNEL_DEVICE)
    out = torch.full_like(index, -1)
    with launching(f"a test kernel calling your offset_of for sizes {sizes}, strides {strides}"):
        Kernel(STRIDED.source + PROBE_OFFSET, "probe_offset")((1,), (32,), (out, index, meta, np.int32(len(sizes)),
                                                                           np.int32(len(indices))))
    for i, got in zip(indices, out.tolist()):
        expected, rest = 0, i
        for size, stride in reversed(list(zip(sizes, strides))):
            expected += (rest % size) * stride
            rest //= size
        compare.assert_equal(got, expected, f"offset_of({i}, {len(sizes)}, sizes {tuple(sizes)}, strides {tuple(strides)})")


LAYOUTS = {  # (t, where a random layout comes from) -> t in that layout
    ".T": lambda t, draw: t.mT if t.dim() >= 2 else t,
    "[:, ::2]": lambda t, draw: t.repeat_interleave(2, dim=-1)[..., ::2] if t.dim() else t,
    ".expand": lambda t, draw: t[:1].expand(t.shape) if t.dim() and t.shape[0] else t,
    " (noncontiguous)": lambda t, draw: draw.noncontiguous(t),
}


def expect_strided(op, shape, dtype=torch.float32, layout=" (noncontiguous)", out_layout=None, max_blocks=MAX_BLOCKS,
                   draw=inputs):
    a, b = operands(op, shape, dtype, draw=draw)
    view = LAYOUTS[layout]
    a, b = view(a, draw), view(b, draw)
    args = (a,) if op in UNARY else (a, b)
    expected = a.clone() if op == "copy" else TORCH_OPS[op](*args)
    out, whole = poisoned(tuple(expected.shape), expected.dtype, margin=8)
    if out_layout == ".T" and out.dim() == 2:  # an output that is itself a transposed view
        out, whole = poisoned(tuple(reversed(expected.shape)), expected.dtype)[0].T, None
    what = (f"launch_map_strided({op!r}, out, {', '.join('ab'[:len(args)])}) where "
            f"a{', b' if len(args) == 2 else ''}: {describe(a)}{layout}{', out transposed' if whole is None else ''} "
            f"on {KERNEL_DEVICE}")
    with launching(what), recording() as launches:
        launch_map_strided(op, out, *args, max_blocks=max_blocks)
    expect_written(out, expected, what)
    within_max_blocks(launches, max_blocks, what)
    if whole is not None:
        expect_untouched(whole, 8, what)


for layout in LAYOUTS:
    expect_strided("add", (4, 6), layout=layout)
expect_strided("exp", (3, 5), layout=".T")
expect_strided("mul", (2, 3, 4), layout=" (noncontiguous)", max_blocks=1)
expect_strided("mul", (3, 20, 30), layout=" (noncontiguous)", max_blocks=2)  # 1800 elements: the loop takes them
expect_strided("gt", (5, 4), torch.float64, layout=".expand")
expect_strided("add", (6, 3), out_layout=".T", layout=".T")
expect_strided("add", (), layout=".T")
expect_offsets((2, 3), (1, 2), [0, 1, 2, 3, 4, 5])
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_strided(draw):
    op = draw.choice(ARITH + COMPARE)
    shape = draw.shape(ndim=(0, 4), size=(1, 5), allow_zero=True)
    dtype = draw.choice([torch.float32, torch.float32, torch.float64])
    expect_strided(op, shape, dtype, draw.choice(list(LAYOUTS)), max_blocks=draw.choice([MAX_BLOCKS, 1, 2]), draw=draw)


for_random_inputs(test_strided, 12)
expect_strided("add", (9, 7), out_layout=".T", layout=" (noncontiguous)")
expect_offsets((3, 2**20, 2**12), (2**40, 2**12, 1), [0, 2**31 + 5, 3 * 2**32 - 1, 2**33 + 2**20 + 7])
expect_offsets((inputs.randint(1, 9), inputs.randint(1, 9), inputs.randint(1, 9)),
               (inputs.randint(-5, 50), 0, inputs.randint(1, 3) * 2**31), list(range(0, 60, 7)))
### END HIDDEN TESTS

# %% [markdown]
# Your strided kernel is also every **copy** of the CUDA backend: with the `Cast`
# family, `map_strided` copies one layout into another and converts the dtype on
# the way. The next cell registers, for the `CUDA` key: `cast` (so that
# `x.to(dtype)` now converts on the device too), `clone`, `contiguous`, `setitem`
# (`t[key] = value`: a copy into the view `t[key]`) and `copy_into(dst, src)`.

# %% reference=true
def copy_into(dst: Tensor, src) -> Tensor:
    """dst[...] = src: src (a tensor on dst's device, or a number) broadcast, converted and copied into dst's layout."""
    if not isinstance(src, Tensor):
        src = dispatch("full_like", empty_on((), dst.dtype, dst.device), src)
    if src.device != dst.device:
        if src.device != CPU or src.dim():
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"{dst.device} and {src.device}!")
        src = move(src, dst.device)  # a CPU scalar: its one value copied over
    source = src.expand(dst.shape).to_torch() if src.shape != dst.shape else src.to_torch()
    launch_map_strided("copy", dst.to_torch(), source)
    return dst


@register_cuda_kernel("cast")
def cast_cuda(x: Tensor, dtype) -> Tensor:
    return copy_into(empty_on(x.shape, dtype, x.device), x)


@register_cuda_kernel("clone")
def clone_cuda(x: Tensor) -> Tensor:
    return copy_into(empty_on(x.shape, x.dtype, x.device), x)


@register_cuda_kernel("contiguous")
def contiguous_cuda(x: Tensor) -> Tensor:
    return x if x.is_contiguous() else clone_cuda(x)


@register_cuda_kernel("setitem")
def setitem_cuda(t: Tensor, key, value) -> None:
    copy_into(t[key], value)


# %% [markdown]
# ## Exercise 8 — the CUDA backend's elementwise operations
#
# Time to make `x + y` work on a device. Write `cuda_elementwise(op, a, b=None)`
# — the `CUDA` kernel of every unary and binary op — with chapter 01's rules,
# now on device memory. `a` and `b` are picotorch tensors on one device
# (`common_device(a, b)`), or one of them a Python number or a CPU scalar
# (exercise 2: a 0-dim CPU tensor, which counts as a tensor for the dtype):
#
# 1. **dtype**: a unary op computes in `a`'s dtype, except that `FLOAT_RESULT`
#    ops (`exp`, `log`...) of an integer or bool tensor compute in `float32`; a
#    binary op computes in `result_type(a, b)` (chapter 01), `div` of integers in
#    `float32`, comparisons of bools in `int64`; comparisons (`COMPARISONS`) give
#    `bool`, the others the compute dtype. Torch's errors stay: `neg`, `abs`, `relu` of a bool tensor, `sub`
#    with a bool operand — `RuntimeError`s. The backend computes in `float32`,
#    `float64` and `int64` only: anything else (`True + True`) is a
#    `RuntimeError` saying so.
# 2. **operands**: a number — or a CPU scalar's value, `x.item()` — becomes a
#    0-dim tensor on the device
#    (`dispatch("full_like", empty_on((), dtype, device), value)`), each operand
#    is converted to the compute dtype (`.to(dtype)`, your cast kernel), and
#    broadcast to the common shape (`broadcast_shapes`, then `.expand`: stride
#    0, no copy — broadcasting *is* a layout).
# 3. **launch**: into a new contiguous output (`empty_on`), with `launch_map`
#    when every operand is contiguous with the output's shape (the fast path:
#    no index arithmetic), `launch_map_strided` otherwise. Your launchers take
#    torch tensors: `t.to_torch()` is the torch view of a picotorch tensor.
#
# The given code after your function registers it for every op; from then on
# `x.to("emu") * 2 + y.to("emu")` runs your kernels, and so does autograd's
# backward of it.

# %% solution="ex_binary" reference=true
def cuda_elementwise(op: str, a, b=None) -> Tensor:
    """op(a, b) (or op(a)) on the device of the tensor operands, with torch's dtype and broadcasting rules."""
    ### BEGIN SOLUTION
    device = common_device(a, b)
    if b is None and op in UNARY_OPS:
        if a.dtype is bool_ and op in ("neg", "abs", "relu"):
            raise RuntimeError(f"{op} is not supported for bool tensors")
        dtype = float32 if op in FLOAT_RESULT and not a.dtype.is_floating_point else a.dtype
        operands = [a]
    else:
        dtype = result_type(a, b)
        if op == "sub" and any(isinstance(x, bool) or isinstance(x, Tensor) and x.dtype is bool_ for x in (a, b)):
            raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported.")
        if op == "div" and not dtype.is_floating_point:
            dtype = float32
        if op in COMPARISONS and dtype is bool_:
            dtype = int64  # True and False compare as 1 and 0
        operands = [x if isinstance(x, Tensor) and x.device == device else
                    dispatch("full_like", empty_on((), dtype, device), x.item() if isinstance(x, Tensor) else x)
                    for x in (a, b)]
    if dtype not in (float32, float64, int64):
        raise RuntimeError(f"picotorch's CUDA backend computes in float32, float64 and int64, not {dtype.name} "
                           f"({op} of {', '.join(x.dtype.name for x in operands)})")
    shape = broadcast_shapes(*(x.shape for x in operands))
    operands = [x.to(dtype).expand(shape) for x in operands]
    out = empty_on(shape, bool_ if op in COMPARISONS else dtype, device)
    views = [x.to_torch() for x in operands]
    if all(x.is_contiguous() and x.shape == shape for x in operands):
        launch_map(op, out.to_torch(), *views)
    else:
        launch_map_strided(op, out.to_torch(), *views)
    return out
    ### END SOLUTION


for _op in UNARY_OPS + BINARY_OPS:
    register_cuda_kernel(_op)((lambda op: lambda a, b=None: cuda_elementwise(op, a, b))(_op))


# %% tests="ex_binary" points=3
import operator

SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "eq": "==", "ne": "!=", "lt": "<",
           "le": "<=", "gt": ">", "ge": ">="}
PYTHON_OPS = {**{op: getattr(operator, op) for op in ("add", "sub", "mul", "pow", "eq", "ne", "lt", "le", "gt", "ge")},
              "div": operator.truediv, "maximum": lambda a, b: a.maximum(b)}


def as_operand(x, device):
    return on_device(x, device) if isinstance(x, torch.Tensor) else x


def expect_backend(op, a, b=None, device=DEVICE):
    """op on picotorch tensors on `device` against torch on the same values (on its device: the CPU for emu)."""
    unary = b is None
    if unary:
        what = f"x.{op}() where x: {describe(a)} on {device}"
        theirs_call = lambda: getattr(a.to(torch_device(device)), op)()  # noqa: E731
        ours_call = lambda: getattr(as_operand(a, device), op)()  # noqa: E731
    else:
        text = f"a {SYMBOLS[op]} b" if op in SYMBOLS else f"a.{op}(b)"
        what = f"{text} where a: {describe(a)}, b: {describe(b)} on {device}"
        ta, tb = (x.to(torch_device(device)) if isinstance(x, torch.Tensor) else x for x in (a, b))
        theirs_call = lambda: TORCH_OPS[op](ta, tb) if op == "maximum" else PYTHON_OPS[op](ta, tb)  # noqa: E731
        ours_call = lambda: PYTHON_OPS[op](as_operand(a, device), as_operand(b, device))  # noqa: E731
    try:
        theirs = theirs_call()
    except Exception as e:
        compare.assert_raises(RuntimeError if isinstance(e, RuntimeError) else Exception, ours_call, what)
        return
    if theirs.dtype not in (torch.float32, torch.float64, torch.int64, torch.bool) or \
            (not unary and op not in COMPARISONS and theirs.dtype == torch.bool):
        compare.assert_raises(RuntimeError, ours_call, what + " (the CUDA backend has no bool arithmetic)")
        return
    with launching(what):
        ours = ours_call()
    assert isinstance(ours, Tensor), f"{what} gave {type(ours).__name__}, not a picotorch Tensor"
    compare.assert_equal(str(ours.device), device_text(device), f"({what}).device")
    compare.assert_matches(ours, theirs, what)


x = torch.tensor([[1.0, -2.0, 3.0], [0.5, 4.0, -1.5]])
expect_backend("add", x, x[0])
expect_backend("mul", x.T, torch.tensor([2, 3]))
expect_backend("sub", 1, x)
expect_backend("div", torch.tensor([1, 2, 3]), 2)
expect_backend("lt", x, 0.5)
expect_backend("maximum", x, x.flip(0))
expect_backend("pow", x.abs() + 0.5, 2)
expect_backend("exp", x.T)
expect_backend("sigmoid", torch.tensor([1, 0, 3]))
expect_backend("neg", torch.tensor([True, False]))
expect_backend("add", x, torch.ones(3, 2))
expect_backend("add", torch.tensor([True]), torch.tensor([False]))
y = on_device(x)
compare.assert_matches((y * 2 + 1).relu() - y.exp() / 3, ((x * 2 + 1).relu() - x.exp() / 3).to(torch_device(DEVICE)),
                       f"(y * 2 + 1).relu() - y.exp() / 3 on {DEVICE}")
compare.assert_matches(y.to(float64).to("cpu"), x.double(), f"y.to(float64) on {DEVICE}, back on the CPU")


def expect_cpu_scalar(op, a, s, scalar_first=False):
    """a op s (s op a) where a is on the device and s a CPU scalar, a 0-dim tensor that stays on the CPU."""
    ta = a.to(torch_device(DEVICE))
    what = (f"{'s ' + SYMBOLS[op] + ' a' if scalar_first else 'a ' + SYMBOLS[op] + ' s'} where a: {describe(a)} on "
            f"{DEVICE}, s: {describe(s)} on the CPU (a CPU scalar)")
    pair = (lambda u, v: (v, u)) if scalar_first else (lambda u, v: (u, v))
    theirs = PYTHON_OPS[op](*pair(ta, s))
    with launching(what):
        ours = PYTHON_OPS[op](*pair(on_device(a), from_torch(s)))
    compare.assert_equal(str(ours.device), device_text(DEVICE), f"({what}).device")
    compare.assert_matches(ours, theirs, what)


expect_cpu_scalar("mul", x, torch.tensor(2.5, dtype=torch.float64))
expect_cpu_scalar("sub", torch.tensor([1, 2, 3]), torch.tensor(0.5), scalar_first=True)
expect_cpu_scalar("add", torch.tensor([1, 2, 3]), torch.tensor(True))
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
from course.testing import broadcast_family


def random_operand(draw, shape):
    dtype = draw.choice([torch.float32, torch.float32, torch.float64, torch.int64, torch.bool])
    t = draw.randn(shape) * 3
    t = t.to(dtype) if dtype != torch.bool else t > 0
    return draw.noncontiguous(t)


def test_binary(draw):
    op = draw.choice(BINARY_OPS)
    sa, sb = broadcast_family(draw, 2)
    a, b = random_operand(draw, sa), random_operand(draw, sb)
    if draw(0, 3) == 0:
        b = draw.choice([2, -1.5, 0.5, True])
    elif draw(0, 5) == 0:
        a, b = draw.choice([2, 3.0]), b
    if op == "pow":
        if isinstance(a, torch.Tensor):
            a = (a.to(torch.int64) if a.dtype == torch.bool else a).abs() + 1
        if isinstance(b, torch.Tensor) and b.dtype != torch.bool:
            b = b.abs() % 3
        if isinstance(b, (int, float)) and not isinstance(b, bool):
            b = abs(b)
    if op == "maximum" and not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return
    if op == "div" and isinstance(b, torch.Tensor):
        b = torch.where(b == 0, torch.ones_like(b), b) if b.dtype != torch.bool else b
    expect_backend(op, a, b)


def test_unary(draw):
    op = draw.choice(UNARY_OPS)
    t = random_operand(draw, draw.shape(ndim=(0, 3), allow_zero=True))
    if op == "abs" and t.dtype == torch.bool:
        t = t.to(torch.int64)  # torch's CPU refuses abs of a bool tensor, its CUDA build returns it: graded neither way
    if op in ("log", "sqrt") and t.dtype != torch.bool:
        t = t.abs() + 1
    expect_backend(op, t)


def test_cpu_scalars(draw):
    op = draw.choice(["add", "sub", "mul", "div", "lt", "eq"])
    a = random_operand(draw, draw.shape(ndim=(0, 2)))
    s = random_operand(draw, ())
    if op == "sub" and torch.bool in (a.dtype, s.dtype) or op in ("add", "mul") and a.dtype == s.dtype == torch.bool:
        return  # torch's error, or bool arithmetic, which the backend does not have: both tested above
    if op == "div":
        s = s.abs() + 1 if s.dtype != torch.bool else s | True
    expect_cpu_scalar(op, a, s, scalar_first=bool(draw(0, 1)))


for_random_inputs(test_binary, 20)
for_random_inputs(test_unary, 10)
for_random_inputs(test_cpu_scalars, 10)
a = from_torch(torch.ones(3)).to(DEVICE)
compare.assert_raises(RuntimeError, lambda: a + from_torch(torch.ones(3)), f"a tensor on {DEVICE} + a CPU tensor")
y = from_torch(torch.randn(4, 3)).requires_grad_()
w = from_torch(torch.randn(4, 3)).requires_grad_()  # (a broadcast w would need sum in backward: exercise 9)
out = ((y.to(DEVICE) * w.to(DEVICE) - 1).tanh() * 3)
g = torch.randn(4, 3)
out.backward(on_device(g))
yt, wt = y.to_torch().detach().clone().requires_grad_(), w.to_torch().detach().clone().requires_grad_()
((yt * wt - 1).tanh() * 3).backward(g)
compare.assert_matches(y.grad, yt.grad, f"y.grad after ((y * w - 1).tanh() * 3).backward(g) on {DEVICE} (your kernels, "
                                        "through chapter 02's autograd)", rtol=1e-5, atol=1e-5)
compare.assert_matches(w.grad, wt.grad, f"w.grad after ((y * w - 1).tanh() * 3).backward(g) on {DEVICE}", rtol=1e-5,
                       atol=1e-5)
### END HIDDEN TESTS

# %% [markdown]
# In-place operations on the device: `t += u` computes `t + u` with your
# kernels and copies the result into `t`'s own layout (with chapter 01's
# checks).

# %% reference=true
def inplace_cuda(t: Tensor, op: str, other) -> Tensor:
    """t op= other (op "add", "sub", "mul" or "div"): computed by cuda_elementwise, copied into t's layout."""
    if t.numel() and any(size > 1 and stride == 0 for size, stride in zip(t.shape, t.stride())):
        raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers to a "
                           "single memory location. Please clone() the tensor before performing the operation.")
    result = cuda_elementwise(op, t, other)
    if not can_cast(result.dtype, t.dtype):
        raise RuntimeError(f"result type {result.dtype.name} can't be cast to the desired output type {t.dtype.name}")
    if result.shape != t.shape:
        raise RuntimeError(f"output with shape {list(t.shape)} doesn't match the broadcast shape {list(result.shape)}")
    copy_into(t, result)
    return t


for _op in ("add", "sub", "mul", "div"):  # t += u, t -= u, t *= u, t /= u
    register_cuda_kernel(_op + "_")((lambda op: lambda t, other: inplace_cuda(t, op, other))(_op))

# %% [markdown]
# `where(condition, x, y)`, which chapter 02's backward formulas use, gets a
# small kernel of its own (given: three inputs, your `offset_of` arithmetic,
# written out again).

# %% reference=true
WHERE = Kernels(r"""
__device__ long long where_offset(long long index, int ndim, const long long* sizes, const long long* strides) {
    long long offset = 0;
    for (int d = ndim - 1; d >= 0; --d) {
        offset += (index % sizes[d]) * strides[d];
        index /= sizes[d];
    }
    return offset;
}

template <typename T>
__global__ void where_strided(T* out, const bool* c, const T* x, const T* y, const long long* meta, int ndim,
                              long long n) {
    long long step = (long long)blockDim.x * gridDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step) {
        bool pick = c[where_offset(i, ndim, meta, meta + ndim)];
        out[i] = pick ? x[where_offset(i, ndim, meta, meta + 2 * ndim)] : y[where_offset(i, ndim, meta, meta + 3 * ndim)];
    }
}
""", extra="")


def _on(t: Tensor, device) -> Tensor:
    """t itself when it is on `device`, else (a CPU scalar) a copy of it there."""
    return t if t.device == device else move(t, device)


@register_cuda_kernel("where")
def where_cuda(condition: Tensor, x, y) -> Tensor:
    tensors = [v for v in (x, y) if isinstance(v, Tensor)]
    dtype = result_type(*tensors) if len(tensors) == 2 else tensors[0].dtype if tensors else float32
    device = common_device(condition, x, y)
    # A CPU scalar among the inputs is copied to the device (one element); numbers become 0-dim tensors there.
    x, y = (_on(v, device).to(dtype) if isinstance(v, Tensor) else dispatch("full_like", empty_on((), dtype, device), v)
            for v in (x, y))
    condition = _on(condition, device)
    shape = broadcast_shapes(condition.shape, x.shape, y.shape)
    c = condition if condition.dtype is bool_ else condition.to(bool_)
    out = empty_on(shape, dtype, device)
    geometry = launch_1d(out.numel(), max_blocks=MAX_BLOCKS)
    if geometry is not None:
        views = [v.expand(shape).to_torch() for v in (c, x, y)]
        meta = torch.tensor([*shape, *(s for v in views for s in v.stride())] or [0], dtype=torch.int64,
                            device=views[0].device)
        WHERE("where_strided", C_TYPES[TORCH_DTYPE[dtype]])(
            *geometry, (out.to_torch(), *views, meta, np.int32(len(shape)), np.int64(out.numel())))
    return out


# %% [markdown]
# ## Exercise 9 — `sum` along a dim: a shared-memory tree
#
# The backend sums **rows**: `x` is a contiguous `(rows, cols)` matrix, and
# `out[r]` is the sum of row `r`. (The given `cuda_sum` after the tests turns
# any `sum(dim, keepdim)` into that: it moves the summed dims last and makes the
# tensor contiguous, so that each result is the sum of one row.)
#
# One **block** sums a row — and, with a grid of fewer blocks than rows, block
# `blockIdx.x` sums rows `blockIdx.x`, `blockIdx.x + gridDim.x`, ... A block
# sums in two steps:
#
# 1. each of its threads adds up its share of the row, elements
#    `threadIdx.x`, `threadIdx.x + blockDim.x`, ... — **all** of them, however
#    ragged the row's length;
# 2. the threads write their partial sums to **shared memory** (`__shared__ T
#    partial[SUM_THREADS]`: fast on-chip memory that every thread of the block
#    sees), and fold it in half again and again — `partial[t] += partial[t +
#    s]` for `t < s`, with `s` = 128, 64, ..., 1 — until `partial[0]` holds the
#    row's sum:
#
# ![A shared-memory tree with 8 threads: partial holds 3 1 4 1 5 9 2 6. With s = 4, threads 0 to 3 each add the partial sum of thread t + 4 to their own, giving 8 10 6 7; with s = 2, threads 0 and 1 give 14 17; with s = 1, thread 0 gives 31, the row's sum. A dashed red line after each step is a __syncthreads(): no thread may read another's partial sum before its owner wrote it, and every thread reaches the barrier, not only those with t < s](figures/tree_reduction.svg)
#
# Between writing shared memory and reading what **another** thread wrote,
# every thread of the block must wait at `__syncthreads()`. Without it a GPU
# gives a wrong sum once in a while; the emulator follows every barrier and
# reports the missing one as a **data race**, with both lines. (Careful: every
# thread of the block must reach each `__syncthreads()` — not only those with
# `t < s`.)
#
# Write `sum_rows_tree<T>(out, x, rows, cols)` — for any block of a power of two
# threads up to `SUM_THREADS` (use `blockDim.x`, not `SUM_THREADS`, in the
# loops) — and `launch_sum_rows(out, x, max_blocks=MAX_BLOCKS)`: blocks of
# `reduction_threads(cols, SUM_THREADS)` threads (given: no more threads than
# the row needs, but at least a warp), at most `max_blocks` blocks, nothing to
# launch for zero rows (and a row of zero columns sums to 0).
#
# Real PyTorch: [`aten/src/ATen/native/cuda/Reduce.cuh`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cuda/Reduce.cuh)
# (`block_x_reduce`), which combines this tree with the warp shuffles of the
# next exercise.

# %% solution="ex_sum_tree" reference=true
SUM_THREADS = 256  # the most threads per block of the sum kernels: a power of two


def reduction_threads(cols: int, most: int) -> int:
    """Threads for a block that reduces rows of `cols` elements: the smallest power of two >= cols, from 32 (a
    warp) up to `most`. (A row of 10 numbers does not need 256 threads, nor 8 barriers to fold their sums.)"""
    threads = 32
    while threads < min(cols, most):
        threads *= 2
    return threads
SUM = Kernels(cuda_source(r"""
#define SUM_THREADS 256

template <typename T>
__global__ void sum_rows_tree(T* out, const T* x, long long rows, long long cols) {
    __shared__ T partial[SUM_THREADS];
    ### BEGIN SOLUTION
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        T acc = 0;
        for (long long c = threadIdx.x; c < cols; c += blockDim.x)
            acc += x[row * cols + c];
        partial[threadIdx.x] = acc;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s /= 2) {
            if (threadIdx.x < s)
                partial[threadIdx.x] += partial[threadIdx.x + s];
            __syncthreads();
        }
        if (threadIdx.x == 0)
            out[row] = partial[0];
    }
    ### END SOLUTION
}
"""), extra="")


def launch_sum_rows(out: torch.Tensor, x: torch.Tensor, max_blocks: int = MAX_BLOCKS) -> None:
    """out[r] = x[r, :].sum() for a contiguous (rows, cols) x, with sum_rows_tree."""
    ### BEGIN SOLUTION
    rows, cols = x.shape
    if rows == 0:
        return
    SUM("sum_rows_tree", C_TYPES[x.dtype])((min(rows, max_blocks),), (reduction_threads(cols, SUM_THREADS),),
                                           (out, x, np.int64(rows), np.int64(cols)))
    ### END SOLUTION


# %% tests="ex_sum_tree" points=3
def expect_row_sums(launch, rows, cols, dtype=torch.float32, max_blocks=MAX_BLOCKS, scale=1.0, draw=inputs):
    """Row sums against torch's in float64, within the error bound of summing `cols` numbers in `dtype`:
    |error| <= cols * eps * sum |x| (the textbook bound of any summation order: a tolerance from the dtype)."""
    x = (draw.randn(rows, cols, dtype=dtype) * scale).to(KERNEL_DEVICE)
    out, whole = poisoned((rows,), dtype, margin=4)
    what = (f"{launch.__name__}(out, x{', max_blocks=' + str(max_blocks) if max_blocks != MAX_BLOCKS else ''}) where x: "
            f"{describe(x)} on {KERNEL_DEVICE}")
    with launching(what), recording() as launches:
        launch(out, x, max_blocks=max_blocks)
    expected = x.double().sum(1).to(dtype)
    bound = (max(cols, 1) * torch.finfo(dtype).eps * x.double().abs().sum(1)).max().item() if rows else 0.0
    expect_written(out, expected, what, rtol=0, atol=bound + torch.finfo(dtype).tiny)
    expect_untouched(whole, 4, what)
    within_max_blocks(launches, max_blocks, what)


for rows, cols in [(1, 1), (3, 256), (4, 300), (2, 1000), (5, 7), (1, 0), (0, 5)]:
    expect_row_sums(launch_sum_rows, rows, cols)
expect_row_sums(launch_sum_rows, 6, 513, max_blocks=2)      # blocks that sum several rows
expect_row_sums(launch_sum_rows, 3, 100, torch.float64)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_row_sums(draw):
    expect_row_sums(launch_sum_rows, draw(1, 9), draw.choice([1, 255, 256, 257, draw(1, 1500)]),
                    draw.choice([torch.float32, torch.float64]), draw.choice([MAX_BLOCKS, 1, 2, 3]),
                    draw.choice([1.0, 100.0]), draw)


for_random_inputs(test_row_sums, 6)
### END HIDDEN TESTS

# %% [markdown]
# The next cell turns your row sums into the backend's `sum(dim, keepdim)` and
# `mean`: the summed dims are moved last (`permute`), the result made contiguous
# (your copy kernel), viewed as `(rows, cols)`, summed, and reshaped. `SUM_ROWS`
# says which of your kernels the backend uses; exercise 10 adds another.

# %% reference=true
SUM_ROWS = {"tree": lambda out, x: launch_sum_rows(out, x)}
USE = {"sum": "tree", "matmul": "tiled"}  # the kernels the backend uses (use_kernels changes them)


def use_kernels(sum: str = None, matmul: str = None) -> None:
    """Choose the backend's kernels: sum "tree" or "warp", matmul "naive", "tiled" or "blocked"."""
    for op, kind in (("sum", sum), ("matmul", matmul)):
        if kind is not None:
            USE[op] = kind


def reduction_layout(shape, dim):
    """(kept dims, summed dims) of a reduction of `shape` over `dim` (None: all dims)."""
    n = len(shape)
    if dim is None:
        summed = tuple(range(n))
    else:
        summed = tuple(sorted({wrap_dim(d, n) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))}))
        if n == 0:
            summed = ()
    return tuple(d for d in range(n) if d not in summed), summed


@register_cuda_kernel("sum")
def cuda_sum(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    if x.dtype is bool_:
        x = x.to(int64)
    kept, summed = reduction_layout(x.shape, dim)
    rows = math.prod(x.shape[d] for d in kept)
    cols = math.prod(x.shape[d] for d in summed)
    matrix = x.permute(*kept, *summed).contiguous().view(rows, cols) if x.dim() else x.view(1, 1)
    out = empty_on((rows,), x.dtype, x.device)
    if cols == 0:
        launch_fill(out.to_torch(), 0)
    elif x.dtype is int64:  # no integer row sums among the exercises: exact in float64 up to 2**53
        launch_map("copy", out.to_torch(), cuda_sum(matrix.to(float64), 1).to(int64).to_torch())
    else:
        SUM_ROWS[USE["sum"]](out.to_torch(), matrix.to_torch())
    shape = tuple(1 if d in summed else s for d, s in enumerate(x.shape)) if keepdim else \
        tuple(x.shape[d] for d in kept)
    return out.view(shape)


@register_cuda_kernel("mean")
def cuda_mean(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    if not x.dtype.is_floating_point:
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating point or "
                           f"complex dtype. Got: {x.dtype.name}")
    _, summed = reduction_layout(x.shape, dim)
    return cuda_sum(x, dim, keepdim) / math.prod(x.shape[d] for d in summed)


# %% [markdown]
# ## Exercise 10 — `sum` with warp shuffles
#
# The 32 threads of a **warp** can read each other's registers directly, with
# no shared memory and no barrier: `__shfl_down_sync(0xffffffff, v, offset)`
# gives each thread the `v` of the thread `offset` lanes further on. Since Volta
# (sm_70) a warp's threads are *not* in lock-step (independent thread
# scheduling: they may diverge and reconverge anywhere); the `_sync` of the
# shuffle and its mask are what make the exchange safe — every lane named in
# the mask waits at the shuffle for the others. Five shuffles sum a warp:
#
# ```c
# for (int offset = 16; offset >= 1; offset /= 2)
#     v += __shfl_down_sync(0xffffffff, v, offset);     // lane 0 now holds the warp's sum
# ```
#
# Write `sum_rows_warp<T>` with the same job as exercise 9: each thread adds up
# its share of the row; each warp sums its threads' values with shuffles; lane
# 0 of each warp writes the warp's sum to `partial[warp]` in shared memory
# (`SUM_THREADS / 32` of them); after a barrier, the first warp reads them
# (0 for lanes beyond the number of warps) and sums them with shuffles again;
# its lane 0 writes the result. Mind shared memory once more: a block that sums
# another row writes `partial` again — not while the first warp may still be
# reading it. And `launch_sum_rows_warp(out, x, max_blocks=MAX_BLOCKS)`, with
# blocks of `reduction_threads(cols, SUM_THREADS)` threads and at most
# `max_blocks` of them, as before.
#
# The emulator runs the 32 threads of a warp as 32 independent threads: as on a
# GPU since Volta, a shuffle waits for every lane named in the mask, and a lane that
# does not take part (a thread that returned early) gives NaN and a warning
# instead of a value.

# %% solution="ex_sum_warp" reference=true
SUM_WARP = Kernels(cuda_source(r"""
#define SUM_THREADS 256

template <typename T>
__device__ T warp_sum(T v) {
    ### BEGIN SOLUTION
    for (int offset = 16; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
    ### END SOLUTION
}

template <typename T>
__global__ void sum_rows_warp(T* out, const T* x, long long rows, long long cols) {
    __shared__ T partial[SUM_THREADS / 32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    ### BEGIN SOLUTION
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        T acc = 0;
        for (long long c = threadIdx.x; c < cols; c += blockDim.x)
            acc += x[row * cols + c];
        acc = warp_sum(acc);
        if (lane == 0)
            partial[warp] = acc;
        __syncthreads();
        if (warp == 0) {
            acc = lane < blockDim.x / 32 ? partial[lane] : T(0);
            acc = warp_sum(acc);
            if (lane == 0)
                out[row] = acc;
        }
        __syncthreads();
    }
    ### END SOLUTION
}
"""), extra="")


def launch_sum_rows_warp(out: torch.Tensor, x: torch.Tensor, max_blocks: int = MAX_BLOCKS) -> None:
    """out[r] = x[r, :].sum() for a contiguous (rows, cols) x, with sum_rows_warp."""
    ### BEGIN SOLUTION
    rows, cols = x.shape
    if rows == 0:
        return
    SUM_WARP("sum_rows_warp", C_TYPES[x.dtype])((min(rows, max_blocks),), (reduction_threads(cols, SUM_THREADS),),
                                                (out, x, np.int64(rows), np.int64(cols)))
    ### END SOLUTION


SUM_ROWS["warp"] = lambda out, x: launch_sum_rows_warp(out, x)


# %% tests="ex_sum_warp" points=2
for rows, cols in [(1, 1), (3, 256), (4, 300), (2, 1000), (5, 7), (1, 0), (0, 5), (2, 31)]:
    expect_row_sums(launch_sum_rows_warp, rows, cols)
expect_row_sums(launch_sum_rows_warp, 6, 513, max_blocks=2)
expect_row_sums(launch_sum_rows_warp, 3, 100, torch.float64)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_warp_row_sums(draw):
    expect_row_sums(launch_sum_rows_warp, draw(1, 9), draw.choice([1, 31, 33, 256, 257, draw(1, 1500)]),
                    draw.choice([torch.float32, torch.float64]), draw.choice([MAX_BLOCKS, 1, 2, 3]),
                    draw.choice([1.0, 100.0]), draw)


def backend_sum(kind, draw):
    t = draw.noncontiguous(draw.randn(draw.shape(ndim=(0, 3), size=(1, 6), allow_zero=True)))
    n = t.dim()
    dim = draw.choice([None, 0, -1, (0, -1)]) if n else None
    keepdim = draw.choice([False, True])
    if dim is not None and n < 2 and isinstance(dim, tuple):
        dim = 0
    what = f"x.sum({dim!r}, keepdim={keepdim}) with the {kind} kernel where x: {describe(t)} on {DEVICE}"
    ours_t = on_device(t)
    with launching(what):
        got = ours_t.sum(dim, keepdim=keepdim) if dim is not None else ours_t.sum()
    want = t.sum(dim, keepdim=keepdim) if dim is not None else t.sum()
    bound = max(t.numel(), 1) * torch.finfo().eps * t.abs().sum().item()
    compare.assert_matches(got, want.to(torch_device(DEVICE)), what, rtol=0, atol=bound + 1e-30)


def expect_backend_sums(kind):
    """sum(dim, keepdim) of random layouts through the backend, with the `kind` kernel."""
    use_kernels(sum=kind)
    try:
        for_random_inputs(lambda draw: backend_sum(kind, draw), 4)
    finally:
        use_kernels(sum="tree")


for_random_inputs(test_warp_row_sums, 5)
for kind in ("tree", "warp"):
    expect_backend_sums(kind)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 11 — `matmul`, the naive way
#
# `C = A @ B` for an `M × K` matrix `A` and a `K × N` matrix `B`: one thread per
# element of `C`, which walks along a row of `A` and a column of `B`:
#
# ```c
# C[row, col] = sum over k of A[row, k] * B[k, col]
# ```
#
# `A` and `B` come in **any layout**: element `[i, k]` of `A` is at
# `a[i * sa0 + k * sa1]` (its strides), so a transposed weight (`x @ W.T`, in
# every `Linear`) needs no copy. `C` is contiguous: `c[row * N + col]`.
#
# Write `matmul_naive<T>(c, a, b, M, N, K, sa0, sa1, sb0, sb1)` — 2-D
# blocks of 16 × 16 threads, `x` across the columns of `C` and `y` down its rows —
# and `launch_matmul_naive(c, a, b)` for 2-D torch tensors (with `launch_2d`).
# An empty `C` needs no launch; a `K` of 0 makes `C` all zeros (the loop simply
# does not run).
#
# Every thread reads a whole row of `A` and a whole column of `B` from global
# memory: `2·M·N·K` loads for `2·M·N·K` flops. A GPU computes far faster than
# it reads memory, so this kernel spends its time waiting. The emulator counts
# every load (`Kernel.last_launch.counts`): the next exercise divides them.

# %% solution="ex_matmul_naive" reference=true
MATMUL_NAIVE = Kernels(cuda_source(r"""
template <typename T>
__global__ void matmul_naive(T* c, const T* a, const T* b, long long M, long long N, long long K,
                             long long sa0, long long sa1, long long sb0, long long sb1) {
    ### BEGIN SOLUTION
    long long row = blockIdx.y * (long long)blockDim.y + threadIdx.y;
    long long col = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        T acc = 0;
        for (long long k = 0; k < K; ++k)
            acc += a[row * sa0 + k * sa1] * b[k * sb0 + col * sb1];
        c[row * N + col] = acc;
    }
    ### END SOLUTION
}
"""), extra="")


def matmul_args(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple:
    """The arguments every matmul kernel takes: c, a, b, M, N, K and the strides of a and b."""
    (M, K), N = a.shape, b.shape[1]
    return (c, a, b, np.int64(M), np.int64(N), np.int64(K), *(np.int64(s) for s in (*a.stride(), *b.stride())))


def launch_matmul_naive(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """c = a @ b for 2-D a (M, K) and b (K, N) in any layout, c contiguous (M, N)."""
    ### BEGIN SOLUTION
    geometry = launch_2d(a.shape[0], b.shape[1], (16, 16))
    if geometry is not None:
        MATMUL_NAIVE("matmul_naive", C_TYPES[a.dtype])(*geometry, matmul_args(c, a, b))
    ### END SOLUTION


MATMULS["naive"] = launch_matmul_naive


# %% tests="ex_matmul_naive" points=2
torch.backends.cuda.matmul.allow_tf32 = False  # torch's GPU matmul in full float32, as yours


def expect_matmul(launch, M, K, N, dtype=torch.float32, layout_a="", layout_b="", scale=1.0, draw=inputs):
    """c = a @ b against torch, within the bound of K-term dot products: K * eps * (|a| @ |b|)."""
    a = (draw.randn(M, K, dtype=dtype) * scale).to(KERNEL_DEVICE)
    b = (draw.randn(K, N, dtype=dtype) * scale).to(KERNEL_DEVICE)
    if layout_a == ".T":
        a = a.T.contiguous().T
    elif layout_a == "[:, ::2]":
        a = a.repeat_interleave(2, 1)[:, ::2]
    if layout_b == ".T":
        b = b.T.contiguous().T
    elif layout_b == "[::2]":
        b = b.repeat_interleave(2, 0)[::2]
    c, whole = poisoned((M, N), dtype, margin=8)
    what = f"{launch.__name__}(c, a, b) where a: {describe(a)}, b: {describe(b)} on {KERNEL_DEVICE}"
    with launching(what):
        launch(c, a, b)
    bound = (max(K, 1) * torch.finfo(dtype).eps * (a.double().abs() @ b.double().abs())).max().item() if M * N else 0
    expect_written(c, (a.double() @ b.double()).to(dtype), what, rtol=0, atol=bound + torch.finfo(dtype).tiny)
    expect_untouched(whole, 8, what)


def expect_matmuls(launch):
    for M, K, N in [(1, 1, 1), (16, 16, 16), (17, 5, 33), (40, 37, 23), (3, 0, 4), (0, 4, 5)]:
        expect_matmul(launch, M, K, N)
    expect_matmul(launch, 20, 30, 10, layout_a=".T", layout_b="[::2]")
    expect_matmul(launch, 9, 70, 12, torch.float64, layout_a="[:, ::2]", layout_b=".T")


def expect_random_matmuls(launch, n=4, biggest=70):
    for_random_inputs(lambda draw: expect_matmul(
        launch, draw(1, biggest), draw(0, biggest), draw(1, biggest), draw.choice([torch.float32, torch.float32, torch.float64]),
        draw.choice(["", ".T", "[:, ::2]"]), draw.choice(["", ".T", "[::2]"]), draw.choice([1.0, 10.0]), draw), n)


expect_matmuls(launch_matmul_naive)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
expect_random_matmuls(launch_matmul_naive)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 12 — `matmul`, tiled in shared memory
#
# In the naive kernel, the 16 threads of a block row all read the same row of
# `A`, each on its own. Instead, a block can **load a tile of `A` and a tile of
# `B` into shared memory once**, and let all its threads compute from there:
#
# ![C = A @ B with M = 70, K = 80, N = 65 and TILE = 32, A drawn at the bottom left, B above C at the right, each cut into 32 by 32 tiles. Block (x=1, y=1) computes the C tile of rows 32 to 63 and columns 32 to 63. For t = 0, 1, 2 it loads tile t of A (its rows, columns 32t on) into As and tile t of B (rows 32t on, its columns) into Bs, each thread 4 elements of each and 0 outside the matrix; __syncthreads(); adds TILE products from shared memory; __syncthreads(). Tile t = 2 is ragged, since K = 80 = 2 × 32 + 16](figures/tiled_matmul.svg)
#
# Each element of `A` and `B` now comes from global memory once per block
# instead of once per thread: `TILE` times fewer global loads. Here `TILE` is
# 32, and a block has `32 × 8` threads (`TILE_ROWS = 8` rows of threads), so each
# thread computes **4** elements of `C`, one column apart by 8 rows: rows
# `threadIdx.y + 8 r` for `r` = 0..3, column `threadIdx.x` of the block's tile.
# Loading is shared the same way: each thread loads 4 elements of `As` and 4 of
# `Bs`, at the same (row, column) positions of each tile, and **0** where the
# tile sticks out of the matrix (ragged edges: `M`, `N`, `K` need not be
# multiples of 32).
#
# Both barriers are needed: the first so that no thread computes from a tile
# that is still being loaded, the second so that no thread overwrites a tile
# (the next `t`) that others are still computing from. The emulator reports a
# missing one as a data race on `As` or `Bs`.
#
# Write `matmul_tiled<T>` and `launch_matmul_tiled(c, a, b)` (grid: one block per
# 32 × 32 tile of `C`).

# %% solution="ex_matmul_tiled" reference=true
MATMUL_TILED = Kernels(cuda_source(r"""
#define TILE 32
#define TILE_ROWS 8

template <typename T>
__global__ void matmul_tiled(T* c, const T* a, const T* b, long long M, long long N, long long K,
                             long long sa0, long long sa1, long long sb0, long long sb1) {
    __shared__ T As[TILE][TILE];
    __shared__ T Bs[TILE][TILE];
    ### BEGIN SOLUTION
    long long row0 = blockIdx.y * (long long)TILE, col = blockIdx.x * (long long)TILE + threadIdx.x;
    T acc[TILE / TILE_ROWS];
    for (int r = 0; r < TILE / TILE_ROWS; ++r)
        acc[r] = 0;
    for (long long k0 = 0; k0 < K; k0 += TILE) {
        for (int r = 0; r < TILE / TILE_ROWS; ++r) {
            int y = threadIdx.y + r * TILE_ROWS;
            long long arow = row0 + y, acol = k0 + threadIdx.x, brow = k0 + y;
            As[y][threadIdx.x] = (arow < M && acol < K) ? a[arow * sa0 + acol * sa1] : T(0);
            Bs[y][threadIdx.x] = (brow < K && col < N) ? b[brow * sb0 + col * sb1] : T(0);
        }
        __syncthreads();
        for (int k = 0; k < TILE; ++k) {
            T bk = Bs[k][threadIdx.x];
            for (int r = 0; r < TILE / TILE_ROWS; ++r)
                acc[r] += As[threadIdx.y + r * TILE_ROWS][k] * bk;
        }
        __syncthreads();
    }
    for (int r = 0; r < TILE / TILE_ROWS; ++r) {
        long long row = row0 + threadIdx.y + r * TILE_ROWS;
        if (row < M && col < N)
            c[row * N + col] = acc[r];
    }
    ### END SOLUTION
}
"""), extra="")


def launch_matmul_tiled(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """c = a @ b for 2-D a (M, K) and b (K, N) in any layout, c contiguous (M, N), with matmul_tiled."""
    ### BEGIN SOLUTION
    M, N = a.shape[0], b.shape[1]
    if M == 0 or N == 0:
        return
    grid = ((N + 31) // 32, (M + 31) // 32)  # one block per 32 x 32 tile of c, not a thread per element
    MATMUL_TILED("matmul_tiled", C_TYPES[a.dtype])(grid, (32, 8), matmul_args(c, a, b))
    ### END SOLUTION


MATMULS["tiled"] = launch_matmul_tiled


# %% tests="ex_matmul_tiled" points=3
expect_matmuls(launch_matmul_tiled)
a, b = torch.randn(64, 64, device=KERNEL_DEVICE), torch.randn(64, 64, device=KERNEL_DEVICE)
if not GPU:  # what tiling saves, counted by the emulator
    counts = {}
    for name, launch, kernel in [("naive", launch_matmul_naive, MATMUL_NAIVE("matmul_naive", "float")),
                                 ("tiled", launch_matmul_tiled, MATMUL_TILED("matmul_tiled", "float"))]:
        launch(torch.empty(64, 64), a, b)
        counts[name] = kernel.last_launch.counts
    print(f"64 x 64 x 64: naive {counts['naive'].global_loads:,} global loads; tiled {counts['tiled'].global_loads:,} "
          f"global loads and {counts['tiled'].shared_loads:,} shared loads")
    assert counts["tiled"].global_loads <= counts["naive"].global_loads // 16, \
        "the tiled kernel should read each element of a and b from global memory once per block (32x fewer loads)"
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
expect_random_matmuls(launch_matmul_tiled)
expect_matmul(launch_matmul_tiled, 70, 65, 33)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 13 (advanced) — `matmul`, register-blocked
#
# The tiled kernel reads shared memory twice per multiply-add. Shared memory is
# fast, but registers are faster: in a **register-blocked** kernel each thread
# computes an `8 × 8` block of `C`, and per step `k` it loads 8 values of `A` and
# 8 of `B` from shared memory into registers, then does 64 multiply-adds from
# registers — 4 loads per 16 multiply-adds in the tiled kernel become 16 per 64.
#
# The block's tile of `C` is `BM × BN = 128 × 128`, with `16 × 16` threads; `A`
# and `B` go through shared memory `BK = 8` columns (rows) at a time:
#
# - **load**: the `BM × BK` tile of `A` and the `BK × BN` tile of `B`, 1024
#   elements each, 4 per thread. Thread `t = threadIdx.y * 16 + threadIdx.x`
#   loads the elements `e = t + 256 r` (`r` = 0..3): of `A`, row `e / BK` and
#   column `e % BK` of the tile (consecutive threads read consecutive `k`, the
#   direction in which `A`'s rows are contiguous), stored **transposed** as
#   `As[e % BK][e / BK]`; of `B`, row `e / BN` and column `e % BN`, stored as
#   `Bs[e / BN][e % BN]`. Zero outside the matrices.
# - **compute**: for each of the `BK` steps, `a[i] = As[k][threadIdx.y + 16 i]`
#   and `b[j] = Bs[k][threadIdx.x + 16 j]` for `i, j` = 0..7, then
#   `acc[i][j] += a[i] * b[j]`.
# - **write**: `acc[i][j]` is `C[row0 + threadIdx.y + 16 i][col0 + threadIdx.x +
#   16 j]`, where it is inside `C`.
#
# The rows and columns of a thread are 16 apart (not 8 consecutive): so that the
# 32 threads of a warp read 32 consecutive floats of `Bs` at once (no bank
# conflicts) and write 16 consecutive elements of `C` (coalesced).
#
# Write `matmul_blocked<T>` and `launch_matmul_blocked(c, a, b)` (one block per
# 128 × 128 tile of `C`). Fast GEMMs go further — double buffering, vectorised
# loads, warp-level tiles, tensor cores — see siboehm's
# [How to optimize a CUDA matmul kernel](https://siboehm.com/articles/22/CUDA-MMM)
# and NVIDIA's [CUTLASS](https://github.com/NVIDIA/cutlass).

# %% solution="ex_matmul_blocked" reference=true
MATMUL_BLOCKED = Kernels(cuda_source(r"""
#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8

template <typename T>
__global__ void __launch_bounds__(256) matmul_blocked(T* c, const T* a, const T* b, long long M, long long N,
                                                      long long K, long long sa0, long long sa1, long long sb0,
                                                      long long sb1) {
    __shared__ T As[BK][BM];
    __shared__ T Bs[BK][BN];
    T acc[TM][TN];
    T af[TM], bf[TN];
    ### BEGIN SOLUTION
    long long row0 = blockIdx.y * (long long)BM, col0 = blockIdx.x * (long long)BN;
    int t = threadIdx.y * 16 + threadIdx.x;
    for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j)
            acc[i][j] = 0;
    for (long long k0 = 0; k0 < K; k0 += BK) {
        for (int r = 0; r < 4; ++r) {
            int e = t + 256 * r;
            long long arow = row0 + e / BK, acol = k0 + e % BK;
            As[e % BK][e / BK] = (arow < M && acol < K) ? a[arow * sa0 + acol * sa1] : T(0);
            long long brow = k0 + e / BN, bcol = col0 + e % BN;
            Bs[e / BN][e % BN] = (brow < K && bcol < N) ? b[brow * sb0 + bcol * sb1] : T(0);
        }
        __syncthreads();
        for (int k = 0; k < BK; ++k) {
            for (int i = 0; i < TM; ++i)
                af[i] = As[k][threadIdx.y + 16 * i];
            for (int j = 0; j < TN; ++j)
                bf[j] = Bs[k][threadIdx.x + 16 * j];
            for (int i = 0; i < TM; ++i)
                for (int j = 0; j < TN; ++j)
                    acc[i][j] += af[i] * bf[j];
        }
        __syncthreads();
    }
    for (int i = 0; i < TM; ++i) {
        long long row = row0 + threadIdx.y + 16 * i;
        for (int j = 0; j < TN; ++j) {
            long long col = col0 + threadIdx.x + 16 * j;
            if (row < M && col < N)
                c[row * N + col] = acc[i][j];
        }
    }
    ### END SOLUTION
}
"""), extra="")


def launch_matmul_blocked(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """c = a @ b for 2-D a (M, K) and b (K, N) in any layout, c contiguous (M, N), with matmul_blocked."""
    ### BEGIN SOLUTION
    M, N = a.shape[0], b.shape[1]
    if M == 0 or N == 0:
        return
    grid = ((N + 127) // 128, (M + 127) // 128)  # one block per 128 x 128 tile of c, not a thread per element
    MATMUL_BLOCKED("matmul_blocked", C_TYPES[a.dtype])(grid, (16, 16), matmul_args(c, a, b))
    ### END SOLUTION


MATMULS["blocked"] = launch_matmul_blocked


# %% tests="ex_matmul_blocked" points=3
expect_matmuls(launch_matmul_blocked)
expect_matmul(launch_matmul_blocked, 130, 9, 140)   # more than one block each way
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
expect_random_matmuls(launch_matmul_blocked, 3, 140)
### END HIDDEN TESTS

# %% [markdown]
# The backend's `matmul`, given: chapter 01's rules (1-D operands, broadcast
# batch dims), and one launch of the kernel `USE["matmul"]` names — `"tiled"`
# unless you choose another with `use_kernels(matmul="blocked")` — per matrix of
# the batch.

# %% reference=true
@register_cuda_kernel("matmul")
def cuda_matmul(a: Tensor, b: Tensor) -> Tensor:
    if a.dim() == 0 or b.dim() == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {a.dim()}D and {b.dim()}D")
    if a.dtype is not b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {a.dtype.name} != {b.dtype.name}")
    if a.dtype not in (float32, float64):
        raise RuntimeError(f"picotorch's CUDA backend multiplies float32 and float64 matrices, not {a.dtype.name}")
    x = a.unsqueeze(0) if a.dim() == 1 else a
    y = b.unsqueeze(-1) if b.dim() == 1 else b
    if x.shape[-1] != y.shape[-2]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({x.shape[-2]}x{x.shape[-1]} and "
                           f"{y.shape[-2]}x{y.shape[-1]})")
    batch = broadcast_shapes(x.shape[:-2], y.shape[:-2])
    x, y = x.expand(batch + x.shape[-2:]), y.expand(batch + y.shape[-2:])
    out = empty_on(batch + (x.shape[-2], y.shape[-1]), a.dtype, a.device)
    xt, yt, ot = x.to_torch(), y.to_torch(), out.to_torch()
    launch = MATMULS[USE["matmul"]]
    for index in np.ndindex(*batch):
        if x.shape[-1] == 0:
            launch_fill(ot[index], 0)
        else:
            launch(ot[index], xt[index], yt[index])
    if a.dim() == 1:
        out = out.squeeze(-2)
    if b.dim() == 1:
        out = out.squeeze(-1)
    return out


# %% [markdown]
# ## Exercise 14 — row `softmax`, numerically stable
#
# `softmax(x)[i] = exp(x[i]) / Σ_j exp(x[j])`, along the rows of a contiguous
# `(rows, cols)` matrix. Computed like that, `exp(100)` is `inf` in float32 and
# the row becomes `nan`. Every softmax subtracts the row's **maximum** `m`
# first — the result is the same, since `exp(x - m) / Σ exp(x - m)` divides
# `exp(-m)` out above and below — and then the largest term is `exp(0) = 1`.
#
# One block per row (and more rows per block, as in exercise 9: at most
# `max_blocks` blocks), in three passes over the row:
#
# 1. `m`: each thread's maximum over its share of the row, then the block's,
#    with a shared-memory tree (start from the row's first element, not from an
#    infinity);
# 2. `s = Σ exp(x - m)`: the same, with sums;
# 3. `out = exp(x - m) / s` — or, with `log_softmax` set, `x - m - log(s)`: the
#    same kernel gives the log-probabilities of a classifier's loss, where
#    `log(softmax(x))` would round tiny probabilities to `log(0) = -inf`.
#
# The block shares one `partial[SOFTMAX_THREADS]` array for both reductions:
# mind the barriers, as before — including between reading the maximum out of
# `partial[0]` and overwriting `partial` with the sums.
#
# Write `softmax_rows<T>(out, x, rows, cols, log_softmax)` and
# `launch_softmax(out, x, log=False, max_blocks=MAX_BLOCKS)`, with blocks of
# `reduction_threads(cols, SOFTMAX_THREADS)` threads. The given code after it
# registers your kernel as the `CUDA` kernel of chapter 04's operators
# `"softmax"` and `"log_softmax"`, and their backward formulas
# (`"_softmax_backward_data"`, `"_log_softmax_backward_data"`) with the
# backend's operations: from then on chapter 04's `softmax(x, dim)`,
# `log_softmax` and `cross_entropy` run on the device, backward included.
#
# Real PyTorch: [`aten/src/ATen/native/cuda/SoftMax.cu`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cuda/SoftMax.cu);
# [FlashAttention](https://arxiv.org/abs/2205.14135) rests on computing this
# maximum and sum in one pass (the "online softmax").

# %% solution="ex_softmax" reference=true
SOFTMAX_THREADS = 256
SOFTMAX = Kernels(cuda_source(r"""
#define SOFTMAX_THREADS 256

template <typename T>
__global__ void softmax_rows(T* out, const T* x, long long rows, long long cols, int log_softmax) {
    __shared__ T partial[SOFTMAX_THREADS];
    ### BEGIN SOLUTION
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* in = x + row * cols;
        T* o = out + row * cols;
        T m = in[0];
        for (long long c = threadIdx.x; c < cols; c += blockDim.x)
            m = max(m, in[c]);
        partial[threadIdx.x] = m;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s /= 2) {
            if (threadIdx.x < s)
                partial[threadIdx.x] = max(partial[threadIdx.x], partial[threadIdx.x + s]);
            __syncthreads();
        }
        m = partial[0];
        __syncthreads();
        T sum = 0;
        for (long long c = threadIdx.x; c < cols; c += blockDim.x)
            sum += exp(in[c] - m);
        partial[threadIdx.x] = sum;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s /= 2) {
            if (threadIdx.x < s)
                partial[threadIdx.x] += partial[threadIdx.x + s];
            __syncthreads();
        }
        sum = partial[0];
        __syncthreads();
        for (long long c = threadIdx.x; c < cols; c += blockDim.x)
            o[c] = log_softmax ? in[c] - m - log(sum) : exp(in[c] - m) / sum;
    }
    ### END SOLUTION
}
"""), extra="")


def launch_softmax(out: torch.Tensor, x: torch.Tensor, log: bool = False, max_blocks: int = MAX_BLOCKS) -> None:
    """out = softmax (log: log_softmax) of each row of the contiguous (rows, cols) x; out contiguous too."""
    ### BEGIN SOLUTION
    rows, cols = x.shape
    if rows == 0 or cols == 0:
        return
    SOFTMAX("softmax_rows", C_TYPES[x.dtype])((min(rows, max_blocks),), (reduction_threads(cols, SOFTMAX_THREADS),),
                                              (out, x, np.int64(rows), np.int64(cols), np.int32(bool(log))))
    ### END SOLUTION


def _softmax_on_device(x: Tensor, dim: int, log: bool) -> Tensor:
    """softmax along `dim` with your kernel: `dim` moved last, rows made contiguous, and back."""
    n = x.dim()
    d = wrap_dim(dim, n)
    order = [i for i in range(n) if i != d] + [d] if n else []
    moved = x.permute(*order).contiguous() if n else x.reshape(1)
    rows = moved.view(-1, moved.shape[-1]) if moved.numel() else moved.reshape(0, max(moved.shape[-1], 1))
    out = empty_on(rows.shape, x.dtype, x.device)
    launch_softmax(out.to_torch(), rows.to_torch(), log)
    if not n:
        return out.view(())
    inverse = [order.index(i) for i in range(n)]
    return out.view(moved.shape).permute(*inverse)


# The CUDA kernels of chapter 04's operators: softmax and log_softmax with your kernel, their backward formulas
# with the backend's operations (the same formulas as chapter 04's CPU kernels).
register_cuda_kernel("softmax")(lambda x, dim: _softmax_on_device(x, dim, False))
register_cuda_kernel("log_softmax")(lambda x, dim: _softmax_on_device(x, dim, True))


@register_cuda_kernel("_softmax_backward_data")
def softmax_backward_cuda(grad: Tensor, output: Tensor, dim: int) -> Tensor:
    return output * (grad - (grad * output).sum(dim, keepdim=True))


@register_cuda_kernel("_log_softmax_backward_data")
def log_softmax_backward_cuda(grad: Tensor, output: Tensor, dim: int) -> Tensor:
    return grad - output.exp() * grad.sum(dim, keepdim=True)


# %% tests="ex_softmax" points=3
def expect_softmax_rows(rows, cols, dtype=torch.float32, log=False, scale=1.0, max_blocks=MAX_BLOCKS, shift=0.0,
                        draw=inputs):
    """Your rows against torch's, within the error of a sum of `cols` terms in `dtype` (and a few ulps of exp)."""
    x = (draw.randn(rows, cols, dtype=dtype) * scale + shift).to(KERNEL_DEVICE)
    out, whole = poisoned((rows, cols), dtype, margin=8)
    what = (f"launch_softmax(out, x{', log=True' if log else ''}{', max_blocks=' + str(max_blocks) if max_blocks != MAX_BLOCKS else ''})"
            f" where x: {describe(x)}{f' times {scale}' if scale != 1 else ''}{f' plus {shift}' if shift else ''}"
            f" on {KERNEL_DEVICE}")
    with launching(what), recording() as launches:
        launch_softmax(out, x, log, max_blocks=max_blocks)
    expected = torch.log_softmax(x, 1) if log else torch.softmax(x, 1)
    tolerance = (max(cols, 1) + 8) * torch.finfo(dtype).eps
    expect_written(out, expected, what, rtol=tolerance, atol=tolerance)
    expect_untouched(whole, 8, what)
    within_max_blocks(launches, max_blocks, what)


for rows, cols in [(1, 1), (3, 10), (4, 300), (2, 257), (0, 5), (5, 0)]:
    expect_softmax_rows(rows, cols)
expect_softmax_rows(3, 50, scale=100.0)          # exp(100) is inf in float32: subtract the maximum
expect_softmax_rows(4, 33, log=True, scale=30.0)
expect_softmax_rows(6, 20, max_blocks=2)
expect_softmax_rows(2, 40, torch.float64, log=True)
x = torch.randn(3, 4, 5)
compare.assert_matches(softmax(on_device(x), 1), torch.softmax(x, 1).to(torch_device(DEVICE)),
                       f"softmax(x, 1) on {DEVICE} where x: {describe(x)}", rtol=1e-5, atol=1e-6)
leaf, theirs = on_device(x).requires_grad_(), x.clone().to(torch_device(DEVICE)).requires_grad_()
what = f"log_softmax(x, 2) on {DEVICE} where x: {describe(x)} requires grad"
with launching(what):
    out, walk = kernels_run("log_softmax", lambda: log_softmax(leaf, 2))
compare.assert_equal(walk, ["Autograd", "CUDA"], f"the kernels that {what} runs (chapter 04's operator, your kernel)")
g = torch.randn(3, 4, 5)
with launching(what + ", then backward(g)"):
    out.backward(on_device(g))
torch.log_softmax(theirs, 2).backward(g.to(torch_device(DEVICE)))
compare.assert_matches(leaf.grad, theirs.grad, what + ", then backward(g): the gradient", rtol=1e-5, atol=1e-5)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_softmax_rows(draw):
    expect_softmax_rows(draw(1, 8), draw.choice([1, 2, 255, 256, 257, draw(1, 700)]),
                        draw.choice([torch.float32, torch.float64]), draw.choice([False, True]),
                        draw.choice([1.0, 10.0, 80.0]), draw.choice([MAX_BLOCKS, 1, 3]), draw=draw)


def test_far_from_zero(draw):  # rows whose values are all far below 0 (or far above), in every dtype and direction
    for dtype in (torch.float32, torch.float64):
        for log in (False, True):
            expect_softmax_rows(draw(1, 4), draw.choice([1, 7, 300]), dtype, log, shift=-1000.0, draw=draw)
        expect_softmax_rows(2, draw.choice([3, 260]), dtype, draw.choice([False, True]), shift=1000.0, draw=draw)


def test_backend_softmax(draw):  # through the backend, backward included
    t = draw.noncontiguous(draw.randn(draw.shape(ndim=(1, 3), size=(1, 6))) * 3)
    dim, log = draw(-t.dim(), t.dim() - 1), draw.choice([False, True])
    what = f"softmax(x, {dim}, log={log}) on {DEVICE} where x: {describe(t)}, then backward(g)"
    leaf = on_device(t).requires_grad_()
    theirs = t.clone().to(torch_device(DEVICE)).requires_grad_()
    with launching(what):
        out = (log_softmax if log else softmax)(leaf, dim)
    want = (torch.log_softmax if log else torch.softmax)(theirs, dim)
    compare.assert_matches(out, want.detach(), what, rtol=1e-5, atol=1e-5)
    g = draw.randn(t.shape).to(torch_device(DEVICE))
    with launching(what):
        out.backward(on_device(g))
    want.backward(g)
    compare.assert_matches(leaf.grad, theirs.grad, what + ": the gradient", rtol=1e-4, atol=1e-5)


for_random_inputs(test_softmax_rows, 6)
for_random_inputs(test_far_from_zero, 1)
for_random_inputs(test_backend_softmax, 3)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Training on the device
#
# Chapter 02's autograd needs nothing new: its `Function`s redispatch below the
# `Autograd` key, which reaches the `CUDA` kernels for device tensors, so their
# forward and backward run wherever the tensors are. Chapters 03 and 04 call
# operators too: chapter 03's `Linear` is the operator `"linear"` (backward:
# `"linear_backward"`), chapter 04's `cross_entropy` is `"log_softmax"` (your
# kernel since exercise 14) then `"nll_loss"` (backward: `"nll_loss_backward"`),
# and chapter 04's `SGD` steps with in-place operators (`p.sub_(...)`). Each
# needs a `CUDA` kernel, exactly as chapters 03 and 04 registered the `CPU`
# ones. The next cell registers the linear ones (`x @ W.T + b` and its
# gradients, with your kernels) and Adam's fused updates (`lerp_`, `addcmul_`,
# `addcdiv_`, each composed of your kernels), and gives `arange_on(n,
# device)`; the loss is yours.

# %% reference=true
@register_cuda_kernel("linear")
def linear_cuda(x: Tensor, weight: Tensor, bias) -> Tensor:
    """Chapter 03's fused linear on a device: x @ weight.T + bias, with your kernels."""
    out = x @ weight.mT
    return out + bias if bias is not None else out


@register_cuda_kernel("linear_backward")
def linear_backward_cuda(x: Tensor, grad: Tensor, weight: Tensor, output_mask) -> tuple:
    g2, x2 = grad.reshape(-1, grad.shape[-1]), x.reshape(-1, x.shape[-1])
    grad_x = grad @ weight if output_mask[0] else None
    grad_w = g2.mT @ x2 if output_mask[1] else None
    grad_b = g2.sum(0) if output_mask[2] else None
    return grad_x, grad_w, grad_b


def arange_on(n: int, device) -> Tensor:
    """0, 1, ..., n - 1 (int64) on `device`."""
    return move(Tensor(Storage(np.arange(n, dtype=np.int64)), (n,), (1,), 0), device)


# chapter 04's Adam steps with torch's fused updates: on a device, each is composed of your kernels (torch
# has a kernel for each; so could you, written as the elementwise ones)
@register_cuda_kernel("lerp_")
def lerp_cuda(t: Tensor, end: Tensor, weight: float) -> Tensor:
    return t.add_((end - t) * weight)


@register_cuda_kernel("addcmul_")
def addcmul_cuda(t: Tensor, tensor1: Tensor, tensor2: Tensor, value=1) -> Tensor:
    return t.add_(tensor1 * tensor2 * value)


@register_cuda_kernel("addcdiv_")
def addcdiv_cuda(t: Tensor, tensor1: Tensor, tensor2: Tensor, value=1) -> Tensor:
    return t.add_(tensor1 / tensor2 * value)


# %% [markdown]
# ## Exercise 15 — the loss on the device: an MLP trained with your kernels
#
# Write the `CUDA` kernels of chapter 04's `"nll_loss"` and
# `"nll_loss_backward"`, with the backend's operations only (no NumPy:
# `.numpy()` of a device tensor is an error, so you cannot fall back on the CPU
# by accident). The arguments are chapter 04's: `log_probs` `(N, C)` (or one
# sample, `(C,)`), int64 class indices `target` `(N,)` (or `()`), `weight`
# (always `None` in picotorch), `reduction` (`"mean"`, `"sum"` or `"none"`)
# and `ignore_index` (a sample whose target is it counts for nothing, not even
# in the mean's denominator).
#
# - `nll_loss_cuda`: each sample's loss is `-log_probs[i, target[i]]`. Pick the
#   target's entries with a **one-hot mask**: `target.unsqueeze(1) ==
#   arange_on(C, device)` is `(N, C)`, `True` where the column is the target (a
#   comparison kernel). Select with chapter 02's `where(mask, log_probs, 0.0)`
#   rather than multiplying by the mask: a log-probability may be `-inf`, and
#   `-inf * 0` is `nan`. Sum each row, zero the ignored samples, then reduce:
#   `"none"` keeps the `N` losses (a 0-dim tensor for one sample), `"sum"` adds
#   them, `"mean"` divides the sum by the number of counted samples. With
#   chapter 04's `weight` (a `(C,)` tensor on the device: torch's per-class
#   weights), each counted sample's loss is times its class's weight — picked
#   with the same mask — and `"mean"` divides by the sum of those weights.
# - `nll_loss_backward_cuda`: the gradient of `log_probs` for `grad`, that of
#   the reduced loss: `-grad` (each sample's share of it: divided by the count
#   for `"mean"`, at least 1; a sample's own entry for `"none"`; times its
#   class's weight, with `weight`) at each counted sample's target, 0
#   elsewhere, in `log_probs`' shape.
#
# Like torch's CUDA kernel, yours does not check the targets' range (torch's
# fails with a device-side assert; reading a value back to check it would make
# the CPU wait for the GPU at every step).
#
# The tests train the same MLP, from the same weights, on digits (chapter 04's
# data), with chapter 04's `cross_entropy` and `SGD`, in picotorch on your
# device and in torch on the CPU — or on the GPU — and compare every loss, and
# every weight at the end; they also count the launches of your kernels.
#
# Real PyTorch: [`aten/src/ATen/native/cuda/Loss.cu`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cuda/Loss.cu)
# (`nll_loss_forward_out_cuda_template`, with one thread block reducing the losses).

# %% solution="ex_mlp" reference=true
@register_cuda_kernel("nll_loss")
def nll_loss_cuda(log_probs: Tensor, target: Tensor, weight, reduction: str, ignore_index: int) -> Tensor:
    """-log_probs[i, target[i]] for each sample i (0 where target[i] is ignore_index), reduced."""
    ### BEGIN SOLUTION
    scores = log_probs.unsqueeze(0) if log_probs.dim() == 1 else log_probs
    labels = target.reshape(-1)
    counted = labels != ignore_index
    one_hot = labels.unsqueeze(1) == arange_on(scores.shape[1], scores.device)
    losses = where(counted, -where(one_hot, scores, 0.0).sum(1), 0.0)
    if weight is not None:  # each sample's class weight (0 if ignored): its loss is times it, the mean divides by all
        counted = where(counted, where(one_hot, weight, 0.0).sum(1), 0.0)
        losses = losses * counted
    if reduction == "none":
        return losses.reshape(()) if log_probs.dim() == 1 else losses
    total = losses.sum()
    return total if reduction == "sum" else total / counted.sum()
    ### END SOLUTION


@register_cuda_kernel("nll_loss_backward")
def nll_loss_backward_cuda(grad: Tensor, log_probs: Tensor, target: Tensor, weight, reduction: str,
                           ignore_index: int) -> Tensor:
    """The gradient of nll_loss's log_probs, given grad, that of the reduced loss."""
    ### BEGIN SOLUTION
    scores = log_probs.unsqueeze(0) if log_probs.dim() == 1 else log_probs
    labels = target.reshape(-1)
    valid = labels != ignore_index
    one_hot = labels.unsqueeze(1) == arange_on(scores.shape[1], scores.device)
    counted = valid if weight is None else where(valid, where(one_hot, weight, 0.0).sum(1), 0.0)  # sample weights
    share = grad.reshape(-1)
    if reduction == "mean":  # as torch: -grad / total_weight, times each weight (a total of 0 gives nan)
        share = share / counted.sum()
    sample = share.expand(labels.shape) * counted  # each sample's share of the reduced loss's gradient
    return where(valid.unsqueeze(1), where(one_hot, -sample.unsqueeze(1), 0.0), 0.0).reshape(log_probs.shape)
    ### END SOLUTION


# %% tests="ex_mlp" points=3
from course.cuda.status import Where, recording
from course.datasets import load_digits
from picotorch import SGD, Linear, ReLU, Sequential, cross_entropy, nll_loss

DIGITS = load_digits()


def expect_nll(log_probs: torch.Tensor, target: torch.Tensor, reduction="mean", ignore_index=-100, weight=None):
    """nll_loss on the device against torch's, forward and backward (a random gradient for "none")."""
    where_to = torch_device(DEVICE)
    what = (f"nll_loss(x, target, reduction={reduction!r}, ignore_index={ignore_index}"
            f"{'' if weight is None else f', weight={weight.tolist()}'}) on {DEVICE} where x: "
            f"{describe(log_probs)}, target {target.tolist()}")
    theirs = log_probs.clone().to(where_to).requires_grad_()
    want = torch.nn.functional.nll_loss(theirs, target.to(where_to), None if weight is None else weight.to(where_to),
                                        reduction=reduction, ignore_index=ignore_index)
    leaf = on_device(log_probs).requires_grad_()
    mine = None if weight is None else on_device(weight)
    with launching(what):
        got, walk = kernels_run("nll_loss", lambda: nll_loss(leaf, on_device(target), reduction, ignore_index, mine))
    compare.assert_equal(walk, ["Autograd", "CUDA"], f"the kernels that {what} runs")
    compare.assert_equal(tuple(got.shape), tuple(want.shape), f"({what}).shape")
    compare.assert_matches(got, want.detach(), what, rtol=1e-5, atol=1e-6)
    g = torch.randn(want.shape, dtype=want.dtype)
    want.backward(g.to(where_to))
    with launching(what + ", then backward(g)"):
        got.backward(on_device(g))
    compare.assert_matches(leaf.grad, theirs.grad, what + ", then backward(g): the gradient of x", rtol=1e-5,
                           atol=1e-6)


def twin_mlp(sizes):
    """(yours, torch's): the same MLP, Linear and ReLU layers of the given sizes, with the same weights."""
    torch.manual_seed(inputs.randint(0, 2**31))
    theirs_layers, ours_layers = [], []
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        theirs_layers.append(torch.nn.Linear(n_in, n_out))
        ours_layers.append(Linear(n_in, n_out))
        if i < len(sizes) - 2:
            theirs_layers.append(torch.nn.ReLU())
            ours_layers.append(ReLU())
    theirs, ours = torch.nn.Sequential(*theirs_layers), Sequential(*ours_layers)
    weights = dict(theirs.named_parameters())
    with no_grad():
        for name, p in ours.named_parameters():
            p.copy_(weights[name].detach())
    return ours, theirs


def train_both(ours, theirs, x, y, steps, lr, device):
    """The same full-batch loop in picotorch (on `device`, chapter 04's cross_entropy and SGD) and in torch (on
    torch's side of `device`): the losses of each, as floats."""
    ours.to(device)
    theirs.to(torch_device(device))
    xs, ys = from_torch(x.clone()).to(device), from_torch(y.clone()).to(device)
    xt, yt = x.to(torch_device(device)), y.to(torch_device(device))
    ours_opt, theirs_opt = SGD(ours.parameters(), lr=lr), torch.optim.SGD(theirs.parameters(), lr=lr)
    mine, want = [], []
    for _ in range(steps):
        ours_opt.zero_grad()
        loss = cross_entropy(ours(xs), ys)
        loss.backward()
        ours_opt.step()
        mine.append(loss.item())
        theirs_opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(theirs(xt), yt)
        loss.backward()
        theirs_opt.step()
        want.append(loss.item())
    return mine, want


def expect_training(sizes, n, steps, lr):
    rows = torch.randperm(len(DIGITS.train_labels), generator=inputs.generator())[:n]
    x = torch.from_numpy(DIGITS.train_images[rows.numpy()][:, :sizes[0]].copy())
    y = torch.from_numpy(DIGITS.train_labels[rows.numpy()].copy()) % sizes[-1]
    ours, theirs = twin_mlp(sizes)
    what = (f"an MLP {' -> '.join(map(str, sizes))} trained on {n} digits on '{DEVICE}' by chapter 04's SGD "
            f"(lr={lr}, {steps} steps) and cross_entropy")
    with recording() as launches:
        with launching(what):
            losses, want = train_both(ours, theirs, x, y, steps, lr, DEVICE)
    compare.assert_matches(torch.tensor(losses), torch.tensor(want), f"{what}: the loss of each step",
                           rtol=1e-4, atol=1e-5)
    weights = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        compare.assert_equal(str(p.device), device_text(DEVICE), f"{what}: {name}.device after training")
        compare.assert_matches(p, weights[name].detach(), f"{what}: {name} after training", rtol=1e-4, atol=1e-5)
    places = {launch.where for launch in launches}
    expected_place = Where.GPU if GPU else Where.EMULATOR
    assert launches and places == {expected_place}, \
        f"{what}: your kernels should have run on the {expected_place.value}; the launches ran on {places or 'nothing'}"
    return losses, len(launches)


scores = torch.log_softmax(torch.randn(5, 3), 1)
labels = torch.tensor([0, 2, 1, 1, 0])
for reduction in ("mean", "sum", "none"):
    expect_nll(scores, labels, reduction)
expect_nll(scores, labels, "mean", ignore_index=1)  # two samples count for nothing, in the mean's count too
expect_nll(scores, labels, "none", ignore_index=0)
expect_nll(scores[1], labels[1], "none")            # one sample, (C,): a 0-dim loss
expect_nll(torch.tensor([[0.0, -math.inf], [-math.inf, 0.0]]), torch.tensor([0, 1]))  # -inf where no target is
for reduction in ("mean", "sum", "none"):  # class weights: the mean divides by the counted samples' weights
    expect_nll(scores, labels, reduction, ignore_index=1, weight=torch.tensor([0.5, 2.0, 3.0]))
losses, launched = expect_training((64, 16, 10), 48, 4, 0.5)
print(f"losses on {DEVICE}: {', '.join(f'{v:.4f}' for v in losses)} ({launched} kernel launches)")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_nll(draw):
    n, c = draw(1, 6), draw(1, 5)
    scores = torch.log_softmax(draw.randn(n, c, dtype=draw.choice([torch.float32, torch.float64])) * 3, 1)
    labels = torch.tensor([draw(0, c - 1) for _ in range(n)])
    reduction = draw.choice(["mean", "sum", "none"])
    ignore_index = draw.choice([-100, -100, 0, c - 1])
    if reduction == "mean" and bool((labels == ignore_index).all()):
        return  # every sample ignored: 0 / 0, tested on the CPU in chapter 04
    weight = draw.randn((c,), dtype=scores.dtype).abs() + 0.1 if draw(0, 2) == 0 else None
    if draw(0, 4) == 0:
        expect_nll(scores[0], labels[0], reduction, ignore_index, weight)
    else:
        expect_nll(scores, labels, reduction, ignore_index, weight)


for_random_inputs(test_nll, 12)
losses, _ = expect_training((64, inputs.randint(8, 24), 10), inputs.randint(20, 60), 5, inputs.choice([0.2, 0.5, 1.0]))
assert losses[-1] < losses[0], f"training with your kernels did not lower the loss: {losses}"
expect_training((32, 12, 8, 10), 30, 3, 0.3)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 16 — a mode that sees every operator
#
# Every call of picotorch goes down chapter 01's keys: `Autograd` (when an
# argument requires grad), then a backend, `CUDA` or `CPU`. Torch has one more
# kind of key, the **modes**: a key that is not on any tensor but in this
# thread's *include set*, so that every call has it. That is how
# `torch.utils._python_dispatch.TorchDispatchMode` works: its key (`Python`)
# sits below autograd and above the backends, and its handler,
# `__torch_dispatch__`, sees every aten operator that reaches it — the
# forward's, and the backward's, since the engine calls operators too:
#
# ```
#  x @ x.T               key set {Autograd, Python, CPU}  (Python: included by the mode)
#  Autograd              MmBackward0 recorded; redispatch below Autograd
#  Python                the mode logs "mm"; runs it below Python, Python excluded
#  CPU                   the kernel (its own calls: Python excluded, not logged)
# ```
#
# The given cell declares `DispatchKey.Python` (priority 4: below `Autograd`'s
# 8, above `CUDA`'s 1) and registers `mode_fallback` as its **fallback**, the
# key's kernel for every operator (`register_fallback`, chapter 01). Write:
#
# - `LoggingMode`: `with LoggingMode() as log:` puts the `Python` key in this
#   thread's include set (`IncludeDispatchKeys`), and makes the mode the
#   current one (the end of `MODE_STACK`); `__exit__` undoes both — putting
#   back what was there before, so that modes nest — even when the block
#   raises. `log` is the list of operator names the mode sees.
# - `mode_fallback(op, *args, **kwargs)`: append `op` to the current mode's
#   log, then run the operator below the `Python` key (`redispatch`) with the
#   key *excluded* meanwhile (`ExcludeDispatchKeys`), as torch runs
#   `__torch_dispatch__` with its mode off: the calls the kernels make are not
#   the program's, and must not be logged.
#
# The tests run the same programs under your mode and under a real
# `TorchDispatchMode`, and compare the operators, forward and backward, where
# picotorch's are named as aten's (`matmul` of two matrices is `mm`; torch also
# logs a `detach` for each tensor autograd saves, and transposes more in its
# backward formulas: those are left out). Try it:
# `with LoggingMode() as log: ((x @ x.T).exp().sum()).backward()`.
#
# Real PyTorch: [`torch/utils/_python_dispatch.py`](https://github.com/pytorch/pytorch/blob/main/torch/utils/_python_dispatch.py),
# the `Python` key in [`c10/core/DispatchKey.h`](https://github.com/pytorch/pytorch/blob/main/c10/core/DispatchKey.h),
# and the include/exclude guards of [`c10/core/impl/LocalDispatchKeySet.h`](https://github.com/pytorch/pytorch/blob/main/c10/core/impl/LocalDispatchKeySet.h).

# %% reference=true
DispatchKey.declare("Python")  # a mode's key (priority 4 in DISPATCH_KEYS: below Autograd, above CUDA and CPU)
MODE_STACK = []  # the active modes, innermost last


# %% [markdown]
# The next cell imports the tests' other side from the course's test kit: a
# real `TorchDispatchMode` that logs the name of every aten operator it sees
# (`TorchLog`), and `torch_log_of(program, args)`, which runs a program under
# it.

# %%
# The tests' other side (course.testing, not picotorch): a TorchDispatchMode that logs every aten operator it sees.
from course.testing.dispatch_log import TorchLog, torch_log_of


# %% solution="ex_mode" reference=true
class LoggingMode:
    """`with LoggingMode() as log:` the names of the operators this thread calls, in order."""

    def __init__(self):
        self.log = []

    def __enter__(self) -> list:
        ### BEGIN SOLUTION
        self.including = IncludeDispatchKeys(DispatchKey.Python)
        self.including.__enter__()
        MODE_STACK.append(self)
        return self.log
        ### END SOLUTION

    def __exit__(self, exc_type, exc_value, traceback):
        ### BEGIN SOLUTION
        MODE_STACK.pop()
        self.including.__exit__(exc_type, exc_value, traceback)
        return False
        ### END SOLUTION


def mode_fallback(op: str, *args, **kwargs):
    """The Python key's kernel for every operator: log it in the current mode, run it below the key."""
    ### BEGIN SOLUTION
    MODE_STACK[-1].log.append(op)
    with ExcludeDispatchKeys(DispatchKey.Python):
        return redispatch(op, DispatchKey.Python, *args, **kwargs)
    ### END SOLUTION


register_fallback(DispatchKey.Python, mode_fallback)
# "to" is a composite, as torch's aten::to (CompositeImplicitAutograd): it turns into "_to_copy" (or into nothing)
# before a mode sees it, so a mode logs the "_to_copy" that copies, as a TorchDispatchMode does.
register_kernel("to", DispatchKey.Python)(OPS["to"].kernels[DispatchKey.CPU.priority])

# %% tests="ex_mode" points=3
ATEN = {"matmul": "mm"}  # picotorch's operator -> torch's, where the names differ
COMPARED = {"add", "sub", "mul", "div", "neg", "exp", "tanh", "relu", "sum", "mm", "ones_like", "expand", "permute"}


def same_ops(ours, theirs, what):
    mine = [ATEN.get(op, op) for op in ours if ATEN.get(op, op) in COMPARED]
    torchs = [op for op in theirs if op in COMPARED]
    compare.assert_equal(mine, torchs, f"{what}: the operators your mode saw (all of them: {ours}), compared with "
                                       f"those a TorchDispatchMode saw ({theirs})")


def expect_same_log(program, shapes, what, device="cpu", grad=True, backward_log=False, draw=inputs):
    """program(*tensors) under your mode and under a TorchDispatchMode: the same operators forward (and, with
    backward_log, backward: for programs whose backward formulas torch and picotorch write alike), the same
    results and gradients."""
    values = [draw.randn(shape, dtype=torch.float64).to(torch_device(device)) for shape in shapes]
    theirs_in = [v.clone().requires_grad_(grad) for v in values]
    ours_in = [wrap_torch(v.clone(), device).requires_grad_(grad) for v in values]
    out_theirs, torch_ops = torch_log_of(program, theirs_in)
    with LoggingMode() as log:
        out = program(*ours_in)
    same_ops(log, torch_ops, f"{what} (forward)")
    compare.assert_matches(out, out_theirs.detach(), f"{what}: the result under your mode")
    if grad:
        _, torch_ops = torch_log_of(lambda t: t.backward(), [out_theirs])
        with LoggingMode() as log:
            out.backward()
        if backward_log:
            same_ops(log, torch_ops, f"{what} (backward)")
        compare.assert_equal(log[:1], ["ones_like"], f"{what}: the first operator of backward() under your mode")
        for i, (a, b) in enumerate(zip(ours_in, theirs_in)):
            if b.grad is None:
                compare.assert_equal(a.grad, None, f"{what}: the gradient of input {i}, which the program does not use")
            else:
                compare.assert_matches(a.grad, b.grad, f"{what}: the gradient of input {i} under your mode")


x = from_torch(torch.randn(3, 4))
with LoggingMode() as log:
    y = (x @ x.T).exp()
compare.assert_equal(log, ["permute", "matmul", "exp"], "the log of (x @ x.T).exp() (x.T is a permute; the "
                                                        "matmul kernel's own expand and numpy calls are not logged)")
compare.assert_equal(key_names(key_set(x)), ["CPU"], "the key set of x after the with block (Python must be gone)")
x.exp()
compare.assert_equal(log, ["permute", "matmul", "exp"], "the log after the with block: nothing more")
expect_same_log(lambda a: (a @ a.T).exp().sum(), [(3, 4)], "(x @ x.T).exp().sum()", backward_log=True)
try:
    with LoggingMode() as log:
        x.neg()
        raise KeyError("out of the block")
except KeyError:
    pass
compare.assert_equal(key_names(key_set(x)), ["CPU"], "the key set of x after a with block that raised")
with LoggingMode() as outer:
    x.neg()
    with LoggingMode() as inner:
        x.tanh()
    x.relu()
compare.assert_equal((outer, inner), (["neg", "relu"], ["tanh"]), "the logs of two nested modes (outer, inner)")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
UNARY = [("exp", lambda a: a.exp()), ("tanh", lambda a: a.tanh()), ("neg", lambda a: -a),
         ("relu", lambda a: a.relu())]
BINARY = [("+", lambda a, b: a + b), ("*", lambda a, b: a * b), ("-", lambda a, b: a - b),
          ("/", lambda a, b: a / (b * b + 1))]


def test_programs(draw):
    n, m = draw(1, 5), draw(1, 5)
    program, text = (lambda a, b: a), "x"  # composed without a loop: torch's mode is on while it runs
    for _ in range(draw(1, 4)):
        if draw(0, 1):
            name, f = draw.choice(UNARY)
            program = (lambda g, f: lambda a, b: f(g(a, b)))(program, f)
            text = f"{name}({text})"
        else:
            name, f = draw.choice(BINARY)
            program = (lambda g, f: lambda a, b: f(g(a, b), b))(program, f)
            text = f"({text} {name} y)"
    program = (lambda g: lambda a, b: g(a, b).sum())(program)

    expect_same_log(program, [(n, m), (n, m)], f"{text}.sum() for x, y of shape {(n, m)}",
                    grad=bool(draw(0, 1)), draw=draw)


for_random_inputs(test_programs, 12)
expect_same_log(lambda a, b: (a @ b).exp().sum(), [(2, 3), (3, 5)], "(a @ b).exp().sum()", backward_log=True)
expect_same_log(lambda a, b: (a @ b).relu().sum(), [(2, 3), (3, 5)], "(a @ b).relu().sum()")
expect_same_log(lambda a: (a * 2 - 1).sum(1).sum(), [(4, 3)], f"(x * 2 - 1).sum(1).sum() on {DEVICE}", device=DEVICE)
expect_same_log(lambda a: (a @ a.T).exp().sum(), [(3, 2)], f"(x @ x.T).exp().sum() on {DEVICE}", device=DEVICE,
                backward_log=True)
with LoggingMode() as outer:
    with LoggingMode() as inner:
        x.exp()
    with LoggingMode() as second:
        x.neg()
    x.sum()
compare.assert_equal((outer, inner, second), (["sum"], ["exp"], ["neg"]), "three nested modes")
compare.assert_equal(key_names(key_set(x)), ["CPU"], "the key set of x after nested modes")
compare.assert_equal(len(MODE_STACK), 0, "the mode stack after every mode has exited")
### END HIDDEN TESTS


# %% reference=true
# The names of this chapter that later chapters may use (`from picotorch import ...`): the framework. Not the
# exercises' aids: the tests' helpers stay in the test cells; the dispatcher is chapter 01's.
__all__ = ["UNARY_OPS", "BINARY_OPS", "DEVICE_TYPES", "Device", "CPU", "NO_GPU", "torch_device", "DeviceStorage", "wrap_torch",
           "empty_on", "parse_to", "device_keys", "common_device", "register_cuda_kernel",
           "VIEWS", "cpu_kernel", "move", "to_copy", "C_TYPES", "NUMPY_TYPES",
           "MATMULS", "MAX_BLOCKS", "ARITH", "COMPARE", "OP_CODES", "OPS_SOURCE", "family", "scalar", "cuda_source",
           "ALL_C_TYPES", "FAMILY_TYPES", "compiled_together", "Kernels", "launch_1d", "launch_2d", "FILL",
           "launch_fill", "full_like_cuda", "MAP", "launch_map", "STRIDED", "launch_map_strided", "copy_into",
           "cast_cuda", "clone_cuda", "contiguous_cuda", "setitem_cuda", "cuda_elementwise", "inplace_cuda",
           "WHERE", "where_cuda", "SUM_THREADS", "reduction_threads", "SUM", "launch_sum_rows", "SUM_ROWS", "USE",
           "use_kernels", "reduction_layout", "cuda_sum", "cuda_mean", "SUM_WARP", "launch_sum_rows_warp",
           "MATMUL_NAIVE", "matmul_args", "launch_matmul_naive", "MATMUL_TILED", "launch_matmul_tiled",
           "MATMUL_BLOCKED", "launch_matmul_blocked", "cuda_matmul", "SOFTMAX_THREADS", "SOFTMAX", "launch_softmax",
           "softmax_backward_cuda", "log_softmax_backward_cuda", "linear_cuda", "linear_backward_cuda", "arange_on",
           "lerp_cuda", "addcmul_cuda", "addcdiv_cuda",
           "nll_loss_cuda", "nll_loss_backward_cuda", "MODE_STACK", "LoggingMode", "mode_fallback"]

# %% [markdown]
# ## What runs where, and what to read next
#
# Without a GPU, everything you wrote ran on the emulator, which checked every
# access and every barrier — and measured nothing of speed. On a GPU, the same
# sources run through NVRTC and cupy on `torch.cuda` memory, and the course's
# `benchmarks/` compare them with torch's own kernels (cuBLAS for matmul): an
# elementwise kernel reaches most of the memory bandwidth easily; a matmul only
# with the tricks of exercise 13 and many more.
#
# - `course.cuda.compile_check(source, [name], arch="sm_90")` compiles a kernel
#   for an H100/H200 without one, and reports its registers, shared memory and
#   **spills** (registers that did not fit, and went to slow local memory).
# - Torch's own CUDA kernels live in `aten/src/ATen/native/cuda/`; the
#   dispatcher in `aten/src/ATen/core/dispatch/`.
#
# ## Check your work
#
# Save the notebook (Ctrl+S), then run the cell below: it re-runs the saved
# file in a fresh kernel, as the grader will, and lists every exercise.

# %%
check()
