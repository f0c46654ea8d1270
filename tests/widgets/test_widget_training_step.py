"""The training-step widget, checked against real torch doing the same steps."""
import ipywidgets as widgets
import torch
from torch import nn
from torch.utils.data import DataLoader

from course.widgets.training_step import STEPS, WATCHABLE, TrainingStepExplorer, explore, fmt

SEED = 3


def clicks(ex, n):
    for _ in range(n):
        ex.next_button.click()


def element(t, label):
    name, idx = WATCHABLE[label]
    return t[name][idx].item() if isinstance(t, dict) else t[idx].item()


def reference_grads(ex):
    """Rebuild model and first batch from the seed alone and backprop in plain torch."""
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        fc = nn.Linear(3, 2)
    loader = DataLoader(ex.dataset, batch_size=ex.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(SEED))
    x, y = next(iter(loader))
    loss = nn.functional.cross_entropy(fc(x), y)
    loss.backward()
    return {"fc.weight": fc.weight.grad, "fc.bias": fc.bias.grad}, loss.item(), x


def params(ex):
    return {k: v.detach().clone() for k, v in ex.model.named_parameters()}


def test_explore_returns_a_vbox_with_the_controls():
    w = explore(seed=SEED)
    assert isinstance(w, widgets.VBox)
    kids = [w.children[0].children, w.children[1].children]
    assert any(isinstance(c, widgets.Button) and c.description == "Next step" for c in kids[0])
    assert any(isinstance(c, widgets.Button) and c.description == "Reset" for c in kids[0])
    assert any(isinstance(c, widgets.Dropdown) for c in kids[1])
    assert any(isinstance(c, (widgets.FloatSlider, widgets.FloatLogSlider)) for c in kids[1])


def test_clicks_walk_the_six_components_in_order():
    ex = TrainingStepExplorer(seed=SEED)
    assert ex.step_index == 0 and ex.state()["component"] is None
    seen = []
    for n in range(1, 7):
        ex.next_button.click()
        assert ex.step_index == n
        seen.append((ex.state()["step"], ex.state()["component"]))
        assert "▶" in ex.html.value
    assert [s for s, _ in seen] == ["next batch", "forward", "loss", "zero_grad", "backward", "step"]
    comps = [c for _, c in seen]
    assert comps[0] == "DataLoader" and comps[1] == "nn.Module"
    assert "loss function" in comps[2] and "nn.Module" in comps[2]
    assert comps[3] == comps[5] == "Optimizer" and comps[4] == "Autograd engine"
    assert comps == [c for _, c, _ in STEPS]


def test_grad_after_backward_matches_plain_torch():
    ex = TrainingStepExplorer(seed=SEED)
    ref, ref_loss, ref_x = reference_grads(ex)
    clicks(ex, 4)
    assert ex.state()["grad"] is None          # nothing has run backward yet
    torch.testing.assert_close(ex.batch[0], ref_x)
    torch.testing.assert_close(ex.state()["loss"], ref_loss)
    assert "(4, 3)" in ex.html.value            # batch shape shown
    ex.next_step()                              # backward
    assert ex.state()["step"] == "backward"
    for label in WATCHABLE:
        ex.dropdown.value = label
        got = ex.state()["grad"]
        torch.testing.assert_close(got, element(ref, label))
        assert f".grad</b> = {fmt(got)}" in ex.html.value


def test_step_applies_minus_lr_times_grad_and_shows_new_value():
    ex = TrainingStepExplorer(seed=SEED, lr=0.3)
    clicks(ex, 5)
    old, grad = ex.state()["value"], ex.state()["grad"]
    ex.next_step()
    s = ex.state()
    torch.testing.assert_close(s["value"], old - 0.3 * grad)
    assert s["value"] != old
    torch.testing.assert_close(s["update"]["old"], old)
    torch.testing.assert_close(s["update"]["new"], s["value"])
    torch.testing.assert_close(s["update"]["delta"], -0.3 * grad)
    assert f"= {fmt(s['value'])}" in ex.html.value
    assert fmt(old) in ex.html.value and fmt(-0.3 * grad) in ex.html.value


def test_lr_slider_changes_the_update():
    deltas = {}
    for lr in (0.05, 0.8):
        ex = TrainingStepExplorer(seed=SEED)
        clicks(ex, 5)
        ex.lr_slider.value = lr                 # changed just before step()
        old, grad = ex.state()["value"], ex.state()["grad"]
        ex.next_step()
        torch.testing.assert_close(ex.state()["value"], old - lr * grad)
        deltas[lr] = ex.state()["value"] - old
    assert deltas[0.05] != deltas[0.8]
    torch.testing.assert_close(deltas[0.8] / deltas[0.05], 16.0, rtol=1e-3, atol=0)


def test_dropdown_changes_the_watched_value():
    ex = TrainingStepExplorer(seed=SEED)
    shown = {}
    for label in WATCHABLE:
        ex.dropdown.value = label
        assert ex.watched == label
        torch.testing.assert_close(ex.state()["value"], element(params(ex), label))
        assert f"<b>{label}</b> = {fmt(ex.state()['value'])}" in ex.html.value
        shown[label] = ex.html.value
    assert len(set(shown.values())) == len(WATCHABLE)


def test_reset_restores_step_zero_and_original_parameters():
    ex = TrainingStepExplorer(seed=SEED)
    before = params(ex)
    clicks(ex, 1)
    first_batch = ex.batch[0].clone()
    clicks(ex, 8)                               # through a step and into iteration 2
    assert any(not torch.equal(before[k], v) for k, v in params(ex).items())
    ex.reset_button.click()
    assert (ex.step_index, ex.iteration) == (0, 1)
    for k, v in params(ex).items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)
    s = ex.state()
    assert s["grad"] is None and s["loss"] is None and s["update"] is None
    ex.next_step()
    torch.testing.assert_close(ex.batch[0], first_batch)


def test_seventh_click_starts_iteration_two_and_zero_grad_gives_none():
    ex = TrainingStepExplorer(seed=SEED)
    clicks(ex, 6)
    assert ex.iteration == 1
    ex.next_button.click()
    assert (ex.iteration, ex.step_index) == (2, 1)
    assert ex.state()["component"] == "DataLoader" and ex.state()["update"] is None
    clicks(ex, 2)                               # forward, loss: last grads still there
    assert ex.state()["grad"] is not None
    ex.next_step()                              # zero_grad
    assert ex.state()["step"] == "zero_grad"
    p = dict(ex.model.named_parameters())[WATCHABLE[ex.watched][0]]
    assert p.grad is None and ex.state()["grad"] is None
    assert ".grad</b> = None" in ex.html.value


def test_same_seed_same_run_different_seed_differs():
    a, b, c = (TrainingStepExplorer(seed=s) for s in (SEED, SEED, SEED + 1))
    for ex in (a, b, c):
        clicks(ex, 12)
    assert a.state() == b.state()
    assert a.state()["value"] != c.state()["value"]
