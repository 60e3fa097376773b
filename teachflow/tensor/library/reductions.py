"""The reductions as functions: ``tfl.sum(x, axis=1)``, ``tfl.max(x)``, ``tfl.softmax(x)``, ...

Each takes a tensor or anything `tfl.tensor` takes, and calls its method
(`teachflow.tensor.reductions`), where the composed ones (`var`, `softmax`, `log_softmax`) are
written once: from a few primitives, the way minitorch builds everything from a few kernels,
which also gives the compiler's fusion pass something to fuse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from teachflow.core.errors import DTypeError
from teachflow.tensor.habits import LAST_AXIS
from teachflow.tensor.interop import NUMPY_TWINS
from teachflow.tensor.tensor import Tensor, as_tensor

__all__ = ["argmax", "argmin", "log_softmax", "max", "mean", "min", "softmax", "sum", "var"]

Axis = int | Sequence[int] | None


def sum(x: Any, axis: Axis = None, keepdims: bool = False, **other: Any) -> Tensor:
    return as_tensor(x).sum(axis, keepdims, **other)


def mean(x: Any, axis: Axis = None, keepdims: bool = False, **other: Any) -> Tensor:
    return as_tensor(x).mean(axis, keepdims, **other)


def max(x: Any, axis: Axis = None, keepdims: bool = False, **other: Any) -> Tensor:
    """The largest value over `axis` (for the larger of two tensors: `tfl.maximum`)."""
    _one_tensor("max", "maximum", axis)
    return as_tensor(x).max(axis, keepdims, **other)


def min(x: Any, axis: Axis = None, keepdims: bool = False, **other: Any) -> Tensor:
    """The smallest value over `axis` (for the smaller of two tensors: `tfl.minimum`)."""
    _one_tensor("min", "minimum", axis)
    return as_tensor(x).min(axis, keepdims, **other)


def _one_tensor(op: str, elementwise: str, axis: Any) -> None:
    if isinstance(axis, Tensor | np.ndarray):  # PyTorch's torch.max(a, b)
        raise DTypeError(f"tfl.{op}(x, axis) reduces one tensor; its second argument is an "
                         "axis, not a tensor", op=op,
                         hint=f"for the elementwise {op} of two tensors, tfl.{elementwise}(a, b)")


def argmax(x: Any, axis: int | None = None, keepdims: bool = False,
           **other: Any) -> Tensor:
    return as_tensor(x).argmax(axis, keepdims, **other)


def argmin(x: Any, axis: int | None = None, keepdims: bool = False,
           **other: Any) -> Tensor:
    return as_tensor(x).argmin(axis, keepdims, **other)


def var(x: Any, axis: Axis = None, *positional: Any, **named: Any) -> Tensor:
    """The variance, divided by ``n - correction`` (1: PyTorch's default; 0: NumPy's); the
    options by name: ``tfl.var(x, 0, keepdims=True, correction=0)``."""
    return as_tensor(x).var(axis, *positional, **named)


def softmax(x: Any, axis: int = LAST_AXIS, **other: Any) -> Tensor:
    """``exp(x) / sum(exp(x))`` along `axis`, computed stably (see `Tensor.softmax`)."""
    return as_tensor(x).softmax(axis, **other)


def log_softmax(x: Any, axis: int = LAST_AXIS, **other: Any) -> Tensor:
    """``log(softmax(x))`` without computing the softmax: ``x - max - log(sum(exp(x - max)))``."""
    return as_tensor(x).log_softmax(axis, **other)


# NumPy's functions that mean what these do: the methods, which take NumPy's dtype= and refuse
# its out= in words. (NumPy's var and std divide by n, teachflow's by n - 1, as PyTorch's: they
# are not twins.)
NUMPY_TWINS.update({
    np.sum: lambda x, *a, **k: as_tensor(x).sum(*a, **k),
    np.mean: lambda x, *a, **k: as_tensor(x).mean(*a, **k),
    np.max: lambda x, *a, **k: as_tensor(x).max(*a, **k),
    np.min: lambda x, *a, **k: as_tensor(x).min(*a, **k),
    np.amax: lambda x, *a, **k: as_tensor(x).max(*a, **k),
    np.amin: lambda x, *a, **k: as_tensor(x).min(*a, **k),
    np.argmax: argmax, np.argmin: argmin,
})
