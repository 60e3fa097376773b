"""TensorSpec: what is known about a tensor without its values.

Shape, dtype and device are all that an op's shape rule needs, all that tracing keeps of an
argument (binding-time analysis: values are dynamic, these are static), and what the graph prints
beside every node, as in ``f32[64,128]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from teachflow.core.backends import device_name
from teachflow.core.errors import DTypeError, ShapeError

_INTEGERS = (int, np.integer)  # (a tuple: ``int | np.integer`` would be made at every call)


def is_int(x: Any) -> bool:
    """A size, an axis or a position: a Python or NumPy integer, never a bool (NumPy and
    PyTorch refuse ``x.sum(axis=True)``, though ``True == 1``)."""
    return type(x) is int or (isinstance(x, _INTEGERS) and not isinstance(x, bool))


_SHORT_DTYPE = {
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "bool": "bool",
    "complex64": "c64",
    "complex128": "c128",
}


FLOAT32 = np.dtype("float32")


@dataclass(frozen=True)
class TensorSpec:
    """The static part of a tensor: ``shape`` (a tuple; None marks a dimension not yet known),
    ``dtype`` (a NumPy dtype; float32 unless given) and ``device`` ("cpu" or "gpu")."""

    shape: tuple[int | None, ...]
    dtype: np.dtype = FLOAT32  # TensorFlow's default, and teachflow's
    device: str = "cpu"

    def __post_init__(self) -> None:
        # Made for every op while tracing: the common case (a tuple of ints, a dtype) is let
        # through as it is; anything else is checked and normalised.
        if type(self.shape) is not tuple or not all(type(d) is int and d >= 0 for d in self.shape):
            object.__setattr__(self, "shape", checked_shape(self.shape))
        if not isinstance(self.dtype, np.dtype):
            if self.dtype is None:  # np.dtype(None) would be float64
                object.__setattr__(self, "dtype", FLOAT32)
            try:
                object.__setattr__(self, "dtype", np.dtype(self.dtype))
            except TypeError:
                raise DTypeError(f"{self.dtype!r} is not a dtype", op="TensorSpec",
                                 hint="use a NumPy dtype name such as 'float32' or 'int64'"
                                 ) from None
            if self.dtype.kind not in "biufc":
                raise DTypeError(f"{self.dtype} is not a dtype of numbers: tensors hold numbers "
                                 "or booleans", op="TensorSpec",
                                 hint="use a NumPy dtype name such as 'float32' or 'int64'")
        if self.device not in ("cpu", "gpu"):  # a spelling ("cuda", "cuda:0"), or a mistake
            object.__setattr__(self, "device", device_name(self.device))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements (-1 while a size is unknown). Python ints: never overflows."""
        return math.prod(self.shape) if None not in self.shape else -1

    def __str__(self) -> str:
        dims = ",".join("?" if d is None else str(d) for d in self.shape)
        return f"{short_dtype(self.dtype)}[{dims}]"


def checked_shape(shape: Any, op: str = "TensorSpec") -> tuple[int | None, ...]:
    """A shape as a tuple of sizes, None where unknown (an int alone is a 1-d shape)."""
    if is_int(shape):
        shape = (shape,)
    if not isinstance(shape, tuple | list) or not all(
            d is None or (is_int(d) and d >= 0) for d in shape):
        example = 'tfl.TensorSpec((None, 3), "float32")' if op == "TensorSpec" \
            else f"tfl.{op}((None, 3))"
        raise ShapeError(f"a shape is a tuple of sizes (None where unknown, never negative), "
                         f"not {shape!r}", op=op, hint=f"e.g. {example}")
    return tuple(None if d is None else int(d) for d in shape)


@cache
def short_dtype(dtype: Any) -> str:
    """``float32 -> "f32"``: the compact dtype names the graph printer uses."""
    name = np.dtype(dtype).name
    return _SHORT_DTYPE.get(name, name)
