"""Random models built twice, once from torch.nn and once from the student's `nn` (chapter 03's tests).

The tests of chapter 03's exercises 2 to 6 write a random program of registrations (new sub-modules,
parameters, buffers, `None`s, plain attributes, a parameter or sub-module shared by two owners, deletions,
re-assignments, and calls torch refuses) and run it once on `torch.nn.Module`s and once on the student's.
`ModelPair` keeps both and knows which of the student's objects stands for which of torch's. Only the
tests use it: it moved here from a given cell of the chapter (issue 37, item 3).
"""
from __future__ import annotations

import torch

from course import inputs
from course.testing.same_call import same_error

__all__ = ["ModelPair", "random_program", "expect_same_object", "NAMES", "BAD_NAMES"]


class ModelPair:
    """The same model built twice: `theirs` from torch.nn, `ours` from yours. `pool` lists the modules of
    both (pool[0] is the root); `twin` maps id(torch object) -> your object. `draw` makes every random
    choice about the pair: a test's (course.testing.Draws), so that a failing model shrinks; the course's
    stream by default. Only what both offer is asked of it (randint, choice, randn).

    A chapter subclasses it to name its side: `nn`, a namespace with your `Module` and `Parameter`, and
    `to_ours(t)`, your tensor with the values and layout of the torch tensor t."""
    nn = None
    to_ours = None

    def __init__(self, dtype=torch.float32, draw=inputs):
        self.dtype = dtype
        self.draw = draw
        self.theirs_pool, self.ours_pool, self.twin, self.log = [], [], {}, []
        self.new_module(None, None)

    @property
    def theirs(self):
        """The torch model (the first module of the pool)."""
        return self.theirs_pool[0]

    @property
    def ours(self):
        """The picotorch model (the first module of the pool)."""
        return self.ours_pool[0]

    @classmethod
    def random(cls, steps=None, bad=True, dtype=torch.float32, draw=inputs) -> "ModelPair":
        """A pair built by `random_program` (3 to 25 steps unless `steps` says)."""
        pair = cls(dtype, draw)
        return random_program(pair, pair.draw.randint(3, 25) if steps is None else steps, bad)

    def pair(self, theirs, ours):
        """Record `ours` as the twin of `theirs`; return both."""
        self.twin[id(theirs)] = ours
        return theirs, ours

    def new_module(self, parent, name):
        """A new empty Module on both sides, attached to module `parent` as `name` unless parent is None."""
        theirs, mine = self.pair(torch.nn.Module(), self.nn.Module())
        self.theirs_pool.append(theirs)
        self.ours_pool.append(mine)
        if parent is not None:
            self.both(f"m{parent}.{name} = Module()  # m{len(self.theirs_pool) - 1}",
                      lambda m: setattr(m[parent], name, m[-1]))

    def both(self, text, step):
        """Run step(pool) in both worlds; torch raising means yours must raise the same error."""
        __tracebackhide__ = True
        self.log.append(text)
        same_error(lambda: step(self.ours_pool), lambda: step(self.theirs_pool), f"{self.where()}")

    def where(self):
        """The last steps taken on both models, for a failure message."""
        return "after the steps\n    " + "\n    ".join(self.log[-25:])

    def tensor_pair(self, shape, dtype=None):
        """A drawn tensor of `shape` for torch and its copy for picotorch."""
        dtype = dtype or self.dtype
        t = self.draw.randn(shape, dtype=dtype) if dtype.is_floating_point else (self.draw.randn(shape) * 5).to(dtype)
        return self.pair(t, self.to_ours(t))

    def parameter(self, index, name, shape, via_register=False):
        """The same drawn Parameter on module `index` of both sides, by attribute or through register_parameter."""
        t = self.draw.randn(shape, dtype=self.dtype)
        theirs, mine = self.pair(torch.nn.Parameter(t.clone()), self.nn.Parameter(self.to_ours(t)))
        objects = {id(self.theirs_pool): theirs, id(self.ours_pool): mine}
        if via_register:
            self.both(f"m{index}.register_parameter({name!r}, Parameter(randn{shape}))",
                      lambda m: m[index].register_parameter(name, objects[id(m)]))
        else:
            self.both(f"m{index}.{name} = Parameter(randn{shape})", lambda m: setattr(m[index], name, objects[id(m)]))

    def buffer(self, index, name, shape, persistent=True, dtype=None):
        """The same drawn buffer registered on module `index` of both sides."""
        theirs, mine = self.tensor_pair(shape, dtype)
        objects = {id(self.theirs_pool): theirs, id(self.ours_pool): mine}
        self.both(f"m{index}.register_buffer({name!r}, randn{shape}, persistent={persistent})",
                  lambda m: m[index].register_buffer(name, objects[id(m)], persistent))

    def assign(self, index, name, kind, shape=(2,)):
        """m.name = a tensor, None, a number, a string, or a parameter/module taken from elsewhere in the model."""
        if kind == "tensor":
            theirs, mine = self.tensor_pair(shape)
            objects = {id(self.theirs_pool): theirs, id(self.ours_pool): mine}
            self.both(f"m{index}.{name} = randn{shape}", lambda m: setattr(m[index], name, objects[id(m)]))
        elif kind in ("None", "number", "string"):
            value = {"None": None, "number": 3, "string": "hello"}[kind]
            self.both(f"m{index}.{name} = {value!r}", lambda m: setattr(m[index], name, value))

    def share(self, index, name, source, source_name):
        """m{index}.name = m{source}.source_name (a parameter, buffer or module already in the model)."""
        self.both(f"m{index}.{name} = m{source}.{source_name}",
                  lambda m: setattr(m[index], name, getattr(m[source], source_name)))

    def share_module(self, index, name, source):
        """Make module `source` also a child `name` of module `index` on both sides, unless that would make a cycle."""
        if any(mod is self.theirs_pool[index] for mod in self.theirs_pool[source].modules()):
            return  # it would make a cycle
        self.both(f"m{index}.{name} = m{source}", lambda m: setattr(m[index], name, m[source]))

    def delete(self, index, name):
        """Delete attribute `name` of module `index` on both sides."""
        self.both(f"del m{index}.{name}", lambda m: delattr(m[index], name))


NAMES = ["w", "b", "fc", "net", "scale", "mean", "alpha", "layer", "head", "gamma"]
BAD_NAMES = ["a.b", "", "forward", "training", "add_module"]


def random_program(pair: ModelPair, steps: int, bad=True, shapes=((2,), (3, 2), (4,), (2, 3))):
    """Random registrations on a ModelPair: `steps` of them, drawn by `pair.draw`; `bad` adds calls torch refuses."""
    draw = pair.draw
    for _ in range(steps):
        index = draw.randint(0, len(pair.theirs_pool) - 1)
        name = draw.choice(NAMES)
        shape = draw.choice(shapes)
        kind = draw.choice(["module", "module", "param", "param", "param", "register_param", "buffer", "buffer",
                            "assign", "share", "share_module", "delete", "none_param", "none_module", "none_buffer",
                            "bad"] if bad else ["module", "param", "param", "buffer", "share", "share_module"])
        if kind == "module":
            pair.new_module(index, name)
        elif kind == "param":
            pair.parameter(index, name, shape)
        elif kind == "register_param":
            pair.parameter(index, name, shape, via_register=True)
        elif kind == "buffer":
            pair.buffer(index, name, shape, persistent=draw.choice([True, True, False]),
                        dtype=draw.choice([None, None, torch.int64]))
        elif kind == "assign":
            pair.assign(index, name, draw.choice(["tensor", "None", "number", "string"]), shape)
        elif kind == "share":
            source = draw.randint(0, len(pair.theirs_pool) - 1)
            owned = list(pair.theirs_pool[source]._parameters) + list(pair.theirs_pool[source]._buffers)
            if owned:
                pair.share(index, name, source, draw.choice(owned))
        elif kind == "share_module":
            pair.share_module(index, name, draw.randint(1, len(pair.theirs_pool) - 1)) if len(pair.theirs_pool) > 1 else None
        elif kind == "delete":
            pair.delete(index, name)
        elif kind == "none_param":
            pair.both(f"m{index}.register_parameter({name!r}, None)", lambda m: m[index].register_parameter(name, None))
        elif kind == "none_module":
            pair.both(f"m{index}.add_module({name!r}, None)", lambda m: m[index].add_module(name, None))
        elif kind == "none_buffer":
            pair.both(f"m{index}.register_buffer({name!r}, None)", lambda m: m[index].register_buffer(name, None))
        else:
            bad_name = draw.choice(BAD_NAMES + [3])
            what = draw.choice(["register_parameter", "register_buffer", "add_module", "param_as_tensor",
                                "buffer_as_number", "module_as_tensor", "param_computed"])
            t = draw.randn(2)
            if what == "register_parameter":
                pair.both(f"m{index}.register_parameter({bad_name!r}, Parameter(...))",
                          lambda m: m[index].register_parameter(bad_name, (torch.nn.Parameter(t.clone()) if m is pair.theirs_pool
                                                                           else pair.nn.Parameter(pair.to_ours(t)))))
            elif what == "register_buffer":
                pair.both(f"m{index}.register_buffer({bad_name!r}, randn(2))",
                          lambda m: m[index].register_buffer(bad_name, t.clone() if m is pair.theirs_pool else pair.to_ours(t)))
            elif what == "add_module":
                pair.both(f"m{index}.add_module({bad_name!r}, Module())",
                          lambda m: m[index].add_module(bad_name, torch.nn.Module() if m is pair.theirs_pool else pair.nn.Module()))
            elif what == "param_as_tensor":
                pair.both(f"m{index}.register_parameter({name!r}, randn(2))  # a plain tensor",
                          lambda m: m[index].register_parameter(name, t.clone() if m is pair.theirs_pool else pair.to_ours(t)))
            elif what == "buffer_as_number":
                pair.both(f"m{index}.register_buffer({name!r}, 2.5)", lambda m: m[index].register_buffer(name, 2.5))
            elif what == "module_as_tensor":
                pair.both(f"m{index}.add_module({name!r}, randn(2))",
                          lambda m: m[index].add_module(name, t.clone() if m is pair.theirs_pool else pair.to_ours(t)))
            else:
                pair.both(f"m{index}.register_parameter({name!r}, x * 2)  # x requires grad",
                          lambda m: m[index].register_parameter(name, (torch.nn.Parameter(t.clone()) * 2 if m is pair.theirs_pool
                                                                       else pair.nn.Parameter(pair.to_ours(t)) * 2)))
    return pair


def expect_same_object(mine, theirs, pair, what):
    """mine must be your twin of torch's object `theirs` (or both None)."""
    __tracebackhide__ = True
    if theirs is None:
        assert mine is None, f"{what}: torch has None here, you have {type(mine).__name__}"
        return
    assert mine is pair.twin.get(id(theirs)), (
        f"{what}: torch gives its {type(theirs).__name__}, the one that corresponds to another object than yours "
        f"(you gave a {type(mine).__name__})")
