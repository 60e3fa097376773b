"""A tensor's reductions: ``t.sum(axis=1)``, ``t.mean()``, ``t.max()``, ``t.argmax(1)``,
``t.var()``, and what is normalised over an axis: ``t.softmax()``, ``t.log_softmax()``,
``t.logsumexp()``; products and truth (``t.prod()``, ``t.all()``, ``t.any()``), running totals
(``t.cumsum(0)``, ``t.cumprod(0)``) and order (``t.sort()``, ``t.argsort()``, ``t.topk(k)``).

Each reduces along some axes (all of them by default, ``axis=None``), through `bind` with an op of
`teachflow.ops.reduction` or `teachflow.ops.scans`, or is composed from such ops and elementwise
ones (`var`, `softmax`, `logsumexp`; `sort` and `topk` index by `argsort`'s positions).
PyTorch's ``dim=`` and ``keepdim=`` name the axes too (see `teachflow.tensor.habits`). `Tensor`
inherits them from `Reductions`; their functions (``tfl.sum``, ``tfl.softmax``) are in
`teachflow.tensor.functions`.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.core.errors import ArgumentError, DTypeError, ShapeError
from teachflow.core.spec import is_int
from teachflow.ops import elementwise as ew
from teachflow.ops import reduction, scans
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

    # --- Products, truth, running totals and order (`teachflow.ops.scans`) -------------------

    def prod(self, axis: int | Sequence[int] | None = None, keepdims: bool = False,
             dtype: Any = None, out: Any = None, **other: Any) -> Tensor:
        """The product over `axis`; its gradient is right where elements are 0 (the product
        of the others, never ``prod / x``)."""
        return reduced(self, scans.prod, axis, keepdims, dtype, out, other)

    def all(self, axis: int | Sequence[int] | None = None, keepdims: bool = False,
            out: Any = None, **other: Any) -> Tensor:
        """True where every element over `axis` is nonzero (a bool tensor)."""
        return reduced(self, scans.all, axis, keepdims, None, out, other)

    def any(self, axis: int | Sequence[int] | None = None, keepdims: bool = False,
            out: Any = None, **other: Any) -> Tensor:
        """True where some element over `axis` is nonzero (a bool tensor)."""
        return reduced(self, scans.any, axis, keepdims, None, out, other)

    def logsumexp(self, axis: int | Sequence[int] | None = None, keepdims: bool = False,
                  **other: Any) -> Tensor:
        """``log(sum(exp(x)))`` over `axis`, computed stably as ``m + log(sum(exp(x - m)))``
        with m the (detached) maximum. A function of `max`, `exp`, `sum` and `log` rather than an
        op of its own: it is as fast (those ops fuse), and its gradient, the softmax, comes out
        of theirs. Where every element is -inf the answer is -inf, as in PyTorch."""
        if other:
            axis, keepdims = named("logsumexp", other, axis=axis, keepdims=keepdims)
        axes = reduction.normalize_axes("logsumexp", axis, self.shape)
        if self._empty_along(axes):  # (the log of an empty sum: -inf)
            return self.exp().sum(axis=axes, keepdims=keepdims).log()
        top = self.detach().max(axis=axes, keepdims=True)
        top = bind(ew.where, top.abs() == math.inf, 0.0, top)  # (no inf - inf)
        total = (self - top).exp().sum(axis=axes, keepdims=True).log() + top
        return total if keepdims else total.squeeze(axes if axes is not None else None)

    def cumsum(self, axis: int | None = None, dtype: Any = None, **other: Any) -> Tensor:
        """The running sums along `axis` (PyTorch's ``dim=``): element j is ``x[0] + ... +
        x[j]``."""
        return self._scanned(scans.cumsum, axis, dtype, other)

    def cumprod(self, axis: int | None = None, dtype: Any = None, **other: Any) -> Tensor:
        """The running products along `axis`: element j is ``x[0] * ... * x[j]`` (its gradient
        is exact where elements are 0; see `teachflow.ops.scans`)."""
        return self._scanned(scans.cumprod, axis, dtype, other)

    def _scanned(self, op: Any, axis: Any, dtype: Any, other: dict) -> Tensor:
        if other:
            (axis,) = named(op.name, other, axis=axis)
        if axis is None:
            raise ArgumentError(f"{op.name} runs along one axis: name it", op=op.name,
                                hint=f"x.{op.name}(0), or x.flatten().{op.name}(0) for NumPy's "
                                     "flattened running total")
        if dtype is None:
            return bind(op, self, axis=one_axis(op.name, axis, self.shape))
        out = bind(op, self.astype(dtype), axis=one_axis(op.name, axis, self.shape))
        return out.astype(dtype)  # (NumPy would sum int32 into int64; dtype= says otherwise)

    def argsort(self, axis: int = LAST_AXIS, descending: bool = False, stable: bool = True,
                **other: Any) -> Tensor:
        """The positions that sort `axis` (int64): ``x[argsort]`` along it is sorted. Always
        stable: ties keep their order, descending too."""
        if other:
            (axis,) = named("argsort", other, axis=axis)
        if not isinstance(descending, bool | np.bool_):
            raise DTypeError(f"descending is True or False, not {descending!r}", op="argsort")
        return bind(scans.argsort, self, axis=one_axis("argsort", axis, self.shape),
                    descending=bool(descending))

    def sort(self, axis: int = LAST_AXIS, descending: bool = False, stable: bool = True,
             **other: Any) -> ValuesAndIndices:
        """``(values, indices)`` sorted along `axis`, as PyTorch returns them: the indices are
        `argsort`'s, the values `x` read at them (so the gradient goes back to where each value
        came from)."""
        if other:
            (axis,) = named("sort", other, axis=axis)
        axis = one_axis("sort", axis, self.shape)
        indices = self.argsort(axis, descending)
        return ValuesAndIndices(along(self, indices, axis), indices)

    def topk(self, k: int, axis: int = LAST_AXIS, largest: bool = True, sorted: bool = True,
             **other: Any) -> ValuesAndIndices:
        """The `k` largest values along `axis` (the smallest with ``largest=False``) and where
        they are, as PyTorch's topk: the first k of `sort`. They come sorted even with
        ``sorted=False`` (PyTorch leaves their order unspecified then)."""
        if other:
            (axis,) = named("topk", other, axis=axis)
        axis = one_axis("topk", axis, self.shape)
        if not is_int(k) or not 0 <= k <= (self.shape[axis] or 0):
            raise ShapeError(f"topk takes k from 0 to {self.shape[axis]}, the size of axis "
                             f"{axis} of a tensor of shape {self.shape}; got {k!r}", op="topk",
                             hint="k is how many values to keep along the axis")
        indices = self.argsort(axis, descending=bool(largest))[
            (slice(None),) * axis + (slice(0, int(k)),)]
        return ValuesAndIndices(along(self, indices, axis), indices)

    # --- PyTorch's and NumPy's names for the above, which teachflow spells otherwise ----------

    amax = ForeignName("x.max(axis)")
    amin = ForeignName("x.min(axis)")
    std = ForeignName("x.var(axis).sqrt()")
    norm = ForeignName("(x * x).sum().sqrt()")


class ValuesAndIndices(NamedTuple):
    """What `sort` and `topk` give, as PyTorch's do: ``values, indices = x.sort()``."""

    values: Tensor
    indices: Tensor


def one_axis(op: str, axis: Any, shape: tuple) -> int:
    """One axis (an int), made non-negative; a ShapeError naming `op` and `shape` if it is out
    of range."""
    if not is_int(axis):
        raise DTypeError(f"{op} runs along one axis (an int), not {axis!r}", op=op,
                         hint=f"e.g. x.{op}(-1) for the last axis")
    return reduction.normalize_axes(op, int(axis), shape)[0]


def along(x: Tensor, indices: Tensor, axis: int) -> Tensor:
    """``x`` read at `indices` along `axis` (NumPy's take_along_axis): every other axis indexed
    by a range that broadcasts, so the result has the shape of `indices`."""
    if None in x.shape:
        raise ShapeError(f"reading along an axis needs every size, and this tensor's shape is "
                         f"{x.shape}", op="sort", hint="trace with known sizes (no None)")
    index = tuple(indices if a == axis else np.arange(size).reshape(
        [size if b == a else 1 for b in range(x.ndim)]) for a, size in enumerate(x.shape))
    return x[index]


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
