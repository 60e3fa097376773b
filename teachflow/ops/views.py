"""Ops that lay the same values out anew: reshape, transpose, broadcast (also to the shape of
another tensor, whose size may be known only when the graph runs), and how ``tfl.vmap`` moves a
batch axis with them.

None of them computes a new value, so each is *linear*: its gradient moves the cotangent back
(reshape it to the old shape, transpose it by the inverse permutation; a broadcast needs no
rule, since the autodiff engine sums every cotangent back to its input's shape), and its
tangent is the op applied to the operand's tangent (`tangents.linear`).

Batching (``tfl.vmap``) runs an op once on a whole batch: each operand that is batched carries
an extra *batch axis*. The rules here put it first (`to_front`), give an operand that has none
one by broadcasting (`batched`), and give each example the rank the op expects (`with_rank`),
so that every other op's batching rule can say what it does to the axes after the first.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.core.errors import ShapeError
from teachflow.ops import tangents
from teachflow.ops.op import Op, RuleError, TensorSpec
from teachflow.ops.shape_rules import broadcast_shapes

# --- Moving a batch axis ------------------------------------------------------------------------


def to_front(x: Any, dim: int) -> Any:
    """`x` with its batch axis, now at `dim`, moved first."""
    if dim == 0:
        return x
    return bind(transpose, x, axes=(dim,) + tuple(a for a in range(x.ndim) if a != dim))


def batched(x: Any, dim: int | None, size: int) -> Any:
    """`x` with a batch axis first: its own moved there, or (`dim` None: the same for every
    example) a broadcast view of it, `size` times."""
    if dim is None:
        return bind(broadcast_to, x, shape=(size, *x.shape))
    return to_front(x, dim)


def with_rank(x: Any, rank: int) -> Any:
    """`x`, batched first, with size-1 axes after the batch axis until each example has `rank`
    axes: broadcasting lines shapes up from the right, and the batch axis must stay apart."""
    pad = rank - (x.ndim - 1)
    if pad <= 0:
        return x
    return bind(reshape, x, shape=(x.shape[0],) + (1,) * pad + tuple(x.shape[1:]))


def batch_moved(params: dict, shift: str) -> dict:
    """`params` with the axes in `shift` counted past the batch axis in front."""
    return {**params, shift: tuple(a + 1 for a in params[shift])}


# --- Shape rules ------------------------------------------------------------------------------


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


def _broadcast_to_rule(x: TensorSpec, *, shape: tuple) -> TensorSpec:
    if len(shape) < x.ndim or broadcast_shapes(x.shape, shape) != tuple(shape):
        raise RuleError(f"cannot broadcast {x} to shape {shape}",
                        hint="each dimension must match or be 1, counting from the right")
    return TensorSpec(shape, x.dtype)


def like_rule(x: TensorSpec, like: TensorSpec) -> TensorSpec:
    """The shape of `like`, the dtype of `x`."""
    return TensorSpec(like.shape, x.dtype)


def _broadcast_like_rule(x: TensorSpec, like: TensorSpec) -> TensorSpec:
    if len(x.shape) > len(like.shape) or broadcast_shapes(x.shape, like.shape) != like.shape:
        raise RuleError(f"cannot broadcast {x} to the shape of {like}")
    return TensorSpec(like.shape, x.dtype)


# --- Batching rules ---------------------------------------------------------------------------


def _batch_reshape(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved the batch axis to the front, and kept it in the new shape."""
    return bind(op, to_front(args[0], dims[0]), shape=(size, *params["shape"])), 0


def _batch_transpose(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved the batch axis to the front, where the permutation keeps it."""
    return bind(op, to_front(args[0], dims[0]), axes=(0, *batch_moved(params, "axes")["axes"])), 0


def _batch_broadcast_to(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved the batch axis to the front, and kept it in the shape broadcast to."""
    shape = tuple(params["shape"])
    return bind(op, with_rank(to_front(args[0], dims[0]), len(shape)), shape=(size, *shape)), 0


def _batch_like(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved the batch axes of `x` and `like` to the front: the result has `like`'s shape."""
    x, like = args
    like = batched(like, dims[1], size)
    if dims[0] is None:  # (broadcast_like lines x up from the right itself)
        return bind(op, x if op is broadcast_like else batched(x, None, size), like), 0
    return bind(op, with_rank(to_front(x, dims[0]), like.ndim - 1), like), 0


# --- The ops ------------------------------------------------------------------------------------

reshape = Op("reshape", lambda xp: lambda x, *, shape: x.reshape(shape), _reshape_rule,
             grads=(lambda g, x_spec: reshape_to(g, x_spec),), view=True,
             jvp=tangents.linear, batch=_batch_reshape)
transpose = Op("transpose", lambda xp: lambda x, *, axes: x.transpose(axes), _transpose_rule,
               grads=(lambda g, *, axes: bind(transpose, g,
                                              axes=tuple(map(int, np.argsort(axes)))),),
               view=True, jvp=tangents.linear, batch=_batch_transpose)
broadcast_to = Op("broadcast_to", lambda xp: xp.broadcast_to, _broadcast_to_rule,
                  grads=(lambda g: g,), broadcasts=True, view=True, jvp=tangents.linear,
                  batch=_batch_broadcast_to)
# A placeholder's None dimension has no size until the graph runs, so a gradient rule cannot
# pass it as a parameter (shape=(None, 3) means nothing to NumPy). These ops take the size from
# an operand, `like`, when they run (the job of tf.shape in TensorFlow).
broadcast_like = Op("broadcast_like", lambda xp: lambda x, like: xp.broadcast_to(x, like.shape),
                    _broadcast_like_rule, grads=(lambda g: g, None), arg_names=("x", "like"),
                    broadcasts=True, view=True, jvp=tangents.linear, batch=_batch_like)
reshape_like = Op("reshape_like", lambda xp: lambda x, like: x.reshape(like.shape), like_rule,
                  grads=(lambda g, x: bind(reshape_like, g, x), None), arg_names=("x", "like"),
                  view=True, jvp=tangents.linear, batch=_batch_like)


def broadcast_as(g: Any, x: Any) -> Any:
    """`g` broadcast to the shape of `x` (a spec, or a symbolic tensor whose size is unknown)."""
    if None in x.shape:
        return bind(broadcast_like, g, x)
    return bind(broadcast_to, g, shape=x.shape)


def reshape_to(g: Any, x: Any) -> Any:
    """`g` reshaped to the shape of `x` (as `broadcast_as`)."""
    return bind(reshape_like, g, x) if None in x.shape else bind(reshape, g, shape=x.shape)


def refuse(op: Op, why: str) -> ShapeError:
    """A batching rule that meets a case it does not cover says so."""
    return ShapeError(f"tfl.vmap has no batching rule for this use of {op.name}: {why}",
                      op=op.name, hint="compute this part outside the vmapped function, or "
                                       "batch it by hand (a batch axis first)")
