"""Chapter 05 — Backend: grid, blocks and threads; the grid-stride loop; a shared-memory tree; a tiled matmul."""
from __future__ import annotations

from figures.svg import BLUE, GREY, INK, LIGHT, ORANGE, RED, STRONG, TINTS, Figure

CELL = 34


def _ceil(a: int, b: int) -> int:
    return (a + b - 1) // b


def launch_grid() -> Figure:
    """n = 10 elements, 4 threads per block: ⌈10 / 4⌉ = 3 blocks, the last one ragged."""
    n, threads = 10, 4
    blocks = _ceil(n, threads)
    width, height = 760, 240
    fig = Figure(width, height, f"A launch for n = {n} with {threads} threads per block: {blocks} blocks; element "
                                "i = blockIdx.x * blockDim.x + threadIdx.x; the last block's extra threads idle")
    fig.text(20, 26, f"n = {n}, blockDim.x = {threads}: ⌈{n} / {threads}⌉ = {blocks} blocks, "
                     "one element per thread", size=15, anchor="start", bold=True)
    left, top, gap = 150, 86, 26
    fig.text(left - 14, top + CELL / 2 + 5, "threadIdx.x", size=12.5, anchor="end", mono=True)
    fig.text(left - 14, top + CELL + 30, "element i", size=12.5, anchor="end", mono=True)
    for b in range(blocks):
        x = left + b * (threads * CELL + gap)
        fig.rect(x - 6, top - 34, threads * CELL + 12, CELL + 74, fill="none", stroke=STRONG[b], rx=8,
                 width=1.6, dash="6 4")
        fig.text(x + threads * CELL / 2, top - 14, f"blockIdx.x = {b}", size=12.5, fill=STRONG[b],
                 bold=True)
        for t in range(threads):
            i = b * threads + t
            idle = i >= n
            fig.rect(x + t * CELL, top, CELL, CELL, fill="white" if idle else TINTS[b], stroke=GREY if idle else INK,
                     dash="4 3" if idle else None)
            fig.text(x + t * CELL + CELL / 2, top + CELL / 2 + 5, t, size=13, mono=True,
                     fill=GREY if idle else INK)
            fig.text(x + t * CELL + CELL / 2, top + CELL + 30, "—" if idle else i, size=13, mono=True,
                     fill=GREY if idle else INK, bold=not idle)
    fig.text(20, height - 38, f"threads {n - (blocks - 1) * threads}..{threads - 1} of block {blocks - 1} have "
                              f"i ≥ n = {n}: the kernel checks if (i < n) before touching memory", size=12.5,
             anchor="start", fill=RED)
    fig.text(20, height - 16, "a block's threads run together; the grid's blocks run in any order, on any of the "
                              "GPU's multiprocessors", size=12, anchor="start", fill=GREY, italic=True)
    return fig


def grid_stride() -> Figure:
    """n = 20 with a grid of 2 blocks of 4 threads: each thread does i, i + 8, i + 16 while below n."""
    n, threads, blocks = 20, 4, 2
    grid = threads * blocks
    rounds = _ceil(n, grid)
    width, height = 60 + n * CELL + 60, 262
    fig = Figure(width, height, f"A grid-stride loop: n = {n}, {blocks} blocks of {threads} threads = {grid} "
                                f"threads; thread g does elements g, g + {grid}, g + {2 * grid} ... below n")
    fig.text(20, 26, f"Grid-stride loop: {blocks} blocks × {threads} threads = {grid} threads for n = {n} elements",
             size=15, anchor="start", bold=True)
    fig.text(20, 50, "for (long long i = first; i < n; i += step)", size=12, anchor="start", mono=True)
    fig.text(20, 66, f"// first = blockIdx.x * blockDim.x + threadIdx.x, step = gridDim.x * blockDim.x = {grid}",
             size=12, anchor="start", mono=True, fill=GREY)
    left, top = 60, 118
    for i in range(n):
        g, r = i % grid, i // grid
        block = g // threads
        fig.rect(left + i * CELL, top, CELL, CELL, fill=TINTS[block], stroke=INK)
        fig.text(left + i * CELL + CELL / 2, top + CELL / 2 + 5, i, size=12.5, mono=True)
        fig.text(left + i * CELL + CELL / 2, top + CELL + 18, f"t{g}", size=11.5, mono=True, fill=STRONG[block])
    for r in range(rounds):
        x1 = left + r * grid * CELL
        x2 = left + min(n, (r + 1) * grid) * CELL
        fig.line(x1 + 3, top - 12, x2 - 3, top - 12, stroke=GREY, width=2)
        fig.text((x1 + x2) / 2, top - 20, f"round {r}: i = g + {r * grid}" if r else "round 0: i = g",
                 size=12, fill=GREY)
    fig.rect(left, height - 62, 16, 16, fill=TINTS[0])
    fig.text(left + 22, height - 49, "block 0 (threads t0..t3)", size=12, anchor="start")
    fig.rect(left + 220, height - 62, 16, 16, fill=TINTS[1])
    fig.text(left + 242, height - 49, "block 1 (threads t4..t7)", size=12, anchor="start")
    fig.text(20, height - 18, f"t g: the thread with global index g; round {rounds - 1} is ragged: threads "
                              f"t{n - (rounds - 1) * grid}..t{grid - 1} stop, their next i is ≥ n", size=12,
             anchor="start", fill=GREY, italic=True)
    return fig


def tree_reduction() -> Figure:
    """8 threads sum 8 partial sums in shared memory: partial[t] += partial[t + s] for t < s, s = 4, 2, 1."""
    values = [3, 1, 4, 1, 5, 9, 2, 6]
    threads = len(values)
    width, height = 820, 340
    fig = Figure(width, height, f"A shared-memory tree: {threads} partial sums folded in half three times, with a "
                                "barrier after each step, until partial[0] holds the total")
    fig.text(20, 26, "partial[t] += partial[t + s] for t < s;  s = 4, 2, 1;  __syncthreads() after each step",
             size=14.5, anchor="start", bold=True, mono=True)
    left, top, row_h = 130, 70, 66
    partial = list(values)
    steps = []
    s = threads // 2
    while s >= 1:
        steps.append(s)
        s //= 2
    fig.text(left - 14, top - 8, "t", size=12, anchor="end", mono=True, fill=GREY)
    for t in range(threads):
        fig.text(left + t * 50 + 20, top - 8, t, size=11, mono=True, fill=GREY)
    for row in range(len(steps) + 1):
        y = top + row * row_h
        label = "partial" if row == 0 else f"s = {steps[row - 1]}"
        fig.text(left - 14, y + 22, label, size=12.5, anchor="end", mono=True, bold=True)
        live = threads if row == 0 else steps[row - 1]
        for t in range(threads):
            active = t < live
            fig.rect(left + t * 50, y, 40, 32, fill=TINTS[0] if active else "white", stroke=INK if active else GREY,
                     dash=None if active else "4 3")
            fig.text(left + t * 50 + 20, y + 21, partial[t] if active else "", size=13, mono=True)
        if row < len(steps):
            s = steps[row]
            for t in range(s):  # the arrows of the next step: t + s into t
                fig.arrow(left + (t + s) * 50 + 20, y + 34, left + t * 50 + 24, y + row_h - 4, stroke=ORANGE,
                          width=1.2)
                fig.line(left + t * 50 + 20, y + 34, left + t * 50 + 20, y + row_h - 4, stroke=BLUE, width=1.2)
            partial = [partial[t] + partial[t + s] if t < s else partial[t] for t in range(threads)]
            fig.line(left - 8, y + row_h - 12 + 8, left + threads * 50, y + row_h - 12 + 8, stroke=RED, width=1,
                     dash="2 3")
    assert partial[0] == sum(values)
    tx = left + threads * 50 + 20
    fig.lines(tx, top + 20, ["red dashes: __syncthreads()", "no thread reads partial[t + s]",
                             "before its owner wrote it;", "every thread reaches the", "barrier, not only t < s"],
              size=12, anchor="start", fill=RED)
    fig.text(tx, top + 3 * row_h + 22, f"partial[0] = {partial[0]}", size=13, anchor="start", mono=True, bold=True)
    fig.text(20, height - 14, f"{threads} values, log2({threads}) = {len(steps)} steps; a block of 256 threads "
                              "takes 8", size=12, anchor="start", fill=GREY, italic=True)
    return fig


def tiled_matmul() -> Figure:
    """C = A @ B for M = 70, K = 80, N = 65 with 32 × 32 tiles: block (1, 1) and the tiles it loads."""
    M, K, N, TILE = 70, 80, 65, 32
    scale = 2.6
    by, bx = 1, 1
    tiles_k = _ceil(K, TILE)
    width, height = 900, 560
    fig = Figure(width, height, f"Tiled matmul, M = {M}, K = {K}, N = {N}, TILE = {TILE}: block (1, 1) computes "
                                f"one tile of C from {tiles_k} tiles of A and of B, each loaded once into shared "
                                "memory")
    fig.text(20, 26, f"C = A @ B, TILE = {TILE}: block (x={bx}, y={by}) computes one tile of C", size=15,
             anchor="start", bold=True)
    gap = 30
    ax, ay = 70, 70 + K * scale + gap
    bx0, by0 = ax + K * scale + gap, 70
    cx, cy = bx0, ay

    def matrix(x, y, rows, cols, name):
        fig.rect(x, y, cols * scale, rows * scale, fill=LIGHT, stroke=INK)
        for k in range(TILE, cols, TILE):
            fig.line(x + k * scale, y, x + k * scale, y + rows * scale, stroke=GREY, width=0.8, dash="3 3")
        for k in range(TILE, rows, TILE):
            fig.line(x, y + k * scale, x + cols * scale, y + k * scale, stroke=GREY, width=0.8, dash="3 3")
        fig.text(x + cols * scale / 2, y + rows * scale + 18, f"{name} ({rows} × {cols})", size=13, mono=True,
                 bold=True)

    matrix(ax, ay, M, K, "A")
    matrix(bx0, by0, K, N, "B")
    matrix(cx, cy, M, N, "C")
    r0, r1 = by * TILE, min(M, (by + 1) * TILE)
    c0, c1 = bx * TILE, min(N, (bx + 1) * TILE)
    for t in range(tiles_k):
        k0, k1 = t * TILE, min(K, (t + 1) * TILE)
        colour = STRONG[t]
        fig.rect(ax + k0 * scale, ay + r0 * scale, (k1 - k0) * scale, (r1 - r0) * scale, fill=TINTS[t],
                 stroke=colour, width=2)
        fig.text(ax + (k0 + k1) / 2 * scale, ay + (r0 + r1) / 2 * scale + 5, f"t={t}", size=12, mono=True,
                 fill=colour, bold=True)
        fig.rect(bx0 + c0 * scale, by0 + k0 * scale, (c1 - c0) * scale, (k1 - k0) * scale, fill=TINTS[t],
                 stroke=colour, width=2)
        fig.text(bx0 + (c0 + c1) / 2 * scale, by0 + (k0 + k1) / 2 * scale + 5, f"t={t}", size=12, mono=True,
                 fill=colour, bold=True)
    fig.rect(cx + c0 * scale, cy + r0 * scale, (c1 - c0) * scale, (r1 - r0) * scale, fill="#f0d8a8", stroke=RED,
             width=2.4)
    fig.text(cx + (c0 + c1) / 2 * scale, cy + (r0 + r1) / 2 * scale + 5, "C tile", size=12, fill=RED, bold=True)
    fig.lines(cx + N * scale + 40, cy + r0 * scale + 14, ["C tile of block (1, 1):", f"rows {r0}..{r1 - 1}",
                                                            f"cols {c0}..{c1 - 1}"], size=12, anchor="start",
              fill=RED)
    tx = cx + N * scale + 40
    fig.lines(tx, 84, [f"for t = 0 .. {tiles_k - 1}:",
                       "  load A tile t into As,", "  B tile t into Bs", "  (each thread 4 of each;",
                       "  0 outside the matrix)",
                       "  __syncthreads()", "  add TILE products", "  from shared memory", "  __syncthreads()"],
              size=12.5, anchor="start", mono=True)
    fig.lines(tx, 270, [f"t = {tiles_k - 1} is ragged:", f"K = {K} = 2 × {TILE} + {K - 2 * TILE}",
                        f"and so is the C tile:", f"rows {r0}..{r1 - 1} of {M}"],
              size=12, anchor="start", fill=GREY)
    fig.text(20, height - 14, "each element of A and B comes from global memory once per block, not once per "
                              "thread: TILE times fewer global loads", size=12, anchor="start", fill=GREY,
             italic=True)
    return fig


FIGURES = {
    "launch_grid.svg": launch_grid,
    "grid_stride.svg": grid_stride,
    "tree_reduction.svg": tree_reduction,
    "tiled_matmul.svg": tiled_matmul,
}
