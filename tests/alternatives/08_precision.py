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
    "rounding value by value in Python floats (floor and a remainder), finfo with ldexp and int()": {
        "ex_round": _rewrite("ex_round", ("""    x = np.asarray(x, dtype=np.float64)
    bias = 2 ** (exponent_bits - 1) - 1
    _, e = np.frexp(x)  # x = f * 2**e with 1/2 <= |f| < 1: x's leading bit is worth 2**(e - 1)
    exponent = np.maximum(e - 1, 1 - bias)  # subnormals keep the smallest normal exponent's spacing
    spacing = np.ldexp(1.0, exponent - mantissa_bits)
    with np.errstate(invalid="ignore"):
        rounded = np.round(x / spacing) * spacing  # np.round rounds halves to the even neighbour
    largest = (2.0 - 2.0 ** -mantissa_bits) * 2.0 ** bias
    return np.where(np.abs(rounded) > largest, np.copysign(np.inf, x), rounded)""",
            """    x = np.array(x, dtype=np.float64, ndmin=1)
    bias = 2 ** (exponent_bits - 1) - 1
    out = np.empty_like(x)
    for i, value in enumerate(x.flat):
        if not math.isfinite(value) or value == 0:
            out.flat[i] = value
            continue
        k = max(math.floor(math.log2(abs(value))), 1 - bias)
        while 2.0 ** k > abs(value) and k > 1 - bias:  # log2 may land one too high near a power of two
            k -= 1
        while 2.0 ** (k + 1) <= abs(value):
            k += 1
        step = 2.0 ** (k - mantissa_bits)
        low = math.floor(value / step)
        rest = value / step - low
        n = low + 1 if rest > 0.5 or (rest == 0.5 and low % 2) else low
        result = math.copysign(n * step, value)
        out.flat[i] = math.copysign(math.inf, value) if abs(result) > (2 - 2.0 ** -mantissa_bits) * 2.0 ** bias else result
    return out.reshape(np.shape(np.asarray(x)))""")),
        "ex_finfo": _rewrite("ex_finfo", ("""                 resolution=10.0 ** -math.floor(mantissa_bits * math.log10(2)))""",
                                          """                 resolution=10.0 ** -int(mantissa_bits * math.log10(2)))"""),
                             ("""    eps = 2.0 ** -mantissa_bits""", """    eps = float(np.ldexp(1.0, -mantissa_bits))""")),
    },
    "autocast: the policies as a table of dtypes, redispatch below the key instead of excluding it": {
        "ex_autocast": _rewrite("ex_autocast", ("""    target = lower if policy == LOWER else float32 if policy == FP32 else None""",
                                                """    target = {LOWER: lower, FP32: float32}.get(policy)"""),
                                ("""    with ExcludeDispatchKeys(DispatchKey.Autocast):
        return dispatch(op, *args, **kwargs)""", """    from picotorch import redispatch
    return redispatch(op, DispatchKey.Autocast, *args, **kwargs)"""),
                                ("""        hit = AUTOCAST.cache.get(id(x))
        if hit is None or hit[0] is not x:  # the entry keeps x alive, so its id cannot be reused in the region
            hit = AUTOCAST.cache[id(x)] = (x, x.to(dtype))
        return hit[1]""", """        if id(x) not in AUTOCAST.cache:
            AUTOCAST.cache[id(x)] = (x, dispatch("to", x, dtype))
        return AUTOCAST.cache[id(x)][1]""")),
    },
    "GradScaler: a loop of flags, the update written as torch's kernel, NumPy's isfinite on every gradient at once": {
        "ex_scaler": _rewrite("ex_scaler", ("""            found = [s["found_inf"] for s in self._per_optimizer_states.values() if s["found_inf"] is not None]
            assert len(found) > 0, "No inf checks were recorded prior to update."
            if any(found):""", """            found = False
            checks = 0
            for state in self._per_optimizer_states.values():
                if state["found_inf"] is not None:
                    checks += 1
                    found = found or state["found_inf"]
            if not checks:
                raise AssertionError("No inf checks were recorded prior to update.")
            if found:"""),
                              ("""                    found_inf = found_inf or not bool(np.isfinite(p.grad.numpy()).all())
                    p.grad.mul_(inv_scale)""", """                    values = p.grad.numpy()
                    found_inf |= bool(np.isnan(values).any() or np.isinf(values).any())
                    p.grad.mul_(inv_scale)""")),
    },
    "the AMP step with an explicit unscale_ before step (where a gradient clipping would go)": {
        "ex_amp_step": _rewrite("ex_amp_step", ("""    scaler.step(optimizer)""", """    scaler.unscale_(optimizer)
    scaler.step(optimizer)""")),
    },
}
