"""Correct answers to chapter 04 written differently from the course's solution.

ALTERNATIVES = {what is different: {exercise: the cell's code}}; see tests/test_alternative_solutions.py.
Cells with given parts are the solution cell with its solved parts rewritten (`_rewrite`).
"""
from __future__ import annotations

from solution_text import rewrite, solution


def _rewrite(exercise: str, *replacements: tuple[str, str]) -> str:
    return rewrite(solution("04_training", exercise), *replacements, what=f"alternative of {exercise}")


_SGD_ON_A_COPY = _rewrite("ex_sgd", ("""        for group in self.param_groups:
            lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
            weight_decay, nesterov, maximize = group["weight_decay"], group["nesterov"], group["maximize"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                param, grad = p.numpy(), p.grad.numpy()
                if maximize:
                    grad = -grad
                if weight_decay != 0:
                    grad = grad + weight_decay * param
                if momentum != 0:
                    state = self.state[p]
                    if state.get("momentum_buffer") is None:
                        state["momentum_buffer"] = from_numpy(np.array(grad, copy=True))
                        buf = state["momentum_buffer"].numpy()
                    else:
                        buf = state["momentum_buffer"].numpy()
                        buf *= momentum
                        buf += (1 - dampening) * grad
                    grad = grad + momentum * buf if nesterov else buf
                param -= lr * grad""", """        for group in self.param_groups:
            for p in (q for q in group["params"] if q.grad is not None):
                step = np.array(p.grad.numpy(), copy=True)  # a copy of our own: .grad stays as it was
                if group["maximize"]:
                    np.negative(step, out=step)
                if group["weight_decay"]:
                    step += group["weight_decay"] * p.numpy()
                momentum = group["momentum"]
                if momentum:
                    buffer = self.state[p].get("momentum_buffer")
                    if buffer is None:
                        buffer = self.state[p]["momentum_buffer"] = from_numpy(step.copy())
                    else:
                        values = buffer.numpy()
                        values *= momentum
                        values += (1 - group["dampening"]) * step
                    if group["nesterov"]:
                        step += momentum * buffer.numpy()
                    else:
                        step = buffer.numpy()
                p.numpy()[...] -= group["lr"] * step"""))

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

_CROSS_ENTROPY_BY_LOGSUMEXP = _rewrite("ex_cross_entropy", ("""        scores, labels, counted = class_targets(logits, target, ignore_index)
        shifted = scores - scores.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))""",
                                                           """        scores, labels, counted = class_targets(logits, target, ignore_index)
        log_probs = scores - np.logaddexp.reduce(scores, axis=1, keepdims=True)  # log-sum-exp, one pair at a time"""),
                                       ("""        out = np.exp(ctx.log_probs)
        out[np.arange(len(ctx.labels)), ctx.labels] -= 1
        out *= weight[:, None]""", """        one_hot = np.zeros_like(ctx.log_probs)
        one_hot[np.arange(len(ctx.labels)), ctx.labels] = 1
        out = (np.exp(ctx.log_probs) - one_hot) * weight[:, None]"""))

_ADAM_AS_IN_THE_PAPER = _rewrite("ex_adam", ("""                denom = np.sqrt(v) / math.sqrt(1 - beta2 ** t) + eps
                param -= (lr / (1 - beta1 ** t)) * m / denom""", """                m_hat = m / (1 - beta1 ** t)  # the bias-corrected averages of Kingma & Ba
                v_hat = v / (1 - beta2 ** t)
                param -= lr * m_hat / (np.sqrt(v_hat) + eps)"""))

ALTERNATIVES = {
    "SGD on a copy of the gradient, a fit that counts the epochs since the best": {
        "ex_sgd": _SGD_ON_A_COPY,
        "ex_fit": _FIT_COUNTING_STALE_EPOCHS,
    },
    "cross-entropy through log-sum-exp, Adam's update written as in the paper": {
        "ex_cross_entropy": _CROSS_ENTROPY_BY_LOGSUMEXP,
        "ex_adam": _ADAM_AS_IN_THE_PAPER,
    },
}
