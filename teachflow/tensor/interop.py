"""NumPy's protocols: ``np.tanh(t)``, ``np.add(t, 1)``, ``ndarray + t`` and ``np.where(t > 0, t,
0)`` give tensors, on the tape or in the graph, as teachflow's own ops would; ``np.asarray(t)``
gives the values (``__array__``).

A ufunc is the NumPy kernel of at most one op (``__array_ufunc__``); another NumPy function is
answered by teachflow's twin where one means the same (``__array_function__``, `NUMPY_TWINS`,
which each section of `teachflow.tensor.functions` fills in beside its functions).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from teachflow.autodiff.tape import Tracked
from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError, TeachflowError, TraceError
from teachflow.graph import Value
from teachflow.ops.op import op_for_ufunc
from teachflow.tensor.elementwise import Elementwise, as_mask


class NumpyProtocol:
    """``__array__``, ``__array_ufunc__`` and ``__array_function__`` (a mixin of `Tensor`)."""

    __slots__ = ()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """``np.asarray(t)`` (the values, read-only), ``np.array(t)`` (a copy of them)."""
        array = self.numpy()
        if dtype is not None and np.dtype(dtype) != array.dtype:
            return array.astype(dtype)  # a new array anyway
        return array.copy() if copy else array

    # --- NumPy's ufuncs -----------------------------------------------------------------------
    # ``np.tanh(t)``, ``np.add(t, 1)`` and ``ndarray + t`` ask the tensor what to do (NumPy's
    # ``__array_ufunc__`` protocol). A ufunc is the NumPy kernel of at most one op, and that op
    # is the answer, applied through `bind` like any method: the result is a Tensor, recorded on
    # the tape, or a node of the graph while tracing.

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        mask_method = _MASK_UFUNCS.get(ufunc)
        if mask_method is not None and method == "__call__" and not kwargs:
            return mask_method(*(as_mask(x, ufunc.__name__) for x in inputs))
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
        tensors = [x for x in _leaves((args, kwargs)) if isinstance(x, Tracked)]
        traced = any(isinstance(t._data, Value) for t in tensors)
        if traced or any(t._node is not None for t in tensors):
            name = f"np.{func.__name__}"
            raise (TraceError if traced else TeachflowError)(
                f"{name} has no teachflow twin: on these tensors it would compute on their "
                "values alone, losing the gradient (or the graph, while tracing)", op=name,
                hint=f"compose it from teachflow's ops, or call {name} on t.numpy() (or "
                     "t.detach()) to compute on the values on purpose")
        return func(*_leaves_as_arrays(args), **_leaves_as_arrays(kwargs))


#: NumPy functions and teachflow's functions that mean the same, filled in by the files of
#: `teachflow.tensor.functions` (``np.where`` -> ``tfl.where``): what `Tensor.__array_function__`
#: calls.
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
    if isinstance(tree, Tracked):
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


#: NumPy's ufuncs on masks (``np.logical_and(m1, m2)``, ``np.True_ & m``): the mask operators.
_MASK_UFUNCS = {
    np.bitwise_and: lambda a, b: Elementwise.__and__(a, b) if isinstance(a, Tracked) else b & a,
    np.logical_and: lambda a, b: Elementwise.__and__(a, b) if isinstance(a, Tracked) else b & a,
    np.bitwise_or: lambda a, b: Elementwise.__or__(a, b) if isinstance(a, Tracked) else b | a,
    np.logical_or: lambda a, b: Elementwise.__or__(a, b) if isinstance(a, Tracked) else b | a,
    np.invert: Elementwise.__invert__,
    np.logical_not: Elementwise.__invert__,
}
