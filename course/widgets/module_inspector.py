"""A module inspector: the tree of a model, its parameters, buffers and state_dict keys, and what
train()/eval() changes.

In a notebook::

    from course.widgets.module_inspector import explore
    explore(OUR_NN)                 # example models built with your picotorch (chapter 03), or torch's
    explore(model=my_model)         # any model: yours or a torch.nn one

Every module of the tree is one row: its path (``body.0``), its class and ``extra_repr``, whether it
is in training mode, its *own* parameters (name, shape, number of elements, requires_grad) and
buffers (name, shape, persistent or not). Below, the ``state_dict`` keys with their shapes, and the
parameter count as ``parameters()`` gives it (a shared parameter counted once).

"Switch to eval()" calls ``model.eval()`` (and back: ``model.train()``) and shows the mode of every
module. The column "train vs eval" says which modules behave differently in the two modes: each
module is run on the input it received in the example's forward pass, once in training mode and
once in eval mode, from the same random seed, and the two outputs are compared (the running
statistics of BatchNorm are put back afterwards). Dropout and BatchNorm differ, and so does every
module that contains one.

The inspector reads only what torch's ``nn.Module`` and yours both have: ``_modules``,
``_parameters``, ``_buffers``, ``_non_persistent_buffers_set``, ``training``, ``state_dict()``,
``parameters()``, ``register_forward_pre_hook``, ``train()``/``eval()``.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from html import escape

import ipywidgets as widgets
import torch


# --- example models, written once for both worlds: `nn` is torch.nn or your picotorch --------------
def _mlp(nn):
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.25), nn.Linear(16, 3))


def _text_classifier(nn):
    class TextClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(20, 4, padding_idx=0)
            self.norm = nn.LayerNorm(4)
            self.flat = nn.Flatten()
            self.drop = nn.Dropout(0.5)
            self.head = nn.Linear(20, 2)

        def forward(self, x):
            return self.head(self.drop(self.flat(self.norm(self.embed(x)))))
    return TextClassifier()


def _tied_heads(nn):
    class TiedHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(6, 6), nn.Tanh())
            self.heads = nn.ModuleList([nn.Linear(6, 6) for _ in range(3)])
            self.heads[2].weight = self.heads[0].weight  # one parameter in two places
            self.register_buffer("scale", _tensor(nn, torch.full((6,), 0.5)), persistent=False)

        def forward(self, x):
            h = self.body(x)
            total = self.heads[0](h)
            for head in self.heads[1:]:
                total = total + head(h)
            return total * self.scale
    return TiedHeads()


def _tensor(nn, t: torch.Tensor):
    return t if nn is torch.nn else nn.from_torch(t)


EXAMPLES = OrderedDict([
    ("an MLP with BatchNorm1d and Dropout", (_mlp, lambda g: torch.randn(6, 8, generator=g))),
    ("a text classifier: Embedding, LayerNorm, Flatten", (_text_classifier,
                                                          lambda g: torch.randint(0, 20, (6, 5), generator=g))),
    ("tied heads in a ModuleList", (_tied_heads, lambda g: torch.randn(6, 6, generator=g))),
])
SEED = 0


# --- the logic: plain data about a model, the same for torch's modules and yours ------------------
def is_torch(obj) -> bool:
    """Whether `obj` is a torch Module or Tensor (not picotorch's)."""
    return isinstance(obj, (torch.nn.Module, torch.Tensor))


def shape_of(t) -> tuple:
    """The tensor's shape as a tuple, in either framework."""
    return tuple(t.shape)


def numel(t) -> int:
    """The number of elements of a tensor of either framework."""
    return math.prod(shape_of(t))


def dtype_name(t) -> str:
    """The dtype's short name (float32), without the framework's prefix."""
    return str(t.dtype).replace("picotorch.", "").replace("torch.", "")


def describe(module) -> str:
    """'Linear(in_features=8, out_features=16, bias=True)': the class and its extra_repr."""
    try:
        extra = module.extra_repr()
    except Exception:  # noqa: BLE001 - a student's unfinished extra_repr
        extra = "…"
    return f"{type(module).__name__}({extra if chr(10) not in extra else '…'})"


def tree_rows(model) -> list[dict]:
    """One dict per module of the tree, depth-first in _modules order (each module once, under its first
    path, as named_modules() does), with its own parameters and buffers."""
    rows, seen, stack = [], set(), [("", 0, model)]
    while stack:
        path, depth, module = stack.pop()
        if id(module) in seen:
            rows.append({"path": path, "depth": depth, "type": type(module).__name__, "describe": describe(module),
                         "shared_with": next(r["path"] for r in rows if r["id"] == id(module)), "id": id(module),
                         "training": module.training, "parameters": [], "buffers": []})
            continue
        seen.add(id(module))
        non_persistent = getattr(module, "_non_persistent_buffers_set", set())
        rows.append({
            "path": path, "depth": depth, "type": type(module).__name__, "describe": describe(module),
            "shared_with": None, "id": id(module), "training": module.training,
            "parameters": [(name, None if p is None else shape_of(p), 0 if p is None else numel(p),
                            None if p is None else bool(p.requires_grad))
                           for name, p in module._parameters.items()],
            "buffers": [(name, None if b is None else shape_of(b), None if b is None else dtype_name(b),
                         name not in non_persistent) for name, b in module._buffers.items()],
        })
        children = [(name, child) for name, child in module._modules.items() if child is not None]
        for name, child in reversed(children):
            stack.append((f"{path}.{name}" if path else name, depth + 1, child))
    return rows


def state_dict_rows(model) -> list[tuple]:
    """[(key, shape)] of the model's state_dict, in order."""
    return [(key, shape_of(value)) for key, value in model.state_dict().items()]


def parameter_count(model) -> int:
    """The number of elements of all the model's parameters."""
    return sum(numel(p) for p in model.parameters())


def modules_by_path(model) -> dict:
    """{dotted path: module} of the model and every submodule."""
    return dict(model.named_modules())


def _as_torch(t):
    if t is None or isinstance(t, torch.Tensor):
        return t
    return t.to_torch()


def _clone_state(model) -> dict:
    return OrderedDict((k, v.detach().clone()) for k, v in model.state_dict().items())


def mode_effects(model, x, no_grad) -> dict:
    """{path: True when the module's output on the input it got in a training-mode forward pass differs
    between train() and eval() (same random seed)}. The model's state and modes are put back after."""
    modes = {id(m): m.training for m in model.modules()}
    saved = _clone_state(model)
    inputs, handles = {}, []
    paths = modules_by_path(model)
    try:
        for path, module in paths.items():
            handles.append(module.register_forward_pre_hook(
                lambda m, args, path=path: inputs.setdefault(path, args) and None))
        model.train()
        with no_grad():
            torch.manual_seed(SEED)
            model(x)
    finally:
        for h in handles:
            h.remove()
    effects = {}
    try:
        for path, module in paths.items():
            if path not in inputs:
                continue
            outputs = []
            for train in (True, False):
                module.train(train)
                torch.manual_seed(SEED)
                with no_grad():
                    outputs.append(_as_torch(module(*inputs[path])).detach().clone())
                model.load_state_dict(saved)  # BatchNorm's running statistics as they were
            a, b = outputs
            effects[path] = not (a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True))
    finally:
        model.load_state_dict(saved)
        for m in model.modules():
            m.training = modes[id(m)]
    return effects


class Framework:
    """How to build and feed models on one side: torch, or your picotorch (an `nn` namespace)."""

    def __init__(self, nn):
        self.nn = nn
        self.label = "torch" if nn is torch.nn else "yours"

    def input(self, x: torch.Tensor):
        """The input `x` as this framework's tensor (a copy for picotorch)."""
        return x if self.nn is torch.nn else self.nn.from_torch(x.clone())

    def no_grad(self):
        """This framework's no_grad context."""
        return torch.no_grad() if self.nn is torch.nn else self.nn.no_grad()


class ModuleInspector:
    """The widget. `state()` gives what it shows, as plain data, for tests."""

    def __init__(self, nn=None, model=None, example=None, x=None):
        self.nn, self.given_model, self.given_x = nn, model, x
        self.note = ""
        self.button = widgets.Button(description="Switch to eval()", button_style="primary",
                                     layout=widgets.Layout(width="170px"))
        self.button.on_click(lambda _: self.toggle_mode())
        self.example = widgets.Dropdown(options=list(EXAMPLES), value=example or next(iter(EXAMPLES)),
                                        description="model", layout=widgets.Layout(width="430px"))
        self.example.observe(lambda change: self.load(), names="value")
        self.side = widgets.ToggleButtons(options=["yours", "torch"], value="yours" if nn is not None else "torch",
                                          layout=widgets.Layout(width="auto"))
        self.side.observe(lambda change: self.load(), names="value")
        self.status = widgets.HTML()
        self.tree_html = widgets.HTML()
        self.keys_html = widgets.HTML()
        controls = [self.button] + ([self.example, self.side] if model is None else [])
        self.widget = widgets.VBox([widgets.HBox(controls), self.status,
                                    widgets.HBox([self.tree_html, self.keys_html])])
        self.load()

    # --- logic -----------------------------------------------------------------------------------
    def framework(self) -> Framework:
        """The framework of the model shown: the given model's, or the side chosen."""
        if self.given_model is not None:
            return Framework(torch.nn if is_torch(self.given_model) else self.nn)
        return Framework(torch.nn if self.side.value == "torch" or self.nn is None else self.nn)

    def load(self):
        """Build the chosen example (or take the given model) and analyse it."""
        self.note = ""
        side = self.framework()
        try:
            self.model, self.x = self._build(side)
        except Exception as e:  # noqa: BLE001 - an unfinished exercise: show torch's model instead
            why = type(e).__name__ + (f": {str(e)[:120]}" if str(e) else "")
            self.note = (f"Your picotorch cannot build this model yet ({why}); showing torch's. Finish the "
                         "exercises and run this cell again.")
            side = Framework(torch.nn)
            self.model, self.x = self._build(side)
        self.current = side
        self.effects, self.effects_error = {}, None
        if self.x is not None:
            try:
                self.effects = mode_effects(self.model, self.x, side.no_grad)
            except Exception as e:  # noqa: BLE001 - e.g. hooks not written yet
                self.effects_error = f"{type(e).__name__}: {str(e)[:120]}"
        self._render()

    def _build(self, side: Framework):
        if self.given_model is not None:
            x = self.given_x
            return self.given_model, (None if x is None else side.input(x) if isinstance(x, torch.Tensor) else x)
        make, make_input = EXAMPLES[self.example.value]
        torch.manual_seed(SEED)
        model = make(side.nn)
        x = side.input(make_input(torch.Generator().manual_seed(SEED)))
        tree_rows(model)  # reads everything the view needs: fails now, not while drawing
        state_dict_rows(model)
        return model, x

    def toggle_mode(self):
        """Switch the model between train and eval mode, and draw."""
        if self.model.training:
            self.model.eval()
        else:
            self.model.train()
        self._render()

    def output(self):
        """The model's output on the example input in the current mode (same seed), as a torch tensor."""
        if self.x is None:
            return None
        saved = _clone_state(self.model)
        try:
            torch.manual_seed(SEED)
            with self.current.no_grad():
                return _as_torch(self.model(self.x)).detach().clone()
        except Exception:  # noqa: BLE001
            return None
        finally:
            self.model.load_state_dict(saved)

    def state(self) -> dict:
        """What the widget shows, as plain data (for tests and the browser check)."""
        rows = tree_rows(self.model)
        return {
            "framework": self.current.label,
            "mode": "train" if self.model.training else "eval",
            "modes": {r["path"]: r["training"] for r in rows},
            "tree": [{k: v for k, v in r.items() if k != "id"} for r in rows],
            "state_dict": state_dict_rows(self.model),
            "parameter_count": parameter_count(self.model),
            "differs": sorted(p for p, d in self.effects.items() if d),
            "effects_error": self.effects_error,
            "note": self.note,
        }

    # --- drawing -----------------------------------------------------------------------------------
    def _render(self):
        s = self.state()
        training = s["mode"] == "train"
        self.button.description = "Switch to eval()" if training else "Switch to train()"
        note = f"<p style='color:#9a6700'>{escape(self.note)}</p>" if self.note else ""
        out = self.output()
        out_text = "" if out is None else (
            f" Its output on the example input: <code>{escape(_preview(out))}</code>.")
        mode = ("<b style='color:#1a7f37'>train()</b>: Dropout drops, BatchNorm uses the batch's statistics "
                "and updates its running ones" if training else
                "<b style='color:#0969da'>eval()</b>: Dropout passes everything, BatchNorm uses its running "
                "statistics")
        types_of = {r["path"]: r["type"] for r in s["tree"]}
        differs = [f"{p} ({types_of[p]})" if p else "the whole model" for p in s["differs"]]
        effect = (f" Modules that behave differently in the two modes: <b>{escape(', '.join(differs))}</b>."
                  if differs else " No module behaves differently in the two modes." if not s["effects_error"]
                  else f" (train-vs-eval comparison unavailable: {escape(s['effects_error'])})")
        self.status.value = (f"{note}<p>{escape(s['framework'])} model in mode {mode}.{out_text}{effect}</p>")
        self.tree_html.value = self._tree(s)
        self.keys_html.value = self._keys(s)

    def _tree(self, s) -> str:
        head = ("<tr style='background:#f6f8fa'><th style='text-align:left'>module</th><th>mode</th>"
                "<th style='text-align:left'>own parameters · numbers</th><th style='text-align:left'>own buffers</th>"
                "<th>train vs eval</th></tr>")
        rows = []
        for r in s["tree"]:
            pad = 14 * r["depth"]
            name = f"({escape(r['path'].rsplit('.', 1)[-1])}) " if r["path"] else ""
            extra = r["describe"][len(r["type"]) + 1:-1]
            label = (f"<div style='padding-left:{pad}px;max-width:{250 - pad}px'>{name}<b>{escape(r['type'])}</b>"
                     + (f"<br><span style='color:#57606a;font-size:11px'>{escape(extra)}</span>" if extra else ""))
            if r["shared_with"] is not None:
                label += f" <i>= ({escape(r['shared_with'])}), shared</i>"
            label += "</div>"
            mode = ("<span style='color:#1a7f37'>train</span>" if r["training"]
                    else "<span style='color:#0969da'>eval</span>")
            params = "<br>".join(
                f"<code>{escape(n)}</code> " + ("None" if shape is None else
                                                f"{shape} · {count}" + ("" if grad else " · frozen"))
                for n, shape, count, grad in r["parameters"]) or "—"
            bufs = "<br>".join(
                f"<code>{escape(n)}</code> " + ("None" if shape is None else f"{shape} {dtype}")
                + ("" if persistent else " · <i>not saved</i>")
                for n, shape, dtype, persistent in r["buffers"]) or "—"
            diff = ""
            if r["path"] in self.effects or (not r["path"] and "" in self.effects):
                diff = ("<b style='color:#cf222e'>differs</b>" if self.effects.get(r["path"])
                        else "<span style='color:#57606a'>same</span>")
            background = " style='background:#fff8c5'" if self.effects.get(r["path"]) else ""
            cell = "style='text-align:left;white-space:nowrap;padding:2px 8px'"
            rows.append(f"<tr{background}><td style='text-align:left;padding:2px 4px'>{label}</td>"
                        f"<td>{mode}</td><td {cell}>{params}</td><td {cell}>{bufs}</td><td>{diff}</td></tr>")
        return ("<table style='font-size:12px;border-collapse:collapse'>" + head + "".join(rows) + "</table>")

    def _keys(self, s) -> str:
        keys = "".join(f"<tr><td style='text-align:left'><code>{escape(k)}</code></td>"
                       f"<td style='white-space:nowrap'>{shape}</td></tr>"
                       for k, shape in s["state_dict"])
        return (f"<div style='margin-left:16px;font-size:12px'><b>parameters()</b>: {s['parameter_count']} "
                f"numbers<br>(a shared parameter counts once)<br><b>state_dict()</b>: {len(s['state_dict'])} keys"
                "<table style='font-size:11px'>" + keys + "</table></div>")


def _preview(t: torch.Tensor, n: int = 4) -> str:
    values = t.reshape(-1)[:n].tolist()
    text = ", ".join(f"{v:.3g}" for v in values) + (", …" if t.numel() > n else "")
    return f"{tuple(t.shape)} [{text}]"


def explore(nn=None, model=None, x=None, **kw):
    """Show a ModuleInspector: ``explore(OUR_NN)`` (examples in both worlds) or ``explore(model=m, x=input)``."""
    return ModuleInspector(nn, model=model, x=x, **kw).widget
