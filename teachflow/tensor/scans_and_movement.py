"""The functions of the scans and of the newer movement: ``tfl.prod``, ``tfl.cumsum``,
``tfl.sort``, ``tfl.topk``, ``tfl.flip``, ``tfl.split``, ``tfl.tril``, ...

Each applies the method of the same name (``tfl.sort(x)`` is ``x.sort()``, for anything
`tfl.tensor` takes), as in `teachflow.tensor.functions`, which has the rest; the methods are in
`teachflow.tensor.reductions` (products, truth, running totals, order) and
`teachflow.tensor.movement` (flipped, rolled, cut, masked, a diagonal read). Kept in a file of
their own so that each stays short.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from teachflow.tensor.habits import LAST_AXIS
from teachflow.tensor.tensor import Tensor, as_tensor

__all__ = ["all", "any", "argsort", "chunk", "cumprod", "cumsum", "diagonal", "flip",
           "logsumexp", "prod", "roll", "sort", "split", "topk", "tril", "triu"]

Axis = int | Sequence[int] | None


# --- Products, truth, running totals, order -------------------------------------------------------


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


# --- Movement -------------------------------------------------------------------------------------


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
