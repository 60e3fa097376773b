"""The functions: ``tfl.exp(x)``, ``tfl.sum(x, axis=1)``, ``tfl.reshape(x, 2, 3)``,
``tfl.matmul(a, b)``, ``tfl.where(c, a, b)``, ...

A function applies the op of a tensor's method (``tfl.exp(x)`` is ``x.exp()``, for anything
`tfl.tensor` takes), or one of its kind that no method has (``tfl.where``, ``tfl.concatenate``).
The sections are the kinds of op, in the order of the method files named for them:
elementwise (`teachflow.tensor.elementwise`), reductions (`teachflow.tensor.reductions`, where
the composed ones, `var` and `softmax`, are written once), movement
(`teachflow.tensor.movement`) and linear algebra (`teachflow.tensor.linalg`). Each section also
tells NumPy which of its functions answer NumPy's (``np.where`` on tensors is ``tfl.where``; see
`teachflow.tensor.interop`).

(The functions import the `Tensor` class, whose methods the kind files define: so they are a
module of their own, after it.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError, ShapeError
from teachflow.core.spec import is_int
from teachflow.ops import elementwise as ew
from teachflow.ops import linalg
from teachflow.ops import shape as shape_ops
from teachflow.ops.op import RuleError
from teachflow.ops.shape_rules import normalize_axis
from teachflow.tensor.conversion import default_dtype, shape_arg
from teachflow.tensor.habits import FIRST_AXIS, LAST_AXIS, named
from teachflow.tensor.interop import NUMPY_TWINS
from teachflow.tensor.tensor import Tensor, as_tensor
from teachflow.tensor.weak import WeakTensor

__all__ = ["abs", "argmax", "argmin", "broadcast_to", "cat", "clip", "clone", "concatenate", "exp",
           "flatten", "log", "log_softmax", "matmul", "max", "maximum", "mean", "min",
           "minimum", "permute", "relu", "reshape", "sigmoid", "softmax", "softplus", "sqrt",
           "squeeze", "stack", "sum", "swapaxes", "tanh", "transpose", "unsqueeze", "var",
           "where"]
__all__ += ["ceil", "cos", "erf", "floor", "gather", "isclose", "isinf", "isnan", "log2",
            "round", "rsqrt", "sign", "sin"]


# --- Elementwise ----------------------------------------------------------------------------------

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


# --- Movement -------------------------------------------------------------------------------------


def reshape(x: Any, *shape: int | Sequence[int]) -> Tensor:
    return as_tensor(x).reshape(*shape)


def transpose(x: Any, *axes: int | Sequence[int], **named: Any) -> Tensor:
    return as_tensor(x).transpose(*axes, **named)


def permute(x: Any, *dims: int | Sequence[int]) -> Tensor:
    return as_tensor(x).permute(*dims)


def swapaxes(x: Any, axis1: int, axis2: int) -> Tensor:
    return as_tensor(x).swapaxes(axis1, axis2)


def unsqueeze(x: Any, dim: int | None = None, **other: Any) -> Tensor:
    return as_tensor(x).unsqueeze(dim, **other)


def squeeze(x: Any, dim: int | Sequence[int] | None = None, **other: Any) -> Tensor:
    return as_tensor(x).squeeze(dim, **other)


def flatten(x: Any, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    return as_tensor(x).flatten(start_dim, end_dim)


def gather(x: Any, dim: int, index: Any) -> Tensor:
    """PyTorch's gather: along `dim`, the values of `x` at `index` (see `Tensor.gather`)."""
    return as_tensor(x).gather(dim, index)


def broadcast_to(x: Any, shape: Sequence[int]) -> Tensor:
    x = as_tensor(x)
    shape = shape_arg((shape,), "broadcast_to")
    return x if shape == x.shape else bind(shape_ops.broadcast_to, x, shape=shape)


def _tensors(ts: Sequence[Any], op: str) -> list[Tensor]:
    if isinstance(ts, Tensor) or not isinstance(ts, Sequence) or len(ts) == 0:
        raise ShapeError(f"{op} takes a non-empty list of tensors", op=op,
                         hint=f"call it as tfl.{op}([a, b], axis=0)")
    return [as_tensor(t) for t in ts]


def _axis(axis: int, ndim: int, op: str) -> int:
    if not is_int(axis):
        raise DTypeError(f"{op} joins along one axis (an int), not {axis!r}", op=op,
                         hint=f"e.g. tfl.{op}([a, b], axis=0)")
    try:
        return normalize_axis(int(axis), ndim)
    except RuleError as err:
        raise ShapeError(err.message, op=op, hint=err.hint) from None


def concatenate(ts: Sequence[Any], axis: int = FIRST_AXIS, **other: Any) -> Tensor:
    """Join tensors along an existing axis (PyTorch's ``dim=`` names it too)."""
    if other:
        (axis,) = named("concatenate", other, axis=axis)
    ts = _tensors(ts, "concatenate")
    return bind(shape_ops.concatenate, *ts, axis=_axis(axis, ts[0].ndim, "concatenate"))


#: PyTorch's name for `concatenate`.
cat = concatenate


def stack(ts: Sequence[Any], axis: int = FIRST_AXIS, **other: Any) -> Tensor:
    """Join tensors of equal shape along a new axis (PyTorch's ``dim=`` names it too)."""
    if other:
        (axis,) = named("stack", other, axis=axis)
    ts = _tensors(ts, "stack")
    return bind(shape_ops.stack, *ts, axis=_axis(axis, ts[0].ndim + 1, "stack"))


# NumPy's functions that mean what these do: np.concatenate on tensors is tfl.concatenate.
NUMPY_TWINS.update({
    np.concatenate: concatenate, np.stack: stack, np.transpose: transpose, np.squeeze: squeeze,
    np.broadcast_to: broadcast_to, np.swapaxes: swapaxes,
    np.reshape: lambda x, *shape, **kwargs: reshape(x, *shape, *kwargs.values()),
    np.ravel: lambda x: reshape(x, -1),
})


# --- Linear algebra -------------------------------------------------------------------------------


def matmul(a: Any, b: Any) -> Tensor:
    return bind(linalg.matmul, as_tensor(a), as_tensor(b))
