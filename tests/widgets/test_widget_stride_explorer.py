"""The stride explorer, driven through its widgets and checked against torch doing the same chain."""
from __future__ import annotations

import itertools
import re
import sys

import ipywidgets as widgets
import pytest
import torch

from course.widgets.stride_explorer import OPS, ArgumentError, StrideExplorer, explore, parse_key


@pytest.fixture(scope="module")
def picotorch(reference_picotorch):
    return reference_picotorch


def add(ex, op, args=""):
    ex.op.value = op
    ex.args.value = args
    ex.add_button.click()


def torch_chain(shape, chain):
    t = torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape)
    for f in chain:
        t = f(t)
    return t


def test_explore_returns_a_vbox_with_the_controls(picotorch):
    w = explore(picotorch.from_torch)
    assert isinstance(w, widgets.VBox)
    found = [c for c in w.children] + [g for c in w.children if isinstance(c, widgets.HBox) for g in c.children]
    assert any(isinstance(c, widgets.Text) and c.description == "shape" for c in found)
    assert any(isinstance(c, widgets.Dropdown) and set(c.options) == set(OPS) for c in found)
    assert {c.description for c in found if isinstance(c, widgets.Button)} >= {"Add to chain", "Remove last", "Clear chain"}
    assert any(isinstance(c, widgets.Dropdown) and c.description == "element" for c in found)


def test_default_transpose_matches_torch_on_both_sides(picotorch):
    ex = StrideExplorer(picotorch.from_torch)
    s = ex.state()
    t = torch.arange(12.).reshape(3, 4).transpose(0, 1)
    assert s["chain"] == "x.transpose(0, 1)"
    assert s["torch"]["stride"] == t.stride() == (1, 4)
    assert s["yours"]["stride"] == t.stride() and s["yours"]["shape"] == (4, 3)
    assert s["torch"]["shares"] is True and s["yours"]["shares"] is True
    assert s["torch"]["contiguous"] is False and s["yours"]["contiguous"] is False
    assert "✗" not in ex.html.value and "✓" in ex.html.value


@pytest.mark.parametrize("shape,steps,chain", [
    ("2, 3, 4", [("permute", "2, 0, 1"), ("[ ]", "1:, ::2")], [lambda t: t.permute(2, 0, 1), lambda t: t[1:, ::2]]),
    ("3, 4", [("[ ]", "None, 1, ..."), ("expand", "2, -1")], [lambda t: t[None, 1, ...], lambda t: t.expand(2, -1)]),
    ("2, 6", [("narrow", "1, 2, 3"), ("unsqueeze", "0"), ("flatten", "")],
     [lambda t: t.narrow(1, 2, 3), lambda t: t.unsqueeze(0), lambda t: t.flatten()]),
    ("4, 3", [("T", ""), ("reshape", "2, 6")], [lambda t: t.T, lambda t: t.reshape(2, 6)]),
    ("5", [("as_strided", "(3, 2), (1, 1), 1")], [lambda t: t.as_strided((3, 2), (1, 1), 1)]),
])
def test_a_chain_built_with_the_widgets_matches_torch(picotorch, shape, steps, chain):
    ex = StrideExplorer(picotorch.from_torch, chain=())
    ex.shape_text.value = shape
    for op, args in steps:
        add(ex, op, args)
    want = torch_chain(tuple(int(x) for x in shape.split(",")), chain)
    s = ex.state()
    assert s["torch_error"] is None and s["yours_error"] is None
    for side in ("torch", "yours"):
        assert s[side]["shape"] == tuple(want.shape)
        assert s[side]["stride"] == want.stride()
        assert s[side]["offset"] == want.storage_offset()
        assert s[side]["contiguous"] == want.is_contiguous()
    assert len(ex.element.options) == want.numel()
    # every element the view reaches is coloured in the storage row
    positions = sorted({want[index].storage_offset() for index in itertools.product(*(range(n) for n in want.shape))})
    assert s["view_positions"] == positions


def test_selecting_an_element_shows_its_arithmetic_and_storage_cell(picotorch):
    ex = StrideExplorer(picotorch.from_torch, shape=(2, 3, 4), chain=())
    add(ex, "transpose", "0, 2")
    add(ex, "[ ]", "1:, ::2")
    t = torch.arange(24.).reshape(2, 3, 4).transpose(0, 2)[1:, ::2]
    for index in [(0, 0, 0), (2, 1, 1), (1, 0, 1)]:
        ex.select(index)
        s = ex.state()
        position = t[index].storage_offset()
        assert s["position"] == position and s["yours_position"] == position
        terms = " + ".join([str(t.storage_offset())] + [f"{i}×{st}" for i, st in zip(index, t.stride())])
        assert s["arithmetic"] == f"{terms} = {position}"
        assert terms in ex.html.value
        selected = re.findall(r"<td class='selected' data-pos='(\d+)'", ex.html.value)
        assert selected == [str(position)]  # the storage cell, highlighted
        assert f"data-index='[{', '.join(map(str, index))}]' data-pos='{position}'" in ex.html.value
        assert t[index].item() == position  # the values are the storage positions: the grid shows it


def test_every_grid_cell_has_its_arithmetic_as_a_tooltip(picotorch):
    ex = StrideExplorer(picotorch.from_torch, shape=(3, 4))
    t = torch.arange(12.).reshape(3, 4).T
    titles = re.findall(r"title='x\[(\d+), (\d+)\]: ([^']*)'", ex.html.value)
    assert len(titles) == 12
    for i, j, text in titles:
        assert text.endswith(f"= {t[int(i), int(j)].storage_offset()}")


def test_a_call_torch_rejects_shows_both_errors(picotorch):
    ex = StrideExplorer(picotorch.from_torch, shape=(3, 4))
    add(ex, "view", "12")  # x.transpose(0, 1).view(12): not viewable
    s = ex.state()
    assert s["torch"] is None and "RuntimeError" in s["torch_error"]
    assert s["yours"] is None and "RuntimeError" in s["yours_error"]
    assert "view size is not compatible" in ex.html.value
    ex.remove_button.click()
    assert ex.state()["torch"]["stride"] == (1, 4)


def test_a_wrong_implementation_is_marked_where_it_differs(picotorch):
    class Buggy(picotorch.Tensor):
        def transpose(self, d0, d1):  # swaps the sizes but keeps row-major strides
            shape = list(self.shape)
            shape[d0], shape[d1] = shape[d1], shape[d0]
            return Buggy(self._storage, shape, picotorch.contiguous_strides(shape), self._offset)

    def buggy_from_torch(t):
        p = picotorch.from_torch(t)
        return Buggy(p._storage, p.shape, p.stride(), p.storage_offset())

    ex = StrideExplorer(buggy_from_torch, shape=(3, 4))
    s = ex.state()
    assert s["yours"]["stride"] == (3, 1) and s["torch"]["stride"] == (1, 4)
    assert "✗" in ex.html.value
    ex.select((1, 2))
    s = ex.state()
    assert s["position"] == 9 and s["yours_position"] == 5
    assert "0 + 1×3 + 2×1 = 5" in ex.html.value and "✗" in ex.html.value


def test_an_exercise_not_written_yet_is_said_so(picotorch):
    class Stub(picotorch.Tensor):
        def transpose(self, d0, d1):
            raise NotImplementedError()

    ex = StrideExplorer(lambda t: Stub(picotorch.from_torch(t)._storage, t.shape, t.stride(), t.storage_offset()))
    assert "not written yet" in ex.state()["yours_error"]
    assert ex.state()["torch"]["stride"] == (1, 4)


def test_without_a_framework_it_shows_torch_alone(monkeypatch):
    monkeypatch.setitem(sys.modules, "picotorch", None)  # import picotorch fails
    ex = StrideExplorer()
    s = ex.state()
    assert ex.from_torch is None and s["yours"] is None
    assert s["torch"]["stride"] == (1, 4)
    assert "pass your from_torch" in ex.html.value


def test_unreadable_arguments_are_explained_not_raised(picotorch):
    ex = StrideExplorer(picotorch.from_torch)
    ex.op.value = "[ ]"
    ex.args.value = "1:a"
    ex.add_button.click()
    assert "slice" in ex.message.value and len(ex.steps) == 1
    ex.op.value = "transpose"
    ex.args.value = "0, ("
    assert ex.add_step() is False and "cannot read" in ex.message.value
    ex.shape_text.value = "3, x"
    assert "cannot read" in ex.message.value and ex.state()["shape"] == (3, 4)
    with pytest.raises(ArgumentError):
        parse_key("1:2:3:4")


def test_clear_and_new_shape_rebuild_everything(picotorch):
    ex = StrideExplorer(picotorch.from_torch, shape=(3, 4))
    ex.clear_button.click()
    s = ex.state()
    assert s["chain"] == "x" and s["torch"]["contiguous"] is True and s["yours"]["stride"] == (4, 1)
    ex.shape_text.value = "2, 3, 4"
    s = ex.state()
    assert s["shape"] == (2, 3, 4) and s["yours"]["stride"] == (12, 4, 1) and s["storage_size"] == 24
    assert ex.html.value.count("class='stride-grid'") == 2  # one 3×4 grid per index of dim 0
    add(ex, "contiguous")
    add(ex, "clone")
    assert ex.state()["yours"]["shares"] is False and ex.state()["torch"]["shares"] is False


def test_parse_key_reads_what_python_would():
    assert parse_key("1:, ::2, None, ...") == (slice(1, None), slice(None, None, 2), None, Ellipsis)
    assert parse_key("-1") == -1
    assert parse_key("0,") == (0,)
    assert parse_key("2:5:2") == slice(2, 5, 2)


def test_a_method_the_chapter_adds_later_is_not_there_yet(picotorch):
    """Chapter 01 shows the explorer in section 4, before the view methods join Tensor: their absence is no error."""
    class Early:  # a tensor of chapter 01 before its section 5: the layout, no view methods
        def __init__(self, t):
            self.shape, self._stride, self._offset = tuple(t.shape), t.stride(), t.storage_offset()

        def stride(self):
            return self._stride

        def storage_offset(self):
            return self._offset

    ex = StrideExplorer(Early, shape=(3, 4))
    error = ex.state()["yours_error"]
    assert "not there yet" in error and "transpose" in error, error
    assert ex.state()["torch"]["stride"] == (1, 4)
