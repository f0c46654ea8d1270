"""Chapter 02's autograd against torch.autograd, on the CPU (records of the `framework` suite).

Cases (issue 5):
- one training step of a 2-layer MLP, batch 64, 784-256-10: forward, a log-softmax
  cross-entropy written with the chapters' operations, zeroing the gradients, backward.
  Target: at most 3x torch; the dispatcher issue's goal: at most 1.5x (`goal`).
- backward through a chain of 10 000 small elementwise operations (a (16,) tensor, cycling
  through `* 1.0001`, `+ 0.001`, `tanh`). Target: at most 10x torch, and no RecursionError;
  the dispatcher issue's goal: at most 3x (`goal`).

picotorch is the course's reference implementation, generated from source/ into a temporary
folder (never a stale build). Each measurement runs in a fresh process, torch's and ours alike,
on one thread: torch's intra-op pool and NumPy's BLAS both get one core (as the `framework`
suite of chapter 01 does). Two pools in one process, or a warm pool beside the other side's,
compete for the cores and make the ratio a measure of the machine's load. The same code runs
on both sides; only the tensors differ.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SUITE = "framework"

_SCRIPT = r'''
import json, sys, time
kind, side, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
import numpy as np
import torch
torch.set_num_threads(int(sys.argv[4]))
if side == "picotorch":
    import picotorch
    convert = lambda t, grad=False: picotorch.from_torch(t.clone()).requires_grad_(grad)
else:
    convert = lambda t, grad=False: t.clone().requires_grad_(grad)


def best(fn, repeat, number):
    """The best round's seconds per call: wall time, and the process's CPU time (what a busy machine's other
    processes do not add to: the figure to compare on shared cores)."""
    times, cpu_times = [], []
    for _ in range(repeat):
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
        cpu_times.append((time.process_time() - cpu_start) / number)
    return min(times), min(cpu_times)


g = torch.Generator().manual_seed(0)
if kind == "mlp":
    x = convert(torch.randn(64, 784, generator=g))
    labels = torch.randint(0, 10, (64,), generator=g)
    onehot = convert(torch.nn.functional.one_hot(labels, 10).float())
    w1 = convert(torch.randn(256, 784, generator=g) * 0.03, True)
    b1 = convert(torch.zeros(256), True)
    w2 = convert(torch.randn(10, 256, generator=g) * 0.06, True)
    b2 = convert(torch.zeros(10), True)

    def step():
        h = (x @ w1.T + b1).relu()
        logits = h @ w2.T + b2
        shifted = logits - logits.max(1, keepdim=True).values
        log_probs = shifted - shifted.exp().sum(1, keepdim=True).log()
        loss = -(onehot * log_probs).sum() / 64
        for p in (w1, b1, w2, b2):
            p.grad = None
        loss.backward()
        return loss

    step()
    seconds, cpu_seconds = best(step, repeat, 10)
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "loss": float(step().item())}))
else:
    n = int(kind.split(":")[1])
    x = convert(torch.randn(16, generator=g), True)

    def chain():
        h = x
        for i in range(n):
            h = h * 1.0001 if i % 3 == 0 else (h + 0.001 if i % 3 == 1 else h.tanh())
        return h.sum()

    times, cpu_times, error = [], [], None
    for _ in range(repeat):
        out = chain()
        x.grad = None
        start, cpu_start = time.perf_counter(), time.process_time()
        try:
            out.backward()
        except RecursionError as e:
            error = "RecursionError"
            break
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
        del out
    grad = None if error else float(x.grad.to_torch().sum() if side == "picotorch" else x.grad.sum())
    print(json.dumps({"seconds": min(times) if times else None, "cpu_seconds": min(cpu_times) if cpu_times else None,
                      "error": error, "grad_sum": grad}))
'''


def available():
    from benchmarks.run import torch_and_numpy_missing
    return torch_and_numpy_missing()


def _measure(reference: Path, kind: str, side: str, repeat: int, threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), PYTHONPATH=str(reference))
    done = subprocess.run([sys.executable, "-c", _SCRIPT, kind, side, str(repeat), str(threads)],
                          capture_output=True, text=True, env=env, cwd=reference, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{side} {kind} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cpu(ours: dict, theirs: dict) -> dict:
    """The same measurement in CPU time: on shared cores, wall time also measures the other processes' load."""
    if not ours.get("cpu_seconds") or not theirs.get("cpu_seconds"):
        return {}
    return {"ours_cpu_s": round(ours["cpu_seconds"], 6), "torch_cpu_s": round(theirs["cpu_seconds"], 6),
            "cpu_ratio": round(ours["cpu_seconds"] / theirs["cpu_seconds"], 2)}


def run(quick: bool = False) -> list[dict]:
    from benchmarks.run import record, write_reference

    records = []
    with tempfile.TemporaryDirectory(prefix="picotorch-") as tmp:
        reference = write_reference(Path(tmp))
        threads = 1  # NumPy's BLAS and torch's pool, both on one core: the same hardware for both sides
        ours = _measure(reference, "mlp", "picotorch", 3 if quick else 7, threads)
        theirs = _measure(reference, "mlp", "torch", 3 if quick else 7, threads)
        records.append(record(SUITE, "autograd: MLP step 64x784-256-10", ours["seconds"], "torch (1 thread)",
                              theirs["seconds"], target_ratio=3, goal=1.5, threads=threads, **_cpu(ours, theirs),
                              same_loss=abs(ours["loss"] - theirs["loss"]) < 1e-4))
        ours = _measure(reference, "chain:10000", "picotorch", 2 if quick else 5, 1)
        theirs = _measure(reference, "chain:10000", "torch", 2 if quick else 5, 1)
        records.append(record(SUITE, "autograd: backward of a 10 000-op chain", ours["seconds"] or float("inf"),
                              "torch", theirs["seconds"], target_ratio=10, goal=3, **_cpu(ours, theirs),
                              recursion_error=ours["error"] is not None,
                              same_grad=ours["grad_sum"] is not None and abs(ours["grad_sum"] - theirs["grad_sum"]) < 1e-3))
        if not quick:
            ours = _measure(reference, "chain:100000", "picotorch", 1, 1)
            theirs = _measure(reference, "chain:100000", "torch", 1, 1)
            records.append(record(SUITE, "autograd: backward of a 100 000-op chain", ours["seconds"] or float("inf"),
                                  "torch", theirs["seconds"], recursion_error=ours["error"] is not None))
    return records
