"""Correct answers to chapter 04 written differently from the course's solution.

ALTERNATIVES = {what is different: {exercise: the cell's code}}; see tests/chapters/test_alternative_solutions.py.
Cells with given parts are the solution cell with its solved parts rewritten (`_rewrite`).
"""
from __future__ import annotations

from solution_text import rewrite, solution


def _rewrite(exercise: str, *replacements: tuple[str, str]) -> str:
    return rewrite(solution("04_training", exercise), *replacements, what=f"alternative of {exercise}")


_SGD_ON_A_COPY = _rewrite("ex_sgd", ("""        with no_grad():
            for group in self.param_groups:
                lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
                weight_decay, nesterov, maximize = group["weight_decay"], group["nesterov"], group["maximize"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    grad = p.grad
                    if maximize:
                        grad = -grad
                    if weight_decay != 0:
                        grad = grad + weight_decay * p
                    if momentum != 0:
                        state = self.state[p]
                        buf = state.get("momentum_buffer")
                        if buf is None:
                            buf = state["momentum_buffer"] = grad.clone()
                        else:
                            buf.mul_(momentum)
                            buf.add_((1 - dampening) * grad)
                        grad = grad + momentum * buf if nesterov else buf
                    p.sub_(lr * grad)""", """        with no_grad():
            for group in self.param_groups:
                for p in (q for q in group["params"] if q.grad is not None):
                    step = p.grad.clone()  # a copy of our own: .grad stays as it was
                    if group["maximize"]:
                        step.mul_(-1)
                    if group["weight_decay"]:
                        step += group["weight_decay"] * p
                    momentum = group["momentum"]
                    if momentum:
                        buffer = self.state[p].get("momentum_buffer")
                        if buffer is None:
                            buffer = self.state[p]["momentum_buffer"] = step.clone()
                        else:
                            buffer *= momentum
                            buffer += (1 - group["dampening"]) * step
                        if group["nesterov"]:
                            step += momentum * buffer
                        else:
                            step = buffer
                    p -= group["lr"] * step"""))

_FIT_COUNTING_STALE_EPOCHS = '''
def fit(model, optimizer, loss_fn, train_loader, val_loader, epochs: int, *, scheduler=None, checkpoint=None,
        patience: int = None, on_epoch=None) -> list:
    history, best, stale, saved = [], math.inf, 0, False
    for epoch in range(1, epochs + 1):
        began, lr = time.perf_counter(), optimizer.param_groups[0]["lr"]
        train_loss = train_one_epoch(model, train_loader, loss_fn, optimizer)
        val_loss, val_accuracy = evaluate(model, val_loader, loss_fn)
        if scheduler:
            scheduler.step()
        record = dict(epoch=epoch, lr=lr, train_loss=train_loss, val_loss=val_loss, val_accuracy=val_accuracy,
                      seconds=time.perf_counter() - began)
        history.append(record)
        stale += 1
        if val_loss < best:  # strictly better: a tie is not an improvement
            best, stale = val_loss, 0
            if checkpoint:
                save(dict(epoch=epoch, model=model.state_dict(), optimizer=optimizer.state_dict()), checkpoint)
                saved = True
        if on_epoch:
            on_epoch(record)
        if patience is not None and stale >= patience:
            break
    if saved:
        state = load(checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    return history
'''

_CROSS_ENTROPY_BY_LOGSUMEXP = _rewrite("ex_cross_entropy", ("""    axis, values = _axis(x, dim), x.numpy()
    shifted = values - values.max(axis=axis, keepdims=True)
    return from_numpy(shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True)))""", """    values = x.numpy()
    # log-sum-exp, one pair at a time (a 0-d x: the reduction of one element is itself)
    total = np.logaddexp.reduce(values, axis=_axis(x, dim), keepdims=True) if values.ndim else values
    return from_numpy(values - total)"""), ("""    out = np.zeros(scores.shape, sample.dtype)
    out[np.arange(len(labels)), labels] = np.where(counted, -sample, sample.dtype.type(0))  # ignored: 0""",
      """    at_target = np.eye(scores.shape[1], dtype=bool)[labels] & counted[:, None]  # an ignored row: no target
    out = np.where(at_target, -sample[:, None], sample.dtype.type(0))"""), ("""    class_dim = 0 if input.dim() == 1 else 1
    return nll_loss(log_softmax(input, class_dim), target, reduction, ignore_index, weight)""",
                                                            """    return nll_loss(log_softmax(input, min(input.dim() - 1, 1)), target, reduction, ignore_index, weight)"""))

_ADAM_AS_IN_THE_PAPER = _rewrite("ex_adam", ("""                    denom = (v.sqrt() / math.sqrt(1 - beta2 ** t)).add_(eps)
                    p.addcdiv_(m, denom, value=-(lr / (1 - beta1 ** t)))""", """                    m_hat = m / (1 - beta1 ** t)  # the bias-corrected averages of Kingma & Ba
                    v_hat = v / (1 - beta2 ** t)
                    p.sub_(lr * m_hat / (v_hat.sqrt() + eps))"""), ("""                    m.lerp_(grad, 1 - beta1)
                    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)""", """                    m.add_((grad - m) * (1 - beta1))  # without the fused operators
                    v.mul_(beta2)
                    v.add_((1 - beta2) * grad * grad)"""))

ALTERNATIVES = {
    "SGD on a copy of the gradient, a fit that counts the epochs since the best": {
        "ex_sgd": _SGD_ON_A_COPY,
        "ex_fit": _FIT_COUNTING_STALE_EPOCHS,
    },
    "cross-entropy through log-sum-exp, Adam's update written as in the paper (no fused operators)": {
        "ex_cross_entropy": _CROSS_ENTROPY_BY_LOGSUMEXP,
        "ex_adam": _ADAM_AS_IN_THE_PAPER,
    },
}
