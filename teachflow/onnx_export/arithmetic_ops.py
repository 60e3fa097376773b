"""Arithmetic in ONNX's words: elementwise ops, comparisons, choices, casts, and ``matmul``.

Most are one ONNX operator: ``tanh`` is ``Tanh``, ``matmul`` is ``MatMul`` (NumPy's rules for
vectors and batches are ONNX's too), and ONNX broadcasts as NumPy does (its *multidirectional*
broadcasting), so elementwise ops need nothing for that. What does need care is where the two
disagree:

- *Types.* Each operand is asked for in the dtype NumPy computes in: the result's for arithmetic,
  the operands' common dtype for a comparison (`computed_in`). ``int32 / int32`` is float64 in
  NumPy, so both operands are cast to float64 before ``Div``; ``x * 2.0`` gets a 2.0 of x's dtype.
- *Integer division.* ONNX's ``Div`` of integers truncates toward zero (C's rule), Python's
  ``//`` rounds down and its ``%`` takes the divisor's sign: ``-7 // 2`` is -4, ``-7 % 2`` is 1.
  ONNX's ``Mod(fmod=0)`` is Python's ``%`` for integers, and ``x - x % y`` is a multiple of ``y``,
  so ``(x - x % y) / y`` is the floor exactly. For floats, as NumPy computes it.
- *Types an operator does not take.* ONNX's ``Add`` has no bool version (NumPy's ``True + True``
  is logical or), ``Neg`` no unsigned one: those are written with ``Or``/``And``/``Sub``. Where
  onnxruntime's kernel lacks a type ONNX allows (``Max`` of int16, ``Where`` of bools), the op
  computes in a *carrier* dtype that holds every value, and the result is cast back
  (`teachflow.onnx_export.onnxruntime_types`); ``softplus`` of float64 is written out
  (``max(x, 0) + log1p(exp(-|x|))``). What no carrier computes is refused when exporting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from teachflow.graph import Node, Value
from teachflow.onnx_export.onnxruntime_types import KERNELS, carrier, takes

if TYPE_CHECKING:
    from teachflow.onnx_export.emitter import Convert, Emitter

BOOL, INT64 = np.dtype(bool), np.dtype(np.int64)


def computed_in(node: Node) -> np.dtype:
    """The dtype NumPy compares `node`'s operands in: their common dtype, a Python number
    taking the other operand's kind (NumPy 2's weak scalars, as teachflow's shape rules). A
    Python int that kind cannot hold (``uint8_tensor > -1``) is compared exactly, in int64."""
    dtype = np.result_type(*(x.dtype if isinstance(x, Value) else x for x in node.inputs))
    if dtype.kind in "iu" and any(isinstance(x, int) and not np.iinfo(dtype).min <= x <=
                                  np.iinfo(dtype).max for x in node.inputs):
        return np.result_type(dtype, INT64)
    return dtype


#: Ops that are one ONNX operator on operands of the result's dtype; for a bool result, the
#: operator NumPy's bool loop is (``True + True`` is True: or).
_ONE_TO_ONE = {
    "add": ("Add", "Or"), "sub": ("Sub", None), "mul": ("Mul", "And"), "div": ("Div", None),
    "maximum": ("Max", "Or"), "minimum": ("Min", "And"), "exp": ("Exp", None),
    "log": ("Log", None), "sqrt": ("Sqrt", None), "tanh": ("Tanh", None),
    "sigmoid": ("Sigmoid", None), "sign": ("Sign", None),
    "abs": ("Abs", "Identity"), "identity": ("Identity", "Identity"),
    "stop_gradient": ("Identity", "Identity"), "clone": ("Identity", "Identity"),
}


_ONE_TO_ONE |= {"sin": ("Sin", None), "cos": ("Cos", None), "erf": ("Erf", None),
                "round": ("Round", None)}
#: log2 x = ln x / ln 2 (ONNX has only the natural log).
_LN2 = np.log(2.0)


def _one_to_one(op_type: str, on_bool: str | None) -> Convert:
    def convert(e: Emitter, node: Node) -> str:
        dtype = node.spec.dtype
        if dtype == BOOL and on_bool:
            return e.add(on_bool, [e.input(x, dtype) for x in node.inputs])
        return in_carrier(e, op_type, node.inputs, dtype)
    return convert


def in_carrier(e: Emitter, op_type: str, operands: Any, dtype: np.dtype) -> str:
    """`op_type` of `operands` computed in `dtype`, or in the carrier dtype onnxruntime takes
    for it (see `onnxruntime_types.carrier`), cast back to `dtype`."""
    inner = carrier(op_type, dtype)
    out = e.add(op_type, [e.input(x, inner) for x in operands])
    return out if inner == dtype else e.cast(out, dtype)


def _neg(e: Emitter, node: Node) -> str:
    dtype = node.spec.dtype
    x = e.input(node.inputs[0], dtype)
    if dtype.kind == "u":  # NumPy wraps around (-1 is 255 in uint8); ONNX's Neg is signed only
        return e.add("Sub", [e.input(0, dtype), x])
    return e.add("Neg", [x])


def _pow(e: Emitter, node: Node) -> str:
    """In a wider integer type for the narrow ones (their powers wrap there as in NumPy, once
    cast back)."""
    return in_carrier(e, "Pow", node.inputs, node.spec.dtype)


def _softplus(e: Emitter, node: Node) -> str:
    """ONNX's Softplus where onnxruntime has it (float32); else as NumPy's logaddexp(0, x)
    computes it, max(x, 0) + log1p(exp(-|x|)), with log1p(y) = log(u) * y / (u - 1) for
    u = 1 + y (Goldberg's: exact where log(1 + y) alone loses y's digits), y where u is 1."""
    dtype = node.spec.dtype
    x = e.input(node.inputs[0], dtype)
    if takes("Softplus", dtype):
        return e.add("Softplus", [x])
    y = e.add("Exp", [e.add("Neg", [e.add("Abs", [x])])])
    u = e.add("Add", [e.input(1, dtype), y])
    below = e.add("Sub", [u, e.input(1, dtype)])
    ratio = e.add("Div", [e.add("Mul", [e.add("Log", [u]), y]), below])
    log1p = e.add("Where", [e.add("Equal", [below, e.input(0, dtype)]), y, ratio])
    return e.add("Add", [e.add("Max", [x, e.input(0, dtype)]), log1p])


def _log2(e: Emitter, node: Node) -> str:
    dtype = node.spec.dtype
    return e.add("Div", [in_carrier(e, "Log", node.inputs, dtype), e.input(float(_LN2), dtype)])


def _rsqrt(e: Emitter, node: Node) -> str:
    x = e.input(node.inputs[0], node.spec.dtype)
    return e.add("Reciprocal", [e.add("Sqrt", [x])])


def _rounding(op_type: str) -> Convert:
    """``Floor``, ``Ceil`` of floats; NumPy rounds an integer (or a bool) to itself."""
    def convert(e: Emitter, node: Node) -> str:
        dtype = node.spec.dtype
        x = e.input(node.inputs[0], dtype)
        return e.add(op_type if dtype.kind == "f" else "Identity", [x])
    return convert


def _float_test(op_type: str) -> Convert:
    """``IsNaN``, ``IsInf`` of floats; an integer (never NaN nor infinite) is asked for as a
    float64, float16 as a float32 where the kernel lacks it: both exact."""
    def convert(e: Emitter, node: Node) -> str:
        x = node.inputs[0]
        dtype = x.dtype if x.dtype.name in KERNELS[op_type]["T1"].split() else \
            np.dtype(np.float32 if x.dtype == np.float16 else np.float64)
        return e.add(op_type, [e.input(x, dtype)])
    return convert


def _relu(e: Emitter, node: Node) -> str:
    dtype = node.spec.dtype
    x = e.input(node.inputs[0], dtype)
    if dtype.kind in "ub":  # nothing is below zero
        return e.add("Identity", [x])
    if dtype.kind == "i":  # ONNX's Relu takes ints, but runtimes seldom implement them
        return in_carrier(e, "Max", [node.inputs[0], 0], dtype)
    return e.add("Relu", [x])


def _clip(e: Emitter, node: Node) -> str:
    """minimum(maximum(x, lo), hi), as NumPy computes it: ONNX's Clip takes only scalar
    bounds, and teachflow's may be tensors."""
    dtype = node.spec.dtype
    if dtype == BOOL:
        x, lo, hi = (e.input(v, dtype) for v in node.inputs)
        return e.add("And", [e.add("Or", [x, lo]), hi])
    inner = carrier("Max", dtype)
    x, lo, hi = (e.input(v, inner) for v in node.inputs)
    out = e.add("Min", [e.add("Max", [x, lo]), hi])
    return out if inner == dtype else e.cast(out, dtype)


def _fmod(e: Emitter, x: str, y: str, dtype: np.dtype) -> tuple[str, str]:
    """C's remainder of floats, fmod (with the dividend's sign), and where Python's differs:
    where it is not 0 and its sign is not the divisor's (there Python's is ``r + y``)."""
    r = e.add("Mod", [x, y], fmod=1)
    zero = e.input(0, dtype)
    differ = e.add("Xor", [e.add("Less", [y, zero]), e.add("Less", [r, zero])])
    return r, e.add("And", [differ, e.add("Not", [e.add("Equal", [r, zero])])])


def _guarded(e: Emitter, x: str, y: str, dtype: np.dtype, divide: Callable[[str, str], str],
             quotient: bool) -> str:
    """`divide` where y is not 0, and what NumPy gives where it is: 0 for integers (a runtime's
    integer division by 0 may crash the process), ``x / 0`` (inf or nan) for a float quotient.
    (A float remainder by 0 is fmod's nan already.)"""
    if dtype.kind == "f" and not quotient:
        return divide(x, y)
    zero = e.input(0, dtype)
    is_zero = e.add("Equal", [y, zero])
    if dtype.kind == "f":
        return e.add("Where", [is_zero, e.add("Div", [x, y]), divide(x, y)])
    safe = e.add("Where", [is_zero, e.input(1, dtype), y])
    return e.add("Where", [is_zero, zero, divide(x, safe)])


def _python_remainder(e: Emitter, x: str, y: str, dtype: np.dtype) -> str:
    """``x % y`` with Python's sign (the divisor's): ONNX's Mod for integers, fmod moved by y
    for floats (ONNX has only fmod for floats)."""
    if dtype.kind != "f":
        return e.add("Mod", [x, y], fmod=0)
    r, moved = _fmod(e, x, y, dtype)
    return e.add("Where", [moved, e.add("Add", [r, y]), r])


def _floor_quotient(e: Emitter, x: str, y: str, dtype: np.dtype) -> str:
    """``x // y`` = (x - x % y) / y: exact for integers. For floats, NumPy rounds that quotient
    (an integer, up to rounding) with fmod's remainder, one less where Python's remainder
    differs."""
    if dtype.kind != "f":
        return e.add("Div", [e.add("Sub", [x, _python_remainder(e, x, y, dtype)]), y])
    r, moved = _fmod(e, x, y, dtype)
    quotient = e.add("Round", [e.add("Div", [e.add("Sub", [x, r]), y])])
    return e.add("Where", [moved, e.add("Sub", [quotient, e.input(1, dtype)]), quotient])


def _division(kind: Callable[[Emitter, str, str, np.dtype], str], quotient: bool) -> Convert:
    """In the result's dtype, or a wider one where onnxruntime's Where lacks it (int16)."""
    def convert(e: Emitter, node: Node) -> str:
        dtype = node.spec.dtype
        inner = carrier("Where", dtype)
        x, y = (e.input(v, inner) for v in node.inputs)
        out = _guarded(e, x, y, inner, lambda a, b: kind(e, a, b, inner), quotient)
        return out if inner == dtype else e.cast(out, dtype)
    return convert


def _compare(op_type: str, negate: bool = False) -> Convert:
    def convert(e: Emitter, node: Node) -> str:
        dtype = computed_in(node)
        if dtype == BOOL and op_type != "Equal":  # ONNX orders numbers only
            dtype = np.dtype(np.uint8)
        out = e.add(op_type, [e.input(x, dtype) for x in node.inputs])
        return e.add("Not", [out]) if negate else out
    return convert


def _where(e: Emitter, node: Node) -> str:
    """A choice moves values unchanged: any carrier of the same bits will do (bools in uint8)."""
    cond, x, y = node.inputs
    dtype = node.spec.dtype
    inner = carrier("Where", dtype, same_bits=True)
    out = e.add("Where", [e.input(cond, BOOL), e.input(x, inner), e.input(y, inner)])
    return out if inner == dtype else e.cast(out, dtype)


def _astype(e: Emitter, node: Node) -> str:
    return e.add("Cast", [e.input(node.inputs[0])], to=e.onnx_dtype(node.params["dtype"]))


def _matmul(e: Emitter, node: Node) -> str:
    """Narrow integers (and bools: a sum of products is nonzero where NumPy's or of ands is
    true) in a wider type, where their sums of products wrap as NumPy's do once cast back."""
    return in_carrier(e, "MatMul", node.inputs, node.spec.dtype)


#: The comparisons, each one ONNX operator (``ne`` is ``Equal``, negated).
_COMPARISONS = {"lt": "Less", "le": "LessOrEqual", "gt": "Greater", "ge": "GreaterOrEqual",
                "eq": "Equal"}

#: Converters by op name (`teachflow.onnx_export.emitter.CONVERTERS` has every module's).
CONVERTERS: dict[str, Convert] = {
    **{name: _one_to_one(*op_types) for name, op_types in _ONE_TO_ONE.items()},
    **{name: _compare(op_type) for name, op_type in _COMPARISONS.items()},
    "ne": _compare("Equal", negate=True),
    "remainder": _division(_python_remainder, quotient=False),
    "floor_divide": _division(_floor_quotient, quotient=True),
    "neg": _neg, "pow": _pow, "softplus": _softplus, "relu": _relu, "clip": _clip,
    "where": _where, "astype": _astype, "matmul": _matmul,
}
CONVERTERS |= {"log2": _log2, "rsqrt": _rsqrt, "isnan": _float_test("IsNaN"),
               "isinf": _float_test("IsInf"), "floor": _rounding("Floor"),
               "ceil": _rounding("Ceil")}
