"""The functions: ``tfl.exp(x)``, ``tfl.sum(x, axis=1)``, ``tfl.reshape(x, 2, 3)``,
``tfl.matmul(a, b)``, ``tfl.where(c, a, b)``, ...

A function applies the op of a tensor's method (``tfl.exp(x)`` is ``x.exp()``, for anything
`tfl.tensor` takes), or one of its kind that no method has (``tfl.where``, ``tfl.concatenate``).
The sections are the kinds of op, in the order of the method files named for them:
elementwise (`teachflow.tensor.elementwise`), reductions (`teachflow.tensor.reductions`, where
the composed ones, `var`, `softmax`, `logsumexp` and `sort`, are written once) and linear
algebra (`teachflow.tensor.linalg`). Movement's functions (``tfl.reshape``, ``tfl.concatenate``,
``tfl.split``, ...) are a module of their own, `teachflow.tensor.arrange`. Each section also
tells NumPy which of its functions answer NumPy's (``np.where`` on tensors is ``tfl.where``; see
`teachflow.tensor.interop`).

(The functions import the `Tensor` class, whose methods the kind files define: so they are a
module of their own, after it.)
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError
from teachflow.ops import elementwise as ew
from teachflow.ops import linalg
from teachflow.tensor.conversion import default_dtype
from teachflow.tensor.habits import LAST_AXIS
from teachflow.tensor.interop import NUMPY_TWINS
from teachflow.tensor.tensor import Tensor, as_tensor
from teachflow.tensor.weak import WeakTensor

__all__ = ["abs", "all", "any", "argmax", "argmin", "argsort", "ceil", "clip", "clone", "cos",
           "cumprod", "cumsum", "erf", "exp", "floor", "isclose", "isinf", "isnan", "log", "log2",
           "log_softmax", "logsumexp", "matmul", "max", "maximum", "mean", "min", "minimum",
           "prod", "relu", "round", "rsqrt", "sigmoid", "sign", "sin", "softmax", "softplus",
           "sort", "sqrt", "sum", "tanh", "topk", "var", "where"]


# --- Elementwise ----------------------------------------------------------------------------------

_SCALAR = bool | int | float


def _operands(*xs: Any) -> list:
    """Tensors as they are. Beside a tensor, Python scalars stay *weak* (they take the dtype of
    the tensor they meet), and so do weak tensors (a loop's index: `WeakTensor`); NumPy arrays
    stay constants, as with operators (``t * array``); anything else becomes a tensor."""
    if not builtins.any(isinstance(x, Tensor) for x in xs):  # (tfl.any is defined below)
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


def softplus(x: Any, beta: float = 1.0, threshold: float | None = None) -> Tensor:
    """log(1 + e^x), a smooth relu, computed without overflow; its derivative is the sigmoid.
    With `beta`, ``log(1 + e^(beta x)) / beta``; with a `threshold`, x itself where
    ``beta x > threshold`` (PyTorch's ``F.softplus``, whose threshold is 20)."""
    return as_tensor(x).softplus(beta, threshold)


def sin(x: Any) -> Tensor:
    return as_tensor(x).sin()


def cos(x: Any) -> Tensor:
    return as_tensor(x).cos()


def erf(x: Any) -> Tensor:
    return as_tensor(x).erf()


def log2(x: Any) -> Tensor:
    return as_tensor(x).log2()


def rsqrt(x: Any) -> Tensor:
    return as_tensor(x).rsqrt()


def sign(x: Any) -> Tensor:
    return as_tensor(x).sign()


def floor(x: Any) -> Tensor:
    return as_tensor(x).floor()


def ceil(x: Any) -> Tensor:
    return as_tensor(x).ceil()


def round(x: Any) -> Tensor:
    return as_tensor(x).round()


def isnan(x: Any) -> Tensor:
    return as_tensor(x).isnan()


def isinf(x: Any) -> Tensor:
    return as_tensor(x).isinf()


def isclose(x: Any, y: Any, rtol: float = 1e-5, atol: float = 1e-8,
            equal_nan: bool = False) -> Tensor:
    """True where ``|x - y| <= atol + rtol |y|`` (PyTorch's and NumPy's test; see
    `Tensor.isclose`)."""
    x, y = _operands(x, y)
    return x.isclose(y, rtol, atol, equal_nan) if isinstance(x, Tensor) else \
        as_tensor(x).isclose(y, rtol, atol, equal_nan)


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


# --- Reductions -----------------------------------------------------------------------------------

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


def prod(x: Any, axis: Axis = None, keepdims: bool = False, **other: Any) -> Tensor:
    return as_tensor(x).prod(axis, keepdims, **other)


def all(x: Any, axis: Axis = None, keepdims: bool = False, **other: Any) -> Tensor:
    return as_tensor(x).all(axis, keepdims, **other)


def any(x: Any, axis: Axis = None, keepdims: bool = False, **other: Any) -> Tensor:
    return as_tensor(x).any(axis, keepdims, **other)


def logsumexp(x: Any, axis: Axis = None, keepdims: bool = False, **other: Any) -> Tensor:
    """``log(sum(exp(x)))`` over `axis`, computed stably (see `Tensor.logsumexp`)."""
    return as_tensor(x).logsumexp(axis, keepdims, **other)


def cumsum(x: Any, axis: int | None = None, **other: Any) -> Tensor:
    return as_tensor(x).cumsum(axis, **other)


def cumprod(x: Any, axis: int | None = None, **other: Any) -> Tensor:
    return as_tensor(x).cumprod(axis, **other)


def sort(x: Any, axis: int = LAST_AXIS, descending: bool = False, **other: Any) -> tuple:
    """``(values, indices)`` sorted along `axis`, stably (see `Tensor.sort`)."""
    return as_tensor(x).sort(axis, descending, **other)


def argsort(x: Any, axis: int = LAST_AXIS, descending: bool = False, **other: Any) -> Tensor:
    return as_tensor(x).argsort(axis, descending, **other)


def topk(x: Any, k: int, axis: int = LAST_AXIS, largest: bool = True, sorted: bool = True,
         **other: Any) -> tuple:
    """``(values, indices)`` of the `k` largest (or smallest) along `axis` (`Tensor.topk`)."""
    return as_tensor(x).topk(k, axis, largest, sorted, **other)


# --- Linear algebra -------------------------------------------------------------------------------


def matmul(a: Any, b: Any) -> Tensor:
    return bind(linalg.matmul, as_tensor(a), as_tensor(b))
