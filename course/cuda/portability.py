"""What the emulator's g++ accepts and a GPU's compiler does not.

cupy compiles a kernel with NVRTC, which has no C or C++ library headers: no
``INFINITY``, ``FLT_MAX``, ``INT_MAX`` or ``M_PI``, no ``int32_t``, no
``std::numeric_limits``, and ``#include <cmath>`` is an error. The emulator is
g++ over a header that includes those libraries for its own use, so a kernel
using them would pass every test on a laptop and fail to compile on the GPU.
``nvrtc_lacks(source)`` names such uses on the student's lines, so that the
emulator refuses them exactly as the GPU would. (Measured with NVRTC 13.5;
``printf``, ``assert``, ``memcpy``, ``size_t`` and the math functions such as
``expf`` and ``isnan`` are built into NVRTC and stay allowed.)
"""
from __future__ import annotations

import re

from course.cuda.errors import Diagnostic
from course.cuda.signature import strip_comments

__all__ = ["nvrtc_lacks", "LACKED_NAMES"]

# What to write instead, by the library a name comes from.
_INSTEAD = {
    "math.h": "for infinity write __int_as_float(0x7f800000) (negative: 0xff800000), "
              "for NaN __int_as_float(0x7fffffff), for pi the number itself",
    "float.h": "write the number (FLT_MAX is 3.402823466e+38f) or start a maximum from the first element",
    "limits.h": "write the number (INT_MAX is 2147483647)",
    "stdint.h": "use the built-in types: int, unsigned int, long long, unsigned long long",
    "the C++ library": "NVRTC has no std:: library; write the function or the constant yourself",
}
_MATH = ("INFINITY NAN HUGE_VAL HUGE_VALF HUGE_VALL M_E M_LOG2E M_LOG10E M_LN2 M_LN10 M_PI M_PI_2 M_PI_4 "
         "M_1_PI M_2_PI M_2_SQRTPI M_SQRT2 M_SQRT1_2")
_FLOAT = ("FLT_MAX FLT_MIN FLT_EPSILON FLT_TRUE_MIN FLT_DIG FLT_MANT_DIG FLT_MAX_EXP FLT_MIN_EXP FLT_RADIX "
          "DBL_MAX DBL_MIN DBL_EPSILON DBL_TRUE_MIN DBL_DIG DBL_MANT_DIG DBL_MAX_EXP DBL_MIN_EXP")
_LIMITS = ("CHAR_BIT SCHAR_MIN SCHAR_MAX UCHAR_MAX CHAR_MIN CHAR_MAX SHRT_MIN SHRT_MAX USHRT_MAX INT_MIN INT_MAX "
           "UINT_MAX LONG_MIN LONG_MAX ULONG_MAX LLONG_MIN LLONG_MAX ULLONG_MAX")
_STDINT = " ".join(f"{p}int{n}_t {p.upper()}INT{n}_MAX" for p in ("", "u") for n in (8, 16, 32, 64)) + \
    " INT8_MIN INT16_MIN INT32_MIN INT64_MIN intptr_t uintptr_t SIZE_MAX"

#: every name NVRTC lacks, with the library that defines it on a CPU
LACKED_NAMES: dict[str, str] = {
    **{n: "math.h" for n in _MATH.split()}, **{n: "float.h" for n in _FLOAT.split()},
    **{n: "limits.h" for n in _LIMITS.split()}, **{n: "stdint.h" for n in _STDINT.split()},
}

_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<([^>\n]+)>", re.M)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", re.M)
# `cuda::std::` (CUDA's own library, on cupy's include path) is not the C++ library NVRTC lacks
_WORD = re.compile(r"(?<!::)\bstd\s*::\s*\w+|\b[A-Za-z_]\w*\b")


def nvrtc_lacks(source: str) -> list[Diagnostic]:
    """One error per line that uses a header, name or std:: member NVRTC does not have."""
    code = strip_comments(source)   # comments and strings hold no code; lines keep their numbers
    lines = source.splitlines()
    found: list[Diagnostic] = []

    def add(offset: int, message: str) -> None:
        line = code.count("\n", 0, offset) + 1
        text = lines[line - 1] if line <= len(lines) else ""
        if not any(d.line == line and d.message == message for d in found):
            found.append(Diagnostic(line, "error", message, text))

    defined = set(_DEFINE.findall(code))   # a name the kernel #defines itself is its own
    for m in _INCLUDE.finditer(code):
        header = m.group(1).strip()
        if not header.startswith(("cupy/", "cuda/")):   # cupy's own and CUDA's cuda/std headers are on its path
            add(m.start(), f"#include <{header}>: NVRTC, the compiler cupy uses on a GPU, has no "
                           f"library headers (math functions such as expf are built in): remove it")
    for m in _WORD.finditer(code):
        word = m.group()
        if word.startswith("std"):
            if "::" in word:
                name = "".join(word.split())
                add(m.start(), f"{name} does not exist on a GPU: {_INSTEAD['the C++ library']}")
            continue
        library = LACKED_NAMES.get(word)
        if library and word not in defined:
            add(m.start(), f"{word} comes from {library}, which NVRTC on a GPU does not have: {_INSTEAD[library]}")
    return sorted(found, key=lambda d: d.line or 0)
