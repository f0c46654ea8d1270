"""Correct answers to chapter 02 written differently from the course's solution.

ALTERNATIVES = {what is different: {exercise: the cell's code}}; see tests/chapters/test_alternative_solutions.py.
Cells with given parts (forwards, class skeletons) are the solution cell with its solved parts rewritten
(`_rewrite`), so that the given parts stay as the student sees them.
"""
from __future__ import annotations

from solution_text import rewrite, solution


def _rewrite(exercise: str, *replacements: tuple[str, str]) -> str:
    return rewrite(solution("02_autograd", exercise), *replacements, what=f"alternative of {exercise}")


_KAHN = '''
from collections import deque


@add_methods(Tensor)
class Backward:
    def backward(self, gradient: Tensor = None, retain_graph: bool = False) -> None:
        """Compute the gradient of this tensor with respect to every leaf, and add it to the leaves' .grad."""
        if not self.requires_grad:
            raise RuntimeError("backward() of a tensor that does not require grad")
        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError(f"backward() without a gradient needs one element, not {self.numel()}")
            gradient = ones(self.shape, dtype=self.dtype)
        if tuple(gradient.shape) != tuple(self.shape):
            raise RuntimeError(f"the gradient has shape {tuple(gradient.shape)}, the tensor {tuple(self.shape)}")
        root = gradient_edge(self)[0]
        # Kahn's algorithm: the in-degree of every node (edges that point at it), found breadth first
        indegree, queue = {root: 0}, deque([root])
        while queue:
            for child, _ in queue.popleft().next_functions:
                if child is not None:
                    if child not in indegree:
                        indegree[child] = 0
                        queue.append(child)
                    indegree[child] += 1
        pending = {root: cast(gradient, root.metadata[1])}
        ready = deque([root])
        with no_grad():
            while ready:
                node = ready.popleft()
                grad = pending.pop(node, None)
                edges = node.next_functions
                if grad is None:
                    grads = [None] * len(edges)
                else:
                    grads = list(node(grad))
                if not retain_graph:
                    node.release_variables()
                if len(grads) != len(edges):
                    raise RuntimeError(f"{node.name()} gave {len(grads)} gradients for {len(edges)} inputs")
                for index, ((child, _), g) in enumerate(zip(edges, grads)):
                    if child is None:
                        continue
                    if g is not None:
                        if tuple(g.shape) != tuple(child.metadata[0]):
                            raise RuntimeError(f"{node.name()} gave input {index} a gradient of shape {tuple(g.shape)}, "
                                               f"not {tuple(child.metadata[0])}")
                        g = cast(g, child.metadata[1])
                        pending[child] = g if child not in pending else pending[child] + g
                    indegree[child] -= 1
                    if not indegree[child]:
                        ready.append(child)
'''

_TOPOLOGICAL_ORDER = '''
@add_methods(Tensor)
class Backward:
    def backward(self, gradient: Tensor = None, retain_graph: bool = False) -> None:
        """Compute the gradient of this tensor with respect to every leaf, and add it to the leaves' .grad."""
        if not self._requires_grad:
            raise RuntimeError(NOT_REQUIRING_GRAD)
        if gradient is None and self.numel() != 1:
            raise RuntimeError(NOT_SCALAR)
        if gradient is not None and tuple(gradient.shape) != tuple(self.shape):
            raise RuntimeError(f"Mismatch in shape: the gradient {tuple(gradient.shape)}, the output {tuple(self.shape)}")
        if gradient is None:
            gradient = ones(self.shape, dtype=self.dtype)
        root, _ = gradient_edge(self)
        # a depth-first walk with an explicit stack: a node is finished after everything it feeds;
        # the reverse of the finishing order runs every node after all the nodes that send it gradients
        finished, seen, stack = [], set(), [(root, False)]
        while stack:
            node, done = stack.pop()
            if done:
                finished.append(node)
                continue
            if node in seen:
                continue
            seen.add(node)
            stack.append((node, True))
            for child, _ in node.next_functions:
                if child is not None and child not in seen:
                    stack.append((child, False))
        grads_for = {root: [cast(gradient, root.metadata[1])]}
        with no_grad():
            for node in reversed(finished):
                arrived = grads_for.pop(node, [])
                if not arrived:
                    continue  # nothing flows through here
                total = arrived[0]
                for g in arrived[1:]:
                    total = total + g
                grads = node(total)
                if not retain_graph:
                    node.release_variables()
                if len(grads) != len(node.next_functions):
                    raise RuntimeError(f"function {node.name()} returned an incorrect number of gradients")
                for i, ((child, _), g) in enumerate(zip(node.next_functions, grads)):
                    if child is None or g is None:
                        continue
                    shape, dtype = child.metadata
                    if tuple(g.shape) != tuple(shape):
                        raise RuntimeError(f"Function {node.name()} returned an invalid gradient at index {i}")
                    grads_for.setdefault(child, []).append(cast(g, dtype))
'''

_FUNCTION_WITH_A_SWITCH = _rewrite(
    "ex_function",
    ("""    def save_for_backward(self, *values) -> None:
        self._saved = values""", """    def save_for_backward(self, *values) -> None:
        self._saved = tuple(values)"""),
    ("""        if self._released:
            raise RuntimeError(FREED)
        return self._saved""", """        if self._saved is None:  # released
            raise RuntimeError(FREED)
        return self._saved"""),
    ("""        self._saved = ()
        self._released = True""", """        self._saved = None"""),
    ("""        ctx = cls._backward_cls()
        # (apply runs for every operation that autograd sees: tuple([...]) builds a list in one loop, where
        # tuple(... for ...) would resume a generator once per argument)
        ctx.needs_input_grad = tuple([isinstance(a, Tensor) and a._requires_grad for a in args])
        enabled = is_grad_enabled()
        record = enabled and True in ctx.needs_input_grad  # (grad mode is the same after forward)
        # forward with grad mode off: no_grad()'s work, without making, entering and leaving its object (this runs
        # for every operation that autograd sees)
        set_grad_enabled(False)
        try:
            out = cls.forward(ctx, *args)
        finally:
            set_grad_enabled(enabled)
        if record:
            ctx.next_functions = tuple([gradient_edge(a) if isinstance(a, Tensor) else (None, 0) for a in args])
            ctx.metadata = (out.shape, out.dtype)
            out._grad_fn = ctx
            out._requires_grad = True
        return out""", """        node = cls._backward_cls()
        node.needs_input_grad = tuple(bool(isinstance(a, Tensor) and a.requires_grad) for a in args)
        recording = is_grad_enabled()
        set_grad_enabled(False)
        try:
            result = cls.forward(node, *args)
        finally:
            set_grad_enabled(recording)
        if recording and True in node.needs_input_grad:
            edges = []
            for a in args:
                edges.append(gradient_edge(a) if isinstance(a, Tensor) else (None, 0))
            node.next_functions = tuple(edges)
            node.metadata = (tuple(result.shape), result.dtype)
            result._grad_fn, result._requires_grad = node, True
        return result"""))

_UNARY_OTHER_FORMULAS = _rewrite(
    "ex_unary",
    ("        return grad / x\n", "        return grad * (1 / x)\n"),
    ("        return grad / (2 * out)\n", "        return grad * 0.5 / out\n"),
    ("        return grad * (1 - out * out)\n", "        return grad - grad * out * out\n"),
    ("        return grad * out * (1 - out)\n", "        return grad * (out - out * out)\n"),
    ("        return where(out > 0, grad, 0.0)\n", "        return where(out <= 0, 0.0, grad)\n"),
    ("        return grad * (x > 0) - grad * (x < 0)\n", "        return where(x > 0, grad, where(x < 0, -grad, 0.0))\n"))

_SUM_TO_SHAPE_ONE_DIM_AT_A_TIME = _rewrite(
    "ex_binary",
    ("""    lead = grad.dim() - len(shape)
    inner = tuple(lead + i for i, size in enumerate(shape) if size == 1 and grad.shape[lead + i] != 1)
    if not inner:  # only the leading dims were added (a bias): summing them away leaves `shape`
        return grad.sum(tuple(range(lead))) if lead else grad
    grad = grad.sum(tuple(range(lead)) + inner, keepdim=True)
    return grad.reshape(shape) if lead else grad""", """    while grad.dim() > len(shape):  # the dims broadcasting added on the left
        grad = grad.sum(0)
    for d, size in enumerate(shape):  # the dims where the input had size 1
        if size == 1 and grad.shape[d] != 1:
            grad = grad.sum(d, keepdim=True)
    return grad"""))

_VIEWS_BY_CONTIGUOUS_COPIES = _rewrite(
    "ex_views",
    ("""        n = len(ctx.dims)
        inverse = [0] * n
        for i, d in enumerate(ctx.dims):
            inverse[wrap_dim(d, n)] = i
        return grad.permute(inverse), None""", """        n = len(ctx.dims)
        inverse = np.argsort([wrap_dim(d, n) for d in ctx.dims]).tolist()
        return grad.permute(*inverse), None"""),
    ("""        return KERNELS["view"](x, shape)

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(ctx.shape), None""", """        return KERNELS["view"](x, shape)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous().view(ctx.shape), None"""),
    ("""        return KERNELS["reshape"](x, shape)

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(ctx.shape), None""", """        return KERNELS["reshape"](x, shape)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous().view(ctx.shape), None"""),
    ("""        out = zeros(*ctx.shape, dtype=grad.dtype)
        out.narrow(*ctx.window)[...] = grad
        return out, None, None, None""", """        dim, start, length = ctx.window
        d = wrap_dim(dim, len(ctx.shape))
        start = start + ctx.shape[d] if start < 0 else start
        out = zeros(*ctx.shape, dtype=grad.dtype)
        out[(slice(None),) * d + (slice(start, start + length),)] = grad
        return out, None, None, None"""))

ALTERNATIVES = {
    "Kahn's algorithm with a queue, a Function.apply that switches grad mode by hand, other formulas": {
        "ex_engine": _KAHN,
        "ex_function": _FUNCTION_WITH_A_SWITCH,
        "ex_unary": _UNARY_OTHER_FORMULAS,
    },
    "a topological order from an iterative depth-first walk, sums one dim at a time, views through copies": {
        "ex_engine": _TOPOLOGICAL_ORDER,
        "ex_binary": _SUM_TO_SHAPE_ONE_DIM_AT_A_TIME,
        "ex_views": _VIEWS_BY_CONTIGUOUS_COPIES,
    },
}
