"""Fused kernels on the GPU: one CuPy kernel per fused group, written in CUDA C.

On a GPU, fusion means one *kernel launch* for the whole chain: each thread reads its element of
every input once, computes every op in registers, and writes one element of the output. Eagerly,
each op is its own launch that reads and writes whole arrays in GPU memory, which is where the
time goes for elementwise work.

The generated code is the argument list of a CuPy kernel:

- a `cupy.ElementwiseKernel` for elementwise ops: ``in_params`` and ``out_params`` name and type
  the arrays (CuPy broadcasts them, as NumPy would), and ``operation`` is the C body run for
  every element: one typed local variable per node, each made from its op's ``fusion`` template
  (``"tanh({0})"``, see `c_expr.py`), then ``result = v7;``. A group with several results (every
  value needed outside it) has one output parameter for each, ``result0, result1, ...``: one
  launch writes them all;
- a `cupy.ReductionKernel` when the group ends in a reduction (a sum, mean or max): the chain
  becomes a ``__device__`` function (in the ``preamble``) that ``map_expr`` calls for each
  element, ``reduce_expr`` combines two partial results ``a`` and ``b`` (with the ``fusion``
  expression of the op that the reduction's `Partials` combine with), ``identity`` is where each
  partial result starts, and ``post_map_expr`` writes the reduced value (a mean divides there).
  A CuPy reduction writes only its result: when the group's other values are needed outside
  too, an elementwise kernel writes them first (`CudaKernelCode.values`), and the reduction's
  map computes the chain again, in registers, rather than read them back.

Types follow NumPy, not C: every operand is cast to the type NumPy computes its node in, and a
Python literal is a constant of that type (``2.0f`` beside a float32 array), as `c_expr.py`
explains.

`cuda_source` returns the readable text (the CuPy call, as Python); `cuda_kernel` builds the
kernel with a CuPy module passed in, so this file imports without CuPy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from teachflow.graph import format_node
from teachflow.kernels.c_expr import aligned, c_literal, c_type, node_line
from teachflow.kernels.group import FusedGroup

#: The name of the kernel's output parameter (``result0, result1, ...`` when there are several).
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
    #: For a reduction whose group also writes elementwise values: the elementwise kernel that
    #: writes them, launched first.
    values: CudaKernelCode | None = None


def cuda_code(group: FusedGroup) -> CudaKernelCode:
    """The CuPy kernel computing `group`, as strings."""
    if group.reduction is not None and len(group.outputs) > 1:
        *values, reduced = range(len(group.outputs))
        elementwise = FusedGroup(f"{group.name}_values", group.nodes, None, group.inputs,
                                 tuple(group.outputs[k] for k in values),
                                 tuple(group.returned[k] for k in values))
        reduction = FusedGroup(group.name, group.nodes, group.reduction, group.inputs,
                               (group.outputs[reduced],), (group.returned[reduced],))
        return dataclasses.replace(cuda_code(reduction), values=cuda_code(elementwise))
    in_params = ", ".join(f"{v.dtype.name} in{i}" for i, v in enumerate(group.inputs))
    results = result_names(group)
    out_params = ", ".join(f"{v.dtype.name} {name}"
                           for v, name in zip(group.outputs, results, strict=True))
    names = {v: f"in{i}" for i, v in enumerate(group.inputs)}
    body = aligned([node_line(node, names) for node in group.nodes])
    if group.reduction is None:
        stores = [f"{name} = {names[v]};" for v, name in zip(group.outputs, results, strict=True)]
        operation = "\n".join([*body, *stores])
        return CudaKernelCode("ElementwiseKernel", dict(
            in_params=in_params, out_params=out_params, operation=operation, name=group.name))

    node = group.reduction
    last = names[node.inputs[0]]
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


def result_names(group: FusedGroup) -> list[str]:
    """The output parameters' names: ``result``, or ``result0, result1, ...`` for several."""
    if len(group.outputs) == 1:
        return [RESULT]
    return [f"{RESULT}{i}" for i in range(len(group.outputs))]


def cuda_source(group: FusedGroup) -> str:
    """The fused kernel as readable text: the CuPy constructor call (Python) with its CUDA C."""
    code = cuda_code(group)
    lines = [f"# {group.name}: {len(group.nodes)} elementwise op(s) in one CUDA kernel"]
    lines += [f"#   in{i} = {v} : {v.spec}" for i, v in enumerate(group.inputs)]
    lines += [f"#   {format_node(n)}" for n in group.nodes]
    if group.reduction is not None:
        lines.append(f"#   {format_node(group.reduction)}")
    if code.values is not None:
        names = ", ".join(result_names(group)[:-1])
        lines[0] = (f"# {group.name}: {len(group.nodes)} elementwise op(s) and a "
                    f"{group.reduction.op.name}, in two CUDA kernels: CuPy's reduction writes "
                    f"only its result, so\n# {group.name}_values writes the other values "
                    f"needed outside ({names}) first")
        lines += _constructor(f"{group.name}_values", code.values)
        lines.append(f"# called as {group.name}_values(in0, ...), which returns ({names})")
    lines += _constructor(group.name, code)
    args = ", ".join(f"in{i}" for i in range(len(group.inputs)))
    if code.kind == "ReductionKernel":
        lines.append(f"# called as {group.name}({args}, axis={code.axis!r}, "
                     f"keepdims={code.keepdims!r}, out=out)")
    elif len(group.outputs) == 1:
        lines.append(f"# called as {group.name}({args}) or {group.name}({args}, out)")
    else:
        lines.append(f"# called as {group.name}({args}), which returns "
                     f"({', '.join(result_names(group))}), or {group.name}({args}, *out)")
    return "\n".join(lines) + "\n"


def _constructor(name: str, code: CudaKernelCode) -> list[str]:
    """``name = cupy.ElementwiseKernel(...)``, one argument a line, C code as a block."""
    lines = [f"{name} = cupy.{code.kind}("]
    for key, value in code.arguments.items():
        if "\n" in value:  # C code: shown as a block
            lines.append(f'    {key}=r"""')
            lines += [f"        {line}" if line else "" for line in value.splitlines()]
            lines.append('    """,')
        else:
            lines.append(f"    {key}={_python_string(value)},")
    lines.append(")")
    return lines


def cuda_kernel(group: FusedGroup, cupy: ModuleType) -> Callable[..., Any]:
    """Build the CuPy kernel of `group` and return ``fn(in0, in1, ..., out=None)``, called as
    the NumPy kernel is: CuPy arrays in `group.inputs` order; `out` filled in place if given
    (a tuple of arrays when the group has several results, and so is what it returns). CuPy
    compiles the kernel on its first call (and caches it on disk)."""
    code = cuda_code(group)
    values = None if code.values is None else \
        getattr(cupy, code.values.kind)(**code.values.arguments)
    kernel = getattr(cupy, code.kind)(**code.arguments)
    if values is not None:  # the values needed outside first, then the reduction
        def run(*arrays: Any, out: Any = None) -> Any:
            if out is None:
                written = values(*arrays)
                written = written if isinstance(written, tuple) else (written,)
                return (*written, kernel(*arrays, axis=code.axis, keepdims=code.keepdims))
            values(*arrays, *out[:-1])
            kernel(*arrays, axis=code.axis, keepdims=code.keepdims, out=out[-1])
            return out
    elif code.kind == "ReductionKernel":
        def run(*arrays: Any, out: Any = None) -> Any:
            return kernel(*arrays, axis=code.axis, keepdims=code.keepdims, out=out)
    elif len(group.outputs) == 1:
        def run(*arrays: Any, out: Any = None) -> Any:
            return kernel(*arrays) if out is None else kernel(*arrays, out)
    else:
        def run(*arrays: Any, out: Any = None) -> Any:
            return kernel(*arrays) if out is None else kernel(*arrays, *out)
    run.__name__ = run.__qualname__ = group.name
    return run


# --- Spelling -----------------------------------------------------------------------------------


def _python_string(text: str) -> str:
    """A Python string literal, in double quotes when the text allows."""
    return f'"{text}"' if '"' not in text and "\\" not in text else repr(text)
