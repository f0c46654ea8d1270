"""Correct answers to chapter 03 written differently from the course's solution.

ALTERNATIVES = {what is different: {exercise: the cell's code}}; see tests/chapters/test_alternative_solutions.py.
Cells with given parts are the solution cell with its solved parts rewritten (`_rewrite`).
"""
from __future__ import annotations

from solution_text import rewrite, solution


def _rewrite(exercise: str, *replacements: tuple[str, str]) -> str:
    return rewrite(solution("03_module", exercise), *replacements, what=f"alternative of {exercise}")


_WALK_WITH_A_STACK = _rewrite("ex_walk", ("""        if memo is None:
            memo = set()
        if self not in memo:
            if remove_duplicate:
                memo.add(self)
            yield prefix, self
            for name, module in self._modules.items():
                if module is None:
                    continue
                yield from module.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)""",
                                           """        if memo is None:
            memo = set()
        stack = [(prefix, self)]  # the next module on top: children pushed in reverse come out in order
        while stack:
            path, module = stack.pop()
            if module in memo:
                continue
            if remove_duplicate:
                memo.add(module)
            yield path, module
            below = [(f"{path}.{name}" if path else name, child) for name, child in module._modules.items()
                     if child is not None]
            stack.extend(reversed(below))"""))

_STATE_DICT_WITH_A_STACK = _rewrite("ex_state_dict", ("""        if destination is None:
            destination = OrderedDict()
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if keep_vars else buf.detach()
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        return destination""", """        out = OrderedDict() if destination is None else destination
        stack = [(self, prefix)]
        while stack:
            module, path = stack.pop()
            entries = list(module._parameters.items()) + [(k, b) for k, b in module._buffers.items()
                                                          if k not in module._non_persistent_buffers_set]
            for name, value in entries:
                if value is not None:
                    out[path + name] = value if keep_vars else value.detach()
            stack.extend(reversed([(child, f"{path}{name}.") for name, child in module._modules.items()
                                   if child is not None]))
        return out"""), ("""    return OrderedDict((key, value.to_torch().clone()) for key, value in module.state_dict().items())""",
                      """    copies = OrderedDict()
    for key, value in module.state_dict().items():
        copies[key] = torch.from_numpy(np.array(value.numpy()))  # np.array copies
    return copies"""))

_CALL_REPR_REBUILT = '''
@add_methods(Module)
class Calling:
    def register_forward_pre_hook(self, hook, *, prepend: bool = False) -> RemovableHandle:
        return self._add_hook(self._forward_pre_hooks, hook, prepend)

    def register_forward_hook(self, hook, *, prepend: bool = False) -> RemovableHandle:
        return self._add_hook(self._forward_hooks, hook, prepend)

    def _add_hook(self, hooks, hook, prepend):
        handle = RemovableHandle(hooks)
        before = list(hooks.items())
        if prepend:
            hooks.clear()
            hooks[handle.id] = hook
            hooks.update(before)
        else:
            hooks[handle.id] = hook
        return handle

    def __call__(self, *args, **kwargs):
        for hook in tuple(self._forward_pre_hooks.values()):
            changed = hook(self, args)
            if changed is not None:
                args = changed if isinstance(changed, tuple) else (changed,)
        result = self.forward(*args, **kwargs)
        for hook in tuple(self._forward_hooks.values()):
            changed = hook(self, args, result)
            result = result if changed is None else changed
        return result

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        lines = extra.split("\\n") if extra else []
        for name, module in self._modules.items():
            lines.append(f"({name}): {_addindent(repr(module), 2)}")
        name = type(self).__name__
        if not lines:
            return name + "()"
        if not self._modules and len(lines) == 1:
            return f"{name}({lines[0]})"
        return name + "(\\n" + "".join(f"  {line}\\n" for line in lines) + ")"
'''

_LINEAR_FROM_TENSOR_OPERATIONS = _rewrite("ex_linear", ("""    if x.dtype is not weight.dtype:
        raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got {x.dtype.name} and {weight.dtype.name}")
    if x.dim() == 0 or x.shape[-1] != weight.shape[1]:
        rows = math.prod(x.shape[:-1]) if x.dim() else 1
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{x.shape[-1] if x.dim() else 1} "
                           f"and {weight.shape[1]}x{weight.shape[0]})")
    out = np.matmul(x.numpy(), weight.numpy().T)
    if bias is not None:
        out += bias.numpy()
    return from_numpy(out)""", """    if x.dtype is not weight.dtype:
        raise RuntimeError(f"Linear: the input is {x.dtype.name}, the weight {weight.dtype.name}")
    if x.dim() == 0 or x.shape[-1] != weight.shape[1]:
        raise RuntimeError(f"Linear: an input of shape {tuple(x.shape)} for a weight of shape {tuple(weight.shape)}")
    out = x @ weight.mT  # forward runs with grad mode off: chapter 01's operations, recorded nowhere
    return out + bias if bias is not None else out"""), ("""    g = grad.numpy()
    g2 = g.reshape(-1, g.shape[-1]) if g.ndim else g.reshape(1, 1)
    grad_x = grad_w = grad_b = None
    if output_mask[0]:
        grad_x = from_numpy(np.matmul(g, weight.numpy()))
    if output_mask[1]:
        x2 = x.numpy().reshape(-1, x.shape[-1])
        grad_w = from_numpy(g2.T @ x2)
    if output_mask[2]:
        grad_b = from_numpy(g2.sum(0))
    return grad_x, grad_w, grad_b""", """    out_features, in_features = weight.shape
    rows = math.prod(x.shape[:-1])
    grads = [None, None, None]
    if output_mask[0]:
        grads[0] = grad @ weight
    if output_mask[1]:
        grads[1] = grad.reshape(rows, out_features).mT @ x.reshape(rows, in_features)
    if output_mask[2]:
        grads[2] = grad.reshape(rows, out_features).sum(0)
    return tuple(grads)"""))

_EMBEDDING_BY_ONE_HOT = _rewrite("ex_embedding", ("""    idx = indices.numpy()
    if idx.size and (idx.min() < 0 or idx.max() >= weight.shape[0]):
        raise IndexError("index out of range in self")
    return from_numpy(weight.numpy()[idx])""", """    idx = indices.numpy()
    if not ((idx >= 0) & (idx < weight.shape[0])).all():
        raise IndexError("index out of range in self")
    return from_numpy(np.take(weight.numpy(), idx, axis=0))"""), ("""    dim = grad.shape[-1]
    out = np.zeros((num_weights, dim), grad.dtype.numpy)
    np.add.at(out, indices.numpy().reshape(-1), grad.numpy().reshape(-1, dim))
    if padding_idx is not None:
        out[padding_idx] = 0
    return from_numpy(out)""", """    # one row of a one-hot matrix per place: its transpose times the gradients adds up each row's uses
    one_hot = np.eye(num_weights, dtype=grad.dtype.numpy)[indices.numpy().reshape(-1)]
    if padding_idx is not None:
        one_hot[:, padding_idx] = 0
    return from_numpy(one_hot.T @ grad.numpy().reshape(-1, grad.shape[-1]))"""))

ALTERNATIVES = {
    "walks with an explicit stack, state dicts copied through NumPy": {
        "ex_walk": _WALK_WITH_A_STACK,
        "ex_state_dict": _STATE_DICT_WITH_A_STACK,
    },
    "hooks and repr rebuilt, Linear from chapter 01's operations, its own error messages": {
        "ex_call_repr": _CALL_REPR_REBUILT,
        "ex_linear": _LINEAR_FROM_TENSOR_OPERATIONS,
    },
    "embedding by np.take and a one-hot matrix product": {
        "ex_embedding": _EMBEDDING_BY_ONE_HOT,
    },
}
