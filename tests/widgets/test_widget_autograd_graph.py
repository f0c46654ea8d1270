"""The autograd graph viewer, on the course's reference picotorch and on torch, checked against torch."""
from __future__ import annotations


import ipywidgets as widgets
import pytest
import torch

from course.widgets import autograd_graph
from course.widgets.autograd_graph import EXAMPLES, LEAVES, AutogradGraphViewer, ExpressionError, explore, parse_program
from widget_buttons import buttons


@pytest.fixture(scope="module")
def pico(reference_picotorch):
    return reference_picotorch


def viewer(pico, expression, **kw):
    return AutogradGraphViewer(pico.from_torch, pico.no_grad, expression=expression, **kw)


def torch_grads(expression, seed=0):
    """The leaves' gradients for the expression, computed by plain torch from the same leaf values."""
    g = torch.Generator().manual_seed(seed)
    leaves = {n: torch.randn(s, generator=g).round(decimals=2).requires_grad_() for n, s in LEAVES.items()}
    names = dict(leaves)
    *assignments, last = [p.strip() for p in expression.split(";")]
    for a in assignments:
        target, expr = a.split("=", 1)
        names[target.strip()] = eval(expr, {}, names)
    out = eval(last, {}, names)
    out.backward(torch.ones_like(out))
    return {n: t.grad for n, t in leaves.items() if t.grad is not None}


def test_explore_returns_a_vbox_whose_first_button_steps(pico):
    w = explore(pico.from_torch, pico.no_grad)
    assert isinstance(w, widgets.VBox)
    first = buttons(w)[0]
    assert first.description.startswith("Step backward")
    text = [c for c in w.children[1].children if isinstance(c, widgets.Text)]
    assert text and any(isinstance(c, widgets.Dropdown) for c in w.children[1].children)


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_stepping_your_graph_ends_with_torchs_gradients(pico, example):
    expression = EXAMPLES[example]
    v = viewer(pico, expression)
    s = v.state()
    assert s["framework"] == "yours" and s["error"] is None and s["note"] is None
    assert s["step"] == 0 and all(g is None for g in s["leaf_grads"].values())
    seen = [v.graph_html.value]
    for n in range(1, s["total"] + 1):
        v.step_button.click()
        assert v.state()["step"] == n
        seen.append(v.graph_html.value)
    assert len(set(seen)) == len(seen), "every step must change the picture"
    s = v.state()
    assert s["finished"] and s["error"] is None
    want = torch_grads(expression)
    assert set(s["torch_grads"]) == set(want)
    for name, grad in want.items():
        torch.testing.assert_close(torch.tensor(s["leaf_grads"][name]), grad.reshape(-1))
        torch.testing.assert_close(torch.tensor(s["torch_grads"][name]), grad.reshape(-1))
        assert f"{name} {LEAVES[name]}" in v.graph_html.value
    assert "matches torch ✓" in v.torch_html.value and "differs" not in v.torch_html.value


def test_the_walk_is_in_dependency_order_and_runs_each_node_once(pico):
    v = viewer(pico, "h = x * y; g = h.exp(); (h + g * h).sum()")
    v.run_button.click()
    g, walk = v.graph, v.walk
    assert sorted(walk.done) == list(range(len(g.nodes))), "each node runs exactly once"
    position = {node: k for k, node in enumerate(walk.done)}
    for a, b, _ in g.edges:
        assert position[a] < position[b], f"{g.names[b]} ran before {g.names[a]}, which feeds it"
    assert g.names.count("MulBackward") == 2 and g.names.count("AccumulateGrad") == 2


def test_names_match_torchs_and_the_chain_is_torchs(pico):
    v = viewer(pico, EXAMPLES["a diamond: h is used twice"])
    s = v.state()
    assert s["nodes"] == ["SumBackward", "AddBackward", "MulBackward", "ExpBackward", "AccumulateGrad", "AccumulateGrad"]
    chain = "\n".join(s["torch_chain"])
    for name in ("SumBackward0", "AddBackward0", "MulBackward0", "ExpBackward0", "AccumulateGrad (x)",
                 "AccumulateGrad (y)"):
        assert name in chain
    assert "↑ again" in chain, "a node reached twice is marked, not drawn twice"
    assert "torch's grad_fn chain" in v.torch_html.value


def test_gradients_appear_on_the_edges_as_they_arrive(pico):
    v = viewer(pico, "(x * y).sum()")
    v.step()  # SumBackward sends ones to MulBackward
    assert v.state()["current"] == "SumBackward"
    assert "(3,) [1, 1, 1]" in v.graph_html.value
    assert "SumBackward</b> ran and sent (3,) [1, 1, 1] to MulBackward" in v.status.value
    v.step()  # MulBackward sends y to x's AccumulateGrad and x to y's
    assert autograd_graph.preview(torch_grads("(x * y).sum()")["x"]) in v.graph_html.value


def test_without_your_autograd_it_shows_torchs_graph_stepped_the_same_way():
    def not_written_yet(t):
        raise NotImplementedError()

    v = AutogradGraphViewer(not_written_yet, object, expression=EXAMPLES["log-sum-exp"])
    s = v.state()
    assert s["framework"] == "torch" and "NotImplementedError" in s["note"]
    assert "MaxBackward1" in s["nodes"] and "MvBackward0" in s["nodes"]
    before = v.status.value + v.graph_html.value
    v.step_button.click()
    assert v.status.value + v.graph_html.value != before
    v.run_to_end()
    s = v.state()
    assert s["finished"] and s["error"] is None
    for name, grad in torch_grads(EXAMPLES["log-sum-exp"]).items():
        torch.testing.assert_close(torch.tensor(s["leaf_grads"][name]), grad.reshape(-1))


def test_a_failing_backward_is_reported_where_it_fails(pico, monkeypatch):
    def broken(ctx, grad):
        raise ValueError("exp backward is broken")

    monkeypatch.setattr(pico.FUNCTIONS["exp"], "backward", staticmethod(broken))
    v = viewer(pico, "(x.exp() * y).sum()")
    v.run_to_end()
    s = v.state()
    assert "ExpBackward" in s["error"] and "exp backward is broken" in s["error"]
    assert "backward failed" in v.status.value


@pytest.mark.parametrize("text,message", [
    ("x +", "cannot read"),
    ("", "write an expression"),
    ("x.__class__", "names starting with _"),
    ("__import__('os')", "names starting with _"),
    ("(x * 2) if True else y", None),
])
def test_bad_expressions_say_what_is_wrong(pico, text, message):
    if message is None:
        parse_program(text)  # a conditional expression is fine: it is Python
        return
    with pytest.raises(ExpressionError, match=message):
        parse_program(text)
    v = viewer(pico, "(x * y).sum()")
    v.expression.value = text
    assert message in v.state()["error"] and message in v.status.value
    v.step()  # nothing to step: no crash
    assert v.state()["step"] == 0


def test_torchs_own_errors_and_constant_outputs_are_explained(pico):
    v = viewer(pico, "(W @ y.unsqueeze(0)).sum()")
    assert "torch cannot run this expression" in v.state()["error"]
    v.expression.value = "x.detach().sum()"
    assert "does not depend on any leaf" in v.state()["error"]


def test_reset_and_examples(pico):
    v = viewer(pico, EXAMPLES["a layer"])
    v.run_to_end()
    assert v.state()["finished"]
    v.reset_button.click()
    s = v.state()
    assert s["step"] == 0 and not s["finished"] and all(g is None for g in s["leaf_grads"].values())
    v.examples.value = "broadcasting"
    assert v.expression.value == EXAMPLES["broadcasting"]
    assert "UnsqueezeBackward" in v.state()["nodes"]


def test_same_seed_same_leaves_other_seed_differs(pico):
    a, b, c = (viewer(pico, "(x * y).sum()", seed=s) for s in (3, 3, 4))
    for v in (a, b, c):
        v.run_to_end()
    assert a.state()["leaf_grads"] == b.state()["leaf_grads"] != c.state()["leaf_grads"]
