# ---
# jupyter:
#   course:
#     chapter: 02_autograd
#     title: Autograd
#     files:
#     - figures/backward_graph.svg
#     - figures/autograd_key.svg
#     - figures/sum_to_shape.svg
# ---

# %% [markdown]
# # Chapter 02 — Autograd
#
# Training works because of one trick: while the forward pass runs, PyTorch
# **records** what it did, and `loss.backward()` walks that record backwards,
# applying the chain rule at every step. The record is a graph, and the walker
# is the **autograd engine**.
#
# In this chapter you rebuild PyTorch's own design, piece by piece, on the
# `Tensor` of chapter 01:
#
# | piece | in torch | you build it in |
# |---|---|---|
# | grad mode: record or not | `torch.no_grad`, `torch.enable_grad` | exercise 1 |
# | leaves: `requires_grad`, `.grad`, `is_leaf`, `detach` | `torch.Tensor` | exercise 2 |
# | `Function`: `forward(ctx, ...)`, `backward(ctx, grad)`, `ctx.save_for_backward` | `torch.autograd.Function` | exercise 3 |
# | the engine: `backward()` in dependency order | `torch/csrc/autograd/engine.cpp` | exercise 4 |
# | the derivative of every op of chapter 01 | `tools/autograd/derivatives.yaml` | exercises 5–9 |
# | a numerical gradient check | `torch.autograd.gradcheck` | exercise 10 |
#
# Every test runs the same computation through your autograd and through
# `torch.autograd`, and compares the results and every gradient.
#
# **Time:** about 6 hours — ten exercises; the engine (exercise 4) is the longest.
#
# **How this notebook works.** Cells with *YOUR CODE HERE* are yours; each is
# followed by a test cell. The visible tests are a first taste; at grading,
# hidden tests build random graphs on random inputs. `check("ex_engine")` re-runs
# one exercise's visible tests; `check()` (last cell) checks the whole saved
# notebook as the grader will.
#
# **Your chapter 01.** `picotorch` in this folder is the course's reference
# solution of chapter 01, so that a mistake there cannot fail this chapter. To
# run this chapter on your own chapter 01 instead, run `course use-mine
# 02_autograd` in a terminal (and `course use-reference 02_autograd` to go back).

# %%
import numpy as np
import torch

from course import Checker, compare, inputs
from course.testing import for_random_inputs, with_fixed_inputs

check = Checker("02_autograd")

# %% [markdown]
# ## 1. What we start from
#
# The next cell imports chapter 01's `Tensor` and a few of its helpers. Every
# cell marked like it, and every exercise of this chapter, becomes part of
# `picotorch` for the chapters after this one: your `Tensor` is about to learn
# to differentiate, and the next chapters will use that.

# %% reference=true
import functools
import math
import weakref

import numpy as np
import torch

from picotorch import (FALLBACKS, FALLTHROUGH, LOCAL_KEYS, OPS, REPR_FIELDS, TENSOR_KEYS, DispatchKey, MaxResult, Tensor,
                       add_methods, arange, bool_, broadcast_shapes, dispatch, float32, forget_kernel_choices,
                       from_numpy, from_torch, operator, register_kernel, shape_arg, wrap_dim, zeros)

# %% [markdown]
# ## 2. Grad mode
#
# Recording costs time and memory, and often nothing needs it: evaluating a
# model, updating weights in an optimizer. So autograd has a switch, **grad
# mode**. When it is off, operations run but nothing is recorded.
#
# In picotorch the switch is the dispatcher's (chapter 01, section 5): autograd
# is a **dispatch key**, `DispatchKey.Autograd`, in front of `CPU`. A tensor
# that requires grad brings it into the key set of every call it takes part
# in, so the call reaches autograd's kernel first; that kernel records the
# node and *redispatches* to the key below it, where the arithmetic happens.
# Grad mode off is that key in this thread's **exclude set**: every call then
# skips autograd and goes straight to the CPU kernel. `is_grad_enabled()` and
# `set_grad_enabled(mode)` (given below) read and write that set; so does
# `GradMode.enabled`. Like torch's, the set is per thread: grad mode off in one
# thread leaves the others recording.
#
# Where torch differs: its thread-local key sets are
# [`c10/core/impl/LocalDispatchKeySet.h`](https://github.com/pytorch/pytorch/blob/main/c10/core/impl/LocalDispatchKeySet.h),
# and it puts an autograd key (`AutogradCPU`, `AutogradCUDA`...) on *every*
# tensor, not only on those that require grad (`torch._C._dispatch_keys(t)`
# shows it); the autograd kernel itself then checks `requires_grad`. Its
# `no_grad` does not touch the key sets: it clears a thread-local flag
# ([`c10/core/GradMode.h`](https://github.com/pytorch/pytorch/blob/main/c10/core/GradMode.h))
# that the autograd kernels read. Excluding the autograd keys is what torch's
# `inference_mode` does (and what its kernels do around their own redispatch,
# `AutoDispatchBelowADInplaceOrView`). picotorch merges the two: one mechanism,
# the one you can see.
#
# The next cell declares the key and gives the switch: `is_grad_enabled()`,
# `set_grad_enabled(mode)` and `GradMode.enabled`.

# %% reference=true
DispatchKey.declare("Autograd")  # priority 8 (chapter 01's DISPATCH_KEYS): above the backends and the modes
_AUTOGRAD = DispatchKey.Autograd.bit


def is_grad_enabled() -> bool:
    return not LOCAL_KEYS.excluded & _AUTOGRAD


def set_grad_enabled(mode: bool) -> None:
    """Switch recording on or off on this thread: take Autograd out of, or put it into, the exclude set
    (torch's set_grad_enabled is also a context manager; ours is only this)."""
    if mode:
        LOCAL_KEYS.excluded &= ~_AUTOGRAD
    else:
        LOCAL_KEYS.excluded |= _AUTOGRAD


class _GradModeFlag(type):
    @property
    def enabled(cls) -> bool:
        return not LOCAL_KEYS.excluded & _AUTOGRAD

    @enabled.setter
    def enabled(cls, mode: bool) -> None:
        set_grad_enabled(mode)


class GradMode(metaclass=_GradModeFlag):
    """`GradMode.enabled`: is the forward pass being recorded on this thread? (c10::GradMode in torch)"""

# %% [markdown]
# What gets recorded is a graph of nodes. `Node` is the base class of every
# node of the backward graph (exercise 2 onwards): its `next_functions` point
# further back, and calling it with an output's gradient gives its inputs'.

# %% reference=true
class Node:
    """A node of the backward graph (torch::autograd::Node in torch/csrc/autograd/function.h).

    `next_functions` holds one (node, 0) pair per input of the forward operation: the node that
    takes this node's gradient for that input further back, or (None, 0) when that input needs none.
    `metadata` is (shape, dtype): what a gradient arriving at this node must look like.
    Calling a node with the gradient of its output returns the gradients of its inputs, one per
    entry of `next_functions`."""
    next_functions = ()

    def name(self) -> str:
        return type(self).__name__

    def release_variables(self) -> None:
        """Free what the node saved for backward (exercise 3); most nodes saved nothing."""

    def __repr__(self):
        return f"<{self.name()} object at {id(self):#x}>"

# %% [markdown]
# Two small operators that the backward passes need: `ones_like(t)` (the
# gradient that `backward()` starts from) and `cast(t, dtype)` (a gradient
# brought to its input's dtype). Each is an operator of the dispatcher with a
# CPU kernel, so that chapter 05 can add a CUDA one.

# %% reference=true
def ones(*shape, dtype=float32) -> Tensor:
    return from_numpy(np.ones(shape_arg(shape), dtype.numpy))


def ones_like(t: Tensor) -> Tensor:
    """Ones of t's shape and dtype, where t is (the operator "ones_like": chapter 05 adds its CUDA kernel)."""
    return dispatch("ones_like", t)


@register_kernel("ones_like", DispatchKey.CPU)
def _ones_like_cpu(t: Tensor) -> Tensor:
    return ones(t.shape, dtype=t.dtype)


def cast(t: Tensor, dtype) -> Tensor:
    """t itself when it already has `dtype`, else a copy converted to it (the operator "cast")."""
    return t if t.dtype is dtype else dispatch("cast", t, dtype)


@register_kernel("cast", DispatchKey.CPU)
def _cast_cpu(t: Tensor, dtype) -> Tensor:
    return from_numpy(t.numpy().astype(dtype.numpy))


# %% [markdown]
# ## Exercise 1 — `no_grad()` and `enable_grad()`
#
# Write the two context managers that switch grad mode for the duration of a
# `with` block:
#
# ```python
# with no_grad():            # off inside
#     y = x * 2
#     with enable_grad():    # on again inside this one
#         z = x * 3
#     # off again here
# # back to whatever it was before: on
# ```
#
# The rule that makes nesting work: `__enter__` remembers the mode it found and
# `__exit__` puts **that** mode back (it does not simply switch grad mode on).
# `__exit__` runs even when the block raises; return `False` from it so the
# exception goes on.
#
# Both also work as decorators, `@no_grad()` over a `def`: the function then
# runs with grad mode off, and leaves the mode as it found it. The wrapper must
# use a **fresh** context manager for every call — one shared object would
# forget the outer mode when the function calls itself. Keep the function's
# name with `functools.wraps`.
#
# `enable_grad` is `no_grad` with the other mode, so it inherits everything;
# each class says in `mode` what it switches to.
#
# Real PyTorch: [`torch/autograd/grad_mode.py`](https://github.com/pytorch/pytorch/blob/main/torch/autograd/grad_mode.py)
# and `_DecoratorContextManager` in
# [`torch/utils/_contextlib.py`](https://github.com/pytorch/pytorch/blob/main/torch/utils/_contextlib.py).

# %% solution="ex_grad_mode" reference=true
class no_grad:
    """Context manager and decorator: grad mode off inside, and back to what it was after."""
    mode = False

    def __enter__(self):
        ### BEGIN SOLUTION
        self.previous = is_grad_enabled()
        set_grad_enabled(self.mode)
        ### END SOLUTION

    def __exit__(self, exc_type, exc_value, traceback):
        ### BEGIN SOLUTION
        set_grad_enabled(self.previous)
        return False
        ### END SOLUTION

    def __call__(self, func):
        ### BEGIN SOLUTION
        @functools.wraps(func)
        def run_in_mode(*args, **kwargs):
            with type(self)():
                return func(*args, **kwargs)
        return run_in_mode
        ### END SOLUTION


class enable_grad(no_grad):
    """Context manager and decorator: grad mode on inside, and back to what it was after."""
    mode = True


# %% tests="ex_grad_mode" points=2
class Modes:
    """One framework's grad-mode API, so the same little program can run on torch and on yours."""

    def __init__(self, name, no_grad, enable_grad, is_enabled, set_enabled):
        self.name, self.no_grad, self.enable_grad = name, no_grad, enable_grad
        self.is_enabled, self.set_enabled = is_enabled, set_enabled


TORCH_MODES = Modes("torch", torch.no_grad, torch.enable_grad, torch.is_grad_enabled, torch.set_grad_enabled)
OUR_MODES = Modes("yours", no_grad, enable_grad, is_grad_enabled, set_grad_enabled)


class Oops(Exception):
    pass


def run_program(program, m: Modes, start=True):
    """Run a little program of nested grad-mode blocks; return what is_grad_enabled() said at each 'look'."""
    trace = []
    m.set_enabled(start)

    def run(steps):
        for step in steps:
            kind = step[0]
            if kind == "look":
                trace.append(m.is_enabled())
            elif kind == "off":
                m.set_enabled(False)
            elif kind == "with":
                with getattr(m, step[1])():
                    run(step[2])
                trace.append(m.is_enabled())
            elif kind == "raise":  # an exception leaves the block; the mode must still come back
                try:
                    with getattr(m, step[1])():
                        run(step[2])
                        raise Oops()
                except Oops:
                    pass
                trace.append(m.is_enabled())
            elif kind == "call":  # a decorated function, called `depth` times recursively
                @getattr(m, step[1])()
                def decorated(depth):
                    trace.append(m.is_enabled())
                    if depth:
                        inner = decorated(depth - 1)
                        trace.append(m.is_enabled())
                        run(step[3])
                        return inner + 1
                    return 0
                trace.append(decorated(step[2]))
                trace.append(decorated.__name__)
                trace.append(m.is_enabled())

    try:
        run(program)
    finally:
        m.set_enabled(True)
    return trace


def show(program) -> str:
    def one(step):
        if step[0] in ("with", "raise"):
            return f"{step[0]} {step[1]}() [{', '.join(one(s) for s in step[2])}]"
        if step[0] == "call":
            return f"@{step[1]}() function, recursion depth {step[2]} [{', '.join(one(s) for s in step[3])}]"
        return step[0]
    return "[" + ", ".join(one(s) for s in program) + "]"


def expect_same_modes(program, start=True):
    want = run_program(program, TORCH_MODES, start)
    got = run_program(program, OUR_MODES, start)
    compare.assert_equal(got, want, f"is_grad_enabled() at each look, starting with grad mode {start}, "
                                    f"in the program {show(program)}")


expect_same_modes([("look",), ("with", "no_grad", [("look",)]), ("look",)])
expect_same_modes([("with", "no_grad", [("with", "enable_grad", [("look",)]), ("look",)]), ("look",)])
expect_same_modes([("with", "no_grad", [("with", "no_grad", [("look",)]), ("look",)])])
expect_same_modes([("raise", "no_grad", [("look",)]), ("look",)])
expect_same_modes([("call", "no_grad", 0, []), ("look",)])
expect_same_modes([("with", "no_grad", [("call", "enable_grad", 0, [])]), ("look",)])
# a decorated function that calls itself: each call needs its own context manager to remember its own mode
expect_same_modes([("call", "no_grad", 2, [("look",)]), ("look",)])


def raise_inside(manager):
    with manager():
        raise Oops()


for manager in (no_grad, enable_grad):
    compare.assert_raises(Oops, raise_inside, f"an exception raised inside `with {manager.__name__}():` "
                                              "(it must go on: __exit__ returns False)", manager)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_program(draw, depth=0):
    steps = []
    for _ in range(draw(1, 3)):
        kind = draw.choice(["look", "look", "with", "with", "raise", "call", "off"] if depth < 3 else ["look", "off"])
        manager = draw.choice(["no_grad", "enable_grad"])
        if kind in ("with", "raise"):
            steps.append((kind, manager, random_program(draw, depth + 1)))
        elif kind == "call":
            steps.append((kind, manager, draw(0, 3), random_program(draw, depth + 2)))
        else:
            steps.append((kind,))
    return steps


def test_programs(draw):
    expect_same_modes(random_program(draw), start=draw.choice([True, False]))


for_random_inputs(test_programs, 200)
for manager in ("no_grad", "enable_grad"):
    for start in (True, False):
        expect_same_modes([("call", manager, 3, [("look",)]), ("look",)], start)   # recursion
        expect_same_modes([("with", manager, [("off",), ("look",)]), ("look",)], start)
manager = no_grad()
manager.__enter__()
assert manager.__exit__(Oops, Oops(), None) in (False, None), "no_grad's __exit__ must return False: let the exception go on"
set_grad_enabled(True)


@no_grad()
def returns_a_value(a, b=2):
    return a * b + is_grad_enabled()


compare.assert_equal(returns_a_value(3, b=4), 12, "a @no_grad() function called as returns_a_value(3, b=4)")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2 — leaves and their gradients
#
# The tensors you create — data, weights — are the **leaves** of the graph.
# `w.requires_grad_()` marks a leaf whose gradient you want; `loss.backward()`
# will put it in `w.grad`. Tensors computed from others are not leaves: each
# remembers the node that made it, in `grad_fn`.
#
# | attribute | a leaf | a computed tensor |
# |---|---|---|
# | `requires_grad` | what you set (`False` by default) | `True` when recorded |
# | `grad_fn` | `None` | the node that made it |
# | `is_leaf` | `True` | `False` |
# | `grad` | `None`, until a backward fills it | `None` (torch does not keep it) |
#
# Torch's rules for `requires_grad`, all `RuntimeError`: only tensors of a
# floating-point dtype can require grad; and on a computed tensor you may not
# switch it off (setting it to `True` there does nothing). `requires_grad_(flag=True)`
# sets it and returns the tensor itself. `detach()` returns a new tensor over
# **the same memory** (same storage, shape, strides and offset) that is a leaf
# and does not require grad — the way to step out of the graph.
#
# **Where a leaf's gradient goes.** In the graph, the gradient of a leaf flows
# into a node of its own, `AccumulateGrad`, whose `variable` is the leaf.
# Calling it with a gradient adds that gradient to `variable.grad`:
#
# - the first time (`.grad` is `None`), `.grad` becomes **a copy** of the
#   gradient — never the tensor passed in, which may be shared with other parts
#   of the graph or with the caller (torch copies too, whenever it cannot prove
#   the gradient is its own);
# - afterwards, the gradient is **added** to `.grad` (in place: `.grad` stays the
#   same tensor, as in torch). That is why training loops call `zero_grad()`.
#
# A leaf has **one** `AccumulateGrad` node, whoever uses it: in `x * x`, both
# inputs lead to the same node, so the two gradients are summed first and added
# once. Write `gradient_edge(t)`, the edge along which `t`'s gradient must travel:
#
# - `(t.grad_fn, 0)` for a computed tensor;
# - `(node, 0)` for a leaf that requires grad, where `node` is its
#   `AccumulateGrad` — the same node on every call, as long as it is alive.
#   Keep it on the tensor in `_grad_accumulator` through a **weak reference**
#   (`weakref.ref(node)`; calling that gives the node back, or `None` once it
#   has been freed): a plain reference would make a cycle, tensor → node → tensor;
# - `(None, 0)` for a tensor that does not require grad (torch raises there; we
#   keep it simple for exercise 3).
#
# The attributes are class-level defaults on `Tensor` (given); store per-tensor
# values in `_requires_grad` and `_grad_fn`.
#
# Real PyTorch: [`torch/csrc/autograd/variable.cpp`](https://github.com/pytorch/pytorch/blob/main/torch/csrc/autograd/variable.cpp)
# (`gradient_edge`, `grad_accumulator`), [`functions/accumulate_grad.h`](https://github.com/pytorch/pytorch/blob/main/torch/csrc/autograd/functions/accumulate_grad.h),
# and `get_gradient_edge` in [`torch/autograd/graph.py`](https://github.com/pytorch/pytorch/blob/main/torch/autograd/graph.py).

# %% solution="ex_leaves" reference=true
@add_methods(Tensor)
class AutogradAttributes:
    _requires_grad = False    # class-level defaults: a tensor stores its own values only when they differ
    _grad_fn = None
    _grad_accumulator = None  # a weakref.ref to the leaf's AccumulateGrad node
    grad = None

    @property
    def requires_grad(self) -> bool:
        ### BEGIN SOLUTION
        return self._requires_grad
        ### END SOLUTION

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        ### BEGIN SOLUTION
        if self._grad_fn is not None:
            if not value:
                raise RuntimeError("you can only change requires_grad flags of leaf variables. If you want to use "
                                   "a computed variable in a subgraph that doesn't require differentiation use "
                                   "var_no_grad = var.detach().")
            return
        if value and not self.dtype.is_floating_point:
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        self._requires_grad = bool(value)
        ### END SOLUTION

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        ### BEGIN SOLUTION
        self.requires_grad = requires_grad
        return self
        ### END SOLUTION

    @property
    def grad_fn(self):
        ### BEGIN SOLUTION
        return self._grad_fn
        ### END SOLUTION

    @property
    def is_leaf(self) -> bool:
        ### BEGIN SOLUTION
        return self._grad_fn is None
        ### END SOLUTION

    def detach(self) -> "Tensor":
        ### BEGIN SOLUTION
        return Tensor(self._storage, self._shape, self._stride, self._offset)
        ### END SOLUTION


class AccumulateGrad(Node):
    """The node of a leaf: the gradient that reaches it is added to the leaf's .grad."""

    def __init__(self, variable: Tensor):
        self.variable = variable

    @property
    def metadata(self):
        return self.variable.shape, self.variable.dtype

    def __call__(self, grad: Tensor) -> tuple:
        ### BEGIN SOLUTION
        variable = self.variable
        if variable.grad is None:
            variable.grad = grad.clone()
        else:
            variable.grad += grad
        return ()
        ### END SOLUTION


def gradient_edge(t: Tensor) -> tuple:
    """(node, 0): the node that takes t's gradient: its grad_fn, its AccumulateGrad, or None."""
    ### BEGIN SOLUTION
    if t._grad_fn is not None:
        return t._grad_fn, 0
    if not t._requires_grad:
        return None, 0
    node = t._grad_accumulator() if t._grad_accumulator is not None else None
    if node is None:
        node = AccumulateGrad(t)
        t._grad_accumulator = weakref.ref(node)
    return node, 0
    ### END SOLUTION


# %% tests="ex_leaves" points=2
import gc

from course.testing import describe, same_layout_copy


def expect_attributes(ours, theirs, what):
    for name in ("requires_grad", "is_leaf"):
        compare.assert_equal(getattr(ours, name), getattr(theirs, name), f"{what}.{name}")
    compare.assert_equal(ours.grad_fn is None, theirs.grad_fn is None, f"{what}.grad_fn is None")
    if theirs.is_leaf:  # torch warns when asked for the .grad of a computed tensor
        compare.assert_equal(ours.grad is None, theirs.grad is None, f"{what}.grad is None")


def expect_requires_grad_rules(t: torch.Tensor):
    """Fresh leaves: defaults, requires_grad_(), the property setter, detach(), as torch does them."""
    what = f"a tensor of {describe(t)}"
    theirs, ours = same_layout_copy(t), from_torch(same_layout_copy(t))
    expect_attributes(ours, theirs, what)
    try:
        theirs.requires_grad_()
    except RuntimeError:
        compare.assert_raises(RuntimeError, ours.requires_grad_, f"{what}.requires_grad_()")
        compare.assert_raises(RuntimeError, setattr, f"{what}.requires_grad = True", ours, "requires_grad", True)
        return
    got = ours.requires_grad_()
    assert got is ours, f"{what}.requires_grad_() must return the tensor itself"
    expect_attributes(ours, theirs, f"{what} after .requires_grad_()")
    d, d_theirs = ours.detach(), theirs.detach()
    assert d is not ours, f"{what}.detach() returned the tensor itself; torch returns a new tensor"
    expect_attributes(d, d_theirs, f"{what}.detach()")
    compare.assert_matches(d, d_theirs, f"{what}.detach()", check_strides=True, check_offset=True)
    if t.numel():
        compare.assert_shares_memory(d, ours, f"{what}.detach()")
    ours.requires_grad, theirs.requires_grad = False, False
    expect_attributes(ours, theirs, f"{what} after .requires_grad = False")


def accumulator(t):
    node, number = gradient_edge(t)
    compare.assert_equal(number, 0, "the second item of gradient_edge(leaf)")
    return node


def expect_accumulation(t: torch.Tensor, grads):
    """Call a leaf's AccumulateGrad with each gradient in turn, yours and torch's, comparing .grad each time."""
    what = f"the AccumulateGrad node of a leaf of {describe(t)}"
    theirs = same_layout_copy(t).requires_grad_()
    ours = from_torch(same_layout_copy(t)).requires_grad_()
    node, node_theirs = accumulator(ours), torch.autograd.graph.get_gradient_edge(theirs).node
    assert node is not None, f"gradient_edge(x) gave no node for a leaf x that requires grad"
    compare.assert_equal(node.name(), "AccumulateGrad", f"{what}: name()")
    assert node.variable is ours, f"{what}: its .variable must be the leaf itself"
    compare.assert_equal(tuple(node.next_functions), tuple(node_theirs.next_functions), f"{what}: next_functions")
    assert accumulator(ours) is node, (f"gradient_edge(x) gave a new AccumulateGrad node on its second call while the "
                                       "first is still alive: keep it (through a weakref) and give the same one back")
    for i, g in enumerate(grads):
        g_ours = from_torch(same_layout_copy(g))
        kept, kept_theirs = ours.grad, theirs.grad
        with torch.no_grad():
            node_theirs(g)
        result = node(g_ours)
        assert result == (), f"{what} returned {result!r}; an AccumulateGrad node returns () (it has no inputs)"
        compare.assert_matches(ours.grad, theirs.grad, f"{what}: .grad after {i + 1} call(s)")
        compare.assert_no_shared_memory(ours.grad, g_ours, f"{what}: .grad after {i + 1} call(s)")
        if kept_theirs is not None and theirs.grad is kept_theirs:
            assert ours.grad is kept, (f"{what}: call {i + 1} replaced .grad by a new tensor; torch adds the "
                                       "gradient into the .grad it has, in place (.grad += grad)")


x = torch.tensor([[1.0, -2.0, 3.0], [0.5, 4.0, -1.5]])
expect_requires_grad_rules(x)
expect_requires_grad_rules(x.T)
expect_requires_grad_rules(torch.tensor([1, 2, 3]))
expect_accumulation(x, [torch.ones(2, 3), torch.full((2, 3), 0.5)])
plain = from_torch(x.clone())
compare.assert_equal(gradient_edge(plain), (None, 0), "gradient_edge(x) for a tensor that does not require grad")


def expect_weak_accumulator():
    """The leaf keeps its AccumulateGrad through a weak reference: once nothing else holds the node, it is freed."""
    leaf = from_torch(torch.ones(3)).requires_grad_()
    node_ref = weakref.ref(accumulator(leaf))
    gc.collect()
    assert node_ref() is None, ("the leaf keeps its AccumulateGrad node alive: keep it in _grad_accumulator through "
                                "weakref.ref(node), so that a tensor and its node do not keep each other alive")
    assert accumulator(leaf).variable is leaf, "gradient_edge(x) after x's AccumulateGrad node was freed: a new node"


def expect_computed_rules():
    """A computed tensor (one whose _grad_fn is set): not a leaf, its edge is its grad_fn, requires_grad stays on."""
    y = from_torch(torch.tensor([1.0, 2.0]))
    y._grad_fn, y._requires_grad = Node(), True
    compare.assert_equal(y.is_leaf, False, "y.is_leaf for a computed y (one whose _grad_fn is set)")
    assert gradient_edge(y)[0] is y._grad_fn, "gradient_edge(y) for a computed y must be (y.grad_fn, 0)"
    compare.assert_raises(RuntimeError, setattr, "y.requires_grad = False for a computed y (only leaves may switch "
                                                 "it off)", y, "requires_grad", False)
    y.requires_grad_(True)
    compare.assert_equal(y.requires_grad, True, "y.requires_grad after y.requires_grad_(True) on a computed y")


expect_weak_accumulator()
expect_computed_rules()
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
import gc


def test_requires_grad_rules(draw):
    dtype = draw.choice([torch.float32, torch.float64, torch.float32, torch.int64, torch.bool])
    t = draw.randn(draw.shape(ndim=(0, 3), allow_zero=True)) * 3
    t = t.to(dtype) if dtype != torch.bool else t > 0
    expect_requires_grad_rules(draw.noncontiguous(t) if draw(0, 1) else t)


for_random_inputs(test_requires_grad_rules, 40)


def test_accumulation(draw):
    shape = draw.shape(ndim=(0, 3))
    t = draw.noncontiguous(draw.randn(shape, dtype=draw.choice([torch.float32, torch.float64])))
    expect_accumulation(t, [draw.noncontiguous(draw.randn(shape, dtype=t.dtype)) for _ in range(draw(1, 3))])
    expanded = draw.randn((), dtype=t.dtype).expand(shape)  # a gradient with stride 0 everywhere
    expect_accumulation(t, [expanded, draw.randn(shape, dtype=t.dtype)])


for_random_inputs(test_accumulation, 20)

leaf = from_torch(torch.randn(3)).requires_grad_()
node = accumulator(leaf)
ref = weakref.ref(node)
del node
gc.collect()
assert ref() is None, ("the leaf keeps its AccumulateGrad node alive: hold it through weakref.ref(node), as torch "
                       "holds a weak_ptr, so that a tensor and its node do not keep each other alive")
assert accumulator(leaf).variable is leaf
computed = from_torch(torch.randn(2))
computed._grad_fn, computed._requires_grad = Node(), True
compare.assert_equal(gradient_edge(computed)[0] is computed._grad_fn, True, "gradient_edge(y) for a computed y: (y.grad_fn, 0)")
compare.assert_equal(computed.is_leaf, False, "y.is_leaf for a computed y (one whose _grad_fn is set)")
compare.assert_raises(RuntimeError, setattr, "y.requires_grad = False for a computed y", computed, "requires_grad", False)
computed.requires_grad_(True)
compare.assert_equal(computed.requires_grad, True, "y.requires_grad after y.requires_grad_(True) on a computed y")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3 — `Function`: one step of the graph
#
# Every operation that autograd can differentiate is a `Function` with two
# static methods: `forward` computes the result, `backward` turns the gradient
# of the result into the gradients of the inputs. This is torch's own API for
# custom operations, and the one this chapter uses for all of them:
#
# ```python
# class Square(Function):
#     @staticmethod
#     def forward(ctx, x):
#         ctx.save_for_backward(x)      # backward will need x
#         return x * x
#
#     @staticmethod
#     def backward(ctx, grad):          # grad: d(loss)/d(output)
#         (x,) = ctx.saved_tensors
#         return 2 * x * grad           # d(loss)/d(x), by the chain rule
#
# y = Square.apply(x)                   # never call forward yourself: apply records it
# ```
#
# The `ctx` that `forward` and `backward` receive **is the graph node**. For
# every subclass, torch makes a node class named after it — `SquareBackward` —
# and `y.grad_fn` is the very `ctx` that `forward` saw. The given
# `__init_subclass__` below makes that class for you, as a subclass of
# `BackwardNode`; calling the node runs `backward` (also given).
#
# Write the rest of `BackwardNode`:
#
# - `save_for_backward(*values)` keeps the values for `backward` (torch accepts
#   only tensors; we also accept Python numbers, which keeps scalars simple);
# - `saved_tensors` (a property) gives them back — or raises `RuntimeError(FREED)`
#   once they have been released;
# - `release_variables()` drops them, so their memory can be freed, and
#   remembers that they are gone. The engine calls it after running the node.
#
# And `Function.apply(*args)` (a classmethod):
#
# 1. make the node, `ctx = cls._backward_cls()`, and set `ctx.needs_input_grad`:
#    one bool per argument, `True` for a tensor that requires grad;
# 2. run `cls.forward(ctx, *args)` **with grad mode off**: what happens inside
#    forward is one step of the graph, not steps of its own;
# 3. record — only if grad mode is on and some argument requires grad:
#    `ctx.next_functions` gets one `gradient_edge(arg)` per argument (`(None, 0)`
#    for arguments that are not tensors), `ctx.metadata` gets the pair (shape,
#    dtype) of the output, and the output gets `_grad_fn = ctx` and
#    `_requires_grad = True`;
# 4. return the output.
#
# (Torch leaves non-tensor arguments out of a custom Function's
# `next_functions`; we keep a `(None, 0)` for each, as torch's own `x * 2` does,
# so that the i-th gradient `backward` returns always goes to the i-th entry.)
#
# Real PyTorch: [`torch/autograd/function.py`](https://github.com/pytorch/pytorch/blob/main/torch/autograd/function.py)
# (`FunctionMeta`, `BackwardCFunction`, `save_for_backward`), `THPFunction_apply` in
# [`torch/csrc/autograd/python_function.cpp`](https://github.com/pytorch/pytorch/blob/main/torch/csrc/autograd/python_function.cpp),
# and the message for freed tensors in [`saved_variable.cpp`](https://github.com/pytorch/pytorch/blob/main/torch/csrc/autograd/saved_variable.cpp).

# %% solution="ex_function" reference=true
FREED = ("Trying to backward through the graph a second time (or directly access saved tensors after they have "
         "already been freed). Saved intermediate values of the graph are freed when you call .backward() or "
         "autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or "
         "if you need to access saved tensors after calling backward.")


class BackwardNode(Node):
    """The node (and ctx) of one Function call; each Function subclass gets its own subclass of this."""
    _forward_cls = None  # the Function whose backward this node runs
    _saved = ()
    _released = False

    def save_for_backward(self, *values) -> None:
        ### BEGIN SOLUTION
        self._saved = values
        ### END SOLUTION

    @property
    def saved_tensors(self) -> tuple:
        ### BEGIN SOLUTION
        if self._released:
            raise RuntimeError(FREED)
        return self._saved
        ### END SOLUTION

    def release_variables(self) -> None:
        ### BEGIN SOLUTION
        self._saved = ()
        self._released = True
        ### END SOLUTION

    def __call__(self, grad: Tensor) -> tuple:
        grads = self._forward_cls.backward(self, grad)
        return grads if isinstance(grads, tuple) else (grads,)


class Function:
    """Subclass it with static forward(ctx, *args) and backward(ctx, grad); call it with apply(*args)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._backward_cls = type(cls.__name__ + "Backward", (BackwardNode,), {"_forward_cls": cls})

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("this Function has no forward")

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("this Function has no backward")

    @classmethod
    def apply(cls, *args):
        ### BEGIN SOLUTION
        ctx = cls._backward_cls()
        # (apply runs for every operation that autograd sees: tuple([...]) builds a list in one loop, where
        # tuple(... for ...) would resume a generator once per argument)
        ctx.needs_input_grad = tuple([isinstance(a, Tensor) and a._requires_grad for a in args])
        enabled = is_grad_enabled()
        record = enabled and True in ctx.needs_input_grad  # (grad mode is the same after forward)
        # forward with grad mode off: no_grad()'s work, without making, entering and leaving its object (this runs
        # for every operation that autograd sees)
        set_grad_enabled(False)
        try:
            out = cls.forward(ctx, *args)
        finally:
            set_grad_enabled(enabled)
        if record:
            ctx.next_functions = tuple([gradient_edge(a) if isinstance(a, Tensor) else (None, 0) for a in args])
            ctx.metadata = (out.shape, out.dtype)
            out._grad_fn = ctx
            out._requires_grad = True
        return out
        ### END SOLUTION


# %% [markdown]
# The next cell holds a few small Functions for the tests of this exercise and
# the next — and more examples for you. `twin` makes each one twice from the
# **same** code: once as your `Function`, once as a `torch.autograd.Function`.
# The tests run both and compare what your autograd does with what torch's does.

# %%
def twin(name, forward, backward):
    """(your Function, torch's Function), both named `name`, with the same forward and backward."""
    methods = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    return type(name, (Function,), dict(methods)), type(name, (torch.autograd.Function,), dict(methods))


def _square_forward(ctx, x):
    ctx.save_for_backward(x)
    return x * x


def _square_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return 2 * x * grad


def _times_forward(ctx, a, b):
    ctx.save_for_backward(a, b)
    return a * b


def _times_backward(ctx, grad):
    a, b = ctx.saved_tensors
    return grad * b, grad * a


def _squash_forward(ctx, x):
    y = x.tanh()
    ctx.save_for_backward(y)
    return y


def _squash_backward(ctx, grad):
    (y,) = ctx.saved_tensors
    return grad * (1 - y * y)


def _scale_forward(ctx, x, k):
    ctx.k = k
    return x * k


def _total_forward(ctx, x):
    ctx.shape = tuple(x.shape)
    return x.sum()


Square = twin("Square", _square_forward, _square_backward)
Times = twin("Times", _times_forward, _times_backward)
Plus = twin("Plus", lambda ctx, a, b: a + b, lambda ctx, grad: (grad, grad))
Squash = twin("Squash", _squash_forward, _squash_backward)                    # tanh
Scale = twin("Scale", _scale_forward, lambda ctx, grad: (grad * ctx.k, None))      # x * k for a number k
Total = twin("Total", _total_forward, lambda ctx, grad: grad.expand(ctx.shape))  # sum of all elements
UNARY_TWINS, BINARY_TWINS = [Square, Squash, Total], [Times, Plus]


# %% tests="ex_function" points=3
LEAF_OF = {}  # id(torch's leaf) -> your leaf


def leaf_pair(t: torch.Tensor, requires_grad: bool):
    """(your leaf, torch's leaf): equal values and layouts, no shared memory."""
    theirs = same_layout_copy(t).requires_grad_(requires_grad)
    ours = from_torch(same_layout_copy(t)).requires_grad_(requires_grad)
    LEAF_OF[id(theirs)] = ours
    return ours, theirs


def expect_same_graph(ours, theirs, what):
    """ours and theirs (torch) are the same graph: the same node names, the same next_functions,
    shared where torch's are shared, ending in the AccumulateGrad nodes of corresponding leaves
    (made by leaf_pair). Only for graphs whose Functions take tensors only."""
    expect_attributes(ours, theirs, what)
    pairs, seen = [(ours.grad_fn, theirs.grad_fn, what + ".grad_fn")], {}
    while pairs:
        node, node_theirs, path = pairs.pop()
        if node_theirs is None:
            assert node is None, f"{path} is {node!r}, but torch has None there"
            continue
        assert node is not None, f"{path} is None, but torch has a {type(node_theirs).__name__} node there"
        if id(node_theirs) in seen:
            assert seen[id(node_theirs)] is node, (
                f"{path}: torch reaches the same node here as at an earlier edge, yours a different one "
                f"(one tensor used twice must have one node: for a leaf, one AccumulateGrad)")
            continue
        seen[id(node_theirs)] = node
        compare.assert_equal(node.name(), type(node_theirs).__name__, f"{path}.name()")
        if type(node_theirs).__name__ == "AccumulateGrad":
            assert node.variable is LEAF_OF[id(node_theirs.variable)], f"{path}.variable is not the right leaf"
        mine, theirs_next = tuple(node.next_functions), tuple(node_theirs.next_functions)
        compare.assert_equal(len(mine), len(theirs_next), f"len({path}.next_functions)")
        for i, ((n, k), (n_theirs, k_theirs)) in enumerate(zip(mine, theirs_next)):
            compare.assert_equal(k, k_theirs, f"{path}.next_functions[{i}][1]")
            pairs.append((n, n_theirs, f"{path}.next_functions[{i}][0]"))


def expect_same_call(pair, args, what):
    """Apply your Function and torch's to corresponding arguments; compare the output and the graph."""
    ours_fn, torch_fn = pair
    out = ours_fn.apply(*[a[0] if isinstance(a, tuple) else a for a in args])
    out_theirs = torch_fn.apply(*[a[1] if isinstance(a, tuple) else a for a in args])
    compare.assert_matches(out, out_theirs.detach(), what)
    expect_same_graph(out, out_theirs, what)
    return out, out_theirs


x, y = leaf_pair(torch.tensor([1.0, -2.0, 3.0]), True), leaf_pair(torch.tensor([0.5, 4.0, -1.5]), False)
expect_same_call(Square, [x], "Square.apply(x) where x requires grad")
expect_same_call(Square, [y], "Square.apply(y) where y does not require grad")
expect_same_call(Times, [x, y], "Times.apply(x, y)")
expect_same_call(Times, [x, x], "Times.apply(x, x)")
h = expect_same_call(Squash, [x], "Squash.apply(x)")
expect_same_call(Plus, [h, x], "Plus.apply(Squash.apply(x), x)")
with no_grad():
    out = Square[0].apply(x[0])
assert out.grad_fn is None and not out.requires_grad, "Square.apply(x) inside no_grad() recorded a node"
seen_inside = []  # (grad mode, ctx.needs_input_grad) inside each forward of Inspect, yours then torch's


def _inspect_forward(ctx, a, b, k):
    mode = is_grad_enabled() if isinstance(a, Tensor) else torch.is_grad_enabled()
    seen_inside.append((mode, tuple(ctx.needs_input_grad)))
    return a * b * k


Inspect = twin("Inspect", _inspect_forward, lambda ctx, grad: (grad, grad, None))
Inspect[0].apply(x[0], y[0], 2.0)
Inspect[1].apply(x[1], y[1], 2.0)
(mode, needs), (mode_theirs, needs_theirs) = seen_inside
compare.assert_equal(mode, mode_theirs, "is_grad_enabled() inside forward, during Inspect.apply(x, y, 2.0) "
                                        "(apply runs forward with grad mode off)")
compare.assert_equal(needs, needs_theirs, "ctx.needs_input_grad inside Inspect.apply(x, y, 2.0), where x requires "
                                          "grad and y does not (one bool per argument)")
scaled = Scale[0].apply(x[0], 1.5)
compare.assert_equal(len(scaled.grad_fn.next_functions), 2, "len(Scale.apply(x, 1.5).grad_fn.next_functions) "
                                                            "(one entry per argument, the number included)")
compare.assert_equal(scaled.grad_fn.next_functions[1], (None, 0),
                     "Scale.apply(x, 1.5).grad_fn.next_functions[1] (a number argument gets (None, 0))")
total = Total[0].apply(x[0])
compare.assert_equal(tuple(total.grad_fn.metadata[0]), (), "Total.apply(x).grad_fn.metadata[0] for x of shape (3,) "
                                                           "(the shape of the output, not of an input)")
compare.assert_equal(total.grad_fn.metadata[1], total.dtype, "Total.apply(x).grad_fn.metadata[1] (the output's dtype)")


def expect_saved_and_released():
    """saved_tensors gives back what forward saved; release_variables() drops it (its memory is freed) for good."""
    a, b = from_torch(torch.ones(3)).requires_grad_(), from_torch(torch.full((3,), 2.0))
    node = Times[0].apply(a, b).grad_fn
    saved = node.saved_tensors
    assert len(saved) == 2 and saved[0] is a and saved[1] is b, (
        "ctx.saved_tensors must give back exactly what forward saved: (a, b) for Times.apply(a, b)")
    memory = weakref.ref(b.untyped_storage())
    del saved, b
    gc.collect()
    assert memory() is not None, "the node must keep what forward saved until release_variables()"
    node.release_variables()
    gc.collect()
    assert memory() is None, ("after release_variables() the node still holds what forward saved: drop it, "
                              "so that its memory can be freed")
    compare.assert_raises(RuntimeError, lambda: node.saved_tensors,
                          "ctx.saved_tensors after ctx.release_variables() (torch: RuntimeError(FREED))")
    assert Plus[0].apply(a, a).grad_fn.saved_tensors == (), "saved_tensors of a node that saved nothing must be ()"


expect_saved_and_released()
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
seen_modes = []


def _peek_forward(ctx, x):
    seen_modes.append(is_grad_enabled() if isinstance(x, Tensor) else torch.is_grad_enabled())
    ctx.save_for_backward(x)
    return x * 1


def _peek_backward(ctx, grad):
    return grad


Peek = twin("Peek", _peek_forward, _peek_backward)
for grad_on in (True, False):
    for wants in (True, False):
        a = leaf_pair(torch.randn(3), wants)
        with (enable_grad() if grad_on else no_grad()):
            out = Peek[0].apply(a[0])
        with (torch.enable_grad() if grad_on else torch.no_grad()):
            out_theirs = Peek[1].apply(a[1])
        expect_attributes(out, out_theirs, f"Peek.apply(x) with grad mode {grad_on}, x.requires_grad {wants}")
        compare.assert_equal(seen_modes[-2], seen_modes[-1], f"grad mode inside forward (grad mode {grad_on} outside)")


def test_graphs(draw):
    shape = draw.shape(ndim=(0, 3))
    dtype = draw.choice([torch.float32, torch.float64])
    # requires grad two times in three, and always in a small or shrunk input: without it there is no graph
    pool = [leaf_pair(draw.noncontiguous(draw.randn(shape, dtype=dtype)), not draw.coin(3)) for _ in range(3)]
    names = ["x", "y", "z"]
    for step in range(draw(1, 6)):
        pair = draw.choice(UNARY_TWINS[:2] + BINARY_TWINS)
        picks = [draw(0, len(pool) - 1) for _ in range(1 if pair in UNARY_TWINS else 2)]
        what = f"{pair[0].__name__}.apply({', '.join(names[i] for i in picks)})"
        out = expect_same_call(pair, [pool[i] for i in picks], what)
        pool.append(out)
        names.append(f"r{step}")
    expect_same_call(Total, [pool[-1]], f"Total.apply({names[-1]})")


for_random_inputs(test_graphs, 30)

x = leaf_pair(torch.randn(4), True)
out = Scale[0].apply(x[0], 1.5)
compare.assert_equal(len(out.grad_fn.next_functions), 2, "len(Scale.apply(x, 1.5).grad_fn.next_functions)")
compare.assert_equal(out.grad_fn.next_functions[1], (None, 0), "Scale.apply(x, 1.5).grad_fn.next_functions[1] (a number)")
assert out.grad_fn.next_functions[0][0] is gradient_edge(x[0])[0], "next_functions[0] must be x's AccumulateGrad"
compare.assert_equal(tuple(out.grad_fn.metadata[0]), (4,), "Scale.apply(x, 1.5).grad_fn.metadata[0] (the output's shape)")
compare.assert_equal(out.grad_fn.metadata[1], out.dtype, "Scale.apply(x, 1.5).grad_fn.metadata[1] (the output's dtype)")
Widen = twin("Widen", lambda ctx, x: x.double() if isinstance(x, torch.Tensor) else from_numpy(x.numpy().astype(np.float64)),
             lambda ctx, grad: grad)


def test_metadata(draw):
    a, b = leaf_pair(draw.randn(3, 1), True), leaf_pair(draw.randn(4), draw(0, 1) > 0)
    for pair, args, text in [(Total, [a], "Total.apply(a)"), (Times, [a, b], "Times.apply(a, b)"),
                             (Plus, [b, a], "Plus.apply(b, a)"), (Widen, [a], "Widen.apply(a) (float32 in, float64 out)")]:
        out, out_theirs = expect_same_call(pair, args, f"{text} where a: {describe(a[1])}, b: {describe(b[1])}")
        inputs_text = f"where a: {describe(a[1])}, b: {describe(b[1])}"
        compare.assert_equal(tuple(out.grad_fn.metadata[0]), tuple(out_theirs.shape),
                             f"{text}.grad_fn.metadata[0] (the shape of the output, not of an input) {inputs_text}")
        compare.assert_equal(out.grad_fn.metadata[1].name, str(out_theirs.dtype).replace("torch.", ""),
                             f"{text}.grad_fn.metadata[1] (the dtype of the output, not of an input) {inputs_text}")


for_random_inputs(test_metadata, 1)
needs = []


def _needs_forward(ctx, a, b, k):
    needs.append(tuple(ctx.needs_input_grad))
    return a * b * k


Needs = twin("Needs", _needs_forward, lambda ctx, grad: (grad, grad, None))
for wants in [(True, False), (False, True), (True, True), (False, False)]:
    a, b = leaf_pair(torch.randn(2), wants[0]), leaf_pair(torch.randn(2), wants[1])
    Needs[0].apply(a[0], b[0], 2.0)
    Needs[1].apply(a[1], b[1], 2.0)
    compare.assert_equal(needs[-2], needs[-1], f"ctx.needs_input_grad for (a, b, 2.0) with requires_grad {wants}")

out = Times[0].apply(x[0], x[0] * 1)
saved = out.grad_fn.saved_tensors
assert len(saved) == 2 and saved[0] is x[0], "ctx.saved_tensors must give back exactly what forward saved"
out.grad_fn.release_variables()
compare.assert_raises(RuntimeError, lambda: out.grad_fn.saved_tensors, "ctx.saved_tensors after release_variables()")
assert Plus[0].apply(x[0], x[0]).grad_fn.saved_tensors == (), "saved_tensors of a node that saved nothing must be ()"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 4 — the engine
#
# `loss.backward()` hands the graph to the **engine**. Take `h = x * y` and
# `out = (h + h.exp()).sum()`; the backward graph, as torch builds it, is
#
# ![The backward graph of out = (h + h.exp()).sum() with h = x * y, walked from out.grad_fn through next_functions: SumBackward0, the root, which gets gradient 1; its next_functions entry 0 is AddBackward0; AddBackward0's entry 0 is MulBackward0 and entry 1 is ExpBackward0; ExpBackward0's entry 0 is MulBackward0 again, so MulBackward0 is reached by 2 edges and waits for both; MulBackward0's entries 0 and 1 are AccumulateGrad of x and of y, which fill x.grad and y.grad](figures/backward_graph.svg)
#
# (Torch names these nodes with an overload index — `MulBackward0`,
# `ExpBackward0`, `SumBackward0` — because one operator may have several
# formulas in `derivatives.yaml`; picotorch's nodes are named after their
# `Function`, `Mul` + `Backward`, as torch names the node of a custom
# `autograd.Function`; the tests compare the names of custom Functions' nodes
# only, which torch gives no index.)
#
# `h` is used twice, so `MulBackward` receives two gradients, and it may run only
# once both have arrived — their **sum** is the gradient of `h`. A naive
# recursive walk would run it twice (once per path); in a long chain of such
# diamonds that is exponential, and a recursive walk also dies on a graph deeper
# than Python's recursion limit (about 1000), which an RNN over a long sequence
# easily is. Torch's engine does neither: it first **counts** for every node how
# many edges lead to it, then runs nodes whose count has dropped to zero.
#
# Write `Tensor.backward(gradient=None, retain_graph=False)`:
#
# 1. **Check**, with torch's `RuntimeError`s (their messages are in the next
#    cell): the tensor must require grad; without `gradient`, it must have
#    exactly one element, and the gradient is `ones_like(self)` (given: ones of
#    its shape and dtype, on its device); a given `gradient` must have its shape.
# 2. **The root**: the node of `gradient_edge(self)`.
# 3. **Count** dependencies: walk from the root with a stack (a Python list, no
#    recursion), and for every node reached count how many `next_functions`
#    entries point to it. Skip `None`.
# 4. **Run**, with grad mode off: a ready list holding the root, and a buffer
#    per node (the root's holds its gradient). Until the ready list is empty,
#    take a node and its buffered gradient, call `node(grad)`, and check that it
#    returned one gradient per entry of `next_functions` (`RuntimeError`
#    otherwise). For each entry `(next_node, _)` that is not `None`:
#    - a gradient of `None` means none flows that way; otherwise its shape must
#      be `next_node.metadata[0]` (`RuntimeError` naming the node and the index:
#      torch's engine would quietly sum a gradient that is too big, ours refuses,
#      so that a missing reduction shows up at the operation that forgot it),
#      and `cast` it to `next_node.metadata[1]`;
#    - add it to `next_node`'s buffer **out of place** (`a + b`, never `+=`: the
#      same tensor may be on its way to another node too);
#    - count down `next_node`'s dependencies; at zero it is ready. A node that
#      becomes ready without any gradient is not called, but its own entries are
#      still counted down.
# 5. **Free**: unless `retain_graph`, call `node.release_variables()` right
#    after running it. A second `backward()` through the same nodes then fails
#    in `saved_tensors` with torch's message.
#
# Gradients reach the leaves through their `AccumulateGrad` nodes, so calling
# `backward()` twice (with `retain_graph=True`) adds up, as in torch.
#
# Real PyTorch: [`torch/csrc/autograd/engine.cpp`](https://github.com/pytorch/pytorch/blob/main/torch/csrc/autograd/engine.cpp)
# — `compute_dependencies`, `evaluate_function`, `validate_outputs` — and
# `_make_grads` in [`torch/autograd/__init__.py`](https://github.com/pytorch/pytorch/blob/main/torch/autograd/__init__.py).

# %% reference=true
NOT_REQUIRING_GRAD = "element 0 of tensors does not require grad and does not have a grad_fn"
NOT_SCALAR = "grad can be implicitly created only for scalar outputs"

# %% solution="ex_engine" reference=true
@add_methods(Tensor)
class Backward:
    def backward(self, gradient: Tensor = None, retain_graph: bool = False) -> None:
        """Compute the gradient of this tensor with respect to every leaf, and add it to the leaves' .grad."""
        ### BEGIN SOLUTION
        if not self._requires_grad:
            raise RuntimeError(NOT_REQUIRING_GRAD)
        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError(NOT_SCALAR)
            gradient = ones_like(self)
        elif tuple(gradient.shape) != tuple(self.shape):
            raise RuntimeError(f"Mismatch in shape: grad_output[0] has a shape of {tuple(gradient.shape)} and "
                               f"output[0] has a shape of {tuple(self.shape)}.")
        root, _ = gradient_edge(self)
        dependencies, stack = {root: 0}, [root]
        while stack:
            for node, _ in stack.pop().next_functions:
                if node is None:
                    continue
                if node in dependencies:
                    dependencies[node] += 1
                else:
                    dependencies[node] = 1
                    stack.append(node)
        buffers, ready = {root: cast(gradient, root.metadata[1])}, [root]
        with no_grad():
            while ready:
                node = ready.pop()
                grad = buffers.pop(node, None)
                edges = node.next_functions
                grads = node(grad) if grad is not None else (None,) * len(edges)
                if not retain_graph:
                    node.release_variables()
                if len(grads) != len(edges):
                    raise RuntimeError(f"function {node.name()} returned an incorrect number of gradients "
                                       f"(expected {len(edges)}, got {len(grads)})")
                for i, ((next_node, _), g) in enumerate(zip(edges, grads)):
                    if next_node is None:
                        continue
                    if g is not None:
                        shape, dtype = next_node.metadata
                        if g.shape != tuple(shape):
                            raise RuntimeError(f"Function {node.name()} returned an invalid gradient at index {i} - "
                                               f"got {list(g.shape)} but expected shape {list(shape)}")
                        if g.dtype is not dtype:  # (cast's own test: spares a call per edge, on the common path)
                            g = cast(g, dtype)
                        buffers[next_node] = buffers[next_node] + g if next_node in buffers else g
                    dependencies[next_node] -= 1
                    if dependencies[next_node] == 0:
                        ready.append(next_node)
        ### END SOLUTION


# %% tests="ex_engine" points=4
def build_pair(steps, leaves):
    """Run the same steps on your leaves and on torch's. steps: (twin, operand indices, extra args);
    an index refers to the leaves, then to the results of earlier steps. Returns both lists of values."""
    ours, theirs = [p[0] for p in leaves], [p[1] for p in leaves]
    for pair, picks, extra in steps:
        ours.append(pair[0].apply(*[ours[i] for i in picks], *extra))
        theirs.append(pair[1].apply(*[theirs[i] for i in picks], *extra))
    return ours, theirs


def steps_text(steps, n_leaves):
    names = [f"x{i}" for i in range(n_leaves)]
    lines = []
    for pair, picks, extra in steps:
        names.append(f"h{len(lines)}")
        args = ", ".join([names[i] for i in picks] + [repr(e) for e in extra])
        lines.append(f"{names[-1]} = {pair[0].__name__}.apply({args})")
    return "; ".join(lines)


def expect_same_gradients(leaves, what):
    for i, (ours, theirs) in enumerate(leaves):
        if theirs.grad is None:
            assert ours.grad is None, f"{what}: x{i}.grad should still be None (torch gives it no gradient)"
        else:
            compare.assert_matches(ours.grad, theirs.grad, f"{what}: x{i}.grad")


def expect_backward(steps, leaves, what, gradient=None):
    """Build the graph on both sides, call backward on the last value (with `gradient`, a torch tensor, or
    none), and compare every leaf's .grad with torch's."""
    with compare.labelled(what):  # a RecursionError deep in the engine still says which graph it was
        ours, theirs = build_pair(steps, leaves)
        g_ours = None if gradient is None else from_torch(same_layout_copy(gradient))
        ours[-1].backward(g_ours)
    theirs[-1].backward(gradient)
    expect_same_gradients(leaves, what)
    return ours, theirs


x = [leaf_pair(torch.tensor([0.5, -1.0, 2.0]), True), leaf_pair(torch.tensor([1.5, 0.25, -0.5]), True)]
diamond = [(Times, (0, 1), ()), (Squash, (2,), ()), (Plus, (2, 3), ()), (Total, (4,), ())]
expect_backward(diamond, x, "the diamond h = x0 * x1; out = Total(h + Squash(h))")
expect_backward([(Times, (0, 0), ()), (Total, (2,), ())], x, "x0 * x0, summed (after the diamond: .grad accumulates)")
ours, theirs = build_pair(diamond, x)
g = torch.tensor(0.5)
for _ in range(2):
    ours[-1].backward(from_torch(g.clone()), retain_graph=True)
    theirs[-1].backward(g, retain_graph=True)
expect_same_gradients(x, "the diamond, backward twice with retain_graph=True")
ours[-1].backward()
compare.assert_raises(RuntimeError, ours[-1].backward, "a backward() through the same graph a second time")
compare.assert_raises(RuntimeError, build_pair([(Times, (0, 1), ())], x)[0][-1].backward,
                      "backward() of a tensor of shape (3,) without a gradient")
compare.assert_raises(RuntimeError, from_torch(torch.ones(())).backward, "backward() of a tensor that does not require grad")
leaf = leaf_pair(torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), True)[0]
compare.assert_raises(RuntimeError, leaf.backward, "x.backward(g) with g of shape (1, 3) for a leaf x of shape (2, 3) "
                                                   "(a given gradient must have the tensor's shape)", from_torch(torch.ones(1, 3)))
assert leaf.grad is None, "x.backward(g) with a g of the wrong shape raised, but left a .grad on x: check g's shape first"
ExtraGradient = twin("ExtraGradient", lambda ctx, x: x * 2, lambda ctx, grad: (grad * 2, grad))
NarrowGradient = twin("NarrowGradient", lambda ctx, x: x * 2, lambda ctx, grad: grad[:1] * 2)
for pair, rule in [(ExtraGradient, "its node returns two gradients for one input: RuntimeError"),
                   (NarrowGradient, "its node returns a gradient of shape (1,) for an input of shape (3,): "
                                    "RuntimeError, naming the node and the index")]:
    x = leaf_pair(torch.tensor([1.0, 2.0, 3.0]), True)
    compare.assert_raises(RuntimeError, pair[1].apply(x[1]).backward, f"torch's {pair[0].__name__}", torch.ones(3))
    compare.assert_raises(RuntimeError, pair[0].apply(x[0]).backward, f"{pair[0].__name__}.apply(x).backward(g): {rule}",
                          from_torch(torch.ones(3)))
ToFloat64 = twin("ToFloat64", lambda ctx, x: x.double() if isinstance(x, torch.Tensor) else
                 from_numpy(x.numpy().astype(np.float64)), lambda ctx, grad: grad)
expect_backward([(ToFloat64, (0,), ())], [leaf_pair(torch.tensor([1.0, 2.0, 3.0]), True)],
                "ToFloat64.apply(x) for a float32 x, whose backward returns a float64 gradient (the engine casts "
                "each gradient to the dtype its node expects, metadata[1])", torch.ones(3, dtype=torch.float64))
modes_in_backward = []  # is_grad_enabled() inside PeekBackward's backward: yours, then torch's


def _peek_in_backward(ctx, grad):
    modes_in_backward.append(is_grad_enabled() if isinstance(grad, Tensor) else torch.is_grad_enabled())
    return grad


PeekBackward = twin("PeekBackward", lambda ctx, x: x * 1, _peek_in_backward)
expect_backward([(PeekBackward, (0,), ())], [leaf_pair(torch.tensor([1.0, 2.0, 3.0]), True)], "PeekBackward.apply(x)",
                torch.ones(3))
compare.assert_equal(modes_in_backward[0], modes_in_backward[1],
                     "is_grad_enabled() inside a node's backward (the engine runs the nodes with grad mode off)")
x = leaf_pair(torch.randn(4), True)
expect_backward([(Scale, (0,), (1.0001,))] * 1 + [(Scale, (i,), (1.0001,)) for i in range(1, 2000)], [x],
                "a chain of 2000 Scale(h, 1.0001) (a recursive walk runs out of stack here)", torch.randn(4))
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
import gc
import sys
from collections import Counter

CALLS = []


def counted(pair):
    """A twin whose backward also records which node ran it, and in what order."""
    def backward(ctx, grad):
        CALLS.append(ctx)
        return pair[0].backward(ctx, grad)
    return twin(pair[0].__name__, pair[0].forward, backward)


C_SQUARE, C_TIMES, C_PLUS, C_SQUASH, C_SCALE = map(counted, (Square, Times, Plus, Squash, Scale))


def random_steps(draw, n_leaves, n_steps):
    steps = []
    for k in range(n_steps):
        available = n_leaves + k
        pair = draw.choice([C_TIMES, C_PLUS, C_PLUS, C_SQUASH, C_SQUASH, C_SCALE, C_SQUARE])
        recent = max(0, available - 3)  # mostly recent values, so that the graph is deep and full of reuse
        pick = lambda: draw(recent, available - 1) if draw(0, 2) else draw(0, available - 1)
        if pair in (C_TIMES, C_PLUS):
            steps.append((pair, (pick(), pick()), ()))
        elif pair is C_SCALE:
            steps.append((pair, (pick(),), (draw.choice([0.5, -1.5, 2.0]),)))
        else:
            steps.append((pair, (pick(),), ()))
    return steps


def graph_nodes(root):
    """Every node reachable from root, and for each the nodes that feed gradients into it."""
    consumers, stack, seen = {}, [root], {root}
    while stack:
        node = stack.pop()
        for nxt, _ in node.next_functions:
            if nxt is not None:
                consumers.setdefault(nxt, []).append(node)
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
    return seen, consumers


ran_graphs = 0


def test_walks(draw):
    global ran_graphs
    shape = draw.shape(ndim=(0, 3), size=(1, 4))
    dtype = torch.float64  # this exercise is about the walk, not about rounding
    n_leaves = draw(1, 3)
    # requires grad three times in four, and always in a small or shrunk input: without it there is no walk
    leaves = [leaf_pair(draw.noncontiguous(draw.randn(shape, dtype=dtype)) * 0.8, not draw.coin(4))
              for _ in range(n_leaves)]
    steps = random_steps(draw, n_leaves, draw(1, 12))
    what = f"the graph {steps_text(steps, n_leaves)} on leaves of {describe(leaves[0][1])}"
    ours, theirs = build_pair(steps, leaves)
    if not theirs[-1].requires_grad:
        assert not ours[-1].requires_grad, f"{what}: the result requires grad, but no leaf does"
        return
    if not torch.isfinite(theirs[-1]).all() or theirs[-1].abs().max() > 1e6:
        return  # values this large say nothing more about the walk
    ran_graphs += 1
    nodes, consumers = graph_nodes(ours[-1].grad_fn)
    gradient = draw.noncontiguous(draw.randn(theirs[-1].shape, dtype=dtype))
    CALLS.clear()
    ours[-1].backward(from_torch(same_layout_copy(gradient)), retain_graph=draw(0, 1) > 0)
    ran = list(CALLS)
    theirs[-1].backward(gradient)
    expect_same_gradients(leaves, what)
    counts = Counter(ran)
    twice = [n.name() for n, c in counts.items() if c > 1]
    assert not twice, f"{what}: the nodes {twice} ran more than once in one backward (a shared node must run once, with the sum of its gradients)"
    assert set(ran) == {n for n in nodes if isinstance(n, BackwardNode)}, f"{what}: not every node of the graph ran"
    position = {n: i for i, n in enumerate(ran)}
    for n in ran:
        for c in consumers.get(n, []):
            assert position[c] < position[n], (f"{what}: {n.name()} ran before {c.name()}, which sends it a gradient: "
                                               "a node may run only once every consumer has run")


for_random_inputs(test_walks, 60)
assert ran_graphs >= 20, f"only {ran_graphs} random graphs were usable; the test needs more"

# gradients that are summed in place corrupt a gradient that is on its way elsewhere
a, b = leaf_pair(torch.randn(3, dtype=torch.float64), True), leaf_pair(torch.randn(3, dtype=torch.float64), True)
for last in [(6, 7), (7, 6)]:
    steps = [(Squash, (0,), ()), (Squash, (1,), ()), (Plus, (2, 3), ()), (Square, (2,), ()), (Plus, (4, 5), ()),
             (Squash, (4,), ()), (Plus, last, ()), (Total, (8,), ())]
    expect_backward(steps, [a, b], f"{steps_text(steps, 2)} (summing gradients in place corrupts one that is "
                                   "also on its way to another node)")

# the root is a leaf; a gradient of another layout
x = leaf_pair(torch.randn(2, 3), True)
expect_backward([], [x], "x.backward(g) on a leaf x", inputs.noncontiguous(torch.randn(2, 3)))
compare.assert_no_shared_memory(x[0].grad, x[0], "x.grad after x.backward(g)")
compare.assert_raises(RuntimeError, x[0].backward, "x.backward(g) with g of shape (3, 2) for x of shape (2, 3)",
                      from_torch(torch.ones(3, 2)))
# a gradient of any other shape is refused (torch: "Mismatch in shape"), even one that would broadcast, and
# before anything reaches a .grad: on a leaf without .grad, on a leaf with one, on a computed tensor
def test_refused_gradients(draw):
    for shape, wrong in [((2, 3), (3, 2)), ((2, 3), (1, 3)), ((2, 3), (6,)), ((3,), ()), ((), (1,)), ((1,), ())]:
        for root in ("a leaf x without .grad", "a leaf x with a .grad", "x * x"):
            x = leaf_pair(draw.randn(shape), True)
            if root == "a leaf x with a .grad":
                x[0].backward(from_torch(torch.ones(shape)))
                x[1].backward(torch.ones(shape))
            kept = None if x[0].grad is None else x[0].grad.to_torch().clone()
            out, out_theirs = (Times[0].apply(x[0], x[0]), Times[1].apply(x[1], x[1])) if root == "x * x" else x
            what = f"({root}).backward(g) with g of shape {wrong} for a result of shape {shape}"
            compare.assert_raises(RuntimeError, out_theirs.backward, f"{what} (in torch)", torch.ones(wrong))
            compare.assert_raises(RuntimeError, out.backward, what, from_torch(torch.ones(wrong)))
            if kept is None:
                assert x[0].grad is None, f"{what} raised, but left a .grad on x: check the gradient's shape first"
            else:
                compare.assert_matches(x[0].grad, kept, f"x.grad after the refused {what}: check the gradient's shape first")


for_random_inputs(test_refused_gradients, 1)


class ToDouble(Function):  # a float64 gradient for a float32 input: the engine casts it
    @staticmethod
    def forward(ctx, x):
        return from_numpy(x.numpy().astype(np.float64))

    @staticmethod
    def backward(ctx, grad):
        return grad


x = leaf_pair(torch.randn(3), True)
ToDouble.apply(x[0]).backward(from_torch(torch.ones(3, dtype=torch.float64)))
x[1].double().backward(torch.ones(3, dtype=torch.float64))
compare.assert_matches(x[0].grad, x[1].grad, "x.grad for a float32 x after a float64 ToDouble(x).backward(g): "
                                             "cast each gradient to the dtype its node expects (metadata[1])")

WrongShape = twin("WrongShape", lambda ctx, x: x * 2, lambda ctx, grad: grad[:1] * 2)
TooMany = twin("TooMany", lambda ctx, x: x * 2, lambda ctx, grad: (grad * 2, grad))
NoGrad = twin("NoGrad", lambda ctx, a, b: a * 2 + b, lambda ctx, grad: (None, grad))
x, y = leaf_pair(torch.randn(3), True), leaf_pair(torch.randn(3), True)
for pair in (WrongShape, TooMany):
    try:
        pair[1].apply(x[1]).backward(torch.ones(3))
    except RuntimeError:
        compare.assert_raises(RuntimeError, pair[0].apply(x[0]).backward, f"{pair[0].__name__}.apply(x).backward(g)",
                              from_torch(torch.ones(3)))
    else:
        raise AssertionError(f"torch accepted {pair[0].__name__}; the test is wrong")
expect_backward([(NoGrad, (0, 1), ())], [x, y], "backward through a node whose gradient for x is None",
                torch.ones(3))

# saved tensors are released after backward, unless retain_graph
for retain in (False, True):
    x = leaf_pair(torch.randn(1000), True)[0]
    h = Squash[0].apply(Square[0].apply(x))
    storage = weakref.ref(h.untyped_storage())
    out = Total[0].apply(Times[0].apply(h, h))
    del h
    gc.collect()
    assert storage() is not None, "the graph must keep what its Functions saved until backward"
    out.backward(retain_graph=retain)
    gc.collect()
    if retain:
        assert storage() is not None, "backward(retain_graph=True) freed the saved tensors"
        out.backward()
    else:
        assert storage() is None, ("after backward() the graph still holds the tensors its Functions saved: "
                                   "call node.release_variables() after running each node, unless retain_graph")
        compare.assert_raises(RuntimeError, out.backward, "a second backward() through a freed graph")


class Pass(Function):  # a cheap step, for a very deep graph
    @staticmethod
    def forward(ctx, x):
        return x.detach()

    @staticmethod
    def backward(ctx, grad):
        return grad


def test_a_very_deep_chain():
    x, x_theirs = leaf_pair(torch.randn(5), True)
    h, h_theirs = x, x_theirs
    for _ in range(20_000):
        h = Pass.apply(h)
        h_theirs = h_theirs.view(5)
    g = torch.randn(5)
    limit = sys.getrecursionlimit()
    h.backward(from_torch(g.clone()))
    h_theirs.backward(g)
    compare.assert_matches(x.grad, x_theirs.grad, "x.grad after a chain of 20 000 steps")
    assert sys.getrecursionlimit() == limit, "backward() must not change the recursion limit: walk without recursion"


with_fixed_inputs(test_a_very_deep_chain)
### END HIDDEN TESTS

# %% [markdown]
# ### The autograd graph viewer
#
# Type an expression over the leaves `x`, `y` (shape `(3,)`), `W` `(2, 3)` and
# `b` `(2,)` — or pick an example — and see the graph your autograd recorded:
# the tensors, the backward nodes named as torch names them, and their edges.
# Then step through `backward()` one node at a time, and watch each gradient
# arrive: the engine you just wrote, in slow motion. Beside it, torch's
# `grad_fn` chain for the same expression. (Until your exercises run, the
# viewer shows torch's graph; each operation joins yours once its exercise,
# 5 to 9, has run.)

# %%
from course.widgets.autograd_graph import explore

explore(from_torch, no_grad)

# %% [markdown]
# ## 3. Autograd in front of the kernels
#
# Chapter 01's kernels compute, but record nothing. Torch solves this with its
# **dispatcher**: a call like `x.exp()` on a tensor that requires grad first
# reaches an *autograd* kernel, which records a node and then redispatches to
# the kernel below it. Those autograd kernels are generated from one file,
# [`tools/autograd/derivatives.yaml`](https://github.com/pytorch/pytorch/blob/main/tools/autograd/derivatives.yaml),
# which gives the backward formula of every operation.
#
# picotorch does the same with chapter 01's dispatcher, and changes no method
# of `Tensor`:
#
# ![y = x.exp() with x requiring grad, level by level: your code; Tensor.exp calls dispatch("exp", x); the key set {Autograd, CPU} picks the highest key, Autograd, whose kernel is Exp.apply(x); Exp.apply makes the node and runs Exp.forward with Autograd excluded, and forward's unary_kernel("exp", x) redispatches below Autograd; the key set below is {CPU}, chapter 01's CPU kernel of exp; finally Exp.apply sets y._grad_fn to the node](figures/autograd_key.svg)
#
# - `@register("exp")` over a `Function` puts it in `FUNCTIONS` and registers
#   its `apply` as the `Autograd` kernel of `"exp"`;
# - a forward computes with `unary_kernel`, `binary_kernel` and `KERNELS[name]`:
#   calls of the dispatcher *below* `Autograd` (`redispatch`);
# - an operator with no `Function` (comparisons, `argmax`, `item`...) has no
#   autograd kernel: the `Autograd` key is declared a **fallthrough**, so the
#   call goes on to the CPU kernel, and its result requires no grad. Operators
#   that chapter 01 builds from others (`flatten`, `broadcast_to`, `x.T`) fall
#   through too, and the views they call are recorded one by one.
#
# In exercises 5 to 9, the `forward` of every operation is given: it calls the
# kernel and saves what `backward` will need. You write the `backward`s — the
# content of `derivatives.yaml`. An operation starts being differentiable as
# soon as its cell has run.
#
# In-place operations (`x += 1`, `x[0] = 2`) are refused on tensors that require
# grad while grad mode is on: torch records them with machinery (version
# counters, `CopySlices`) that this chapter leaves out. Their `Autograd` kernel
# raises; inside `no_grad()` the key is excluded and they work — that is how an
# optimizer updates weights.

# %% [markdown]
# Chapter 01's dispatcher left three of its tables empty; autograd needs them
# (the next cell is given):
#
# - `add_tensor_key(attribute, key)`: a tensor whose `attribute` is true
#   brings `key` into every call's key set (`_requires_grad` brings Autograd);
# - `register_fallthrough(key)`: an operator with no kernel for `key` goes on
#   to the next key of the set instead of failing;
# - `redispatch(op, below, ...)`: the call again, with only the keys below
#   `below` — how the autograd kernel hands the arithmetic to the CPU kernel.
#
# Beside them, `register_fallback(key, f)` (one kernel of `key` for every
# operator) waits for chapter 05's modes. torch: fallthroughs and fallbacks in
# [`aten/src/ATen/core/dispatch/OperatorEntry.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/core/dispatch/OperatorEntry.cpp).

# %% reference=true
def add_tensor_key(attribute: str, key: DispatchKey) -> None:
    """Tensors whose `attribute` is true bring `key` into the key set of every call they are an argument of."""
    if (attribute, key.bit) not in TENSOR_KEYS:
        TENSOR_KEYS.append((attribute, key.bit))


def register_fallthrough(key: DispatchKey) -> None:
    """Operators with no kernel for `key` skip it and go on to the next key of the set."""
    FALLTHROUGH.add(key.priority)
    forget_kernel_choices()


def fallthrough_keys() -> int:
    """The key set of the keys registered as fallthroughs so far."""
    return sum(1 << priority for priority in FALLTHROUGH)


def register_fallback(key: DispatchKey, fallback) -> None:
    """`fallback(op, *args, **kwargs)` is the `key` kernel of every operator that has none of its own (torch: a
    boxed fallback, `m.fallback(...)` in `TORCH_LIBRARY_IMPL(_, Key, m)`): how a mode sees every call."""
    FALLBACKS[key.priority] = fallback
    forget_kernel_choices()


def redispatch(op: str, below: DispatchKey, *args, **kwargs):
    """Call the kernel of `op` for the highest key of the call's key set that is below `below`: what a kernel
    calls to hand the work on to the keys under its own. (It runs on every autograd call: the key set inline.)"""
    below_bits = below.bit - 1
    local = LOCAL_KEYS
    keys = local.included
    for a in args:
        if isinstance(a, Tensor):
            keys |= a._storage.dispatch_keys
            for attribute, bit in TENSOR_KEYS:
                if bit & below_bits and getattr(a, attribute):  # keys at or above `below` are masked out anyway
                    keys |= bit
    keys &= below_bits & ~local.excluded
    entry = OPS.get(op) or operator(op)
    kernel = entry.table.get(keys) or entry.kernel_for(keys)
    return kernel(*args, **kwargs)

# %% [markdown]
# `ExcludeDispatchKeys(key)` takes a key out of this thread's calls for a
# `with` block (grad mode off is that for Autograd); its twin
# `IncludeDispatchKeys` puts a key into every call of the block, which is what
# chapter 05's modes are made of. torch:
# [`c10/core/impl/LocalDispatchKeySet.h`](https://github.com/pytorch/pytorch/blob/main/c10/core/impl/LocalDispatchKeySet.h).

# %% reference=true
class ExcludeDispatchKeys:
    """`with ExcludeDispatchKeys(key, ...):` this thread's calls skip these keys (torch: ExcludeDispatchKeyGuard)."""

    def __init__(self, *keys: DispatchKey):
        self.bits = 0
        for key in keys:
            self.bits |= key.bit

    def __enter__(self):
        self.previous = LOCAL_KEYS.excluded
        LOCAL_KEYS.excluded = self.previous | self.bits

    def __exit__(self, *exc):
        LOCAL_KEYS.excluded = self.previous
        return False


class IncludeDispatchKeys(ExcludeDispatchKeys):
    """`with IncludeDispatchKeys(key, ...):` these keys join every call's key set on this thread."""

    def __enter__(self):
        self.previous = LOCAL_KEYS.included
        LOCAL_KEYS.included = self.previous | self.bits

    def __exit__(self, *exc):
        LOCAL_KEYS.included = self.previous
        return False


# %% [markdown]
# With those, autograd takes its place in the dispatcher. A tensor that
# requires grad brings the Autograd key; an operator without an autograd kernel
# falls through to the backend. `@register(op)` makes a `Function`'s `apply`
# the Autograd kernel of `op`, and a forward computes with the kernels below
# Autograd: `unary_kernel`, `binary_kernel` and `KERNELS[name]`.

# %% reference=true
add_tensor_key("_requires_grad", DispatchKey.Autograd)  # a tensor that requires grad brings the Autograd key
register_fallthrough(DispatchKey.Autograd)  # an operator without an autograd kernel goes on to the backend
FUNCTIONS = {}  # operation name -> the Function that differentiates it
_OWN_AUTOGRAD_KERNEL = ("max", "max_dim", "contiguous")  # their autograd kernels follow their Functions


def register(op: str):
    """Class decorator: `cls` is the Function of the operation `op`; its apply is op's Autograd kernel."""
    def put(cls):
        FUNCTIONS[op] = cls
        if op not in _OWN_AUTOGRAD_KERNEL:
            register_kernel(op, DispatchKey.Autograd)(cls.apply)
        return cls
    return put


def _below_autograd(op: str):
    return lambda *args: redispatch(op, DispatchKey.Autograd, *args)


# What a forward computes with: the kernels below Autograd (named as chapter 01's methods and operators)
KERNELS = {name: _below_autograd(name) for name in
           ("sum", "mean", "max", "matmul", "view", "reshape", "transpose", "permute", "unsqueeze", "squeeze",
            "expand", "narrow", "as_strided", "clone", "contiguous")}
KERNELS["__getitem__"] = _below_autograd("getitem")


def unary_kernel(op: str, x: Tensor) -> Tensor:
    return redispatch(op, DispatchKey.Autograd, x)


def binary_kernel(op: str, a, b) -> Tensor:
    """`a op b` by the kernel below Autograd; either operand may be a Python number."""
    return redispatch(op, DispatchKey.Autograd, a, b)

# %% [markdown]
# The in-place operators get an Autograd kernel that refuses: it is reached
# only when grad mode is on and an argument requires grad (inside `no_grad()`
# the key is excluded and the CPU kernel runs).

# %% reference=true
def _refuse_in_place(t: Tensor, value, what: str) -> None:
    raise RuntimeError(f"{what}: picotorch's autograd does not record in-place operations on tensors that "
                       "require grad (torch does, with version counters); compute a new tensor instead, or "
                       "make the change inside no_grad()")


def _in_place_autograd(op: str):
    def kernel(t, other):
        _refuse_in_place(t, other, f"an in-place {op[:-1]}")
    return kernel


for _op in ("add_", "sub_", "mul_", "div_"):  # reached only when grad mode is on and an argument requires grad
    register_kernel(_op, DispatchKey.Autograd)(_in_place_autograd(_op))


@register_kernel("setitem", DispatchKey.Autograd)
def _setitem_autograd(t, key, value):
    _refuse_in_place(t, value, "t[key] = value")

# %% [markdown]
# A tensor's `repr` now shows what autograd knows of it, as torch's does:
# `grad_fn=<MulBackward>` or `requires_grad=True`.

# %% reference=true
def _autograd_field(t: Tensor) -> str:
    if t._grad_fn is not None:
        return f", grad_fn=<{t._grad_fn.name()}>"
    return ", requires_grad=True" if t._requires_grad else ""


if _autograd_field not in REPR_FIELDS:
    REPR_FIELDS[:] = [f for f in REPR_FIELDS if getattr(f, "__name__", "") != "_autograd_field"] + [_autograd_field]

# %% [markdown]
# Two helpers for the backward formulas you write: `shape_of(x)` (a tensor
# operand's shape, `None` for a Python number) and `where(condition, x, y)`,
# elementwise `x if condition else y`, an operator of the dispatcher that
# records nothing.

# %% reference=true
def shape_of(x):
    """The shape of a tensor operand, None for a Python number."""
    return tuple(x.shape) if isinstance(x, Tensor) else None


def where(condition, x, y) -> Tensor:
    """Elementwise `x if condition else y`, for backward formulas (it records nothing). Any of the three may be
    a Python number; the result has the dtype of the tensors among x and y. (The operator "where".)"""
    return dispatch("where", condition, x, y)


@register_kernel("where", DispatchKey.CPU)
def _where_cpu(condition, x, y) -> Tensor:
    tensors = [v for v in (x, y) if isinstance(v, Tensor)]
    if (type(y) is float and y == 0 and isinstance(x, Tensor) and x.dtype.is_floating_point
            and isinstance(condition, Tensor) and condition.dtype is bool_):
        # where(mask, grad, 0.0), the backward of relu and of max: np.where branches on every element, and on
        # a mask of random signs the CPU mispredicts half of those branches (~7x slower than a multiply).
        # grad * mask is the same result without branches, as long as grad has no inf or NaN (inf * 0 is NaN).
        values = x.numpy()
        if np.isfinite(values).all():
            return from_numpy(np.multiply(values, condition.numpy(), dtype=x.dtype.numpy))
    out = np.where(*(v.numpy() if isinstance(v, Tensor) else v for v in (condition, x, y)))
    dtype = np.result_type(*(t.dtype.numpy for t in tensors)) if tensors else out.dtype
    return from_numpy(np.asarray(out, dtype))


# %% [markdown]
# The next cell holds what the tests of exercises 5 to 9 use: `expect_op(f,
# args, what)` runs the same code `f` on your tensors and on torch's (made from
# `args`, in the same layout), compares the results, then calls `backward` on
# both with the same random gradient and compares the `.grad` of every input.
# Use it to try your own cases.

# %%
from course.testing.rounding import float32_tolerances


def expect_op(f, args, what, requires_grad=None, gradient=None, draw=inputs):
    """f(*args) on your tensors and on torch's: the same result, and after backward(g), the same .grad for
    every argument. args: torch tensors (any layout) or numbers; floating tensors require grad unless
    `requires_grad` (one bool per argument) says otherwise. g is `gradient`, or random: drawn by `draw` (a
    test's, so that a failing input shrinks with it; the course's stream by default). Returns
    (yours, torch's) results."""
    requires_grad = requires_grad or [isinstance(a, torch.Tensor) and a.is_floating_point() for a in args]
    pairs = [leaf_pair(a, r) if isinstance(a, torch.Tensor) else (a, a) for a, r in zip(args, requires_grad)]
    described = ", ".join(f"{chr(97 + i)}: {describe(a)}" for i, a in enumerate(args))
    what = f"{what} where {described}"
    try:
        theirs = f(*[p[1] for p in pairs])
    except Exception:
        return None  # torch refuses these inputs; chapter 01 checked that yours does too
    ours = f(*[p[0] for p in pairs])
    if theirs.requires_grad and gradient is None:
        gradient = draw.noncontiguous(draw.randn(theirs.shape, dtype=theirs.dtype))
    # a float32 input rounds every value computed from it, float64 results included: compare at the
    # rounding float32 shows for this computation at these inputs (course.testing.rounding); one
    # measurement gives the result's tolerance and each gradient's
    tolerances = float32_tolerances(f, args, requires_grad, gradient if theirs.requires_grad else None)
    compare.assert_matches(ours, theirs.detach(), what, **tolerances[0])
    if not theirs.requires_grad:
        assert not ours.requires_grad, f"{what}: the result requires grad, but torch's does not"
        return ours, theirs
    assert ours.requires_grad, f"{what}: the result does not require grad, but torch's does"
    if theirs.grad_fn is not None:
        assert ours.grad_fn is not None, f"{what}: the result was not recorded (it has no grad_fn)"
    try:
        ours.backward(from_torch(same_layout_copy(gradient)))
    except NotImplementedError:
        raise
    except Exception as e:
        raise AssertionError(f"{what}: backward(g) raised {type(e).__name__} ({e}), but torch's backward runs, for g: "
                             f"{describe(gradient)}{inputs.replay_hint()}") from None
    theirs.backward(gradient)
    # float32 gradients of a deep chain (a.exp().tanh().exp(), powers of powers whose paths cancel) round
    # by many ulps, and another correct engine adds the paths in another order
    grad_tolerances = tolerances[1:]
    for i, (mine, torchs) in enumerate(pairs):
        if isinstance(torchs, torch.Tensor) and torchs.requires_grad:
            grad_what = f"the gradient of {chr(97 + i)} (its .grad) after backward(g) of {what}"
            if torchs.grad is None:
                assert mine.grad is None, f"{grad_what}: torch gives none, but yours has one"
            else:
                compare.assert_matches(mine.grad, torchs.grad, grad_what, **grad_tolerances[i])
    return ours, theirs

# %% [markdown]
# ## Exercise 5 — the derivatives of the unary operations
#
# For `out = f(x)`, `backward` receives `grad` = ∂loss/∂out and returns
# ∂loss/∂x = `grad` × f′(x), elementwise. Often f′ is cheapest to write in terms
# of the **output**, which is why the given forwards save `out` for some
# operations and `x` for others:
#
# | op | f′, in terms of what forward saved |
# |---|---|
# | `neg` | −1 |
# | `exp` | out |
# | `log` | 1 / x |
# | `sqrt` | 1 / (2·out) |
# | `tanh` | 1 − out² |
# | `sigmoid` | out·(1 − out) |
# | `relu` | 1 where out > 0, else 0 (torch takes 0 at x = 0) |
# | `abs` | the sign of x: 1, −1, and 0 at x = 0 |
#
# Write each `backward` with tensor operations — `grad * out`, `(x > 0)`
# (a bool tensor, which multiplies as 0 and 1)... They run with grad mode off,
# so they record nothing themselves. Where a gradient is *selected* rather than
# scaled (relu's), torch picks it with `where(condition, grad, 0.0)` (given, in
# the cell of the autograd layer), so that an infinite `grad` where nothing flows
# gives 0, not `inf · 0 = nan`.
#
# Real PyTorch: the entries `exp`, `log`, `sqrt`, `tanh`, `sigmoid`, `relu`,
# `abs` and `neg` of [`derivatives.yaml`](https://github.com/pytorch/pytorch/blob/main/tools/autograd/derivatives.yaml)
# (`relu` and `sigmoid` call `threshold_backward` and `sigmoid_backward`).

# %% solution="ex_unary" reference=true
@register("neg")
class Neg(Function):
    @staticmethod
    def forward(ctx, x):
        return unary_kernel("neg", x)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        return -grad
        ### END SOLUTION


@register("exp")
class Exp(Function):
    @staticmethod
    def forward(ctx, x):
        out = unary_kernel("exp", x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        (out,) = ctx.saved_tensors
        return grad * out
        ### END SOLUTION


@register("log")
class Log(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return unary_kernel("log", x)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        (x,) = ctx.saved_tensors
        return grad / x
        ### END SOLUTION


@register("sqrt")
class Sqrt(Function):
    @staticmethod
    def forward(ctx, x):
        out = unary_kernel("sqrt", x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        (out,) = ctx.saved_tensors
        return grad / (2 * out)
        ### END SOLUTION


@register("tanh")
class Tanh(Function):
    @staticmethod
    def forward(ctx, x):
        out = unary_kernel("tanh", x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        (out,) = ctx.saved_tensors
        return grad * (1 - out * out)
        ### END SOLUTION


@register("sigmoid")
class Sigmoid(Function):
    @staticmethod
    def forward(ctx, x):
        out = unary_kernel("sigmoid", x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        (out,) = ctx.saved_tensors
        return grad * out * (1 - out)
        ### END SOLUTION


@register("relu")
class Relu(Function):
    @staticmethod
    def forward(ctx, x):
        out = unary_kernel("relu", x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        (out,) = ctx.saved_tensors
        return where(out > 0, grad, 0.0)
        ### END SOLUTION


@register("abs")
class Abs(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return unary_kernel("abs", x)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        (x,) = ctx.saved_tensors
        return grad * (x > 0) - grad * (x < 0)
        ### END SOLUTION


# %% tests="ex_unary" points=2
UNARY_OPS = {"neg": lambda x: -x, "exp": lambda x: x.exp(), "log": lambda x: x.log(), "sqrt": lambda x: x.sqrt(),
             "tanh": lambda x: x.tanh(), "sigmoid": lambda x: x.sigmoid(), "relu": lambda x: x.relu(),
             "abs": lambda x: x.abs()}

x = torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.0, -0.25]])
for name, f in UNARY_OPS.items():
    positive = x.abs() + 0.5 if name in ("log", "sqrt") else x
    expect_op(f, [positive], f"a.{name}()")
    expect_op(f, [positive.T], f"a.{name}() for a transposed a")
expect_op(lambda a: a.tanh().sigmoid().exp().neg(), [x], "a.tanh().sigmoid().exp().neg()")
expect_op(lambda a: a.relu().abs(), [x.double()], "a.relu().abs()")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_chain(draw, t: torch.Tensor, length: int):
    """Names of `length` unary ops that keep the values of t where each op is tame (log and sqrt of
    positive values only, exp of moderate ones)."""
    names, value = [], t
    for _ in range(length):
        allowed = [n for n in UNARY_OPS if not (n in ("log", "sqrt") and (value.numel() and value.min() <= 0.05))
                   and not (n == "exp" and value.numel() and value.max() > 5)]
        name = draw.choice(allowed)
        names.append(name)
        value = UNARY_OPS[name](value)
    return names


def chain(names):
    def f(a):
        for n in names:
            a = UNARY_OPS[n](a)
        return a
    return f


def test_unary_chains(draw):
    shape = draw.shape(ndim=(0, 3), allow_zero=True)
    t = draw.randn(shape, dtype=draw.choice([torch.float32, torch.float64])) * draw.choice([0.5, 1.0, 2.0])
    if draw.coin(3):
        t = t.abs() + 0.1
    if draw.coin(5) and t.numel():
        t = t.round()  # exact zeros: relu and abs at 0
    t = draw.noncontiguous(t)
    names = random_chain(draw, t, draw(1, 4))
    expect_op(chain(names), [t], "a." + ".".join(f"{n}()" for n in names), draw=draw)


for_random_inputs(test_unary_chains, 80)
for name in UNARY_OPS:
    expect_op(UNARY_OPS[name], [torch.tensor([0.0, 1.0, -1.0]).abs() + (name in ("log", "sqrt"))], f"a.{name}()")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 6 — broadcasting, and the binary operations
#
# When `a` of shape `(3, 1)` and `b` of shape `(4,)` make `out = a + b` of shape
# `(3, 4)`, every element of `a` was used four times, once per column: its
# gradient is the **sum** of those four. In general, the gradient of a
# broadcast input is `grad` summed over the dims that broadcasting added on the
# left, and over the dims where the input had size 1 — then reshaped to the
# input's shape:
#
# ![A gradient of shape (2, 3, 4) for an input of shape (3, 1), the shapes aligned on the right. Dim 0 was added by broadcasting: sum it, drop it. Dim 1 has the same size, 3: keep it. Dim 2 has size 1 in the input, stretched to 4: sum it, keep it as 1. Summing dims 0 and 2 with keepdim gives (1, 3, 1); a reshape gives (3, 1)](figures/sum_to_shape.svg)
#
# Write `sum_to_shape(grad, shape)` — torch's `at::sum_to`, which you can try as
# `Tensor.sum_to_size` — and give it one more duty: for `shape=None` (what
# `shape_of` says for a Python number), return `None`, since a number gets no
# gradient. Then the `backward` of each operation; every gradient goes through
# `sum_to_shape` to its operand's shape:
#
# | `out` | gradient for `a` | gradient for `b` |
# |---|---|---|
# | `a + b` | `grad` | `grad` |
# | `a - b` | `grad` | `−grad` |
# | `a * b` | `grad · b` | `grad · a` |
# | `a / b` | `grad / b` | `−grad · a / b²` |
# | `a ** b` | `grad · b · a^(b−1)`, but 0 where `b = 0` | `grad · out · log(a)`, but 0 where `a = 0` and `b ≥ 0` |
# | `a.maximum(b)` | `grad` where `a > b`, `grad / 2` where `a = b`, else 0 | the same with `a` and `b` swapped |
#
# Either operand may be a Python number (`2 - x` arrives as `Sub.apply(2, x)`).
# For `pow`'s special cases use the given `where(condition, x, y)`; for the log
# of a number `a`, `math.log(a)` (the tests only use positive ones). A backward
# may skip the work for an input that needs no gradient: `ctx.needs_input_grad`
# tells which (torch's formulas do), and return `None` for it. Dtypes need no
# care: the engine casts each gradient to its input's dtype.
#
# Real PyTorch: `sum_to` in [`aten/src/ATen/ExpandUtils.h`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/ExpandUtils.h),
# the entries `add`, `sub`, `mul`, `div`, `pow`, `maximum` of
# [`derivatives.yaml`](https://github.com/pytorch/pytorch/blob/main/tools/autograd/derivatives.yaml),
# and `pow_backward` in [`FunctionsManual.cpp`](https://github.com/pytorch/pytorch/blob/main/torch/csrc/autograd/FunctionsManual.cpp).

# %% solution="ex_binary" reference=true
def sum_to_shape(grad: Tensor, shape):
    """grad summed down to `shape` (the shape of an input that was broadcast); None for shape None."""
    ### BEGIN SOLUTION
    if shape is None:
        return None
    shape = tuple(shape)
    if grad.shape == shape:
        return grad  # nothing was broadcast (most calls): nothing to sum
    lead = grad.dim() - len(shape)
    inner = tuple(lead + i for i, size in enumerate(shape) if size == 1 and grad.shape[lead + i] != 1)
    if not inner:  # only the leading dims were added (a bias): summing them away leaves `shape`
        return grad.sum(tuple(range(lead))) if lead else grad
    grad = grad.sum(tuple(range(lead)) + inner, keepdim=True)
    return grad.reshape(shape) if lead else grad
    ### END SOLUTION


@register("add")
class Add(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.shapes = shape_of(a), shape_of(b)
        return binary_kernel("add", a, b)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        shape_a, shape_b = ctx.shapes
        return sum_to_shape(grad, shape_a), sum_to_shape(grad, shape_b)
        ### END SOLUTION


@register("sub")
class Sub(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.shapes = shape_of(a), shape_of(b)
        return binary_kernel("sub", a, b)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        shape_a, shape_b = ctx.shapes
        return sum_to_shape(grad, shape_a), (sum_to_shape(-grad, shape_b) if ctx.needs_input_grad[1] else None)
        ### END SOLUTION


@register("mul")
class Mul(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return binary_kernel("mul", a, b)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        a, b = ctx.saved_tensors
        grad_a = sum_to_shape(grad * b, shape_of(a)) if ctx.needs_input_grad[0] else None
        grad_b = sum_to_shape(grad * a, shape_of(b)) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b
        ### END SOLUTION


@register("div")
class Div(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return binary_kernel("div", a, b)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        a, b = ctx.saved_tensors
        grad_a = sum_to_shape(grad / b, shape_of(a)) if ctx.needs_input_grad[0] else None
        grad_b = sum_to_shape(-grad * a / (b * b), shape_of(b)) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b
        ### END SOLUTION


@register("pow")
class Pow(Function):
    @staticmethod
    def forward(ctx, a, b):
        out = binary_kernel("pow", a, b)
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        a, b, out = ctx.saved_tensors
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a = sum_to_shape(where(b == 0, 0.0, grad * b * a ** (b - 1)), shape_of(a))
        if ctx.needs_input_grad[1]:
            log_a = a.log() if isinstance(a, Tensor) else math.log(a)
            grad_b = sum_to_shape(where((a == 0) * (b >= 0), 0.0, grad * out * log_a), shape_of(b))
        return grad_a, grad_b
        ### END SOLUTION


@register("maximum")
class Maximum(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return binary_kernel("maximum", a, b)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        a, b = ctx.saved_tensors
        half = grad / 2
        grad_a = where(a > b, grad, where(a == b, half, 0.0))
        grad_b = where(b > a, grad, where(a == b, half, 0.0))
        return sum_to_shape(grad_a, shape_of(a)), sum_to_shape(grad_b, shape_of(b))
        ### END SOLUTION


# %% tests="ex_binary" points=3
def expect_sum_to_shape(grad: torch.Tensor, shape):
    what = f"sum_to_shape(grad, {shape}) where grad: {describe(grad)}"
    compare.assert_matches(sum_to_shape(from_torch(same_layout_copy(grad)), shape), grad.sum_to_size(shape), what)


g = torch.arange(24.).reshape(2, 3, 4)
for shape in [(2, 3, 4), (3, 4), (4,), (3, 1), (1, 3, 1), (), (1,), (2, 1, 4)]:
    expect_sum_to_shape(g, shape)
    expect_sum_to_shape(g.transpose(0, 2).contiguous().transpose(0, 2), shape)
assert sum_to_shape(from_torch(g), None) is None, "sum_to_shape(grad, None) must be None: a number gets no gradient"
a, b = torch.tensor([[1.0], [2.0], [-0.5]]), torch.tensor([0.5, -1.0, 2.0, 1.5])
for op, f in {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
              ".maximum": lambda a, b: a.maximum(b)}.items():
    expect_op(f, [a, b], f"a {op} b" if op != ".maximum" else "a.maximum(b)")
expect_op(lambda a, b: a ** b, [a.abs(), b], "a ** b")
expect_op(lambda a: 2 - a * 3, [b], "2 - a * 3")
expect_op(lambda a: 1 / a + a ** 2, [b], "1 / a + a ** 2")
expect_op(lambda a: 2 ** a, [b], "2 ** a")
expect_op(lambda a: a * a, [b], "a * a")
expect_op(lambda a: a.maximum(a), [b], "a.maximum(a) (ties everywhere)")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
from course.testing import broadcast_family
from course.testing.rounding import tame

BINARY_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
              "/": lambda a, b: a / (b * b + 0.5), "**": lambda a, b: (a * a + 0.5) ** b,
              "max": lambda a, b: a.maximum(b)}
OP_TEXT = {"/": "{} / ({b} * {b} + 0.5)", "**": "({a} * {a} + 0.5) ** {b}", "max": "{a}.maximum({b})"}


def op_text(op, a, b):
    if op in OP_TEXT:
        return OP_TEXT[op].replace("{}", a).format(a=a, b=b)
    return f"({a} {op} {b})"


def random_binary_graph(draw, n_leaves):
    """(f, text): a random graph of binary ops over n_leaves inputs, with reuse, diamonds and numbers."""
    steps = []
    for k in range(draw(1, 6)):
        available = n_leaves + k
        op = draw.choice(list(BINARY_OPS))
        pick = lambda: draw(max(0, available - 2), available - 1) if draw(0, 1) else draw(0, available - 1)
        i, j = pick(), pick()
        number = draw.choice([None, None, None, 2.0, -0.5, 3])
        if number is not None and op != "max":
            j = ("number", number) if draw(0, 1) else j
            if draw(0, 1) and not isinstance(j, tuple):
                i, j = ("number", number), j
        steps.append((op, i, j))

    def f(*leaves):
        values = list(leaves)
        for op, i, j in steps:
            a = i[1] if isinstance(i, tuple) else values[i]
            b = j[1] if isinstance(j, tuple) else values[j]
            values.append(BINARY_OPS[op](a, b))
        return values[-1]

    names = [chr(97 + i) for i in range(n_leaves)]
    for op, i, j in steps:
        a = repr(i[1]) if isinstance(i, tuple) else names[i]
        b = repr(j[1]) if isinstance(j, tuple) else names[j]
        names.append(op_text(op, a, b))
    return f, names[-1]


def test_sum_to_shape(draw):
    g = draw.noncontiguous(draw.randn(broadcast_family(draw, 1)[0] + (2,)))
    shapes = [tuple(g.shape), tuple(g.shape)[1:], tuple(1 if draw(0, 1) else n for n in g.shape)]
    expect_sum_to_shape(g, draw.choice(shapes))


for_random_inputs(test_sum_to_shape, 100)
ran_graphs = 0


def test_binary_graphs(draw):
    global ran_graphs
    n = draw(1, 3)
    dtypes = [draw.choice([torch.float32, torch.float64])] * n
    if draw.coin(6):
        dtypes = [draw.choice([torch.float32, torch.float64]) for _ in range(n)]
    leaves = [draw.noncontiguous(draw.randn(s, dtype=d)) for s, d in zip(broadcast_family(draw, n), dtypes)]
    if draw.coin(6):
        leaves = [t.round() for t in leaves]  # ties for maximum, zeros for pow
    f, text = random_binary_graph(draw, n)
    if tame(f, leaves):
        ran_graphs += 1
        expect_op(f, leaves, text, draw=draw)


for_random_inputs(test_binary_graphs, 150)
assert ran_graphs >= 60, f"only {ran_graphs} random graphs were usable; the test needs more"
x = torch.tensor([0.0, 2.0, -1.0, 0.5])
expect_op(lambda a, b: a ** b, [x.abs(), torch.tensor([2.0, 0.0, 0.5, -1.0])], "a ** b with a zero base and a zero exponent")
expect_op(lambda a: a ** 0, [x], "a ** 0")
expect_op(lambda a: a ** 3, [x], "a ** 3 (negative a)")
expect_op(lambda a: 0.5 ** a, [x], "0.5 ** a")
expect_op(lambda a, b: a * b, [torch.randn(3, dtype=torch.float64), torch.randn((), dtype=torch.float32)],
          "a * b for a float64 a and a float32 0-dim b")
expect_op(lambda a, b: a * b, [torch.randn(2, 3), torch.tensor([1, 2, 3])], "a * b for an int64 b")
expect_op(lambda a, b: b / a, [torch.randn(3).abs() + 1, torch.tensor([True, False, True])], "b / a for a bool b")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 7 — the derivatives of the reductions
#
# A reduction's `grad` has the **result's** shape; the input's gradient has the
# input's. Going back means undoing the reduction's change of shape. Start with
# `kept_shape(shape, dim)`: the shape the result would have with `keepdim=True`,
# a 1 at every reduced dim — `kept_shape((2, 3, 4), (0, -1))` is `(1, 3, 1)`.
# A dim argument may be `None` (all dims), an int, negative, or a tuple:
# `wrap_dim(d, ndim)` turns each into a positive dim.
#
# - `sum(dim, keepdim)`: every input element contributed with weight 1, so each
#   gets the gradient of the sum it went into: reshape `grad` to the kept shape
#   (this puts back the reduced dims when `keepdim` was `False`), then `expand`
#   it to the input's shape.
# - `mean`: the same, divided by the number of elements each result averaged.
# - `max()` of the whole tensor: the gradient goes to the maximum — and when
#   several elements tie for it, torch **shares it evenly** among them.
# - `max(dim)` returns values **and** indices; the values are a selection, so
#   the gradient goes to the input elements at `indices` along `dim`, and zero
#   everywhere else. (Compare `arange(size)` laid along `dim` with the indices:
#   a broadcasting `==` gives a mask. Or write into a `zeros` tensor with NumPy's
#   `np.put_along_axis`.)
#
# Real PyTorch: `sum_backward`, `mean_backward`, `evenly_distribute_backward`
# and `value_selecting_reduction_backward` in
# [`FunctionsManual.cpp`](https://github.com/pytorch/pytorch/blob/main/torch/csrc/autograd/FunctionsManual.cpp).

# %% solution="ex_reductions" reference=true
def kept_shape(shape, dim) -> tuple:
    """The shape of a reduction of `shape` over `dim` (None: all dims) with keepdim=True."""
    ### BEGIN SOLUTION
    n = len(shape)
    if dim is None:
        dims = set(range(n))
    else:
        dims = {wrap_dim(d, n) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))}
    return tuple(1 if d in dims else size for d, size in enumerate(shape))
    ### END SOLUTION


@register("sum")
class Sum(Function):
    @staticmethod
    def forward(ctx, x, dim, keepdim):
        ctx.shape, ctx.dim = x.shape, dim
        return KERNELS["sum"](x, dim, keepdim)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        return grad.reshape(kept_shape(ctx.shape, ctx.dim)).expand(ctx.shape), None, None
        ### END SOLUTION


@register("mean")
class Mean(Function):
    @staticmethod
    def forward(ctx, x, dim, keepdim):
        ctx.shape, ctx.dim = x.shape, dim
        return KERNELS["mean"](x, dim, keepdim)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        kept = kept_shape(ctx.shape, ctx.dim)
        count = math.prod(ctx.shape) // max(math.prod(kept), 1)
        return (grad / max(count, 1)).reshape(kept).expand(ctx.shape), None, None
        ### END SOLUTION


@register("max")
class Max(Function):
    @staticmethod
    def forward(ctx, x):
        out = KERNELS["max"](x)
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        x, out = ctx.saved_tensors
        mask = x == out
        return where(mask, grad / mask.sum(), 0.0)
        ### END SOLUTION


@register("max_dim")
class MaxDim(Function):
    @staticmethod
    def forward(ctx, x, dim, keepdim, indices):
        ctx.shape, ctx.dim, ctx.keepdim = x.shape, dim, keepdim
        ctx.save_for_backward(indices)
        return KERNELS["max"](x, dim, keepdim).values

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        (indices,) = ctx.saved_tensors
        shape, n = ctx.shape, len(ctx.shape)
        if n == 0:
            return grad.reshape(()), None, None, None
        d = wrap_dim(ctx.dim, n)
        kept = kept_shape(shape, d)
        positions = arange(shape[d]).reshape((shape[d],) + (1,) * (n - d - 1))
        mask = positions == indices.reshape(kept)
        return where(mask, grad.reshape(kept), 0.0), None, None, None
        ### END SOLUTION


@register_kernel("max", DispatchKey.Autograd)
def _max_autograd(x, dim=None, keepdim=False):
    """max() differentiates through Max; max(dim) is a selection: MaxDim takes the values at the kernel's indices."""
    if dim is None:
        return Max.apply(x)
    values, indices = KERNELS["max"](x, dim, keepdim)
    return MaxResult(MaxDim.apply(x, dim, keepdim, indices), indices)


# %% tests="ex_reductions" points=2
x = torch.tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])
for call, f in {"a.sum()": lambda a: a.sum(), "a.sum(0)": lambda a: a.sum(0), "a.sum(-1, keepdim=True)":
                lambda a: a.sum(-1, keepdim=True), "a.sum((0, 1))": lambda a: a.sum((0, 1)),
                "a.mean()": lambda a: a.mean(), "a.mean(1)": lambda a: a.mean(1), "a.max()": lambda a: a.max(),
                "a.max(1).values": lambda a: a.max(1).values,
                "a.max(0, keepdim=True).values": lambda a: a.max(0, keepdim=True).values}.items():
    expect_op(f, [x], call)
    expect_op(f, [x.T], call + " for a transposed a")
expect_op(lambda a: a.max(), [torch.tensor([1.0, 3.0, 3.0])], "a.max() with a tie (torch shares the gradient)")
expect_op(lambda a: a.max(0).values, [torch.tensor([1.0, 3.0, 3.0])], "a.max(0).values with a tie")
square = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
for call, f in {"a.sum(1)": lambda a: a.sum(1), "a.mean(1)": lambda a: a.mean(1)}.items():
    expect_op(f, [square], f"{call} for a square a (grad of shape (3,) goes back to the kept shape (3, 1) "
                           "before it is expanded: expanding (3,) itself would spread it along the wrong dim)")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
from course.testing import random_dim

REDUCTIONS = ["sum", "mean", "max", "max_dim"]


def random_dims(draw, n):
    kind = draw(0, 2)
    if kind == 0:
        return None
    if kind == 1 or n == 0:
        return random_dim(draw, n)
    dims = sorted({draw(0, n - 1) for _ in range(draw(1, n))})
    return tuple(d - n if draw(0, 1) else d for d in dims)


def reduction(name, dim, keepdim):
    if name == "max":
        return lambda a: a.max(), "a.max()"
    if name == "max_dim":
        d = dim if isinstance(dim, int) else 0
        return lambda a: a.max(d, keepdim=keepdim).values, f"a.max({d}, keepdim={keepdim}).values"
    return (lambda a: getattr(a, name)(dim, keepdim=keepdim)), f"a.{name}({dim!r}, keepdim={keepdim})"


def test_reductions(draw):
    t = draw.randn(draw.shape(ndim=(0, 4), size=(1, 4)), dtype=draw.choice([torch.float32, torch.float64]))
    if draw.coin(4):
        t = (t * 2).round()  # ties
    t = draw.noncontiguous(t)
    if draw.coin(5) and t.dim() and t.shape[0] == 1:
        t = t.expand(3, *t.shape[1:])  # an expanded leaf: stride 0 along dim 0
    name = draw.choice(REDUCTIONS)
    f, text = reduction(name, random_dims(draw, t.dim()), draw.choice([False, True]))
    expect_op(f, [t], text, draw=draw)
    if draw.coin(3):  # two reductions in a row
        g, text2 = reduction(draw.choice(REDUCTIONS), None, False)
        expect_op(lambda a: g(f(a)), [t], text2.replace("a.", f"({text}).", 1), draw=draw)


for_random_inputs(test_reductions, 120)
expect_op(lambda a: a.sum(1), [torch.randn(3, 0)], "a.sum(1) of an empty a")
expect_op(lambda a: a.sum(0), [torch.randn(0, 3)], "a.sum(0) of an empty a")
expect_op(lambda a: a.max(0).values, [torch.tensor(2.5)], "a.max(0).values for a 0-dim a")
expect_op(lambda a: a.mean(), [torch.tensor(2.5)], "a.mean() for a 0-dim a")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 8 — the derivative of `matmul`
#
# For matrices, `out = a @ b` with `a` of shape `(m, k)` and `b` of shape
# `(k, n)`: element `out[i, j]` is `Σ_t a[i, t] · b[t, j]`, so
#
# ```
# grad_a = grad @ b.mT        (m, n) @ (n, k) -> (m, k)
# grad_b = a.mT @ grad        (k, m) @ (m, n) -> (k, n)
# ```
#
# `matmul`'s other forms come back to this one, the way chapter 01's forward
# did:
#
# - a 1-D `a` is a row: work with `a.unsqueeze(0)`; a 1-D `b` is a column: work
#   with `b.unsqueeze(-1)`. `grad` lacks the dims that were removed from the
#   result: reshape it to `batch + (m, n)` first.
# - batch dims broadcast, so the gradient of a broadcast operand is summed back
#   to its shape — `sum_to_shape` again;
# - at the end, reshape each gradient to its operand's shape.
#
# Skip the products for an operand that needs no gradient
# (`ctx.needs_input_grad`): for a layer `x @ W.T`, the input `x` usually needs
# none, and that product is as costly as the forward.
#
# Real PyTorch: `mm` and `matmul` in [`derivatives.yaml`](https://github.com/pytorch/pytorch/blob/main/tools/autograd/derivatives.yaml)
# (`mm_mat1_backward`, `mm_mat2_backward`), and
# [`LinearAlgebra.cpp`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/LinearAlgebra.cpp),
# where `matmul` is written with `mm`, `bmm`, `unsqueeze` and `expand`, each differentiable.

# %% solution="ex_matmul" reference=true
@register("matmul")
class Matmul(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return KERNELS["matmul"](a, b)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        a, b = ctx.saved_tensors
        a2 = a.unsqueeze(0) if a.dim() == 1 else a
        b2 = b.unsqueeze(-1) if b.dim() == 1 else b
        batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
        shape = batch + (a2.shape[-2], b2.shape[-1])  # the result's shape before the 1-D dims were dropped
        grad = grad.reshape(shape) if tuple(grad.shape) != shape else grad
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a = sum_to_shape(grad @ b2.mT, a2.shape)
            grad_a = grad_a.reshape(a.shape) if a.dim() == 1 else grad_a
        if ctx.needs_input_grad[1]:
            grad_b = sum_to_shape(a2.mT @ grad, b2.shape)
            grad_b = grad_b.reshape(b.shape) if b.dim() == 1 else grad_b
        return grad_a, grad_b
        ### END SOLUTION


# %% tests="ex_matmul" points=2
g = inputs.generator()
for sa, sb in [((3, 4), (4, 2)), ((4,), (4, 2)), ((3, 4), (4,)), ((4,), (4,)), ((2, 1, 3, 4), (5, 4, 2))]:
    expect_op(lambda a, b: a @ b, [torch.randn(sa, generator=g), torch.randn(sb, generator=g)], "a @ b")
m = torch.randn(4, 3, generator=g)
expect_op(lambda a, b: a @ b, [m.T, m], "a @ b")
expect_op(lambda a: a @ a, [m[:3]], "a @ a")
expect_op(lambda a, b: a @ b, [m.T, torch.randn(4, 2, generator=g)], "a @ b", requires_grad=[False, True])
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
from course.testing import matmul_operand, matmul_shapes


def test_matmul(draw):
    a, b = matmul_shapes(draw)
    dtype = draw.choice([torch.float32, torch.float64])
    wants = draw.choice([[True, True], [True, True], [False, True], [True, False]])
    expect_op(lambda a, b: a @ b, [matmul_operand(draw, a, dtype), matmul_operand(draw, b, dtype)], "a @ b",
              requires_grad=wants, draw=draw)


for_random_inputs(test_matmul, 80)


def test_matmul_chains(draw):
    n = draw(1, 4)
    x = draw.noncontiguous(draw.randn(n, n, dtype=torch.float64))
    expect_op(lambda a: a @ a @ a, [x], "a @ a @ a", draw=draw)
    v = draw.randn(n)
    expect_op(lambda a, v: (v @ a) @ (a @ v), [x.float(), v], "(v @ a) @ (a @ v)", draw=draw)


for_random_inputs(test_matmul_chains, 20)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 9 — the derivatives of the views
#
# A view moves no number: each element of the result **is** an element of the
# input. So its backward moves each gradient back to where its element came
# from — and an element that no view reached gets a gradient of zero.
#
# | view | its backward |
# |---|---|
# | `transpose(d0, d1)` | the same transpose of `grad` |
# | `permute(dims)` | `grad.permute` with the **inverse** permutation (where did dim `i` go?) |
# | `view`, `reshape`, `unsqueeze`, `squeeze` | `grad.reshape(input's shape)`: the order of the elements is the same |
# | `expand(sizes)` | several result elements were one input element: sum, like broadcasting |
# | `t[key]`, `narrow(dim, start, length)` | a tensor of zeros of the input's shape, with `grad` written through the same view of it |
#
# Careful: the gradient you get has its own strides, often not the input's. A
# backward that reads memory in order — a `reshape` where a `transpose` is due,
# or a write into the first elements instead of through the view — passes on
# contiguous tensors and fails on the rest. The tests use all sorts of layouts.
#
# Writing through a view is allowed here: a backward runs with grad mode off
# (`out[key] = grad` writes into `out`'s storage, as in chapter 01).
#
# The next cell (given) has the Functions of `clone`, `contiguous` and
# `as_strided`. The last one is the most general view of all — any shape,
# strides and offset over the input's storage — and its backward shows the idea
# behind every row of the table: add each gradient into the storage position of
# its element, then read the input's elements back out of that storage.
#
# Real PyTorch: `transpose`, `permute`, `view`, `expand`, `select`, `slice`,
# `narrow` in [`derivatives.yaml`](https://github.com/pytorch/pytorch/blob/main/tools/autograd/derivatives.yaml)
# (`select_backward`, `slice_backward`, `as_strided_backward` in `FunctionsManual.cpp`).

# %% reference=true
@register("clone")
class Clone(Function):
    @staticmethod
    def forward(ctx, x):
        return KERNELS["clone"](x)

    @staticmethod
    def backward(ctx, grad):
        return grad


@register("contiguous")
class Contiguous(Function):
    """x.contiguous() when x is not contiguous: a copy, named CloneBackward0 in torch's graph."""
    @staticmethod
    def forward(ctx, x):
        return KERNELS["contiguous"](x)

    @staticmethod
    def backward(ctx, grad):
        return grad


@register_kernel("contiguous", DispatchKey.Autograd)
def _contiguous_autograd(x):
    return x if x.is_contiguous() else Contiguous.apply(x)


def storage_positions(shape, stride, offset) -> np.ndarray:
    """The storage position of every element of a view, as an int64 array of its shape."""
    positions = np.full(tuple(shape), offset, dtype=np.int64)
    for d, (size, step) in enumerate(zip(shape, stride)):
        positions += (np.arange(size, dtype=np.int64) * step).reshape((size,) + (1,) * (len(shape) - d - 1))
    return positions


@register("as_strided")
class AsStrided(Function):
    @staticmethod
    def forward(ctx, x, size, stride, storage_offset):
        out = KERNELS["as_strided"](x, size, stride, storage_offset)
        ctx.views = (x.shape, x.stride(), x.storage_offset()), (out.shape, out.stride(), out.storage_offset())
        ctx.storage_size = len(x.untyped_storage())
        return out

    @staticmethod
    def backward(ctx, grad):
        (x_shape, x_stride, x_offset), (out_shape, out_stride, out_offset) = ctx.views
        storage = np.zeros(ctx.storage_size, grad.dtype.numpy)
        np.add.at(storage, storage_positions(out_shape, out_stride, out_offset), grad.numpy())
        inside = storage_positions(x_shape, x_stride, x_offset)
        shared = np.bincount(inside.ravel(), minlength=ctx.storage_size)[inside]  # input elements that are one
        return from_numpy(storage[inside] / np.maximum(shared, 1)), None, None, None


# %% solution="ex_views" reference=true
@register("transpose")
class Transpose(Function):
    @staticmethod
    def forward(ctx, x, dim0, dim1):
        ctx.dims = dim0, dim1
        return KERNELS["transpose"](x, dim0, dim1)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        return grad.transpose(*ctx.dims), None, None
        ### END SOLUTION


@register("permute")
class Permute(Function):
    @staticmethod
    def forward(ctx, x, dims):
        ctx.dims = dims
        return KERNELS["permute"](x, dims)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        n = len(ctx.dims)
        inverse = [0] * n
        for i, d in enumerate(ctx.dims):
            inverse[wrap_dim(d, n)] = i
        return grad.permute(inverse), None
        ### END SOLUTION


@register("view")
class View(Function):
    @staticmethod
    def forward(ctx, x, shape):
        ctx.shape = x.shape
        return KERNELS["view"](x, shape)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        return grad.reshape(ctx.shape), None
        ### END SOLUTION


@register("reshape")
class Reshape(Function):
    @staticmethod
    def forward(ctx, x, shape):
        ctx.shape = x.shape
        return KERNELS["reshape"](x, shape)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        return grad.reshape(ctx.shape), None
        ### END SOLUTION


@register("unsqueeze")
class Unsqueeze(Function):
    @staticmethod
    def forward(ctx, x, dim):
        ctx.shape = x.shape
        return KERNELS["unsqueeze"](x, dim)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        return grad.reshape(ctx.shape), None
        ### END SOLUTION


@register("squeeze")
class Squeeze(Function):
    @staticmethod
    def forward(ctx, x, dim):
        ctx.shape = x.shape
        return KERNELS["squeeze"](x, dim)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        return grad.reshape(ctx.shape), None
        ### END SOLUTION


@register("expand")
class Expand(Function):
    @staticmethod
    def forward(ctx, x, sizes):
        ctx.shape = x.shape
        return KERNELS["expand"](x, sizes)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        return sum_to_shape(grad, ctx.shape), None
        ### END SOLUTION


@register("getitem")
class Getitem(Function):
    @staticmethod
    def forward(ctx, x, key):
        ctx.shape, ctx.key = x.shape, key
        return KERNELS["__getitem__"](x, key)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        out = zeros(*ctx.shape, dtype=grad.dtype)
        out[ctx.key] = grad
        return out, None
        ### END SOLUTION


@register("narrow")
class Narrow(Function):
    @staticmethod
    def forward(ctx, x, dim, start, length):
        ctx.shape, ctx.window = x.shape, (dim, start, length)
        return KERNELS["narrow"](x, dim, start, length)

    @staticmethod
    def backward(ctx, grad):
        ### BEGIN SOLUTION
        out = zeros(*ctx.shape, dtype=grad.dtype)
        out.narrow(*ctx.window)[...] = grad
        return out, None, None, None
        ### END SOLUTION


# %% tests="ex_views" points=3
x = torch.arange(24.).reshape(2, 3, 4)
VISIBLE_VIEWS = {
    "a.transpose(0, 2)": lambda a: a.transpose(0, 2), "a.permute(2, 0, 1)": lambda a: a.permute(2, 0, 1),
    "a.permute(1, 2, 0)": lambda a: a.permute(1, 2, 0), "a.mT": lambda a: a.mT, "a.view(6, 4)": lambda a: a.view(6, 4),
    "a.reshape(4, -1)": lambda a: a.reshape(4, -1), "a.unsqueeze(1)": lambda a: a.unsqueeze(1),
    "a[:, :1].squeeze()": lambda a: a[:, :1].squeeze(), "a.flatten(1)": lambda a: a.flatten(1),
    "a[0, :1].expand(5, 3, 4)": lambda a: a[0, :1].expand(5, 3, 4), "a[1, ::2]": lambda a: a[1, ::2],
    "a[..., None, 1:3]": lambda a: a[..., None, 1:3], "a.narrow(2, 1, 2)": lambda a: a.narrow(2, 1, 2),
    "a.transpose(0, 1).reshape(12, 2)": lambda a: a.transpose(0, 1).reshape(12, 2),
}
for text, f in VISIBLE_VIEWS.items():
    expect_op(f, [x], text)
    expect_op(f, [x.transpose(0, 2).contiguous().transpose(0, 2)], text + " for a non-contiguous a")
transposed = torch.arange(24.).reshape(4, 3, 2).permute(2, 1, 0)  # a gradient of shape (2, 3, 4), not contiguous
for text, f in {"a.view(2, 3, 4)": lambda a: a.view(2, 3, 4), "a.reshape(2, 3, 4)": lambda a: a.reshape(2, 3, 4)}.items():
    expect_op(f, [torch.arange(24.).reshape(6, 4)], f"{text} with a gradient that arrives transposed (the backward "
                                                    "must reshape it: a .view of it fails)", gradient=transposed)
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_key(draw, shape):
    n = len(shape)
    key, d = [], 0
    for _ in range(draw(0, n)):
        size = shape[d]
        if size and draw.coin(3):
            key.append(draw(-size, size - 1))
        else:
            key.append(slice(draw.choice([None, 0, 1, -2]), draw.choice([None, size, -1, 2]),
                             draw.choice([None, 1, 2, 3])))
        d += 1
    if draw.coin(3):
        key.insert(draw(0, len(key)), None)
    if draw.coin(4):
        key.insert(draw(0, len(key)), Ellipsis)
    return tuple(key) if len(key) != 1 else key[0]


def key_text(key):
    def one(k):
        if k is None:
            return "None"
        if k is Ellipsis:
            return "..."
        if isinstance(k, slice):
            return ("" if k.start is None else str(k.start)) + ":" + ("" if k.stop is None else str(k.stop)) + (
                "" if k.step is None else f":{k.step}")
        return str(k)
    return "[" + ", ".join(one(k) for k in (key if isinstance(key, tuple) else (key,))) + "]"


def random_view(draw, t: torch.Tensor):
    """(text, f): a view op with arguments that fit t (torch may still refuse; then the chain stops)."""
    n, shape = t.dim(), tuple(t.shape)
    dim = lambda extra=0: draw(-(n + extra), n + extra - 1) if n + extra else 0
    kind = draw.choice(["transpose", "permute", "mT", "view", "reshape", "unsqueeze", "squeeze", "flatten",
                        "expand", "getitem", "getitem", "narrow", "contiguous", "clone"])
    if kind == "transpose" and n:
        a, b = dim(), dim()
        return f".transpose({a}, {b})", lambda x: x.transpose(a, b)
    if kind == "permute":
        perm = list(range(n))
        for i in range(n - 1, 0, -1):
            j = draw(0, i)
            perm[i], perm[j] = perm[j], perm[i]
        return f".permute{tuple(perm)}", lambda x: x.permute(*perm)
    if kind == "mT" and n >= 2:
        return ".mT", lambda x: x.mT
    if kind in ("view", "reshape"):
        dims = list(shape)
        split = [i for i, size in enumerate(dims) if size % 2 == 0 and size > 2]
        how = draw(0, 2)
        if how == 0 and len(dims) >= 2:  # merge two dims
            i = draw(0, len(dims) - 2)
            dims[i:i + 2] = [dims[i] * dims[i + 1]]
        elif how == 1 and split:  # split one (its backward must merge them again, whatever layout grad has)
            i = draw.choice(split)
            dims[i:i + 1] = [2, dims[i] // 2]
        else:
            dims.insert(draw(0, len(dims)), 1)
        if dims and draw.coin(3):
            dims[draw(0, len(dims) - 1)] = -1
        return f".{kind}{tuple(dims)}", lambda x: getattr(x, kind)(*dims)
    if kind == "unsqueeze":
        d = dim(1)
        return f".unsqueeze({d})", lambda x: x.unsqueeze(d)
    if kind == "squeeze":
        if draw(0, 1) or not n:
            return ".squeeze()", lambda x: x.squeeze()
        d = dim()
        return f".squeeze({d})", lambda x: x.squeeze(d)
    if kind == "flatten" and n:
        a, b = sorted([draw(0, n - 1), draw(0, n - 1)])
        return f".flatten({a}, {b})", lambda x: x.flatten(a, b)
    if kind == "expand":
        sizes = [draw(1, 3) if s == 1 else s for s in shape]
        sizes = [draw(1, 2) for _ in range(draw(0, 1))] + sizes
        return f".expand{tuple(sizes)}", lambda x: x.expand(*sizes)
    if kind == "getitem":
        key = random_key(draw, shape)
        return key_text(key), lambda x: x[key]
    if kind == "narrow" and n:
        d = draw(0, n - 1)
        start = draw(0, shape[d])
        length = draw(0, shape[d] - start)
        return f".narrow({d}, {start}, {length})", lambda x: x.narrow(d, start, length)
    if kind == "clone":
        return ".clone()", lambda x: x.clone()
    return ".contiguous()", lambda x: x.contiguous()


def random_view_chain(draw, t: torch.Tensor, length: int):
    """(text, f) for a chain of views that torch accepts on t."""
    texts, fs, value = [], [], t.detach()
    for _ in range(length):
        text, f = random_view(draw, value)
        try:
            value = f(value)
        except Exception:
            continue
        texts.append(text)
        fs.append(f)

    def chain(x):
        for f in fs:
            x = f(x)
        return x
    return "a" + "".join(texts), chain


def test_view_chains(draw):
    t = draw.randn(draw.shape(ndim=(0, 3), size=(1, 4)), dtype=draw.choice([torch.float32, torch.float64]))
    t = draw.noncontiguous(t)
    if t.dim() >= 2 and draw.coin(3):
        t = t.transpose(0, -1)
    text, f = random_view_chain(draw, t, draw(1, 4))
    expect_op(f, [t], text, draw=draw)


for_random_inputs(test_view_chains, 150)
# a view's backward gets the gradient in whatever layout the next op's backward made: here a transposed one,
# whose dims a .view cannot merge back (a .reshape can)
VIEWS_THEN_TRANSPOSES = {
    "a.view(2, 3, 4).transpose(1, 2)": (lambda a: a.view(2, 3, 4).transpose(1, 2), (6, 4)),
    "a.view(3, 2, 4).permute(2, 0, 1)": (lambda a: a.view(3, 2, 4).permute(2, 0, 1), (6, 4)),
    "a.reshape(2, 2, 6).mT": (lambda a: a.reshape(2, 2, 6).mT, (4, 6)),
    "a.view(4, 2, 3).transpose(0, 2)[1:]": (lambda a: a.view(4, 2, 3).transpose(0, 2)[1:], (2, 4, 3)),
    "a.unsqueeze(0).view(2, 2, 3).mT.flatten()": (lambda a: a.unsqueeze(0).view(2, 2, 3).mT.flatten(), (4, 3)),
}


def test_views_then_transposes(draw):
    for text, (f, shape) in VIEWS_THEN_TRANSPOSES.items():
        t = draw.randn(shape, dtype=draw.choice([torch.float32, torch.float64]))
        expect_op(f, [t], text + " (the gradient reaches the view's backward transposed)", draw=draw)


for_random_inputs(test_views_then_transposes, 1)


def test_two_chains(draw):  # two chains of views from one leaf: its .grad gathers both
    t = draw.noncontiguous(draw.randn(draw.shape(ndim=(1, 3), size=(2, 4)), dtype=torch.float64))
    ours, theirs = leaf_pair(t, True)
    texts = []
    for _ in range(2):
        text, f = random_view_chain(draw, t, draw(1, 3))
        texts.append(text)
        out, out_theirs = f(ours), f(theirs)
        g = draw.noncontiguous(draw.randn(out_theirs.shape, dtype=out_theirs.dtype))
        out.backward(from_torch(same_layout_copy(g)))
        out_theirs.backward(g)
    compare.assert_matches(ours.grad, theirs.grad, f"a.grad after backward through {texts[0]} and then {texts[1]} "
                                                   f"where a: {describe(t)}")


for_random_inputs(test_two_chains, 20)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 10 — checking gradients numerically
#
# How do you know a `backward` is right before torch has told you? Compare it
# with the derivative's definition. For a small `ε`,
#
# $$\frac{\partial L}{\partial x_i} \approx \frac{L(x + \varepsilon e_i) - L(x - \varepsilon e_i)}{2\varepsilon}$$
#
# — the **central** difference, whose error shrinks like ε² (the one-sided
# `(L(x + εeᵢ) − L(x)) / ε` only like ε). In float32, `x + 1e-6` barely differs
# from `x`, so this is done in **float64**.
#
# To check a function `f` with a non-scalar output, take the scalar
# `L = sum(f(*inputs) · grad_output)` for a random `grad_output`: its gradient is
# exactly what `f(*inputs).backward(grad_output)` computes (a vector-Jacobian
# product, the quantity autograd is built on).
#
# Write:
#
# - `numerical_gradient(f, inputs, grad_output, eps=1e-6)`: one entry per
#   input — `None` for numbers and tensors that do not require grad, else a
#   float64 tensor of the input's shape holding ∂L/∂input by central differences.
#   Perturb each element **in place** through `x.numpy()` (a NumPy view of `x`'s
#   memory, with its strides: an element `index` is `x.numpy()[index]`), evaluate
#   `f` with grad mode off, and put the element back exactly as it was. A tensor
#   input that requires grad but is not float64 is a `ValueError`.
# - `gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-3)`: `True` when, for a
#   random float64 `grad_output`, autograd's gradients of every input that
#   requires grad agree with `numerical_gradient` (`np.allclose` with these
#   tolerances, torch's defaults; a `.grad` of `None` counts as zeros). Leave the
#   caller's tensors as you found them, `.grad` included: run `f` on
#   `x.detach().requires_grad_(x.requires_grad)` instead of `x`.
#
# Then use it! The cell after the tests is yours: check a `Function` of your own.
#
# Real PyTorch: [`torch/autograd/gradcheck.py`](https://github.com/pytorch/pytorch/blob/main/torch/autograd/gradcheck.py)
# (`_compute_numerical_gradient`, and `fast_mode`, which also uses random vectors).

# %% solution="ex_gradcheck" reference=true
def numerical_gradient(f, inputs, grad_output: Tensor, eps: float = 1e-6) -> list:
    """∂ sum(f(*inputs) * grad_output) / ∂ input, by central differences in float64, for every input
    that requires grad (None for the others)."""
    ### BEGIN SOLUTION
    def loss() -> float:
        return float(np.sum(f(*inputs).numpy() * grad_output.numpy()))

    grads = []
    with no_grad():
        for x in inputs:
            if not (isinstance(x, Tensor) and x.requires_grad):
                grads.append(None)
                continue
            if x.dtype.name != "float64":
                raise ValueError(f"numerical_gradient needs float64 inputs (central differences in float32 are "
                                 f"noise); got {x.dtype}")
            values, grad = x.numpy(), np.zeros(x.shape)
            for index in np.ndindex(*x.shape):
                original = values[index]
                values[index] = original + eps
                plus = loss()
                values[index] = original - eps
                minus = loss()
                values[index] = original
                grad[index] = (plus - minus) / (2 * eps)
            grads.append(from_numpy(grad))
    return grads
    ### END SOLUTION


def gradcheck(f, inputs, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3) -> bool:
    """Do f's backward gradients agree with numerical_gradient at `inputs` (float64 tensors and numbers)?"""
    ### BEGIN SOLUTION
    leaves = [x.detach().requires_grad_(x.requires_grad) if isinstance(x, Tensor) else x for x in inputs]
    out = f(*leaves)
    if not out.requires_grad:
        return True
    grad_output = from_numpy(np.random.default_rng().standard_normal(out.shape))
    out.backward(grad_output)
    numerical = numerical_gradient(f, leaves, grad_output, eps)
    for x, expected in zip(leaves, numerical):
        if expected is None:
            continue
        analytical = x.grad.numpy() if x.grad is not None else np.zeros(x.shape)
        if not np.allclose(analytical, expected.numpy(), rtol=rtol, atol=atol):
            return False
    return True
    ### END SOLUTION


# %% tests="ex_gradcheck" points=2
def expect_numerical_gradient(f, args, what, eps=1e-6, requires_grad=None, draw=inputs):
    """numerical_gradient of f at args (torch tensors, made float64) against torch's autograd gradient, for a
    random gradient of the output drawn by `draw` (the course's stream by default)."""
    requires_grad = requires_grad or [isinstance(a, torch.Tensor) for a in args]
    pairs = [leaf_pair(a.double(), r) if isinstance(a, torch.Tensor) else (a, a) for a, r in zip(args, requires_grad)]
    out_theirs = f(*[p[1] for p in pairs])
    g = draw.randn(out_theirs.shape, dtype=torch.float64)
    out_theirs.backward(g)
    before = [p[0].to_torch().clone() for p in pairs if isinstance(p[0], Tensor)]
    got = numerical_gradient(f, [p[0] for p in pairs], from_torch(g.clone()), eps)
    compare.assert_equal(len(got), len(args), f"len(numerical_gradient(...)) for {what}")
    for i, ((ours, theirs), result) in enumerate(zip(pairs, got)):
        name = f"numerical_gradient(f, ...)[{i}] for f = {what}, eps={eps}, where {chr(97 + i)}: {describe(args[i])}"
        if isinstance(theirs, torch.Tensor) and theirs.requires_grad:
            # a central difference is off by about eps² times the third derivative (at eps=1e-3, up to 2e-6
            # at these inputs, measured); a one-sided one by about eps times the second
            compare.assert_matches(result, theirs.grad, name, rtol=max(1e-5, 100 * eps ** 2),
                                   atol=max(1e-6, 10 * eps ** 2))
        else:
            assert result is None, f"{name}: an input that does not require grad gets None, not {result!r:.40}"
    after = [p[0].to_torch() for p in pairs if isinstance(p[0], Tensor)]
    for b, a in zip(before, after):
        assert torch.equal(a, b), f"numerical_gradient changed an input of {what}: put every element back"


def expect_gradcheck(pair, args, what):
    """Your gradcheck on your Function and torch's gradcheck on torch's twin must agree."""
    ours_args = [from_torch(same_layout_copy(a)).requires_grad_() for a in args]
    theirs_args = [same_layout_copy(a).requires_grad_() for a in args]
    want = torch.autograd.gradcheck(pair[1].apply, theirs_args, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=False)
    got = gradcheck(pair[0].apply, ours_args)
    compare.assert_equal(got, want, f"gradcheck({what}) (torch.autograd.gradcheck says {want})")
    assert all(a.grad is None for a in ours_args), f"gradcheck({what}) left a .grad on an input"


def _cube_forward(ctx, x):
    ctx.save_for_backward(x)
    return x * x * x


Cube = twin("Cube", _cube_forward, lambda ctx, grad: 3 * ctx.saved_tensors[0] ** 2 * grad)
CubeWrong = twin("CubeWrong", _cube_forward, lambda ctx, grad: 2 * ctx.saved_tensors[0] ** 2 * grad)
x = torch.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=torch.float64)
expect_numerical_gradient(lambda a: (a * a).exp(), [x], "(a * a).exp()")
expect_numerical_gradient(lambda a, b: (a @ b).tanh(), [x, x.T], "(a @ b).tanh()")
expect_numerical_gradient(lambda a: (a * a).exp(), [x], "(a * a).exp() (at eps=1e-3, only a central difference "
                                                        "(L(x + eps) - L(x - eps)) / (2 eps) is this close)", eps=1e-3)
expect_numerical_gradient(lambda a, k: a * k, [x, 2.5], "a * k for a number k (its entry is None)")
expect_numerical_gradient(lambda a, b: a * b, [x, x.T], "a * b where b does not require grad (its entry is None)",
                          requires_grad=[True, False])
compare.assert_raises(ValueError, numerical_gradient, "numerical_gradient on a float32 input that requires grad "
                      "(central differences need float64)", lambda a: a * 2, [from_torch(torch.ones(3)).requires_grad_()],
                      from_torch(torch.ones(3)))
expect_gradcheck(Cube, [x], "Cube.apply, x")
expect_gradcheck(CubeWrong, [x], "CubeWrong.apply, x")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
SMOOTH = {
    "(a * b).exp().sum(0)": (lambda a, b: (a * b).exp().sum(0), 2),
    "(a @ b).tanh() / 2": (lambda a, b: (a @ b.mT).tanh() / 2, 2),
    "(a.sigmoid() + b ** 2).mean(-1)": (lambda a, b: (a.sigmoid() + b ** 2).mean(-1), 2),
    "((a * a + 1).log() - b).sum()": (lambda a, b: ((a * a + 1).log() - b).sum(), 2),
    # smooth everywhere: a kink (abs at 0) within eps of an input breaks any finite difference
    "(a * a + 1).transpose(0, 1)[1:].sqrt() * 3": (lambda a: (a * a + 1).transpose(0, 1)[1:].sqrt() * 3, 1),
}
for text, (f, arity) in SMOOTH.items():
    def test_smooth(draw):
        shape = (draw(1, 3), draw(2, 3))
        args = [draw.noncontiguous(draw.randn(shape, dtype=torch.float64)) for _ in range(arity)]
        expect_numerical_gradient(f, args, text, draw=draw)
        expect_numerical_gradient(f, args, text, eps=1e-3, draw=draw)  # a one-sided difference is off by ~eps here
        wants = [draw(0, 1) > 0 for _ in range(arity)]
        wants[draw(0, arity - 1)] = True
        expect_numerical_gradient(f, args, text, requires_grad=wants, draw=draw)

    for_random_inputs(test_smooth, 3)
expect_numerical_gradient(lambda a, k: a * k, [torch.randn(3, dtype=torch.float64), 2.5], "a * k for a number k")
compare.assert_raises(ValueError, numerical_gradient, "numerical_gradient on a float32 input",
                      lambda a: a * 2, [from_torch(torch.randn(3)).requires_grad_()], from_torch(torch.ones(3)))


def _swap_backward(ctx, grad):
    a, b = ctx.saved_tensors
    return grad * a, grad * b


def _pair_forward(ctx, a, b):
    ctx.save_for_backward(a, b)
    return a * b


def _rows_forward(ctx, x):
    ctx.shape = tuple(x.shape)
    return x.sum(1)


Pair = twin("Pair", _pair_forward, _times_backward)
PairSwapped = twin("PairSwapped", _pair_forward, _swap_backward)
Rows = twin("Rows", _rows_forward, lambda ctx, grad: grad.unsqueeze(1).expand(ctx.shape))
RowsHalf = twin("RowsHalf", _rows_forward, lambda ctx, grad: grad.unsqueeze(1).expand(ctx.shape) * 0.5)


def test_gradchecks(draw):
    shape = (draw(2, 3), draw(2, 3))
    a, b = (draw.noncontiguous(draw.randn(shape, dtype=torch.float64)) for _ in range(2))
    for pair in (Cube, CubeWrong):
        expect_gradcheck(pair, [a], f"{pair[0].__name__}.apply, a")
    for pair in (Pair, PairSwapped):
        expect_gradcheck(pair, [a, b], f"{pair[0].__name__}.apply, a, b")
    for pair in (Rows, RowsHalf):
        expect_gradcheck(pair, [a], f"{pair[0].__name__}.apply, a")


for_random_inputs(test_gradchecks, 3)
### END HIDDEN TESTS

# %% [markdown]
# **Your turn.** This cell is yours to edit and is not graded. Write a
# `Function` of your own — `Softplus`, `log(1 + exp(x))`, whose derivative is
# `sigmoid(x)`, say — and check it with your `gradcheck`:
#
# ```python
# class Softplus(Function):
#     @staticmethod
#     def forward(ctx, x):
#         ctx.save_for_backward(x)
#         return (x.exp() + 1).log()
#
#     @staticmethod
#     def backward(ctx, grad):
#         (x,) = ctx.saved_tensors
#         return grad * x.sigmoid()
#
# x = from_torch(torch.randn(3, 4, dtype=torch.float64)).requires_grad_()
# gradcheck(Softplus.apply, [x]), gradcheck(lambda x: (x @ x.T).max(1).values, [x])
# ```

# %% free=true


# %% reference=true
# The names of this chapter that later chapters may use (`from picotorch import ...`).
__all__ = ["add_tensor_key", "register_fallthrough", "fallthrough_keys", "register_fallback", "redispatch",
           "ExcludeDispatchKeys", "IncludeDispatchKeys", "is_grad_enabled", "set_grad_enabled", "GradMode", "Node", "ones", "cast", "no_grad", "enable_grad",
           "AccumulateGrad", "gradient_edge", "FREED", "BackwardNode", "Function", "NOT_REQUIRING_GRAD",
           "NOT_SCALAR", "FUNCTIONS", "register", "KERNELS", "unary_kernel", "binary_kernel", "shape_of", "where",
           "Neg", "Exp", "Log", "Sqrt", "Tanh", "Sigmoid", "Relu", "Abs", "sum_to_shape", "Add", "Sub", "Mul",
           "Div", "Pow", "Maximum", "kept_shape", "Sum", "Mean", "Max", "MaxDim", "Matmul", "Clone", "Contiguous",
           "storage_positions", "AsStrided", "Transpose", "Permute", "View", "Reshape", "Unsqueeze", "Squeeze",
           "Expand", "Getitem", "Narrow", "numerical_gradient", "gradcheck"]

# %% [markdown]
# ## Check your work
#
# Save the notebook (Ctrl+S), then run the cell below: it re-runs the saved
# file in a fresh kernel, as the grader will, and lists every exercise.

# %%
check()
