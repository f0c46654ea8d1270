"""The module inspector, on the course's reference picotorch and on torch: the same tree, keys, counts
and train/eval effects for the same model in both worlds, and a mode button that switches every module."""
from __future__ import annotations

import types

import ipywidgets as widgets
import pytest
import torch

from course.widgets import module_inspector
from course.widgets.module_inspector import EXAMPLES, ModuleInspector, explore, mode_effects, state_dict_rows, tree_rows
from widget_buttons import buttons


@pytest.fixture(scope="module")
def nn(reference_picotorch):
    """The reference picotorch as an `nn` namespace, as the notebook's OUR_NN is."""
    return types.SimpleNamespace(**{k: getattr(reference_picotorch, k) for k in dir(reference_picotorch)
                                    if not k.startswith("_")})


def comparable(tree):
    """The tree without what differs between the worlds by construction (none of it does, but ids)."""
    return [{k: v for k, v in row.items() if k not in ("describe",)} for row in tree]


def test_explore_returns_a_vbox_whose_first_button_switches_the_mode(nn):
    w = explore(nn)
    assert isinstance(w, widgets.VBox)
    first = buttons(w)[0]
    assert first.description == "Switch to eval()"
    before = [c.value for c in w.children if isinstance(c, widgets.HTML)]
    first.click()
    assert first.description == "Switch to train()"
    assert [c.value for c in w.children if isinstance(c, widgets.HTML)] != before


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_your_model_and_torchs_show_the_same(nn, example):
    mine = ModuleInspector(nn, example=example)
    theirs = ModuleInspector(nn, example=example)
    theirs.side.value = "torch"
    a, b = mine.state(), theirs.state()
    assert (a["framework"], b["framework"]) == ("yours", "torch")
    assert not a["note"] and not a["effects_error"] and not b["effects_error"]
    assert comparable(a["tree"]) == comparable(b["tree"])
    assert [r["describe"] for r in a["tree"]] == [r["describe"] for r in b["tree"]]  # extra_repr as torch's
    assert a["state_dict"] == b["state_dict"]
    assert a["parameter_count"] == b["parameter_count"] == sum(p.numel() for p in theirs.model.parameters())
    assert a["differs"] == b["differs"]


def test_the_tree_matches_torchs_own_walk():
    make, _ = EXAMPLES["tied heads in a ModuleList"]
    model = make(torch.nn)
    rows = tree_rows(model)
    assert [r["path"] for r in rows if r["shared_with"] is None] == [p for p, _ in model.named_modules()]
    assert state_dict_rows(model) == [(k, tuple(v.shape)) for k, v in model.state_dict().items()]
    by_path = {r["path"]: r for r in rows}
    assert ("scale", (6,), "float32", False) in by_path[""]["buffers"]  # a non-persistent buffer
    assert "scale" not in model.state_dict()
    # the tied weight is in two rows but counted once
    assert sum(p.numel() for p in model.parameters()) < sum(c for r in rows for _, _, c, _ in r["parameters"])


def test_a_shared_module_is_shown_once_and_then_named():
    inner = torch.nn.Linear(2, 2)
    model = torch.nn.Sequential(inner, torch.nn.ReLU(), inner)
    rows = tree_rows(model)
    assert [(r["path"], r["shared_with"]) for r in rows] == [("", None), ("0", None), ("1", None), ("2", "0")]
    assert rows[3]["parameters"] == []


def test_dropout_and_batchnorm_are_the_modules_that_change(nn):
    s = ModuleInspector(nn, example="an MLP with BatchNorm1d and Dropout").state()
    assert s["differs"] == ["", "1", "3"]  # the whole model, its BatchNorm1d and its Dropout
    s = ModuleInspector(nn, example="a text classifier: Embedding, LayerNorm, Flatten").state()
    assert s["differs"] == ["", "drop"]


@pytest.mark.parametrize("side", ["yours", "torch"])
def test_the_analysis_leaves_the_model_as_it_was(nn, side):
    w = ModuleInspector(nn, example="an MLP with BatchNorm1d and Dropout")
    w.side.value = side
    model = w.model
    model.eval()
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    before = {k: v if isinstance(v, torch.Tensor) else v.to_torch() for k, v in before.items()}
    mode_effects(model, w.x, w.current.no_grad)
    after = {k: v if isinstance(v, torch.Tensor) else v.to_torch() for k, v in model.state_dict().items()}
    assert all(torch.equal(before[k], after[k]) for k in before), "running statistics changed"
    assert not any(m.training for m in model.modules()), "the modes were not put back"


def test_the_mode_button_switches_every_module_and_back(nn):
    w = ModuleInspector(nn, example="a text classifier: Embedding, LayerNorm, Flatten")
    assert set(w.state()["modes"].values()) == {True}
    w.button.click()
    assert set(w.state()["modes"].values()) == {False}
    assert "eval()" in w.status.value
    w.button.click()
    assert set(w.state()["modes"].values()) == {True}


def test_in_eval_mode_the_output_is_torchs(nn):
    """The output shown for your model (loaded with torch's weights) is torch's, in eval mode."""
    mine = ModuleInspector(nn, example="an MLP with BatchNorm1d and Dropout")
    theirs = ModuleInspector(nn, example="an MLP with BatchNorm1d and Dropout")
    theirs.side.value = "torch"
    mine.model.load_state_dict(theirs.model.state_dict())
    mine.toggle_mode()
    theirs.toggle_mode()
    torch.testing.assert_close(mine.output(), theirs.output())


def test_an_unfinished_picotorch_falls_back_to_torch_with_a_note(nn):
    class Unfinished:
        def __getattr__(self, name):
            if name == "Linear":
                def linear(*args, **kwargs):
                    raise NotImplementedError()
                return linear
            return getattr(nn, name)

    w = ModuleInspector(Unfinished())
    s = w.state()
    assert s["framework"] == "torch" and "cannot build this model yet" in s["note"]
    assert s["note"] in w.status.value or "cannot build" in w.status.value


def test_without_picotorch_it_shows_torch():
    s = ModuleInspector(None).state()
    assert s["framework"] == "torch" and not s["note"]


def test_a_given_model_is_inspected_as_it_is(nn):
    model = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5), nn.Linear(4, 1))
    w = ModuleInspector(nn, model=model, x=torch.randn(5, 3))
    s = w.state()
    assert s["framework"] == "yours" and w.model is model
    assert s["differs"] == ["", "1"]
    assert len(buttons(w.widget)) == 1  # no example chooser for a given model
    torch_model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
    s = ModuleInspector(None, model=torch_model).state()
    assert s["framework"] == "torch" and s["differs"] == [] and s["parameter_count"] == 16


def test_the_examples_run_in_both_worlds(nn):
    for name, (make, make_input) in EXAMPLES.items():
        x = make_input(torch.Generator().manual_seed(0))
        torch_model = make(torch.nn).eval()
        mine = make(nn).eval()
        mine.load_state_dict(torch_model.state_dict())
        with torch.no_grad():
            want = torch_model(x)
        got = mine(nn.from_torch(x.clone())).to_torch()
        torch.testing.assert_close(got, want, msg=name)
    assert module_inspector.SEED == 0
