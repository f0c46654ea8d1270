"""The one CSV writer of the course's tools: every cell is data, never a formula.

grades.csv, the report's figures and Canvas CSVs and the hub's class table all go
through `csv_text`. A spreadsheet that opens a CSV evaluates a text cell that
starts with `=`, `+`, `-` or `@` (and, in some, a tab or carriage return) as a
formula: a student folder named `=HYPERLINK("http://x", "click")` would run in
the instructor's spreadsheet. Such a text cell is written with a single quote
in front (OWASP's rule for CSV injection), which spreadsheets show as text.

Numbers are told from text by their Python type, not by how they look: an int or
float is written as a number, a str is text, so a folder named `-2` becomes
`'-2` while a score of -0.5 (passed as a float) stays a number. Callers that
format a score themselves (`f"{score:g}"`) write a str that never starts with a
sign, because scores are never negative.
"""
from __future__ import annotations

import csv
import io
import math
from typing import Iterable

# What OWASP lists as the start of a formula. Tab and carriage return: some spreadsheets skip them and
# then read what follows as a formula.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")

__all__ = ["FORMULA_STARTS", "cell", "csv_text", "is_formula"]


def is_formula(text: str) -> bool:
    """Whether a spreadsheet could read `text` as a formula. Leading spaces are looked past:
    LibreOffice's import can trim them ("Trim spaces") before it decides."""
    return text.lstrip(" ").startswith(FORMULA_STARTS)


def cell(value) -> str:
    """`value` as the text of one CSV cell: a number as a number, None as an empty cell,
    anything else as text, with a `'` in front when it could be read as a formula."""
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return str(int(value))
        return repr(value) if isinstance(value, float) else str(value)
    text = str(value)
    return "'" + text if is_formula(text) else text


def csv_text(rows: Iterable[Iterable], header: Iterable[str] | None = None) -> str:
    """The CSV text of `header` (when given) and `rows`, every cell through `cell`.
    Written with "\\r\\n" line ends, as csv.writer does (RFC 4180)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    if header is not None:
        writer.writerow([cell(h) for h in header])
    for row in rows:
        writer.writerow([cell(v) for v in row])
    return buffer.getvalue()
