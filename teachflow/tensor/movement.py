"""A tensor's movement methods: ``t.reshape(2, 3)``, ``t.T``, ``t.transpose(1, 0)``,
``t.unsqueeze(0)``, ``t[1:, None]``, ``t[i] = v``: the same values, moved to other places.

No value is computed: each method says where every value of the result comes from, one call of
`bind` with an op of `teachflow.ops.shape` (indices are read by `teachflow.tensor.indexing`).
`Tensor` inherits them from `Movement`; their functions (``tfl.reshape``, ``tfl.broadcast_to``,
``tfl.concatenate``) are in `teachflow.tensor.arrange`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from itertools import pairwise
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

    # --- Rearranging: reversed, rolled, tiled, cut, masked, a diagonal read -------------------
    # Each is a composition of the ops above (slices, index arrays, concatenate, broadcast_to,
    # where): no op of its own, and a gradient that is theirs.

    def flip(self, *dims: int | Sequence[int]) -> Tensor:
        """The order of the values reversed along `dims` (``x.flip(0)``, ``x.flip((0, 1))``): a
        slice with step -1 on each."""
        axes = _axes_arg("flip", dims, self.shape)
        return self[tuple(slice(None, None, -1) if a in axes else slice(None)
                          for a in range(self.ndim))]

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
        """The values moved `shifts` places along `dims`, those pushed off the end coming back
        at the start (each axis: two slices, concatenated). Without `dims`, of the flattened
        tensor, its shape kept."""
        if dims is None:
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        shifts = (shifts,) if is_int(shifts) else tuple(shifts)
        axes = _axes_arg("roll", (dims,), self.shape, ordered=True)
        if len(shifts) != len(axes) or not all(is_int(s) for s in shifts):
            raise ShapeError(f"roll takes one shift (an int) per axis: shifts {shifts!r} for "
                             f"dims {dims!r}", op="roll", hint="e.g. x.roll((1, -2), (0, 1))")
        x = self
        for shift, a in zip(shifts, axes, strict=True):
            n = _known_size(x, a, "roll")
            if n and int(shift) % n:
                cut, before = n - int(shift) % n, (slice(None),) * a
                x = bind(shape_ops.concatenate, x[before + (slice(cut, None),)],
                         x[before + (slice(0, cut),)], axis=a)
        return x

    def repeat(self, *sizes: int | Sequence[int]) -> Tensor:
        """PyTorch's repeat (NumPy's tile): the whole tensor `sizes[k]` times along each axis
        (extra leading sizes add axes). A reshape that gives each axis a size-1 twin in front,
        a broadcast of the twins to the repeats, and a reshape that merges each pair."""
        sizes = shape_arg(sizes, "repeat")
        if len(sizes) < self.ndim:
            raise ShapeError(f"repeat takes a count for each of the {self.ndim} axes of a tensor "
                             f"of shape {self.shape}; got {sizes}", op="repeat",
                             hint="give one count per axis, e.g. x.repeat(2, 1)")
        shape = (1,) * (len(sizes) - self.ndim) + tuple(self.shape)
        if None in shape:
            raise ShapeError(f"repeat needs every size, and this tensor's shape is {self.shape}",
                             op="repeat", hint="trace with known sizes (no None)")
        twins = tuple(d for side in shape for d in (1, side))
        tiled = tuple(d for r, side in zip(sizes, shape, strict=True) for d in (r, side))
        x = self.reshape(twins)
        x = bind(shape_ops.broadcast_to, x, shape=tiled) if tiled != twins else x
        return x.reshape(tuple(r * side for r, side in zip(sizes, shape, strict=True)))

    def split(self, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple:
        """Pieces along `dim`, as PyTorch cuts them: of `split_size_or_sections` each (the last
        smaller), or of the sizes listed (which must add up to the axis's size). Slices."""
        (a,) = reduction.normalize_axes("split", dim, self.shape)
        n = _known_size(self, a, "split")
        sizes = split_size_or_sections
        if is_int(sizes):
            if sizes <= 0:
                raise ShapeError(f"split_size must be positive, not {sizes}", op="split")
            sizes = [min(int(sizes), n - start) for start in range(0, n, int(sizes))] or [0]
        elif not all(is_int(s) and s >= 0 for s in sizes) or sum(sizes) != n:
            raise ShapeError(f"split sections {list(sizes)} must be sizes that add up to {n}, "
                             f"the size of axis {a} of a tensor of shape {self.shape}",
                             op="split")
        starts = [int(s) for s in np.cumsum([0, *sizes])]
        return tuple(self[(slice(None),) * a + (slice(b, e),)] for b, e in pairwise(starts))

    def chunk(self, chunks: int, dim: int = 0) -> tuple:
        """`chunks` pieces along `dim` of ``ceil(size / chunks)`` each, as PyTorch's chunk
        (which may give fewer)."""
        if not is_int(chunks) or chunks <= 0:
            raise ShapeError(f"chunk takes a positive number of chunks, not {chunks!r}",
                             op="chunk")
        (a,) = reduction.normalize_axes("chunk", dim, self.shape)
        n = _known_size(self, a, "chunk")
        return self.split(max(-(-n // int(chunks)), 1), a)

    def tril(self, diagonal: int = 0) -> Tensor:
        """The lower triangle of the last two axes (on and below the `diagonal`-th diagonal),
        zeros above: ``where(mask, x, 0)`` with a constant mask, which fuses."""
        return self._triangle(np.tril, "tril", diagonal)

    def triu(self, diagonal: int = 0) -> Tensor:
        """The upper triangle of the last two axes (on and above the `diagonal`-th diagonal)."""
        return self._triangle(np.triu, "triu", diagonal)

    def _triangle(self, triangle: Any, op: str, diagonal: int) -> Tensor:
        if self.ndim < 2 or None in self.shape[-2:] or not is_int(diagonal):
            raise ShapeError(f"{op} keeps a triangle of the last two axes (known sizes) with an "
                             f"int diagonal; got shape {self.shape}, diagonal={diagonal!r}",
                             op=op, hint="a matrix or a batch of them: shape (..., n, m)")
        mask = triangle(np.ones(self.shape[-2:], dtype=bool), int(diagonal))
        return bind(ew.where, mask, self, False if self.dtype == np.bool_ else 0)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """The diagonal of the matrices on axes `dim1` and `dim2` (above it by `offset`, below
        it for a negative one), as a last axis: both axes moved last and read with two index
        arrays, ``x[..., i, i + offset]``."""
        a, b = (reduction.normalize_axes("diagonal", d, self.shape)[0] for d in (dim1, dim2))
        if a == b or not is_int(offset):
            raise ShapeError(f"diagonal takes two different axes and an int offset; got dim1="
                             f"{dim1}, dim2={dim2}, offset={offset!r} for shape {self.shape}",
                             op="diagonal")
        rows, cols = _known_size(self, a, "diagonal"), _known_size(self, b, "diagonal")
        down, right = max(-int(offset), 0), max(int(offset), 0)
        steps = np.arange(max(min(rows - down, cols - right), 0))
        moved = self.permute(*(d for d in range(self.ndim) if d not in (a, b)), a, b)
        return moved[..., steps + down, steps + right]

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
    zero_ = ForeignName("x[...] = 0")
    fill_ = ForeignName("x[...] = value")


def _axes_arg(op: str, dims: tuple, shape: tuple, ordered: bool = False) -> tuple[int, ...]:
    """Axes given as ints or one sequence, made non-negative (in order if `ordered`)."""
    if len(dims) == 1 and not is_int(dims[0]):
        dims = tuple(dims[0])
    if ordered:
        return tuple(reduction.normalize_axes(op, d, shape)[0] for d in dims)
    return reduction.normalize_axes(op, dims, shape) or ()


def _known_size(x: Any, axis: int, op: str) -> int:
    if x.shape[axis] is None:
        raise ShapeError(f"{op} needs the size of axis {axis}, and this tensor's shape is "
                         f"{x.shape}", op=op, hint="trace with known sizes (no None)")
    return x.shape[axis]


def is_scalar(x: Any) -> bool:
    """One number: a Python or NumPy scalar, or a tensor or array of one value and no axes."""
    return isinstance(x, bool | int | float | np.generic) or (
        isinstance(x, Tracked | np.ndarray) and x.ndim == 0)
