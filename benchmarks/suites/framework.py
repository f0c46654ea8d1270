"""The reference picotorch (chapters 01-03) against torch on the CPU, in the same run.

Cases and the ratios the course promises (issue "Chapter 01 Tensor", COURSE.md §6):

    add, two contiguous 1M-element float32 tensors          <= 2x
    add, the same with one input transposed                 <= 4x
    sum over one dim of a 1000x1000 float32 tensor          <= 3x   (each dim)
    matmul of two 512x512 float32 matrices                  <= 2x
    creating a view of a small tensor                       <= 10x  (view, transpose, indexing)

and, since the dispatcher issue (every op dispatched), the goals it set for the hot path:
`a.sum(1)` <= 1.5x and `x.view(4, 3)` <= 2x (the `goal` of those records; `within_goal` says whether
this run met it).

The reference computes with NumPy, which runs an elementwise loop or a reduction
on one core; torch is timed on one thread too (`torch.set_num_threads(1)`), so the
ratio compares the same amount of hardware. Each record also carries torch's time
with its default thread count (`torch_default_threads_s`) for reference. NumPy's
BLAS is asked for one thread as well where this suite is the first to load NumPy
(`blas_threads` says what it got).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # only effective if NumPy is not loaded yet

REPO = Path(__file__).resolve().parents[2]
SUITE = "framework"
GOALS = {"sum_dim1": 1.5, "view": 2.0}
LIMITS = {"add_contiguous": 2.0, "add_transposed": 4.0, "sum_dim0": 3.0, "sum_dim1": 3.0, "matmul": 2.0,
          "view": 10.0, "transpose": 10.0, "index": 10.0}


def available() -> str | None:
    if not (REPO / "source" / "01_tensor" / "01_tensor.py").exists():
        return "chapter 01 (the Tensor) is not in source/ yet"
    return None


def load_reference():
    """Assemble the reference picotorch from source/ into build/reference and import it."""
    from autograder.build.release import assemble_reference

    out = assemble_reference(REPO, REPO / "build" / "reference")
    if str(out) not in sys.path:
        sys.path.insert(0, str(out))
    import picotorch
    return picotorch


def run(quick: bool) -> list[dict]:
    import torch

    from benchmarks.run import best_of, record

    pt = load_reference()
    repeat = 7 if quick else 15  # best of many rounds: robust on a busy machine
    default_threads = torch.get_num_threads()
    blas_threads = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    g = torch.Generator().manual_seed(0)
    a = torch.randn(1000, 1000, generator=g)
    b = torch.randn(1000, 1000, generator=g)
    m1 = torch.randn(512, 512, generator=g)
    m2 = torch.randn(512, 512, generator=g)
    small = torch.randn(3, 4, generator=g)
    pa, pb, pm1, pm2, psmall = (pt.from_torch(t) for t in (a, b, m1, m2, small))

    # (case, what, ours, torch's, calls per round)
    cases = [
        ("add_contiguous", "a + b, float32 1000x1000 (1M elements)", lambda: pa + pb, lambda: a + b, 5),
        ("add_transposed", "a.T + b, float32 1000x1000", lambda: pa.T + pb, lambda: a.T + b, 3),
        ("sum_dim0", "a.sum(0), float32 1000x1000", lambda: pa.sum(0), lambda: a.sum(0), 5),
        ("sum_dim1", "a.sum(1), float32 1000x1000", lambda: pa.sum(1), lambda: a.sum(1), 5),
        ("matmul", "m1 @ m2, float32 512x512", lambda: pm1 @ pm2, lambda: m1 @ m2, 3),
        ("view", "x.view(4, 3), x of shape (3, 4)", lambda: psmall.view(4, 3), lambda: small.view(4, 3), 2000),
        ("transpose", "x.transpose(0, 1), x of shape (3, 4)", lambda: psmall.transpose(0, 1),
         lambda: small.transpose(0, 1), 2000),
        ("index", "x[1:, ::2], x of shape (3, 4)", lambda: psmall[1:, ::2], lambda: small[1:, ::2], 2000),
    ]
    for case, _, ours, theirs, _ in cases:  # the same answer before timing anything (float32 sums of a
        # thousand numbers differ in the last digits between summation orders)
        torch.testing.assert_close(ours().to_torch(), theirs(), rtol=1e-4, atol=1e-3,
                                   msg=lambda m, c=case: f"{c}: {m}")

    records = []
    for case, what, ours, theirs, number in cases:
        if quick and number > 5:
            number //= 4
        torch.set_num_threads(1)
        try:
            ours_s = best_of(ours, repeat, number)
            torch_s = best_of(theirs, repeat, number)
        finally:
            torch.set_num_threads(default_threads)
        torch_default_s = best_of(theirs, repeat, number)
        goal = {"goal": GOALS[case], "within_goal": ours_s / torch_s <= GOALS[case]} if case in GOALS else {}
        records.append(record(SUITE, case, ours_s, "torch (1 thread)", torch_s, limit=LIMITS[case],
                              within=ours_s / torch_s <= LIMITS[case], **goal, what=what,
                              torch_default_threads_s=round(torch_default_s, 9),
                              torch_threads=default_threads, blas_threads=blas_threads))
    return records
