"""teachflow's ops in ONNX's words: one converter per op, and the ops that have no equivalent.

A converter takes the `Emitter` and a teachflow node, appends the ONNX nodes that compute the
node's result, and returns that result's name. Most are one ONNX operator: ``tanh`` is ``Tanh``,
``matmul`` is ``MatMul`` (NumPy's rules for vectors and batches are ONNX's too), and ONNX
broadcasts as NumPy does (its *multidirectional* broadcasting), so elementwise ops need nothing
for that. What does need care is where the two disagree:

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

`REFUSED` says why an op has no converter; `teachflow.onnx_export.index_ops` converts indexing and
`teachflow.onnx_export.control_flow` control flow. A test checks that every op teachflow declares is
converted or refused, so a new op cannot be forgotten.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from teachflow.graph import Node, Value
from teachflow.onnx_export.onnxruntime_types import carrier, takes

if TYPE_CHECKING:
    from teachflow.onnx_export.emitter import Emitter

Convert = Callable[["Emitter", Node], Any]

#: Converters by op name (`teachflow.onnx_export.emitter.CONVERTERS` has them all).
CONVERTERS: dict[str, Convert] = {}

_RANDOM = ("ONNX's {} draws from onnxruntime's own generator, so the model could never compute "
           "the numbers teachflow computes, whatever the seed; put a module in eval() mode (no "
           "dropout), or pass the random numbers in as an argument")

#: The ops that cannot be exported, and why.
REFUSED: dict[str, str] = {"normal": _RANDOM.format("RandomNormal"),
                           "uniform": _RANDOM.format("RandomUniform")}

BOOL, INT64, FLOAT32 = np.dtype(bool), np.dtype(np.int64), np.dtype(np.float32)


def converts(*names: str) -> Callable[[Convert], Convert]:
    def register(convert: Convert) -> Convert:
        for name in names:
            CONVERTERS[name] = convert
        return convert
    return register


def computed_in(node: Node) -> np.dtype:
    """The dtype NumPy compares `node`'s operands in: their common dtype, a Python number
    taking the other operand's kind (NumPy 2's weak scalars, as teachflow's shape rules). A
    Python int that kind cannot hold (``uint8_tensor > -1``) is compared exactly, in int64."""
    dtype = np.result_type(*(x.dtype if isinstance(x, Value) else x for x in node.inputs))
    if dtype.kind in "iu" and any(isinstance(x, int) and not np.iinfo(dtype).min <= x <=
                                  np.iinfo(dtype).max for x in node.inputs):
        return np.result_type(dtype, INT64)
    return dtype


# --- Elementwise --------------------------------------------------------------------------------

#: Ops that are one ONNX operator on operands of the result's dtype; for a bool result, the
#: operator NumPy's bool loop is (``True + True`` is True: or).
_ONE_TO_ONE = {
    "add": ("Add", "Or"), "sub": ("Sub", None), "mul": ("Mul", "And"), "div": ("Div", None),
    "maximum": ("Max", "Or"), "minimum": ("Min", "And"), "exp": ("Exp", None),
    "log": ("Log", None), "sqrt": ("Sqrt", None), "tanh": ("Tanh", None),
    "sigmoid": ("Sigmoid", None), "sign": ("Sign", None),
    "abs": ("Abs", "Identity"), "identity": ("Identity", "Identity"),
    "stop_gradient": ("Identity", "Identity"), "copy": ("Identity", "Identity"),
}


def _one_to_one(op_type: str, on_bool: str | None) -> Convert:
    def convert(e: Emitter, node: Node) -> str:
        dtype = node.spec.dtype
        if dtype == BOOL and on_bool:
            return e.add(on_bool, [e.input(x, dtype) for x in node.inputs])
        return in_carrier(e, op_type, node.inputs, dtype)
    return convert


def in_carrier(e: Emitter, op_type: str, operands: Any, dtype: np.dtype) -> str:
    """`op_type` of `operands` computed in `dtype`, or in the carrier dtype onnxruntime takes
    for it (see `runtime.carrier`), cast back to `dtype`."""
    inner = carrier(op_type, dtype)
    out = e.add(op_type, [e.input(x, inner) for x in operands])
    return out if inner == dtype else e.cast(out, dtype)


for _name, (_op_type, _on_bool) in _ONE_TO_ONE.items():
    CONVERTERS[_name] = _one_to_one(_op_type, _on_bool)


@converts("to_device")
def _to_device(e: Emitter, node: Node) -> str:
    """ONNX has no devices: the runtime decides where the model runs."""
    return e.add("Identity", [e.input(node.inputs[0])])


@converts("neg")
def _neg(e: Emitter, node: Node) -> str:
    dtype = node.spec.dtype
    x = e.input(node.inputs[0], dtype)
    if dtype.kind == "u":  # NumPy wraps around (-1 is 255 in uint8); ONNX's Neg is signed only
        return e.add("Sub", [e.input(0, dtype), x])
    return e.add("Neg", [x])


@converts("pow")
def _pow(e: Emitter, node: Node) -> str:
    """In a wider integer type for the narrow ones (their powers wrap there as in NumPy, once
    cast back)."""
    return in_carrier(e, "Pow", node.inputs, node.spec.dtype)


@converts("softplus")
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


@converts("relu")
def _relu(e: Emitter, node: Node) -> str:
    dtype = node.spec.dtype
    x = e.input(node.inputs[0], dtype)
    if dtype.kind in "ub":  # nothing is below zero
        return e.add("Identity", [x])
    if dtype.kind == "i":  # ONNX's Relu takes ints, but runtimes seldom implement them
        return in_carrier(e, "Max", [node.inputs[0], 0], dtype)
    return e.add("Relu", [x])


@converts("clip")
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


CONVERTERS["remainder"] = _division(_python_remainder, quotient=False)
CONVERTERS["floor_divide"] = _division(_floor_quotient, quotient=True)


def _compare(op_type: str, negate: bool = False) -> Convert:
    def convert(e: Emitter, node: Node) -> str:
        dtype = computed_in(node)
        if dtype == BOOL and op_type != "Equal":  # ONNX orders numbers only
            dtype = np.dtype(np.uint8)
        out = e.add(op_type, [e.input(x, dtype) for x in node.inputs])
        return e.add("Not", [out]) if negate else out
    return convert


for _name, _op_type in (("lt", "Less"), ("le", "LessOrEqual"), ("gt", "Greater"),
                        ("ge", "GreaterOrEqual"), ("eq", "Equal")):
    CONVERTERS[_name] = _compare(_op_type)
CONVERTERS["ne"] = _compare("Equal", negate=True)


@converts("where")
def _where(e: Emitter, node: Node) -> str:
    """A choice moves values unchanged: any carrier of the same bits will do (bools in uint8)."""
    cond, x, y = node.inputs
    dtype = node.spec.dtype
    inner = carrier("Where", dtype, same_bits=True)
    out = e.add("Where", [e.input(cond, BOOL), e.input(x, inner), e.input(y, inner)])
    return out if inner == dtype else e.cast(out, dtype)


@converts("astype")
def _astype(e: Emitter, node: Node) -> str:
    return e.add("Cast", [e.input(node.inputs[0])], to=e.onnx_dtype(node.params["dtype"]))


# --- Reductions ---------------------------------------------------------------------------------


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


@converts("sum")
def _sum(e: Emitter, node: Node) -> str:
    """In the result's dtype, as NumPy sums (int32 elements add up in int64); a uint64 sum in
    int64, whose sums wrap alike."""
    dtype = node.spec.dtype
    inner = carrier("ReduceSum", dtype, same_bits=True)
    out = reduce(e, "ReduceSum", e.input(node.inputs[0], inner), node.params["axis"],
                 node.params["keepdims"])
    return out if inner == dtype else e.cast(out, dtype)


@converts("mean")
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


CONVERTERS["max"] = _extreme("ReduceMax", "Max")
CONVERTERS["min"] = _extreme("ReduceMin", "Min")


@converts("log_softmax")
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


CONVERTERS["argmax"] = _position("ArgMax")
CONVERTERS["argmin"] = _position("ArgMin")


@converts("count_of")
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


# --- Matrices -----------------------------------------------------------------------------------


@converts("matmul")
def _matmul(e: Emitter, node: Node) -> str:
    """Narrow integers (and bools: a sum of products is nonzero where NumPy's or of ands is
    true) in a wider type, where their sums of products wrap as NumPy's do once cast back."""
    return in_carrier(e, "MatMul", node.inputs, node.spec.dtype)


# --- Shapes -------------------------------------------------------------------------------------


@converts("reshape")
def _reshape(e: Emitter, node: Node) -> str:
    shape = node.params["shape"]
    # ONNX reads a 0 in a shape as "keep this size" unless told otherwise (allowzero, which
    # cannot go with a -1): NumPy's 0 is a size of 0.
    zero = {"allowzero": 1} if 0 in shape and -1 not in shape else {}
    return e.add("Reshape", [e.input(node.inputs[0]), e.ints(shape)], **zero)


@converts("transpose")
def _transpose(e: Emitter, node: Node) -> str:
    return e.add("Transpose", [e.input(node.inputs[0])], perm=list(node.params["axes"]))


@converts("broadcast_to")
def _broadcast_to(e: Emitter, node: Node) -> str:
    return e.add("Expand", [e.input(node.inputs[0]), e.ints(node.params["shape"])])


@converts("concatenate")
def _concatenate(e: Emitter, node: Node) -> str:
    dtype = node.spec.dtype
    return e.add("Concat", [e.input(x, dtype) for x in node.inputs], axis=node.params["axis"])


@converts("stack")
def _stack(e: Emitter, node: Node) -> str:
    dtype, axis = node.spec.dtype, node.params["axis"]
    grown = [e.add("Unsqueeze", [e.input(x, dtype), e.ints([axis])]) for x in node.inputs]
    return e.add("Concat", grown, axis=axis)


def shape_of(e: Emitter, like: Value) -> str:
    """`like`'s shape: a constant when it is known, else read when the model runs."""
    if None in like.shape:
        return e.add("Shape", [e.input(like)])
    return e.ints(like.shape)


@converts("broadcast_like")
def _broadcast_like(e: Emitter, node: Node) -> str:
    x, like = node.inputs
    return e.add("Expand", [e.input(x), shape_of(e, like)])


@converts("reshape_like")
def _reshape_like(e: Emitter, node: Node) -> str:
    x, like = node.inputs
    return e.add("Reshape", [e.input(x), shape_of(e, like)])


@converts("sum_like")
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


# --- Making values ------------------------------------------------------------------------------


@converts("full")
def _full(e: Emitter, node: Node) -> str:
    p = node.params
    value = e.tensor(np.full(1, p["fill_value"], dtype=p["dtype"]))
    return e.add("ConstantOfShape", [e.ints(p["shape"])], value=value)


@converts("arange")
def _arange(e: Emitter, node: Node) -> str:
    """``Range`` in int64 or float64, where NumPy counts the values (so the length is NumPy's),
    then cast to the dtype asked for."""
    p, dtype = node.params, node.spec.dtype
    limits = (p["start"], p["stop"], p["step"])
    inner = INT64 if all(isinstance(v, int) for v in limits) else np.dtype(np.float64)
    out = e.add("Range", [e.input(v, inner) for v in limits])
    return out if inner == dtype else e.cast(out, dtype)


@converts("eye")
def _eye(e: Emitter, node: Node) -> str:
    p, dtype = node.params, node.spec.dtype
    inner = carrier("EyeLike", dtype)
    zeros = e.add("ConstantOfShape", [e.ints([p["n"], p["m"]])],
                  value=e.tensor(np.zeros(1, dtype=inner)))
    out = e.add("EyeLike", [zeros])
    return out if inner == dtype else e.cast(out, dtype)
