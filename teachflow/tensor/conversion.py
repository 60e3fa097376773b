"""Turning Python and NumPy data into arrays: dtypes, constants and shapes as ops take them.

`tfl.tensor([1.0, 2.0])` is float32, as in PyTorch (NumPy would say float64); a NumPy scalar
operand acts as the Python number it holds; ``f(2, 3)`` and ``f((2, 3))`` give one shape. Every
conversion that can fail says why in teachflow's terms (a `DTypeError`, a `ShapeError`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from teachflow.autodiff.tape import Tracked
from teachflow.core.backends import Backend, backend_of_array
from teachflow.core.errors import DTypeError, ShapeError
from teachflow.core.spec import is_int


def to_array(data: Any, dtype: Any, backend: Backend, copy: bool) -> Any:
    """`data` as an array of `backend`; Python floats become float32 unless a dtype is given."""
    if isinstance(data, Tracked):
        data = data._data
    dtype = as_dtype(dtype, "tensor") if dtype is not None else None
    try:
        if dtype is None and not hasattr(data, "dtype"):
            dtype = DEFAULT_FOR_PYTHON.get(np.asarray(data).dtype)
        array = backend.asarray(data, dtype=dtype)
    except (ValueError, TypeError) as exc:
        raise ShapeError(f"cannot make a tensor from this {type(data).__name__}: {exc}",
                         op="tensor", hint="pass numbers, or nested lists of numbers that "
                                           "form a rectangle") from exc
    if array.dtype.kind not in "biufc":
        raise DTypeError(f"cannot make a tensor of {array.dtype} values from "
                         f"{type(data).__name__} data", op="tensor",
                         hint="tensors hold numbers or booleans")
    if copy and not isinstance(data, list | tuple | bool | int | float | complex):
        array = array.copy()  # an array, or an object sharing its buffer: our own values
    return array


# Python numbers become the framework defaults, not NumPy's 64-bit floats.
DEFAULT_FOR_PYTHON = {np.dtype(np.float64): np.float32, np.dtype(np.complex128): np.complex64}


def default_dtype(*numbers: Any) -> np.dtype:
    """The dtype a tensor made from these Python numbers together gets: NumPy's, with floats
    float32 rather than float64 (the framework default)."""
    dtype = np.result_type(*numbers)
    return np.dtype(DEFAULT_FOR_PYTHON.get(dtype, dtype))


def as_dtype(dtype: Any, op: str) -> np.dtype:
    """A NumPy dtype from a name or type (``"float32"``, ``np.float32``), or a DTypeError."""
    try:
        result = np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"{dtype!r} is not a dtype", op=op,
                         hint="use a NumPy dtype name such as 'float32', 'int64' or 'bool'"
                         ) from None
    if result.kind not in "biufc":
        raise DTypeError(f"{result} is not a dtype of numbers: tensors hold numbers or booleans",
                         op=op, hint="use a NumPy dtype name such as 'float32', 'int64' or "
                                     "'bool'")
    return result


def as_constant(x: Any) -> Any:
    """A non-tensor operand as an op takes it. A NumPy scalar (``np.float64(2.0)``,
    ``np.sqrt(64)``, ``np.int64(3)``, ``np.bool_(True)``) becomes the Python scalar it holds, so it
    acts exactly as that Python scalar would (weak, taking the tensor's dtype) in every mode;
    NumPy arrays keep their dtype; lists follow `tfl.tensor`'s rules (floats -> float32)."""
    if x is None:
        raise DTypeError("None is not a tensor", op="operand",
                         hint="a .grad is None until backward() has run, and a size of a "
                              "graph's input (placeholder) is None until the graph runs; check "
                              "the value you passed")
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, bool | int | float):  # a subclass (an IntEnum, ``t.size``): its number
        return x if type(x) is bool else int(x) if isinstance(x, int) else float(x)
    if isinstance(x, np.ndarray):
        return x
    return to_array(x, None, backend_of_array(x), copy=False)


def shape_arg(shape: tuple, op: str, unknown_ok: bool = False) -> tuple[int, ...]:
    """Accept ``f(2, 3)`` and ``f((2, 3))`` alike; sizes must be non-negative integers (one
    may be -1, "whatever is left", where `unknown_ok`)."""
    if len(shape) == 1 and not is_int(shape[0]):
        shape = shape[0]
    if isinstance(shape, Sequence) and any(d is None for d in shape):
        raise ShapeError(f"the shape {tuple(shape)} has a size known only when the graph runs "
                         "(None): it cannot be given as a size", op=op,
                         hint="let the op take sizes from a tensor (tfl.zeros_like(x)), or use "
                              "-1 in a reshape")
    if not isinstance(shape, Sequence) or not all(is_int(d) for d in shape):
        raise DTypeError(f"a shape must be a sequence of integers, got {shape!r}", op=op)
    shape = tuple(int(d) for d in shape)
    smallest = -1 if unknown_ok else 0
    if any(d < smallest for d in shape) or shape.count(-1) > 1:
        raise ShapeError(f"invalid shape {shape}", op=op,
                         hint="sizes must be >= 0" + (" (one may be -1)" if unknown_ok else ""))
    return shape
