"""A training dashboard: your framework and PyTorch train the same MLP on the digits, side by side.

In a notebook (chapter 04)::

    from course.widgets.training_dashboard import explore
    explore(SGD=SGD, Adam=Adam, AdamW=AdamW, cross_entropy=cross_entropy, TensorDataset=TensorDataset,
            DataLoader=DataLoader, fit=fit)

Both sides start from the same weights (torch's model is made after ``torch.manual_seed(seed)`` and
its ``state_dict`` is loaded into yours) and see the same batches in the same order (both loaders
shuffle with ``torch.Generator().manual_seed(seed)``). Your ``fit`` trains your side with your
optimizer, loss and loader; each time it reports an epoch to ``on_epoch``, torch runs the same
epoch (``torch.optim``, ``torch.nn.functional.cross_entropy``, ``torch.utils.data.DataLoader``) and
the curves are redrawn: the loss (training and test) and the test accuracy, yours as wide light
lines and torch's dashed on top, on the same axes. When your pieces raise (a blank exercise, a
bug), torch trains alone and the dashboard says what stopped yours.

The model pieces (``Sequential``, ``Linear``, ``ReLU``, ``from_numpy``) come from ``picotorch``
(chapters 01–03 in the chapter's folder), or from ``nn=`` when given. The logic (``run``,
``state``) is separate from the drawing (``chart_svg``), so tests drive it without a browser.
"""
from __future__ import annotations

import math
import time
import traceback
from html import escape

import ipywidgets as widgets
import numpy as np
import torch

from course.datasets import load_digits

OPTIMIZERS = {  # label -> (class name, keyword arguments besides lr, default lr)
    "SGD": ("SGD", {}, 0.1),
    "SGD, momentum 0.9": ("SGD", {"momentum": 0.9}, 0.05),
    "Adam": ("Adam", {}, 3e-3),
    "AdamW (weight decay 0.01)": ("AdamW", {"weight_decay": 0.01}, 3e-3),
}
BATCH_SIZES = (16, 32, 64, 128)
PIECES = ("SGD", "Adam", "AdamW", "cross_entropy", "TensorDataset", "DataLoader", "fit")
DARK = {"#1f77b4": "#0b3a5c", "#ff7f0e": "#8a3f00", "#2ca02c": "#11501a"}  # torch's dashes over your lines
SERIES = [  # (key of a record, panel, colour)
    ("train_loss", "loss", "#1f77b4"),
    ("val_loss", "loss", "#ff7f0e"),
    ("val_accuracy", "accuracy", "#2ca02c"),
]


def standardized_digits():
    """The digits split, each pixel standardised with the training images' mean and std (+0.1)."""
    d = load_digits()
    mean, std = d.train_images.mean(0), d.train_images.std(0) + np.float32(0.1)
    scale = lambda x: np.ascontiguousarray((x - mean) / std, dtype=np.float32)  # noqa: E731
    return scale(d.train_images), d.train_labels, scale(d.test_images), d.test_labels


def _reference_nn():
    import picotorch
    return picotorch


class Stage:
    """Names what your side is doing, so that an error can say where it came from."""
    current = "your code"

    def __init__(self, text: str):
        self.text = text

    def __enter__(self):
        Stage.current = self.text

    def __exit__(self, *exc):
        return False


def describe_error(e: BaseException) -> str:
    """A one-line account of an exception raised while training: the stage, where, and what."""
    where = f"{Stage.current} (in {_where(e)})"
    if isinstance(e, NotImplementedError):
        return f"{where} raised NotImplementedError: an exercise is not done yet"
    return f"{where} raised {type(e).__name__}: {e}"


def _where(e: BaseException) -> str:
    """The innermost function of the notebook (not of a library) in the traceback, for the message."""
    name = "your code"
    for frame in traceback.extract_tb(e.__traceback__):
        if "site-packages" not in frame.filename and "course/widgets" not in frame.filename:
            name = frame.name
    return name


class TorchSide:
    """One run in plain torch."""

    def __init__(self, config, data, state_dict):
        x_train, y_train, x_test, y_test = (torch.from_numpy(a) for a in data)
        self.model = mlp(torch.nn, config["hidden"])
        self.model.load_state_dict(state_dict)
        name, kwargs, _ = OPTIMIZERS[config["optimizer"]]
        self.optimizer = getattr(torch.optim, name)(self.model.parameters(), lr=config["lr"], **kwargs)
        data = torch.utils.data
        self.train = data.DataLoader(data.TensorDataset(x_train, y_train), batch_size=config["batch_size"],
                                     shuffle=True, generator=torch.Generator().manual_seed(config["seed"]))
        self.test = data.DataLoader(data.TensorDataset(x_test, y_test), batch_size=512)

    def epoch(self) -> tuple:
        """One epoch of torch's training on the same data: (mean training loss, test accuracy)."""
        self.model.train()
        total, count = 0.0, 0
        for x, y in self.train:
            self.optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
            loss.backward()
            self.optimizer.step()
            total += loss.item() * len(x)
            count += len(x)
        self.model.eval()
        val, correct = 0.0, 0
        with torch.no_grad():
            for x, y in self.test:
                logits = self.model(x)
                val += torch.nn.functional.cross_entropy(logits, y).item() * len(x)
                correct += (logits.argmax(1) == y).sum().item()
        n = len(self.test.dataset)
        return total / count, val / n, correct / n


class YourSide:
    """The same run on your framework: your optimizer, loss, data set and loader, trained by your `fit`."""

    def __init__(self, config, data, state_dict, pieces, nn):
        with Stage("picotorch's MLP (chapter 03)"):
            x_train, y_train, x_test, y_test = (nn.from_numpy(a.copy()) for a in data)
            self.pieces = pieces
            self.model = mlp(nn, config["hidden"])
            self.model.load_state_dict(state_dict)
        name, kwargs, _ = OPTIMIZERS[config["optimizer"]]
        with Stage(f"your {name}(model.parameters(), ...)"):
            self.optimizer = pieces[name](self.model.parameters(), lr=config["lr"], **kwargs)
        with Stage("your TensorDataset and DataLoader"):
            self.train = pieces["DataLoader"](pieces["TensorDataset"](x_train, y_train),
                                              batch_size=config["batch_size"], shuffle=True,
                                              generator=torch.Generator().manual_seed(config["seed"]))
            self.test = pieces["DataLoader"](pieces["TensorDataset"](x_test, y_test), batch_size=512)

    def fit(self, epochs: int, on_epoch) -> None:
        """Train with the student's own fit() for `epochs`, calling `on_epoch` after each."""
        with Stage("your fit"):
            self.pieces["fit"](self.model, self.optimizer, self.pieces["cross_entropy"], self.train, self.test, epochs,
                               on_epoch=on_epoch)


def mlp(nn, hidden: int):
    """64 -> hidden -> 10 with a ReLU, from torch.nn or from picotorch."""
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


class TrainingDashboard:
    """The dashboard's state and logic; `widget` is what a notebook shows."""

    def __init__(self, pieces: dict | None = None, nn=None, seed: int = 0, optimizer: str = "Adam", lr=None,
                 batch_size: int = 32, epochs: int = 5, hidden: int = 64):
        self.pieces = dict(pieces or {})
        self.nn = nn
        self.seed, self.hidden = seed, hidden
        self.data = standardized_digits()
        self.train_button = widgets.Button(description="Train", button_style="primary", icon="play")
        self.reset_button = widgets.Button(description="Clear")
        self.optimizer_menu = widgets.Dropdown(options=list(OPTIMIZERS), value=optimizer, description="optimizer")
        self.lr_slider = widgets.FloatLogSlider(value=lr or OPTIMIZERS[optimizer][2], base=10, min=-4, max=0,
                                                step=0.1, readout_format=".1e", description="lr")
        self.batch_menu = widgets.Dropdown(options=list(BATCH_SIZES), value=batch_size, description="batch size")
        self.epochs_slider = widgets.IntSlider(value=epochs, min=1, max=30, description="epochs")
        self.status = widgets.HTML()
        self.chart = widgets.HTML()
        self.table = widgets.HTML()
        self.train_button.on_click(lambda _: self.run())
        self.reset_button.on_click(lambda _: self.reset())
        self.optimizer_menu.observe(self._optimizer_changed, names="value")
        self.widget = widgets.VBox([
            widgets.HBox([self.train_button, self.reset_button, self.optimizer_menu]),
            widgets.HBox([self.lr_slider, self.batch_menu, self.epochs_slider]),
            self.status, self.chart, self.table,
        ])
        self.reset()

    # --- logic ------------------------------------------------------------------------------
    def config(self) -> dict:
        """The settings chosen in the widget, as a dict."""
        return {"optimizer": self.optimizer_menu.value, "lr": float(self.lr_slider.value),
                "batch_size": int(self.batch_menu.value), "epochs": int(self.epochs_slider.value),
                "seed": self.seed, "hidden": self.hidden}

    def reset(self) -> None:
        """Forget both sides' runs and any error, and draw."""
        self.runs = {"yours": [], "torch": []}
        self.error = None
        self.last_config = None
        self.message = "Press <b>Train</b>: your framework and torch train the same MLP on the digits."
        self._render()

    def _optimizer_changed(self, change) -> None:
        self.lr_slider.value = OPTIMIZERS[change["new"]][2]

    def run(self, epochs: int | None = None) -> dict:
        """A fresh run of both sides with the current settings, `epochs` epochs (the slider's by default),
        redrawing after every epoch. Returns state()."""
        config = self.config()
        if epochs is not None:
            config["epochs"] = epochs
        self.runs = {"yours": [], "torch": []}
        self.error, self.last_config = None, config
        with torch.random.fork_rng():
            torch.manual_seed(config["seed"])
            start = mlp(torch.nn, config["hidden"])
        state_dict = {k: v.detach().clone() for k, v in start.state_dict().items()}
        theirs = TorchSide(config, self.data, state_dict)
        yours = self._your_side(config, state_dict)
        epochs = config["epochs"]
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # one core each, as NumPy uses for these small matrices; a busy pool only waits
        try:
            if yours is not None:
                self._fit_both(yours, theirs, epochs)
            while len(self.runs["torch"]) < epochs:  # torch alone: your side is not done, or stopped early
                self._torch_epoch(theirs, epochs)
        finally:
            torch.set_num_threads(threads)
        both = len(self.runs["yours"]) == epochs
        self.message = f"done: {epochs} epoch{'s' if epochs > 1 else ''}, " + \
            ("yours and torch's." if both else "torch's only." if not self.runs["yours"] else
             f"torch's; yours stopped after {len(self.runs['yours'])}.")
        self._render()
        return self.state()

    def _fit_both(self, yours, theirs, epochs: int) -> None:
        """Your fit drives: each time it reports an epoch (on_epoch), torch runs the same epoch and both are drawn."""
        mark = [time.perf_counter()]

        def on_epoch(record):
            seconds = time.perf_counter() - mark[0]
            self.runs["yours"].append({"epoch": len(self.runs["yours"]) + 1, "seconds": seconds,
                                       **{k: float(record[k]) for k in ("train_loss", "val_loss", "val_accuracy")}})
            self._torch_epoch(theirs, epochs)
            mark[0] = time.perf_counter()

        self.message = f"training: epoch 1 of {epochs} …"
        self._render()
        try:
            yours.fit(epochs, on_epoch)
            if len(self.runs["yours"]) < epochs:
                self.error = (f"your fit reported {len(self.runs['yours'])} of {epochs} epochs to on_epoch "
                              "(it must call on_epoch(record) after every epoch)")
        except Exception as e:  # a student's bug must not break the dashboard
            self.error = describe_error(e)

    def _torch_epoch(self, theirs, epochs: int) -> None:
        self.runs["torch"].append(self._timed(len(self.runs["torch"]) + 1, theirs.epoch))
        done = max(len(self.runs["torch"]), len(self.runs["yours"]))
        self.message = f"training: epoch {min(done + 1, epochs)} of {epochs} …"
        self._render()

    def _your_side(self, config, state_dict):
        missing = [name for name in PIECES if name not in self.pieces]
        if missing:
            self.error = f"not given to explore(): {', '.join(missing)}"
            return None
        try:
            nn = self.nn if self.nn is not None else _reference_nn()
            return YourSide(config, self.data, state_dict, self.pieces, nn)
        except Exception as e:
            self.error = describe_error(e)
            return None

    @staticmethod
    def _timed(epoch, run_epoch) -> dict:
        start = time.perf_counter()
        train_loss, val_loss, accuracy = run_epoch()
        return {"epoch": epoch, "train_loss": train_loss, "val_loss": val_loss, "val_accuracy": accuracy,
                "seconds": time.perf_counter() - start}

    def state(self) -> dict:
        """What the widget shows, as plain data (for tests and the browser check)."""
        return {"config": self.last_config, "yours": [dict(r) for r in self.runs["yours"]],
                "torch": [dict(r) for r in self.runs["torch"]], "error": self.error}

    def summary(self) -> list:
        """[(side, epochs, mean seconds per epoch, final test accuracy)] for the table."""
        rows = []
        for side in ("yours", "torch"):
            run = self.runs[side]
            if run:
                rows.append((side, len(run), sum(r["seconds"] for r in run) / len(run), run[-1]["val_accuracy"]))
        return rows

    # --- drawing ----------------------------------------------------------------------------
    def _render(self) -> None:
        self.status.value = f"<div style='margin:4px 0'>{self.message}</div>" + (
            f"<div style='color:#b00020'>your side stopped: {escape(self.error)}</div>" if self.error else "")
        self.chart.value = chart_svg(self.runs, self.last_config["epochs"] if self.last_config else
                                     self.epochs_slider.value)
        rows = self.summary()
        if not rows:
            self.table.value = ""
            return
        td = "<td style='padding:2px 14px 2px 0'>"
        cells = "".join(f"<tr>{td}{side}</td>{td}{n}</td>{td}{seconds * 1000:.0f} ms</td>{td}{acc:.1%}</td></tr>"
                        for side, n, seconds, acc in rows)
        ratio = ""
        if len(rows) == 2 and rows[1][2] > 0:
            ratio = f"<p>time per epoch, yours / torch's: <b>{rows[0][2] / rows[1][2]:.2f}×</b></p>"
        th = "<th style='padding:2px 14px 2px 0;text-align:left'>"
        self.table.value = (f"<table style='border-collapse:collapse'><tr>{th}side</th>{th}epochs</th>"
                            f"{th}time per epoch</th>{th}test accuracy</th></tr>" + cells + "</table>" + ratio)


def _ticks(low: float, high: float, count: int = 4) -> list:
    if high <= low:
        return [low]
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 5, 10) if m * step >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def panel_svg(runs: dict, keys: list, epochs: int, title: str, x0: float, width: float = 330,
              height: float = 220, fixed=None) -> str:
    """One panel: the series `keys` ((key, colour)) of both sides against the epoch."""
    left, right, top, bottom = 48, 10, 24, 30
    values = [r[k] for side in runs.values() for r in side for k, _ in keys if math.isfinite(r[k])]
    low, high = fixed if fixed else ((min(values), max(values)) if values else (0.0, 1.0))
    if not fixed:
        low = min(low, 0.0)
        high = high * 1.05 if high > 0 else 1.0
    if high <= low:
        high = low + 1
    n = max(epochs, 1)
    px = lambda e: x0 + left + (e - 1) / max(n - 1, 1) * (width - left - right)  # noqa: E731
    py = lambda v: top + (1 - (min(max(v, low), high) - low) / (high - low)) * (height - top - bottom)  # noqa: E731
    parts = [f"<text x='{x0 + left}' y='14' font-size='13' font-weight='bold'>{escape(title)}</text>",
             f"<rect x='{x0 + left}' y='{top}' width='{width - left - right}' height='{height - top - bottom}' "
             "fill='none' stroke='#999'/>"]
    for v in _ticks(low, high):
        y = py(v)
        parts.append(f"<line x1='{x0 + left - 4}' y1='{y:.1f}' x2='{x0 + width - right}' y2='{y:.1f}' stroke='#eee'/>")
        parts.append(f"<text x='{x0 + left - 6}' y='{y + 4:.1f}' font-size='10' text-anchor='end'>{v:.3g}</text>")
    step = max(1, math.ceil(n / 6))
    marks = list(range(1, n + 1, step))
    if n - marks[-1] > step / 2:
        marks.append(n)
    for e in marks:
        parts.append(f"<text x='{px(e):.1f}' y='{height - bottom + 14}' font-size='10' text-anchor='middle'>{e}</text>")
    parts.append(f"<text x='{x0 + (width + left) / 2:.1f}' y='{height - 4}' font-size='10' "
                 "text-anchor='middle'>epoch</text>")
    # yours: a wide, light line with dots; torch's: a thin dashed dark line on top, so that when the two runs
    # agree the dashes run along the middle of your line, and where they part, both show
    for side in ("yours", "torch"):
        for key, colour in keys:
            points = [(px(r["epoch"]), py(r[key])) for r in runs[side] if math.isfinite(r[key])]
            if not points:
                continue
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
            if side == "yours":
                parts.append(f"<polyline class='{side} {key}' points='{path}' fill='none' stroke='{colour}' "
                             "stroke-width='4' stroke-opacity='0.45' stroke-linejoin='round'/>")
                parts.extend(f"<circle cx='{x:.1f}' cy='{y:.1f}' r='3' fill='{colour}'/>" for x, y in points)
            else:
                parts.append(f"<polyline class='{side} {key}' points='{path}' fill='none' stroke='{DARK[colour]}' "
                             "stroke-width='1.5' stroke-dasharray='5 3'/>")
    return "".join(parts)


def chart_svg(runs: dict, epochs: int) -> str:
    """Two panels, loss and test accuracy, both sides on the same axes, and a legend."""
    width, height = 700, 250
    loss = panel_svg(runs, [(k, c) for k, p, c in SERIES if p == "loss"], epochs, "loss (cross-entropy)", 0)
    accuracy_values = [r["val_accuracy"] for side in runs.values() for r in side]
    low = min([0.8, *accuracy_values]) if accuracy_values else 0.8
    accuracy = panel_svg(runs, [(k, c) for k, p, c in SERIES if p == "accuracy"], epochs, "test accuracy", 350,
                         fixed=(math.floor(low * 20) / 20, 1.0))
    legend, x = [], 60
    for label, style in [("train loss", "stroke='#1f77b4' stroke-width='3'"),
                         ("test loss", "stroke='#ff7f0e' stroke-width='3'"),
                         ("test accuracy", "stroke='#2ca02c' stroke-width='3'"),
                         ("yours", "stroke='#555' stroke-width='4' stroke-opacity='0.45'"),
                         ("torch", "stroke='#222' stroke-width='1.5' stroke-dasharray='5 3'")]:
        legend.append(f"<line x1='{x}' y1='{height - 6}' x2='{x + 22}' y2='{height - 6}' {style}/>"
                      f"<text x='{x + 26}' y='{height - 2}' font-size='11'>{label}</text>")
        x += 40 + 7 * len(label)
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height + 14}' "
            f"viewBox='0 0 {width} {height + 14}' font-family='sans-serif'>{loss}{accuracy}{''.join(legend)}</svg>")


def explore(nn=None, seed: int = 0, **pieces):
    """The dashboard in a notebook cell: explore(SGD=SGD, Adam=Adam, ..., evaluate=evaluate)."""
    return TrainingDashboard(pieces, nn=nn, seed=seed).widget
