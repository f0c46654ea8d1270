"""Typical wrong answers to chapter 04, one dict per exercise: {what is wrong: the cell's code}.

tests/chapters/test_chapters.py puts each one in place of the exercise's solution cell, runs the source
notebook (hidden tests included) up to that exercise's tests and expects them to fail.

Each wrong answer is the solution cell with one mistake put in (`_wrong`), so that the given parts
of the cell stay as the student sees them. A replacement that no longer matches the solution fails
loudly, here, rather than making a mutant that is not wrong.
"""
from __future__ import annotations

from solution_text import rewrite, solution


def _wrong(exercise: str, *replacements: tuple[str, str]) -> str:
    return rewrite(solution("04_training", exercise), *replacements, what=f"mutant of {exercise}", every=True)


_MEAN_DIVISION = """        if reduction == "mean":
            g = g / g.dtype.type(weights.sum())
"""
_SAVE = """            if checkpoint is not None:
                save({"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, checkpoint)
"""

MUTANTS = {
    "ex_mse": {
        "the 'mean' reduction returns the sum":
            _wrong("ex_mse", ("return loss.mean()", "return loss.sum()")),
        "the absolute difference instead of its square":
            _wrong("ex_mse", ("loss = diff * diff", "loss = diff.abs()")),
        "MSELoss ignores its reduction":
            _wrong("ex_mse", ("return mse_loss(input, target, self.reduction)", "return mse_loss(input, target)")),
    },
    "ex_cross_entropy": {
        "a log_softmax that overflows: the maximum is not subtracted":
            _wrong("ex_cross_entropy", ("shifted = values - values.max(axis=axis, keepdims=True)", "shifted = values")),
        "a softmax that overflows: the maximum is not subtracted":
            _wrong("ex_cross_entropy", ("e = np.exp(values - values.max(axis=axis, keepdims=True))", "e = np.exp(values)")),
        "the gradient of the mean forgets to divide by the number of samples":
            _wrong("ex_cross_entropy", (_MEAN_DIVISION, "")),
        "nll_loss's gradient has its sign flipped (+1 at the target)":
            _wrong("ex_cross_entropy", ("np.where(counted, -sample,", "np.where(counted, sample,")),
        "log_softmax's backward passes the gradient through unchanged":
            _wrong("ex_cross_entropy", ("return from_numpy(g - np.exp(output.numpy()) * g.sum(axis=_axis(grad, dim), keepdims=True))",
                                        "return from_numpy(g)")),
        "softmax's backward forgets the sum term (out * g)":
            _wrong("ex_cross_entropy", ("return from_numpy(out * (g - (g * out).sum(axis=_axis(grad, dim), keepdims=True)))",
                                        "return from_numpy(out * g)")),
        "ignored targets still count in the loss":
            _wrong("ex_cross_entropy", ("""    weights = sample_weights(weight, labels, counted, scores.dtype)
    losses = np.where(counted,""", """    weights = sample_weights(weight, labels, np.ones_like(counted), scores.dtype)
    losses = np.where(True,""")),
        "ignored targets still get a gradient (at class 0)":
            _wrong("ex_cross_entropy", ("sample = np.broadcast_to(g, labels.shape) * weights",
                                        "sample = np.broadcast_to(g, labels.shape) * np.where(counted, weights, 1)"),
                   ("np.where(counted, -sample, sample.dtype.type(0))", "-sample")),
        "the class weights are left out (weight taken as None)":
            _wrong("ex_cross_entropy", ("sample_weights(weight, labels, counted, scores.dtype)",
                                        "sample_weights(None, labels, counted, scores.dtype)")),
        "with class weights, 'mean' divides by the number of counted samples instead of their weights' sum":
            _wrong("ex_cross_entropy", ("reduce_losses(losses, weights, reduction,", "reduce_losses(losses, counted, reduction,"),
                   ("g = g / g.dtype.type(weights.sum())", "g = g / g.dtype.type(counted.sum())")),
        "the loss's gradient forgets the class weights":
            _wrong("ex_cross_entropy", ("sample = np.broadcast_to(g, labels.shape) * weights",
                                        "sample = np.broadcast_to(g, labels.shape) * counted")),
        "cross_entropy drops its weight":
            _wrong("ex_cross_entropy", ("return nll_loss(log_softmax(input, class_dim), target, reduction, ignore_index, weight)",
                                        "return nll_loss(log_softmax(input, class_dim), target, reduction, ignore_index)")),
        "cross_entropy takes log_softmax along dim 1 even for one sample of shape (C,)":
            _wrong("ex_cross_entropy", ("class_dim = 0 if input.dim() == 1 else 1", "class_dim = 1")),
        "cross_entropy takes log_softmax along dim 0, across the batch":
            _wrong("ex_cross_entropy", ("class_dim = 0 if input.dim() == 1 else 1", "class_dim = 0")),
    },
    "ex_optimizer": {
        "the defaults override what a group gives":
            _wrong("ex_optimizer", ("group.setdefault(name, default)", "group[name] = default")),
        "zero_grad(set_to_none=False) replaces .grad instead of zeroing it in place":
            _wrong("ex_optimizer", ("p.grad.zero_()", "p.grad = p.grad * 0")),
        "load_state_dict keeps torch's tensors as they are":
            _wrong("ex_optimizer", ("            value = as_our_tensor(value)\n", "")),
        "load_state_dict does not cast the state to the parameter's dtype":
            _wrong("ex_optimizer", ("value = value.to(param.dtype)", "value = value")),
        "load_state_dict keeps the optimizer's own hyper-parameters":
            _wrong("ex_optimizer", ("""        self.param_groups = [dict(copy.deepcopy({k: v for k, v in s.items() if k != "params"}), params=g["params"])
                             for s, g in zip(saved, self.param_groups)]
""", "")),
        "a parameter may be in two groups":
            _wrong("ex_optimizer", ("""        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
""", "")),
        "state_dict copies the state's tensors (torch's holds them)":
            _wrong("ex_optimizer", ('return {"state": {index[id(p)]: s for p, s in self.state.items()}',
                                    'return {"state": {index[id(p)]: copy.deepcopy(s) for p, s in self.state.items()}')),
        "load_state_dict shares the state dict's tensors instead of copying them":
            _wrong("ex_optimizer", ("return value.clone()", "return value")),
        "a set of tensors is accepted":
            _wrong("ex_optimizer", ("""        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering of "
                            "tensors in sets will change between runs. Please use a list instead.")
""", "")),
        "load_state_dict accepts a group of another size":
            _wrong("ex_optimizer", ("""        if any(len(s["params"]) != len(g["params"]) for s, g in zip(saved, self.param_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
""", "")),
    },
    "ex_sgd": {
        "weight decay applied after momentum":
            _wrong("ex_sgd", ("""                    if weight_decay != 0:
                        grad = grad + weight_decay * p
                    if momentum != 0:""", """                    if momentum != 0:"""),
                   ("                    p.sub_(lr * grad)", """                    if weight_decay != 0:
                        grad = grad + weight_decay * p
                    p.sub_(lr * grad)""")),
        "dampening applied on the first step too":
            _wrong("ex_sgd", ('buf = state["momentum_buffer"] = grad.clone()',
                              'buf = state["momentum_buffer"] = (1 - dampening) * grad')),
        "Nesterov steps along the buffer alone":
            _wrong("ex_sgd", ("grad = grad + momentum * buf if nesterov else buf", "grad = buf")),
        "maximize is ignored":
            _wrong("ex_sgd", ("""                    if maximize:
                        grad = -grad
""", "")),
        "every group uses the constructor's lr":
            _wrong("ex_sgd", ('lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]',
                              'lr, momentum, dampening = self.defaults["lr"], group["momentum"], group["dampening"]')),
        "weight decay is added into p.grad in place (torch leaves .grad as it was)":
            _wrong("ex_sgd", ("grad = grad + weight_decay * p", "grad += weight_decay * p")),
        "the update is written to a copy, not to the parameter":
            _wrong("ex_sgd", ("p.sub_(lr * grad)", "p = p - lr * grad")),
        "a parameter without .grad steps with a zero gradient (and gets a momentum buffer)":
            _wrong("ex_sgd", ("""                    if p.grad is None:
                        continue
                    grad = p.grad
""", """                    grad = zeros(*p.shape, dtype=p.dtype) if p.grad is None else p.grad
""")),
    },
    "ex_adam": {
        "bias correction missing":
            _wrong("ex_adam", ("denom = (v.sqrt() / math.sqrt(1 - beta2 ** t)).add_(eps)", "denom = v.sqrt().add_(eps)"),
                   ("p.addcdiv_(m, denom, value=-(lr / (1 - beta1 ** t)))", "p.addcdiv_(m, denom, value=-lr)")),
        "AdamW adds its decay to the gradient, as Adam does":
            _wrong("ex_adam", ("if self.decoupled_weight_decay:", "if False:")),
        "Adam decouples its decay, as AdamW does":
            _wrong("ex_adam", ("if self.decoupled_weight_decay:", "if True:")),
        "Adam's weight decay is added into p.grad in place":
            _wrong("ex_adam", ("grad = grad + weight_decay * p", "grad += weight_decay * p")),
        "eps inside the square root":
            _wrong("ex_adam", ("denom = (v.sqrt() / math.sqrt(1 - beta2 ** t)).add_(eps)",
                               "denom = (v / (1 - beta2 ** t) + eps).sqrt()")),
        "amsgrad keeps the maximum of the first moment":
            _wrong("ex_adam", ("v_max.copy_(v_max.maximum(v))", "v_max.copy_(v_max.maximum(m))")),
        "beta1 and 1 - beta1 swapped in the first moment":
            _wrong("ex_adam", ("m.lerp_(grad, 1 - beta1)", "m.lerp_(grad, beta1)")),
        "maximize is ignored":
            _wrong("ex_adam", ("""                    if maximize:
                        grad = -grad
""", "")),
        "the step counter is an int64 tensor (torch's is float32)":
            _wrong("ex_adam", ('state["step"] = tensor(0.0, dtype=float32)', 'state["step"] = tensor(0, dtype=int64)')),
        "every group uses the constructor's betas":
            _wrong("ex_adam", ('lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]',
                               'lr, (beta1, beta2), eps = group["lr"], self.defaults["betas"], group["eps"]')),
    },
    "ex_scheduler": {
        "a second scheduler overwrites initial_lr":
            _wrong("ex_scheduler", ('group.setdefault("initial_lr", group["lr"])', 'group["initial_lr"] = group["lr"]')),
        "the constructor does not take the first step":
            _wrong("ex_scheduler", ("        self.last_epoch = last_epoch\n        self.step()\n",
                                    "        self.last_epoch = last_epoch\n")),
        "StepLR decays every epoch":
            _wrong("ex_scheduler", ("self.gamma ** (self.last_epoch // self.step_size)", "self.gamma ** self.last_epoch")),
        "the cosine spans T_max + 1 epochs":
            _wrong("ex_scheduler", ("math.pi * self.last_epoch / self.T_max", "math.pi * self.last_epoch / (self.T_max + 1)")),
    },
    "ex_samplers": {
        "RandomSampler skips torch's last, empty permutation, so later passes differ":
            _wrong("ex_samplers", ("            yield from torch.randperm(n, generator=generator).tolist()[:self.num_samples % n]",
                                   "            if self.num_samples % n:\n"
                                   "                yield from torch.randperm(n, generator=generator).tolist()[:self.num_samples % n]")),
        "RandomSampler without a generator always uses seed 0":
            _wrong("ex_samplers", ("seed = int(torch.empty((), dtype=torch.int64).random_().item())", "seed = 0")),
        "BatchSampler drops the last, short batch even without drop_last":
            _wrong("ex_samplers", ("if batch and not self.drop_last:", "if False:")),
        "BatchSampler's len rounds down":
            _wrong("ex_samplers", ("return (len(self.sampler) + self.batch_size - 1) // self.batch_size",
                                   "return len(self.sampler) // self.batch_size")),
        "TensorDataset accepts tensors of different lengths":
            _wrong("ex_samplers", ("""        if any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise AssertionError("Size mismatch between tensors")
""", "")),
        "RandomSampler ignores replacement":
            _wrong("ex_samplers", ("        if self.replacement:\n", "        if False:\n")),
        "BatchSampler accepts batch_size=True (a bool is an int)":
            _wrong("ex_samplers", ("if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:",
                                   "if not isinstance(batch_size, int) or batch_size <= 0:")),
    },
    "ex_dataloader": {
        "no base-seed draw at the start of an iteration, so the shuffle differs from torch's":
            _wrong("ex_dataloader", ("        torch.empty((), dtype=torch.int64).random_(generator=self.generator)\n", "")),
        "tuples of samples are collated into a tuple (torch gives a list)":
            _wrong("ex_dataloader", ("return type(elem)(*fields) if hasattr(elem, \"_fields\") else fields",
                                     "return type(elem)(*fields) if hasattr(elem, \"_fields\") else tuple(fields)")),
        "Python floats are collated as float32":
            _wrong("ex_dataloader", ("return from_numpy(np.array(batch, np.float64))",
                                     "return from_numpy(np.array(batch, np.float32))")),
        "bools are collated as int64 (a bool is an int)":
            _wrong("ex_dataloader", ("""    if isinstance(elem, bool):
        return from_numpy(np.array(batch, np.bool_))
""", "")),
        "a named tuple is collated into a list":
            _wrong("ex_dataloader", ('return type(elem)(*fields) if hasattr(elem, "_fields") else fields', "return fields")),
        "a dict is collated as a list of its keys":
            _wrong("ex_dataloader", ("    if isinstance(elem, dict):\n", "    if False:\n")),
        "sampler together with shuffle=True is accepted":
            _wrong("ex_dataloader", ("""        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
""", "")),
        "the sampler given is ignored":
            _wrong("ex_dataloader", ("        if sampler is None:\n            sampler =", "        if True:\n            sampler =")),
        "len(loader) counts samples, not batches":
            _wrong("ex_dataloader", ("        return len(self.batch_sampler)\n", "        return len(self.dataset)\n")),
        "drop_last is ignored":
            _wrong("ex_dataloader", ("BatchSampler(sampler, batch_size, drop_last)", "BatchSampler(sampler, batch_size, False)")),
        "the fast path repeats samples: it gathers every other index twice":
            _wrong("ex_dataloader", ("rows = np.asarray(indices, dtype=np.int64)",
                                     "rows = np.asarray(indices, dtype=np.int64)[np.arange(len(indices)) // 2 * 2]")),
    },
    "ex_train_loop": {
        "no zero_grad: the gradients add up over the batches":
            _wrong("ex_train_loop", ("        optimizer.zero_grad()\n", "")),
        "the mean of the batch means, not per sample":
            _wrong("ex_train_loop", ("        total += loss.item() * len(x)\n        count += len(x)\n",
                                     "        total += loss.item()\n        count += 1\n")),
        "evaluate does not switch to eval mode":
            _wrong("ex_train_loop", ("    model.eval()\n", "")),
        "train_one_epoch does not switch back to training mode":
            _wrong("ex_train_loop", ("    model.train()\n", "")),
        "evaluate records the graph (no no_grad)":
            _wrong("ex_train_loop", ("    with no_grad():\n", "    if True:\n")),
        "evaluate switches grad mode off and leaves it off":
            _wrong("ex_train_loop", ("    with no_grad():\n",
                                     "    from picotorch import set_grad_enabled\n    set_grad_enabled(False)\n    if True:\n")),
    },
    "ex_fit": {
        "a checkpoint after every epoch, not only at the best":
            _wrong("ex_fit", (_SAVE, ""),
                   ("        if on_epoch is not None:", _SAVE.replace("            ", "        ", 1).replace(
                       "                save", "            save") + "        if on_epoch is not None:")),
        "the best checkpoint is not loaded back at the end":
            _wrong("ex_fit", ("""        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
""", "        pass\n")),
        "a val_loss equal to the best counts as an improvement":
            _wrong("ex_fit", ("if val_loss < best_loss:", "if val_loss <= best_loss:")),
        "early stopping one epoch late":
            _wrong("ex_fit", ("epoch - best_epoch >= patience", "epoch - best_epoch > patience")),
        "the lr is noted after the scheduler's step":
            _wrong("ex_fit", ('        lr = optimizer.param_groups[0]["lr"]\n', ""),
                   ('record = {"epoch": epoch, "lr": lr,', 'record = {"epoch": epoch, "lr": optimizer.param_groups[0]["lr"],')),
        "on_epoch is never called":
            _wrong("ex_fit", ("            on_epoch(record)\n", "            pass\n")),
    },
    "ex_digits": {
        "a learning rate 100 times too small":
            _wrong("ex_digits", ("lr=3e-3", "lr=3e-5")),
        "mean and std kept as plain attributes, not buffers":
            _wrong("ex_digits", ('self.register_buffer("mean", mean)\n        self.register_buffer("std", std)',
                                 "self.mean = mean\n        self.std = std")),
        "the shifted images wrap around instead of letting zeros in":
            _wrong("ex_digits", ("""        moved = np.zeros_like(square)
        moved[:, max(dy, 0):8 + min(dy, 0), max(dx, 0):8 + min(dx, 0)] = \\
            square[:, max(-dy, 0):8 + min(-dy, 0), max(-dx, 0):8 + min(-dx, 0)]
""", "        moved = np.roll(square, (dy, dx), axis=(1, 2))\n")),
        "the labels of the shifted copies are repeated element by element, not as a block":
            _wrong("ex_digits", ("np.tile(digits.train_labels, 5)", "np.repeat(digits.train_labels, 5)")),
        "the mean is taken over the shifted images, not the original ones":
            _wrong("ex_digits", ("mean = digits.train_images.mean(axis=0)", "mean = shifted(digits.train_images).mean(axis=0)")),
        "the std without its 0.1":
            _wrong("ex_digits", ("std = digits.train_images.std(axis=0) + np.float32(0.1)", "std = digits.train_images.std(axis=0)")),
    },
}
