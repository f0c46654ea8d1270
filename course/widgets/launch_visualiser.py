"""A launch visualiser: which block and thread of a CUDA launch computes each element.

In a notebook (chapter 05)::

    from course.widgets.launch_visualiser import explore
    explore(launch_1d, launch_2d, MATMULS)   # your geometry functions and matmul launchers
    explore()                                # choose the grid and the block by hand

**Elementwise.** Choose the number of elements, the threads per block and the
number of blocks (or let your `launch_1d` choose them), with or without a
grid-stride loop. Each element is coloured by the block that computes it and
labelled with the thread: the ragged last block, the elements nobody computes
when the grid is too small for a kernel without the loop, and the loop's rounds.

**Matmul.** For `C = A @ B` (M × K times K × N) and a tile size, step through
the tiles a block loads into shared memory, one step of `k` at a time, and see
the global and shared loads of the naive and the tiled kernels side by side:
the number a perfect kernel of each kind makes (a formula), and the number your
kernels make, counted by the CUDA emulator on small matrices (once they are
written). The visualiser holds no kernel of its own: what it counts is yours.
"""
from __future__ import annotations

import colorsys
import math
from html import escape

import ipywidgets as widgets

MAX_DRAWN = 1024     # elements drawn in elementwise mode
MAX_MATRIX = 64      # largest side drawn in matmul mode
THREAD_CHOICES = (32, 64, 128, 256, 512, 1024)


# ------------------------------------------------------------------ the logic


def owners_1d(n: int, blocks: int, threads: int, grid_stride: bool = True) -> list:
    """For each of the n elements, (block, thread, round) of the thread that computes it, or None.

    One element per thread: thread t of block b computes element b * threads + t. With a grid-stride loop,
    it goes on with the elements one grid further, round after round; without, elements beyond the grid are
    computed by no one."""
    if blocks < 1 or threads < 1:
        raise ValueError("a launch has at least one block of at least one thread")
    grid = blocks * threads
    out = []
    for i in range(n):
        if i >= grid and not grid_stride:
            out.append(None)
            continue
        g = i % grid
        out.append((g // threads, g % threads, i // grid))
    return out


def summary_1d(n: int, blocks: int, threads: int, grid_stride: bool = True) -> dict:
    """What a launch of `blocks` x `threads` does with n elements, in numbers."""
    grid = blocks * threads
    rounds = math.ceil(n / grid) if grid_stride else min(1, n)
    covered = n if grid_stride else min(n, grid)
    busy = min(n, grid)
    return {"threads_in_grid": grid, "rounds": rounds, "uncovered": n - covered, "idle_threads": grid - busy,
            "elements_per_thread": n / grid if grid else 0.0}


def block_colour(block: int, blocks: int, thread: int = 0, threads: int = 1) -> str:
    """A colour per block (hues spread by the golden angle), lighter for later threads of the block."""
    hue = (block * 0.618033988749895) % 1.0
    light = 0.45 + 0.3 * (thread / max(threads - 1, 1))
    r, g, b = colorsys.hls_to_rgb(hue, light, 0.65)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


def tile_steps(K: int, tile: int) -> int:
    """How many tiles of k a tiled matmul walks through (a last, ragged one included)."""
    return max(math.ceil(K / tile), 0)


def tiles_of(M: int, N: int, K: int, tile: int, block: tuple[int, int], step: int) -> dict:
    """The part of C a block (bx, by) computes, and the tiles of A and B it loads at `step`, as half-open
    ranges clipped to the matrices: {"c": (rows, cols), "a": (rows, cols), "b": (rows, cols)}."""
    bx, by = block
    rows = (by * tile, min((by + 1) * tile, M))
    cols = (bx * tile, min((bx + 1) * tile, N))
    ks = (step * tile, min((step + 1) * tile, K))
    return {"c": (rows, cols), "a": (rows, ks), "b": (ks, cols)}


def expected_global_loads(M: int, N: int, K: int, tile: int) -> dict:
    """Global loads of the two kernels, counted the way the chapter writes them: naive, every thread reads a
    row of A and a column of B (2MNK); tiled, each element of A is read once per block column of C and each
    element of B once per block row (elements outside the matrices are not read: they are zeros)."""
    return {"naive": 2 * M * N * K,
            "tiled": M * K * math.ceil(N / tile) + K * N * math.ceil(M / tile) if M and N else 0}


def measure(launch, M: int, N: int, K: int, seed: int = 0) -> dict:
    """Run one matmul launcher on random CPU tensors (so: on the emulator) and sum the memory counts of its
    launches; the result's error against torch too. Raises whatever the launcher raises."""
    import torch

    from course.cuda.status import recording

    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(M, K, generator=g), torch.randn(K, N, generator=g)
    c = torch.full((M, N), float("nan"))
    with recording() as log:
        launch(c, a, b)
    counts = [r.counts for r in log if r.counts is not None]
    total = {"launches": len(log), "global_loads": sum(x.global_loads for x in counts),
             "global_stores": sum(x.global_stores for x in counts),
             "shared_loads": sum(x.shared_loads for x in counts),
             "shared_stores": sum(x.shared_stores for x in counts),
             "where": sorted({r.where.value for r in log})}
    total["max_error"] = float((c - a @ b).abs().max()) if c.numel() else 0.0
    return total


# ------------------------------------------------------------------ the widget


class LaunchVisualiser:
    def __init__(self, launch_1d=None, launch_2d=None, matmuls=None, n: int = 300, threads: int = 64,
                 blocks: int = 3, M: int = 40, N: int = 24, K: int = 48, tile: int = 16):
        self.launch_1d, self.launch_2d = launch_1d, launch_2d
        self.matmuls = matmuls if matmuls is not None else {}
        self.selected_block = 0
        self.matmul_block = (0, 0)
        self.matmul_step = 0
        self.counts: dict = {}
        self.message = ""

        self.next_button = widgets.Button(description="Next ▶", button_style="primary",
                                          tooltip="elementwise: the next block; matmul: the next step of k")
        self.mode = widgets.ToggleButtons(options=["elementwise", "matmul"], value="elementwise")
        self.n = widgets.BoundedIntText(value=n, min=0, max=10**9, description="elements")
        self.threads = widgets.Dropdown(options=THREAD_CHOICES, value=threads, description="threads")
        self.blocks = widgets.BoundedIntText(value=blocks, min=1, max=2**31 - 1, description="blocks")
        self.grid_stride = widgets.Checkbox(value=True, description="grid-stride loop")
        self.mine_button = widgets.Button(description="Blocks from my launch_1d",
                                          layout=widgets.Layout(width="210px"))
        self.M = widgets.BoundedIntText(value=M, min=1, max=MAX_MATRIX, description="M")
        self.N = widgets.BoundedIntText(value=N, min=1, max=MAX_MATRIX, description="N")
        self.K = widgets.BoundedIntText(value=K, min=1, max=MAX_MATRIX, description="K")
        self.tile = widgets.Dropdown(options=(8, 16, 32), value=tile, description="tile")
        self.count_button = widgets.Button(description="Count loads (emulator)", layout=widgets.Layout(width="210px"))
        self.html = widgets.HTML()

        self.next_button.on_click(lambda _: self.next())
        self.mine_button.on_click(lambda _: self.use_mine())
        self.count_button.on_click(lambda _: self.count())
        for w in (self.mode, self.n, self.threads, self.blocks, self.grid_stride, self.M, self.N, self.K, self.tile):
            w.observe(self._changed, names="value")
        self.elementwise_box = widgets.VBox([widgets.HBox([self.n, self.threads]),
                                             widgets.HBox([self.blocks, self.grid_stride, self.mine_button])])
        self.matmul_box = widgets.VBox([widgets.HBox([self.M, self.N, self.K]),
                                        widgets.HBox([self.tile, self.count_button])])
        self.box = widgets.VBox([widgets.HBox([self.next_button, self.mode]), self.elementwise_box,
                                 self.matmul_box, self.html])
        self._render()

    # -- actions

    def next(self) -> None:
        """Advance one step: the next block (elementwise), or the next tile step of a matmul block."""
        if self.mode.value == "elementwise":
            self.selected_block = (self.selected_block + 1) % max(self.blocks.value, 1)
        else:
            steps = tile_steps(self.K.value, self.tile.value)
            gx, gy = math.ceil(self.N.value / self.tile.value), math.ceil(self.M.value / self.tile.value)
            self.matmul_step += 1
            if self.matmul_step >= steps:  # on to the next block, in the order a GPU numbers them
                self.matmul_step = 0
                bx, by = self.matmul_block
                index = (by * gx + bx + 1) % (gx * gy)
                self.matmul_block = (index % gx, index // gx)
        self._render()

    def use_mine(self) -> None:
        """Take the number of blocks from the student's launch_1d(n, threads)."""
        if self.launch_1d is None:
            self.message = "explore() was given no launch_1d."
        else:
            try:
                geometry = self.launch_1d(self.n.value, self.threads.value)
            except NotImplementedError:
                self.message = "your launch_1d is not written yet (exercise 4)."
            except Exception as e:  # the student's code: say what it did
                self.message = f"your launch_1d raised {type(e).__name__}: {e}"
            else:
                if geometry is None:
                    self.message = f"your launch_1d({self.n.value}, {self.threads.value}) says: no launch."
                else:
                    (blocks,), (threads,) = geometry
                    self.message = f"your launch_1d({self.n.value}, {self.threads.value}) = {geometry}"
                    self.blocks.value = max(int(blocks), 1)
        self._render()

    def count(self) -> None:
        """Count the loads of the student's naive and tiled kernels on the emulator, for the M, N, K shown."""
        from course.cuda.status import emulator_available

        self.counts = {}
        for kind in ("naive", "tiled"):
            launch = self.matmuls.get(kind)
            if launch is None:
                self.counts[kind] = f"not run: write exercise {11 if kind == 'naive' else 12} first"
            elif not emulator_available():
                self.counts[kind] = "not run: the emulator needs g++, and there is none here"
            else:
                try:
                    self.counts[kind] = measure(launch, self.M.value, self.N.value, self.K.value)
                except NotImplementedError:
                    self.counts[kind] = f"not run: exercise {11 if kind == 'naive' else 12} is not written yet"
                except Exception as e:  # a kernel that fails says why here, as in its tests
                    self.counts[kind] = f"failed: {type(e).__name__}: {str(e)[:300]}"
        self._render()

    def _changed(self, change) -> None:
        self.selected_block = min(self.selected_block, max(self.blocks.value - 1, 0))
        self.matmul_block, self.matmul_step = (0, 0), 0
        if change["owner"] in (self.M, self.N, self.K):
            self.counts = {}
        self._render()

    # -- what is shown

    def state(self) -> dict:
        """What the widget shows, as data: the elementwise or the matmul view, by the mode."""
        return self._elementwise_state() if self.mode.value == "elementwise" else self._matmul_state()

    def _elementwise_state(self) -> dict:
        n, blocks, threads = self.n.value, self.blocks.value, self.threads.value
        return {"mode": "elementwise", "n": n, "blocks": blocks, "threads": threads,
                "grid_stride": self.grid_stride.value, "selected_block": self.selected_block,
                "owners": owners_1d(min(n, MAX_DRAWN), blocks, threads, self.grid_stride.value),
                **summary_1d(n, blocks, threads, self.grid_stride.value), "message": self.message}

    def _matmul_state(self) -> dict:
        M, N, K, tile = self.M.value, self.N.value, self.K.value, self.tile.value
        return {"mode": "matmul", "M": M, "N": N, "K": K, "tile": tile, "block": self.matmul_block,
                "step": self.matmul_step, "steps": tile_steps(K, tile),
                "tiles": tiles_of(M, N, K, tile, self.matmul_block, self.matmul_step),
                "expected": expected_global_loads(M, N, K, tile), "counts": dict(self.counts)}

    def _render(self) -> None:
        matmul = self.mode.value == "matmul"
        self.elementwise_box.layout.display = "none" if matmul else ""
        self.matmul_box.layout.display = "" if matmul else "none"
        self.next_button.description = "Next step ▶" if matmul else "Next block ▶"
        self.html.value = self._matmul_html() if matmul else self._elementwise_html()

    def _elementwise_html(self) -> str:
        s = self._elementwise_state()
        n, blocks, threads, selected = s["n"], s["blocks"], s["threads"], s["selected_block"]
        cells = []
        for i, owner in enumerate(s["owners"]):
            if owner is None:
                cells.append(f'<div title="element {i}: no thread computes it" style="width:26px;height:22px;'
                             'background:#ddd;color:#a00;font:10px monospace;text-align:center;line-height:22px;'
                             'border:1px solid #fff">✗</div>')
                continue
            block, thread, rnd = owner
            outline = "2px solid #000" if block == selected else "1px solid #fff"
            later = f"background-image:repeating-linear-gradient(45deg,rgba(255,255,255,.55) 0 3px,transparent 3px 6px);" \
                if rnd % 2 else ""  # the grid-stride loop's odd rounds are hatched
            cells.append(f'<div title="element {i}: block {block}, thread {thread}, round {rnd}" '
                         f'style="width:26px;height:22px;background-color:{block_colour(block, blocks, thread, threads)};'
                         f'{later}border:{outline};box-sizing:border-box;font:9px monospace;text-align:center;'
                         f'line-height:20px;color:#000">{thread}</div>')
        more = (f"<p>(the first {MAX_DRAWN} of {n} elements are drawn)</p>" if n > MAX_DRAWN else "")
        notes = [f"grid: <b>{blocks}</b> block{'s' if blocks != 1 else ''} × <b>{threads}</b> threads = "
                 f"{s['threads_in_grid']:,} threads for {n:,} elements"]
        if s["uncovered"]:
            notes.append(f"<span style='color:#a00'>{s['uncovered']:,} elements are computed by no thread "
                         f"(✗): the kernel has no grid-stride loop and the grid is too small</span>")
        elif s["rounds"] > 1:
            notes.append(f"grid-stride loop: each thread computes up to {s['rounds']} elements, one grid "
                         f"({s['threads_in_grid']:,} elements) apart (odd rounds hatched)")
        if s["idle_threads"]:
            notes.append(f"{s['idle_threads']:,} threads have no element (a ragged last block: the kernel's "
                         "bound check keeps them out of memory)")
        notes.append(f"block {selected} is outlined; the number in each element is the thread that computes it; "
                     "32 elements a row, one warp's worth")
        if s["message"]:
            notes.append(escape(s["message"]))
        return ("<div style='display:grid;grid-template-columns:repeat(32,26px)'>" + "".join(cells) + "</div>" + more
                + "<ul>" + "".join(f"<li>{t}</li>" for t in notes) + "</ul>")

    def _matrix_html(self, rows: int, cols: int, name: str, highlight, colour: str, size: int) -> str:
        (r0, r1), (c0, c1) = highlight
        out = [f"<div style='display:inline-block;margin:4px 10px;vertical-align:top'><div style='font:12px "
               f"sans-serif'>{name} ({rows} × {cols})</div><div style='display:grid;grid-template-columns:"
               f"repeat({cols},{size}px);gap:1px'>"]
        for r in range(rows):
            for c in range(cols):
                inside = r0 <= r < r1 and c0 <= c < c1
                out.append(f"<div style='width:{size}px;height:{size}px;background:{colour if inside else '#eee'}'>"
                           "</div>")
        out.append("</div></div>")
        return "".join(out)

    def _matmul_html(self) -> str:
        s = self._matmul_state()
        M, N, K, tile = s["M"], s["N"], s["K"], s["tile"]
        t = s["tiles"]
        size = max(3, min(8, 360 // max(M, N, K)))
        (ar, ak), (bk, bc) = t["a"], t["b"]
        header = (f"<p>block <b>{s['block']}</b> computes C[{t['c'][0][0]}:{t['c'][0][1]}, "
                  f"{t['c'][1][0]}:{t['c'][1][1]}]; step <b>{s['step'] + 1}</b> of {s['steps']}: it loads "
                  f"A[{ar[0]}:{ar[1]}, {ak[0]}:{ak[1]}] and B[{bk[0]}:{bk[1]}, {bc[0]}:{bc[1]}] into shared "
                  f"memory, waits (__syncthreads), multiplies, waits again.</p>")
        pictures = (self._matrix_html(M, K, "A", t["a"], "#f4a261", size)
                    + self._matrix_html(K, N, "B", t["b"], "#2a9d8f", size)
                    + self._matrix_html(M, N, "C", t["c"], "#8ab17d", size))
        expected = s["expected"]
        rows = []
        for kind in ("naive", "tiled"):
            counted = s["counts"].get(kind)
            if isinstance(counted, dict):
                measured = (f"{counted['global_loads']:,}", f"{counted['shared_loads']:,}",
                            f"{counted['global_stores']:,}", ", ".join(counted["where"]))
            else:
                measured = (escape(counted) if counted else "press “Count loads”", "", "", "")
            rows.append(f"<tr><td>{kind}</td><td>{expected[kind]:,}</td>" +
                        "".join(f"<td>{m}</td>" for m in measured) + "</tr>")
        table = ("<table style='border-collapse:collapse' border='1' cellpadding='4'><tr><th>kernel</th>"
                 "<th>global loads, expected</th><th>global loads, yours</th><th>shared loads, yours</th>"
                 "<th>global stores, yours</th><th>counted on</th></tr>" + "".join(rows) + "</table>")
        ratio = expected["naive"] / expected["tiled"] if expected["tiled"] else float("nan")
        return (header + pictures + table
                + f"<p>Tiling divides the global loads by about {ratio:.1f} here (the tile size, "
                  "less where tiles stick out of the matrices). Counts come from the CUDA emulator on "
                  "CPU tensors of these sizes; they say nothing about time.</p>")


def explore(launch_1d=None, launch_2d=None, matmuls=None, **kw) -> widgets.VBox:
    """The launch visualiser; `matmuls` maps "naive" and "tiled" to matmul launchers (c, a, b)."""
    return LaunchVisualiser(launch_1d, launch_2d, matmuls, **kw).box


__all__ = ["explore", "LaunchVisualiser", "owners_1d", "summary_1d", "tiles_of", "tile_steps",
           "expected_global_loads", "measure", "block_colour"]
