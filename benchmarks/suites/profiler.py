"""Chapter 08's profiler against torch.profiler: what profiling costs per operator call (issue 41).

Case: a loop of small elementwise operations (a (16,) tensor, cycling through `* 1.0001`, `+ 0.001`, `tanh`),
run plain and under a profiler that records shapes and memory: picotorch's `Profile` on picotorch tensors,
`torch.profiler.profile(record_shapes=True, profile_memory=True)` on torch tensors. Two cases: recording (entering
the profiler, the loop, leaving it: torch parses its records there), and recording then reading `key_averages()`
(torch builds its events' tree there). The overhead per operator call is (profiled - plain) / the loop's calls, each the
best of a few rounds, measured for n and 2n calls so that starting and stopping the profiler drop out; `ratio`
compares the two overheads. Target: at most 2x torch's (issue 41).

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


def loop(calls):
    h = x
    for i in range(calls):
        h = h * 1.0001 if i % 3 == 0 else (h + 0.001 if i % 3 == 1 else h.tanh())
    return h


def recorded(calls):
    with profiling() as prof:
        loop(calls)
    return prof


def profiled(calls):
    return recorded(calls).key_averages()


def best(fn, calls):
    times, cpu_times = [], []
    for _ in range(repeat):
        start, cpu_start = time.perf_counter(), time.process_time()
        fn(calls)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    return min(times), min(cpu_times)


loop(calls), profiled(calls)  # warm: the first profile of a process starts torch's profiler library
measured = {}
for name, fn in (("plain", loop), ("recorded", recorded), ("profiled", profiled)):
    for n in (calls, 2 * calls):
        measured[f"{name}_{n}"], measured[f"{name}_{n}_cpu"] = best(fn, n)
rows = profiled(calls)
names = {getattr(r, "name", None) or getattr(r, "key", None): r.count for r in rows}
measured["counts"] = {k: v for k, v in names.items() if k and k.removeprefix("aten::") in ("mul", "add", "tanh")}
print(json.dumps(measured))
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


def overhead(measured: dict, calls: int, cpu: bool = False, kind: str = "recorded") -> float:
    """Seconds a profiler adds to each operator call: the profiled loop's time less the plain loop's, for 2n calls
    less for n, over n. Starting and stopping the profiler cost the same for both lengths and drop out. Never below
    a nanosecond: noise can make it so."""
    tail = "_cpu" if cpu else ""
    added = [measured[f"{kind}_{n}{tail}"] - measured[f"plain_{n}{tail}"] for n in (calls, 2 * calls)]
    return max(added[1] - added[0], 1e-9) / calls


def run(quick: bool = False) -> list[dict]:
    from benchmarks.run import record, write_reference

    calls, repeat = (600, 3) if quick else (3000, 5)
    with tempfile.TemporaryDirectory(prefix="picotorch-") as tmp:
        reference = write_reference(Path(tmp))
        ours = _measure(reference, "picotorch", calls, repeat)
        theirs = _measure(reference, "torch", calls, repeat)
    same = sorted(ours["counts"].values()) == sorted(theirs["counts"].values())
    records = []
    for kind, what in (("recorded", "recording"), ("profiled", "recording + key_averages()")):
        cpu = {side: overhead(m, calls, cpu=True, kind=kind) for side, m in (("ours", ours), ("torch", theirs))}
        records.append(record(SUITE, f"profiler: {what}, per call", overhead(ours, calls, kind=kind),
                              "torch.profiler (shapes, memory)", overhead(theirs, calls, kind=kind), target_ratio=2,
                              ours_cpu_s=cpu["ours"], torch_cpu_s=cpu["torch"],
                              cpu_ratio=round(cpu["ours"] / cpu["torch"], 2), calls=calls,
                              ours_plain_s=ours[f"plain_{calls}"] / calls, torch_plain_s=theirs[f"plain_{calls}"] / calls,
                              same_counts=same))
    return records
