"""The collective op: ``all_reduce``, one value made from every rank's.

``all_reduce(x, op="sum")`` (the node's parameter ``reduction``) on rank r gives ``x_0 + x_1 +
... + x_{N-1}``, the sum of every rank's `x`, on every rank (``"mean"`` divides it by N; ``"max"``
and ``"min"`` take the elementwise extreme). Eagerly, the kernel runs the collective now, on a
copy of its operand (the engine reduces in place; `teachflow.core.collectives`); traced, it is an
``all_reduce`` node like any other, which the compiler can see, bucket and place (the pass
`bucket_all_reduce`).

Its rules are those of a linear op applied across processes. The result on every rank depends
on `x` on every rank, so the gradient of rank s's `x` is the sum of every rank's cotangent: the
gradient of an all-reduce *is* an all-reduce of the cotangent (the mean's, a mean). Max and min
are not linear: differentiating them is refused. Applied to a batch (``vmap``), it reduces each
example's array, the batch axis kept where it is.

It `communicates`: the other ranks wait for this one inside the same collective, so a pass
must never fold it (its operands are not all the value depends on), merge two (each is a
separate exchange), or drop one nothing reads (the other ranks would wait forever).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teachflow.core.collectives import REDUCTIONS, all_reduce_
from teachflow.core.dispatch import bind
from teachflow.core.errors import AutodiffError, DTypeError
from teachflow.ops.op import Op, RuleError, TensorSpec


def _reduced(x: Any, *, reduction: str, bucket_mb: float | None = None) -> np.ndarray:
    """Every rank's `x`, reduced: the collective runs on a contiguous copy (the operand is
    left as it is: another node may read it)."""
    result = np.array(x, order="C", copy=True)
    all_reduce_(result, reduction)
    return result


def _shape_rule(x: TensorSpec, *, reduction: str, bucket_mb: float | None = None) -> TensorSpec:
    if reduction not in REDUCTIONS:
        raise RuleError(f"{reduction!r} is not a reduction all_reduce knows",
                        hint=f"one of {', '.join(map(repr, REDUCTIONS))}")
    if reduction == "mean" and x.dtype.kind not in "fc":
        raise RuleError(f"the mean of {x.dtype.name} values is not {x.dtype.name}",
                        hint="cast to a float first, or use op='sum'", kind=DTypeError)
    return x


def _linear(reduction: str) -> str:
    if reduction not in ("sum", "mean"):
        raise AutodiffError(f"all_reduce of the {reduction} has no gradient rule here: only sum "
                            "and mean are linear", op="all_reduce",
                            hint="reduce with op='sum' or 'mean' inside what you differentiate")
    return reduction


def _tangent(op: Op, primals: tuple, tangents: tuple, out: Any, params: dict) -> Any:
    """Linear: the tangent is all-reduced the same way."""
    if tangents[0] is None:
        return None
    return bind(op, tangents[0], **{**params, "reduction": _linear(params["reduction"])})


def _batch(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Elementwise across the ranks: the batch axis stays where it is."""
    return bind(op, *args, **params), dims[0]


all_reduce = Op("all_reduce", lambda xp: _reduced, _shape_rule,
                grads=(lambda g, reduction: bind(all_reduce, g, reduction=_linear(reduction)),),
                communicates=True, jvp=_tangent, batch=_batch,
                defaults={"bucket_mb": None})
