"""Conversions, both ways: Python and NumPy data into arrays (dtypes, constants and shapes as
ops take them), and a tensor into other things: ``t.numpy()``, ``t.item()``, ``float(t)``,
``t.astype("float64")``, ``t.to("gpu")``.

`tfl.tensor([1.0, 2.0])` is float32, as in PyTorch (NumPy would say float64); a NumPy scalar
operand acts as the Python number it holds; ``f(2, 3)`` and ``f((2, 3))`` give one shape. Every
conversion that can fail says why in teachflow's terms (a `DTypeError`, a `ShapeError`). `Tensor`
inherits its conversions from `Conversion`; ``np.asarray(t)`` is NumPy's protocol
(`teachflow.tensor.interop`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from teachflow.autodiff.tape import Tracked
from teachflow.core import dispatch
from teachflow.core.backends import Backend, backend_of_array, get_backend, is_device_name
from teachflow.core.dispatch import bind
from teachflow.core.errors import DeviceError, DTypeError, ShapeError
from teachflow.core.spec import is_int
from teachflow.graph import Value
from teachflow.ops import creation
from teachflow.ops import elementwise as ew
from teachflow.tensor.habits import ForeignName

if TYPE_CHECKING:
    from teachflow.tensor.tensor import Tensor


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


class Conversion:
    """A tensor as a NumPy array, a Python number or list, another dtype or another device (a
    mixin of `Tensor`)."""

    __slots__ = ()

    # --- Values out ---------------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """The values as a read-only NumPy array (copied to the host for a GPU tensor).

        On the CPU it shares memory with the tensor, so it is read-only: writing to it would
        silently change values the tape saved for backward. Use ``.numpy().copy()`` to edit.
        While tracing, values exist only when the graph runs: reading them raises `TraceError`.
        """
        array = dispatch.current_interpreter().values(self)
        if array is self._data:
            array = array.view()
            array.flags.writeable = False
        return array

    def item(self) -> float | int | bool:
        """The single value of a one-element tensor, as a Python number."""
        if self.spec.size != 1:
            raise ShapeError(f"item() needs a tensor with one element, this one has shape "
                             f"{self.shape}", op="item", hint="index or reduce it first")
        return self.numpy().item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        if self.spec.size != 1:
            raise ShapeError(
                f"the truth value of a tensor with shape {self.shape} is ambiguous",
                op="bool", hint="compare one element (t[0] > 0) or a reduction (t.sum() > 0); "
                     "t.item() gives the value of a one-element tensor")
        if isinstance(self._data, Value):
            return bool(self._data)  # raises: tracing cannot choose a path by a value
        return bool(self.numpy())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.kind not in "iub":
            raise DTypeError(f"only integer tensors can be used as an index, not {self.dtype}",
                             op="index")
        return int(self.item())

    def __format__(self, spec: str) -> str:
        """``f"{loss:.4f}"``: a one-element tensor formats as its number."""
        if not spec:
            return str(self)
        if self.spec.size != 1:
            raise ShapeError(f"a format such as {spec!r} needs a one-element tensor, this one "
                             f"has shape {self.shape}", op="format",
                             hint="format t.item(), or np.array2string(t.numpy())")
        return format(self.item(), spec)

    # --- Other dtypes and devices -------------------------------------------------------------

    def astype(self, dtype: Any) -> Tensor:
        dtype = as_dtype(dtype, "astype")
        return self if dtype == self.dtype else bind(ew.astype, self, dtype=dtype)

    def to(self, *where: Any, device: str | None = None, dtype: Any = None) -> Tensor:
        """A copy of this tensor on `device` ("cpu", a logical "cpu:1", ... or "gpu"), as
        `dtype`; itself if it is that already.
        As PyTorch's, either may be given by position (``x.to("gpu")``, ``x.to(tfl.float64)``,
        ``x.to("gpu", tfl.float16)``), or another tensor, whose device and dtype it takes."""
        for arg in where:
            if isinstance(arg, Tracked):
                device, dtype = device or arg.device, dtype or arg.dtype
            elif isinstance(arg, str) and is_device_name(arg):
                device = arg
            else:
                try:
                    dtype = as_dtype(arg, "to")
                except DTypeError:
                    # A word that is no dtype was most likely meant as a device (PyTorch's too).
                    error = DeviceError if isinstance(arg, str) else DTypeError
                    raise error(f"x.to({arg!r}): {arg!r} is neither a device nor a dtype",
                                op="to", hint="devices are 'cpu' (its logical devices "
                                              "'cpu:1', ...) and 'gpu' (or 'cuda'): "
                                              "x.to('gpu'), x.to('float64'), or both: "
                                              "x.to('gpu', 'float16')") from None
        result = self if dtype is None else self.astype(dtype)
        if device is None:
            return result
        backend = get_backend(device)
        return result if backend is result._backend else bind(creation.to_device, result,
                                                              device=backend.name)

    def cpu(self) -> Tensor:
        return self.to("cpu")

    # --- PyTorch's and NumPy's names for the above, which teachflow spells otherwise ----------

    numpy_ = ForeignName("x.numpy()")
    to_numpy = ForeignName("x.numpy()")
    long = ForeignName("x.astype('int64')")
    int = ForeignName("x.astype('int32')")
    float = ForeignName("x.astype('float32')")
    double = ForeignName("x.astype('float64')")
    half = ForeignName("x.astype('float16')")
    bool = ForeignName("x.astype('bool')")
    type = ForeignName("x.astype(dtype) (and x.dtype to read it)")
    cuda = ForeignName("x.to('gpu')")
    is_cuda = ForeignName("x.device == 'gpu'")
    cpu_ = ForeignName("x.cpu()")
