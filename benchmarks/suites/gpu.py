"""Chapter 05's reference CUDA kernels against torch on the same GPU, in one run (COURSE.md §6).

    python benchmarks/run.py gpu [--quick] [--json FILE]

Each case times the reference kernel (the chapter's solution, from the assembled reference picotorch in
build/reference) and torch's own kernel doing the same work on the same device, with CUDA events around
back-to-back launches (so the GPU's time, not Python's), best of a few rounds. `ratio` is ours / torch's
(lower is better); `vs_torch` is torch's time / ours, the share of torch's throughput, with the issue's
target beside it:

    add, 2**26 float32                         vs_torch >= 80 %
    sum along the last dim, 4096 x 4096        >= 60 %   (sum along dim 0 is reported too: it copies first)
    tiled matmul 4096^3 float32, TF32 off      >= 25 %   (torch: cuBLAS)
    register-blocked matmul, the same          >= 50 %
    softmax over the rows of 4096 x 4096       >= 50 %
    conv2d, batch 64, 16 -> 32 channels, 3x3, padding 1, 28x28: chapter 07's im2col kernel and chapter 05's
        matmul per image, against torch's (cuDNN), and the im2col launch alone against F.unfold: reported;
        its backward (the col2im kernel, the matmuls, im2col again, the bias's sum) against torch's, and the
        col2im launch alone against F.fold: reported

GPU only. Without a GPU (and cupy) the suite says so and measures nothing: the emulator's times say
nothing about a GPU's (benchmarks/suites/gpu_kernels_smoke.py measures what the emulator costs).
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "build" / "reference"

TARGETS = {"add": 0.80, "sum(dim=-1)": 0.60, "matmul tiled": 0.25, "matmul blocked": 0.50, "softmax": 0.50}


def available() -> str | None:
    from course.cuda.status import gpu_available

    if not gpu_available():
        import torch
        return ("needs a CUDA GPU with cupy, and there is none here (torch.cuda.is_available() is "
                f"{torch.cuda.is_available()}): GPU kernels are not measured on the emulator")
    if not (REFERENCE / "picotorch" / "ch05_backend.py").exists():
        return "build/reference/picotorch has no chapter 05: run `autograder build` first"
    return None


def _backend():
    sys.path.insert(0, str(REFERENCE))
    for name in [m for m in sys.modules if m == "picotorch" or m.startswith("picotorch.")]:
        del sys.modules[name]
    importlib.import_module("picotorch")
    return importlib.import_module("picotorch.ch05_backend")


def gpu_time(fn, repeat: int = 5, number: int = 10) -> float:
    """Seconds per call on the GPU: CUDA events around `number` back-to-back calls, best of `repeat`."""
    import torch

    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / number)
    return best


def cpu_time(fn, repeat: int = 2, number: int = 1) -> float:
    """Seconds per call on the CPU (for the miniature run on the emulator that tests this script)."""
    from benchmarks.run import best_of

    fn()  # the first launch compiles
    return best_of(fn, repeat, number)


def run(quick: bool = False) -> list[dict]:
    return measure("cuda", size=2048 if quick else 4096, n=2**24 if quick else 2**26)


def measure(device: str, size: int, n: int, backend=None) -> list[dict]:
    """Every case on `device`: "cuda" for the real thing; "cpu" runs it all, tiny, on the emulator (the tests
    use that to check this script where no GPU is lent; its times mean nothing)."""
    import torch

    from benchmarks.run import record

    b = backend if backend is not None else _backend()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    on_gpu = device == "cuda"
    name = torch.cuda.get_device_name(0) if on_gpu else "cpu (the CUDA emulator: times say nothing)"
    timer = gpu_time if on_gpu else cpu_time
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    records = []

    def case(label, ours, theirs, check, number=10, **extra):
        ours()
        sync()
        check()
        ours_s, theirs_s = timer(ours, number=number if on_gpu else 1), timer(theirs, number=number if on_gpu else 1)
        target = TARGETS.get(label)
        fields = {"device": name, "vs_torch": f"{theirs_s / ours_s:.0%}", **extra}
        if target is not None:
            fields["target"] = f">= {target:.0%}"
            fields["meets"] = "yes" if theirs_s / ours_s >= target else "NO"
        records.append(record("gpu", label, ours_s, f"torch on {device}", theirs_s, **fields))

    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    out = torch.empty_like(x)
    case("add", lambda: b.launch_map("add", out, x, y), lambda: torch.add(x, y, out=out),
         lambda: torch.testing.assert_close(out, x + y), elements=n)
    del x, y, out

    m = torch.randn(size, size, device=device)
    rows = torch.empty(size, device=device)
    case("sum(dim=-1)", lambda: b.launch_sum_rows(rows, m), lambda: torch.sum(m, 1, out=rows),
         lambda: torch.testing.assert_close(rows, m.double().sum(1).float(), rtol=1e-4, atol=1e-3),
         shape=f"{size}x{size}")
    case("sum(dim=-1) warp shuffles", lambda: b.launch_sum_rows_warp(rows, m), lambda: torch.sum(m, 1, out=rows),
         lambda: torch.testing.assert_close(rows, m.double().sum(1).float(), rtol=1e-4, atol=1e-3))
    e = b.wrap_torch(m, device if on_gpu else "emu")
    cols = torch.empty(size, device=device)
    case("sum(dim=0) (a transposing copy, then rows)", lambda: e.sum(0), lambda: torch.sum(m, 0, out=cols),
         lambda: torch.testing.assert_close(e.sum(0).to_torch(), m.sum(0), rtol=1e-4, atol=1e-3))

    soft = torch.empty_like(m)
    case("softmax", lambda: b.launch_softmax(soft, m), lambda: torch.softmax(m, 1),
         lambda: torch.testing.assert_close(soft, torch.softmax(m, 1), rtol=1e-5, atol=1e-6), shape=f"{size}x{size}")

    a, bm = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
    c = torch.empty(size, size, device=device)
    flops = 2 * size**3
    reference = (a.double() @ bm.double()).float()
    bound = size * torch.finfo().eps * (a.abs() @ bm.abs()).max().item()
    for kind, number in (("naive", 1), ("tiled", 2), ("blocked", 3)):
        launch = b.MATMULS[kind]
        case(f"matmul {kind}", lambda launch=launch: launch(c, a, bm), lambda: torch.matmul(a, bm, out=c),
             lambda launch=launch: (launch(c, a, bm), torch.testing.assert_close(c, reference, rtol=0, atol=bound)),
             number=number, shape=f"{size}^3")
    conv_case(case, b, device, on_gpu)
    for r in records:
        if r["case"].startswith("matmul"):
            r["ours_tflops"] = round(flops / r["ours_s"] / 1e12, 3)
            r["torch_tflops"] = round(flops / r["baseline_s"] / 1e12, 3)
    return records


def conv_case(case, b, device: str, on_gpu: bool) -> None:
    """Chapter 07's convolution on the device (its im2col kernel, then chapter 05's matmul per image) against
    torch's F.conv2d, and the im2col launch alone against F.unfold; on the emulator, smaller."""
    import torch
    import torch.nn.functional as F

    try:
        conv = importlib.import_module("picotorch.ch07_conv")
    except ImportError:
        return  # (a reference built before chapter 07)
    n, c, o, side = (64, 16, 32, 28) if on_gpu else (2, 4, 8, 10)
    x, w, bias = torch.randn(n, c, side, side, device=device), torch.randn(o, c, 3, 3, device=device), torch.randn(o, device=device)
    cols = torch.empty(n, c * 9, side * side, device=device)
    shape = f"{n}x{c}x{side}x{side}, 3x3, padding 1"
    case("im2col", lambda: conv.launch_im2col(cols, x, 3, 1, 1, 1), lambda: F.unfold(x, 3, 1, 1, 1),
         lambda: torch.testing.assert_close(cols, F.unfold(x, 3, 1, 1, 1), rtol=0, atol=0), shape=shape)
    where = device if on_gpu else "emu"
    xs, ws, bs = (b.wrap_torch(t, where) for t in (x, w, bias))
    bound = (9 * c + 1) * torch.finfo().eps * F.conv2d(x.abs(), w.abs(), bias.abs(), padding=1).max().item()
    case(f"conv2d {c}->{o} (im2col + matmul per image)", lambda: conv.conv2d(xs, ws, bs, padding=1),
         lambda: F.conv2d(x, w, bias, padding=1),
         lambda: torch.testing.assert_close(conv.conv2d(xs, ws, bs, padding=1).to_torch(),
                                            F.conv2d(x, w, bias, padding=1), rtol=0, atol=bound),
         number=2, shape=shape)
    image = torch.empty_like(x)
    case("col2im", lambda: conv.launch_col2im(image, cols, 3, 1, 1, 1), lambda: F.fold(cols, side, 3, 1, 1, 1),
         lambda: (conv.launch_col2im(image, cols, 3, 1, 1, 1),
                  torch.testing.assert_close(image, F.fold(cols, side, 3, 1, 1, 1))), shape=shape)
    conv_backward_case(case, b, conv, x, w, bias, where, shape)


def conv_backward_case(case, b, conv, x, w, bias, where: str, shape: str) -> None:
    """conv2d's backward on the device (chapter 07's convolution_backward for the CUDA key: col2im, the
    matmuls, im2col, the bias's sum) against torch's autograd on the same tensors."""
    import torch
    import torch.nn.functional as F

    g = torch.randn(F.conv2d(x, w, bias, padding=1).shape, device=x.device)
    leaves = [b.wrap_torch(t, where).requires_grad_() for t in (x, w, bias)]
    out, gs = conv.conv2d(*leaves, padding=1), b.wrap_torch(g, where)
    theirs = [t.detach().requires_grad_() for t in (x, w, bias)]
    out_theirs = F.conv2d(*theirs, padding=1)

    def ours():
        for t in leaves:
            t.grad = None
        out.backward(gs, retain_graph=True)

    def check():
        exact = [t.detach().double().requires_grad_() for t in (x, w, bias)]
        sizes = [t.detach().double().abs().requires_grad_() for t in (x, w, bias)]
        F.conv2d(*exact, padding=1).backward(g.double())
        F.conv2d(*sizes, padding=1).backward(g.double().abs())
        terms = max(w.shape[0] * 9, g.shape[0] * g.shape[2] * g.shape[3]) + 1
        for mine, want, size in zip(leaves, exact, sizes):
            bound = terms * torch.finfo().eps * size.grad.max().item()
            torch.testing.assert_close(mine.grad.to_torch(), want.grad.float(), rtol=0, atol=bound)

    case(f"conv2d {x.shape[1]}->{w.shape[0]} backward (col2im + matmuls, im2col, sum)", ours,
         lambda: torch.autograd.grad(out_theirs, theirs, g, retain_graph=True), check, number=2, shape=shape)
