"""Typical wrong answers to chapter 03, one dict per exercise: {what is wrong: the cell's code}.

tests/chapters/test_chapters.py puts each one in place of the exercise's solution cell, runs the source
notebook (hidden tests included) up to that exercise's tests and expects them to fail.

Each wrong answer is the solution cell with one mistake put in (`_wrong`), so that the given parts
of the cell (class skeletons, signatures) stay as the student sees them. A replacement that no
longer matches the solution fails loudly, here, rather than making a mutant that is not wrong.
"""
from __future__ import annotations

from solution_text import rewrite, solution


def _wrong(exercise: str, *replacements: tuple[str, str]) -> str:
    return rewrite(solution("03_module", exercise), *replacements, what=f"mutant of {exercise}", every=True)


# A ModuleList that keeps its modules in a plain Python list: indexing and iteration work, but the
# modules are not registered, so the walk (parameters, state_dict, to, train) never sees them.
_PLAIN_LIST = '''
class ModuleList(Module):
    def __init__(self, modules=None):
        super().__init__()
        self.items = list(modules) if modules is not None else []

    def __getitem__(self, idx):
        return type(self)(self.items[idx]) if isinstance(idx, slice) else self.items[idx]

    def __setitem__(self, idx, module):
        self.items[idx] = module

    def __delitem__(self, idx):
        del self.items[idx]

    def __len__(self):
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def __iadd__(self, modules):
        return self.extend(modules)

    def append(self, module):
        self.items.append(module)
        return self

    def extend(self, modules):
        if not hasattr(modules, "__iter__"):
            raise TypeError("ModuleList.extend should be called with an iterable")
        self.items.extend(modules)
        return self

    def insert(self, index, module):
        self.items.insert(index, module)
'''


def _plain_module_list() -> str:
    code = solution("03_module", "ex_containers")
    return code[:code.index("class ModuleList(Module):")] + _PLAIN_LIST.lstrip("\n")


MUTANTS = {
    "ex_parameter": {
        "Parameter starts at the storage's beginning (the view's offset is lost)":
            _wrong("ex_parameter", ("super().__init__(data._storage, data._shape, data._stride, data._offset)",
                                    "super().__init__(data._storage, data._shape, data._stride, 0)")),
        "Parameter copies the data instead of sharing its memory":
            _wrong("ex_parameter", ("super().__init__(data._storage, data._shape, data._stride, data._offset)",
                                    "copy = data.detach().clone()\n"
                                    "        super().__init__(copy._storage, copy._shape, copy._stride, copy._offset)")),
        "a new Parameter does not require grad":
            _wrong("ex_parameter", ("self.requires_grad_(requires_grad)", "pass")),
        "requires_grad=False is ignored":
            _wrong("ex_parameter", ("self.requires_grad_(requires_grad)", "self.requires_grad_(True)")),
        "repr without 'Parameter containing:'":
            _wrong("ex_parameter", ('return "Parameter containing:\\n" + super().__repr__()',
                                    "return super().__repr__()")),
    },
    "ex_registration": {
        "a parameter is kept in __dict__ as well as in _parameters":
            _wrong("ex_registration", ("""            self.register_parameter(name, value)
        elif params is not None and name in params:""", """            self.register_parameter(name, value)
            object.__setattr__(self, name, value)
        elif params is not None and name in params:""")),
        "an assigned Module becomes a plain attribute, not a registered sub-module":
            _wrong("ex_registration", ("""                remove_from(self.__dict__, self._parameters, self._buffers, self._non_persistent_buffers_set)
                modules[name] = value""", """                object.__setattr__(self, name, value)""")),
        "a tensor assigned to a buffer's name becomes a plain attribute instead of the new buffer":
            _wrong("ex_registration", ("                    buffers[name] = value",
                                       "                    object.__setattr__(self, name, value)")),
        "a plain tensor assigned over a parameter is accepted as an attribute":
            _wrong("ex_registration", ("""            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            self.register_parameter(name, value)""", """            if value is not None:
                object.__setattr__(self, name, value)
                return
            self.register_parameter(name, value)""")),
        "__getattr__ does not look in _buffers":
            _wrong("ex_registration", ('for place in ("_parameters", "_buffers", "_modules"):',
                                       'for place in ("_parameters", "_modules"):')),
        "register_buffer ignores persistent=False":
            _wrong("ex_registration", ("self._non_persistent_buffers_set.add(name)",
                                       "self._non_persistent_buffers_set.discard(name)")),
        "a name that is already an attribute (a method, say) may be registered":
            _wrong("ex_registration", ("if hasattr(module, name) and name not in registry:", "if False:")),
        "deleting a buffer leaves its name in the non-persistent set":
            _wrong("ex_registration", ("""            del self._buffers[name]
            self._non_persistent_buffers_set.discard(name)""", """            del self._buffers[name]""")),
        "a buffer registered again as persistent stays in the non-persistent set":
            _wrong("ex_registration", ("""        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)""", """        if not persistent:
            self._non_persistent_buffers_set.add(name)""")),
        "a Parameter assigned over a buffer leaves the buffer in _buffers":
            _wrong("ex_registration", ("remove_from(self.__dict__, self._buffers, self._modules, self._non_persistent_buffers_set)",
                                       "remove_from(self.__dict__, self._modules, self._non_persistent_buffers_set)")),
        "any value replaces a buffer (a number too)":
            _wrong("ex_registration", ("                    if value is not None and not isinstance(value, Tensor):",
                                       "                    if False:")),
        "an empty name is accepted":
            _wrong("ex_registration", ('    if name == "":', "    if False:")),
        "register_buffer accepts a value that is not a tensor":
            _wrong("ex_registration", ("        if tensor is not None and not isinstance(tensor, Tensor):", "        if False:")),
    },
    "ex_walk": {
        "named_modules walks into a None sub-module's place":
            _wrong("ex_walk", ("""                if module is None:
                    continue
                yield from""", """                yield from""")),
        "a parameter that is None is yielded":
            _wrong("ex_walk", ("if value is None or value in memo:", "if value in memo:")),
        "named_modules ignores the memo it is given":
            _wrong("ex_walk", ("""        if memo is None:
            memo = set()""", """        memo = set() if memo is None or prefix == "" else memo""")),
        "named_modules does not recurse below the children":
            _wrong("ex_walk", ('yield from module.named_modules(memo, prefix + ("." if prefix else "") + name, '
                               'remove_duplicate)', 'yield prefix + ("." if prefix else "") + name, module')),
        "a parameter shared by two modules is yielded twice":
            _wrong("ex_walk", ("if value is None or value in memo:", "if value is None:")),
        "names at the root start with a dot ('.w')":
            _wrong("ex_walk", ('yield module_prefix + ("." if module_prefix else "") + name, value',
                               'yield module_prefix + "." + name, value')),
        "a module shared by two parents is walked twice":
            _wrong("ex_walk", ("memo.add(self)", "pass")),
        "parameters() returns a list, not a generator":
            _wrong("ex_walk", ("""        for _, param in self.named_parameters(recurse=recurse):
            yield param""", """        return [param for _, param in self.named_parameters(recurse=recurse)]""")),
        "buffers are yielded by parameters() too":
            _wrong("ex_walk", ("yield from self._named_members(lambda module: module._parameters.items(), prefix, "
                               "recurse, remove_duplicate)",
                               "yield from self._named_members(lambda module: itertools.chain(module._parameters.items(), "
                               "module._buffers.items()), prefix, recurse, remove_duplicate)")),
        "children() yields a child registered under two names twice":
            _wrong("ex_walk", ("if module is not None and module not in memo:", "if module is not None:")),
        "recurse=False is ignored":
            _wrong("ex_walk", ("self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else "
                               "[(prefix, self)]", "self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)")),
    },
    "ex_state_dict": {
        "non-persistent buffers are saved":
            _wrong("ex_state_dict", ("if buf is not None and name not in self._non_persistent_buffers_set:",
                                     "if buf is not None:")),
        "the values are not detached":
            _wrong("ex_state_dict", ("param if keep_vars else param.detach()", "param")),
        "sub-module keys without the dot ('fcweight')":
            _wrong("ex_state_dict", ('prefix=prefix + name + "."', "prefix=prefix + name")),
        "loading replaces the tensors instead of copying into them":
            _wrong("ex_state_dict", ("""                with no_grad():
                    param.copy_(value)""", """                if isinstance(param, Parameter):
                    module._parameters[name] = Parameter(value, param.requires_grad)
                else:
                    module._buffers[name] = value""")),
        "missing keys are not reported":
            _wrong("ex_state_dict", ("""                    missing_keys.append(key)
                    continue""", """                    continue""")),
        "a tensor of another shape is skipped silently":
            _wrong("ex_state_dict", ("""                    error_msgs.append(f"size mismatch for {key}: copying a param with shape {size_text(value.shape)} "
                                      f"from checkpoint, the shape in current model is {size_text(param.shape)}.")
                    continue""", """                    continue""")),
        "torch_state_dict shares memory with the model (no copy)":
            _wrong("ex_state_dict", ("(key, value.to_torch().clone())", "(key, value.to_torch())")),
        "torch tensors are not converted":
            _wrong("ex_state_dict", ("value = as_ours(local_dict[key])", "value = local_dict[key]")),
        "keys of unknown sub-modules are not unexpected":
            _wrong("ex_state_dict", ("""                        if input_name[0] not in module._modules:
                            unexpected_keys.append(key)""", """                        pass""")),
        "the size mismatches come before the missing and unexpected keys":
            _wrong("ex_state_dict", ('error_msgs.insert(0, "Unexpected key(s)', 'error_msgs.append("Unexpected key(s)'),
                   ('error_msgs.insert(0, "Missing key(s)', 'error_msgs.append("Missing key(s)')),
        "state_dict ignores its prefix":
            _wrong("ex_state_dict", ("""        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name]""", """        for name, param in self._parameters.items():
            if param is not None:
                destination[name]""")),
        "missing keys are reported only when strict":
            _wrong("ex_state_dict", ("""                    missing_keys.append(key)
                    continue""", """                    if strict:
                        missing_keys.append(key)
                    continue""")),
    },
    "ex_modes": {
        "train() and eval() do not recurse into the sub-modules":
            _wrong("ex_modes", ("module.train(mode)", "pass")),
        "train(mode) ignores mode":
            _wrong("ex_modes", ("self.training = mode", "self.training = True")),
        "apply calls fn on the module before its children":
            _wrong("ex_modes", ("""        for module in self.children():
            module.apply(fn)
        fn(self)""", """        fn(self)
        for module in self.children():
            module.apply(fn)""")),
        "zero_grad(set_to_none=False) sets the gradients to None anyway":
            _wrong("ex_modes", ("if set_to_none:", "if True:")),
        "zero_grad(set_to_none=False) replaces .grad by new zeros":
            _wrong("ex_modes", ("""                    with no_grad():
                        p.grad.zero_()""", """                    p.grad = p.grad * 0""")),
        "requires_grad_ ignores its argument":
            _wrong("ex_modes", ("p.requires_grad_(requires_grad)", "p.requires_grad_(True)")),
        "to() makes new Parameter objects (an optimizer holding the old ones trains nothing)":
            _wrong("ex_modes", ("param.data = new", "self._parameters[name] = Parameter(new, param.requires_grad)")),
        "to(float64) converts integer buffers too":
            _wrong("ex_modes", ("t.to(device, dtype if t.is_floating_point() else None)", "t.to(device, dtype)")),
        "to() leaves the buffers as they were":
            _wrong("ex_modes", ("self._buffers[name] = fn(buf)", "pass")),
        "to() leaves the gradients in the old dtype":
            _wrong("ex_modes", ("param.grad.data = grad", "pass")),
        "an integer dtype is accepted":
            _wrong("ex_modes", ("if dtype is not None and not dtype.is_floating_point:", "if False:")),
    },
    "ex_call_repr": {
        "forward hooks are never called":
            _wrong("ex_call_repr", ("""        for hook in list(self._forward_hooks.values()):
            result = hook(self, args, output)
            if result is not None:
                output = result""", "")),
        "a forward hook's result does not replace the output":
            _wrong("ex_call_repr", ("                output = result", "                pass")),
        "prepend=True is ignored":
            _wrong("ex_call_repr", ("self._forward_hooks.move_to_end(handle.id, last=False)", "pass")),
        "keyword arguments are not passed to forward":
            _wrong("ex_call_repr", ("output = self.forward(*args, **kwargs)", "output = self.forward(*args)")),
        "a forward pre-hook's result is ignored":
            _wrong("ex_call_repr", ("                args = result if isinstance(result, tuple) else (result,)", "                pass")),
        "a one-line extra_repr is put on a line of its own":
            _wrong("ex_call_repr", ("if len(extra_lines) == 1 and not child_lines:", "if False:")),
        "a one-line extra_repr goes inside the parentheses even when there are children, which are left out":
            _wrong("ex_call_repr", ("if len(extra_lines) == 1 and not child_lines:", "if len(extra_lines) == 1:")),
        "a child's repr of several lines is not indented":
            _wrong("ex_call_repr", ("_addindent(repr(module), 2)", "repr(module)")),
        "children with a None value are left out of the repr":
            _wrong("ex_call_repr", ("for name, module in self._modules.items()]",
                                    "for name, module in self._modules.items() if module is not None]")),
    },
    "ex_linear": {
        "the bias starts at zero, not uniform on ±1/√in_features":
            _wrong("ex_linear", ("self.bias.uniform_(-bound, bound)", "self.bias.zero_()")),
        "the bias is drawn before the weight":
            _wrong("ex_linear", ("""        kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_features
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            with no_grad():
                self.bias.uniform_(-bound, bound)""", """        if self.bias is not None:
            fan_in = self.in_features
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            with no_grad():
                self.bias.uniform_(-bound, bound)
        kaiming_uniform_(self.weight, a=math.sqrt(5))""")),
        "the weight's bound is 1/fan_in instead of 1/√fan_in":
            _wrong("ex_linear", ("std = gain / math.sqrt(fan_in)", "std = gain / fan_in")),
        "the gradient of the bias is the mean over the batch, not the sum":
            _wrong("ex_linear", ("grad_b = from_numpy(g2.sum(0))", "grad_b = from_numpy(g2.mean(0))")),
        "bias=False still makes a bias (of zeros)":
            _wrong("ex_linear", ('self.register_parameter("bias", None)',
                                 "self.bias = Parameter(zeros(out_features, dtype=dtype))")),
        "forward calls the CPU kernel itself, past the dispatcher (no Autograd kernel: no gradient)":
            _wrong("ex_linear", ('return dispatch("linear", x, self.weight, self.bias)',
                                 "return linear_cpu(x, self.weight, self.bias)")),
        "the weight's gradient is wrong for inputs with more than one batch dim (x is not flattened)":
            _wrong("ex_linear", ("x2 = x.numpy().reshape(-1, x.shape[-1])", "x2 = x.numpy()")),
    },
    "ex_layers": {
        "Dropout accepts a p outside [0, 1]":
            _wrong("ex_layers", ("if p < 0 or p > 1:", "if False:")),
        "Dropout(1.0) divides by zero (no special case for p = 1)":
            _wrong("ex_layers", ("""        if self.p == 1:
            return x * 0
""", "")),
        "Dropout drops in eval mode too":
            _wrong("ex_layers", ("if not self.training or self.p == 0:", "if self.p == 0:")),
        "Dropout does not scale the kept elements by 1 / (1 - p)":
            _wrong("ex_layers", ("return x * (mask / (1 - self.p))", "return x * mask")),
        "Dropout keeps an element with probability p instead of 1 - p":
            _wrong("ex_layers", ("mask = bernoulli(x.shape, 1 - self.p, x.dtype)", "mask = bernoulli(x.shape, self.p, x.dtype)")),
        "Flatten ignores end_dim":
            _wrong("ex_layers", ("return x.flatten(self.start_dim, self.end_dim)", "return x.flatten(self.start_dim)")),
        "ReLU's repr always says inplace":
            _wrong("ex_layers", ('return "inplace=True" if self.inplace else ""', 'return f"inplace={self.inplace}"')),
        "Sigmoid computes tanh (a copy-paste slip)":
            _wrong("ex_layers", ("return x.sigmoid()", "return x.tanh()")),
    },
    "ex_containers": {
        "Sequential(OrderedDict(...)) numbers its modules instead of keeping the names":
            _wrong("ex_containers", ("""            for key, module in args[0].items():
                self.add_module(key, module)""", """            for index, module in enumerate(args[0].values()):
                self.add_module(str(index), module)""")),
        "a ModuleList's slice keeps the names":
            _wrong("ex_containers", ("            return type(self)(list(self._modules.values())[idx])\n", """            out = type(self)()
            for key, module in list(self._modules.items())[idx]:
                out.add_module(key, module)
            return out
""")),
        "ModuleList keeps its modules in a plain Python list the walk cannot see": _plain_module_list(),
        "a slice of a Sequential is numbered again instead of keeping the names":
            _wrong("ex_containers", ("return type(self)(OrderedDict(list(self._modules.items())[idx]))",
                                     "return type(self)(*list(self._modules.values())[idx])")),
        "deleting does not number the rest again":
            _wrong("ex_containers", ("""        modules = list(self._modules.values())
        self._modules.clear()
        for index, module in enumerate(modules):
            self._modules[str(index)] = module""", "")),
        "ModuleList looks a negative index up as the name '-1'":
            _wrong("ex_containers", ("return str(idx % len(self))", "return str(idx)")),
        "Sequential.forward returns the input of the last module":
            _wrong("ex_containers", ("""        for module in self:
            x = module(x)
        return x""", """        for module in list(self)[:-1]:
            x = module(x)
        return x""")),
        "ModuleList's repr does not group equal modules":
            _wrong("ex_containers", ("if runs and runs[-1][2] == r:", "if False:")),
    },
    "ex_norms": {
        "LayerNorm accepts an input whose last dims are not normalized_shape":
            _wrong("ex_norms", ("if x.dim() < n or tuple(x.shape[x.dim() - n:]) != self.normalized_shape:", "if x.dim() < n:")),
        "BatchNorm1d accepts a 4-D input":
            _wrong("ex_norms", ("if x.dim() not in (2, 3):", "if x.dim() < 2:")),
        "BatchNorm1d trains on one value per channel":
            _wrong("ex_norms", ("if self.training and n <= 1:", "if self.training and n < 1:")),
        "BatchNorm updates its running statistics in eval mode (and normalises with the batch's)":
            _wrong("ex_norms", ("update = self.training and self.track_running_stats", "update = self.track_running_stats"),
                   ("if self.training or self.running_mean is None:", "if True:")),
        "the running variance is updated with the biased variance":
            _wrong("ex_norms", ("(f * n / (n - 1))", "f")),
        "BatchNorm normalises with the unbiased variance":
            _wrong("ex_norms", ("            var = (centered * centered).mean(dims, keepdim=True)\n            if update:",
                                "            var = (centered * centered).sum(dims, keepdim=True) / (n - 1)\n            if update:")),
        "the running statistics are replaced by new tensors, not updated in place":
            _wrong("ex_norms", ("self.running_mean.mul_(1 - f).add_(mean.reshape(channels) * f)",
                                "self.running_mean = self.running_mean * (1 - f) + mean.reshape(channels) * f")),
        "momentum weighs the old statistics instead of the new ones":
            _wrong("ex_norms", ("self.running_mean.mul_(1 - f).add_(mean.reshape(channels) * f)",
                                "self.running_mean.mul_(f).add_(mean.reshape(channels) * (1 - f))")),
        "momentum=None is taken as 0.1 instead of a cumulative average":
            _wrong("ex_norms", ("f = 1.0 / float(self.num_batches_tracked.item())", "f = 0.1")),
        "the running statistics are Parameters, not buffers":
            _wrong("ex_norms", ('self.register_buffer("running_mean", zeros(num_features, dtype=dtype))',
                                "self.running_mean = Parameter(zeros(num_features, dtype=dtype), requires_grad=False)")),
        "LayerNorm normalises over the last dim only":
            _wrong("ex_norms", ("dims = tuple(range(x.dim() - n, x.dim()))", "dims = (-1,)")),
        "eps is added after the square root":
            _wrong("ex_norms", ("y = centered / (var + self.eps).sqrt()", "y = centered / (var.sqrt() + self.eps)")),
    },
    "ex_embedding": {
        "the backward assigns rows instead of adding them (a repeated index counts once)":
            _wrong("ex_embedding", ("np.add.at(out, indices.numpy().reshape(-1), grad.numpy().reshape(-1, dim))",
                                    "out[indices.numpy().reshape(-1)] = grad.numpy().reshape(-1, dim)")),
        "the padding row gets a gradient":
            _wrong("ex_embedding", ("        out[padding_idx] = 0", "        pass")),
        "forward calls the CPU kernel itself, past the dispatcher (no Autograd kernel: no gradient)":
            _wrong("ex_embedding", ('return dispatch("embedding", self.weight, indices, self.padding_idx)',
                                    "return embedding_cpu(self.weight, indices, self.padding_idx)")),
        "the padding row is not zeroed at initialisation":
            _wrong("ex_embedding", ("self.weight[self.padding_idx].fill_(0)", "pass")),
        "a negative padding_idx is not wrapped":
            _wrong("ex_embedding", ("padding_idx = num_embeddings + padding_idx", "pass")),
        "negative indices are accepted (NumPy counts them from the end)":
            _wrong("ex_embedding", ("if idx.size and (idx.min() < 0 or idx.max() >= weight.shape[0]):",
                                    "if idx.size and idx.max() >= weight.shape[0]:")),
    },
}
