"""The smooth and leaky activations, each a function (in ``tfl.nn.functional``) beside its
module: `leaky_relu`, `gelu` (exact and tanh), `silu`, `elu`, `softplus` (with beta and a
threshold).

None is an op of its own. Each is a line of elementwise ops (``x * sigmoid(x)``), so it runs
eagerly and traced, has its gradient, forward mode and batching from those ops, exports to ONNX
and saves as they do, and the fusion pass makes the line one kernel: as fast as one op would be,
and the stepper shows what it is made of. The exact GELU is ``x Φ(x)``, Φ the normal
distribution's CDF, ``(1 + erf(x / √2)) / 2``: it needs ``erf``, which is an op
(`teachflow.ops.maths`).
"""

from __future__ import annotations

import math
from typing import Any

from teachflow.core.errors import TeachflowError
from teachflow.nn.module import Module
from teachflow.tensor.functions import sigmoid, tanh, where
from teachflow.tensor.tensor import Tensor, as_tensor

_ROOT_HALF = 1 / math.sqrt(2)
_ROOT_TWO_OVER_PI = math.sqrt(2 / math.pi)


def _number(value: Any, name: str, op: str, example: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TeachflowError(f"{name} must be a number, not {value!r}", op=op, hint=example)
    return float(value)


def leaky_relu(input: Any, negative_slope: float = 0.01) -> Tensor:
    """x where x > 0, else ``negative_slope * x``: a relu whose negative side still learns."""
    x = as_tensor(input)
    slope = _number(negative_slope, "negative_slope", "leaky_relu", "negative_slope=0.01")
    return where(x > 0, x, x * slope)


def gelu(input: Any, approximate: str = "none") -> Tensor:
    """``x Φ(x)``, Φ the standard normal CDF: exactly, with erf (``approximate="none"``), or
    with BERT's and GPT-2's tanh formula (``"tanh"``), as PyTorch's."""
    x = as_tensor(input)
    if approximate == "none":
        return 0.5 * x * (1 + (x * _ROOT_HALF).erf())
    if approximate == "tanh":
        return 0.5 * x * (1 + tanh(_ROOT_TWO_OVER_PI * (x + 0.044715 * (x * x * x))))
    raise TeachflowError(f"approximate is 'none' or 'tanh', not {approximate!r}", op="gelu",
                         hint="gelu(x) is exact; gelu(x, approximate='tanh') is the tanh form")


def silu(input: Any) -> Tensor:
    """``x * sigmoid(x)`` (also called swish)."""
    x = as_tensor(input)
    return x * sigmoid(x)


def elu(input: Any, alpha: float = 1.0) -> Tensor:
    """x where x > 0, else ``alpha * (e^x - 1)``. The exponential is of ``min(x, 0)``: the branch
    not taken must stay finite, or its gradient (0 times inf) would be NaN."""
    x = as_tensor(input)
    alpha = _number(alpha, "alpha", "elu", "alpha=1.0")
    return where(x > 0, x, alpha * (x.clip(max=0.0).exp() - 1))


def softplus(input: Any, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + e^(beta x)) / beta``, and x itself where ``beta x > threshold`` (PyTorch's
    ``F.softplus``; ``tfl.softplus`` has no threshold by default)."""
    return as_tensor(input).softplus(beta, threshold)


# --- Their modules ------------------------------------------------------------------------------


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01) -> None:
        super().__init__()
        self.negative_slope = _number(negative_slope, "negative_slope", "LeakyReLU",
                                      "LeakyReLU(0.01)")

    def forward(self, x: Any) -> Any:
        return leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise TeachflowError(f"approximate is 'none' or 'tanh', not {approximate!r}",
                                 op="GELU", hint="GELU() or GELU(approximate='tanh')")
        self.approximate = approximate

    def forward(self, x: Any) -> Any:
        return gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    def forward(self, x: Any) -> Any:
        return silu(x)


class ELU(Module):
    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        self.alpha = _number(alpha, "alpha", "ELU", "ELU(alpha=1.0)")

    def forward(self, x: Any) -> Any:
        return elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta = _number(beta, "beta", "Softplus", "Softplus(beta=1.0)")
        self.threshold = _number(threshold, "threshold", "Softplus", "Softplus(threshold=20)")

    def forward(self, x: Any) -> Any:
        return softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"
