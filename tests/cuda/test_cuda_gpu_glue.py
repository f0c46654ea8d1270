"""The GPU path's glue, checked everywhere with a stand-in for cupy and for
torch's CUDA stream: which stream a launch goes to, how tensors and scalars
are handed over, when large shared memory is opted into.  This is no
substitute for test_cuda_gpu.py on a real GPU (it checks what we hand to
cupy, not what cupy does with it); it keeps the glue honest where no GPU is."""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch

from course.cuda import gpu as gpu_path
from course.cuda.signature import check_args, parse_signature

SRC = r"""
template <typename T>
__global__ void scale(T* x, T alpha, long long n) {}
"""


class FakeStream:
    def __init__(self, ptr, device_id=None):
        self.ptr, self.device_id, self.entered = ptr, device_id, False

    def __enter__(self):
        self.entered = True
        FakeCupy.current_stream = self
        return self

    def __exit__(self, *exc):
        FakeCupy.current_stream = None

    @classmethod
    def from_external(cls, obj):
        return cls(obj.__cuda_stream__()[1], "from_external")


class FakeKernel:
    def __init__(self, name):
        self.name, self.calls, self.max_dynamic_shared_size_bytes = name, [], 0

    def __call__(self, grid, block, args, *, shared_mem=0):
        self.calls.append((grid, block, args, shared_mem, FakeCupy.current_stream))


class FakeCupy(types.ModuleType):
    current_stream = None
    modules: list = []

    def __init__(self):
        super().__init__("cupy")
        outer = self

        class RawModule:
            def __init__(self, code, options=(), name_expressions=None):
                self.code, self.options, self.names, self.kernels = code, options, name_expressions, {}
                outer.modules.append(self)

            def compile(self):
                pass

            def get_function(self, name):
                assert name in self.names, "cupy needs the name expression to look a kernel up"
                return self.kernels.setdefault(name, FakeKernel(name))

        class Device:
            def __init__(self, index):
                self.index = index

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        self.RawModule = RawModule
        self.cuda = types.SimpleNamespace(Device=Device, Stream=FakeStream, ExternalStream=FakeStream,
                                          compiler=types.SimpleNamespace(CompileException=RuntimeError))


class TorchStream:
    cuda_stream = 0xBEEF


class TorchStreamWithProtocol(TorchStream):
    def __cuda_stream__(self):
        return (0, self.cuda_stream)


@pytest.fixture
def fake_cupy(monkeypatch):
    fake = FakeCupy()
    FakeCupy.modules = []
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake


@pytest.mark.parametrize("torch_stream", [TorchStream, TorchStreamWithProtocol])
def test_launch_hands_cupy_pointers_exact_scalars_and_torchs_stream(fake_cupy, monkeypatch, torch_stream):
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: torch_stream())
    sig = parse_signature(SRC, "scale<float>")
    x = torch.zeros(8)
    packed = check_args(sig, (x, np.float32(2.5), np.int64(8)))
    module = gpu_path.GpuModule(SRC, ["scale<float>"], ("-DX=1",))
    report = module.launch("scale<float>", (2, 1, 1), (4, 1, 1), packed, 0, torch.device("cuda", 0))

    raw, = FakeCupy.modules
    assert raw.names == ["scale<float>"] and raw.options == ("-DX=1",)
    (grid, block, args, shared_mem, stream), = raw.kernels["scale<float>"].calls
    assert (grid, block, shared_mem) == ((2, 1, 1), (4, 1, 1), 0)
    assert type(args[0]) is np.uint64 and int(args[0]) == x.data_ptr()      # the pointer's 8 bytes
    assert type(args[1]) is np.float32 and type(args[2]) is np.int64         # exactly the C types
    assert stream.ptr == 0xBEEF                                              # torch's current stream
    assert stream.device_id == ("from_external" if torch_stream is TorchStreamWithProtocol else 0)
    assert report.where.value == "gpu" and report.counts is None


def test_large_dynamic_shared_memory_is_opted_into(fake_cupy, monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: TorchStream())
    sig = parse_signature(SRC, "scale<float>")
    packed = check_args(sig, (torch.zeros(1), np.float32(1), np.int64(1)))
    module = gpu_path.GpuModule(SRC, ["scale<float>"])
    module.launch("scale<float>", (1, 1, 1), (32, 1, 1), packed, 40_000, torch.device("cuda", 0))
    kernel = FakeCupy.modules[0].kernels["scale<float>"]
    assert kernel.max_dynamic_shared_size_bytes == 0                       # 48 KiB and under: the default
    module.launch("scale<float>", (1, 1, 1), (32, 1, 1), packed, 100_000, torch.device("cuda", 0))
    assert kernel.max_dynamic_shared_size_bytes == 100_000
    assert len(FakeCupy.modules) == 1                                       # compiled once per device
