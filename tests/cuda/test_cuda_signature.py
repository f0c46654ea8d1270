"""Reading a kernel's parameters from its source, and refusing a launch whose
arguments a GPU would misread, with an error that names the parameter and the
fix.  No compiler is needed here: these checks run before anything else."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from course.cuda import Kernel, KernelArgumentError, KernelSourceError, LaunchConfigError, parse_signature
from course.cuda.kernel import validate_launch
from course.cuda.signature import check_args

AXPY = r"""
// __global__ void decoy(int* p)   <- a comment, not a kernel
extern "C" __global__ void __launch_bounds__(256)
axpy(float* __restrict__ y, const float* __restrict__ x, float alpha, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] += alpha * x[i];
}
"""


def test_parameters_of_a_plain_kernel():
    sig = parse_signature(AXPY, "axpy")
    assert [(p.name, p.c_type) for p in sig.params] == [
        ("y", "float*"), ("x", "const float*"), ("alpha", "float"), ("n", "long long")]


def test_parameters_of_a_template_through_its_name_expression():
    src = r"""
    typedef unsigned int index_t;
    template <typename T, int TILE = 16>
    __global__ void tiled(const T* a, T* out, index_t n, T scale) {}
    """
    sig = parse_signature(src, "tiled<double, 32>")
    assert [(p.name, p.c_type) for p in sig.params] == [
        ("a", "const double*"), ("out", "double*"), ("n", "unsigned int"), ("scale", "double")]
    assert parse_signature(src, "tiled<float>").params[3].c_type == "float"
    with pytest.raises(KernelSourceError, match=r"template: name it with its template arguments"):
        parse_signature(src.replace("int TILE = 16", "int TILE"), "tiled<float>")


def test_a_missing_kernel_lists_the_ones_there_are():
    with pytest.raises(KernelSourceError, match=r"no __global__ kernel named `saxpy`.*axpy"):
        parse_signature(AXPY, "saxpy")
    with pytest.raises(KernelSourceError, match="no __global__ kernel named `decoy`"):
        parse_signature(AXPY, "decoy")


def test_reference_parameters_are_refused():
    with pytest.raises(KernelSourceError, match="reference"):
        parse_signature("__global__ void k(float& x) {}", "k")


SIG = parse_signature(AXPY, "axpy")


def args(**change):
    values = {"y": torch.zeros(4), "x": torch.ones(4), "alpha": np.float32(2), "n": np.int64(4)}
    values.update(change)
    return tuple(values.values())


def test_exact_types_pass():
    packed = check_args(SIG, args())
    assert [a.is_pointer for a in packed] == [True, True, False, False]
    assert packed[2].scalar == np.float32(2).tobytes() and packed[3].scalar == np.int64(4).tobytes()


def test_python_float_for_a_float_is_a_clear_error():
    with pytest.raises(KernelArgumentError) as err:
        check_args(SIG, args(alpha=2.0))
    text = str(err.value)
    assert "`float alpha`" in text and "3rd argument of axpy" in text
    assert "64-bit double" in text and "numpy.float32(...)" in text
    assert isinstance(err.value, TypeError)


def test_python_int_and_wrong_numpy_types_are_clear_errors():
    sig = parse_signature("__global__ void k(int n, long long m) {}", "k")
    with pytest.raises(KernelArgumentError, match=r"`int n`.*Python int.*64-bit integer.*numpy\.int32\(\.\.\.\)"):
        check_args(sig, (4, np.int64(1)))
    with pytest.raises(KernelArgumentError, match=r"`long long m`.*numpy\.int32.*numpy\.int64\(\.\.\.\)"):
        check_args(sig, (np.int32(4), np.int32(1)))
    with pytest.raises(KernelArgumentError, match=r"`int n`.*numpy\.float32"):
        check_args(sig, (np.float32(4), np.int64(1)))
    with pytest.raises(KernelArgumentError, match=r"Python bool"):
        check_args(sig, (True, np.int64(1)))


def test_tensor_dtype_must_match_the_pointer():
    with pytest.raises(KernelArgumentError) as err:
        check_args(SIG, args(x=torch.ones(4, dtype=torch.float64)))
    assert "`const float* __restrict__ x`" in str(err.value)
    assert "torch.float32" in str(err.value) and "torch.float64" in str(err.value)
    with pytest.raises(KernelArgumentError, match="needs a torch tensor"):
        check_args(SIG, args(x=np.ones(4, dtype=np.float32)))
    with pytest.raises(KernelArgumentError, match="not a pointer"):
        check_args(SIG, args(alpha=torch.ones(1)))


def test_argument_count_and_devices():
    with pytest.raises(KernelArgumentError, match=r"takes 4 arguments .* passed 3"):
        check_args(SIG, args()[:3])
    with pytest.raises(KernelArgumentError, match="one device"):
        check_args(SIG, args(x=torch.ones(4, device="meta")))


def test_null_pointers_and_vector_alignment():
    sig = parse_signature("__global__ void k(float4* v, const float* bias) {}", "k")
    check_args(sig, (torch.zeros(8), None))
    with pytest.raises(KernelArgumentError, match="16-byte aligned"):
        check_args(sig, (torch.zeros(9)[1:], None))


def test_kernel_objects_check_before_running():
    kernel = Kernel(AXPY, "axpy")
    assert repr(kernel).startswith("<Kernel axpy(float* __restrict__ y")
    with pytest.raises(KernelArgumentError, match="numpy.float32"):
        kernel((1,), (32,), args(alpha=0.5))
    with pytest.raises(KernelSourceError):
        Kernel(AXPY, "nope")


@pytest.mark.parametrize("grid,block,shared,match", [
    ((0,), (32,), 0, "zero blocks"),
    ((1,), (1025,), 0, "at most 1024 threads"),
    ((1,), (32, 32, 2), 0, "at most 1024 threads"),
    ((1,), (1, 1, 65), 0, "per dimension"),
    ((1, 70000), (32,), 0, "larger than a GPU allows"),
    ((1,), (32,), 300_000, "more than a block can have"),
    ((1.5,), (32,), 0, "must hold ints"),
    ((1, 2, 3, 4), (32,), 0, "1 to 3 ints"),
])
def test_launch_sizes_a_gpu_refuses(grid, block, shared, match):
    with pytest.raises(LaunchConfigError, match=match):
        validate_launch(grid, block, shared)


def test_launch_sizes_are_padded_to_three():
    assert validate_launch(4, (16, 8), 0) == ((4, 1, 1), (16, 8, 1), 0)
    assert validate_launch((np.int64(2),), 256, np.int32(128)) == ((2, 1, 1), (256, 1, 1), 128)
