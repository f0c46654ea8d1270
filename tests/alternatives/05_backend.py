"""Correct answers to chapter 05 written differently from the course's solution.

ALTERNATIVES = {what is different: {exercise: the cell's code}}; see tests/chapters/test_alternative_solutions.py.
Cells with given parts are the solution cell with its solved parts rewritten: `_rewrite` replaces exact
text, `_replace_between` the code between two given lines (a kernel's body).
"""
from __future__ import annotations

from solution_text import rewrite, solution


def _rewrite(code: str, *replacements: tuple[str, str]) -> str:
    return rewrite(code, *replacements, what="alternative")


def _replace_between(code: str, start: str, end: str, new: str) -> str:
    """code with what lies between the line `start` and the next line `end` replaced by `new`."""
    i = code.index(start) + len(start)
    j = code.index(end, i)
    return code[:i] + new + code[j:]


# One pass over the row keeps a running maximum m and the sum s of exp(x - m), rescaling s whenever m grows;
# the block then merges the threads' (m, s) pairs in a tree. A thread without elements holds (x[0], 0).
_ONLINE_SOFTMAX = _replace_between(solution("05_backend", "ex_softmax"), "    __shared__ T partial[SOFTMAX_THREADS];\n", "\n}\n", r"""
    __shared__ T sums[SOFTMAX_THREADS];
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* in = x + row * cols;
        T m = in[0], s = 0;
        for (long long c = threadIdx.x; c < cols; c += blockDim.x) {
            T v = in[c];
            if (v > m) {
                s = s * exp(m - v) + 1;
                m = v;
            } else {
                s += exp(v - m);
            }
        }
        partial[threadIdx.x] = m;
        sums[threadIdx.x] = s;
        __syncthreads();
        for (int k = blockDim.x / 2; k > 0; k /= 2) {
            if (threadIdx.x < k) {
                T m1 = partial[threadIdx.x], m2 = partial[threadIdx.x + k];
                T big = max(m1, m2);
                sums[threadIdx.x] = sums[threadIdx.x] * exp(m1 - big) + sums[threadIdx.x + k] * exp(m2 - big);
                partial[threadIdx.x] = big;
            }
            __syncthreads();
        }
        m = partial[0];
        s = sums[0];
        __syncthreads();
        T log_s = log(s);
        for (long long c = threadIdx.x; c < cols; c += blockDim.x)
            out[row * cols + c] = log_softmax ? in[c] - m - log_s : exp(in[c] - m) / s;
    }""".lstrip("\n"))

_DEVICE_BY_A_PATTERN = _rewrite(solution("05_backend", "ex_device"), ('''DEVICE_TYPES = ("cpu", "cuda", "emu")''', '''import re

DEVICE_TYPES = ("cpu", "cuda", "emu")
DEVICE_PATTERN = re.compile(r"([A-Za-z_]+)(?::(0|[1-9][0-9]*))?", re.ASCII)'''), ('''        elif isinstance(type, str):
            text = type
            if not text:
                raise RuntimeError("Device string must not be empty")
            name, colon, number = text.partition(":")
            if not name or not all(c.isascii() and (c.isalpha() or c == "_") for c in name):
                raise RuntimeError(f"Invalid device string: '{text}'")
            if colon:
                if not number or not number.isascii() or not number.isdigit() or (number[0] == "0" and len(number) > 1):
                    raise RuntimeError(f"Invalid device string: '{text}'")
                if index is not None:
                    raise RuntimeError(f"type (string) must not include an index because index was passed "
                                       f"explicitly: {text}")
                index = int(number)
            if name not in DEVICE_TYPES:
                raise RuntimeError(f"Expected one of {', '.join(DEVICE_TYPES)} device type at start of device "
                                   f"string: {text}")
            type = name''', '''        elif isinstance(type, str):
            found = DEVICE_PATTERN.fullmatch(type)
            if found is None:
                raise RuntimeError(f"{type!r} is not a device: a type, then maybe ':' and an index")
            name, number = found.groups()
            if number is not None:
                if index is not None:
                    raise RuntimeError(f"{type!r} has an index, and index={index} was given too")
                index = int(number)
            if name not in DEVICE_TYPES:
                raise RuntimeError(f"unknown device type {name!r}; picotorch has {DEVICE_TYPES}")
            type = name'''), ('''        return self.type == other.type and self.index == other.index''',
                             '''        return (self.type, self.index) == (other.type, other.index)'''))

_LAUNCH_WITH_CEIL = _rewrite(solution("05_backend", "ex_launch"), ('''    if not 1 <= threads <= 1024:
        raise ValueError(f"a block has 1 to 1024 threads, not {threads}")
    if n == 0:
        return None
    blocks = min((n + threads - 1) // threads, 2**31 - 1)
    if max_blocks is not None:
        blocks = min(blocks, max_blocks)
    return (blocks,), (threads,)''', '''    if threads < 1 or threads > 1024:
        raise ValueError(f"threads={threads}: CUDA blocks hold 1 to 1024 threads")
    if not n:
        return None
    limits = [math.ceil(n / threads), 2**31 - 1] + ([max_blocks] if max_blocks is not None else [])
    return (min(limits),), (threads,)'''))

# The tree the other way round: neighbours first (partial[i] += partial[i + s] for i a multiple of 2s).
_SUM_TREE_INTERLEAVED = _rewrite(solution("05_backend", "ex_sum_tree"), ('''        for (int s = blockDim.x / 2; s > 0; s /= 2) {
            if (threadIdx.x < s)
                partial[threadIdx.x] += partial[threadIdx.x + s];
            __syncthreads();
        }''', '''        for (int s = 1; s < blockDim.x; s *= 2) {
            if (threadIdx.x % (2 * s) == 0)
                partial[threadIdx.x] += partial[threadIdx.x + s];
            __syncthreads();
        }'''))

_MODE_BY_HAND = _rewrite(
    solution("05_backend", "ex_mode"),
    ("""        self.including = IncludeDispatchKeys(DispatchKey.Python)
        self.including.__enter__()
        MODE_STACK.append(self)
        return self.log""", """        self.previous = LOCAL_KEYS.included  # the include set by hand, not through the guard
        LOCAL_KEYS.included = self.previous | DispatchKey.Python.bit
        MODE_STACK.append(self)
        return self.log"""),
    ("""        MODE_STACK.pop()
        self.including.__exit__(exc_type, exc_value, traceback)
        return False""", """        MODE_STACK.remove(self)
        LOCAL_KEYS.included = self.previous"""),
    ("""    MODE_STACK[-1].log.append(op)
    with ExcludeDispatchKeys(DispatchKey.Python):
        return redispatch(op, DispatchKey.Python, *args, **kwargs)""", """    mode = MODE_STACK.pop()  # torch's way: the mode is off while its handler runs
    mode.log.append(op)
    excluded = LOCAL_KEYS.excluded
    LOCAL_KEYS.excluded = excluded | DispatchKey.Python.bit
    try:
        return redispatch(op, DispatchKey.Python, *args, **kwargs)
    finally:
        LOCAL_KEYS.excluded = excluded
        MODE_STACK.append(mode)"""))

# The devices collected in a list first (CPU scalars left out), the key from a table, another message, and the
# registration through functools.wraps with the check in a helper.
_DISPATCH_BY_SETS = "import functools\n\n" + _rewrite(solution("05_backend", "ex_dispatch"), (
    """    kind = Device(device).type
    return DispatchKey.CPU.bit if kind == "cpu" else DispatchKey.CUDA.bit  # "cuda", and "emu": the CUDA kernels""",
    """    keys = {"cpu": DispatchKey.CPU, "cuda": DispatchKey.CUDA, "emu": DispatchKey.CUDA}
    return keys[Device(device).type].bit"""), (
    """    found = None
    for a in args:
        if isinstance(a, Tensor):
            d = a.device
            if d == CPU and a.dim() == 0:
                continue  # a CPU scalar: read as a number by any device's kernel
            if found is None:
                found = d
            elif d != found:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                                   f"{found} and {d}!")
    return CPU if found is None else found""", """    tensors = [a for a in args if isinstance(a, Tensor)]
    counted = [t.device for t in tensors if not (t.dim() == 0 and t.device.type == "cpu")]
    if not counted:
        return CPU
    for d in counted[1:]:
        if not d == counted[0]:
            raise RuntimeError(f"Expected all tensors to be on the same device, but got {d} beside {counted[0]}")
    return counted[0]"""), (
    """    def put(kernel):
        def checked(*args, **kwargs):
            common_device(*args)
            return kernel(*args, **kwargs)
        register_kernel(op, DispatchKey.CUDA)(checked)
        return kernel
    return put""", """    def put(kernel):
        @functools.wraps(kernel)
        def checked(*args, **kwargs):
            _check_devices(args)
            return kernel(*args, **kwargs)
        register_kernel(op, DispatchKey.CUDA)(checked)
        return kernel
    return put


def _check_devices(args):
    common_device(*args)"""))

ALTERNATIVES = {
    "the device check over a list of devices, the key from a table, a wrapped registration": {
        "ex_dispatch": _DISPATCH_BY_SETS,
    },
    "a mode that keeps the include and exclude sets by hand and pops itself while it runs": {
        "ex_mode": _MODE_BY_HAND,
    },
    "an online softmax: the maximum and the sum in one pass, merged pairwise": {
        "ex_softmax": _ONLINE_SOFTMAX,
    },
    "a device parsed by a regular expression, launch geometry by math.ceil, an interleaved sum tree": {
        "ex_device": _DEVICE_BY_A_PATTERN,
        "ex_launch": _LAUNCH_WITH_CEIL,
        "ex_sum_tree": _SUM_TREE_INTERLEAVED,
    },
}
