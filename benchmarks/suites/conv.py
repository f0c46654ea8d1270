"""Chapter 07's convolution on the reference picotorch against torch (suite `conv`).

The cases (issue 40, "Speed"), each a ratio against torch measured in the same process, one thread on both
sides (torch's intra-op pool and NumPy's BLAS):

- conv2d forward, batch 64, 16 -> 32 channels, 3x3, 28x28 (padding 1), and the same strided (stride 2) and
  dilated (dilation 2, padding 2): goal at most 2x torch;
- forward + backward of the same three (every gradient: input, weight, bias): goal at most 3x torch;
- one training epoch of the chapter's digits CNN (conv, BatchNorm2d, ReLU, max-pool, conv, BatchNorm2d,
  ReLU, a linear layer; Adam at 3e-3, batches of 32, the 1 442 training digits): chapter 04's
  `train_one_epoch` against the plain torch loop on the same batches: goal at most 2x torch.

Every timing is the best of several rounds (the least disturbed one on shared cores), with glibc's allocator
held steady for both sides (STEADY_MALLOC); each record also
gives the same measurement in process CPU time (`cpu_ratio`), which the other processes on a shared
machine disturb less. The results are compared with torch's (`same_values`). picotorch is the course's
reference implementation, generated from source/ into a temporary folder, as the other suites do.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUITE = "conv"
CASES = {"conv2d 3x3": {"padding": 1}, "conv2d 3x3 stride 2": {"padding": 1, "stride": 2},
         "conv2d 3x3 dilation 2": {"padding": 2, "dilation": 2}}
GOALS = {"forward": 2.0, "forward+backward": 3.0, "epoch": 2.0}
# glibc serves a large allocation from the heap or from fresh pages of its own (mmap, zero-filled on first touch,
# returned at free), by a threshold that moves with the sizes the process has freed so far: torch's 6 MB outputs took
# 4.6 ms or 10.7 ms for the same convolution depending on what our side had freed before. Both sides measured with
# the heap kept (nothing over 32 MB mapped apart, nothing trimmed): the steady state of a training loop.
STEADY_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(2 << 30)}


def child(pt, argv: list[str]) -> dict:
    """In the measuring process: `argv` = [batch, rounds, epoch_images]; every timing of both sides."""
    import time

    import numpy as np
    import torch

    batch, rounds, epoch_images = (int(a) for a in argv)
    F = torch.nn.functional

    def best(fn) -> tuple[float, float]:
        """(wall s, CPU s) of one call: the best of `rounds` rounds."""
        fn()  # warm: first-call costs (imports, allocations) are not the steady state
        wall = cpu = float("inf")
        for _ in range(rounds):
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
        return wall, cpu

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 16, 28, 28, generator=gen)
    w, b = torch.randn(32, 16, 3, 3, generator=gen) * 0.1, torch.randn(32, generator=gen)
    results = {}
    for name, kwargs in CASES.items():
        ours_in = [pt.from_torch(t.clone()) for t in (x, w, b)]
        theirs_out, ours_out = F.conv2d(x, w, b, **kwargs), pt.conv2d(*ours_in, **kwargs)
        same = torch.allclose(ours_out.to_torch(), theirs_out, rtol=1e-4, atol=1e-4)
        results[f"{name}: forward"] = {"ours": best(lambda: pt.conv2d(*ours_in, **kwargs)),
                                       "torch": best(lambda: F.conv2d(x, w, b, **kwargs)), "same_values": same}
        grad = torch.randn(theirs_out.shape, generator=gen)
        ours_leaves = [pt.from_torch(t.clone()).requires_grad_(True) for t in (x, w, b)]
        torch_leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
        ours_grad = pt.from_torch(grad.clone())

        def ours_step():
            for leaf in ours_leaves:
                leaf.grad = None
            pt.conv2d(*ours_leaves, **kwargs).backward(ours_grad)

        def torch_step():
            for leaf in torch_leaves:
                leaf.grad = None
            F.conv2d(*torch_leaves, **kwargs).backward(grad)

        timings = {"ours": best(ours_step), "torch": best(torch_step)}
        # each gradient sums thousands of products: within float32 rounding of its largest element
        timings["same_values"] = all(bool((o.grad.to_torch() - t.grad).abs().max() <= 1e-4 * t.grad.abs().max())
                                     for o, t in zip(ours_leaves, torch_leaves))
        results[f"{name}: forward+backward"] = timings
    results["digits CNN: one training epoch"] = _epoch(pt, torch, np, best, epoch_images)
    return results


def digits_cnn(nn):
    """The chapter's CNN (07_conv's `digits_cnn`), for 1x8x8 digits."""
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.Flatten(),
                         nn.Linear(256, 10))


def _epoch(pt, torch, np, best, images: int) -> dict:
    """One epoch of the digits CNN on `images` training digits, both sides from the same weights; each round
    continues training (an epoch's cost does not depend on the weights)."""
    from course.datasets import load_digits
    d = load_digits()
    mean, std = d.train_images.mean(0), d.train_images.std(0) + np.float32(0.1)
    x = torch.from_numpy(((d.train_images - mean) / std).astype(np.float32)[:images]).reshape(-1, 1, 8, 8)
    y = torch.from_numpy(d.train_labels[:images])
    torch.manual_seed(0)
    theirs = digits_cnn(torch.nn)
    mine = digits_cnn(pt)
    mine.load_state_dict(theirs.state_dict())
    data = torch.utils.data
    torch_loader = data.DataLoader(data.TensorDataset(x, y), batch_size=32, shuffle=True,
                                   generator=torch.Generator().manual_seed(0))
    ours_loader = pt.DataLoader(pt.TensorDataset(pt.from_torch(x), pt.from_torch(y)), batch_size=32, shuffle=True,
                                generator=torch.Generator().manual_seed(0))
    torch_opt = torch.optim.Adam(theirs.parameters(), lr=3e-3)
    ours_opt = pt.Adam(mine.parameters(), lr=3e-3)
    losses = {}

    def torch_epoch():
        theirs.train()
        total = 0.0
        for xb, yb in torch_loader:
            torch_opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(theirs(xb), yb)
            loss.backward()
            torch_opt.step()
            total += loss.item() * len(xb)
        losses.setdefault("torch", total / len(y))

    def ours_epoch():
        losses.setdefault("ours", pt.train_one_epoch(mine, ours_loader, pt.cross_entropy, ours_opt))

    # the first epoch of each (the warm-up call) starts from the same weights on the same batches
    return {"ours": best(ours_epoch), "torch": best(torch_epoch),
            "same_values": abs(losses["ours"] - losses["torch"]) <= 1e-3 * max(1.0, abs(losses["torch"])),
            "first_epoch_loss": f"{losses['ours']:.5f}/{losses['torch']:.5f}"}


def records(measured: dict) -> list[dict]:
    from benchmarks.run import record
    out = []
    for case, m in measured.items():
        (ours_wall, ours_cpu), (torch_wall, torch_cpu) = m["ours"], m["torch"]
        kind = "epoch" if "epoch" in case else case.rsplit(": ", 1)[1]
        extra = {k: v for k, v in m.items() if k not in ("ours", "torch")}
        cpu_ratio = ours_cpu / torch_cpu if torch_cpu else float("inf")
        out.append(record(SUITE, case, ours_wall, "torch (1 thread)", torch_wall, threads=1,
                          cpu_s=f"{ours_cpu:.4g}/{torch_cpu:.4g}", cpu_ratio=round(cpu_ratio, 2),
                          target_ratio=GOALS[kind], **extra))
    return out


_SCRIPT = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
torch.set_num_threads(1)
import picotorch
from benchmarks.suites.conv import child
print(json.dumps(child(picotorch, sys.argv[2:])))
'''


def available():
    from benchmarks.run import torch_and_numpy_missing
    return torch_and_numpy_missing()


def run(quick: bool = False) -> list[dict]:
    from benchmarks.run import write_reference
    batch, rounds, images = (16, 2, 320) if quick else (64, 5, 1442)
    with tempfile.TemporaryDirectory(prefix="picotorch-") as tmp:
        reference = write_reference(Path(tmp))
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join([str(reference), str(REPO)]), **STEADY_MALLOC)
        done = subprocess.run([sys.executable, "-c", _SCRIPT, str(reference), str(batch), str(rounds), str(images)],
                              capture_output=True, text=True, env=env, cwd=reference, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"the conv benchmark failed:\n{done.stderr[-2000:]}")
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    label = "" if batch == 64 else f" (batch {batch}, quick)"
    return [dict(r, case=r["case"] + label) for r in records(measured)]
