"""The Tensor: an array on a device, plus what autodiff needs to know about it.

A Tensor holds four things:

- ``_data``: the values, a NumPy array (CPU) or a CuPy array (GPU);
- ``_backend``: the device it lives on, with that device's array module;
- ``_node``: its place on the autodiff tape (None if no gradient flows to it);
- ``grad``: for a leaf created with ``requires_grad=True``, the gradient accumulated by backward.

Every operator and method is a call to `bind` with one of the ops in `teachflow.ops`, so a Tensor
method never computes anything itself: it says *which* op to apply, and the current execution mode
decides *how*.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from teachflow import autodiff
from teachflow.backends import Backend, backend_of_array, get_backend
from teachflow.dispatch import bind
from teachflow.errors import DTypeError, ShapeError, TraceError
from teachflow.graph import Value
from teachflow.ops import creation, linalg, reduction
from teachflow.ops import elementwise as ew
from teachflow.ops import shape as shape_ops
from teachflow.spec import TensorSpec

_new = object.__new__


class Tensor:
    """A multi-dimensional array that can record the ops applied to it for autodiff.

    Create one with `tfl.tensor`, `tfl.zeros`, `tfl.randn`, ... rather than with this class.
    """

    __slots__ = ("__weakref__", "_backend", "_data", "_node", "grad")
    # NumPy should hand `ndarray + tensor` to Tensor.__radd__ instead of making an object array.
    __array_ufunc__ = None
    # `==` is elementwise, so hashing is by identity (tensors can be dict keys, as in feeds).
    __hash__ = object.__hash__

    def __init__(self, data: Any, dtype: Any = None, device: str | None = None,
                 requires_grad: bool = False) -> None:
        backend = get_backend(device) if device is not None else backend_of_array(data)
        self._data = _to_array(data, dtype, backend, copy=True)
        self._backend = backend
        self._node = None
        self.grad = None
        if requires_grad:
            self.requires_grad = True

    @classmethod
    def _make(cls, data: Any, backend: Backend, node: Any) -> Tensor:
        """Wrap an array without copying or checking it (for teachflow's internals)."""
        t = _new(cls)
        t._data, t._backend, t._node, t.grad = data, backend, node, None
        return t

    # --- What it is ---------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def device(self) -> str:
        return self._backend.name

    @property
    def ndim(self) -> int:
        return len(self._data.shape)

    @property
    def size(self) -> int:
        """The number of elements (-1 while a dimension is unknown, as for a placeholder)."""
        shape = self._data.shape
        return -1 if None in shape else int(np.prod(shape, dtype=np.int64))

    @property
    def spec(self) -> TensorSpec:
        """Shape, dtype and device: everything about the tensor except its values."""
        return TensorSpec(self._data.shape, self._data.dtype, self._backend.name)

    @property
    def requires_grad(self) -> bool:
        """True if gradients flow to this tensor (it is a leaf you marked, or computed from one)."""
        return self._node is not None

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if value and self._node is None:
            if self.dtype.kind not in "fc":
                raise DTypeError(f"only floating-point tensors can require gradients, "
                                 f"this one is {self.dtype.name}", op="requires_grad",
                                 hint="create it as float, e.g. tfl.tensor(data, dtype='float32')")
            self._node = autodiff.Leaf(self)
        elif not value and self._node is not None:
            if not self.is_leaf:
                raise autodiff.AutodiffError(
                    "requires_grad can only be switched off on a leaf tensor", op="requires_grad",
                    hint="use y = x.detach() for a copy that is cut off from the tape")
            self._node = None

    @property
    def is_leaf(self) -> bool:
        """True unless the tensor was computed by a recorded op."""
        return not isinstance(self._node, autodiff.TapeNode)

    @property
    def grad_fn(self) -> str | None:
        """The name of the op that computed this tensor, if it was recorded for backward."""
        return self._node.op.name if isinstance(self._node, autodiff.TapeNode) else None

    # --- Getting values out -------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """The values as a read-only NumPy array (copied to the host for a GPU tensor).

        On the CPU it shares memory with the tensor, so it is read-only: writing to it would
        silently change values the tape saved for backward. Use ``.numpy().copy()`` to edit.
        """
        array = self._backend.to_numpy(self._data)
        if array is self._data:
            array = array.view()
            array.flags.writeable = False
        return array

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        array = self.numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def item(self) -> float | int | bool:
        """The single value of a one-element tensor, as a Python number."""
        if self.size != 1:
            raise ShapeError(f"item() needs a tensor with one element, this one has shape "
                             f"{self.shape}", op="item", hint="index or reduce it first")
        return self.numpy().item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ShapeError(
                f"the truth value of a tensor with shape {self.shape} is ambiguous",
                op="bool", hint="compare one element (t[0] > 0) or a reduction (t.sum() > 0); "
                     "t.item() gives the value of a one-element tensor")
        return bool(self._data)

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.kind not in "iub":
            raise DTypeError(f"only integer tensors can be used as an index, not {self.dtype}",
                             op="index")
        return int(self.item())

    def __len__(self) -> int:
        if self.ndim == 0:
            raise ShapeError("len() of a 0-d tensor", op="len", hint="use t.item()")
        return self.shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        if isinstance(self._data, Value):  # traced: a place in a graph, with no numbers yet
            return f"tensor({self._data}: {self._data.spec}, traced)"
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        extras = [f"dtype={self.dtype.name}"]
        if self.device != "cpu":
            extras.append(f"device='{self.device}'")
        if self.grad_fn is not None:
            extras.append(f"grad_fn=<{self.grad_fn}>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return f"tensor({body}, {', '.join(extras)})"

    # --- Autodiff and devices -----------------------------------------------------------------

    def backward(self, grad: Any = None, retain_graph: bool = False) -> None:
        """Accumulate the gradient of this tensor into the ``.grad`` of every leaf it depends on.

        A scalar's `grad` defaults to 1; otherwise pass the gradient of the output. The tape is
        used up: call backward() once per forward pass, or pass ``retain_graph=True`` to keep it.
        """
        autodiff.backward(self, grad, retain_graph)

    def detach(self) -> Tensor:
        """The same values, cut off from the tape (no gradient flows through)."""
        return bind(ew.stop_gradient, self)

    def to(self, device: str) -> Tensor:
        """This tensor on `device` ("cpu" or "gpu"); itself if it is there already."""
        backend = get_backend(device)
        return self if backend is self._backend else bind(creation.to_device, self,
                                                            device=backend.name)

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def astype(self, dtype: Any) -> Tensor:
        dtype = as_dtype(dtype, "astype")
        return self if dtype == self.dtype else bind(ew.astype, self, dtype=dtype)

    # --- Operators ----------------------------------------------------------------------------

    def __add__(self, other: Any) -> Tensor:
        return bind(ew.add, self, other)

    def __radd__(self, other: Any) -> Tensor:
        return bind(ew.add, other, self)

    def __sub__(self, other: Any) -> Tensor:
        return bind(ew.sub, self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return bind(ew.sub, other, self)

    def __mul__(self, other: Any) -> Tensor:
        return bind(ew.mul, self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return bind(ew.mul, other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return bind(ew.div, self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return bind(ew.div, other, self)

    def __pow__(self, other: Any) -> Tensor:
        return bind(ew.pow, self, other)

    def __rpow__(self, other: Any) -> Tensor:
        return bind(ew.pow, other, self)

    def __matmul__(self, other: Any) -> Tensor:
        return bind(linalg.matmul, self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return bind(linalg.matmul, other, self)

    def __neg__(self) -> Tensor:
        return bind(ew.neg, self)

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        return bind(ew.abs, self)

    def __lt__(self, other: Any) -> Tensor:
        return bind(ew.lt, self, other)

    def __le__(self, other: Any) -> Tensor:
        return bind(ew.le, self, other)

    def __gt__(self, other: Any) -> Tensor:
        return bind(ew.gt, self, other)

    def __ge__(self, other: Any) -> Tensor:
        return bind(ew.ge, self, other)

    def __eq__(self, other: Any) -> Tensor:  # type: ignore[override]
        return bind(ew.eq, self, other)

    def __ne__(self, other: Any) -> Tensor:  # type: ignore[override]
        return bind(ew.ne, self, other)

    def __getitem__(self, index: Any) -> Tensor:
        return bind(shape_ops.getitem, self, index=normalize_index(index))

    # --- In-place updates ---------------------------------------------------------------------
    # ``p -= lr * p.grad`` computes ``p - lr * p.grad`` as usual and then makes *this* tensor
    # object hold the result. Arrays the tape saved earlier are never overwritten, so an update
    # cannot corrupt a pending backward pass; and every holder of `p` (a model, an optimizer)
    # sees the new values.

    def _assign(self, result: Tensor, op: str) -> Tensor:
        if autodiff.is_grad_enabled() and isinstance(self._node, autodiff.Leaf):
            raise autodiff.AutodiffError(
                "an in-place update of a leaf that requires grad would hide the update from "
                "backward", op=op, hint="update parameters inside `with tfl.no_grad():`")
        if result.shape != self.shape:
            raise ShapeError(f"an in-place update cannot change the shape {self.shape} to "
                             f"{result.shape}", op=op, hint="write x = x + y to rebind instead")
        result = result.astype(self.dtype)
        self._data = result._data
        if not isinstance(self._node, autodiff.Leaf):
            self._node = result._node
        return self

    def __iadd__(self, other: Any) -> Tensor:
        return self._assign(bind(ew.add, self, other), "+=")

    def __isub__(self, other: Any) -> Tensor:
        return self._assign(bind(ew.sub, self, other), "-=")

    def __imul__(self, other: Any) -> Tensor:
        return self._assign(bind(ew.mul, self, other), "*=")

    def __itruediv__(self, other: Any) -> Tensor:
        return self._assign(bind(ew.div, self, other), "/=")

    def __setitem__(self, index: Any, value: Any) -> None:
        """``t[index] = value`` (outside autodiff): a copy of the values with the index set."""
        if autodiff.is_grad_enabled() and self._node is not None:
            raise autodiff.AutodiffError(
                "cannot assign into a tensor that requires grad", op="setitem",
                hint="build the new values with tfl.where or tfl.concatenate, or assign "
                     "inside `with tfl.no_grad():`")
        if not hasattr(self._data, "copy"):  # a traced tensor has no values to edit
            raise TraceError("assigning into a traced tensor is not recorded in the graph",
                             op="setitem", hint="build the new values with tfl.where")
        data = self._data.copy()
        data[normalize_index(index)] = value._data if isinstance(value, Tensor) else value
        self._data = data

    # --- Elementwise functions ----------------------------------------------------------------

    def exp(self) -> Tensor:
        return bind(ew.exp, self)

    def log(self) -> Tensor:
        return bind(ew.log, self)

    def sqrt(self) -> Tensor:
        return bind(ew.sqrt, self)

    def tanh(self) -> Tensor:
        return bind(ew.tanh, self)

    def relu(self) -> Tensor:
        return bind(ew.relu, self)

    def sigmoid(self) -> Tensor:
        return bind(ew.sigmoid, self)

    def abs(self) -> Tensor:
        return bind(ew.abs, self)

    # --- Reductions ---------------------------------------------------------------------------

    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        """Sum over `axis` (an int, a tuple, or None for all axes)."""
        axis = reduction.normalize_axes("sum", axis, self.shape)
        return bind(reduction.sum, self, axis=axis, keepdims=bool(keepdims))

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        axis = reduction.normalize_axes("mean", axis, self.shape)
        return bind(reduction.mean, self, axis=axis, keepdims=bool(keepdims))

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        axis = reduction.normalize_axes("max", axis, self.shape)
        return bind(reduction.max, self, axis=axis, keepdims=bool(keepdims))

    # --- Shape --------------------------------------------------------------------------------

    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        """``x.reshape(2, 3)`` or ``x.reshape((2, 3))``; one size may be -1."""
        shape = _shape_arg(shape, "reshape", unknown_ok=True)
        return self if shape == self.shape else bind(shape_ops.reshape, self, shape=shape)

    def transpose(self, *axes: int | Sequence[int]) -> Tensor:
        """Permute the axes; with no arguments, reverse them (``x.T``)."""
        if len(axes) == 1 and not isinstance(axes[0], int):
            axes = tuple(axes[0])
        if not axes:
            axes = tuple(reversed(range(self.ndim)))
        if sorted(int(a) % builtins.max(self.ndim, 1) for a in axes) != list(range(self.ndim)):
            raise ShapeError(f"axes {axes} are not a permutation of the {self.ndim} axes of a "
                             f"tensor of shape {self.shape}", op="transpose")
        axes = tuple(int(a) % self.ndim for a in axes)
        return bind(shape_ops.transpose, self, axes=axes)

    @property
    def T(self) -> Tensor:
        return self.transpose()


# --- Turning data into tensors ------------------------------------------------------------------


def _to_array(data: Any, dtype: Any, backend: Backend, copy: bool) -> Any:
    """`data` as an array of `backend`; Python floats become float32 unless a dtype is given."""
    if isinstance(data, Tensor):
        data = data._data
    dtype = as_dtype(dtype, "tensor") if dtype is not None else None
    try:
        if dtype is None and not hasattr(data, "dtype"):
            dtype = _DEFAULT_FOR_PYTHON.get(np.asarray(data).dtype)
        array = backend.asarray(data, dtype=dtype)
    except (ValueError, TypeError) as exc:
        raise ShapeError(f"cannot make a tensor from this {type(data).__name__}: {exc}",
                         op="tensor", hint="pass numbers, or nested lists of numbers that "
                                           "form a rectangle") from exc
    if array.dtype.kind not in "biufc":
        raise DTypeError(f"cannot make a tensor of {array.dtype} values from "
                         f"{type(data).__name__} data", op="tensor",
                         hint="tensors hold numbers or booleans")
    if copy and array is data:
        array = array.copy()
    return array


# Python numbers become the framework defaults, not NumPy's 64-bit floats.
_DEFAULT_FOR_PYTHON = {np.dtype(np.float64): np.float32, np.dtype(np.complex128): np.complex64}


def as_dtype(dtype: Any, op: str) -> np.dtype:
    """A NumPy dtype from a name or type (``"float32"``, ``np.float32``), or a DTypeError."""
    try:
        return np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"{dtype!r} is not a dtype", op=op,
                         hint="use a NumPy dtype name such as 'float32', 'int64' or 'bool'"
                         ) from None


def as_constant(x: Any) -> Any:
    """A non-tensor operand as an array: lists follow `tfl.tensor`'s rules (floats -> float32),
    NumPy arrays and scalars keep their dtype."""
    if x is None:
        raise DTypeError("None is not a tensor", op="operand",
                         hint="a .grad is None until backward() has run; check the value you "
                              "passed")
    if isinstance(x, np.ndarray | np.generic):
        return x
    return _to_array(x, None, backend_of_array(x), copy=False)


def as_tensor(data: Any, dtype: Any = None, device: str | None = None) -> Tensor:
    """`data` as a Tensor, without copying when it already is one (or a NumPy array)."""
    if isinstance(data, Tensor):
        t = data if device is None else data.to(device)
        return t if dtype is None else t.astype(dtype)
    backend = get_backend(device) if device is not None else backend_of_array(data)
    return Tensor._make(_to_array(data, dtype, backend, copy=False), backend, None)


def _shape_arg(shape: tuple, op: str, unknown_ok: bool = False) -> tuple[int, ...]:
    """Accept ``f(2, 3)`` and ``f((2, 3))`` alike; sizes must be non-negative integers (one
    may be -1, "whatever is left", where `unknown_ok`)."""
    if len(shape) == 1 and not isinstance(shape[0], int | np.integer):
        shape = shape[0]
    if not isinstance(shape, Sequence) or not all(isinstance(d, int | np.integer) for d in shape):
        raise DTypeError(f"a shape must be a sequence of integers, got {shape!r}", op=op)
    shape = tuple(int(d) for d in shape)
    smallest = -1 if unknown_ok else 0
    if any(d < smallest for d in shape) or shape.count(-1) > 1:
        raise ShapeError(f"invalid shape {shape}", op=op,
                         hint="sizes must be >= 0" + (" (one may be -1)" if unknown_ok else ""))
    return shape


def normalize_index(index: Any) -> tuple:
    """An index as a tuple of ints, slices, None, Ellipsis and host (NumPy) integer/bool arrays."""
    items = index if isinstance(index, tuple) else (index,)
    normalized = []
    for item in items:
        if isinstance(item, Tensor):
            if isinstance(item._data, Value):
                raise TraceError(
                    f"indexing with the traced tensor {item._data} (a mask or an index array): "
                    "the result's shape would depend on values that tracing does not know",
                    op="getitem", hint="keep the shape with tfl.where(mask, x, 0), or index "
                                       "with a NumPy array (a constant)")
            item = item.numpy()
        elif isinstance(item, list):
            item = np.asarray(item) if item else np.zeros(0, dtype=np.intp)
        if isinstance(item, np.ndarray) and item.dtype.kind not in "iub":
            raise DTypeError(f"index arrays must hold integers or booleans, not {item.dtype}",
                             op="getitem")
        if not (isinstance(item, int | np.integer | slice | np.ndarray) or item is None
                or item is Ellipsis):
            raise DTypeError(f"cannot index a tensor with {type(item).__name__} {item!r}",
                             op="getitem", hint="use ints, slices, None, ... or integer arrays")
        normalized.append(item)
    return tuple(normalized)
