"""A tensor's movement methods: ``t.reshape(2, 3)``, ``t.T``, ``t.transpose(1, 0)``,
``t.unsqueeze(0)``, ``t[1:, None]``, ``t[i] = v``: the same values, moved to other places.

No value is computed: each method says where every value of the result comes from, one call of
`bind` with an op of `teachflow.ops.shape` (indices are read by `teachflow.tensor.indexing`).
`Tensor` inherits them from `Movement`; their functions (``tfl.reshape``, ``tfl.broadcast_to``,
``tfl.concatenate``) are in `teachflow.tensor.functions`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from teachflow.autodiff.tape import Tracked
from teachflow.core import dispatch
from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError, IndexingError, ShapeError, TraceError
from teachflow.core.spec import is_int
from teachflow.graph import Value
from teachflow.ops import along_axis, reduction
from teachflow.ops import elementwise as ew
from teachflow.ops import shape as shape_ops
from teachflow.tensor.conversion import shape_arg
from teachflow.tensor.habits import ForeignName, named, unknown_keyword
from teachflow.tensor.indexing import normalize_index

if TYPE_CHECKING:
    from teachflow.tensor.tensor import Tensor


class Movement:
    """Indexing, reshaping and reordering axes, each an op applied through `bind` (a mixin of
    `Tensor`)."""

    __slots__ = ()

    # --- Indexing -----------------------------------------------------------------------------

    def __getitem__(self, index: Any) -> Tensor:
        index = normalize_index(index)
        arrays = [i for i in index if isinstance(i, Tracked)]  # computed by a graph (traced)
        if arrays:
            holes = iter(range(len(arrays)))
            index = tuple(shape_ops.Hole(next(holes)) if isinstance(i, Tracked) else i
                          for i in index)
            return bind(shape_ops.gather, self, *arrays, index=index)
        return bind(shape_ops.getitem, self, index=index)

    def gather(self, dim: int, index: Any) -> Tensor:
        """PyTorch's gather: along axis `dim`, the values at `index` (integers, as many axes
        as `self`): ``out[i][j] = x[i][index[i][j]]`` for ``dim=1``. The result has the index's
        shape; the gradient goes back to the positions read (added where read twice)."""
        if not is_int(dim):
            raise DTypeError(f"dim is the axis to pick along (an int), not {dim!r}",
                             op="gather", hint="x.gather(1, index)")
        if not isinstance(index, Tracked):
            index = np.asarray(index)
        if index.ndim != self.ndim or not -self.ndim <= dim < max(self.ndim, 1):
            raise ShapeError(f"gathers along dim {dim} of a tensor of shape {self.shape} with an "
                             f"index of shape {tuple(index.shape)}", op="gather",
                             hint="the index has as many axes as the input, and dim is one of "
                                  f"them (-{self.ndim} to {self.ndim - 1})")
        axis = int(dim) % max(self.ndim, 1)
        if isinstance(index, Tracked):  # (traced, a captured tensor's values too exist only
            index = dispatch.current_interpreter().operand(index)  # when the graph runs)
        values = index if not isinstance(index, Tracked) else \
            None if isinstance(index._data, Value) else index.numpy()
        size = self.shape[axis] if self.ndim else 1
        if values is not None and values.dtype.kind in "iu" and size is not None:
            bad = values[(values < 0) | (values >= size)]
            if bad.size:  # (NumPy would read -1 as the last one; PyTorch refuses it)
                raise IndexingError(f"index {int(bad.flat[0])} is outside 0..{size - 1} along dim "
                                    f"{dim} of a tensor of shape {self.shape}", op="gather",
                                    hint="every index must be a position along dim")
        return bind(along_axis.take_along_axis, self, index, axis=axis)

    def __setitem__(self, index: Any, value: Any) -> None:
        """``t[index] = value``: new values with the index set (differentiable, except into a
        leaf that requires grad, which only `no_grad` may change; see `Tensor._assign`)."""
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

    def __iter__(self) -> Iterator[Tensor]:
        for i in range(len(self)):
            yield self[i]

    # --- Shape --------------------------------------------------------------------------------

    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        """``x.reshape(2, 3)`` or ``x.reshape((2, 3))``; one size may be -1."""
        shape = shape_arg(shape, "reshape", unknown_ok=True)
        return self if shape == self.shape else bind(shape_ops.reshape, self, shape=shape)

    def view(self, *shape: int | Sequence[int]) -> Tensor:
        """PyTorch's name for `reshape` (a teachflow tensor has no strides that could refuse)."""
        return self.reshape(*shape)

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

    def permute(self, *dims: int | Sequence[int]) -> Tensor:
        """PyTorch's name for `transpose` with every axis named: ``x.permute(2, 0, 1)``."""
        return self._permuted(dims, {})

    def swapaxes(self, axis1: int, axis2: int) -> Tensor:
        """Exchange two axes (what PyTorch's ``x.transpose(0, 1)`` does)."""
        order = list(range(self.ndim))
        (a,) = reduction.normalize_axes("swapaxes", axis1, self.shape)
        (b,) = reduction.normalize_axes("swapaxes", axis2, self.shape)
        order[a], order[b] = order[b], order[a]
        return self._permuted(tuple(order), {})

    def unsqueeze(self, dim: int | None = None, **other: Any) -> Tensor:
        """A new axis of size 1 at position `dim` (from ``-ndim - 1`` to ``ndim``; NumPy's
        ``axis=`` names it too)."""
        if other:
            (dim,) = named("unsqueeze", other, dim=dim)
        if not is_int(dim):
            raise DTypeError(f"unsqueeze takes one axis (an int), not {dim!r}", op="unsqueeze",
                             hint="e.g. x.unsqueeze(0) for a new first axis")
        (dim,) = reduction.normalize_axes("unsqueeze", dim, (*self.shape, 1))
        if self.shape.count(None) > 1:  # sizes unknown until the graph runs: keep them
            return self[(slice(None),) * dim + (None,)]
        return self._reshaped((*self.shape[:dim], 1, *self.shape[dim:]), "unsqueeze")

    def squeeze(self, dim: int | Sequence[int] | None = None, **other: Any) -> Tensor:
        """Without its axes of size 1: all of them, or those among `dim` (an int or a tuple;
        NumPy's ``axis=`` names it too); an axis of `dim` whose size is not 1 stays, as in
        PyTorch."""
        if other:
            (dim,) = named("squeeze", other, dim=dim)
        dims = reduction.normalize_axes("squeeze", dim, self.shape)
        dims = range(self.ndim) if dims is None else dims
        if self.shape.count(None) > 1:  # sizes unknown until the graph runs: keep them
            return self[tuple(0 if i in dims and d == 1 else slice(None)
                              for i, d in enumerate(self.shape))]
        kept = tuple(d for i, d in enumerate(self.shape) if i not in dims or d != 1)
        return self._reshaped(kept, "squeeze")

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """The axes from `start_dim` to `end_dim` merged into one; by default all: a 1-d tensor
        (``x.flatten(1)`` keeps a batch axis)."""
        if self.ndim == 0:
            return self._reshaped((1,), "flatten")
        (start,) = reduction.normalize_axes("flatten", start_dim, self.shape)
        (end,) = reduction.normalize_axes("flatten", end_dim, self.shape)
        if start > end:
            raise ShapeError(f"start_dim {start_dim} comes after end_dim {end_dim} for a tensor "
                             f"of shape {self.shape}", op="flatten")
        merged = self.shape[start:end + 1]
        side = None if None in merged else math.prod(merged)
        return self._reshaped((*self.shape[:start], side, *self.shape[end + 1:]), "flatten")

    def _reshaped(self, shape: tuple, op: str) -> Tensor:
        """`reshape` to `shape`, in which one unknown size (None, a placeholder's) may remain."""
        if shape.count(None) > 1:
            raise ShapeError(f"{op} of a tensor of shape {self.shape} would leave two sizes "
                             "unknown", op=op, hint="give the graph's inputs known sizes")
        return self.reshape(tuple(-1 if d is None else d for d in shape))

    # --- PyTorch's and NumPy's names for the above, which teachflow spells otherwise ----------

    t = ForeignName("x.T")
    mT = ForeignName("x.swapaxes(-1, -2)")
    ravel = ForeignName("x.flatten()")
    view_as = ForeignName("x.reshape(other.shape)")
    reshape_as = ForeignName("x.reshape(other.shape)")
    contiguous = ForeignName("x (a teachflow tensor has no strides: drop the call)")
    expand = ForeignName("tfl.broadcast_to(x, shape)")
    expand_as = ForeignName("tfl.broadcast_to(x, other.shape)")
    expand_dims = ForeignName("x.unsqueeze(axis)")
    repeat = ForeignName("tfl.concatenate([x] * k, axis)")
    zero_ = ForeignName("x[...] = 0")
    fill_ = ForeignName("x[...] = value")


def is_scalar(x: Any) -> bool:
    """One number: a Python or NumPy scalar, or a tensor or array of one value and no axes."""
    return isinstance(x, bool | int | float | np.generic) or (
        isinstance(x, Tracked | np.ndarray) and x.ndim == 0)
