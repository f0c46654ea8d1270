"""Chapter 08 — Precision: the bit layouts of float32, bfloat16 and float16, one value's bits in each; the dispatch
keys an operator call passes under autocast and the profiler; where real gradients fall on float16's range, before
and after loss scaling.

The bits are torch's (the value cast with `.to(dtype)` and read back as an integer of the same width), the ranges
`torch.finfo`'s, the keys chapter 01's DISPATCH_KEYS table and the gradients those of chapter 04's MLP on the
digits, so the figures cannot disagree with what the chapter measures."""
from __future__ import annotations

import ast
import math
import textwrap
from pathlib import Path

import torch

from figures.common import levels
from figures.svg import BLUE, GREEN, GREY, INK, ORANGE, RED, TINTS, Figure

REPO = Path(__file__).resolve().parents[2]

BIT = 21
VALUE = 0.1  # not exact in any of the three: each rounds it its own way

# (dtype, exponent bits, mantissa bits, the integer type of its width)
LAYOUTS = [(torch.float32, 8, 23, torch.int32), (torch.bfloat16, 8, 7, torch.int16), (torch.float16, 5, 10, torch.int16)]


def _bits(dtype: torch.dtype, width: int, as_int: torch.dtype) -> str:
    """The bits of VALUE cast to dtype, sign first, as torch stores them."""
    word = torch.tensor([VALUE]).to(dtype).view(as_int).item() & ((1 << width) - 1)
    return format(word, f"0{width}b")


def bit_layouts() -> Figure:
    """Sign, exponent and mantissa fields of the three dtypes, each with VALUE's bits and finfo's eps, max, tiny."""
    title = f"{VALUE} in three floating-point formats: sign, exponent, mantissa (bits as torch stores them)"
    left, top, row = 130, 78, 104
    fig = Figure(left + 32 * BIT + 40, top + row * len(LAYOUTS) + 20, title)
    fig.text(20, 28, title, size=14, anchor="start", bold=True)
    fig.text(20, 48, "the exponent's width sets the range (max, tiny); the mantissa's sets the precision (eps)",
             size=12, anchor="start", fill=GREY)
    fields = [("sign", TINTS[3]), ("exponent", TINTS[0]), ("mantissa", TINTS[2])]
    for i, (dtype, exponent, mantissa, as_int) in enumerate(LAYOUTS):
        width = 1 + exponent + mantissa
        y = top + i * row
        fig.text(left - 12, y + 16, str(dtype).replace("torch.", ""), size=14, anchor="end", bold=True)
        fig.text(left - 12, y + 34, f"{width} bits", size=12, anchor="end", fill=GREY)
        bits = _bits(dtype, width, as_int)
        sizes = [1, exponent, mantissa]
        x = left
        for (name, fill), size, colour in zip(fields, sizes, (INK, BLUE, GREEN)):
            for b in range(size):
                at = x + b * BIT
                fig.rect(at, y, BIT, BIT + 4, fill=fill, stroke=GREY, width=0.6)
                fig.text(at + BIT / 2, y + 17, bits[sum(sizes[:fields.index((name, fill))]) + b], size=12, mono=True)
            fig.text(x + size * BIT / 2, y + BIT + 20, f"{name} ({size})" if size > 1 else "s", size=11,
                     fill=colour)
            x += size * BIT
        info = torch.finfo(dtype)
        stored = torch.tensor([VALUE]).to(dtype).double().item()
        fig.text(left, y + BIT + 40, f"eps {info.eps:.3g}   max {info.max:.4g}   tiny {info.tiny:.3g}   "
                 f"{VALUE} is stored as {stored:.10g}", size=12, anchor="start", mono=True, fill=ORANGE)
    return fig


def dispatch_keys() -> dict:
    """Chapter 01's DISPATCH_KEYS {name: (priority, what the key does, chapter)}, read from its source (the one
    truth; importing the chapter would run it)."""
    tree = ast.parse((REPO / "source" / "01_tensor" / "01_tensor.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DISPATCH_KEYS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError("no DISPATCH_KEYS in source/01_tensor/01_tensor.py")


def autocast_stack() -> Figure:
    """x @ w under autocast and the profiler: the keys of the call from the highest down, each with what it does
    to this call; the dtypes and the recorded graph are torch's for the same call."""
    keys = dispatch_keys()
    x, w = torch.ones(4, 3), torch.ones(3, 2, requires_grad=True)  # only their dtypes and the graph are shown
    with torch.autocast("cpu"):  # the region's dtype: bfloat16, the CPU's default
        y = x @ w
    casts = [f.name() for f, _ in y.grad_fn.next_functions if f is not None]

    def key(name):
        return f"{name} ({keys[name][0]})"

    def short(dtype):
        return str(dtype).replace("torch.", "")

    rows = [("x @ w", [f"x: {short(x.dtype)}, w: {short(w.dtype)} (requires grad),",
                       "inside  with profile():  and  with autocast(\"cpu\"):"]),
            (key("Profiler"), textwrap.wrap(keys["Profiler"][1], 66)
             + ["an event opens; redispatch below Profiler; the event closes"]),
            (key("Autocast"), ["matmul's policy is lower precision: cast x and w to the region's dtype",
                               f"{short(x.dtype)} -> {short(y.dtype)}; then redispatch below Autocast (key excluded)"]),
            (key("Autograd"), [keys["Autograd"][1],
                               f"records {y.grad_fn.name()}, and {' and '.join(casts)} for w's cast "
                               "(x needs no grad)"]),
            (f"{key('CPU')} / {key('CUDA')}", ["the backend of the tensors' device computes the product",
                                                f"y: {short(y.dtype)}, shape {tuple(y.shape)}"])]
    skipped = [n for n, (p, _, _) in keys.items() if keys["CPU"][0] < p < keys["Autograd"][0]
               and n != "CUDA"]
    note = (f"{' and '.join(key(n) for n in skipped)} sit between Autograd and the backends: in the key set only "
            "inside their modes")
    return levels("One call under autocast and the profiler: the dispatch keys from the highest priority down",
                  rows, highlight={2}, width=900, name_width=190, note=note)


AXIS = (-48, 17)  # the log2 range the number line shows
SCALE = 2.0 ** 16  # GradScaler's init_scale
SHRINK = 2.0 ** -20  # train_mixed's shrink: gradients where a large model's are


def mlp_gradients() -> torch.Tensor:
    """Every nonzero gradient of chapter 04's MLP (64-128-10) on one batch of 64 digits, its loss times SHRINK as
    train_mixed's is, in float32: the values float16 would have to hold."""
    from course.datasets import load_digits

    digits = load_digits()
    images = torch.from_numpy(digits.train_images)
    images = (images - images.mean(0)) / (images.std(0, correction=0) + 0.1)  # train_mixed's normalisation
    labels = torch.from_numpy(digits.train_labels).long()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    rows = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))[:64]
    (torch.nn.functional.cross_entropy(model(images[rows]), labels[rows]) * SHRINK).backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters()]).abs()
    return grads[grads > 0]  # exact zeros (dead ReLUs, constant pixels) are 0 in every format


def _histogram(fig, x_of, y, grads, flushed, height, label, sub):
    """Counts per power of two of grads as bars up from y, the share that float16 flushes to 0 in red."""
    exponents = torch.floor(torch.log2(grads)).long().clamp(AXIS[0], AXIS[1] - 1)  # the ends hold what is beyond
    counts = torch.bincount(exponents - AXIS[0], minlength=AXIS[1] - AXIS[0])
    zeros = torch.bincount(exponents[flushed] - AXIS[0], minlength=AXIS[1] - AXIS[0])
    top = counts.max().item()
    for i, (n, z) in enumerate(zip(counts.tolist(), zeros.tolist())):
        if n == 0:
            continue
        x0, x1 = x_of(AXIS[0] + i) + 1, x_of(AXIS[0] + i + 1) - 1
        bar = height * n / top
        fig.rect(x0, y - bar, x1 - x0, bar, fill=TINTS[0], stroke=BLUE, width=0.8)
        if z:
            fig.rect(x0, y - height * z / top, x1 - x0, height * z / top, fill=TINTS[3], stroke=RED, width=0.8)
    fig.line(x_of(AXIS[0]), y, x_of(AXIS[1]), y, stroke=GREY, width=0.8)
    fig.text(x_of(AXIS[0]) - 12, y - height / 2, label, size=13, anchor="end", bold=True)
    fig.text(x_of(AXIS[0]) - 12, y - height / 2 + 17, sub, size=11.5, anchor="end", fill=GREY)


def loss_scaling() -> Figure:
    """float16's normal and subnormal ranges and bfloat16's on a log2 line, and the MLP's shrunk gradients on it:
    below float16's smallest subnormal they round to 0, times 2**16 they all land in its range."""
    half, brain = torch.finfo(torch.float16), torch.finfo(torch.bfloat16)
    smallest = torch.tensor(1, dtype=torch.int16).view(torch.float16).item()  # the integer 1 read as float16
    grads = mlp_gradients()
    scaled = grads * SCALE
    lost = grads.half() == 0  # what a cast to float16 does to each: torch rounds, ties to even
    lost_scaled = scaled.half() == 0
    title = (f"Loss scaling: {lost.sum().item()} of {grads.numel()} gradients round to 0 in float16; "
             f"times 2^{int(math.log2(SCALE))}, {lost_scaled.sum().item()} do")
    left, width = 200, 960
    unit = (width - left - 30) / (AXIS[1] - AXIS[0])

    def x_of(e):
        return left + (min(max(e, AXIS[0]), AXIS[1]) - AXIS[0]) * unit

    fig = Figure(width, 470, title)
    fig.text(20, 28, title, size=15, anchor="start", bold=True)
    fig.text(20, 48, "log2 scale; the gradients are chapter 04's MLP's on one batch of digits, the loss times "
                     "2^-20 as train_mixed shrinks it", size=12, anchor="start", fill=GREY)
    # the formats: subnormal and normal ranges, from finfo (the exponents of their bounds)
    bands = [("float16", 80, [(math.log2(smallest), math.log2(half.tiny), TINTS[1], ORANGE, "subnormal"),
                              (math.log2(half.tiny), math.log2(half.max), TINTS[2], GREEN, "normal")]),
             ("bfloat16", 118, [(math.log2(brain.tiny), math.log2(brain.max), TINTS[2], GREEN,
                                 f"normal from 2^{int(math.log2(brain.tiny))} to max ≈ 2^{math.log2(brain.max):.0f}: "
                                 "float32's range, beyond both ends")])]
    for name, y, ranges in bands:
        fig.text(left - 12, y + 19, name, size=13, anchor="end", bold=True)
        for lo, hi, fill, stroke, label in ranges:
            fig.rect(x_of(lo), y, x_of(hi) - x_of(lo), 28, fill=fill, stroke=stroke, width=1)
            fig.text((x_of(lo) + x_of(hi)) / 2, y + 19, label, size=12, fill=INK)
    fig.text(x_of(math.log2(smallest)) - 6, 99, "0", size=13, anchor="end", fill=RED, bold=True)
    fig.text(x_of(AXIS[0]) + 4, 99, "half of 2^-24 or less: rounds to", size=11.5, anchor="start", fill=RED)
    _histogram(fig, x_of, 255, grads, lost, 90, "gradients g", "loss × 2^-20")
    _histogram(fig, x_of, 390, scaled, lost_scaled, 90, f"g × 2^{int(math.log2(SCALE))}", "scaler.scale(loss)")
    peak = torch.floor(torch.log2(grads)).long().mode().values.item() + 0.5  # the most common power of two
    shift = math.log2(SCALE)
    fig.arrow(x_of(peak), 272, x_of(peak + shift), 288, stroke=BLUE, width=1.6)
    fig.text(x_of(peak + shift / 2), 274, f"× 2^{int(shift)}: every gradient {int(shift)} powers of two up",
             size=12, anchor="start", fill=BLUE)
    for e, colour in [(math.log2(smallest), RED), (math.log2(half.tiny), ORANGE), (math.log2(half.max), GREEN)]:
        fig.line(x_of(e), 74, x_of(e), 400, stroke=colour, width=1, dash="4 3")
    for e in range(AXIS[0], AXIS[1] + 1, 4):
        fig.line(x_of(e), 390, x_of(e), 396, stroke=GREY, width=0.8)
        fig.text(x_of(e), 412, f"2^{e}", size=11, fill=GREY, mono=True)
    fig.text(x_of(math.log2(smallest)), 430, f"2^{int(math.log2(smallest))}: float16's smallest subnormal", size=11.5,
             fill=RED)
    fig.text(x_of(math.log2(half.max)), 430, f"max {half.max:.0f}", size=11.5, anchor="end", fill=GREEN)
    fig.text(20, 458, f"red: rounded to 0 by a cast to float16 ({lost.float().mean().item():.1%} before scaling, "
                      f"{lost_scaled.float().mean().item():.1%} after); unscaling divides by 2^{int(math.log2(SCALE))} "
                      "again in float32, where the weights' gradients live", size=12, anchor="start", fill=GREY)
    return fig


FIGURES = {
    "bit_layouts.svg": bit_layouts,
    "autocast_stack.svg": autocast_stack,
    "loss_scaling.svg": loss_scaling,
}
