"""Chapter 07 — Convolution: a window as storage cells and a row of im2col, the im2col matrix, col2im's sums;
batch norm's backward graph composed and as one node.

Every number is computed with torch (Tensor.unfold, F.unfold, F.fold, autograd's own nodes) on small inputs."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from figures.common import graph
from figures.svg import BLUE, GREEN, GREY, INK, ORANGE, RED, STRONG, TINTS, Figure

CELL = 32


def windows() -> Figure:
    """A 1×1×4×5 input (its storage positions), the window at output (0, 1) of a 3×3 kernel with stride (1, 2)
    in the image and in the storage, and its nine cells as one row of the im2col matrix."""
    h, w, k, stride, at = 4, 5, 3, (1, 2), (0, 1)
    x = torch.arange(h * w).reshape(1, 1, h, w)
    view = x.unfold(2, k, stride[0]).unfold(3, k, stride[1])  # (1, 1, H_out, W_out, k, k): torch's own view
    window = view[0, 0, at[0], at[1]]
    inside = set(window.flatten().tolist())
    title = (f"The window at output {at} of a {k}×{k} kernel, stride {stride}: view shape {tuple(view.shape)}, "
             f"stride {view.stride()}")
    width, left, top = 900, 110, 70
    fig = Figure(width, 380, title)
    fig.text(20, 28, title, size=14, anchor="start", bold=True)
    fig.text(left - 14, top + 20, "x (4×5)", size=13, anchor="end", bold=True)
    values = x[0, 0].tolist()
    fills = [[TINTS[0] if v in inside else "white" for v in row] for row in values]
    fig.grid(left, top, values, cell=CELL, fills=fills)
    r0, c0 = at[0] * stride[0], at[1] * stride[1]
    fig.rect(left + c0 * CELL, top + r0 * CELL, k * CELL, k * CELL, fill="none", stroke=RED, width=2.6)
    fig.text(left + w * CELL + 14, top + 40, f"x.stride() = {x.stride()[2:]}", size=12, anchor="start", mono=True)
    fig.text(left + w * CELL + 14, top + 60, f"step to the next window: {stride[1]} × {x.stride(3)} = "
             f"{view.stride(3)}", size=12, anchor="start", mono=True)
    fig.text(left + w * CELL + 14, top + 80, f"step inside a window: {view.stride()[4:]}", size=12, anchor="start",
             mono=True)
    sy = top + h * CELL + 50
    fig.text(left - 14, sy + 20, "storage", size=13, anchor="end", bold=True)
    storage = list(range(h * w))
    fig.cells(left, sy, storage, cell=CELL, fills=[TINTS[0] if p in inside else "white" for p in storage],
              strokes=[RED if p in inside else INK for p in storage], size=11)
    ry = sy + CELL + 50
    fig.text(left - 14, ry + 20, "im2col row", size=13, anchor="end", bold=True)
    fig.cells(left, ry, window.flatten().tolist(), cell=CELL, fills=[TINTS[0]] * (k * k), size=11)
    fig.text(left + k * k * CELL + 14, ry + 20, f"= F.unfold(x, {k}, stride={stride})[0, :, {at[0]} * W_out + "
             f"{at[1]}]: the window, no copy until here", size=12, anchor="start", fill=GREY)
    return fig


def im2col() -> Figure:
    """The im2col matrix of a 1×2×4×4 input and a 2×2 kernel (stride 2 keeps it small): rows channel by channel,
    one column per window, each window's cells in its colour."""
    c, h, w, k, s = 2, 4, 4, 2, 2
    x = torch.arange(c * h * w).reshape(1, c, h, w)
    cols = F.unfold(x.float(), k, stride=s).long()[0]  # (C*k*k, L)
    n_windows = cols.shape[1]
    window_of = {}
    for j in range(n_windows):
        for v in cols[:, j].tolist():
            window_of[v] = j
    title = f"F.unfold(x, {k}, stride={s}) of x: (1, {c}, {h}, {w}): a ({c}·{k}·{k}, L={n_windows}) matrix, one column per window"
    fig = Figure(900, 380, title)
    fig.text(20, 28, title, size=14, anchor="start", bold=True)
    left, top = 40, 80
    for ch in range(c):
        values = x[0, ch].tolist()
        fills = [[TINTS[window_of[v]] for v in row] for row in values]
        fig.text(left + ch * (w * CELL + 30) + w * CELL / 2, top - 10, f"channel {ch}", size=12, fill=GREY)
        fig.grid(left + ch * (w * CELL + 30), top, values, cell=CELL, fills=fills, size=11)
    mx = left + c * (w * CELL + 30) + 60
    fig.arrow(mx - 50, top + h * CELL / 2, mx - 10, top + h * CELL / 2, stroke=GREY)
    values = cols.tolist()
    fills = [[TINTS[j] for j in range(n_windows)] for _ in values]
    fig.grid(mx, top - 20, values, cell=CELL, fills=fills, size=11)
    for j in range(n_windows):
        fig.text(mx + j * CELL + CELL / 2, top - 26, f"w{j}", size=11, fill=STRONG[j])
    for r in range(cols.shape[0]):
        ch, p, q = r // (k * k), (r // k) % k, r % k
        fig.text(mx + n_windows * CELL + 8, top - 20 + r * CELL + CELL / 2 + 4, f"c{ch} ({p},{q})", size=11,
                 anchor="start", fill=GREY, mono=True)
    return fig


def col2im() -> Figure:
    """col2im of a 1×1×3×4 image, 2×2 kernel, stride 1: how many windows add into each pixel."""
    h, w, k = 3, 4, 2
    ones = torch.ones(1, 1, h, w)
    cols = F.unfold(ones, k)
    counts = F.fold(cols, (h, w), k)[0, 0].long().tolist()  # each pixel: the number of windows that hold it
    title = f"F.fold(F.unfold(ones, {k}), ({h}, {w}), {k}): col2im adds every window's share; the count of windows per pixel"
    fig = Figure(760, 260, title)
    fig.text(20, 28, title, size=14, anchor="start", bold=True)
    left, top = 60, 80
    fig.text(left + w * CELL / 2, top - 12, f"{cols.shape[2]} windows of {k}×{k}", size=12, fill=GREY)
    for j in range(cols.shape[2]):
        i0, j0 = divmod(j, w - k + 1)
        fig.rect(left + j0 * CELL + 3 + j, top + i0 * CELL + 3 + j, k * CELL - 6, k * CELL - 6, fill="none",
                 stroke=STRONG[j % len(STRONG)], width=1.6)
    fig.grid(left, top, [[None] * w for _ in range(h)], cell=CELL)
    gx = left + w * CELL + 120
    fig.arrow(gx - 100, top + h * CELL / 2, gx - 20, top + h * CELL / 2, stroke=GREY)
    fig.text(gx - 60, top + h * CELL / 2 - 10, "fold (+=)", size=12, fill=GREY)
    fills = [[TINTS[min(v, len(TINTS)) - 1] for v in row] for row in counts]
    fig.grid(gx, top, counts, cell=CELL, fills=fills)
    fig.text(gx + w * CELL + 14, top + 20, "1 at the corners,", size=12, anchor="start", fill=INK)
    fig.text(gx + w * CELL + 14, top + 40, f"{max(max(r) for r in counts)} in the middle:", size=12, anchor="start")
    fig.text(gx + w * CELL + 14, top + 60, "a write (=) would keep 1", size=12, anchor="start", fill=RED)
    fig.text(gx + w * CELL + 14, top + 80, "share, not the sum", size=12, anchor="start", fill=RED)
    fig.text(20, 230, "the gradient of the input is this sum with each window's gradient in place of 1", size=12,
             anchor="start", fill=BLUE)
    return fig


def _levels(root) -> dict:
    """Each node of the backward graph under `root` -> its depth (the longest path from root), as the engine
    reaches it: a node is drawn below every node that feeds it a gradient."""
    depth, order = {root: 0}, [root]
    while order:
        fn = order.pop(0)
        for child, _ in fn.next_functions:
            if child is not None and depth.get(child, -1) < depth[fn] + 1:
                depth[child] = depth[fn] + 1
                order.append(child)
    return depth


def _draw_graph(fig: Figure, root, names: dict, cx: float, top: float, step: float, spread: float) -> int:
    """torch's backward graph under `root`, level by level around x = cx; the number of nodes."""
    depth = _levels(root)
    rows: dict[int, list] = {}
    for fn, d in depth.items():
        rows.setdefault(d, []).append(fn)
    nodes, label_of = {}, {}
    for d, fns in rows.items():
        for i, fn in enumerate(fns):
            name = type(fn).__name__
            label = names.get(fn, name.replace("Backward0", "").replace("Backward1", ""))
            leaf = name == "AccumulateGrad"
            label_of[fn] = f"{label}#{id(fn)}"
            nodes[label_of[fn]] = (cx + (i - (len(fns) - 1) / 2) * spread, top + d * step, label,
                                   TINTS[2] if leaf else TINTS[0], GREEN if leaf else BLUE)
    edges = [(label_of[fn], label_of[child], None) for fn in depth for child, _ in fn.next_functions
             if child is not None]
    graph(fig, nodes, edges, node_w=spread - 12, node_h=26, size=11.5, edge_colour=GREY)
    return len(depth)


def batch_norm() -> Figure:
    """The backward graph of chapter 03's composed normalisation against torch's F.batch_norm: one node."""
    x, w, b = (torch.randn(4, 3, 2, 2, requires_grad=True), torch.randn(3, requires_grad=True),
               torch.randn(3, requires_grad=True))
    mean = x.mean((0, 2, 3), keepdim=True)
    centered = x - mean
    var = (centered * centered).mean((0, 2, 3), keepdim=True)
    composed = centered / (var + 1e-5).sqrt() * w.reshape(1, 3, 1, 1) + b.reshape(1, 3, 1, 1)
    fused = F.batch_norm(x, None, None, w, b, training=True)
    leaves = {}
    for out in (composed, fused):
        for fn in _levels(out.grad_fn):
            if type(fn).__name__ == "AccumulateGrad":
                leaves[fn] = {id(x): "x", id(w): "weight", id(b): "bias"}[id(fn.variable)]
    title = "One training step's backward graph of batch norm: composed of operators, and torch's one operator"
    fig = Figure(900, 460, title)
    fig.text(20, 28, title, size=14, anchor="start", bold=True)
    count = _draw_graph(fig, composed.grad_fn, leaves, 250, 80, 36, 96)
    fig.text(250, 60, f"chapter 03's composition: {count - 3} nodes", size=13, fill=BLUE, bold=True)
    _draw_graph(fig, fused.grad_fn, leaves, 700, 130, 80, 130)
    fig.text(700, 60, "F.batch_norm: 1 node", size=13, fill=BLUE, bold=True)
    fig.text(700, 82, type(fused.grad_fn).__name__, size=11.5, mono=True, fill=GREY)
    fig.lines(580, 290, ["one node: one backward call,", "the formula derived by hand;",
                         "each node of the other costs", "a dispatch and a call of", "its own"], size=12.5,
              anchor="start", fill=ORANGE)
    fig.text(20, 445, "(the same values either way; the leaves x, weight and bias in green)", size=12, anchor="start",
             fill=GREY)
    return fig


FIGURES = {
    "windows.svg": windows,
    "im2col.svg": im2col,
    "col2im.svg": col2im,
    "batch_norm.svg": batch_norm,
}
