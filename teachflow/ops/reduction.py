"""Reductions: sum, mean, max and min over some axes; argmax and argmin over one; and
log_softmax, a tensor minus its log-sum-exp over some axes.

A reduction's gradient *undoes the reduction's shape change*: the output cotangent is given back
the reduced axes (as size 1) and broadcast over them. `sum` spreads it evenly, `mean` spreads it
divided by the count, `max` and `min` send it to the positions that held the extreme value.
`argmax` and `argmin` answer with a position, an integer: nothing to differentiate.

`log_softmax` is ``x - log(sum(exp(x)))`` (computed as ``x - max - log(sum(exp(x - max)))``, so
that no exp overflows). It is one op, as in PyTorch, rather than those five, for its gradient:
``g - softmax · sum(g)``, with the softmax ``exp(out)`` of its own output, is four kernels where
the chain rule through the five ops runs six (cross-entropy runs it at every training step).

`sum`, `mean` and `max` also say how a fused kernel computes them in pieces, block by block or
thread by thread (`Partials`): partial sums are added up from 0, partial maxima compared from
the dtype's smallest value, and a mean is a sum divided by the count.

The `axis` parameter is always normalised to a sorted tuple of non-negative axes (or None for
all axes), so two equal reductions look equal to the compiler's passes.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError, ShapeError
from teachflow.core.spec import is_int
from teachflow.ops import tangents
from teachflow.ops.elementwise import add, astype, exp, maximum
from teachflow.ops.op import Op, Partials, RuleError, TensorSpec, no_tangent, per_element
from teachflow.ops.shape import broadcast_as, getitem, reshape
from teachflow.ops.shape_rules import normalize_axis
from teachflow.ops.views import to_front


def normalize_axes(op: str, axis: Any, shape: tuple) -> tuple[int, ...] | None:
    """``axis`` as given by a user (None, an int, or a sequence) -> None or a sorted tuple.

    Every reduction asks, so this is written with a plain loop, and one axis in range (the
    usual answer) is found first: written with comprehensions and set checks, it cost as much
    as a reduction of a small tensor."""
    if axis is None:
        return None
    ndim = len(shape)
    if type(axis) is int and -ndim <= axis < ndim:
        return (axis % ndim,)
    axes = (axis,) if is_int(axis) else axis
    if not isinstance(axes, (list, tuple)):  # (a tuple: `list | tuple` is made at each call)
        raise DTypeError(f"axis must be an int, a tuple of ints or None, not {axis!r}", op=op)
    normalized = []
    for a in axes:
        if not is_int(a):
            raise DTypeError(f"axis must be an int, a tuple of ints or None, not {axis!r}",
                             op=op)
        try:
            a = normalize_axis(int(a), ndim)
        except RuleError as err:
            raise ShapeError(f"{err.message} of shape {shape}", op=op, hint=err.hint) from None
        if a in normalized:
            raise ShapeError(f"axis {axis} names the same axis twice", op=op)
        normalized.append(a)
    normalized.sort()
    return tuple(normalized)


def reduced_shape(shape: tuple, axis: tuple | None, keepdims: bool) -> tuple:
    axes = range(len(shape)) if axis is None else axis
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


@lru_cache(maxsize=256)
def _reduction_dtype(name: str, dtype: np.dtype) -> np.dtype:
    """NumPy's result dtype of a reduction (sum of int32 is int64, mean of ints is float64)."""
    return getattr(np, name)(np.ones(1, dtype=dtype)).dtype


def _reduction_rule(name: str, needs_elements: bool = False):
    def rule(x: TensorSpec, *, axis: tuple | None, keepdims: bool,
             initial: Any = None) -> TensorSpec:
        for a in axis or ():
            if a >= x.ndim:
                raise RuleError(f"axis {a} is out of range for a tensor of {x.ndim} dimensions")
        if needs_elements and initial is None and \
                0 in [x.shape[a] for a in (axis or range(x.ndim))]:
            raise RuleError(f"{name} of an empty axis has no value",
                            hint="reduce over a non-empty axis")
        return TensorSpec(reduced_shape(x.shape, axis, keepdims), _reduction_dtype(name, x.dtype))

    return rule


def normalize_one_axis(op: str, axis: Any, shape: tuple) -> int | None:
    """``axis`` for argmax/argmin: None (all axes, as if flattened) or one axis, made
    non-negative."""
    axes = normalize_axes(op, axis, shape)
    if axes is not None and not is_int(axis):
        raise DTypeError(f"axis must be an int or None, not {axis!r}", op=op,
                         hint=f"{op} finds one position: along one axis, or in the flattened "
                              "tensor (axis=None)")
    return None if axes is None else axes[0]


def _position_rule(name: str):
    """argmax/argmin: the reduced shape (NumPy's, also with keepdims and axis=None), int64."""
    def rule(x: TensorSpec, *, axis: int | None, keepdims: bool) -> TensorSpec:
        if axis is not None and axis >= x.ndim:
            raise RuleError(f"axis {axis} is out of range for a tensor of {x.ndim} dimensions")
        if 0 in [x.shape[a] for a in (range(x.ndim) if axis is None else (axis,))]:
            raise RuleError(f"{name} of an empty axis has no position",
                            hint="look along a non-empty axis")
        axes = None if axis is None else (axis,)
        return TensorSpec(reduced_shape(x.shape, axes, keepdims), np.dtype(np.int64))

    return rule


def expand_reduced(g: Any, x: TensorSpec, axis: tuple | None, keepdims: bool) -> Any:
    """Give a reduced cotangent its reduced axes back (size 1) and broadcast it to x's shape.

    `x` is x's spec, or, where a size is known only when the graph runs, the symbolic tensor:
    then the axes come back by indexing with None, and the sizes from x itself.
    """
    if not keepdims:
        if None in x.shape:
            axes = range(x.ndim) if axis is None else axis
            g = bind(getitem, g, index=tuple(None if a in axes else slice(None)
                                             for a in range(x.ndim)))
        else:
            g = bind(reshape, g, shape=reduced_shape(x.shape, axis, keepdims=True))
    return broadcast_as(g, x)


def _mean_grad(g: Any, x_spec: Any, *, axis: tuple | None, keepdims: bool) -> Any:
    axes = axis if axis is not None else range(x_spec.ndim)
    sizes = [x_spec.shape[a] for a in axes]
    count = (bind(count_of, x_spec, axis=axis, dtype=g.dtype) if None in sizes
             else int(np.prod(sizes)))
    return expand_reduced(g, x_spec, axis, keepdims) / count


def _extreme_grad(g: Any, x: Any, out: Any, *, axis: tuple | None, keepdims: bool) -> Any:
    # The gradient goes to where the maximum (or minimum) was; ties share it evenly.
    winners = bind(astype, x == expand_reduced(out, x, axis, keepdims), dtype=g.dtype)
    share = winners / winners.sum(axis=axis, keepdims=True)
    return expand_reduced(g, x, axis, keepdims) * share


def _zero(dtype: np.dtype) -> int:
    """Where partial sums start."""
    return 0


def _lowest(dtype: np.dtype) -> bool | int | float:
    """The smallest value of `dtype`: where partial maxima start."""
    if dtype.kind == "f":
        return -math.inf
    return False if dtype.kind == "b" else int(np.iinfo(dtype).min)


def _mean_accumulator(dtype: np.dtype) -> np.dtype:
    """The dtype NumPy's mean adds up in, given the mean's dtype: float32 for float16."""
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)


def _reduced_elements(out: TensorSpec, x: TensorSpec) -> int:
    """A reduction's flops: one per element it reads."""
    return per_element(x)


def _batch_axes(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved the batch axis to the front, and the axes reduced one further.

    (None, every axis, becomes every axis but the batch's.)"""
    x = to_front(args[0], dims[0])
    axis = params["axis"]
    axis = tuple(range(1, x.ndim)) if axis is None else tuple(a + 1 for a in axis)
    return bind(op, x, **{**params, "axis": axis}), 0


def _batch_count(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """The same count for every example: not batched."""
    return _batch_axes(op, args, dims, params, size)[0], None


def _batch_position(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved the batch axis to the front, and the axis one further.

    With axis None, each example is flattened first."""
    x, axis, keepdims = to_front(args[0], dims[0]), params["axis"], params["keepdims"]
    if axis is not None:
        return bind(op, x, axis=axis + 1, keepdims=keepdims), 0
    out = bind(op, bind(reshape, x, shape=(size, -1)), axis=1, keepdims=keepdims)
    return (bind(reshape, out, shape=(size,) + (1,) * (x.ndim - 1)) if keepdims else out), 0


def _extreme_jvp(op: Op, primals: tuple, tangents: tuple, out: Any, params: dict) -> Any:
    """The tangent of a max (min): the tangent where the maximum was, shared among ties."""
    (x,), (t,), axis, keepdims = primals, tangents, params["axis"], params["keepdims"]
    if t is None:
        return None
    winners = bind(astype, x == expand_reduced(out, x, axis, keepdims), dtype=t.dtype)
    share = winners / winners.sum(axis=axis, keepdims=True)
    return bind(sum, t * share, axis=axis, keepdims=keepdims)


# Reductions call the array's own method: NumPy's xp.sum(x) is a Python wrapper around it, and
# for small arrays that wrapper costs as much as the sum.
#: A reduction's parameters when it reduces every element to one number.
ALL_ELEMENTS = {"axis": None, "keepdims": False}

sum = Op("sum", lambda xp: lambda x, *, axis, keepdims: x.sum(axis=axis, keepdims=keepdims),
         _reduction_rule("sum"),
         grads=(lambda g, x_spec, *, axis, keepdims: expand_reduced(g, x_spec, axis, keepdims),),
         partials=Partials("sum", add, _zero), flops=_reduced_elements,
         defaults=ALL_ELEMENTS, jvp=tangents.linear, batch=_batch_axes)
# The mean of no elements is nan (0 / 0), as in NumPy; the max of none has no value at all.
mean = Op("mean", lambda xp: lambda x, *, axis, keepdims: x.mean(axis=axis, keepdims=keepdims),
          _reduction_rule("mean"), grads=(_mean_grad,),
          partials=Partials("sum", add, _zero, mean=True, accumulate=_mean_accumulator),
          flops=_reduced_elements, defaults=ALL_ELEMENTS, jvp=tangents.linear,
          batch=_batch_axes)


def _extreme_kernel(name: str):
    """max or min; with `initial` (as NumPy's), also of an empty axis: `initial` there."""
    def kernel(xp: Any):
        def extreme(x: Any, *, axis: tuple | None, keepdims: bool, initial: Any = None) -> Any:
            if initial is None:
                return getattr(x, name)(axis=axis, keepdims=keepdims)
            shape = reduced_shape(x.shape, axis, keepdims)
            if x.size == 0:
                return xp.full(shape, initial, dtype=x.dtype)
            combine = xp.maximum if name == "max" else xp.minimum
            return combine(getattr(x, name)(axis=axis, keepdims=keepdims), initial)

        return extreme

    return kernel


max = Op("max", _extreme_kernel("max"), _reduction_rule("max", needs_elements=True),
         grads=(_extreme_grad,), partials=Partials("max", maximum, _lowest),
         flops=_reduced_elements, defaults={**ALL_ELEMENTS, "initial": None},
         jvp=_extreme_jvp, batch=_batch_axes)
min = Op("min", _extreme_kernel("min"), _reduction_rule("min", needs_elements=True),
         grads=(_extreme_grad,), flops=_reduced_elements,
         defaults={**ALL_ELEMENTS, "initial": None}, jvp=_extreme_jvp, batch=_batch_axes)
argmax = Op("argmax",
            lambda xp: lambda x, *, axis, keepdims: x.argmax(axis=axis, keepdims=keepdims),
            _position_rule("argmax"), flops=_reduced_elements, defaults=ALL_ELEMENTS,
            jvp=no_tangent, batch=_batch_position)
argmin = Op("argmin",
            lambda xp: lambda x, *, axis, keepdims: x.argmin(axis=axis, keepdims=keepdims),
            _position_rule("argmin"), flops=_reduced_elements, defaults=ALL_ELEMENTS,
            jvp=no_tangent, batch=_batch_position)


def _log_softmax_kernel(xp: Any):
    def log_softmax(x: Any, *, axis: tuple | None) -> Any:
        if x.dtype.kind in "iu":  # in the float dtype of the result first: the shift of an
            x = x.astype(_reduction_dtype("exp", x.dtype))  # unsigned int would wrap around
        if x.size == 0:  # nothing to normalise (and no maximum of nothing)
            return x.copy()
        shifted = x - x.max(axis=axis, keepdims=True)
        return shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))

    return log_softmax


def _log_softmax_rule(x: TensorSpec, *, axis: tuple | None) -> TensorSpec:
    if x.dtype.kind == "b":
        raise RuleError("log_softmax of bools: they have no logarithm of a probability",
                        hint="cast first, e.g. x.astype('float32').log_softmax()",
                        kind=DTypeError)
    for a in axis or ():
        if a >= x.ndim:
            raise RuleError(f"axis {a} is out of range for a tensor of {x.ndim} dimensions")
    return TensorSpec(x.shape, _reduction_dtype("exp", x.dtype))  # (ints: float64, as exp's)


def _log_softmax_grad(g: Any, out: Any, *, axis: tuple | None) -> Any:
    """``g - softmax · sum(g)``, the softmax being ``exp(out)`` (see the module docstring)."""
    return g - bind(exp, out) * bind(sum, g, axis=axis, keepdims=True)


def _log_softmax_jvp(op: Op, primals: tuple, tangents: tuple, out: Any, params: dict) -> Any:
    """``t - sum(softmax · t)``: the tangent, less its mean under the softmax."""
    t, axis = tangents[0], params["axis"]
    return None if t is None else t - bind(sum, bind(exp, out) * t, axis=axis, keepdims=True)


log_softmax = Op("log_softmax", _log_softmax_kernel, _log_softmax_rule,
                 grads=(_log_softmax_grad,), flops=lambda out, x: 5 * per_element(out),
                 jvp=_log_softmax_jvp, batch=_batch_axes)
# How many elements a reduction over `axis` combines: the mean's gradient divides by it. Only a
# graph with a size unknown until it runs (a placeholder's None) needs it as an op.
count_of = Op("count_of", lambda xp: lambda x, *, axis, dtype: xp.asarray(
    math.prod(x.shape[a] for a in (range(x.ndim) if axis is None else axis)), dtype=dtype),
    lambda x, *, axis, dtype: TensorSpec((), dtype, x.device), jvp=no_tangent,
    batch=_batch_count)
