"""Chapter 06 — Compile: capture by a dispatch key, a graph break, the passes, and fusion's memory traffic."""
from __future__ import annotations

from figures.svg import BLUE, GREEN, GREY, INK, LIGHT, ORANGE, PURPLE, RED, TINTS, Figure


def capture() -> Figure:
    width, height = 920, 350
    fig = Figure(width, height, "Capture: each operator call goes down the key set; the Trace key's fallback "
                                "records a node and runs the operator below itself")
    fig.text(20, 26, "Capture is one more dispatch key: Trace records a node, then runs the call below it",
             size=15, anchor="start", bold=True)
    fig.lines(30, 70, ["def f(x):", "    return x.exp() * 2.0", "", "with tracing(tracer):", "    f(x)"],
              size=13, anchor="start", mono=True)
    keys = [("Autograd", "8", LIGHT, GREY), ("Trace", "6", TINTS[1], ORANGE), ("Python", "4", LIGHT, GREY),
            ("CPU / CUDA ...", "backend", LIGHT, GREY)]
    kx, ky = 290, 60
    fig.text(kx + 90, ky - 10, "the key set of each call", size=12, fill=GREY)
    for i, (name, prio, fill, stroke) in enumerate(keys):
        y = ky + i * 54
        fig.rect(kx, y, 180, 38, fill=fill, stroke=stroke, rx=6, width=2 if name == "Trace" else 1.2)
        fig.text(kx + 12, y + 24, name, size=13.5, anchor="start", bold=name == "Trace")
        fig.text(kx + 168, y + 24, prio, size=11.5, anchor="end", fill=GREY, mono=True)
        if i + 1 < len(keys):
            fig.arrow(kx + 90, y + 39, kx + 90, y + 53, stroke=GREY)
    fig.text(kx + 90, ky + 4 * 54 + 8, "exp, then mul: each goes down", size=11.5, fill=GREY)
    fig.text(kx + 90, ky + 4 * 54 + 24, "and runs as before", size=11.5, fill=GREY)
    fig.arrow(kx + 182, ky + 54 + 19, 560, ky + 54 + 19, stroke=ORANGE, width=1.8)
    fig.text(kx + 190, ky + 54 + 10, "record", size=11, anchor="start", fill=ORANGE, mono=True)
    rows = ["graph():", "    %x = placeholder  # (3, 4) float32", "    %exp = exp(%x)  # (3, 4) float32",
            "    %mul = mul(%exp, 2.0)  # (3, 4) float32", "    return (%mul,)"]
    fig.rect(565, 60, 335, 120, fill=TINTS[1], stroke=ORANGE, rx=6)
    fig.lines(575, 84, rows, size=11.5, anchor="start", mono=True, gap=1.55)
    fig.lines(565, 210, ["a node: which operator, which inputs", "(nodes, or constants such as 2.0),",
                         "what came out (shape, dtype, device)"], size=12, anchor="start", fill=GREY)
    fig.text(20, height - 14, "below Autograd: the tracer also sees the operators that autograd's kernels and the "
                              "backward engine call", size=12, anchor="start", fill=GREY, italic=True)
    return fig


def graph_break() -> Figure:
    width, height = 880, 400
    fig = Figure(width, height, "A graph break: f's if needs the value of a.sum() > 0, so the first graph ends "
                                "there, Python runs the if, and a second graph starts after it")
    fig.text(20, 26, "A graph break: Python needs a value, so the graph so far has to run", size=15,
             anchor="start", bold=True)
    fig.lines(30, 66, ["def f(x, y):", "    a = x.exp() * y", "    if a.sum() > 0:", "        a = a + 1",
                       "    return a.tanh()"], size=13, anchor="start", mono=True)
    fig.rect(26, 87, 170, 20, fill="none", stroke=RED, rx=4, width=1.6)
    fig.text(30, 180, "bool(tensor) -> item():", size=12, anchor="start", fill=RED)
    fig.text(30, 196, "a value only running can give", size=12, anchor="start", fill=RED)
    gx = 330
    fig.rect(gx, 50, 270, 132, fill=TINTS[0], stroke=BLUE, rx=8, width=1.6)
    fig.text(gx + 10, 70, "graph 1", size=13, anchor="start", bold=True, fill=BLUE)
    fig.lines(gx + 14, 92, ["%x, %y = placeholders", "%exp = exp(%x)", "%mul = mul(%exp, %y)", "%sum = sum(%mul)",
                            "%gt = gt(%sum, 0)", "return (%gt, %mul)"], size=11.5, anchor="start", mono=True, gap=1.3)
    fig.rect(gx, 200, 270, 50, fill="white", stroke=RED, rx=8, width=1.6, dash="6 4")
    fig.text(gx + 10, 220, "Python, eagerly", size=13, anchor="start", bold=True, fill=RED)
    fig.text(gx + 14, 240, "if gt.item(): ...", size=11.5, anchor="start", mono=True)
    fig.rect(gx, 268, 270, 90, fill=TINTS[2], stroke=GREEN, rx=8, width=1.6)
    fig.text(gx + 10, 288, "graph 2", size=13, anchor="start", bold=True, fill=GREEN)
    fig.lines(gx + 14, 310, ["%a = placeholder  (graph 1's %mul)", "%add = add(%a, 1)", "%tanh = tanh(%add)"],
              size=11.5, anchor="start", mono=True, gap=1.3)
    fig.arrow(gx + 135, 183, gx + 135, 198, stroke=INK)
    fig.arrow(gx + 135, 251, gx + 135, 266, stroke=INK)
    fig.lines(640, 80, ["torch._dynamo.explain(f)(x, y):", "  graph_count 2", "  graph_break_count 1"],
              size=12, anchor="start", mono=True)
    fig.lines(640, 160, ["a tensor of graph 1 used later", "(a) is an output of graph 1 and",
                         "a placeholder of graph 2",
                         "", "when the sum is ≤ 0 the second", "graph is only tanh: another", "graph, cached apart"],
              size=12, anchor="start", fill=GREY)
    fig.text(20, height - 14, "Dynamo reads the bytecode and resumes Python between the graphs; picotorch runs the "
                              "function and closes a segment at the break", size=12, anchor="start", fill=GREY,
             italic=True)
    return fig


# The example of the chapter's section 7: example(a, b, c) with c a tensor made outside (a constant).
EXAMPLE = [("a", "placeholder", ()), ("b", "placeholder", ()), ("c", "constant", ()),
           ("exp", "exp", ("a",)), ("mul", "mul", ("a", "b")), ("tanh", "tanh", ("mul",)),
           ("mul_1", "mul", ("a", "b")), ("sigmoid", "sigmoid", ("mul_1",)), ("add", "add", ("tanh", "sigmoid")),
           ("exp_1", "exp", ("c",)), ("add_1", "add", ("exp_1", 1)), ("mul_2", "mul", ("add", "add_1")),
           ("relu", "relu", ("mul_2",)), ("output", "output", ("relu",))]
ELEMENTWISE = {"exp", "mul", "tanh", "sigmoid", "add", "relu"}


def _dead(nodes):
    used, dead = {"output"}, set()
    for name, op, args in reversed(nodes):
        if name in used or op == "placeholder":
            used |= {a for a in args if isinstance(a, str)}
        else:
            dead.add(name)
    return dead


def _duplicates(nodes):
    seen, same = {}, {}
    for name, op, args in nodes:
        if op in ("placeholder", "constant", "output"):
            continue
        key = (op, tuple(same.get(a, a) for a in args))
        if key in seen:
            same[name] = seen[key]
        else:
            seen[key] = name
    return same


def _foldable(nodes):
    const = {name for name, op, _ in nodes if op == "constant"}
    folded = set()
    for name, op, args in nodes:
        if op not in ("placeholder", "constant", "output") and args and all(
                not isinstance(a, str) or a in const for a in args):
            const.add(name)
            folded.add(name)
    return folded


def _show(args, rename=None):
    rename = rename or {}
    return ", ".join(f"%{rename.get(a, a)}" if isinstance(a, str) else repr(a) for a in args)


def passes() -> Figure:
    """The captured graph with what each pass removes marked, and the graph after all three."""
    nodes = EXAMPLE
    dead = _dead(nodes)
    same = _duplicates(nodes)
    folded = _foldable(nodes)
    last_folded = [n for n, _, _ in nodes if n in folded][-1]
    width, height = 900, 420
    fig = Figure(width, height, "The passes on the chapter's example: dead-code elimination drops exp(a), CSE merges "
                                "the second a * b into the first, constant folding computes exp(c) + 1 once")
    fig.text(20, 26, "Passes: a graph in, a better graph out (same outputs, less work)", size=15, anchor="start",
             bold=True)
    fig.text(30, 58, "captured", size=13.5, anchor="start", bold=True)
    y0, dy = 82, 23
    for i, (name, op, args) in enumerate(nodes):
        y = y0 + i * dy
        text = (f"return (%{args[0]},)" if op == "output" else f"%{name} = {op}" if op in ("placeholder", "constant")
                else f"%{name} = {op}({_show(args)})")
        colour, note = INK, ""
        if name in dead:
            colour, note = RED, "dead: nothing uses it"
        elif name in same:
            colour, note = ORANGE, f"same as %{same[name]}"
        elif name in folded:
            colour, note = GREEN, "inputs all constant"
        fig.text(40, y, text, size=12, anchor="start", mono=True, fill=colour)
        if note:
            fig.text(270, y, "← " + note, size=11.5, anchor="start", fill=colour)
        if name in dead:
            fig.line(38, y - 4, 40 + len(text) * 7.2, y - 4, stroke=RED, width=1.2)
    fig.line(470, 50, 470, height - 40, stroke=GREY, width=1)
    fig.text(500, 58, "after DCE, CSE, constant folding", size=13.5, anchor="start", bold=True)
    gone = dead | set(same) | (folded - {last_folded})
    used = {a for name, _, args in nodes if name not in gone | folded for a in args}
    after = []
    for name, op, args in nodes:
        if name in gone or (op == "constant" and name not in used):
            continue
        args = tuple(same.get(a, a) for a in args)
        if name == last_folded:
            after.append((name, "constant", ()))
        else:
            after.append((name, op, args))
    for i, (name, op, args) in enumerate(after):
        y = y0 + i * dy
        text = (f"return (%{args[0]},)" if op == "output" else f"%{name} = {op}" if op in ("placeholder", "constant")
                else f"%{name} = {op}({_show(args)})")
        fig.text(510, y, text, size=12, anchor="start", mono=True, fill=GREEN if name == last_folded else INK)
        if name == last_folded:
            fig.text(700, y, "← exp(c) + 1, computed once", size=11.5, anchor="start", fill=GREEN)
    calls = lambda g: sum(1 for n, op, _ in g if op not in ("placeholder", "constant", "output"))  # noqa: E731
    fig.text(510, y0 + len(after) * dy + 20, f"{calls(nodes)} operator calls → {calls(after)}", size=12.5,
             anchor="start", bold=True)
    fig.text(20, height - 14, "red: eliminate_dead_code (exercise 5); orange: eliminate_common_subexpressions "
                              "(6); green: fold_constants (7)", size=12, anchor="start", fill=GREY, italic=True)
    return fig


def fusion() -> Figure:
    """((x * y).exp() + 1).tanh() on n elements: four kernels and their global memory traffic, then one."""
    chain = [("mul", ["x", "y"], "t1"), ("exp", ["t1"], "t2"), ("add 1", ["t2"], "t3"), ("tanh", ["t3"], "out")]
    loads = sum(len(ins) for _, ins, _ in chain)
    stores = len(chain)
    width, height = 900, 430
    fig = Figure(width, height, f"Fusion of ((x * y).exp() + 1).tanh(): four kernels move {loads + stores}n values "
                                "through global memory, one fused kernel moves 3n")
    fig.text(20, 26, "Fusion: ((x * y).exp() + 1).tanh() as four kernels, then as one", size=15, anchor="start",
             bold=True)

    def memory(y, names):
        fig.rect(30, y, width - 60, 34, fill=LIGHT, stroke=GREY, rx=4)
        fig.text(40, y + 22, "global memory", size=12, anchor="start", fill=GREY)
        xs = {}
        for i, name in enumerate(names):
            x = 190 + i * 118
            fig.rect(x, y + 5, 70, 24, fill="white", stroke=INK, rx=3)
            fig.text(x + 35, y + 22, name, size=12, mono=True)
            xs[name] = x + 35
        return xs

    xs = memory(56, ["x", "y", "t1", "t2", "t3", "out"])
    for k, (op, ins, out) in enumerate(chain):
        kx = 190 + k * 150
        fig.rect(kx, 140, 104, 36, fill=TINTS[0], stroke=BLUE, rx=6)
        fig.text(kx + 52, 163, op, size=13, mono=True, bold=True)
        for name in ins:
            fig.arrow(xs[name], 90, kx + 40, 138, stroke=BLUE, width=1.2)
        fig.arrow(kx + 64, 139, xs[out] + 6, 92, stroke=ORANGE, width=1.2)
    fig.text(30, 205, f"4 launches: loads {loads}n, stores {stores}n values: {loads + stores}n × 4 bytes in float32",
             size=13, anchor="start", bold=True)

    xs = memory(240, ["x", "y", "out"])
    fx = 330
    fig.rect(fx, 320, 470, 48, fill=TINTS[4], stroke=PURPLE, rx=6, width=1.6)
    fig.text(fx + 235, 340, "fused kernel: one thread per element", size=12.5, bold=True)
    fig.text(fx + 235, 358, "v = tanh(exp(x[i] * y[i]) + 1)   // t1, t2, t3 in registers", size=11.5, mono=True)
    for name in ("x", "y"):
        fig.arrow(xs[name], 274, fx + 60 + (40 if name == "y" else 0), 318, stroke=BLUE, width=1.2)
    fig.arrow(fx + 300, 319, xs["out"] + 6, 276, stroke=ORANGE, width=1.2)
    fig.text(30, 395, "1 launch: loads 2n, stores n values: 3n × 4 bytes: a third of the traffic", size=13,
             anchor="start", bold=True)
    fig.text(20, height - 10, "blue: loads from global memory; orange: stores. An elementwise kernel's time is its "
                              "memory traffic", size=12, anchor="start", fill=GREY, italic=True)
    return fig


FIGURES = {
    "capture.svg": capture,
    "graph_break.svg": graph_break,
    "passes.svg": passes,
    "fusion.svg": fusion,
}
