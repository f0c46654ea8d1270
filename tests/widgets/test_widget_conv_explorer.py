"""The convolution explorer, driven through its widgets and checked against torch's windows and F.unfold."""
from __future__ import annotations

import itertools

import ipywidgets as widgets
import pytest
import torch
import torch.nn.functional as F

from course.widgets.conv_explorer import ConvExplorer, explore, im2col_positions


@pytest.fixture(scope="module")
def picotorch(reference_picotorch):
    return reference_picotorch


def torch_window_positions(shape, kernel, dilation, padding, stride, window):
    """The storage positions the window at output `window` reads, from torch's own view of the windows
    (Tensor.unfold twice over the padded positions, as chapter 07's tests take them)."""
    c, h, w = shape
    x = F.pad(torch.arange(1, c * h * w + 1, dtype=torch.float64).reshape(1, c, h, w),
              (padding[1], padding[1], padding[0], padding[0]))
    (kh, kw), (dh, dw) = kernel, dilation
    windows = x.unfold(2, dh * (kh - 1) + 1, stride[0]).unfold(3, dw * (kw - 1) + 1, stride[1])[..., ::dh, ::dw]
    values = windows[0, :, window[0], window[1]].flatten().tolist()
    return sorted(int(v) - 1 for v in values if v), sum(1 for v in values if not v)


def set_up(ex, input_shape, kernel, stride, padding, dilation):
    ex.input_text.value = ", ".join(map(str, input_shape))
    for text, value in ((ex.kernel_text, kernel), (ex.stride_text, stride), (ex.padding_text, padding),
                        (ex.dilation_text, dilation)):
        text.value = ", ".join(map(str, value))
    assert ex.message.value == "", ex.message.value


def test_explore_returns_a_vbox_whose_first_button_slides_the_window():
    w = explore()
    assert isinstance(w, widgets.VBox)
    buttons = [b for box in w.children if isinstance(box, widgets.HBox) for b in box.children
               if isinstance(b, widgets.Button)]
    assert buttons[0].description.startswith("Next window")
    html = [c for c in w.children if isinstance(c, widgets.HTML)][-1]
    before = html.value
    buttons[0].click()
    assert html.value != before and "out[0, 1]" in html.value


CASES = [((1, 5, 6), (3, 3), (1, 1), (1, 1), (1, 1)),
         ((2, 6, 5), (2, 3), (2, 1), (0, 2), (1, 1)),
         ((1, 7, 7), (3, 2), (1, 2), (2, 1), (2, 3)),
         ((3, 4, 4), (4, 4), (3, 3), (2, 2), (1, 1))]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_every_window_and_row_is_torchs(case):
    """For each window: its cells in the storage and its zeros of the padding are those of torch's window view;
    the matrix is F.unfold's; each matrix row reads one cell per window, the row of F.unfold."""
    shape, kernel, stride, padding, dilation = case
    ex = ConvExplorer(input_shape=(1, 3, 3), kernel=(1, 1), padding=(0, 0))
    set_up(ex, shape, kernel, stride, padding, dilation)
    unfolded = F.unfold(torch.arange(1, torch.Size(shape).numel() + 1, dtype=torch.float64).reshape(1, *shape),
                        kernel, dilation, padding, stride)[0]
    s = ex.state()
    assert s["matrix_shape"] == tuple(unfolded.shape)
    h_out = (shape[1] + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    assert s["out_size"][0] == h_out and len(ex.window.options) == unfolded.shape[1]
    for _, window in ex.window.options:
        ex.select(window=window)
        s = ex.state()
        positions, zeros = torch_window_positions(shape, kernel, dilation, padding, stride, window)
        assert (s["window_positions"], s["padding_taps"]) == (positions, zeros), window
    for row, (_, tap) in enumerate(ex.row.options):
        ex.select(row=tap)
        assert ex.state()["row_positions"] == [int(v) - 1 if v else None for v in unfolded[row].tolist()]


def test_the_next_button_goes_through_every_window_in_order_and_wraps():
    ex = ConvExplorer(input_shape=(1, 4, 5), kernel=(2, 2), stride=(2, 2), padding=(0, 0))
    seen = [ex.state()["window"]]
    for _ in range(len(ex.window.options)):
        ex.next_button.click()
        seen.append(ex.state()["window"])
    assert seen[:-1] == list(itertools.product(range(2), range(2))) and seen[-1] == seen[0]
    ex.previous_button.click()
    assert ex.state()["window"] == (1, 1)


def test_settings_that_fit_no_window_say_so_and_keep_the_last_good_ones():
    ex = ConvExplorer(input_shape=(1, 4, 4), kernel=(3, 3), padding=(0, 0))
    ex.dilation_text.value = "3"  # a 3x3 kernel with dilation 3 spans 7 pixels: torch finds no window
    assert "RuntimeError" in ex.message.value or "size" in ex.message.value
    assert ex.state()["dilation"] == (1, 1)
    ex.kernel_text.value = "two"
    assert "kernel" in ex.message.value


def test_your_unfold_is_compared_entry_by_entry(picotorch):
    ex = ConvExplorer(picotorch.unfold, picotorch.from_torch, input_shape=(2, 5, 4), kernel=(2, 3),
                      stride=(2, 1), padding=(1, 0), dilation=(1, 1))
    assert ex.state()["yours"] == "same" and "same matrix ✓" in ex.html.value

    def rows_swapped(x, kernel_size, dilation, padding, stride):
        n, c = x.shape[0], x.shape[1]
        windows = picotorch.unfold_view(x, kernel_size, dilation, padding, stride)
        _, _, ho, wo, kh, kw = windows.shape
        return windows.permute(0, 4, 5, 1, 2, 3).reshape(n, c * kh * kw, ho * wo)  # rows (kH, kW, C)

    wrong = ConvExplorer(rows_swapped, picotorch.from_torch, input_shape=(2, 5, 4), kernel=(2, 3))
    assert "differ" in wrong.state()["yours"] and "✗" in wrong.html.value

    def not_written(*args):
        raise NotImplementedError()

    assert ConvExplorer(not_written, picotorch.from_torch).state()["yours"] == "your unfold is not written yet"


def test_im2col_positions_marks_the_padding():
    matrix = im2col_positions((1, 2, 2), (2, 2), (1, 1), (1, 1), (1, 1))
    assert matrix[0][0] is None and matrix[3][0] == 0 and len(matrix[0]) == 9
