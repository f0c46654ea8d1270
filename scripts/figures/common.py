"""Drawings more than one chapter uses: a call's path down the levels, the training loop, a graph."""
from __future__ import annotations

import math

from figures.svg import BLUE, GREY, INK, LIGHT, STRONG, TINTS, Figure


def levels(title: str, rows: list[tuple[str, list[str]]], highlight: set[int], width: int = 760,
           name_width: int = 150, note: str | None = None) -> Figure:
    """One call travelling down: a box per level (name, then a line or two of what happens there),
    an arrow from each to the next; the levels in `highlight` tinted blue."""
    line_h, pad, gap = 17, 10, 16
    heights = [pad * 2 + line_h * max(1, len(detail)) for _, detail in rows]
    top = 44
    height = top + sum(heights) + gap * (len(rows) - 1) + (40 if note else 18)
    fig = Figure(width, height, title)
    fig.text(20, 26, title, size=15, anchor="start", bold=True)
    y = top
    for i, ((name, detail), h) in enumerate(zip(rows, heights)):
        hot = i in highlight
        fig.rect(20, y, width - 40, h, fill=TINTS[0] if hot else LIGHT, stroke=BLUE if hot else GREY, rx=6,
                 width=2 if hot else 1)
        fig.text(34, y + pad + 13, name, size=14, anchor="start", bold=True, fill=BLUE if hot else INK)
        for k, row in enumerate(detail):
            fig.text(34 + name_width, y + pad + 13 + k * line_h, row, size=12.5, anchor="start", mono=True)
        if i + 1 < len(rows):
            fig.arrow(20 + name_width / 2, y + h + 1, 20 + name_width / 2, y + h + gap - 1, stroke=GREY)
        y += h + gap
    if note:
        fig.text(20, height - 16, note, size=12.5, anchor="start", fill=GREY, italic=True)
    return fig


TRAINING_STEPS = [
    ("1. next batch", "x, y = next(batches)", "DataLoader"),
    ("2. forward", "out = model(x)", "Module: records the graph"),
    ("3. loss", "loss = loss_fn(out, y)", "a loss function"),
    ("4. clear old gradients", "optimizer.zero_grad()", "the optimizer"),
    ("5. backward", "loss.backward()", "the autograd engine"),
    ("6. update", "optimizer.step()", "the optimizer"),
]


def training_loop(title: str, owners: list[str] | None = None) -> Figure:
    """The six steps of one training iteration on a circle, each with its code and its owner (or the
    given owners, one per step)."""
    width, height = 820, 470
    cx, cy, rx, ry = width / 2, 250, 285, 160
    fig = Figure(width, height, title)
    fig.text(width / 2, 28, title, size=16, bold=True)
    fig.text(cx, cy - 6, "one iteration:", size=13, fill=GREY)
    fig.text(cx, cy + 14, "repeat for every batch", size=13, fill=GREY)
    n = len(TRAINING_STEPS)
    box_w, box_h = 230, 62
    centres = []
    for i in range(n):
        angle = -math.pi / 2 + 2 * math.pi * i / n
        centres.append((cx + rx * math.cos(angle), cy + ry * math.sin(angle)))
    for i in range(n):  # arrows first, under the boxes
        (x1, y1), (x2, y2) = centres[i], centres[(i + 1) % n]
        mx, my = (x1 + x2) / 2, (y1 + y2) / 2
        # bend outwards, away from the centre
        ox, oy = mx - cx, my - cy
        norm = math.hypot(ox, oy) or 1
        control = (mx + 40 * ox / norm, my + 40 * oy / norm)
        sx, sy = _towards(centres[i], control, box_w, box_h)
        ex, ey = _towards(centres[(i + 1) % n], control, box_w, box_h)
        fig.curve([(sx, sy), control, (ex, ey)], stroke=GREY, width=1.6)
    for i, ((step, code, owner), (x, y)) in enumerate(zip(TRAINING_STEPS, centres)):
        owner = owners[i] if owners else owner
        fig.rect(x - box_w / 2, y - box_h / 2, box_w, box_h, fill=TINTS[i % len(TINTS)], stroke=STRONG[i % len(STRONG)],
                 rx=8, width=1.6)
        fig.text(x, y - 12, step, size=14, bold=True)
        fig.text(x, y + 7, code, size=12.5, mono=True)
        fig.text(x, y + 24, owner, size=11.5, fill=GREY)
    return fig


def _towards(centre, point, w, h):
    """Where the segment from a box's centre towards `point` leaves the box (plus a little gap)."""
    (x, y), (px, py) = centre, point
    dx, dy = px - x, py - y
    scale = min((w / 2 + 4) / abs(dx) if dx else math.inf, (h / 2 + 4) / abs(dy) if dy else math.inf)
    return x + dx * scale, y + dy * scale


def graph(fig: Figure, nodes: dict, edges: list, node_w: int = 130, node_h: int = 34, size: float = 13,
          edge_colour: str = INK) -> None:
    """Nodes {name: (x, y, label, fill, stroke)} (x, y: the centre) and edges [(from, to, label or None)],
    each arrow from the bottom of one box to the top of the next (or side to side on one level)."""
    for a, b, label in edges:
        (x1, y1), (x2, y2) = nodes[a][:2], nodes[b][:2]
        if abs(y1 - y2) < 1:
            sx = x1 + (node_w / 2 if x2 > x1 else -node_w / 2)
            ex = x2 - (node_w / 2 if x2 > x1 else -node_w / 2)
            fig.arrow(sx, y1, ex, y2, stroke=edge_colour)
        else:
            down = 1 if y2 > y1 else -1
            fig.arrow(x1, y1 + down * node_h / 2, x2, y2 - down * (node_h / 2 + 2), stroke=edge_colour)
        if label:
            fig.text((x1 + x2) / 2 + 6, (y1 + y2) / 2 + 4, label, size=11, anchor="start", fill=GREY, mono=True)
    for name, (x, y, label, fill, stroke) in nodes.items():
        fig.rect(x - node_w / 2, y - node_h / 2, node_w, node_h, fill=fill, stroke=stroke, rx=6, width=1.5)
        fig.text(x, y + size * 0.35, label, size=size, mono=True)
