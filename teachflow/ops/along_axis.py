"""Picking along one axis: ``take_along_axis`` (PyTorch's ``gather``) and its gradient,
``scatter_add_along_axis``.

``out[i][j] = x[i][index[i][j]]`` for ``axis=1``: the index has the result's shape, and along
every other axis a position reads its own position of `x` (PyTorch lets the index be shorter
than `x` there, and so does this op). It is indexing with one index array and a range for each
other axis, which is how the kernel computes it; the op is its own declaration (and not a
`getitem` with those ranges) so that the graph shows one node, ONNX's ``GatherElements``.

Its gradient puts each cotangent back where its value was read, adding where one position was
read twice: zeros of `x`'s shape with ``g`` added along the axis (``ScatterElements`` with
``reduction="add"``). That op is linear in ``g``, and its own gradient picks again. The index
is data, not a variable: neither op has a gradient for it.
"""

from __future__ import annotations

from typing import Any

from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError, ShapeError
from teachflow.ops import tangents
from teachflow.ops.index_rules import _add_at
from teachflow.ops.op import Op, RuleError, TensorSpec, no_flops
from teachflow.ops.shape_rules import normalize_axis
from teachflow.ops.views import batched


def _positions(xp: Any, index: Any, axis: int) -> tuple:
    """The full index that reads along `axis`: a range, shaped to broadcast, for every other
    axis, and `index` for that one."""
    ndim = index.ndim
    return tuple(index if k == axis else
                 xp.arange(n).reshape((1,) * k + (n,) + (1,) * (ndim - k - 1))
                 for k, n in enumerate(index.shape))


def _take_kernel(xp: Any):
    return lambda x, index, *, axis: x[_positions(xp, index, axis)]


def _scatter_kernel(xp: Any):
    def scatter_add_along_axis(g: Any, index: Any, *, axis: int, shape: tuple) -> Any:
        out = xp.zeros(shape, dtype=g.dtype)
        _add_at(xp, out, _positions(xp, index, axis), g)
        return out

    return scatter_add_along_axis


def _take_rule(x: TensorSpec, index: TensorSpec, *, axis: int) -> TensorSpec:
    if index.dtype.kind not in "iu":
        raise RuleError(f"the index must hold integers, not {index.dtype.name}",
                        kind=DTypeError, hint="index.astype('int64')")
    if index.ndim != x.ndim:
        raise RuleError(f"the index has {index.ndim} axes and the input {x.ndim}: they must "
                        "have as many", hint="add axes to the index (index.unsqueeze(...))")
    normalize_axis(axis, x.ndim)
    longer = [k for k, (n, m) in enumerate(zip(index.shape, x.shape, strict=True))
              if k != axis % x.ndim and None not in (n, m) and n > m]
    if longer:
        raise RuleError(f"the index {index.shape} is longer than the input {x.shape} along "
                        f"axis {longer[0]}", hint="along every axis but the one picked from, "
                                                  "the index may be at most as long as the input")
    return TensorSpec(index.shape, x.dtype)


def _scatter_rule(g: TensorSpec, index: TensorSpec, *, axis: int, shape: tuple) -> TensorSpec:
    """Zeros of `shape`, which the picks of `index` must fit (as `x` fitted them)."""
    if g.shape != index.shape:
        raise RuleError(f"adds values of shape {g.shape} at an index of shape {index.shape}: "
                        "they must be equal")
    _take_rule(TensorSpec(tuple(shape), g.dtype), index, axis=axis)
    return TensorSpec(tuple(shape), g.dtype)


def _batch_take(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Both operands with the batch axis first (one that has none: broadcast to the batch);
    the axis picked from, one further."""
    x, index = (batched(a, d, size) for a, d in zip(args, dims, strict=True))
    return bind(op, x, index, axis=params["axis"] + 1), 0


def _batch_scatter(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    g, index = (batched(a, d, size) for a, d in zip(args, dims, strict=True))
    return bind(op, g, index, axis=params["axis"] + 1, shape=(size, *params["shape"])), 0


def _take_grad(g: Any, index: Any, x_spec: TensorSpec, *, axis: int) -> Any:
    if None in x_spec.shape:
        raise ShapeError(f"the gradient of gather needs the input's whole shape, and it is "
                         f"{x_spec.shape}", op="gather", hint="trace with known sizes (no None)")
    return bind(scatter_add_along_axis, g, index, axis=axis, shape=x_spec.shape)


take_along_axis = Op("take_along_axis", _take_kernel, _take_rule,
                     grads=(_take_grad, None), arg_names=("x", "index"), flops=no_flops,
                     jvp=tangents.linear, batch=_batch_take)
scatter_add_along_axis = Op(
    "scatter_add_along_axis", _scatter_kernel,
    _scatter_rule,
    grads=(lambda g, index, *, axis: bind(take_along_axis, g, index, axis=axis), None),
    arg_names=("g", "index"), jvp=tangents.linear, batch=_batch_scatter)
