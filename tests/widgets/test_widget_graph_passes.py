"""The graph-passes viewer of chapter 06, driven through its widgets and its pure functions: where it
places the nodes, what it counts and says each pass changed, how it colours fusion groups, how it steps
through the stages, and what it says of bad input. The stages are built by hand here, as the chapter's
graph_stages() builds them from its graphs; the widget never sees picotorch or torch."""
from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import ipywidgets as widgets
import pytest

from course.widgets import graph_passes
from course.widgets.graph_passes import (PALETTE, GraphPassesExplorer, colour_key, describe_change, describe_stage,
                                         edge_route, explore, group_colours, layout, op_counts, parse_stages, rows,
                                         stage_diff)
from widget_buttons import buttons

SHAPE, DTYPE = (3, 4), "float32"


def node(name, op, *inputs, kind="call", group=None, members=(), shape=SHAPE, **extra):
    return {"name": name, "op": op, "kind": kind, "inputs": list(inputs), "shape": shape, "dtype": DTYPE,
            "group": group, "members": list(members), **extra}


def placeholder(name, shape=SHAPE):
    return node(name, "placeholder", kind="placeholder", shape=shape)


def constant(name, shape=(4,)):
    return node(name, "constant", kind="constant", shape=shape)


def output(*inputs):
    return node("output", "output", *inputs, kind="output", shape=None)


def pipeline() -> list:
    """f(x, y) as captured, then after each pass: a dead sin, a duplicated exp, two constants to fold,
    and an elementwise chain to fuse."""
    x, y = placeholder("x"), placeholder("y")
    add, mul = node("add", "add", "x", "y"), node("mul", "mul", "add", "y")
    exp, exp_1 = node("exp", "exp", "mul"), node("exp_1", "exp", "mul")
    c0, c1, add_2 = constant("c0"), constant("c1"), node("add_2", "add", "c0", "c1", shape=(4,))
    captured = [x, y, add, mul, node("sin", "sin", "x"), exp, exp_1, node("add_1", "add", "exp", "exp_1"),
                c0, c1, add_2, node("mul_1", "mul", "add_1", "add_2"), output("mul_1")]
    no_dead = [n for n in captured if n["name"] != "sin"]
    no_duplicate = [n for n in no_dead if n["name"] != "exp_1"]
    no_duplicate = [node("add_1", "add", "exp", "exp") if n["name"] == "add_1" else n for n in no_duplicate]
    folded = [x, y, add, mul, exp, node("add_1", "add", "exp", "exp"), constant("_folded_0"),
              node("mul_1", "mul", "add_1", "_folded_0"), output("mul_1")]
    members = ["add", "mul", "exp", "add_1", "mul_1"]
    fused = [x, y, constant("_folded_0"),
             node("fused_0", "fused", "x", "y", "_folded_0", kind="fused", group=0, members=members,
                  source="extern \"C\" __global__ void fused_0(...) { /* x + y ... */ }"),
             output("fused_0")]
    return [{"title": "captured", "nodes": captured},
            {"title": "after dead-code elimination", "nodes": no_dead},
            {"title": "after CSE", "nodes": no_duplicate},
            {"title": "after constant folding", "nodes": folded},
            {"title": "after fusion", "nodes": fused}]


def grouped() -> dict:
    """A stage whose call nodes are marked with their fusion groups, before they are fused."""
    return {"title": "fusion groups", "nodes": [
        placeholder("x"), placeholder("w"),
        node("relu", "relu", "x", group=0), node("mul", "mul", "relu", "x", group=0),
        node("matmul", "matmul", "mul", "w"),
        node("exp", "exp", "matmul", group=1), node("neg", "neg", "exp", group=1), output("neg")]}


# ------------------------------------------------------------------ the widget in a notebook


def test_explore_returns_a_vbox_with_an_svg_whose_first_button_shows_the_next_pass():
    box = explore(pipeline())
    assert isinstance(box, widgets.VBox)
    first = buttons(box)[0]
    assert first.description == "Next pass ▶"
    shown = [w for w in box.children if isinstance(w, widgets.HTML)]
    assert "<svg" in shown[1].value and "captured" in shown[0].value
    before = [w.value for w in shown]
    first.click()
    assert [w.value for w in shown] != before
    assert "after dead-code elimination" in shown[0].value


def test_next_and_previous_step_through_the_stages_and_wrap_around():
    v = GraphPassesExplorer(pipeline())
    titles = [s["title"] for s in pipeline()]
    seen, pictures = [], []
    for _ in range(len(titles)):
        seen.append(v.state()["title"])
        pictures.append(v.graph_html.value)
        v.next_button.click()
    assert seen == titles and v.state()["index"] == 0, "next from the last stage is the first"
    assert len(set(pictures)) == len(pictures), "every pass changes the picture"
    v.previous_button.click()
    assert v.state()["title"] == "after fusion" and v.chooser.value == 4
    v.previous_button.click()
    assert v.state()["title"] == "after constant folding" and "Stage 4 of 5" in v.summary_html.value


def test_the_dropdown_jumps_to_a_stage_and_follows_the_buttons():
    v = GraphPassesExplorer(pipeline(), start=1)
    assert v.state()["title"] == "after dead-code elimination"
    v.chooser.value = 4
    assert v.state()["index"] == 4 and "fused_0" in v.graph_html.value
    assert "exp_1" not in v.graph_html.value
    v.next_button.click()
    assert v.chooser.value == 0 and v.state()["title"] == "captured"
    assert [label for label, _ in v.chooser.options][2] == "2: after CSE"


def test_a_fused_node_shows_its_members_its_kernel_and_its_source():
    v = GraphPassesExplorer(pipeline(), start=4)
    html = v.graph_html.value
    assert "%fused_0 = fused" in html and "[add · mul · exp · add_1 · mul_1]" in html
    assert "fused node fused_0: one kernel for add + mul + exp + add_1 + mul_1" in html
    assert "CUDA source of fused_0" in html and "__global__ void fused_0" in html
    assert "fused 5 into one kernel, fused_0: add + mul + exp + add_1 + mul_1" in v.summary_html.value


def test_call_nodes_show_op_shape_and_dtype_and_text_is_escaped():
    stage = {"title": "<b>odd</b>", "nodes": [placeholder("x"), node("lt", "<", "x"), output("lt")]}
    v = GraphPassesExplorer([stage])
    assert "%lt = &lt;" in v.graph_html.value and "(3, 4) float32" in v.graph_html.value
    assert "<b>odd</b>" not in v.summary_html.value and "&lt;b&gt;odd" in v.summary_html.value


# ------------------------------------------------------------------ layout


def assert_well_placed(stage):
    parsed = parse_stages([stage])[0]
    boxes, row = layout(parsed), rows(parsed)
    assert set(boxes) == {n.name for n in parsed.nodes}, "every node is placed"
    for n in parsed.nodes:
        for i in n.inputs:
            assert row[i] < row[n.name], f"{i} feeds {n.name} but is not above it"
            assert boxes[i].y + boxes[i].height / 2 < boxes[n.name].y - boxes[n.name].height / 2
    by_row = {}
    for name, b in boxes.items():
        assert b.row == row[name] and b.x - b.width / 2 >= 0
        by_row.setdefault(b.row, []).append(b)
    for same in by_row.values():
        same.sort(key=lambda b: b.x)
        for left, right in zip(same, same[1:]):
            assert left.x + left.width / 2 < right.x - right.width / 2, "two boxes of a row overlap"
    for n in parsed.nodes:  # an edge past rows in between goes down a lane that no box of those rows covers
        for i in n.inputs:
            route = edge_route(boxes[i], boxes[n.name], boxes.values())
            assert route[0][1] < route[-1][1] and len(route) == (2 if row[n.name] - row[i] == 1 else 4)
            if len(route) == 4:
                (lane, top), (same_lane, bottom) = route[1], route[2]
                assert lane == same_lane and top < bottom
                for b in boxes.values():
                    if row[i] < b.row < row[n.name]:
                        assert abs(lane - b.x) > b.width / 2, f"the edge {i} -> {n.name} crosses a box"
                        assert top < b.y - b.height / 2 and bottom > b.y + b.height / 2
    outputs = [row[n.name] for n in parsed.nodes if n.kind == "output"]
    assert all(r == max(row.values()) for r in outputs), "the outputs are on the last row"
    return parsed, boxes, row


@pytest.mark.parametrize("k", range(5))
def test_every_node_is_placed_below_its_inputs_without_overlaps(k):
    assert_well_placed(pipeline()[k])


def test_placeholders_on_top_and_constants_just_above_their_first_user():
    _, _, row = assert_well_placed(pipeline()[0])
    assert row["x"] == row["y"] == 0
    assert row["c0"] == row["c1"] == row["add_2"] - 1, "constants sit just above their user"
    assert row["add_2"] == row["mul_1"] - 1 == 4, "what is computed from constants alone sinks to its user"
    assert row["mul_1"] == 5 and row["output"] == 6


@pytest.mark.parametrize("seed", range(20))
def test_random_graphs_are_placed_below_their_inputs(seed):
    rng = random.Random(seed)
    nodes = [placeholder(f"p{k}") for k in range(rng.randint(0, 3))]
    for k in range(rng.randint(0, 25)):
        earlier = [n["name"] for n in nodes if n["kind"] != "output"]
        if not earlier or rng.random() < 0.15:
            nodes.append(constant(f"c{k}"))
            continue
        inputs = rng.sample(earlier, rng.randint(1, min(3, len(earlier))))
        nodes.append(node(f"op{k}", rng.choice(["add", "mul", "exp", "where"]), *inputs,
                          group=rng.choice([None, 0, 1])))
    if nodes:
        nodes.append(output(*rng.sample([n["name"] for n in nodes], min(2, len(nodes)))))
    assert_well_placed({"title": "random", "nodes": nodes})


def test_an_empty_graph_is_drawn_as_empty():
    v = GraphPassesExplorer([{"title": "nothing", "nodes": []}])
    assert "no nodes" in v.graph_html.value and "0 call nodes" in v.summary_html.value


# ------------------------------------------------------------------ counts and changes


def test_op_counts_and_the_stage_line_count_call_nodes_only():
    stages = parse_stages(pipeline())
    assert op_counts(stages[0]) == {"add": 3, "mul": 2, "sin": 1, "exp": 2}
    assert describe_stage(stages[0]) == "8 call nodes (add ×3, mul ×2, sin, exp ×2), 2 constants, 2 inputs, 1 output"
    assert op_counts(stages[4]) == {"fused": 1}
    assert GraphPassesExplorer(pipeline()).state()["call_nodes"] == 8


def test_each_pass_is_described_by_what_it_did():
    stages = parse_stages(pipeline())
    diffs = [stage_diff(a, b) for a, b in zip(stages, stages[1:])]
    empty = {"fused": {}, "merged": {}, "folded": {}, "removed": [], "replaced": {}, "added": []}
    assert diffs[0] == {**empty, "removed": ["sin"]}
    assert diffs[1] == {**empty, "merged": {"exp_1": "exp"}}
    assert diffs[2] == {**empty, "folded": {"c0": "_folded_0", "c1": "_folded_0", "add_2": "_folded_0"}}
    assert diffs[3] == {**empty, "fused": {"fused_0": ["add", "mul", "exp", "add_1", "mul_1"]}}
    texts = [describe_change(a, b) for a, b in zip(stages, stages[1:])]
    assert texts[0] == "call nodes 8 → 7; removed 1 (nothing used them): sin"
    assert texts[1] == "call nodes 7 → 6; merged 1 into an identical node: exp_1 → exp"
    assert texts[2].startswith("call nodes 6 → 5; folded 3 into constants: c0 → _folded_0")
    assert texts[3].startswith("call nodes 5 → 1; fused 5 into one kernel")
    v = GraphPassesExplorer(pipeline(), start=2)
    assert "exp_1 → exp" in v.summary_html.value


def test_a_chain_of_duplicates_is_merged_link_by_link():
    before = {"title": "a", "nodes": [placeholder("x"), node("exp", "exp", "x"), node("exp_1", "exp", "x"),
                                      node("sin", "sin", "exp"), node("sin_1", "sin", "exp_1"),
                                      output("sin", "sin_1")]}
    after = {"title": "b", "nodes": [placeholder("x"), node("exp", "exp", "x"), node("sin", "sin", "exp"),
                                     output("sin", "sin")]}
    d = stage_diff(*parse_stages([before, after]))
    assert d["merged"] == {"exp_1": "exp", "sin_1": "sin"} and not d["removed"]


def test_dead_code_is_removed_not_merged_even_when_an_identical_node_stays():
    before = {"title": "a", "nodes": [placeholder("x"), node("add", "add", "x"), node("add_1", "add", "x"),
                                      node("neg", "neg", "add_1"), output("add")]}
    after = {"title": "b", "nodes": [placeholder("x"), node("add", "add", "x"), output("add")]}
    d = stage_diff(*parse_stages([before, after]))
    assert d["removed"] == ["add_1", "neg"] and not d["merged"]


def test_folding_in_place_and_into_a_literal():
    before = {"title": "a", "nodes": [placeholder("x"), constant("c"), node("neg", "neg", "c"),
                                      node("mul", "mul", "x", "neg"), output("mul")]}
    in_place = {"title": "b", "nodes": [placeholder("x"), constant("neg"), node("mul", "mul", "x", "neg"),
                                        output("mul")]}
    literal = {"title": "c", "nodes": [placeholder("x"), node("mul", "mul", "x"), output("mul")]}
    a, b, c = parse_stages([before, in_place, literal])
    assert stage_diff(a, b)["folded"] == {"neg": "neg", "c": "neg"}
    assert stage_diff(a, c)["folded"] == {"c": "a literal", "neg": "a literal"}
    assert describe_change(a, a) == "no change"


def test_new_nodes_are_outlined_and_listed():
    before = {"title": "a", "nodes": [placeholder("x"), node("neg", "neg", "x"), output("neg")]}
    after = {"title": "b", "nodes": [placeholder("x"), node("neg", "neg", "x"), node("relu", "relu", "neg"),
                                     output("relu")]}
    a, b = parse_stages([before, after])
    assert stage_diff(a, b)["added"] == ["relu"]
    assert "added 1: relu" in describe_change(a, b)
    v = GraphPassesExplorer([before, after], start=1)
    assert v.graph_html.value.count("stroke='#0969da' stroke-width='2.6'") == 1


# ------------------------------------------------------------------ colours


def fills(html: str) -> dict:
    """{node name: the fill of its box}, read back from the SVG."""
    return dict((name, fill) for fill, name in
                re.findall(r"fill='(#[0-9a-f]{6})'[^>]*/><text[^>]*>%([\w.]+) =", html))


def test_one_group_one_colour_and_other_groups_other_colours():
    v = GraphPassesExplorer([grouped()])
    colour = fills(v.graph_html.value)
    assert colour["relu"] == colour["mul"] and colour["exp"] == colour["neg"]
    assert len({colour["relu"], colour["exp"], colour["matmul"]}) == 3
    assert colour["matmul"] == "#ffffff", "a node in no group is not coloured"
    assert "group 0</b> — to be fused into one kernel: relu + mul" in v.graph_html.value
    assert "group 1</b> — to be fused into one kernel: exp + neg" in v.graph_html.value


def test_a_group_keeps_its_colour_when_its_nodes_are_fused():
    fused = {"title": "after fusion", "nodes": [
        placeholder("x"), placeholder("w"),
        node("fused_0", "fused", "x", kind="fused", group=0, members=["relu", "mul"]),
        node("matmul", "matmul", "fused_0", "w"),
        node("fused_1", "fused", "matmul", kind="fused", members=["exp", "neg"]), output("fused_1")]}
    v = GraphPassesExplorer([grouped(), fused])
    before = fills(v.graph_html.value)
    v.next_button.click()
    after = fills(v.graph_html.value)
    assert after["fused_0"] == before["relu"]
    assert after["fused_1"] not in (before["relu"], before["exp"]), "a fused node with no group has its own colour"


@pytest.mark.parametrize("count", [1, len(PALETTE), 3 * len(PALETTE) + 1])
def test_many_groups_all_get_distinct_colours(count):
    nodes = [placeholder("x")] + [node(f"op{g}_{k}", "neg", "x", group=g) for g in range(count) for k in (0, 1)]
    stages = parse_stages([{"title": "many", "nodes": nodes}])
    colours = group_colours(stages)
    assert len(colours) == count and len(set(colours.values())) == count
    for n in stages[0].nodes[1:]:
        assert colour_key(n) == n.group


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("stages, message", [
    ([], "no stages"),
    ({"title": "captured", "nodes": []}, "a list of stages"),
    ([("captured", object())], r"graph_stages\(\[\.\.\.\]\)"),
    ([{"title": "t"}], "must be a dict"),
    ([{"title": "t", "nodes": None}], "'nodes' must be a list"),
    ([{"title": "t", "nodes": [placeholder("x"), node("add", "add", "x", "z")]}],
     "stage 0 \\('t'\\): node 'add' names an input 'z' that does not exist"),
    ([{"title": "t", "nodes": [node("add", "add", "x"), placeholder("x")]}], "comes after it.*topological order"),
    ([{"title": "t", "nodes": [placeholder("x"), placeholder("x")]}], "two nodes are named 'x'"),
    ([{"title": "t", "nodes": [node("add", "add", kind="function")]}], "kind 'function'"),
    ([{"title": "t", "nodes": [{"name": "add", "kind": "call"}]}], "has no 'op'"),
    ([{"title": "t", "nodes": [node("add", "add", group="0")]}], "'group' must be an int"),
    ([{"title": "t", "nodes": [node("add", "add", shape="3, 4")]}], "'shape' must be a tuple"),
    ([{"title": "t", "nodes": [{**node("add", "add"), "inputs": "x"}]}], "'inputs' must be a list"),
])
def test_bad_stages_raise_a_value_error_naming_the_problem(stages, message):
    with pytest.raises(ValueError, match=message):
        explore(stages)


def test_a_later_stage_is_named_in_the_error_and_start_must_exist():
    stages = pipeline()
    stages[3]["nodes"][2] = node("add", "add", "x", "gone")
    with pytest.raises(ValueError, match="stage 3 \\('after constant folding'\\): node 'add' names an input 'gone'"):
        explore(stages)
    with pytest.raises(ValueError, match="start=5, but there are 5 stages"):
        explore(pipeline(), start=5)


def test_the_widget_works_where_torch_and_picotorch_cannot_be_imported():
    """The course package imports torch for its checks; this module alone must not need it or picotorch:
    loaded by its path with both blocked, it still draws a graph."""
    path = Path(graph_passes.__file__)
    code = ("import importlib.util, sys\n"
            "sys.modules['torch'] = sys.modules['picotorch'] = None  # any import of them now fails\n"
            f"spec = importlib.util.spec_from_file_location('graph_passes', {str(path)!r})\n"
            "module = sys.modules['graph_passes'] = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(module)\n"
            "box = module.explore([{'title': 't', 'nodes': [{'name': 'x', 'op': 'placeholder', "
            "'kind': 'placeholder', 'inputs': []}]}])\n"
            "assert '<svg' in box.children[2].value\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
