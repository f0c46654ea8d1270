"""A convolution explorer: the windows of conv2d sliding over an image, and the im2col matrix they make.

In a notebook::

    from course.widgets.conv_explorer import explore
    explore()                       # torch's windows
    explore(unfold, from_torch)     # your chapter 07 unfold beside torch's

Choose the input's channels and size, the kernel, stride, padding and dilation. The image is drawn padded
(the padding's zeros grey) with the selected window's taps in orange: the receptive field of one output
pixel. Below it, the input's storage as a row of cells, and the im2col matrix of ``F.unfold``: one column
per window, one row per (channel, tap), each entry naming the storage cell it copies. Select a window (a
column) or a row of the matrix, and the cells it reads light up in the storage; a row's are evenly spaced,
one more stride. What is shown is torch's (``F.unfold`` of a tensor whose values are their storage
positions); given your ``unfold``, its matrix is compared with torch's entry by entry.
"""
from __future__ import annotations

from html import escape

import ipywidgets as widgets
import torch
import torch.nn.functional as F

MAX_CHANNELS, MAX_SIDE, MAX_KERNEL = 3, 10, 4
TAP, ROW, BOTH = "#ffb000", "#9fd0ff", "#c9a0ff"  # the window's cells, the row's cells, cells in both
_CELL = "border:1px solid #999;padding:0 3px;text-align:center;min-width:1.5em;font-size:11px"
PAD = "·"  # a zero of the padding, in the image and in the matrix (a 0 would read as storage position 0)


class ArgumentError(ValueError):
    """Settings the explorer cannot read; the message says what it expected."""


def parse_pair(text: str, name: str, low: int, high: int) -> tuple[int, int]:
    """'2' -> (2, 2), '2, 1' -> (2, 1), each within low..high."""
    try:
        values = tuple(int(v) for v in text.replace("(", "").replace(")", "").split(",") if v.strip())
    except ValueError:
        raise ArgumentError(f"{name}: write a whole number or two, like 2 or 2, 1 (got {text!r})") from None
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or not all(low <= v <= high for v in values):
        raise ArgumentError(f"{name}: one or two whole numbers from {low} to {high} (got {text!r})")
    return values


def parse_input(text: str) -> tuple[int, int, int]:
    """'C, H, W' for the input (one image)."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if len(values) != 3 or not 1 <= values[0] <= MAX_CHANNELS or not all(1 <= v <= MAX_SIDE for v in values[1:]):
        raise ArgumentError(f"input: C, H, W with C from 1 to {MAX_CHANNELS} and H, W from 1 to {MAX_SIDE} "
                            f"(got {text!r})")
    return values


def im2col_positions(shape, kernel, dilation, padding, stride) -> list[list[int | None]]:
    """The im2col matrix of a (C, H, W) input as storage positions: entry [row][column] is the position of the
    pixel it copies, None for a zero of the padding. torch computes it: F.unfold of the positions plus one."""
    c, h, w = shape
    x = torch.arange(1, c * h * w + 1, dtype=torch.float64).reshape(1, c, h, w)
    cols = F.unfold(x, kernel, dilation, padding, stride)[0]
    return [[int(v) - 1 if v else None for v in row] for row in cols.tolist()]


class ConvExplorer:
    """The explorer's state and widgets; ``state()`` says what is on screen, for tests and for you."""

    def __init__(self, unfold=None, from_torch=None, input_shape=(1, 5, 6), kernel=(3, 3), stride=(1, 1),
                 padding=(1, 1), dilation=(1, 1)):
        self.unfold, self.from_torch = unfold, from_torch
        text = (lambda v, d: widgets.Text(value=", ".join(map(str, v)), description=d, continuous_update=False,
                                          layout=widgets.Layout(width="14em")))
        self.input_text = text(input_shape, "input C, H, W")
        self.kernel_text, self.stride_text = text(kernel, "kernel"), text(stride, "stride")
        self.padding_text, self.dilation_text = text(padding, "padding"), text(dilation, "dilation")
        self.next_button = widgets.Button(description="Next window ▶", button_style="primary")
        self.previous_button = widgets.Button(description="◀ Previous window")
        self.window = widgets.Dropdown(options=[], description="window")
        self.row = widgets.Dropdown(options=[], description="matrix row")
        self.message, self.html = widgets.HTML(), widgets.HTML()
        self.next_button.on_click(lambda _: self.step(1))
        self.previous_button.on_click(lambda _: self.step(-1))
        for t in (self.input_text, self.kernel_text, self.stride_text, self.padding_text, self.dilation_text):
            t.observe(lambda _: self._recompute(), names="value")
        self.window.observe(lambda _: self._render(), names="value")
        self.row.observe(lambda _: self._render(), names="value")
        self.widget = widgets.VBox([
            widgets.HBox([self.next_button, self.previous_button]),
            widgets.HBox([self.input_text, self.kernel_text, self.stride_text]),
            widgets.HBox([self.padding_text, self.dilation_text]),
            widgets.HBox([self.window, self.row]),
            self.message, self.html,
        ])
        self.settings, self.yours, self._quiet = None, None, False
        self._recompute()

    # --- the controls -------------------------------------------------------------------
    def step(self, by: int) -> None:
        """Slide the window `by` positions in the output's order (row by row), wrapping around."""
        options = [v for _, v in self.window.options]
        if options:
            self.window.value = options[(options.index(self.window.value) + by) % len(options)]

    def select(self, window=None, row=None) -> None:
        """Select output pixel `window` (i, j) and/or matrix row `row` (c, p, q)."""
        if window is not None:
            self.window.value = tuple(window)
        if row is not None:
            self.row.value = tuple(row)

    # --- computing ----------------------------------------------------------------------
    def _read(self) -> dict:
        return {"input": parse_input(self.input_text.value),
                "kernel": parse_pair(self.kernel_text.value, "kernel", 1, MAX_KERNEL),
                "stride": parse_pair(self.stride_text.value, "stride", 1, MAX_SIDE),
                "padding": parse_pair(self.padding_text.value, "padding", 0, MAX_KERNEL),
                "dilation": parse_pair(self.dilation_text.value, "dilation", 1, MAX_KERNEL)}

    def _recompute(self) -> None:
        try:
            settings = self._read()
            matrix = im2col_positions(settings["input"], settings["kernel"], settings["dilation"],
                                      settings["padding"], settings["stride"])
        except (ArgumentError, RuntimeError) as e:  # torch's RuntimeError: no window fits
            self.message.value = f"<span style='color:#cf222e'>{escape(str(e))}</span>"
            if self.settings is None:
                raise
            return  # the last good settings stay on screen
        self.message.value = ""
        self.settings, self.matrix = settings, matrix
        (_, h, w), (kh, kw), (ph, pw), (sh, sw), (dh, dw) = (settings[k] for k in (
            "input", "kernel", "padding", "stride", "dilation"))
        self.out_size = ((h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1)
        self.yours = self._compare_yours()
        old_window, old_row = self.window.value, self.row.value
        self._quiet = True  # (no drawing while the options change under the old selection)
        windows = [(i, j) for i in range(self.out_size[0]) for j in range(self.out_size[1])]
        rows = [(c, p, q) for c in range(settings["input"][0]) for p in range(kh) for q in range(kw)]
        self.window.options = [(f"out[{i}, {j}] (column {i * self.out_size[1] + j})", v) for v in windows for i, j in [v]]
        self.row.options = [(f"c={c}, p={p}, q={q} (row {n})", v) for n, v in enumerate(rows) for c, p, q in [v]]
        self.window.value = old_window if old_window in windows else windows[0]
        self.row.value = old_row if old_row in rows else rows[0]
        self._quiet = False
        self._render()

    def _compare_yours(self) -> str | None:
        """None without your unfold; else 'same' or what differs, in words."""
        if self.unfold is None:
            return None
        s = self.settings
        c, h, w = s["input"]
        x = torch.arange(1, c * h * w + 1, dtype=torch.float64).reshape(1, c, h, w)
        try:
            got = self.unfold(self.from_torch(x) if self.from_torch else x, s["kernel"], s["dilation"],
                              s["padding"], s["stride"])
            got = got.to_torch() if hasattr(got, "to_torch") else torch.as_tensor(got.numpy())
        except NotImplementedError:
            return "your unfold is not written yet"
        except Exception as e:
            return f"your unfold raised {type(e).__name__}: {e}"
        want = F.unfold(x, s["kernel"], s["dilation"], s["padding"], s["stride"])
        if tuple(got.shape) != tuple(want.shape):
            return f"your unfold's shape is {tuple(got.shape)}, torch's {tuple(want.shape)}"
        wrong = (got.double() != want).nonzero().tolist()
        if wrong:
            _, r, col = wrong[0]
            return (f"{len(wrong)} entries differ; the first, row {r}, column {col}: yours "
                    f"{_entry(got[0, r, col])}, torch's {_entry(want[0, r, col])}")
        return "same"

    # --- what is on screen --------------------------------------------------------------
    def state(self) -> dict:
        """What the widget shows now, as plain data: the window, its taps in the padded image, the im2col
        column and row selected and the storage positions each reads (what the drawing and the tests use)."""
        s = self.settings
        (c, h, w), (kh, kw) = s["input"], s["kernel"]
        (i, j), (rc, rp, rq) = self.window.value, self.row.value
        column = i * self.out_size[1] + j
        row = (rc * kh + rp) * kw + rq
        taps = []  # (channel, row, column) of the image, negative or past the edge in the padding
        for ch in range(c):
            for p in range(kh):
                for q in range(kw):
                    taps.append((ch, i * s["stride"][0] - s["padding"][0] + p * s["dilation"][0],
                                 j * s["stride"][1] - s["padding"][1] + q * s["dilation"][1]))
        window_positions = sorted(r[column] for r in self.matrix if r[column] is not None)
        row_positions = self.matrix[row]
        return {**s, "out_size": self.out_size, "window": (i, j), "column": column, "row": row,
                "row_tap": (rc, rp, rq), "taps": taps, "window_positions": window_positions,
                "padding_taps": sum(1 for r in self.matrix if r[column] is None),
                "row_positions": row_positions, "matrix_shape": (len(self.matrix), len(self.matrix[0])),
                "storage_size": c * h * w, "yours": self.yours}

    def _render(self) -> None:
        if self._quiet or self.window.value is None or self.row.value is None:
            return
        s = self.state()
        (c, h, w), (i, j) = s["input"], s["window"]
        parts = [f"<p><b>x</b>: one image ({c}, {h}, {w}), each cell its storage position; "
                 f"<b>output</b> {s['out_size'][0]} × {s['out_size'][1]}; window <b>out[{i}, {j}]</b> reads "
                 f"{len(s['window_positions'])} pixels and {s['padding_taps']} zeros of the padding</p>"]
        if s["yours"] is not None:
            ok = s["yours"] == "same"
            text = "your unfold gives the same matrix ✓" if ok else escape(s["yours"]) + " ✗"
            parts.append(f"<p style='color:{'#1a7f37' if ok else '#cf222e'}'>{text}</p>")
        parts += [f"<table><tr><td style='vertical-align:top;padding-right:24px'>{self._image_html(s)}</td>"
                  f"<td style='vertical-align:top'>{self._output_html(s)}</td></tr></table>",
                  self._storage_html(s), self._matrix_html(s)]
        self.html.value = "".join(parts)

    def _image_html(self, s) -> str:
        (c, h, w), (ph, pw) = s["input"], s["padding"]
        taps = set(s["taps"])
        row_cells = {p for p in s["row_positions"] if p is not None}
        tables = []
        for ch in range(c):
            cells = []
            for y in range(-ph, h + ph):
                line = []
                for x in range(-pw, w + pw):
                    inside = 0 <= y < h and 0 <= x < w
                    position = (ch * h + y) * w + x if inside else None
                    colour = _colour((ch, y, x) in taps, position in row_cells)
                    colour = colour or ("#eee" if not inside else "")
                    label = position if inside else PAD
                    cls = "tap" if (ch, y, x) in taps else ("pad" if not inside else "pixel")
                    line.append(f"<td class='{cls}' style='{_CELL};background:{colour}'>{label}</td>")
                cells.append("<tr>" + "".join(line) + "</tr>")
            tables.append(f"<td style='vertical-align:top;padding-right:12px'><small>channel {ch}</small>"
                          f"<table style='border-collapse:collapse' class='conv-image'>{''.join(cells)}</table></td>")
        return ("<p><b>the padded input</b> (grey ·: a zero of the padding; orange: the window's taps, its "
                "receptive field; blue: what the selected matrix row reads)</p><table><tr>" + "".join(tables)
                + "</tr></table>")

    def _output_html(self, s) -> str:
        rows = []
        for i in range(s["out_size"][0]):
            line = "".join(f"<td class='{'selected' if (i, j) == s['window'] else 'out'}' style='{_CELL};background:"
                           f"{TAP if (i, j) == s['window'] else ''}'>{i},{j}</td>" for j in range(s["out_size"][1]))
            rows.append(f"<tr>{line}</tr>")
        return ("<p><b>the output</b> (one pixel per window position)</p>"
                "<table style='border-collapse:collapse' class='conv-output'>" + "".join(rows) + "</table>")

    def _storage_html(self, s) -> str:
        window, row = set(s["window_positions"]), {p for p in s["row_positions"] if p is not None}
        read = [p for p in s["row_positions"] if p is not None]
        steps = sorted({b - a for a, b in zip(read, read[1:])})  # (across one row of windows, then to the next)
        cells = "".join(f"<td class='{'tap' if p in window else ''}' style='{_CELL};background:"
                        f"{_colour(p in window, p in row)}'>{p}</td>" for p in range(s["storage_size"]))
        c, p, q = s["row_tap"]
        return (f"<p><b>x's storage</b>: the window's cells orange; matrix row {s['row']} (channel {c}, tap "
                f"({p}, {q})) reads the blue ones, one per window, steps {', '.join(map(str, steps)) or '—'} apart: "
                "a row of the matrix is a strided view of the storage</p>"
                f"<table style='border-collapse:collapse' class='conv-storage'><tr>{cells}</tr></table>")

    def _matrix_html(self, s) -> str:
        rows_n, cols_n = s["matrix_shape"]
        head = "<tr><th></th>" + "".join(
            f"<th style='font-size:10px'>{k // s['out_size'][1]},{k % s['out_size'][1]}</th>" for k in range(cols_n))
        body = []
        kh, kw = s["kernel"]
        for r in range(rows_n):
            line = [f"<th style='font-size:10px;text-align:right'>c{r // (kh * kw)} ({r // kw % kh},{r % kw})</th>"]
            for k, position in enumerate(self.matrix[r]):
                colour = _colour(k == s["column"], r == s["row"]) or ("#eee" if position is None else "")
                line.append(f"<td style='{_CELL};background:{colour}'>{PAD if position is None else position}</td>")
            body.append("<tr>" + "".join(line) + "</tr>")
        return (f"<p><b>the im2col matrix</b> <code>F.unfold(x, {s['kernel']}, {s['dilation']}, {s['padding']}, "
                f"{s['stride']})[0]</code>, {rows_n} × {cols_n}: column = window, row = (channel, tap); each entry "
                "the storage position it copies, · a zero of the padding</p>"
                "<table style='border-collapse:collapse' class='conv-matrix'>" + head + "</tr>" + "".join(body)
                + "</table>")


def _colour(in_window: bool, in_row: bool) -> str:
    return BOTH if in_window and in_row else TAP if in_window else ROW if in_row else ""


def _entry(v) -> str:
    v = float(v)
    return "0 (padding)" if v == 0 else f"position {int(v) - 1}" if v.is_integer() else f"{v:g}"


def explore(unfold=None, from_torch=None, **kw):
    """Show a ConvExplorer in a notebook cell: ``explore(unfold, from_torch, input_shape=(2, 5, 5))``."""
    return ConvExplorer(unfold, from_torch, **kw).widget
