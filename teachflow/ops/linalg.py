"""Matrix multiplication, with NumPy's rules for vectors and batches.

``a @ b`` multiplies the last two axes as matrices and broadcasts any leading (batch) axes. A 1-D
operand is treated as a row (left) or column (right) vector, and that axis is dropped from the
result. The gradient is the classic pair ``dA = G Bᵀ`` and ``dB = Aᵀ G``; the autodiff engine then
sums over batch axes that were broadcast.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.ops import tangents
from teachflow.ops.elementwise import mul
from teachflow.ops.op import Op, RuleError, TensorSpec
from teachflow.ops.shape import getitem, reshape, transpose
from teachflow.ops.shape_rules import broadcast_shapes
from teachflow.ops.views import to_front, with_rank


def _matmul_rule(a: TensorSpec, b: TensorSpec) -> TensorSpec:
    if not isinstance(a, TensorSpec) or not isinstance(b, TensorSpec) or 0 in (a.ndim, b.ndim):
        raise RuleError("matmul needs operands with at least one dimension; "
                        "use * to multiply by a scalar")
    a_shape = (1,) + a.shape if a.ndim == 1 else a.shape
    b_shape = b.shape + (1,) if b.ndim == 1 else b.shape
    k_a, k_b = a_shape[-1], b_shape[-2]
    if k_a != k_b and None not in (k_a, k_b):
        a_dim = "a's only dimension" if a.ndim == 1 else "a's last dimension"
        b_dim = "b's only dimension" if b.ndim == 1 else "b's second-to-last dimension"
        raise RuleError(
            f"shapes {a.shape} and {b.shape} do not line up: {a_dim} is {k_a} but {b_dim} "
            f"is {k_b}; they must be equal",
            hint="check the order of the operands, or transpose one of them (b.T)",
        )
    try:
        batch = broadcast_shapes(a_shape[:-2], b_shape[:-2])
    except RuleError as err:
        raise RuleError(f"batch dimensions do not broadcast: {err.message}") from None
    shape = batch + a_shape[-2:-1] * (a.ndim > 1) + b_shape[-1:] * (b.ndim > 1)
    return TensorSpec(shape, np.result_type(a.dtype, b.dtype))


def swap_last_axes(x: Any) -> Any:
    axes = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return bind(transpose, x, axes=axes)


def _insert_axis(x: Any, at: int) -> Any:
    """x with a new axis of size 1 at position `at` (counted from the end when negative). By
    indexing with None where a size is known only when the graph runs, else by a reshape."""
    at = at % (x.ndim + 1)
    if None in x.shape:
        return bind(getitem, x, index=(slice(None),) * at + (None,))
    return bind(reshape, x, shape=x.shape[:at] + (1,) + x.shape[at:])


def _drop_axis(x: Any, at: int) -> Any:
    """x without its axis `at` (of size 1)."""
    at = at % x.ndim
    if None in x.shape:
        return bind(getitem, x, index=(slice(None),) * at + (0,))
    return bind(reshape, x, shape=x.shape[:at] + x.shape[at + 1:])


def _matrix_g(g: Any, a_ndim: int, b_ndim: int) -> Any:
    """The cotangent with the axes a vector operand dropped given back, so that one formula
    covers every case."""
    if a_ndim == 1:
        g = _insert_axis(g, -2 if b_ndim > 1 else -1)
    return _insert_axis(g, -1) if b_ndim == 1 else g


def _matmul_da(g: Any, a_spec: Any, b: Any) -> Any:
    """dA = G Bᵀ (the engine then sums any broadcast batch axes)."""
    if a_spec.ndim == 1 and b.ndim == 1:  # a dot product: g is a scalar
        return g * b
    b2 = _insert_axis(b, -1) if b.ndim == 1 else b  # a vector as a 1-column matrix
    da = bind(matmul, _matrix_g(g, a_spec.ndim, b.ndim), swap_last_axes(b2))
    return _drop_axis(da, -2) if a_spec.ndim == 1 else da


def _matmul_db(g: Any, a: Any, b_spec: Any) -> Any:
    """dB = Aᵀ G."""
    if a.ndim == 1 and b_spec.ndim == 1:
        return g * a
    a2 = _insert_axis(a, 0) if a.ndim == 1 else a  # a vector as a 1-row matrix
    db = bind(matmul, swap_last_axes(a2), _matrix_g(g, a.ndim, b_spec.ndim))
    return _drop_axis(db, -1) if b_spec.ndim == 1 else db


def _matmul_flops(out: TensorSpec, a: TensorSpec, b: TensorSpec) -> int:
    """2·m·n·k: a multiply and an add for each of the k terms of every element."""
    return 2 * max(out.size, 0) * (a.shape[-1] or 1)


def _batch_matmul(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved the batch axis to the front: matmul's own batch broadcasting does the rest.

    Vectors are made matrices first (a row, a column), and each example given the rank of the
    other operand; the vectors' axes are dropped again after. A product over one term (the
    outer products of per-example gradients) is an elementwise product, which NumPy computes
    several times faster than a stack of matrix products with one column each."""
    (a, b), (da, db) = args, dims
    vector = (a.ndim - (da is not None) == 1, b.ndim - (db is not None) == 1)
    operands = []
    for x, d, at, is_vector in ((a, da, -2, vector[0]), (b, db, -1, vector[1])):
        x = x if d is None else to_front(x, d)
        operands.append(_insert_axis(x, at) if is_vector else x)
    rank = max(x.ndim - (d is not None) for x, d in zip(operands, dims, strict=True))
    operands = [x if d is None else with_rank(x, rank)
                for x, d in zip(operands, dims, strict=True)]
    one_term = operands[0].shape[-1] == 1
    out = bind(mul, *operands) if one_term else bind(op, *operands)
    shape = list(out.shape)
    if vector[1]:
        shape.pop(-1)
    if vector[0]:
        shape.pop(-1 if vector[1] else -2)
    return (out if len(shape) == out.ndim else bind(reshape, out, shape=tuple(shape))), 0


matmul = Op("matmul", lambda xp: xp.matmul, _matmul_rule, grads=(_matmul_da, _matmul_db),
            flops=_matmul_flops, arg_names=("a", "b"), jvp=tangents.bilinear,
            batch=_batch_matmul)
