"""Chapter 04's training loop on the reference picotorch against the same loop in PyTorch (suite `training`).

The case (issue: chapter 04 "Training"): the UCI digits that ship with the course (1 442 training and
355 test images, standardised), an MLP 64-128-10, `cross_entropy`, Adam at lr 3e-3 with a cosine
schedule, batches of 32 shuffled by a seeded generator, the same number of epochs on both sides,
from the same initial weights. Each epoch is `train_one_epoch` and `evaluate` on the test images.

- time per epoch: the median over the epochs (the machine is shared; the median is the least
  disturbed figure). Target: at most 2x torch.
- final test accuracy of each: within 1 point of each other.
- peak memory of each process (`ru_maxrss`), and how much it grew while training.

A second record compares with torch whose batches are gathered by one indexing each (the same batches in
the same order), as picotorch's DataLoader gathers a TensorDataset's: most of the idiomatic torch loop's
time on this small model is its DataLoader collating sample by sample, and this shows the rest.

picotorch is the course's reference implementation, generated from source/ into a temporary folder
(never a stale build). Each side runs in a fresh process on one thread (torch's intra-op pool and
NumPy's BLAS both get one core), as the other suites do. The torch side is the plain idiomatic loop
(`torch.utils.data.DataLoader`, `torch.optim.Adam`, `F.cross_entropy`); the picotorch side is the
chapter's `train_one_epoch`/`evaluate` with its `DataLoader`, `Adam` and `cross_entropy`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUITE = "training"

_SCRIPT = r'''
import json, resource, statistics, sys, time
side, epochs, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
import numpy as np
import torch
torch.set_num_threads(threads)
from course.datasets import load_digits

def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")

d = load_digits()
mean, std = d.train_images.mean(0), d.train_images.std(0) + np.float32(0.1)
x_train = np.ascontiguousarray((d.train_images - mean) / std, dtype=np.float32)
x_test = np.ascontiguousarray((d.test_images - mean) / std, dtype=np.float32)
y_train, y_test = d.train_labels, d.test_labels
torch.manual_seed(0)
start_weights = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).state_dict()

if side == "picotorch":
    import picotorch as pt
    model = pt.Sequential(pt.Linear(64, 128), pt.ReLU(), pt.Linear(128, 10))
    model.load_state_dict(start_weights)
    optimizer = pt.Adam(model.parameters(), lr=3e-3)
    scheduler = pt.CosineAnnealingLR(optimizer, T_max=epochs)
    train = pt.DataLoader(pt.TensorDataset(pt.from_numpy(x_train), pt.from_numpy(y_train)), batch_size=32,
                          shuffle=True, generator=torch.Generator().manual_seed(0))
    test = pt.DataLoader(pt.TensorDataset(pt.from_numpy(x_test), pt.from_numpy(y_test)), batch_size=512)

    def epoch():
        loss = pt.train_one_epoch(model, train, pt.cross_entropy, optimizer)
        _, accuracy = pt.evaluate(model, test, pt.cross_entropy)
        scheduler.step()
        return loss, accuracy
else:
    F = torch.nn.functional
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    model.load_state_dict(start_weights)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    data = torch.utils.data
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    if side == "torch":  # the idiomatic loop: a DataLoader that collates sample by sample
        train = data.DataLoader(data.TensorDataset(xt, yt), batch_size=32, shuffle=True,
                                generator=torch.Generator().manual_seed(0))
    else:  # "torch-gather": the same batches in the same order, each gathered by one indexing
        order = data.DataLoader(range(len(yt)), batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(0),
                                collate_fn=torch.tensor)
        train = type("Gathered", (), {"__iter__": lambda self: ((xt[i], yt[i]) for i in order)})()
    test = data.DataLoader(data.TensorDataset(torch.from_numpy(x_test), torch.from_numpy(y_test)), batch_size=512)

    def epoch():
        model.train()
        total, count = 0.0, 0
        for x, y in train:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(x)
            count += len(x)
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in test:
                correct += (model(x).argmax(1) == y).sum().item()
        scheduler.step()
        return total / count, correct / len(y_test)

before = rss_mb()
times, losses = [], []
for _ in range(epochs):
    start = time.perf_counter()
    loss, accuracy = epoch()
    times.append(time.perf_counter() - start)
    losses.append(loss)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"median_s": statistics.median(times), "mean_s": sum(times) / len(times), "accuracy": accuracy,
                  "first_loss": losses[0], "last_loss": losses[-1], "peak_rss_mb": peak,
                  "growth_mb": max(0.0, rss_mb() - before)}))
'''


def available():
    from benchmarks.run import torch_and_numpy_missing
    return torch_and_numpy_missing()


def _measure(reference: Path, side: str, epochs: int, threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), PYTHONPATH=os.pathsep.join([str(reference), str(REPO)]))
    done = subprocess.run([sys.executable, "-c", _SCRIPT, side, str(epochs), str(threads)],
                          capture_output=True, text=True, env=env, cwd=reference, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{side} training failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> list[dict]:
    from benchmarks.run import record, write_reference

    epochs = 8 if quick else 20
    threads = 1
    with tempfile.TemporaryDirectory(prefix="picotorch-") as tmp:
        reference = write_reference(Path(tmp))
        ours = _measure(reference, "picotorch", epochs, threads)
        theirs = _measure(reference, "torch", epochs, threads)
        gathered = _measure(reference, "torch-gather", epochs, threads)
    gap = abs(ours["accuracy"] - theirs["accuracy"]) * 100
    return [record(SUITE, f"training: digits MLP 64-128-10, Adam, batch 32, {epochs} epochs (time per epoch)",
                   ours["median_s"], "torch (1 thread)", theirs["median_s"], target_ratio=2, threads=threads,
                   mean_epoch_s=f"{ours['mean_s']:.4f}/{theirs['mean_s']:.4f}",
                   test_accuracy=f"{ours['accuracy']:.4f}/{theirs['accuracy']:.4f}",
                   accuracy_gap_points=round(gap, 2), accuracy_within_1_point=gap <= 1.0,
                   peak_rss_mb=f"{ours['peak_rss_mb']:.0f}/{theirs['peak_rss_mb']:.0f}",
                   rss_growth_training_mb=f"{ours['growth_mb']:.1f}/{theirs['growth_mb']:.1f}",
                   first_epoch_loss=f"{ours['first_loss']:.5f}/{theirs['first_loss']:.5f}"),
            record(SUITE, "training: the same, torch's batches gathered by indexing (no per-sample collate)",
                   ours["median_s"], "torch, index-gathered batches (1 thread)", gathered["median_s"], threads=threads,
                   test_accuracy=f"{ours['accuracy']:.4f}/{gathered['accuracy']:.4f}",
                   peak_rss_mb=f"{ours['peak_rss_mb']:.0f}/{gathered['peak_rss_mb']:.0f}")]
