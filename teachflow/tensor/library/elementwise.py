"""The elementwise functions: ``tfl.exp(x)``, ``tfl.maximum(a, b)``, ``tfl.where(c, a, b)``, ...

Each takes tensors or anything `tfl.tensor` takes, and applies the op its method applies
(`teachflow.tensor.elementwise`); `maximum`, `minimum` and `where` have no method, as in NumPy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.ops import elementwise as ew
from teachflow.tensor.conversion import default_dtype
from teachflow.tensor.interop import NUMPY_TWINS
from teachflow.tensor.tensor import Tensor, as_tensor
from teachflow.tensor.weak import WeakTensor

__all__ = ["abs", "clip", "clone", "exp", "log", "maximum", "minimum", "relu", "sigmoid",
           "softplus", "sqrt", "tanh", "where"]

_SCALAR = bool | int | float


def _operands(*xs: Any) -> list:
    """Tensors as they are. Beside a tensor, Python scalars stay *weak* (they take the dtype of
    the tensor they meet), and so do weak tensors (a loop's index: `WeakTensor`); NumPy arrays
    stay constants, as with operators (``t * array``); anything else becomes a tensor."""
    if not any(isinstance(x, Tensor) for x in xs):
        return [as_tensor(x) for x in xs]
    return [x.beside(*xs) if isinstance(x, WeakTensor) else
            x if isinstance(x, Tensor | _SCALAR | np.ndarray | np.generic) else as_tensor(x)
            for x in xs]


def _binary(op: Any, x: Any, y: Any) -> Tensor:
    if isinstance(x, Tensor) and isinstance(y, Tensor) and \
            WeakTensor not in (type(x), type(y)):  # the common case, kept fast
        return bind(op, x, y)
    return bind(op, *_operands(x, y))


def exp(x: Any) -> Tensor:
    return bind(ew.exp, as_tensor(x))


def log(x: Any) -> Tensor:
    return bind(ew.log, as_tensor(x))


def sqrt(x: Any) -> Tensor:
    return bind(ew.sqrt, as_tensor(x))


def tanh(x: Any) -> Tensor:
    return bind(ew.tanh, as_tensor(x))


def relu(x: Any) -> Tensor:
    return bind(ew.relu, as_tensor(x))


def sigmoid(x: Any) -> Tensor:
    return bind(ew.sigmoid, as_tensor(x))


def softplus(x: Any) -> Tensor:
    """log(1 + e^x), a smooth relu, computed without overflow; its derivative is the sigmoid."""
    return bind(ew.softplus, as_tensor(x))


def abs(x: Any) -> Tensor:
    return bind(ew.abs, as_tensor(x))


def maximum(x: Any, y: Any) -> Tensor:
    """The larger of `x` and `y` at each position (the gradient goes to the larger one)."""
    return _binary(ew.maximum, x, y)


def minimum(x: Any, y: Any) -> Tensor:
    return _binary(ew.minimum, x, y)


def clip(x: Any, min: Any = None, max: Any = None) -> Tensor:
    """`x` limited to ``[min, max]``; either bound may be None (PyTorch's clamp)."""
    return as_tensor(x).clip(min, max)


def where(cond: Any, x: Any, y: Any) -> Tensor:
    """`x` where `cond` is true, else `y` (all three broadcast together). When `x` and `y` are
    both Python numbers, the result has the framework's default dtype for them, as
    ``tfl.tensor`` would (``where(c, 1.0, 0.0)`` is float32, as in PyTorch)."""
    if isinstance(x, _SCALAR) and isinstance(y, _SCALAR):
        dtype = default_dtype(x, y)
        x, y = as_tensor(x, dtype), as_tensor(y, dtype)
    return bind(ew.where, *_operands(cond, x, y))


def clone(x: Any) -> Tensor:
    return as_tensor(x).clone()


# NumPy's functions that mean what these do: np.where(t > 0, t, 0) on tensors is tfl.where.
NUMPY_TWINS.update({np.where: where, np.clip: clip})
