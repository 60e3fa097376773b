"""Stochastic gradient descent, with momentum and weight decay, as PyTorch's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from teachflow.optim.optimizer import Optimizer
from teachflow.tensor.factories import zeros_like
from teachflow.tensor.tensor import Tensor


class SGD(Optimizer):
    """Stochastic gradient descent, with momentum and weight decay as PyTorch's:

        g = grad + weight_decay * p
        b = momentum * b + g       (b starts at 0, so its first value is g, as PyTorch's)
        p = p - lr * b             (or p - lr * g without momentum)
    """

    def __init__(self, params: Iterable[Any], lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum, "weight_decay": weight_decay})

    def _new_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        return {"momentum_buffer": zeros_like(p)} if group["momentum"] else {}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor],
                settings: dict[str, Any]) -> None:
        lr, momentum, decay = (settings[k] for k in ("lr", "momentum", "weight_decay"))
        if decay:
            g = g + decay * p
        if momentum:
            buf = state.get("momentum_buffer")
            if buf is None:  # (a momentum set after the optimizer was made)
                buf = state["momentum_buffer"] = zeros_like(p)
            buf *= momentum
            buf += g
            g = buf
        p -= lr * g
