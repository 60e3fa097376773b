"""A tensor's operators and its everyday methods: ``a + b``, ``x @ w``, ``t[i]``, ``p -= g``,
``t.exp()``, ``t.sum(axis=1)``, ``t.reshape(2, 3)``, ``t.T``.

Each is one call of `bind` with an op of `teachflow.ops`: a method says *which* op to apply, and
the current execution mode decides *how* (see `teachflow.core.dispatch`). `Tensor` inherits them
from `Operators`, kept here so that `teachflow.tensor.tensor` reads as what a tensor *is*.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from teachflow.autodiff.tape import Tracked
from teachflow.core.dispatch import bind
from teachflow.core.errors import ArgumentError, DTypeError, ShapeError, TraceError
from teachflow.core.spec import is_int
from teachflow.ops import elementwise as ew
from teachflow.ops import linalg, reduction
from teachflow.ops import shape as shape_ops
from teachflow.tensor.conversion import shape_arg
from teachflow.tensor.indexing import normalize_index

if TYPE_CHECKING:
    from teachflow.tensor.tensor import Tensor


class Operators:
    """Operators and everyday methods, each an op applied through `bind` (a mixin of `Tensor`)."""

    __slots__ = ()

    # --- Operators ----------------------------------------------------------------------------

    def __add__(self, other: Any) -> Tensor:
        return bind(ew.add, self, other)

    def __radd__(self, other: Any) -> Tensor:
        return bind(ew.add, other, self)

    def __sub__(self, other: Any) -> Tensor:
        return bind(ew.sub, self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return bind(ew.sub, other, self)

    def __mul__(self, other: Any) -> Tensor:
        return bind(ew.mul, self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return bind(ew.mul, other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return bind(ew.div, self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return bind(ew.div, other, self)

    def __pow__(self, other: Any) -> Tensor:
        return bind(ew.pow, self, other)

    def __rpow__(self, other: Any) -> Tensor:
        return bind(ew.pow, other, self)

    def __matmul__(self, other: Any) -> Tensor:
        return bind(linalg.matmul, self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return bind(linalg.matmul, other, self)

    # Masks combine with &, | and ~, as in NumPy and PyTorch (boolean tensors only).

    def __and__(self, other: Any) -> Tensor:
        return bind(ew.where, as_mask(self, "&"), as_mask(other, "&"), False)

    def __rand__(self, other: Any) -> Tensor:
        return self & other

    def __or__(self, other: Any) -> Tensor:
        return bind(ew.where, as_mask(self, "|"), True, as_mask(other, "|"))

    def __ror__(self, other: Any) -> Tensor:
        return self | other

    def __invert__(self) -> Tensor:
        return bind(ew.eq, as_mask(self, "~"), False)

    def __floordiv__(self, other: Any) -> Tensor:
        return bind(ew.floor_divide, self, other)

    def __rfloordiv__(self, other: Any) -> Tensor:
        return bind(ew.floor_divide, other, self)

    def __mod__(self, other: Any) -> Tensor:
        return bind(ew.remainder, self, other)

    def __rmod__(self, other: Any) -> Tensor:
        return bind(ew.remainder, other, self)

    def __neg__(self) -> Tensor:
        return bind(ew.neg, self)

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        return bind(ew.abs, self)

    def __lt__(self, other: Any) -> Tensor:
        return bind(ew.lt, self, other)

    def __le__(self, other: Any) -> Tensor:
        return bind(ew.le, self, other)

    def __gt__(self, other: Any) -> Tensor:
        return bind(ew.gt, self, other)

    def __ge__(self, other: Any) -> Tensor:
        return bind(ew.ge, self, other)

    def __eq__(self, other: Any) -> Tensor:  # type: ignore[override]
        return bind(ew.eq, self, other)

    def __ne__(self, other: Any) -> Tensor:  # type: ignore[override]
        return bind(ew.ne, self, other)

    def __getitem__(self, index: Any) -> Tensor:
        index = normalize_index(index)
        arrays = [i for i in index if isinstance(i, Tracked)]  # computed by a graph (traced)
        if arrays:
            holes = iter(range(len(arrays)))
            index = tuple(shape_ops.Hole(next(holes)) if isinstance(i, Tracked) else i
                          for i in index)
            return bind(shape_ops.gather, self, *arrays, index=index)
        return bind(shape_ops.getitem, self, index=index)

    # --- In-place updates (see `Tensor._assign`) ------------------------------------------

    def __iadd__(self, other: Any) -> Tensor:
        return self._assign(bind(ew.add, self, other), "+=")

    def __isub__(self, other: Any) -> Tensor:
        return self._assign(bind(ew.sub, self, other), "-=")

    def __imul__(self, other: Any) -> Tensor:
        return self._assign(bind(ew.mul, self, other), "*=")

    def __itruediv__(self, other: Any) -> Tensor:
        return self._assign(bind(ew.div, self, other), "/=")

    def __setitem__(self, index: Any, value: Any) -> None:
        """``t[index] = value``: new values with the index set (differentiable, except into a
        leaf that requires grad, which only `no_grad` may change)."""
        mask = index if isinstance(index, Tracked) and index.dtype == np.bool_ else None
        if mask is not None and mask.shape == self.shape[:mask.ndim] and is_scalar(value):
            # x[mask] = v keeps x's shape: it is where(mask, v, x), in both modes (the positions
            # a mask picks are known only when a graph runs, but where needs none of them).
            wide = mask.reshape(mask.shape + (1,) * (self.ndim - mask.ndim)) if \
                mask.ndim < self.ndim else mask
            self._assign(bind(ew.where, wide, value, self), "setitem")
            return
        index = normalize_index(index)
        if any(isinstance(i, Tracked) for i in index):
            raise TraceError("assigning at positions a traced tensor holds is not supported: "
                             "the positions exist only when the graph runs", op="setitem",
                             hint="build the new values with tfl.where, or index with a NumPy "
                                  "array")
        self._assign(bind(shape_ops.setitem, self, value, index=index), "setitem")

    # --- Elementwise functions ----------------------------------------------------------------

    def exp(self) -> Tensor:
        return bind(ew.exp, self)

    def log(self) -> Tensor:
        return bind(ew.log, self)

    def sqrt(self) -> Tensor:
        return bind(ew.sqrt, self)

    def tanh(self) -> Tensor:
        return bind(ew.tanh, self)

    def relu(self) -> Tensor:
        return bind(ew.relu, self)

    def sigmoid(self) -> Tensor:
        return bind(ew.sigmoid, self)

    def softplus(self) -> Tensor:
        return bind(ew.softplus, self)

    def abs(self) -> Tensor:
        return bind(ew.abs, self)

    # --- Reductions ---------------------------------------------------------------------------

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

    # --- Shape --------------------------------------------------------------------------------

    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        """``x.reshape(2, 3)`` or ``x.reshape((2, 3))``; one size may be -1."""
        shape = shape_arg(shape, "reshape", unknown_ok=True)
        return self if shape == self.shape else bind(shape_ops.reshape, self, shape=shape)

    def transpose(self, *axes: int | Sequence[int], **named: Any) -> Tensor:
        """Permute the axes; with no arguments, reverse them (``x.T``). The axes may also be
        given as NumPy's ``axes=(1, 0)``. As in NumPy, the axes are the new order of *all* of
        them: ``x.transpose(1, 0)`` of a 2-d tensor swaps its two axes, and PyTorch's habit
        ``x.transpose(0, 1)`` (two axes to swap), which would keep every axis in place, is
        explained instead."""
        if len(axes) == 2 and self.ndim == 2 and all(is_int(a) and -2 <= a < 2 for a in axes) \
                and [a % 2 for a in axes] == [0, 1]:
            raise ShapeError(
                f"x.transpose({axes[0]}, {axes[1]}) names the new order of both axes (as in "
                "NumPy), which keeps them where they are; PyTorch's transpose swaps two axes",
                op="transpose", hint="swap them with x.T, x.swapaxes(0, 1) or x.transpose(1, 0)")
        return self._permuted(axes, named)

    def _permuted(self, axes: tuple, named: dict) -> Tensor:
        if named:
            if set(named) != {"axes"} or axes:
                wrong = next(k for k in named if k != "axes" or axes)
                raise unknown_keyword("transpose", wrong, () if axes else ("axes",))
            axes = () if named["axes"] is None else (named["axes"],)
        if len(axes) == 1 and not is_int(axes[0]):
            if not isinstance(axes[0], Sequence):
                raise DTypeError(f"transpose takes axes (ints), not {axes[0]!r}",
                                 op="transpose", hint="x.transpose() reverses the axes; "
                                                      "x.transpose(1, 0, 2) names each")
            axes = tuple(axes[0])
        if not axes:
            axes = tuple(reversed(range(self.ndim)))
        return bind(shape_ops.transpose, self, axes=shape_ops.permutation(axes, self.shape))

    @property
    def T(self) -> Tensor:
        return self.transpose()


# --- Keywords under other libraries' names -------------------------------------------------

#: A keyword a call does not take, and the one of the call's that it names: PyTorch's ``dim=``
#: and ``keepdim=`` for NumPy's ``axis=`` and ``keepdims=`` (``x.sum(dim=1, keepdim=True)``),
#: NumPy's ``axis=`` where teachflow takes PyTorch's ``dim=`` (``x.squeeze(axis=0)``).
OTHER_NAMES = {"dim": "axis", "keepdim": "keepdims", "axis": "dim"}

#: Keywords of other libraries that no keyword here means, and what to write instead.
NO_TWIN = {"unbiased": "correction=0 for unbiased=False, correction=1 (the default) for True",
           "ddof": "correction= (NumPy's ddof=0 is correction=0)"}


class DefaultAxis(int):
    """An axis the call left at its default (-1 for softmax, 0 for concatenate): told apart from
    the same number given (by identity), so that ``dim=`` beside it is not an axis given twice.
    It prints as the number, which is what ``help()`` shows."""

    __slots__ = ()

    def __repr__(self) -> str:
        return int.__repr__(self)


LAST_AXIS, FIRST_AXIS = DefaultAxis(-1), DefaultAxis(0)


def named(op: str, other: dict, **ours: Any) -> tuple:
    """The values of `ours` (a call's ``axis=``, ``keepdims=``, ... in order), each replaced by
    what `other` (the keywords the call took without naming them) gives for it under another
    library's name: ``x.sum(dim=1)`` is ``x.sum(axis=1)``, eagerly and traced alike. Any other
    keyword, or one value given under both names, is an `ArgumentError`."""
    values = dict(ours)
    for name, value in other.items():
        ours_name = OTHER_NAMES.get(name)
        if ours_name not in ours:
            raise unknown_keyword(op, name, [*ours, *(n for n, o in OTHER_NAMES.items()
                                                      if o in ours)])
        if _given(ours[ours_name]):
            raise ArgumentError(f"{op}() got {ours_name}={ours[ours_name]!r} and {name}="
                                f"{value!r}, one {ours_name} under two names ({name}= is "
                                f"{'PyTorch' if name != 'axis' else 'NumPy'}'s name for it)",
                                op=op, hint=f"give one of them: {op}(..., {ours_name}=...)")
        values[ours_name] = value
    return tuple(values.values())


def _given(value: Any) -> bool:
    """Did the call give this value, rather than leave it at its default?"""
    return value is not None and value is not False and not isinstance(value, DefaultAxis)


def unknown_keyword(op: str, name: str, accepted: Sequence[str]) -> ArgumentError:
    """A keyword `op` does not take, said as Python says it, with the keyword meant where one
    of `accepted` is spelled alike (``axes=`` for ``axis=``)."""
    close = difflib.get_close_matches(name, accepted, n=1)
    hint = (f"did you mean {close[0]}=?" if close else f"write {NO_TWIN[name]}" if
            name in NO_TWIN else f"it takes {', '.join(f'{a}=' for a in accepted)}" if accepted
            else f"help(tfl.{op}) lists what it takes")
    return ArgumentError(f"{op}() got an unexpected keyword argument {name!r}", op=op, hint=hint)


def is_scalar(x: Any) -> bool:
    """One number: a Python or NumPy scalar, or a tensor or array of one value and no axes."""
    return isinstance(x, bool | int | float | np.generic) or (
        isinstance(x, Tracked | np.ndarray) and x.ndim == 0)


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


def as_mask(x: Any, op: str) -> Any:
    """An operand of &, | or ~: a boolean tensor (or a Python bool)."""
    if isinstance(x, bool | np.bool_) or (isinstance(x, Tracked) and x.dtype == np.bool_):
        return bool(x) if isinstance(x, np.bool_) else x
    what = f"a {x.dtype.name} tensor" if isinstance(x, Tracked) else type(x).__name__
    raise DTypeError(f"{op} combines masks (boolean tensors), and this operand is {what}",
                     op=op, hint="compare first, e.g. (x > 0) & (x < 1); for integers' bits "
                                 "compute on x.numpy()")
