"""Adam (Kingma and Ba), as PyTorch's: moving averages of the gradient and of its square, with
their bias corrected."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from teachflow.core.errors import TeachflowError
from teachflow.optim.optimizer import Optimizer
from teachflow.tensor.factories import zeros, zeros_like
from teachflow.tensor.tensor import Tensor


class Adam(Optimizer):
    """Adam (Kingma and Ba), as PyTorch's, at step t = 1, 2, ...:

        g = grad + weight_decay * p
        m = beta1 * m + (1 - beta1) * g          v = beta2 * v + (1 - beta2) * g²
        p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

    The step count t is an int64 tensor, and the corrections ``1 - beta^t`` are computed in
    float64, as PyTorch computes them (in Python floats): a count kept in a float16 parameter's
    dtype would stop at 2048 (2048 + 1 rounds back to 2048), and ``1 - 0.999`` in float16 is
    off by 2%.
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps,
                                  "weight_decay": weight_decay})

    def _checked_setting(self, name: str, value: Any) -> Any:
        if name != "betas":
            return super()._checked_setting(name, value)
        if (not isinstance(value, tuple | list) or len(value) != 2
                or not all(isinstance(b, int | float) and 0.0 <= b < 1.0 for b in value)):
            raise TeachflowError(f"betas must be two numbers in [0, 1), not {value!r}",
                                 op="Adam", hint="betas=(0.9, 0.999)")
        return tuple(value)

    def _new_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        return {"step": zeros((), dtype="int64", device=p.device),
                "exp_avg": zeros_like(p), "exp_avg_sq": zeros_like(p)}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor],
                settings: dict[str, Any]) -> None:
        lr, (beta1, beta2), eps, decay = (settings[k] for k in
                                          ("lr", "betas", "eps", "weight_decay"))
        if decay:
            g = g + decay * p
        t, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
        t += 1
        m *= beta1
        m += (1 - beta1) * g
        v *= beta2
        v += (1 - beta2) * (g * g)
        steps = t.astype("float64")
        step_size = (lr / (1 - beta1 ** steps)).astype(p.dtype)
        denom = v.sqrt() / (1 - beta2 ** steps).sqrt().astype(p.dtype) + eps
        p -= step_size * (m / denom)
