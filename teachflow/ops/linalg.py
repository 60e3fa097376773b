"""Matrix multiplication, with NumPy's rules for vectors and batches.

``a @ b`` multiplies the last two axes as matrices and broadcasts any leading (batch) axes. A 1-D
operand is treated as a row (left) or column (right) vector, and that axis is dropped from the
result. The gradient is the classic pair ``dA = G Bᵀ`` and ``dB = Aᵀ G``; the autodiff engine then
sums over batch axes that were broadcast.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teachflow.dispatch import bind
from teachflow.ops.op import Op, RuleError, TensorSpec, broadcast_shapes
from teachflow.ops.shape import reshape, transpose


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


def _matmul_vjp(g: Any, a: Any, b: Any) -> tuple:
    if a.ndim == 1 and b.ndim == 1:  # a dot product: g is a scalar
        return g * b, g * a
    # Treat vectors as 1-row / 1-column matrices, so one formula covers every case.
    a2 = bind(reshape, a, shape=(1, a.shape[0])) if a.ndim == 1 else a
    b2 = bind(reshape, b, shape=(b.shape[0], 1)) if b.ndim == 1 else b
    g2_shape = g.shape[:-1] + (1, g.shape[-1]) if a.ndim == 1 else g.shape
    g2_shape = g2_shape + (1,) if b.ndim == 1 else g2_shape
    g2 = g if g2_shape == g.shape else bind(reshape, g, shape=g2_shape)
    da = bind(matmul, g2, swap_last_axes(b2))
    db = bind(matmul, swap_last_axes(a2), g2)
    if a.ndim == 1:  # drop the added row axis; the engine sums any batch axes
        da = bind(reshape, da, shape=da.shape[:-2] + da.shape[-1:])
    if b.ndim == 1:
        db = bind(reshape, db, shape=db.shape[:-1])
    return da, db


matmul = Op("matmul", lambda xp: xp.matmul, _matmul_rule, vjp=_matmul_vjp, arg_names=("a", "b"))
