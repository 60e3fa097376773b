"""A tensor's reductions: ``t.sum(axis=1)``, ``t.mean()``, ``t.max()``, ``t.argmax(1)``,
``t.var()``, and what is normalised over an axis: ``t.softmax()``, ``t.log_softmax()``.

Each reduces along some axes (all of them by default, ``axis=None``), through `bind` with an op of
`teachflow.ops.reduction`, or is composed from such ops and elementwise ones (`var`, `softmax`).
PyTorch's ``dim=`` and ``keepdim=`` name the axes too (see `teachflow.tensor.habits`). `Tensor`
inherits them from `Reductions`; their functions (``tfl.sum``, ``tfl.softmax``) are in
`teachflow.tensor.functions`.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError, ShapeError
from teachflow.core.spec import is_int
from teachflow.ops import elementwise as ew
from teachflow.ops import reduction
from teachflow.tensor.habits import LAST_AXIS, ForeignName, named

if TYPE_CHECKING:
    from teachflow.tensor.tensor import Tensor


class Reductions:
    """Reductions along axes, each an op (or a few) applied through `bind` (a mixin of
    `Tensor`)."""

    __slots__ = ()

    # `dtype` and `out` are here for NumPy: np.sum(t), np.mean(t), np.max(t) and np.min(t) call
    # these methods with them, and get a tensor back.

    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False,
            dtype: Any = None, out: Any = None, **other: Any) -> Tensor:
        """Sum over `axis` (an int, a tuple, or None for all axes)."""
        return reduced(self, reduction.sum, axis, keepdims, dtype, out, other)

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False,
             dtype: Any = None, out: Any = None, **other: Any) -> Tensor:
        return reduced(self, reduction.mean, axis, keepdims, dtype, out, other)

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False,
            out: Any = None, **other: Any) -> Tensor:
        return reduced(self, reduction.max, axis, keepdims, None, out, other)

    def min(self, axis: int | Sequence[int] | None = None, keepdims: bool = False,
            out: Any = None, **other: Any) -> Tensor:
        return reduced(self, reduction.min, axis, keepdims, None, out, other)

    def argmax(self, axis: int | None = None, keepdims: bool = False, **other: Any) -> Tensor:
        """Where the largest value is along `axis` (None: in the flattened tensor), as int64;
        the first place where several tie."""
        if other:
            axis, keepdims = named("argmax", other, axis=axis, keepdims=keepdims)
        axis = reduction.normalize_one_axis("argmax", axis, self.shape)
        return bind(reduction.argmax, self, axis=axis, keepdims=bool(keepdims))

    def argmin(self, axis: int | None = None, keepdims: bool = False, **other: Any) -> Tensor:
        if other:
            axis, keepdims = named("argmin", other, axis=axis, keepdims=keepdims)
        axis = reduction.normalize_one_axis("argmin", axis, self.shape)
        return bind(reduction.argmin, self, axis=axis, keepdims=bool(keepdims))

    def var(self, axis: int | Sequence[int] | None = None, *positional: Any,
            keepdims: bool = False, correction: int | float = 1, **other: Any) -> Tensor:
        """The variance: the squared deviations from the mean, summed and divided by
        ``n - correction``. The default 1 is PyTorch's (unbiased); ``correction=0`` is NumPy's.
        Only the axis is taken by position: a second one means keepdims to PyTorch's habits of
        old (``x.var(1, False)``: unbiased), dtype to NumPy's."""
        if positional:
            raise DTypeError(f"var takes one argument by position, the axis; got "
                             f"{1 + len(positional)}", op="var",
                             hint="name the others: x.var(1, correction=0) (biased, NumPy's "
                                  "ddof=0), x.var(1, keepdims=True)")
        if other:
            axis, keepdims = named("var", other, axis=axis, keepdims=keepdims)
        if not isinstance(correction, int | float | np.integer | np.floating) or \
                isinstance(correction, bool):
            raise DTypeError(f"correction is a number (1: unbiased, 0: biased), not "
                             f"{correction!r}", op="var", hint="x.var(axis, correction=0)")
        axis = reduction.normalize_axes("var", axis, self.shape)
        sides = [self.shape[a] for a in (range(self.ndim) if axis is None else axis)]
        deviation = self - self.mean(axis=axis, keepdims=True)
        squares = (deviation * deviation).sum(axis=axis, keepdims=keepdims)
        if None in sides:  # a size known only when the graph runs: count then
            count = bind(reduction.count_of, self, axis=axis, dtype=squares.dtype)
            return squares / bind(ew.maximum, count - correction, 0)
        return squares / builtins.max(math.prod(sides) - correction, 0)

    def softmax(self, axis: int = LAST_AXIS, **other: Any) -> Tensor:
        """``exp(x) / sum(exp(x))`` along `axis`, computed stably.

        Subtracting the maximum first changes nothing mathematically (it cancels in the ratio)
        but keeps `exp` from overflowing. The maximum is detached: its gradient would cancel
        anyway. As in PyTorch, a 0-d tensor's softmax is 1, and an empty axis gives an empty
        result.
        """
        if other:
            (axis,) = named("softmax", other, axis=axis)
        axes = self._softmax_axes(axis, "softmax")
        e = self._shifted(axes).exp()
        return e / e.sum(axis=axes, keepdims=True)

    def log_softmax(self, axis: int = LAST_AXIS, **other: Any) -> Tensor:
        """``log(softmax(x))`` without computing the softmax: ``x - max - log(sum(exp(x - max)))``.
        """
        if other:
            (axis,) = named("log_softmax", other, axis=axis)
        return bind(reduction.log_softmax, self, axis=self._softmax_axes(axis, "log_softmax"))

    def _softmax_axes(self, axis: int, op: str) -> tuple[int, ...] | None:
        """The axes to normalise over. A 0-d tensor's one value is its own axis (-1 or 0)."""
        if self.ndim == 0:
            if not (is_int(axis) and axis in (-1, 0)):
                raise ShapeError(f"axis {axis!r} is out of range for a 0-d tensor", op=op,
                                 hint="a 0-d tensor is normalised over its one value: use "
                                      "axis=-1 (the default) or 0")
            return None
        return reduction.normalize_axes(op, axis, self.shape)

    def _empty_along(self, axes: tuple[int, ...] | None) -> bool:
        return any(self.shape[a] == 0 for a in (range(self.ndim) if axes is None else axes))

    def _shifted(self, axes: tuple[int, ...] | None) -> Tensor:
        """x minus its (detached) maximum over `axes`; x itself where there is no maximum (a
        size known only when the graph runs may be 0: then the maximum of nothing is -inf)."""
        if self._empty_along(axes):
            return self
        values = self.detach()  # (so the tape need not record the maximum at all)
        if None in [self.shape[a] for a in (range(self.ndim) if axes is None else axes)]:
            top = bind(reduction.max, values, axis=axes, keepdims=True, initial=-math.inf)
        else:
            top = bind(reduction.max, values, axis=axes, keepdims=True)
        return self - top

    # --- PyTorch's and NumPy's names for the above, which teachflow spells otherwise ----------

    amax = ForeignName("x.max(axis)")
    amin = ForeignName("x.min(axis)")
    std = ForeignName("x.var(axis).sqrt()")
    all = ForeignName("(x != 0).astype('int32').min() == 1")
    any = ForeignName("(x != 0).astype('int32').max() == 1")
    norm = ForeignName("(x * x).sum().sqrt()")
    prod = ForeignName("x.log().sum().exp() (for positive x)")
    cumsum = ForeignName("a loop of x[i] sums (no op yet)")


def reduced(x: Tensor, op: Any, axis: Any, keepdims: bool, dtype: Any, out: Any,
            other: dict) -> Tensor:
    """``x.sum(axis, keepdims)`` and its kin: `op` over `axis` (normalised), in the dtype NumPy
    asked for; PyTorch's ``dim=`` and ``keepdim=`` are taken for them (see `named`)."""
    if other:
        axis, keepdims = named(op.name, other, axis=axis, keepdims=keepdims)
    axis = reduction.normalize_axes(op.name, axis, x.shape)
    return _as_numpy_asked(bind(op, x, axis=axis, keepdims=bool(keepdims)), op.name, dtype, out)


def _as_numpy_asked(result: Tensor, op: str, dtype: Any, out: Any) -> Tensor:
    """A reduction's result in the dtype NumPy asked for; NumPy's `out=` cannot be honoured."""
    if out is not None:
        raise DTypeError(f"np.{op}(..., out=...) would write into an array in place, and a "
                         "tensor's values never change in place", op=op,
                         hint=f"use the result: y = np.{op}(t) (a tensor), or t.{op}()")
    return result if dtype is None else result.astype(dtype)
