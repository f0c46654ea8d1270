"""The assembled reference picotorch (chapters 01 and 02) against torch.autograd, on random graphs that mix
every operation of both chapters — the integration the chapter's graded exercises test one group at a time.

Random inputs come from course.inputs: a failure names its seed (COURSE_SEED=... replays it)."""
from __future__ import annotations

import gc
import math
import sys
import weakref

import pytest
import torch

from course import compare, inputs


@pytest.fixture(scope="module")
def pt(reference_picotorch):
    return reference_picotorch


def layout_copy(t: torch.Tensor) -> torch.Tensor:
    n = t.untyped_storage().nbytes() // t.element_size()
    return t.detach().as_strided((n,), (1,), 0).clone().as_strided(t.shape, t.stride(), t.storage_offset())


# --- a random program over every operation: each step is validated on torch values as it is drawn --------
UNARY = {"neg": lambda a: -a, "exp": lambda a: a.exp(), "log": lambda a: a.log(), "sqrt": lambda a: a.sqrt(),
         "tanh": lambda a: a.tanh(), "sigmoid": lambda a: a.sigmoid(), "relu": lambda a: a.relu(),
         "abs": lambda a: a.abs(), "* 1.5": lambda a: a * 1.5, "2 - a": lambda a: 2 - a, "a / 3": lambda a: a / 3,
         "a ** 2": lambda a: a ** 2, "0.5 ** a": lambda a: 0.5 ** a}
BINARY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
          "**": lambda a, b: a ** b, "maximum": lambda a, b: a.maximum(b), "@": lambda a, b: a @ b}


def random_reduction(t):
    n = t.dim()
    kind = inputs.randint(0, 4)
    dim = inputs.randint(-n, n - 1) if n else 0
    keepdim = inputs.randint(0, 1) == 1
    if kind == 0:
        return "sum()", lambda a: a.sum()
    if kind == 1:
        return f"sum({dim}, keepdim={keepdim})", lambda a: a.sum(dim, keepdim=keepdim)
    if kind == 2:
        return f"mean({dim}, keepdim={keepdim})", lambda a: a.mean(dim, keepdim=keepdim)
    if kind == 3:
        return "max()", lambda a: a.max()
    return f"max({dim}, keepdim={keepdim}).values", lambda a: a.max(dim, keepdim=keepdim).values


def random_view(t):
    n, shape = t.dim(), tuple(t.shape)
    kind = inputs.randint(0, 8)
    dim = inputs.randint(-n, n - 1) if n else 0
    if kind == 0 and n:
        other = inputs.randint(-n, n - 1)
        return f"transpose({dim}, {other})", lambda a: a.transpose(dim, other)
    if kind == 1:
        perm = list(range(n))
        for i in range(n - 1, 0, -1):
            j = inputs.randint(0, i)
            perm[i], perm[j] = perm[j], perm[i]
        return f"permute{tuple(perm)}", lambda a: a.permute(*perm)
    if kind == 2:
        return "reshape(-1)", lambda a: a.reshape(-1)
    if kind == 3:
        d = inputs.randint(-n - 1, n)
        return f"unsqueeze({d})", lambda a: a.unsqueeze(d)
    if kind == 4:
        sizes = tuple(2 if s == 1 else s for s in shape)
        return f"expand{(3,) + sizes}", lambda a: a.expand(3, *sizes)
    if kind == 5 and n:
        i = inputs.randint(0, shape[0] - 1) if shape[0] else 0
        key = (slice(None, None, 2), Ellipsis) if inputs.randint(0, 1) or not shape[0] else (i,)
        return f"[{key}]", lambda a: a[key]
    if kind == 6 and n and shape[-1]:
        return "narrow(-1, 0, 1)", lambda a: a.narrow(-1, 0, 1)
    if kind == 7:
        return "squeeze()", lambda a: a.squeeze()
    if n == 2:
        return "T.contiguous()", lambda a: a.T.contiguous()
    if n > 2:
        return "mT.contiguous()", lambda a: a.mT.contiguous()
    return "clone()", lambda a: a.clone()


def tame(v: torch.Tensor) -> bool:
    return bool(torch.isfinite(v).all()) and (v.numel() == 0 or float(v.abs().max()) < 1e3)


def random_program(leaves: list[torch.Tensor], n_steps: int):
    """[(text, f, operand indices)], drawn so that torch accepts each step and its values stay tame."""
    values, steps = list(leaves), []
    names = [chr(97 + i) for i in range(len(leaves))]
    attempts = 0
    while len(steps) < n_steps and attempts < 20 * n_steps:
        attempts += 1
        family = inputs.choice(["unary", "binary", "binary", "reduction", "view"])
        near = lambda: inputs.randint(max(0, len(values) - 3), len(values) - 1)
        i = near() if inputs.randint(0, 2) else inputs.randint(0, len(values) - 1)
        if family == "binary":
            j = near() if inputs.randint(0, 1) else inputs.randint(0, len(values) - 1)
            op = inputs.choice(list(BINARY))
            text, f, picks = f"({names[i]} {op} {names[j]})", BINARY[op], (i, j)
        elif family == "unary":
            op = inputs.choice(list(UNARY))
            text, f, picks = f"{op}({names[i]})", UNARY[op], (i,)
        else:
            call, f = (random_reduction if family == "reduction" else random_view)(values[i])
            text, picks = f"{names[i]}.{call}", (i,)
        try:
            with torch.no_grad():
                value = f(*[values[k] for k in picks])
        except Exception:
            continue
        if not isinstance(value, torch.Tensor) or not tame(value):
            continue
        values.append(value)
        names.append(text)
        steps.append((text, f, picks))
    return steps, names[-1]


def run(steps, leaves):
    values = list(leaves)
    for _, f, picks in steps:
        values.append(f(*[values[k] for k in picks]))
    return values[-1]


def check_program(pt, torch_leaves, steps, text, rtol=None, atol=None):
    ours = [pt.from_torch(layout_copy(t)).requires_grad_() for t in torch_leaves]
    theirs = [layout_copy(t).requires_grad_() for t in torch_leaves]
    out_theirs = run(steps, theirs)
    out = run(steps, ours)
    what = f"{text} where " + ", ".join(f"{chr(97 + i)}: {tuple(t.shape)} stride {t.stride()}"
                                         for i, t in enumerate(torch_leaves))
    compare.assert_matches(out, out_theirs.detach(), what, rtol=rtol, atol=atol)
    if not out_theirs.requires_grad:
        return
    g = inputs.noncontiguous(inputs.randn(out_theirs.shape, dtype=out_theirs.dtype))
    out.backward(pt.from_torch(layout_copy(g)))
    out_theirs.backward(g)
    for i, (o, t) in enumerate(zip(ours, theirs)):
        if t.grad is None:
            assert o.grad is None, f"{what}: {chr(97 + i)}.grad should be None"
        else:
            compare.assert_matches(o.grad, t.grad, f"{what}: {chr(97 + i)}.grad", rtol=rtol, atol=atol)


@pytest.mark.parametrize("trial", range(60))
def test_random_programs_over_every_operation(pt, trial):
    dtype = torch.float64 if trial % 3 else torch.float32
    full = inputs.shape(ndim=(1, 3), size=(1, 4))
    leaves = []
    for _ in range(inputs.randint(1, 3)):
        shape = tuple(1 if inputs.randint(0, 3) == 0 else s for s in full[inputs.randint(0, len(full) - 1):])
        leaves.append(inputs.noncontiguous(inputs.randn(shape, dtype=dtype)))
    steps, text = random_program(leaves, inputs.randint(2, 8))
    tolerance = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    check_program(pt, leaves, steps, text, **tolerance)


def test_as_strided_backward_matches_torch_even_for_overlapping_views(pt):
    x = torch.randn(12, dtype=torch.float64)
    for size, stride, offset in [((3, 3), (1, 1), 0), ((2, 4), (0, 2), 1), ((4,), (3,), 2), ((2, 2), (4, 1), None)]:
        for base in (x, x.reshape(3, 4)):
            f = (lambda a: a.as_strided(size, stride)) if offset is None else (
                lambda a: a.as_strided(size, stride, offset))
            check_program(pt, [base], [("as_strided", f, (0,))], f"a.as_strided({size}, {stride}, {offset})")
    y = torch.randn(3, dtype=torch.float64)
    check_program(pt, [y], [("expand", lambda a: a.expand(4, 3), (0,)),
                            ("as_strided", lambda a: a.as_strided((2, 3), (0, 1)), (1,))],
                  "a.expand(4, 3).as_strided((2, 3), (0, 1)) (an input whose elements overlap)")


SAVES = {  # does a second backward through this expression fail? (it does when a node saved tensors)
    "a * b": lambda a, b: (a * b).sum(), "a * 2": lambda a, b: (a * 2).sum(), "a + b": lambda a, b: (a + b).sum(),
    "a - 1": lambda a, b: (a - 1).sum(), "-a": lambda a, b: (-a).sum(), "a.exp()": lambda a, b: a.exp().sum(),
    "a.tanh()": lambda a, b: a.tanh().sum(), "a / b": lambda a, b: (a / b).sum(), "a.mean()": lambda a, b: a.mean(),
    "a.max()": lambda a, b: a.max(), "a.max(0)": lambda a, b: a.max(0).values.sum(),
    "a.T": lambda a, b: a.T.sum(), "a[1:]": lambda a, b: a[1:].sum(), "a.reshape(-1)": lambda a, b: a.reshape(-1).sum(),
    "a @ b.T": lambda a, b: (a @ b.T).sum(), "a.expand": lambda a, b: a.expand(2, 2, 3).sum(),
    "a.relu()": lambda a, b: a.relu().sum(), "a.maximum(b)": lambda a, b: a.maximum(b).sum(),
}


@pytest.mark.parametrize("name", list(SAVES))
def test_a_second_backward_fails_exactly_where_torchs_does(pt, name):
    f = SAVES[name]
    a, b = torch.randn(2, 3) + 3, torch.randn(2, 3) + 3
    out_theirs = f(a.clone().requires_grad_(), b.clone().requires_grad_())
    out = f(pt.from_torch(a.clone()).requires_grad_(), pt.from_torch(b.clone()).requires_grad_())
    out_theirs.backward()
    out.backward()
    try:
        out_theirs.backward()
    except RuntimeError:
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            out.backward()
    else:
        out.backward()


def test_grad_mode_in_place_updates_and_repr(pt):
    w = pt.from_torch(torch.ones(3)).requires_grad_()
    with pytest.raises(RuntimeError, match="in-place"):
        w += 1
    with pytest.raises(RuntimeError, match="in-place"):
        w[0] = 2.0
    loss = (w * w).sum()
    assert "grad_fn=<SumBackward>" in repr(loss) and "requires_grad=True" in repr(w)
    loss.backward()
    with pt.no_grad():  # an optimizer step, as chapter 04 will write it
        w -= w.grad * 0.1
        w[0] = 5.0
    compare.assert_matches(w, torch.tensor([5.0, 0.8, 0.8]), "w after an update inside no_grad()")
    assert w.is_leaf and w.requires_grad
    assert (w * 2).requires_grad and not (w > 0).requires_grad and not w.argmax().requires_grad
    values, indices = w.max(0)
    assert values.requires_grad and not indices.requires_grad

    @pt.no_grad()
    def evaluate(x):
        return x * 3

    assert not evaluate(w).requires_grad and pt.is_grad_enabled()


def test_a_deep_chain_of_real_operations_and_its_release(pt):
    x = pt.from_torch(torch.randn(4, dtype=torch.float64)).requires_grad_()
    h = x
    for i in range(30_000):
        h = h * 1.00001 if i % 2 else h + 0.5
        if i == 100:
            saved = weakref.ref(h.untyped_storage())  # the next step, a multiplication, saves this h
    gc.collect()
    assert saved() is not None, "the graph must hold what its nodes saved until backward"
    limit = sys.getrecursionlimit()
    h.sum().backward()
    assert sys.getrecursionlimit() == limit
    compare.assert_matches(x.grad, torch.full((4,), 1.00001 ** 15_000, dtype=torch.float64), "x.grad after 30 000 steps")
    gc.collect()
    assert saved() is None, "backward() did not release the tensors the graph saved"
    del h
    gc.collect()


def test_gradcheck_of_the_reference_on_every_group(pt):
    x = pt.from_torch(torch.randn(3, 4, dtype=torch.float64)).requires_grad_()
    y = pt.from_torch(torch.randn(4, dtype=torch.float64).abs() + 0.5).requires_grad_()
    for f in [lambda a, b: (a * b).tanh() / b, lambda a, b: (a @ b).exp(), lambda a, b: a.T[1:].sigmoid() ** 2,
              lambda a, b: a.max(1).values * b[:3], lambda a, b: (a.relu() + 1).log().mean(0) * b.sqrt()]:
        assert pt.gradcheck(f, [x, y])
    assert x.grad is None and y.grad is None


def test_mixed_dtypes_get_gradients_of_their_own_dtype(pt):
    a = torch.randn(2, 3)
    b = torch.randn(3, dtype=torch.float64)
    ours_a, ours_b = pt.from_torch(a.clone()).requires_grad_(), pt.from_torch(b.clone()).requires_grad_()
    ta, tb = a.clone().requires_grad_(), b.clone().requires_grad_()
    (ours_a * ours_b).sum().backward()
    (ta * tb).sum().backward()
    compare.assert_matches(ours_a.grad, ta.grad, "a.grad for float32 a * float64 b")
    compare.assert_matches(ours_b.grad, tb.grad, "b.grad for float32 a * float64 b")
    assert math.isclose(float(ours_b.grad.to_torch().sum()), float(tb.grad.sum()), rel_tol=1e-6)
