"""Typical wrong answers to chapter 01, one dict per exercise: {what is wrong: the cell's code}.

tests/chapters/test_chapters.py puts each one in place of the exercise's solution cell,
runs the source notebook (hidden tests included) and expects that exercise to fail.

Each mutant is the exercise's own solution cell with one mistake put in (`_mutate`
checks that the text it replaces occurs exactly once), so the mutants follow the
solution as it changes and each one differs from it in exactly the way its name says.
"""
from solution_text import rewrite, solution


def _mutate(exercise: str, *replacements: tuple[str, str]) -> str:
    return rewrite(solution("01_tensor", exercise), *replacements, what=f"mutant of {exercise}")


# A dims argument wrapped, then checked for repeats (the solutions), and the same check made before wrapping.
_REPEATS = """{pad}{wrapped} = [wrap_dim(d, {n}) for d in {given}]
{pad}for d in {wrapped}:
{pad}    if {wrapped}.count(d) > 1:
{pad}        raise RuntimeError(f"dim {{d}} appears multiple times in the list of dims")
"""
_REPEATS_FIRST = """{pad}given = {given}
{pad}for d in given:
{pad}    if given.count(d) > 1:
{pad}        raise RuntimeError(f"dim {{d}} appears multiple times in the list of dims")
{pad}{wrapped} = [wrap_dim(d, {n}) for d in given]
"""


def _indented(template: str, indent: int, **fields) -> str:
    return template.format(pad=" " * indent, **fields)


MUTANTS = {
    "ex_strides": {
        "column-major strides (the first dim varies fastest)": _mutate(
            "ex_strides", ("for size in reversed(tuple(shape)):", "for size in tuple(shape):"),
            ("strides = (step,) + strides", "strides = strides + (step,)")),
        "a dim of size 0 zeroes the strides before it": _mutate(
            "ex_strides", ("if size > 1:", "if size != 1:")),
        "storage_position forgets the storage offset": _mutate(
            "ex_strides", ("position = offset\n", "position = 0\n")),
    },
    "ex_tensor_basics": {
        "is_contiguous also checks the strides of size-1 dims": _mutate(
            "ex_tensor_basics", ("            if size != 1:\n                if stride != expected:",
                                 "            if True:\n                if stride != expected:")),
        "is_contiguous assumes row-major strides (checks only the last stride)": _mutate(
            "ex_tensor_basics", ("        if self.numel() == 0:\n            return True\n",
                                 "        return not self._stride or self._stride[-1] == 1\n")),
        "a 0-dim tensor has no elements": _mutate(
            "ex_tensor_basics", ("return math.prod(self._shape)", "return math.prod(self._shape) if self._shape else 0")),
        "is_contiguous forgets that a tensor with no elements is contiguous": _mutate(
            "ex_tensor_basics", ("        if self.numel() == 0:\n            return True\n", "")),
    },
    "ex_copies": {
        "contiguous copies even when the tensor already is contiguous": _mutate(
            "ex_copies", ("        if self.is_contiguous():\n            return self\n", "")),
        "contiguous returns a view where torch copies": _mutate(
            "ex_copies", ("        if self.is_contiguous():\n            return self\n",
                          "        return self\n")),
        "clone always makes row-major strides": _mutate(
            "ex_copies", ("dense_strides_like(self._shape, self._stride), 0)", "contiguous_strides(self._shape), 0)")),
        "clone returns a view where torch copies": _mutate(
            "ex_copies", ("        out = Tensor(Storage.empty(self.numel(), self.dtype), self._shape,",
                          "        return Tensor(self._storage, self._shape, self._stride, self._offset)\n"
                          "        out = Tensor(Storage.empty(self.numel(), self.dtype), self._shape,")),
        "item of a tensor with several elements returns the first": _mutate(
            "ex_copies", ("        if self.numel() != 1:\n            raise RuntimeError(", "        if False:\n            raise RuntimeError(")),
        "item forgets the storage offset": _mutate(
            "ex_copies", ("return self._storage.data[self._offset].item()", "return self._storage.data[0].item()")),
        "tolist assumes row-major strides": _mutate(
            "ex_copies", ("data, shape, stride = self._storage.data, self._shape, self._stride",
                          "data, shape, stride = self._storage.data, self._shape, contiguous_strides(self._shape)")),
    },
    "ex_view": {
        "view assumes row-major strides (no check, wrong after a transpose)": _mutate(
            "ex_view", ("        stride = view_strides(self._shape, self._stride, shape)\n        if stride is None:\n"
                        "            raise RuntimeError(",
                        "        stride = contiguous_strides(shape)\n        if stride is None:\n"
                        "            raise RuntimeError(")),
        "view forgets the storage offset": _mutate(
            "ex_view", ("            raise RuntimeError(\"view size is not compatible with input tensor's size and stride (at least one \"\n"
                        "                               \"dimension spans across two contiguous subspaces). Use .reshape(...) instead.\")\n"
                        "        return Tensor(self._storage, shape, stride, self._offset)",
                        "            raise RuntimeError(\"view size is not compatible\")\n"
                        "        return Tensor(self._storage, shape, stride, 0)")),
        "reshape always copies (a copy where a view was due)": _mutate(
            "ex_view", ("        if stride is not None:\n            return Tensor(self._storage, shape, stride, self._offset)\n"
                        "        return self.contiguous().view(shape)",
                        "        return self.clone().contiguous().view(shape)")),
        "reshape returns a view where torch copies": _mutate(
            "ex_view", ("        return self.contiguous().view(shape)",
                        "        return Tensor(self._storage, shape, contiguous_strides(shape), self._offset)")),
        "-1 inferred without checking that the sizes divide the elements": _mutate(
            "ex_view", ("if numel == known or (inferred is not None and known > 0 and numel % known == 0):",
                        "if numel == known or (inferred is not None and known > 0):")),
        "infer_size accepts two -1s (the last one is inferred)": _mutate(
            "ex_view", ("            if inferred is not None:\n                raise RuntimeError(\"only one dimension can be inferred\")\n", "")),
        "infer_size accepts a negative size other than -1": _mutate(
            "ex_view", ("        elif size < 0:\n            raise RuntimeError(", "        elif False:\n            raise RuntimeError(")),
        "a -1 among no elements is not refused as ambiguous (0 // 0)": _mutate(
            "ex_view", ("        if known == 0:\n            raise RuntimeError(", "        if False:\n            raise RuntimeError(")),
        "view_strides without the case of a 0-dim old shape": _mutate(
            "ex_view", ("    if not old_shape:\n        return (1,) * len(new_shape)\n", "")),
        "view_strides without the case of no elements": _mutate(
            "ex_view", ("    if math.prod(old_shape) == 0:\n        return old_stride if old_shape == new_shape else contiguous_strides(new_shape)\n", "")),
        "no elements: contiguous strides even in the same shape": _mutate(
            "ex_view", ("return old_stride if old_shape == new_shape else contiguous_strides(new_shape)", "return contiguous_strides(new_shape)")),
    },
    "ex_transpose": {
        "transpose swaps the shape but keeps row-major strides": _mutate(
            "ex_transpose", ("        stride[d0], stride[d1] = stride[d1], stride[d0]\n", "")),
        "permute applies the inverse permutation": _mutate(
            "ex_transpose", ("return Tensor(self._storage, [self._shape[d] for d in dims], [self._stride[d] for d in dims], self._offset)",
                             "inverse = [dims.index(i) for i in range(n)]\n"
                             "        return Tensor(self._storage, [self._shape[d] for d in inverse], [self._stride[d] for d in inverse], self._offset)")),
        "permute accepts repeated dims": _mutate(
            "ex_transpose", ("        if len(set(dims)) != n:\n            raise RuntimeError(\"permute(): duplicate dims are not allowed.\")\n", "")),
        "permute looks for repeated dims before wrapping them, so (0, -2) on 2 dims passes": _mutate(
            "ex_transpose", ("        dims = [wrap_dim(d, n) for d in dims]\n        if len(set(dims)) != n:\n"
                             "            raise RuntimeError(\"permute(): duplicate dims are not allowed.\")\n",
                             "        if len(set(dims)) != n:\n"
                             "            raise RuntimeError(\"permute(): duplicate dims are not allowed.\")\n"
                             "        dims = [wrap_dim(d, n) for d in dims]\n")),
        "permute does not count the dims (too many are accepted)": _mutate(
            "ex_transpose", ("        if len(dims) != n:\n            raise RuntimeError(", "        if False:\n            raise RuntimeError(")),
        "mT of a 1-dim tensor is not refused": _mutate(
            "ex_transpose", ("        if self.dim() < 2:\n            raise RuntimeError(", "        if False:\n            raise RuntimeError(")),
        "T swaps only the last two dims (mT)": _mutate(
            "ex_transpose", ("return self.permute(*range(self.dim() - 1, -1, -1))",
                             "return self.transpose(-2, -1) if self.dim() >= 2 else self")),
        "transpose copies (a copy where a view was due)": _mutate(
            "ex_transpose", ("        return Tensor(self._storage, shape, stride, self._offset)",
                             "        return Tensor(self._storage, shape, stride, self._offset).clone()")),
    },
    "ex_unsqueeze": {
        "unsqueeze gives the new dim stride 1": _mutate(
            "ex_unsqueeze", ("new_stride = self._shape[d] * self._stride[d] if d < n else 1", "new_stride = 1")),
        "squeeze(dim) removes the dim even when its size is not 1": _mutate(
            "ex_unsqueeze", ("keep = [d for d in range(n) if not (d in dims and self._shape[d] == 1)]",
                             "keep = [d for d in range(n) if not (d in dims and (dim is not None or self._shape[d] == 1))]")),
        "squeeze looks for repeated dims before wrapping them, so (0, -3) on 3 dims passes": _mutate(
            "ex_unsqueeze", (_indented(_REPEATS, wrapped="dims", given="(dim if isinstance(dim, (tuple, list)) else (dim,))",
                                             n="n", indent=12),
                             _indented(_REPEATS_FIRST, wrapped="dims", given="(dim if isinstance(dim, (tuple, list)) else (dim,))",
                                                   n="n", indent=12))),
        "unsqueeze wraps dim among the tensor's own dims (ndim, not ndim + 1)": _mutate(
            "ex_unsqueeze", ("d = wrap_dim(dim, n + 1)", "d = wrap_dim(dim, n)")),
        "squeeze accepts a dim named twice": _mutate(
            "ex_unsqueeze", ("if dims.count(d) > 1:", "if False:")),
        "flatten with start_dim == end_dim makes a new tensor": _mutate(
            "ex_unsqueeze", ("        if start == end:\n            return self\n", "")),
        "a 0-dim tensor flattens to shape ()": _mutate(
            "ex_unsqueeze", ("        if n == 0:\n            return self.reshape(1)\n", "")),
        "flatten returns a view where torch copies": _mutate(
            "ex_unsqueeze", ("return self.reshape(self._shape[:start] + (merged,) + self._shape[end + 1:])",
                             "new_shape = self._shape[:start] + (merged,) + self._shape[end + 1:]\n"
                             "        return Tensor(self._storage, new_shape, contiguous_strides(new_shape), self._offset)")),
    },
    "ex_narrow": {
        "narrow forgets the storage offset it starts from": _mutate(
            "ex_narrow", ("self._offset + start * self._stride[d])", "start * self._stride[d])")),
        "narrow moves the offset by start, ignoring the stride": _mutate(
            "ex_narrow", ("self._offset + start * self._stride[d])", "self._offset + start)")),
        "as_strided without storage_offset starts at 0": _mutate(
            "ex_narrow", ("offset = self._offset if storage_offset is None else storage_offset",
                          "offset = 0 if storage_offset is None else storage_offset")),
        "narrow of a 0-dim tensor is not refused": _mutate(
            "ex_narrow", ("        if self.dim() == 0:\n            raise RuntimeError(", "        if False:\n            raise RuntimeError(")),
        "narrow accepts a negative length": _mutate(
            "ex_narrow", ("        if length < 0:\n            raise RuntimeError(", "        if False:\n            raise RuntimeError(")),
        "narrow does not check that start is in [-size, size]": _mutate(
            "ex_narrow", ("        if not -size <= start <= size:\n", "        if False:\n")),
        "a negative start is not counted from the end": _mutate(
            "ex_narrow", ("        if start < 0:\n            start += size\n", "")),
        "as_strided accepts sizes and strides of different lengths": _mutate(
            "ex_narrow", ("        if len(size) != len(stride):\n            raise RuntimeError(",
                          "        if False:\n            raise RuntimeError(")),
        "as_strided accepts negative strides": _mutate(
            "ex_narrow", ("        if any(s < 0 for s in stride):\n", "        if False:\n")),
        "as_strided checks the bounds of a view with no elements": _mutate(
            "ex_narrow", ("        if all(n > 0 for n in size):\n", "        if True:\n")),
        "narrow does not check that the window fits": _mutate(
            "ex_narrow", ("        if start + length > size:\n", "        if False:\n")),
    },
    "ex_indexing": {
        "a slice's step does not multiply the stride": _mutate(
            "ex_indexing", ("stride.append(self._stride[d] * step)", "stride.append(self._stride[d])")),
        "an int index forgets to move the offset": _mutate(
            "ex_indexing", ("offset += (k + size if k < 0 else k) * self._stride[d]", "pass")),
        "None gets stride 1": _mutate(
            "ex_indexing", ("stride.append(self._shape[d] * self._stride[d] if d < n else 1)", "stride.append(1)")),
        "an int index out of range is not refused": _mutate(
            "ex_indexing", ("                if not -size <= k < size:\n", "                if False:\n")),
        "a negative step is accepted (as Python reverses)": _mutate(
            "ex_indexing", ("if isinstance(k, slice) and k.step is not None and k.step <= 0:",
                            "if isinstance(k, slice) and k.step == 0:")),
        "... is ignored": _mutate(
            "ex_indexing", ("key = key[:i] + (slice(None),) * (n - eaten) + tuple(k for k in key[i + 1:] if k is not Ellipsis)",
                            "key = tuple(k for k in key if k is not Ellipsis)")),
    },
    "ex_broadcast": {
        "broadcasting from the left": _mutate(
            "ex_broadcast", ("        for i in range(1, len(shape) + 1):\n            size = shape[-i]\n",
                             "        for i in range(ndim, ndim - len(shape), -1):  # aligned on the left\n"
                             "            size = shape[ndim - i]\n")),
        "a size 0 broadcasts against any size": _mutate(
            "ex_broadcast", ("            if size == 1:\n                continue", "            if size in (0, 1):\n                continue")),
        "expand copies the data instead of using stride 0": _mutate(
            "ex_broadcast", ("        return Tensor(self._storage, shape, stride, self._offset)",
                             "        return Tensor(self._storage, shape, stride, self._offset).clone()")),
        "-1 accepted in a new leading dim": _mutate(
            "ex_broadcast", ("                if d < 0:\n                    raise RuntimeError(", "                if False:\n                    raise RuntimeError(")),
        "expand accepts fewer sizes than dims": _mutate(
            "ex_broadcast", ("        if m < n:\n", "        if False:\n")),
        "a 0-dim tensor expands with contiguous strides": _mutate(
            "ex_broadcast", ("return Tensor(self._storage, sizes, (0,) * m, self._offset)",
                             "return Tensor(self._storage, sizes, contiguous_strides(sizes), self._offset)")),
        "a new leading dim always gets stride 0": _mutate(
            "ex_broadcast", ("step = self._stride[d] if d >= 0 else shape[i + 1] * stride[i + 1]",
                             "step = self._stride[d] if d >= 0 else 0")),
    },
    "ex_promotion": {
        "a Python float is float64": _mutate(
            "ex_promotion", ("            kind, dtype = \"number\", float32", "            kind, dtype = \"number\", float64")),
        "0-dim tensors count as much as the others": _mutate(
            "ex_promotion", ("kind, dtype = (\"dim\" if x.dim() > 0 else \"zero\"), x.dtype",
                             "kind, dtype = \"dim\", x.dtype")),
        "numbers never change the dtype of a tensor": _mutate(
            "ex_promotion", ("        if higher.category < lower.category:\n            return promote_types(higher, lower)\n", "")),
        "within one kind the first operand's dtype wins (no promotion)": _mutate(
            "ex_promotion", ("kinds[kind] = dtype if kinds[kind] is None else promote_types(kinds[kind], dtype)",
                             "kinds[kind] = dtype if kinds[kind] is None else kinds[kind]")),
        "a lighter kind of the same category still promotes": _mutate(
            "ex_promotion", ("if higher.category < lower.category:", "if higher.category <= lower.category:")),
        "a Python bool counts as int64": _mutate(
            "ex_promotion", ("            kind, dtype = \"number\", bool_", "            kind, dtype = \"number\", int64")),
        "can_cast allows float into int64": _mutate(
            "ex_promotion", ("return from_.category <= to.category", "return True")),
    },
    "ex_elementwise": {
        "reads the storage in row-major order, ignoring strides": _mutate(
            "ex_elementwise",
            ("x = a.numpy().astype(compute, copy=False) if",
             "x = a._storage.data[a._offset:a._offset + a.numel()].reshape(a.shape).astype(compute) if"),
            ("y = b.numpy().astype(compute, copy=False) if",
             "y = b._storage.data[b._offset:b._offset + b.numel()].reshape(b.shape).astype(compute) if")),
        "in place writes into a new tensor (the base does not change)": _mutate(
            "ex_elementwise", ("        self.numpy()[...] = result.numpy()\n        return self",
                               "        self._storage = result._storage\n        self._stride, self._offset = result._stride, result._offset\n"
                               "        return self")),
        "division of integers stays integer": _mutate(
            "ex_elementwise", ("        if op == \"div\" and not dtype.is_floating_point:\n            dtype = float32\n", "")),
        "exp of integers stays integer": _mutate(
            "ex_elementwise", ("dtype = float32 if op in FLOAT_RESULT and not self.dtype.is_floating_point else self.dtype",
                               "dtype = self.dtype")),
        "in place lets the tensor grow to the broadcast shape": _mutate(
            "ex_elementwise", ("        if result.shape != self._shape:\n", "        if False:\n")),
        "a Python number is first put in the tensor's dtype (2.5 becomes 2 next to an int64 tensor)": _mutate(
            "ex_elementwise", ("else compute.type(a)", "else compute.type(np.asarray(a).astype(b.dtype.numpy))"),
                              ("else compute.type(b)", "else compute.type(np.asarray(b).astype(a.dtype.numpy))")),
        "neg, abs and relu of a bool tensor are not refused": _mutate(
            "ex_elementwise", ("        if self.dtype is bool_ and op in (\"neg\", \"abs\", \"relu\"):\n",
                               "        if False:\n")),
        "a subtraction with a bool operand is not refused": _mutate(
            "ex_elementwise", ("        if op == \"sub\" and any(", "        if False and any(")),
        "a comparison gives the promoted dtype, not bool": _mutate(
            "ex_elementwise", ("bool_.numpy if op in COMPARISONS else compute", "compute")),
        "in place writes into an expanded tensor (one memory, several elements)": _mutate(
            "ex_elementwise", ("        if self.numel() and any(size > 1 and stride == 0",
                               "        if False and any(size > 1 and stride == 0")),
        "in place refuses an expanded tensor with no elements": _mutate(
            "ex_elementwise", ("        if self.numel() and any(size > 1 and stride == 0", "        if any(size > 1 and stride == 0")),
        "in place does not ask can_cast (a float result written into int64)": _mutate(
            "ex_elementwise", ("        if not can_cast(result.dtype, self.dtype):\n", "        if False:\n")),
        "NumPy's warnings are not silenced (the cell's np.errstate taken off): log(-1) and 1 / 0 warn": _mutate(
            "ex_elementwise", ("    @np.errstate(all=\"ignore\")\n    def _unary", "    def _unary"),
            ("    @np.errstate(all=\"ignore\")\n    def _binary", "    def _binary")),
        "the result takes the dtype of self, without promotion": _mutate(
            "ex_elementwise", ("        dtype = result_type(a, b)\n", "        dtype = self.dtype\n")),
    },
    "ex_reductions": {
        "keepdim ignored": _mutate(
            "ex_reductions", ("        if keepdim:  # the summed dims come back with size 1\n", "        if False:\n")),
        "the sum of an int64 tensor is float": _mutate(
            "ex_reductions", ("dtype = self.dtype if self.dtype.is_floating_point else int64",
                              "dtype = self.dtype if self.dtype.is_floating_point else float32")),
        "max(dim) returns the values only": _mutate(
            "ex_reductions", ("return MaxResult(from_numpy(np.asarray(values)), from_numpy(np.asarray(indices, np.int64)))",
                              "return from_numpy(np.asarray(values))")),
        "reduction_dims looks for repeated dims before wrapping them, so sum((1, -1)) passes": _mutate(
            "ex_reductions", (_indented(_REPEATS, wrapped="dims", given="(dim if isinstance(dim, (tuple, list)) else (dim,))",
                                              n="ndim", indent=4),
                              _indented(_REPEATS_FIRST, wrapped="dims", given="(dim if isinstance(dim, (tuple, list)) else (dim,))",
                                                    n="ndim", indent=4))),
        "a dim out of range wraps around (d % ndim) instead of IndexError": _mutate(
            "ex_reductions", ("dims = [wrap_dim(d, ndim) for d in", "dims = [d % max(ndim, 1) for d in")),
        "max() of no elements is not refused (NumPy's ValueError)": _mutate(
            "ex_reductions", ("            if self.numel() == 0:\n                raise RuntimeError(\"max(): ",
                              "            if False:\n                raise RuntimeError(\"max(): ")),
        "max(dim) of a dim of size 0 is not refused (NumPy's ValueError)": _mutate(
            "ex_reductions", ("        if self.dim() and self._shape[d] == 0:\n            raise IndexError(f\"max(): ",
                              "        if False:\n            raise IndexError(f\"max(): ")),
        "argmax of a bool tensor is not refused": _mutate(
            "ex_reductions", ("        if self.dtype is bool_:\n", "        if False:\n")),
        "argmax() of no elements is not refused (NumPy's ValueError)": _mutate(
            "ex_reductions", ("            if self.numel() == 0:\n                raise IndexError(\"argmax(): ",
                              "            if False:\n                raise IndexError(\"argmax(): ")),
        "mean of an integer tensor is not refused": _mutate(
            "ex_reductions", ("        if not self.dtype.is_floating_point:\n            raise RuntimeError(\"mean(): ",
                              "        if False:\n            raise RuntimeError(\"mean(): ")),
        "a repeated dim is summed once": _mutate(
            "ex_reductions", ("    for d in dims:\n        if dims.count(d) > 1:\n", "    for d in []:\n        if dims.count(d) > 1:\n")),
    },
    "ex_matmul": {
        "a 1-D operand's added dim is not removed": _mutate(
            "ex_matmul", ("        if self.dim() == 1:\n            out = out.squeeze(-2)\n", "")),
        "a 1-D right operand's added dim is not removed": _mutate(
            "ex_matmul", ("        if other.dim() == 1:\n            out = out.squeeze(-1)\n", "")),
        "a 0-dim operand is not refused": _mutate(
            "ex_matmul", ("        if self.dim() == 0 or other.dim() == 0:\n", "        if False:\n")),
        "the inner sizes are not checked (NumPy's ValueError)": _mutate(
            "ex_matmul", ("        if a.shape[-1] != b.shape[-2]:\n", "        if False:\n")),
        "batch dims must be equal (no broadcasting)": _mutate(
            "ex_matmul", ("        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])\n"
                          "        if a.shape[:-2] != batch:  # (two matrices, the common case, have no batch dims to expand)\n"
                          "            a = a.expand(batch + a.shape[-2:])\n"
                          "        if b.shape[:-2] != batch:\n            b = b.expand(batch + b.shape[-2:])\n",
                          "        if a.shape[:-2] != b.shape[:-2]:\n            raise RuntimeError('batch dims differ')\n")),
        "mixed dtypes promoted instead of refused": _mutate(
            "ex_matmul", ("        if self.dtype is not other.dtype:\n", "        if False:\n")),
    },
}
