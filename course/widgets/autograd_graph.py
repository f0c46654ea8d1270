"""An autograd graph viewer: the graph an expression records, and backward, one node at a time.

In a notebook::

    from course.widgets.autograd_graph import explore
    explore(from_torch, no_grad)   # your picotorch (chapter 02) beside torch
    explore()                      # picotorch where it can be imported, else torch alone

Type an expression over the leaves ``x``, ``y`` (shape (3,)), ``W`` (2, 3) and ``b`` (2,), or
pick an example; statements are separated by ``;`` and the last one is the output, e.g.
``h = x * y; (h + h.exp()).sum()``. The graph is drawn as SVG: the output tensor on top, the
backward nodes named as their framework names them, and the leaves at the bottom, under their
``AccumulateGrad`` nodes. “Step backward” runs one node, the way an engine does: a node runs
once every node that feeds it a gradient has run, and the gradients it sends are shown on the
edges as they arrive. Beside it is torch's ``grad_fn`` chain for the same expression, and at
the end each leaf's gradient is compared with torch's.

The viewer holds no autograd of its own: it calls the nodes of the graph your code (or torch)
recorded — ``node(grad)`` — and only decides the order, by counting dependencies.
"""
from __future__ import annotations

import ast
import math
from collections import OrderedDict
from html import escape

import ipywidgets as widgets
import torch

LEAVES = OrderedDict([("x", (3,)), ("y", (3,)), ("W", (2, 3)), ("b", (2,))])
EXAMPLES = OrderedDict([
    ("a diamond: h is used twice", "h = x * y; (h + h.exp()).sum()"),
    ("a layer", "(W @ x + b).relu().sum()"),
    ("broadcasting", "(W * x + b.unsqueeze(1)).sum()"),
    ("a leaf used three times", "(x * x * x).sum()"),
    ("views", "(W.T[1:] * y[1:].unsqueeze(1)).sum()"),
    ("log-sum-exp", "z = W @ x + b; (z - z.max()).exp().sum().log()"),
])
PREVIEW = 4  # numbers shown of a gradient


class ExpressionError(ValueError):
    """An expression the viewer cannot run; the message says what it expected."""


def parse_program(text: str) -> list:
    """[(name or None, ast expression)]: assignments `name = expr`, then the output expression."""
    try:
        tree = ast.parse("\n".join(part.strip() for part in text.replace("\n", ";").split(";")), mode="exec")
    except SyntaxError as e:
        raise ExpressionError(f"cannot read the expression: {e.msg}") from None
    if not tree.body:
        raise ExpressionError("write an expression, e.g. (x * y).sum()")
    program = []
    for i, stmt in enumerate(tree.body):
        last = i == len(tree.body) - 1
        if isinstance(stmt, ast.Assign) and not last and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            program.append((stmt.targets[0].id, stmt.value))
        elif isinstance(stmt, ast.Expr) and last:
            program.append((None, stmt.value))
        else:
            raise ExpressionError("write assignments `h = ...` separated by `;`, and end with the output expression")
    for _, expr in program:
        for node in ast.walk(expr):
            if isinstance(node, ast.Name) and node.id.startswith("_") or \
                    isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                raise ExpressionError("names starting with _ are not available here")
            if isinstance(node, (ast.Lambda, ast.comprehension, ast.NamedExpr)):
                raise ExpressionError("use tensor operations only")
    return program


def run_program(program, leaves: dict):
    """Evaluate the program with the leaves as its only names; the output must be a tensor."""
    names = dict(leaves)
    for target, expr in program:
        value = eval(compile(ast.Expression(expr), "<expression>", "eval"), {"__builtins__": {}}, names)
        if target is None:
            return value
        names[target] = value
    return None


def node_name(node) -> str:
    """Torch's class name (MulBackward0, AccumulateGrad); picotorch's name()."""
    if isinstance(node, torch.autograd.graph.Node) or not hasattr(node, "name"):
        return type(node).__name__
    return node.name()


def preview(t) -> str:
    """'(2, 3) [0.5, -1, 2, 0.25, …]' for a gradient, in either framework."""
    if t is None:
        return "None"
    values = t.detach().reshape(-1)[:PREVIEW].tolist() if isinstance(t, torch.Tensor) else \
        t.to_torch().reshape(-1)[:PREVIEW].tolist()
    shape = tuple(t.shape)
    numel = math.prod(shape)
    text = ", ".join(f"{v:.3g}" for v in values) + (", …" if numel > PREVIEW else "")
    return f"{shape} [{text}]"


def as_list(t):
    """A tensor of either framework as a flat list of numbers (None stays None)."""
    if t is None:
        return None
    return (t.detach() if isinstance(t, torch.Tensor) else t.to_torch()).reshape(-1).tolist()


class Graph:
    """The nodes reachable from `root` (a grad_fn), their edges and the leaves of their AccumulateGrad nodes."""

    def __init__(self, root, leaves: dict):
        self.nodes, self.index, self.edges = [], {}, []
        stack = [root]
        self.index[id(root)] = 0
        self.nodes.append(root)
        while stack:  # depth-first, without recursion
            node = stack.pop()
            i = self.index[id(node)]
            for nr, (nxt, _) in enumerate(getattr(node, "next_functions", ()) or ()):
                if nxt is None:
                    continue
                if id(nxt) not in self.index:
                    self.index[id(nxt)] = len(self.nodes)
                    self.nodes.append(nxt)
                    stack.append(nxt)
                self.edges.append((i, self.index[id(nxt)], nr))
        self.names = [node_name(n) for n in self.nodes]
        self.leaf_of = {}
        for i, n in enumerate(self.nodes):
            variable = getattr(n, "variable", None)
            for name, leaf in leaves.items():
                if variable is not None and variable is leaf:
                    self.leaf_of[i] = name
        # longest distance from the root: every edge then points down
        self.layer = [0] * len(self.nodes)
        for i in self.topological_order():
            for a, b, _ in self.edges:
                if a == i:
                    self.layer[b] = max(self.layer[b], self.layer[a] + 1)

    def dependencies(self) -> list:
        """For each node, how many edges lead into it (gradients it waits for)."""
        count = [0] * len(self.nodes)
        for _, b, _ in self.edges:
            count[b] += 1
        return count

    def topological_order(self) -> list:
        """The nodes in an order where each comes after every node that sends it a gradient."""
        count, order, ready = self.dependencies(), [], [0]
        while ready:
            i = ready.pop()
            order.append(i)
            for a, b, _ in self.edges:
                if a == i:
                    count[b] -= 1
                    if count[b] == 0:
                        ready.append(b)
        return order


class Walk:
    """backward(), one node per step: dependency counts decide which nodes are ready.

    Live (picotorch): the walk calls each node, node(grad), and sums what arrives at shared nodes.
    Replayed (torch): torch's own engine ran backward once, with hooks that recorded each node's
    turn and the gradients it sent; the walk replays that record step by step."""

    def __init__(self, graph: Graph, root_grad, call=None, add=None, replay=None):
        self.graph, self.call, self.add, self.replay = graph, call, add, replay
        self.waiting = graph.dependencies()
        self.buffers = {0: root_grad}
        self.ready, self.done, self.sent, self.received = [0], [], {}, {}
        self.current = None

    @property
    def finished(self) -> bool:
        """Whether no node is left ready to run."""
        return not self.ready

    def step(self):
        """Run the next ready node (live: the one nearest the output; replayed: torch's next); return its index."""
        g = self.graph
        if self.replay is not None:
            i, received, outs = self.replay[len(self.done)]
        else:
            i = min(self.ready, key=lambda k: (g.layer[k], k))
            received = self.buffers.pop(i, None)
        self.current = i
        if self.replay is None:
            outs = self.call(g.nodes[i], received) if received is not None else ()
        outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)  # torch's nodes return one tensor bare
        if i in self.ready:
            self.ready.remove(i)
        self.received[i] = received
        self.done.append(i)
        for a, b, nr in g.edges:
            if a != i:
                continue
            sent = outs[nr] if nr < len(outs) else None
            if sent is not None:
                self.sent[(a, b, nr)] = sent
                if self.replay is None:
                    self.buffers[b] = sent if b not in self.buffers else self.add(self.buffers[b], sent)
            self.waiting[b] -= 1
            if self.waiting[b] == 0:
                self.ready.append(b)
        return i


def record_torch_backward(graph: Graph, out) -> list:
    """Run torch's backward on `out` with hooks on every node: [(node index, gradient in, gradients out)],
    in the order torch's engine ran the nodes."""
    received, sent, order, handles = {}, {}, [], []
    for i, node in enumerate(graph.nodes):
        def pre(grad_outputs, i=i):
            order.append(i)
            received[i] = grad_outputs[0]
        def post(grad_inputs, grad_outputs, i=i):
            sent[i] = tuple(grad_inputs)
        handles += [node.register_prehook(pre), node.register_hook(post)]
    try:
        torch.autograd.backward(out, torch.ones_like(out), retain_graph=True)
    finally:
        for h in handles:
            h.remove()
    return [(i, received.get(i), sent.get(i, ())) for i in order]


def torch_chain(root, leaves: dict) -> list:
    """Torch's grad_fn chain as indented lines; a node reached a second time is marked, not repeated."""
    lines, seen = [], set()
    names = {id(t): n for n, t in leaves.items()}
    stack = [(root, "", "")]
    while stack and len(lines) < 200:
        node, prefix, branch = stack.pop()
        label = type(node).__name__
        variable = getattr(node, "variable", None)
        if variable is not None:
            label += f" ({names.get(id(variable), 'a leaf')})"
        if id(node) in seen:
            lines.append(f"{prefix}{branch}{label}  ↑ again")
            continue
        seen.add(id(node))
        lines.append(f"{prefix}{branch}{label}")
        children = [n for n, _ in node.next_functions if n is not None]
        child_prefix = prefix + ("" if not branch else ("│  " if branch.startswith("├") else "   "))
        for k, child in reversed(list(enumerate(children))):
            stack.append((child, child_prefix, "└─ " if k == len(children) - 1 else "├─ "))
    return lines


class Framework:
    """One side of the viewer: torch, or a picotorch reached through from_torch and no_grad."""

    def __init__(self, label, make_leaf, no_grad, is_torch):
        self.label, self.make_leaf, self.no_grad, self.is_torch = label, make_leaf, no_grad, is_torch

    def call(self, node, grad):
        """Call backward node `node` on `grad` outside grad mode."""
        with self.no_grad():
            return node(grad)

    def add(self, a, b):
        """a + b outside grad mode (gradients accumulating at a node)."""
        with self.no_grad():
            return a + b

    def ones_like(self, out, from_torch=None):
        """The seed gradient of `out`: ones of its shape and dtype in this framework."""
        if self.is_torch:
            return torch.ones_like(out)
        return from_torch(torch.ones(tuple(out.shape), dtype=out.to_torch().dtype))


def _reference_picotorch():
    try:
        import picotorch
        if hasattr(picotorch, "no_grad") and hasattr(picotorch.Tensor, "requires_grad_"):
            return picotorch.from_torch, picotorch.no_grad
    except Exception:
        pass
    return None, None


class AutogradGraphViewer:
    """The viewer's state and widgets; ``state()`` says what is on screen, for tests and for you."""

    def __init__(self, from_torch=None, no_grad=None, expression=None, seed=0):
        if from_torch is None:
            from_torch, no_grad = _reference_picotorch()
            self.label = "picotorch"
        else:
            self.label = "yours"
        self.from_torch, self.user_no_grad, self.seed = from_torch, no_grad, seed
        first = next(iter(EXAMPLES.values()))
        self.step_button = widgets.Button(description="Step backward ▶", button_style="primary",
                                          tooltip="run the next node whose gradient is complete")
        self.run_button = widgets.Button(description="Run to the end")
        self.reset_button = widgets.Button(description="Reset")
        self.examples = widgets.Dropdown(options=list(EXAMPLES), value=None, description="example")
        self.expression = widgets.Text(value=expression or first, description="expression",
                                       continuous_update=False, layout=widgets.Layout(width="480px"))
        self.status = widgets.HTML()
        self.graph_html = widgets.HTML()
        self.torch_html = widgets.HTML()
        self.step_button.on_click(lambda _: self.step())
        self.run_button.on_click(lambda _: self.run_to_end())
        self.reset_button.on_click(lambda _: self.build())
        self.examples.observe(self._example_chosen, names="value")
        self.expression.observe(lambda _: self.build(), names="value")
        self.widget = widgets.VBox([
            widgets.HBox([self.step_button, self.run_button, self.reset_button]),
            widgets.HBox([self.examples, self.expression]),
            self.status,
            widgets.HBox([self.graph_html, self.torch_html]),
        ])
        self.build()

    # --- building ---------------------------------------------------------------------------
    def _example_chosen(self, change):
        if change["new"] is not None:
            self.expression.value = EXAMPLES[change["new"]]  # triggers build()

    def _torch_leaves(self) -> dict:
        g = torch.Generator().manual_seed(self.seed)
        return {name: torch.randn(shape, generator=g).round(decimals=2) for name, shape in LEAVES.items()}

    def build(self):
        """(Re)build both graphs from the expression; backward starts over."""
        self.error = self.note = None
        self.graph = self.walk = self.out = None
        self.torch_lines, self.torch_grads = [], {}
        values = self._torch_leaves()
        try:
            program = parse_program(self.expression.value)
            self._build_torch(program, values)
        except ExpressionError as e:
            self.error = str(e)
        except Exception as e:  # torch refuses the expression: say why, in torch's words
            self.error = f"torch cannot run this expression: {type(e).__name__}: {e}"
        if self.error is None:
            self._build_main(program, values)
        self._render()

    def _build_torch(self, program, values):
        leaves = {n: v.clone().requires_grad_() for n, v in values.items()}
        out = run_program(program, leaves)
        if not isinstance(out, torch.Tensor):
            raise ExpressionError("the last statement must give a tensor")
        if out.grad_fn is None:
            raise ExpressionError("the output does not depend on any leaf: nothing to differentiate")
        self.torch_out, self.torch_leaves = out, leaves
        self.torch_lines = torch_chain(out.grad_fn, leaves)
        used = [n for n in leaves if any(getattr(node, "variable", None) is leaves[n]
                                         for node in Graph(out.grad_fn, leaves).nodes)]
        grads = torch.autograd.grad(out, [leaves[n] for n in used], torch.ones_like(out), retain_graph=True)
        self.torch_grads = {n: g for n, g in zip(used, grads)}

    def _build_main(self, program, values):
        """The graph to draw and step: yours (picotorch) when it can record this expression, else torch's."""
        if self.from_torch is not None and self.user_no_grad is not None:
            try:
                leaves = {n: self.from_torch(v.clone()).requires_grad_() for n, v in values.items()}
                out = run_program(program, leaves)
                if getattr(out, "grad_fn", None) is None:
                    raise RuntimeError("the output has no grad_fn: nothing was recorded")
                side = Framework(self.label, None, self.user_no_grad, is_torch=False)
                root_grad = side.ones_like(out, self.from_torch)
                self._start(side, out, leaves, root_grad)
                return
            except Exception as e:
                why = (f"an exercise it needs still raises {type(e).__name__}" if isinstance(e, NotImplementedError)
                       else f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
                self.note = (f"Your picotorch cannot record this expression yet ({why}); "
                             "the graph below is torch's, stepped the same way.")
        elif self.from_torch is None:
            self.note = "picotorch with autograd was not found: the graph below is torch's."
        leaves = {n: v.clone().requires_grad_() for n, v in values.items()}
        out = run_program(program, leaves)
        self._start(Framework("torch", None, torch.no_grad, is_torch=True), out, leaves, torch.ones_like(out))

    def _start(self, side, out, leaves, root_grad):
        self.side, self.out, self.leaves = side, out, leaves
        self.graph = Graph(out.grad_fn, leaves)
        if side.is_torch:
            self.walk = Walk(self.graph, root_grad, replay=record_torch_backward(self.graph, out))
        else:
            self.walk = Walk(self.graph, root_grad, side.call, side.add)

    def leaf_grad(self, name):
        """The gradient that has reached leaf `name` so far (None before any has)."""
        if self.walk is None:
            return None
        if self.walk.replay is None:
            return getattr(self.leaves[name], "grad", None)
        total = None
        for i in self.walk.done:
            if self.graph.leaf_of.get(i) == name and self.walk.received.get(i) is not None:
                total = self.walk.received[i] if total is None else total + self.walk.received[i]
        return total

    # --- stepping ---------------------------------------------------------------------------
    def step(self):
        """Run the next node of backward (nothing once it is finished)."""
        if self.walk is None or self.walk.finished:
            self._render()
            return
        try:
            self.walk.step()
        except Exception as e:
            self.error = (f"backward failed in {self.graph.names[self.walk.current]} "
                          f"({self.side.label}): {type(e).__name__}: {e}")
            self.walk.ready.clear()
        self._render()

    def run_to_end(self):
        """Step the backward walk until it finishes or fails, then draw."""
        while self.walk is not None and not self.walk.finished and self.error is None:
            self.step()
        self._render()

    def state(self) -> dict:
        """What the widget shows, as plain data (for tests and the browser check)."""
        w, g = self.walk, self.graph
        return {
            "framework": self.side.label if g is not None else None,
            "expression": self.expression.value,
            "nodes": list(g.names) if g else [],
            "edges": [(a, b) for a, b, _ in g.edges] if g else [],
            "step": len(w.done) if w else 0,
            "total": len(g.nodes) if g else 0,
            "current": g.names[w.current] if w and w.current is not None else None,
            "done": [g.names[i] for i in w.done] if w else [],
            "finished": bool(w and w.finished),
            "leaf_grads": {n: as_list(self.leaf_grad(n)) for n in (self.leaves if g else [])},
            "torch_grads": {n: as_list(t) for n, t in self.torch_grads.items()},
            "torch_chain": list(self.torch_lines),
            "note": self.note,
            "error": self.error,
        }

    # --- drawing ----------------------------------------------------------------------------
    def _render(self):
        s = self.state()
        if self.error:
            self.status.value = f"<p style='color:#cf222e'><b>{escape(self.error)}</b></p>"
        elif self.walk is None:
            self.status.value = "<p>Type an expression.</p>"
        else:
            self.status.value = self._status_text(s)
        self.graph_html.value = self._svg() if self.graph is not None else ""
        self.torch_html.value = (
            "<div style='margin-left:24px'><b>torch's grad_fn chain</b>"
            f"<pre style='font-size:12px;line-height:1.35'>{escape(chr(10).join(s['torch_chain']))}</pre>"
            + self._grads_table(s) + "</div>")

    def _status_text(self, s) -> str:
        note = f"<p style='color:#9a6700'>{escape(self.note)}</p>" if self.note else ""
        w, g = self.walk, self.graph
        if not s["step"]:
            what = (f"The {escape(self.side.label)} graph has {s['total']} nodes. Backward starts at the root, "
                    f"<b>{escape(g.names[0])}</b>, with a gradient of ones; click “Step backward”.")
        else:
            i = w.current
            sent = [(b, v) for (a, b, _), v in w.sent.items() if a == i]
            if g.names[i] == "AccumulateGrad":
                what = (f"<b>AccumulateGrad</b> added its gradient to <b>{escape(g.leaf_of.get(i, 'the leaf'))}"
                        f".grad</b>.")
            else:
                what = f"<b>{escape(g.names[i])}</b> ran and sent " + (
                    ", ".join(f"{escape(preview(v))} to {escape(g.names[b])}" for b, v in sent) or "nothing") + "."
            waiting = [g.names[k] for k in range(len(g.nodes)) if w.waiting[k] > 0 and k not in w.done]
            if w.finished:
                what += " Backward is finished: every leaf has its gradient."
            elif waiting:
                what += f" Still waiting for more gradients: {escape(', '.join(sorted(set(waiting))))}."
        return f"{note}<p>step {s['step']} of {s['total']}: {what}</p>"

    def _grads_table(self, s) -> str:
        rows = []
        for name in LEAVES:
            if name not in s["torch_grads"]:
                continue
            mine, theirs = s["leaf_grads"].get(name), s["torch_grads"][name]
            if mine is None:
                verdict = "not yet"
            else:
                same = len(mine) == len(theirs) and all(math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5)
                                                        for a, b in zip(mine, theirs))
                verdict = "matches torch ✓" if same else "differs from torch ✗"
            mine_text = "None" if mine is None else ", ".join(f"{v:.3g}" for v in mine[:6])
            rows.append(f"<tr><td><code>{name}.grad</code></td><td>{escape(mine_text)}</td>"
                        f"<td>{escape(', '.join(f'{v:.3g}' for v in theirs[:6]))}</td><td>{verdict}</td></tr>")
        label = escape(self.side.label) if self.graph is not None else "yours"
        return ("<table style='font-size:12px'><tr><th></th><th>stepped above (" + label + ")</th>"
                "<th>torch's backward()</th><th></th></tr>"
                + "".join(rows) + "</table>")

    def _svg(self) -> str:
        g, w = self.graph, self.walk
        bottom = max(g.layer)
        layer = [bottom if i in g.leaf_of else g.layer[i] for i in range(len(g.nodes))]  # leaves line up below
        layers = {}
        for i, k in enumerate(layer):
            layers.setdefault(k, []).append(i)
        width_of = [max(110, 8 * len(n) + 24) for n in g.names]
        leaf_width = {i: max(80, 7 * len(f"{g.leaf_of[i]} {LEAVES[g.leaf_of[i]]}") + 30) for i in g.leaf_of}
        slot = {i: max(width_of[i], leaf_width.get(i, 0)) + 28 for i in range(len(g.nodes))}
        top, row = 60, 74
        width = max(max(sum(slot[i] for i in ids) for ids in layers.values()) + 40, 380)
        x_of, y_of = {}, {}
        for k in sorted(layers):
            ids = layers[k]
            if k > 0:  # order by the mean position of the nodes that feed each one: fewer crossings
                parents = {i: [x_of[a] for a, b, _ in g.edges if b == i and a in x_of] for i in ids}
                ids.sort(key=lambda i: sum(parents[i]) / len(parents[i]) if parents[i] else 0)
            x = (width - sum(slot[i] for i in ids)) / 2
            for i in ids:
                x_of[i], y_of[i] = x + slot[i] / 2, top + row * (k + 1)
                x += slot[i]
        leaf_y = top + row * (bottom + 1) + 56
        height = leaf_y + (48 if g.leaf_of else 10)
        parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' height='{height:.0f}' "
                 "font-family='sans-serif' font-size='12'>",
                 "<defs><marker id='arrow' viewBox='0 0 10 10' refX='10' refY='5' markerWidth='7' markerHeight='7' "
                 "orient='auto-start-reverse'><path d='M 0 0 L 10 5 L 0 10 z' fill='#57606a'/></marker></defs>"]
        ox = x_of[0]
        parts.append(self._tensor(ox, 24, f"out {tuple(self.out.shape)}", "#ddf4ff"))
        parts.append(f"<line x1='{ox:.0f}' y1='39' x2='{ox:.0f}' y2='{y_of[0] - 16}' stroke='#57606a' "
                     "stroke-dasharray='4 3' marker-end='url(#arrow)'/>")
        for a, b, nr in g.edges:
            arrived = w is not None and (a, b, nr) in w.sent
            colour, thick = ("#1a7f37", 2.2) if arrived else ("#8c959f", 1.2)
            x1, y1, x2, y2 = x_of[a], y_of[a] + 15, x_of[b], y_of[b] - 16
            if layer[b] - layer[a] > 1:  # skips a row: bow out sideways, around the nodes in between
                bow = 70 if x2 >= x1 else -70
                cx1, cx2 = x1 + bow, x2 + bow
                path = f"M {x1:.0f} {y1} C {cx1:.0f} {y1 + 40} {cx2:.0f} {y2 - 40} {x2:.0f} {y2}"
                lx, ly = (x1 + x2) / 2 + bow * 0.75, (y1 + y2) / 2
            else:
                path = f"M {x1:.0f} {y1} L {x2:.0f} {y2}"
                lx, ly = x1 + (x2 - x1) * 0.6, y1 + (y2 - y1) * 0.6
            parts.append(f"<path d='{path}' fill='none' stroke='{colour}' stroke-width='{thick}' "
                         "marker-end='url(#arrow)'/>")
            if arrived:  # the gradient that travelled along this edge, beside it, on the side it leans to
                left = x2 < x1 - 1
                parts.append(f"<text x='{lx + (-6 if left else 6):.0f}' y='{ly:.0f}' fill='#1a7f37' font-size='10' "
                             f"text-anchor='{'end' if left else 'start'}'>{escape(preview(w.sent[(a, b, nr)]))}</text>")
        for i, name in enumerate(g.names):
            fill, stroke = "#ffffff", "#8c959f"
            if w is not None and i in w.done:
                fill, stroke = "#dafbe1", "#1a7f37"
            if w is not None and i in w.ready:
                fill, stroke = "#ddf4ff", "#0969da"
            if w is not None and i == w.current:
                fill, stroke = "#fff8c5", "#9a6700"
            x, y = x_of[i], y_of[i]
            parts.append(f"<rect x='{x - width_of[i] / 2:.0f}' y='{y - 15}' width='{width_of[i]}' height='30' "
                         f"rx='6' fill='{fill}' stroke='{stroke}' stroke-width='1.5'/>")
            parts.append(f"<text x='{x:.0f}' y='{y + 4}' text-anchor='middle'>{escape(name)}</text>")
            if i in g.leaf_of:  # the leaf tensor, under its AccumulateGrad node, with its .grad so far
                leaf = g.leaf_of[i]
                grad = self.leaf_grad(leaf)
                parts.append(f"<line x1='{x:.0f}' y1='{y + 15}' x2='{x:.0f}' y2='{leaf_y - 15}' stroke='#57606a' "
                             "stroke-dasharray='4 3'/>")
                parts.append(self._tensor(x, leaf_y, f"{leaf} {LEAVES[leaf]}", "#ddf4ff" if grad is None else "#dafbe1"))
                parts.append(f"<text x='{x:.0f}' y='{leaf_y + 30}' text-anchor='middle' font-size='10' "
                             f"fill='#1a7f37'>{escape('.grad ' + preview(grad)) if grad is not None else ''}</text>")
        parts.append("</svg>")
        return f"<div style='overflow-x:auto'>{''.join(parts)}</div>"

    @staticmethod
    def _tensor(x, y, label, fill) -> str:
        rx = max(36, 3.4 * len(label) + 12)
        return (f"<ellipse cx='{x:.0f}' cy='{y}' rx='{rx:.0f}' ry='15' fill='{fill}' stroke='#0969da'/>"
                f"<text x='{x:.0f}' y='{y + 4}' text-anchor='middle' font-size='11'>{escape(label)}</text>")


def explore(from_torch=None, no_grad=None, **kw):
    """Show an AutogradGraphViewer in a notebook cell: ``explore(from_torch, no_grad)``."""
    return AutogradGraphViewer(from_torch, no_grad, **kw).widget
