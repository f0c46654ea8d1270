"""Chapter 02 — Autograd: the backward graph (grad_fn, next_functions), autograd as a dispatch key,
a broadcast operand's gradient summed back to its shape."""
from __future__ import annotations

import torch

from figures.common import graph, levels
from figures.svg import BLUE, GREEN, GREY, INK, ORANGE, RED, TINTS, Figure


def backward_graph() -> Figure:
    """h = x * y; out = (h + h.exp()).sum(): torch's own nodes, walked through next_functions."""
    x = torch.randn(3, requires_grad=True)
    y = torch.randn(3, requires_grad=True)
    h = x * y
    out = (h + h.exp()).sum()
    # walk the graph as the engine does: from out.grad_fn through next_functions
    names, edges, seen, order = {}, [], set(), [out.grad_fn]
    while order:
        fn = order.pop(0)
        if fn in seen:
            continue
        seen.add(fn)
        label = type(fn).__name__
        if label == "AccumulateGrad":
            label += "(x)" if fn.variable is x else "(y)"
        names[fn] = label
        for i, (child, _) in enumerate(fn.next_functions):
            if child is not None:
                edges.append((fn, child, i))
                order.append(child)
    incoming = {fn: sum(1 for _, c, _ in edges if c is fn) for fn in names}
    # positions by name: the layout of this one graph (Exp off to the side, so that Add -> Mul stays clear)
    place = {"SumBackward0": (300, 80), "AddBackward0": (300, 160), "ExpBackward0": (440, 240),
             "MulBackward0": (300, 320), "AccumulateGrad(x)": (200, 410), "AccumulateGrad(y)": (400, 410)}
    width, height = 860, 470
    fig = Figure(width, height, "The backward graph of out = (h + h.exp()).sum() with h = x * y: torch's nodes, "
                                "linked by next_functions")
    fig.text(20, 26, "h = x * y;  out = (h + h.exp()).sum()  —  out.grad_fn and its next_functions", size=15,
             anchor="start", bold=True)
    nodes = {}
    for fn, label in names.items():
        px, py = place[label]
        leaf = label.startswith("AccumulateGrad")
        hot = incoming[fn] > 1
        nodes[label] = (px, py, label, TINTS[2] if leaf else (TINTS[1] if hot else TINTS[0]),
                        GREEN if leaf else (ORANGE if hot else BLUE))
    graph(fig, nodes, [(names[a], names[b], f"[{i}]") for a, b, i in edges], node_w=170, node_h=34, size=13,
          edge_colour=INK)
    fig.text(300 - 95, 80 + 5, "out.grad_fn", size=12, anchor="end", mono=True, fill=GREY)
    fig.text(300 + 95, 80 + 5, "← the root: gradient 1", size=12.5, anchor="start", fill=RED)
    fig.text(300 + 95, 320 + 5, f"← reached by {incoming[[f for f in names if names[f] == 'MulBackward0'][0]]} "
                                "edges: it waits for both", size=12.5, anchor="start", fill=ORANGE)
    fig.text(200, 440, "x.grad", size=12, mono=True, fill=GREY)
    fig.text(400, 440, "y.grad", size=12, mono=True, fill=GREY)
    fig.lines(610, 90, ["[i]: the edge is", "grad_fn.next_functions[i],", "one per input of the", "forward operation"],
              size=12.5, anchor="start", fill=GREY)
    fig.lines(610, 200, ["the engine runs a node", "once every edge into it", "has brought its gradient",
                         "(a topological order)"], size=12.5, anchor="start", fill=GREY)
    return fig


def autograd_key() -> Figure:
    return levels(
        "y = x.exp() with x requiring grad: Autograd is a key above the CPU's",
        [("your code", ["y = x.exp()              x requires grad, grad mode on"]),
         ("Tensor.exp", ["dispatch(\"exp\", x)"]),
         ("key set", ["{Autograd, CPU}  ->  the highest: Autograd's kernel, Exp.apply(x)"]),
         ("Exp.apply", ["makes the node; runs forward with Autograd excluded",
                        "Exp.forward: unary_kernel(\"exp\", x) = redispatch below Autograd"]),
         ("key set below", ["{CPU}  ->  chapter 01's CPU kernel of \"exp\""]),
         ("Exp.apply", ["y._grad_fn = the node; y.requires_grad is True"])],
        highlight={2, 3}, width=800, name_width=140)


def sum_to_shape() -> Figure:
    """A gradient of shape (2, 3, 4) for an operand of shape (3, 1): which dims are summed, and how
    (torch's own sum_to_size gives the result shape)."""
    grad_shape, operand = (2, 3, 4), (3, 1)
    result = torch.ones(grad_shape).sum_to_size(operand)
    lead = len(grad_shape) - len(operand)
    width, height = 820, 250
    fig = Figure(width, height, "sum_to_shape: a gradient of shape (2, 3, 4) for an operand of shape (3, 1) is "
                                "summed over dim 0 (added by broadcasting) and dim 2 (size 1 in the operand)")
    fig.text(20, 26, "The gradient of a broadcast operand: sum back to the operand's shape", size=15,
             anchor="start", bold=True)
    col = 160
    x0 = 250
    rows = [("grad", grad_shape), ("operand", (None,) * lead + operand)]
    for r, (name, shape) in enumerate(rows):
        y = 70 + r * 30
        fig.text(x0 - 30, y, name, size=13.5, anchor="end", bold=True)
        for d, size in enumerate(shape):
            fig.text(x0 + d * col, y, "·" if size is None else size, size=14, mono=True,
                     fill=GREY if size is None else INK)
    for d in range(len(grad_shape)):
        fig.text(x0 + d * col, 50, f"dim {d}", size=11, fill=GREY)
        size = rows[1][1][d]
        if size is None:
            verdict, colour = ["added by broadcasting:", "sum it, drop it"], RED
        elif size == 1 and grad_shape[d] != 1:
            verdict, colour = ["size 1, stretched:", "sum it, keep it (1)"], ORANGE
        else:
            verdict, colour = ["the same size:", "keep it"], GREEN
        fig.rect(x0 + d * col - 72, 122, 144, 44, fill="white", stroke=colour, rx=5)
        fig.lines(x0 + d * col, 140, verdict, size=11, gap=1.3, fill=colour)
    fig.line(x0 - 80, 180, x0 + 2 * col + 80, 180, stroke=GREY, width=1)
    fig.text(x0 - 30, 205, "result", size=13.5, anchor="end", bold=True)
    kept = tuple(1 if d < lead or operand[d - lead] == 1 else grad_shape[d] for d in range(len(grad_shape)))
    fig.text(x0 - 10, 205, f"sum over dims 0 and 2, keepdim: {kept};  reshape: {tuple(result.shape)}", size=13.5,
             mono=True, anchor="start")
    fig.text(20, height - 14, "torch: grad.sum_to_size(3, 1), at::sum_to; every position the operand was "
                              "stretched over adds its share", size=12, anchor="start", fill=GREY, italic=True)
    return fig


FIGURES = {
    "backward_graph.svg": backward_graph,
    "autograd_key.svg": autograd_key,
    "sum_to_shape.svg": sum_to_shape,
}
