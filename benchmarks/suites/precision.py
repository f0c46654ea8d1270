"""Chapter 08's autocast against torch.autocast, on the CPU: what the Autocast key adds to an operator call.

Cases (issue 41):
- a listed operator, `linear(x, w)` with x already bfloat16 and w a float32 weight (a leaf that requires grad):
  inside `autocast("cpu")` the key's kernel runs and w's cast comes from the cache (one cache hit). Its added
  cost is the region's call minus the same call outside a region on operands that are already bfloat16 (the
  same product, no autocast). Target: our added cost at most 2x torch's.
- an operator in no list, `x + y` (float32): inside a region it falls through the key; the added cost should be
  nothing measurable, ours as torch's (reported, no target: both are noise around 0).

Each side runs in a fresh process on one thread (as the `framework` suite does), under no_grad (the cache keys
on the weight's requires_grad, not on grad mode), so that the figure is the dispatcher's and autocast's work.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SUITE = "precision"

_SCRIPT = r'''
import json, sys, time
side, repeat = sys.argv[1], int(sys.argv[2])
import torch
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
x32, w32, y32 = torch.randn(4, 8, generator=g), torch.randn(8, 8, generator=g), torch.randn(4, 8, generator=g)
if side == "picotorch":
    import picotorch as pt
    ours = lambda t, grad=False: pt.from_torch(t.clone()).requires_grad_(grad)
    x16, w16 = ours(x32).to(pt.bfloat16), ours(w32).to(pt.bfloat16)
    w, x32, y32 = ours(w32, True), ours(x32), ours(y32)
    linear = lambda a, b: pt.dispatch("linear", a, b, None)
    region, no_grad = (lambda: pt.autocast("cpu")), pt.no_grad
else:
    x16, w16, w = x32.bfloat16(), w32.bfloat16(), w32.clone().requires_grad_(True)
    linear = torch.nn.functional.linear
    region, no_grad = (lambda: torch.autocast("cpu")), torch.no_grad


def best(fn, number=2000):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return min(times)


with no_grad():
    outside_linear = best(lambda: linear(x16, w16))
    outside_add = best(lambda: x32 + y32)
    with region():
        assert str(linear(x16, w).dtype).endswith("bfloat16")
        inside_linear = best(lambda: linear(x16, w))
        inside_add = best(lambda: x32 + y32)
print(json.dumps({"outside_linear": outside_linear, "inside_linear": inside_linear, "outside_add": outside_add,
                  "inside_add": inside_add}))
'''


def available():
    from benchmarks.run import torch_and_numpy_missing
    why = torch_and_numpy_missing()
    if why:
        return why
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        return "ml_dtypes is not installed (chapter 08's bfloat16)"
    return None


def _measure(reference: Path, side: str, repeat: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=str(reference))
    done = subprocess.run([sys.executable, "-c", _SCRIPT, side, str(repeat)], capture_output=True, text=True,
                          env=env, cwd=reference, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{side} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> list[dict]:
    from benchmarks.run import record, write_reference

    with tempfile.TemporaryDirectory(prefix="picotorch-") as tmp:
        reference = write_reference(Path(tmp))
        ours = _measure(reference, "picotorch", 3 if quick else 7)
        theirs = _measure(reference, "torch", 3 if quick else 7)
    added = {side: {case: max(m[f"inside_{case}"] - m[f"outside_{case}"], 1e-9) for case in ("linear", "add")}
             for side, m in (("ours", ours), ("torch", theirs))}
    return [
        record(SUITE, "autocast: added cost, linear (weight cache hit)", added["ours"]["linear"],
               "torch.autocast's added cost", added["torch"]["linear"], target_ratio=2,
               ours_inside_s=ours["inside_linear"], ours_outside_s=ours["outside_linear"],
               torch_inside_s=theirs["inside_linear"], torch_outside_s=theirs["outside_linear"]),
        record(SUITE, "autocast: added cost, add (in no list)", added["ours"]["add"],
               "torch.autocast's added cost", added["torch"]["add"], ours_inside_s=ours["inside_add"],
               ours_outside_s=ours["outside_add"], torch_inside_s=theirs["inside_add"],
               torch_outside_s=theirs["outside_add"]),
    ]
