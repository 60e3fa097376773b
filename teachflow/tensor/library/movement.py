"""The movement functions: ``tfl.reshape(x, 2, 3)``, ``tfl.transpose(x)``,
``tfl.broadcast_to(x, shape)``, ``tfl.concatenate([a, b])``, ...

Each takes tensors or anything `tfl.tensor` takes. Those with a method call it
(`teachflow.tensor.movement`); `broadcast_to`, `concatenate` and `stack` (PyTorch's `cat`) apply
their op of `teachflow.ops.shape` here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError, ShapeError
from teachflow.core.spec import is_int
from teachflow.ops import shape as shape_ops
from teachflow.ops.op import RuleError, normalize_axis
from teachflow.tensor.conversion import shape_arg
from teachflow.tensor.habits import FIRST_AXIS, named
from teachflow.tensor.interop import NUMPY_TWINS
from teachflow.tensor.tensor import Tensor, as_tensor

__all__ = ["broadcast_to", "cat", "concatenate", "flatten", "permute", "reshape", "squeeze",
           "stack", "swapaxes", "transpose", "unsqueeze"]


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
