"""One node as one line of C: the typed local variable that both C kernels are made of.

The fused kernel for the GPU (`cuda_fused.py`) and the one for the CPU (`c_renderer.py`) compute a
group the same way: for one element, each node becomes a local variable of its C type, made from
its op's ``fusion`` template (``"tanh({0})"``), and the comment beside it names the node::

    const float v4 = (in0 + in1);  // %4 = add %3, %b

Types follow NumPy, not C. C would compute ``int + float`` in float, where NumPy computes int32 +
float32 in float64, so every operand is cast to the type NumPy computes the node in, and every
Python literal is written as a constant of that type (``2.0f`` for float32): NumPy treats
literals as *weak*, taking the array's type.

The two kernels differ only in spelling, which a `Dialect` gives: CUDA's headers name a float
NaN ``CUDART_NAN_F`` where C's ``math.h`` has ``NAN``, and C++ overloads ``tanh`` for a float
where C spells it ``tanhf``.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from teachflow.graph import Node, Value, format_node

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


def _as_written(function: str, dtype: np.dtype) -> str:
    """C++ picks a maths function's overload by its operand's type: ``tanh`` serves every type.
    But CUDA's rounding functions have no integer overloads on the device, and NumPy rounds an
    integer to itself: for one, the call is spelled as nothing, ``floor(v2)`` as ``(v2)``."""
    return "" if dtype.kind in "iub" and _ROUNDING.fullmatch(function) else function


#: math.h's functions that round to an integer.
_ROUNDING = re.compile(r"floor|ceil|trunc")


@dataclass(frozen=True)
class Dialect:
    """How one kind of C spells what differs: NaN and infinity for float and for double, and a
    maths function of a template (``tanh``) for operands of a dtype (`function`)."""

    nan: tuple[str, str]
    inf: tuple[str, str]
    function: Callable[[str, np.dtype], str] = field(default=_as_written)


#: CUDA C++, as CuPy compiles it.
CUDA = Dialect(nan=("CUDART_NAN_F", "CUDART_NAN"), inf=("CUDART_INF_F", "CUDART_INF"))


def node_line(node: Node, names: dict[Value, str], dialect: Dialect = CUDA) -> tuple[str, str]:
    """``const double v3 = ((double)v2 + (double)in1);`` and its comment, ``%3 = add %2, %y``.

    `names` gives each value's C name; the node's own (``v3``) is added to it."""
    types = operand_types(node)
    operands = []
    for o, dtype in zip(node.inputs, types, strict=True):
        if not isinstance(o, Value):  # read as is: as the Python literal's own type
            operands.append(c_literal(o, np.result_type(o) if dtype is None else dtype, dialect))
        elif dtype is None or o.dtype is dtype or o.dtype == dtype:
            operands.append(names[o])
        else:
            operands.append(f"({_C_TYPE_OF[dtype]}){names[o]}")
    name = f"v{node.id}"
    names[node.output] = name
    computed = next((t for t in types if t is not None), node.spec.dtype)  # (computed_type)
    template = fusion_of(node)
    if function_calls(template):
        template = called_functions(template, lambda f: dialect.function(f, computed))
    result_type = _C_TYPE_OF[node.spec.dtype]
    expression = template.format(*operands, dtype=result_type)
    short = format_node(node).rsplit(" : ", 1)[0]
    return f"const {result_type} {name} = {expression};", short


def fusion_of(node: Node) -> str:
    """The C template of `node`: its op's (`Op.fusion`), or the one its op gives for a Python
    float literal operand that NumPy computes otherwise (`Op.fusion_literal`: a power of 0.5 is
    a square root), for a float result."""
    for operand, literal, template in node.op.fusion_literal:
        given = node.inputs[operand] if operand < len(node.inputs) else None
        if type(given) is float and given == literal and node.spec.dtype.kind == "f":
            return template
    return node.op.fusion


def called_functions(template: str, spelling: Callable[[str], str]) -> str:
    """`template` with each function it calls renamed by `spelling` (``tanh`` -> ``tanhf``)."""
    return _CALL.sub(lambda m: spelling(m[1]) + "(", template)


@functools.cache
def function_calls(template: str) -> tuple[tuple[str, int], ...]:
    """The functions `template` calls, each with how many arguments: ``[("pow", 2)]``."""
    calls = []
    for call in _CALL.finditer(template):
        depth, commas = 0, 0
        for char in template[call.end() - 1:]:
            depth += (char == "(") - (char == ")")
            commas += char == "," and depth == 1
            if depth == 0:
                break
        calls.append((call[1], commas + 1))
    return tuple(calls)


#: A function call in a template: a name and its opening parenthesis.
_CALL = re.compile(r"\b([A-Za-z_]\w*)\(")


def aligned(lines: list[tuple[str, str]]) -> list[str]:
    """Code lines with their ``//`` comments lined up in one column (a line whose comment is
    empty has none)."""
    width = max((len(code) for code, comment in lines if comment), default=0)
    return [f"{code:<{width}}  // {comment}" if comment else code for code, comment in lines]


def operand_types(node: Node) -> list[np.dtype | None]:
    """The dtype each operand is cast to: the one NumPy computes the node in (None: as is).

    That is the node's own dtype, or for a bool result (a comparison) the operands' common
    dtype; operands the op's declaration reads as they are (`Op.fusion_as_is`) are not cast.
    NumPy compares an array with a Python int exactly, even one outside the array's range
    (``uint8_array < -3`` is all False), so such a comparison is made in a type that holds both.
    """
    as_is = _read_as_is(node.op, len(node.inputs))
    computed = node.spec.dtype
    if computed.kind != "b":
        return [None if keep else computed for keep in as_is]
    compared = [o.dtype if isinstance(o, Value) else o
                for o, keep in zip(node.inputs, as_is, strict=True) if not keep]
    if compared:
        computed = np.result_type(*compared)
        for o in compared:
            if type(o) is int and computed.kind in "iu" and not \
                    np.iinfo(computed).min <= o <= np.iinfo(computed).max:
                computed = np.result_type(computed, np.min_scalar_type(o))
    return [None if keep else computed for keep in as_is]


@functools.cache
def _read_as_is(op: Any, operands: int) -> tuple[bool, ...]:
    """For each of `op`'s first `operands` operands, whether its template reads it as is."""
    return tuple(name in op.fusion_as_is for name in op.arg_names[:operands])


def computed_type(node: Node) -> np.dtype:
    """The dtype NumPy computes `node` in: that of its operands once cast (`operand_types`),
    which is what a maths function in its template is called on."""
    return next((t for t in operand_types(node) if t is not None), node.spec.dtype)


# --- C spellings --------------------------------------------------------------------------------


def c_type(dtype: Any) -> str:
    """``float32 -> "float"``: the C type of a dtype."""
    return _C_TYPE_OF[np.dtype(dtype)]


_C_TYPE_OF = {np.dtype(name): spelled for name, spelled in C_TYPES.items()}  # (quicker)


def c_literal(value: bool | int | float, dtype: Any, dialect: Dialect = CUDA) -> str:
    """A Python literal as a C constant of `dtype`: ``2 -> "2.0f"`` for float32."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return "true" if value else "false"
    if dtype.kind in "iu":
        return _c_int(int(value), dtype)
    if dtype.kind == "c":
        z = complex(value)
        part = "float" if dtype == np.complex64 else "double"
        return (f"{c_type(dtype)}({c_literal(z.real, part, dialect)}, "
                f"{c_literal(z.imag, part, dialect)})")
    x, single = float(value), dtype != np.float64
    if math.isnan(x):
        text = dialect.nan[0 if single else 1]
    elif math.isinf(x):
        text = ("-" if x < 0 else "") + dialect.inf[0 if single else 1]
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
