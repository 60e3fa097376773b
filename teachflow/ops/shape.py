"""Shape ops: index, concatenate, stack (and, from `views`, reshape, transpose, broadcast).

These ops move values around without computing new ones, so their gradients move the cotangent
back: scatter it into the positions an index read, split it where a concatenation joined; and
each is linear, so its tangent is the op applied to the tangents (`tangents.linear`). How
``tfl.vmap`` batches indexing is in `index_batching`.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError, ShapeError
from teachflow.core.spec import is_int
from teachflow.ops import index_batching as batching
from teachflow.ops import tangents
from teachflow.ops.index_rules import (
    Hole,
    getitem_rule,
    on_device,
    scatter_add_kernel,
    setitem_kernel,
    setitem_rule,
)
from teachflow.ops.op import Op, RuleError, TensorSpec, no_flops
from teachflow.ops.views import (
    batched,
    broadcast_as,
    broadcast_like,
    broadcast_to,
    like_rule,
    reshape,
    reshape_like,
    reshape_to,
    transpose,
)

#: Declared in `views` and `index_rules`, and found here by the modules that read them as
#: shape ops.
__all__ = ["Hole", "broadcast_as", "broadcast_like", "broadcast_to", "reshape", "reshape_like",
           "reshape_to", "transpose"]


def permutation(axes: tuple, shape: tuple) -> tuple[int, ...]:
    """The axes of ``x.transpose(*axes)``, checked against x's `shape` and made non-negative.

    Checked *before* normalising: ``axis % ndim`` would quietly turn axis 3 of a 2-d tensor into
    axis 1.
    """
    ndim = len(shape)
    if not all(is_int(a) for a in axes):
        raise DTypeError(f"axes must be integers, got {axes!r}", op="transpose")
    axes = tuple(int(a) for a in axes)
    outside = [a for a in axes if not -ndim <= a < ndim]
    if outside:
        raise ShapeError(
            f"axes {axes} do not fit a tensor of shape {shape}: axis {outside[0]} is out of range",
            op="transpose", hint=f"use axes from {-ndim} to {ndim - 1}" if ndim
            else "a 0-d tensor has no axes to permute")
    normalized = tuple(a % ndim for a in axes)
    repeated = [a for a in axes if normalized.count(a % ndim) > 1]
    if repeated:
        raise ShapeError(f"axes {axes} name the same axis twice ({repeated[0]} and "
                         f"{repeated[1]}), for a tensor of shape {shape}", op="transpose",
                         hint="name each axis once, in its new order")
    if len(axes) != ndim:
        raise ShapeError(
            f"axes {axes} name {len(axes)} of the {ndim} axes of a tensor of shape {shape}",
            op="transpose", hint="list every axis once, in its new order, e.g. "
                                 f"x.transpose({', '.join(map(str, reversed(range(ndim))))}); to "
                                 "swap two axes (PyTorch's transpose(0, 1)) use x.swapaxes(0, 1)")
    return normalized


def _joined(shapes: list[tuple], skip: int | None = None) -> tuple | None:
    """The one shape all `shapes` can be (a known size wins over an unknown one), except along
    axis `skip`; None when two known sizes differ."""
    joined = []
    for k, sizes in enumerate(zip(*shapes, strict=True)):
        known = {d for d in sizes if d is not None}
        if k != skip and len(known) > 1:
            return None
        joined.append(known.pop() if len(known) == 1 else None)
    return tuple(joined)


def _concatenate_rule(*xs: TensorSpec, axis: int) -> TensorSpec:
    first = xs[0]
    for i, x in enumerate(xs[1:], start=1):
        if x.ndim != first.ndim or _joined([first.shape, x.shape], skip=axis) is None:
            raise RuleError(f"tensor {i} has shape {x.shape}, tensor 0 has {first.shape}: "
                            f"all dimensions except axis {axis} must match")
    shape = list(_joined([x.shape for x in xs], skip=axis))
    sizes = [x.shape[axis] for x in xs]
    shape[axis] = None if None in sizes else builtins.sum(sizes)
    return TensorSpec(tuple(shape), np.result_type(*(x.dtype for x in xs)))


def _concatenate_grad(g: Any, i: int, xs: tuple, *, axis: int) -> Any:
    """The cotangent of input `i`: its slice of `g` along the joined axis."""
    if any(x.shape[axis] is None for x in xs[:i + 1]):
        raise ShapeError(
            f"the gradient of concatenate along axis {axis} needs where each input starts, and "
            "some sizes along that axis are known only when the graph runs", op="concatenate",
            hint="concatenate along an axis whose sizes are known (or trace with known sizes)")
    start = builtins.sum(x.shape[axis] for x in xs[:i])
    stop = start + xs[i].shape[axis]
    return bind(getitem, g, index=(slice(None),) * axis + (slice(start, stop),))


def _stack_rule(*xs: TensorSpec, axis: int) -> TensorSpec:
    for i, x in enumerate(xs[1:], start=1):
        if x.ndim != xs[0].ndim or _joined([xs[0].shape, x.shape]) is None:
            raise RuleError(f"tensor {i} has shape {x.shape}, tensor 0 has {xs[0].shape}: "
                            "stack needs equal shapes")
    joined = _joined([x.shape for x in xs])
    shape = joined[:axis] + (len(xs),) + joined[axis:]
    return TensorSpec(shape, np.result_type(*(x.dtype for x in xs)))


def _batch_joined(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved every batch axis to the front (broadcasting operands without one), and the
    joined axis one further."""
    xs = [batched(x, d, size) for x, d in zip(args, dims, strict=True)]
    return bind(op, *xs, axis=params["axis"] + 1), 0


def _batch_sum_like(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved the batch axis behind the leading axes summed away, in front of the rest.

    There it meets `like`'s batch axis, in front of the axes they share."""
    x, like = args
    lead = x.ndim - (dims[0] is not None) - (like.ndim - (dims[1] is not None))
    x = batched(x, dims[0], size)
    x = bind(transpose, x, axes=(*range(1, lead + 1), 0, *range(lead + 1, x.ndim)))
    return bind(op, x, batched(like, dims[1], size)), 0


getitem = Op("getitem", lambda xp: lambda x, *, index: x[on_device(xp, index)], getitem_rule,
             grads=(lambda g, x_spec, *, index: scatter_into(g, index, x_spec),),
             flops=no_flops, jvp=tangents.linear, batch=batching.batch_getitem)
# ``x[index] = value``, as an op: new values (x with the index set), never a change of x itself.
# The gradient goes to `value` where it was written and to `x` everywhere else.
setitem = Op("setitem", setitem_kernel, setitem_rule,
             grads=(lambda g, *, index: bind(setitem, g, 0, index=index),
                    lambda g, *, index: bind(getitem, g, index=index)),
             arg_names=("x", "value"), jvp=tangents.linear, batch=batching.batch_setitem)
# The gradient of indexing: zeros of the indexed tensor's shape, with g added where it was read.
scatter_add = Op("scatter_add", scatter_add_kernel,
                 lambda x, *, index, shape: TensorSpec(shape, x.dtype),
                 grads=(lambda g, *, index: bind(getitem, g, index=index),), arg_names=("x",),
                 jvp=tangents.linear, batch=batching.batch_scatter_add)
concatenate = Op("concatenate",
                 lambda xp: lambda *xs, axis: xp.concatenate(xs, axis=axis),
                 _concatenate_rule, grads=_concatenate_grad, flops=no_flops, arg_names=(),
                 jvp=tangents.linear, batch=_batch_joined)
stack = Op("stack", lambda xp: lambda *xs, axis: xp.stack(xs, axis=axis), _stack_rule,
           grads=lambda g, i, *, axis: bind(getitem, g, index=(slice(None),) * axis + (i,)),
           flops=no_flops, arg_names=(), jvp=tangents.linear, batch=_batch_joined)


# --- Index arrays computed by the graph ---------------------------------------------------------
# ``logp[np.arange(n), y]`` with y a tensor of the graph (class labels, say): its values exist
# only when the graph runs, but the result's shape is the index array's, so it can be traced.
# The index arrays become operands of `gather`; `index` keeps the rest, with a `Hole` where each
# array goes. (A boolean mask cannot be traced: how many values it picks is a value itself.)


def _filled(index: tuple, arrays: tuple) -> tuple:
    return tuple(arrays[s.i] if isinstance(s, Hole) else s for s in index)


def _gather_rule(x: TensorSpec, *arrays: TensorSpec, index: tuple) -> TensorSpec:
    for a in arrays:
        if a.dtype.kind not in "iu":
            raise RuleError(f"an index array computed by the graph must hold integers, not "
                            f"{a.dtype.name} (a boolean mask picks a number of values known "
                            "only when the graph runs)", kind=DTypeError,
                            hint="keep the shape with tfl.where(mask, x, 0) instead")

    def shape_for(size: int) -> tuple:  # stand-in arrays of zeros (a size for each None)
        stand_ins = tuple(np.zeros(tuple(size if d is None else d for d in a.shape), np.intp)
                          for a in arrays)
        return getitem_rule(x, index=_filled(index, stand_ins)).shape

    shapes = [shape_for(1), shape_for(2)]
    return TensorSpec(tuple(a if a == b else None for a, b in zip(*shapes, strict=True)),
                      x.dtype)


def _gather_kernel(xp: Any):
    return lambda x, *arrays, index: x[on_device(xp, _filled(index, arrays))]


def _scatter_kernel(xp: Any):
    add_into = scatter_add_kernel(xp)
    return lambda g, like, *arrays, index: add_into(g, index=_filled(index, arrays),
                                                    shape=like.shape)


gather = Op("gather", _gather_kernel, _gather_rule,
            grads=(lambda g, inputs, *, index: bind(scatter, g, *inputs, index=index),),
            arg_names=("x",), jvp=tangents.linear, batch=batching.batch_gather)
# The gradient of `gather`: zeros of the shape of `like`, with g added where it read.
scatter = Op("scatter", _scatter_kernel,
             lambda g, like, *arrays, index: TensorSpec(like.shape, g.dtype),
             grads=(lambda g, inputs, *, index: bind(gather, g, *inputs[2:], index=index),),
             arg_names=("x", "like"), jvp=tangents.linear, batch=batching.batch_scatter)


# --- Sizes known only when the graph runs -------------------------------------------------------
# A placeholder's None dimension has no size until the graph runs, so a gradient rule cannot
# pass it as a parameter (shape=(None, 3) means nothing to NumPy). These ops take the size from
# an operand, `like`, when they run (the job of tf.shape in TensorFlow). Rules use them only
# when a size is unknown; the tape then keeps the symbolic tensor for its shape (free: it has no
# values).


def _scatter_add_like_kernel(xp: Any):
    scatter_add = scatter_add_kernel(xp)
    return lambda g, like, *, index: scatter_add(g, index=index, shape=like.shape)


def _sum_like_kernel(xp: Any):
    def sum_like(x: Any, like: Any) -> Any:
        """x summed back to like's shape, over the axes broadcasting stretched."""
        lead = x.ndim - like.ndim
        axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(like.shape)
                                          if d == 1 and x.shape[lead + i] != 1)
        # (In x's dtype, as the rule says: NumPy would sum int32 into int64.)
        return (x.sum(axis=axes, keepdims=True, dtype=x.dtype) if axes else x).reshape(
            like.shape)

    return sum_like


sum_like = Op("sum_like", _sum_like_kernel, like_rule,
              grads=(lambda g, x: bind(broadcast_like, g, x), None), arg_names=("x", "like"),
              jvp=tangents.linear, batch=_batch_sum_like)
scatter_add_like = Op("scatter_add_like", _scatter_add_like_kernel,
                      lambda x, like, *, index: TensorSpec(like.shape, x.dtype),
                      grads=(lambda g, *, index: bind(getitem, g, index=index), None),
                      arg_names=("x", "like"), jvp=tangents.linear,
                      batch=batching.batch_scatter_add_like)


def scatter_into(g: Any, index: tuple, x: Any) -> Any:
    """Zeros of the shape of `x`, with `g` added where ``x[index]`` read (as `broadcast_as`)."""
    if None in x.shape:
        return bind(scatter_add_like, g, x, index=index)
    return bind(scatter_add, g, index=index, shape=x.shape)
