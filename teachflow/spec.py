"""TensorSpec: what is known about a tensor without its values.

Shape, dtype and device are all that an op's shape rule needs, all that tracing keeps of an
argument (binding-time analysis: values are dynamic, these are static), and what the graph prints
beside every node, as in ``f32[64,128]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachflow.errors import DTypeError, ShapeError

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


@dataclass(frozen=True)
class TensorSpec:
    """The static part of a tensor: ``shape`` (a tuple; None marks a dimension not yet known),
    ``dtype`` (a NumPy dtype) and ``device`` ("cpu" or "gpu")."""

    shape: tuple[int | None, ...]
    dtype: np.dtype
    device: str = "cpu"

    def __post_init__(self) -> None:
        # Made for every op while tracing: the common case (a tuple of ints, a dtype) is let
        # through as it is; anything else is checked and normalised.
        if type(self.shape) is not tuple or not all(type(d) is int for d in self.shape):
            object.__setattr__(self, "shape", _checked_shape(self.shape))
        if not isinstance(self.dtype, np.dtype):
            try:
                object.__setattr__(self, "dtype", np.dtype(self.dtype))
            except TypeError:
                raise DTypeError(f"{self.dtype!r} is not a dtype", op="TensorSpec",
                                 hint="use a NumPy dtype name such as 'float32' or 'int64'"
                                 ) from None

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


def _checked_shape(shape: Any) -> tuple:
    if not isinstance(shape, tuple | list) or not all(
            d is None or (isinstance(d, int | np.integer) and d >= 0) for d in shape):
        raise ShapeError(f"a TensorSpec's shape is a tuple of sizes (None where unknown), not "
                         f"{shape!r}", op="TensorSpec",
                         hint='e.g. tfl.TensorSpec((None, 3), "float32")')
    return tuple(None if d is None else int(d) for d in shape)


def short_dtype(dtype: Any) -> str:
    """``float32 -> "f32"``: the compact dtype names the graph printer uses."""
    name = np.dtype(dtype).name
    return _SHORT_DTYPE.get(name, name)
