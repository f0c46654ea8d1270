"""The assembled reference picotorch's modules (chapter 03) against torch.nn, outside notebooks: random
architectures built in both worlds from one description, torch's weights loaded into ours, then outputs,
every gradient, buffers after training steps, and a few optimizer steps done by hand, compared; the state
dict round-trips through torch. Hypothesis draws the architectures."""
from __future__ import annotations

import types

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def pt(reference_picotorch):
    return reference_picotorch


@pytest.fixture(scope="module")
def nn(reference_picotorch):
    return types.SimpleNamespace(**{k: getattr(reference_picotorch, k) for k in dir(reference_picotorch)
                                    if not k.startswith("_")})


def build(nn, layers):
    """A Sequential from descriptions: ("linear", in, out, bias), ("act", name), ("layernorm", n),
    ("batchnorm", n, momentum), ("dropout", p)."""
    modules = []
    for layer in layers:
        kind = layer[0]
        if kind == "linear":
            modules.append(nn.Linear(layer[1], layer[2], bias=layer[3]))
        elif kind == "act":
            modules.append(getattr(nn, layer[1])())
        elif kind == "layernorm":
            modules.append(nn.LayerNorm(layer[1]))
        elif kind == "batchnorm":
            modules.append(nn.BatchNorm1d(layer[1], momentum=layer[2]))
        elif kind == "dropout":
            modules.append(nn.Dropout(layer[1]))
    return nn.Sequential(*modules)


@st.composite
def architectures(draw):
    width = draw(st.integers(1, 6))
    layers, first = [], width
    for _ in range(draw(st.integers(1, 4))):
        out = draw(st.integers(1, 6))
        layers.append(("linear", width, out, draw(st.booleans())))
        width = out
        extra = draw(st.sampled_from(["none", "act", "layernorm", "batchnorm", "dropout"]))
        if extra == "act":
            layers.append(("act", draw(st.sampled_from(["ReLU", "Tanh", "Sigmoid"]))))
        elif extra == "layernorm":
            layers.append(("layernorm", width))
        elif extra == "batchnorm":
            layers.append(("batchnorm", width, draw(st.sampled_from([0.1, 0.5, None]))))
        elif extra == "dropout":
            layers.append(("dropout", draw(st.sampled_from([0.0, 0.3]))))
    return first, layers


def pair(pt, nn, layers, seed):
    torch.manual_seed(seed)
    theirs = build(torch.nn, layers).double()
    ours = build(nn, layers).double()
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def close(a, b, what):
    a = a.to_torch() if not isinstance(a, torch.Tensor) else a
    torch.testing.assert_close(a, b.detach(), msg=lambda m: f"{what}: {m}")


@settings(SETTINGS, max_examples=40)
@given(arch=architectures(), batch=st.integers(2, 5), seed=st.integers(0, 2**31), steps=st.integers(1, 3))
def test_random_models_train_like_torch(pt, nn, arch, batch, seed, steps):
    """Forward, backward and hand-made SGD steps, in train and eval mode: outputs, every gradient, every
    parameter and buffer as torch's."""
    width, layers = arch
    ours, theirs = pair(pt, nn, layers, seed)
    assert repr(ours).replace(", bias=True, track", ", track") == repr(theirs).replace(", bias=True, track", ", track")
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        train = step < steps - 1 or steps == 1
        ours.train(train)
        theirs.train(train)
        x = torch.randn(batch, width, generator=g, dtype=torch.float64)
        torch.manual_seed(seed + step)
        out_theirs = theirs(x)
        torch.manual_seed(seed + step)
        out = ours(pt.from_torch(x.clone()))
        close(out, out_theirs, f"output at step {step}")
        grad = torch.randn(out_theirs.shape, generator=g, dtype=torch.float64)
        out_theirs.backward(grad)
        out.backward(pt.from_torch(grad.clone()))
        mine = dict(ours.named_parameters())
        for name, p in theirs.named_parameters():
            close(mine[name].grad, p.grad, f"{name}.grad at step {step}")
        with torch.no_grad():
            for p in theirs.parameters():
                p -= 0.1 * p.grad
        with pt.no_grad():
            for p in ours.parameters():
                p -= 0.1 * p.grad
        ours.zero_grad()
        theirs.zero_grad()
        assert all(p.grad is None for p in ours.parameters())
        state = ours.state_dict()
        for key, value in theirs.state_dict().items():
            close(state[key], value, f"state_dict()[{key!r}] after step {step}")


@settings(SETTINGS, max_examples=25)
@given(arch=architectures(), seed=st.integers(0, 2**31))
def test_the_state_dict_round_trips_through_torch(pt, nn, arch, seed):
    width, layers = arch
    ours, theirs = pair(pt, nn, layers, seed)
    back = build(torch.nn, layers).double()
    back.load_state_dict(pt.torch_state_dict(ours))
    ours.eval()
    back.eval()
    x = torch.randn(3, width, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    close(ours(pt.from_torch(x.clone())), back(x), "a model loaded back into torch")
    assert list(ours.state_dict()) == list(back.state_dict())


def test_same_seed_same_initial_weights(pt, nn):
    for make in [lambda m: m.Linear(7, 3), lambda m: m.Embedding(9, 4, padding_idx=2),
                 lambda m: m.Sequential(m.Linear(4, 8), m.ReLU(), m.Linear(8, 2, bias=False))]:
        torch.manual_seed(11)
        theirs = make(torch.nn)
        torch.manual_seed(11)
        ours = make(nn)
        for key, value in theirs.state_dict().items():
            assert torch.equal(ours.state_dict()[key].to_torch(), value), key


def test_to_keeps_the_parameter_objects_and_converts_gradients(pt, nn):
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    params = list(model.parameters())
    model(pt.from_torch(torch.randn(5, 3))).sum().backward()
    assert model.double() is model
    assert [id(p) for p in model.parameters()] == [id(p) for p in params]
    assert all(p.dtype is pt.float64 and p.grad.dtype is pt.float64 for p in model.parameters())
    assert model[1].num_batches_tracked.dtype is pt.int64 and model[1].running_mean.dtype is pt.float64
    model.to(torch.float32)
    assert all(p.dtype is pt.float32 for p in model.parameters())
    with pytest.raises(TypeError):
        model.to(torch.int64)
    with pytest.raises(RuntimeError, match="picotorch has no device"):
        model.to("tpu")  # not "cuda": chapter 05 adds it, and on a GPU machine it is there
    assert model.to("cpu") is model


def test_linear_is_fast_enough(pt, nn):
    """A 64-128-10 MLP, forward and backward at batch 64, within a few times torch's (chapter 04 trains it)."""
    import time

    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    ours = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(64, 64)
    xo = pt.from_torch(x.clone())

    def per_step(model, inp, n=60):
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(n):
                model.zero_grad()
                model(inp).sum().backward()
            best = min(best, (time.perf_counter() - start) / n)
        return best

    ratio = per_step(ours, xo) / per_step(theirs, x)
    assert ratio < 8, f"a forward and backward of the MLP takes {ratio:.1f}x torch's time"
