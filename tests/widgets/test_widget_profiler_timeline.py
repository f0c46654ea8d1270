"""The profiler timeline of chapter 08, driven through its widgets and its pure functions: what it checks of the
events it is given, where it draws them, what hovering shows (autocast's casts included), the averages table,
stepping through runs and zooming to a part. The runs are built by hand, and from the reference picotorch's
profiler (the chapter's `profiled_step` and `timeline`; the chapter's own tests compare that profiler with
torch.profiler)."""
from __future__ import annotations

import ipywidgets as widgets
import pytest
import torch

from course.widgets.profiler_timeline import (RANGE_COLOUR, TimelineExplorer, averages, bars, explore,
                                              from_torch_calls, parse_run, part_names, tooltip)
from widget_buttons import buttons


def event(name, start, end, depth, shapes=(), dtypes=(), out_dtypes=(), nbytes=0):
    return {"name": name, "start_us": start, "end_us": end, "depth": depth, "shapes": [list(s) for s in shapes],
            "dtypes": list(dtypes), "out_dtypes": list(out_dtypes), "bytes": nbytes}


def step() -> list:
    """forward (a linear, its own call inside), backward, optimizer: a step as the chapter's timeline gives it."""
    return [event("forward", 0, 50, 0), event("linear", 2, 40, 1, [(8, 5), (7, 5), (7,)], ["float32"] * 3,
                                              ["float32"], 224),
            event("numpy", 3, 4, 2, [(8, 5)], ["float32"]),
            event("backward", 50, 90, 0), event("linear_backward", 55, 85, 1, [(8, 5), (8, 7)], ["float32"] * 2,
                                                ["float32"] * 2, 300),
            event("optimizer", 90, 100, 0), event("sub_", 91, 99, 1, [(7, 5), (7, 5)], ["float32"] * 2, ["float32"])]


def test_explore_returns_a_vbox_whose_first_button_zooms_to_the_next_part_and_second_shows_the_next_run():
    box = explore({"float32": step()})  # one run: what a student sees before writing Profile
    assert isinstance(box, widgets.VBox)
    before = box.children[-1].value
    assert "<svg" in before and "float32" in before
    buttons(box)[0].click()
    assert box.children[-1].value != before and "linear_backward" not in box.children[-1].value, "zoomed to forward"
    for _ in range(3):
        buttons(box)[0].click()
    assert box.children[-1].value == before, "after the last part, the whole run again"
    box = explore({"float32": step(), "autocast": step()[:3]})
    before = box.children[-1].value
    buttons(box)[1].click()
    assert box.children[-1].value != before and "autocast" in box.children[-1].value


def test_bars_are_nested_by_depth_and_scaled_to_the_window():
    placed = bars(parse_run(step()), width=1000)
    by_name = {b["event"]["name"]: b for b in placed}
    assert by_name["forward"]["x"] == 0 and by_name["forward"]["w"] == pytest.approx(500)
    assert by_name["linear"]["y"] > by_name["forward"]["y"] and by_name["numpy"]["y"] > by_name["linear"]["y"]
    assert by_name["optimizer"]["x"] == pytest.approx(900)
    zoomed = {b["event"]["name"]: b for b in bars(parse_run(step()), "backward", width=1000)}
    assert set(zoomed) == {"backward", "linear_backward"}, "zoomed to backward: only what lies in it"
    assert zoomed["backward"]["w"] == pytest.approx(1000) and zoomed["linear_backward"]["x"] == pytest.approx(125)


def test_a_bar_too_short_to_see_is_one_pixel_wide():
    placed = bars(parse_run([event("forward", 0, 1e6, 0), event("exp", 10, 10.001, 1)]), width=900)
    assert placed[1]["w"] == 1.0


def test_parse_run_refuses_what_a_trace_viewer_would_draw_wrongly():
    with pytest.raises(ValueError, match="before it starts"):
        parse_run([event("exp", 5, 3, 0)])
    with pytest.raises(ValueError, match="does not lie inside forward"):
        parse_run([event("forward", 0, 10, 0), event("exp", 5, 20, 1)])
    with pytest.raises(ValueError, match="depth 2 but 1 events enclose it"):
        parse_run([event("forward", 0, 10, 0), event("exp", 1, 2, 2)])
    with pytest.raises(ValueError, match="has no end_us"):
        parse_run([{"name": "exp", "start_us": 0, "depth": 0}])
    with pytest.raises(ValueError, match="at least one run"):
        explore({})


def test_hover_shows_shapes_dtypes_bytes_and_an_autocast_cast():
    e = parse_run(step())[1]
    text = tooltip(e)
    assert "linear: 38.0 us" in text and "float32 (8, 5), float32 (7, 5), float32 (7,)" in text
    assert "returns: float32" in text and "224 bytes" in text and "autocast" not in text
    cast = parse_run([event("linear", 0, 1, 0, [(8, 5), (7, 5)], ["float32"] * 2, ["bfloat16"])])[0]
    assert "cast: float32 in, bfloat16 out (autocast)" in tooltip(cast)
    html = TimelineExplorer({"autocast": [cast]}).html.value
    assert "<title>" in html and "bfloat16" in html and "#f58518" in html, "a bfloat16 bar in its colour"


def test_averages_are_key_averages_sorted_by_self_time():
    rows = averages(parse_run(step() + [event("linear", 100, 140, 0, [(1, 5)], ["float32"], ["float32"])]))
    assert rows[0][0] == "linear" and rows[0][1] == 2 and rows[0][2] == pytest.approx(78)
    assert [r[2] for r in rows] == sorted((r[2] for r in rows), reverse=True)


def test_zoom_steps_and_refuses_an_unknown_part():
    explorer = TimelineExplorer({"a": step(), "b": step()})
    assert part_names(explorer.events) == ["forward", "backward", "optimizer"]
    explorer.parts.value = "optimizer"
    assert explorer.state()["part"] == "optimizer" and explorer.state()["bars"] == 2
    explorer.next_run()
    assert explorer.state() == {"title": "b", "part": None, "bars": 7, "span_us": 100, "dtypes": ["float32"],
                                "colours": ["float32"]}
    with pytest.raises(ValueError, match="not a part of b"):
        explorer.zoom("loss")


def test_the_chapters_timeline_of_a_picotorch_step(reference_picotorch):
    pt = reference_picotorch
    model = pt.Sequential(pt.Linear(5, 7), pt.ReLU(), pt.Linear(7, 3))
    optimizer = pt.SGD(model.parameters(), lr=0.1)
    prof = pt.profiled_step(model, optimizer, pt.from_torch(torch.randn(8, 5)),
                            pt.from_torch(torch.randint(0, 3, (8,))))
    run = parse_run(pt.timeline(prof))
    assert part_names(run) == ["forward", "backward", "optimizer"]
    linear = next(e for e in run if e["name"] == "linear")
    assert linear["depth"] == 1 and linear["shapes"] == [[8, 5], [7, 5], [7]] and linear["out_dtypes"] == ["float32"]
    assert linear["bytes"] == 8 * 7 * 4
    explorer = TimelineExplorer({"picotorch": pt.timeline(prof)})
    before = explorer.html.value
    explorer.parts.value = "backward"
    assert explorer.html.value != before and "linear_backward" in explorer.html.value
    assert [b["event"]["name"] for b in bars(run, "forward")][0] == "forward"
    assert RANGE_COLOUR in before, "the ranges forward, backward, optimizer drawn grey"
    amp = parse_run(pt.timeline(pt.profiled_step(model, optimizer, pt.from_torch(torch.randn(8, 5)),
                                                 pt.from_torch(torch.randint(0, 3, (8,))),
                                                 pt.autocast("cpu", dtype=pt.bfloat16))))
    linears = [e for e in amp if e["name"] == "linear" and e["depth"] == 1]  # the calls the forward made
    assert [e["out_dtypes"] for e in linears] == [["bfloat16"]] * 2, "autocast's linear returns bfloat16"
    assert "(autocast)" in tooltip(linears[0]) and "#f58518" in TimelineExplorer({"amp": amp}).html.value
    assert next(e for e in amp if e["name"] == "nll_loss")["out_dtypes"] == ["float32"], "the loss in float32"


def test_torch_profilers_calls_become_a_run():
    """from_torch_calls: torch.profiler's calls (as course.testing.profile_log gives them) drawn as a run."""
    from course.testing.profile_log import TorchCall

    calls = [TorchCall("forward", [], [], 0, 10.0, 50.0, None, [1]),
             TorchCall("aten::linear", [(8, 5), (7, 5)], ["float32"] * 2, 224, 12.0, 40.0, 0, [2]),
             TorchCall("aten::addmm", [(7,), (8, 5), (5, 7)], ["float32"] * 3, 224, 20.0, 38.0, 1, [])]
    calls.append(TorchCall("[memory]", [], [], 64, 60.0, 60.0, None, []))  # an allocation record: not drawn
    run = parse_run(from_torch_calls(calls))
    assert [(e["name"], e["depth"], e["start_us"]) for e in run] == [("forward", 0, 0.0), ("aten::linear", 1, 2.0),
                                                                     ("aten::addmm", 2, 10.0)]
    assert run[1]["self_us"] == pytest.approx(28 - 18) and run[0]["self_us"] == pytest.approx(40 - 28)
