"""Chapter 00 — the tour: six levels with the dispatcher, define-by-run, the module tree, the training loop."""
from __future__ import annotations

import torch
from torch import nn

from figures.common import graph, levels, training_loop
from figures.svg import BLUE, GREEN, GREY, INK, LIGHT, ORANGE, RED, TINTS, Figure


def six_levels() -> Figure:
    return levels(
        "torch.add(x, y): six levels down, the dispatcher in the middle",
        [("your code", ["z = x + y"]),
         ("Python API", ["Tensor.__add__, bound from C++ (torch._C.TensorBase; generated",
                         "python_variable_methods.cpp), calls the operator aten::add.Tensor"]),
         ("dispatcher", ["picks a kernel by the arguments' dispatch keys: device, autograd, modes ...",
                         "aten/src/ATen/core/dispatch/Dispatcher.h; keys: c10/core/DispatchKey.h"]),
         ("ATen (C++)", ["at::native::add, the operator's C++ definition (aten/src/ATen/native)"]),
         ("device backend", ["the CPU kernel (vectorised C++) or the CUDA kernel"]),
         ("hardware", ["CPU cores and SIMD units, or GPU streaming multiprocessors"])],
        highlight={2}, width=820, name_width=140,
        note="picotorch has the same levels: chapter 01 builds the dispatcher, 02 adds autograd as a key, "
             "05 a CUDA key")


def define_by_run() -> Figure:
    """RepeatUntilSmall of exercise 6 on two inputs: the loop runs a different number of times, and the
    graph autograd records is as long as the loop that ran."""
    torch.manual_seed(0)
    block = nn.Linear(4, 4)

    def steps_for(x, tol=1.0, max_steps=8):
        h, steps = x, 0
        while h.norm() > tol and steps < max_steps:
            h = 0.5 * h + 0.1 * torch.tanh(block(h))
            steps += 1
        return steps

    runs = [("x = small input", torch.full((4,), 0.6)), ("x = large input", torch.full((4,), 6.0))]
    counts = [steps_for(x) for _, x in runs]
    width, height = 860, 270
    fig = Figure(width, height, f"Define-by-run: the same while loop records {counts[0]} and {counts[1]} steps "
                                "for two inputs")
    fig.text(20, 26, "Define-by-run: the graph is recorded while the Python runs", size=15, anchor="start", bold=True)
    fig.lines(20, 56, ["while h.norm() > tol:",
                       "    h = 0.5 * h + 0.1 * tanh(block(h))"], size=12.5, anchor="start", mono=True)
    for row, ((label, x), n) in enumerate(zip(runs, counts)):
        y = 130 + row * 80
        fig.text(20, y + 5, label, size=13, anchor="start", bold=True)
        fig.text(20, y + 23, f"|x| = {x.norm().item():.1f}: {n} step{'s' if n != 1 else ''}", size=12,
                 anchor="start", fill=GREY)
        nodes = {"x": (200, y, "x", TINTS[0], BLUE)}
        edges = []
        prev = "x"
        for k in range(n):
            name = f"s{k}"
            nodes[name] = (290 + k * 84, y, f"step {k + 1}", TINTS[2], GREEN)
            edges.append((prev, name, None))
            prev = name
        nodes["h"] = (290 + n * 84 + 10, y, "h", TINTS[1], ORANGE)
        edges.append((prev, "h", None))
        graph(fig, nodes, edges, node_w=62, node_h=30, size=12.5)
    fig.text(20, height - 14, "each step is tanh, linear, mul, add in the graph: backward() walks exactly the steps "
                              "that ran, for this input", size=12, anchor="start", fill=GREY, italic=True)
    return fig


def module_tree() -> Figure:
    """A model whose tree holds one parameter twice (weight tying): count objects, not places."""
    torch.manual_seed(0)

    # as in a language model, the output layer reuses the input layer's weight
    model = nn.Module()
    model.embed = nn.Linear(4, 4, bias=False)
    model.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    model.head = nn.Linear(4, 4, bias=False)
    model.head.weight = model.embed.weight
    places = [(name, p) for name, p in _walk(model)]
    unique = sum(p.numel() for p in model.parameters())
    counted_twice = sum(p.numel() for _, p in places)

    width, height = 860, 330
    fig = Figure(width, height, "The module tree: _modules down the tree, _parameters at each node; one tied "
                                "weight sits in two places and counts once")
    fig.text(20, 26, "Walking the tree: _modules to go down, _parameters at each module", size=15, anchor="start",
             bold=True)
    nodes = {
        "model": (300, 70, "model", LIGHT, INK),
        "embed": (120, 150, "embed: Linear", LIGHT, INK),
        "body": (300, 150, "body: Sequential", LIGHT, INK),
        "head": (480, 150, "head: Linear", LIGHT, INK),
        "b0": (210, 230, "0: Linear", LIGHT, INK),
        "b1": (390, 230, "1: ReLU", LIGHT, INK),
    }
    edges = [("model", "embed", None), ("model", "body", None), ("model", "head", None), ("body", "b0", None),
             ("body", "b1", None)]
    graph(fig, nodes, edges, node_w=150, node_h=32, size=12.5, edge_colour=GREY)
    params = {"embed": ["weight (4, 4)", "bias: None"], "head": ["weight (4, 4)", "bias: None"],
              "b0": ["weight (4, 4)", "bias (4,)"], "b1": ["(none)"], "body": [], "model": []}
    for name, rows in params.items():
        x, y = nodes[name][:2]
        for k, row in enumerate(rows):
            tied = row.startswith("weight") and name in ("embed", "head")
            fig.text(x, y + 32 + k * 15, row, size=11.5, mono=True, fill=RED if tied else GREY)
    fig.text(300, 305, "in red: one Parameter object, found in two places", size=12.5, fill=RED)
    tx = 600
    fig.lines(tx, 80, ["head.weight = embed.weight", "(weight tying)"], size=12.5, anchor="start", mono=True)
    fig.lines(tx, 140, [f"places in the tree: {counted_twice} numbers",
                        f"parameters(): {unique} numbers",
                        "count each object once:",
                        "compare with is (or id), not =="], size=12.5, anchor="start")
    return fig


def _walk(module, prefix=""):
    for name, p in module._parameters.items():
        if p is not None:
            yield prefix + name, p
    for name, child in module._modules.items():
        yield from _walk(child, prefix + name + ".")


def loop() -> Figure:
    return training_loop("One training iteration: six steps, each owned by a component")


FIGURES = {
    "six_levels.svg": six_levels,
    "define_by_run.svg": define_by_run,
    "module_tree.svg": module_tree,
    "training_loop.svg": loop,
}
