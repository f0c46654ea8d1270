"""The GPU path: the same kernel source compiled by cupy (NVRTC) and launched
on the memory of torch.cuda tensors, on torch's current stream.

Kept small on purpose: everything a launch checks (argument types, launch
sizes) is checked before it gets here, the same way for GPU and emulator.
Works with cupy 13 and 14 and torch 2.4 and later.
"""
from __future__ import annotations

import re
import time

import numpy as np
import torch

from course.cuda.gpu_compiler import parse_diagnostics
from course.cuda.errors import KernelCompileError
from course.cuda.portability import nvrtc_lacks
from course.cuda.report import LaunchReport
from course.cuda.signature import PackedArg
from course.cuda.status import Where

DEFAULT_MAX_DYNAMIC_SHARED = 48 * 1024   # above this a kernel must opt in


def _cupy():
    import cupy
    return cupy


def torch_stream(device_index: int):
    """torch's current stream on the device, as a cupy stream."""
    cp = _cupy()
    stream = torch.cuda.current_stream(device_index)
    if hasattr(cp.cuda.Stream, "from_external") and hasattr(stream, "__cuda_stream__"):
        return cp.cuda.Stream.from_external(stream)
    return cp.cuda.ExternalStream(stream.cuda_stream, device_index)


class GpuModule:
    """One cupy.RawModule per device, compiled on first use."""

    def __init__(self, source: str, name_expressions, options=()):
        self.source = source
        self.name_expressions = list(name_expressions)
        self.options = tuple(options)
        self._modules: dict[int, object] = {}
        self._functions: dict[tuple[int, str], object] = {}

    def _module(self, device_index: int):
        mod = self._modules.get(device_index)
        if mod is None:
            lacking = nvrtc_lacks(self.source)   # NVRTC would say "undefined"; this says what to write
            if lacking:
                raise KernelCompileError("NVRTC through cupy", lacking, "")
            cp = _cupy()
            with cp.cuda.Device(device_index):
                mod = cp.RawModule(code=self.source, options=self.options,
                                   name_expressions=self.name_expressions)
                try:
                    mod.compile()
                except cp.cuda.compiler.CompileException as e:
                    log = str(e)
                    # cupy names the file after a temporary path; the lines are the student's own.
                    diags = parse_diagnostics(re.sub(r"^[^\n(]*?\.cu\(", "kernel.cu(", log, flags=re.M), self.source)
                    raise KernelCompileError("NVRTC through cupy", diags, log) from None
            self._modules[device_index] = mod
        return mod

    def function(self, name: str, device_index: int):
        """The compiled CuPy function `name` on GPU `device_index` (compiled and loaded once per device)."""
        key = (device_index, name)
        fn = self._functions.get(key)
        if fn is None:
            fn = self._module(device_index).get_function(name)
            self._functions[key] = fn
        return fn

    def launch(self, name: str, grid, block, packed: list[PackedArg], shared_mem: int,
               device: torch.device) -> LaunchReport:
        """Launch kernel `name` on the GPU on torch's current stream, tensors passed as their device pointers; the
        LaunchReport."""
        cp = _cupy()
        index = device.index if device.index is not None else torch.cuda.current_device()
        args = []
        for a in packed:
            if a.is_pointer:
                # A pointer is its 8 bytes; the memory stays torch's.
                args.append(np.uint64(a.tensor.data_ptr() if a.tensor is not None else 0))
            else:
                args.append(a.value)
        start = time.perf_counter()
        with cp.cuda.Device(index):
            fn = self.function(name, index)
            if shared_mem > DEFAULT_MAX_DYNAMIC_SHARED:
                fn.max_dynamic_shared_size_bytes = shared_mem
            with torch_stream(index):
                fn(tuple(grid), tuple(block), tuple(args), shared_mem=shared_mem)
        return LaunchReport(kernel=name, where=Where.GPU, grid=tuple(grid), block=tuple(block),
                            shared_mem=shared_mem, seconds=time.perf_counter() - start)
