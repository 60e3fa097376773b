"""Indices as a tensor's ``[]`` takes them: ``t[0]``, ``t[1:, None]``, ``t[[0, 2]]``, ``t[mask]``.

`normalize_index` puts any index NumPy accepts into one form (a tuple of ints, slices, None,
Ellipsis and integer or boolean arrays), so the getitem and setitem ops see one shape of index;
an index tensor computed by a graph, or read by it from outside (captured), stays a tensor (the
op reads it when the graph runs).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from teachflow.autodiff.tape import Tracked
from teachflow.core import dispatch
from teachflow.core.errors import DTypeError, IndexingError, TraceError
from teachflow.graph import Value


def _slice_bound(bound: Any) -> int:
    try:
        return operator.index(bound)
    except TypeError:
        raise DTypeError(f"slice bounds must be integers, not {type(bound).__name__} {bound!r}",
                         op="getitem") from None


def normalize_index(index: Any) -> tuple:
    """An index as a tuple of ints, slices, None, Ellipsis and host (NumPy) integer/bool arrays."""
    items = index if isinstance(index, tuple) else (index,)
    normalized = []
    for item in items:
        if isinstance(item, Tracked):
            # While tracing, a tensor from outside (a closure's, a global) is an input like an
            # argument: the graph reads it when it runs. Eagerly, it is itself.
            item = dispatch.current_interpreter().operand(item)
            if isinstance(item._data, Value) and item._data.kind == "const":
                item = item._data.data  # a constant of the program: its values are known
            elif isinstance(item._data, Value) and item.dtype.kind == "b":
                raise TraceError(
                    f"indexing with the traced mask {item._data}: how many values it picks "
                    "would depend on values that tracing does not know", op="getitem",
                    hint="keep the shape with tfl.where(mask, x, 0), or index with a NumPy "
                         "array (a constant)")
            elif isinstance(item._data, Value):  # an index array computed by the graph
                if item.dtype.kind not in "iu":
                    raise DTypeError(f"index arrays must hold integers or booleans, not "
                                     f"{item.dtype}", op="getitem")
                normalized.append(item)
                continue
            else:
                item = item.numpy()
        elif isinstance(item, list):
            try:
                item = np.asarray(item) if item else np.zeros(0, dtype=np.intp)
            except ValueError:
                raise IndexingError(f"the index {item!r} is a ragged list: its rows have "
                                    "different lengths", op="getitem",
                                    hint="index arrays must be rectangular; for several axes "
                                         "give one list per axis: x[[0, 1], [2, 0]]") from None
        elif isinstance(item, np.generic):  # np.int64(1) indexes as 1 does
            item = item.item()
        elif isinstance(item, slice):  # x[k:] with k = np.int64(1), or a 0-d integer tensor
            item = slice(*(None if b is None else _slice_bound(b)
                           for b in (item.start, item.stop, item.step)))
        if isinstance(item, np.ndarray) and item.dtype.kind not in "iub":
            raise DTypeError(f"index arrays must hold integers or booleans, not {item.dtype}",
                             op="getitem")
        if not (isinstance(item, int | slice | np.ndarray) or item is None
                or item is Ellipsis):
            raise DTypeError(f"cannot index a tensor with {type(item).__name__} {item!r}",
                             op="getitem", hint="use ints, slices, None, ... or integer arrays")
        normalized.append(item)
    return tuple(normalized)
