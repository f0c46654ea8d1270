"""The assembled reference picotorch (chapter 01's solution), tested beyond the notebook.

The notebook's hidden tests check each exercise on its own; here hypothesis drives
longer chains that mix every view operation, writes through them, and tables of
dtypes, against real torch. The chain machinery (Op, random_op, same_chain...) is
the course's test kit (`course.testing`) that the notebook's tests use too, so the two test suites speak
the same language.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from course import compare
from course.testing import Draws, chain_text, layout, random_layout, random_op, random_view_shape, same_random_chain

SETTINGS = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))
VIEW_OPS = ("view", "reshape", "transpose", "permute", "T", "mT", "unsqueeze", "squeeze", "flatten", "narrow",
            "as_strided", "expand", "broadcast_to", "getitem", "contiguous", "clone")


@pytest.fixture(scope="module")
def pt(reference_picotorch):
    return reference_picotorch


def drawer(data) -> Draws:
    """The kit's draw, fed by hypothesis (which then shrinks a failure in its own way)."""
    return Draws(source=lambda low, high: data.draw(st.integers(low, high)))


@settings(SETTINGS, max_examples=400)
@given(data=st.data())
def test_long_chains_of_every_view_match_torch(pt, data):
    draw = drawer(data)
    x = random_layout(draw, max_dims=4)
    same_random_chain(draw, x, VIEW_OPS, draw(1, 8), ours=pt.from_torch)


@settings(SETTINGS, max_examples=200)
@given(data=st.data())
def test_a_write_through_a_chain_of_views_reaches_the_base_where_torch_writes(pt, data):
    draw = drawer(data)
    x = random_layout(draw, dtype=torch.float64, max_dims=3)
    names = ("transpose", "permute", "unsqueeze", "squeeze", "narrow", "getitem", "view", "expand")
    ops, t = [], x
    for _ in range(draw(1, 5)):
        op = random_op(draw, t, names, errors=False)
        try:
            t = op(t)
        except Exception:
            break
        ops.append(op)
    theirs_base, theirs_view = _twin(x)
    mine_base, mine_view = _twin(x)
    for op in ops:
        theirs_view = op(theirs_view)
    ours = pt.from_torch(mine_view)
    for op in ops:
        ours = op(ours)
    value = float(draw(-5, 5))
    try:
        theirs_view.add_(value)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            ours.add_(value)
        return
    ours.add_(value)
    compare.assert_matches(mine_base, theirs_base, f"the storage after x{chain_text(ops, '')}.add_({value})")


def _twin(a):
    n = a.untyped_storage().nbytes() // a.element_size()
    flat = a.as_strided((n,), (1,), 0).clone()
    return flat, flat.as_strided(a.shape, a.stride(), a.storage_offset())


@settings(SETTINGS, max_examples=300)
@given(data=st.data())
def test_view_strides_agree_with_torch_computeStride(pt, data):
    draw = drawer(data)
    x = random_layout(draw)
    shape = [s for s in random_view_shape(draw, tuple(x.shape)) if s != -1]
    if math.prod(shape) != x.numel():
        return
    try:
        want = x.view(shape).stride()
    except RuntimeError:
        want = None
    got = pt.view_strides(tuple(x.shape), x.stride(), tuple(shape))
    assert (tuple(got) if got is not None else None) == want, f"view_strides({tuple(x.shape)}, {x.stride()}, {shape})"


@settings(SETTINGS, max_examples=300)
@given(data=st.data())
def test_clone_keeps_torch_layout(pt, data):
    x = random_layout(drawer(data))
    ours = pt.from_torch(x).clone()
    assert ours.stride() == x.clone().stride(), f"clone of {layout(x)}"
    compare.assert_matches(ours, x, f"clone of {layout(x)}")


DTYPES = [torch.bool, torch.int64, torch.float32, torch.float64]
OPERATORS = {"+": lambda a, b: a + b, "*": lambda a, b: a * b, "/": lambda a, b: a / b, "<": lambda a, b: a < b,
             "==": lambda a, b: a == b, "maximum": lambda a, b: a.maximum(b) if not isinstance(a, torch.Tensor)
             else torch.maximum(a, b)}


@pytest.mark.parametrize("op", list(OPERATORS))
def test_every_dtype_pair_and_operand_kind_promotes_as_torch(pt, op):
    f = OPERATORS[op]
    numbers = {torch.bool: True, torch.int64: 3, torch.float32: 2.5}
    for da in DTYPES:
        for db in DTYPES:
            for kind in ("tensor", "0-dim", "number"):
                a = torch.tensor([1, 0, 2]).to(da)
                if kind == "number":
                    if db not in numbers or op == "maximum":
                        continue
                    b = pb = numbers[db]
                else:
                    b = torch.tensor([2, 1, 0] if kind == "tensor" else 2).to(db)
                    pb = pt.from_torch(b)
                want = f(a, b)
                got = f(pt.from_torch(a), pb)
                compare.assert_matches(got, want, f"a {op} b, a: {da}, b: {kind} {db}")


def test_from_torch_shares_memory_and_to_torch_round_trips(pt):
    base = torch.arange(24.).reshape(2, 3, 4)
    view = base.transpose(0, 2)[1:, ::2]
    ours = pt.from_torch(view)
    assert (ours.shape, ours.stride(), ours.storage_offset()) == (tuple(view.shape), view.stride(), view.storage_offset())
    back = ours.to_torch()
    assert back.data_ptr() == view.data_ptr() and back.stride() == view.stride()
    ours[0, 0, 0] = -1.0
    assert view[0, 0, 0].item() == -1.0 and base[0, 0, 1].item() == -1.0
    with pytest.raises(TypeError):
        pt.from_torch(torch.ones(2, dtype=torch.int32))


def test_the_reference_module_needs_only_numpy_and_torch(pt):
    code = open(pt.ch01_tensor.__file__).read()
    imports = {line.split()[1].split(".")[0] for line in code.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"functools", "math", "threading", "warnings", "collections", "numpy", "torch"}, imports
    assert "BEGIN SOLUTION" not in code and "course" not in imports


def test_factories_and_tensor_api(pt):
    t = pt.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert t.dtype is pt.float32 and t.shape == (2, 2) and t.stride() == (2, 1)
    assert pt.tensor([1, 2]).dtype is pt.int64 and pt.tensor([True]).dtype is pt.bool_
    assert pt.zeros(2, 3).tolist() == [[0.0] * 3] * 2 and pt.arange(4).tolist() == [0, 1, 2, 3]
    assert (t @ t).tolist() == [[7.0, 10.0], [15.0, 22.0]]
    assert t.size(-1) == 2 and t.stride(0) == 2 and t.ndim == 2 and len(t) == 2 and t.element_size() == 4
    assert "tensor(" in repr(t) and bool(pt.tensor([3.0]))
    assert t.untyped_storage().nbytes() == 16 and t.device == "cpu"
    assert (t.T.contiguous().stride(), t.T.clone().stride()) == ((2, 1), (1, 2))


@pytest.mark.parametrize("convert", [float, int, bool])
def test_a_one_element_tensor_converts_to_a_python_number_as_torchs(pt, convert):
    """float(t), int(t), bool(t) of one element (torch's `float(self.num_batches_tracked)` in BatchNorm), and torch's
    error type for more elements."""
    for value in (2.75, -1.0, 0.0):
        for shape in ((), (1,), (1, 1)):
            theirs = torch.full(shape, value)
            assert convert(pt.from_torch(theirs.clone())) == convert(theirs), (convert, value, shape)
    assert float(pt.from_torch(torch.tensor(7, dtype=torch.int64))) == 7.0
    with pytest.raises(Exception) as theirs:
        convert(torch.ones(2))
    with pytest.raises(theirs.type):
        convert(pt.from_torch(torch.ones(2)))
