"""A few SVG primitives, enough for the course's figures: boxes, text, arrows, grids.

Plain Python writing SVG XML (no drawing library): the output is byte-stable, so the
committed figures can be compared with what the script makes now (tests/chapters/test_figures.py).
Every figure has a white background (it stays readable in JupyterLab's dark theme) and a
<title> (screen readers; the markdown's alt text says the same in short).
"""
from __future__ import annotations

from xml.sax.saxutils import escape

SANS = "DejaVu Sans, Helvetica, Arial, sans-serif"
MONO = "DejaVu Sans Mono, Menlo, Consolas, monospace"

INK = "#222222"
GREY = "#8a8a8a"
LIGHT = "#f2f2f2"
BLUE = "#2f6db5"
ORANGE = "#d9822b"
GREEN = "#3a9a5b"
RED = "#c8453b"
PURPLE = "#7b58a6"
# Fills: one pale tint per hue, for cells and boxes.
TINTS = ["#dbe8f7", "#fbe3cc", "#d8efdf", "#f6d6d3", "#e6ddf1", "#f7efc6", "#d5eeee"]
STRONG = [BLUE, ORANGE, GREEN, RED, PURPLE, "#b59a1c", "#2a9a9a"]


def num(v: float) -> str:
    """A coordinate as few characters as it takes, the same on every machine."""
    r = round(float(v), 1)
    return str(int(r)) if r == int(r) else f"{r:.1f}"


class Figure:
    def __init__(self, width: float, height: float, title: str):
        self.width, self.height, self.title = width, height, title
        self.items: list[str] = []

    # --- shapes -------------------------------------------------------------------------------------------
    def rect(self, x, y, w, h, fill="white", stroke=INK, rx=0, width=1.2, dash=None, opacity=None):
        extra = f' rx="{num(rx)}"' if rx else ""
        extra += f' stroke-dasharray="{dash}"' if dash else ""
        extra += f' fill-opacity="{opacity}"' if opacity is not None else ""
        self.items.append(f'<rect x="{num(x)}" y="{num(y)}" width="{num(w)}" height="{num(h)}" fill="{fill}" '
                          f'stroke="{stroke}" stroke-width="{num(width)}"{extra}/>')

    def circle(self, cx, cy, r, fill="white", stroke=INK, width=1.2):
        self.items.append(f'<circle cx="{num(cx)}" cy="{num(cy)}" r="{num(r)}" fill="{fill}" stroke="{stroke}" '
                          f'stroke-width="{num(width)}"/>')

    def line(self, x1, y1, x2, y2, stroke=INK, width=1.4, dash=None, arrow=False):
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        extra += f' marker-end="url(#{self._marker(stroke)})"' if arrow else ""
        self.items.append(f'<line x1="{num(x1)}" y1="{num(y1)}" x2="{num(x2)}" y2="{num(y2)}" stroke="{stroke}" '
                          f'stroke-width="{num(width)}"{extra}/>')

    def arrow(self, x1, y1, x2, y2, stroke=INK, width=1.4, dash=None):
        self.line(x1, y1, x2, y2, stroke, width, dash, arrow=True)

    def curve(self, points, stroke=INK, width=1.4, dash=None, arrow=True):
        """A quadratic Bézier through (x1, y1), control (cx, cy), (x2, y2)."""
        (x1, y1), (cx, cy), (x2, y2) = points
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        extra += f' marker-end="url(#{self._marker(stroke)})"' if arrow else ""
        self.items.append(f'<path d="M {num(x1)} {num(y1)} Q {num(cx)} {num(cy)} {num(x2)} {num(y2)}" fill="none" '
                          f'stroke="{stroke}" stroke-width="{num(width)}"{extra}/>')

    def polyline(self, points, stroke=INK, width=1.6, dash=None, fill="none"):
        pts = " ".join(f"{num(x)},{num(y)}" for x, y in points)
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        self.items.append(f'<polyline points="{pts}" fill="{fill}" stroke="{stroke}" stroke-width="{num(width)}"'
                          f' stroke-linejoin="round"{extra}/>')

    def text(self, x, y, s, size=14, anchor="middle", fill=INK, bold=False, mono=False, italic=False):
        """Text whose baseline's middle (or start, or end) is at (x, y)."""
        attrs = f'font-family="{MONO if mono else SANS}" font-size="{num(size)}"'
        attrs += ' font-weight="bold"' if bold else ""
        attrs += ' font-style="italic"' if italic else ""
        attrs += ' xml:space="preserve"'  # several spaces stay several: aligned columns of code
        self.items.append(f'<text x="{num(x)}" y="{num(y)}" text-anchor="{anchor}" fill="{fill}" {attrs}>'
                          f'{escape(str(s))}</text>')

    def lines(self, x, y, rows, size=14, gap=1.35, **kw):
        for i, row in enumerate(rows):
            self.text(x, y + i * size * gap, row, size=size, **kw)

    # --- composites ---------------------------------------------------------------------------------------
    def box(self, x, y, w, h, label, fill=LIGHT, stroke=INK, size=14, mono=False, bold=False, sub=None,
            sub_size=11.5, rx=6, text_fill=INK):
        """A rounded box with a centred label (and a smaller second line)."""
        self.rect(x, y, w, h, fill=fill, stroke=stroke, rx=rx)
        if sub is None:
            self.text(x + w / 2, y + h / 2 + size * 0.35, label, size=size, mono=mono, bold=bold, fill=text_fill)
        else:
            self.text(x + w / 2, y + h / 2 - 2, label, size=size, mono=mono, bold=bold, fill=text_fill)
            self.text(x + w / 2, y + h / 2 + sub_size + 2, sub, size=sub_size, mono=mono, fill=GREY)

    def cells(self, x, y, values, cell=30, fills=None, strokes=None, size=13, mono=True, text_fills=None):
        """A row of square cells holding values (None: an empty cell)."""
        for i, v in enumerate(values):
            fill = fills[i] if fills else "white"
            stroke = strokes[i] if strokes else INK
            self.rect(x + i * cell, y, cell, cell, fill=fill, stroke=stroke,
                      width=2.2 if strokes and stroke != INK else 1.2)
            if v is not None:
                tf = text_fills[i] if text_fills else INK
                self.text(x + i * cell + cell / 2, y + cell / 2 + size * 0.35, v, size=size, mono=mono, fill=tf)

    def grid(self, x, y, values, cell=34, fills=None, strokes=None, size=13, text_fills=None):
        """A 2-D grid of cells: values[row][col]; fills and strokes alike, or None."""
        for r, row in enumerate(values):
            self.cells(x, y + r * cell, row, cell=cell, fills=fills[r] if fills else None,
                       strokes=strokes[r] if strokes else None, size=size,
                       text_fills=text_fills[r] if text_fills else None)

    # --- output -------------------------------------------------------------------------------------------
    def _marker(self, colour: str) -> str:
        return "arrow-" + colour.lstrip("#")

    def render(self) -> str:
        colours = sorted({item.split('marker-end="url(#arrow-')[1].split(")")[0]
                          for item in self.items if "marker-end" in item})
        markers = "".join(
            f'<marker id="arrow-{c}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
            f'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#{c}"/></marker>' for c in colours)
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{num(self.width)}" height="{num(self.height)}" '
                f'viewBox="0 0 {num(self.width)} {num(self.height)}" role="img">')
        body = [head, f"<title>{escape(self.title)}</title>", f"<defs>{markers}</defs>",
                f'<rect x="0" y="0" width="{num(self.width)}" height="{num(self.height)}" fill="white"/>']
        return "\n".join(body + self.items + ["</svg>"]) + "\n"
