"""Reductions in ONNX's words: sums, means, extremes and where they are, and how many elements
a reduction combines; products, truth, running totals and sorting (`teachflow.ops.scans`).

Each is one ONNX ``Reduce`` operator over the same axes, with two differences from NumPy to
mind. ONNX reduces *every* axis when it is given none, so ``axis=()`` (reduce none) is an
``Identity``. And the sums are NumPy's: in the dtype NumPy sums in (int32 elements add up in
int64, float16 ones in float32 for a mean), narrow integers in a carrier whose sums wrap alike
(`teachflow.onnx_export.onnxruntime_types`). In opset 17 ``ReduceSum`` takes its axes as an
input and the other reductions as an attribute (`reduce` writes both).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from teachflow.graph import Node
from teachflow.onnx_export.onnxruntime_types import carrier

if TYPE_CHECKING:
    from teachflow.onnx_export.emitter import Convert, Emitter

BOOL, FLOAT32 = np.dtype(bool), np.dtype(np.float32)


def reduce(e: Emitter, op_type: str, x: str, axis: tuple | None, keepdims: bool) -> str:
    """``op_type`` over `axis` (None: all). ONNX reduces every axis when given none, so
    ``axis=()`` (reduce none) is an Identity. ReduceSum takes its axes as an input (opset 13);
    the others, in opset 17, as an attribute."""
    if axis == ():
        return e.add("Identity", [x])
    if op_type == "ReduceSum":
        axes = [e.ints(axis)] if axis is not None else []
        return e.add(op_type, [x, *axes], keepdims=int(keepdims))
    axes = {"axes": list(axis)} if axis is not None else {}
    return e.add(op_type, [x], keepdims=int(keepdims), **axes)


def _sum(e: Emitter, node: Node) -> str:
    """In the result's dtype, as NumPy sums (int32 elements add up in int64); a uint64 sum in
    int64, whose sums wrap alike."""
    dtype = node.spec.dtype
    inner = carrier("ReduceSum", dtype, same_bits=True)
    out = reduce(e, "ReduceSum", e.input(node.inputs[0], inner), node.params["axis"],
                 node.params["keepdims"])
    return out if inner == dtype else e.cast(out, dtype)


def _mean(e: Emitter, node: Node) -> str:
    """NumPy adds float16 elements up in float32 (see `Partials`), and means of ints are
    float64."""
    dtype = node.spec.dtype
    inner = FLOAT32 if dtype == np.float16 else dtype
    x = e.input(node.inputs[0], inner)
    out = reduce(e, "ReduceMean", x, node.params["axis"], node.params["keepdims"])
    return out if inner == dtype else e.cast(out, dtype)


def _extreme(op_type: str, combine: str) -> Convert:
    def convert(e: Emitter, node: Node) -> str:
        (x,), dtype = node.inputs, node.spec.dtype
        axis, keepdims, initial = (node.params.get(k) for k in ("axis", "keepdims", "initial"))
        if initial is not None and 0 in x.shape:  # nothing to reduce: `initial` everywhere
            return e.add("ConstantOfShape", [e.ints(node.spec.shape)],
                         value=e.tensor(np.full(1, initial, dtype)))
        inner = carrier(op_type, np.uint8 if dtype == BOOL else dtype)  # (numbers are ordered)
        out = reduce(e, op_type, e.input(x, inner), axis, keepdims)
        if initial is not None:
            out = e.add(combine, [out, e.input(initial, inner)])
        return out if inner == dtype else e.cast(out, dtype)
    return convert


def _log_softmax(e: Emitter, node: Node) -> str:
    """ONNX's LogSoftmax normalises along one axis; along several (or all), as the kernel
    computes it."""
    (x,), axis, dtype = node.inputs, node.params["axis"], node.spec.dtype
    x = e.input(x, dtype)
    if axis is not None and len(axis) == 1:
        return e.add("LogSoftmax", [x], axis=axis[0])
    shifted = e.add("Sub", [x, reduce(e, "ReduceMax", x, axis, True)])
    total = reduce(e, "ReduceSum", e.add("Exp", [shifted]), axis, True)
    return e.add("Sub", [shifted, e.add("Log", [total])])


def _position(op_type: str) -> Convert:
    """argmax/argmin; over all axes (axis None) as NumPy does: of the flattened tensor."""
    def convert(e: Emitter, node: Node) -> str:
        (x,), axis, keepdims = node.inputs, node.params["axis"], node.params["keepdims"]
        name = e.input(x, carrier(op_type, np.uint8 if x.dtype == BOOL else x.dtype))
        if axis is not None:
            return e.add(op_type, [name], axis=axis, keepdims=int(keepdims))
        found = e.add(op_type, [e.add("Reshape", [name, e.ints([-1])])], axis=0, keepdims=0)
        return e.add("Reshape", [found, e.ints(node.spec.shape)]) if keepdims else found
    return convert


def _count_of(e: Emitter, node: Node) -> str:
    """How many elements a reduction combines: known now, or read from the shape at run
    time (``Shape``, as tf.shape)."""
    (x,), axis, dtype = node.inputs, node.params["axis"], node.params["dtype"]
    axes = list(range(x.ndim)) if axis is None else list(axis)
    sizes = [x.shape[a] for a in axes]
    if None not in sizes:
        return e.const(np.asarray(math.prod(sizes), dtype=dtype))
    picked = e.add("Gather", [e.add("Shape", [e.input(x)]), e.ints(axes)], axis=0)
    return e.cast(e.add("ReduceProd", [picked], keepdims=0), dtype)


# --- Products, truth, running totals and order (`teachflow.ops.scans`) ---------------------------


def _prod(e: Emitter, node: Node) -> str:
    """``ReduceProd``, in NumPy's dtype for it (int32 elements multiply in int64)."""
    dtype = node.spec.dtype
    inner = carrier("ReduceProd", dtype, same_bits=True)
    out = reduce(e, "ReduceProd", e.input(node.inputs[0], inner), node.params["axis"],
                 node.params["keepdims"])
    return out if inner == dtype else e.cast(out, dtype)


def _truth(op_type: str) -> Convert:
    """all (any): each element as true or false (a Cast to bool, as NumPy reads numbers), then
    the smallest (largest) of them as 0s and 1s."""
    def convert(e: Emitter, node: Node) -> str:
        ones = e.cast(e.cast(e.input(node.inputs[0]), BOOL), np.int32)
        return e.cast(reduce(e, op_type, ones, node.params["axis"], node.params["keepdims"]),
                      BOOL)
    return convert


def _cumsum(e: Emitter, node: Node) -> str:
    dtype = node.spec.dtype
    inner = carrier("CumSum", dtype, same_bits=True)
    out = e.add("CumSum", [e.input(node.inputs[0], inner),
                           e.const(np.asarray(node.params["axis"], np.int64))])
    return out if inner == dtype else e.cast(out, dtype)


def _cumprod(e: Emitter, node: Node) -> str:
    """ONNX has no running product: each output j is a ``ReduceProd`` of the input with the
    elements after j replaced by 1 (an n x n triangle of a ``Where``), n products of n."""
    (x,), axis, dtype = node.inputs, node.params["axis"], node.spec.dtype
    inner = carrier("ReduceProd", dtype, same_bits=True)
    n = x.shape[axis]
    where = carrier("Where", inner)
    rows = e.add("Unsqueeze", [e.input(x, where), e.ints([axis])])  # (..., 1, n, ...)
    kept = np.tril(np.ones((n, n), dtype=bool)).reshape((n, n) + (1,) * (x.ndim - axis - 1))
    masked = e.add("Where", [e.const(kept), rows, e.const(np.ones((), where))])
    out = e.add("ReduceProd", [masked if where == inner else e.cast(masked, inner)],
                axes=[axis + 1], keepdims=0)
    return out if inner == dtype else e.cast(out, dtype)


def _argsort(e: Emitter, node: Node) -> str:
    """``TopK`` of all n elements, sorted, the largest first when descending: its indices."""
    (x,), axis = node.inputs, node.params["axis"]
    name = e.input(x, carrier("TopK", np.uint8 if x.dtype == BOOL else x.dtype))
    _, indices = e.add("TopK", [name, e.ints([x.shape[axis]])], outputs=2, axis=axis,
                       largest=int(node.params["descending"]), sorted=1)
    return indices


#: Converters by op name (`teachflow.onnx_export.emitter.CONVERTERS` has every module's).
CONVERTERS: dict[str, Convert] = {
    "sum": _sum, "mean": _mean, "count_of": _count_of,
    "max": _extreme("ReduceMax", "Max"), "min": _extreme("ReduceMin", "Min"),
    "argmax": _position("ArgMax"), "argmin": _position("ArgMin"), "log_softmax": _log_softmax,
    "prod": _prod, "all": _truth("ReduceMin"), "any": _truth("ReduceMax"), "cumsum": _cumsum,
    "cumprod": _cumprod, "argsort": _argsort,
}
