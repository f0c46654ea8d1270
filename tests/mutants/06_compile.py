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
        "a result that is not a tensor (a Python number) recorded as a node, not a graph break": {
            "code": _wrong("ex_trace", ("""    if not isinstance(out, Tensor) and not tensors_or_none:
        return tracer.graph_break(f"{op} returns a {type(out).__name__}", lambda: out, args)
""", """    if not isinstance(out, Tensor) and not tensors_or_none:
        tracer.graph.add(op, nodes, {"kwargs": dict(kwargs)} if kwargs else {})
        return out
""")),
            "shows": "neither a tensor nor a tuple of tensors and None is a graph break"},
        "any tuple recorded as a multi-output call (a tuple holding a Python number too)": {
            "code": _wrong("ex_trace", ("isinstance(out, tuple) and all(t is None or isinstance(t, Tensor) for t in out)",
                                        "isinstance(out, tuple)")),
            "shows": "neither a tensor nor a tuple of tensors and None is a graph break"},
        "a multi-output result (a tuple of tensors and None) is a graph break, as if it were no tensor": {
            "code": _wrong("ex_trace", ("    if not isinstance(out, Tensor) and not tensors_or_none:\n",
                                        "    if not isinstance(out, Tensor):\n")),
            "shows": "a getitem node per tensor"},
        "the call recorded without its keyword arguments (x.to(dtype=...) replays as x.to())": {
            "code": _wrong("ex_trace", ("tracer.record(op, nodes, kwargs, out)", "tracer.record(op, nodes, {}, out)")),
            "shows": "keyword arguments"},
        "nested captures: the calls go to the outermost tracer, not the innermost": {
            "code": _wrong("ex_trace", ("    tracer = TRACERS[-1]\n", "    tracer = TRACERS[0]\n")),
            "shows": "innermost"},
        "the argument nodes looked up in tracer.node_of, not tracer.node_for (a tensor made outside the function: "
        "a KeyError holding its id)": {
            "code": _wrong("ex_trace", ("nodes = tuple(tracer.node_for(a) for a in args)",
                                        "nodes = tuple(tracer.node_of[id(a)] if isinstance(a, Tensor) else a for a in args)")),
            "shows": "a tensor the tracer never saw becomes a constant node"},
    },
    "ex_run": {
        "constants are taken as placeholders": _wrong("ex_run", ("if node.op == PLACEHOLDER:",
                                                                 "if node.op in (PLACEHOLDER, CONSTANT):")),
        "the output node returns the last value computed": _wrong("ex_run", (
            "return value_of(node.args[0], values)", "return values[graph.nodes[-2].name]")),
        "the call run without its keyword arguments": {
            "code": _wrong("ex_run", ('dispatch(node.op, *args, **node.meta.get("kwargs", {}))', "dispatch(node.op, *args)")),
            "shows": "keyword arguments"},
        "the keyword arguments passed as one more positional argument (the kernel raises a TypeError)": {
            "code": _wrong("ex_run", ('dispatch(node.op, *args, **node.meta.get("kwargs", {}))',
                                      'dispatch(node.op, *args, node.meta.get("kwargs", {}))')),
            "shows": "dispatch(node.op, *args, **node.meta.get('kwargs', {}))"},
        "a fused node dispatched as an operator (run_fused never called)": {
            "code": _wrong("ex_run", ("""            elif node.op == FUSED:
                values[node.name] = run_fused(node, *args)
            else:
                values[node.name] = dispatch(node.op, *args, **node.meta.get("kwargs", {}))""",
                                      """            else:
                values[node.name] = dispatch(node.op, *args, **node.meta.get("kwargs", {}))""")),
            "shows": "run_fused", "judged": "ex_fuse"},
        "a getitem of a multi-output call's tuple returns the whole tuple": {
            "code": _wrong("ex_run", ("values[node.name] = args[0][args[1]]", "values[node.name] = args[0]")),
            "shows": "args[0][args[1]]"},
        "a getitem of a multi-output call's tuple dispatched as picotorch's getitem operator": {
            "code": _wrong("ex_run", ("""            if node.op == GETITEM and isinstance(args[0], tuple):  # an entry of a multi-output call's value
                values[node.name] = args[0][args[1]]
            elif node.op == FUSED:""", """            if node.op == FUSED:""")),
            "shows": "args[0][args[1]]"},
    },
    "ex_breaks": {
        "a graph break does not run the operator Python needed (the eager code between graphs is lost)":
            _wrong("ex_breaks", ("""    with ExcludeDispatchKeys(DispatchKey.Trace):
        return run()""", """    return None""")),
        "the reason is not recorded": {
            "code": _wrong("ex_breaks", ("    tracer.break_reasons.append(reason)\n", "")),
            "shows": "break_reasons"},
        "the operator at a break run with the Trace key still included (its kernel's numpy() breaks again)": {
            "code": _wrong("ex_breaks", ("""    with ExcludeDispatchKeys(DispatchKey.Trace):
        return run()""", """    return run()""")),
            "shows": "Trace key excluded"},
        "the segment returns constants among the break's tensors": {
            "code": _wrong("ex_breaks", (" and tracer.node_of[id(a)].kind != CONSTANT", "")),
            "shows": "not constants"},
        "the segment returns none of the break's tensors (only those used later)": {
            "code": _wrong("ex_breaks", ("tracer.close_segment(returned)", "tracer.close_segment(())")),
            "shows": "the tensors Python needs"},
        "the break's tensors looked up in tracer.node_of without asking whether the graph open now has them (a "
        "tensor an earlier graph made: a KeyError holding its id)": {
            "code": _wrong("ex_breaks", ("isinstance(a, Tensor) and id(a) in tracer.node_of and tracer",
                                         "isinstance(a, Tensor) and tracer")),
            "shows": "those in tracer.node_of"},
    },
    "ex_compile": {
        "a guard that ignores dtype": {
            "code": _wrong("ex_compile", ('guards.append(("tensor", tuple(a.shape), a.dtype.name, str(a.device), '
                                          'a.requires_grad))',
                                          'guards.append(("tensor", tuple(a.shape), str(a.device), a.requires_grad))')),
            "shows": "a guard checks the dtype"},
        "a guard that ignores requires_grad": _wrong("ex_compile", (
            'str(a.device), a.requires_grad))', 'str(a.device)))')),
        "a graph break that loses the eager code between graphs (the first graph replayed)": {
            "code": _wrong("ex_compile", ("""        if entry.breaks:
            return self.fn(*args)
""", "")),
            "shows": "the eager code between graphs"},
        "a guard that ignores the device (a graph captured on cpu replayed for emu tensors)": {
            "code": _wrong("ex_compile", ('a.dtype.name, str(a.device), a.requires_grad))', 'a.dtype.name, a.requires_grad))')),
            "shows": "device"},
        "a guard that checks the number of elements, not the shape": {
            "code": _wrong("ex_compile", ("tuple(a.shape), a.dtype.name", "a.numel(), a.dtype.name")),
            "shows": "shape"},
        "a guard on a Python argument's type but not its value (f(x, 2) replayed for f(x, 3))": {
            "code": _wrong("ex_compile", ('guards.append(("value", type(a).__name__, a))',
                                         'guards.append(("value", type(a).__name__))')),
            "shows": "value"},
        "no guard on grad mode": {
            "code": _wrong("ex_compile", ('    guards.append(("grad_mode", GradMode.enabled))\n', "")),
            "shows": "grad mode"},
        "a replay given every argument, Python values too (not only the tensors)": {
            "code": _wrong("ex_compile", ("run_graph(entry.graphs[0], *tensor_arguments(args))",
                                          "run_graph(entry.graphs[0], *args)")),
            "shows": "tensor arguments"},
        "self.graphs left as the last compile's on a hit": {
            "code": _wrong("ex_compile", ("""        self.graphs = entry.graphs
        if entry.breaks:""", """        if entry.breaks:""")),
            "shows": "self.graphs"},
        "the first compile counted as a recompile": _wrong("ex_compile", ("            if self.cache:\n                self.recompiles += 1",
                                                                          "            self.recompiles += 1")),
    },
    "ex_dce": {
        "DCE that drops an op whose output is used later (only the output's own inputs are kept)":
            _wrong("ex_dce", ("or node.name in live:", "or node.op == OUTPUT and node.name in live:")),
        "DCE that drops in-place operations": {
            "code": _wrong("ex_dce", (" or node.op in SIDE_EFFECTS", "")),
            "shows": "in place"},
        "DCE that removes an unused placeholder (the graph's signature changes)": {
            "code": _wrong("ex_dce", ("node.op in (OUTPUT, PLACEHOLDER)", "node.op == OUTPUT")),
            "shows": "placeholders always stay"},
        "DCE that keeps unused constants": {
            "code": _wrong("ex_dce", ("node.op in (OUTPUT, PLACEHOLDER)", "node.op in (OUTPUT, PLACEHOLDER, CONSTANT)")),
            "shows": "unused constants go"},
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
        "CSE that merges in-place operations (two add_ become one)": {
            "code": _wrong("ex_cse", ("if node.kind != CALL or node.op in SIDE_EFFECTS:", "if node.kind != CALL:")),
            "shows": "side effects"},
        "CSE whose key ignores the order of the arguments (a - b merged with b - a)": {
            "code": _wrong("ex_cse", ("tuple(argument_key(a, replaced) for a in node.args), kwargs)",
                                      "tuple(sorted(argument_key(a, replaced) for a in node.args)), kwargs)")),
            "shows": "order"},
        "CSE whose key leaves out the keyword arguments": {
            "code": _wrong("ex_cse", ("for a in node.args), kwargs)", "for a in node.args))")),
            "shows": "kwargs"},
        "CSE that keys placeholders and constants too (two inputs merged into one)": {
            "code": _wrong("ex_cse", ("if node.kind != CALL or node.op in SIDE_EFFECTS:",
                                      "if node.op == OUTPUT or node.op in SIDE_EFFECTS:")),
            "shows": "placeholders"},
    },
    "ex_fold": {
        "a node with a placeholder input is folded with the captured value":
            _wrong("ex_fold", ("if inputs and all(n.name in folded for n in inputs):",
                               "if inputs and any(n.name in folded for n in inputs):")),
        "a parameter (requires grad) is folded": _wrong("ex_fold", ("            if not node.meta[\"value\"].requires_grad:\n                folded[node.name] = node",
                                                                    "            folded[node.name] = node")),
        "a multi-output call on constants folded (a constant node given a tuple; its getitems then dispatched)": {
            "code": _wrong("ex_fold", ("""        if "outputs" in node.meta:  # a multi-output call: its value is a tuple, which no constant node holds
            continue
""", "")),
            "shows": "a constant node holds one tensor"},
        "an in-place operation on constants folded (it runs once, at compile time)": {
            "code": _wrong("ex_fold", ("if node.kind != CALL or node.op in SIDE_EFFECTS:", "if node.kind != CALL:")),
            "shows": "in place"},
        "a folded argument's value read from its original call node (KeyError: 'value')": {
            "code": _wrong("ex_fold", ('values = {n.name: folded[n.name].meta["value"] for n in inputs}',
                                       'values = {n.name: n.meta["value"] for n in inputs}')),
            "shows": "its new constant node's meta['value']"},
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
        "no grid-stride loop (one element per thread: the elements past the grid are never computed)": {
            "code": _wrong("ex_fuse", ('''             "    long long step = (long long)blockDim.x * gridDim.x;",
             "    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step) {",''',
                                       '''             "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;",
             "    if (i < n) {",''')),
            "shows": "grid-stride"},
        "a member's operands put inputs first, then earlier members (x.exp() - y computed as y - x.exp())": {
            "code": _wrong("ex_fuse", ("for arg in member.args:",
                                       "for arg in sorted(member.args, key=lambda a: group.operand(a)[0]):")),
            "shows": "operands in order"},
        "every group computed in float (T fixed, float64 inputs read as float)": _wrong("ex_fuse", (
            "    T = group.ctype\n", '    T = "float"\n')),
        "a member's operands that are earlier members written as inputs (v2 for t2: the source does not compile)": {
            "code": _wrong("ex_fuse", ('f"v{what}" if kind == "input" else f"t{what}" if kind == "member" else',
                                       'f"v{what}" if kind != "value" else')),
            "shows": "the source must compile"},
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
        "each block sums only row blockIdx.x (rows past the grid are never summed)": {
            "code": _wrong("ex_fuse_sum", ('''"    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {",''',
                                           '''"    long long row = blockIdx.x;", "    if (row < rows) {",''')),
            "shows": "more rows than blocks"},
        "each thread adds only element threadIdx.x of its row (columns past the block are never added)": {
            "code": _wrong("ex_fuse_sum", ('''"        for (long long c = threadIdx.x; c < cols; c += blockDim.x) {",''',
                                           '''"        long long c = threadIdx.x;", "        if (c < cols) {",''')),
            "shows": "more columns than threads"},
        "thread 0 stores its own sum, not the block's": _wrong("ex_fuse_sum", (
            '"            out[row] = partial[0];",', '"            out[row] = acc;",')),
        "the inputs read at row * cols + c (their strides and broadcasting ignored)": _wrong("ex_fuse_sum", (
            'lines += [f"            {T} v{j} = in{j}[o{j}];" for j in range(k)]',
            'lines += [f"            {T} v{j} = in{j}[row * cols + c];" for j in range(k)]')),
    },
}
