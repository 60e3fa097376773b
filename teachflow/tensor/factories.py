"""Making tensors: from data, filled with a constant, or random.

Python floats become float32, the default of deep-learning frameworks (NumPy would pick float64);
a NumPy array keeps its dtype. `zeros`, `ones`, `full`, `arange`, `linspace`, `eye`, `randn`,
`rand` and `randint` are ops (see `teachflow.ops.creation`), so inside a staged function they
become nodes of the graph.
A tensor is made on the device asked for, else the one ``with tfl.device(...)`` pins, else the
CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from teachflow.core import dispatch
from teachflow.core.backends import default_device
from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError, ShapeError
from teachflow.core.random import manual_seed
from teachflow.ops import creation
from teachflow.ops import shape as shape_ops
from teachflow.tensor.conversion import as_dtype, shape_arg
from teachflow.tensor.tensor import Tensor, as_tensor

__all__ = ["arange", "eye", "full", "full_like", "linspace", "manual_seed", "ones", "ones_like",
           "rand", "randint", "randn", "tensor", "zeros", "zeros_like"]


def tensor(data: Any, dtype: Any = None, device: str | None = None,
           requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of `data` (nested lists, a scalar or a NumPy array).

    Inside a traced function it is a constant of the graph, made anew at every call as eagerly.
    From a tensor, it is a copy of that tensor's values (detached), taken when the op runs.
    """
    if isinstance(data, Tensor):
        t = data.detach().clone().to(default_device(device))
        t = t if dtype is None else t.astype(dtype)
    else:
        t = dispatch.current_interpreter().lift(Tensor(data, dtype=dtype,
                                                         device=default_device(device)))
    if requires_grad:
        t.requires_grad = True
    return t


def _filled(shape: tuple, value: Any, dtype: Any, device: str | None,
            requires_grad: bool) -> Tensor:
    shape = shape_arg(shape, "full")
    t = bind(creation.full, shape=shape, fill_value=value, dtype=as_dtype(dtype, "full"),
             device=default_device(device))
    if requires_grad:
        t.requires_grad = True
    return t


def zeros(*shape: int | Sequence[int], dtype: Any = "float32", device: str | None = None,
          requires_grad: bool = False) -> Tensor:
    """A tensor of zeros: ``tfl.zeros(2, 3)`` or ``tfl.zeros((2, 3))``."""
    return _filled(shape, 0, dtype, device, requires_grad)


def ones(*shape: int | Sequence[int], dtype: Any = "float32", device: str | None = None,
         requires_grad: bool = False) -> Tensor:
    return _filled(shape, 1, dtype, device, requires_grad)


def full(shape: int | Sequence[int], value: Any, dtype: Any = None, device: str | None = None,
         requires_grad: bool = False) -> Tensor:
    """A tensor filled with `value`; the dtype follows the value (float -> float32)."""
    if dtype is None:
        dtype = np.dtype(np.float32 if isinstance(value, float) else np.asarray(value).dtype)
        if dtype.kind not in "biuf":
            raise DTypeError(f"cannot fill a tensor with {value!r}", op="full",
                             hint="the fill value must be a number or a bool")
    return _filled((shape,), value, dtype, device, requires_grad)


def zeros_like(x: Tensor, dtype: Any = None) -> Tensor:
    return full_like(x, 0, dtype)


def ones_like(x: Tensor, dtype: Any = None) -> Tensor:
    return full_like(x, 1, dtype)


def full_like(x: Tensor, value: Any, dtype: Any = None) -> Tensor:
    """A tensor of x's shape (taken from x when the graph runs, where a size is unknown). `x`
    may be anything `tfl.tensor` takes: its shape, dtype and device are what count."""
    if x is None:
        raise DTypeError("None is not a tensor: *_like takes the shape of a tensor",
                         op="full_like", hint="tfl.zeros_like(x) for a tensor x, or "
                                              "tfl.zeros(shape) for a shape")
    x = x if isinstance(x, Tensor) else as_tensor(x)
    if None in x.shape:
        one = _filled(((),), value, dtype or x.dtype, x.device, False)
        return bind(shape_ops.broadcast_like, one, x)
    return _filled((x.shape,), value, dtype or x.dtype, x.device, False)


def arange(start: float, stop: float | None = None, step: float = 1, dtype: Any = None,
           device: str | None = None) -> Tensor:
    """``start, start + step, ...`` up to `stop` (excluded); ``tfl.arange(n)`` is ``0 .. n-1``.

    As in PyTorch, the dtype is int64 when every argument is an int, else float32.
    """
    if stop is None:
        start, stop = 0, start
    ends = (start, stop, step)
    if not all(isinstance(v, int | float | np.integer | np.floating) for v in ends):
        raise DTypeError(f"arange takes numbers, got {ends!r}", op="arange",
                         hint="pass Python ints or floats (t.item() gives a tensor's value)")
    start, stop, step = (v.item() if isinstance(v, np.generic) else v for v in ends)
    if step == 0:
        raise ShapeError("arange's step must not be 0", op="arange")
    if dtype is None:
        dtype = np.float32 if any(isinstance(v, float) for v in (start, stop, step)) else np.int64
    return bind(creation.arange, start=start, stop=stop, step=step,
                dtype=as_dtype(dtype, "arange"), device=default_device(device))


def linspace(start: float, end: float, steps: int, dtype: Any = "float32",
             device: str | None = None) -> Tensor:
    """`steps` values evenly spaced from `start` to `end`, both included (PyTorch's names;
    NumPy's linspace computes them: the last is `end` exactly)."""
    ends = (start, end)
    if not all(isinstance(v, int | float | np.integer | np.floating) for v in ends) or \
            any(isinstance(v, bool) for v in ends):
        raise DTypeError(f"linspace takes numbers, got start={start!r}, end={end!r}",
                         op="linspace", hint="pass Python ints or floats")
    if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps < 0:
        raise ShapeError(f"linspace makes `steps` values, a count of 0 or more, not {steps!r}",
                         op="linspace", hint="e.g. tfl.linspace(0, 1, 5)")
    return bind(creation.linspace, start=float(start), stop=float(end), num=int(steps),
                dtype=as_dtype(dtype, "linspace"), device=default_device(device))


def randint(low: int, high: int | None = None, size: int | Sequence[int] | None = None,
            dtype: Any = "int64", device: str | None = None) -> Tensor:
    """Integers drawn uniformly from ``[low, high)`` (`high` excluded), of shape `size`: as
    PyTorch, ``tfl.randint(low, high, size)`` or ``tfl.randint(high, size)`` (from 0). A random
    op: every call draws anew (seed with `tfl.manual_seed`), and no pass folds or merges it."""
    if size is None:
        low, high, size = 0, low, high
    if size is None:
        raise ShapeError("randint needs a size", op="randint",
                         hint="tfl.randint(0, 10, (2, 3)) or tfl.randint(10, (2, 3))")
    bounds = (low, high)
    if not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in bounds):
        raise DTypeError(f"randint's bounds are ints, not {low!r} and {high!r}", op="randint",
                         hint="e.g. tfl.randint(0, 10, (3,))")
    return bind(creation.randint, low=int(low), high=int(high),
                shape=shape_arg((size,), "randint"), dtype=as_dtype(dtype, "randint"),
                device=default_device(device))


def eye(n: int, m: int | None = None, dtype: Any = "float32",
        device: str | None = None) -> Tensor:
    """The identity matrix: ones on the diagonal of an n x m (default n x n) matrix."""
    shape = shape_arg(((n, n if m is None else m),), "eye")
    return bind(creation.eye, n=shape[0], m=shape[1], dtype=as_dtype(dtype, "eye"),
                device=default_device(device))


def _random(op: Any, shape: tuple, dtype: Any, device: str | None, requires_grad: bool) -> Tensor:
    dtype = as_dtype(dtype, op.name)
    if dtype.kind != "f":
        raise DTypeError(f"random samples are floating point; {dtype.name} was asked for",
                         op=op.name, hint="use dtype='float32' (the default) or 'float64'")
    # The generators draw float32/float64; other float dtypes are cast from float32.
    draw = dtype if dtype in (np.float32, np.float64) else np.dtype(np.float32)
    t = bind(op, shape=shape_arg(shape, op.name), dtype=draw, device=default_device(device))
    t = t.astype(dtype)
    if requires_grad:
        t.requires_grad = True
    return t


def randn(*shape: int | Sequence[int], dtype: Any = "float32", device: str | None = None,
          requires_grad: bool = False) -> Tensor:
    """Samples from the standard normal distribution (seed with `tfl.manual_seed`)."""
    return _random(creation.normal, shape, dtype, device, requires_grad)


def rand(*shape: int | Sequence[int], dtype: Any = "float32", device: str | None = None,
         requires_grad: bool = False) -> Tensor:
    """Samples from the uniform distribution on [0, 1)."""
    return _random(creation.uniform, shape, dtype, device, requires_grad)
