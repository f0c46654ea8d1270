"""Typical wrong answers to chapter 05, one dict per exercise: {what is wrong: the cell's code}, or a dict
with the code, the exercise whose verdict is judged and what its message must show (tests/notebook_runs.Mutant).

tests/chapters/test_chapters.py puts each one in place of the exercise's solution cell, runs the source
notebook (hidden tests included) up to that exercise's tests and expects them to fail. Here the
solution cells hold CUDA C too: a wrong kernel is the solution's kernel with one line changed, and the
emulator (a missing bound check, a missing __syncthreads) or the comparison with torch rejects it.

Each wrong answer is the solution cell with one mistake put in (`_wrong`). A replacement that no longer
matches the solution fails loudly, here, rather than making a mutant that is not wrong.
"""
from __future__ import annotations

from solution_text import rewrite, solution


def _wrong(exercise: str, *replacements: tuple[str, str]) -> str:
    return rewrite(solution("05_backend", exercise), *replacements, what=f"mutant of {exercise}", every=True)


MUTANTS = {
    "ex_device": {
        "Device('cuda') equals Device('cuda:0'): a missing index compared as 0":
            _wrong("ex_device", ("return self.type == other.type and self.index == other.index",
                                 "return self.type == other.type and (self.index or 0) == (other.index or 0)")),
        "an index with a leading zero ('cuda:01') is accepted":
            _wrong("ex_device", (' or (number[0] == "0" and len(number) > 1)', "")),
        "repr shows index=None for a device without an index":
            _wrong("ex_device", ("""        if self.index is None:
            return f"device(type='{self.type}')"
""", "")),
    },
    "ex_dispatch": {
        "the emulator given no CUDA key: its tensors' calls run the CPU kernels":
            _wrong("ex_dispatch", ('return DispatchKey.CPU.bit if kind == "cpu" else DispatchKey.CUDA.bit',
                                   'return DispatchKey.CUDA.bit if kind == "cuda" else DispatchKey.CPU.bit')),
        "a device tensor's key set is {CPU}: device_keys ignores the device":
            _wrong("ex_dispatch", ('return DispatchKey.CPU.bit if kind == "cpu" else DispatchKey.CUDA.bit',
                                   "return DispatchKey.CPU.bit")),
        "the device check refuses CPU scalars beside tensors on a device":
            _wrong("ex_dispatch", ("""            if d == CPU and a.dim() == 0:
                continue  # a CPU scalar: read as a number by any device's kernel
""", "")),
        "any 0-dim tensor is let through, a scalar on a device too":
            _wrong("ex_dispatch", ("if d == CPU and a.dim() == 0:", "if a.dim() == 0:")),
        "the first tensor's device is taken without comparing the others":
            _wrong("ex_dispatch", ("""            elif d != found:
                raise""", """            elif False:
                raise""")),
        "devices compared by type only: emu and emu:0 pass as one":
            _wrong("ex_dispatch", ("elif d != found:", "elif d.type != found.type:")),
        "no tensor at all gives None instead of the CPU":
            _wrong("ex_dispatch", ("return CPU if found is None else found", "return found")),
        "the CUDA kernel is registered without the device check":
            _wrong("ex_dispatch", ("register_kernel(op, DispatchKey.CUDA)(checked)", "register_kernel(op, DispatchKey.CUDA)(kernel)")),
        "the kernel is registered for the CPU key":
            _wrong("ex_dispatch", ("register_kernel(op, DispatchKey.CUDA)(checked)", "register_kernel(op, DispatchKey.CPU)(checked)")),
        "register_cuda_kernel returns the checking wrapper, not the function it decorates":
            _wrong("ex_dispatch", ("""        register_kernel(op, DispatchKey.CUDA)(checked)
        return kernel""", """        register_kernel(op, DispatchKey.CUDA)(checked)
        return checked""")),
        "the keyword arguments are not passed on to the kernel":
            _wrong("ex_dispatch", ("return kernel(*args, **kwargs)", "return kernel(*args)")),
    },
    "ex_to": {
        "move returns torch's tensor when it is already on the device (no copy)":
            _wrong("ex_to", ("""    dest = torch.empty(tuple(t.shape), dtype=source.dtype, device=torch_device(device))
    dest.copy_(source)
""", """    dest = source.to(torch_device(device))
""")),
        "to() copies even when neither the device nor the dtype changes":
            _wrong("ex_to", ("""        if device == self.device and (dtype is None or dtype is self.dtype):
            return self
""", "")),
        "x.to(its own dtype) makes a copy (torch returns x itself)":
            _wrong("ex_to", ("if device == self.device and (dtype is None or dtype is self.dtype):",
                             "if device == self.device and dtype is None:")),
        "_to_copy returns x itself when nothing changes (torch's _to_copy always copies)":
            _wrong("ex_to", ("return move(x, device) if out is x else out", "return out")),
        "_to_copy converts on the device before a move from the CPU, where only the CPU can convert yet":
            _wrong("ex_to", ("""    if dtype is not out.dtype and out.device == CPU:
        out = dispatch("cast", out, dtype)
""", "")),
        "the device is left out of the _to_copy call: to('emu') stays on the CPU":
            _wrong("ex_to", ('return dispatch("_to_copy", self, dtype, device)', 'return dispatch("_to_copy", self, dtype)')),
    },
    "ex_launch": {
        "floor instead of ceiling: the ragged last block is left out":
            _wrong("ex_launch", ("blocks = min((n + threads - 1) // threads, 2**31 - 1)",
                                 "blocks = min(n // threads, 2**31 - 1)")),
        "a grid of zero blocks for nothing to do, instead of no launch":
            _wrong("ex_launch", ("""    if n == 0:
        return None
""", "")),
        "rows across x and columns down y":
            _wrong("ex_launch", ("grid = ((cols + bx - 1) // bx, (rows + by - 1) // by)",
                                 "grid = ((rows + bx - 1) // bx, (cols + by - 1) // by)")),
    },
    "ex_fill": {
        "no bound check: the ragged last block writes past the tensor":
            _wrong("ex_fill", ("""    if (i < n)
        out[i] = value;""", """    out[i] = value;""")),
        "the value passed as a Python number (a GPU would read it as a double)":
            _wrong("ex_fill", ("scalar(value, out.dtype)", "value")),
        "each thread fills the element of its thread index only (blockIdx forgotten)":
            _wrong("ex_fill", ("long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;",
                               "long long i = threadIdx.x;")),
    },
    "ex_map": {
        "no grid-stride loop, hidden by a launch that ignores max_blocks (a grid as large as the tensor)": {
            "code": _wrong("ex_map", ("""    for (long long i = first_index(blockIdx.x, blockDim.x, threadIdx.x); i < n; i += step)
        out[i]""", """    long long i = first_index(blockIdx.x, blockDim.x, threadIdx.x);
    if (i < n)
        out[i]"""), ("launch_1d(out.numel(), max_blocks=max_blocks)", "launch_1d(out.numel())")),
            "shows": "max_blocks"},
        "the launch ignores max_blocks":
            _wrong("ex_map", ("launch_1d(out.numel(), max_blocks=max_blocks)", "launch_1d(out.numel())")),
        "no grid-stride loop: one element per thread, the rest never written":
            _wrong("ex_map", ("""    for (long long i = first_index(blockIdx.x, blockDim.x, threadIdx.x); i < n; i += step)
        out[i]""", """    long long i = first_index(blockIdx.x, blockDim.x, threadIdx.x);
    if (i < n)
        out[i]""")),
        "the element index computed in 32 bits":
            _wrong("ex_map", ("return (long long)block * threads + thread;", "return block * threads + thread;")),
        "the grid's size computed in 32 bits":
            _wrong("ex_map", ("return (long long)threads * blocks;", "return threads * blocks;")),
    },
    "ex_strided": {
        "the launch ignores max_blocks":
            _wrong("ex_strided", ("launch_1d(out.numel(), max_blocks=max_blocks)", "launch_1d(out.numel())")),
        "the index split from the first dim instead of the last":
            _wrong("ex_strided", ("for (int d = ndim - 1; d >= 0; --d) {", "for (int d = 0; d < ndim; ++d) {")),
        "the output written at i, as if it were contiguous":
            _wrong("ex_strided", ("out[offset_of(i, ndim, sizes, meta + ndim)]", "out[i]")),
        "the offset accumulated in 32 bits":
            _wrong("ex_strided", ("long long offset = 0;", "int offset = 0;")),
        # Judged on the next exercise, which uses launch_map_strided: its feedback names the exercise to do
        # first, not the NameError (issue 17, feedback order).
        "the answer cell does not run (a syntax error), so exercise 8's tests find no launch_map_strided": {
            "code": solution("05_backend", "ex_strided").replace("def launch_map_strided(", "def launch_map_strided(:", 1),
            "judged": "ex_binary",
            "shows": "needs exercise 7 (ex_strided) first",
        },
    },
    "ex_binary": {
        "no broadcasting: the operands are used in their own shapes":
            _wrong("ex_binary", ("operands = [x.to(dtype).expand(shape) for x in operands]",
                                 "operands = [x.to(dtype) for x in operands]")),
        "comparisons return numbers of the compute dtype instead of bools":
            _wrong("ex_binary", ("out = empty_on(shape, bool_ if op in COMPARISONS else dtype, device)",
                                 "out = empty_on(shape, dtype, device)")),
        "integer division stays integer":
            _wrong("ex_binary", ("""        if op == "div" and not dtype.is_floating_point:
            dtype = float32
""", "")),
    },
    "ex_sum_tree": {
        "a block for every row, max_blocks ignored":
            _wrong("ex_sum_tree", ("(min(rows, max_blocks),)", "(rows,)")),
        "no __syncthreads() between the steps of the tree":
            _wrong("ex_sum_tree", ("""                partial[threadIdx.x] += partial[threadIdx.x + s];
            __syncthreads();""", """                partial[threadIdx.x] += partial[threadIdx.x + s];""")),
        "each thread adds one element of the row: the tail is dropped":
            _wrong("ex_sum_tree", ("""        for (long long c = threadIdx.x; c < cols; c += blockDim.x)
            acc += x[row * cols + c];""", """        if (threadIdx.x < cols)
            acc = x[row * cols + threadIdx.x];""")),
        "each block sums one row: the rows beyond the grid are never summed":
            _wrong("ex_sum_tree", ("for (long long row = blockIdx.x; row < rows; row += gridDim.x) {",
                                   "for (long long row = blockIdx.x; row < rows; row += rows) {")),
        "the barrier inside `if (t < s)`: not every thread reaches it":
            _wrong("ex_sum_tree", ("""            if (threadIdx.x < s)
                partial[threadIdx.x] += partial[threadIdx.x + s];
            __syncthreads();""", """            if (threadIdx.x < s) {
                partial[threadIdx.x] += partial[threadIdx.x + s];
                __syncthreads();
            }""")),
    },
    "ex_sum_warp": {
        "a block for every row, max_blocks ignored":
            _wrong("ex_sum_warp", ("(min(rows, max_blocks),)", "(rows,)")),
        "no barrier before the next row overwrites `partial`":
            _wrong("ex_sum_warp", ("""                out[row] = acc;
        }
        __syncthreads();""", """                out[row] = acc;
        }""")),
        "the shuffles stop one step early":
            _wrong("ex_sum_warp", ("for (int offset = 16; offset > 0; offset /= 2)",
                                   "for (int offset = 16; offset > 1; offset /= 2)")),
    },
    "ex_matmul_naive": {
        "no bound check: threads of the ragged edge write past C":
            _wrong("ex_matmul_naive", ("if (row < M && col < N) {", "if (true) {")),
        "a read as if it were contiguous (its strides ignored)":
            _wrong("ex_matmul_naive", ("a[row * sa0 + k * sa1]", "a[row * K + k]")),
        "the grid's x over the rows and y over the columns":
            _wrong("ex_matmul_naive", ("launch_2d(a.shape[0], b.shape[1], (16, 16))",
                                       "launch_2d(b.shape[1], a.shape[0], (16, 16))")),
    },
    "ex_matmul_tiled": {
        "no __syncthreads() after the products: the next tile overwrites one still in use":
            _wrong("ex_matmul_tiled", ("""                acc[r] += As[threadIdx.y + r * TILE_ROWS][k] * bk;
        }
        __syncthreads();""", """                acc[r] += As[threadIdx.y + r * TILE_ROWS][k] * bk;
        }""")),
        "no __syncthreads() after the loads":
            _wrong("ex_matmul_tiled", ("""        }
        __syncthreads();
        for (int k = 0; k < TILE; ++k) {""", """        }
        for (int k = 0; k < TILE; ++k) {""")),
        "tiles that stick out of A are loaded anyway (no zero padding)":
            _wrong("ex_matmul_tiled", ("(arow < M && acol < K) ? a[arow * sa0 + acol * sa1] : T(0)",
                                       "a[arow * sa0 + acol * sa1]")),
    },
    "ex_matmul_blocked": {
        "no __syncthreads() before the next tiles are loaded":
            _wrong("ex_matmul_blocked", ("""                    acc[i][j] += af[i] * bf[j];
        }
        __syncthreads();""", """                    acc[i][j] += af[i] * bf[j];
        }""")),
        "a thread's columns taken 8 consecutive instead of 16 apart, but written 16 apart":
            _wrong("ex_matmul_blocked", ("bf[j] = Bs[k][threadIdx.x + 16 * j];", "bf[j] = Bs[k][threadIdx.x * 8 + j];")),
        "B's tile not padded with zeros past the last row of B":
            _wrong("ex_matmul_blocked", ("(brow < K && bcol < N)", "(bcol < N)")),
    },
    "ex_softmax": {
        "a block for every row, max_blocks ignored":
            _wrong("ex_softmax", ("(min(rows, max_blocks),)", "(rows,)")),
        "no maximum subtracted: exp overflows":
            _wrong("ex_softmax", ("sum += exp(in[c] - m);", "sum += exp(in[c]);"),
                   ("o[c] = log_softmax ? in[c] - m - log(sum) : exp(in[c] - m) / sum;",
                    "o[c] = log_softmax ? in[c] - log(sum) : exp(in[c]) / sum;")),
        "the running maximum starts at 0, not at the row's first element (a row far below 0 gives 0 / 0)":
            _wrong("ex_softmax", ("T m = in[0];", "T m = 0;")),
        "no barrier between reading the maximum and writing the sums into `partial`":
            _wrong("ex_softmax", ("""        m = partial[0];
        __syncthreads();""", """        m = partial[0];""")),
    },
    "ex_mlp": {
        "the mean divides by the batch size, ignored samples included":
            _wrong("ex_mlp", ('return total if reduction == "sum" else total / counted.sum()',
                              'return total if reduction == "sum" else total / labels.shape[0]')),
        "ignored samples keep their loss":
            _wrong("ex_mlp", ("losses = where(counted, -where(one_hot, scores, 0.0).sum(1), 0.0)",
                              "losses = -where(one_hot, scores, 0.0).sum(1)")),
        "the one-hot mask multiplied in: -inf * 0 is nan":
            _wrong("ex_mlp", ("-where(one_hot, scores, 0.0).sum(1)", "-(scores * one_hot).sum(1)")),
        "the loss of one sample (C,) with reduction='none' has shape (1,), not ()":
            _wrong("ex_mlp", ("return losses.reshape(()) if log_probs.dim() == 1 else losses", "return losses")),
        "the gradient at the target is +grad, not -grad":
            _wrong("ex_mlp", ("where(one_hot, -sample.unsqueeze(1), 0.0)", "where(one_hot, sample.unsqueeze(1), 0.0)")),
        "the mean's gradient is not divided by the count":
            _wrong("ex_mlp", ("""    if reduction == "mean":  # as torch: -grad / total_weight, times each weight (a total of 0 gives nan)
        share = share / counted.sum()
""", "")),
        "the class weights are left out":
            _wrong("ex_mlp", ("    if weight is not None:  # each sample's class weight (0 if ignored): its loss",
                              "    if False:  # each sample's class weight (0 if ignored): its loss"),
                   ("counted = valid if weight is None else", "counted = valid if True else")),
        "ignored samples get a gradient":
            _wrong("ex_mlp", ("sample = share.expand(labels.shape) * counted", "sample = share.expand(labels.shape)"),
                   ("where(valid.unsqueeze(1), where(one_hot, -sample.unsqueeze(1), 0.0), 0.0)",
                    "where(one_hot, -sample.unsqueeze(1), 0.0)")),
    },
    "ex_mode": {
        "the fallback does not exclude its key while the operator runs: the kernels' own calls are logged":
            _wrong("ex_mode", ("""    with ExcludeDispatchKeys(DispatchKey.Python):
        return redispatch(op, DispatchKey.Python, *args, **kwargs)""",
                               "    return redispatch(op, DispatchKey.Python, *args, **kwargs)")),
        "the fallback redispatches below Autograd, not below its own key, with its key still in: it calls itself":
            _wrong("ex_mode", ("""    with ExcludeDispatchKeys(DispatchKey.Python):
        return redispatch(op, DispatchKey.Python, *args, **kwargs)""",
                               "    return redispatch(op, DispatchKey.Autograd, *args, **kwargs)")),
        "__exit__ leaves the key in the include set: the mode goes on logging after the block":
            _wrong("ex_mode", ("        self.including.__exit__(exc_type, exc_value, traceback)\n", "")),
        "__exit__ takes the key out instead of putting back what was there: an outer mode stops logging":
            _wrong("ex_mode", ("        self.including.__exit__(exc_type, exc_value, traceback)\n",
                               "        LOCAL_KEYS.included &= ~DispatchKey.Python.bit\n")),
        "the fallback logs in the outermost mode, not the current one":
            _wrong("ex_mode", ("MODE_STACK[-1].log.append(op)", "MODE_STACK[0].log.append(op)")),
        "__enter__ returns the mode, not its log":
            _wrong("ex_mode", ("        return self.log\n", "        return self\n")),
    },
}
