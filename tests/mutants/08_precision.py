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
    "ex_round": {
        "rounding by truncation (toward zero)": {
            "code": _wrong("ex_round", ("np.round(x / spacing)", "np.trunc(x / spacing)")),
            "shows": "the nearest float16"},
        "halfway cases rounded away from zero, not to even": {
            "code": _wrong("ex_round", ("np.round(x / spacing)", "np.sign(x) * np.floor(np.abs(x / spacing) + 0.5)")),
            "shows": "even neighbour"},
        "no subnormals: below the smallest normal value the spacing keeps shrinking": {
            "code": _wrong("ex_round", ("np.maximum(e - 1, 1 - bias)", "e - 1")),
            "shows": "subnormals"},
        "overflow saturates at max instead of becoming inf": {
            "code": _wrong("ex_round", ("np.copysign(np.inf, x)", "np.copysign(largest, x)")),
            "shows": "overflow"},
        "the largest value without its mantissa (2**bias)": _wrong("ex_round", (
            "(2.0 - 2.0 ** -mantissa_bits) * 2.0 ** bias", "2.0 ** bias")),
    },
    "ex_finfo": {
        "eps as the unit roundoff (half the spacing above 1)": {
            "code": _wrong("ex_finfo", ("eps = 2.0 ** -mantissa_bits", "eps = 2.0 ** -(mantissa_bits + 1)")),
            "shows": "eps"},
        "tiny as the smallest subnormal": {
            "code": _wrong("ex_finfo", ("tiny=2.0 ** (1 - bias),", "tiny=2.0 ** (1 - bias - mantissa_bits),")),
            "shows": "tiny"},
        "resolution with the digits rounded up": _wrong("ex_finfo", (
            "math.floor(mantissa_bits * math.log10(2))", "math.ceil(mantissa_bits * math.log10(2))")),
        "max from the exponent alone (2**bias)": _wrong("ex_finfo", ("max=(2.0 - eps) * 2.0 ** bias", "max=2.0 ** bias")),
    },
    "ex_autocast": {
        "integer inputs cast too": {
            "code": _wrong("ex_autocast", ("isinstance(x, Tensor) and x.dtype.is_floating_point and x.dtype is not float64",
                                           "isinstance(x, Tensor) and x.dtype is not float64")),
            "shows": "expected scalar type Long"},  # the integer target of nll_loss, cast
        "float64 inputs cast too": {
            "code": _wrong("ex_autocast", (" and x.dtype is not float64\n", "\n")),
            "shows": "float64"},
        "the float32 list ignored for a loss (nll_loss left in the input's dtype)": {
            "code": _wrong("ex_autocast", ("float32 if policy == FP32 else None", "None")),
            "shows": "nll_loss"},
        "every listed operator lowered, the float32 ones too": _wrong("ex_autocast", (
            "lower if policy == LOWER else float32 if policy == FP32 else None", "lower if policy else None")),
        "the region's dtype ignored: always bfloat16": _wrong("ex_autocast", (
            "target = lower if policy", "target = bfloat16 if policy")),
        "the list of any region, whatever the tensors' device": {
            "code": _wrong("ex_autocast", ("lower = AUTOCAST.dtypes.get(device_type)",
                                           "lower = next(iter(AUTOCAST.dtypes.values()), None)")),
            "shows": "'cuda'"},
        "no cache: a weight cast at every call": {
            "code": _wrong("ex_autocast", ("if dtype in HALF_DTYPES and x.dtype is float32 and x.is_leaf and x.requires_grad:",
                                           "if False:")),
            "shows": "cache"},
        "every tensor cached, activations too": {
            "code": _wrong("ex_autocast", ("if dtype in HALF_DTYPES and x.dtype is float32 and x.is_leaf and x.requires_grad:",
                                           "if True:")),
            "shows": "cast"},
    },
    "ex_scaler": {
        "unscaling twice allowed (no error on a second unscale_)": {
            "code": _wrong("ex_scaler", ('        if state["stage"] == UNSCALED:\n            raise RuntimeError('
                                         '"unscale_() has already been called on this optimizer since the last '
                                         'update().")\n', "")),
            "shows": "unscale_(optimizer) twice"},
        "step unscales again after an explicit unscale_ (the gradients divided twice)": _wrong("ex_scaler", (
            '        if state["stage"] == READY:\n            self.unscale_(optimizer)',
            '        if state["stage"] == UNSCALED:\n            state["stage"] = READY\n        self.unscale_(optimizer)')),
        "the step taken although a gradient is inf": {
            "code": _wrong("ex_scaler", ('result = None if state["found_inf"] else optimizer.step(*args, **kwargs)',
                                         'result = optimizer.step(*args, **kwargs)')),
            "shows": "skipped"},
        "the scale updated on a skipped step as on a good one": _wrong("ex_scaler", (
            "            if any(found):\n", "            if False:\n")),
        "the growth count not restarted after growing": _wrong("ex_scaler", (
            "                    self._scale = grown\n                self._growth_tracker = 0\n",
            "                    self._scale = grown\n")),
        "the gradients multiplied by the scale instead of divided": _wrong("ex_scaler", (
            "inv_scale = float(np.float32(1.0 / self._scale))", "inv_scale = float(np.float32(self._scale))")),
        "the optimizers' states kept after update (the next step is refused)": _wrong("ex_scaler", (
            "        self._per_optimizer_states = {}\n", "")),
        "a disabled scaler still scales": _wrong("ex_scaler", (
            "        if not self._enabled:\n            return outputs", "        if False:\n            return outputs")),
    },
    "ex_amp_step": {
        "no zero_grad: the gradients of the steps add up": _wrong("ex_amp_step", ("    optimizer.zero_grad()\n", "")),
        "no update: the scaler refuses the next step": _wrong("ex_amp_step", ("    scaler.update()\n", "")),
        "the unscaled loss's backward (then step divides the gradients by the scale)": _wrong("ex_amp_step", (
            "scaler.scale(loss).backward()", "loss.backward()")),
        "the forward outside the region": {
            "code": _wrong("ex_amp_step", ('    with autocast("cpu", dtype=dtype):\n        loss = loss_fn(model(x), y)',
                                           '    out = model(x)\n    with autocast("cpu", dtype=dtype):\n'
                                           '        loss = loss_fn(out, y)')),
            "shows": "the forward runs in the region"},
        "update before step": _wrong("ex_amp_step", ("    scaler.step(optimizer)\n    scaler.update()",
                                                     "    scaler.update()\n    scaler.step(optimizer)")),
        "the region's dtype ignored (autocast's default, bfloat16)": _wrong("ex_amp_step", (
            'autocast("cpu", dtype=dtype)', 'autocast("cpu")')),
    },
}
