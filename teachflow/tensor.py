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
decides *how*.
"""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from teachflow import autodiff, dispatch
from teachflow.backends import Backend, backend_of_array, get_backend, is_device_name
from teachflow.dispatch import bind
from teachflow.errors import (
    DeviceError,
    DTypeError,
    IndexingError,
    ShapeError,
    TeachflowError,
    TraceError,
)
from teachflow.graph import Value
from teachflow.ops import creation, linalg, reduction
from teachflow.ops import elementwise as ew
from teachflow.ops import shape as shape_ops
from teachflow.ops.op import op_for_ufunc
from teachflow.spec import TensorSpec, is_int

_new = object.__new__


class Tensor(autodiff.Tracked):
    """A multi-dimensional array that can record the ops applied to it for autodiff.

    Create one with `tfl.tensor`, `tfl.zeros`, `tfl.randn`, ... rather than with this class.
    Its array (`_data`), device (`_backend`) and node on the tape (`_node`) are what the tape
    knows of it (`autodiff.Tracked`); its gradient (`_grad`) is the user's.
    """

    __slots__ = ("__weakref__", "_grad")
    # `==` is elementwise, so hashing is by identity (tensors can be dict keys, as in feeds).
    __hash__ = object.__hash__

    def __init__(self, data: Any, dtype: Any = None, device: str | None = None,
                 requires_grad: bool = False) -> None:
        backend = get_backend(device) if device is not None else backend_of_array(data)
        self._data = _to_array(data, dtype, backend, copy=True)
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
            self._node = autodiff.Leaf(self)
        elif not value and self._node is not None:
            if not self.is_leaf:
                raise autodiff.AutodiffError(
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
        if isinstance(self._node, autodiff.Leaf):
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
        autodiff.backward(self, grad, retain_graph)

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

    # Masks combine with &, | and ~, as in NumPy and PyTorch (boolean tensors only).

    def __and__(self, other: Any) -> Tensor:
        return bind(ew.where, _mask(self, "&"), _mask(other, "&"), False)

    def __rand__(self, other: Any) -> Tensor:
        return self & other

    def __or__(self, other: Any) -> Tensor:
        return bind(ew.where, _mask(self, "|"), True, _mask(other, "|"))

    def __ror__(self, other: Any) -> Tensor:
        return self | other

    def __invert__(self) -> Tensor:
        return bind(ew.eq, _mask(self, "~"), False)

    def __floordiv__(self, other: Any) -> Tensor:
        return bind(ew.floor_divide, self, other)

    def __rfloordiv__(self, other: Any) -> Tensor:
        return bind(ew.floor_divide, other, self)

    def __mod__(self, other: Any) -> Tensor:
        return bind(ew.remainder, self, other)

    def __rmod__(self, other: Any) -> Tensor:
        return bind(ew.remainder, other, self)

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
        index = normalize_index(index)
        arrays = [i for i in index if isinstance(i, Tensor)]  # computed by a graph (traced)
        if arrays:
            holes = iter(range(len(arrays)))
            index = tuple(shape_ops.Hole(next(holes)) if isinstance(i, Tensor) else i
                          for i in index)
            return bind(shape_ops.gather, self, *arrays, index=index)
        return bind(shape_ops.getitem, self, index=index)

    # --- In-place updates ---------------------------------------------------------------------
    # ``p -= lr * p.grad`` computes ``p - lr * p.grad`` as usual and then makes *this* tensor
    # object hold the result. Arrays the tape saved earlier are never overwritten, so an update
    # cannot corrupt a pending backward pass; and every holder of `p` (a model, an optimizer)
    # sees the new values. ``t[i] = v`` is the same: an op computes the new values, and `t`
    # takes them. While tracing, the graph builder records the update instead (see `_take`).

    def _assign(self, result: Tensor, op: str) -> Tensor:
        if autodiff.is_grad_enabled() and isinstance(self._node, autodiff.Leaf):
            raise autodiff.AutodiffError(
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
        if not isinstance(self._node, autodiff.Leaf):
            self._node = value._node

    def __iadd__(self, other: Any) -> Tensor:
        return self._assign(bind(ew.add, self, other), "+=")

    def __isub__(self, other: Any) -> Tensor:
        return self._assign(bind(ew.sub, self, other), "-=")

    def __imul__(self, other: Any) -> Tensor:
        return self._assign(bind(ew.mul, self, other), "*=")

    def __itruediv__(self, other: Any) -> Tensor:
        return self._assign(bind(ew.div, self, other), "/=")

    def __setitem__(self, index: Any, value: Any) -> None:
        """``t[index] = value``: new values with the index set (differentiable, except into a
        leaf that requires grad, which only `no_grad` may change)."""
        mask = index if isinstance(index, Tensor) and index.dtype == np.bool_ else None
        if mask is not None and mask.shape == self.shape[:mask.ndim] and _is_scalar(value):
            # x[mask] = v keeps x's shape: it is where(mask, v, x), in both modes (the positions
            # a mask picks are known only when a graph runs, but where needs none of them).
            wide = mask.reshape(mask.shape + (1,) * (self.ndim - mask.ndim)) if \
                mask.ndim < self.ndim else mask
            self._assign(bind(ew.where, wide, value, self), "setitem")
            return
        index = normalize_index(index)
        if any(isinstance(i, Tensor) for i in index):
            raise TraceError("assigning at positions a traced tensor holds is not supported: "
                             "the positions exist only when the graph runs", op="setitem",
                             hint="build the new values with tfl.where, or index with a NumPy "
                                  "array")
        self._assign(bind(shape_ops.setitem, self, value, index=index), "setitem")

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

    def softplus(self) -> Tensor:
        return bind(ew.softplus, self)

    def abs(self) -> Tensor:
        return bind(ew.abs, self)

    # --- Reductions ---------------------------------------------------------------------------

    # `dtype` and `out` are here for NumPy: np.sum(t), np.mean(t), np.max(t) and np.min(t) call
    # these methods with them, and get a tensor back.

    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False,
            dtype: Any = None, out: Any = None, **other: Any) -> Tensor:
        """Sum over `axis` (an int, a tuple, or None for all axes)."""
        if other:
            raise _keywords_error("sum", other)
        axis = reduction.normalize_axes("sum", axis, self.shape)
        return _as_numpy_asked(bind(reduction.sum, self, axis=axis, keepdims=bool(keepdims)),
                               "sum", dtype, out)

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False,
             dtype: Any = None, out: Any = None, **other: Any) -> Tensor:
        if other:
            raise _keywords_error("mean", other)
        axis = reduction.normalize_axes("mean", axis, self.shape)
        return _as_numpy_asked(bind(reduction.mean, self, axis=axis, keepdims=bool(keepdims)),
                               "mean", dtype, out)

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False,
            out: Any = None, **other: Any) -> Tensor:
        if other:
            raise _keywords_error("max", other)
        axis = reduction.normalize_axes("max", axis, self.shape)
        return _as_numpy_asked(bind(reduction.max, self, axis=axis, keepdims=bool(keepdims)),
                               "max", None, out)

    # --- Shape --------------------------------------------------------------------------------

    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        """``x.reshape(2, 3)`` or ``x.reshape((2, 3))``; one size may be -1."""
        shape = _shape_arg(shape, "reshape", unknown_ok=True)
        return self if shape == self.shape else bind(shape_ops.reshape, self, shape=shape)

    def transpose(self, *axes: int | Sequence[int], **named: Any) -> Tensor:
        """Permute the axes; with no arguments, reverse them (``x.T``). The axes may also be
        given as NumPy's ``axes=(1, 0)``. As in NumPy, the axes are the new order of *all* of
        them: ``x.transpose(1, 0)`` of a 2-d tensor swaps its two axes, and PyTorch's habit
        ``x.transpose(0, 1)`` (two axes to swap), which would keep every axis in place, is
        explained instead."""
        if len(axes) == 2 and self.ndim == 2 and all(is_int(a) and -2 <= a < 2 for a in axes) \
                and [a % 2 for a in axes] == [0, 1]:
            raise ShapeError(
                f"x.transpose({axes[0]}, {axes[1]}) names the new order of both axes (as in "
                "NumPy), which keeps them where they are; PyTorch's transpose swaps two axes",
                op="transpose", hint="swap them with x.T, x.swapaxes(0, 1) or x.transpose(1, 0)")
        return self._permuted(axes, named)

    def _permuted(self, axes: tuple, named: dict) -> Tensor:
        if named:
            if set(named) != {"axes"} or axes:
                raise _keywords_error("transpose", {k: v for k, v in named.items()
                                                    if k != "axes" or axes})
            axes = () if named["axes"] is None else (named["axes"],)
        if len(axes) == 1 and not is_int(axes[0]):
            if not isinstance(axes[0], Sequence):
                raise DTypeError(f"transpose takes axes (ints), not {axes[0]!r}",
                                 op="transpose", hint="x.transpose() reverses the axes; "
                                                      "x.transpose(1, 0, 2) names each")
            axes = tuple(axes[0])
        if not axes:
            axes = tuple(reversed(range(self.ndim)))
        return bind(shape_ops.transpose, self, axes=shape_ops.permutation(axes, self.shape))

    @property
    def T(self) -> Tensor:
        return self.transpose()

    # --- NumPy's ufuncs -----------------------------------------------------------------------
    # ``np.tanh(t)``, ``np.add(t, 1)`` and ``ndarray + t`` ask the tensor what to do (NumPy's
    # ``__array_ufunc__`` protocol). A ufunc is the NumPy kernel of at most one op, and that op
    # is the answer, applied through `bind` like any method: the result is a Tensor, recorded on
    # the tape, or a node of the graph while tracing. (``np.asarray(t)`` is `__array__`, above.)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        mask_method = _MASK_UFUNCS.get(ufunc)
        if mask_method is not None and method == "__call__" and not kwargs:
            return mask_method(*(_mask(x, ufunc.__name__) for x in inputs))
        op = op_for_ufunc(ufunc)
        if op is None or method != "__call__" or kwargs:
            raise _ufunc_error(ufunc, method, kwargs, op)
        return bind(op, *inputs)

    def __array_function__(self, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        """Other NumPy functions on tensors (``np.where(t > 0, t, 0)``, ``np.concatenate``):
        teachflow's twin of the function where it has one that means the same (`NUMPY_TWINS`),
        so the result is a tensor, on the tape or in the graph. Any other function computes on
        the values, as before; but never silently for a tensor that needs a gradient or is
        traced, whose gradient (or graph) it would lose."""
        twin = NUMPY_TWINS.get(func)
        if twin is not None:
            try:
                return twin(*args, **kwargs)
            except TypeError as exc:  # arguments NumPy takes and teachflow's twin does not
                name = func.__name__
                raise DTypeError(f"np.{name} on tensors is tfl.{name}, which does not take "
                                 f"these arguments: {exc}", op=f"np.{name}",
                                 hint=f"call tfl.{name} or the method t.{name}(...) with "
                                      "teachflow's arguments") from exc
        tensors = [x for x in _leaves((args, kwargs)) if isinstance(x, Tensor)]
        traced = any(isinstance(t._data, Value) for t in tensors)
        if traced or any(t._node is not None for t in tensors):
            name = f"np.{func.__name__}"
            raise (TraceError if traced else TeachflowError)(
                f"{name} has no teachflow twin: on these tensors it would compute on their "
                "values alone, losing the gradient (or the graph, while tracing)", op=name,
                hint=f"compose it from teachflow's ops, or call {name} on t.numpy() (or "
                     "t.detach()) to compute on the values on purpose")
        return func(*_leaves_as_arrays(args), **_leaves_as_arrays(kwargs))

    # --- PyTorch's and NumPy's names ----------------------------------------------------------
    # Learners arrive with PyTorch or NumPy habits. These methods are the common ones, each a
    # call of an op or a few; `__getattr__` names the teachflow spelling of the others.

    def min(self, axis: int | Sequence[int] | None = None, keepdims: bool = False,
            out: Any = None, **other: Any) -> Tensor:
        if other:
            raise _keywords_error("min", other)
        axis = reduction.normalize_axes("min", axis, self.shape)
        return _as_numpy_asked(bind(reduction.min, self, axis=axis, keepdims=bool(keepdims)),
                               "min", None, out)

    def argmax(self, axis: int | None = None, keepdims: bool = False, **other: Any) -> Tensor:
        """Where the largest value is along `axis` (None: in the flattened tensor), as int64;
        the first place where several tie."""
        if other:
            raise _keywords_error("argmax", other)
        axis = reduction.normalize_one_axis("argmax", axis, self.shape)
        return bind(reduction.argmax, self, axis=axis, keepdims=bool(keepdims))

    def argmin(self, axis: int | None = None, keepdims: bool = False, **other: Any) -> Tensor:
        if other:
            raise _keywords_error("argmin", other)
        axis = reduction.normalize_one_axis("argmin", axis, self.shape)
        return bind(reduction.argmin, self, axis=axis, keepdims=bool(keepdims))

    def var(self, axis: int | Sequence[int] | None = None, *positional: Any,
            keepdims: bool = False, correction: int | float = 1, **other: Any) -> Tensor:
        """The variance: the squared deviations from the mean, summed and divided by
        ``n - correction``. The default 1 is PyTorch's (unbiased); ``correction=0`` is NumPy's.
        Only the axis is taken by position: a second one means keepdims to PyTorch's habits of
        old (``x.var(1, False)``: unbiased), dtype to NumPy's."""
        if positional:
            raise DTypeError(f"var takes one argument by position, the axis; got "
                             f"{1 + len(positional)}", op="var",
                             hint="name the others: x.var(1, correction=0) (biased, NumPy's "
                                  "ddof=0), x.var(1, keepdims=True)")
        if other:
            raise _keywords_error("var", other)
        if not isinstance(correction, int | float | np.integer | np.floating) or \
                isinstance(correction, bool):
            raise DTypeError(f"correction is a number (1: unbiased, 0: biased), not "
                             f"{correction!r}", op="var", hint="x.var(axis, correction=0)")
        axis = reduction.normalize_axes("var", axis, self.shape)
        sides = [self.shape[a] for a in (range(self.ndim) if axis is None else axis)]
        deviation = self - self.mean(axis=axis, keepdims=True)
        squares = (deviation * deviation).sum(axis=axis, keepdims=keepdims)
        if None in sides:  # a size known only when the graph runs: count then
            count = bind(reduction.count_of, self, axis=axis, dtype=squares.dtype)
            return squares / bind(ew.maximum, count - correction, 0)
        return squares / builtins.max(math.prod(sides) - correction, 0)

    def clip(self, min: Any = None, max: Any = None) -> Tensor:
        """The values limited to ``[min, max]`` (PyTorch's clamp). A bound may be None (no limit
        on that side) or a tensor. The gradient is 1 where ``min <= x <= max``, else 0."""
        if min is None and max is None:
            raise TeachflowError("clip needs a min, a max, or both", op="clip",
                                 hint="x.clip(0.0, 1.0), x.clip(min=0.0) or x.clip(max=1.0)")
        lo = ew.unbounded(self.dtype, above=False) if min is None else min
        hi = ew.unbounded(self.dtype, above=True) if max is None else max
        return bind(ew.clip, self, lo, hi)

    def softmax(self, axis: int = -1, **other: Any) -> Tensor:
        """``exp(x) / sum(exp(x))`` along `axis`, computed stably.

        Subtracting the maximum first changes nothing mathematically (it cancels in the ratio)
        but keeps `exp` from overflowing. The maximum is detached: its gradient would cancel
        anyway. As in PyTorch, a 0-d tensor's softmax is 1, and an empty axis gives an empty
        result.
        """
        if other:
            raise _keywords_error("softmax", other)
        axes = self._softmax_axes(axis, "softmax")
        e = self._shifted(axes).exp()
        return e / e.sum(axis=axes, keepdims=True)

    def log_softmax(self, axis: int = -1, **other: Any) -> Tensor:
        """``log(softmax(x))`` without computing the softmax: ``x - max - log(sum(exp(x - max)))``.
        """
        if other:
            raise _keywords_error("log_softmax", other)
        axes = self._softmax_axes(axis, "log_softmax")
        if self._empty_along(axes):  # no values at all: no log(0) of the empty sums either
            return self.softmax(axis).log()
        shifted = self._shifted(axes)
        return shifted - shifted.exp().sum(axis=axes, keepdims=True).log()

    def _softmax_axes(self, axis: int, op: str) -> tuple[int, ...] | None:
        """The axes to normalise over. A 0-d tensor's one value is its own axis (-1 or 0)."""
        if self.ndim == 0:
            if not (is_int(axis) and axis in (-1, 0)):
                raise ShapeError(f"axis {axis!r} is out of range for a 0-d tensor", op=op,
                                 hint="a 0-d tensor is normalised over its one value: use "
                                      "axis=-1 (the default) or 0")
            return None
        return reduction.normalize_axes(op, axis, self.shape)

    def _empty_along(self, axes: tuple[int, ...] | None) -> bool:
        return any(self.shape[a] == 0 for a in (range(self.ndim) if axes is None else axes))

    def _shifted(self, axes: tuple[int, ...] | None) -> Tensor:
        """x minus its (detached) maximum over `axes`; x itself where there is no maximum (a
        size known only when the graph runs may be 0: then the maximum of nothing is -inf)."""
        if self._empty_along(axes):
            return self
        if None in [self.shape[a] for a in (range(self.ndim) if axes is None else axes)]:
            top = bind(reduction.max, self, axis=axes, keepdims=True, initial=-math.inf)
        else:
            top = self.max(axis=axes, keepdims=True)
        return self - top.detach()

    def unsqueeze(self, dim: int) -> Tensor:
        """A new axis of size 1 at position `dim` (from ``-ndim - 1`` to ``ndim``)."""
        if not is_int(dim):
            raise DTypeError(f"unsqueeze takes one axis (an int), not {dim!r}", op="unsqueeze",
                             hint="e.g. x.unsqueeze(0) for a new first axis")
        (dim,) = reduction.normalize_axes("unsqueeze", dim, (*self.shape, 1))
        if self.shape.count(None) > 1:  # sizes unknown until the graph runs: keep them
            return self[(slice(None),) * dim + (None,)]
        return self._reshaped((*self.shape[:dim], 1, *self.shape[dim:]), "unsqueeze")

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        """Without its axes of size 1: all of them, or those among `dim` (an int or a tuple);
        an axis of `dim` whose size is not 1 stays, as in PyTorch."""
        dims = reduction.normalize_axes("squeeze", dim, self.shape)
        dims = range(self.ndim) if dims is None else dims
        if self.shape.count(None) > 1:  # sizes unknown until the graph runs: keep them
            return self[tuple(0 if i in dims and d == 1 else slice(None)
                              for i, d in enumerate(self.shape))]
        kept = tuple(d for i, d in enumerate(self.shape) if i not in dims or d != 1)
        return self._reshaped(kept, "squeeze")

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """The axes from `start_dim` to `end_dim` merged into one; by default all: a 1-d tensor
        (``x.flatten(1)`` keeps a batch axis)."""
        if self.ndim == 0:
            return self._reshaped((1,), "flatten")
        (start,) = reduction.normalize_axes("flatten", start_dim, self.shape)
        (end,) = reduction.normalize_axes("flatten", end_dim, self.shape)
        if start > end:
            raise ShapeError(f"start_dim {start_dim} comes after end_dim {end_dim} for a tensor "
                             f"of shape {self.shape}", op="flatten")
        merged = self.shape[start:end + 1]
        side = None if None in merged else math.prod(merged)
        return self._reshaped((*self.shape[:start], side, *self.shape[end + 1:]), "flatten")

    def _reshaped(self, shape: tuple, op: str) -> Tensor:
        """`reshape` to `shape`, in which one unknown size (None, a placeholder's) may remain."""
        if shape.count(None) > 1:
            raise ShapeError(f"{op} of a tensor of shape {self.shape} would leave two sizes "
                             "unknown", op=op, hint="give the graph's inputs known sizes")
        return self.reshape(tuple(-1 if d is None else d for d in shape))

    def view(self, *shape: int | Sequence[int]) -> Tensor:
        """PyTorch's name for `reshape` (a teachflow tensor has no strides that could refuse)."""
        return self.reshape(*shape)

    def permute(self, *dims: int | Sequence[int]) -> Tensor:
        """PyTorch's name for `transpose` with every axis named: ``x.permute(2, 0, 1)``."""
        return self._permuted(dims, {})

    def swapaxes(self, axis1: int, axis2: int) -> Tensor:
        """Exchange two axes (what PyTorch's ``x.transpose(0, 1)`` does)."""
        order = list(range(self.ndim))
        (a,) = reduction.normalize_axes("swapaxes", axis1, self.shape)
        (b,) = reduction.normalize_axes("swapaxes", axis2, self.shape)
        order[a], order[b] = order[b], order[a]
        return self._permuted(tuple(order), {})

    def clone(self) -> Tensor:
        """A copy in new memory; gradients flow through it unchanged."""
        return bind(ew.copy, self)

    def numel(self) -> int:
        """The number of elements (NumPy: ``t.size``)."""
        return self.size.__index__()

    def dim(self) -> int:
        """The number of axes (NumPy: ``t.ndim``)."""
        return self.ndim



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


#: PyTorch's and NumPy's names for what teachflow spells otherwise: on a Tensor each is a
#: `ForeignName` that says so (names teachflow has, such as ``view`` or ``clone``, are methods).
FOREIGN_NAMES = {
    "clamp": "x.clip(min, max)", "clamp_min": "x.clip(min=...)", "clamp_max": "x.clip(max=...)",
    "cuda": "x.to('gpu')", "is_cuda": "x.device == 'gpu'",
    "mm": "x @ y", "bmm": "x @ y (it batches over leading axes)", "matmul": "x @ y",
    "dot": "x @ y", "mv": "x @ v",
    "long": "x.astype('int64')", "int": "x.astype('int32')", "float": "x.astype('float32')",
    "double": "x.astype('float64')", "half": "x.astype('float16')", "bool": "x.astype('bool')",
    "type": "x.astype(dtype) (and x.dtype to read it)",
    "expand": "tfl.broadcast_to(x, shape)", "expand_as": "tfl.broadcast_to(x, other.shape)",
    "expand_dims": "x.unsqueeze(axis)", "view_as": "x.reshape(other.shape)",
    "reshape_as": "x.reshape(other.shape)", "ravel": "x.flatten()", "t": "x.T",
    "contiguous": "x (a teachflow tensor has no strides: drop the call)",
    "copy": "x.clone()", "detach_": "x = x.detach()",
    "data": "x.detach() for the values off the tape (a new tensor: to update x itself, write "
            "`with tfl.no_grad(): x -= ...`)",
    "requires_grad_": "x.requires_grad = True",
    "add_": "x += y", "sub_": "x -= y", "mul_": "x *= y", "div_": "x /= y",
    "zero_": "x[...] = 0", "fill_": "x[...] = value", "clamp_": "x = x.clip(min, max)",
    "add": "x + y", "sub": "x - y", "subtract": "x - y", "mul": "x * y", "multiply": "x * y",
    "div": "x / y", "divide": "x / y", "pow": "x ** y", "square": "x ** 2", "neg": "-x",
    "negative": "-x", "eq": "x == y", "ne": "x != y", "lt": "x < y", "le": "x <= y",
    "gt": "x > y", "ge": "x >= y",
    "maximum": "tfl.maximum(x, y)", "minimum": "tfl.minimum(x, y)",
    "masked_fill": "tfl.where(mask, value, x)", "amax": "x.max(axis)", "amin": "x.min(axis)",
    "std": "x.var(axis).sqrt()", "nelement": "x.numel()", "ndimension": "x.dim()",
    "all": "(x != 0).astype('int32').min() == 1", "any": "(x != 0).astype('int32').max() == 1",
    "norm": "(x * x).sum().sqrt()", "mT": "x.swapaxes(-1, -2)", "sign": "tfl.where(x > 0, 1, "
    "tfl.where(x < 0, -1, 0))", "prod": "x.log().sum().exp() (for positive x)",
    "exp_": "x = x.exp()", "abs_": "x = x.abs()", "sqrt_": "x = x.sqrt()",
    "round": "np.round(x.numpy()) (no gradient)", "cumsum": "a loop of x[i] sums (no op yet)",
    "gather": "indexing: x[np.arange(n), index]", "repeat": "tfl.concatenate([x] * k, axis)",
    "numpy_": "x.numpy()", "to_numpy": "x.numpy()", "cpu_": "x.cpu()",
}


class ForeignName:
    """A PyTorch or NumPy name that teachflow spells otherwise (``t.clamp``): reading it on a
    tensor raises the AttributeError Python would, saying what to write instead. (A class
    attribute rather than ``__getattr__``: defining ``__getattr__`` would slow down every
    attribute read of every tensor.)"""

    def __init__(self, name: str, spelling: str) -> None:
        self.name, self.spelling = name, spelling

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        raise AttributeError(f"'Tensor' object has no attribute '{self.name}': teachflow spells "
                             f"it {self.spelling}", name=self.name, obj=instance)


for _name, _spelling in FOREIGN_NAMES.items():
    setattr(Tensor, _name, ForeignName(_name, _spelling))
del _name, _spelling


#: NumPy functions and teachflow's functions that mean the same, filled in by
#: `teachflow.library` (``np.where`` -> ``tfl.where``): what `Tensor.__array_function__` calls.
NUMPY_TWINS: dict[Any, Any] = {}


def _leaves(tree: Any) -> Iterator[Any]:
    if isinstance(tree, list | tuple):
        for item in tree:
            yield from _leaves(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _leaves(item)
    else:
        yield tree


def _leaves_as_arrays(tree: Any) -> Any:
    """`tree` with every tensor replaced by its values (NumPy then computes on those)."""
    if isinstance(tree, Tensor):
        return tree.numpy()
    if isinstance(tree, list | tuple):
        return type(tree)(_leaves_as_arrays(x) for x in tree)
    if isinstance(tree, dict):
        return {k: _leaves_as_arrays(v) for k, v in tree.items()}
    return tree


def _ufunc_error(ufunc: np.ufunc, method: str, kwargs: dict, op: Any) -> TeachflowError:
    """Why NumPy's `ufunc`, called this way, does not run on a tensor, and what to call."""
    name = f"np.{ufunc.__name__}"
    if op is None:
        return TeachflowError(f"teachflow has no op for {name}; call {name}(t.numpy()) to "
                              "compute on the values (no gradient)", op=name)
    if method != "__call__":
        return TeachflowError(
            f"{name}.{method}(...) does not run on tensors; only a call such as {name}(a, b) "
            f"does (it becomes teachflow's {op.name})", op=name,
            hint=f"call {name}.{method} on t.numpy() to compute on the values (no gradient)"
                 + ("; for sums use t.sum(axis=...)" if ufunc is np.add else ""))
    if "out" in kwargs:
        return TeachflowError(
            f"{name}(..., out=...) would write into an existing array; teachflow computes new "
            "tensors instead", op=name,
            hint=f"use the result: y = {name}(...); for `array += tensor` write "
                 "`array = array + tensor` (a Tensor) or `array += tensor.numpy()`")
    return TeachflowError(f"{name} with {', '.join(f'{k}=' for k in kwargs)} does not run on "
                          "tensors", op=name,
                          hint=f"call {name} with its operands only; cast with .astype(...)")


# PyTorch's keywords, and what teachflow (as NumPy) calls them, with an example.
_NUMPY_KEYWORDS = {"dim": ("axis", "axis=1"), "keepdim": ("keepdims", "keepdims=True"),
                   "unbiased": ("correction", "correction=0 for unbiased=False")}


def _keywords_error(op: str, given: dict) -> DTypeError:
    """A call with keywords it does not take; PyTorch's names for NumPy's are named."""
    name = next(iter(given))
    if name not in _NUMPY_KEYWORDS:
        return DTypeError(f"{op}() got an unexpected keyword argument {name!r}", op=op,
                          hint=f"help(tfl.{op}) lists what it takes")
    ours, example = _NUMPY_KEYWORDS[name]
    return DTypeError(f"{op}() takes {ours}= (NumPy's name) where PyTorch takes {name}=", op=op,
                      hint=f"e.g. {op}(..., {example})")


def _is_scalar(x: Any) -> bool:
    """One number: a Python or NumPy scalar, or a tensor or array of one value and no axes."""
    return isinstance(x, bool | int | float | np.generic) or (
        isinstance(x, Tensor | np.ndarray) and x.ndim == 0)


#: NumPy's ufuncs on masks (``np.logical_and(m1, m2)``, ``np.True_ & m``): the mask operators.
_MASK_UFUNCS = {
    np.bitwise_and: lambda a, b: Tensor.__and__(a, b) if isinstance(a, Tensor) else b & a,
    np.logical_and: lambda a, b: Tensor.__and__(a, b) if isinstance(a, Tensor) else b & a,
    np.bitwise_or: lambda a, b: Tensor.__or__(a, b) if isinstance(a, Tensor) else b | a,
    np.logical_or: lambda a, b: Tensor.__or__(a, b) if isinstance(a, Tensor) else b | a,
    np.invert: Tensor.__invert__,
    np.logical_not: Tensor.__invert__,
}


def _mask(x: Any, op: str) -> Any:
    """An operand of &, | or ~: a boolean tensor (or a Python bool)."""
    if isinstance(x, bool | np.bool_) or (isinstance(x, Tensor) and x.dtype == np.bool_):
        return bool(x) if isinstance(x, np.bool_) else x
    what = f"a {x.dtype.name} tensor" if isinstance(x, Tensor) else type(x).__name__
    raise DTypeError(f"{op} combines masks (boolean tensors), and this operand is {what}",
                     op=op, hint="compare first, e.g. (x > 0) & (x < 1); for integers' bits "
                                 "compute on x.numpy()")


def _as_numpy_asked(result: Tensor, op: str, dtype: Any, out: Any) -> Tensor:
    """A reduction's result in the dtype NumPy asked for; NumPy's `out=` cannot be honoured."""
    if out is not None:
        raise DTypeError(f"np.{op}(..., out=...) would write into an array in place, and a "
                         "tensor's values never change in place", op=op,
                         hint=f"use the result: y = np.{op}(t) (a tensor), or t.{op}()")
    return result if dtype is None else result.astype(dtype)


def _rebuild(values: np.ndarray, device: str, requires_grad: bool) -> Tensor:
    return Tensor(values, device=device, requires_grad=requires_grad)


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
    if copy and not isinstance(data, list | tuple | bool | int | float | complex):
        array = array.copy()  # an array, or an object sharing its buffer: our own values
    return array


# Python numbers become the framework defaults, not NumPy's 64-bit floats.
_DEFAULT_FOR_PYTHON = {np.dtype(np.float64): np.float32, np.dtype(np.complex128): np.complex64}


def default_dtype(*numbers: Any) -> np.dtype:
    """The dtype a tensor made from these Python numbers together gets: NumPy's, with floats
    float32 rather than float64 (the framework default)."""
    dtype = np.result_type(*numbers)
    return np.dtype(_DEFAULT_FOR_PYTHON.get(dtype, dtype))


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
    return _to_array(x, None, backend_of_array(x), copy=False)


def as_tensor(data: Any, dtype: Any = None, device: str | None = None) -> Tensor:
    """`data` as a Tensor, without copying when it already is one (or a NumPy array)."""
    if isinstance(data, Tensor):
        t = data if device is None else data.to(device)
        return t if dtype is None else t.astype(dtype)
    backend = get_backend(device) if device is not None else backend_of_array(data)
    t = Tensor._make(_to_array(data, dtype, backend, copy=False), backend, None)
    return dispatch.current_interpreter().lift(t)


def _shape_arg(shape: tuple, op: str, unknown_ok: bool = False) -> tuple[int, ...]:
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


def _slice_bound(bound: Any) -> int:
    try:
        return operator.index(bound)
    except TypeError:
        raise DTypeError(f"slice bounds must be integers, not {type(bound).__name__} {bound!r}",
                         op="getitem") from None


def normalize_index(index: Any) -> tuple:
    """An index as a tuple of ints, slices, None, Ellipsis and host (NumPy) integer/bool arrays."""
    items = index if isinstance(index, tuple) else (index,)
    normalized = []
    for item in items:
        if isinstance(item, Tensor):
            if isinstance(item._data, Value) and item._data.kind == "const":
                item = item._data.data  # a constant of the program: its values are known
            elif isinstance(item._data, Value) and item.dtype.kind == "b":
                raise TraceError(
                    f"indexing with the traced mask {item._data}: how many values it picks "
                    "would depend on values that tracing does not know", op="getitem",
                    hint="keep the shape with tfl.where(mask, x, 0), or index with a NumPy "
                         "array (a constant)")
            elif isinstance(item._data, Value):  # an index array computed by the graph
                if item.dtype.kind not in "iu":
                    raise DTypeError(f"index arrays must hold integers or booleans, not "
                                     f"{item.dtype}", op="getitem")
                normalized.append(item)
                continue
            else:
                item = item.numpy()
        elif isinstance(item, list):
            try:
                item = np.asarray(item) if item else np.zeros(0, dtype=np.intp)
            except ValueError:
                raise IndexingError(f"the index {item!r} is a ragged list: its rows have "
                                    "different lengths", op="getitem",
                                    hint="index arrays must be rectangular; for several axes "
                                         "give one list per axis: x[[0, 1], [2, 0]]") from None
        elif isinstance(item, np.generic):  # np.int64(1) indexes as 1 does
            item = item.item()
        elif isinstance(item, slice):  # x[k:] with k = np.int64(1), or a 0-d integer tensor
            item = slice(*(None if b is None else _slice_bound(b)
                           for b in (item.start, item.stop, item.step)))
        if isinstance(item, np.ndarray) and item.dtype.kind not in "iub":
            raise DTypeError(f"index arrays must hold integers or booleans, not {item.dtype}",
                             op="getitem")
        if not (isinstance(item, int | slice | np.ndarray) or item is None
                or item is Ellipsis):
            raise DTypeError(f"cannot index a tensor with {type(item).__name__} {item!r}",
                             op="getitem", hint="use ints, slices, None, ... or integer arrays")
        normalized.append(item)
    return tuple(normalized)
