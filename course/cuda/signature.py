"""Read a kernel's parameter list from its CUDA C source, and check the
arguments of a launch against it before anything runs.

A GPU takes a kernel's arguments as raw bytes: a Python float handed to a
``float`` parameter arrives as an 8-byte double and the kernel reads garbage
(and every parameter after it is shifted).  Nothing on the GPU notices.  So
each launch is checked here, on the host, against the C types the kernel
declares, and a mismatch is an error that names the parameter and the fix.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch

from course.cuda.errors import KernelArgumentError, KernelSourceError

# C scalar type (normalised spelling) -> the NumPy scalar type of the same
# bytes.  `long` is 64 bits on Linux for host and device alike.
SCALAR_TYPES: dict[str, type] = {
    "bool": np.bool_,
    "char": np.int8, "signed char": np.int8, "int8_t": np.int8,
    "unsigned char": np.uint8, "uint8_t": np.uint8,
    "short": np.int16, "short int": np.int16, "signed short": np.int16, "int16_t": np.int16,
    "unsigned short": np.uint16, "unsigned short int": np.uint16, "uint16_t": np.uint16,
    "int": np.int32, "signed": np.int32, "signed int": np.int32, "int32_t": np.int32,
    "unsigned": np.uint32, "unsigned int": np.uint32, "uint32_t": np.uint32,
    "long": np.int64, "long int": np.int64, "long long": np.int64, "long long int": np.int64,
    "signed long long": np.int64, "int64_t": np.int64, "ptrdiff_t": np.int64, "ssize_t": np.int64,
    "intptr_t": np.int64,
    "unsigned long": np.uint64, "unsigned long int": np.uint64, "unsigned long long": np.uint64,
    "unsigned long long int": np.uint64, "uint64_t": np.uint64, "size_t": np.uint64, "uintptr_t": np.uint64,
    "float": np.float32, "double": np.float64,
}

# What a pointer parameter may point at: the torch dtypes of the same bytes,
# and for vector types how many elements one C object holds (and so the
# alignment the GPU needs).
POINTEE_DTYPES: dict[str, tuple[torch.dtype, ...]] = {
    "bool": (torch.bool,),
    "char": (torch.int8, torch.uint8), "signed char": (torch.int8,), "int8_t": (torch.int8,),
    "unsigned char": (torch.uint8, torch.bool), "uint8_t": (torch.uint8,),
    "short": (torch.int16,), "int16_t": (torch.int16,),
    "int": (torch.int32,), "int32_t": (torch.int32,), "signed": (torch.int32,), "signed int": (torch.int32,),
    "unsigned": (torch.int32,), "unsigned int": (torch.int32,), "uint32_t": (torch.int32,),
    "long": (torch.int64,), "long long": (torch.int64,), "long long int": (torch.int64,), "int64_t": (torch.int64,),
    "unsigned long long": (torch.int64,), "uint64_t": (torch.int64,), "size_t": (torch.int64,),
    "float": (torch.float32,), "double": (torch.float64,),
    "half": (torch.float16,), "__half": (torch.float16,), "__nv_bfloat16": (torch.bfloat16,),
    "float2": (torch.float32,), "float4": (torch.float32,), "double2": (torch.float64,),
    "int2": (torch.int32,), "int4": (torch.int32,), "uint2": (torch.int32,), "uint4": (torch.int32,),
}
VECTOR_ALIGNMENT = {"float2": 8, "float4": 16, "double2": 16, "int2": 8, "int4": 16, "uint2": 8, "uint4": 16}

_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "__grid_constant__", "struct"}


@dataclass(frozen=True)
class Param:
    """One kernel parameter as the C source declares it."""

    name: str
    base: str           # the C type without pointers and qualifiers, e.g. "float"
    pointer: bool
    const: bool         # for pointers: const data (`const float*`)
    declared: str       # as written, for messages

    @property
    def c_type(self) -> str:
        """The parameter's C type as written: const, base type, pointer star."""
        return f"{'const ' if self.const else ''}{self.base}{'*' if self.pointer else ''}"


@dataclass(frozen=True)
class Signature:
    kernel: str          # the name expression, e.g. "axpy" or "tiled<float, 16>"
    params: tuple[Param, ...]

    def __str__(self) -> str:
        return f"{self.kernel}({', '.join(p.declared for p in self.params)})"


@dataclass(frozen=True)
class PackedArg:
    """An argument ready for a launch: a pointer or the exact bytes of a scalar."""

    param: Param
    tensor: torch.Tensor | None = None
    scalar: bytes | None = None
    value: np.generic | None = None     # the scalar itself, for cupy

    @property
    def is_pointer(self) -> bool:
        """Whether the argument is passed as a pointer (a tensor's memory)."""
        return self.param.pointer


def strip_comments(source: str) -> str:
    """Comments and string contents become spaces, newlines stay: line numbers survive."""
    def blank(m: re.Match) -> str:
        text = m.group(0)
        if text.startswith(('"', "'")):
            return text[0] + re.sub(r"[^\n]", " ", text[1:-1]) + text[-1]
        return re.sub(r"[^\n]", " ", text)
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', blank, source, flags=re.S)


def _matching(text: str, i: int, open_ch: str, close_ch: str) -> int:
    """Index just past the bracket that closes the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_ch:
            depth += 1
        elif text[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
    raise KernelSourceError(f"unbalanced {open_ch}{close_ch} in the kernel source")


def _split_top(text: str, sep: str = ",") -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return [p.strip() for p in parts]


def split_name_expression(expr: str) -> tuple[str, list[str]]:
    """'tiled<float, 16>' -> ('tiled', ['float', '16'])."""
    expr = expr.strip()
    if "<" not in expr:
        return expr, []
    base = expr[: expr.index("<")].strip()
    inner = expr[expr.index("<") + 1: expr.rindex(">")]
    return base, _split_top(inner)


_GLOBAL = re.compile(r"\b__global__\b")


def _all_kernels(clean: str):
    """(name, template parameter text or None, parameter text) of every __global__."""
    found = []
    for m in _GLOBAL.finditer(clean):
        # The name is the identifier just before the first '(' that is not
        # part of __launch_bounds__(...) or an attribute.
        j = m.end()
        while True:
            paren = clean.find("(", j)
            if paren < 0:
                break
            head = clean[m.end():paren]
            if re.search(r"[;{}]", head):
                break
            word = re.search(r"(\w+)\s*$", head)
            if word and word.group(1) in ("__launch_bounds__", "__attribute__", "__align__", "alignas"):
                j = _matching(clean, paren, "(", ")")
                continue
            if word:
                end = _matching(clean, paren, "(", ")")
                found.append((word.group(1), _template_before(clean, m.start()), clean[paren + 1: end - 1]))
            break
    return found


def declared_kernels(source: str) -> list[tuple[str, bool]]:
    """(name, is a template) of each __global__ function of a source, in order, once each."""
    seen, out = set(), []
    for name, template, _ in _all_kernels(strip_comments(source)):
        if name not in seen:
            seen.add(name)
            out.append((name, template is not None))
    return out


def _kernel_declarations(clean: str, base: str):
    """(template parameter text or None, parameter text) for each __global__ named `base`."""
    return [(template, params) for name, template, params in _all_kernels(clean) if name == base]


def _template_before(clean: str, pos: int) -> str | None:
    """The `template <...>` right in front of a declaration, if any."""
    before = clean[:pos].rstrip()
    before = re.sub(r'extern\s*"\s*C\s*"\s*$', "", before).rstrip()
    before = re.sub(r"\b(static|inline|__forceinline__)\s*$", "", before).rstrip()
    if not before.endswith(">"):
        return None
    depth, i = 0, len(before) - 1
    while i >= 0:
        if before[i] == ">":
            depth += 1
        elif before[i] == "<":
            depth -= 1
            if depth == 0:
                break
        i -= 1
    if i < 0 or not re.search(r"\btemplate\s*$", before[:i]):
        return None
    return before[i + 1: -1]


def _typedefs(clean: str) -> dict[str, str]:
    aliases = {}
    for m in re.finditer(r"\btypedef\s+([\w\s]+?)\s+(\w+)\s*;", clean):
        aliases[m.group(2)] = " ".join(m.group(1).split())
    for m in re.finditer(r"\busing\s+(\w+)\s*=\s*([\w\s]+?)\s*;", clean):
        aliases[m.group(1)] = " ".join(m.group(2).split())
    return aliases


def _parse_param(text: str, substitutions: dict[str, str], aliases: dict[str, str], kernel: str) -> Param:
    declared = " ".join(text.split())
    body = declared.split("=")[0].strip()
    array = body.endswith("]")
    if array:
        body = body[: body.index("[")].strip()
    if "&" in body:
        raise KernelSourceError(
            f"kernel {kernel}: parameter `{declared}` is a reference; a kernel takes pointers and values only")
    for name, value in substitutions.items():
        body = re.sub(rf"\b{re.escape(name)}\b", value, body)
    stars = body.count("*") + (1 if array else 0)
    words = re.findall(r"[A-Za-z_]\w*", body.replace("*", " * "))
    const = "const" in words
    words = [w for w in words if w not in _QUALIFIERS]
    if len(words) < 2:
        raise KernelSourceError(f"kernel {kernel}: cannot read the parameter `{declared}` (does it have a name?)")
    name, type_words = words[-1], words[:-1]
    base = " ".join(type_words)
    seen = set()
    while base in aliases and base not in seen:
        seen.add(base)
        alias = aliases[base].split()
        const = const or "const" in alias
        stars += aliases[base].count("*")
        base = " ".join(w for w in alias if w not in _QUALIFIERS and w != "*")
    if stars > 1:
        raise KernelSourceError(
            f"kernel {kernel}: parameter `{declared}` is a pointer to a pointer; pass tensors as single pointers")
    return Param(name=name, base=base, pointer=stars == 1, const=const, declared=declared)


def parse_signature(source: str, name_expression: str) -> Signature:
    """The parameters of the kernel `name_expression` in `source`.

    Templates are read through the name expression: for ``scale<float>`` and
    ``template <typename T> __global__ void scale(T* x, T a)`` the parameters
    are ``float* x`` and ``float a``.
    """
    clean = strip_comments(source)
    base, targs = split_name_expression(name_expression)
    short = base.split("::")[-1]
    decls = _kernel_declarations(clean, short)
    if not decls:
        kernels = [f"{n}<...>" if t else n for n, t in declared_kernels(source)]
        known = ", ".join(kernels) if kernels else "none"
        raise KernelSourceError(
            f"there is no __global__ kernel named `{short}` in the source (kernels found: {known})")
    template, params_text = decls[-1]
    substitutions: dict[str, str] = {}
    if template is not None:
        tparams = _split_top(template)
        for i, tp in enumerate(tparams):
            words = tp.split("=")[0].split()
            if not words:
                continue
            pname = words[-1]
            if i < len(targs):
                substitutions[pname] = targs[i]
            elif "=" in tp:
                substitutions[pname] = tp.split("=", 1)[1].strip()
            else:
                raise KernelSourceError(
                    f"kernel `{short}` is a template: name it with its template arguments, "
                    f"e.g. \"{short}<{', '.join('float' for _ in tparams)}>\"")
    elif targs:
        raise KernelSourceError(f"`{name_expression}` has template arguments but `{short}` is not a template")
    params = tuple(_parse_param(p, substitutions, _typedefs(clean), name_expression)
                   for p in _split_top(params_text) if p and p != "void")
    return Signature(kernel=name_expression, params=params)


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor on {value.device}"
    if isinstance(value, np.generic):
        return f"numpy.{type(value).__name__}"
    return f"a Python {type(value).__name__}"


def _ordinal(i: int) -> str:
    suffix = "th" if 10 <= i % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(i % 10, "th")
    return f"{i}{suffix}"


def check_args(sig: Signature, args) -> list[PackedArg]:
    """Check each argument against its parameter; return them packed for a launch."""
    if not isinstance(args, (tuple, list)):
        raise KernelArgumentError(f"args must be a tuple of the kernel's arguments, got {_describe(args)}")
    if len(args) != len(sig.params):
        raise KernelArgumentError(
            f"{sig.kernel} takes {len(sig.params)} argument{'s' if len(sig.params) != 1 else ''} "
            f"({', '.join(p.declared for p in sig.params)}), but the launch passed {len(args)}")
    packed = []
    for i, (p, value) in enumerate(zip(sig.params, args), start=1):
        where = f"the {_ordinal(i)} argument of {sig.kernel}, `{p.declared}`,"
        if p.pointer:
            packed.append(_check_pointer(p, value, where))
        else:
            packed.append(_check_scalar(p, value, where))
    devices = {a.tensor.device for a in packed if a.tensor is not None}
    if len(devices) > 1:
        raise KernelArgumentError(
            f"the tensors of one launch must all be on one device; these are on {sorted(map(str, devices))}")
    return packed


def _check_pointer(p: Param, value, where: str) -> PackedArg:
    if value is None:
        return PackedArg(p)
    if not isinstance(value, torch.Tensor):
        raise KernelArgumentError(
            f"{where} is a pointer, so it needs a torch tensor; you passed {_describe(value)}")
    allowed = POINTEE_DTYPES.get(p.base)
    if p.base != "void":
        if allowed is None:
            raise KernelArgumentError(
                f"{where} points at `{p.base}`, a type the course's kernels do not pass; "
                f"use one of float, double, int, long long, unsigned char, bool, float2, float4")
        if value.dtype not in allowed:
            names = " or ".join(str(d) for d in allowed)
            raise KernelArgumentError(
                f"{where} needs a {names} tensor; you passed {_describe(value)}. "
                f"Convert the tensor (e.g. .to({allowed[0]})) or change the kernel's type")
    align = VECTOR_ALIGNMENT.get(p.base)
    if align and value.data_ptr() % align:
        raise KernelArgumentError(
            f"{where} is read as {p.base}, which must be {align}-byte aligned, but the tensor's data starts at an "
            f"address that is not (a slice or offset view?); on a GPU this is a misaligned-address error")
    return PackedArg(p, tensor=value)


def _check_scalar(p: Param, value, where: str) -> PackedArg:
    want = SCALAR_TYPES.get(p.base)
    if want is None:
        raise KernelArgumentError(
            f"{where} has the type `{p.base}`, which the course's kernels do not pass by value; "
            f"use int, long long, unsigned int, float, double or bool")
    bits = np.dtype(want).itemsize * 8
    wrap = f"numpy.{want.__name__}(...)"
    if isinstance(value, torch.Tensor):
        raise KernelArgumentError(f"{where} is a `{p.base}` value, not a pointer; you passed {_describe(value)}")
    if type(value) is want:
        return PackedArg(p, scalar=value.tobytes(), value=value)
    if isinstance(value, bool) or isinstance(value, np.bool_):
        got = "a Python bool" if isinstance(value, bool) else "numpy.bool_"
        raise KernelArgumentError(f"{where} is a {bits}-bit `{p.base}`; you passed {got}. Wrap it: {wrap}")
    if isinstance(value, float):
        raise KernelArgumentError(
            f"{where} is a {bits}-bit `{p.base}`; you passed a Python float, which a GPU launch passes as a 64-bit "
            f"double, so the kernel would read garbage. Wrap it: {wrap}")
    if isinstance(value, int):
        raise KernelArgumentError(
            f"{where} is a {bits}-bit `{p.base}`; you passed a Python int, which a GPU launch passes as a 64-bit "
            f"integer{', so the kernel would read garbage' if bits != 64 or want is not np.int64 else ''}. "
            f"Wrap it: {wrap}")
    if isinstance(value, np.generic):
        raise KernelArgumentError(
            f"{where} is a {bits}-bit `{p.base}`; you passed {_describe(value)}. Wrap it: {wrap}")
    raise KernelArgumentError(f"{where} is a `{p.base}`; you passed {_describe(value)}. Wrap it: {wrap}")
