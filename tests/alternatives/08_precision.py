"""Correct answers to chapter 08 written differently from the course's solution.

ALTERNATIVES = {what is different: {exercise: the cell's code}}; see tests/chapters/test_alternative_solutions.py.
"""
from __future__ import annotations

from solution_text import rewrite, solution


def _rewrite(exercise: str, *replacements: tuple[str, str]) -> str:
    return rewrite(solution("08_precision", exercise), *replacements, what="alternative")


ALTERNATIVES = {
    "self time from the children's spans, averages in a defaultdict, the trace written with pathlib": {
        "ex_profiler": _rewrite("ex_profiler", (
            """        rows = {}
        for event in self.events:
            row = rows.get(event.name)
            if row is None:
                row = rows[event.name] = Average(event.name)
            row.count += 1""", """        rows = collections.defaultdict(lambda: None)
        for event in self.events:
            if rows[event.name] is None:
                rows[event.name] = Average(event.name)
            row = rows[event.name]
            row.count += 1"""), (
            "        return sorted(rows.values(), key=lambda row: row.self_ns, reverse=True)",
            "        return sorted(rows.values(), key=attrgetter(\"self_ns\"))[::-1]"), (
            "    return event.total_ns - sum(child.total_ns for child in event.children)",
            "    inside = 0\n    for child in event.children:\n        inside += child.end_ns - child.start_ns\n"
            "    return (event.end_ns - event.start_ns) - inside"), (
            """        with open(path, "w") as f:
            json.dump({"traceEvents": trace}, f)""",
            """        text = json.dumps({"traceEvents": trace, "displayTimeUnit": "ns"}, indent=1)
        pathlib.Path(path).write_text(text)""")) + "\nimport collections\nimport pathlib\nfrom operator import attrgetter\n",
    },
    "the batch as a narrow of the rows, the bottleneck named by its getitem": {
        "ex_bottleneck": _rewrite("ex_bottleneck", ('BOTTLENECK = "setitem"', 'BOTTLENECK = "getitem"'), (
            "model(data[start:stop])", "model(data.narrow(0, start, stop - start))")),
    },
}
