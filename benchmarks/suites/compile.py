"""Chapter 06's compiler against eager picotorch and against torch (suite `compile`).

    python benchmarks/run.py compile [--quick] [--json FILE]

Cases (issue 20):

- A chain of 8 elementwise ops on 2**20 float32 elements (2**17 with --quick),
  `sigmoid(relu(tanh((exp(x * y + 1) * 0.5)) - y))`, the same code on both sides. On the CUDA emulator:
  picotorch's graph after `fuse_elementwise` (one generated kernel) against eager picotorch (one chapter 05
  kernel per op, and a `fill` for each Python number it makes a tensor of). Beside the times, what the
  emulator counted for each: launches and global memory loads and stores, in bytes. Those counts include
  the index metadata (sizes and strides) that each thread reads to find its element, which a GPU keeps in
  its caches; the tensors' own share is 8 bytes loaded and 4 stored per element for the fused kernel.
  On a GPU (where torch sees one and cupy is installed) the same chain on `cuda` tensors, at 2**20 and 2**24
  elements: the fused kernel, eager picotorch and `torch.compile` (inductor), each against torch eager.
- The same chain followed by `.sum(-1)` over rows of 1024 (same sizes): one kernel for the chain and the sum
  (`fuse_sums`) against the chain's fused kernel followed by chapter 05's row sum: launches, bytes loaded and
  stored on the emulator, time on both (and on a GPU when there is one).
- One training step of an MLP 64-128-10 on a batch of 64 (forward, `cross_entropy` (picotorch's
  log_softmax and nll_loss operators; torch's `F.cross_entropy`), backward; the SGD update eager, under
  no_grad, on every side): picotorch's `compile_function` (with the chapter's passes) against eager
  picotorch, and against torch eager. The step is one graph: its forward, loss and backward.

Results are checked, not only timed: every output of the chain is compared with torch eager on the same
inputs (`torch.testing.assert_close`, tolerances of float32), and the MLP's first losses of each side with
torch's (`same_losses_*` fields).

picotorch is the course's reference implementation, generated from source/ into a temporary folder (never a
stale build). Each case, and each side of the MLP step, runs in a fresh process on one thread (torch's
intra-op pool and NumPy's BLAS get one core each), as the other suites do; the chain's sides share one
process, as they share the captured graph and the inputs they are checked on. The emulator's times say what
fusion saves there (launches and trips through memory), not what it saves on a GPU.
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUITE = "compile"
MLP_SIZES = (64, 64, 128, 10)     # batch, inputs, hidden, classes
LEARNING_RATE = 0.1
MLP_SIDES = ("picotorch eager", "picotorch compiled", "torch eager")


def available() -> str | None:
    from benchmarks.run import torch_and_numpy_missing
    from course.cuda.status import emulator_available, gpu_available

    missing = torch_and_numpy_missing()
    if missing:
        return missing
    if not emulator_available() and not gpu_available():
        return "neither the CUDA emulator's g++ nor a GPU with cupy is here: fused kernels cannot run"
    return None


# ------------------------------------------------------------------ the programs, one code for both frameworks


CHAIN_OPS = 8


def chain(a, b):
    """8 elementwise ops: what Inductor would make one kernel of (picotorch and torch tensors alike)."""
    h = a * b
    h = h + 1.0
    h = h.exp()
    h = h * 0.5
    h = h.tanh()
    h = h - b
    h = h.relu()
    return h.sigmoid()


def mlp_gradients(params, x, labels, cross_entropy):
    """The loss of one batch (the framework's `cross_entropy`) and the gradient of each parameter."""
    w1, b1, w2, b2 = params
    for p in params:
        p.grad = None
    h = (x @ w1.T + b1).relu()
    loss = cross_entropy(h @ w2.T + b2, labels)
    loss.backward()
    return (loss, *(p.grad for p in params))


def sgd_update(params, grads, no_grad) -> None:
    """Outside the compiled function: a captured in-place update made under no_grad would be replayed with
    grad mode on, where autograd refuses in-place changes of a parameter."""
    with no_grad():
        for p, g in zip(params, grads):
            p.sub_(g * LEARNING_RATE)


# ------------------------------------------------------------------ measurements (in the child process)


def timer_for(device: str):
    """Seconds per call: CUDA events on a GPU (benchmarks/suites/gpu.py), else the best of a few rounds (the
    calls that checked the results came first, so kernels are compiled and caches warm)."""
    from benchmarks.run import best_of
    from benchmarks.suites.gpu import gpu_time
    return gpu_time if device == "cuda" else best_of


def agrees(ours, expected) -> bool:
    """ours == expected within the tolerances torch.testing.assert_close takes for their dtype."""
    import torch
    try:
        torch.testing.assert_close(ours, expected)
    except AssertionError:
        return False
    return True


def measure_chain(pt, n: int, device: str, repeat: int, compile_backend: str | None) -> dict:
    """The chain on `n` elements of picotorch's `device` ("emu": the emulator; "cuda"): the fused graph and eager
    picotorch, each compared with torch eager; with a `compile_backend`, torch eager and torch.compile timed too
    (on the emulator that runs their code paths for the tests: their times mean nothing there)."""
    import torch

    torch_device = "cuda" if device == "cuda" else "cpu"
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, generator=generator).to(torch_device)
    y = torch.randn(n, generator=generator).to(torch_device)
    a, b = pt.wrap_torch(x, device), pt.wrap_torch(y, device)
    expected = chain(x, y)
    graph = pt.capture(chain, a, b)
    fused = pt.fuse_elementwise(graph)
    run_eager = lambda: chain(a, b)  # noqa: E731
    run_fused = lambda: pt.run_graph(fused, a, b)  # noqa: E731
    result = {"n": n, "device": device, "captured_ops": graph.op_counts(), "fused_ops": fused.op_counts(),
              "fused_equals_torch": agrees(run_fused().to_torch(), expected),
              "eager_equals_torch": agrees(run_eager().to_torch(), expected)}

    timed, number = timer_for(device), (10 if device == "cuda" else 1)
    result.update(fused_s=timed(run_fused, repeat=repeat, number=number),
                  eager_s=timed(run_eager, repeat=repeat, number=number),
                  # the captured graph, replayed op by op, launches what eager picotorch launches
                  fused=pt.memory_traffic(fused, a, b), eager=pt.memory_traffic(graph, a, b))
    if compile_backend is not None:
        compiled = torch.compile(chain, backend=compile_backend)
        result.update(compile_backend=compile_backend, compile_equals_torch=agrees(compiled(x, y), expected),
                      torch_eager_s=timed(lambda: chain(x, y), repeat=repeat, number=number),
                      torch_compile_s=timed(lambda: compiled(x, y), repeat=repeat, number=number))
    return result


ROW = 1024  # the chain-and-sum case sums rows of this many elements


def measure_chain_sum(pt, n: int, device: str, repeat: int) -> dict:
    """chain(x, y).sum(-1) on (n / ROW, ROW) of picotorch's `device`: one kernel for the chain and the sum
    (`fuse_sums`) against the chain's kernel followed by chapter 05's row sum (`fuse_elementwise`), each compared
    with torch eager."""
    import torch

    torch_device = "cuda" if device == "cuda" else "cpu"
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n // ROW, ROW, generator=generator).to(torch_device)
    y = torch.randn(n // ROW, ROW, generator=generator).to(torch_device)
    a, b = pt.wrap_torch(x, device), pt.wrap_torch(y, device)
    expected = chain(x, y).sum(-1)
    graph = pt.capture(lambda p, q: chain(p, q).sum(-1), a, b)
    one_kernel, chain_then_sum = pt.fuse_sums(graph), pt.fuse_elementwise(graph)
    run_one = lambda: pt.run_graph(one_kernel, a, b)  # noqa: E731
    run_two = lambda: pt.run_graph(chain_then_sum, a, b)  # noqa: E731
    timed, number = timer_for(device), (10 if device == "cuda" else 1)
    return {"n": n, "device": device, "one_kernel_ops": one_kernel.op_counts(),
            "chain_then_sum_ops": chain_then_sum.op_counts(),
            "one_kernel_equals_torch": agrees(run_one().to_torch(), expected),
            "chain_then_sum_equals_torch": agrees(run_two().to_torch(), expected),
            "one_kernel_s": timed(run_one, repeat=repeat, number=number),
            "chain_then_sum_s": timed(run_two, repeat=repeat, number=number),
            "one_kernel": pt.memory_traffic(one_kernel, a, b), "chain_then_sum": pt.memory_traffic(chain_then_sum, a, b)}


def measure_mlp(pt, side: str, repeat: int, number: int) -> dict:
    """One side of the MLP step (one of MLP_SIDES): seconds per step (best of `repeat` rounds of `number` steps)
    and the losses of its first three steps from the shared initial weights."""
    import torch

    from benchmarks.run import best_of

    batch, inputs, hidden, classes = MLP_SIZES
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, inputs, generator=generator)
    labels = torch.randint(0, classes, (batch,), generator=generator)
    weights = [torch.randn(hidden, inputs, generator=generator) * inputs ** -0.5, torch.zeros(hidden),
               torch.randn(classes, hidden, generator=generator) * hidden ** -0.5, torch.zeros(classes)]
    if side == "torch eager":
        params = [w.clone().requires_grad_() for w in weights]
        no_grad, loss_value, cross_entropy = torch.no_grad, lambda t: t.item(), torch.nn.functional.cross_entropy
    else:
        params = [pt.from_torch(w.clone()).requires_grad_() for w in weights]
        x, labels = pt.from_torch(x), pt.from_torch(labels)
        no_grad, loss_value, cross_entropy = pt.no_grad, lambda t: t.to_torch().item(), pt.cross_entropy
    gradients = lambda x, labels: mlp_gradients(params, x, labels, cross_entropy)  # noqa: E731
    if side == "picotorch compiled":
        # fuse_elementwise finds nothing here: its kernels are for the emu and cuda devices, not the CPU
        gradients = pt.compile_function(gradients, passes=(pt.eliminate_dead_code, pt.eliminate_common_subexpressions,
                                                           pt.fold_constants, pt.fuse_elementwise))

    def step():
        loss, *grads = gradients(x, labels)
        sgd_update(params, grads, no_grad)
        return loss

    losses = [loss_value(step()) for _ in range(3)]  # compiled: the first step captures, the next two replay
    result = {"side": side, "seconds": best_of(step, repeat, number), "losses": losses}
    if side == "picotorch compiled":
        result.update(recompiles=gradients.recompiles, graphs=len(gradients.graphs),
                      graph_ops=sum(gradients.graphs[0].op_counts().values()), op_counts=gradients.graphs[0].op_counts())
    return result


# ------------------------------------------------------------------ records (in the runner's process)


def chain_records(m: dict) -> list[dict]:
    from benchmarks.run import record

    where = "GPU" if m["device"] == "cuda" else "emulator"
    size = f"2^{m['n'].bit_length() - 1}" if m["n"] & (m["n"] - 1) == 0 else str(m["n"])
    label = f"chain of {CHAIN_OPS} elementwise ops, {size} float32, {where}"
    fused, eager = m["fused"], m["eager"]
    fields = {"fused_equals_torch": m["fused_equals_torch"], "eager_equals_torch": m["eager_equals_torch"],
              "fused_launches": fused["launches"], "unfused_launches": eager["launches"]}
    if m["device"] != "cuda":  # the emulator counts memory accesses; a GPU does not
        fields.update(fused_load_bytes=fused["global_load_bytes"], unfused_load_bytes=eager["global_load_bytes"],
                      fused_store_bytes=fused["global_store_bytes"], unfused_store_bytes=eager["global_store_bytes"])
    records = [record(SUITE, f"{label}: fused vs unfused", m["fused_s"], "eager picotorch (unfused)", m["eager_s"],
                      **fields)]
    if "torch_eager_s" in m:
        baseline = "torch eager" + ("" if m["device"] == "cuda" else " (CPU: the emulator's times say nothing)")
        records += [record(SUITE, f"{label}: fused kernel", m["fused_s"], baseline, m["torch_eager_s"]),
                    record(SUITE, f"{label}: eager picotorch", m["eager_s"], baseline, m["torch_eager_s"]),
                    record(SUITE, f"{label}: torch.compile ({m['compile_backend']})", m["torch_compile_s"], baseline,
                           m["torch_eager_s"], compile_equals_torch=m["compile_equals_torch"])]
    return records


def chain_sum_records(m: dict) -> list[dict]:
    from benchmarks.run import record

    where = "GPU" if m["device"] == "cuda" else "emulator"
    label = f"chain of {CHAIN_OPS} elementwise ops + sum(-1), rows of {ROW}, 2^{m['n'].bit_length() - 1} float32, {where}"
    one, two = m["one_kernel"], m["chain_then_sum"]
    fields = {"one_kernel_equals_torch": m["one_kernel_equals_torch"],
              "chain_then_sum_equals_torch": m["chain_then_sum_equals_torch"],
              "one_kernel_launches": one["launches"], "chain_then_sum_launches": two["launches"]}
    if m["device"] != "cuda":
        fields.update(one_kernel_load_bytes=one["global_load_bytes"], chain_then_sum_load_bytes=two["global_load_bytes"],
                      one_kernel_store_bytes=one["global_store_bytes"],
                      chain_then_sum_store_bytes=two["global_store_bytes"])
    return [record(SUITE, f"{label}: one kernel vs chain kernel then row sum", m["one_kernel_s"],
                   "fuse_elementwise, then chapter 05's row sum", m["chain_then_sum_s"], **fields)]


def same_losses(ours: list, theirs: list) -> bool:
    """Losses (of float32 computations) equal within the tolerances assert_close takes for float32."""
    import torch
    return agrees(torch.tensor(ours, dtype=torch.float32), torch.tensor(theirs, dtype=torch.float32))


def mlp_records(sides: dict) -> list[dict]:
    from benchmarks.run import record

    eager, compiled, torch_side = (sides[s] for s in MLP_SIDES)
    batch, inputs, hidden, classes = MLP_SIZES
    label = f"MLP step, batch {batch}, {inputs}-{hidden}-{classes}, CPU 1 thread"
    fields = {"graphs": compiled["graphs"], "graph_ops": compiled["graph_ops"], "recompiles": compiled["recompiles"],
              "same_losses_compiled_eager": same_losses(compiled["losses"], eager["losses"]),
              "same_losses_compiled_torch": same_losses(compiled["losses"], torch_side["losses"])}
    return [record(SUITE, f"{label}: compiled vs eager", compiled["seconds"], "eager picotorch", eager["seconds"],
                   torch_eager_s=round(torch_side["seconds"], 6), **fields),
            record(SUITE, f"{label}: compiled vs torch", compiled["seconds"], "torch eager", torch_side["seconds"],
                   eager_vs_torch=round(eager["seconds"] / torch_side["seconds"], 2))]


# ------------------------------------------------------------------ the runner's side: fresh processes


def _measure(reference: Path, *argv: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(reference), str(REPO)]))
    done = subprocess.run([sys.executable, "-m", "benchmarks.suites.compile", *argv], capture_output=True, text=True,
                          env=env, cwd=reference, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"compile suite, {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> list[dict]:
    from benchmarks.run import write_reference
    from course.cuda.status import emulator_available, gpu_available

    records = []
    with tempfile.TemporaryDirectory(prefix="picotorch-") as tmp:
        reference = write_reference(Path(tmp))
        if emulator_available():  # eager picotorch takes ~1 s per 2^18 elements there: --quick stays well in a minute
            n, repeat = (2**17, 2) if quick else (2**20, 3)
            records += chain_records(_measure(reference, "chain", "emu", str(n), str(repeat), "none"))
            records += chain_sum_records(_measure(reference, "chain_sum", "emu", str(n), str(repeat)))
        if gpu_available():
            for n in (2**20,) if quick else (2**20, 2**24):
                records += chain_records(_measure(reference, "chain", "cuda", str(n), "5", "inductor"))
                records += chain_sum_records(_measure(reference, "chain_sum", "cuda", str(n), "5"))
        repeat, steps = (3, 10) if quick else (7, 50)
        records += mlp_records({side: _measure(reference, "mlp", side, str(repeat), str(steps)) for side in MLP_SIDES})
    return records


def child(pt, argv: list[str]) -> dict:
    """One measurement, named as the runner names it: chain DEVICE N REPEAT BACKEND|none, chain_sum DEVICE N REPEAT,
    or mlp SIDE REPEAT STEPS."""
    if argv[0] == "chain":
        _, device, n, repeat, backend = argv
        return measure_chain(pt, int(n), device, int(repeat), None if backend == "none" else backend)
    if argv[0] == "chain_sum":
        _, device, n, repeat = argv
        return measure_chain_sum(pt, int(n), device, int(repeat))
    _, side, repeat, steps = argv
    return measure_mlp(pt, side, int(repeat), int(steps))


def main(argv: list[str]) -> None:
    """The fresh process: one measurement on one thread, printed as one line of JSON."""
    import torch

    torch.set_num_threads(1)
    needs_picotorch = argv[:2] != ["mlp", "torch eager"]  # (its import takes seconds)
    pt = importlib.import_module("picotorch") if needs_picotorch else None
    print(json.dumps(child(pt, argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
