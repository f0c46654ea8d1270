"""Typical wrong answers to chapter 02, one dict per exercise: {what is wrong: the cell's code}.

tests/chapters/test_chapters.py puts each one in place of the exercise's solution cell, runs the source
notebook (hidden tests included) up to that exercise's tests and expects them to fail.

Each wrong answer is the solution cell with one mistake put in (`_wrong`), so that the given parts
of the cell (class skeletons, forwards, decorators) stay as the student sees them. A replacement that
no longer matches the solution fails loudly, here, rather than making a mutant that is not wrong.
"""
from __future__ import annotations

from solution_text import rewrite, solution


def _wrong(exercise: str, *replacements: tuple[str, str]) -> str:
    return rewrite(solution("02_autograd", exercise), *replacements, what=f"mutant of {exercise}", every=True)


_VIEW_BACKWARD = """        return KERNELS["{op}"](x, shape)

    @staticmethod
    def backward(ctx, grad):
        return grad.{method}(ctx.shape), None"""

MUTANTS = {
    "ex_grad_mode": {
        "__exit__ switches grad mode on instead of restoring the mode it found":
            _wrong("ex_grad_mode", ("set_grad_enabled(self.previous)", "set_grad_enabled(True)")),
        "the decorator shares one context object, so a recursive call forgets the outer mode":
            _wrong("ex_grad_mode", ("with type(self)():", "with self:")),
        "__exit__ returns True, which swallows an exception raised in the block":
            _wrong("ex_grad_mode", ("""        set_grad_enabled(self.previous)
        return False""", """        set_grad_enabled(self.previous)
        return True""")),
        "the decorator switches the mode once, when it decorates, not while the function runs":
            _wrong("ex_grad_mode", ("""        @functools.wraps(func)
        def run_in_mode(*args, **kwargs):
            with type(self)():
                return func(*args, **kwargs)
        return run_in_mode""", """        set_grad_enabled(self.mode)
        return func""")),
    },
    "ex_leaves": {
        "AccumulateGrad overwrites .grad instead of adding to it":
            _wrong("ex_leaves", ("variable.grad += grad", "variable.grad = grad.clone()")),
        "AccumulateGrad keeps the gradient it was given (it shares memory with the caller's)":
            _wrong("ex_leaves", ("variable.grad = grad.clone()", "variable.grad = grad")),
        "a new AccumulateGrad node on every call, so x * x accumulates twice instead of summing first":
            _wrong("ex_leaves", ("node = t._grad_accumulator() if t._grad_accumulator is not None else None",
                                 "node = None")),
        "the leaf holds its AccumulateGrad node with a plain reference (a cycle)":
            _wrong("ex_leaves", ("node = t._grad_accumulator() if t._grad_accumulator is not None else None",
                                 "node = t._grad_accumulator"),
                   ("t._grad_accumulator = weakref.ref(node)", "t._grad_accumulator = node")),
        "AccumulateGrad adds out of place, so .grad becomes a new tensor at every call":
            _wrong("ex_leaves", ("variable.grad += grad", "variable.grad = variable.grad + grad")),
        "requires_grad can be switched off on a computed tensor (no rule for tensors with a grad_fn)":
            _wrong("ex_leaves", ("""        if self._grad_fn is not None:
            if not value:
                raise RuntimeError("you can only change requires_grad flags of leaf variables. If you want to use "
                                   "a computed variable in a subgraph that doesn't require differentiation use "
                                   "var_no_grad = var.detach().")
            return
""", "")),
        "gradient_edge gives a computed tensor an AccumulateGrad node instead of its grad_fn":
            _wrong("ex_leaves", ("""        return t._grad_fn, 0
    if not t._requires_grad:""", """        pass
    if not t._requires_grad:""")),
        "detach() returns the tensor itself":
            _wrong("ex_leaves", ("return Tensor(self._storage, self._shape, self._stride, self._offset)",
                                 "return self")),
    },
    "ex_function": {
        "apply records a node even with grad mode off":
            _wrong("ex_function", ("record = enabled and True in ctx.needs_input_grad",
                                   "record = True in ctx.needs_input_grad")),
        "apply runs forward with grad mode on":
            _wrong("ex_function", ("        set_grad_enabled(False)\n", "")),
        "next_functions follows grad_fn only, so leaves get (None, 0)":
            _wrong("ex_function", ("gradient_edge(a) if isinstance(a, Tensor) else (None, 0)",
                                   "(a.grad_fn, 0) if isinstance(a, Tensor) else (None, 0)")),
        "metadata describes the first input instead of the output":
            _wrong("ex_function", ("ctx.metadata = (out.shape, out.dtype)", "ctx.metadata = (args[0].shape, args[0].dtype)")),
        "needs_input_grad says True for every tensor, whether it requires grad or not":
            _wrong("ex_function", ("isinstance(a, Tensor) and a._requires_grad for a in args",
                                   "isinstance(a, Tensor) for a in args")),
        "next_functions leaves out the arguments that are not tensors":
            _wrong("ex_function", ("gradient_edge(a) if isinstance(a, Tensor) else (None, 0) for a in args",
                                   "gradient_edge(a) for a in args if isinstance(a, Tensor)")),
        "release_variables() only remembers the release, and keeps the saved values in memory":
            _wrong("ex_function", ("""        self._saved = ()
        self._released = True""", """        self._released = True""")),
        "saved_tensors still answers after release_variables()":
            _wrong("ex_function", ("""        if self._released:
            raise RuntimeError(FREED)
""", "")),
    },
    "ex_engine": {
        # Right gradients, but one Python frame per node of the chain: the 2000-node test names itself.
        "the dependencies are counted by a recursive walk (a deep chain overflows the stack)": {
            "shows": "a recursive walk runs out of stack here): your code raised RecursionError",
            "code": _wrong("ex_engine", ("""        dependencies, stack = {root: 0}, [root]
        while stack:
            for node, _ in stack.pop().next_functions:
                if node is None:
                    continue
                if node in dependencies:
                    dependencies[node] += 1
                else:
                    dependencies[node] = 1
                    stack.append(node)""", """        dependencies = {root: 0}

        def count(node):
            for next_node, _ in node.next_functions:
                if next_node is None:
                    continue
                if next_node in dependencies:
                    dependencies[next_node] += 1
                else:
                    dependencies[next_node] = 1
                    count(next_node)

        count(root)"""))},
        "a recursive walk, which runs a shared node once per path (and dies on deep graphs)":
            _wrong("ex_engine", ("""        root, _ = gradient_edge(self)""", """        root, _ = gradient_edge(self)

        def walk(node, grad):
            with no_grad():
                grads = node(grad)
            for (next_node, _), g in zip(node.next_functions, grads):
                if next_node is not None and g is not None:
                    walk(next_node, cast(g, next_node.metadata[1]))

        walk(root, cast(gradient, root.metadata[1]))
        return""")),
        "a shared node keeps the last gradient that arrived instead of the sum":
            _wrong("ex_engine", ("buffers[next_node] = buffers[next_node] + g if next_node in buffers else g",
                                 "buffers[next_node] = g")),
        "gradients are summed in place, into a tensor that may be on its way elsewhere too":
            _wrong("ex_engine", ("buffers[next_node] = buffers[next_node] + g if next_node in buffers else g",
                                 """if next_node in buffers:
                            buffers[next_node] += g
                        else:
                            buffers[next_node] = g""")),
        "a node runs as soon as it appears, without waiting for all its gradients (no dependency count)":
            _wrong("ex_engine", ("""                    dependencies[next_node] -= 1
                    if dependencies[next_node] == 0:
                        ready.append(next_node)""", """                    if next_node not in ready:
                        ready.insert(0, next_node)""")),
        "a given gradient's shape is not checked (a leaf without .grad takes it as it is)":
            _wrong("ex_engine", ("""        elif tuple(gradient.shape) != tuple(self.shape):
            raise RuntimeError(f"Mismatch in shape: grad_output[0] has a shape of {tuple(gradient.shape)} and "
                               f"output[0] has a shape of {tuple(self.shape)}.")
""", "")),
        "the number of gradients a node returns is not checked (zip drops the extra ones)":
            _wrong("ex_engine", ("""                if len(grads) != len(edges):
                    raise RuntimeError(f"function {node.name()} returned an incorrect number of gradients "
                                       f"(expected {len(edges)}, got {len(grads)})")
""", "")),
        "a gradient of the wrong shape from a node goes on unchecked":
            _wrong("ex_engine", ("""                        if g.shape != tuple(shape):
                            raise RuntimeError(f"Function {node.name()} returned an invalid gradient at index {i} - "
                                               f"got {list(g.shape)} but expected shape {list(shape)}")
""", "")),
        "gradients are not cast to the dtype the next node expects":
            _wrong("ex_engine", ("                            g = cast(g, dtype)\n", "                            pass\n")),
        "the nodes run with grad mode on":
            _wrong("ex_engine", ("        with no_grad():\n            while ready:", "        if True:\n            while ready:")),
        "saved tensors are never freed":
            _wrong("ex_engine", ("""                if not retain_graph:
                    node.release_variables()
""", "")),
    },
    "ex_unary": {
        "tanh's derivative taken as 1 - out instead of 1 - out²":
            _wrong("ex_unary", ("return grad * (1 - out * out)", "return grad * (1 - out)")),
        "relu lets the gradient through where the output is 0":
            _wrong("ex_unary", ("return where(out > 0, grad, 0.0)", "return where(out >= 0, grad, 0.0)")),
    },
    "ex_binary": {
        "a broadcast gradient is not reduced to its operand's shape":
            _wrong("ex_binary", ("""    if not inner:  # only the leading dims were added (a bias): summing them away leaves `shape`
        return grad.sum(tuple(range(lead))) if lead else grad
    grad = grad.sum(tuple(range(lead)) + inner, keepdim=True)
    return grad.reshape(shape) if lead else grad""", """    return grad""")),
        "only the dims added on the left are summed, not the dims of size 1":
            _wrong("ex_binary", ("""    inner = tuple(lead + i for i, size in enumerate(shape) if size == 1 and grad.shape[lead + i] != 1)""",
                                 """    inner = ()""")),
        "div's gradient for b without its minus sign":
            _wrong("ex_binary", ("sum_to_shape(-grad * a / (b * b), shape_of(b))", "sum_to_shape(grad * a / (b * b), shape_of(b))")),
        "maximum gives the whole gradient to both sides of a tie":
            _wrong("ex_binary", ("half = grad / 2", "half = grad")),
    },
    "ex_reductions": {
        "sum's gradient is expanded without putting the reduced dims back":
            _wrong("ex_reductions", ("return grad.reshape(kept_shape(ctx.shape, ctx.dim)).expand(ctx.shape), None, None",
                                     "return grad.expand(ctx.shape), None, None")),
        "max() gives the whole gradient to every element that ties for the maximum":
            _wrong("ex_reductions", ("return where(mask, grad / mask.sum(), 0.0)", "return where(mask, grad, 0.0)")),
        "max(dim) sends the gradient to position 0 instead of the argmax":
            _wrong("ex_reductions", ("mask = positions == indices.reshape(kept)", "mask = positions == 0")),
    },
    "ex_matmul": {
        "grad_a = grad @ b, without the transpose":
            _wrong("ex_matmul", ("grad_a = sum_to_shape(grad @ b2.mT, a2.shape)", "grad_a = sum_to_shape(grad @ b2, a2.shape)")),
        "broadcast batch dims are not summed back":
            _wrong("ex_matmul", ("grad_b = sum_to_shape(a2.mT @ grad, b2.shape)", "grad_b = a2.mT @ grad")),
    },
    "ex_views": {
        "transpose's backward reshapes the gradient instead of transposing it back":
            _wrong("ex_views", ("return grad.transpose(*ctx.dims), None, None",
                                "return grad.reshape(grad.shape[::-1] if len(grad.shape) == 2 else grad.shape), None, None")),
        "permute's backward applies the same permutation instead of its inverse":
            _wrong("ex_views", ("inverse[wrap_dim(d, n)] = i", "inverse[i] = wrap_dim(d, n)")),
        "view's backward is a .view of the gradient, which fails when the gradient arrives transposed":
            _wrong("ex_views", (_VIEW_BACKWARD.format(op="view", method="reshape"), _VIEW_BACKWARD.format(op="view", method="view"))),
        "reshape's backward is a .view of the gradient":
            _wrong("ex_views", (_VIEW_BACKWARD.format(op="reshape", method="reshape"),
                                _VIEW_BACKWARD.format(op="reshape", method="view"))),
        "indexing's backward writes the gradient into the first elements, ignoring the view's strides":
            _wrong("ex_views", ("""        out = zeros(*ctx.shape, dtype=grad.dtype)
        out[ctx.key] = grad
        return out, None""", """        out = zeros(*ctx.shape, dtype=grad.dtype)
        flat = out.reshape(-1)
        flat[:grad.numel()] = grad.reshape(-1)
        return out, None""")),
    },
    "ex_gradcheck": {
        "a one-sided difference instead of a central one":
            _wrong("ex_gradcheck", ("grad[index] = (plus - minus) / (2 * eps)", "grad[index] = (plus - base) / eps"),
                   ("            values, grad = x.numpy(), np.zeros(x.shape)\n",
                    "            values, grad = x.numpy(), np.zeros(x.shape)\n            base = loss()\n")),
        "an input that does not require grad gets a numerical gradient instead of None":
            _wrong("ex_gradcheck", ("if not (isinstance(x, Tensor) and x.requires_grad):", "if not isinstance(x, Tensor):")),
        "float32 inputs are accepted (a central difference in float32 is noise)":
            _wrong("ex_gradcheck", ("""            if x.dtype.name != "float64":
                raise ValueError(f"numerical_gradient needs float64 inputs (central differences in float32 are "
                                 f"noise); got {x.dtype}")
""", "")),
        "the perturbed element is not put back":
            _wrong("ex_gradcheck", ("                values[index] = original\n", "")),
        "gradcheck runs on the caller's tensors and leaves a .grad on them":
            _wrong("ex_gradcheck", ("leaves = [x.detach().requires_grad_(x.requires_grad) if isinstance(x, Tensor) else x "
                                    "for x in inputs]", "leaves = list(inputs)")),
    },
}
