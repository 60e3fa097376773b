"""How ``tfl.vmap`` batches indexing: the batching rules of getitem, setitem, gather, scatter and
the scatters that are their gradients (declared with those ops in `shape`).

A batched operand gets its batch axis first, and the index a full slice in front of it, so each
example is indexed as it was alone. That holds while NumPy keeps the axes of the index arrays
where they were, that is while the index arrays (and the ints beside them) are adjacent: else
NumPy puts their axes first, before the batch axis, and the rule says it does not cover that.
Index arrays that are themselves batched (``logp[arange(n), y]`` with a label `y` per example)
need one more index array: the number of each example, in front, so that example `b` reads its
own row with its own indices.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.core.spec import TensorSpec
from teachflow.ops import creation
from teachflow.ops.index_rules import Hole, getitem_rule
from teachflow.ops.op import Op
from teachflow.ops.views import batched, refuse, reshape, to_front, with_rank


def _is_array(entry: Any) -> bool:
    return isinstance(entry, np.ndarray | Hole)


def _advanced(index: tuple) -> list[int]:
    """Where the index arrays are (and the ints, which NumPy counts with them)."""
    arrays = [k for k, i in enumerate(index) if _is_array(i)]
    if not arrays:
        return []
    return [k for k, i in enumerate(index) if k in arrays or isinstance(i, int | np.integer)]


def sliced(op: Op, index: tuple) -> tuple:
    """`index` for operands batched first: a full slice in front."""
    places = _advanced(index)
    if places and places != list(range(places[0], places[-1] + 1)):
        raise refuse(op, "index arrays apart from each other move their axes first")
    return (slice(None), *index)


def _target_rank(x_shape: tuple, dtype: Any, index: tuple) -> int:
    """How many axes ``x[index]`` has, for one example."""
    stand_ins = tuple(np.zeros(1, np.intp) if isinstance(i, Hole) else i for i in index)
    return len(getitem_rule(TensorSpec(tuple(x_shape), dtype), index=stand_ins).shape)


def batch_getitem(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved the batch axis to the front, and a full slice in front of the index."""
    return bind(op, to_front(args[0], dims[0]), index=sliced(op, params["index"])), 0


def batch_setitem(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved the batch axes to the front, and a full slice in front of the index."""
    x, value = args
    x = batched(x, dims[0], size)
    index = params["index"]
    if dims[1] is not None:
        value = with_rank(to_front(value, dims[1]), _target_rank(x.shape[1:], x.dtype, index))
    return bind(op, x, value, index=sliced(op, index)), 0


def batch_scatter_add(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved the batch axis to the front, and a full slice in front of the index."""
    index, shape = params["index"], tuple(params["shape"])
    x = with_rank(to_front(args[0], dims[0]), _target_rank(shape, args[0].dtype, index))
    return bind(op, x, index=sliced(op, index), shape=(size, *shape)), 0


def batch_scatter_add_like(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved the batch axes to the front, and a full slice in front of the index."""
    x, like = batched(args[0], dims[0], size), batched(args[1], dims[1], size)
    x = with_rank(x, _target_rank(like.shape[1:], x.dtype, params["index"]))
    return bind(op, x, like, index=sliced(op, params["index"])), 0


def _numbered(op: Op, arrays: list, dims: tuple, index: tuple, size: int) -> tuple:
    """Batched index arrays, and the index with the examples' numbers in front of them."""
    places = _advanced(index)
    if places != list(range(len(places))):
        raise refuse(op, "batched index arrays must come first in the index")
    rank = max(a.ndim - (d is not None) for a, d in zip(arrays, dims, strict=True))
    arrays = [with_rank(batched(a, d, size), rank) for a, d in zip(arrays, dims, strict=True)]
    numbers = bind(creation.arange, start=0, stop=size, step=1, dtype=np.dtype(np.int64),
                   device=arrays[0].device)
    arrays.append(bind(reshape, numbers, shape=(size,) + (1,) * rank) if rank else numbers)
    return arrays, (Hole(len(arrays) - 1), *index)


def batch_gather(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved the batch axes to the front,
    and numbered the examples where index arrays are batched."""
    x, arrays, index = args[0], list(args[1:]), params["index"]
    if all(d is None for d in dims[1:]):
        return bind(op, to_front(x, dims[0]), *arrays, index=sliced(op, index)), 0
    arrays, index = _numbered(op, arrays, dims[1:], index, size)
    return bind(op, batched(x, dims[0], size), *arrays, index=index), 0


def batch_scatter(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved the batch axes to the front,
    and numbered the examples where index arrays are batched."""
    g, like, arrays, index = args[0], args[1], list(args[2:]), params["index"]
    like = batched(like, dims[1], size)
    if all(d is None for d in dims[2:]):
        return bind(op, batched(g, dims[0], size), like, *arrays, index=sliced(op, index)), 0
    arrays, index = _numbered(op, arrays, dims[2:], index, size)
    return bind(op, batched(g, dims[0], size), like, *arrays, index=index), 0
