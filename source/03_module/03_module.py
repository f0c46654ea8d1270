# ---
# jupyter:
#   course:
#     chapter: 03_module
#     title: Module
#     files:
#     - figures/setattr.svg
#     - figures/module_tree.svg
#     - figures/linear_shapes.svg
# ---

# %% [markdown]
# # Chapter 03 — Module
#
# Write `self.fc = nn.Linear(10, 2)` in a model's `__init__`, and PyTorch finds
# the new weights: `model.parameters()` hands them to the optimizer,
# `model.state_dict()` saves them, `model.to(torch.float64)` converts them. Nobody
# listed them anywhere. How?
#
# The answer is one method, `Module.__setattr__`. Every assignment to a module's
# attribute passes through it, and it **files** the value by its type: a
# `Parameter` into the module's `_parameters`, a `Module` into `_modules`. Those
# dictionaries make a tree, and everything else — `parameters()`,
# `state_dict()`, `train()`, `to()`, `repr()` — walks that tree.
#
# In this chapter you build that mechanism, then the layers on top of it, and
# you prove it works the strongest way there is: by loading the weights of a
# real `torch.nn` model into yours and getting the same outputs and gradients.
#
# | piece | in torch | exercise |
# |---|---|---|
# | `Parameter`: a tensor that is a model's weight | `torch.nn.Parameter` | 1 |
# | registration: `__setattr__`, `register_buffer`, `add_module` | `torch.nn.Module` | 2 |
# | the walk: `named_parameters`, `named_modules`, `children`... | `torch.nn.Module` | 3 |
# | saving and loading: `state_dict`, `load_state_dict` | `torch.nn.Module` | 4 |
# | modes and conversions: `train`, `eval`, `zero_grad`, `apply`, `to` | `torch.nn.Module` | 5 |
# | calling: `__call__`, forward hooks, `repr` | `torch.nn.Module` | 6 |
# | `Linear`, with torch's initialisation | `torch.nn.Linear` | 7 |
# | `ReLU`, `Tanh`, `Sigmoid`, `Flatten`, `Dropout` | `torch.nn` | 8 |
# | `Sequential`, `ModuleList` | `torch.nn` | 9 |
# | `LayerNorm`, `BatchNorm1d` | `torch.nn` | 10 |
# | `Embedding` | `torch.nn.Embedding` | 11 |
#
# **Time:** about 5 hours — eleven exercises and a written answer.
#
# **How this notebook works.** Cells with *YOUR CODE HERE* are yours; each is
# followed by a test cell. The visible tests are a first taste; at grading,
# hidden tests build random models in both worlds, copy a real torch model's
# weights into yours and compare everything. `check("ex_walk")` re-runs one
# exercise's visible tests; `check()` (last cell) checks the whole saved
# notebook as the grader will.
#
# **Your chapters 01 and 02.** `picotorch` in this folder is the course's
# reference solution of the chapters before this one, so that a mistake there
# cannot fail this chapter. To run this chapter on your own code instead, run
# `course use-mine 03_module` in a terminal (and `course use-reference
# 03_module` to go back).

# %%
import numpy as np
import torch

from course import Checker, compare, inputs

check = Checker("03_module")

# %% [markdown]
# ## 1. What we start from
#
# The next cell imports the `Tensor` of chapter 01 with the autograd of chapter
# 02. Like every cell marked so, and every exercise of this chapter, it becomes
# part of `picotorch` for the chapters after this one: the training loop of
# chapter 04 will train your modules.

# %% reference=true
import itertools
import math
import operator
from collections import OrderedDict, namedtuple

import numpy as np
import torch

from picotorch import (DispatchKey, DType, Function, GradMode, Tensor, add_methods, bool_, dispatch, empty, float32,
                       float64, from_numpy, from_torch, int64, no_grad, ones, redispatch, register, register_kernel,
                       tensor, zeros)

# %% [markdown]
# ## 2. A few more tensor methods
#
# Modules need to change tensors **in place**: loading a checkpoint copies new
# values into the weights that are already there (an optimizer holds those very
# objects), `zero_grad(set_to_none=False)` zeroes a gradient, initialisation
# fills a weight with random numbers. The cells below (given) add them to
# `Tensor`, with torch's names and torch's rule that an in-place change of a
# tensor that requires grad happens only inside `no_grad()`:
#
# | method | does |
# |---|---|
# | `t.copy_(src)` | writes `src`'s values into `t` (converting the dtype) |
# | `t.zero_()`, `t.fill_(value)` | writes zeros, or one value, everywhere |
# | `t.uniform_(low, high)`, `t.normal_(mean, std)` | random values |
# | `t.data`, `t.data = other` | a detached view of `t`; and, assigned, makes `t` (the same object) hold `other`'s memory |
# | `t.to(dtype)`, `t.to(device)`, `t.to(device, dtype)` | `t` itself when nothing changes, else a converted copy |
# | `t.is_floating_point()` | is its dtype `float32` or `float64`? |
#
# First, the arguments of `t.to(...)`. Devices: picotorch knows only `"cpu"`
# (chapter 05 adds `"cuda"`); asking for any other is an error that says so.
# `parse_to` reads every form torch accepts (a device, a dtype, both, another
# tensor, keywords) into one `(device, dtype)` pair.

# %% reference=true
DEVICES = ["cpu"]  # the devices picotorch knows; chapter 05 adds "cuda"
TORCH_DTYPES = {float32: torch.float32, float64: torch.float64, int64: torch.int64, bool_: torch.bool}


def device_name(device) -> str:
    """'cpu' for "cpu" or torch.device("cpu"); an error for a device picotorch does not have."""
    name = str(device)
    if name.split(":")[0] not in DEVICES:
        raise RuntimeError(f"picotorch has no device {name!r}: it knows {', '.join(map(repr, DEVICES))} "
                           "(chapter 05 adds 'cuda')")
    return name


def dtype_arg(dtype):
    """A picotorch dtype from a picotorch or a torch dtype (None stays None)."""
    if dtype is None or isinstance(dtype, DType):
        return dtype
    for ours_, theirs in TORCH_DTYPES.items():
        if dtype == theirs:
            return ours_
    raise TypeError(f"picotorch has no dtype {dtype!r}")


def parse_to(*args, **kwargs) -> tuple:
    """(device, dtype) from the arguments of .to(): (device), (dtype), (device, dtype), (tensor),
    or keywords device=, dtype= (non_blocking= and copy= are accepted and ignored)."""
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    kwargs.pop("copy", None)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    for arg in args:
        if isinstance(arg, (DType, torch.dtype)):
            dtype = arg
        elif isinstance(arg, (Tensor, torch.Tensor)):
            device, dtype = arg.device, arg.dtype
        elif isinstance(arg, (str, torch.device)):
            device = arg
        elif isinstance(arg, bool) or arg is None:  # non_blocking given by position, or nothing
            continue
        else:
            raise TypeError(f"to() received an invalid combination of arguments: {arg!r}")
    return (None if device is None else device_name(device)), dtype_arg(dtype)

# %% [markdown]
# picotorch has no random number generator of its own: `uniform_`, `normal_`
# and `bernoulli` **borrow torch's**. So after `torch.manual_seed(0)`, your
# layers draw exactly the numbers torch's layers would draw — and the tests can
# check your initialisation exactly, not only statistically.

# %% reference=true
def torch_generator_values(shape, dtype: DType, draw) -> np.ndarray:
    """Numbers drawn by torch's default generator: draw(a new torch tensor of `shape`) fills it."""
    t = torch.empty(tuple(shape), dtype=TORCH_DTYPES[dtype])
    draw(t)
    return t.numpy()


def bernoulli(shape, p: float, dtype: DType = float32) -> Tensor:
    """1 with probability p, else 0, drawn by torch's generator (as torch.empty(shape).bernoulli_(p))."""
    return from_numpy(torch_generator_values(shape, dtype, lambda t: t.bernoulli_(p)))

# %% [markdown]
# Each change is an operator of chapter 01's dispatcher. `t.to(...)` is
# `"to"`, which reads its arguments and returns `t` itself when nothing
# changes; a change of dtype is the operator `"_to_copy"`, whose Autograd
# kernel (`ToCopy`, registered with chapter 02's `@register`) sends the
# gradient back converted. It already takes torch's `device` argument, which
# the CPU kernel leaves alone until chapter 05 brings a second device — torch's
# `aten::to` over `aten::_to_copy`, in
# [`aten/src/ATen/native/TensorConversions.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/TensorConversions.cpp).
# `"write"` and `"copy_"` write values into a tensor's memory.

# %% reference=true
@register("_to_copy")
class ToCopy(Function):
    """The Autograd kernel of "_to_copy"(x, dtype, device=None), torch's aten::_to_copy: a converted (and, from
    chapter 05 on, moved) copy, whose gradient goes back by the same operator, in x's dtype and on x's device."""
    @staticmethod
    def forward(ctx, x, dtype, device=None):
        ctx.dtype, ctx.device = x.dtype, x.device
        return redispatch("_to_copy", DispatchKey.Autograd, x, dtype, device)

    @staticmethod
    def backward(ctx, grad):
        others = (None,) * (len(ctx.needs_input_grad) - 1)  # for dtype (and device, when it was given)
        return (dispatch("_to_copy", grad, ctx.dtype, ctx.device),) + others


@register_kernel("_to_copy", DispatchKey.CPU)
def _to_copy_cpu(x: Tensor, dtype: DType, device=None) -> Tensor:
    """(Every tensor is on the CPU in this chapter: `device` is the CPU, or None.)"""
    return from_numpy(x.numpy().astype(dtype.numpy))


@register_kernel("write", DispatchKey.CPU)
def _write_cpu(t: Tensor, values) -> None:
    """t's elements = values (a number or an array that broadcasts to t's shape, computed on the CPU)."""
    t.numpy()[...] = values


@register_kernel("copy_", DispatchKey.CPU)
def _copy_cpu(t: Tensor, src) -> Tensor:
    values = src.numpy() if isinstance(src, Tensor) else src.detach().cpu().numpy() \
        if isinstance(src, torch.Tensor) else src
    return t._write(values, "copy_()")


# "to" parses its arguments and copies only when something changes: a composite of "_to_copy", as torch's
# aten::to is (TensorConversions.cpp). Its Autograd key falls through; "_to_copy" records the node.
@register_kernel("to", DispatchKey.CPU)
def _to_cpu(t: Tensor, *args, **kwargs) -> Tensor:
    device, dtype = parse_to(*args, **kwargs)
    if device is not None and device != t.device:
        raise NotImplementedError(f"picotorch cannot move a tensor from {t.device} to {device} yet")
    if dtype is None or dtype is t.dtype:
        return t
    return dispatch("_to_copy", t, dtype)

# %% [markdown]
# Last, the methods of the table above, added to `Tensor`: each in-place one
# refuses a tensor that requires grad while grad mode is on, then calls the
# dispatcher.

# %% reference=true
@add_methods(Tensor)
class ModuleSupport:
    def _write(self, values, what: str) -> "Tensor":
        if GradMode.enabled and self.requires_grad:
            raise RuntimeError(f"{what} on a tensor that requires grad: picotorch's autograd does not record "
                               "in-place operations; do it inside no_grad()")
        dispatch("write", self, values)
        return self

    def copy_(self, src) -> "Tensor":
        return dispatch("copy_", self, src)

    def zero_(self) -> "Tensor":
        return self._write(0, "zero_()")

    def fill_(self, value) -> "Tensor":
        return self._write(value, "fill_()")

    def uniform_(self, low: float = 0.0, high: float = 1.0) -> "Tensor":
        return self._write(torch_generator_values(self.shape, self.dtype, lambda t: t.uniform_(low, high)),
                           "uniform_()")

    def normal_(self, mean: float = 0.0, std: float = 1.0) -> "Tensor":
        return self._write(torch_generator_values(self.shape, self.dtype, lambda t: t.normal_(mean, std)),
                           "normal_()")

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    @property
    def data(self) -> "Tensor":
        return self.detach()

    @data.setter
    def data(self, value: "Tensor") -> None:
        self._storage, self._shape, self._stride, self._offset = (value._storage, value._shape, value._stride,
                                                                  value._offset)

    def to(self, *args, **kwargs) -> "Tensor":
        return dispatch("to", self, *args, **kwargs)


# %% [markdown]
# ## Exercise 1 — `Parameter`
#
# A **parameter** is a tensor that is part of a model: a weight, a bias. In
# torch, `nn.Parameter` is a subclass of `Tensor` that changes only two things:
#
# - a new parameter **requires grad** (unless you pass `requires_grad=False`),
#   and is a leaf — even when made from a computed tensor;
# - its **type** says "I am a parameter", which is what `Module.__setattr__`
#   (exercise 2) looks at to file it.
#
# `Parameter(data)` does not copy: it is a new tensor object over **the same
# memory** as `data` (same storage, shape, strides and offset), as torch's is.
# `Parameter()` with no data is an empty float32 tensor of shape `(0,)`. Its
# `repr` is torch's: `Parameter containing:` on a line of its own, then the
# tensor's repr.
#
# Real PyTorch: [`torch/nn/parameter.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/parameter.py).

# %% solution="ex_parameter" reference=true
class Parameter(Tensor):
    """A tensor that is a module's weight: a leaf that requires grad, filed by Module.__setattr__."""

    def __init__(self, data: Tensor = None, requires_grad: bool = True):
        ### BEGIN SOLUTION
        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter(data) needs a picotorch Tensor, not {type(data).__name__}")
        super().__init__(data._storage, data._shape, data._stride, data._offset)
        self.requires_grad_(requires_grad)
        ### END SOLUTION

    def __repr__(self):
        ### BEGIN SOLUTION
        return "Parameter containing:\n" + super().__repr__()
        ### END SOLUTION


# %% [markdown]
# The next cell holds what the tests of the whole chapter use, and you may use
# it too. `OUR_NN` is your `nn`: `OUR_NN.Linear` is the `Linear` you will write
# (looked up when used), so that the same model-building code runs once with
# `torch.nn` and once with `OUR_NN`. `ours(t)` makes your tensor from a torch
# tensor: same values, same layout, no shared memory.

# %%
import types

from course.testing import describe, for_random_inputs, same_error, same_layout_copy


class OurNN:
    """Your picotorch as an `nn` namespace: OUR_NN.Module is your Module, looked up when it is used."""

    def __getattr__(self, name):
        namespace = globals()
        if name not in namespace:
            raise AttributeError(f"there is no {name} yet: run the cell that defines it")
        return namespace[name]


OUR_NN = OurNN()


def ours(t: torch.Tensor) -> Tensor:
    """Your tensor with t's values and layout (not sharing t's memory)."""
    return from_torch(same_layout_copy(t))


# %% tests="ex_parameter" points=1
def expect_parameter(t: torch.Tensor, requires_grad=True, computed=False):
    what = f"Parameter(x{'' if requires_grad else ', requires_grad=False'}) for x: {describe(t)}"
    x = ours(t)
    if computed:
        x = x.requires_grad_() * 1
        what += " where x was computed (x = y * 1 for a y that requires grad)"
    theirs = torch.nn.Parameter(same_layout_copy(x.detach().to_torch()), requires_grad=requires_grad)
    p = Parameter(x, requires_grad=requires_grad)
    assert isinstance(p, Tensor), f"{what} is not a Tensor: a Parameter is a kind of tensor (a subclass)"
    assert isinstance(p, Parameter), f"{what} is not a Parameter"
    compare.assert_matches(p, theirs.detach(), what, check_strides=True, check_offset=True)
    compare.assert_equal(p.requires_grad, theirs.requires_grad, f"{what}.requires_grad")
    compare.assert_equal(p.is_leaf, True, f"{what}.is_leaf")
    assert p.grad is None, f"{what}.grad should be None"
    if t.numel():
        compare.assert_shares_memory(p, x, f"{what} (a parameter is a new tensor over the same memory)")
    compare.assert_equal(repr(p).split("\n")[0], repr(theirs).split("\n")[0], f"the first line of repr({what})")
    return p


p = expect_parameter(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
expect_parameter(torch.tensor([1.5, -2.0]), requires_grad=False)
expect_parameter(torch.tensor([0.5, 1.0]), computed=True)
expect_parameter(torch.arange(8.0).reshape(2, 4)[:, 1:].t())  # a view: strides (1, 4), offset 1, kept as they are
compare.assert_equal(tuple(Parameter().shape), tuple(torch.nn.Parameter().shape), "Parameter().shape")
(p * p).sum().backward()
compare.assert_matches(p.grad, torch.tensor([[2.0, 4.0], [6.0, 8.0]]), "p.grad after (p * p).sum().backward()")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_parameters(draw):
    t = draw.noncontiguous(draw.randn(draw.shape(ndim=(0, 3), allow_zero=True),
                                      dtype=draw.choice([torch.float32, torch.float64])))
    expect_parameter(t, requires_grad=draw.choice([True, False]), computed=draw.choice([True, False]))


for_random_inputs(test_parameters, 20)
compare.assert_raises(RuntimeError, Parameter, "Parameter(x) for an int64 x (only floating point can require grad)",
                      ours(torch.tensor([1, 2])))
q = Parameter(ours(torch.tensor([1, 2])), requires_grad=False)
compare.assert_equal(q.requires_grad, False, "Parameter(int64 x, requires_grad=False).requires_grad")
compare.assert_equal(type(p.detach()) is Parameter, False, "type(p.detach()) is Parameter (torch gives a plain tensor)")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2 — registration: `__setattr__` files every value
#
# A `Module` keeps what it owns in three ordered dictionaries (set up by
# `__init__`, given):
#
# | dictionary | holds | filled by |
# |---|---|---|
# | `_parameters` | its own `Parameter`s (or `None`) | `self.w = Parameter(...)`, `register_parameter` |
# | `_buffers` | tensors that are state but not weights, e.g. BatchNorm's running mean | `register_buffer` |
# | `_modules` | its sub-modules (or `None`) | `self.fc = Linear(...)`, `add_module` |
#
# ![Module.__setattr__(name, value) files each assignment by its type: self.w = Parameter(...) into _parameters (a Parameter, or None for a parameter); self.running_mean = t into _buffers (a tensor, where the name is a buffer); self.fc = Linear(4, 2) into _modules (a Module, or None for a module); self.p = 0.5 into __dict__, a plain attribute. parameters(), state_dict(), to() and train() read the three dictionaries](figures/setattr.svg)
#
# plus `_non_persistent_buffers_set`, the names of the buffers that
# `state_dict()` leaves out (exercise 4). Values filed there are **not** in the
# instance's `__dict__`. Write, as torch does:
#
# **`__setattr__(name, value)`**, which Python calls for every `self.name = value`:
#
# 1. a `Parameter`: remove `name` from `__dict__`, `_buffers`, `_modules` and
#    the non-persistent set, then `register_parameter(name, value)`. (Before
#    `Module.__init__` has run there is no `_parameters`:
#    `AttributeError("cannot assign parameters before Module.__init__() call")`.)
# 2. else, if `name` is already a parameter: only `None` may replace it
#    (`register_parameter(name, None)`); anything else is a `TypeError`
#    (`"cannot assign 'Tensor' as parameter 'w' (torch.nn.Parameter or None expected)"`).
# 3. else a `Module`: remove `name` from `__dict__`, `_parameters`, `_buffers`
#    and the non-persistent set, and put it in `_modules` (the same
#    `AttributeError` before `__init__`, with "module").
# 4. else, if `name` is already a sub-module: only `None` may replace it
#    (`TypeError` otherwise).
# 5. else, if `name` is already a buffer: a `Tensor` or `None` replaces it
#    (`TypeError` otherwise).
# 6. else: an ordinary attribute, stored the ordinary way (`object.__setattr__`).
#
# **`__getattr__(name)`**: Python calls it only when normal lookup fails (so
# ordinary attributes never reach it). Look in `_parameters`, `_buffers`,
# `_modules`, in that order; else `AttributeError("'Linear' object has no attribute 'x'")`
# with the class's name.
#
# **`__delattr__(name)`**: delete from whichever of the three holds it (and from
# the non-persistent set), else the ordinary way.
#
# **`register_parameter(name, param)`**, **`register_buffer(name, tensor,
# persistent=True)`**, **`add_module(name, module)`** check the name — write the
# checks once, in `_check_name(module, name, kind, registry)` — then file the
# value (a re-registered name keeps its place in the dictionary). Torch's
# errors:
#
# | case | error |
# |---|---|
# | called before `Module.__init__` | `AttributeError` |
# | `name` not a `str` | `TypeError` |
# | `name` contains `"."`, or is `""` | `KeyError` |
# | `name` is an attribute that is not already of this kind (e.g. a method, or a buffer named like an existing parameter) | `KeyError` |
# | wrong value: not a `Parameter`/`Tensor`/`Module` (and not `None`) | `TypeError` |
# | `register_parameter` of a computed tensor (`grad_fn` is set) | `ValueError` |
#
# `register_buffer` also records the buffer in (or removes it from)
# `_non_persistent_buffers_set`.
#
# Real PyTorch: `__setattr__`, `__getattr__`, `__delattr__`, `register_parameter`,
# `register_buffer` and `add_module` in
# [`torch/nn/modules/module.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/module.py).

# %% solution="ex_registration" reference=true
def _check_name(module, name, kind: str, registry: dict) -> None:
    """torch's checks of a name about to be registered as a `kind` ("parameter", "buffer", "module")."""
    ### BEGIN SOLUTION
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string. Got {type(name).__name__}")
    if "." in name:
        raise KeyError(f'{kind} name can\'t contain "."')
    if name == "":
        raise KeyError(f'{kind} name can\'t be empty string ""')
    if hasattr(module, name) and name not in registry:
        raise KeyError(f"attribute '{name}' already exists")
    ### END SOLUTION


class Module:
    """The base class of every layer and model: it files parameters, buffers and sub-modules."""

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def register_parameter(self, name: str, param) -> None:
        ### BEGIN SOLUTION
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_name(self, name, "parameter", self._parameters)
        if param is None:
            self._parameters[name] = None
            return
        if not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                            "(torch.nn.Parameter or None required)")
        if param.grad_fn is not None:
            raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must be "
                             "created explicitly.")
        self._parameters[name] = param
        ### END SOLUTION

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        ### BEGIN SOLUTION
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        _check_name(self, name, "buffer", self._buffers)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(torch Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)
        ### END SOLUTION

    def add_module(self, name: str, module) -> None:
        ### BEGIN SOLUTION
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if "_modules" not in self.__dict__:
            raise AttributeError("cannot assign module before Module.__init__() call")
        _check_name(self, name, "module", self._modules)
        self._modules[name] = module
        ### END SOLUTION

    register_module = add_module

    def __setattr__(self, name: str, value) -> None:
        ### BEGIN SOLUTION
        def remove_from(*places):
            for place in places:
                if name in place:
                    if isinstance(place, dict):
                        del place[name]
                    else:
                        place.discard(name)

        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            remove_from(self.__dict__, self._buffers, self._modules, self._non_persistent_buffers_set)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        else:
            modules = self.__dict__.get("_modules")
            if isinstance(value, Module):
                if modules is None:
                    raise AttributeError("cannot assign module before Module.__init__() call")
                remove_from(self.__dict__, self._parameters, self._buffers, self._non_persistent_buffers_set)
                modules[name] = value
            elif modules is not None and name in modules:
                if value is not None:
                    raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' "
                                    "(torch.nn.Module or None expected)")
                modules[name] = value
            else:
                buffers = self.__dict__.get("_buffers")
                if buffers is not None and name in buffers:
                    if value is not None and not isinstance(value, Tensor):
                        raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                        "(torch.Tensor or None expected)")
                    buffers[name] = value
                else:
                    object.__setattr__(self, name, value)
        ### END SOLUTION

    def __getattr__(self, name: str):
        ### BEGIN SOLUTION
        for place in ("_parameters", "_buffers", "_modules"):
            registry = self.__dict__.get(place)
            if registry is not None and name in registry:
                return registry[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        ### END SOLUTION

    def __delattr__(self, name: str) -> None:
        ### BEGIN SOLUTION
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._buffers:
            del self._buffers[name]
            self._non_persistent_buffers_set.discard(name)
        elif name in self._modules:
            del self._modules[name]
        else:
            object.__delattr__(self, name)
        ### END SOLUTION


# %% [markdown]
# ### Building random models in both worlds
#
# The tests of exercises 2 to 6 write a random **program** of registrations —
# new sub-modules, parameters, buffers (persistent or not), `None`s, plain
# attributes, a parameter or a sub-module shared by two owners, deletions,
# re-assignments, and calls torch refuses — and run it once on `torch.nn.Module`s
# and once on yours. `ModelPair` keeps both and knows which object of yours
# stands for which object of torch's. It lives in the course's test kit
# (`course/testing/model_pair.py`); the next cell points it at your `nn`. Read
# the list of steps in `random_program` there to see what your `Module` will
# meet.

# %%
from course.testing.model_pair import NAMES, expect_same_object
from course.testing.model_pair import ModelPair as TorchAndYours


class ModelPair(TorchAndYours):
    """A model built with torch.nn and with your nn (OUR_NN); your tensors made by ours()."""
    nn = OUR_NN
    to_ours = staticmethod(ours)


random_pair = ModelPair.random


# %% tests="ex_registration" points=3
def expect_registries(pair: ModelPair):
    """Every module's _parameters, _buffers, _modules and non-persistent set, and attribute access."""
    for i, (theirs, mine) in enumerate(zip(pair.theirs_pool, pair.ours_pool)):
        for place in ("_parameters", "_buffers", "_modules"):
            keys, want = list(getattr(mine, place).keys()), list(getattr(theirs, place).keys())
            compare.assert_equal(keys, want, f"list(m{i}.{place}) {pair.where()}")
            for key in want:
                expect_same_object(getattr(mine, place)[key], getattr(theirs, place)[key], pair,
                                   f"m{i}.{place}[{key!r}] {pair.where()}")
                assert key not in vars(mine), (f"m{i}.{key} is in the instance's __dict__ as well as in {place} "
                                               f"{pair.where()}: a registered value lives only in its dictionary")
                expect_same_object(getattr(mine, key), getattr(theirs, key), pair, f"m{i}.{key} {pair.where()}")
        compare.assert_equal(sorted(mine._non_persistent_buffers_set), sorted(theirs._non_persistent_buffers_set),
                             f"m{i}._non_persistent_buffers_set {pair.where()}")
        for name in NAMES:
            if name in vars(theirs):  # a plain attribute
                value = vars(theirs)[name]
                got = getattr(mine, name, "<no such attribute>")
                if isinstance(value, torch.Tensor):
                    expect_same_object(got, value, pair, f"m{i}.{name} (a plain attribute) {pair.where()}")
                else:
                    compare.assert_equal(got, value, f"m{i}.{name} (a plain attribute) {pair.where()}")
            elif not any(name in getattr(theirs, p) for p in ("_parameters", "_buffers", "_modules")):
                compare.assert_raises(AttributeError, getattr, f"m{i}.{name} {pair.where()}", mine, name)


pair = ModelPair()
pair.parameter(0, "w", (3, 2))
pair.new_module(0, "fc")
pair.parameter(1, "b", (2,))
pair.buffer(1, "mean", (2,))
pair.buffer(1, "scale", (2,), persistent=False)
pair.assign(0, "alpha", "number")
pair.assign(1, "mean", "tensor")         # replaces the buffer
pair.assign(0, "w", "None")              # a parameter may become None
pair.parameter(0, "w", (3, 2))           # and a parameter again, in the same place
pair.delete(1, "scale")
pair.buffer(0, "scale", (2,), persistent=False)  # a non-persistent buffer that stays
pair.buffer(0, "gamma", (2,), persistent=False)
pair.buffer(0, "gamma", (2,))                    # registered again, persistent: out of the non-persistent set
pair.parameter(0, "alpha", (2,))                 # a Parameter over a plain attribute: out of __dict__
pair.parameter(1, "mean", (2,))                  # a Parameter over a buffer: out of _buffers
pair.new_module(1, "head")
pair.assign(1, "head", "None")                   # a sub-module may become None
pair.buffer(1, "layer", (2,))
pair.assign(1, "layer", "None")                  # and so may a buffer
expect_registries(pair)
pair.both("m0.w = randn(2)  # a plain tensor where a parameter is", lambda m: setattr(m[0], "w", inputs.randn(2) if m is pair.theirs_pool else ours(inputs.randn(2))))
pair.both("m0.fc = 3  # a number where a module is", lambda m: setattr(m[0], "fc", 3))
pair.both("m0.scale = 3  # a number where a buffer is", lambda m: setattr(m[0], "scale", 3))
pair.both("m0.register_parameter('a.b', Parameter(...))", lambda m: m[0].register_parameter("a.b", getattr(m[0], "w")))
pair.both("m0.register_parameter(3, None)  # a name that is not a str", lambda m: m[0].register_parameter(3, None))
pair.both("m0.register_buffer('', None)", lambda m: m[0].register_buffer("", None))
pair.both("m0.register_buffer('forward', randn(2))", lambda m: m[0].register_buffer("forward", inputs.randn(2) if m is pair.theirs_pool else ours(inputs.randn(2))))
pair.both("m0.register_buffer('w', randn(2))  # the name of a parameter", lambda m: m[0].register_buffer("w", inputs.randn(2) if m is pair.theirs_pool else ours(inputs.randn(2))))
pair.both("m0.register_buffer('b2', 3)  # not a tensor", lambda m: m[0].register_buffer("b2", 3))
pair.both("m0.add_module('net', 3)  # not a Module", lambda m: m[0].add_module("net", 3))
expect_registries(pair)
compare.assert_raises(AttributeError, getattr, "m0.nothing", pair.ours, "nothing")
compare.assert_raises(AttributeError, delattr, "del m0.nothing", pair.ours, "nothing")


class Early(OUR_NN.Module):
    def __init__(self, value):
        self.w = value
        super().__init__()


class EarlyTorch(torch.nn.Module):
    def __init__(self, value):
        self.w = value
        super().__init__()


for value_pair in [(torch.nn.Parameter(torch.ones(2)), OUR_NN.Parameter(ours(torch.ones(2)))),
                   (torch.nn.Module(), OUR_NN.Module())]:
    same_error(lambda: Early(value_pair[1]), lambda: EarlyTorch(value_pair[0]),
               f"assigning a {type(value_pair[1]).__name__} before Module.__init__()")
compare.assert_equal(Early(5).w, 5, "a plain attribute assigned before Module.__init__()")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_registries(draw):
    expect_registries(random_pair(draw=draw))


for_random_inputs(test_registries, 40)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3 — one walk over the tree
#
# `_modules` makes the modules a tree (a graph, really: one module may sit in
# two places). Everything that visits "all the parameters" is one walk over it.
#
# ![The tree of nn.Sequential(Linear(8, 16), BatchNorm1d(16), ReLU(), Dropout(0.2), Linear(16, 2)): the root has five children, named 0 to 4. Under each, its own parameters (0: weight (16, 8) and bias (16,); 1: weight and bias (16,); 4: weight (2, 16) and bias (2,)) and buffers (1: running_mean, running_var (16,), num_batches_tracked ()); ReLU and Dropout hold nothing. Beside it, state_dict's keys, each the module's path, a dot and the name: 0.weight, 0.bias, 1.weight, 1.bias, 1.running_mean, 1.running_var, 1.num_batches_tracked, 4.weight, 4.bias; parameters() gives 6 tensors, 210 numbers](figures/module_tree.svg)
#
# In torch it is two generators:
#
# **`named_modules(memo=None, prefix="", remove_duplicate=True)`** yields
# `(prefix, module)` for this module, then, recursively, for every sub-module
# in `_modules` order (skipping `None`), with the prefix `prefix + "." + name`
# (no dot at the root: `"fc"`, then `"fc.inner"`). A module already in the set
# `memo` is skipped with its whole subtree; with `remove_duplicate`, each module
# goes into `memo` when it is yielded, so a shared module appears once, under its
# first name.
#
# **`_named_members(get_members, prefix="", recurse=True, remove_duplicate=True)`**
# walks `named_modules(prefix=prefix, remove_duplicate=remove_duplicate)` (or
# just `[(prefix, self)]` without `recurse`), and for each module yields
# `(module_prefix + "." + name, value)` for every `(name, value)` of
# `get_members(module)`, skipping `None` and — with `remove_duplicate` — any value
# already yielded: a parameter shared by two layers is trained **once**.
#
# The rest are one line each on top of them (all generators):
#
# | method | yields |
# |---|---|
# | `named_parameters(prefix="", recurse=True, remove_duplicate=True)` | the `_parameters` of each module |
# | `parameters(recurse=True)` | the same, without names |
# | `named_buffers(prefix="", recurse=True, remove_duplicate=True)`, `buffers(recurse=True)` | the `_buffers` (persistent or not) |
# | `named_children()`, `children()` | the direct sub-modules only, each once, skipping `None` |
# | `modules()` | `named_modules()` without names |
#
# Real PyTorch: `named_modules`, `_named_members` and the rest in
# [`torch/nn/modules/module.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/module.py).

# %% solution="ex_walk" reference=true
@add_methods(Module)
class Walk:
    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        ### BEGIN SOLUTION
        if memo is None:
            memo = set()
        if self not in memo:
            if remove_duplicate:
                memo.add(self)
            yield prefix, self
            for name, module in self._modules.items():
                if module is None:
                    continue
                yield from module.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)
        ### END SOLUTION

    def _named_members(self, get_members, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        ### BEGIN SOLUTION
        memo = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for name, value in get_members(module):
                if value is None or value in memo:
                    continue
                if remove_duplicate:
                    memo.add(value)
                yield module_prefix + ("." if module_prefix else "") + name, value
        ### END SOLUTION

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        ### BEGIN SOLUTION
        yield from self._named_members(lambda module: module._parameters.items(), prefix, recurse, remove_duplicate)
        ### END SOLUTION

    def parameters(self, recurse: bool = True):
        ### BEGIN SOLUTION
        for _, param in self.named_parameters(recurse=recurse):
            yield param
        ### END SOLUTION

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        ### BEGIN SOLUTION
        yield from self._named_members(lambda module: module._buffers.items(), prefix, recurse, remove_duplicate)
        ### END SOLUTION

    def buffers(self, recurse: bool = True):
        ### BEGIN SOLUTION
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf
        ### END SOLUTION

    def named_children(self):
        ### BEGIN SOLUTION
        memo = set()
        for name, module in self._modules.items():
            if module is not None and module not in memo:
                memo.add(module)
                yield name, module
        ### END SOLUTION

    def children(self):
        ### BEGIN SOLUTION
        for _, module in self.named_children():
            yield module
        ### END SOLUTION

    def modules(self):
        ### BEGIN SOLUTION
        for _, module in self.named_modules():
            yield module
        ### END SOLUTION


# %% tests="ex_walk" points=3
def expect_walk(mine, theirs, pair, call, what):
    got, want = call(mine), call(theirs)
    assert isinstance(got, types.GeneratorType) or hasattr(got, "__next__"), (
        f"{what} must return a generator (an iterator), not a {type(got).__name__}")
    got, want = list(got), list(want)
    if want and isinstance(want[0], tuple):
        compare.assert_equal([name for name, _ in got], [name for name, _ in want], f"the names of {what} {pair.where()}")
        for (name, value), (_, value_theirs) in zip(got, want):
            expect_same_object(value, value_theirs, pair, f"{what}, item {name!r} {pair.where()}")
    else:
        compare.assert_equal(len(got), len(want), f"len(list({what})) {pair.where()}")
        for k, (value, value_theirs) in enumerate(zip(got, want)):
            expect_same_object(value, value_theirs, pair, f"{what}, item {k} {pair.where()}")


WALKS = {
    "m.named_parameters()": lambda m: m.named_parameters(),
    "m.parameters()": lambda m: m.parameters(),
    "m.named_parameters(prefix='model')": lambda m: m.named_parameters(prefix="model"),
    "m.named_parameters(recurse=False)": lambda m: m.named_parameters(recurse=False),
    "m.named_parameters(remove_duplicate=False)": lambda m: m.named_parameters(remove_duplicate=False),
    "m.named_buffers()": lambda m: m.named_buffers(),
    "m.buffers()": lambda m: m.buffers(),
    "m.buffers(recurse=False)": lambda m: m.buffers(recurse=False),
    "m.named_buffers(prefix='x', remove_duplicate=False)": lambda m: m.named_buffers(prefix="x", remove_duplicate=False),
    "m.named_children()": lambda m: m.named_children(),
    "m.children()": lambda m: m.children(),
    "m.named_modules()": lambda m: m.named_modules(),
    "m.modules()": lambda m: m.modules(),
    "m.named_modules(prefix='net')": lambda m: m.named_modules(prefix="net"),
    "m.named_modules(remove_duplicate=False)": lambda m: m.named_modules(remove_duplicate=False),
}


def expect_walks(pair: ModelPair, walks=WALKS):
    for i, (theirs, mine) in enumerate(zip(pair.theirs_pool, pair.ours_pool)):
        if i and pair.draw.randint(0, 2):
            continue
        for text, call in walks.items():
            expect_walk(mine, theirs, pair, call, text.replace("m.", f"m{i}.", 1))


pair = ModelPair()
pair.parameter(0, "w", (3, 2))
pair.new_module(0, "fc")
pair.parameter(1, "w", (2,))
pair.buffer(1, "mean", (2,))
pair.new_module(1, "inner")
pair.parameter(2, "gamma", (4,))
pair.buffer(0, "scale", (2,), persistent=False)
pair.new_module(0, "head")
pair.share(3, "b", 0, "w")         # one parameter in two places
pair.share_module(0, "net", 2)     # one module in two places
expect_walks(pair)
pair = ModelPair()
pair.new_module(0, "fc")
pair.share_module(0, "head", 1)    # one child under two names
pair.parameter(1, "w", (2,))
pair.both("m0.add_module('empty', None)", lambda m: m[0].add_module("empty", None))  # None entries are skipped
pair.both("m1.register_parameter('nothing', None)", lambda m: m[1].register_parameter("nothing", None))
pair.both("m1.register_buffer('gone', None)", lambda m: m[1].register_buffer("gone", None))
pair.new_module(1, "inner")
pair.parameter(2, "w", (3,))
expect_walks(pair, {**WALKS, "m.named_modules(memo={m1})": lambda m: m.named_modules(
    memo={pair.ours_pool[1] if m in pair.ours_pool else pair.theirs_pool[1]})})
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_walks(draw):
    expect_walks(random_pair(draw=draw))


for_random_inputs(test_walks, 30)


def test_walks_of_large_models(draw):
    expect_walks(random_pair(draw(15, 30), bad=False, draw=draw))


for_random_inputs(test_walks_of_large_models, 10)
### END HIDDEN TESTS

# %% [markdown]
# ### The module inspector
#
# Pick a model — yours or torch's — and see its tree: every module with its
# own parameters and buffers, their shapes and counts, the `state_dict` keys,
# and a train/eval switch that shows which layers behave differently (Dropout,
# BatchNorm) by running the same input in both modes. Your side needs the
# layers of exercises 7 to 10 (and the state_dict, modes and hooks of 4 to 6):
# until they run, the inspector says what stopped yours and shows torch's
# model. Come back after each exercise and run the cell again.

# %%
from course.widgets.module_inspector import explore

explore(OUR_NN)

# %% [markdown]
# ## Exercise 4 — saving and loading: `state_dict`
#
# A checkpoint is a dictionary from **names** to tensors, and the names are the
# paths of the walk: `"fc.weight"`, `"net.0.bias"`, `"bn.running_mean"`.
#
# **`state_dict(destination=None, prefix="", keep_vars=False)`**: an
# `OrderedDict`. For this module, each parameter that is not `None`, then each
# buffer that is not `None` and **persistent**, under `prefix + name`; then,
# for each sub-module in `_modules` (not `None`), its own `state_dict` with the
# prefix `prefix + name + "."`, into the same `destination`. The values are
# `detach()`ed — the same memory, outside the graph — unless `keep_vars`.
# Unlike `named_parameters`, there is no de-duplication: a shared parameter is
# saved under each of its names (torch's loading needs every name).
#
# **`load_state_dict(state_dict, strict=True)`** copies the values **into**
# the existing tensors, in place and inside `no_grad()` — the parameter objects
# stay the same, so an optimizer that holds them keeps working. The values may be
# your tensors or **torch tensors** (converted): that is how real torch weights
# get into your model. It is a walk too (`load` below), exactly torch's:
#
# - for a module with prefix `p`: its "local state" is its parameters and
#   persistent buffers that are not `None`. For each local `name`, if `p + name`
#   is in the dictionary: its value (`as_ours(value)`, given, converts a torch
#   tensor) of another shape adds the error
#   `"size mismatch for {key}: copying a param with shape {shape of the value} from checkpoint, the shape in current model is {shape here}."`
#   (shapes written as torch writes them, `torch.Size([2, 3])`: the given
#   `size_text(shape)`) and is not copied; else it is copied. If it is not in
#   the dictionary: `p + name` is a **missing** key.
# - every key of the dictionary that starts with `p` is **unexpected** if the
#   rest of it, split at the first `"."`, names neither a sub-module here (when
#   there is a dot) nor a local entry (when there is none);
# - then each sub-module (not `None`) is loaded with the prefix `p + name + "."`
#   and the entries of the dictionary that start with it.
#
# At the end: with `strict`, missing and unexpected keys become errors too —
# `"Missing key(s) in state_dict: "a", "b". "` first, then `"Unexpected key(s)
# in state_dict: ... "`, then the size mismatches. Any error raises
# `RuntimeError("Error(s) in loading state_dict for Net:\n\t" + "\n\t".join(errors))`
# (after copying everything that could be copied, as torch does). Without
# errors, return `IncompatibleKeys(missing_keys, unexpected_keys)` (given,
# torch's named tuple: `result.missing_keys`, `result.unexpected_keys`).
#
# To go the other way, `torch_state_dict(module)` (yours too) gives the state
# dict with **torch** tensors (copies), ready for `torch_model.load_state_dict`.
#
# Real PyTorch: `state_dict`, `_save_to_state_dict`, `load_state_dict` and
# `_load_from_state_dict` in [`torch/nn/modules/module.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/module.py).

# %% reference=true
class IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What load_state_dict(strict=False) could not match, as torch's _IncompatibleKeys."""

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()


def size_text(shape) -> str:
    """A shape as torch writes it in messages: torch.Size([2, 3])."""
    return f"torch.Size({list(shape)})"


def as_ours(value):
    """A value of a state dict as your tensor (torch tensors are converted, yours stay as they are)."""
    if isinstance(value, torch.Tensor):
        return from_torch(value.detach().cpu())
    return value


# %% solution="ex_state_dict" reference=true
@add_methods(Module)
class StateDict:
    def state_dict(self, destination=None, prefix: str = "", keep_vars: bool = False) -> OrderedDict:
        ### BEGIN SOLUTION
        if destination is None:
            destination = OrderedDict()
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if keep_vars else buf.detach()
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        return destination
        ### END SOLUTION

    def load_state_dict(self, state_dict, strict: bool = True) -> IncompatibleKeys:
        ### BEGIN SOLUTION
        missing_keys, unexpected_keys, error_msgs = [], [], []

        def load(module, local_dict, prefix=""):
            local_state = {k: v for k, v in itertools.chain(
                module._parameters.items(),
                ((k, b) for k, b in module._buffers.items() if k not in module._non_persistent_buffers_set))
                if v is not None}
            for name, param in local_state.items():
                key = prefix + name
                if key not in local_dict:
                    missing_keys.append(key)
                    continue
                value = as_ours(local_dict[key])
                if not isinstance(value, Tensor):
                    error_msgs.append(f'While copying the parameter named "{key}", expected torch.Tensor or '
                                      f"Tensor-like object from checkpoint but received {type(value)}")
                    continue
                if tuple(value.shape) != tuple(param.shape):
                    error_msgs.append(f"size mismatch for {key}: copying a param with shape {size_text(value.shape)} "
                                      f"from checkpoint, the shape in current model is {size_text(param.shape)}.")
                    continue
                with no_grad():
                    param.copy_(value)
            for key in local_dict:
                if key.startswith(prefix):
                    input_name = key[len(prefix):].split(".", 1)
                    if len(input_name) > 1:
                        if input_name[0] not in module._modules:
                            unexpected_keys.append(key)
                    elif input_name[0] not in local_state:
                        unexpected_keys.append(key)
            for name, child in module._modules.items():
                if child is not None:
                    child_prefix = prefix + name + "."
                    load(child, {k: v for k, v in local_dict.items() if k.startswith(child_prefix)}, child_prefix)

        load(self, OrderedDict(state_dict))
        if strict:
            if unexpected_keys:
                error_msgs.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected_keys)))
            if missing_keys:
                error_msgs.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in missing_keys)))
        if error_msgs:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                type(self).__name__, "\n\t".join(error_msgs)))
        return IncompatibleKeys(missing_keys, unexpected_keys)
        ### END SOLUTION


def torch_state_dict(module: Module) -> OrderedDict:
    """module.state_dict() with torch tensors (copies), for torch_model.load_state_dict(...)."""
    ### BEGIN SOLUTION
    return OrderedDict((key, value.to_torch().clone()) for key, value in module.state_dict().items())
    ### END SOLUTION


# %% tests="ex_state_dict" points=4
def expect_state_dict(pair: ModelPair, keep_vars=False, prefix=""):
    what = f"m0.state_dict({'keep_vars=True' if keep_vars else ''}{f'prefix={prefix!r}' if prefix else ''})"
    got, want = pair.ours.state_dict(keep_vars=keep_vars, prefix=prefix), pair.theirs.state_dict(keep_vars=keep_vars, prefix=prefix)
    assert isinstance(got, OrderedDict), f"{what} must be an OrderedDict, not a {type(got).__name__}"
    compare.assert_equal(list(got), list(want), f"the keys of {what} {pair.where()}")
    saved = dict(itertools.chain(pair.theirs.named_parameters(prefix=prefix[:-1], remove_duplicate=False),
                                 pair.theirs.named_buffers(prefix=prefix[:-1], remove_duplicate=False)))
    for key, value in want.items():
        compare.assert_matches(got[key], value.detach(), f"{what}[{key!r}] {pair.where()}")
        if keep_vars:
            expect_same_object(got[key], value, pair, f"{what}[{key!r}] {pair.where()}")
        else:
            compare.assert_equal(got[key].requires_grad, False, f"{what}[{key!r}].requires_grad (detached) {pair.where()}")
            if value.numel():
                compare.assert_shares_memory(got[key], pair.twin[id(saved[key])],
                                             f"{what}[{key!r}] (the same memory as the tensor it saves) {pair.where()}")
    round_trip, want = torch_state_dict(pair.ours), pair.theirs.state_dict()
    compare.assert_equal(list(round_trip), list(want), f"the keys of torch_state_dict(m0) {pair.where()}")
    model = pair.ours.state_dict()
    for key, value in round_trip.items():
        assert isinstance(value, torch.Tensor), f"torch_state_dict(m0)[{key!r}] must be a torch tensor"
        compare.assert_matches(value, want[key], f"torch_state_dict(m0)[{key!r}]")
        before = model[key].to_torch().clone()
        value += 1  # a copy: editing it leaves the model alone
        assert torch.equal(model[key].to_torch(), before), (
            f"torch_state_dict(m0)[{key!r}] shares memory with the model: writing into it changed m0's tensor. "
            f"It must be a copy {pair.where()}")


def scrambled(state: dict, pair: ModelPair) -> OrderedDict:
    """A state dict like `state`, with new random values, some keys dropped, some added, some shapes changed."""
    out = OrderedDict()
    draw = pair.draw
    for key, value in state.items():
        roll = draw.randint(0, 9)  # the faults are the highest rolls, so that a shrunk state dict has none
        if roll == 9:
            continue  # missing
        shape = tuple(value.shape) + (1,) if roll == 8 and value.dim() else value.shape  # or a size mismatch
        out[key] = (draw.randn(shape, dtype=value.dtype) * 3 if value.is_floating_point()
                    else (draw.randn(shape) * 5).to(value.dtype))
    if draw.randint(0, 2) == 2:  # one time in three; shrinks to no extra key
        out[draw.choice(["extra", "fc.extra", "nothing.weight", "w.b"])] = torch.randn(2)
    return out


def expect_load(pair: ModelPair, state, strict, what):
    """Load the same (torch) state dict into both: the same result or error, then the same values."""
    before = {k: id(v) for k, v in pair.ours.state_dict(keep_vars=True).items()}
    try:
        result_theirs = pair.theirs.load_state_dict(OrderedDict(state), strict=strict)
    except RuntimeError as e:
        try:
            pair.ours.load_state_dict(OrderedDict(state), strict=strict)
        except RuntimeError as mine:
            compare.assert_equal(str(mine), str(e), f"the error of {what} {pair.where()}")
        else:
            raise AssertionError(f"{what} {pair.where()}: torch raises RuntimeError: {e}")
    else:
        result = pair.ours.load_state_dict(OrderedDict(state), strict=strict)
        compare.assert_equal(list(result.missing_keys), list(result_theirs.missing_keys), f"the missing_keys of {what} {pair.where()}")
        compare.assert_equal(list(result.unexpected_keys), list(result_theirs.unexpected_keys),
                             f"the unexpected_keys of {what} {pair.where()}")
    after = pair.ours.state_dict(keep_vars=True)
    for key, value in pair.theirs.state_dict().items():
        compare.assert_matches(after[key], value, f"m0.state_dict()[{key!r}] after {what} {pair.where()}")
        assert id(after[key]) == before[key], (f"{what} replaced the tensor {key!r} by another object: copy the values "
                                               "into the existing tensor (an optimizer holds it)")


pair = ModelPair()
pair.parameter(0, "w", (3, 2))
pair.new_module(0, "fc")
pair.parameter(1, "w", (2,))
pair.buffer(1, "mean", (2,))
pair.buffer(1, "scale", (2,), persistent=False)
pair.share(0, "b", 1, "w")
expect_state_dict(pair)
expect_state_dict(pair, keep_vars=True)
state = {key: torch.randn(value.shape) for key, value in pair.theirs.state_dict().items()}
expect_load(pair, state, True, "m0.load_state_dict(a torch state dict)")
expect_load(pair, {k: v for k, v in state.items() if k != "fc.mean"}, True, "m0.load_state_dict(without 'fc.mean')")
expect_load(pair, {k: v for k, v in state.items() if k != "fc.mean"}, False,
            "m0.load_state_dict(without 'fc.mean', strict=False)")
expect_load(pair, {**state, "fc.nothing": torch.ones(1)}, False, "m0.load_state_dict(with 'fc.nothing', strict=False)")
expect_load(pair, {**state, "w": torch.ones(2, 3)}, True, "m0.load_state_dict('w' of shape (2, 3))")
expect_load(pair, {**state, "nothing.weight": torch.ones(1), "fc.w.x": torch.ones(1)}, False,
            "m0.load_state_dict(with 'nothing.weight' and 'fc.w.x', keys of no sub-module, strict=False)")
expect_load(pair, {**{k: v for k, v in state.items() if k != "fc.mean"}, "extra": torch.ones(1), "w": torch.ones(2, 3)},
            True, "m0.load_state_dict(without 'fc.mean', with 'extra', 'w' of shape (2, 3)): missing, then unexpected, "
            "then the size mismatches")
expect_state_dict(pair, prefix="net.")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_state_dicts(draw):
    pair = random_pair(dtype=draw.choice([torch.float32, torch.float64]), draw=draw)
    expect_state_dict(pair, keep_vars=draw.coin(4), prefix=draw.choice(["", "", "model."]))
    for strict in (True, False):
        expect_load(pair, scrambled(pair.theirs.state_dict(), pair), strict, f"m0.load_state_dict(..., strict={strict})")
    expect_load(pair, {k: v.clone() + 1 for k, v in pair.theirs.state_dict().items()}, True, "m0.load_state_dict(a full torch state dict)")
    yours = {k: ours(v) for k, v in scrambled(pair.theirs.state_dict(), pair).items()}  # your tensors load too
    try:
        pair.theirs.load_state_dict({k: v.to_torch() for k, v in yours.items()}, strict=False)
    except RuntimeError:
        pass
    else:
        pair.ours.load_state_dict(yours, strict=False)
        for key, value in pair.theirs.state_dict().items():
            compare.assert_matches(pair.ours.state_dict()[key], value, f"after loading a state dict of your tensors: [{key!r}]")


for_random_inputs(test_state_dicts, 25)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5 — modes and conversions
#
# A few more walks, each a few lines:
#
# - **`train(mode=True)`** sets `self.training = mode` on this module **and
#   every module below it** (through `children()`, recursively), and returns
#   `self`; `mode` must be a `bool` (`ValueError("training mode is expected to be
#   boolean")`). **`eval()`** is `train(False)`. Layers like `Dropout` and
#   `BatchNorm1d` read `self.training` in their `forward`.
# - **`zero_grad(set_to_none=True)`**: for every parameter with a gradient,
#   set `.grad = None`, or, with `set_to_none=False`, zero it in place
#   (`p.grad.zero_()`, inside `no_grad()`).
# - **`apply(fn)`** calls `fn` on every sub-module (through `children()`,
#   recursively: `child.apply(fn)`) and then on `self` — children first — and
#   returns `self`. It is how `model.apply(init_weights)` initialises a model.
# - **`requires_grad_(requires_grad=True)`** sets `requires_grad` on every
#   parameter; returns `self` (to freeze part of a model).
# - **`to(...)`**: the arguments of `Tensor.to` — `to(float64)`,
#   `to(torch.float64)`, `to("cpu")`, `to("cpu", float64)`, `to(dtype=...)` —
#   parsed by the given `parse_to` into `(device, dtype)`. A dtype that is not
#   floating point is a `TypeError` (`"nn.Module.to only accepts floating point
#   or complex dtypes, but got desired dtype=..."`). Then convert, with `_apply`:
#   each **floating-point** tensor `t` becomes `t.to(device, dtype)` (integer
#   buffers, like BatchNorm's `num_batches_tracked`, keep their dtype but move
#   device). Write **`_apply(fn)`** as torch does:
#   - first `child._apply(fn)` for each child;
#   - each parameter `p` (not `None`): `new = fn(p)` inside `no_grad()`; when it
#     is another tensor, `p.data = new` — **the same `Parameter` object** now
#     holds the new memory, so an optimizer that holds `p` keeps working; its
#     `.grad`, if any, the same way (`p.grad.data = fn(p.grad)`);
#   - each buffer (not `None`): `self._buffers[name] = fn(buffer)`.
#
# Real PyTorch: `train`, `eval`, `zero_grad`, `apply`, `requires_grad_`, `to`
# and `_apply` in [`torch/nn/modules/module.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/module.py).

# %% solution="ex_modes" reference=true
@add_methods(Module)
class Modes:
    def train(self, mode: bool = True) -> "Module":
        ### BEGIN SOLUTION
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self
        ### END SOLUTION

    def eval(self) -> "Module":
        ### BEGIN SOLUTION
        return self.train(False)
        ### END SOLUTION

    def zero_grad(self, set_to_none: bool = True) -> None:
        ### BEGIN SOLUTION
        for p in self.parameters():
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    with no_grad():
                        p.grad.zero_()
        ### END SOLUTION

    def apply(self, fn) -> "Module":
        ### BEGIN SOLUTION
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self
        ### END SOLUTION

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        ### BEGIN SOLUTION
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self
        ### END SOLUTION

    def _apply(self, fn) -> "Module":
        ### BEGIN SOLUTION
        for module in self.children():
            module._apply(fn)
        for name, param in self._parameters.items():
            if param is None:
                continue
            with no_grad():
                new = fn(param)
            if new is not param:
                param.data = new
            if param.grad is not None:
                with no_grad():
                    grad = fn(param.grad)
                if grad is not param.grad:
                    param.grad.data = grad
        for name, buf in self._buffers.items():
            if buf is not None:
                self._buffers[name] = fn(buf)
        return self
        ### END SOLUTION

    def to(self, *args, **kwargs) -> "Module":
        ### BEGIN SOLUTION
        device, dtype = parse_to(*args, **kwargs)
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but got desired "
                            f"dtype={dtype}")

        def convert(t):
            return t.to(device, dtype if t.is_floating_point() else None)

        return self._apply(convert)
        ### END SOLUTION

    def double(self) -> "Module":
        return self.to(float64)

    def float(self) -> "Module":
        return self.to(float32)


# %% tests="ex_modes" points=2
def expect_modes(pair: ModelPair, steps):
    """Run train/eval calls on random modules of the pair; compare every module's .training."""
    calls = []
    for _ in range(steps):
        i = pair.draw.randint(0, len(pair.theirs_pool) - 1)
        calls.append((i, pair.draw.choice(["train()", "eval()", "train(False)", "train(True)"])))
    expect_mode_calls(pair, calls)


def expect_mode_calls(pair: ModelPair, calls):
    """Run the calls [(i, "train(False)"), ...] on module i of both; compare every module's .training after each."""
    for i, call in calls:
        pair.log.append(f"m{i}.{call}")
        result = eval(f"pair.ours_pool[i].{call}")
        eval(f"pair.theirs_pool[i].{call}")
        assert result is pair.ours_pool[i], f"m{i}.{call} must return the module itself"
        for k, (theirs, mine) in enumerate(zip(pair.theirs_pool, pair.ours_pool)):
            compare.assert_equal(mine.training, theirs.training, f"m{k}.training {pair.where()}")


def expect_grads(pair: ModelPair, what):
    for name, p in pair.theirs.named_parameters():
        mine = pair.twin[id(p)]
        if p.grad is None:
            assert mine.grad is None, f"{name}.grad should be None {what} {pair.where()}"
        else:
            compare.assert_matches(mine.grad, p.grad, f"{name}.grad {what} {pair.where()}")


def give_grads(pair: ModelPair):
    for p in pair.theirs.parameters():
        if pair.draw.randint(0, 3) < 3:  # three times in four; shrinks to a .grad everywhere
            g = pair.draw.randn(p.shape, dtype=p.dtype)
            p.grad, pair.twin[id(p)].grad = g.clone(), ours(g)


def expect_to(pair: ModelPair, args, text):
    params = {name: pair.twin[id(p)] for name, p in pair.theirs.named_parameters()}
    got = pair.ours.to(*[dtype_arg(a) if isinstance(a, torch.dtype) and pair.draw.randint(0, 1) else a for a in args])
    pair.theirs.to(*args)
    assert got is pair.ours, f"m0.{text} must return the module itself"
    pair.log.append(f"m0.{text}")
    for name, p in pair.theirs.named_parameters():
        mine = params[name]
        assert dict(pair.ours.named_parameters())[name] is mine, (f"after m0.{text}, {name} is a new object: torch keeps "
                                                                 "the same Parameter object (p.data = converted)")
        compare.assert_matches(mine, p, f"{name} after m0.{text}")
    for name, b in pair.theirs.named_buffers():
        compare.assert_matches(dict(pair.ours.named_buffers())[name], b, f"the buffer {name} after m0.{text}")
    expect_grads(pair, f"after m0.{text}")


pair = ModelPair()
pair.new_module(0, "fc")
pair.new_module(1, "inner")
pair.parameter(2, "w", (2, 3))
pair.buffer(1, "count", (), dtype=torch.int64)
pair.buffer(2, "mean", (3,))
expect_mode_calls(pair, [(0, "eval()"), (1, "train()"), (0, "train(True)"), (1, "train(False)")])
expect_modes(pair, 4)
compare.assert_raises(ValueError, pair.ours.train, "m0.train('yes') (a mode that is not a bool)", "yes")


def give_every_grad(pair: ModelPair):
    """A .grad for every parameter of both, all ones."""
    for p in pair.theirs.parameters():
        p.grad, pair.twin[id(p)].grad = torch.ones_like(p), ours(torch.ones_like(p))


give_every_grad(pair)
kept = {name: pair.twin[id(p)].grad for name, p in pair.theirs.named_parameters()}
pair.ours.zero_grad(set_to_none=False)
pair.theirs.zero_grad(set_to_none=False)
expect_grads(pair, "after m0.zero_grad(set_to_none=False)")
for name, p in pair.theirs.named_parameters():
    assert pair.twin[id(p)].grad is kept[name], (f"m0.zero_grad(set_to_none=False) replaced {name}.grad by a new "
                                                 "tensor; torch zeros the one there, in place (p.grad.zero_())")
pair.ours.zero_grad()
pair.theirs.zero_grad()
expect_grads(pair, "after m0.zero_grad()")
order, order_theirs = [], []
pair.ours.apply(lambda m: order.append(m))
pair.theirs.apply(lambda m: order_theirs.append(m))
compare.assert_equal([pair.ours_pool.index(m) for m in order], [pair.theirs_pool.index(m) for m in order_theirs],
                     "the modules m.apply(fn) calls fn on, in order (as indices m0, m1, ...)")
for flag in (False, True):
    assert pair.ours.requires_grad_(flag) is pair.ours, f"m0.requires_grad_({flag}) must return the module itself"
    pair.theirs.requires_grad_(flag)
    for name, p in pair.theirs.named_parameters():
        compare.assert_equal(pair.twin[id(p)].requires_grad, p.requires_grad,
                             f"{name}.requires_grad after m0.requires_grad_({flag})")
give_every_grad(pair)  # to() converts the gradients too
expect_to(pair, (torch.float64,), "to(torch.float64)")
expect_to(pair, ("cpu", torch.float32), "to('cpu', torch.float32)")
compare.assert_raises(TypeError, pair.ours.to, "m0.to(torch.int64)", torch.int64)
compare.assert_raises(RuntimeError, pair.ours.to, "m0.to('tpu') (a device picotorch does not know)", "tpu")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_modes_and_conversions(draw):
    pair = random_pair(bad=False, draw=draw)
    expect_modes(pair, 6)
    compare.assert_raises(ValueError, pair.ours.train, "m0.train('yes')", "yes")
    give_grads(pair)
    set_to_none = draw.choice([True, False])
    pair.ours.zero_grad(set_to_none=set_to_none)
    pair.theirs.zero_grad(set_to_none=set_to_none)
    expect_grads(pair, f"after m0.zero_grad(set_to_none={set_to_none})")
    order, order_theirs = [], []
    pair.ours.apply(lambda m: order.append(m))
    pair.theirs.apply(lambda m: order_theirs.append(m))
    compare.assert_equal([pair.ours_pool.index(m) for m in order], [pair.theirs_pool.index(m) for m in order_theirs],
                         f"the modules m0.apply(fn) calls fn on, in order {pair.where()}")
    flag = draw.choice([True, False])
    pair.ours.requires_grad_(flag)
    pair.theirs.requires_grad_(flag)
    for name, p in pair.theirs.named_parameters():
        compare.assert_equal(pair.twin[id(p)].requires_grad, p.requires_grad, f"{name}.requires_grad after m0.requires_grad_({flag})")
    give_grads(pair)
    for args, text in [((torch.float64,), "to(torch.float64)"), ((), "to()"), (("cpu",), "to('cpu')"),
                       ((torch.device("cpu"), torch.float32), "to(torch.device('cpu'), torch.float32)"),
                       ((torch.float64,), "to(torch.float64)")]:
        expect_to(pair, args, text)
    pair.ours.to(dtype=float32)
    pair.theirs.to(dtype=torch.float32)
    expect_to(pair, (), "to(dtype=float32)")


for_random_inputs(test_modes_and_conversions, 15)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 6 — calling a module, and its `repr`
#
# **`model(x)`** is `Module.__call__`, which runs `forward` — with **hooks**
# around it, small functions that others attach to a module to watch or change
# what goes through it (debuggers, profilers, the train-versus-eval comparison
# of the module inspector after exercise 3):
#
# - `register_forward_pre_hook(hook)`: before `forward`, `hook(module, args)`
#   (`args` the tuple of positional arguments); if it returns something other
#   than `None`, that replaces `args` (a single value becomes `(value,)`);
# - `register_forward_hook(hook)`: after `forward`, `hook(module, args, output)`;
#   if it returns something other than `None`, that replaces the output.
#
# Hooks run in the order they were registered (`prepend=True` puts a hook
# first). Registering returns a `RemovableHandle` (given): `handle.remove()`
# takes the hook out again. Keyword arguments go to `forward` unchanged.
#
# **`repr(model)`** prints the tree, as torch does:
#
# ```
# Net(
#   (fc): Linear(in_features=4, out_features=2, bias=True)
#   (act): ReLU()
# )
# ```
#
# The name of the class, then in parentheses the lines of `extra_repr()` (a
# layer's own summary, `""` for a plain `Module`) followed by one line
# `(name): repr(child)` per entry of `_modules` (a `None` child prints as
# `None`). A child's repr that spans several lines is indented by two spaces
# after its first line (the given `_addindent`). When there are lines, they go
# one per line, indented by two spaces, with the closing `)` on a line of its
# own — except when the only line is a one-line `extra_repr`, which goes right
# inside the parentheses: `Linear(in_features=4, out_features=2, bias=True)`.
# No lines at all: `Module()`.
#
# Real PyTorch: `_call_impl`, `register_forward_hook`, `register_forward_pre_hook`,
# `__repr__` and `_addindent` in [`torch/nn/modules/module.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/module.py),
# `RemovableHandle` in [`torch/utils/hooks.py`](https://github.com/pytorch/pytorch/blob/main/torch/utils/hooks.py).

# %% reference=true
class RemovableHandle:
    """What register_forward_hook returns: handle.remove() takes the hook out of its module's dict."""
    next_id = 0

    def __init__(self, hooks: dict):
        self.hooks_dict = hooks
        self.id = RemovableHandle.next_id
        RemovableHandle.next_id += 1

    def remove(self) -> None:
        self.hooks_dict.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _addindent(text: str, spaces: int) -> str:
    """Indent every line of `text` but the first by `spaces` spaces."""
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    return lines[0] + "\n" + "\n".join(" " * spaces + line for line in lines[1:])


# %% solution="ex_call_repr" reference=true
@add_methods(Module)
class Calling:
    def register_forward_pre_hook(self, hook, *, prepend: bool = False) -> RemovableHandle:
        ### BEGIN SOLUTION
        handle = RemovableHandle(self._forward_pre_hooks)
        self._forward_pre_hooks[handle.id] = hook
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle
        ### END SOLUTION

    def register_forward_hook(self, hook, *, prepend: bool = False) -> RemovableHandle:
        ### BEGIN SOLUTION
        handle = RemovableHandle(self._forward_hooks)
        self._forward_hooks[handle.id] = hook
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle
        ### END SOLUTION

    def __call__(self, *args, **kwargs):
        ### BEGIN SOLUTION
        for hook in list(self._forward_pre_hooks.values()):
            result = hook(self, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        output = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks.values()):
            result = hook(self, args, output)
            if result is not None:
                output = result
        return output
        ### END SOLUTION

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        ### BEGIN SOLUTION
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({name}): " + _addindent(repr(module), 2) for name, module in self._modules.items()]
        lines = extra_lines + child_lines
        text = type(self).__name__ + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                text += extra_lines[0]
            else:
                text += "\n  " + "\n  ".join(lines) + "\n"
        return text + ")"
        ### END SOLUTION


# %% tests="ex_call_repr" points=2
class Affine:
    """A tiny layer, written once for both worlds: y = x * scale + shift, with a description."""

    @staticmethod
    def make(nn, n, text=""):
        class Scale(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = nn.Parameter(nn_tensor(nn, torch.linspace(0.5, 2.0, n)))
                self.register_buffer("shift", nn_tensor(nn, torch.ones(n)))

            def forward(self, x, times=1):
                return (x * self.scale + self.shift) * times

            def extra_repr(self):
                return text
        return Scale()


def nn_tensor(nn, t):
    return t.clone() if nn is torch.nn else ours(t)


def expect_repr(mine, theirs, what):
    compare.assert_equal(repr(mine), repr(theirs), f"repr({what})")


def expect_same_calls(pair_modules, x, what, **kwargs):
    mine, theirs = pair_modules
    out_theirs = theirs(x, **kwargs)
    out = mine(ours(x), **kwargs)
    compare.assert_matches(out, out_theirs.detach(), what)


def hook_log(log, name, kind, change=None):
    """A hook that records its call (and may change what goes through)."""
    def pre(module, args):
        log.append((name, kind, tuple(args[0].shape)))
        return change(args) if change else None

    def post(module, args, output):
        log.append((name, kind, tuple(output.shape)))
        return change(output) if change else None
    return pre if kind == "pre" else post


x = torch.randn(2, 3)
pair_modules = Affine.make(OUR_NN, 3), Affine.make(torch.nn, 3)
expect_same_calls(pair_modules, x, "Scale(3)(x)")
expect_same_calls(pair_modules, x, "Scale(3)(x, times=3)", times=3)
logs = [], []
handles = []
for k, m in enumerate(pair_modules):
    handles.append(m.register_forward_hook(hook_log(logs[k], "a", "post", lambda out: out * 2)))
    m.register_forward_pre_hook(hook_log(logs[k], "b", "pre"))
    m.register_forward_hook(hook_log(logs[k], "c", "post"), prepend=True)
expect_same_calls(pair_modules, x, "Scale(3)(x) with a forward hook that doubles the output")
compare.assert_equal(logs[0], logs[1], "the hooks that ran, in order (name, kind, shape)")
for h in handles:
    h.remove()
expect_same_calls(pair_modules, x, "Scale(3)(x) after handle.remove()")
for nn_text in ["", "n=3", "two\nlines"]:
    expect_repr(Affine.make(OUR_NN, 3, nn_text), Affine.make(torch.nn, 3, nn_text), f"Scale with extra_repr {nn_text!r}")
root_pair = ModelPair()
root_pair.new_module(0, "fc")
root_pair.new_module(1, "inner")
root_pair.both("m0.head = None", lambda m: m[0].add_module("head", None))
expect_repr(root_pair.ours, root_pair.theirs, "m0")
with_child = Affine.make(OUR_NN, 3, "n=3"), Affine.make(torch.nn, 3, "n=3")
for m, nn in zip(with_child, (OUR_NN, torch.nn)):
    m.add_module("inner", nn.Module())
expect_repr(*with_child, "Scale with extra_repr 'n=3' and a child: the one-line extra_repr on a line of its own, "
                         "then the child")
for m in pair_modules:
    m.register_forward_pre_hook(lambda module, args: args[0] + 1)
expect_same_calls(pair_modules, x, "Scale(3)(x) with a forward pre-hook that returns args[0] + 1 (one value: the new "
                                   "args are (value,))")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_reprs(draw):
    pair = random_pair(draw=draw)
    expect_repr(pair.ours, pair.theirs, f"m0 {pair.where()}")


for_random_inputs(test_reprs, 30)


def test_nested_reprs(draw):
    for nn_text in ["", "n=3", "two\nlines"]:  # an extra_repr and children: every line inside, one per line
        for inner_text in ["", "k=1"]:
            mine, theirs = (Affine.make(nn, 3, nn_text) for nn in (OUR_NN, torch.nn))
            with_none = draw(0, 1) > 0
            for m, nn in ((mine, OUR_NN), (theirs, torch.nn)):
                m.inner = Affine.make(nn, 2, inner_text)
                m.inner.deeper = Affine.make(nn, 2, "k=2")
                if with_none:
                    m.add_module("nothing", None)
            expect_repr(mine, theirs, f"Scale with extra_repr {nn_text!r} and a child Scale (extra_repr {inner_text!r}) "
                                      "that has a child of its own")


for_random_inputs(test_nested_reprs, 1)


def test_hooks(draw):
    logs = [], []
    pair_modules = Affine.make(OUR_NN, 4, "x"), Affine.make(torch.nn, 4, "x")
    handles = [[], []]
    kinds = [(draw.choice(["pre", "post"]), draw.choice([True, False]), draw.choice([True, False]))
             for _ in range(draw(1, 5))]
    for k, m in enumerate(pair_modules):
        for j, (kind, prepend, changes) in enumerate(kinds):
            change = None
            if changes:
                change = (lambda args: args[0] + 1) if kind == "pre" else (lambda out: out * 3)
            register = m.register_forward_pre_hook if kind == "pre" else m.register_forward_hook
            handles[k].append(register(hook_log(logs[k], str(j), kind, change), prepend=prepend))
    x = draw.randn(2, 4)
    expect_same_calls(pair_modules, x, f"Scale(4)(x) with the hooks (kind, prepend, changes) {kinds}")
    compare.assert_equal(logs[0], logs[1], f"the hooks that ran, in order, with hooks (kind, prepend, changes) {kinds}")
    drop = draw(0, len(kinds) - 1)
    for k in range(2):
        with handles[k][drop]:
            pass  # leaving the with-block removes the hook
    expect_same_calls(pair_modules, x, f"Scale(4)(x) with the hooks {kinds} after removing hook {drop}")
    compare.assert_equal(logs[0], logs[1], f"the hooks that ran after removing hook {drop} of {kinds}")


for_random_inputs(test_hooks, 10)
compare.assert_raises(NotImplementedError, OUR_NN.Module(), "Module()(x) (a Module without forward)", 1)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 7 — `Linear`
#
# `Linear(in_features, out_features, bias=True, device=None, dtype=None)` holds
# `weight`, a `Parameter` of shape `(out_features, in_features)`, and `bias`, of
# shape `(out_features,)` — or, with `bias=False`, a parameter registered as
# `None` (so that `self.bias` is `None` and the key is absent from the
# `state_dict`). `forward(x)` maps the last dim of `x`, `(*, in) → (*, out)`:
#
# $$y = x W^\top + b$$
#
# ![Linear(6, 3) on a batch of 4, drawn to scale: x of shape (4, 6) @ W.T of shape (6, 3) + b of shape (3,) = y of shape (4, 3). W is stored as (out, in) = (3, 6), row j holding the weights of output j; b is added to every row; W and b start uniform in plus or minus 1/sqrt(6) = 0.408](figures/linear_shapes.svg)
#
# **Initialisation, as torch does it** (`reset_parameters`): the weight is drawn
# by `kaiming_uniform_(weight, a=√5)` — uniform on `[−bound, bound]` with
# `gain = √(2 / (1 + a²))`, `std = gain / √fan_in`, `bound = √3 · std`, where
# `fan_in = in_features` — which comes to `1/√in_features`; then the bias,
# uniform on `[−1/√fan_in, 1/√fan_in]` (0 when `fan_in` is 0). Compute the bound
# with exactly this formula, draw the weight first and the bias second with
# `uniform_` (torch's generator): then `torch.manual_seed(s); Linear(3, 4)` gives
# exactly torch's numbers. (A zero-element weight draws nothing.)
#
# **Speed.** The training chapter runs thousands of `Linear` calls, so the
# forward and backward must be cheap. Composing `x @ weight.mT + bias` makes
# three graph nodes and a transpose; torch uses one fused kernel (`addmm`).
#
# **One operator.** `Linear` is one operator of the dispatcher, `"linear"`
# (torch's `aten::linear`), and its backward another, `"linear_backward"`, so
# that a later backend registers its own kernels for both. The cell gives the
# `Function`, `LinearFunction`: one graph node, registered with chapter 02's
# `@register("linear")` as the operator's `Autograd` kernel. So `forward(x)` is
# one call, `dispatch("linear", x, self.weight, self.bias)`: when a tensor
# requires grad, the dispatcher reaches `LinearFunction.apply`, which records
# the node and redispatches below `Autograd` to the CPU kernel; otherwise it
# reaches the CPU kernel directly.
#
# Write the CPU kernels: `linear_cpu(x, weight, bias)` computes with NumPy
# (`x.numpy() @ weight.numpy().T + bias.numpy()`), and
# `linear_backward_cpu(x, grad, weight, output_mask)` returns the three
# gradients, also with NumPy: for `x` of shape `(*, in)` and `grad` of shape
# `(*, out)`, flatten the leading dims (`(n, in)` and `(n, out)`):
#
# ```
# grad_x = grad @ W           (*, out) @ (out, in)  -> (*, in)
# grad_W = grad2.T @ x2       (out, n) @ (n, in)    -> (out, in)
# grad_b = grad2.sum(0)                             -> (out,)
# ```
#
# `bias` may be `None`; compute only the gradients that `output_mask` (three
# booleans, from `ctx.needs_input_grad`) asks for, and `None` for the others.
# Torch's errors, in `linear_cpu`: the dtypes of `x` and `weight` must agree,
# and `x`'s last dim must be `in_features` (`RuntimeError`).
# `extra_repr`: `in_features=4, out_features=2, bias=True`.
#
# Real PyTorch: [`torch/nn/modules/linear.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/linear.py),
# `kaiming_uniform_` in [`torch/nn/init.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/init.py),
# and the `addmm` entry of [`derivatives.yaml`](https://github.com/pytorch/pytorch/blob/main/tools/autograd/derivatives.yaml).

# %% solution="ex_linear" reference=true
def kaiming_uniform_(tensor: Tensor, a: float = 0.0) -> Tensor:
    """torch.nn.init.kaiming_uniform_ for mode='fan_in', nonlinearity='leaky_relu' (Linear's default)."""
    ### BEGIN SOLUTION
    if 0 in tuple(tensor.shape):
        return tensor
    fan_in = tensor.shape[1] * math.prod(tensor.shape[2:]) if tensor.dim() >= 2 else tensor.shape[0]
    gain = math.sqrt(2.0 / (1 + a ** 2))
    std = gain / math.sqrt(fan_in)
    bound = math.sqrt(3.0) * std
    with no_grad():
        return tensor.uniform_(-bound, bound)
    ### END SOLUTION


@register("linear")
class LinearFunction(Function):
    """The Autograd kernel of "linear": y = x @ weight.T + bias in one node. Its forward and backward are operators
    of the dispatcher, "linear" and "linear_backward" (torch's aten::linear, aten::linear_backward): your CPU kernels
    below do the work."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return redispatch("linear", DispatchKey.Autograd, x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        needs = ctx.needs_input_grad
        return dispatch("linear_backward", x, grad, weight, (needs[0], needs[1], ctx.has_bias and needs[2]))


@register_kernel("linear", DispatchKey.CPU)
def linear_cpu(x: Tensor, weight: Tensor, bias) -> Tensor:
    """x @ weight.T + bias (bias may be None), with NumPy."""
    ### BEGIN SOLUTION
    if x.dtype is not weight.dtype:
        raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got {x.dtype.name} and {weight.dtype.name}")
    if x.dim() == 0 or x.shape[-1] != weight.shape[1]:
        rows = math.prod(x.shape[:-1]) if x.dim() else 1
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{x.shape[-1] if x.dim() else 1} "
                           f"and {weight.shape[1]}x{weight.shape[0]})")
    out = np.matmul(x.numpy(), weight.numpy().T)
    if bias is not None:
        out += bias.numpy()
    return from_numpy(out)
    ### END SOLUTION


@register_kernel("linear_backward", DispatchKey.CPU)
def linear_backward_cpu(x: Tensor, grad: Tensor, weight: Tensor, output_mask) -> tuple:
    """(grad_x, grad_weight, grad_bias), with NumPy; each None where output_mask says it is not needed."""
    ### BEGIN SOLUTION
    g = grad.numpy()
    g2 = g.reshape(-1, g.shape[-1]) if g.ndim else g.reshape(1, 1)
    grad_x = grad_w = grad_b = None
    if output_mask[0]:
        grad_x = from_numpy(np.matmul(g, weight.numpy()))
    if output_mask[1]:
        x2 = x.numpy().reshape(-1, x.shape[-1])
        grad_w = from_numpy(g2.T @ x2)
    if output_mask[2]:
        grad_b = from_numpy(g2.sum(0))
    return grad_x, grad_w, grad_b
    ### END SOLUTION


class Linear(Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        ### BEGIN SOLUTION
        if device is not None:
            device_name(device)
        dtype = dtype_arg(dtype) or float32
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        ### END SOLUTION

    def reset_parameters(self) -> None:
        ### BEGIN SOLUTION
        kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_features
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            with no_grad():
                self.bias.uniform_(-bound, bound)
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return dispatch("linear", x, self.weight, self.bias)
        ### END SOLUTION

    def extra_repr(self) -> str:
        ### BEGIN SOLUTION
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
        ### END SOLUTION


# %% [markdown]
# The next two cells hold what the tests of the layers use. First, how two
# models are compared without running them: `expect_same_model(mine, theirs,
# what)` asks for the same `state_dict` keys, parameter names, parameter count
# and `repr`, and (unless `check_values=False`) the same values.

# %%
import re
import warnings


def repr_for_comparison(text: str) -> str:
    """repr without the ', bias=...' that newer torch prints for LayerNorm and BatchNorm."""
    return re.sub(r"((?:LayerNorm|BatchNorm1d)\([^\n]*?), bias=(?:True|False)", r"\1", text)


def expect_same_model(mine, theirs, what, check_values=True):
    compare.assert_equal(list(mine.state_dict()), list(theirs.state_dict()), f"the keys of {what}.state_dict()")
    compare.assert_equal([n for n, _ in mine.named_parameters()], [n for n, _ in theirs.named_parameters()],
                         f"the names of {what}.named_parameters()")
    compare.assert_equal(sum(p.numel() for p in mine.parameters()), sum(p.numel() for p in theirs.parameters()),
                         f"the number of parameters of {what}")
    compare.assert_equal(repr_for_comparison(repr(mine)), repr_for_comparison(repr(theirs)), f"repr({what})")
    if check_values:
        state = mine.state_dict()
        for key, value in theirs.state_dict().items():
            compare.assert_matches(state[key], value, f"{what}.state_dict()[{key!r}]")

# %% [markdown]
# Then running them. `expect_layer(make, x, what)` builds a layer in both
# worlds with `make(nn)`, **loads torch's `state_dict` into yours**, runs both
# on `x` (a torch tensor; yours gets a copy), compares the outputs, then calls
# `backward` with the same random gradient and compares the gradient of the
# input and of **every parameter**, by name. It also compares the models as
# above, before and after the step. Try it on your own layers.

# %%
def run_both(mine, theirs, x, what, grad=True, x_requires_grad=True, draw=inputs, ill_conditioned=False):
    """Forward (and backward, with a random gradient drawn by `draw`: a test's, so that a failing input
    shrinks; the course's stream by default) in both worlds; compare output and gradients.
    ill_conditioned: the layer can amplify float32 rounding (a normalisation of nearly equal values), so the
    output's tolerance widens by how far torch's own float32 output lies from its float64 one.
    Returns the outputs."""
    floating = x.is_floating_point()
    exact = None
    if ill_conditioned and x.dtype == torch.float32:
        import copy  # (a copy: in train mode a forward updates the running statistics)
        with torch.no_grad():
            exact = copy.deepcopy(theirs).double()(x.double())
    x_theirs = same_layout_copy(x).requires_grad_(floating and x_requires_grad)
    x_mine = ours(x).requires_grad_(floating and x_requires_grad)
    out_theirs = theirs(x_theirs)
    out = mine(x_mine)
    compare.assert_matches(out, out_theirs.detach(), f"{what}(x) for x: {describe(x)}", exact=exact)
    if grad and out_theirs.requires_grad:
        g = draw.randn(out_theirs.shape, dtype=out_theirs.dtype)
        out_theirs.backward(g)
        out.backward(ours(g))
        if x_theirs.requires_grad:
            compare.assert_matches(x_mine.grad, x_theirs.grad, f"the gradient of x after {what}(x).backward(g)")
        mine_params = dict(mine.named_parameters())
        for name, p in theirs.named_parameters():
            if p.grad is None:
                assert mine_params[name].grad is None, f"{what}.{name}.grad should be None after backward"
            else:
                compare.assert_matches(mine_params[name].grad, p.grad, f"{what}.{name}.grad after {what}(x).backward(g)")
    return out, out_theirs


def build_both(make, what="the model"):
    """make(nn) in both worlds, with torch's weights loaded into yours."""
    theirs, mine = make(torch.nn), make(OUR_NN)
    expect_same_model(mine, theirs, what, check_values=False)
    mine.load_state_dict(theirs.state_dict())
    return mine, theirs


def expect_layer(make, x, what, grad=True, modes=("train",), draw=inputs):
    mine, theirs = build_both(make, what)
    expect_same_model(mine, theirs, what)
    for mode in modes:
        getattr(mine, mode)()
        getattr(theirs, mode)()
        run_both(mine, theirs, x, f"{what}.{mode}()", grad, draw=draw)
        expect_same_model(mine, theirs, f"{what} after a step in {mode} mode")
    return mine, theirs


# %% tests="ex_linear" points=3
def linear(i, o, bias=True, dtype=None):
    return lambda nn: nn.Linear(i, o, bias=bias, dtype=dtype)


def expect_init(make, what, seed):
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that a zero-element weight draws nothing
        theirs = make(torch.nn)
    torch.manual_seed(seed)
    mine = make(OUR_NN)
    after_mine = torch.rand(()).item()  # the next number after yours: you drew exactly what torch draws, no more
    expect_same_model(mine, theirs, f"{what} after torch.manual_seed({seed}) (torch's initialisation, exactly)")
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        make(torch.nn)
    compare.assert_equal(after_mine, torch.rand(()).item(),
                         f"the next random number after {what}: draw exactly what torch draws, no more")


expect_layer(linear(3, 2), torch.randn(4, 3), "Linear(3, 2)")
expect_layer(linear(3, 2, bias=False), torch.randn(4, 3), "Linear(3, 2, bias=False)")
expect_layer(linear(5, 4), torch.randn(2, 3, 5), "Linear(5, 4)")
expect_layer(linear(3, 2), torch.randn(3), "Linear(3, 2)")
expect_init(linear(3, 4), "Linear(3, 4)", 0)
expect_init(linear(30, 10), "Linear(30, 10)", 1)
compare.assert_equal(repr(Linear(4, 2)), repr(torch.nn.Linear(4, 2)), "repr(Linear(4, 2))")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_linears(draw):
    i, o = draw(1, 12), draw(1, 12)
    bias = draw.choice([True, False])
    dtype = draw.choice([torch.float32, torch.float64])
    batch = draw.shape(ndim=(0, 3), size=(1, 5))
    x = draw.noncontiguous(draw.randn(batch + (i,), dtype=dtype))
    what = f"Linear({i}, {o}, bias={bias}, dtype={dtype})"
    expect_layer(linear(i, o, bias, dtype), x, what, draw=draw)
    expect_init(linear(i, o, bias, dtype), what, draw(0, 10 ** 6))


for_random_inputs(test_linears, 20)
expect_init(linear(0, 3), "Linear(0, 3)", 5)
expect_layer(linear(4, 3), torch.randn(0, 4), "Linear(4, 3) on an empty batch")
mine, theirs = build_both(linear(3, 2))
run_both(mine, theirs, torch.randn(5, 3), "Linear(3, 2) with x not requiring grad", x_requires_grad=False)
for bad_x, text in [(torch.randn(4, 5), "x of shape (4, 5)"), (torch.randn(4, 3, dtype=torch.float64), "a float64 x")]:
    same_error(lambda: mine(ours(bad_x)), lambda: theirs(bad_x), f"Linear(3, 2)(x) for {text}")
for seed in range(3):  # statistics of the initialisation, whatever the generator
    layer = Linear(200, 50)
    bound = 1 / math.sqrt(200)
    w = layer.weight.numpy()
    assert np.abs(w).max() <= bound and w.std() > bound / 2, f"Linear(200, 50).weight is not uniform on ±1/√200"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 8 — activations, `Flatten` and `Dropout`
#
# Layers without parameters are modules too — so that they sit in a model's
# tree, print in its `repr`, and switch with `train()`/`eval()`:
#
# - `ReLU(inplace=False)`, `Tanh()`, `Sigmoid()`: the elementwise op of chapter
#   02 (differentiable already). `ReLU`'s `extra_repr` is `"inplace=True"` when
#   it is, else `""` (our ReLU may compute out of place either way).
# - `Flatten(start_dim=1, end_dim=-1)`: `x.flatten(start_dim, end_dim)`;
#   `extra_repr`: `start_dim=1, end_dim=-1`.
# - `Dropout(p=0.5, inplace=False)`: in **training** mode, each element is kept
#   with probability `1 − p` and then scaled by `1 / (1 − p)` — so the expected
#   output is the input — or zeroed; in **eval** mode, the identity (`x`
#   itself). Draw the mask with the given `bernoulli(x.shape, 1 − p, x.dtype)`
#   and compute as torch does, `x * (mask / (1 − p))`: then under the same seed
#   you zero exactly torch's elements. `p = 0` returns `x`; `p = 1` gives
#   `x * 0`; a `p` outside `[0, 1]` is a `ValueError` in `__init__`.
#   `extra_repr`: `p=0.5, inplace=False`.
#
# Real PyTorch: [`activation.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/activation.py),
# [`flatten.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/flatten.py),
# [`dropout.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/dropout.py)
# and `_dropout_impl` in [`aten/src/ATen/native/Dropout.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/Dropout.cpp).

# %% solution="ex_layers" reference=true
class ReLU(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return x.relu()
        ### END SOLUTION

    def extra_repr(self) -> str:
        ### BEGIN SOLUTION
        return "inplace=True" if self.inplace else ""
        ### END SOLUTION


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return x.tanh()
        ### END SOLUTION


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return x.sigmoid()
        ### END SOLUTION


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return x.flatten(self.start_dim, self.end_dim)
        ### END SOLUTION

    def extra_repr(self) -> str:
        ### BEGIN SOLUTION
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
        ### END SOLUTION


class Dropout(Module):
    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        ### BEGIN SOLUTION
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        if not self.training or self.p == 0:
            return x
        if self.p == 1:
            return x * 0
        mask = bernoulli(x.shape, 1 - self.p, x.dtype)
        return x * (mask / (1 - self.p))
        ### END SOLUTION

    def extra_repr(self) -> str:
        ### BEGIN SOLUTION
        return f"p={self.p}, inplace={self.inplace}"
        ### END SOLUTION


# %% tests="ex_layers" points=2
def activation(name, *args):
    return lambda nn: getattr(nn, name)(*args)


def expect_dropout(p, x, what, seed):
    """Your Dropout and torch's, in train mode from the same seed, then in eval mode."""
    x = x.contiguous()
    mine, theirs = OUR_NN.Dropout(p), torch.nn.Dropout(p)
    expect_same_model(mine, theirs, what)
    x_theirs = x.clone().requires_grad_()
    x_mine = ours(x).requires_grad_()
    torch.manual_seed(seed)
    out_theirs = theirs(x_theirs)
    torch.manual_seed(seed)
    out = mine(x_mine)
    compare.assert_matches(out, out_theirs.detach(), f"{what}(x) in train mode after torch.manual_seed({seed}), x: {describe(x)}")
    g = torch.randn(x.shape, dtype=x.dtype)
    out_theirs.backward(g)
    out.backward(ours(g))
    compare.assert_matches(x_mine.grad, x_theirs.grad, f"the gradient of x through {what}(x) in train mode")
    mine.eval()
    theirs.eval()
    y = mine(x_mine)
    assert y is x_mine or np.array_equal(y.numpy(), x.numpy()), f"{what}(x) in eval mode must be x itself"


for name in ["ReLU", "Tanh", "Sigmoid"]:
    expect_layer(activation(name), torch.randn(3, 4), f"{name}()")
expect_same_model(OUR_NN.ReLU(inplace=True), torch.nn.ReLU(inplace=True), "ReLU(inplace=True)")
expect_layer(activation("Flatten"), torch.randn(2, 3, 4), "Flatten()")
expect_layer(activation("Flatten", 0, 1), torch.randn(2, 3, 4), "Flatten(0, 1)")
expect_dropout(0.5, torch.randn(4, 5), "Dropout(0.5)", 0)
expect_dropout(0.2, torch.randn(100), "Dropout(0.2)", 1)
expect_dropout(0.0, torch.randn(3, 2), "Dropout(0.0)", 2)
expect_dropout(1.0, torch.randn(3, 2), "Dropout(1.0)", 3)
for p in (-0.1, 1.5):
    same_error(lambda: OUR_NN.Dropout(p), lambda: torch.nn.Dropout(p), f"Dropout({p}) (p outside [0, 1])")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_activations(draw):
    x = draw.noncontiguous(draw.randn(draw.shape(ndim=(1, 4), size=(1, 5)), dtype=draw.choice([torch.float32, torch.float64])))
    name = draw.choice(["ReLU", "Tanh", "Sigmoid", "Flatten", "Dropout"])
    if name == "Flatten":
        n = max(x.dim(), 1)
        start = draw(-n, n - 1)
        end = draw(start % n, n - 1) - draw.choice([0, n])
        expect_layer(activation("Flatten", start, end), x, f"Flatten({start}, {end})", draw=draw)
    elif name == "Dropout":
        p = draw.choice([0.0, 0.1, 0.5, 0.9, 1.0])
        expect_dropout(p, x, f"Dropout({p})", draw(0, 10 ** 6))
    else:
        expect_layer(activation(name), x, f"{name}()", draw=draw)


for_random_inputs(test_activations, 25)
x = torch.ones(20000, dtype=torch.float64)
kept = OUR_NN.Dropout(0.3)(ours(x)).numpy()
assert set(np.unique(kept).round(6)) <= {0.0, round(1 / 0.7, 6)}, "Dropout(0.3)(ones) must give 0 or 1/0.7"
assert abs((kept == 0).mean() - 0.3) < 0.03, f"Dropout(0.3) zeroed {(kept == 0).mean():.1%} of the elements, not about 30%"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 9 — containers: `Sequential` and `ModuleList`
#
# A model made of a list of layers must keep them **registered**. A plain
# Python list — `self.layers = [Linear(4, 4), Linear(4, 2)]` — is an ordinary
# attribute: the walk never sees the layers, so `parameters()` misses their
# weights, the optimizer never trains them, `state_dict()` never saves them,
# and `to()` never converts them. Containers register each element with
# `add_module`, under the names `"0"`, `"1"`, ...:
#
# **`Sequential(*modules)`** — or `Sequential(OrderedDict(name=module, ...))`,
# which keeps those names — runs its modules one after the other in
# `forward(x)`. It supports `len(seq)`, iteration over the modules,
# `seq[i]` (negative too; `IndexError(f"index {i} is out of range")`),
# `seq[a:b]` — a new `Sequential` of the slice **keeping the names** (torch
# builds it from an `OrderedDict` of the sliced items) — `seq[i] = module`,
# `del seq[i]` (or a slice; the rest is renumbered `"0"`, `"1"`, ...), and
# `append(module)` (returns `self`).
#
# **`ModuleList(modules=None)`** holds modules without a `forward` of its own
# (your model's `forward` decides how to use them). `len`, iteration,
# `ml[i]` (negative too, same `IndexError`), `ml[a:b]` — a new `ModuleList`, so
# numbered again from `"0"` — `ml[i] = module`, `del ml[i]` (renumbered),
# `append(module)`, `extend(iterable)` (a non-iterable is a `TypeError`),
# `insert(index, module)` and `+=`. Its `repr` groups runs of equal reprs as
# torch's does: `(0-2): 3 x Linear(in_features=4, out_features=4, bias=True)`.
#
# Real PyTorch: [`torch/nn/modules/container.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/container.py).

# %% solution="ex_containers" reference=true
class Sequential(Module):
    def __init__(self, *args):
        super().__init__()
        ### BEGIN SOLUTION
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for index, module in enumerate(args):
                self.add_module(str(index), module)
        ### END SOLUTION

    def _index(self, idx) -> int:
        """idx as a position in 0 .. len - 1, or torch's IndexError."""
        ### BEGIN SOLUTION
        size = len(self)
        idx = operator.index(idx)
        if not -size <= idx < size:
            raise IndexError(f"index {idx} is out of range")
        return idx % size
        ### END SOLUTION

    def __getitem__(self, idx):
        ### BEGIN SOLUTION
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[self._index(idx)]
        ### END SOLUTION

    def __setitem__(self, idx, module) -> None:
        ### BEGIN SOLUTION
        key = list(self._modules.keys())[self._index(idx)]
        setattr(self, key, module)
        ### END SOLUTION

    def __delitem__(self, idx) -> None:
        ### BEGIN SOLUTION
        if isinstance(idx, slice):
            for key in list(self._modules.keys())[idx]:
                delattr(self, key)
        else:
            delattr(self, list(self._modules.keys())[self._index(idx)])
        modules = list(self._modules.values())
        self._modules.clear()
        for index, module in enumerate(modules):
            self._modules[str(index)] = module
        ### END SOLUTION

    def __len__(self) -> int:
        ### BEGIN SOLUTION
        return len(self._modules)
        ### END SOLUTION

    def __iter__(self):
        ### BEGIN SOLUTION
        return iter(self._modules.values())
        ### END SOLUTION

    def append(self, module) -> "Sequential":
        ### BEGIN SOLUTION
        self.add_module(str(len(self)), module)
        return self
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        for module in self:
            x = module(x)
        return x
        ### END SOLUTION


class ModuleList(Module):
    def __init__(self, modules=None):
        super().__init__()
        ### BEGIN SOLUTION
        if modules is not None:
            self.extend(modules)
        ### END SOLUTION

    def _key(self, idx) -> str:
        """The name ("0", "1", ...) of the module at idx (negative too), or torch's IndexError."""
        ### BEGIN SOLUTION
        idx = operator.index(idx)
        if not -len(self) <= idx < len(self):
            raise IndexError(f"index {idx} is out of range")
        return str(idx % len(self))
        ### END SOLUTION

    def __getitem__(self, idx):
        ### BEGIN SOLUTION
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[self._key(idx)]
        ### END SOLUTION

    def __setitem__(self, idx, module) -> None:
        ### BEGIN SOLUTION
        setattr(self, self._key(idx), module)
        ### END SOLUTION

    def __delitem__(self, idx) -> None:
        ### BEGIN SOLUTION
        if isinstance(idx, slice):
            for k in range(len(self._modules))[idx]:
                delattr(self, str(k))
        else:
            delattr(self, self._key(idx))
        modules = list(self._modules.values())
        self._modules.clear()
        for index, module in enumerate(modules):
            self._modules[str(index)] = module
        ### END SOLUTION

    def __len__(self) -> int:
        ### BEGIN SOLUTION
        return len(self._modules)
        ### END SOLUTION

    def __iter__(self):
        ### BEGIN SOLUTION
        return iter(self._modules.values())
        ### END SOLUTION

    def __iadd__(self, modules) -> "ModuleList":
        ### BEGIN SOLUTION
        return self.extend(modules)
        ### END SOLUTION

    def append(self, module) -> "ModuleList":
        ### BEGIN SOLUTION
        self.add_module(str(len(self)), module)
        return self
        ### END SOLUTION

    def extend(self, modules) -> "ModuleList":
        ### BEGIN SOLUTION
        if not hasattr(modules, "__iter__"):
            raise TypeError("ModuleList.extend should be called with an iterable, but got " + type(modules).__name__)
        offset = len(self)
        for i, module in enumerate(modules):
            self.add_module(str(offset + i), module)
        return self
        ### END SOLUTION

    def insert(self, index: int, module) -> None:
        ### BEGIN SOLUTION
        for i in range(len(self._modules), index, -1):
            self._modules[str(i)] = self._modules[str(i - 1)]
        self._modules[str(index)] = module
        ### END SOLUTION

    def __repr__(self) -> str:
        ### BEGIN SOLUTION
        reprs = [repr(module) for module in self]
        if not reprs:
            return type(self).__name__ + "()"
        runs = []  # [start, end, repr]
        for i, r in enumerate(reprs):
            if runs and runs[-1][2] == r:
                runs[-1][1] = i
            else:
                runs.append([i, i, r])
        lines = []
        for start, end, r in runs:
            line = f"({start}): {r}" if start == end else f"({start}-{end}): {end - start + 1} x {r}"
            lines.append(_addindent(line, 2))
        return type(self).__name__ + "(\n  " + "\n  ".join(lines) + "\n)"
        ### END SOLUTION


# %% tests="ex_containers" points=2
def mlp(sizes, act="ReLU", container="Sequential"):
    """An MLP with layers of the given sizes, as a Sequential (or a model holding a ModuleList)."""
    def make(nn):
        layers = []
        for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers.append(getattr(nn, act)())
        if container == "Sequential":
            return nn.Sequential(*layers)
        return ListModel.make(nn, layers)
    return make


class ListModel:
    @staticmethod
    def make(nn, layers):
        class Stack(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(layers)

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x
        return Stack()


def expect_container_ops(mine, theirs, ops, what):
    """Apply list operations in both worlds; compare the modules' names and types after each."""
    for text, op in ops:
        what = f"{what}; {text}"
        got = same_error(lambda: op(mine, OUR_NN), lambda: op(theirs, torch.nn), what)
        compare.assert_equal(len(mine), len(theirs), f"len(c) after {what}")
        compare.assert_equal([(k, type(m).__name__) for k, m in mine._modules.items()],
                             [(k, type(m).__name__) for k, m in theirs._modules.items()], f"c._modules after {what}")
        compare.assert_equal(repr_for_comparison(repr(mine)), repr_for_comparison(repr(theirs)), f"repr(c) after {what}")


x = torch.randn(5, 4)
expect_layer(mlp([4, 8, 3]), x, "Sequential(Linear(4, 8), ReLU(), Linear(8, 3))")
expect_layer(mlp([4, 8, 8, 3], "Tanh", "ModuleList"), x, "a model with a ModuleList of Linear and Tanh layers")
seq_ops = [("c[1:]", lambda c, nn: c[1:]), ("c[-1]", lambda c, nn: c[-1]), ("c.append(Sigmoid())", lambda c, nn: c.append(nn.Sigmoid())),
           ("del c[0]", lambda c, nn: c.__delitem__(0)), ("c[5]", lambda c, nn: c[5]), ("c[0] = Tanh()", lambda c, nn: c.__setitem__(0, nn.Tanh()))]
expect_container_ops(*build_both(mlp([4, 8, 3])), seq_ops, "c = Sequential(Linear(4, 8), ReLU(), Linear(8, 3))")
list_ops = [("c.append(Linear(2, 2))", lambda c, nn: c.append(nn.Linear(2, 2))), ("c.extend([ReLU(), ReLU()])", lambda c, nn: c.extend([nn.ReLU(), nn.ReLU()])),
            ("c.insert(1, Tanh())", lambda c, nn: c.insert(1, nn.Tanh())), ("del c[-2]", lambda c, nn: c.__delitem__(-2)),
            ("c.extend(5)", lambda c, nn: c.extend(5))]
expect_container_ops(OUR_NN.ModuleList([OUR_NN.Linear(2, 2)]), torch.nn.ModuleList([torch.nn.Linear(2, 2)]), list_ops, "c = ModuleList([Linear(2, 2)])")
named = lambda nn: nn.Sequential(OrderedDict(fc=nn.Linear(4, 8), act=nn.ReLU(), out=nn.Linear(8, 3)))  # noqa: E731
for make, what in [(mlp([4, 8, 3]), "Sequential(Linear(4, 8), ReLU(), Linear(8, 3))"),
                   (named, "Sequential(OrderedDict(fc=Linear(4, 8), act=ReLU(), out=Linear(8, 3)))"),
                   (lambda nn: nn.ModuleList([nn.Linear(2, 2), nn.ReLU(), nn.Tanh()]), "ModuleList([Linear(2, 2), ReLU(), Tanh()])")]:
    mine, theirs = make(OUR_NN), make(torch.nn)
    compare.assert_equal(list(mine._modules), list(theirs._modules), f"the names in c = {what}")
    for text, get in [("c[1:]", lambda c: c[1:]), ("c[::2]", lambda c: c[::2])]:
        got, want = get(mine), get(theirs)
        compare.assert_equal(type(got).__name__, type(want).__name__, f"the type of {text} for c = {what}")
        compare.assert_equal(list(got._modules), list(want._modules), f"the names in {text} for c = {what} (a "
                             "Sequential's slice keeps the names, a ModuleList's is numbered again)")
mine, theirs = OUR_NN.ModuleList([OUR_NN.ReLU()]), torch.nn.ModuleList([torch.nn.ReLU()])
mine += [OUR_NN.Tanh(), OUR_NN.Sigmoid()]
theirs += [torch.nn.Tanh(), torch.nn.Sigmoid()]
compare.assert_equal(repr(mine), repr(theirs), "repr(c) after c = ModuleList([ReLU()]); c += [Tanh(), Sigmoid()]")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_containers(draw):
    sizes = [draw(1, 9) for _ in range(draw(2, 5))]
    act = draw.choice(["ReLU", "Tanh", "Sigmoid"])
    container = draw.choice(["Sequential", "ModuleList"])
    x = draw.noncontiguous(draw.randn(draw(1, 6), sizes[0]))
    mine, theirs = expect_layer(mlp(sizes, act, container), x, f"an MLP {sizes} with {act} in a {container}",
                                draw=draw)
    seq = mine if container == "Sequential" else mine.layers
    seq_theirs = theirs if container == "Sequential" else theirs.layers
    n = len(seq_theirs)
    for idx in [draw(-n - 1, n), slice(draw(-n, n), draw(-n, n)), slice(None, None, 2)]:
        same_error(lambda: seq[idx], lambda: seq_theirs[idx], f"c[{idx}] where c is {seq_theirs!r}")
        if isinstance(idx, slice):
            part, part_theirs = seq[idx], seq_theirs[idx]
            assert type(part) is type(seq), f"c[{idx}] must be a {type(seq).__name__}"
            compare.assert_equal(list(part._modules), list(part_theirs._modules), f"the names in c[{idx}] where c is {seq_theirs!r}")
            for m, m_theirs in zip(part, part_theirs):
                assert m is seq[list(seq_theirs).index(m_theirs)], f"c[{idx}] must hold the same module objects as c"
        elif -n <= idx < n:
            assert seq[idx] is list(seq)[idx], f"c[{idx}] is not the module that iteration gives at that position"
    ops = []
    for _ in range(6):
        k = draw(-n - 1, n)
        a, b = draw(0, n), draw(0, n)
        ops.append(draw.choice([(f"c.append(Tanh())", lambda c, nn: c.append(nn.Tanh())),
                                (f"del c[{k}]", lambda c, nn, k=k: c.__delitem__(k)),
                                (f"del c[{a}:{b}]", lambda c, nn, a=a, b=b: c.__delitem__(slice(a, b))),
                                (f"c[{k}] = ReLU()", lambda c, nn, k=k: c.__setitem__(k, nn.ReLU())),
                                (f"c[{a}:{b}]", lambda c, nn, a=a, b=b: c[a:b])]
                               + ([(f"c.insert({k}, Sigmoid())", lambda c, nn, k=k: c.insert(k, nn.Sigmoid())),
                                   ("c += [ReLU()]", lambda c, nn: c.__iadd__([nn.ReLU()])),
                                   ("c.extend((Linear(2, 3), Linear(2, 3)))", lambda c, nn: c.extend((nn.Linear(2, 3), nn.Linear(2, 3))))]
                                  if container == "ModuleList" else [])))
    expect_container_ops(seq, seq_theirs, ops, f"c = {container} of an MLP {sizes}")


for_random_inputs(test_containers, 12)
seq = OUR_NN.Sequential(OrderedDict([("first", OUR_NN.Linear(3, 3)), ("act", OUR_NN.ReLU()), ("last", OUR_NN.Linear(3, 1))]))
seq_theirs = torch.nn.Sequential(OrderedDict([("first", torch.nn.Linear(3, 3)), ("act", torch.nn.ReLU()), ("last", torch.nn.Linear(3, 1))]))
seq.load_state_dict(seq_theirs.state_dict())
expect_same_model(seq, seq_theirs, "Sequential(OrderedDict(first=Linear(3, 3), act=ReLU(), last=Linear(3, 1)))")
compare.assert_equal(list(seq[1:]._modules), list(seq_theirs[1:]._modules), "the names in seq[1:] of a Sequential built from an OrderedDict")
run_both(seq, seq_theirs, torch.randn(4, 3), "Sequential(OrderedDict(...))")


class PlainList(OUR_NN.Module):  # the mistake containers exist for
    def __init__(self):
        super().__init__()
        self.layers = OUR_NN.ModuleList([OUR_NN.Linear(2, 2), OUR_NN.Linear(2, 2)])


compare.assert_equal(len(list(PlainList().parameters())), 4, "the parameters of a model whose layers are in a ModuleList")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 10 — normalisation: `LayerNorm` and `BatchNorm1d`
#
# Both subtract a mean and divide by a standard deviation, then scale and
# shift with learned parameters `weight` (ones at first) and `bias` (zeros).
# Build them from the ops of chapter 02 — autograd differentiates the
# composition for you. Use the **biased** variance (divide by `n`) to normalise:
#
# $$y = \frac{x - \text{mean}}{\sqrt{\text{var} + \varepsilon}} \cdot \text{weight} + \text{bias}$$
#
# **`LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, bias=True)`**
# normalises each sample over its **last** dims, the ones in `normalized_shape`
# (an int is a 1-tuple), and `weight`, `bias` have that shape (absent — `None`
# — without `elementwise_affine`; `bias` absent with `bias=False`). An input
# whose last dims are not `normalized_shape` is a `RuntimeError`. The same in
# training and eval. `extra_repr`: `(8,), eps=1e-05, elementwise_affine=True, bias=True`.
#
# **`BatchNorm1d(num_features, eps=1e-5, momentum=0.1, affine=True,
# track_running_stats=True)`** normalises each **feature** (channel) over the
# batch: input `(N, C)` or `(N, C, L)`, statistics over dims `0` (and `2`) —
# anything else is `ValueError(f"expected 2D or 3D input (got {d}D input)")`.
# It keeps **buffers** (state that is saved, converted and loaded, but not
# trained): `running_mean` (zeros), `running_var` (ones) and
# `num_batches_tracked` (an int64 0-dim tensor, 0) — all `None` without
# `track_running_stats`. `weight`, `bias` of shape `(C,)` (`None` without
# `affine`).
#
# - **training** mode: normalise with the batch's mean and biased variance;
#   `n = N·L` values per channel must be more than 1 (`ValueError("Expected more
#   than 1 value per channel when training, got input size ...")`). With running
#   stats, update them **in place**, inside `no_grad()`: `num_batches_tracked += 1`,
#   then with `f = momentum` (or, for `momentum=None`, `1 / num_batches_tracked`,
#   a cumulative average)
#   `running_mean = (1 − f)·running_mean + f·mean` and
#   `running_var = (1 − f)·running_var + f·var_unbiased`, where the **unbiased**
#   variance divides by `n − 1` (`var · n / (n − 1)`): it estimates the
#   variance of all the data, not of this batch.
# - **eval** mode: normalise with `running_mean` and `running_var` (no update)
#   — or with the batch's statistics if there are no running stats.
#
# `extra_repr`: `4, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True`.
#
# Real PyTorch: [`normalization.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/normalization.py),
# [`batchnorm.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/batchnorm.py)
# and `batch_norm_cpu_update_stats_template` in
# [`aten/src/ATen/native/Normalization.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/Normalization.cpp).

# %% solution="ex_norms" reference=true
class LayerNorm(Module):
    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        ### BEGIN SOLUTION
        dtype = dtype_arg(dtype) or float32
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, dtype=dtype))
            if bias:
                self.bias = Parameter(zeros(self.normalized_shape, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        n = len(self.normalized_shape)
        if x.dim() < n or tuple(x.shape[x.dim() - n:]) != self.normalized_shape:
            raise RuntimeError(f"Given normalized_shape={list(self.normalized_shape)}, expected input with shape "
                               f"[*, {', '.join(map(str, self.normalized_shape))}], but got input of size{list(x.shape)}")
        dims = tuple(range(x.dim() - n, x.dim()))
        mean = x.mean(dims, keepdim=True)
        centered = x - mean
        var = (centered * centered).mean(dims, keepdim=True)
        y = centered / (var + self.eps).sqrt()
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y
        ### END SOLUTION

    def extra_repr(self) -> str:
        ### BEGIN SOLUTION
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")
        ### END SOLUTION


class BatchNorm1d(Module):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *, bias: bool = True):
        super().__init__()
        ### BEGIN SOLUTION
        dtype = dtype_arg(dtype) or float32
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(ones(num_features, dtype=dtype))
            if bias:
                self.bias = Parameter(zeros(num_features, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype))
            self.register_buffer("running_var", ones(num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        if x.dim() not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {x.dim()}D input)")
        f = 0.0 if self.momentum is None else self.momentum
        update = self.training and self.track_running_stats
        if update:  # counted first, as torch does (even when the batch is then refused)
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative average
                f = 1.0 / float(self.num_batches_tracked.item())
        channels = x.shape[1]
        if channels != self.num_features:
            raise RuntimeError(f"running_mean should contain {channels} elements not {self.num_features}")
        dims = (0,) if x.dim() == 2 else (0, 2)
        shape = (1, channels) if x.dim() == 2 else (1, channels, 1)
        if self.training or self.running_mean is None:
            n = x.numel() // max(channels, 1)
            if self.training and n <= 1:
                raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                                 f"{size_text(x.shape)}")
            mean = x.mean(dims, keepdim=True)
            centered = x - mean
            var = (centered * centered).mean(dims, keepdim=True)
            if update:
                with no_grad():
                    self.running_mean.mul_(1 - f).add_(mean.reshape(channels) * f)
                    self.running_var.mul_(1 - f).add_(var.reshape(channels) * (f * n / (n - 1)))
        else:
            centered = x - self.running_mean.reshape(shape)
            var = self.running_var.reshape(shape)
        y = centered / (var + self.eps).sqrt()
        if self.weight is not None:
            y = y * self.weight.reshape(shape)
        if self.bias is not None:
            y = y + self.bias.reshape(shape)
        return y
        ### END SOLUTION

    def extra_repr(self) -> str:
        ### BEGIN SOLUTION
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")
        ### END SOLUTION


# %% tests="ex_norms" points=3
def layernorm(shape, **kwargs):
    return lambda nn: nn.LayerNorm(shape, **kwargs)


def batchnorm(c, **kwargs):
    return lambda nn: nn.BatchNorm1d(c, **kwargs)


def randomise_affine(mine, theirs, draw):
    """Give both the same random weights (ones and zeros test nothing)."""
    state = {k: (draw.randn(v.shape, dtype=v.dtype) if v.is_floating_point() and "running" not in k else v)
             for k, v in theirs.state_dict().items()}
    theirs.load_state_dict(state)
    mine.load_state_dict(state)


def expect_norm_steps(make, shapes, what, dtype=torch.float64, modes=None, draw=inputs):
    """Several forward/backward steps in train and eval mode; the buffers after each. (Gradients in float64
    only: through a normalisation, float32 rounding differs between any two correct implementations.)
    `draw` makes the random weights, modes and inputs (the course's stream by default)."""
    mine, theirs = build_both(make, what)
    mine.to(dtype)
    theirs.to(dtype)
    randomise_affine(mine, theirs, draw)
    expect_same_model(mine, theirs, what)
    for step, shape in enumerate(shapes):
        mode = modes[step] if modes else draw.choice(["train", "train", "eval"])
        getattr(mine, mode)()
        getattr(theirs, mode)()
        x = draw.noncontiguous(draw.randn(shape, dtype=dtype) * 2 + 1)
        run_both(mine, theirs, x, f"{what}, step {step + 1}, in {mode} mode,", grad=dtype == torch.float64, draw=draw,
                 ill_conditioned=True)
        expect_same_model(mine, theirs, f"{what} after step {step + 1} (in {mode} mode)")
    return mine, theirs


expect_layer(layernorm(4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64), "LayerNorm(4, dtype=torch.float64)")
expect_layer(layernorm((2, 3)), torch.randn(5, 2, 3), "LayerNorm((2, 3))", grad=False)
expect_norm_steps(layernorm(5, elementwise_affine=False), [(2, 5)] * 2, "LayerNorm(5, elementwise_affine=False)")
expect_norm_steps(batchnorm(4), [(8, 4), (6, 4), (5, 4)], "BatchNorm1d(4)", modes=["train", "train", "eval"])
expect_norm_steps(batchnorm(3), [(4, 3, 5), (4, 3, 2)], "BatchNorm1d(3) on (N, C, L)", modes=["train", "eval"])
expect_norm_steps(batchnorm(3, momentum=None), [(4, 3)] * 3, "BatchNorm1d(3, momentum=None)", modes=["train"] * 3)
expect_norm_steps(batchnorm(3, track_running_stats=False, affine=False), [(4, 3)] * 2,
                  "BatchNorm1d(3, track_running_stats=False, affine=False)", modes=["train", "eval"])
expect_norm_steps(layernorm(4, bias=False), [(2, 4)], "LayerNorm(4, bias=False)", modes=["train"])
mine, theirs = build_both(batchnorm(3))
for bad in [torch.randn(1, 3), torch.randn(4, 3, 2, 2), torch.randn(4, 5)]:
    same_error(lambda: mine(ours(bad)), lambda: theirs(bad), f"BatchNorm1d(3)(x) in train mode for x of shape {tuple(bad.shape)}")
mine.eval()
theirs.eval()
run_both(mine, theirs, torch.randn(1, 3), "BatchNorm1d(3).eval() on one sample")
mine, theirs = build_both(layernorm(3))
for bad in [torch.randn(3, 4), torch.randn(2, 1)]:
    same_error(lambda: mine(ours(bad)), lambda: theirs(bad), f"LayerNorm(3)(x) for x of shape {tuple(bad.shape)}")
bn = OUR_NN.BatchNorm1d(3)
buffers = dict(bn.named_buffers())
bn(ours(torch.randn(5, 3)))
for name, b in bn.named_buffers():
    assert b is buffers[name], (f"BatchNorm1d(3).{name} is a new tensor after a training step; torch updates the "
                                "buffer in place (the same tensor object)")
compare.assert_equal(sorted(n for n, _ in bn.named_parameters()), ["bias", "weight"], "the parameters of BatchNorm1d(3) (running stats are buffers)")
for make, what in [(layernorm(8), "LayerNorm(8)"), (batchnorm(4), "BatchNorm1d(4)")]:
    compare.assert_equal(repr(make(OUR_NN)), repr(make(torch.nn)), f"repr({what}) (its extra_repr)")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_batchnorms(draw):
    dtype = draw.choice([torch.float32, torch.float64])
    c = draw(1, 6)
    kwargs = draw.choice([{}, {"momentum": draw.choice([None, 0.3, 1.0])}, {"affine": False}, {"track_running_stats": False},
                          {"eps": 0.1}])
    shapes = [draw.choice([(draw(2, 7), c), (draw(1, 4), c, draw(2, 4))])
              for _ in range(draw(2, 5))]
    args = ", ".join([str(c)] + [f"{k}={v}" for k, v in kwargs.items()])
    expect_norm_steps(batchnorm(c, **kwargs), shapes, f"BatchNorm1d({args}) ({dtype})", dtype, draw=draw)


for_random_inputs(test_batchnorms, 12)


def test_layernorms(draw):
    dtype = draw.choice([torch.float32, torch.float64])
    normalized = draw.shape(ndim=(1, 2), size=(1, 5))
    kwargs = draw.choice([{}, {"elementwise_affine": False}, {"bias": False}, {"eps": 0.01}])
    shapes = [draw.shape(ndim=(0, 2), size=(1, 4)) + normalized for _ in range(2)]
    expect_norm_steps(layernorm(normalized, **kwargs), shapes, f"LayerNorm({normalized}, {kwargs}) ({dtype})", dtype,
                      draw=draw)


for_random_inputs(test_layernorms, 12)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 11 — `Embedding`
#
# `Embedding(num_embeddings, embedding_dim, padding_idx=None)` is a table:
# `weight` of shape `(num_embeddings, embedding_dim)`, initialised from the
# standard normal (`normal_()`, torch's generator), and `forward(indices)` picks
# rows: for int64 `indices` of any shape `S`, the result has shape
# `S + (embedding_dim,)`, row `weight[indices[...]]`. It is how a model turns
# word ids into vectors.
#
# Picking rows is not one of chapter 02's operations: it is an operator of its
# own, `"embedding"`, with its backward `"embedding_backward"` (torch's
# `aten::embedding` and `aten::embedding_backward`), as `"linear"` is in
# exercise 7. The cell gives `EmbeddingFunction`, the Autograd kernel of
# `"embedding"`; write the two CPU kernels, with NumPy:
#
# - `embedding_cpu(weight, indices, padding_idx)`: NumPy's fancy indexing
#   (`weight.numpy()[indices.numpy()]`). Torch's errors: indices that are not
#   integers (`RuntimeError`), an index outside `[0, num_embeddings)`
#   (`IndexError("index out of range in self")`).
# - `embedding_backward_cpu(grad, indices, num_weights, padding_idx)`: the
#   gradient of the weight, of shape `(num_weights, embedding_dim)`. A row used
#   several times gets the **sum** of their gradients — a scatter-add into
#   zeros (`np.add.at(out, indices, grad)`; plain `out[indices] += grad` keeps
#   only one of the repeated rows). The row `padding_idx` gets no gradient at
#   all.
#
# `forward(indices)` is then `dispatch("embedding", self.weight, indices,
# self.padding_idx)`.
#
# `padding_idx` may be negative (`num_embeddings + padding_idx`, checked to be in
# range with an `AssertionError` in `__init__`, as torch's `assert`); that row of
# the weight is zeroed at initialisation. `extra_repr`: `10, 3`, plus
# `, padding_idx=0` when there is one.
#
# Real PyTorch: [`torch/nn/modules/sparse.py`](https://github.com/pytorch/pytorch/blob/main/torch/nn/modules/sparse.py)
# and `embedding`, `embedding_dense_backward` in [`aten/src/ATen/native/Embedding.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/Embedding.cpp).

# %% solution="ex_embedding" reference=true
@register("embedding")
class EmbeddingFunction(Function):
    """The Autograd kernel of "embedding": weight[indices] in one node, whose backward is "embedding_backward"."""

    @staticmethod
    def forward(ctx, weight, indices, padding_idx):
        ctx.num_weights, ctx.padding_idx = weight.shape[0], padding_idx
        ctx.save_for_backward(indices)
        return redispatch("embedding", DispatchKey.Autograd, weight, indices, padding_idx)

    @staticmethod
    def backward(ctx, grad):
        (indices,) = ctx.saved_tensors
        return dispatch("embedding_backward", grad, indices, ctx.num_weights, ctx.padding_idx), None, None


@register_kernel("embedding", DispatchKey.CPU)
def embedding_cpu(weight: Tensor, indices: Tensor, padding_idx) -> Tensor:
    """weight[indices]: rows of the table (padding_idx matters only to the backward)."""
    ### BEGIN SOLUTION
    if indices.dtype is not int64:
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {indices.dtype.name} instead")
    idx = indices.numpy()
    if idx.size and (idx.min() < 0 or idx.max() >= weight.shape[0]):
        raise IndexError("index out of range in self")
    return from_numpy(weight.numpy()[idx])
    ### END SOLUTION


@register_kernel("embedding_backward", DispatchKey.CPU)
def embedding_backward_cpu(grad: Tensor, indices: Tensor, num_weights: int, padding_idx) -> Tensor:
    """The weight's gradient: each row the sum of the gradients of the places that used it; none for padding_idx."""
    ### BEGIN SOLUTION
    dim = grad.shape[-1]
    out = np.zeros((num_weights, dim), grad.dtype.numpy)
    np.add.at(out, indices.numpy().reshape(-1), grad.numpy().reshape(-1, dim))
    if padding_idx is not None:
        out[padding_idx] = 0
    return from_numpy(out)
    ### END SOLUTION


class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx=None, device=None, dtype=None):
        super().__init__()
        ### BEGIN SOLUTION
        dtype = dtype_arg(dtype) or float32
        if padding_idx is not None:
            if padding_idx > 0:
                assert padding_idx < num_embeddings, "Padding_idx must be within num_embeddings"
            elif padding_idx < 0:
                assert padding_idx >= -num_embeddings, "Padding_idx must be within num_embeddings"
                padding_idx = num_embeddings + padding_idx
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype))
        self.reset_parameters()
        ### END SOLUTION

    def reset_parameters(self) -> None:
        ### BEGIN SOLUTION
        with no_grad():
            self.weight.normal_()
            if self.padding_idx is not None:
                self.weight[self.padding_idx].fill_(0)
        ### END SOLUTION

    def forward(self, indices: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return dispatch("embedding", self.weight, indices, self.padding_idx)
        ### END SOLUTION

    def extra_repr(self) -> str:
        ### BEGIN SOLUTION
        text = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            text += f", padding_idx={self.padding_idx}"
        return text
        ### END SOLUTION


# %% tests="ex_embedding" points=2
def embedding(n, d, **kwargs):
    return lambda nn: nn.Embedding(n, d, **kwargs)


expect_layer(embedding(10, 3), torch.tensor([[1, 2, 2], [9, 0, 1]]), "Embedding(10, 3)")
expect_layer(embedding(5, 2, padding_idx=0), torch.tensor([0, 1, 0, 4, 1]), "Embedding(5, 2, padding_idx=0)")
expect_init(embedding(6, 4), "Embedding(6, 4)", 0)
expect_init(embedding(6, 4, padding_idx=-1), "Embedding(6, 4, padding_idx=-1)", 3)
mine, theirs = build_both(embedding(4, 2))
for bad in [torch.tensor([4]), torch.tensor([-1]), torch.tensor([0.0, 1.0])]:
    same_error(lambda: mine(ours(bad)), lambda: theirs(bad), f"Embedding(4, 2)(indices) for indices {bad.tolist()}")
for padding_idx in (4, -5):
    same_error(lambda: OUR_NN.Embedding(4, 2, padding_idx=padding_idx),
               lambda: torch.nn.Embedding(4, 2, padding_idx=padding_idx),
               f"Embedding(4, 2, padding_idx={padding_idx}) (a padding_idx out of range)")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def test_embeddings(draw):
    n, d = draw(1, 12), draw(1, 5)
    kwargs = draw.choice([{}, {}, {"padding_idx": draw(-n, n - 1)}, {"dtype": torch.float64}])
    shape = draw.shape(ndim=(0, 3), size=(1, 6), allow_zero=True)
    indices = torch.randint(0, n, shape, generator=draw.generator())
    if indices.dim() >= 2 and draw(0, 1):
        indices = indices.transpose(0, 1)
    what = f"Embedding({n}, {d}, {kwargs})"
    expect_layer(embedding(n, d, **kwargs), indices, what, draw=draw)
    expect_init(embedding(n, d, **kwargs), what, draw(0, 10 ** 6))


for_random_inputs(test_embeddings, 15)
for p in (5, -6):
    same_error(lambda: OUR_NN.Embedding(5, 2, padding_idx=p), lambda: torch.nn.Embedding(5, 2, padding_idx=p), f"Embedding(5, 2, padding_idx={p})")


# the whole chapter at once: a random model in both worlds, torch's weights loaded into yours, trained a few steps
def random_model(nn, spec):
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            vocab, dim, hidden, out = spec["sizes"]
            self.embed = nn.Embedding(vocab, dim)
            layers = [nn.Flatten(), nn.Linear(dim * spec["length"], hidden)]
            layers.append(nn.BatchNorm1d(hidden) if spec["norm"] == "batch" else nn.LayerNorm(hidden))
            layers += [getattr(nn, spec["act"])(), nn.Dropout(spec["p"])]
            self.body = nn.Sequential(*layers)
            self.heads = nn.ModuleList([nn.Linear(hidden, out) for _ in range(spec["heads"])])
            if spec["tied"]:
                self.heads[-1].weight = self.heads[0].weight

        def forward(self, x):
            h = self.body(self.embed(x))
            total = self.heads[0](h)
            for head in self.heads[1:]:
                total = total + head(h)
            return total
    return Model()


def test_whole_models(draw):  # each step starts from the model the step before left: one input is all three
    spec = {"sizes": (draw(3, 9), draw(1, 4), draw(2, 8), draw(1, 4)),
            "length": draw(1, 3), "norm": draw.choice(["batch", "layer"]), "act": draw.choice(["ReLU", "Tanh", "Sigmoid"]),
            "p": draw.choice([0.0, 0.5]), "heads": draw(1, 3), "tied": draw.choice([True, False])}
    torch.manual_seed(draw(0, 10 ** 6))  # torch's initial weights too are part of the input that a failure replays
    theirs = random_model(torch.nn, spec)
    mine = random_model(OUR_NN, spec)
    mine.load_state_dict(theirs.state_dict())
    mine.double()  # float64: through a normalisation, float32 rounding differs between correct implementations
    theirs.double()
    for step in range(3):
        mode = draw.choice(["train", "eval"])
        mine.train(mode == "train")
        theirs.train(mode == "train")
        x = torch.randint(0, spec["sizes"][0], (draw(2, 5), spec["length"]), generator=draw.generator())
        if (x == x[0]).all():
            # one row repeated: BatchNorm centres it to exactly 0, ReLU's kink, where rounding alone (not the
            # code) decides the gradient; a second row makes the batch's statistics mean something
            x[-1, 0] = (x[-1, 0] + 1) % spec["sizes"][0]
        seed = draw(0, 10 ** 6)
        torch.manual_seed(seed)
        out_theirs = theirs(x)
        torch.manual_seed(seed)
        out = mine(ours(x))
        compare.assert_matches(out, out_theirs.detach(), f"a model {spec}, step {step + 1} in {mode} mode")
        g = torch.randn(out_theirs.shape, dtype=out_theirs.dtype)
        out_theirs.backward(g)
        out.backward(ours(g))
        mine_params = dict(mine.named_parameters())
        for name, p in theirs.named_parameters():
            compare.assert_matches(mine_params[name].grad, p.grad, f"{name}.grad of a model {spec}, step {step + 1}")
        expect_same_model(mine, theirs, f"a model {spec} after step {step + 1} in {mode} mode")
    back = random_model(torch.nn, spec)
    back.load_state_dict(torch_state_dict(mine))  # and back into torch
    back.eval()
    mine.eval()
    back.double()
    x = torch.randint(0, spec["sizes"][0], (3, spec["length"]), generator=draw.generator())
    compare.assert_matches(mine(ours(x)), back(x).detach(), f"a model {spec} loaded back into torch")


for_random_inputs(test_whole_models, 4)
### END HIDDEN TESTS

# %% [markdown]
# ## Written answer (graded by your instructor)
#
# `BatchNorm1d` keeps `running_mean` and `running_var` as **buffers**, not as
# parameters. In a few sentences: what would go wrong — in training, in saving
# and loading, in `model.to(torch.float64)` — if they were plain attributes
# (`self.running_mean = zeros(C)` on an object whose `__setattr__` did not file
# tensors), and what if they were `Parameter`s? And why does the running
# variance use the unbiased estimate while the normalisation of the batch uses
# the biased one?

# %% [markdown] manual="written_buffers" points=2
# ### BEGIN SOLUTION
# A model answer, for whoever grades: as plain attributes the running statistics
# would be invisible to the walk: `state_dict()` would not save them (a loaded
# model would normalise with zeros and ones in eval mode), `to()` would leave
# them float32 or on the wrong device (a dtype or device mismatch in eval mode),
# and `load_state_dict` would report them as unexpected keys. As `Parameter`s
# they would be in `parameters()`: the optimizer would update them with
# gradients (they have none, or weight decay would shrink them), they would
# count as trainable weights, and `requires_grad` would make their in-place
# update an autograd error. Buffers are exactly "state that is saved and moved
# but not trained". The batch is normalised with its own biased variance because
# that is the variance of the numbers being normalised (the output has unit
# variance exactly); the running estimate is meant for the whole data
# distribution, of which a batch is a sample, and the sample variance
# underestimates the population's by a factor (n − 1)/n: Bessel's correction
# undoes that, which matters for small batches.
# ### END SOLUTION

# %% [markdown]
# **Your turn.** This cell is yours to edit and is not graded. Build a model of
# your own — a small MLP with `BatchNorm1d` and `Dropout` — in both worlds, copy
# torch's weights into yours with `load_state_dict`, and compare:
#
# ```python
# make = lambda nn: nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2))
# mine, theirs = build_both(make)
# print(mine)
# run_both(mine.eval(), theirs.eval(), torch.randn(4, 8), "my MLP")
# ```

# %% free=true


# %% reference=true
# The names of this chapter that later chapters may use (`from picotorch import ...`).
__all__ = ["DEVICES", "TORCH_DTYPES", "device_name", "dtype_arg", "parse_to", "torch_generator_values", "bernoulli", "ToCopy",
           "Parameter", "Module", "IncompatibleKeys", "size_text", "as_ours", "torch_state_dict", "RemovableHandle",
           "kaiming_uniform_", "LinearFunction", "linear_cpu", "linear_backward_cpu", "Linear", "ReLU", "Tanh",
           "Sigmoid", "Flatten", "Dropout",
           "Sequential", "ModuleList", "LayerNorm", "BatchNorm1d", "EmbeddingFunction", "embedding_cpu",
           "embedding_backward_cpu", "Embedding"]

# %% [markdown]
# ## Check your work
#
# Save the notebook (Ctrl+S), then run the cell below: it re-runs the saved
# file in a fresh kernel, as the grader will, and lists every exercise.

# %%
check()
