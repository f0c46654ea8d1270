"""Typical wrong answers to chapter 08, one dict per exercise: {what is wrong: the cell's code}, or a dict with the
code and what its message must show (tests/notebook_runs.Mutant). Each is the solution cell with one mistake put
in (`_wrong`); a replacement that no longer matches the solution fails loudly, here."""
from __future__ import annotations

from solution_text import rewrite, solution


def _wrong(exercise: str, *replacements: tuple[str, str]) -> str:
    return rewrite(solution("08_precision", exercise), *replacements, what=f"mutant of {exercise}", every=True)


MUTANTS = {
    "ex_profiler": {
        "self time counted with the children (self_ns is the total)": {
            "code": _wrong("ex_profiler", (
                "return event.total_ns - sum(child.total_ns for child in event.children)", "return event.total_ns")),
            "shows": "self times"},
        "trace events with their end before their start (dur from end to start)": {
            "code": _wrong("ex_profiler", ('"dur": e.total_ns / 1e3', '"dur": -e.total_ns / 1e3')),
            "shows": "dur"},
        "trace times in nanoseconds, not microseconds": _wrong("ex_profiler", (
            '"ts": e.start_ns / 1e3, "dur": e.total_ns / 1e3', '"ts": e.start_ns, "dur": e.total_ns')),
        "counts per call site: key_averages keyed by name and shapes": {
            "code": _wrong("ex_profiler", (
                "            row = rows.get(event.name)\n            if row is None:\n"
                "                row = rows[event.name] = Average(event.name)",
                "            site = (event.name, str(event.shapes))\n            row = rows.get(site)\n"
                "            if row is None:\n                row = rows[site] = Average(event.name)")),
            "shows": "one per operator"},
        "key_averages sorted by total time, not self time": _wrong("ex_profiler", (
            "key=lambda row: row.self_ns", "key=lambda row: row.total_ns")),
        "the key excluded below the fallback (as chapter 05's mode): a kernel's own calls unrecorded": {
            "code": _wrong("ex_profiler", (
                "        out = redispatch(op, DispatchKey.Profiler, *args, **kwargs)",
                "        with ExcludeDispatchKeys(DispatchKey.Profiler):\n"
                "            out = redispatch(op, DispatchKey.Profiler, *args, **kwargs)"))
            + "\nfrom picotorch import ExcludeDispatchKeys\n",
            "shows": "nested in it"},
        "a call that raises leaves its event open (no finally)": _wrong("ex_profiler", (
            "    out = None\n    try:\n        out = redispatch(op, DispatchKey.Profiler, *args, **kwargs)\n"
            "        return out\n    finally:\n        profile.end(event, args, out)",
            "    out = redispatch(op, DispatchKey.Profiler, *args, **kwargs)\n    profile.end(event, args, out)\n"
            "    return out")),
        "a view's memory counted as allocated": _wrong("ex_profiler", (
            "if id(t._storage) not in had}", "}")),
        "every argument's shape recorded, not only the tensors'": _wrong("ex_profiler", (
            "        tensors = [a for a in args if isinstance(a, Tensor)]\n        parent",
            "        tensors = [a if isinstance(a, Tensor) else from_numpy(np.asarray(0.0)) for a in args]\n"
            "        parent")),
        "every event at the top (no parent)": _wrong("ex_profiler", (
            "parent = self.open[-1] if self.open else None", "parent = None")),
        "the key left included after the block": _wrong("ex_profiler", (
            "        self.including.__exit__(exc_type, exc_value, traceback)\n", "")),
    },
    "ex_bottleneck": {
        "the bottleneck named as a model's operator": _wrong("ex_bottleneck", ('BOTTLENECK = "setitem"',
                                                                               'BOTTLENECK = "linear"')),
        "the loop kept (the fast step still gathers the rows one by one)": _wrong("ex_bottleneck", (
            "model(data[start:stop])", "model(batch_of(data, start, stop))")),
        "the rows from the first, not from start": _wrong("ex_bottleneck", (
            "model(data[start:stop])", "model(data[:stop - start])")),
        "no zero_grad: the gradients of the steps add up": _wrong("ex_bottleneck", (
            "    optimizer.zero_grad()\n", "")),
        "the labels of the rows from the first": _wrong("ex_bottleneck", (
            "labels[start:stop])\n    loss.backward", "labels[:stop - start])\n    loss.backward")),
    },
}
