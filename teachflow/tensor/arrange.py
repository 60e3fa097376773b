"""The functions of movement: ``tfl.reshape(x, 2, 3)``, ``tfl.concatenate([a, b])``,
``tfl.stack``, ``tfl.split``, ``tfl.flip``, ``tfl.tril``, ...

As in `teachflow.tensor.functions`, a function applies the op of a tensor's method
(``tfl.flip(x, 0)`` is ``x.flip(0)``, for anything `tfl.tensor` takes; the methods are in
`teachflow.tensor.movement`), or one of its kind that no method has: joining several tensors,
``tfl.concatenate`` and ``tfl.stack``. The section's end tells NumPy which of its functions
answer NumPy's (``np.concatenate`` on tensors is ``tfl.concatenate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError, ShapeError
from teachflow.core.spec import is_int
from teachflow.ops import shape as shape_ops
from teachflow.ops.op import RuleError
from teachflow.ops.shape_rules import normalize_axis
from teachflow.tensor.conversion import shape_arg
from teachflow.tensor.habits import FIRST_AXIS, named
from teachflow.tensor.interop import NUMPY_TWINS
from teachflow.tensor.tensor import Tensor, as_tensor

__all__ = ["broadcast_to", "cat", "chunk", "concatenate", "diagonal", "flatten", "flip", "gather",
           "permute", "reshape", "roll", "split", "squeeze", "stack", "swapaxes", "transpose",
           "tril", "triu", "unsqueeze"]



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


def flip(x: Any, dims: int | Sequence[int]) -> Tensor:
    return as_tensor(x).flip(dims)


def roll(x: Any, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    return as_tensor(x).roll(shifts, dims)


def split(x: Any, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple:
    """Pieces of `x` along `dim`, as PyTorch cuts them (see `Tensor.split`)."""
    return as_tensor(x).split(split_size_or_sections, dim)


def chunk(x: Any, chunks: int, dim: int = 0) -> tuple:
    return as_tensor(x).chunk(chunks, dim)


def tril(x: Any, diagonal: int = 0) -> Tensor:
    return as_tensor(x).tril(diagonal)


def triu(x: Any, diagonal: int = 0) -> Tensor:
    return as_tensor(x).triu(diagonal)


def diagonal(x: Any, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    return as_tensor(x).diagonal(offset, dim1, dim2)


# NumPy's functions that mean what these do: np.concatenate on tensors is tfl.concatenate.
NUMPY_TWINS.update({
    np.concatenate: concatenate, np.stack: stack, np.transpose: transpose, np.squeeze: squeeze,
    np.broadcast_to: broadcast_to, np.swapaxes: swapaxes,
    np.reshape: lambda x, *shape, **kwargs: reshape(x, *shape, *kwargs.values()),
    np.ravel: lambda x: reshape(x, -1),
})
