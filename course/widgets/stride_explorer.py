"""A stride explorer: where does each element of a view live in its storage?

In a notebook::

    from course.widgets.stride_explorer import explore
    explore()               # torch's layout (and picotorch's, where it can be imported)
    explore(from_torch)     # your chapter 01 picotorch beside torch

Choose a shape and a chain of view operations (``transpose``, ``[1:, ::2]``,
``expand``...). The storage is drawn as a row of cells and the tensor as a grid;
selecting an element (or hovering over it) shows ``offset + Σ index × stride =
position``. The same chain runs on torch and on your picotorch tensor over the
same memory (made by ``from_torch``), and their shape, strides and offset are
shown side by side. The explorer holds no implementation of the views: the
layouts it shows are torch's and yours.
"""
from __future__ import annotations

import ast
import itertools
import math
from html import escape

import ipywidgets as widgets
import torch

from course.testing.views import Op

# operation -> hint for its arguments (as you would type them between the parentheses)
OPS = {
    "transpose": "dim0, dim1",
    "permute": "dims, e.g. 2, 0, 1",
    "T": "(no arguments)",
    "mT": "(no arguments)",
    "view": "shape, e.g. 2, -1",
    "reshape": "shape, e.g. 2, -1",
    "unsqueeze": "dim",
    "squeeze": "dim, or nothing for all",
    "flatten": "start_dim, end_dim",
    "narrow": "dim, start, length",
    "expand": "sizes, e.g. 2, -1, 4",
    "broadcast_to": "shape, e.g. (2, 3, 4)",
    "as_strided": "size, stride[, offset], e.g. (2, 2), (1, 2)",
    "[ ]": "index, e.g. 1:, ::2, None, ...",
    "contiguous": "(no arguments)",
    "clone": "(no arguments)",
}
MAX_ELEMENTS = 400  # elements listed for selection and drawn in the grid
MAX_STORAGE = 400   # storage cells drawn


class ArgumentError(ValueError):
    """Arguments the explorer cannot read; the message says what it expected."""


def parse_key(text: str):
    """An index key from text such as '1:, ::2, None, ...' (ints, slices, None and ... only)."""
    parts = [p.strip() for p in text.split(",")]
    if parts and parts[-1] == "" and len(parts) > 1:
        parts = parts[:-1]
    key = []
    for part in parts:
        if part == "None":
            key.append(None)
        elif part in ("...", "Ellipsis"):
            key.append(Ellipsis)
        elif ":" in part:
            bits = part.split(":")
            if len(bits) > 3:
                raise ArgumentError(f"{part!r} is not a slice (start:stop:step)")
            try:
                numbers = [int(b) if b.strip() else None for b in bits]
            except ValueError:
                raise ArgumentError(f"{part!r}: a slice takes whole numbers, like 1:5:2") from None
            key.append(slice(*numbers))
        else:
            try:
                key.append(int(part))
            except ValueError:
                raise ArgumentError(f"{part!r}: an index is an int, a slice like 1:3 or ::2, None or ...") from None
    return key[0] if len(key) == 1 and not text.strip().endswith(",") else tuple(key)


def parse_args(text: str) -> tuple:
    """Python literals separated by commas: '0, 1' -> (0, 1); '(2, 2), (1, 2)' -> ((2, 2), (1, 2))."""
    if not text.strip():
        return ()
    try:
        value = ast.literal_eval(f"({text},)")
    except (ValueError, SyntaxError):
        raise ArgumentError(f"cannot read {text!r}: write numbers and tuples separated by commas") from None
    return value


class Step(Op):
    """One operation of the chain, as the student typed it, applied the same way to a torch tensor and to
    a picotorch one (course.testing's Op, which the chapters' tests build their chains from)."""

    def __init__(self, name: str, args_text: str = ""):
        if name not in OPS:
            raise ArgumentError(f"unknown operation {name!r}; known: {', '.join(OPS)}")
        if name in ("T", "mT", "contiguous", "clone") and args_text.strip():
            raise ArgumentError(f"{name} takes no arguments")
        self.args_text = args_text.strip()
        if name == "[ ]":
            super().__init__("getitem", parse_key(self.args_text))
        else:
            super().__init__(name, *parse_args(self.args_text))

    def __str__(self):
        if self.name == "getitem":
            return f"[{self.args_text}]"
        if self.name in ("T", "mT"):
            return f".{self.name}"
        return f".{self.name}({self.args_text})"

    __repr__ = __str__


def _reference_from_torch():
    """picotorch's from_torch where picotorch can be imported (chapter 02 on, or the project's build)."""
    try:
        import picotorch
        return picotorch.from_torch
    except Exception:
        return None


def _index_text(index) -> str:
    return "[" + ", ".join(str(i) for i in index) + "]"


def arithmetic(index, stride, offset) -> tuple[str, int]:
    """('2 + 1×4 + 0×1 = 6', 6): where element `index` lives, written out."""
    position = offset + sum(i * s for i, s in zip(index, stride))
    terms = [str(offset)] + [f"{i}×{s}" for i, s in zip(index, stride)]
    return " + ".join(terms) + f" = {position}", position


class StrideExplorer:
    """The explorer's state and widgets; ``state()`` says what is on screen, for tests and for you."""

    def __init__(self, from_torch=None, shape=(3, 4), chain=(("transpose", "0, 1"),), dtype=torch.float32):
        if from_torch is None:
            from_torch, self.label = _reference_from_torch(), "picotorch"
        else:
            self.label = "yours"
        self.from_torch = from_torch
        self.dtype = dtype
        self.shape_text = widgets.Text(value=", ".join(map(str, shape)), description="shape",
                                       continuous_update=False)
        self.op = widgets.Dropdown(options=list(OPS), value="transpose", description="operation")
        self.args = widgets.Text(value="", placeholder=OPS["transpose"], description="arguments",
                                 continuous_update=False)
        self.add_button = widgets.Button(description="Add to chain", button_style="primary")
        self.remove_button = widgets.Button(description="Remove last")
        self.clear_button = widgets.Button(description="Clear chain")
        self.element = widgets.Dropdown(options=[], description="element")
        self.message = widgets.HTML()
        self.html = widgets.HTML()
        self.steps: list[Step] = [Step(name, args) for name, args in chain]
        self.add_button.on_click(lambda _: self.add_step())
        self.remove_button.on_click(lambda _: self.remove_step())
        self.clear_button.on_click(lambda _: self.clear())
        self.shape_text.observe(lambda _: self._recompute(), names="value")
        self.op.observe(self._op_changed, names="value")
        self.element.observe(lambda _: self._render(), names="value")
        self.widget = widgets.VBox([
            self.shape_text,
            widgets.HBox([self.op, self.args]),
            widgets.HBox([self.add_button, self.remove_button, self.clear_button]),
            self.message, self.element, self.html,
        ])
        self._recompute()

    # --- the controls -------------------------------------------------------------------
    def add_step(self, name: str | None = None, args: str | None = None) -> bool:
        """Append an operation (the dropdown's and text box's, unless given); False if unreadable."""
        try:
            step = Step(self.op.value if name is None else name, self.args.value if args is None else args)
        except ArgumentError as e:
            self.message.value = f"<span style='color:#cf222e'>{escape(str(e))}</span>"
            return False
        self.message.value = ""
        self.steps.append(step)
        self._recompute()
        return True

    def remove_step(self):
        """Drop the last view operation of the chain, and recompute."""
        if self.steps:
            self.steps.pop()
        self._recompute()

    def clear(self):
        """Drop every view operation of the chain, and recompute."""
        self.steps.clear()
        self._recompute()

    def select(self, index):
        """Select the element at `index` (a tuple)."""
        self.element.value = tuple(index)

    def _op_changed(self, change):
        self.args.placeholder = OPS[change["new"]]

    # --- computing both sides -----------------------------------------------------------
    def _shape(self) -> tuple:
        text = self.shape_text.value.strip()
        if not text:
            return ()
        value = parse_args(text)
        if len(value) == 1 and isinstance(value[0], tuple):
            value = value[0]
        if not all(isinstance(v, int) and v >= 0 for v in value):
            raise ArgumentError(f"a shape is sizes separated by commas, like 3, 4; got {text!r}")
        if math.prod(value) > 4096:
            raise ArgumentError("keep the shape small (at most 4096 elements) so that it can be drawn")
        return tuple(value)

    def _recompute(self):
        try:
            shape = self._shape()
            self.message.value = ""
        except ArgumentError as e:
            self.message.value = f"<span style='color:#cf222e'>{escape(str(e))}</span>"
            shape = getattr(self, "base_shape", (3, 4))
        self.base_shape = shape
        n = math.prod(shape)
        self.base = torch.arange(n, dtype=self.dtype).reshape(shape)  # each value is its storage position
        self.torch_result, self.torch_error = self._run(lambda x: x, self.base)
        self.ours_base = self.ours_result = self.ours_error = None
        if self.from_torch is not None:
            try:
                self.ours_base = self.from_torch(self.base)
            except NotImplementedError:
                self.ours_error = "from_torch is not written yet"
            except Exception as e:
                self.ours_error = f"from_torch raised {type(e).__name__}: {e}"
            else:
                self.ours_result, self.ours_error = self._run(lambda x: x, self.ours_base)
        t = self.torch_result
        options = []
        if t is not None:
            for index in itertools.islice(itertools.product(*(range(s) for s in t.shape)), MAX_ELEMENTS):
                options.append((_index_text(index), index))
        old = self.element.value
        self.element.options = options
        values = [v for _, v in options]
        if old in values:
            self.element.value = old
        self._render()

    def _run(self, start, base):
        """(result, None) or (last good result, error text) of the chain on base."""
        x = start(base)
        for i, step in enumerate(self.steps):
            try:
                x = step(x)
            except NotImplementedError:
                return None, f"step {i + 1}, {step}: not written yet (NotImplementedError)"
            except AttributeError as e:
                if isinstance(x, torch.Tensor):
                    return None, f"step {i + 1}, {step}: {type(e).__name__}: {e}"
                # A method the chapter adds to Tensor later (its section has not run yet): not an error of yours.
                return None, f"step {i + 1}, {step}: not there yet (the chapter adds it later: {e})"
            except Exception as e:
                return None, f"step {i + 1}, {step}: {type(e).__name__}: {e}"
        return x, None

    def chain_text(self) -> str:
        """The chain of view operations as code, starting from x."""
        return "x" + "".join(str(s) for s in self.steps)

    # --- what is on screen --------------------------------------------------------------
    def _layout(self, t, base, is_torch: bool) -> dict:
        info = {"shape": tuple(t.shape), "stride": tuple(t.stride()), "offset": t.storage_offset()}
        try:
            info["contiguous"] = bool(t.is_contiguous())
        except (NotImplementedError, AttributeError):  # (exercise 2 adds is_contiguous to Tensor)
            info["contiguous"] = "not written yet"
        except Exception as e:
            info["contiguous"] = f"{type(e).__name__}"
        if is_torch:
            info["shares"] = t.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
        else:
            info["shares"] = t.untyped_storage() is base.untyped_storage()
        return info

    def state(self) -> dict:
        """What the widget shows, as plain data (for tests and the browser check)."""
        s = {"shape": self.base_shape, "chain": self.chain_text(), "label": self.label,
             "torch": None, "torch_error": self.torch_error, "yours": None, "yours_error": self.ours_error,
             "selected": None, "arithmetic": None, "position": None, "yours_arithmetic": None,
             "yours_position": None, "storage_size": None, "view_positions": []}
        t = self.torch_result
        if t is not None:
            s["torch"] = self._layout(t, self.base, True)
            s["storage_size"] = t.untyped_storage().nbytes() // t.element_size()
            s["view_positions"] = sorted({arithmetic(i, t.stride(), t.storage_offset())[1] for _, i in self.element.options})
        if self.ours_result is not None:
            s["yours"] = self._layout(self.ours_result, self.ours_base, False)
        index = self.element.value
        if t is not None and index is not None:
            s["selected"] = index
            s["arithmetic"], s["position"] = arithmetic(index, t.stride(), t.storage_offset())
            if s["yours"] is not None and len(s["yours"]["stride"]) == len(index):
                s["yours_arithmetic"], s["yours_position"] = arithmetic(index, s["yours"]["stride"], s["yours"]["offset"])
        return s

    def _render(self):
        s = self.state()
        parts = [f"<p><b>x</b> = arange({math.prod(s['shape'])}).view{s['shape']} &nbsp; "
                 f"<b>chain</b> <code>{escape(s['chain'])}</code></p>"]
        parts.append(self._comparison_html(s))
        if s["torch"] is not None:
            parts.append(self._storage_html(s))
            parts.append(self._grid_html(s))
            if s["arithmetic"] is not None:
                line = (f"<p><b>{escape(_index_text(s['selected']))}</b>: offset + Σ index × stride = "
                        f"<code>{escape(s['arithmetic'])}</code> (torch)")
                if s["yours_arithmetic"] is not None:
                    mark = "✓" if s["yours_position"] == s["position"] else "✗"
                    line += f"<br>{self.label}: <code>{escape(s['yours_arithmetic'])}</code> {mark}"
                parts.append(line + "</p>")
        self.html.value = "".join(parts)

    def _comparison_html(self, s) -> str:
        rows = [("shape", "shape"), ("stride()", "stride"), ("storage_offset()", "offset"),
                ("is_contiguous()", "contiguous"), ("shares memory with x", "shares")]
        has_ours = self.from_torch is not None
        head = "<tr><th></th><th>torch</th>" + (f"<th>{escape(self.label)}</th><th></th>" if has_ours else "") + "</tr>"
        body = []
        for label, key in rows:
            theirs = "—" if s["torch"] is None else str(s["torch"][key])
            cells = f"<td><code>{escape(label)}</code></td><td>{escape(theirs)}</td>"
            if has_ours:
                ours = "—" if s["yours"] is None else str(s["yours"][key])
                mark = "" if s["yours"] is None or s["torch"] is None else (
                    "<span style='color:#1a7f37'>✓</span>" if ours == theirs else "<span style='color:#cf222e'>✗</span>")
                cells += f"<td>{escape(ours)}</td><td>{mark}</td>"
            body.append(f"<tr>{cells}</tr>")
        notes = []
        if s["torch_error"]:
            notes.append(f"torch: {escape(s['torch_error'])}")
        if has_ours and s["yours_error"]:
            notes.append(f"{escape(self.label)}: {escape(s['yours_error'])}")
        if not has_ours:
            notes.append("pass your from_torch to explore() to see your picotorch beside torch")
        return ("<table style='border-collapse:collapse' class='stride-compare'>" + head + "".join(body) + "</table>"
                + "".join(f"<p style='color:#9a6700'>{n}</p>" for n in notes))

    def _storage_html(self, s) -> str:
        t = self.torch_result
        n = s["storage_size"]
        values = t.as_strided((n,), (1,), 0).tolist() if n else []
        used = set(s["view_positions"])
        cells = []
        for pos in range(min(n, MAX_STORAGE)):
            style = "border:1px solid #999;padding:2px 6px;text-align:center;min-width:2em"
            cls = ""
            if pos == s["position"]:
                style += ";background:#ffb000;font-weight:bold"
                cls = "selected"
            elif pos in used:
                style += ";background:#cfe8ff"
                cls = "in-view"
            cells.append(f"<td class='{cls}' data-pos='{pos}' style='{style}' title='storage[{pos}]'>"
                         f"{_fmt(values[pos])}<br><small style='color:#666'>{pos}</small></td>")
        more = f"<td>… {n - MAX_STORAGE} more</td>" if n > MAX_STORAGE else ""
        return ("<p><b>storage</b> (value, position below; blue: reached by the view)</p>"
                "<table style='border-collapse:collapse' class='stride-storage'><tr>" + "".join(cells) + more
                + "</tr></table>")

    def _grid_html(self, s) -> str:
        t = self.torch_result
        shape, stride, offset = tuple(t.shape), t.stride(), t.storage_offset()
        if t.numel() == 0:
            return f"<p><b>tensor</b>: shape {shape}, no elements</p>"
        values = t.flatten().tolist() if t.numel() <= MAX_ELEMENTS else None

        def cell(index):
            text, pos = arithmetic(index, stride, offset)
            flat = 0
            for i, size in zip(index, shape):
                flat = flat * size + i
            value = _fmt(values[flat]) if values is not None else ""
            style = "border:1px solid #999;padding:2px 8px;text-align:center"
            cls = "element"
            if index == s["selected"]:
                style += ";background:#ffb000;font-weight:bold"
                cls += " selected"
            return (f"<td class='{cls}' data-index='{_index_text(index)}' data-pos='{pos}' style='{style}' "
                    f"title='x{_index_text(index)}: {escape(text)}'>{value}</td>")

        def table(lead):
            if len(shape) == len(lead):
                rows = [[lead]]
            elif len(shape) - len(lead) == 1:
                rows = [[lead + (j,) for j in range(shape[-1])]]
            else:
                rows = [[lead + (i, j) for j in range(shape[-1])] for i in range(shape[-2])]
            return ("<table style='border-collapse:collapse;margin:4px' class='stride-grid'>"
                    + "".join("<tr>" + "".join(cell(ix) for ix in row) + "</tr>" for row in rows) + "</table>")

        leads = list(itertools.islice(itertools.product(*(range(n) for n in shape[:-2])), 24))
        parts = ["<p><b>tensor</b> (hover over an element for its arithmetic)</p>"]
        for lead in leads:
            if len(shape) > 2:
                parts.append(f"<p style='margin:2px'><code>x[{', '.join(map(str, lead))}, :, :]</code></p>")
            parts.append(table(lead))
        return "".join(parts)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def explore(from_torch=None, **kw):
    """Show a StrideExplorer in a notebook cell: ``explore(from_torch, shape=(2, 3, 4))``."""
    return StrideExplorer(from_torch, **kw).widget
