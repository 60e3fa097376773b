"""The Tensor: an array on a device, plus what autodiff needs to know about it.

A Tensor holds four things:

- ``_data``: the values, a NumPy array (CPU) or a CuPy array (GPU);
- ``_backend``: the device it lives on, with that device's array module;
- ``_node``: its place on the autodiff tape (None if no gradient flows to it);
- ``grad``: for a leaf created with ``requires_grad=True``, the gradient accumulated by backward.

Changing a tensor's state (``p -= lr * g``, ``t[i] = v``, ``p.grad = ...``) also goes through the
current interpreter: eagerly it happens at once; while tracing, the graph records it and the
staged call writes it back afterwards.

Every operator and method is a call to `bind` with one of the ops in `teachflow.ops`, so a Tensor
method never computes anything itself: it says *which* op to apply, and the current execution mode
decides *how*. Those calls are read in their own chapters, which `Tensor` inherits: its operators
and everyday methods (`teachflow.tensor.operators`), PyTorch's and NumPy's names
(`teachflow.tensor.methods`), and NumPy's protocols (`teachflow.tensor.interop`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from teachflow.autodiff import backprop, tape
from teachflow.core import dispatch
from teachflow.core.backends import Backend, backend_of_array, get_backend, is_device_name
from teachflow.core.dispatch import bind
from teachflow.core.errors import (
    AutodiffError,
    DeviceError,
    DTypeError,
    ShapeError,
    TraceError,
)
from teachflow.core.spec import TensorSpec
from teachflow.graph import Value
from teachflow.ops import creation
from teachflow.ops import elementwise as ew
from teachflow.tensor.conversion import as_dtype, to_array
from teachflow.tensor.interop import NumpyProtocol
from teachflow.tensor.methods import ElementCount, FamiliarMethods, UnknownCount
from teachflow.tensor.operators import Operators

_new = object.__new__


class Tensor(Operators, FamiliarMethods, NumpyProtocol, tape.Tracked):
    """A multi-dimensional array that can record the ops applied to it for tape.

    Create one with `tfl.tensor`, `tfl.zeros`, `tfl.randn`, ... rather than with this class.
    Its array (`_data`), device (`_backend`) and node on the tape (`_node`) are what the tape
    knows of it (`tape.Tracked`); its gradient (`_grad`) is the user's.
    """

    __slots__ = ("__weakref__", "_grad")
    # `==` is elementwise, so hashing is by identity (tensors can be dict keys, as in feeds).
    __hash__ = object.__hash__

    def __init__(self, data: Any, dtype: Any = None, device: str | None = None,
                 requires_grad: bool = False) -> None:
        backend = get_backend(device) if device is not None else backend_of_array(data)
        self._data = to_array(data, dtype, backend, copy=True)
        self._backend = backend
        self._node = None
        self._grad = None
        if requires_grad:
            self.requires_grad = True

    @classmethod
    def _make(cls, data: Any, backend: Backend, node: Any) -> Tensor:
        """Wrap an array without copying or checking it (for teachflow's internals)."""
        t = _new(cls)
        t._data, t._backend, t._node, t._grad = data, backend, node, None
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
    def size(self) -> ElementCount | UnknownCount:
        """The number of elements. Also callable, as PyTorch's ``t.size()`` (the shape) and
        ``t.size(d)``: see `ElementCount`."""
        shape = self._data.shape
        if None in shape:
            return UnknownCount(shape)
        return ElementCount(math.prod(shape), shape)

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
        dispatch.current_interpreter().mark(self, value)

    def _mark(self, value: bool) -> None:
        if value and self._node is None:
            if self.dtype.kind not in "fc":
                raise DTypeError(f"only floating-point tensors can require gradients, "
                                 f"this one is {self.dtype.name}", op="requires_grad",
                                 hint="create it as float, e.g. tfl.tensor(data, dtype='float32')")
            self._node = tape.Leaf(self)
        elif not value and self._node is not None:
            if not self.is_leaf:
                raise AutodiffError(
                    "requires_grad can only be switched off on a leaf tensor", op="requires_grad",
                    hint="use y = x.detach() for a copy that is cut off from the tape")
            self._node = None

    @property
    def grad(self) -> Tensor | None:
        """The gradient that backward() accumulated here (None until then, or once cleared)."""
        return dispatch.current_interpreter().read_grad(self)

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None and (not isinstance(value, Tensor) or value.shape != self.shape):
            what = f"shape {value.shape}" if isinstance(value, Tensor) else type(value).__name__
            raise ShapeError(f"a gradient of {what} cannot be the .grad of a tensor of shape "
                             f"{self.shape}", op="grad",
                             hint="assign None, or a tensor of the same shape")
        dispatch.current_interpreter().write_grad(self, value)

    @property
    def is_leaf(self) -> bool:
        """True unless the tensor was computed by a recorded op."""
        return not isinstance(self._node, tape.TapeNode)

    @property
    def grad_fn(self) -> str | None:
        """The name of the op that computed this tensor, if it was recorded for backward."""
        return self._node.op.name if isinstance(self._node, tape.TapeNode) else None

    # --- Getting values out -------------------------------------------------------------------

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

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """``np.asarray(t)`` (the values, read-only), ``np.array(t)`` (a copy of them)."""
        array = self.numpy()
        if dtype is not None and np.dtype(dtype) != array.dtype:
            return array.astype(dtype)  # a new array anyway
        return array.copy() if copy else array

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

    def __len__(self) -> int:
        if self.ndim == 0:
            raise ShapeError("len() of a 0-d tensor", op="len", hint="use t.item()")
        if self.shape[0] is None:
            raise TraceError(f"len() of a tensor of shape {self.shape}: its first size is known "
                             "only when the graph runs", op="len",
                             hint="compute with the whole tensor (x.sum(axis=0), x.mean()) "
                                  "rather than a Python loop over its rows")
        return self.shape[0]

    def __format__(self, spec: str) -> str:
        """``f"{loss:.4f}"``: a one-element tensor formats as its number."""
        if not spec:
            return str(self)
        if self.spec.size != 1:
            raise ShapeError(f"a format such as {spec!r} needs a one-element tensor, this one "
                             f"has shape {self.shape}", op="format",
                             hint="format t.item(), or np.array2string(t.numpy())")
        return format(self.item(), spec)

    def __iter__(self) -> Iterator[Tensor]:
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        if isinstance(self._data, Value):  # traced: a place in a graph, with no numbers yet
            return f"tensor({self._data}: {self._data.spec}, traced)"
        values = self._backend.to_numpy(self._data)  # (printing while tracing shows them now)
        body = np.array2string(values, separator=", ", prefix="tensor(")
        extras = [f"dtype={self.dtype.name}"]
        if self.device != "cpu":
            extras.append(f"device='{self.device}'")
        if self.grad_fn is not None:
            extras.append(f"grad_fn=<{self.grad_fn}>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return f"tensor({body}, {', '.join(extras)})"

    def __deepcopy__(self, memo: dict) -> Tensor:
        """A copy with values of its own (``copy.deepcopy(model)``): a leaf that requires grad
        stays one, with a copy of its ``.grad``; anything else becomes a plain tensor."""
        if isinstance(self._data, Value):
            raise TraceError("a traced tensor has no values to copy: it stands for a value the "
                             "graph computes when it runs", op="copy",
                             hint="x.clone() copies it in the graph")
        t = Tensor._make(self._data.copy(), self._backend, None)
        memo[id(self)] = t
        if isinstance(self._node, tape.Leaf):
            t.requires_grad = True
        if self._grad is not None:
            t._grad = self._grad.__deepcopy__(memo)
        return t

    def __copy__(self) -> Tensor:
        """``copy.copy(t)``: as deepcopy (a teachflow tensor owns its values)."""
        return self.__deepcopy__({})

    def __reduce__(self) -> tuple:
        """Pickled as its values, device and whether it requires grad (as ``torch.save``)."""
        values = self._backend.to_numpy(self._data)
        return _rebuild, (values, self.device, self.requires_grad and self.is_leaf)

    # --- Autodiff and devices -----------------------------------------------------------------

    def backward(self, grad: Any = None, retain_graph: bool = False) -> None:
        """Accumulate the gradient of this tensor into the ``.grad`` of every leaf it depends on.

        A scalar's `grad` defaults to 1; otherwise pass the gradient of the output. The tape is
        used up: call backward() once per forward pass, or pass ``retain_graph=True`` to keep it.
        """
        if grad is not None and not isinstance(grad, Tensor):
            grad = as_tensor(grad, dtype=self.dtype, device=self.device)
        backprop.backward(self, grad, retain_graph)

    def detach(self) -> Tensor:
        """The same values, cut off from the tape (no gradient flows through)."""
        return bind(ew.stop_gradient, self)

    def to(self, *where: Any, device: str | None = None, dtype: Any = None) -> Tensor:
        """This tensor on `device` ("cpu" or "gpu"), as `dtype`; itself if it is that already.
        As PyTorch's, either may be given by position (``x.to("gpu")``, ``x.to(tfl.float64)``,
        ``x.to("gpu", tfl.float16)``), or another tensor, whose device and dtype it takes."""
        for arg in where:
            if isinstance(arg, Tensor):
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
                                op="to", hint="devices are 'cpu' and 'gpu' (or 'cuda'): "
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

    def astype(self, dtype: Any) -> Tensor:
        dtype = as_dtype(dtype, "astype")
        return self if dtype == self.dtype else bind(ew.astype, self, dtype=dtype)

    # --- In-place updates ---------------------------------------------------------------------
    # ``p -= lr * p.grad`` computes ``p - lr * p.grad`` as usual and then makes *this* tensor
    # object hold the result. Arrays the tape saved earlier are never overwritten, so an update
    # cannot corrupt a pending backward pass; and every holder of `p` (a model, an optimizer)
    # sees the new values. ``t[i] = v`` is the same: an op computes the new values, and `t`
    # takes them. While tracing, the graph builder records the update instead (see `_take`).

    def _assign(self, result: Tensor, op: str) -> Tensor:
        if tape.is_grad_enabled() and isinstance(self._node, tape.Leaf):
            raise AutodiffError(
                "an in-place update of a leaf that requires grad would hide the update from "
                "backward", op=op, hint="update parameters inside `with tfl.no_grad():`")
        if result.shape != self.shape:
            raise ShapeError(f"an in-place update cannot change the shape {self.shape} to "
                             f"{result.shape}", op=op, hint="write x = x + y to rebind instead")
        if op != "setitem" and not np.can_cast(result.dtype, self.dtype, casting="same_kind"):
            raise DTypeError(f"an in-place update cannot store {result.dtype} results in this "
                             f"{self.dtype} tensor (NumPy and PyTorch refuse it too)", op=op,
                             hint=f"write x = x {op[0]} y for a new {result.dtype} tensor, or "
                                  f"convert first: x = x.astype('{result.dtype}')")
        dispatch.current_interpreter().assign(self, result.astype(self.dtype))
        return self

    def _take(self, value: Tensor) -> None:
        """Hold `value`'s values (and its place on the tape, unless this is a leaf) from now on."""
        self._data = value._data
        if not isinstance(self._node, tape.Leaf):
            self._node = value._node

    def _take_array(self, array: Any) -> None:
        """`_take` of a plain value (off the tape) given as its array: a staged call's update."""
        self._data = array
        if not isinstance(self._node, tape.Leaf):
            self._node = None


class WeakTensor(Tensor):
    """A Python number become a tensor: a loop's step index, or a number a loop carries.

    Beside another tensor it takes that tensor's dtype, as the number itself would (NumPy's
    *weak* Python scalars; JAX's weak types, PyTorch's rule for an integer operand): inside
    ``fori_loop(0, n, lambda i, c: c + i, c)`` the carry stays float32, as in ``c + 3``, though
    ``i`` is an int64 tensor. Beside numbers and other weak tensors it stays weak (``i * 2``);
    ``astype`` and every other op make ordinary tensors.
    """

    __slots__ = ()
    _tape_keeps_array = False  # (its rules must see it weak, as the op did)

    @classmethod
    def of(cls, t: Tensor) -> WeakTensor:
        """`t`'s values (or, traced, its value in the graph), weakly typed."""
        return cls._make(t._data, t._backend, t._node)

    def beside(self, *others: Any) -> Tensor:
        """Itself as an operand beside `others`: where one is an ordinary tensor (or array),
        cast to the dtype a Python number of its kind would take there (float32 beside a
        float32 tensor, int32 beside an int32 one)."""
        strong = [o.dtype for o in others if isinstance(o, Tensor | np.ndarray | np.generic)
                  and not isinstance(o, WeakTensor)]
        if not strong:
            return self
        dtype = np.result_type(*strong, self.dtype.type(0).item())  # (a Python number)
        if dtype != self.dtype:
            return self.astype(dtype)
        return Tensor._make(self._data, self._backend, self._node)

    def _weakly(self, method: Any, other: Any) -> Tensor:
        """``method(self, other)`` with self beside other; weak again beside a number."""
        result = method(self.beside(other), other)
        if isinstance(other, bool | int | float | WeakTensor) and isinstance(result, Tensor):
            return WeakTensor.of(result)
        return result

    def __add__(self, other: Any) -> Tensor:
        return self._weakly(Tensor.__add__, other)

    def __radd__(self, other: Any) -> Tensor:
        return self._weakly(Tensor.__radd__, other)

    def __sub__(self, other: Any) -> Tensor:
        return self._weakly(Tensor.__sub__, other)

    def __rsub__(self, other: Any) -> Tensor:
        return self._weakly(Tensor.__rsub__, other)

    def __mul__(self, other: Any) -> Tensor:
        return self._weakly(Tensor.__mul__, other)

    def __rmul__(self, other: Any) -> Tensor:
        return self._weakly(Tensor.__rmul__, other)

    def __truediv__(self, other: Any) -> Tensor:
        return self._weakly(Tensor.__truediv__, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return self._weakly(Tensor.__rtruediv__, other)

    def __floordiv__(self, other: Any) -> Tensor:
        return self._weakly(Tensor.__floordiv__, other)

    def __rfloordiv__(self, other: Any) -> Tensor:
        return self._weakly(Tensor.__rfloordiv__, other)

    def __mod__(self, other: Any) -> Tensor:
        return self._weakly(Tensor.__mod__, other)

    def __rmod__(self, other: Any) -> Tensor:
        return self._weakly(Tensor.__rmod__, other)

    def __pow__(self, other: Any) -> Tensor:
        return self._weakly(Tensor.__pow__, other)

    def __rpow__(self, other: Any) -> Tensor:
        return self._weakly(Tensor.__rpow__, other)

    # A comparison's mask is an ordinary bool tensor; the number is compared in the other's type.

    def __lt__(self, other: Any) -> Tensor:
        return Tensor.__lt__(self.beside(other), other)

    def __le__(self, other: Any) -> Tensor:
        return Tensor.__le__(self.beside(other), other)

    def __gt__(self, other: Any) -> Tensor:
        return Tensor.__gt__(self.beside(other), other)

    def __ge__(self, other: Any) -> Tensor:
        return Tensor.__ge__(self.beside(other), other)

    def __eq__(self, other: Any) -> Tensor:  # type: ignore[override]
        return Tensor.__eq__(self.beside(other), other)

    def __ne__(self, other: Any) -> Tensor:  # type: ignore[override]
        return Tensor.__ne__(self.beside(other), other)

    __hash__ = Tensor.__hash__

    def __neg__(self) -> Tensor:
        return WeakTensor.of(Tensor.__neg__(self))


def _rebuild(values: np.ndarray, device: str, requires_grad: bool) -> Tensor:
    return Tensor(values, device=device, requires_grad=requires_grad)


def as_tensor(data: Any, dtype: Any = None, device: str | None = None) -> Tensor:
    """`data` as a Tensor, without copying when it already is one (or a NumPy array)."""
    if isinstance(data, Tensor):
        t = data if device is None else data.to(device)
        return t if dtype is None else t.astype(dtype)
    backend = get_backend(device) if device is not None else backend_of_array(data)
    t = Tensor._make(to_array(data, dtype, backend, copy=False), backend, None)
    return dispatch.current_interpreter().lift(t)
