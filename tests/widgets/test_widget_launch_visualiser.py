"""The launch visualiser, driven through its widgets: the owners it draws are the threads the emulator
really runs, the counts it shows are the emulator's, and it says so when a kernel is not there yet."""
from __future__ import annotations

import importlib

import ipywidgets as widgets
import numpy as np
import pytest
import torch

from course.cuda import Kernel
from course.cuda.status import emulator_available
from course.widgets.launch_visualiser import (LaunchVisualiser, expected_global_loads, explore, measure, owners_1d,
                                              summary_1d, tile_steps, tiles_of)
from widget_buttons import buttons

needs_emulator = pytest.mark.skipif(not emulator_available(),
                                    reason="no g++ here: the CUDA emulator cannot run (not counted as passed)")

OWNERS = r"""
extern "C" __global__ void owners(int* block_of, int* thread_of, int* round_of, int* count, long long n, int loop) {
    long long grid = (long long)blockDim.x * gridDim.x, i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    for (int r = 0; i < n; i += grid, ++r) {
        block_of[i] = blockIdx.x;
        thread_of[i] = threadIdx.x;
        round_of[i] = r;
        atomicAdd(&count[i], 1);
        if (!loop) break;
    }
}
"""


@pytest.fixture(scope="module")
def backend(reference_picotorch):
    return importlib.import_module("picotorch.ch05_backend")


def test_explore_returns_a_vbox_whose_first_button_changes_it():
    box = explore()
    assert isinstance(box, widgets.VBox)
    first = buttons(box)[0]
    assert first.description == "Next block ▶"
    html = [w for w in box.children if isinstance(w, widgets.HTML)][0]
    before = html.value
    first.click()
    assert html.value != before


@needs_emulator
@pytest.mark.parametrize("n, blocks, threads, loop", [(300, 3, 64, True), (300, 2, 64, False), (1000, 4, 32, True),
                                                      (97, 1, 128, True), (5, 4, 32, False)])
def test_the_owners_drawn_are_the_threads_the_emulator_runs(n, blocks, threads, loop):
    block_of, thread_of, round_of = (torch.full((n,), -1, dtype=torch.int32) for _ in range(3))
    count = torch.zeros(n, dtype=torch.int32)
    Kernel(OWNERS, "owners")((blocks,), (threads,),
                             (block_of, thread_of, round_of, count, np.int64(n), np.int32(int(loop))))
    drawn = owners_1d(n, blocks, threads, grid_stride=loop)
    for i, owner in enumerate(drawn):
        if owner is None:
            assert count[i] == 0, f"element {i} is drawn as computed by no thread, but thread {thread_of[i]} did"
        else:
            assert count[i] == 1 and owner == (block_of[i].item(), thread_of[i].item(), round_of[i].item()), i
    s = summary_1d(n, blocks, threads, loop)
    assert s["uncovered"] == int((count == 0).sum())
    assert s["rounds"] == (int(round_of.max()) + 1 if n else 0)


def test_a_grid_too_small_without_a_loop_is_shown_as_elements_nobody_computes():
    v = LaunchVisualiser(n=300, threads=64, blocks=2)
    v.grid_stride.value = False
    s = v.state()
    assert s["uncovered"] == 300 - 128 and s["owners"][127] == (1, 63, 0) and s["owners"][128] is None
    assert "computed by no thread" in v.html.value
    v.grid_stride.value = True
    assert v.state()["rounds"] == 3 and "grid-stride loop" in v.html.value


def test_blocks_come_from_the_students_launch_1d(backend):
    v = LaunchVisualiser(launch_1d=backend.launch_1d, n=1000, threads=128, blocks=1)
    v.mine_button.click()
    assert v.blocks.value == 8 and "(8,)" in v.html.value

    def not_written(n, threads=256, max_blocks=None):
        raise NotImplementedError()
    v = LaunchVisualiser(launch_1d=not_written, blocks=5)
    v.mine_button.click()
    assert v.blocks.value == 5 and "not written yet" in v.html.value


def test_next_walks_through_the_blocks():
    v = LaunchVisualiser(n=100, threads=32, blocks=4)
    seen = []
    for _ in range(5):
        seen.append(v.state()["selected_block"])
        v.next_button.click()
    assert seen == [0, 1, 2, 3, 0]


def test_matmul_mode_steps_through_the_tiles_of_each_block():
    v = LaunchVisualiser(M=40, N=24, K=48, tile=16)
    v.mode.value = "matmul"
    assert v.next_button.description == "Next step ▶"
    s = v.state()
    assert s["steps"] == tile_steps(48, 16) == 3
    assert s["tiles"] == {"c": ((0, 16), (0, 16)), "a": ((0, 16), (0, 16)), "b": ((0, 16), (0, 16))}
    for _ in range(3):
        v.next_button.click()
    s = v.state()  # past the last step of block (0, 0): the next block, (1, 0), step 0
    assert s["block"] == (1, 0) and s["step"] == 0
    assert tiles_of(40, 24, 48, 16, (1, 2), 2) == {"c": ((32, 40), (16, 24)), "a": ((32, 40), (32, 48)),
                                                   "b": ((32, 48), (16, 24))}
    assert "A[0:16, 0:16]" in LaunchVisualiser(M=40, N=24, K=48, tile=16)._matmul_html()


def test_without_kernels_the_counts_say_what_to_write():
    v = LaunchVisualiser()
    v.mode.value = "matmul"
    v.count_button.click()
    assert "write exercise 11 first" in v.html.value and "write exercise 12 first" in v.html.value

    def stub(c, a, b):
        raise NotImplementedError()
    v = LaunchVisualiser(matmuls={"naive": stub})
    v.mode.value = "matmul"
    v.count_button.click()
    if emulator_available():
        assert "exercise 11 is not written yet" in v.html.value


@needs_emulator
def test_the_counts_are_the_emulators_and_tiling_divides_the_global_loads(backend):
    M, N, K = 40, 24, 48
    v = LaunchVisualiser(matmuls=backend.MATMULS, M=M, N=N, K=K, tile=32)
    v.mode.value = "matmul"
    v.count_button.click()
    s = v.state()
    naive, tiled = s["counts"]["naive"], s["counts"]["tiled"]
    expected = expected_global_loads(M, N, K, 32)
    assert naive["global_loads"] == expected["naive"] == 2 * M * N * K
    assert tiled["global_loads"] == expected["tiled"]          # the reference tiles are 32 wide
    assert naive["shared_loads"] == 0 and tiled["shared_loads"] > 0
    assert naive["where"] == ["emulator"] and naive["max_error"] < 1e-4 and tiled["max_error"] < 1e-4
    assert f"{naive['global_loads']:,}" in v.html.value and f"{tiled['global_loads']:,}" in v.html.value
    assert measure(backend.MATMULS["naive"], 3, 5, 7)["global_stores"] == 15
