"""Chapter 08's profiler against torch.profiler: what profiling costs per operator call (issue 41).

Case: a loop of small elementwise operations (a (16,) tensor, cycling through `* 1.0001`, `+ 0.001`, `tanh`),
run plain and under a profiler that records shapes and memory: picotorch's `Profile` on picotorch tensors,
`torch.profiler.profile(record_shapes=True, profile_memory=True)` on torch tensors. A profiled run is the whole
cost of profiling: entering the profiler, the loop, leaving it, and reading `key_averages()` (torch turns its
records into events there). The overhead per operator call is (profiled - plain) / the loop's calls, each the
best of a few rounds; `ratio` compares the two overheads. Target: at most 2x torch's (issue 41).

picotorch is the course's reference implementation, generated from source/ into a temporary folder. Each
side runs in a fresh process on one thread, as in the `framework` suite; the figures are also given in CPU time,
which a busy machine's other processes do not add to.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SUITE = "profiler"

_SCRIPT = r'''
import json, sys, time
side, calls, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
import torch
torch.set_num_threads(1)
if side == "picotorch":
    import picotorch
    x = picotorch.from_torch(torch.randn(16))
    profiling = picotorch.Profile
else:
    from torch.profiler import ProfilerActivity, profile
    x = torch.randn(16)
    profiling = lambda: profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True)


def loop():
    h = x
    for i in range(calls):
        h = h * 1.0001 if i % 3 == 0 else (h + 0.001 if i % 3 == 1 else h.tanh())
    return h


def profiled():
    with profiling() as prof:
        loop()
    return prof.key_averages()


def best(fn):
    times, cpu_times = [], []
    for _ in range(repeat):
        start, cpu_start = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    return min(times), min(cpu_times)


loop(), profiled()  # warm: the first profile of a process starts torch's profiler library
(plain, plain_cpu), (prof, prof_cpu) = best(loop), best(profiled)
rows = profiled()
names = {getattr(r, "name", None) or getattr(r, "key", None): r.count for r in rows}
print(json.dumps({"plain": plain, "profiled": prof, "plain_cpu": plain_cpu, "profiled_cpu": prof_cpu,
                  "counts": {k: v for k, v in names.items() if k and k.removeprefix("aten::") in ("mul", "add", "tanh")}}))
'''


def available():
    from benchmarks.run import torch_and_numpy_missing
    return torch_and_numpy_missing()


def _measure(reference: Path, side: str, calls: int, repeat: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=str(reference))
    done = subprocess.run([sys.executable, "-c", _SCRIPT, side, str(calls), str(repeat)], capture_output=True,
                          text=True, env=env, cwd=reference, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{side} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def overhead(measured: dict, calls: int, cpu: bool = False) -> float:
    """Seconds a profiler adds to each operator call of the loop (never below zero: noise can make it so)."""
    plain, profiled = (measured["plain_cpu"], measured["profiled_cpu"]) if cpu else (measured["plain"],
                                                                                    measured["profiled"])
    return max(profiled - plain, 1e-9) / calls


def run(quick: bool = False) -> list[dict]:
    from benchmarks.run import record, write_reference

    calls, repeat = (600, 3) if quick else (3000, 5)
    with tempfile.TemporaryDirectory(prefix="picotorch-") as tmp:
        reference = write_reference(Path(tmp))
        ours = _measure(reference, "picotorch", calls, repeat)
        theirs = _measure(reference, "torch", calls, repeat)
    same = sorted(ours["counts"].values()) == sorted(theirs["counts"].values())
    return [record(SUITE, f"profiler: overhead per call, {calls} small ops", overhead(ours, calls),
                   "torch.profiler (shapes, memory)", overhead(theirs, calls), target_ratio=2,
                   ours_cpu_s=overhead(ours, calls, cpu=True), torch_cpu_s=overhead(theirs, calls, cpu=True),
                   cpu_ratio=round(overhead(ours, calls, cpu=True) / overhead(theirs, calls, cpu=True), 2),
                   ours_plain_s=ours["plain"] / calls, torch_plain_s=theirs["plain"] / calls, same_counts=same)]
