"""Chapter 05's reference backend outside the notebook: the dispatcher, the `emu` device through the CUDA
emulator, every reference kernel compiled for sm_90 with no spills, and — marked gpu, skipped (never passed)
without one — the same kernels on torch.cuda memory against torch.cuda, large tensors included."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from course.cuda import Where, compile_check
from course.cuda.status import emulator_available, gpu_available, recording

needs_emulator = pytest.mark.skipif(not emulator_available(),
                                    reason="no g++ here: the CUDA emulator cannot run (not counted as passed)")
needs_gpu = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(),
                                                 reason="no CUDA GPU with cupy here: not run (not counted as passed)")]


@pytest.fixture(scope="module")
def pt(reference_picotorch):
    return reference_picotorch


@pytest.fixture(scope="module")
def backend(pt):
    return importlib.import_module("picotorch.ch05_backend")


def instantiations(b) -> list:
    """(Kernels object, kernel name, name expressions) of every kernel the reference backend launches."""
    families = [(*pair, family) for family, pairs in b.FAMILY_TYPES.items() for pair in pairs]
    floats = [("float",), ("double",)]
    jobs = [(b.FILL, "fill", [(t,) for t in b.ALL_C_TYPES]), (b.MAP, "map_contiguous", families),
            (b.STRIDED, "map_strided", families), (b.WHERE, "where_strided", floats),
            (b.SUM, "sum_rows_tree", floats), (b.SUM_WARP, "sum_rows_warp", floats),
            (b.MATMUL_NAIVE, "matmul_naive", floats), (b.MATMUL_TILED, "matmul_tiled", floats),
            (b.MATMUL_BLOCKED, "matmul_blocked", floats), (b.SOFTMAX, "softmax_rows", floats)]
    return [(k, name, [f"{name}<{', '.join(t)}>" for t in types]) for k, name, types in jobs]


KERNEL_NAMES = ["fill", "map_contiguous", "map_strided", "where_strided", "sum_rows_tree", "sum_rows_warp",
                "matmul_naive", "matmul_tiled", "matmul_blocked", "softmax_rows"]


# ------------------------------------------------------------------ compile checks


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_every_reference_kernel_compiles_for_sm_90_without_spills(backend, name):
    kernels, _, expressions = next(job for job in instantiations(backend) if job[1] == name)
    report = compile_check(kernels.source, expressions, arch="sm_90")
    if not report.ran:
        pytest.skip(f"no GPU compiler (NVRTC or nvcc) here: {report.reason} (not counted as passed)")
    assert report.ok, str(report)
    assert {k.name for k in report.kernels} == set(expressions), str(report)
    spilled = [str(k) for k in report.kernels if k.spills or k.stack_bytes]
    assert not spilled, "reference kernels that spill registers or use a stack frame on sm_90:\n" + "\n".join(spilled)


def test_the_blocked_matmul_keeps_two_blocks_per_sm_in_float32(backend):
    report = compile_check(backend.MATMUL_BLOCKED.source, ["matmul_blocked<float>"], arch="sm_90")
    if not report.ran:
        pytest.skip(f"no GPU compiler here: {report.reason} (not counted as passed)")
    assert report.kernel("matmul_blocked<float>").registers <= 128  # 65536 registers / (2 blocks x 256 threads)


# ------------------------------------------------------------------ the dispatcher, on the CPU


def test_cpu_operations_go_through_the_dispatcher_unchanged(pt, backend):
    x = torch.tensor([[1.0, -2.0, 3.0], [0.5, 4.0, -1.5]])
    ours = pt.from_torch(x.clone()).requires_grad_()
    out = ((ours * 2 + ours[0]).relu() @ ours.T).sum(1).mean()
    theirs = x.clone().requires_grad_()
    want = ((theirs * 2 + theirs[0]).relu() @ theirs.T).sum(1).mean()
    torch.testing.assert_close(out.to_torch(), want.detach())
    out.backward()
    want.backward()
    torch.testing.assert_close(ours.grad.to_torch(), theirs.grad)
    assert ours.device == backend.CPU and str(ours.device) == "cpu" and ours.device == "cpu"
    # One dispatcher: chapter 05's kernels are rows of chapter 01's table, under the CUDA key.
    cuda, cpu = pt.DispatchKey.CUDA.priority, pt.DispatchKey.CPU.priority
    assert cpu in pt.OPS["add"].kernels and cuda in pt.OPS["add"].kernels and cuda in pt.OPS["matmul"].kernels
    assert not hasattr(backend, "KERNEL_TABLE") and backend.dispatch is pt.ch01_tensor.dispatch


def test_an_op_without_a_kernel_on_a_device_says_so(pt, backend):
    if not emulator_available():
        pytest.skip("no g++ here: the CUDA emulator cannot run")
    x = pt.from_torch(torch.randn(3)).to("emu")
    with pytest.raises(NotImplementedError, match=r"'max'.*'CUDA'"):
        x.max()
    with pytest.raises(RuntimeError, match="same device"):
        x + pt.from_torch(torch.ones(3))
    # a CPU scalar (a 0-dim CPU tensor) beside a device tensor is read as a number, as in torch
    y = x * pt.from_torch(torch.tensor(2.0, dtype=torch.float64))
    assert y.device == "emu" and y.dtype is pt.float32
    torch.testing.assert_close(y.to_torch(), x.to_torch() * 2)


def test_numpy_of_a_device_tensor_is_torchs_type_error(pt):
    x = pt.from_torch(torch.randn(3)).to("emu")
    with pytest.raises(TypeError, match=r"can't convert emu device type tensor to numpy"):
        x.numpy()
    assert x.device.type == "emu" and not x.is_cuda and x.to_torch().device.type == "cpu"


@pytest.mark.skipif(gpu_available(), reason="a GPU is here: cuda is a real device")
def test_without_a_gpu_there_is_no_cuda_device_and_the_error_says_what_to_use(pt):
    x = pt.from_torch(torch.randn(3))
    with pytest.raises(RuntimeError, match="emu"):
        x.to("cuda")
    with pytest.raises(RuntimeError, match="no device 'cuda'"):
        x.cuda()


# ------------------------------------------------------------------ the emu device: the emulator


OPS = ["add", "sub", "mul", "div", "maximum", "gt", "eq", "exp", "tanh", "relu", "sigmoid", "neg"]


@needs_emulator
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(op=st.sampled_from(OPS), rows=st.integers(0, 5), cols=st.integers(1, 6), transposed=st.booleans(),
       broadcast=st.booleans(), dtype=st.sampled_from([torch.float32, torch.float64]), seed=st.integers(0, 2**31))
def test_elementwise_on_emu_matches_torch(pt, op, rows, cols, transposed, broadcast, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(rows, cols, generator=g, dtype=dtype)
    b = torch.randn(cols if broadcast else rows, *(() if broadcast else (cols,)), generator=g, dtype=dtype)
    if transposed:
        a = a.T.contiguous().T
    unary = op in ("exp", "tanh", "relu", "sigmoid", "neg")
    ea, eb = pt.from_torch(a).to("emu"), pt.from_torch(b.contiguous()).to("emu")
    with recording() as log:
        got = getattr(ea, op)() if unary else getattr(ea, op)(eb) if op == "maximum" else \
            getattr(ea, f"__{ {'div': 'truediv'}.get(op, op) }__")(eb)
    want = getattr(torch, op)(a) if unary else getattr(torch, op)(a, b)
    assert got.device.type == "emu" and got.dtype.name == str(want.dtype).replace("torch.", "")
    torch.testing.assert_close(got.to_torch(), want)
    assert all(r.where is Where.EMULATOR for r in log) and (log or a.numel() == 0)


@needs_emulator
@pytest.mark.parametrize("kind", ["tree", "warp"])
def test_sum_and_mean_on_emu_match_torch(pt, backend, kind):
    backend.use_kernels(sum=kind)
    try:
        x = torch.randn(3, 5, 300)
        e = pt.from_torch(x).to("emu")
        for dim, keepdim in [(None, False), (2, False), (0, True), ((0, 2), False), (-2, True)]:
            got = e.sum(dim, keepdim=keepdim) if dim is not None else e.sum()
            want = x.sum(dim, keepdim=keepdim) if dim is not None else x.sum()
            torch.testing.assert_close(got.to_torch(), want, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(e.mean(1).to_torch(), x.mean(1), rtol=1e-5, atol=1e-5)
    finally:
        backend.use_kernels(sum="tree")


@needs_emulator
@pytest.mark.parametrize("kind", ["naive", "tiled", "blocked"])
def test_matmul_on_emu_matches_torch(pt, backend, kind):
    backend.use_kernels(matmul=kind)
    try:
        a, b = torch.randn(2, 37, 19, dtype=torch.float64), torch.randn(19, 41, dtype=torch.float64)
        got = pt.from_torch(a).to("emu") @ pt.from_torch(b).to("emu").T.contiguous().T
        torch.testing.assert_close(got.to_torch(), a @ b)
        v = torch.randn(19, dtype=torch.float64)
        torch.testing.assert_close((pt.from_torch(a[0]).to("emu") @ pt.from_torch(v).to("emu")).to_torch(), a[0] @ v)
    finally:
        backend.use_kernels(matmul="tiled")


@needs_emulator
def test_softmax_on_emu_matches_torch_forward_and_backward(pt, backend):
    x = torch.randn(5, 3, 40) * 20
    for dim, log in [(-1, False), (1, True), (0, False)]:
        leaf = pt.from_torch(x.clone()).to("emu").requires_grad_()
        theirs = x.clone().requires_grad_()
        out = (pt.log_softmax if log else pt.softmax)(leaf, dim)  # chapter 04's operators, CUDA kernels
        want = (torch.log_softmax if log else torch.softmax)(theirs, dim)
        torch.testing.assert_close(out.to_torch(), want.detach(), rtol=1e-5, atol=1e-5)
        g = torch.randn(x.shape)
        out.backward(pt.from_torch(g).to("emu"))
        want.backward(g)
        torch.testing.assert_close(leaf.grad.to_torch(), theirs.grad, rtol=1e-4, atol=1e-5)


def _train_both(pt, backend, sizes: tuple[int, int, int], draw, batch: int, steps: int, device: str):
    """(our MLP, its losses, torch's losses, the launch log): picotorch's MLP of `sizes` trained on `device`
    by chapter 04's SGD and cross_entropy, and torch's twin from the same weights, by the same plain SGD at lr 0.5."""
    torch.manual_seed(0)
    n_in, hidden, classes = sizes
    theirs = torch.nn.Sequential(torch.nn.Linear(n_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, classes))
    ours = pt.Sequential(pt.Linear(n_in, hidden), pt.ReLU(), pt.Linear(hidden, classes))
    weights = dict(theirs.named_parameters())
    with pt.no_grad():
        for name, p in ours.named_parameters():
            p.copy_(weights[name].detach())
    x, y = draw(batch, n_in), torch.randint(0, classes, (batch,))
    with recording() as log:
        ours.to(device)
        xs, ys = pt.from_torch(x).to(device), pt.from_torch(y).to(device)
        optimizer, losses = pt.SGD(ours.parameters(), lr=0.5), []
        for _ in range(steps):
            optimizer.zero_grad()
            loss = pt.cross_entropy(ours(xs), ys)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    # torch stays on the CPU for the emulator, whose device it does not have
    on = "cuda" if device == "cuda" else "cpu"
    theirs.to(on)
    x, y = x.to(on), y.to(on)
    want = []
    for _ in range(steps):
        theirs.zero_grad()
        loss = torch.nn.functional.cross_entropy(theirs(x), y)
        loss.backward()
        with torch.no_grad():
            for p in theirs.parameters():
                p -= 0.5 * p.grad
        want.append(loss.item())
    return ours, losses, want, log


@needs_emulator
def test_an_mlp_trains_on_emu_as_in_torch(pt, backend):
    ours, losses, want, log = _train_both(pt, backend, (8, 6, 3), torch.randn, 16, 3, "emu")
    np.testing.assert_allclose(losses, want, rtol=1e-4, atol=1e-5)
    assert log and {r.where for r in log} == {Where.EMULATOR}
    assert all(p.device.type == "emu" for p in ours.parameters())


# ------------------------------------------------------------------ on a GPU, against torch.cuda


def _poisoned(shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU with cupy here: not run (not counted as passed)")
class TestOnTheGpu:
    def test_a_cuda_tensor_lives_in_torchs_caching_allocator(self, pt, backend):
        before = torch.cuda.memory_allocated()
        x = pt.from_torch(torch.randn(1024, 1024)).to("cuda")
        assert x.is_cuda and str(x.device) == f"cuda:{torch.cuda.current_device()}"
        assert isinstance(x._storage, backend.DeviceStorage) and x._storage.owner.is_cuda
        assert torch.cuda.memory_allocated() >= before + 4 * 1024 * 1024
        back = x.to("cpu")
        torch.testing.assert_close(back.to_torch(), x.to_torch().cpu())

    @pytest.mark.parametrize("op", ["add", "mul", "div", "maximum", "gt", "exp", "sigmoid", "tanh"])
    def test_elementwise_kernels_match_torch_cuda(self, backend, op):
        torch.manual_seed(1)
        for shape, layout in [((1000,), lambda t: t), ((33, 65), lambda t: t.T), ((40, 30), lambda t: t[:, ::2])]:
            a, b = layout(torch.randn(shape, device="cuda")), layout(torch.randn(shape, device="cuda")) + 3
            unary = op in ("exp", "sigmoid", "tanh")
            want = getattr(torch, op)(a) if unary else getattr(torch, op)(a, b)
            out = _poisoned(want.shape, want.dtype) if want.dtype.is_floating_point else \
                torch.zeros(want.shape, dtype=want.dtype, device="cuda")
            launch = backend.launch_map if a.is_contiguous() else backend.launch_map_strided
            launch(op, out, a) if unary else launch(op, out, a, b)
            torch.testing.assert_close(out, want)

    @pytest.mark.parametrize("launch", ["launch_sum_rows", "launch_sum_rows_warp"])
    def test_row_sums_match_torch_cuda(self, backend, launch):
        x = torch.randn(300, 5000, device="cuda", dtype=torch.float64)
        out = _poisoned((300,), torch.float64)
        getattr(backend, launch)(out, x)
        torch.testing.assert_close(out, x.sum(1))

    @pytest.mark.parametrize("kind", ["naive", "tiled", "blocked"])
    def test_matmul_kernels_match_torch_cuda_with_tf32_off(self, backend, kind):
        torch.backends.cuda.matmul.allow_tf32 = False
        for (M, K, N) in [(513, 257, 129), (128, 128, 128), (1, 1000, 3)]:
            a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
            c = _poisoned((M, N))
            backend.MATMULS[kind](c, a, b.T.contiguous().T)
            bound = (K * torch.finfo().eps * (a.abs() @ b.abs())).max().item()
            torch.testing.assert_close(c, a @ b, rtol=0, atol=bound)

    def test_softmax_matches_torch_cuda(self, backend):
        x = torch.randn(257, 4099, device="cuda") * 30
        for log in (False, True):
            out = _poisoned(x.shape)
            backend.launch_softmax(out, x, log)
            torch.testing.assert_close(out, torch.log_softmax(x, 1) if log else torch.softmax(x, 1),
                                       rtol=1e-5, atol=1e-5)

    def test_more_elements_than_a_32_bit_index_reaches(self, backend):
        free = torch.cuda.mem_get_info()[0]
        if free < 20 * 2**30:
            pytest.skip(f"needs 20 GiB of free GPU memory, {free / 2**30:.1f} here (not counted as passed)")
        n = 2**31 + 4096
        flags = torch.zeros(n, dtype=torch.bool, device="cuda")
        backend.launch_fill(flags, True)
        assert bool(flags.all())
        del flags
        a = torch.zeros(n, device="cuda")
        a[-4096:] = 2.0
        out = torch.zeros(n, device="cuda")
        backend.launch_map("neg", out, a)
        assert bool((out[-4096:] == -2.0).all()) and bool((out[:-4096] == 0).all())

    def test_an_mlp_trains_on_the_gpu_as_in_torch(self, pt, backend):
        ours, losses, want, log = _train_both(pt, backend, (64, 32, 10), torch.rand, 256, 10, "cuda")
        np.testing.assert_allclose(losses, want, rtol=1e-4, atol=1e-5)
        assert log and {r.where for r in log} == {Where.GPU}
        assert all(p.is_cuda for p in ours.parameters())


@needs_emulator
def test_the_gpu_benchmark_runs_every_case_in_miniature_on_the_emulator(backend):
    """benchmarks/suites/gpu.py runs only on a GPU; its code paths (launches, checks, records) are
    exercised here on the emulator with tiny sizes, so that a lent GPU's one call measures, not debugs."""
    from benchmarks.suites import gpu

    records = gpu.measure("cpu", size=32, n=1000, backend=backend)
    cases = [r["case"] for r in records]
    assert cases[0] == "add" and "softmax" in cases and {"matmul naive", "matmul tiled", "matmul blocked"} <= set(cases)
    assert all(r["ours_s"] > 0 and r["baseline_s"] > 0 and r["suite"] == "gpu" for r in records)
    assert all("meets" in r for r in records if r["case"] in gpu.TARGETS)


@needs_emulator
def test_in_place_writers_of_chapter_03_work_on_a_device(pt, backend):
    t = pt.from_torch(torch.zeros(2, 3)).to("emu")
    t.copy_(torch.arange(6.0).view(2, 3))
    assert torch.equal(t.to_torch(), torch.arange(6.0).view(2, 3))
    t.copy_(pt.from_torch(torch.ones(3)))                      # from the CPU, broadcast
    assert torch.equal(t.to_torch(), torch.ones(2, 3))
    t.T.copy_(pt.from_torch(torch.full((3, 2), 4.0)).to("emu"))
    assert torch.equal(t.to_torch(), torch.full((2, 3), 4.0))
    t.zero_()
    assert torch.equal(t.to_torch(), torch.zeros(2, 3))
    t.fill_(2.5)
    t.copy_(np.full((2, 3), 7.0))
    assert torch.equal(t.to_torch(), torch.full((2, 3), 7.0))
    torch.manual_seed(3)
    t.uniform_(-1, 1)
    torch.manual_seed(3)
    assert torch.equal(t.to_torch(), torch.empty(2, 3).uniform_(-1, 1))
    assert t.to(backend.Device("cpu")).device == "cpu" and t.cpu().device.type == "cpu"
    cpu = pt.from_torch(torch.zeros(2, 3))
    cpu.copy_(t)                                               # from the device to the CPU
    assert torch.equal(cpu.to_torch(), t.to_torch())
    model = pt.Sequential(pt.Linear(3, 2))
    state = model.state_dict()
    model.to("emu")
    model.load_state_dict(state)
    assert all(p.device.type == "emu" for p in model.parameters())
    assert torch.equal(model[0].weight.to_torch(), state["0.weight"].to_torch())
