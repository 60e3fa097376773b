"""Shape rules that many ops share: NumPy's broadcasting (with an error that says which
dimension disagrees), an elementwise op's rule (broadcast the shapes, let NumPy decide the
dtype), and axes made non-negative.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from types import ModuleType
from typing import Any

import numpy as np

from teachflow.core.errors import DTypeError
from teachflow.core.spec import TensorSpec
from teachflow.ops.op import Kernel, RuleError


def broadcast_shapes(*shapes: tuple) -> tuple:
    """NumPy broadcasting, with an error that says which dimension disagrees."""
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(-ndim, 0):
        dims = [s[axis] for s in shapes if len(s) >= -axis]
        sizes = {d for d in dims if d is not None and d != 1}  # None: not known until run time
        if len(sizes) > 1:
            same_rank = len({len(s) for s in shapes}) == 1
            where = f"dimension {ndim + axis}" if same_rank else \
                f"dimension {axis} (counting from the right, as broadcasting does)"
            detail = ", ".join(
                f"{s[axis]} in operand {i}" for i, s in enumerate(shapes) if len(s) >= -axis
            )
            raise RuleError(
                f"cannot broadcast shapes {' and '.join(str(s) for s in shapes)}: "
                f"{where} differs ({detail})",
                hint="broadcasting lines shapes up from the right; each dimension must match "
                     "or be 1. Reshape an operand (x.reshape(...)) or add a size-1 axis.",
            )
        result.append(sizes.pop() if sizes else None if None in dims else 1)
    return tuple(result)


def shape_of(x: Any) -> tuple:
    return x.shape if isinstance(x, TensorSpec) else ()


@lru_cache(maxsize=4096)
def _numpy_result_dtype(kernel: Kernel, operands: tuple) -> np.dtype:
    samples = [np.empty(0, dtype=o) if isinstance(o, np.dtype) else o[1] for o in operands]
    with np.errstate(all="ignore"):  # (a Python scalar sample may overflow the dtype: 1e39)
        return np.dtype(kernel(*samples).dtype)


def elementwise_rule(kernel: Callable[[ModuleType], Kernel]) -> Callable[..., TensorSpec]:
    """Shape rule of an elementwise op: broadcast the shapes; let NumPy decide the dtype.

    The dtype comes from running the NumPy kernel on empty arrays of the operands' dtypes, so it
    follows NumPy's promotion rules exactly (including weak Python scalars) without a table.
    """
    numpy_kernel = kernel(np)

    def rule(*operands: Any) -> TensorSpec:
        shape = broadcast_shapes(*(shape_of(o) for o in operands))
        # A scalar's type is part of the key: 1 == 1.0, but int64 * 1.0 is float64.
        kinds = tuple(o.dtype if isinstance(o, TensorSpec) else (type(o), o) for o in operands)
        try:
            dtype = _numpy_result_dtype(numpy_kernel, kinds)
        except TypeError as exc:
            raise RuleError(f"unsupported dtypes: {exc}", kind=DTypeError) from None
        return TensorSpec(shape, dtype)

    return rule


def normalize_axis(axis: int, ndim: int) -> int:
    """Turn a possibly negative axis into 0..ndim-1, or raise a RuleError."""
    if not -ndim <= axis < ndim:
        raise RuleError(
            f"axis {axis} is out of range for a tensor of {ndim} dimension(s)",
            hint=f"use an axis from {-ndim} to {ndim - 1}" if ndim else "a 0-d tensor has no axes",
        )
    return axis % ndim
