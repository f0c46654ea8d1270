"""The training dashboard, on the course's reference picotorch and on torch: both sides of a run
must agree with each other (the reference matches torch step for step), the curves must be drawn
where the numbers say, and a broken framework must leave torch's side running."""
from __future__ import annotations

import re

import ipywidgets as widgets
import pytest

from course.widgets import training_dashboard as td
from course.widgets.training_dashboard import OPTIMIZERS, PIECES, TrainingDashboard, chart_svg, explore
from widget_buttons import buttons


@pytest.fixture(scope="module")
def pico(reference_picotorch):
    return reference_picotorch


def pieces_of(pico) -> dict:
    return {name: getattr(pico, name) for name in PIECES}


def test_explore_returns_a_vbox_whose_first_button_trains(pico):
    w = explore(nn=pico, **pieces_of(pico))
    assert isinstance(w, widgets.VBox)
    first = buttons(w)[0]
    assert first.description == "Train"
    chart, epochs = w.children[3], w.children[1].children[2]
    assert isinstance(epochs, widgets.IntSlider)
    epochs.value = 1
    before = chart.value
    first.click()  # what the browser test does
    assert chart.value != before and "<polyline" in chart.value


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_your_run_and_torchs_agree_epoch_by_epoch(pico, optimizer):
    dash = TrainingDashboard(pieces_of(pico), nn=pico, optimizer=optimizer, epochs=2)
    state = dash.run()
    assert state["error"] is None
    assert [r["epoch"] for r in state["yours"]] == [r["epoch"] for r in state["torch"]] == [1, 2]
    for mine, theirs in zip(state["yours"], state["torch"]):
        for key in ("train_loss", "val_loss"):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-4), (optimizer, key, mine, theirs)
        assert abs(mine["val_accuracy"] - theirs["val_accuracy"]) <= 2 / 355, (optimizer, mine, theirs)
        assert mine["seconds"] > 0 and theirs["seconds"] > 0
    assert state["torch"][-1]["val_accuracy"] > 0.8  # it learns something in two epochs


def test_settings_reach_both_sides(pico):
    dash = TrainingDashboard(pieces_of(pico), nn=pico)
    dash.optimizer_menu.value = "SGD, momentum 0.9"
    assert dash.lr_slider.value == pytest.approx(OPTIMIZERS["SGD, momentum 0.9"][2])
    dash.lr_slider.value = 0.01
    dash.batch_menu.value = 128
    dash.epochs_slider.value = 1
    state = dash.run()
    assert state["config"]["optimizer"] == "SGD, momentum 0.9" and state["config"]["batch_size"] == 128
    assert state["config"]["lr"] == pytest.approx(0.01, rel=1e-6)
    assert len(state["yours"]) == len(state["torch"]) == 1
    slow = state["torch"][0]["train_loss"]
    dash.lr_slider.value = 0.3
    fast = dash.run()["torch"][0]["train_loss"]
    assert fast < slow  # a larger rate learns faster in one epoch of SGD with momentum: the setting was used
    dash.reset()
    assert dash.state()["yours"] == [] and dash.state()["torch"] == []


def test_the_chart_draws_both_sides_on_the_same_axes(pico):
    dash = TrainingDashboard(pieces_of(pico), nn=pico, epochs=3)
    dash.run()
    svg = dash.chart.value
    for side in ("yours", "torch"):
        for key in ("train_loss", "val_loss", "val_accuracy"):
            lines = re.findall(rf"<polyline class='{side} {key}' points='([^']*)'", svg)
            assert len(lines) == 1, (side, key)
            assert len(lines[0].split()) == 3  # one point per epoch
    # the same numbers land on the same pixels: your run and torch's agree, so their lines nearly coincide
    mine = re.search(r"<polyline class='yours val_accuracy' points='([^']*)'", svg).group(1).split()
    theirs = re.search(r"<polyline class='torch val_accuracy' points='([^']*)'", svg).group(1).split()
    for a, b in zip(mine, theirs):
        (xa, ya), (xb, yb) = map(float, a.split(",")), map(float, b.split(","))
        assert xa == xb and abs(ya - yb) < 3
    assert "dasharray" in svg and "torch" in svg and "yours" in svg
    table = dash.table.value
    assert "yours" in table and "torch" in table and "time per epoch" in table and "×" in table


def test_chart_scales_values_into_the_panels():
    runs = {"yours": [{"epoch": 1, "train_loss": 2.0, "val_loss": 1.5, "val_accuracy": 0.5},
                      {"epoch": 2, "train_loss": 1.0, "val_loss": float("nan"), "val_accuracy": 0.9}],
            "torch": []}
    svg = chart_svg(runs, 2)
    points = re.search(r"class='yours train_loss' points='([^']*)'", svg).group(1).split()
    (x1, y1), (x2, y2) = (tuple(map(float, p.split(","))) for p in points)
    assert x1 < x2 and y1 < y2  # a falling loss is drawn falling (SVG's y grows downwards)
    nan_line = re.search(r"class='yours val_loss' points='([^']*)'", svg).group(1).split()
    assert len(nan_line) == 1  # a nan is left out, not drawn
    for x, y in (map(float, p.split(",")) for p in points):
        assert 0 <= x <= 700 and 0 <= y <= 250
    assert chart_svg({"yours": [], "torch": []}, 5).startswith("<svg")


class Broken:
    """An optimizer whose exercise is not done yet."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError()


def test_a_blank_exercise_leaves_torch_training_and_says_why(pico):
    pieces = dict(pieces_of(pico), Adam=Broken)
    dash = TrainingDashboard(pieces, nn=pico, epochs=2)
    state = dash.run()
    assert state["yours"] == [] and len(state["torch"]) == 2
    assert "NotImplementedError" in state["error"] and "NotImplementedError" in dash.status.value
    assert state["error"].startswith("your Adam(model.parameters(), ...)")  # it says which piece
    assert "torch's only" in dash.status.value


def test_a_bug_in_the_middle_of_a_run_stops_only_your_side(pico):
    def failing_fit(*args, on_epoch=None, **kwargs):
        def reporting(record):
            on_epoch(record)
            if record["epoch"] == 1:
                raise ValueError("boom")
        return pico.fit(*args, on_epoch=reporting, **kwargs)

    dash = TrainingDashboard(dict(pieces_of(pico), fit=failing_fit), nn=pico, epochs=3)
    state = dash.run()
    assert len(state["yours"]) == 1 and len(state["torch"]) == 3
    assert "ValueError" in state["error"] and "boom" in state["error"]
    assert state["error"].startswith("your fit (in reporting)")
    assert "yours stopped after 1" in dash.status.value


def test_a_fit_that_never_reports_is_named(pico):
    def silent_fit(*args, on_epoch=None, **kwargs):
        return pico.fit(*args, **kwargs)

    state = TrainingDashboard(dict(pieces_of(pico), fit=silent_fit), nn=pico, epochs=2).run()
    assert state["yours"] == [] and len(state["torch"]) == 2
    assert "on_epoch" in state["error"]


def test_your_fit_drives_and_torch_follows_epoch_by_epoch(pico):
    order = []

    def watched_fit(*args, on_epoch=None, **kwargs):
        def reporting(record):
            order.append(("yours", record["epoch"], len(dash.runs["torch"])))
            on_epoch(record)
        return pico.fit(*args, on_epoch=reporting, **kwargs)

    dash = TrainingDashboard(dict(pieces_of(pico), fit=watched_fit), nn=pico, epochs=3)
    dash.run()
    assert order == [("yours", 1, 0), ("yours", 2, 1), ("yours", 3, 2)]  # live: torch's epoch k after yours


def test_missing_pieces_are_named(pico):
    dash = TrainingDashboard({"SGD": pico.SGD}, nn=pico, epochs=1)
    state = dash.run()
    assert "not given to explore()" in state["error"] and "DataLoader" in state["error"] and "fit" in state["error"]
    assert len(state["torch"]) == 1


def test_without_nn_the_dashboard_imports_picotorch(pico, monkeypatch):
    monkeypatch.setattr(td, "_reference_nn", lambda: pico)
    dash = TrainingDashboard(pieces_of(pico), epochs=1)
    assert dash.run()["error"] is None
