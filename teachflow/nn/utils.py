"""``tfl.nn.utils``: for the training loop, as PyTorch's ``torch.nn.utils``.

`clip_grad_norm_` keeps one bad batch from throwing the parameters far away: when the norm of
all the gradients together (as one long vector) exceeds `max_norm`, every gradient is scaled by
the same factor, ``max_norm / norm``, so the direction of the step is kept and only its length
is cut. It computes in the graph, eagerly and staged alike (the factor is ``min(1, max_norm /
(norm + 1e-6))``, PyTorch's, with no Python ``if`` on a traced value).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from teachflow.autodiff.tape import no_grad
from teachflow.core.errors import TeachflowError
from teachflow.graph import Value
from teachflow.tensor.arrange import stack
from teachflow.tensor.factories import tensor
from teachflow.tensor.tensor import Tensor


def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float,
                    norm_type: float = 2.0, error_if_nonfinite: bool = False) -> Tensor:
    """Scale the ``.grad`` of `parameters` in place so that their total `norm_type`-norm is at
    most `max_norm`; returns the total norm before clipping (a 0-d tensor), as PyTorch's.
    Parameters without a gradient are left out. `norm_type` may be ``math.inf`` (the largest
    absolute value). `error_if_nonfinite`: raise where the norm is inf or nan (eagerly; a
    staged step cannot look at the value)."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    for name, value in (("max_norm", max_norm), ("norm_type", norm_type)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise TeachflowError(f"{name} must be a number > 0, not {value!r}",
                                 op="clip_grad_norm_",
                                 hint="clip_grad_norm_(model.parameters(), max_norm=1.0)")
    grads = [p.grad for p in params if isinstance(p, Tensor) and p.grad is not None]
    if not grads:
        return tensor(0.0)
    with no_grad():
        norms = stack([_norm(g, norm_type).astype(grads[0].dtype) for g in grads])
        total = _norm(norms, norm_type)
        if error_if_nonfinite and not isinstance(total._data, Value) \
                and not math.isfinite(total.item()):
            raise TeachflowError(f"the total norm of the gradients is {total.item()}",
                                 op="clip_grad_norm_",
                                 hint="find where the loss became inf or nan (a log of 0, a "
                                      "learning rate too high), or pass error_if_nonfinite="
                                      "False")
        factor = (max_norm / (total + 1e-6)).clip(max=1.0)
        for g in grads:
            g *= factor.astype(g.dtype)
    return total


def _norm(x: Tensor, p: float) -> Tensor:
    """The p-norm of all of `x`'s values, as one vector."""
    if p == math.inf:
        return x.abs().max()
    if p == 2:
        return (x * x).sum().sqrt()
    return (x.abs() ** p).sum() ** (1.0 / p)


__all__ = ["clip_grad_norm_"]


def __dir__() -> list[str]:  # (tab completion: the public names, not what this module imports)
    return [*__all__, *(name for name in globals() if name.startswith("__"))]
