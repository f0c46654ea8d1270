"""One training step as a timeline of nested bars: chapter 08's profiler, drawn.

In a notebook::

    from course.widgets.profiler_timeline import explore
    explore({"step 1": timeline(prof), ...})

The widget knows nothing of picotorch or torch: it draws the plain data the chapter's ``timeline(prof)`` gives
it. A run is a list of events in the order they began, each a dict::

    {"name": "linear", "start_us": 12.0, "end_us": 30.5, "depth": 1,
     "shapes": [[64, 16], [32, 16], [32]], "dtypes": ["float32", ...], "out_dtypes": ["float32"],
     "bytes": 8192, "self_us": 18.5}

``depth`` is how many events enclose it (0 for the outermost: the ``record_function`` ranges forward, backward
and optimizer, or an operator called outside any range). A bar's colour is the dtype of what it returned, so
that an autocast run shows its bfloat16 and float16 operators at a glance; hovering over a bar shows its
shapes, input dtypes, output dtypes and bytes.
"""
from __future__ import annotations

from html import escape

import ipywidgets as widgets

__all__ = ["TimelineExplorer", "explore", "parse_run", "bars", "tooltip", "averages", "part_names", "from_torch_calls",
           "DTYPE_COLOURS"]

DTYPE_COLOURS = {"float32": "#4c78a8", "float64": "#7a5195", "bfloat16": "#f58518", "float16": "#e45756",
                 "int64": "#72b7b2", "bool": "#b0b0b0"}
RANGE_COLOUR = "#d9d9d9"  # a record_function range: no tensors of its own
WIDTH, ROW = 900, 22
NEEDED = ("name", "start_us", "end_us", "depth")


def parse_run(events) -> list:
    """The events of one run, checked: every field the drawing needs, each end after its start, each event inside
    the one that encloses it. Raises ValueError with the first problem."""
    out, open_ = [], []
    for i, e in enumerate(events):
        missing = [k for k in NEEDED if k not in e]
        if missing:
            raise ValueError(f"event {i} ({e.get('name', '?')}) has no {', '.join(missing)}")
        if e["end_us"] < e["start_us"]:
            raise ValueError(f"event {i} ({e['name']}) ends at {e['end_us']} us, before it starts "
                             f"({e['start_us']} us)")
        while open_ and open_[-1]["depth"] >= e["depth"]:
            open_.pop()
        if len(open_) != e["depth"]:
            raise ValueError(f"event {i} ({e['name']}) is at depth {e['depth']} but {len(open_)} events enclose it")
        if open_ and not (open_[-1]["start_us"] <= e["start_us"] and e["end_us"] <= open_[-1]["end_us"]):
            raise ValueError(f"event {i} ({e['name']}) does not lie inside {open_[-1]['name']}")
        full = {"shapes": [], "dtypes": [], "out_dtypes": [], "bytes": 0,
                "self_us": e["end_us"] - e["start_us"], **e}
        out.append(full)
        open_.append(full)
    return out


def from_torch_calls(calls) -> list:
    """torch.profiler's calls (`course.testing.profile_log.torch_profile_of`'s TorchCalls) as a run: the same step
    seen by torch, beside yours, or instead of yours before your profiler is written."""
    first = min((c.start_us for c in calls), default=0.0)
    depth, run = {}, []
    for i, c in enumerate(calls):
        depth[i] = 0 if c.parent is None else depth[c.parent] + 1
        if c.name == "[memory]":  # torch's allocation records: instants, not calls
            continue
        inside = sum(calls[j].end_us - calls[j].start_us for j in c.children)
        run.append({"name": c.name, "start_us": c.start_us - first, "end_us": c.end_us - first, "depth": depth[i],
                    "shapes": [list(s) for s in c.shapes], "dtypes": list(c.dtypes), "out_dtypes": [],
                    "bytes": c.bytes, "self_us": c.end_us - c.start_us - inside})
    return run


def part_names(events) -> list:
    """The outermost events' names, in order, once each: the parts a run can be zoomed to."""
    names = []
    for e in events:
        if e["depth"] == 0 and e["name"] not in names:
            names.append(e["name"])
    return names


def window(events, part: str | None) -> tuple:
    """(start, end) in microseconds of the whole run, or of the outermost events named part."""
    chosen = [e for e in events if part is None or (e["depth"] == 0 and e["name"] == part)]
    if not chosen:
        return 0.0, 1.0
    return min(e["start_us"] for e in chosen), max(e["end_us"] for e in chosen)


def bars(events, part: str | None = None, width: int = WIDTH) -> list:
    """Where each event inside the window is drawn: dicts with the event, x, w (pixels, at least 1) and y."""
    start, end = window(events, part)
    scale = width / max(end - start, 1e-9)
    out = []
    for e in events:
        if e["start_us"] < start or e["end_us"] > end:  # only what lies in the part (a part holds its calls)
            continue
        x = (e["start_us"] - start) * scale
        w = max((e["end_us"] - e["start_us"]) * scale, 1.0)
        out.append({"event": e, "x": x, "w": w, "y": e["depth"] * ROW})
    return out


def colour(e) -> str:
    """A bar's fill: the dtype its call returned (a range, which returns nothing, has its own)."""
    if not e["shapes"] and not e["out_dtypes"]:
        return RANGE_COLOUR
    return DTYPE_COLOURS.get((e["out_dtypes"] or e["dtypes"] or ["?"])[0], "#9d755d")


def tooltip(e) -> str:
    """What hovering over an event's bar shows."""
    lines = [f"{e['name']}: {e['end_us'] - e['start_us']:.1f} us (self {e['self_us']:.1f} us)"]
    if e["shapes"]:
        args = ", ".join(f"{d} {tuple(s)}" for s, d in zip(e["shapes"], e["dtypes"]))
        lines.append(f"inputs: {args}")
    if e["out_dtypes"]:
        lines.append(f"returns: {', '.join(e['out_dtypes'])}")
        floats = {d for d in e["dtypes"] if d.startswith(("float", "bfloat"))}
        if floats and set(e["out_dtypes"]) - floats - {"bool", "int64"}:
            lines.append(f"cast: {', '.join(sorted(floats))} in, {', '.join(e['out_dtypes'])} out (autocast)")
    if e["bytes"]:
        lines.append(f"allocated: {e['bytes']} bytes")
    return "\n".join(lines)


def averages(events) -> list:
    """(name, calls, self us, total us) per operator name, the most self time first: key_averages()."""
    rows = {}
    for e in events:
        row = rows.setdefault(e["name"], [e["name"], 0, 0.0, 0.0])
        row[1] += 1
        row[2] += e["self_us"]
        row[3] += e["end_us"] - e["start_us"]
    return sorted((tuple(r) for r in rows.values()), key=lambda r: -r[2])


def svg(events, part: str | None = None) -> str:
    """The timeline of `events` (or of the part named `part`) as nested bars, one row per depth, in SVG."""
    placed = bars(events, part)
    height = (max((b["event"]["depth"] for b in placed), default=0) + 1) * ROW + 4
    shapes = []
    for b in placed:
        e = b["event"]
        label = escape(e["name"]) if b["w"] > 7 * len(e["name"]) else ""
        shapes.append(f"<g><title>{escape(tooltip(e))}</title>"
                      f"<rect x='{b['x']:.1f}' y='{b['y']}' width='{b['w']:.1f}' height='{ROW - 3}' "
                      f"fill='{colour(e)}' stroke='#555' stroke-width='0.5'/>"
                      f"<text x='{b['x'] + 3:.1f}' y='{b['y'] + 14}' font-size='11' fill='#111' "
                      f"pointer-events='none'>{label}</text></g>")
    return (f"<svg width='{WIDTH}' height='{height}' xmlns='http://www.w3.org/2000/svg' "
            f"style='font-family:sans-serif'>{''.join(shapes)}</svg>")


class TimelineExplorer:
    """Runs (one training step each) as timelines: step through the runs, zoom to one part of a run."""

    def __init__(self, runs: dict, start: int = 0):
        if not runs:
            raise ValueError("explore() needs at least one run: {title: events}")
        self.titles = list(runs)
        self.runs = {title: parse_run(events) for title, events in runs.items()}
        self.index = start % len(self.titles)
        self.part = None
        self.part_button = widgets.Button(description="Next part", button_style="primary")
        self.next_button = widgets.Button(description="Next run")
        self.parts = widgets.ToggleButtons(options=["whole run"], description="zoom")
        self.html = widgets.HTML()
        self.part_button.on_click(lambda _: self.next_part())
        self.next_button.on_click(lambda _: self.next_run())
        self._switching = False
        self.parts.observe(self._part_chosen, names="value")
        self.widget = widgets.VBox([widgets.HBox([self.part_button, self.next_button]), self.parts, self.html])
        self._show()

    @property
    def title(self) -> str:
        """The run shown now (float32, or under autocast)."""
        return self.titles[self.index]

    @property
    def events(self) -> list:
        """The recorded calls of the run shown now."""
        return self.runs[self.title]

    def next_run(self) -> None:
        """Show the next run, whole (the "Next run" button)."""
        self.index = (self.index + 1) % len(self.titles)
        self.part = None
        self._show()

    def next_part(self) -> None:
        """Zoom to the next part of the run (forward, backward, optimizer...), after the last back to the whole."""
        options = list(self.parts.options)
        self.parts.value = options[(options.index(self.parts.value) + 1) % len(options)]

    def zoom(self, part: str | None) -> None:
        """Show only the outermost events named part (and what they hold), or the whole run for None."""
        if part is not None and part not in part_names(self.events):
            raise ValueError(f"{part!r} is not a part of {self.title}: {part_names(self.events)}")
        self.part = part
        self._render()

    def _part_chosen(self, change) -> None:
        if not self._switching:
            self.zoom(None if change["new"] == "whole run" else change["new"])

    def _show(self) -> None:
        self._switching = True  # new options reset the toggle's value: not a zoom
        self.parts.options = ["whole run"] + part_names(self.events)
        self.parts.value = "whole run"
        self._switching = False
        self._render()

    def shown(self) -> list:
        """The events of the part on screen (the whole run when not zoomed): what the table adds up."""
        return [b["event"] for b in bars(self.events, self.part)]

    def state(self) -> dict:
        """What the widget shows now, as plain data (the tests read it): the run, the part, its bars and span."""
        start, end = window(self.events, self.part)
        return {"title": self.title, "part": self.part, "bars": len(bars(self.events, self.part)),
                "span_us": end - start, "dtypes": sorted({d for e in self.events for d in e["out_dtypes"]}),
                "colours": sorted({d for e in self.events for d in (e["out_dtypes"] or e["dtypes"])[:1]})}

    def _render(self) -> None:
        s = self.state()
        rows = "".join(f"<tr><td>{escape(name)}</td><td align='right'>{calls}</td>"
                       f"<td align='right'>{own:.1f}</td><td align='right'>{total:.1f}</td></tr>"
                       for name, calls, own, total in averages(self.shown())[:8])
        legend = " ".join(f"<span style='background:{DTYPE_COLOURS.get(d, '#9d755d')};color:white;padding:0 4px'>"
                          f"{escape(d)}</span>" for d in s["colours"])
        self.html.value = (
            f"<p><b>{escape(s['title'])}</b> ({self.index + 1} of {len(self.titles)}): "
            f"{s['span_us']:.0f} us shown, {s['bars']} calls. Bar colour: the dtype returned (or taken) {legend}; "
            f"grey: a range. Hover over a bar for its shapes and dtypes.</p>"
            + svg(self.events, self.part)
            + "<table><tr><th>operator</th><th>calls</th><th>self us</th><th>total us</th></tr>" + rows + "</table>")


def explore(runs: dict, start: int = 0) -> widgets.VBox:
    """Show a TimelineExplorer in a notebook cell: ``explore({"step 1": timeline(prof), ...})``."""
    return TimelineExplorer(runs, start=start).widget
