"""Fused kernels on the GPU: one CuPy kernel per fused group, written in CUDA C.

On a GPU, fusion means one *kernel launch* for the whole chain: each thread reads its element of
every input once, computes every op in registers, and writes one element of the output. Eagerly,
each op is its own launch that reads and writes whole arrays in GPU memory, which is where the
time goes for elementwise work.

The generated code is the argument list of a CuPy kernel:

- a `cupy.ElementwiseKernel` for a chain of elementwise ops: ``in_params`` and ``out_params``
  name and type the arrays (CuPy broadcasts them, as NumPy would), and ``operation`` is the C
  body run for every element: one typed local variable per node, each made from its op's
  ``fusion`` template (``"tanh({0})"``), then ``result = v7;``;
- a `cupy.ReductionKernel` when the group ends in a reduction (a sum, mean or max): the chain
  becomes a ``__device__`` function (in the ``preamble``) that ``map_expr`` calls for each
  element, ``reduce_expr`` combines two partial results ``a`` and ``b`` (with the ``fusion``
  expression of the op that the reduction's `Partials` combine with), ``identity`` is where each
  partial result starts, and ``post_map_expr`` writes the reduced value (a mean divides there).

Types follow NumPy, not C. C would compute ``int + float`` in float, where NumPy computes int32 +
float32 in float64, so every operand is cast to the type NumPy computes the node in, and every
Python literal is written as a constant of that type (``2.0f`` for float32): NumPy treats
literals as *weak*, taking the array's type.

`cuda_source` returns the readable text (the CuPy call, as Python); `cuda_kernel` builds the
kernel with a CuPy module passed in, so this file imports without CuPy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from teachflow.graph import Node, Value, format_node
from teachflow.kernels.group import FusedGroup

#: C type of each dtype, as CuPy names them in its generated code (``float16`` is CuPy's class).
C_TYPES = {
    "bool": "bool",
    "int8": "signed char",
    "uint8": "unsigned char",
    "int16": "short",
    "uint16": "unsigned short",
    "int32": "int",
    "uint32": "unsigned int",
    "int64": "long long",
    "uint64": "unsigned long long",
    "float16": "float16",
    "float32": "float",
    "float64": "double",
    "complex64": "complex<float>",
    "complex128": "complex<double>",
}

#: The name of the kernel's output parameter.
RESULT = "result"


@dataclass(frozen=True)
class CudaKernelCode:
    """One CuPy kernel, as the arguments of its constructor: ``kind`` is ``"ElementwiseKernel"``
    or ``"ReductionKernel"``; ``arguments`` are the keyword arguments, in the constructor's
    order; ``axis`` and ``keepdims`` are what a reduction is called with."""

    kind: str
    arguments: dict[str, str]
    axis: tuple[int, ...] | None = None
    keepdims: bool = False


def cuda_code(group: FusedGroup) -> CudaKernelCode:
    """The CuPy kernel computing `group`, as strings."""
    in_params = ", ".join(f"{v.dtype.name} in{i}" for i, v in enumerate(group.inputs))
    out_params = f"{group.spec.dtype.name} {RESULT}"
    names = {v: f"in{i}" for i, v in enumerate(group.inputs)}
    body = _aligned([_node_line(node, names) for node in group.nodes])
    last = names[group.nodes[-1].output]
    if group.reduction is None:
        operation = "\n".join([*body, f"{RESULT} = {last};"])
        return CudaKernelCode("ElementwiseKernel", dict(
            in_params=in_params, out_params=out_params, operation=operation, name=group.name))

    node = group.reduction
    partials = node.op.partials
    element = group.elementwise_spec.dtype
    params = ", ".join(f"{c_type(v.dtype)} in{i}" for i, v in enumerate(group.inputs))
    args = ", ".join(f"in{i}" for i in range(len(group.inputs)))
    preamble = "\n".join([
        "// The elementwise chain, for one element: the reduction's map step.",
        f"__device__ {c_type(element)} {group.name}_map({params}) {{",
        *(f"    {line}" for line in body),
        f"    return {last};",
        "}",
    ])
    # Partial results are kept in the result's dtype (float16 in float32, as CuPy does), and two
    # of them, a and b, combine as the op that combines them computes its two operands.
    spec = node.spec
    reduce_type = np.dtype(np.float32) if spec.dtype == np.float16 else spec.dtype
    reduce_expr = partials.combine.fusion.format("a", "b", dtype=c_type(reduce_type))
    post_map = f"{RESULT} = a"
    if partials.mean:  # divided by how many elements each output element reduces
        post_map += " / _type_reduce(_in_ind.size() / _out_ind.size())"
    return CudaKernelCode("ReductionKernel", dict(
        in_params=in_params, out_params=out_params, map_expr=f"{group.name}_map({args})",
        reduce_expr=reduce_expr, post_map_expr=post_map,
        identity=c_literal(partials.identity(reduce_type), reduce_type), name=group.name,
        reduce_type=c_type(reduce_type), preamble=preamble,
    ), axis=node.params["axis"], keepdims=node.params["keepdims"])


def cuda_source(group: FusedGroup) -> str:
    """The fused kernel as readable text: the CuPy constructor call (Python) with its CUDA C."""
    code = cuda_code(group)
    lines = [f"# {group.name}: {len(group.nodes)} elementwise op(s) in one CUDA kernel"]
    lines += [f"#   in{i} = {v} : {v.spec}" for i, v in enumerate(group.inputs)]
    lines += [f"#   {format_node(n)}" for n in group.nodes]
    if group.reduction is not None:
        lines.append(f"#   {format_node(group.reduction)}")
    lines.append(f"{group.name} = cupy.{code.kind}(")
    for key, value in code.arguments.items():
        if "\n" in value:  # C code: shown as a block
            lines.append(f'    {key}=r"""')
            lines += [f"        {line}" if line else "" for line in value.splitlines()]
            lines.append('    """,')
        else:
            lines.append(f"    {key}={_python_string(value)},")
    lines.append(")")
    args = ", ".join(f"in{i}" for i in range(len(group.inputs)))
    if code.kind == "ReductionKernel":
        lines.append(f"# called as {group.name}({args}, axis={code.axis!r}, "
                     f"keepdims={code.keepdims!r}, out=out)")
    else:
        lines.append(f"# called as {group.name}({args}) or {group.name}({args}, out)")
    return "\n".join(lines) + "\n"


def cuda_kernel(group: FusedGroup, cupy: ModuleType) -> Callable[..., Any]:
    """Build the CuPy kernel of `group` and return ``fn(in0, in1, ..., out=None)``, called as
    the NumPy kernel is: CuPy arrays in `group.inputs` order; `out` filled in place if given.
    CuPy compiles the kernel on its first call (and caches it on disk)."""
    code = cuda_code(group)
    kernel = getattr(cupy, code.kind)(**code.arguments)
    if code.kind == "ReductionKernel":
        def run(*arrays: Any, out: Any = None) -> Any:
            return kernel(*arrays, axis=code.axis, keepdims=code.keepdims, out=out)
    else:
        def run(*arrays: Any, out: Any = None) -> Any:
            return kernel(*arrays) if out is None else kernel(*arrays, out)
    run.__name__ = run.__qualname__ = group.name
    return run


# --- One node: a typed local variable ----------------------------------------------------------


def _node_line(node: Node, names: dict[Value, str]) -> tuple[str, str]:
    """``const double v3 = ((double)v2 + (double)in1);`` and its comment, ``%3 = add %2, %y``."""
    types = _operand_types(node)
    operands = []
    for o, dtype in zip(node.inputs, types, strict=True):
        if not isinstance(o, Value):  # read as is: as the Python literal's own type
            operands.append(c_literal(o, np.result_type(o) if dtype is None else dtype))
        elif dtype is None or o.dtype == dtype:
            operands.append(names[o])
        else:
            operands.append(f"({c_type(dtype)}){names[o]}")
    name = f"v{node.id}"
    names[node.output] = name
    expression = node.op.fusion.format(*operands, dtype=c_type(node.spec.dtype))
    short = format_node(node).rsplit(" : ", 1)[0]
    return f"const {c_type(node.spec.dtype)} {name} = {expression};", short


def _aligned(lines: list[tuple[str, str]]) -> list[str]:
    """Code lines with their ``//`` comments lined up in one column."""
    width = max(len(code) for code, _ in lines)
    return [f"{code:<{width}}  // {comment}" for code, comment in lines]


def _operand_types(node: Node) -> list[np.dtype | None]:
    """The dtype each operand is cast to: the one NumPy computes the node in (None: as is).

    That is the node's own dtype, or for a bool result (a comparison) the operands' common
    dtype; operands the op's declaration reads as they are (`Op.fusion_as_is`) are not cast.
    """
    as_is = [name in node.op.fusion_as_is for name in node.op.arg_names[:len(node.inputs)]]
    computed = node.spec.dtype
    if computed == np.bool_:
        computed = np.result_type(*(o.dtype if isinstance(o, Value) else o
                                    for o, keep in zip(node.inputs, as_is, strict=True)
                                    if not keep))
    return [None if keep else computed for keep in as_is]


# --- C spellings --------------------------------------------------------------------------------


def c_type(dtype: Any) -> str:
    """``float32 -> "float"``: the C type of a dtype."""
    return C_TYPES[np.dtype(dtype).name]


def c_literal(value: bool | int | float, dtype: Any) -> str:
    """A Python literal as a C constant of `dtype`: ``2 -> "2.0f"`` for float32."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return "true" if value else "false"
    if dtype.kind in "iu":
        return _c_int(int(value), dtype)
    if dtype.kind == "c":
        z = complex(value)
        part = "float" if dtype == np.complex64 else "double"
        return f"{c_type(dtype)}({c_literal(z.real, part)}, {c_literal(z.imag, part)})"
    x, single = float(value), dtype != np.float64
    if math.isnan(x):
        text = "CUDART_NAN_F" if single else "CUDART_NAN"
    elif math.isinf(x):
        text = ("-" if x < 0 else "") + ("CUDART_INF_F" if single else "CUDART_INF")
    else:
        text = repr(x) + ("f" if single else "")
    return f"float16({text})" if dtype == np.float16 else text


def _c_int(value: int, dtype: np.dtype) -> str:
    suffix = {"int64": "LL", "uint64": "ULL", "uint32": "U", "int32": ""}.get(dtype.name)
    if suffix is None:  # 8- and 16-bit types have no literal of their own
        return f"({c_type(dtype)}){value}"
    if value == np.iinfo(dtype).min and value < 0:  # -2^63 is not a literal: 2^63 overflows
        return f"({value + 1}{suffix} - 1)"
    return f"{value}{suffix}"


def _python_string(text: str) -> str:
    """A Python string literal, in double quotes when the text allows."""
    return f'"{text}"' if '"' not in text and "\\" not in text else repr(text)
