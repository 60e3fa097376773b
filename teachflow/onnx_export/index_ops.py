"""Indexing in ONNX: slices, index arrays, and writing into positions.

``x[1:, 0, None]`` is *basic* indexing, and ONNX has an operator for each part: ``Slice`` (start,
end, step per axis, clamped as Python clamps), ``Squeeze`` for an int (the axis goes away after
slicing it to one element) and ``Unsqueeze`` for a None.

An index with arrays in it is *advanced* indexing, and NumPy's rule for where the dimensions of
the arrays go is the subtle part: the arrays (and ints beside them) broadcast together to one
shape B; when they are next to each other in the index, B takes their place in the result, and
when they are not, B comes first. ONNX's ``GatherND`` reads whole positions: given indices of
shape B + (k,), it reads the first k axes of its data at each of them. So the indexed axes are
first moved to the front (``Transpose``), read with ``GatherND``, and B moved to where NumPy
puts it.

Writing (``x[index] = v``, and the gradients of indexing, which add a cotangent into zeros) works
on *positions*: number the elements of x 0, 1, 2, ... and index that table of numbers with the
same index. The numbers it gives are where each element written goes, for ``ScatterND`` into the
flattened x (adding, for a gradient). When the index holds arrays the graph computes, the table
is indexed in the model, as the values are; when a size is known only when the model runs, the
table is made there too (``Range``, reshaped to the shape read with ``Shape``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from teachflow.core.errors import TeachflowError
from teachflow.graph import Node, Value
from teachflow.onnx_export.onnxruntime_types import carrier
from teachflow.ops.shape import Hole

if TYPE_CHECKING:
    from teachflow.onnx_export.emitter import Emitter

INT64 = np.dtype(np.int64)
INT64_MAX, INT64_MIN = int(np.iinfo(np.int64).max), int(np.iinfo(np.int64).min)


def _consumes(item: Any) -> int:
    """How many axes of the indexed tensor an index item reads."""
    if item is None or item is Ellipsis:
        return 0
    if isinstance(item, np.ndarray) and item.dtype == bool:
        return item.ndim
    return 1


def full_index(node: Node, index: tuple, ndim: int) -> list:
    """`index` with one item per axis it reads: ``...`` (or the axes it leaves out at the end)
    written as full slices, a boolean mask as the int arrays of its true positions."""
    items: list = []
    for item in index:
        if type(item) is bool or (isinstance(item, np.ndarray) and item.dtype == bool
                                  and item.ndim == 0):
            raise TeachflowError("an index of True or False cannot be exported", op="getitem",
                                 location=node.source, hint="index with None to add an axis")
        if isinstance(item, np.ndarray) and item.dtype == bool:
            items += list(np.nonzero(item))
        else:
            items.append(item)
    rest = [slice(None)] * (ndim - sum(_consumes(i) for i in items))
    dots = next((k for k, i in enumerate(items) if i is Ellipsis), None)
    return items[:dots] + rest + items[dots + 1:] if dots is not None else items + rest


def indexed(e: Emitter, node: Node, x: str, items: list, arrays: Sequence[Value]) -> str:
    """`x` indexed by `items` (`full_index`), with `arrays` at their `Hole`s."""
    if arrays or any(isinstance(i, np.ndarray) for i in items):
        return advanced(e, node, x, items, arrays)
    return basic(e, x, items)


def _advanced(item: Any) -> bool:
    return not (item is None or isinstance(item, slice))


def _slice(e: Emitter, x: str, cuts: list[tuple[int, slice]]) -> str:
    """`x` sliced along each (axis, slice) in `cuts`, with Python's defaults and clamping."""
    cuts = [(axis, s) for axis, s in cuts if s != slice(None)]
    if not cuts:
        return x
    starts, ends, steps = [], [], []
    for _, s in cuts:
        step = 1 if s.step is None else int(s.step)
        starts.append(int(s.start) if s.start is not None else 0 if step > 0 else INT64_MAX)
        ends.append(int(s.stop) if s.stop is not None else INT64_MAX if step > 0 else INT64_MIN)
        steps.append(step)
    axes = [axis for axis, _ in cuts]
    return e.add("Slice", [x, e.ints(starts), e.ints(ends), e.ints(axes), e.ints(steps)])


def basic(e: Emitter, x: str, items: list) -> str:
    """Ints, slices and None: Slice, then Squeeze the ints' axes, then Unsqueeze the Nones."""
    cuts, squeeze, unsqueeze = [], [], []
    axis = out = 0  # the axis of x an item reads; the axis of the result it makes
    for item in items:
        if item is None:
            unsqueeze.append(out)
            out += 1
            continue
        if isinstance(item, slice):
            cuts.append((axis, item))
            out += 1
        else:  # an int reads one element: a slice of one, whose axis then goes
            i = int(item)
            cuts.append((axis, slice(i, i + 1 if i != -1 else None)))
            squeeze.append(axis)
        axis += 1
    result = _slice(e, x, cuts)
    if squeeze:
        result = e.add("Squeeze", [result, e.ints(squeeze)])
    if unsqueeze:
        result = e.add("Unsqueeze", [result, e.ints(unsqueeze)])
    return result if result != x else e.add("Identity", [x])


def advanced(e: Emitter, node: Node, x: str, items: list, arrays: Sequence[Value]) -> str:
    """Indexing with arrays (constants, or `arrays` the graph computes, at their `Hole`s), as
    NumPy does it: see the module docstring."""
    axis, cuts, front, rest = 0, [], [], []
    for item in items:
        if item is None:
            continue
        (front if _advanced(item) else rest).append(axis)
        if isinstance(item, slice):
            cuts.append((axis, item))
        axis += 1
    x = _slice(e, x, cuts)
    if front + rest != sorted(front + rest):
        x = e.add("Transpose", [x], perm=front + rest)
    indices = [_index_array(e, item, arrays) for item in items if _advanced(item)]
    shape = _broadcast(node, [s for _, s in indices])
    columns = [e.add("Unsqueeze", [name if s == shape else e.add("Expand", [name, e.ints(shape)]),
                                   e.ints([-1])]) for name, s in indices]
    stacked = columns[0] if len(columns) == 1 else e.add("Concat", columns, axis=-1)
    result = e.add("GatherND", [x, stacked])
    # Where B goes: in the place of the arrays when they are next to each other, else first.
    where = [k for k, item in enumerate(items) if _advanced(item)]
    together = where == list(range(where[0], where[-1] + 1))
    before = items[:where[0]] if together else []
    slices_before = sum(isinstance(i, slice) for i in before)
    nb, ns = len(shape), len(rest)
    if slices_before and nb:
        perm = [*range(nb, nb + slices_before), *range(nb), *range(nb + slices_before, nb + ns)]
        result = e.add("Transpose", [result], perm=perm)
    basics = [i for i in items if not _advanced(i)]
    place = len(before)
    layout = [*basics[:place], *["B"] * nb, *basics[place:]]
    nones = [k for k, item in enumerate(layout) if item is None]
    return e.add("Unsqueeze", [result, e.ints(nones)]) if nones else result


def _index_array(e: Emitter, item: Any, arrays: Sequence[Value]) -> tuple[str, tuple]:
    """An advanced index item as an int64 tensor, and its shape."""
    if isinstance(item, Hole):
        value = arrays[item.i]
        return e.input(value, INT64), value.shape
    array = np.asarray(item, dtype=np.int64)
    return e.const(array), array.shape


def _broadcast(node: Node, shapes: list[tuple]) -> tuple:
    if len(set(shapes)) == 1:
        return shapes[0]
    if any(None in s for s in shapes):
        raise TeachflowError(
            f"the index arrays of {node.op.name} have shapes {shapes}, some known only when the "
            "graph runs: the exporter cannot broadcast them", op=node.op.name,
            location=node.source, hint="index with arrays of one shape")
    return tuple(np.broadcast_shapes(*shapes))


def dims(e: Emitter, shape: tuple, like: Value | None) -> str:
    """`shape` as a tensor: a constant when every size is known, else `like`'s shape read when
    the model runs."""
    return e.ints(shape) if None not in shape else e.add("Shape", [e.input(like)])


def positions(e: Emitter, node: Node, shape: tuple, index: tuple, arrays: Sequence[Value] = (),
              like: Value | None = None) -> tuple[str, np.ndarray | None]:
    """Where each element that ``x[index]`` reads lies in the flattened x (of `shape`, or of
    `like`'s shape where a size is unknown): its name, and its values when they are known now
    (no array of the graph in the index, every size known)."""
    if None not in shape and not arrays:
        found = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)[index]
        return e.const(found), found
    if None not in shape:
        table = e.const(np.arange(math.prod(shape), dtype=np.int64).reshape(shape))
    else:  # numbered in the model: 0, 1, ... reshaped to like's shape
        size = e.add("ReduceProd", [dims(e, shape, like)], keepdims=0)
        numbers = e.add("Range", [e.input(0, INT64), size, e.input(1, INT64)])
        table = e.add("Reshape", [numbers, dims(e, shape, like)])
    return indexed(e, node, table, full_index(node, index, len(shape)), arrays), None


def scatter(e: Emitter, data: str, shape: str, where: str, updates: str, add: bool) -> str:
    """`data` (of the shape named `shape`) with `updates` written (or added) at the flat
    positions `where`."""
    flat = e.add("Reshape", [data, e.ints([-1])])
    indices = e.add("Unsqueeze", [where, e.ints([-1])])
    written = e.add("ScatterND", [flat, indices, updates], **({"reduction": "add"} if add else {}))
    return e.add("Reshape", [written, shape])


# --- The ops ------------------------------------------------------------------------------------


def _getitem(e: Emitter, node: Node) -> str:
    """``x[index]``; `gather` is the same with index arrays that the graph computes."""
    x, arrays = node.inputs[0], node.inputs[1:]
    return indexed(e, node, e.input(x), full_index(node, node.params["index"], x.ndim), arrays)


def _setitem(e: Emitter, node: Node) -> str:
    """``x[index] = value``. Where the index names a position twice the last write wins, as in
    NumPy; ScatterND leaves that order open, so only the last write of each is kept."""
    x, value = node.inputs
    where, known = positions(e, node, x.shape, node.params["index"], like=x)
    updates = e.add("Expand", [e.input(value, x.dtype), e.add("Shape", [where])])
    if known is not None:
        flat = known.ravel()
        last = len(flat) - 1 - np.unique(flat[::-1], return_index=True)[1]
        if len(last) < len(flat):
            keep = np.sort(last)
            where = e.const(flat[keep])
            updates = e.add("Gather", [e.add("Reshape", [updates, e.ints([-1])]),
                                       e.ints(keep)], axis=0)
    return scatter(e, e.input(x), dims(e, x.shape, x), where, updates, add=False)


def _scatter_add(e: Emitter, node: Node) -> str:
    """The gradient of indexing: zeros, with g added where ``x[index]`` read (x of the shape
    given, or of `like`'s)."""
    g, like = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
    shape = node.params["shape"] if like is None else like.shape
    where, _ = positions(e, node, shape, node.params["index"], like=like)
    return _added(e, g, dims(e, shape, like), where)


def _scatter(e: Emitter, node: Node) -> str:
    """The gradient of `gather`: the positions it read are computed in the model, by gathering
    from the table of positions as the values were gathered."""
    g, like, arrays = node.inputs[0], node.inputs[1], node.inputs[2:]
    where, _ = positions(e, node, like.shape, node.params["index"], arrays, like=like)
    return _added(e, g, dims(e, like.shape, like), where)


def _added(e: Emitter, g: Value, shape: str, where: str) -> str:
    """In float32 for float16 (onnxruntime's ScatterND does not add those), cast back."""
    inner = carrier("ScatterND reduction=add", g.dtype)
    zeros = e.add("ConstantOfShape", [shape], value=e.tensor(np.zeros(1, inner)))
    out = scatter(e, zeros, shape, where, e.input(g, inner), add=True)
    return out if inner == g.dtype else e.cast(out, g.dtype)


def _take_along_axis(e: Emitter, node: Node) -> str:
    """PyTorch's gather is ONNX's ``GatherElements``: the same rule, index by index."""
    x, index = node.inputs
    return e.add("GatherElements", [e.input(x), e.input(index, INT64)], axis=node.params["axis"])


def _scatter_add_along_axis(e: Emitter, node: Node) -> str:
    """Its gradient: zeros, with ``ScatterElements`` adding g where gather read (float16 in
    float32, as `_added` does)."""
    g, index = node.inputs
    inner = carrier("ScatterElements reduction=add", g.dtype)
    zeros = e.add("ConstantOfShape", [e.ints(node.params["shape"])],
                  value=e.tensor(np.zeros(1, inner)))
    out = e.add("ScatterElements", [zeros, e.input(index, INT64), e.input(g, inner)],
                axis=node.params["axis"], reduction="add")
    return out if inner == g.dtype else e.cast(out, g.dtype)


CONVERTERS = {"getitem": _getitem, "gather": _getitem, "setitem": _setitem,
              "scatter_add": _scatter_add, "scatter_add_like": _scatter_add, "scatter": _scatter}
CONVERTERS |= {"take_along_axis": _take_along_axis,
               "scatter_add_along_axis": _scatter_add_along_axis}
