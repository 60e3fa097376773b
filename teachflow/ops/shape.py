"""Shape ops: reshape, transpose, broadcast, index, concatenate, stack.

These ops move values around without computing new ones, so their gradients move the cotangent
back: reshape it to the old shape, transpose it by the inverse permutation, scatter it into the
positions an index read, split it where a concatenation joined. `broadcast_to` needs no rule of its
own: the autodiff engine sums every cotangent back to its input's shape.
"""

from __future__ import annotations

import builtins
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError, IndexingError, ShapeError
from teachflow.core.spec import is_int
from teachflow.ops.op import Op, RuleError, TensorSpec, broadcast_shapes, no_flops


def _reshape_rule(x: TensorSpec, *, shape: tuple) -> TensorSpec:
    if sum(d == -1 for d in shape) > 1 or any(d is not None and d < -1 for d in shape):
        raise RuleError(f"invalid target shape {shape}",
                        hint="use non-negative sizes and at most one -1")
    size = None if None in x.shape else math.prod(x.shape)
    known = math.prod(d for d in shape if d != -1)
    if size is None:  # an unknown input dimension leaves -1 unknown too
        return TensorSpec(tuple(None if d == -1 else d for d in shape), x.dtype)
    if -1 in shape:
        if known == 0 or size % known:
            raise RuleError(f"cannot reshape {x} ({size} elements) into {shape}: "
                            f"{size} is not a multiple of {known}")
        shape = tuple(size // known if d == -1 else d for d in shape)
    elif known != size:
        raise RuleError(f"cannot reshape {x} ({size} elements) into {shape} ({known} elements)",
                        hint="the number of elements must stay the same")
    return TensorSpec(shape, x.dtype)


def _transpose_rule(x: TensorSpec, *, axes: tuple) -> TensorSpec:
    if sorted(axes) != list(range(x.ndim)):
        raise RuleError(f"axes {axes} are not a permutation of the {x.ndim} axes of {x}")
    return TensorSpec(tuple(x.shape[a] for a in axes), x.dtype)


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


def _broadcast_to_rule(x: TensorSpec, *, shape: tuple) -> TensorSpec:
    if len(shape) < x.ndim or broadcast_shapes(x.shape, shape) != tuple(shape):
        raise RuleError(f"cannot broadcast {x} to shape {shape}",
                        hint="each dimension must match or be 1, counting from the right")
    return TensorSpec(shape, x.dtype)


def is_basic_index(index: tuple) -> bool:
    """Basic indexing (ints, slices, None, ...) never reads one position twice."""
    return all(isinstance(i, int | np.integer | slice) or i is None or i is Ellipsis
               for i in index)


def _getitem_rule(x: TensorSpec, *, index: tuple) -> TensorSpec:
    # Index a zero-cost broadcast view of x's shape: NumPy itself works out the result shape.
    if None not in x.shape:
        try:
            shape = _indexed(x.shape, x.dtype, index)
        except IndexError as exc:
            raise RuleError(f"index {_show_index(index)} does not fit {x}: {exc}",
                            kind=IndexingError) from None
        return TensorSpec(shape, x.dtype)
    # Some sizes are known only when the graph runs. Index stand-ins of different sizes there:
    # a result size that differs between them depends on an unknown size, so it is unknown too.
    try:
        shapes = [_indexed(tuple(size if d is None else d for d in x.shape), x.dtype, index)
                  for size in _stand_in_sizes(x.shape, index)]
    except IndexError:
        raise RuleError(f"index {_show_index(index)} does not fit {x} for every size its "
                        "unknown dimensions (?) may have", kind=IndexingError,
                        hint="index the unknown dimensions with slices, or with ints and "
                             "arrays that fit their smallest size") from None
    return TensorSpec(tuple(sizes[0] if len(set(sizes)) == 1 else None
                            for sizes in zip(*shapes, strict=True)), x.dtype)


def _indexed(shape: tuple, dtype: np.dtype, index: tuple) -> tuple:
    return np.broadcast_to(np.empty((), dtype), shape)[index].shape


def _stand_in_sizes(shape: tuple, index: tuple) -> list[int]:
    """Sizes to try for the unknown dimensions: one just big enough for the index's ints (so
    ``x[:5]`` is seen to depend on the size), and two big ones (so ``x[1:]`` and ``x[::2]`` are).
    With index arrays NumPy copies what it reads, so all three stay small."""
    ints = [abs(int(i)) for i in index if isinstance(i, int)]
    ints += [int(np.abs(i).max()) for i in index
             if isinstance(i, np.ndarray) and i.dtype.kind in "iu" and i.size]
    small = 1 + max(ints, default=0)
    if any(isinstance(i, np.ndarray) for i in index):
        return [small, small + 7, small + 8]
    known = math.prod(d for d in shape if d is not None) or 1
    unknown = sum(d is None for d in shape)
    big = max(small + 2, int((2**60 // known) ** (1 / unknown)) // 2)  # a view: no memory
    return [small, big, big + 1]


def _show_index(index: tuple) -> str:
    def one(i: Any) -> str:
        if isinstance(i, slice):
            parts = ["" if v is None else str(v) for v in (i.start, i.stop, i.step)]
            return ":".join(parts[:2] if i.step is None else parts)
        return "..." if i is Ellipsis else repr(i)

    return "[" + ", ".join(one(i) for i in index) + "]"


def _on_device(xp: Any, index: tuple) -> tuple:
    """Index arrays are kept on the host; move them to the device that is being indexed."""
    return index if xp is np else tuple(
        xp.asarray(i) if isinstance(i, np.ndarray) else i for i in index)


def _add_at(xp: Any, out: Any, index: tuple, values: Any) -> None:
    """``out[index] += values``, adding up repeated positions (unbuffered, unlike ``+=``)."""
    if hasattr(xp.add, "at"):
        xp.add.at(out, index, values)
    else:  # CuPy releases without ufunc.at have the same operation in cupyx
        import cupyx

        cupyx.scatter_add(out, index, values)


def _scatter_add_kernel(xp: Any):
    def scatter_add(g: Any, *, index: tuple, shape: tuple) -> Any:
        out = xp.zeros(shape, dtype=g.dtype)
        if is_basic_index(index):
            out[index] = g
        else:  # an advanced index may read a position twice: its gradients must add up
            _add_at(xp, out, _on_device(xp, index), g)
        return out

    return scatter_add


def _setitem_kernel(xp: Any):
    def setitem(x: Any, value: Any, *, index: tuple) -> Any:
        out = x.copy()
        out[_on_device(xp, index)] = value
        return out

    return setitem


def _setitem_rule(x: TensorSpec, value: Any, *, index: tuple) -> TensorSpec:
    target = _getitem_rule(x, index=index).shape  # the part of x that is written
    shape = value.shape if isinstance(value, TensorSpec) else ()
    try:
        fits = broadcast_shapes(shape, target) == target
    except RuleError:
        fits = False
    if not fits:
        raise RuleError(f"cannot assign values of shape {shape} to {_show_index(index)} of {x}, "
                        f"which has shape {target}",
                        hint="the values must have the shape of the indexed part, or broadcast "
                             "to it")
    return TensorSpec(x.shape, x.dtype)


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


reshape = Op("reshape", lambda xp: lambda x, *, shape: x.reshape(shape), _reshape_rule,
             grads=(lambda g, x_spec: reshape_to(g, x_spec),), view=True)
transpose = Op("transpose", lambda xp: lambda x, *, axes: x.transpose(axes), _transpose_rule,
               grads=(lambda g, *, axes: bind(transpose, g,
                                              axes=tuple(map(int, np.argsort(axes)))),),
               view=True)
broadcast_to = Op("broadcast_to", lambda xp: xp.broadcast_to, _broadcast_to_rule,
                  grads=(lambda g: g,), broadcasts=True, view=True)
getitem = Op("getitem", lambda xp: lambda x, *, index: x[_on_device(xp, index)], _getitem_rule,
             grads=(lambda g, x_spec, *, index: scatter_into(g, index, x_spec),),
             flops=no_flops)
# ``x[index] = value``, as an op: new values (x with the index set), never a change of x itself.
# The gradient goes to `value` where it was written and to `x` everywhere else.
setitem = Op("setitem", _setitem_kernel, _setitem_rule,
             grads=(lambda g, *, index: bind(setitem, g, 0, index=index),
                    lambda g, *, index: bind(getitem, g, index=index)),
             arg_names=("x", "value"))
# The gradient of indexing: zeros of the indexed tensor's shape, with g added where it was read.
scatter_add = Op("scatter_add", _scatter_add_kernel,
                 lambda x, *, index, shape: TensorSpec(shape, x.dtype),
                 grads=(lambda g, *, index: bind(getitem, g, index=index),), arg_names=("x",))
concatenate = Op("concatenate",
                 lambda xp: lambda *xs, axis: xp.concatenate(xs, axis=axis),
                 _concatenate_rule, grads=_concatenate_grad, flops=no_flops, arg_names=())
stack = Op("stack", lambda xp: lambda *xs, axis: xp.stack(xs, axis=axis), _stack_rule,
           grads=lambda g, i, *, axis: bind(getitem, g, index=(slice(None),) * axis + (i,)),
           flops=no_flops, arg_names=())


# --- Index arrays computed by the graph ---------------------------------------------------------
# ``logp[np.arange(n), y]`` with y a tensor of the graph (class labels, say): its values exist
# only when the graph runs, but the result's shape is the index array's, so it can be traced.
# The index arrays become operands of `gather`; `index` keeps the rest, with a `Hole` where each
# array goes. (A boolean mask cannot be traced: how many values it picks is a value itself.)


@dataclass(frozen=True)
class Hole:
    """In the `index` of `gather`/`scatter`: the place of the index array that is operand `i`."""

    i: int

    def __repr__(self) -> str:
        return f"<{self.i}>"


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
        return _getitem_rule(x, index=_filled(index, stand_ins)).shape

    shapes = [shape_for(1), shape_for(2)]
    return TensorSpec(tuple(a if a == b else None for a, b in zip(*shapes, strict=True)),
                      x.dtype)


def _gather_kernel(xp: Any):
    return lambda x, *arrays, index: x[_on_device(xp, _filled(index, arrays))]


def _scatter_kernel(xp: Any):
    add_into = _scatter_add_kernel(xp)
    return lambda g, like, *arrays, index: add_into(g, index=_filled(index, arrays),
                                                    shape=like.shape)


gather = Op("gather", _gather_kernel, _gather_rule,
            grads=(lambda g, inputs, *, index: bind(scatter, g, *inputs, index=index),),
            arg_names=("x",))
# The gradient of `gather`: zeros of the shape of `like`, with g added where it read.
scatter = Op("scatter", _scatter_kernel,
             lambda g, like, *arrays, index: TensorSpec(like.shape, g.dtype),
             grads=(lambda g, inputs, *, index: bind(gather, g, *inputs[2:], index=index),),
             arg_names=("x", "like"))


# --- Sizes known only when the graph runs -------------------------------------------------------
# A placeholder's None dimension has no size until the graph runs, so a gradient rule cannot
# pass it as a parameter (shape=(None, 3) means nothing to NumPy). These ops take the size from
# an operand, `like`, when they run (the job of tf.shape in TensorFlow). Rules use them only
# when a size is unknown; the tape then keeps the symbolic tensor for its shape (free: it has no
# values).


def _like_rule(x: TensorSpec, like: TensorSpec) -> TensorSpec:
    return TensorSpec(like.shape, x.dtype)


def _broadcast_like_rule(x: TensorSpec, like: TensorSpec) -> TensorSpec:
    if len(x.shape) > len(like.shape) or broadcast_shapes(x.shape, like.shape) != like.shape:
        raise RuleError(f"cannot broadcast {x} to the shape of {like}")
    return TensorSpec(like.shape, x.dtype)


def _scatter_add_like_kernel(xp: Any):
    scatter_add = _scatter_add_kernel(xp)
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


sum_like = Op("sum_like", _sum_like_kernel, _like_rule,
              grads=(lambda g, x: bind(broadcast_like, g, x), None), arg_names=("x", "like"))
broadcast_like = Op("broadcast_like", lambda xp: lambda x, like: xp.broadcast_to(x, like.shape),
                    _broadcast_like_rule, grads=(lambda g: g, None), arg_names=("x", "like"),
                    broadcasts=True, view=True)
reshape_like = Op("reshape_like", lambda xp: lambda x, like: x.reshape(like.shape), _like_rule,
                  grads=(lambda g, x: bind(reshape_like, g, x), None), arg_names=("x", "like"),
                  view=True)
scatter_add_like = Op("scatter_add_like", _scatter_add_like_kernel,
                      lambda x, like, *, index: TensorSpec(like.shape, x.dtype),
                      grads=(lambda g, *, index: bind(getitem, g, index=index), None),
                      arg_names=("x", "like"))


def broadcast_as(g: Any, x: Any) -> Any:
    """`g` broadcast to the shape of `x` (a spec, or a symbolic tensor whose size is unknown)."""
    if None in x.shape:
        return bind(broadcast_like, g, x)
    return bind(broadcast_to, g, shape=x.shape)


def reshape_to(g: Any, x: Any) -> Any:
    """`g` reshaped to the shape of `x` (as `broadcast_as`)."""
    return bind(reshape_like, g, x) if None in x.shape else bind(reshape, g, shape=x.shape)


def scatter_into(g: Any, index: tuple, x: Any) -> Any:
    """Zeros of the shape of `x`, with `g` added where ``x[index]`` read (as `broadcast_as`)."""
    if None in x.shape:
        return bind(scatter_add_like, g, x, index=index)
    return bind(scatter_add, g, index=index, shape=x.shape)
