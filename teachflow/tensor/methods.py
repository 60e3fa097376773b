"""PyTorch's and NumPy's names: the methods learners reach for out of habit.

``t.min()``, ``t.argmax(axis=1)``, ``t.var()``, ``t.clip(0, 1)``, ``t.softmax()``,
``t.unsqueeze(0)``, ``t.view(2, 3)``, ``t.numel()``: each a call of an op or a few. A name
teachflow spells otherwise (``t.clamp``, ``t.cuda()``) is a `ForeignName`, which says what to write
instead.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError, ShapeError, TeachflowError, TraceError
from teachflow.core.spec import is_int
from teachflow.ops import elementwise as ew
from teachflow.ops import reduction
from teachflow.tensor.operators import LAST_AXIS, named, reduced

if TYPE_CHECKING:
    from teachflow.tensor.tensor import Tensor


class FamiliarMethods:
    """PyTorch's and NumPy's names for what teachflow computes (a mixin of `Tensor`)."""

    __slots__ = ()

    # --- PyTorch's and NumPy's names ----------------------------------------------------------
    # Learners arrive with PyTorch or NumPy habits. These methods are the common ones, each a
    # call of an op or a few; `__getattr__` names the teachflow spelling of the others.

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

    def clip(self, min: Any = None, max: Any = None) -> Tensor:
        """The values limited to ``[min, max]`` (PyTorch's clamp). A bound may be None (no limit
        on that side) or a tensor. The gradient is 1 where ``min <= x <= max``, else 0."""
        if min is None and max is None:
            raise TeachflowError("clip needs a min, a max, or both", op="clip",
                                 hint="x.clip(0.0, 1.0), x.clip(min=0.0) or x.clip(max=1.0)")
        lo = ew.unbounded(self.dtype, above=False) if min is None else min
        hi = ew.unbounded(self.dtype, above=True) if max is None else max
        # A bound typed by the others, as a number is (a loop's index: tensor.WeakTensor).
        lo, hi = (b.beside(self, lo, hi) if hasattr(b, "beside") else b for b in (lo, hi))
        return bind(ew.clip, self, lo, hi)

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

    def view(self, *shape: int | Sequence[int]) -> Tensor:
        """PyTorch's name for `reshape` (a teachflow tensor has no strides that could refuse)."""
        return self.reshape(*shape)

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

    def clone(self) -> Tensor:
        """A copy in new memory; gradients flow through it unchanged."""
        return bind(ew.copy, self)

    def numel(self) -> int:
        """The number of elements (NumPy: ``t.size``)."""
        return self.size.__index__()

    def dim(self) -> int:
        """The number of axes (NumPy: ``t.ndim``)."""
        return self.ndim


class ElementCount(int):
    """``t.size``: the number of elements, an int, as NumPy's ``a.size``. Called, it answers as
    PyTorch's ``t.size()`` does: the shape, or for ``t.size(d)`` the length of axis d."""

    def __new__(cls, count: int, shape: tuple = ()) -> ElementCount:
        self = super().__new__(cls, count)
        self.shape = shape
        return self

    def __call__(self, dim: int | None = None) -> tuple | int:
        if dim is None:
            return self.shape
        (axis,) = reduction.normalize_axes("size", dim, self.shape)
        return self.shape[axis]


class UnknownCount:
    """``t.size`` of a tensor with a size known only when its graph runs (a placeholder's None):
    the shape, as ``t.size()`` and ``t.size(d)`` give it, but no number to compute with."""

    def __init__(self, shape: tuple) -> None:
        self.shape = shape

    __call__ = ElementCount.__call__

    def _unknown(self, *_: Any) -> Any:
        raise TraceError(f"the number of elements of a tensor of shape {self.shape}: a size is "
                         "known only when the graph runs", op="size",
                         hint="let an op count them when it runs: x.mean() rather than "
                              "x.sum() / x.numel(); x.shape gives the sizes known now")

    __index__ = __int__ = __float__ = __bool__ = __array__ = _unknown
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _unknown
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __pow__ = __rpow__ = _unknown
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _unknown
    __hash__ = None

    def __repr__(self) -> str:
        return f"<size of a {self.shape} tensor, known when the graph runs>"


#: PyTorch's and NumPy's names for what teachflow spells otherwise: on a Tensor each is a
#: `ForeignName` that says so (names teachflow has, such as ``view`` or ``clone``, are methods).
FOREIGN_NAMES = {
    "clamp": "x.clip(min, max)", "clamp_min": "x.clip(min=...)", "clamp_max": "x.clip(max=...)",
    "cuda": "x.to('gpu')", "is_cuda": "x.device == 'gpu'",
    "mm": "x @ y", "bmm": "x @ y (it batches over leading axes)", "matmul": "x @ y",
    "dot": "x @ y", "mv": "x @ v",
    "long": "x.astype('int64')", "int": "x.astype('int32')", "float": "x.astype('float32')",
    "double": "x.astype('float64')", "half": "x.astype('float16')", "bool": "x.astype('bool')",
    "type": "x.astype(dtype) (and x.dtype to read it)",
    "expand": "tfl.broadcast_to(x, shape)", "expand_as": "tfl.broadcast_to(x, other.shape)",
    "expand_dims": "x.unsqueeze(axis)", "view_as": "x.reshape(other.shape)",
    "reshape_as": "x.reshape(other.shape)", "ravel": "x.flatten()", "t": "x.T",
    "contiguous": "x (a teachflow tensor has no strides: drop the call)",
    "copy": "x.clone()", "detach_": "x = x.detach()",
    "data": "x.detach() for the values off the tape (a new tensor: to update x itself, write "
            "`with tfl.no_grad(): x -= ...`)",
    "requires_grad_": "x.requires_grad = True",
    "add_": "x += y", "sub_": "x -= y", "mul_": "x *= y", "div_": "x /= y",
    "zero_": "x[...] = 0", "fill_": "x[...] = value", "clamp_": "x = x.clip(min, max)",
    "add": "x + y", "sub": "x - y", "subtract": "x - y", "mul": "x * y", "multiply": "x * y",
    "div": "x / y", "divide": "x / y", "pow": "x ** y", "square": "x ** 2", "neg": "-x",
    "negative": "-x", "eq": "x == y", "ne": "x != y", "lt": "x < y", "le": "x <= y",
    "gt": "x > y", "ge": "x >= y",
    "maximum": "tfl.maximum(x, y)", "minimum": "tfl.minimum(x, y)",
    "masked_fill": "tfl.where(mask, value, x)", "amax": "x.max(axis)", "amin": "x.min(axis)",
    "std": "x.var(axis).sqrt()", "nelement": "x.numel()", "ndimension": "x.dim()",
    "all": "(x != 0).astype('int32').min() == 1", "any": "(x != 0).astype('int32').max() == 1",
    "norm": "(x * x).sum().sqrt()", "mT": "x.swapaxes(-1, -2)", "sign": "tfl.where(x > 0, 1, "
    "tfl.where(x < 0, -1, 0))", "prod": "x.log().sum().exp() (for positive x)",
    "exp_": "x = x.exp()", "abs_": "x = x.abs()", "sqrt_": "x = x.sqrt()",
    "round": "np.round(x.numpy()) (no gradient)", "cumsum": "a loop of x[i] sums (no op yet)",
    "gather": "indexing: x[np.arange(n), index]", "repeat": "tfl.concatenate([x] * k, axis)",
    "numpy_": "x.numpy()", "to_numpy": "x.numpy()", "cpu_": "x.cpu()",
}


class ForeignName:
    """A PyTorch or NumPy name that teachflow spells otherwise (``t.clamp``): reading it on a
    tensor raises the AttributeError Python would, saying what to write instead. (A class
    attribute rather than ``__getattr__``: defining ``__getattr__`` would slow down every
    attribute read of every tensor.)"""

    def __init__(self, name: str, spelling: str) -> None:
        self.name, self.spelling = name, spelling

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        raise AttributeError(f"'Tensor' object has no attribute '{self.name}': teachflow spells "
                             f"it {self.spelling}", name=self.name, obj=instance)


for _name, _spelling in FOREIGN_NAMES.items():
    setattr(FamiliarMethods, _name, ForeignName(_name, _spelling))
del _name, _spelling
