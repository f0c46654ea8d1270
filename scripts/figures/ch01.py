"""Chapter 01 — Tensor: storage and strides of a view, broadcasting, one call through the dispatcher."""
from __future__ import annotations

import torch

from figures.common import levels
from figures.svg import BLUE, GREY, INK, RED, STRONG, TINTS, Figure

CELL = 34


def view_figure(expr: str, view: torch.Tensor, element: tuple[int, int], title: str) -> Figure:
    """The storage of arange(12) as a row of cells, a 2-D view of it as a grid: each of the view's rows
    in its own colour in both, one element outlined in red with its position worked out."""
    shape, stride, offset = tuple(view.shape), view.stride(), view.storage_offset()
    storage = view.untyped_storage().nbytes() // view.element_size()
    left, top = 130, 104
    width = max(left + storage * CELL + 70, 660)
    grid_top = top + CELL + 72
    height = max(grid_top + 26 + shape[0] * CELL + 24, grid_top + 166)
    fig = Figure(width, height, title)
    fig.text(20, 26, f"{expr}: shape {shape}, stride {stride}, offset {offset}", size=15, anchor="start", bold=True,
             mono=True)

    row_of = {}  # storage position -> the view's row that reads it
    for r in range(shape[0]):
        for c in range(shape[1]):
            row_of[offset + r * stride[0] + c * stride[1]] = r
    target = offset + element[0] * stride[0] + element[1] * stride[1]

    fig.text(left - 14, top + CELL / 2 + 5, "storage", size=13, anchor="end", bold=True)
    for p in range(storage):
        fig.text(left + p * CELL + CELL / 2, top - 6, p, size=10.5, fill=GREY, mono=True)
    fills = [TINTS[row_of[p]] if p in row_of else "white" for p in range(storage)]
    text_fills = [INK if p in row_of else GREY for p in range(storage)]
    fig.cells(left, top, list(range(storage)), cell=CELL, fills=fills, text_fills=text_fills)
    fig.rect(left + target * CELL, top, CELL, CELL, fill="none", stroke=RED, width=2.6)
    fig.text(left + storage * CELL + 6, top - 6, "position", size=10.5, anchor="start", fill=GREY)

    # one step along each dim, from element [0, 0]: how far it moves in the storage (dim 1 above, dim 0 below)
    for dim, colour, side in [(1, BLUE, -1), (0, STRONG[1], 1)]:
        if shape[dim] < 2:
            continue
        x1, x2 = left + offset * CELL + CELL / 2, left + (offset + stride[dim]) * CELL + CELL / 2
        yb = top - 20 if side < 0 else top + CELL + 4
        fig.curve([(x1, yb), ((x1 + x2) / 2, yb + side * 44), (x2, yb)], stroke=colour, width=1.6)
        fig.text((x1 + x2) / 2, yb + side * 22 + (14 if side > 0 else -4), f"+stride[{dim}] = {stride[dim]}",
                 size=11.5, fill=colour, mono=True)

    fig.text(left - 40, grid_top + 26 + CELL / 2 + 5, "tensor", size=13, anchor="end", bold=True)
    for c in range(shape[1]):
        fig.text(left + c * CELL + CELL / 2, grid_top + 18, f"{c}", size=11, fill=GREY, mono=True)
    fig.text(left + shape[1] * CELL + 8, grid_top + 18, "← index along dim 1", size=11, anchor="start", fill=GREY)
    values = [[offset + r * stride[0] + c * stride[1] for c in range(shape[1])] for r in range(shape[0])]
    fig.grid(left, grid_top + 26, values, cell=CELL, fills=[[TINTS[r]] * shape[1] for r in range(shape[0])])
    fig.rect(left + element[1] * CELL, grid_top + 26 + element[0] * CELL, CELL, CELL, fill="none", stroke=RED,
             width=2.6)
    for r in range(shape[0]):
        fig.text(left - 14, grid_top + 26 + r * CELL + CELL / 2 + 4, f"{r}", size=11, fill=GREY, mono=True)

    tx = left + shape[1] * CELL + 40
    ty = grid_top + 26 + 30
    terms = " + ".join(f"{i}×{s}" for i, s in zip(element, stride))
    fig.text(tx, ty, f"element {list(element)} is at", size=13.5, anchor="start", fill=RED)
    fig.text(tx, ty + 22, f"{offset} + {terms} = {target}", size=13.5, anchor="start", fill=RED, mono=True)
    fig.text(tx, ty + 50, "offset + Σ index × stride", size=12.5, anchor="start", fill=GREY, mono=True)
    fig.text(tx, ty + 70, "(each row of the tensor in its colour,", size=12, anchor="start", fill=GREY)
    fig.text(tx, ty + 86, " in the storage too)", size=12, anchor="start", fill=GREY)
    return fig


def storage_and_strides() -> Figure:
    x = torch.arange(12).view(3, 4)
    return view_figure("x = arange(12).view(3, 4)", x, (1, 2),
                       "A 3×4 tensor over a storage of 12: strides (4, 1), element [1, 2] at position 6")


def transpose_view() -> Figure:
    xt = torch.arange(12).view(3, 4).T
    return view_figure("x.T", xt, (2, 1),
                       "The transpose of x: the same storage, shape (4, 3), strides (1, 4); nothing moves")


def narrow_view() -> Figure:
    w = torch.arange(12).view(3, 4).narrow(1, 1, 2)
    return view_figure("x.narrow(1, 1, 2)", w, (2, 1),
                       "A window on x: offset 1, shape (3, 2), strides (4, 1); the storage cells it skips stay unread")


def broadcasting() -> Figure:
    """a (3, 1) + b (4,): both shown in the shape (3, 4) without a copy (stride 0), and their sum."""
    a = torch.tensor([[0], [10], [20]])
    b = torch.tensor([0, 1, 2, 3])
    out_shape = torch.broadcast_shapes(a.shape, b.shape)
    ea, eb = a.expand(out_shape), b.expand(out_shape)
    total = a + b
    rows, cols = out_shape
    width, height = 900, 330
    fig = Figure(width, height, "Broadcasting a (3, 1) and a (4,): shapes aligned on the right, size-1 dims stretched "
                                "with stride 0")
    fig.text(20, 26, "a + b: align the shapes on the right; a size 1 (or a missing dim) stretches", size=15,
             anchor="start", bold=True)
    # the shapes aligned on the right, a column per dim of the result
    for k, (name, shape) in enumerate([("a", tuple(a.shape)), ("b", tuple(b.shape)), ("a + b", tuple(out_shape))]):
        y = 56 + k * 19
        fig.text(30, y, name, size=13.5, anchor="start", mono=True, bold=k == 2)
        padded = (None,) * (len(out_shape) - len(shape)) + shape
        for d, size in enumerate(padded):
            fig.text(110 + d * 30, y, "·" if size is None else size, size=13.5, mono=True, bold=k == 2,
                     fill=GREY if size is None else INK)
    fig.line(24, 82, 165, 82, stroke=GREY, width=1)
    fig.text(180, 56, "dim by dim, from the right: equal sizes, or one of them 1 (a missing dim · counts as 1)",
             size=12.5, anchor="start", fill=GREY)
    top = 150
    panels = [(30, "a.expand(3, 4)", ea, a.shape, f"stride {ea.stride()}"),
              (270, "b.expand(3, 4)", eb, (1,) + tuple(b.shape), f"stride {eb.stride()}"),
              (560, "a + b", total, total.shape, f"a new tensor, stride {total.stride()}")]
    for i, (x, label, t, real, note) in enumerate(panels):
        fig.text(x, top - 30, label, size=14, anchor="start", bold=True, mono=True)
        fig.text(x, top - 12, note, size=12, anchor="start", fill=BLUE if i < 2 else GREY, mono=True)
        vals = t.tolist()
        real_rows, real_cols = real[0], real[-1]
        for r in range(rows):
            for c in range(cols):
                stored = r < real_rows and c < real_cols
                fill = TINTS[0] if stored else "white"
                fig.rect(x + c * CELL, top + r * CELL, CELL, CELL, fill=fill, stroke=INK if stored else GREY,
                         dash=None if stored else "4 3")
                fig.text(x + c * CELL + CELL / 2, top + r * CELL + CELL / 2 + 5, vals[r][c], size=13, mono=True,
                         fill=INK if stored else GREY)
        if i == 0:
            fig.text(x + cols * CELL + 20, top + rows * CELL / 2 + 5, "+", size=24, bold=True)
        if i == 1:
            fig.text(x + cols * CELL + 70, top + rows * CELL / 2 + 5, "=", size=24, bold=True)
    fig.rect(30, height - 50, 16, 16, fill=TINTS[0])
    fig.text(52, height - 37, "stored in the tensor's storage", size=12, anchor="start")
    fig.rect(290, height - 50, 16, 16, fill="white", stroke=GREY, dash="4 3")
    fig.text(312, height - 37, "the same element again: a step of stride 0 stays where it is (no copy)", size=12,
             anchor="start", fill=GREY)
    return fig


def dispatch_add() -> Figure:
    return levels(
        "z = x + y in picotorch, chapter 01: one table, one key",
        [("your code", ["z = x + y"]),
         ("Python API", ["Tensor.__add__(x, y)  ->  dispatch(\"add\", x, y)"]),
         ("dispatcher", ["the keys of the call: those of x's and y's storages   {CPU}",
                         "the highest key with a kernel in the row of \"add\":    CPU"]),
         ("kernel", ["the CPU kernel of \"add\": your _binary (exercise 11)"]),
         ("NumPy", ["np.add over two strided views of the storages"]),
         ("hardware", ["one CPU core's vector units"])],
        highlight={2}, width=800)


FIGURES = {
    "storage_strides.svg": storage_and_strides,
    "transpose_view.svg": transpose_view,
    "narrow_view.svg": narrow_view,
    "broadcasting.svg": broadcasting,
    "dispatch_add.svg": dispatch_add,
}
