"""What onnxruntime runs: the element types its kernels take, and what an export does about the
others.

ONNX says which types an operator *may* take (``Softplus`` of any float); a runtime implements
some of them, and a model it has no kernel for fails when it is loaded ("Could not find an
implementation for Softplus(1)"). So an exported model is checked against what onnxruntime's
CPU kernels take (`KERNELS`, as onnxruntime registers them for opset 17; a test compares the
table with the installed onnxruntime's), and there are two ways around a type a kernel lacks:

- *a carrier*: the same computation in a dtype that holds every value exactly (`carrier`):
  ``Max`` of int16 in int32, cast back; ``Where`` of bools in uint8; a sum of uint64 in int64,
  whose bits wrap alike. A converter asks for one where it computes;
- *a refusal*, at export, naming the teachflow op, its dtype and the line (`refuse_unrunnable`),
  where no carrier computes the same numbers: a model that cannot run is never written.

float16 needs neither: where onnxruntime has no float16 kernel, it inserts casts to float32 and
back itself. Complex numbers it has no tensors for at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from teachflow.core.errors import TeachflowError
from teachflow.graph import Node, format_node

_INTS = "int8 int16 int32 int64 uint8 uint16 uint32 uint64"
_NUMBERS = f"float32 float64 {_INTS}"
_ANY = f"bool float16 {_NUMBERS}"
_ORDERED = "float16 float32 float64 int8 int32 int64 uint8 uint32 uint64"
_REDUCED = "float32 float64 int8 int32 int64 uint8"

#: For each ONNX operator the exporter writes, the dtypes onnxruntime's CPU kernels take at
#: opset 17, by type parameter (``Where``'s ``T``).
KERNELS: dict[str, dict[str, str]] = {
    **{op: {"T": _ANY} for op in ("Concat", "Expand", "ScatterND", "Squeeze", "Transpose",
                                  "Unsqueeze")},
    **{op: {"T": _ANY, "Tind": "int32 int64"} for op in ("Gather", "Slice")},
    "GatherND": {"T": _ANY, "indices": "int64"},
    "Identity": {"V": _ANY}, "If": {"B": "bool", "V": _ANY},
    "Loop": {"I": "int64", "B": "bool", "V": _ANY}, "Reshape": {"T": _ANY, "shape": "int64"},
    "Shape": {"T": _ANY, "T1": "int64"}, "ConstantOfShape": {"T1": "int64", "T2": _ANY},
    "Cast": {"T1": _ANY, "T2": _ANY},
    **{op: {"T": _NUMBERS} for op in ("Abs", "Add", "Div", "Mul", "Sub")},
    **{op: {"T": _NUMBERS, "T1": "bool"} for op in ("Greater", "GreaterOrEqual", "Less",
                                                   "LessOrEqual")},
    "Equal": {"T": f"bool {_NUMBERS}", "T1": "bool"}, "Sign": {"T": f"float16 {_NUMBERS}"},
    "Mod": {"T": f"float16 {_NUMBERS}"}, "Neg": {"T": "float32 float64 int8 int16 int32 int64"},
    **{op: {"T": "bool", "T1": "bool"} for op in ("And", "Or", "Xor")}, "Not": {"T": "bool"},
    **{op: {"T": "float32 float64"} for op in ("Exp", "Log", "LogSoftmax", "Sigmoid", "Sqrt",
                                               "Tanh")},
    "Softplus": {"T": "float32"}, "Round": {"T": "float16 float32 float64"},
    "Relu": {"T": "float32 float64 int32 int8"},
    "Max": {"T": _ORDERED}, "Min": {"T": _ORDERED},
    **{op: {"T": _REDUCED} for op in ("ArgMax", "ArgMin", "ReduceMax", "ReduceMin")},
    **{op: {"T": "float32 float64 int32 int64"} for op in ("ReduceMean", "ReduceProd",
                                                          "ReduceSum")},
    "MatMul": {"T": "float32 float64 int32 int64 uint32 uint64"},
    "Pow": {"T": "float32 float64 int32 int64", "T1": "float32 float64 int32 int64"},
    "Range": {"T": "float32 float64 int16 int32 int64"},
    "EyeLike": {"T1": "float32 float64 int32 int64 uint64",
                "T2": "float32 float64 int32 int64 uint64"},
    "Where": {"T": "float32 float64 int8 int32 int64 uint8 uint32"},
    "CumSum": {"T": "float32 float64 int32 int64", "T2": "int32 int64"},
    "TopK": {"T": "float32 float64 int8 int16 int32 int64 uint8", "I": "int64"},
    **{op: {"T": "float32"} for op in ("Conv", "ConvTranspose", "AveragePool")},
    "MaxPool": {"T": "float32 float64 int8 uint8", "I": "int64"},
    "ScatterElements": {"T": _ANY, "Tind": "int32 int64"},
    "ScatterElements reduction=add": {"T": "float32 float64", "Tind": "int32 int64"},
    "GatherElements": {"T": _ANY, "Tind": "int32 int64"},
}
KERNELS |= {
    **{op: {"T": "float32 float64"} for op in ("Ceil", "Cos", "Floor", "Reciprocal", "Sin")},
    "Erf": {"T": "float32"}, "IsNaN": {"T1": "float16 float32 float64", "T2": "bool"},
    "IsInf": {"T1": "float32 float64", "T2": "bool"},
    **{op: {"T": _ANY, "Tind": "int32 int64"} for op in ("GatherElements", "ScatterElements")},
}

#: Dtypes that hold every value of a dtype, narrowest first (bools as 0 and 1).
_WIDER = {"bool": ("uint8", "int32"), "float16": ("float32", "float64"),
          "int8": ("int16", "int32", "int64"),
          "uint8": ("int16", "uint16", "int32", "uint32", "int64", "uint64"),
          "int16": ("int32", "int64"), "uint16": ("int32", "uint32", "int64", "uint64"),
          "int32": ("int64",), "uint32": ("int64", "uint64"), "float32": ("float64",)}

#: An integer dtype of the same size: its bits, read as the other, wrap alike in +, -, * and
#: are moved unchanged, so a value goes there and back exactly.
_SAME_BITS = {"int8": "uint8", "uint8": "int8", "int16": "uint16", "uint16": "int16",
              "int32": "uint32", "uint32": "int32", "int64": "uint64", "uint64": "int64"}


#: Kernels that fail only when they run, for a value of one attribute: ScatterND adding float16
#: (onnxruntime casts float16 to float32 only where an operator has no float16 kernel at all).
KERNELS["ScatterND reduction=add"] = {"T": f"bool {_NUMBERS}"}
KERNELS["ScatterElements reduction=add"] = {"T": _NUMBERS}


def takes(op_type: str, dtype: Any, param: str = "T") -> bool:
    """True if onnxruntime runs `op_type` with its `param` of `dtype` (float16 by way of float32,
    as onnxruntime casts, where it has no float16 kernel)."""
    name = np.dtype(dtype).name
    types = KERNELS[op_type].get(param, _ANY).split()
    casts = " " not in op_type  # (not a kernel's variant: see ScatterND's)
    return name in types or (name == "float16" and casts and "float32" in types)


def carrier(op_type: str, dtype: Any, same_bits: bool = False) -> np.dtype:
    """`dtype` if onnxruntime's `op_type` takes it, else the narrowest dtype it takes that holds
    every value of `dtype` (or, with `same_bits`, for an op that moves values or wraps as
    integers do, one of the same size); `dtype` itself where there is none, which the check of
    the whole model then refuses by name."""
    name = np.dtype(dtype).name
    candidates = [name, *_WIDER.get(name, ())]
    if same_bits and name in _SAME_BITS:
        candidates.append(_SAME_BITS[name])
    return np.dtype(next((c for c in candidates if takes(op_type, c)), name))


def refuse_unrunnable(model: Any, made_by: dict[str, Node]) -> None:
    """Raise a TeachflowError for the first node of `model` (inside its If and Loop bodies too)
    with an operand or result of a dtype onnxruntime's kernel does not take, naming the
    teachflow node that wrote it (`made_by`: by ONNX node name)."""
    from onnx import defs, helper, shape_inference

    inferred = shape_inference.infer_shapes(model)
    for node, types in _nodes(inferred.graph, {}):
        schema = defs.get_schema(node.op_type, inferred.opset_import[0].version)
        kernel = kernel_of(node)
        for names, formals in ((node.input, schema.inputs), (node.output, schema.outputs)):
            for k, name in enumerate(names):
                param = formals[min(k, len(formals) - 1)].type_str
                if not name or types.get(name) in (None, 0) or param not in KERNELS[kernel]:
                    continue
                dtype = helper.tensor_dtype_to_np_dtype(types[name])
                if not takes(kernel, dtype, param):
                    raise _refusal(kernel, dtype, param, made_by.get(node.name))


def kernel_of(node: Any) -> str:
    """The entry of `KERNELS` that says what an ONNX node's kernel takes."""
    variant = f"{node.op_type} reduction=add"
    if variant in KERNELS and any(a.name == "reduction" and a.s == b"add"
                                  for a in node.attribute):
        return variant
    return node.op_type


def _nodes(graph: Any, outer: dict[str, int]) -> Iterator[tuple[Any, dict[str, int]]]:
    """Each node of `graph` and of the graphs inside its nodes, with the element type of every
    name it can read."""
    types = dict(outer)
    for info in (*graph.input, *graph.value_info, *graph.output):
        types[info.name] = info.type.tensor_type.elem_type
    types.update((t.name, t.data_type) for t in graph.initializer)
    for node in graph.node:
        yield node, types
        for attribute in node.attribute:
            if attribute.g.name or attribute.g.node:
                yield from _nodes(attribute.g, types)


def _refusal(op_type: str, dtype: np.dtype, param: str, node: Node | None) -> TeachflowError:
    takes_ = KERNELS[op_type][param].replace(" ", ", ")
    what = f"op {node.op.name} of {dtype.name} ({format_node(node)})" if node is not None \
        else f"a value of {dtype.name}"
    return TeachflowError(
        f"{what} cannot be exported to ONNX: onnxruntime has no {op_type} for {dtype.name} "
        f"(it takes {takes_}), and no other type computes the same numbers",
        op=node.op.name if node is not None else "export_onnx",
        location=node.source if node is not None else None,
        hint=f"convert to a dtype it takes first (x.astype('{_suggested(param, op_type)}')), "
             "or compute this outside the exported function")


def _suggested(param: str, op_type: str) -> str:
    types = KERNELS[op_type][param].split()
    return next((t for t in ("float32", "int64", "int32") if t in types), types[0])
