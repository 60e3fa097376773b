"""Ops along axes that are not elementwise: the product and the truth reductions (prod, all,
any), running sums and products (cumsum, cumprod), and ordering (argsort).

`prod`'s gradient is where a learner's first formula breaks: ``prod(x) / x`` divides by zero
wherever an element is 0. The derivative along element i is the product of *all the others*,
and that is the product of those before it times the product of those after it: two running
products (an exclusive `cumprod` from each end), with no division at all (`_others`).

`cumsum` is linear, so its gradient is the cumulative sum *from the other end* (each element
fed every later sum). `cumprod`'s gradient has the same zero problem as `prod`'s: output j is
the product of elements 0..j, so its derivative along i (i <= j) is that product *without*
element i. Those products are made exactly, with element i replaced by 1 before the running
product (`_without_each`): n running products of length n, O(n^2) in the scanned axis, which a
course's axes afford, and exact with zeros (PyTorch switches to a similar O(n^2) path when an
element is 0).

`argsort` gives positions, integers: nothing to differentiate. Sorting *values* is indexing by
those positions (`Tensor.sort`), so its gradient is indexing's: the cotangent scattered back to
where each value came from. Sorting is stable; ``descending=True`` keeps ties in their order
too (PyTorch's ``stable=True``), by sorting the reversed axis and reversing the answer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError, ShapeError
from teachflow.ops import creation, tangents
from teachflow.ops.elementwise import where
from teachflow.ops.op import Op, RuleError, TensorSpec, no_tangent
from teachflow.ops.reduction import (
    ALL_ELEMENTS,
    _batch_axes,
    _reduced_elements,
    _reduction_dtype,
    _reduction_rule,
    expand_reduced,
    reduced_shape,
    sum,
)
from teachflow.ops.shape import concatenate, getitem, reshape, transpose
from teachflow.ops.views import to_front


def _moved_last(x: Any, axes: tuple[int, ...]) -> tuple[Any, tuple[int, ...]]:
    """`x` with `axes` moved to the end, and the permutation that did it."""
    order = (*(a for a in range(x.ndim) if a not in axes), *axes)
    return (x if order == tuple(range(x.ndim)) else bind(transpose, x, axes=order)), order


def _moved_back(x: Any, order: tuple[int, ...]) -> Any:
    if order == tuple(range(len(order))):
        return x
    return bind(transpose, x, axes=tuple(int(a) for a in np.argsort(order)))


def _known(x: Any, op: str) -> None:
    if None in x.shape:
        raise ShapeError(f"the gradient of {op} needs every size, and this tensor's shape is "
                         f"{x.shape}", op=op, hint="trace with known sizes (no None)")


def _reversed_last(x: Any) -> Any:
    return bind(getitem, x, index=(Ellipsis, slice(None, None, -1)))


def _ones(x: Any, shape: tuple) -> Any:
    return bind(creation.full, shape=shape, fill_value=1, dtype=x.dtype, device=x.device)


def _others(x: Any, axis: tuple | None) -> Any:
    """For each element of `x`, the product of the other elements it is reduced with (the
    derivative of `prod`): exclusive running products from the front and from the back."""
    _known(x, "prod")
    axes = tuple(range(x.ndim)) if axis is None else axis
    moved, order = _moved_last(x, axes)
    lead = moved.shape[:moved.ndim - len(axes)]
    flat = bind(reshape, moved, shape=(*lead, -1))
    n, one = flat.shape[-1], _ones(x, (*lead, 1))
    if n == 0:
        return x
    before = bind(cumprod, flat, axis=flat.ndim - 1)
    after = _reversed_last(bind(cumprod, _reversed_last(flat), axis=flat.ndim - 1))
    before = bind(concatenate, one, bind(getitem, before, index=(Ellipsis, slice(0, n - 1))),
                  axis=flat.ndim - 1)
    after = bind(concatenate, bind(getitem, after, index=(Ellipsis, slice(1, n))), one,
                 axis=flat.ndim - 1)
    return _moved_back(bind(reshape, before * after, shape=moved.shape), order)


def _prod_grad(g: Any, x: Any, *, axis: tuple | None, keepdims: bool) -> Any:
    return expand_reduced(g, x, axis, keepdims) * _others(x, axis)


def _prod_jvp(op: Op, primals: tuple, tangents: tuple, out: Any, params: dict) -> Any:
    """``sum(t * others)``: each element's tangent times the product of the others."""
    (x,), (t,) = primals, tangents
    if t is None or out.dtype.kind not in "fc":
        return None
    return bind(sum, t * _others(x, params["axis"]), **params)


def _truth_rule(x: TensorSpec, *, axis: tuple | None, keepdims: bool) -> TensorSpec:
    for a in axis or ():
        if a >= x.ndim:
            raise RuleError(f"axis {a} is out of range for a tensor of {x.ndim} dimensions")
    return TensorSpec(reduced_shape(x.shape, axis, keepdims), np.dtype(bool))


prod = Op("prod", lambda xp: lambda x, *, axis, keepdims: x.prod(axis=axis, keepdims=keepdims),
          _reduction_rule("prod"), grads=(_prod_grad,), flops=_reduced_elements,
          defaults=ALL_ELEMENTS, jvp=_prod_jvp, batch=_batch_axes)
all = Op("all", lambda xp: lambda x, *, axis, keepdims: x.all(axis=axis, keepdims=keepdims),
         _truth_rule, flops=_reduced_elements, defaults=ALL_ELEMENTS, jvp=no_tangent,
         batch=_batch_axes)
any = Op("any", lambda xp: lambda x, *, axis, keepdims: x.any(axis=axis, keepdims=keepdims),
         _truth_rule, flops=_reduced_elements, defaults=ALL_ELEMENTS, jvp=no_tangent,
         batch=_batch_axes)


# --- Along one axis -------------------------------------------------------------------------------


def _check_axis(x: TensorSpec, axis: int) -> None:
    if not 0 <= axis < x.ndim:
        raise RuleError(f"axis {axis} is out of range for a tensor of {x.ndim} dimensions",
                        hint="a 0-d tensor has no axis to run along" if not x.ndim else None)


def _scan_rule(name: str):
    """cumsum, cumprod: the shape of x, in NumPy's dtype (int32 sums in int64, bools count)."""
    def rule(x: TensorSpec, *, axis: int) -> TensorSpec:
        _check_axis(x, axis)
        return TensorSpec(x.shape, _reduction_dtype(name, x.dtype))

    return rule


def _argsort_rule(x: TensorSpec, *, axis: int, descending: bool) -> TensorSpec:
    _check_axis(x, axis)
    if x.dtype.kind not in "biuf":
        raise RuleError(f"{x.dtype.name} values have no order", kind=DTypeError)
    return TensorSpec(x.shape, np.dtype(np.int64))


def _batch_one_axis(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved the batch axis to the front, and the scanned axis one further."""
    return bind(op, to_front(args[0], dims[0]), **{**params, "axis": params["axis"] + 1}), 0


def _cumsum_grad(g: Any, *, axis: int) -> Any:
    """Each element fed every sum from its own on: the cotangents summed from the other end."""
    back = (slice(None),) * axis + (slice(None, None, -1),)
    return bind(getitem, bind(cumsum, bind(getitem, g, index=back), axis=axis), index=back)


def _without_each(x: Any, axis: int) -> tuple[Any, tuple]:
    """``C[..., i, j]``: the product of elements 0..j of `x` along `axis` without element i
    (moved to the last two axes), kept where i <= j and 0 elsewhere; and the permutation that
    moved `axis` last."""
    _known(x, "cumprod")
    moved, order = _moved_last(x, (axis,))
    n = moved.shape[-1]
    rows = bind(reshape, moved, shape=(*moved.shape[:-1], 1, n))
    eye = np.eye(n, dtype=bool)
    products = bind(cumprod, bind(where, eye, 1, rows), axis=moved.ndim)
    return bind(where, np.triu(np.ones((n, n), dtype=bool)), products, 0), order


def _cumprod_grad(g: Any, x: Any, *, axis: int) -> Any:
    """Element i's cotangent: the sum over j >= i of ``g_j`` times output j without x_i."""
    products, order = _without_each(x, axis)
    moved, _ = _moved_last(g, (axis,))
    spread = bind(reshape, moved, shape=(*moved.shape[:-1], 1, moved.shape[-1]))
    return _moved_back(bind(sum, products * spread, axis=(moved.ndim,), keepdims=False), order)


def _cumprod_jvp(op: Op, primals: tuple, tangents: tuple, out: Any, params: dict) -> Any:
    """Output j moves by the sum over i <= j of ``t_i`` times output j without x_i."""
    (x,), (t,) = primals, tangents
    if t is None or out.dtype.kind not in "fc":
        return None
    products, order = _without_each(x, params["axis"])
    moved, _ = _moved_last(t, (params["axis"],))
    column = bind(reshape, moved, shape=(*moved.shape, 1))
    return _moved_back(bind(sum, products * column, axis=(moved.ndim - 1,), keepdims=False),
                       order)


def _argsort_kernel(xp: Any):
    stable = {"kind": "stable"} if xp is np else {}  # (CuPy's sort is always stable)

    def argsort(x: Any, *, axis: int, descending: bool) -> Any:
        if not descending:
            return xp.argsort(x, axis=axis, **stable)
        back = (slice(None),) * axis + (slice(None, None, -1),)
        found = xp.argsort(x[back], axis=axis, **stable)[back]
        return (x.shape[axis] - 1) - found

    return argsort


cumsum = Op("cumsum", lambda xp: lambda x, *, axis: x.cumsum(axis=axis), _scan_rule("cumsum"),
            grads=(_cumsum_grad,), jvp=tangents.linear, batch=_batch_one_axis)
cumprod = Op("cumprod", lambda xp: lambda x, *, axis: x.cumprod(axis=axis),
             _scan_rule("cumprod"), grads=(_cumprod_grad,), jvp=_cumprod_jvp,
             batch=_batch_one_axis)
argsort = Op("argsort", _argsort_kernel, _argsort_rule,
             flops=lambda out, x: int(max(x.size, 0) * max(np.log2(max(x.size, 1)), 1)),
             defaults={"descending": False}, jvp=no_tangent, batch=_batch_one_axis)
