"""Weak tensors: a Python number become a tensor keeps the number's way of taking a dtype.

A loop's step index and a number a loop carries are tensors inside the loop (its graph needs them
as values), yet ``c + i`` must keep ``c`` float32 as ``c + 3`` would. A `WeakTensor` is such a
tensor: beside an ordinary tensor it takes that tensor's dtype, as a Python number does. The loops
of `teachflow.execution.control` make them; the functions of `teachflow.tensor.functions` respect
them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teachflow.tensor.tensor import Tensor


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
