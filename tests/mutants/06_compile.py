"""Typical wrong answers to chapter 06, one dict per exercise: {what is wrong: the cell's code}, or a dict with the
code and what its message must show (tests/notebook_runs.Mutant). Each is the solution cell with one mistake put
in (`_wrong`); a replacement that no longer matches the solution fails loudly, here."""
from __future__ import annotations

from solution_text import rewrite, solution


def _wrong(exercise: str, *replacements: tuple[str, str]) -> str:
    return rewrite(solution("06_compile", exercise), *replacements, what=f"mutant of {exercise}", every=True)


MUTANTS = {
    "ex_trace": {
        "the operator runs with the Trace key still included: a kernel's own calls are recorded too": {
            "code": _wrong("ex_trace", ("""    with ExcludeDispatchKeys(DispatchKey.Trace):
        out = redispatch(op, DispatchKey.Trace, *args, **kwargs)""",
                                        """    out = redispatch(op, DispatchKey.Trace, *args, **kwargs)""")),
            "shows": "a kernel's own calls are not recorded"},
        "the node is recorded but the result is not remembered as its (later calls see a constant)":
            _wrong("ex_trace", ("    tracer.record(op, nodes, kwargs, out)\n",
                                "    tracer.graph.add(op, nodes, meta_of(out))\n")),
    },
    "ex_run": {
        "constants are taken as placeholders": _wrong("ex_run", ("if node.op == PLACEHOLDER:",
                                                                 "if node.op in (PLACEHOLDER, CONSTANT):")),
        "the output node returns the last value computed": _wrong("ex_run", (
            "return value_of(node.args[0], values)", "return values[graph.nodes[-2].name]")),
    },
    "ex_breaks": {
        "a graph break does not run the operator Python needed (the eager code between graphs is lost)":
            _wrong("ex_breaks", ("""    with ExcludeDispatchKeys(DispatchKey.Trace):
        return run()""", """    return None""")),
        "the reason is not recorded": _wrong("ex_breaks", ("    tracer.break_reasons.append(reason)\n", "")),
    },
    "ex_compile": {
        "a guard that ignores dtype": {
            "code": _wrong("ex_compile", ('guards.append(("tensor", tuple(a.shape), a.dtype.name, str(a.device), '
                                          'a.requires_grad))',
                                          'guards.append(("tensor", tuple(a.shape), str(a.device), a.requires_grad))')),
            "shows": "a guard must check the dtype"},
        "a guard that ignores requires_grad": _wrong("ex_compile", (
            'str(a.device), a.requires_grad))', 'str(a.device)))')),
        "a graph break that loses the eager code between graphs (the first graph replayed)": {
            "code": _wrong("ex_compile", ("""        if entry.breaks:
            return self.fn(*args)
""", "")),
            "shows": "the eager code between graphs"},
        "the first compile counted as a recompile": _wrong("ex_compile", ("            if self.cache:\n                self.recompiles += 1",
                                                                          "            self.recompiles += 1")),
    },
    "ex_dce": {
        "DCE that drops an op whose output is used later (only the output's own inputs are kept)":
            _wrong("ex_dce", ("or node.name in live:", "or node.op == OUTPUT and node.name in live:")),
        "DCE that drops in-place operations": _wrong("ex_dce", (" or node.op in SIDE_EFFECTS", "")),
    },
    "ex_cse": {
        "CSE that merges ops with different arguments (the key is the operator alone)":
            _wrong("ex_cse", ("key = (node.op, tuple(argument_key(a, replaced) for a in node.args), kwargs)",
                              "key = (node.op, kwargs)")),
        "CSE that merges x + 2 and x + 2.0 (a value's type left out)":
            _wrong("ex_cse", ('return ("value", type(arg).__name__, repr(arg))', 'return ("value", arg)')),
        "CSE that ignores replacements made before (x * y computed twice stays twice downstream)": {
            "code": _wrong("ex_cse", ('return ("node", replaced.get(arg.name, arg).name)', 'return ("node", arg.name)')),
            "shows": "the node it was replaced by"},
    },
    "ex_fold": {
        "a node with a placeholder input is folded with the captured value":
            _wrong("ex_fold", ("if inputs and all(n.name in folded for n in inputs):",
                               "if inputs and any(n.name in folded for n in inputs):")),
        "a parameter (requires grad) is folded": _wrong("ex_fold", ("            if not node.meta[\"value\"].requires_grad:\n                folded[node.name] = node",
                                                                    "            folded[node.name] = node")),
    },
    "ex_fuse": {
        "a fused kernel that ignores broadcasting (size-1 dims keep their stride)": _wrong("ex_fuse", (
            "if k < 0 or (shape[k] == 1 and size != 1):", "if k < 0:")),
        "a fused kernel that ignores strides (element i read at i)": _wrong("ex_fuse", (
            '    lines += [f"        {T} v{j} = in{j}[o{j}];" for j in range(k)]',
            '    lines += [f"        {T} v{j} = in{j}[i];" for j in range(k)]')),
        # (Walking the dims from the first, each with its own size and stride, is not a mistake: it visits every
        # element once, in another order; tests/alternatives/06_compile.py has it.)
        "a dim's index taken modulo another dim's size (sizes walked first to last, strides last to first)": {
            "code": _wrong("ex_fuse", ("long long index = rest % meta[d];", "long long index = rest % meta[ndim - 1 - d];"),
                           ("rest /= meta[d];", "rest /= meta[ndim - 1 - d];")),
            "shows": "out-of-bounds read"},
        "the last member is not the one stored": _wrong("ex_fuse", (
            'out[o_out] = t{len(group.members) - 1};', 'out[o_out] = t0;')),
    },
    "ex_fuse_sum": {
        "no __syncthreads() between the steps of the tree": _wrong("ex_fuse_sum", (
            '''              "                partial[threadIdx.x] += partial[threadIdx.x + s];",
              "            __syncthreads();",''', '''              "                partial[threadIdx.x] += partial[threadIdx.x + s];",''')),
        "no barrier between the threads' sums and the tree (it reads partial before every thread wrote it)":
            _wrong("ex_fuse_sum", ('''              "        partial[threadIdx.x] = acc;",
              "        __syncthreads();",''', '''              "        partial[threadIdx.x] = acc;",''')),
        "the barrier inside `if (t < s)`: not every thread reaches it": _wrong("ex_fuse_sum", (
            '''              "            if (threadIdx.x < s)",
              "                partial[threadIdx.x] += partial[threadIdx.x + s];",
              "            __syncthreads();",''', '''              "            if (threadIdx.x < s) {",
              "                partial[threadIdx.x] += partial[threadIdx.x + s];",
              "                __syncthreads();",
              "            }",''')),
        "thread 0 stores its own sum, not the block's": _wrong("ex_fuse_sum", (
            '"            out[row] = partial[0];",', '"            out[row] = acc;",')),
        "the inputs read at row * cols + c (their strides and broadcasting ignored)": _wrong("ex_fuse_sum", (
            'lines += [f"            {T} v{j} = in{j}[o{j}];" for j in range(k)]',
            'lines += [f"            {T} v{j} = in{j}[row * cols + c];" for j in range(k)]')),
    },
}
