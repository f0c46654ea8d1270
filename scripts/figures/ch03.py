"""Chapter 03 — Module: __setattr__ files every value, the tree it makes (with its state_dict keys),
and the shapes of Linear."""
from __future__ import annotations

import torch
from torch import nn

from figures.common import graph
from figures.svg import BLUE, GREEN, GREY, INK, LIGHT, ORANGE, PURPLE, TINTS, Figure


def setattr_filing() -> Figure:
    width, height = 900, 300
    fig = Figure(width, height, "Module.__setattr__ files each assigned value by its type: a Parameter into "
                                "_parameters, a Module into _modules, a registered buffer into _buffers, anything "
                                "else into __dict__")
    fig.text(20, 26, "self.name = value: Module.__setattr__ files it by its type", size=15, anchor="start",
             bold=True)
    fig.box(40, 120, 220, 60, "Module.__setattr__", fill=LIGHT, size=14, mono=True, sub="(name, value)")
    examples = ["self.fc = Linear(4, 2)", "self.w = Parameter(...)", "self.running_mean = t", "self.p = 0.5"]
    targets = [("_parameters", "a Parameter (or None for a parameter)", "self.w", BLUE, 0),
               ("_buffers", "a tensor, where name is a buffer", "self.running_mean", GREEN, 2),
               ("_modules", "a Module (or None for a module)", "self.fc", ORANGE, 1),
               ("__dict__", "anything else: a plain attribute", "self.p", GREY, 4)]
    fig.lines(40, 70, examples[:2], size=12, anchor="start", mono=True, fill=GREY)
    fig.lines(40, 212, examples[2:], size=12, anchor="start", mono=True, fill=GREY)
    for i, (name, rule, example, colour, tint) in enumerate(targets):
        y = 60 + i * 56
        fig.arrow(262, 150, 446, y + 20, stroke=colour, width=1.6)
        fig.rect(450, y, 170, 40, fill=TINTS[tint] if colour != GREY else "white", stroke=colour, rx=6, width=1.6)
        fig.text(535, y + 25, name, size=14, mono=True, bold=True)
        fig.text(632, y + 17, rule, size=11.5, anchor="start", fill=INK)
        fig.text(632, y + 33, example, size=11.5, anchor="start", mono=True, fill=GREY)
    fig.text(20, height - 14, "parameters(), state_dict(), to(), train() read the three dictionaries; "
                              "__getattr__ looks there when __dict__ has no such name", size=12, anchor="start",
             fill=GREY, italic=True)
    return fig


def module_tree() -> Figure:
    """The chapter's MLP in torch: its tree from _modules, each module's own parameters and buffers,
    and the state_dict keys the walk makes of them."""
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2))
    children = list(model.named_children())
    width, height = 900, 420
    fig = Figure(width, height, "The tree of Sequential(Linear(8, 16), BatchNorm1d(16), ReLU(), Dropout(0.2), "
                                "Linear(16, 2)) and its state_dict keys")
    fig.text(20, 26, "nn.Sequential(Linear(8, 16), BatchNorm1d(16), ReLU(), Dropout(0.2), Linear(16, 2))",
             size=14.5, anchor="start", bold=True, mono=True)
    root = (300, 74)
    nodes = {"root": (root[0], root[1], "Sequential", LIGHT, INK)}
    spacing = 118
    first = root[0] - spacing * (len(children) - 1) / 2
    for k, (name, child) in enumerate(children):
        nodes[name] = (first + k * spacing, 160, f"{name}: {type(child).__name__}", LIGHT, INK)
    graph(fig, nodes, [("root", name, None) for name, _ in children], node_w=112, node_h=32, size=11.5,
          edge_colour=GREY)
    for k, (name, child) in enumerate(children):
        x = first + k * spacing
        rows = [(f"{p}  {tuple(v.shape)}", BLUE) for p, v in child._parameters.items() if v is not None]
        rows += [(f"{b}  {tuple(v.shape)}" if v.dim() else f"{b}  ()", GREEN)
                 for b, v in child._buffers.items() if v is not None]
        if not rows:
            rows = [("(nothing)", GREY)]
        for r, (text, colour) in enumerate(rows):
            short = text.replace("running_", "run_").replace("num_batches_tracked", "num_batches")
            fig.text(x, 198 + r * 16, short, size=10.5, mono=True, fill=colour)
    fig.rect(30, 300, 14, 14, fill=TINTS[0], stroke=BLUE)
    fig.text(50, 312, "_parameters", size=12, anchor="start", mono=True, fill=BLUE)
    fig.rect(160, 300, 14, 14, fill=TINTS[2], stroke=GREEN)
    fig.text(180, 312, "_buffers", size=12, anchor="start", mono=True, fill=GREEN)
    fig.text(30, 340, "The walk joins the names on the path: the key of a parameter is", size=12.5,
             anchor="start")
    fig.text(30, 358, "its module's path, a dot, its own name. BatchNorm's buffers are state", size=12.5,
             anchor="start")
    fig.text(30, 376, "too: state_dict keeps them, parameters() does not.", size=12.5, anchor="start")
    keys = list(model.state_dict().keys())
    fig.text(670, 70, "model.state_dict().keys()", size=12.5, anchor="start", mono=True, bold=True)
    for i, key in enumerate(keys):
        is_buffer = any(key == f"{n}.{b}" for n, c in children for b in c._buffers)
        fig.text(670, 92 + i * 17, key, size=12, anchor="start", mono=True, fill=GREEN if is_buffer else BLUE)
    n_params = sum(p.numel() for p in model.parameters())
    fig.text(670, 92 + len(keys) * 17 + 14, f"parameters(): {len(list(model.parameters()))} tensors,", size=12,
             anchor="start", fill=GREY)
    fig.text(670, 92 + len(keys) * 17 + 30, f"{n_params} numbers", size=12, anchor="start", fill=GREY)
    return fig


def linear_shapes() -> Figure:
    """y = x @ W.T + b, with rectangles sized by the real shapes of Linear(in=6, out=3) on a batch of 4."""
    n, fan_in, fan_out = 4, 6, 3
    layer = nn.Linear(fan_in, fan_out)
    x = torch.randn(n, fan_in)
    y = layer(x)
    unit = 22
    width, height = 860, 290
    fig = Figure(width, height, f"Linear({fan_in}, {fan_out}) on a batch of {n}: x ({n}, {fan_in}) @ W.T "
                                f"({fan_in}, {fan_out}) + b ({fan_out},) = y {tuple(y.shape)}")
    fig.text(20, 26, f"nn.Linear(in_features={fan_in}, out_features={fan_out}): y = x @ W.T + b", size=15,
             anchor="start", bold=True)
    top = 70
    items = [("x", (n, fan_in), TINTS[0], BLUE), ("@", None, None, None),
             ("W.T", tuple(layer.weight.T.shape), TINTS[1], ORANGE), ("+", None, None, None),
             ("b", tuple(layer.bias.shape), TINTS[4], PURPLE), ("=", None, None, None),
             ("y", tuple(y.shape), TINTS[2], GREEN)]
    x = 40
    for label, shape, fill, stroke in items:
        if shape is None:
            fig.text(x + 14, top + 52, label, size=22, bold=True)
            x += 40
            continue
        rows, cols = (1, shape[0]) if len(shape) == 1 else shape
        fig.rect(x, top, cols * unit, rows * unit, fill=fill, stroke=stroke, width=1.6)
        for c in range(1, cols):
            fig.line(x + c * unit, top, x + c * unit, top + rows * unit, stroke=stroke, width=0.5)
        for r in range(1, rows):
            fig.line(x, top + r * unit, x + cols * unit, top + r * unit, stroke=stroke, width=0.5)
        fig.text(x + cols * unit / 2, top - 10, f"{label}  {shape}", size=12.5, mono=True, bold=True)
        x += cols * unit + 24
    fig.lines(40, top + 172, [
        f"W is stored as (out, in) = {tuple(layer.weight.shape)}, as torch does: row j holds the weights of output j",
        "b is added to every row of the batch (broadcasting); the batch dims of x (*) pass through unchanged",
        f"init: W and b uniform in ±1/sqrt(in) = ±{1 / fan_in ** 0.5:.3f} (kaiming_uniform_ with a = sqrt(5))"],
        size=12, anchor="start", fill=GREY)
    return fig


FIGURES = {
    "setattr.svg": setattr_filing,
    "module_tree.svg": module_tree,
    "linear_shapes.svg": linear_shapes,
}
