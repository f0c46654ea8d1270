"""course.testing, the kit every chapter's tests are made of: it must find wrong results, shrink a failing
input to a simple one, replay it from its seed, and accept right results written any way."""
from __future__ import annotations

import pytest
import torch

from course import inputs
from course.testing import (Draws, Op, broadcast_family, chain_text, describe, fail, for_random_inputs, leaf_copy,
                            matmul_operand, matmul_shapes, random_layout, random_op, same_call, same_layout_copy,
                            same_outcome, with_fixed_inputs)


def test_a_failing_input_is_shrunk_to_the_simplest_one_that_fails():
    inputs.reseed(3)
    seen = []

    def test(draw):
        shape = draw.shape(ndim=(0, 4), size=(1, 9))
        seen.append(shape)
        assert sum(shape) < 7, f"shape {shape}"

    with pytest.raises(AssertionError) as e:
        for_random_inputs(test, examples=200)
    # the simplest failing shapes have one dim of 7, or fewer dims summing to 7 at the smallest
    shrunk = eval(str(e.value).split("shape ")[1].split("\n")[0])
    assert sum(shrunk) == 7, f"not shrunk to the boundary: {shrunk} (saw {len(seen)} inputs)"
    assert "COURSE_SEED=3" in str(e.value), "a bare assert's failure says how to replay it"


def test_a_seed_replays_the_same_inputs():
    def drawn(seed):
        inputs.reseed(seed)
        out = []
        for_random_inputs(lambda d: out.append((d.shape(), d.randn(2).tolist(), d.choice("abc"))), examples=5)
        return out

    assert drawn(11) == drawn(11)
    assert drawn(11) != drawn(12)


def test_a_check_with_fixed_inputs_runs_except_when_a_seed_sweep_repeats_and_may_not_draw():
    runs = []
    assert with_fixed_inputs(lambda n: runs.append(n) or n, 3) == 3 and runs == [3]
    inputs.set_repeating(True)
    try:
        assert inputs.repeating()
        assert with_fixed_inputs(runs.append, 4) is None and runs == [3], "a repeated sweep runs it again"
    finally:
        inputs.set_repeating(False)
    assert not inputs.repeating()
    with_fixed_inputs(runs.append, 5)
    assert runs == [3, 5]
    with pytest.raises(RuntimeError, match="drew random inputs"):
        with_fixed_inputs(lambda: inputs.randint(0, 9))
    with pytest.raises(AssertionError, match="a fixed check: wrong"):  # its own failure comes through as it is
        with_fixed_inputs(lambda: fail("a fixed check", "wrong"))


def test_early_examples_are_small_and_later_ones_reach_the_whole_range():
    inputs.reseed(5)
    sizes = []
    for_random_inputs(lambda d: sizes.append(d(0, 1000)), examples=30)
    assert max(sizes[:5]) <= 500 and max(sizes) > 500


def test_other_exceptions_are_not_shrunk_but_raised_as_they_are():
    calls = []

    def test(draw):
        calls.append(draw(0, 10))
        raise KeyError("not a failed check")

    with pytest.raises(KeyError):
        for_random_inputs(test, examples=10)
    assert len(calls) == 1


def test_a_replay_clamps_recorded_choices_into_range_and_runs_out_at_the_low_end():
    d = Draws(replay=[50, -3])
    assert [d(0, 9), d(0, 9), d(2, 4)] == [9, 0, 2]


def test_layouts_are_what_they_say():
    inputs.reseed(1)
    kinds = set()

    def test(draw):
        t = random_layout(draw, values="positions")
        copy = same_layout_copy(t)
        assert copy.stride() == t.stride() and copy.storage_offset() == t.storage_offset()
        assert torch.equal(copy, t) and (t.numel() == 0 or copy.data_ptr() != t.data_ptr())
        kinds.add("non-contiguous" if not t.is_contiguous() else "contiguous")
        kinds.add("size 0" if t.numel() == 0 else "not empty")
        shapes = broadcast_family(draw, 3)
        torch.broadcast_shapes(*shapes)  # raises if they do not broadcast
        x = draw.noncontiguous(draw.randn(draw.shape()))
        leaf = leaf_copy(x)
        assert leaf.is_leaf and leaf.requires_grad and leaf.stride() == x.stride() and torch.equal(leaf, x)

    for_random_inputs(test, examples=200)
    assert kinds == {"non-contiguous", "contiguous", "size 0", "not empty"}


def test_matmul_shapes_multiply_and_operands_come_in_every_layout():
    inputs.reseed(4)
    seen = set()

    def test(draw):
        a, b = matmul_shapes(draw)
        seen.update({f"{len(a)}-dim a", f"{len(b)}-dim b"})
        x, y = matmul_operand(draw, a, torch.float64), matmul_operand(draw, b, torch.int64)
        assert (tuple(x.shape), x.dtype, tuple(y.shape), y.dtype) == (a, torch.float64, b, torch.int64)
        torch.matmul(x, y.double())  # raises if the shapes do not multiply
        if 0 in x.stride() and x.numel():
            seen.add("stride 0")
        elif x.dim() >= 2 and x.stride()[-2:] == (1, x.shape[-2]) and x.shape[-2] > 1 and x.shape[-1] > 1:
            seen.add("column-major")
        elif not x.is_contiguous():
            seen.add("non-contiguous")

    for_random_inputs(test, examples=300)
    assert seen == {f"{n}-dim {side}" for n in range(1, 5) for side in "ab"} | {"stride 0", "column-major",
                                                                                "non-contiguous"}, seen


def test_random_ops_apply_to_torch_and_print_as_their_code():
    inputs.reseed(2)
    errors = []

    def test(draw):
        x = torch.arange(24.0).reshape(2, 3, 4)
        op = random_op(draw, x, ("transpose", "permute", "view", "getitem", "narrow", "expand"))
        try:
            expected = eval(chain_text([op]), {"x": x})
        except (RuntimeError, IndexError, ValueError, TypeError):
            errors.append(op)
            return
        assert torch.equal(op(x), expected), chain_text([op])

    for_random_inputs(test, examples=100)
    assert errors, "now and then an op torch rejects, so that tests check errors too"
    assert chain_text([Op("transpose", 0, 1), Op("getitem", (slice(1, None), slice(None, None, 2)))]) \
        == "x.transpose(0, 1)[1:, ::2]"


def test_describe_names_dtype_shape_and_layout():
    x = torch.zeros(3, 4)
    assert describe(x) == "float32 (3, 4)"
    assert describe(x.T) == "float32 (4, 3) stride (1, 4)"
    assert describe(x[1:]) == "float32 (2, 4) offset 4"
    assert describe(torch.zeros(2, dtype=torch.int64)) == "int64 (2,)"
    assert describe(2.5) == "the number 2.5"


class _Wrapped:
    """A stand-in for a framework's tensor (the compare helpers read it through to_torch())."""

    def __init__(self, t):
        self.t = t

    def to_torch(self):
        return self.t

    shape = property(lambda self: self.t.shape)
    dtype = property(lambda self: self.t.dtype)

    def stride(self):
        return self.t.stride()

    def storage_offset(self):
        return self.t.storage_offset()


def test_same_outcome_rejects_wrong_values_layouts_copies_and_errors():
    x = torch.arange(12.0).reshape(3, 4)
    same_outcome(lambda: _Wrapped(x.T), lambda: x.T, "x.T", layout=True, base=x)
    with pytest.raises(AssertionError, match="values differ|but torch has"):
        same_outcome(lambda: _Wrapped(x.T + 1), lambda: x.T, "x.T")
    with pytest.raises(AssertionError, match=r"stride\(\)"):
        same_outcome(lambda: _Wrapped(x.T.contiguous()), lambda: x.T, "x.T", layout=True)
    with pytest.raises(AssertionError, match="made a copy"):
        same_outcome(lambda: _Wrapped(x.clone()[1]), lambda: x[1], "x[1]", layout=True, base=x)
    with pytest.raises(AssertionError, match="but torch raises RuntimeError"):
        same_outcome(lambda: _Wrapped(x), lambda: x.view(5), "x.view(5)")
    with pytest.raises(AssertionError, match="raised KeyError .* but torch raises RuntimeError"):
        same_outcome(lambda: {}["k"], lambda: x.view(5), "x.view(5)")
    assert same_outcome(lambda: x.reshape(7), lambda: x.view(5), "x.view(5)") is None
    with pytest.raises(NotImplementedError):  # a stub not written yet is not a failed check
        same_outcome(lambda: (_ for _ in ()).throw(NotImplementedError), lambda: x, "x")
    with pytest.raises(AssertionError, match="returned a list"):
        same_outcome(lambda: [1.0], lambda: x, "x")


def test_same_call_checks_aliasing_and_gradients():
    a, b = torch.randn(3, 2).T, torch.randn(2, 3)
    same_call(lambda p, q: (p * q).sum(), [a, b], "(a * b).sum()", ours=lambda t: same_layout_copy(t), grad=True,
              allow_torch=True)
    same_call(lambda p: p.T, [a], "a.T", ours=lambda t: t, layout=True, aliasing=True, allow_torch=True)
    with pytest.raises(AssertionError, match="made a copy"):
        same_call(lambda p: p.T if p is a else p.T.clone(), [a], "a.T", ours=lambda t: t.clone(), aliasing=True,
                  allow_torch=True)

    class Doubled(torch.autograd.Function):  # the right value, twice the right gradient
        @staticmethod
        def forward(ctx, p):
            return p * 1

        @staticmethod
        def backward(ctx, g):
            return 2 * g

    def fn(p):
        return Doubled.apply(p) if getattr(p, "yours", False) else p * 1

    def ours(t):
        copy = same_layout_copy(t)
        copy.yours = True  # marks your side (ids of freed tensors are reused)
        return copy

    with pytest.raises(AssertionError, match=r"the gradient of a \(its .grad\)"):
        same_call(fn, [a], "a * 1", ours=ours, grad=True, allow_torch=True)
    with pytest.raises(AssertionError, match="does not require grad"):
        same_call(lambda p: p.detach() * 1 if getattr(p, "yours", False) else p * 1, [a], "a * 1", ours=ours, grad=True,
                  allow_torch=True)


def test_float32_tolerances_widen_with_the_rounding_a_computation_shows_and_only_with_it():
    from course.compare import default_tolerance
    from course.testing import float32_tolerances
    base_rtol, base_atol = default_tolerance(torch.float32)
    x = torch.tensor([0.25, 1.5, -2.0])
    (plain,) = float32_tolerances(lambda a: a * 2, [x])[:1]
    assert plain["rtol"] == base_rtol and plain["atol"] == pytest.approx(base_atol), "a*2 rounds exactly: no widening"
    assert float32_tolerances(lambda a: a * 2, [x.double()]) == [{}, {}], "float64 keeps the dtype's defaults"

    def deep(a):  # powers of powers: many ulps of rounding in the value and in its gradient
        b = a * a + 0.5
        c = b ** a.maximum(b ** a)
        return ((c * c + 0.5) ** (b ** a) + 0.5) ** 2.0
    a = torch.tensor(0.9)
    value, gradient = float32_tolerances(deep, [a], [True], torch.tensor(1.0))
    assert value["atol"] > base_atol and gradient["atol"] > base_atol, (value, gradient)
    assert float32_tolerances(deep, [a], [True], torch.tensor(1.0)) == [value, gradient], "deterministic"

    # relu at exactly 0 is a kink: neighbours of 0 have another gradient, but each is compared with float64
    # at the same neighbour, so the kink widens nothing (a wrong relu'(0) must still fail)
    zeros = torch.zeros(4)
    _, relu_grad = float32_tolerances(torch.relu, [zeros], [True], torch.ones(4))
    assert relu_grad["atol"] == pytest.approx(base_atol), relu_grad


def test_every_module_of_the_kit_is_watched_by_the_sandbox():
    from pathlib import Path

    from autograder.sandbox.integrity import TESTING_KIT
    import course.testing
    modules = {f"course.testing.{p.stem}" for p in Path(course.testing.__file__).parent.glob("*.py")
               if p.stem != "__init__"}
    assert modules | {"course.testing"} == set(TESTING_KIT), "autograder/sandbox/integrity.py TESTING_KIT"


def test_torch_log_sees_the_aten_operators_torch_runs_and_only_inside():
    from course.testing.dispatch_log import TorchLog, torch_log_of

    x = torch.ones(2, 3)
    out, ops = torch_log_of(lambda a: (a + 1).sum(0), (x,))
    assert ops == ["add", "sum"], f"TorchLog saw {ops} for (x + 1).sum(0); torch runs aten add then sum"
    assert torch.equal(out, torch.full((3,), 4.0)), "torch_log_of returns what the program returns"
    with TorchLog() as log:
        x.mul(2)
    x.neg()  # after the mode has exited: not logged
    assert log.ops == ["mul"], f"only the calls made inside the mode are logged: {log.ops}"


def test_tame_tells_overflowing_graphs_from_usable_ones():
    from course.testing.rounding import tame

    assert tame(lambda a, b: a * b + 1, [torch.randn(3), torch.randn(3)])
    assert not tame(lambda a: a.exp(), [torch.tensor([50.0])]), "e^50 is above the limit"
    assert not tame(lambda a: (a * 1e300) * 1e300, [torch.ones(2)]), "an overflow to inf"
    assert tame(lambda a: a.view(5), [torch.ones(3)]), "an error is left for the test to compare"


def test_model_pair_builds_the_same_model_twice():
    """Chapter 03's ModelPair, both sides torch.nn: every step of a random program agrees with itself, and each
    object of one side has its twin on the other."""
    from course.testing.model_pair import ModelPair, expect_same_object

    class TorchTwice(ModelPair):
        nn = torch.nn
        to_ours = staticmethod(lambda t: t.clone())

    inputs.reseed(5)
    for _ in range(5):
        pair = TorchTwice.random(steps=20)
        assert len(pair.log) >= 10 and len(pair.ours_pool) == len(pair.theirs_pool)
        theirs, ours = dict(pair.theirs.named_parameters()), dict(pair.ours.named_parameters())
        assert list(theirs) == list(ours), pair.where()
        for name, p in theirs.items():
            expect_same_object(ours[name], p, pair, f"parameter {name}")


def _made_at_import(code, where=""):
    """(qualified name, code) of every function the statements of a module or class body make when it is imported:
    functions, lambdas, methods, property getters (a class body's own, recursively); not comprehensions, which run
    once, at import."""
    for const in code.co_consts:
        if not hasattr(const, "co_code") or const.co_name in ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"):
            continue
        if const.co_flags & 0x2:  # CO_NEWLOCALS: a function
            yield f"{where}{const.co_name}", const
        else:  # a class body: what it makes are the class's methods and descriptors
            yield from _made_at_import(const, f"{where}{const.co_name}.")


def test_every_function_of_the_kit_is_trusted_by_the_sandbox():
    """The sandbox counts a frame as the grader's when its code belongs to a function its snapshot found: a
    module's functions, its classes' methods and property getters, and what is nested in them. A kit function
    made at import but kept where the snapshot does not look (a lambda in a module-level table; a property's
    getter, before the snapshot unwrapped properties) runs as a stranger at grading: the tests' draws through it
    are refused (chapter 01's view tests lost every point that way once) and its code is neither guarded nor
    restored. TorchLog.__torch_dispatch__ (called by torch's dispatcher) and ModelPair's properties are checked."""
    import importlib
    from pathlib import Path

    from autograder.sandbox.integrity import TESTING_KIT, Snapshot, _code_objects
    kit = [importlib.import_module(name) for name in TESTING_KIT]
    snap = Snapshot.take(roots=(str(Path(kit[0].__file__).resolve().parent),))
    trusted = {(c.co_filename, c.co_firstlineno, c.co_name) for f in snap.functions for c in _code_objects(f[2])}
    strangers, checked = [], set()
    for path in sorted({Path(m.__file__).resolve() for m in kit}):
        for name, code in _made_at_import(compile(path.read_text(), str(path), "exec")):
            checked.add(name)
            if (str(path), code.co_firstlineno, code.co_name) not in trusted:
                strangers.append(f"{path.name}:{code.co_firstlineno} {name}")
    assert {"TorchLog.__torch_dispatch__", "ModelPair.theirs", "ModelPair.ours"} <= checked, sorted(checked)
    assert not strangers, ("kit code the sandbox would not trust (make it a module function or a method): "
                           + ", ".join(strangers))


def test_kit_code_behind_a_property_or_a_wrapper_rewritten_by_student_code_is_put_back():
    """A property's getter, and the function behind a wrapper (torch wraps TorchLog.__torch_dispatch__ in
    torch._disable_dynamo), are in the snapshot like methods: a new __code__ given to ModelPair.theirs's getter
    (so that a chapter 03 test would compare the student's model with itself) or to TorchLog's dispatch (so that
    torch's log of chapter 05's tests would say what the student's does) is undone and reported by the restore."""
    from pathlib import Path

    import course.testing.dispatch_log as dispatch_log
    import course.testing.model_pair as model_pair
    from autograder.sandbox.integrity import Snapshot, _functions_restorer
    getter = model_pair.ModelPair.theirs.fget
    dispatch = dispatch_log.TorchLog.__dict__["__torch_dispatch__"].__wrapped__
    originals = {getter: getter.__code__, dispatch: dispatch.__code__}
    snap = Snapshot.take(roots=(str(Path(model_pair.__file__).resolve().parent),))
    try:
        getter.__code__ = (lambda self: self.ours_pool[0]).__code__
        dispatch.__code__ = (lambda self, func, types, args=(), kwargs=None: func(*args, **(kwargs or {}))).__code__
        sensitive: list[str] = []
        _functions_restorer(snap)([].append, sensitive)
        assert all(fn.__code__ is code for fn, code in originals.items()), "the code was not put back"
        assert {"course.testing.model_pair.ModelPair.theirs.fget.__code__",
                "course.testing.dispatch_log.TorchLog.__torch_dispatch__.__wrapped__.__code__"} <= set(sensitive), \
            sensitive
    finally:
        for fn, code in originals.items():
            fn.__code__ = code
