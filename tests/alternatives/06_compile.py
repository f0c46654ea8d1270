"""Correct answers to chapter 06 written differently from the course's solution.

ALTERNATIVES = {what is different: {exercise: the cell's code}}; see tests/chapters/test_alternative_solutions.py.
"""
from __future__ import annotations

from solution_text import rewrite, solution


def _rewrite(exercise: str, *replacements: tuple[str, str]) -> str:
    return rewrite(solution("06_compile", exercise), *replacements, what="alternative")


ALTERNATIVES = {
    "recursion and dictionaries where the solution loops": {
        "ex_dce": _rewrite("ex_dce", ("""    live = set()
    for node in reversed(graph.nodes):
        if node.op in (OUTPUT, PLACEHOLDER) or node.op in SIDE_EFFECTS or node.name in live:
            live.add(node.name)
            live.update(n.name for n in node.inputs())
""", """    by_name = {n.name: n for n in graph.nodes}
    live = set()

    def mark(name):
        if name not in live:
            live.add(name)
            for n in by_name[name].inputs():
                mark(n.name)

    for node in graph.nodes:
        if node.op in (OUTPUT, PLACEHOLDER) or node.op in SIDE_EFFECTS:
            mark(node.name)
""")),
        "ex_compile": _rewrite("ex_compile", ("""    guards = []
    for a in args:
        if isinstance(a, Tensor):
            guards.append(("tensor", tuple(a.shape), a.dtype.name, str(a.device), a.requires_grad))
        else:
            guards.append(("value", type(a).__name__, a))
    guards.append(("grad_mode", GradMode.enabled))
    return tuple(guards)""", """    return (GradMode.enabled,) + tuple(
        (a.shape, a.dtype, a.device, a.requires_grad) if isinstance(a, Tensor) else (type(a), a) for a in args)""")),
        "ex_fuse": _rewrite("ex_fuse", ("""    shape, strides = tuple(shape), tuple(strides)
    lead = len(out_shape) - len(shape)
    result = []
    for d, size in enumerate(out_shape):
        k = d - lead
        if k < 0 or (shape[k] == 1 and size != 1):
            result.append(0)
        else:
            result.append(strides[k])
    return tuple(result)""", """    padded = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    steps = (0,) * (len(out_shape) - len(shape)) + tuple(strides)
    return tuple(0 if n == 1 and m != 1 else s for n, m, s in zip(padded, out_shape, steps))"""),
                            ('''            "        long long rest = i, o_out = 0;"]''',
                             '''            "        long long rest = i; long long o_out = 0;"]''')),
    },
    "placeholders paired with the inputs up front; a CSE key of the whole argument tuple": {
        "ex_run": _rewrite("ex_run", ("""    values = {}
    inputs = iter(tensors)
    for node in graph.nodes:
        if node.op == PLACEHOLDER:
            values[node.name] = next(inputs)
        elif node.op == CONSTANT:""", """    placeholders = [node for node in graph.nodes if node.op == PLACEHOLDER]
    values = {node.name: t for node, t in zip(placeholders, tensors)}
    for node in graph.nodes:
        if node.op == PLACEHOLDER:
            continue
        if node.op == CONSTANT:""")),
        "ex_cse": _rewrite("ex_cse", ("key = (node.op, tuple(argument_key(a, replaced) for a in node.args), kwargs)",
                                      "key = (node.op, argument_key(node.args, replaced), kwargs)")),
    },
    "a multi-output result told by its entries; a getitem run with operator.getitem, told by the node it indexes": {
        "ex_trace": _rewrite("ex_trace", ("""    tensors_or_none = isinstance(out, tuple) and all(t is None or isinstance(t, Tensor) for t in out)
    if not isinstance(out, Tensor) and not tensors_or_none:""", """    entries = out if isinstance(out, tuple) else [out] if isinstance(out, Tensor) else [0]
    if [t for t in entries if t is not None and not isinstance(t, Tensor)]:""")),
        "ex_run": _rewrite("ex_run", ("""            if node.op == GETITEM and isinstance(args[0], tuple):  # an entry of a multi-output call's value
                values[node.name] = args[0][args[1]]""", """            if node.op == "getitem" and "outputs" in node.args[0].meta:
                import operator
                values[node.name] = operator.getitem(*args)""")),
    },
    "thread 0 adds the threads' sums one by one after a barrier (no tree: slower, as correct)": {
        "ex_fuse_sum": _rewrite("ex_fuse_sum", ('''              "        __syncthreads();",
              "        for (int s = blockDim.x / 2; s > 0; s /= 2) {",  # chapter 05's tree
              "            if (threadIdx.x < s)",
              "                partial[threadIdx.x] += partial[threadIdx.x + s];",
              "            __syncthreads();",
              "        }",
              "        if (threadIdx.x == 0)",
              "            out[row] = partial[0];",''', '''              "        __syncthreads();",
              "        if (threadIdx.x == 0) {",
              f"            {T} total = 0;",
              "            for (int t = 0; t < blockDim.x; ++t)",
              "                total += partial[t];",
              "            out[row] = total;",
              "        }",
              "        __syncthreads();",  # the next row writes partial again''')),
    },
    "the fused kernel walks the dims from the first (another order of the elements, each still once)": {
        "ex_fuse": _rewrite("ex_fuse", ("for (int d = ndim - 1; d >= 0; --d) {", "for (int d = 0; d < ndim; ++d) {")),
    },
}
