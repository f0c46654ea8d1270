"""A graph-passes viewer: the graph a compiler captured, and what each of its passes did to it.

In a notebook (chapter 06)::

    from course.widgets.graph_passes import explore
    explore(graph_stages([("captured", g), ("after dead-code elimination", eliminate_dead_code(g)), ...]))

One stage is shown at a time: "Next pass ▶" and "◀ Previous pass" step through them (both wrap around),
and the dropdown jumps to one. The graph is drawn top-down as SVG, each input above the nodes that use it:
placeholders (the function's inputs) on top, then call nodes labelled ``%name = op`` with their shape and
dtype, then the outputs. Call nodes of one fusion group share a colour, and so does the fused node that
replaces them; the legend under the graph says which kernel each colour is. A line above the graph counts
the call nodes by op and says what the pass changed: nodes removed as dead, merged into an identical one
(CSE), folded into a constant, fused into one kernel.

The viewer knows nothing of picotorch or torch: it draws the plain data the chapter's ``graph_stages``
gives it. A stage is ``{"title": str, "nodes": [node, ...]}`` with the nodes in topological order; a node
is a dict::

    {"name": "add", "op": "add", "kind": "call", "inputs": ["x", "y"],
     "shape": (3, 4), "dtype": "float32", "group": None, "members": []}

``kind`` is one of "placeholder", "constant", "call", "fused", "output"; ``inputs`` names earlier nodes of
the same stage, in argument order; ``group`` (an int or None) marks the fusion group of a call node (same
int, same kernel); ``members`` names the nodes a fused node replaced. ``shape``, ``dtype``, ``group`` and
``members`` may be left out. A fused node may also carry ``"source"``, the CUDA C it generated: it is shown
under the graph.
"""
from __future__ import annotations

import colorsys
from collections import Counter
from dataclasses import dataclass, field
from html import escape

import ipywidgets as widgets

KINDS = ("placeholder", "constant", "call", "fused", "output")
COMPUTING = ("call", "fused")  # the kinds that run an operator: the ones a pass counts
# Light fills that stay apart from one another (and from the white of unfused nodes); more groups than these
# get hues spread by the golden angle.
PALETTE = ("#ffd8a8", "#b2f2bb", "#a5d8ff", "#eebefa", "#ffec99", "#96f2d7", "#ffc9c9", "#d0bfff",
           "#c3fae8", "#e9d8a6")
MAX_MEMBERS_SHOWN = 6   # members listed inside a fused node's box; the legend lists them all
ROW_HEIGHT = 84         # vertical distance between two rows of the drawing
GAP = 26                # horizontal space between two boxes of a row
MARGIN = 20
LANE_CLEARANCE = 6      # least distance from an edge that skips rows to a box it passes


# ------------------------------------------------------------------ the data


@dataclass(frozen=True)
class Node:
    name: str
    op: str
    kind: str
    inputs: tuple = ()
    shape: tuple | None = None
    dtype: str | None = None
    group: int | None = None
    members: tuple = ()
    source: str | None = None


@dataclass
class Stage:
    title: str
    nodes: list
    by_name: dict = field(default_factory=dict)

    def __post_init__(self):
        self.by_name = {n.name: n for n in self.nodes}

    def users(self, name: str) -> list:
        """The nodes that take `name` as an input, in order."""
        return [n for n in self.nodes if name in n.inputs]


def parse_stages(stages) -> list:
    """The protocol's list of dicts as Stages, checked: a ValueError says which stage and node is wrong."""
    if isinstance(stages, dict) or not isinstance(stages, (list, tuple)):
        raise ValueError(f"explore() takes a list of stages, {{'title': ..., 'nodes': [...]}}; got a "
                         f"{type(stages).__name__}")
    if not stages:
        raise ValueError("explore() was given no stages: pass at least the captured graph")
    return [_parse_stage(stage, k) for k, stage in enumerate(stages)]


def _parse_stage(stage, k: int) -> Stage:
    if isinstance(stage, tuple) and len(stage) == 2:
        raise ValueError(f"stage {k} is a (title, graph) pair: turn the pairs into the widget's dicts with "
                         "graph_stages([...]) first")
    if not isinstance(stage, dict) or "nodes" not in stage:
        raise ValueError(f"stage {k} must be a dict {{'title': str, 'nodes': [...]}}; got {stage!r:.80}")
    title = str(stage.get("title", f"stage {k}"))
    where = f"stage {k} ({title!r})"
    if not isinstance(stage["nodes"], (list, tuple)):
        raise ValueError(f"{where}: 'nodes' must be a list of node dicts; got a {type(stage['nodes']).__name__}")
    nodes, seen = [], set()
    for i, raw in enumerate(stage["nodes"]):
        node = _parse_node(raw, f"{where}, node {i}")
        if node.name in seen:
            raise ValueError(f"{where}: two nodes are named {node.name!r}; names must be unique in a graph")
        for name in node.inputs:
            if name == node.name:
                raise ValueError(f"{where}: node {node.name!r} names itself as an input")
            if name not in seen:
                later = any(isinstance(r, dict) and r.get("name") == name for r in stage["nodes"])
                raise ValueError(
                    f"{where}: node {node.name!r} uses {name!r}, which comes after it; the nodes must be in "
                    "topological order" if later else
                    f"{where}: node {node.name!r} names an input {name!r} that does not exist in this stage")
        seen.add(node.name)
        nodes.append(node)
    return Stage(title, nodes)


def _parse_node(raw, where: str) -> Node:
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a dict with 'name', 'op', 'kind' and 'inputs'; got {raw!r:.80}")
    missing = [key for key in ("name", "op", "kind") if key not in raw]
    if missing:
        raise ValueError(f"{where} has no {', '.join(repr(m) for m in missing)}: {raw!r:.120}")
    name, kind = str(raw["name"]), raw["kind"]
    if kind not in KINDS:
        raise ValueError(f"{where} ({name!r}) has kind {kind!r}; a kind is one of {', '.join(KINDS)}")
    inputs = raw.get("inputs", ())
    if isinstance(inputs, str) or not all(isinstance(i, str) for i in inputs):
        raise ValueError(f"{where} ({name!r}): 'inputs' must be a list of node names; got {inputs!r:.80}")
    group = raw.get("group")
    if group is not None and (isinstance(group, bool) or not isinstance(group, int)):
        raise ValueError(f"{where} ({name!r}): 'group' must be an int or None; got {group!r}")
    shape = raw.get("shape")
    if shape is not None:
        if isinstance(shape, (str, bytes)) or not all(isinstance(s, int) for s in shape):
            raise ValueError(f"{where} ({name!r}): 'shape' must be a tuple of ints or None; got {shape!r}")
        shape = tuple(shape)
    members = raw.get("members") or ()
    if isinstance(members, str) or not all(isinstance(m, str) for m in members):
        raise ValueError(f"{where} ({name!r}): 'members' must be a list of node names; got {members!r:.80}")
    dtype = raw.get("dtype")
    return Node(name=name, op=str(raw["op"]), kind=kind, inputs=tuple(inputs), shape=shape,
                dtype=None if dtype is None else str(dtype), group=group, members=tuple(members),
                source=raw.get("source"))


# ------------------------------------------------------------------ counting and comparing stages


def op_counts(stage: Stage) -> dict:
    """{op: how many nodes run it}, over the call and fused nodes, in the order ops first appear."""
    return dict(Counter(n.op for n in stage.nodes if n.kind in COMPUTING))


def stage_diff(before: Stage, after: Stage) -> dict:
    """What a pass changed, from the two graphs alone:

    - "fused": {fused node: the members it replaced}, for the fused nodes new in `after`;
    - "merged": {node: the node it was merged into}: a node whose users now use an older node with the
      same op (common-subexpression elimination);
    - "folded": {node: the constant that replaced it}: a call node whose users now use a constant, or
      that became a constant itself (constant folding); inputs eaten by a fold count as folded too;
    - "removed": nodes that are gone and that nothing took the place of (dead code);
    - "replaced": {node: [what its users use now]}: gone, and taken over by something that is none of the above;
    - "added": nodes new in `after` that are none of the above.

    A gone node is placed by what its users use in its stead, position by position; the users are judged
    first (the nodes are walked backwards), so that chains merged or folded together are named as such."""
    fused = {n.name: list(n.members) for n in after.nodes if n.kind == "fused" and n.name not in before.by_name}
    fused_away = {m for members in fused.values() for m in members}
    folded_in_place = {n.name: n.name for n in after.nodes
                       if n.name in before.by_name and n.kind == "constant"
                       and before.by_name[n.name].kind in COMPUTING}
    # gone node -> ("merged" | "folded" | "removed" | "replaced", what took its place; None: a literal)
    verdict: dict = {}
    for node in reversed(before.nodes):
        if node.name in after.by_name or node.name in fused_away:
            continue
        verdict[node.name] = _judge(node, before, after, verdict, folded_in_place)
    out = {"fused": fused, "merged": {}, "folded": dict(folded_in_place), "removed": [], "replaced": {},
           "added": []}
    for node in before.nodes:  # in graph order
        if node.name not in verdict:
            continue
        kind, into = verdict[node.name]
        if kind == "removed":
            out["removed"].append(node.name)
        elif kind == "replaced":
            out["replaced"][node.name] = sorted(into, key=str)
        else:
            out[kind][node.name] = into if into is not None else "a literal"
    targets = set(fused) | set(out["folded"].values())
    out["added"] = [n.name for n in after.nodes if n.name not in before.by_name and n.name not in targets]
    return out


def _judge(node: Node, before: Stage, after: Stage, verdict: dict, folded_in_place: dict) -> tuple:
    """(what happened to `node`, what took its place), from what its users take in its stead."""
    stand_ins = set()
    for user in before.users(node.name):
        slots = [j for j, name in enumerate(user.inputs) if name == node.name]
        if user.name in folded_in_place:  # the user became a constant: `node` was folded into it
            stand_ins.add(user.name)
        elif user.name in after.by_name:
            now = after.by_name[user.name].inputs
            if len(now) == len(user.inputs):
                stand_ins.update(now[j] for j in slots)
            else:  # its arguments changed in number: the value went in as a literal
                stand_ins.add(None)
        elif user.name in verdict:
            kind, into = verdict[user.name]
            if kind == "merged":  # the user was merged into `into`: node's stand-in is that node's input
                kept = before.by_name[into].inputs
                stand_ins.update(kept[j] if j < len(kept) else None for j in slots)
            elif kind == "folded":
                stand_ins.add(into)
            # a user removed as dead leaves node dead as far as it goes
        # a user fused away says nothing about `node` (fused nodes and their members are shown apart)
    if not stand_ins:
        return ("removed", None)
    if len(stand_ins) == 1:
        into = next(iter(stand_ins))
        now = after.by_name.get(into)
        if into is None or now is not None and now.kind == "constant":
            return ("folded", into)  # None: folded into a literal argument
        was = before.by_name.get(into)
        if now is not None and was is not None and was.op == node.op and was.kind == node.kind:
            return ("merged", into)
    return ("replaced", {s if s is not None else "a literal" for s in stand_ins})


def _op_list(counts: dict) -> str:
    """'add ×2, exp, mul ×3'"""
    return ", ".join(op if k == 1 else f"{op} ×{k}" for op, k in counts.items())


def _names(names, limit: int = 8) -> str:
    names = list(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def describe_stage(stage: Stage) -> str:
    """'5 call nodes (add ×2, exp, mul ×2), 2 inputs, 1 output'"""
    counts = op_counts(stage)
    calls = sum(counts.values())
    kinds = Counter(n.kind for n in stage.nodes)
    parts = [f"{calls} call node{'s' if calls != 1 else ''}" + (f" ({_op_list(counts)})" if counts else ""),
             f"{kinds['placeholder']} input{'s' if kinds['placeholder'] != 1 else ''}",
             f"{kinds['output']} output{'s' if kinds['output'] != 1 else ''}"]
    if kinds["constant"]:
        parts.insert(1, f"{kinds['constant']} constant{'s' if kinds['constant'] != 1 else ''}")
    return ", ".join(parts)


def describe_change(before: Stage, after: Stage) -> str:
    """What the pass from `before` to `after` did, in one sentence; 'no change' when nothing did."""
    d = stage_diff(before, after)
    calls = (sum(op_counts(before).values()), sum(op_counts(after).values()))
    parts = []
    if d["removed"]:
        parts.append(f"removed {len(d['removed'])} (nothing used them): {_names(d['removed'])}")
    if d["merged"]:
        parts.append(f"merged {len(d['merged'])} into an identical node: "
                     + _names(f"{a} → {b}" for a, b in d["merged"].items()))
    if d["folded"]:
        parts.append(f"folded {len(d['folded'])} into constants: "
                     + _names(a if a == b else f"{a} → {b}" for a, b in d["folded"].items()))
    for name, members in d["fused"].items():
        parts.append(f"fused {len(members)} into one kernel, {name}: {' + '.join(members)}")
    if d["replaced"]:
        parts.append(f"replaced {len(d['replaced'])}: "
                     + _names(f"{a} → {' / '.join(b)}" for a, b in d["replaced"].items()))
    if d["added"]:
        parts.append(f"added {len(d['added'])}: {_names(d['added'])}")
    if not parts and [_signature(n) for n in before.nodes] == [_signature(n) for n in after.nodes]:
        return "no change"
    if not parts:
        parts.append("the same nodes, rewired or regrouped")
    return f"call nodes {calls[0]} → {calls[1]}; " + "; ".join(parts)


def _signature(node: Node) -> tuple:
    return (node.name, node.op, node.kind, node.inputs, node.group, node.members)


def summary(stages: list, index: int) -> dict:
    """The numbers of stage `index` and, after the first, what its pass changed."""
    stage = stages[index]
    return {"title": stage.title, "counts": op_counts(stage), "call_nodes": sum(op_counts(stage).values()),
            "text": describe_stage(stage),
            "change": describe_change(stages[index - 1], stage) if index > 0 else None,
            "diff": stage_diff(stages[index - 1], stage) if index > 0 else None}


# ------------------------------------------------------------------ colours


def colour_key(node: Node):
    """What decides a node's colour: its group; a fused node without one has a colour of its own."""
    if node.group is not None:
        return node.group
    if node.kind == "fused":
        return f"fused:{node.name}"
    return None


def group_colours(stages: list) -> dict:
    """{colour key: fill}, one distinct fill per group over all stages, so a group keeps its colour from
    one stage to the next; ints first in order, then the fused nodes without a group as they appear."""
    keys = []
    for stage in stages:
        for node in stage.nodes:
            key = colour_key(node)
            if key is not None and key not in keys:
                keys.append(key)
    keys.sort(key=lambda k: (isinstance(k, str), k if isinstance(k, int) else 0))  # stable: fused keep order
    colours, used = {}, set()
    for k, key in enumerate(keys):
        fill = PALETTE[k] if k < len(PALETTE) else _spread_colour(k)
        while fill in used:  # a golden-angle hue that rounds onto one already taken: step on
            k += len(PALETTE)
            fill = _spread_colour(k)
        colours[key] = fill
        used.add(fill)
    return colours


def _spread_colour(k: int) -> str:
    hue = (k * 0.618033988749895) % 1.0
    r, g, b = colorsys.hls_to_rgb(hue, 0.82, 0.75)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


def _darker(fill: str) -> str:
    """The outline for a fill: the same hue, darker."""
    r, g, b = (int(fill[i:i + 2], 16) / 255 for i in (1, 3, 5))
    h, _, s = colorsys.rgb_to_hls(r, g, b)
    r, g, b = colorsys.hls_to_rgb(h, 0.38, min(1.0, s + 0.1))
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


# ------------------------------------------------------------------ layout


@dataclass(frozen=True)
class Box:
    """Where a node is drawn: its centre (x, y), width and height, and its row (0 on top)."""
    x: float
    y: float
    width: float
    height: float
    row: int


def label_lines(node: Node) -> list:
    """The lines of text in a node's box."""
    if node.kind == "placeholder":
        head = node.name
    elif node.kind == "output":
        head = "output"
    elif node.kind == "constant":
        head = f"%{node.name} = constant"
    else:
        head = f"%{node.name} = {node.op}"
    lines = [head]
    meta = " ".join(p for p in (str(node.shape) if node.shape is not None else "", node.dtype or "") if p)
    if meta:
        lines.append(meta)
    if node.kind == "fused" and node.members:
        shown = list(node.members[:MAX_MEMBERS_SHOWN])
        more = f" +{len(node.members) - len(shown)}" if len(node.members) > len(shown) else ""
        lines.append("[" + " · ".join(shown) + more + "]")
    return lines


def rows(stage: Stage) -> dict:
    """{name: row}. An input is always in a higher row (smaller number) than every node that uses it:
    placeholders on row 0, a node one row below its lowest input, the outputs together on the last row, and
    what does not depend on any placeholder (constants and what is computed from them alone) as low as it
    can go: just above its first user, where constant folding will make it one constant."""
    row, from_inputs = {}, set()
    for node in stage.nodes:
        row[node.name] = 1 + max((row[i] for i in node.inputs), default=-1)
        if node.kind == "placeholder" or any(i in from_inputs for i in node.inputs):
            from_inputs.add(node.name)
    for node in reversed(stage.nodes):  # users first, so a chain of constants sinks as a whole
        users = stage.users(node.name)
        if node.name not in from_inputs and users:
            row[node.name] = min(row[u.name] for u in users) - 1
    outputs = [n.name for n in stage.nodes if n.kind == "output"]
    others = [row[n.name] for n in stage.nodes if n.kind != "output"]
    for name in outputs:
        row[name] = max(others, default=-1) + 1
    return row


def layout(stage: Stage) -> dict:
    """{name: Box}: the rows of `rows`, each row ordered by where its nodes' inputs are (fewer crossings)
    and centred; boxes of a row never overlap."""
    row = rows(stage)
    widths = {n.name: max(96, 7 * max(len(line) for line in label_lines(n)) + 22) for n in stage.nodes}
    heights = {n.name: 14 * len(label_lines(n)) + 12 for n in stage.nodes}
    by_row: dict = {}
    for node in stage.nodes:
        by_row.setdefault(row[node.name], []).append(node)
    width = max((sum(widths[n.name] + GAP for n in ns) for ns in by_row.values()), default=0) + 2 * MARGIN
    x_of, boxes = {}, {}
    for r in sorted(by_row):
        nodes = by_row[r]
        placed_inputs = {n.name: [x_of[i] for i in n.inputs if i in x_of] for n in nodes}
        order = {n.name: k for k, n in enumerate(nodes)}
        nodes.sort(key=lambda n: (sum(placed_inputs[n.name]) / len(placed_inputs[n.name])
                                  if placed_inputs[n.name] else -1, order[n.name]))
        x = (width - sum(widths[n.name] + GAP for n in nodes)) / 2 + GAP / 2
        for n in nodes:
            x_of[n.name] = x + widths[n.name] / 2
            boxes[n.name] = Box(x_of[n.name], _row_y(r), widths[n.name], heights[n.name], r)
            x += widths[n.name] + GAP
    return boxes


def edge_route(source: Box, user: Box, boxes) -> list:
    """The points an edge passes through, from the bottom of `source` to the top of `user`. Between
    neighbouring rows it goes straight; past rows in between it drops down a free vertical lane, the one
    nearest the straight line that no box of those rows covers."""
    start, end = (source.x, source.y + source.height / 2), (user.x, user.y - user.height / 2)
    if user.row - source.row <= 1:
        return [start, end]
    between = [b for b in boxes if source.row < b.row < user.row]
    middle = (source.x + user.x) / 2
    candidates = [middle, source.x, user.x] + [b.x + side * (b.width / 2 + GAP / 2) for b in between
                                               for side in (-1, 1)]
    lane = min((x for x in candidates if all(abs(x - b.x) >= b.width / 2 + LANE_CLEARANCE for b in between)),
               key=lambda x: (abs(x - middle), x))
    first, last = min(b.row for b in between), max(b.row for b in between)
    return [start, (lane, _row_y(first) - ROW_HEIGHT / 2 + 12), (lane, _row_y(last) + ROW_HEIGHT / 2 - 12), end]


def _row_y(row: int) -> float:
    return MARGIN + 30 + row * ROW_HEIGHT


# ------------------------------------------------------------------ the widget


class GraphPassesExplorer:
    """The viewer's state and widgets; ``state()`` says what is on screen, for tests and for you."""

    def __init__(self, stages, start: int = 0):
        self.stages = parse_stages(stages)
        if not 0 <= start < len(self.stages):
            raise ValueError(f"start={start}, but there are {len(self.stages)} stages (0 to {len(self.stages) - 1})")
        self.colours = group_colours(self.stages)
        self.index = start
        self.next_button = widgets.Button(description="Next pass ▶", button_style="primary",
                                          tooltip="the graph after the next pass (the last one wraps around)")
        self.previous_button = widgets.Button(description="◀ Previous pass",
                                              tooltip="the graph before this pass")
        self.chooser = widgets.Dropdown(options=[(f"{k}: {s.title}", k) for k, s in enumerate(self.stages)],
                                        value=start, description="stage", layout=widgets.Layout(width="360px"))
        self.summary_html = widgets.HTML()
        self.graph_html = widgets.HTML()
        self.next_button.on_click(lambda _: self.show(self.index + 1))
        self.previous_button.on_click(lambda _: self.show(self.index - 1))
        self.chooser.observe(lambda change: self.show(change["new"]), names="value")
        self.widget = widgets.VBox([widgets.HBox([self.next_button, self.previous_button, self.chooser]),
                                    self.summary_html, self.graph_html])
        self._render()

    def show(self, index: int) -> None:
        """Show stage `index` (taken modulo the number of stages: next from the last is the first)."""
        self.index = index % len(self.stages)
        if self.chooser.value != self.index:
            self.chooser.value = self.index  # its observer calls show() again, which renders
            return
        self._render()

    def state(self) -> dict:
        """What the widget shows, as plain data (for tests and the browser check)."""
        stage = self.stages[self.index]
        return {"index": self.index, "stages": len(self.stages), "title": stage.title,
                "nodes": [n.name for n in stage.nodes], **summary(self.stages, self.index)}

    # -- drawing

    def _render(self) -> None:
        s = self.state()
        change = (f"<br><b>What the pass changed:</b> {escape(s['change'])}" if s["change"] is not None
                  else "<br>The graph as captured: the passes come next.")
        self.summary_html.value = (f"<p style='margin:4px 0'><b>Stage {s['index'] + 1} of {s['stages']}: "
                                   f"{escape(s['title'])}</b> — {escape(s['text'])}{change}</p>")
        stage = self.stages[self.index]
        previous = self.stages[self.index - 1] if self.index > 0 else None
        self.graph_html.value = svg(stage, self.colours, previous) + legend(stage, self.colours) + sources(stage)


def svg(stage: Stage, colours: dict, previous: Stage | None = None) -> str:
    """The stage's graph as SVG. Nodes new since `previous` get a thicker, blue outline."""
    if not stage.nodes:
        return "<p><i>This graph has no nodes.</i></p>"
    boxes = layout(stage)
    width = max(b.x + b.width / 2 for b in boxes.values()) + MARGIN
    height = max(b.y + b.height / 2 for b in boxes.values()) + MARGIN
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' height='{height:.0f}' "
             "font-family='monospace' font-size='12'>",
             "<defs><marker id='gp-arrow' viewBox='0 0 10 10' refX='10' refY='5' markerWidth='8' markerHeight='8' "
             "markerUnits='userSpaceOnUse' "
             "orient='auto-start-reverse'><path d='M 0 0 L 10 5 L 0 10 z' fill='#57606a'/></marker></defs>"]
    for node in stage.nodes:
        parts += [_edge(stage.by_name[i], node, boxes, colours) for i in dict.fromkeys(node.inputs)]
    for node in stage.nodes:
        fresh = previous is not None and node.name not in previous.by_name
        parts.append(_box(node, boxes[node.name], colours, fresh))
    parts.append("</svg>")
    return f"<div style='overflow:auto;max-height:900px'>{''.join(parts)}</div>"  # a long graph scrolls


def _edge(source: Node, user: Node, boxes: dict, colours: dict) -> str:
    """An S-curve between each pair of points of the edge's route, straight down the lane between."""
    points = edge_route(boxes[source.name], boxes[user.name], boxes.values())
    path = [f"M {points[0][0]:.0f} {points[0][1]:.0f}"]
    for (x1, y1), (x2, y2) in zip(points, points[1:]):
        if x1 == x2:
            path.append(f"L {x2:.0f} {y2:.0f}")
        else:
            bend = (y2 - y1) / 2
            path.append(f"C {x1:.0f} {y1 + bend:.0f} {x2:.0f} {y2 - bend:.0f} {x2:.0f} {y2:.0f}")
    same = colour_key(source) is not None and colour_key(source) == colour_key(user)
    stroke, thick = (_darker(colours[colour_key(source)]), 2.4) if same else ("#8c959f", 1.3)
    return (f"<path d='{' '.join(path)}' fill='none' stroke='{stroke}' stroke-width='{thick}' "
            "marker-end='url(#gp-arrow)'/>")


def _box(node: Node, box: Box, colours: dict, fresh: bool) -> str:
    key = colour_key(node)
    if key is not None:
        fill = colours[key]
        stroke = _darker(fill)
    elif node.kind == "placeholder":
        fill, stroke = "#ddf4ff", "#0969da"
    elif node.kind == "constant":
        fill, stroke = "#eaeef2", "#6e7781"
    elif node.kind == "output":
        fill, stroke = "#fff8c5", "#9a6700"
    else:
        fill, stroke = "#ffffff", "#8c959f"
    if fresh:
        stroke = "#0969da"
    rx = box.height / 2 if node.kind in ("placeholder", "output") else 6
    dash = " stroke-dasharray='4 3'" if node.kind == "constant" else ""
    left, top = box.x - box.width / 2, box.y - box.height / 2
    title = f"{node.name}: {node.kind} {node.op}" + (f" (group {node.group})" if node.group is not None else "")
    out = [f"<g><title>{escape(title)}</title>"
           f"<rect x='{left:.0f}' y='{top:.0f}' width='{box.width:.0f}' height='{box.height:.0f}' rx='{rx:.0f}' "
           f"fill='{fill}' stroke='{stroke}' stroke-width='{2.6 if fresh else 1.5}'{dash}/>"]
    for k, line in enumerate(label_lines(node)):
        weight = " font-weight='bold'" if k == 0 else " fill='#57606a' font-size='11'"
        out.append(f"<text x='{box.x:.0f}' y='{top + 18 + 14 * k:.0f}' text-anchor='middle'{weight}>"
                   f"{escape(line)}</text>")
    out.append("</g>")
    return "".join(out)


def legend(stage: Stage, colours: dict) -> str:
    """One line per colour in this stage: which kernel it is and the nodes it holds."""
    groups: dict = {}
    for node in stage.nodes:
        key = colour_key(node)
        if key is not None:
            groups.setdefault(key, []).append(node)
    if not groups:
        return ""
    lines = []
    for key, nodes in groups.items():
        fused = [n for n in nodes if n.kind == "fused"]
        if fused:
            what = "; ".join(f"fused node {n.name}: one kernel for {' + '.join(n.members) or 'its members'}"
                             for n in fused)
        else:
            what = f"to be fused into one kernel: {' + '.join(n.name for n in nodes)}"
        label = f"group {key}" if isinstance(key, int) else "kernel"
        lines.append(f"<div><span style='display:inline-block;width:14px;height:14px;vertical-align:middle;"
                     f"background:{colours[key]};border:1px solid {_darker(colours[key])};margin-right:6px'></span>"
                     f"<b>{escape(label)}</b> — {escape(what)}</div>")
    return f"<div style='font-size:12px;margin:4px 0'>{''.join(lines)}</div>"


def sources(stage: Stage) -> str:
    """The CUDA C of the fused nodes that carry it, folded away until clicked."""
    return "".join(f"<details><summary>CUDA source of {escape(n.name)}</summary>"
                   f"<pre style='font-size:11px'>{escape(n.source)}</pre></details>"
                   for n in stage.nodes if n.kind == "fused" and n.source)


def explore(stages, start: int = 0) -> widgets.VBox:
    """Show a GraphPassesExplorer in a notebook cell: ``explore(graph_stages([(title, graph), ...]))``."""
    return GraphPassesExplorer(stages, start=start).widget


__all__ = ["explore", "GraphPassesExplorer", "parse_stages", "op_counts", "stage_diff", "describe_stage",
           "describe_change", "summary", "group_colours", "colour_key", "rows", "layout", "edge_route", "label_lines"]
