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
decides *how*. Those calls are read in the files named for their kind, which `Tensor` inherits:
`teachflow.tensor.elementwise` (``a + b``, ``t.exp()``), `teachflow.tensor.reductions`
(``t.sum()``), `teachflow.tensor.movement` (``t.reshape()``, ``t[i]``), `teachflow.tensor.linalg`
(``a @ b``), `teachflow.tensor.conversion` (``t.numpy()``, ``t.to("gpu")``) and
`teachflow.tensor.interop` (NumPy's protocols). This file is what a tensor *is*.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from teachflow.autodiff import backprop, tape
from teachflow.core import dispatch
from teachflow.core.backends import Backend, backend_of_array, get_backend
from teachflow.core.dispatch import bind
from teachflow.core.errors import AutodiffError, DTypeError, ShapeError, TraceError
from teachflow.core.spec import TensorSpec
from teachflow.graph import Value
from teachflow.ops import elementwise as ew
from teachflow.ops import reduction
from teachflow.tensor.conversion import Conversion, to_array
from teachflow.tensor.elementwise import Elementwise
from teachflow.tensor.habits import ForeignName
from teachflow.tensor.interop import NumpyProtocol
from teachflow.tensor.linalg import Linalg
from teachflow.tensor.movement import Movement
from teachflow.tensor.reductions import Reductions

_new = object.__new__


class Tensor(Elementwise, Reductions, Movement, Linalg, Conversion, NumpyProtocol,
             tape.Tracked):
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
        """The device's name (``"cpu"``, ``"cpu:1"``, ``"gpu"``), equal to its other spellings
        (``t.device == "cpu:0"``)."""
        return self._backend.public_name

    @property
    def ndim(self) -> int:
        return len(self._data.shape)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise ShapeError("len() of a 0-d tensor", op="len", hint="use t.item()")
        if self.shape[0] is None:
            raise TraceError(f"len() of a tensor of shape {self.shape}: its first size is known "
                             "only when the graph runs", op="len",
                             hint="compute with the whole tensor (x.sum(axis=0), x.mean()) "
                                  "rather than a Python loop over its rows")
        return self.shape[0]

    @property
    def size(self) -> ElementCount | UnknownCount:
        """The number of elements. Also callable, as PyTorch's ``t.size()`` (the shape) and
        ``t.size(d)``: see `ElementCount`."""
        shape = self._data.shape
        if None in shape:
            return UnknownCount(shape)
        return ElementCount(math.prod(shape), shape)

    def numel(self) -> int:
        """The number of elements (NumPy: ``t.size``)."""
        return self.size.__index__()

    def dim(self) -> int:
        """The number of axes (NumPy: ``t.ndim``)."""
        return self.ndim

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

    def register_post_accumulate_grad_hook(self, hook: Callable[[Tensor], None]) -> Callable:
        """Call ``hook(self)`` in every backward(), as soon as ``self.grad`` holds this pass's
        gradient (PyTorch's name); returns a function that removes the hook."""
        return backprop.register_grad_hook(self, hook)

    @property
    def is_leaf(self) -> bool:
        """True unless the tensor was computed by a recorded op."""
        return not isinstance(self._node, tape.TapeNode)

    @property
    def grad_fn(self) -> str | None:
        """The name of the op that computed this tensor, if it was recorded for backward."""
        return self._node.op.name if isinstance(self._node, tape.TapeNode) else None

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

    # --- Autodiff -----------------------------------------------------------------------------

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

    # --- PyTorch's and NumPy's names for the above, which teachflow spells otherwise ----------

    nelement = ForeignName("x.numel()")
    ndimension = ForeignName("x.dim()")
    requires_grad_ = ForeignName("x.requires_grad = True")
    detach_ = ForeignName("x = x.detach()")
    data = ForeignName("x.detach() for the values off the tape (a new tensor: to update x "
                       "itself, write `with tfl.no_grad(): x -= ...`)")


class ElementCount(int):
    """``t.size``: the number of elements, an int, as NumPy's ``a.size``. Called, it answers as
    PyTorch's ``t.size()`` does: the shape, or for ``t.size(d)`` the length of axis d."""

    def __new__(cls, count: int, shape: tuple = ()) -> ElementCount:
        self = super().__new__(cls, count)
        self.shape = shape
        return self

    def __call__(self, dim: int | None = None) -> tuple | int:
        if dim is None:
            return self.shape
        (axis,) = reduction.normalize_axes("size", dim, self.shape)
        return self.shape[axis]


class UnknownCount:
    """``t.size`` of a tensor with a size known only when its graph runs (a placeholder's None):
    the shape, as ``t.size()`` and ``t.size(d)`` give it, but no number to compute with."""

    def __init__(self, shape: tuple) -> None:
        self.shape = shape

    __call__ = ElementCount.__call__

    def _unknown(self, *_: Any) -> Any:
        raise TraceError(f"the number of elements of a tensor of shape {self.shape}: a size is "
                         "known only when the graph runs", op="size",
                         hint="let an op count them when it runs: x.mean() rather than "
                              "x.sum() / x.numel(); x.shape gives the sizes known now")

    __index__ = __int__ = __float__ = __bool__ = __array__ = _unknown
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _unknown
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __pow__ = __rpow__ = _unknown
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _unknown
    __hash__ = None

    def __repr__(self) -> str:
        return f"<size of a {self.shape} tensor, known when the graph runs>"


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
