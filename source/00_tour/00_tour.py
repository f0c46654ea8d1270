# ---
# jupyter:
#   course:
#     chapter: 00_tour
#     title: PyTorch as a system
#     files:
#     - figures/six_levels.svg
#     - figures/module_tree.svg
#     - figures/training_loop.svg
#     - figures/define_by_run.svg
# ---

# %% [markdown]
# # Chapter 00 — PyTorch as a system
#
# Before we build our own PyTorch, we take the real one apart and look at the
# pieces. In this chapter you write nothing framework-like yet: you use real
# `torch`, but every exercise makes you touch one part of the machine, so that
# later chapters, where you rebuild that part, have somewhere to attach.
#
# **Time:** about 2 hours — seven short exercises and a written answer.
#
# **How this notebook works.** Cells marked *YOUR CODE HERE* are yours. Each is
# followed by a test cell: run it to see whether your answer agrees with real
# PyTorch. The tests you see are a first taste; at grading, hidden tests try your
# code on fresh random inputs. At any time, `check()` (last cell) re-runs the
# *saved* notebook in a fresh kernel, exactly as the grader will, and
# `check("ex_gradient")` runs one exercise's visible tests right here.

# %%
import torch
from torch import nn

from course import Checker, devices
from course import compare, inputs

check = Checker("00_tour")
print("torch", torch.__version__, "| devices here:", devices())

# %% [markdown]
# ## 1. What PyTorch is
#
# PyTorch is four things glued together:
#
# 1. **Tensors that run on GPUs** — n-dimensional arrays with a dtype and a
#    device, and hundreds of operations on them.
# 2. **An automatic differentiation engine** (`torch.autograd`) — it records the
#    operations you run and can walk that record backwards to compute gradients.
# 3. **Neural-network building blocks** (`torch.nn`) — layers, losses and the
#    `Module` class that keeps track of their parameters.
# 4. **A training ecosystem** — optimizers (`torch.optim`), data loading
#    (`torch.utils.data`), saving and loading, distributed training, compilers.
#
# Strip away everything but these and you have the framework this course
# rebuilds, chapter by chapter: tensors (01), autograd (02), modules (03),
# training (04), a device backend with your own CUDA kernels (05) and a
# compiler that captures, optimises and fuses graphs (06).
#
# ## 2. Define-by-run
#
# In PyTorch the graph that autograd differentiates is not declared up front:
# it is *recorded while your Python code runs*. Every forward pass builds a new
# graph, so ordinary `if`, `for` and `while` decide what the graph looks like —
# and it may differ from one input to the next. This is a **dynamic graph**
# (define-by-run).
#
# Frameworks with **static graphs** (TensorFlow 1, early JAX-style tracing) ask
# you to describe the computation first and run it later. They can optimise the
# whole graph before running it — fuse operations, plan memory — but control flow
# must be expressed in the graph language, and debugging means inspecting a
# graph rather than stepping through Python.
#
# `torch.compile` (PyTorch 2) keeps define-by-run for you while getting much of
# the static speed: it watches the Python bytecode of your function, captures
# the straight-line tensor code into graphs, compiles those (fusing operations
# into generated kernels), and falls back to ordinary Python — a *graph break* —
# wherever it meets something it cannot capture. Data-dependent control flow
# still works; it just splits the graph.
#
# ## 3. Four layers, six levels
#
# | layer | what it does | you rebuild it in |
# |---|---|---|
# | **Tensor** | storage, shape, strides, dtype, device; the operations | chapter 01 |
# | **Autograd** | records operations, runs them backwards | chapter 02 |
# | **`nn.Module`** | parameters, sub-modules, state | chapter 03 |
# | **Backend** | the kernels that do the arithmetic on each device | chapter 05 |
#
# A single `torch.add(x, y)` travels down six levels:
#
# ![The six levels of torch.add(x, y), top to bottom: your code (z = x + y); the Python API (Tensor.__add__, bound from C++, calls aten::add.Tensor); the dispatcher, highlighted, which picks a kernel by the arguments' dispatch keys (Dispatcher.h, DispatchKey.h); ATen's at::native::add; the device backend's CPU or CUDA kernel; the hardware](figures/six_levels.svg)
#
# The dispatcher is why one Python call can mean a CPU loop, a CUDA kernel, or
# "record this for autograd, then call the kernel": it looks at the tensors'
# *dispatch keys* and routes the call. picotorch has one from chapter 01 on:
# every operation goes through it, chapter 02 puts autograd on it as a key, and
# chapter 05 adds the CUDA key.

# %% [markdown]
# ## Exercise 1 — the shape of `@`
#
# `a @ b` (`torch.matmul`) follows rules you will implement yourself in chapter 01:
#
# - both operands need at least one dimension;
# - a 1-D left operand is treated as a row (a `1` is prepended to its shape and
#   removed from the result); a 1-D right operand as a column (a `1` is appended,
#   then removed);
# - the last dimension of the left must equal the second-to-last of the right;
# - all dimensions before the last two are *batch* dimensions and broadcast
#   against each other (`torch.broadcast_shapes` does that part; you may use it).
#
# Write `matmul_shape(a, b)`: the shape of `torch.empty(a) @ torch.empty(b)`, as
# a tuple, without creating any tensor. Where `@` would fail, raise `ValueError`.
# The real rule lives in `torch/_refs/__init__.py` (search for `matmul`) and in
# ATen's `LinearAlgebra.cpp`.

# %% solution="ex_matmul_shape"
def matmul_shape(a: tuple, b: tuple) -> tuple:
    """The shape of torch.empty(a) @ torch.empty(b); ValueError where @ would fail."""
    ### BEGIN SOLUTION
    a, b = tuple(a), tuple(b)
    if not a or not b:
        raise ValueError("both operands of @ need at least one dimension")
    left = (1,) + a if len(a) == 1 else a
    right = b + (1,) if len(b) == 1 else b
    if left[-1] != right[-2]:
        raise ValueError(f"@ needs a[-1] == b[-2], got {left[-1]} and {right[-2]}")
    try:
        batch = tuple(torch.broadcast_shapes(left[:-2], right[:-2]))
    except RuntimeError as e:
        raise ValueError(f"batch dimensions do not broadcast: {e}") from None
    shape = batch + (left[-2], right[-1])
    if len(a) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b) == 1:
        shape = shape[:-1]
    return shape
    ### END SOLUTION


# %% tests="ex_matmul_shape" points=2
def torch_matmul_shape(a, b):
    """What real torch says: a shape, or ValueError where it raises."""
    try:
        return tuple((torch.empty(a) @ torch.empty(b)).shape)
    except RuntimeError:
        return ValueError


def expect_matmul_shape(a, b, rule=None):
    """matmul_shape(a, b) against torch's shape or error; `rule`, when given, names the rule the pair tries."""
    expected = torch_matmul_shape(a, b)
    what = f"matmul_shape({a}, {b})" + (f" ({rule})" if rule else "")
    if expected is ValueError:
        compare.assert_raises(ValueError, matmul_shape, what, a, b)
    else:
        compare.assert_equal(tuple(matmul_shape(a, b)), expected, what)


expect_matmul_shape((2, 3), (3, 4), "two matrices")
expect_matmul_shape((3,), (3, 5), "a 1-D left operand is a row: its 1 is removed from the result")
expect_matmul_shape((2, 3), (3,), "a 1-D right operand is a column: its 1 is removed from the result")
expect_matmul_shape((3,), (3,), "two 1-D operands give a 0-dim result")
expect_matmul_shape((2, 3), (4, 5), "a[-1] must equal b[-2]")
expect_matmul_shape((), (3,), "both operands need at least one dimension")
expect_matmul_shape((2, 1, 3, 4), (5, 4, 2), "batch dimensions broadcast: (2, 1) with (5,)")
expect_matmul_shape((4,), (2, 4, 3), "a 1-D operand against a batch of matrices")
expect_matmul_shape((2, 3, 4), (3, 4, 5), "batch dimensions 2 and 3 do not broadcast")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_matmul_pair():
    """Shapes that @ usually accepts, with batch dims that broadcast (or sometimes not)."""
    m, k, n = inputs.randint(0, 4), inputs.randint(1, 4), inputs.randint(0, 4)
    rank_a, rank_b = inputs.randint(1, 4), inputs.randint(1, 4)
    a = (k,) if rank_a == 1 else (m, k)
    b = (k,) if rank_b == 1 else (k, n)
    batch = [inputs.randint(1, 3) for _ in range(max(rank_a, rank_b) - 2)]
    for _ in range(rank_a - 2):
        a = (batch[-(len(a) - 1)] if inputs.randint(0, 2) else 1,) + a
    for _ in range(rank_b - 2):
        b = (batch[-(len(b) - 1)] if inputs.randint(0, 2) else 1,) + b
    if inputs.randint(0, 9) == 0:  # now and then, a pair @ must reject
        b = b[:-2] + (b[-2] + 1,) + b[-1:] if len(b) > 1 else (b[0] + 1,)
    return a, b


for a, b in [((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)), ((0, 3), (3, 0)),
             ((2, 3, 4), (3, 4, 5)), ((), (3,)), ((3,), ()), ((1, 2, 3), (7, 3, 2))]:
    expect_matmul_shape(a, b)
for _ in range(300):
    expect_matmul_shape(*random_matmul_pair())
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2 — autograd in one call
#
# Autograd records every operation on a tensor that `requires_grad`, and
# `backward()` (or `torch.autograd.grad`) walks that record in reverse. For
# $y = x^2 + 3x$ at $x = 2$, the gradient is $2x + 3 = 7$.
#
# Write `gradient_of(f, x)`: the gradient of the scalar function `f` at `x`,
# computed by autograd (not by a formula). Three rules a careful user follows:
#
# - work on a detached copy, so the caller's `x` is left exactly as it was (it
#   must not start requiring grad, and no `.grad` may appear on it);
# - calling it twice gives the same answer (nothing accumulates between calls);
# - if `f(x)` is not a single number, let autograd's own error through — do not
#   quietly `.sum()` it: a gradient of a vector function needs a direction.
#
# Real PyTorch: `torch/autograd/__init__.py` (`grad`, `backward`).

# %% solution="ex_gradient"
def gradient_of(f, x: torch.Tensor) -> torch.Tensor:
    """d f(x) / dx by autograd, leaving x untouched."""
    ### BEGIN SOLUTION
    x = x.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(f(x), x)
    return grad
    ### END SOLUTION


# %% tests="ex_gradient" points=2
x = torch.tensor(2.0)
compare.assert_matches(gradient_of(lambda x: x * x + 3 * x, x), torch.tensor(7.0), "gradient of x*x + 3*x at x = 2")
v = torch.tensor([0.5, -1.0, 2.0])
compare.assert_matches(gradient_of(lambda x: (x.sin() * x).sum(), v), v.sin() + v * v.cos(),
                       "gradient of (sin(x) * x).sum()")
assert not x.requires_grad and x.grad is None, (
    f"gradient_of must leave the caller's x as it was: after gradient_of(f, x), x.requires_grad is "
    f"{x.requires_grad} and x.grad is {x.grad} (both should be as before: False and None). "
    "Work on x.detach().clone() instead.")
compare.assert_matches(gradient_of(lambda x: x * x + 3 * x, x), torch.tensor(7.0),
                       "a second call of gradient_of(x*x + 3*x) at x = 2 (nothing may accumulate between calls)")
compare.assert_raises(RuntimeError, gradient_of,
                      "gradient_of(f, x) where f(x) has shape (3,) (let autograd's error through, do not .sum())",
                      lambda x: x * 2, torch.ones(3))
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def torch_gradient(f, x):
    leaf = x.detach().clone().requires_grad_(True)
    f(leaf).backward()
    return leaf.grad


functions = {
    "x*x + 3*x (summed)": lambda x: (x * x + 3 * x).sum(),
    "(x.exp() * x).mean()": lambda x: (x.exp() * x).mean(),
    "x.tanh().pow(3).sum()": lambda x: x.tanh().pow(3).sum(),
    "(x @ x.T).trace() for a matrix": lambda x: (x @ x.T).trace() if x.dim() == 2 else (x * x).sum(),
    "a diamond: (x*x + x.sin()*x*x).sum()": lambda x: (lambda s: (s + x.sin() * s).sum())(x * x),
}
for name, f in functions.items():
    for shape in [(), (inputs.randint(1, 6),), (inputs.randint(1, 4), inputs.randint(1, 4))]:
        x = inputs.randn(*shape, dtype=inputs.choice([torch.float32, torch.float64]))
        if x.dim() == 2:
            x = inputs.noncontiguous(x)
        before = x.clone()
        got = gradient_of(f, x)
        compare.assert_matches(got, torch_gradient(f, x), f"gradient_of({name}) at x of shape {tuple(shape)}")
        assert not x.requires_grad and x.grad is None, (
            "gradient_of changed the caller's tensor: it now requires grad or carries a .grad. "
            "Work on x.detach().clone() instead.")
        assert torch.equal(x, before), "gradient_of changed the values of the caller's tensor"
        assert not got.requires_grad, "the gradient returned still requires grad: return a plain tensor"
        again = gradient_of(f, x)
        compare.assert_matches(again, torch_gradient(f, x),
                               f"a second call of gradient_of({name}) (did gradients accumulate between calls?)")
compare.assert_raises(RuntimeError, gradient_of, "gradient_of(f, x) where f(x) has shape (3,)",
                      lambda x: x * 2, torch.ones(3))
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3 — a module
#
# An `nn.Module` is a container that knows its parameters. When you write
# `self.fc1 = nn.Linear(...)` inside `__init__`, `Module.__setattr__` notices
# that the value is a module and files it under `self._modules["fc1"]`; a
# `Parameter` goes to `self._parameters`. Everything else — `parameters()`,
# `state_dict()`, `to()`, `train()` — walks those dictionaries
# (`torch/nn/modules/module.py`). You rebuild this in chapter 03.
#
# Write `TwoLayerNet(n_in, n_hidden, n_out)`: a `Linear` layer `fc1`, a ReLU,
# and a `Linear` layer `fc2`, with `forward(x) = fc2(relu(fc1(x)))`. Keep the
# names `fc1` and `fc2`: tests load weights by those names, as `state_dict()` does.

# %% solution="ex_module"
class TwoLayerNet(nn.Module):
    def __init__(self, n_in: int, n_hidden: int, n_out: int):
        super().__init__()
        ### BEGIN SOLUTION
        self.fc1 = nn.Linear(n_in, n_hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(n_hidden, n_out)
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        return self.fc2(self.act(self.fc1(x)))
        ### END SOLUTION


# %% tests="ex_module" points=2
import torch.nn.functional as F


def reference_two_layer(net, x):
    """The same network written out with torch.nn.functional and the net's own weights."""
    p = dict(net.named_parameters())
    return F.linear(F.relu(F.linear(x, p["fc1.weight"], p["fc1.bias"])), p["fc2.weight"], p["fc2.bias"])


net = TwoLayerNet(4, 8, 3)
compare.assert_equal([name for name, _ in net.named_parameters()],
                     ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"], "TwoLayerNet(4, 8, 3) parameter names")
x = torch.randn(5, 4)
compare.assert_matches(net(x), reference_two_layer(net, x), "TwoLayerNet(4, 8, 3) on a batch of 5")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
for _ in range(5):
    n_in, n_hidden, n_out = inputs.randint(1, 7), inputs.randint(1, 9), inputs.randint(1, 5)
    net = TwoLayerNet(n_in, n_hidden, n_out)
    what = f"TwoLayerNet({n_in}, {n_hidden}, {n_out})"
    compare.assert_equal({k: tuple(v.shape) for k, v in net.state_dict().items()},
                         {"fc1.weight": (n_hidden, n_in), "fc1.bias": (n_hidden,),
                          "fc2.weight": (n_out, n_hidden), "fc2.bias": (n_out,)}, f"{what}.state_dict() shapes")
    x = inputs.randn(inputs.randint(1, 6), n_in)
    compare.assert_matches(net(x), reference_two_layer(net, x), f"{what} forward")
    with torch.no_grad():  # negative pre-activations must be cut by the ReLU
        net.fc1.bias.fill_(-0.5)
    compare.assert_matches(net(x), reference_two_layer(net, x), f"{what} forward with negative pre-activations")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 4 — counting parameters by walking the tree
#
# `sum(p.numel() for p in model.parameters())` counts a model's parameters. Do
# it yourself, the way `Module.named_parameters` does internally: start at the
# model, look in its `_parameters` dictionary, then recurse into every module in
# its `_modules` dictionary. Two details real models have:
#
# - an entry may be `None` (`nn.Linear(3, 4, bias=False)` keeps `_parameters["bias"] = None`);
# - one parameter may appear in several places (weight tying, or the same layer
#   used twice): count it once, as `parameters()` does. Compare objects, not values.
#
# ![A module tree: model has three children, embed (a Linear without bias), body (a Sequential of a Linear and a ReLU) and head (a Linear without bias); head.weight is embed.weight, one Parameter object found in two places: the tree holds 52 numbers in its places, parameters() counts 36](figures/module_tree.svg)
#
# Do not call `parameters()`, `named_parameters()`, `modules()` or `children()`:
# the tests run your function on models where those are switched off.

# %% solution="ex_count_parameters"
def count_parameters(module: nn.Module) -> int:
    """The number of scalars in all distinct parameters of module and its sub-modules."""
    ### BEGIN SOLUTION
    seen: set[int] = set()
    total = 0
    stack = [module]
    while stack:
        m = stack.pop()
        for p in m._parameters.values():
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                total += p.numel()
        stack.extend(child for child in m._modules.values() if child is not None)
    return total
    ### END SOLUTION


# %% tests="ex_count_parameters" points=2
def torch_count(model):
    return sum(p.numel() for p in model.parameters())


def switch_off_walkers(model):
    """Make every walker of the model's modules fail, so the count must walk _modules/_parameters."""
    def refuse(*args, **kwargs):
        raise AssertionError("count_parameters called parameters() or another walker: "
                             "walk _modules and _parameters yourself")
    for m in list(model.modules()):
        for name in ["parameters", "named_parameters", "modules", "named_modules", "children", "named_children"]:
            object.__setattr__(m, name, refuse)
    return model


model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Sequential(nn.Linear(4, 2, bias=False)))
reference = torch_count(model)
compare.assert_equal(count_parameters(switch_off_walkers(model)), reference,
                     "count_parameters of a nested Sequential, with a bias of None (walk _parameters and "
                     "_modules yourself: parameters() and the other walkers are switched off here)")
layer = nn.Linear(4, 6)
twice = nn.Sequential(layer, nn.ReLU(), layer)
compare.assert_equal(count_parameters(twice), torch_count(twice),
                     "count_parameters of nn.Sequential(layer, nn.ReLU(), layer): a layer used twice counts once")
tied = nn.Sequential(nn.Linear(5, 5), nn.Linear(5, 5, bias=False))
tied[1].weight = tied[0].weight
compare.assert_equal(count_parameters(tied), torch_count(tied),
                     "count_parameters with a weight shared by two layers (tied[1].weight = tied[0].weight): "
                     "a shared parameter counts once")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_model(depth=0):
    root = nn.Module()
    for i in range(inputs.randint(1, 3)):
        kind = inputs.randint(0, 3)
        if kind == 0 or depth >= 2:
            child = nn.Linear(inputs.randint(1, 5), inputs.randint(1, 5), bias=bool(inputs.randint(0, 1)))
        elif kind == 1:
            child = nn.LayerNorm(inputs.randint(1, 6))
        else:
            child = random_model(depth + 1)
        root.add_module(f"m{i}", child)
    if inputs.randint(0, 1):
        root.register_parameter("scale", nn.Parameter(torch.ones(inputs.randint(1, 4))))
    return root


for _ in range(20):
    model = random_model()
    reference, description = torch_count(model), repr(model)
    compare.assert_equal(count_parameters(switch_off_walkers(model)), reference, f"count_parameters of\n{description}\n")
shared = nn.Linear(4, 4)
tied = nn.Module()
tied.add_module("a", shared)
tied.add_module("b", nn.Sequential(shared, nn.ReLU()))
tied.add_module("head", nn.Linear(4, 4))
tied.head.weight = shared.weight
reference = torch_count(tied)
compare.assert_equal(count_parameters(switch_off_walkers(tied)), reference,
                     "count_parameters with a layer used twice and a tied weight (count each parameter once)")
compare.assert_equal(count_parameters(nn.ReLU()), 0, "count_parameters(nn.ReLU())")
### END HIDDEN TESTS

# %% [markdown]
# ## 4. One training iteration, six steps
#
# Every training loop in PyTorch, however large, repeats the same six steps.
# Each is owned by a different component:
#
# ![Six steps on a circle, each with its code and its owner: 1. next batch, x, y = next(batches), the DataLoader; 2. forward, out = model(x), the Module, which records the graph; 3. loss, loss = loss_fn(out, y), a loss function; 4. clear old gradients, optimizer.zero_grad(), the optimizer; 5. backward, loss.backward(), the autograd engine; 6. update, optimizer.step(), the optimizer; then back to step 1](figures/training_loop.svg)
#
# Step 4 may move, but not past step 5: gradients **add up** in `.grad`, so
# the last batch's must be gone before `backward()` writes this batch's.
# (Torch's own tutorials call `zero_grad()` last, after `step()`: the same
# clearing, done at the end of the previous iteration.)
#
# Step through one iteration below and watch one parameter: its value, its
# gradient after `backward`, and its update after `step`.

# %%
from course.widgets.training_step import explore

explore()

# %% [markdown]
# ## Exercise 5 — `train_one_epoch` and `evaluate`
#
# Write the two functions every project has:
#
# - `train_one_epoch(model, loader, loss_fn, optimizer)` puts the model in
#   training mode (`model.train()`: dropout and batch norm behave differently
#   while training), runs the six steps for every batch, and returns the average
#   loss **per sample** over the epoch (weight each batch's loss by its size).
# - `evaluate(model, loader, loss_fn)` puts the model in evaluation mode,
#   computes no gradients at all (`torch.no_grad()`: no graph is recorded, which
#   saves memory and time), and returns `(average loss per sample, accuracy)`
#   where accuracy is the fraction of samples whose highest-scoring class
#   (`argmax` over dim 1) equals the label.
#
# The hidden tests notice a missing `zero_grad`, a `step` before `backward`, a
# missing `train()` or `eval()`, and an evaluation that records a graph.

# %% solution="ex_training_loop"
def train_one_epoch(model, loader, loss_fn, optimizer) -> float:
    ### BEGIN SOLUTION
    model.train()
    total, count = 0.0, 0
    for x, y in loader:
        out = model(x)
        loss = loss_fn(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item() * len(x)
        count += len(x)
    return total / count
    ### END SOLUTION


def evaluate(model, loader, loss_fn) -> tuple[float, float]:
    ### BEGIN SOLUTION
    model.eval()
    total, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            total += loss_fn(out, y).item() * len(x)
            correct += (out.argmax(dim=1) == y).sum().item()
            count += len(x)
    return total / count, correct / count
    ### END SOLUTION


# %% tests="ex_training_loop" points=3
import copy

from torch.utils.data import DataLoader, TensorDataset


def blobs(n, n_features=4, n_classes=3):
    """Separable-ish random classes: each class is a random centre plus noise."""
    centres = inputs.randn(n_classes, n_features) * 3
    labels = torch.randint(0, n_classes, (n,), generator=inputs.generator())
    return TensorDataset(centres[labels] + inputs.randn(n, n_features), labels)


def reference_epoch(model, loader, loss_fn, optimizer):
    model.train()
    total = 0.0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item() * len(x)
    return total / len(loader.dataset)


def diagnose_epoch(model, loader, what):
    """Run train_one_epoch on a copy of `model` and check, at every optimizer.step(), that the gradients it
    steps with are this batch's alone: the causes of a wrong average loss, named before the loss is compared."""
    model = copy.deepcopy(model)
    params = list(model.parameters())
    arrived = [[] for _ in params]  # the gradients each backward brought, since the last step
    for p, log in zip(params, arrived):
        p.register_hook(lambda g, log=log: log.append(g.detach().clone()))
    optimizer = torch.optim.SGD(params, lr=0.1)
    sgd_step, problems = optimizer.step, []

    def checked_step(*args, **kwargs):
        if not any(arrived):
            problems.append("optimizer.step() ran before loss.backward() in a batch: step moves the parameters "
                            "along the gradients backward computes, so it must come after backward")
        for p, log in zip(params, arrived):
            if not log or problems:
                continue
            if p.grad is None or not p.grad.any() and log[-1].any():
                problems.append("the gradients were cleared between loss.backward() and optimizer.step(), so step "
                                "saw none: call optimizer.zero_grad() before backward, not after")
            elif not torch.allclose(p.grad, log[-1], rtol=1e-5, atol=1e-7):
                problems.append("optimizer.step() saw more than this batch's gradient: backward adds to .grad, "
                                "so the gradients of earlier batches were still there. Call optimizer.zero_grad() "
                                "in every batch, before loss.backward()")
        for log in arrived:
            log.clear()
        return sgd_step(*args, **kwargs)

    optimizer.step = checked_step
    train_one_epoch(model, loader, nn.CrossEntropyLoss(), optimizer)
    assert not problems, f"{what}: {problems[0]}"


data = blobs(40)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
twin = copy.deepcopy(model)
loader = DataLoader(data, batch_size=16)
diagnose_epoch(model, loader, "train_one_epoch, SGD, 40 samples in batches of 16")
got = train_one_epoch(model, loader, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1))
want = reference_epoch(twin, loader, nn.CrossEntropyLoss(), torch.optim.SGD(twin.parameters(), lr=0.1))
compare.assert_matches(torch.tensor(got), torch.tensor(want), "train_one_epoch's average loss per sample "
                       "(each batch's loss weighted by its size: batches of 16, 16 and 8)")
for (name, p), q in zip(model.named_parameters(), twin.parameters()):
    compare.assert_matches(p, q, f"parameter {name} after one epoch")
class Spy(nn.Module):
    """Wraps a model and records, at each forward, whether it was in training mode and grad mode."""
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.calls = []

    def forward(self, x):
        self.calls.append((self.training, torch.is_grad_enabled()))
        return self.inner(x)


spy = Spy(model)
spy.eval()  # train_one_epoch must switch it back
train_one_epoch(spy, loader, nn.CrossEntropyLoss(), torch.optim.SGD(spy.parameters(), lr=0.1))
assert spy.calls and all(training for training, _ in spy.calls), (
    "train_one_epoch must put the model in training mode (model.train()): given a model in eval mode, "
    "it ran a forward pass in eval mode")
spy.calls.clear()
loss, acc = evaluate(spy, loader, nn.CrossEntropyLoss())
assert spy.calls and not any(training for training, _ in spy.calls), (
    "evaluate must put the model in evaluation mode (model.eval()): it ran a forward pass in training mode")
assert not any(grad for _, grad in spy.calls), (
    "evaluate must compute no gradients: it ran a forward pass with grad mode on (an autograd graph was "
    "recorded). Wrap the loop in torch.no_grad()")
with torch.no_grad():
    outs = [(model(x), y) for x, y in loader]
want_loss = sum(nn.CrossEntropyLoss()(o, y).item() * len(y) for o, y in outs) / len(data)
want_acc = sum((o.argmax(1) == y).sum().item() for o, y in outs) / len(data)
compare.assert_matches(torch.tensor(loss), torch.tensor(want_loss),
                       "evaluate's average loss per sample (40 samples in batches of 16)")
compare.assert_matches(torch.tensor(acc), torch.tensor(want_acc),
                       "evaluate's accuracy: the fraction of samples whose argmax over dim 1 equals the label")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
for optimizer_kind in ["sgd", "sgd+momentum", "adam"]:
    data = blobs(inputs.randint(20, 60))
    batch = inputs.randint(3, 16)
    inner = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.0), nn.ReLU(), nn.Linear(8, 3))
    make = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.05),
            "sgd+momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
            "adam": lambda ps: torch.optim.Adam(ps, lr=0.01)}[optimizer_kind]
    spy, twin = Spy(copy.deepcopy(inner)), copy.deepcopy(inner)
    spy.eval()  # train_one_epoch must switch it back
    loader = DataLoader(data, batch_size=batch)
    what = f"train_one_epoch with {optimizer_kind}, {len(data)} samples in batches of {batch}"
    if optimizer_kind == "sgd":
        diagnose_epoch(inner, loader, what)
    for epoch in range(2):
        got = train_one_epoch(spy, loader, nn.CrossEntropyLoss(), opt_a if epoch else (opt_a := make(spy.parameters())))
        want = reference_epoch(twin, loader, nn.CrossEntropyLoss(), opt_b if epoch else (opt_b := make(twin.parameters())))
        assert all(training for training, _ in spy.calls), (
            "train_one_epoch ran a forward pass with the model in eval mode: call model.train() first")
        compare.assert_matches(torch.tensor(got), torch.tensor(want), f"{what}: average loss per sample, epoch {epoch + 1}")
        for (name, p), q in zip(spy.inner.named_parameters(), twin.parameters()):
            compare.assert_matches(p, q, f"{what}: parameter {name} after epoch {epoch + 1} "
                                         "(zero_grad, backward, step — in that order, every batch?)")
    assert all(training for training, _ in spy.calls), (
        "train_one_epoch ran a forward pass with the model in eval mode: call model.train() first")
    spy.calls.clear()
    loss, acc = evaluate(spy, loader, nn.CrossEntropyLoss())
    assert spy.calls and not any(training for training, _ in spy.calls), (
        "evaluate ran a forward pass in training mode: call model.eval() first")
    assert not any(grad for _, grad in spy.calls), (
        "evaluate recorded an autograd graph: wrap the loop in torch.no_grad()")
    twin.eval()
    with torch.no_grad():
        outs = [(twin(x), y) for x, y in loader]
    want_loss = sum(nn.CrossEntropyLoss()(o, y).item() * len(y) for o, y in outs) / len(data)
    want_acc = sum((o.argmax(1) == y).sum().item() for o, y in outs) / len(data)
    compare.assert_matches(torch.tensor(loss), torch.tensor(want_loss), f"evaluate's average loss per sample ({what})")
    compare.assert_matches(torch.tensor(acc), torch.tensor(want_acc), f"evaluate's accuracy ({what})")
    assert all(p.grad is None or p.grad.abs().sum() >= 0 for p in spy.parameters())
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 6 — control flow that depends on the data
#
# Because the graph is recorded as the code runs, a `while` loop whose length
# depends on the input is fine: autograd differentiates exactly the operations
# that ran for *this* input.
#
# ![Define-by-run: the loop while h.norm() > tol: h = 0.5 * h + 0.1 * tanh(block(h)) records one step for a small input (norm 1.2) and four steps for a large one (norm 12): two inputs, two graphs of different lengths from x to h](figures/define_by_run.svg)
#
# Write `forward` of `RepeatUntilSmall`:
#
# ```
# h = x; steps = 0
# while the norm of h (h.norm()) is greater than tol, and steps < max_steps:
#     h = 0.5 * h + 0.1 * tanh(block(h))
#     steps += 1
# return h, steps
# ```
#
# `x` is a single vector of shape `(dim,)`. Gradients must flow through every
# step that ran — into `x` and into `block`'s parameters. Return `steps` as a
# Python `int`.

# %% solution="ex_dynamic_forward"
class RepeatUntilSmall(nn.Module):
    def __init__(self, dim: int, tol: float = 1.0, max_steps: int = 8):
        super().__init__()
        self.block = nn.Linear(dim, dim)
        self.tol, self.max_steps = tol, max_steps

    def forward(self, x):
        ### BEGIN SOLUTION
        h, steps = x, 0
        while h.norm() > self.tol and steps < self.max_steps:
            h = 0.5 * h + 0.1 * torch.tanh(self.block(h))
            steps += 1
        return h, steps
        ### END SOLUTION


# %% tests="ex_dynamic_forward" points=2
def reference_repeat(module, x):
    h, steps = x, 0
    while h.norm() > module.tol and steps < module.max_steps:
        h = 0.5 * h + 0.1 * torch.tanh(F.linear(h, module.block.weight, module.block.bias))
        steps += 1
    return h, steps


def compare_repeat(module, x, what):
    x1 = x.clone().requires_grad_(True)
    x2 = x.clone().requires_grad_(True)
    h, steps = module(x1)
    want_h, want_steps = reference_repeat(module, x2)
    compare.assert_equal(steps, want_steps, f"{what}: number of steps")
    compare.assert_matches(h, want_h, f"{what}: output")
    module.zero_grad()
    h.sum().backward()
    got_grads = [x1.grad] + [p.grad for p in module.parameters()]
    module.zero_grad()
    want_h.sum().backward()
    want_grads = [x2.grad] + [p.grad for p in module.parameters()]
    for name, g, w in zip(["x", "block.weight", "block.bias"], got_grads, want_grads):
        if w is None:  # no step ran, so block was never used: torch leaves its .grad as None
            assert g is None, f"{what}: {name} has a gradient, but no step should have used it"
        else:
            compare.assert_matches(g, w, f"{what}: gradient of output.sum() with respect to {name}")


module = RepeatUntilSmall(4)
compare_repeat(module, torch.tensor([3.0, -2.0, 1.0, 0.5]), "RepeatUntilSmall(4) on a large x")
compare_repeat(module, torch.tensor([0.1, 0.2, -0.1, 0.0]), "RepeatUntilSmall(4) on a small x")
compare_repeat(RepeatUntilSmall(4, max_steps=2), torch.tensor([30.0, -20.0, 10.0, 5.0]),
               "RepeatUntilSmall(4, max_steps=2) on an x of norm 38 (the loop stops after max_steps steps)")
h, steps = module(torch.tensor([3.0, -2.0, 1.0, 0.5]))
assert type(steps) is int, f"RepeatUntilSmall must return steps as a Python int, got a {type(steps).__name__}"
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
seen_steps = set()
for _ in range(20):
    dim = inputs.randint(1, 6)
    module = RepeatUntilSmall(dim, tol=inputs.choice([0.3, 1.0, 2.0]), max_steps=inputs.randint(1, 8))
    x = inputs.randn(dim) * inputs.choice([0.1, 1.0, 5.0, 30.0])
    compare_repeat(module, x, f"RepeatUntilSmall({dim}, tol={module.tol}, max_steps={module.max_steps}) "
                              f"on x with norm {x.norm():.3g}")
    seen_steps.add(reference_repeat(module, x)[1])
assert len(seen_steps) > 1, "the random inputs should have needed different numbers of steps"
h, steps = RepeatUntilSmall(3)(torch.tensor([100.0, 0.0, 0.0]))
assert type(steps) is int, f"steps must be a Python int, got {type(steps).__name__}"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 7 — devices
#
# A tensor lives on a device — `cpu`, `cuda`, or `meta` (a device with shapes
# but no data, handy for planning and for tests on machines without a GPU).
# Every tensor an operation touches must be on the same device, so real code
# moves whole batches: dictionaries, lists and tuples of tensors, mixed with
# other values.
#
# Write `pick_device()`, returning `torch.device("cuda")` when a GPU is
# available and `torch.device("cpu")` otherwise, and `to_device(batch, device)`,
# which returns a copy of `batch` with every tensor inside moved to `device`:
#
# - dictionaries, lists and tuples are walked recursively and rebuilt with the
#   same type and keys (a tuple stays a tuple);
# - anything that is not a tensor (numbers, strings, `None`) is kept as it is;
# - the caller's containers are not modified.

# %% solution="ex_to_device"
def pick_device() -> torch.device:
    ### BEGIN SOLUTION
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ### END SOLUTION


def to_device(batch, device):
    ### BEGIN SOLUTION
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {key: to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(value, device) for value in batch)
    return batch
    ### END SOLUTION


# %% tests="ex_to_device" points=2
def assert_moved(got, original, device, what):
    """got is original with every tensor on `device`, same container types, other values kept."""
    if isinstance(original, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{what}: a tensor became a {type(got).__name__}"
        compare.assert_equal(got.device.type, torch.device(device).type, f"{what}: device")
        if got.device.type != "meta":
            compare.assert_matches(got.cpu(), original.cpu(), f"{what}: values", check_device=False)
    elif isinstance(original, (dict, list, tuple)):
        compare.assert_equal(type(got).__name__, type(original).__name__, f"{what}: container type")
        if isinstance(original, dict):
            compare.assert_equal(list(got), list(original), f"{what}: keys")
            for key in original:
                assert_moved(got[key], original[key], device, f"{what}[{key!r}]")
        else:
            compare.assert_equal(len(got), len(original), f"{what}: length")
            for i, (g, o) in enumerate(zip(got, original)):
                assert_moved(g, o, device, f"{what}[{i}]")
    else:
        assert got is original, f"{what}: the non-tensor value {original!r} came back as {got!r}"


compare.assert_equal(pick_device(), torch.device("cuda" if torch.cuda.is_available() else "cpu"), "pick_device()")
batch = {"x": torch.randn(2, 3), "y": torch.tensor([1, 0]), "name": "batch 1"}
for device in devices() + ["meta"]:
    assert_moved(to_device(batch, device), batch, device, f"to_device(batch, {device!r})")
nested = {"pair": (torch.ones(2), [torch.zeros(1), 7]), "mask": [torch.ones(3) > 0, None]}
snapshot = repr(nested)
for device in devices() + ["meta"]:
    assert_moved(to_device(nested, device), nested, device,
                 f"to_device(nested, {device!r}) (containers are walked at every depth; a tuple stays a tuple)")
    assert repr(nested) == snapshot, (
        f"to_device(nested, {device!r}) changed the caller's batch: build new containers instead")
print("visible tests passed — hidden tests try the same rules on new inputs at grading")
### BEGIN HIDDEN TESTS
def random_batch(depth=0):
    kind = inputs.randint(0, 5) if depth < 3 else 0
    if kind <= 1:
        return inputs.randn(*inputs.shape(allow_zero=True))
    if kind == 2:
        return inputs.choice([3, 2.5, "label", None, True])
    items = [random_batch(depth + 1) for _ in range(inputs.randint(0, 3))]
    if kind == 3:
        return {f"k{i}": v for i, v in enumerate(items)}
    return tuple(items) if kind == 4 else list(items)


for _ in range(20):
    batch = random_batch()
    snapshot = repr(batch)
    for device in devices() + ["meta"]:
        assert_moved(to_device(batch, device), batch, device, f"to_device(batch, {device!r})")
    assert repr(batch) == snapshot, "to_device changed the caller's batch: build new containers instead"
pair = (torch.ones(2), [torch.zeros(1), 7])
assert_moved(to_device(pair, "meta"), pair, "meta", "to_device(a tuple holding a list, 'meta')")
assert to_device(pair, "meta") is not pair
### END HIDDEN TESTS

# %% [markdown]
# ## Written answer (graded by your instructor)
#
# In a few sentences: your `RepeatUntilSmall` runs a different number of steps
# for different inputs. Why is that natural in PyTorch's define-by-run design,
# what would a static-graph framework have needed instead, and what does
# `torch.compile` do when it meets the `while` loop?

# %% [markdown] manual="written_dynamic_graphs" points=2
# ### BEGIN SOLUTION
# A model answer, for whoever grades: PyTorch records the graph while the Python
# code runs, so the `while` loop simply runs as many times as this input needs
# and autograd differentiates the operations that actually happened; the next
# input records a new graph. A static-graph framework must describe the loop
# inside the graph before seeing data (a `while_loop` operator with the condition
# and body as sub-graphs), or unroll a fixed number of steps. `torch.compile`
# captures the straight-line tensor code, and at the data-dependent condition
# (`h.norm() > tol` needs a value from the tensor) it inserts a graph break: the
# loop runs in ordinary Python between compiled pieces, so it stays correct but
# gains less speed.
# ### END SOLUTION

# %% [markdown]
# ## Check your work
#
# Save the notebook (Ctrl+S), then run the cell below: it re-runs the saved
# file in a fresh kernel, as the grader will, and lists every exercise.

# %%
check()
