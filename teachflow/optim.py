"""``tfl.optim``: the loop that trains, ``zero_grad(); loss.backward(); step()``.

An optimizer holds the parameters it updates and, per parameter, the state its rule keeps (a
momentum buffer; Adam's step count and two moving averages). `step` reads each parameter's
``.grad`` and updates the parameter *in place*, under `no_grad` (an update is not part of the
model's computation). In place matters twice: the module keeps the same tensor, and a staged
function whose graph captured that tensor reads the new values at its next call.

The state is made of tensors, made when the optimizer is, and updated in place too, even the
step count: a staged training step (`tfl.function` around ``zero_grad / forward / backward /
step``) then traces the update rule into graph nodes that read the state and write it back at
every call. A Python int counting steps would be read once, while tracing, and frozen into the
graph as a constant: Adam's bias correction would stay at step 1 forever.

The formulas are PyTorch's, as its documentation gives them (including where weight decay is
added and how Adam corrects its bias), so the numbers agree step for step.
"""

from __future__ import annotations

from collections.abc import Iterable
from numbers import Real
from typing import Any

from teachflow.autodiff import no_grad
from teachflow.errors import DTypeError, TeachflowError, name_scope
from teachflow.factories import zeros, zeros_like
from teachflow.tensor import Tensor


class Optimizer:
    """What `SGD` and `Adam` share: the parameters, their state, `zero_grad`."""

    _user_state = True  # (a staged step names its state by the code's path: opt.state[0]['step'])

    def __init__(self, params: Iterable[Tensor], defaults: dict[str, Any]) -> None:
        kind = type(self).__name__
        if isinstance(params, Tensor):
            raise DTypeError(f"{kind} takes an iterable of parameters, not one tensor", op=kind,
                             hint=f"{kind}(model.parameters(), ...) or {kind}([w, b], ...)")
        self.params = list(params)
        if not self.params:
            raise TeachflowError(f"{kind} got no parameters to optimize", op=kind,
                                 hint="pass model.parameters() (did the model make its layers "
                                      "in __init__?), or a list of tensors")
        for i, p in enumerate(self.params):
            if not isinstance(p, Tensor) or not p.requires_grad or p.dtype.kind != "f":
                raise DTypeError(
                    f"parameter {i} is not a float tensor that requires grad "
                    f"({type(p).__name__} {getattr(p, 'dtype', '')})", op=kind,
                    hint="tfl.tensor(..., requires_grad=True), or a module's parameters()")
        for name, value in defaults.items():
            if name != "betas" and (isinstance(value, bool) or not isinstance(value, Real)
                                    or not value >= 0):
                raise TeachflowError(f"{name} must be a number >= 0, not {value!r}", op=kind,
                                     hint=f"e.g. {kind}(model.parameters(), lr=0.01)")
        self.defaults = defaults
        with no_grad():
            self.state: list[dict[str, Tensor]] = [self._new_state(p) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients (``.grad = None``), so the next backward() starts afresh."""
        for p in self.params:
            p.grad = None if set_to_none or p.grad is None else p.grad * 0

    def step(self) -> None:
        with no_grad(), name_scope(type(self).__name__):  # (a staged step's nodes: one box)
            for p, state in zip(self.params, self.state, strict=True):
                if p.grad is not None:
                    self._update(p, p.grad, state)

    def _new_state(self, p: Tensor) -> dict[str, Tensor]:
        """The state the rule keeps for `p` (tensors, updated in place by `_update`)."""
        return {}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor]) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The settings, and each parameter's state by its position (as PyTorch's)."""
        return {"state": {i: {k: (v.detach().clone() if isinstance(v, Tensor) else v)
                              for k, v in s.items()} for i, s in enumerate(self.state) if s},
                "param_groups": [{**self.defaults, "params": list(range(len(self.params)))}]}

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v}" for k, v in self.defaults.items())
        return f"{type(self).__name__}({len(self.params)} parameters, {settings})"


class SGD(Optimizer):
    """Stochastic gradient descent, with momentum and weight decay as PyTorch's:

        g = grad + weight_decay * p
        b = momentum * b + g       (b starts at 0, so its first value is g, as PyTorch's)
        p = p - lr * b             (or p - lr * g without momentum)
    """

    def __init__(self, params: Iterable[Tensor], lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum, "weight_decay": weight_decay})

    def _new_state(self, p: Tensor) -> dict[str, Tensor]:
        return {"momentum_buffer": zeros_like(p)} if self.defaults["momentum"] else {}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor]) -> None:
        lr, momentum, decay = (self.defaults[k] for k in ("lr", "momentum", "weight_decay"))
        if decay:
            g = g + decay * p
        if momentum:
            buf = state["momentum_buffer"]
            buf *= momentum
            buf += g
            g = buf
        p -= lr * g


class Adam(Optimizer):
    """Adam (Kingma and Ba), as PyTorch's, at step t = 1, 2, ...:

        g = grad + weight_decay * p
        m = beta1 * m + (1 - beta1) * g          v = beta2 * v + (1 - beta2) * g²
        p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
    """

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        if (not isinstance(betas, tuple | list) or len(betas) != 2
                or not all(0.0 <= b < 1.0 for b in betas)):
            raise TeachflowError(f"betas must be two numbers in [0, 1), not {betas!r}",
                                 op="Adam", hint="betas=(0.9, 0.999)")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps,
                                  "weight_decay": weight_decay})

    def _new_state(self, p: Tensor) -> dict[str, Tensor]:
        return {"step": zeros((), dtype=p.dtype, device=p.device),
                "exp_avg": zeros_like(p), "exp_avg_sq": zeros_like(p)}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor]) -> None:
        lr, (beta1, beta2), eps, decay = (self.defaults[k] for k in
                                          ("lr", "betas", "eps", "weight_decay"))
        if decay:
            g = g + decay * p
        t, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
        t += 1
        m *= beta1
        m += (1 - beta1) * g
        v *= beta2
        v += (1 - beta2) * (g * g)
        step_size = lr / (1 - beta1 ** t)
        denom = v.sqrt() / (1 - beta2 ** t).sqrt() + eps
        p -= step_size * (m / denom)


__all__ = ["SGD", "Adam", "Optimizer"]
