"""Chapter 04 — Training: the loop's six steps (each with its exercise), the DataLoader's pipeline, two schedules."""
from __future__ import annotations

import torch
from torch.utils.data import BatchSampler, RandomSampler

from figures.common import training_loop
from figures.svg import BLUE, GREY, INK, LIGHT, ORANGE, STRONG, TINTS, Figure


def loop() -> Figure:
    return training_loop("The loop of this chapter: six steps, and the exercise that builds each",
                         ["your DataLoader (exercises 7, 8)", "your Module (chapter 03)",
                          "your cross_entropy (exercise 2)", "your Optimizer (exercise 3)",
                          "your autograd (chapter 02)", "your SGD, Adam (exercises 4, 5)"])


def data_pipeline() -> Figure:
    """Ten samples, batch_size 4, shuffled: the indices a RandomSampler draws (torch's, with a seeded
    generator), the BatchSampler's lists, and what default_collate makes of each."""
    n, batch_size = 10, 4
    generator = torch.Generator().manual_seed(0)
    order = list(RandomSampler(range(n), generator=generator))
    batches = list(BatchSampler(order, batch_size, drop_last=False))
    width, height = 900, 330
    fig = Figure(width, height, f"The DataLoader: a sampler's shuffled indices, cut into batches of {batch_size}, "
                                "each batch's samples stacked by default_collate")
    fig.text(20, 26, f"DataLoader(dataset, batch_size={batch_size}, shuffle=True): where a batch comes from",
             size=15, anchor="start", bold=True)
    cell = 34
    x0 = 200
    fig.text(x0 - 16, 74, "RandomSampler", size=13, anchor="end", bold=True)
    fig.text(x0 - 16, 90, "a permutation of 0..9", size=11, anchor="end", fill=GREY)
    colour_of = {i: k for k, b in enumerate(batches) for i in b}
    fig.cells(x0, 60, order, cell=cell, fills=[TINTS[colour_of[i]] for i in order])
    fig.text(x0 - 16, 154, "BatchSampler", size=13, anchor="end", bold=True)
    fig.text(x0 - 16, 170, f"lists of {batch_size}, the last shorter", size=11, anchor="end", fill=GREY)
    x = x0
    for k, batch in enumerate(batches):
        fig.cells(x, 140, batch, cell=cell, fills=[TINTS[k]] * len(batch), strokes=[STRONG[k]] * len(batch))
        fig.arrow(x + len(batch) * cell / 2, 140 + cell + 4, x + len(batch) * cell / 2, 226, stroke=STRONG[k])
        fig.text(x + len(batch) * cell / 2, 250, f"{len(batch)} samples (x, y)", size=12, fill=STRONG[k])
        fig.text(x + len(batch) * cell / 2, 266, "default_collate stacks them", size=11, fill=GREY)
        fig.text(x + len(batch) * cell / 2, 283, f"x ({len(batch)}, 64), y ({len(batch)},)", size=12, mono=True,
                 bold=True)
        x += max(len(batch) * cell, 150) + 50
    fig.text(x0 - 16, 250, "dataset[i], each i", size=13, anchor="end", bold=True)
    fig.text(x0 - 16, 283, "one batch", size=13, anchor="end", bold=True)
    fig.text(20, height - 14, "a new epoch draws a new permutation; shuffle=False gives 0, 1, 2, ... "
                              "(SequentialSampler)", size=12, anchor="start", fill=GREY, italic=True)
    return fig


def schedules() -> Figure:
    """StepLR and CosineAnnealingLR over 20 epochs, computed by torch's own schedulers."""
    epochs, base = 20, 0.1

    def rates(make):
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=base)
        sched = make(opt)
        out = []
        for _ in range(epochs):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        return out

    curves = [("StepLR(step_size=5, gamma=0.5)", BLUE, rates(lambda o: torch.optim.lr_scheduler.StepLR(o, 5, 0.5))),
              ("CosineAnnealingLR(T_max=20)", ORANGE,
               rates(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=epochs)))]
    width, height = 860, 330
    fig = Figure(width, height, "Learning rate by epoch under StepLR and CosineAnnealingLR, from a base of 0.1 "
                                "(computed by torch)")
    fig.text(20, 26, f"group[\"lr\"] at each epoch, base {base}: the scheduler steps once per epoch", size=15,
             anchor="start", bold=True)
    left, top, w, h = 80, 50, 440, 230
    fig.rect(left, top, w, h, fill="white", stroke=GREY, width=1)
    for k in range(5):
        v = base * k / 4
        y = top + h - h * v / base
        fig.line(left, y, left + w, y, stroke=LIGHT, width=1)
        fig.text(left - 8, y + 4, f"{v:.3g}", size=11, anchor="end", fill=GREY, mono=True)
    for e in range(0, epochs + 1, 5):
        x = left + w * e / epochs
        fig.text(x, top + h + 18, e, size=11, fill=GREY, mono=True)
    fig.text(left + w / 2, top + h + 38, "epoch", size=12, fill=GREY)
    for i, (label, colour, values) in enumerate(curves):
        points = []
        for e, v in enumerate(values):
            x, y = left + w * e / epochs, top + h - h * v / base
            if label.startswith("StepLR") and points:  # a staircase: the rate holds until the next step
                points.append((x, points[-1][1]))
            points.append((x, y))
        if label.startswith("StepLR"):
            points.append((left + w, points[-1][1]))
        fig.polyline(points, stroke=colour, width=2.2)
        fig.rect(left + w + 24, top + 20 + i * 46, 18, 4, fill=colour, stroke=colour)
        fig.text(left + w + 48, top + 26 + i * 46, label, size=11.5, anchor="start", mono=True, fill=INK)
    fig.text(left + w + 24, top + 124, "StepLR: × gamma every", size=12, anchor="start", fill=GREY)
    fig.text(left + w + 24, top + 140, "step_size epochs", size=12, anchor="start", fill=GREY)
    fig.text(left + w + 24, top + 166, "cosine: half a cosine from", size=12, anchor="start", fill=GREY)
    fig.text(left + w + 24, top + 182, "base to eta_min in T_max", size=12, anchor="start", fill=GREY)
    return fig


FIGURES = {
    "training_loop.svg": loop,
    "data_pipeline.svg": data_pipeline,
    "schedules.svg": schedules,
}
