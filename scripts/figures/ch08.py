"""Chapter 08 — Precision: the bit layouts of float32, bfloat16 and float16, one value's bits in each.

The bits are torch's (the value cast with `.to(dtype)` and read back as an integer of the same width), and the
ranges are `torch.finfo`'s, so the figure cannot disagree with what the chapter measures."""
from __future__ import annotations

import torch

from figures.svg import BLUE, GREEN, GREY, INK, ORANGE, TINTS, Figure

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


FIGURES = {
    "bit_layouts.svg": bit_layouts,
}
