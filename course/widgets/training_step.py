"""Step through one training iteration and watch one parameter change.

In a notebook::

    from course.widgets.training_step import explore
    explore()              # or explore(seed=1, lr=0.5)

Everything on screen is real torch: a real DataLoader, nn.Module, loss,
autograd and torch.optim.SGD; the widget only pauses between their calls.
"""
from collections import OrderedDict
from html import escape

import ipywidgets as widgets
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

# (step name, component that owns it, the line of code a training loop has)
STEPS = [
    ("next batch", "DataLoader", "x, y = next(batches)"),
    ("forward", "nn.Module", "logits = model(x)"),
    ("loss", "loss function (nn.CrossEntropyLoss, an nn.Module too)", "loss = loss_fn(logits, y)"),
    ("zero_grad", "Optimizer", "optimizer.zero_grad()"),
    ("backward", "Autograd engine", "loss.backward()"),
    ("step", "Optimizer", "optimizer.step()"),
]

# label shown in the dropdown -> (parameter name, index into it)
WATCHABLE = OrderedDict([
    ("fc.weight[0, 0]", ("fc.weight", (0, 0))),
    ("fc.weight[0, 1]", ("fc.weight", (0, 1))),
    ("fc.weight[1, 2]", ("fc.weight", (1, 2))),
    ("fc.bias[0]", ("fc.bias", (0,))),
    ("fc.bias[1]", ("fc.bias", (1,))),
])


def fmt(x):
    """A number in six significant digits (None as None)."""
    return "None" if x is None else f"{x:.6g}"


class TrainingStepExplorer:
    """One training loop, paused after each of its six steps.

    The model is built right after ``torch.manual_seed(seed)`` (inside
    ``fork_rng``, so the notebook's own random stream is left alone), and the
    DataLoader shuffles with ``torch.Generator().manual_seed(seed)``: the same
    seed always gives the same parameters and the same batches.
    """

    def __init__(self, seed=0, lr=0.1, batch_size=4, n_samples=16):
        self.seed, self.batch_size, self.n_samples = seed, batch_size, n_samples
        self.next_button = widgets.Button(description="Next step", button_style="primary")
        self.reset_button = widgets.Button(description="Reset")
        self.dropdown = widgets.Dropdown(options=list(WATCHABLE), value="fc.weight[0, 1]",
                                         description="watch")
        self.lr_slider = widgets.FloatSlider(value=lr, min=0.001, max=1.0, step=0.001,
                                             readout_format=".3f", description="lr")
        self.html = widgets.HTML()
        # The buttons call the very methods tests call, so a click is a next_step().
        self.next_button.on_click(lambda _: self.next_step())
        self.reset_button.on_click(lambda _: self.reset())
        self.dropdown.observe(lambda _: self._render(), names="value")
        self.lr_slider.observe(self._lr_changed, names="value")
        self.widget = widgets.VBox([
            widgets.HBox([self.next_button, self.reset_button]),
            widgets.HBox([self.dropdown, self.lr_slider]),
            self.html,
        ])
        self.reset()

    @property
    def watched(self):
        """The parameter the student chose to watch."""
        return self.dropdown.value

    def reset(self):
        """Rebuild model, data and optimizer from the seed: back to step 0."""
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            self.model = nn.Sequential(OrderedDict(fc=nn.Linear(3, 2)))
        g = torch.Generator().manual_seed(self.seed)
        x = torch.randn(self.n_samples, 3, generator=g)
        y = (x[:, 0] + x[:, 1] > 0).long()  # a rule the model can actually learn
        self.dataset = TensorDataset(x, y)
        self.loader = DataLoader(self.dataset, batch_size=self.batch_size, shuffle=True,
                                 generator=torch.Generator().manual_seed(self.seed))
        self.loss_fn = nn.CrossEntropyLoss()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=self.lr_slider.value)
        self._batches = iter(self.loader)
        self.step_index, self.iteration = 0, 1
        self.batch = self.logits = self.loss = self.update = None
        self._render()

    def next_step(self):
        """Run the next of the six steps (after step 6, start a new iteration)."""
        if self.step_index == 6:
            self.iteration += 1
            self.step_index = 0
            self.logits = self.loss = self.update = None
        self.step_index += 1
        name = STEPS[self.step_index - 1][0]
        if name == "next batch":
            try:
                self.batch = next(self._batches)
            except StopIteration:  # epoch over: a new iterator reshuffles
                self._batches = iter(self.loader)
                self.batch = next(self._batches)
        elif name == "forward":
            self.logits = self.model(self.batch[0])
        elif name == "loss":
            self.loss = self.loss_fn(self.logits, self.batch[1])
        elif name == "zero_grad":
            self.optimizer.zero_grad()
        elif name == "backward":
            self.loss.backward()
        elif name == "step":
            old, grad, lr = self._value(), self._grad(), self.optimizer.param_groups[0]["lr"]
            self.optimizer.step()
            self.update = {"old": old, "new": self._value(), "grad": grad, "lr": lr,
                           "delta": -lr * grad}
        self._render()

    def _lr_changed(self, change):
        # SGD reads its lr from param_groups at every step(), so this is all it takes.
        self.optimizer.param_groups[0]["lr"] = change["new"]
        self._render()

    def _param(self):
        name, idx = WATCHABLE[self.watched]
        return dict(self.model.named_parameters())[name], idx

    def _value(self):
        p, idx = self._param()
        return p.detach()[idx].item()

    def _grad(self):
        p, idx = self._param()
        return None if p.grad is None else p.grad[idx].item()

    def state(self):
        """What the widget shows, as plain data (for tests and the browser check)."""
        i = self.step_index
        return {
            "step": STEPS[i - 1][0] if i else None,
            "component": STEPS[i - 1][1] if i else None,
            "value": self._value(),
            "grad": self._grad(),
            "update": self.update,
            "loss": None if self.loss is None else self.loss.item(),
            "iteration": self.iteration,
        }

    def _explain(self):
        i, lr = self.step_index, self.optimizer.param_groups[0]["lr"]
        if i == 0:
            return "Nothing has run yet in this iteration: click “Next step” to ask the DataLoader for a batch."
        x, y = self.batch
        # lambdas, so only the current step's sentence reads what exists so far
        return [
            lambda: f"The DataLoader drew {len(x)} shuffled indices from its seeded generator and "
            f"stacked those samples into x {tuple(x.shape)} and y {tuple(y.shape)}.",
            lambda: f"model(x) ran the nn.Module's forward, x @ W.T + b, giving logits "
            f"{tuple(self.logits.shape)}; autograd recorded each operation so backward can replay it.",
            lambda: "nn.CrossEntropyLoss, itself an nn.Module, compared the logits with y and "
            f"averaged over the batch into one number, loss = {self.loss.item():.6g}.",
            lambda: "optimizer.zero_grad() cleared the gradients, because backward adds to .grad "
            "instead of overwriting it; torch 2.x sets them to None (set_to_none=True), not to 0.",
            lambda: "loss.backward() handed the recorded graph to the autograd engine, which walked "
            "it backwards and stored d(loss)/d(parameter) in every parameter's .grad.",
            lambda: f"optimizer.step() moved every parameter against its gradient, p ← p − lr·p.grad "
            f"with lr = {lr:g}; the .grad stays until the next zero_grad.",
        ][i - 1]()

    def _render(self):
        s, rows = self.state(), []
        for n, (name, comp, code) in enumerate(STEPS, 1):
            style = "background:#ffe08a;font-weight:bold" if n == self.step_index else (
                "color:#888" if n < self.step_index else "")
            mark = "▶" if n == self.step_index else ("✓" if n < self.step_index else "")
            rows.append(f"<tr style='{style}'><td>{mark}</td><td>{n}</td><td>{escape(name)}</td>"
                        f"<td>{escape(comp)}</td><td><code>{escape(code)}</code></td></tr>")
        facts = [f"<b>iteration</b> {self.iteration}, <b>step</b> {self.step_index}/6",
                 f"<b>{escape(self.watched)}</b> = {fmt(s['value'])}",
                 f"<b>{escape(self.watched)}.grad</b> = {fmt(s['grad'])}"]
        if self.batch is not None:
            facts.append(f"<b>batch</b> x {tuple(self.batch[0].shape)}, y {tuple(self.batch[1].shape)}")
        if s["loss"] is not None:
            facts.append(f"<b>loss</b> = {fmt(s['loss'])}")
        u = self.update
        if u is not None:
            facts.append(f"<b>update</b>: old {fmt(u['old'])} → new {fmt(u['new'])} "
                         f"(−lr·grad = −{u['lr']:g} × {fmt(u['grad'])} = {fmt(u['delta'])})")
        self.html.value = (
            "<table style='border-collapse:collapse'><tr><th></th><th>#</th><th>step</th>"
            "<th>component</th><th>code</th></tr>" + "".join(rows) + "</table>"
            + "<p>" + "<br>".join(facts) + "</p>"
            + f"<p><i>{escape(self._explain())}</i></p>")


def explore(**kw):
    """Show a TrainingStepExplorer in a notebook cell: ``explore(seed=0, lr=0.1)``."""
    return TrainingStepExplorer(**kw).widget
