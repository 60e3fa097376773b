"""Moving elements in ONNX's words: reshapes, transposes, broadcasts, concatenations and stacks.

Each is one ONNX operator (``Reshape``, ``Transpose``, ``Expand``, ``Concat``), ``stack`` an
``Unsqueeze`` of each operand then a ``Concat``. The ``_like`` ops that gradients use (shape x as
another value is shaped) read the other value's shape when the model runs, where it is not known
when exporting (`shape_of`), as ``tf.shape`` does. (Indexing, also a moving of elements, has its
own chapter: `teachflow.onnx_export.index_ops`.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from teachflow.graph import Node, Value
from teachflow.onnx_export.onnxruntime_types import carrier

if TYPE_CHECKING:
    from teachflow.onnx_export.emitter import Convert, Emitter


def _reshape(e: Emitter, node: Node) -> str:
    shape = node.params["shape"]
    # ONNX reads a 0 in a shape as "keep this size" unless told otherwise (allowzero, which
    # cannot go with a -1): NumPy's 0 is a size of 0.
    zero = {"allowzero": 1} if 0 in shape and -1 not in shape else {}
    return e.add("Reshape", [e.input(node.inputs[0]), e.ints(shape)], **zero)


def _transpose(e: Emitter, node: Node) -> str:
    return e.add("Transpose", [e.input(node.inputs[0])], perm=list(node.params["axes"]))


def _broadcast_to(e: Emitter, node: Node) -> str:
    return e.add("Expand", [e.input(node.inputs[0]), e.ints(node.params["shape"])])


def _concatenate(e: Emitter, node: Node) -> str:
    dtype = node.spec.dtype
    return e.add("Concat", [e.input(x, dtype) for x in node.inputs], axis=node.params["axis"])


def _stack(e: Emitter, node: Node) -> str:
    dtype, axis = node.spec.dtype, node.params["axis"]
    grown = [e.add("Unsqueeze", [e.input(x, dtype), e.ints([axis])]) for x in node.inputs]
    return e.add("Concat", grown, axis=axis)


def shape_of(e: Emitter, like: Value) -> str:
    """`like`'s shape: a constant when it is known, else read when the model runs."""
    if None in like.shape:
        return e.add("Shape", [e.input(like)])
    return e.ints(like.shape)


def _broadcast_like(e: Emitter, node: Node) -> str:
    x, like = node.inputs
    return e.add("Expand", [e.input(x), shape_of(e, like)])


def _reshape_like(e: Emitter, node: Node) -> str:
    x, like = node.inputs
    return e.add("Reshape", [e.input(x), shape_of(e, like)])


def _sum_like(e: Emitter, node: Node) -> str:
    """x summed over the axes broadcasting stretched: the leading ones, and those where
    `like` has size 1 (summing an axis that was 1 already changes nothing). An axis of
    unknown size in both is taken not to have been stretched."""
    x, like = node.inputs
    lead = x.ndim - like.ndim
    axes = [*range(lead), *(lead + i for i, d in enumerate(like.shape) if d == 1)]
    name = e.input(x)
    if axes:  # (in x's dtype, wrapping: narrow integers in a carrier)
        inner = carrier("ReduceSum", x.dtype, same_bits=True)
        name = e.add("ReduceSum", [e.input(x, inner), e.ints(axes)], keepdims=1)
        name = name if inner == x.dtype else e.cast(name, x.dtype)
    return e.add("Reshape", [name, shape_of(e, like)])


#: Converters by op name (`teachflow.onnx_export.emitter.CONVERTERS` has every module's).
CONVERTERS: dict[str, Convert] = {
    "reshape": _reshape, "transpose": _transpose, "broadcast_to": _broadcast_to,
    "concatenate": _concatenate, "stack": _stack, "broadcast_like": _broadcast_like,
    "reshape_like": _reshape_like, "sum_like": _sum_like,
}
