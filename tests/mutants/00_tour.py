"""Typical wrong answers to chapter 00, one dict per exercise: {what is wrong: the cell's code}, or
{what is wrong: {"code": ..., "shows": what the failure message must say}} (tests/notebook_runs.Mutant).

tests/chapters/test_chapters.py puts each one in place of the exercise's solution cell,
runs the source notebook (hidden tests included) and expects that exercise to fail.
"""

_TRAIN = '''
def train_one_epoch(model, loader, loss_fn, optimizer):
    model.train()
    total, count = 0.0, 0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        {body}
        total += loss.item() * len(x)
        count += len(x)
    return total / count


def evaluate(model, loader, loss_fn):
    {eval_mode}
    total, correct, count = 0.0, 0, 0
    with {grad_context}:
        for x, y in loader:
            out = model(x)
            total += loss_fn(out, y).item() * len(x)
            correct += (out.argmax(dim=1) == y).sum().item()
            count += len(x)
    return total / count, correct / count
'''
_RIGHT = dict(body="optimizer.zero_grad(); loss.backward(); optimizer.step()",
              eval_mode="model.eval()", grad_context="torch.no_grad()")


def _train(**wrong):
    return _TRAIN.format(**{**_RIGHT, **wrong})


_TO_DEVICE = '''
def pick_device():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def to_device(batch, device):
{body}
'''

MUTANTS = {
    "ex_matmul_shape": {
        "keeps the 1 added to a 1-D operand": '''
def matmul_shape(a, b):
    a, b = tuple(a), tuple(b)
    if not a or not b:
        raise ValueError("need a dimension")
    left = (1,) + a if len(a) == 1 else a
    right = b + (1,) if len(b) == 1 else b
    if left[-1] != right[-2]:
        raise ValueError("inner")
    return tuple(torch.broadcast_shapes(left[:-2], right[:-2])) + (left[-2], right[-1])
''',
        "batch dimensions must be equal (no broadcasting)": '''
def matmul_shape(a, b):
    a, b = tuple(a), tuple(b)
    if not a or not b:
        raise ValueError("need a dimension")
    left = (1,) + a if len(a) == 1 else a
    right = b + (1,) if len(b) == 1 else b
    if left[-1] != right[-2]:
        raise ValueError("inner")
    batch = left[:-2] if len(left) >= len(right) else right[:-2]
    shape = batch + (left[-2], right[-1])
    if len(a) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b) == 1:
        shape = shape[:-1]
    return shape
''',
        "no check for a 0-dim operand (an IndexError instead of ValueError)": '''
def matmul_shape(a, b):
    a, b = tuple(a), tuple(b)
    left = (1,) + a if len(a) == 1 else a
    right = b + (1,) if len(b) == 1 else b
    if left[-1] != right[-2]:
        raise ValueError("inner")
    try:
        batch = tuple(torch.broadcast_shapes(left[:-2], right[:-2]))
    except RuntimeError as e:
        raise ValueError(str(e)) from None
    shape = batch + (left[-2], right[-1])
    if len(a) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b) == 1:
        shape = shape[:-1]
    return shape
''',
    },
    "ex_gradient": {
        "works on the caller's tensor, so gradients accumulate": '''
def gradient_of(f, x):
    x.requires_grad_(True)
    f(x).backward()
    return x.grad
''',
        "sums a non-scalar output instead of raising": '''
def gradient_of(f, x):
    x = x.detach().clone().requires_grad_(True)
    f(x).sum().backward()
    return x.grad
''',
        "marks the caller's tensor as requiring grad (autograd.grad on x itself)": '''
def gradient_of(f, x):
    x.requires_grad_(True)
    (grad,) = torch.autograd.grad(f(x), x)
    return grad
''',
    },
    "ex_module": {
        "layers kept in a plain list, invisible to parameters()": '''
class TwoLayerNet(nn.Module):
    def __init__(self, n_in, n_hidden, n_out):
        super().__init__()
        self.layers = [nn.Linear(n_in, n_hidden), nn.Linear(n_hidden, n_out)]

    def forward(self, x):
        return self.layers[1](torch.relu(self.layers[0](x)))
''',
        "no activation between the layers": '''
class TwoLayerNet(nn.Module):
    def __init__(self, n_in, n_hidden, n_out):
        super().__init__()
        self.fc1 = nn.Linear(n_in, n_hidden)
        self.fc2 = nn.Linear(n_hidden, n_out)

    def forward(self, x):
        return self.fc2(self.fc1(x))
''',
    },
    "ex_count_parameters": {
        "counts the top level only": '''
def count_parameters(module):
    return sum(p.numel() for p in module._parameters.values() if p is not None)
''',
        "counts a shared parameter twice": '''
def count_parameters(module):
    own = sum(p.numel() for p in module._parameters.values() if p is not None)
    return own + sum(count_parameters(m) for m in module._modules.values())
''',
        "calls parameters() instead of walking": '''
def count_parameters(module):
    return sum(p.numel() for p in module.parameters())
''',
    },
    "ex_training_loop": {
        # The message names the cause, not only the average loss it changes (issue 17, feedback order).
        "no zero_grad": {"code": _train(body="loss.backward(); optimizer.step()"),
                         "shows": "Call optimizer.zero_grad() in every batch"},
        "step before backward": {"code": _train(body="optimizer.zero_grad(); optimizer.step(); loss.backward()"),
                                 "shows": "optimizer.step() ran before loss.backward()"},
        "zero_grad after backward": {"code": _train(body="loss.backward(); optimizer.zero_grad(); optimizer.step()"),
                                     "shows": "call optimizer.zero_grad() before backward, not after"},
        "evaluate records a graph": _train(grad_context="torch.enable_grad()"),
        "evaluate leaves the model in training mode": _train(eval_mode="pass"),
        "no model.train() in train_one_epoch": _train().replace("    model.train()\n", ""),
        "averages batch losses, not samples": _train().replace("total += loss.item() * len(x)", "total += loss.item()")
                                                      .replace("count += len(x)\n    return", "count += 1\n    return"),
    },
    "ex_dynamic_forward": {
        "always runs max_steps": '''
class RepeatUntilSmall(nn.Module):
    def __init__(self, dim, tol=1.0, max_steps=8):
        super().__init__()
        self.block = nn.Linear(dim, dim)
        self.tol, self.max_steps = tol, max_steps

    def forward(self, x):
        h = x
        for _ in range(self.max_steps):
            h = 0.5 * h + 0.1 * torch.tanh(self.block(h))
        return h, self.max_steps
''',
        "detaches inside the loop": '''
class RepeatUntilSmall(nn.Module):
    def __init__(self, dim, tol=1.0, max_steps=8):
        super().__init__()
        self.block = nn.Linear(dim, dim)
        self.tol, self.max_steps = tol, max_steps

    def forward(self, x):
        h, steps = x, 0
        while h.norm() > self.tol and steps < self.max_steps:
            h = 0.5 * h.detach() + 0.1 * torch.tanh(self.block(h.detach()))
            steps += 1
        return h, steps
''',
        "ignores max_steps": '''
class RepeatUntilSmall(nn.Module):
    def __init__(self, dim, tol=1.0, max_steps=8):
        super().__init__()
        self.block = nn.Linear(dim, dim)
        self.tol, self.max_steps = tol, max_steps

    def forward(self, x):
        h, steps = x, 0
        while h.norm() > self.tol:
            h = 0.5 * h + 0.1 * torch.tanh(self.block(h))
            steps += 1
        return h, steps
''',
        "counts the steps in a tensor, so steps is not a Python int": '''
class RepeatUntilSmall(nn.Module):
    def __init__(self, dim, tol=1.0, max_steps=8):
        super().__init__()
        self.block = nn.Linear(dim, dim)
        self.tol, self.max_steps = tol, max_steps

    def forward(self, x):
        h, steps = x, torch.tensor(0)
        while h.norm() > self.tol and steps < self.max_steps:
            h = 0.5 * h + 0.1 * torch.tanh(self.block(h))
            steps += 1
        return h, steps
''',
        "applies the block before testing the condition": '''
class RepeatUntilSmall(nn.Module):
    def __init__(self, dim, tol=1.0, max_steps=8):
        super().__init__()
        self.block = nn.Linear(dim, dim)
        self.tol, self.max_steps = tol, max_steps

    def forward(self, x):
        h, steps = x, 0
        while True:
            h = 0.5 * h + 0.1 * torch.tanh(self.block(h))
            steps += 1
            if h.norm() <= self.tol or steps >= self.max_steps:
                return h, steps
''',
    },
    "ex_to_device": {
        "tuples come back as lists": _TO_DEVICE.format(body='''
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [to_device(v, device) for v in batch]
    return batch'''),
        "moves only the top level": _TO_DEVICE.format(body='''
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(v.to(device) if isinstance(v, torch.Tensor) else v for v in batch)
    return batch'''),
        "fills the caller's containers in place instead of building new ones": _TO_DEVICE.format(body='''
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        for k, v in batch.items():
            batch[k] = to_device(v, device)
        return batch
    if isinstance(batch, list):
        batch[:] = [to_device(v, device) for v in batch]
        return batch
    if isinstance(batch, tuple):
        return tuple(to_device(v, device) for v in batch)
    return batch'''),
        "drops values that are not tensors": _TO_DEVICE.format(body='''
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items() if not isinstance(v, (str, int, float))}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch'''),
    },
}
