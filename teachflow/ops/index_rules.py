"""How indexing works out its result: the shape rule of ``x[index]`` (NumPy works it out on a
view that costs nothing), and the kernels that write into an index (``x[index] = value``, and
the gradient of indexing, which adds a cotangent into zeros where an index read).

The ops themselves are declared in `shape`; this module holds what their declarations use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachflow.core.errors import IndexingError
from teachflow.ops.op import RuleError, TensorSpec
from teachflow.ops.shape_rules import broadcast_shapes


def is_basic_index(index: tuple) -> bool:
    """Basic indexing (ints, slices, None, ...) never reads one position twice."""
    return all(isinstance(i, int | np.integer | slice) or i is None or i is Ellipsis
               for i in index)


def getitem_rule(x: TensorSpec, *, index: tuple) -> TensorSpec:
    # Index a zero-cost broadcast view of x's shape: NumPy itself works out the result shape.
    if None not in x.shape:
        try:
            shape = _indexed(x.shape, x.dtype, index)
        except IndexError as exc:
            raise RuleError(f"index {show_index(index)} does not fit {x}: {exc}",
                            kind=IndexingError) from None
        return TensorSpec(shape, x.dtype)
    # Some sizes are known only when the graph runs. Index stand-ins of different sizes there:
    # a result size that differs between them depends on an unknown size, so it is unknown too.
    try:
        shapes = [_indexed(tuple(size if d is None else d for d in x.shape), x.dtype, index)
                  for size in _stand_in_sizes(x.shape, index)]
    except IndexError:
        raise RuleError(f"index {show_index(index)} does not fit {x} for every size its "
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


def show_index(index: tuple) -> str:
    def one(i: Any) -> str:
        if isinstance(i, slice):
            parts = ["" if v is None else str(v) for v in (i.start, i.stop, i.step)]
            return ":".join(parts[:2] if i.step is None else parts)
        return "..." if i is Ellipsis else repr(i)

    return "[" + ", ".join(one(i) for i in index) + "]"


def on_device(xp: Any, index: tuple) -> tuple:
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


def scatter_add_kernel(xp: Any):
    def scatter_add(g: Any, *, index: tuple, shape: tuple) -> Any:
        out = xp.zeros(shape, dtype=g.dtype)
        if is_basic_index(index):
            out[index] = g
        else:  # an advanced index may read a position twice: its gradients must add up
            _add_at(xp, out, on_device(xp, index), g)
        return out

    return scatter_add


def setitem_kernel(xp: Any):
    def setitem(x: Any, value: Any, *, index: tuple) -> Any:
        out = x.copy()
        out[on_device(xp, index)] = value
        return out

    return setitem


def setitem_rule(x: TensorSpec, value: Any, *, index: tuple) -> TensorSpec:
    target = getitem_rule(x, index=index).shape  # the part of x that is written
    shape = value.shape if isinstance(value, TensorSpec) else ()
    try:
        fits = broadcast_shapes(shape, target) == target
    except RuleError:
        fits = False
    if not fits:
        raise RuleError(f"cannot assign values of shape {shape} to {show_index(index)} of {x}, "
                        f"which has shape {target}",
                        hint="the values must have the shape of the indexed part, or broadcast "
                             "to it")
    return TensorSpec(x.shape, x.dtype)


@dataclass(frozen=True)
class Hole:
    """In the `index` of `gather`/`scatter`: the place of the index array that is operand `i`."""

    i: int

    def __repr__(self) -> str:
        return f"<{self.i}>"
