"""A tensor's elementwise methods: ``a + b``, ``x < 0``, ``m1 & m2``, ``p -= g``, ``t.exp()``,
``t.relu()``, ``t.clip(0, 1)``: each value of the result computed from the values at its place.

Each is one call of `bind` with an op of `teachflow.ops.elementwise`: a method says *which* op to
apply, and the current execution mode decides *how* (see `teachflow.core.dispatch`). `Tensor`
inherits them from `Elementwise`; their functions (``tfl.exp``, ``tfl.maximum``, ``tfl.where``)
are in `teachflow.tensor.functions`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from teachflow.autodiff.tape import Tracked
from teachflow.core import dispatch
from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError, TeachflowError
from teachflow.ops import elementwise as ew
from teachflow.ops import maths
from teachflow.tensor.habits import ForeignName

if TYPE_CHECKING:
    from teachflow.tensor.tensor import Tensor


class Elementwise:
    """Operators and elementwise functions, each an op applied through `bind` (a mixin of
    `Tensor`)."""

    __slots__ = ()

    # --- Arithmetic ---------------------------------------------------------------------------
    # These operators do what `bind` does themselves: hand the op to the current interpreter.
    # ``a * b`` is the commonest op of all, and going through `bind` (one more Python call, and
    # a dict for its keywords) would add a tenth to its cost when it runs eagerly. The other
    # methods go through `bind`, the plain route.

    def __add__(self, other: Any) -> Tensor:
        return dispatch.current.apply(ew.add, (self, other), {})

    def __radd__(self, other: Any) -> Tensor:
        return dispatch.current.apply(ew.add, (other, self), {})

    def __sub__(self, other: Any) -> Tensor:
        return dispatch.current.apply(ew.sub, (self, other), {})

    def __rsub__(self, other: Any) -> Tensor:
        return dispatch.current.apply(ew.sub, (other, self), {})

    def __mul__(self, other: Any) -> Tensor:
        return dispatch.current.apply(ew.mul, (self, other), {})

    def __rmul__(self, other: Any) -> Tensor:
        return dispatch.current.apply(ew.mul, (other, self), {})

    def __truediv__(self, other: Any) -> Tensor:
        return dispatch.current.apply(ew.div, (self, other), {})

    def __rtruediv__(self, other: Any) -> Tensor:
        return dispatch.current.apply(ew.div, (other, self), {})

    def __pow__(self, other: Any) -> Tensor:
        return dispatch.current.apply(ew.pow, (self, other), {})

    def __rpow__(self, other: Any) -> Tensor:
        return dispatch.current.apply(ew.pow, (other, self), {})

    def __floordiv__(self, other: Any) -> Tensor:
        return dispatch.current.apply(ew.floor_divide, (self, other), {})

    def __rfloordiv__(self, other: Any) -> Tensor:
        return dispatch.current.apply(ew.floor_divide, (other, self), {})

    def __mod__(self, other: Any) -> Tensor:
        return dispatch.current.apply(ew.remainder, (self, other), {})

    def __rmod__(self, other: Any) -> Tensor:
        return dispatch.current.apply(ew.remainder, (other, self), {})

    def __neg__(self) -> Tensor:
        return dispatch.current.apply(ew.neg, (self,), {})

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        return bind(ew.abs, self)

    # --- Comparisons: bool masks, no gradient -------------------------------------------------

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

    # Masks combine with &, | and ~, as in NumPy and PyTorch (boolean tensors only).

    def __and__(self, other: Any) -> Tensor:
        return bind(ew.where, as_mask(self, "&"), as_mask(other, "&"), False)

    def __rand__(self, other: Any) -> Tensor:
        return self & other

    def __or__(self, other: Any) -> Tensor:
        return bind(ew.where, as_mask(self, "|"), True, as_mask(other, "|"))

    def __ror__(self, other: Any) -> Tensor:
        return self | other

    def __invert__(self) -> Tensor:
        return bind(ew.eq, as_mask(self, "~"), False)

    # --- In-place updates (see `Tensor._assign`) ----------------------------------------------

    def __iadd__(self, other: Any) -> Tensor:
        return self._assign(bind(ew.add, self, other), "+=")

    def __isub__(self, other: Any) -> Tensor:
        return self._assign(bind(ew.sub, self, other), "-=")

    def __imul__(self, other: Any) -> Tensor:
        return self._assign(bind(ew.mul, self, other), "*=")

    def __itruediv__(self, other: Any) -> Tensor:
        return self._assign(bind(ew.div, self, other), "/=")

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

    def softplus(self, beta: float = 1.0, threshold: float | None = None) -> Tensor:
        """``log(1 + e^(beta x)) / beta``, without overflow; with a `threshold`, x itself where
        ``beta x > threshold`` (PyTorch's ``F.softplus`` has 20; here None: never)."""
        if isinstance(beta, bool) or not isinstance(beta, int | float) or not beta > 0:
            raise TeachflowError(f"beta must be a number > 0, not {beta!r}", op="softplus",
                                 hint="beta=1.0 is the plain softplus; larger is closer to relu")
        scaled = self if beta == 1 else self * beta
        out = bind(ew.softplus, scaled)
        out = out if beta == 1 else out / beta
        if threshold is None:
            return out
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise TeachflowError(f"threshold must be a number, not {threshold!r}",
                                 op="softplus", hint="threshold=20.0, as PyTorch's")
        return bind(ew.where, scaled > threshold, self, out)

    def abs(self) -> Tensor:
        return bind(ew.abs, self)

    def sin(self) -> Tensor:
        return bind(maths.sin, self)

    def cos(self) -> Tensor:
        return bind(maths.cos, self)

    def erf(self) -> Tensor:
        """The error function, ``2/√π ∫₀ˣ e^(-t²) dt`` (the exact GELU is made of it)."""
        return bind(maths.erf, self)

    def log2(self) -> Tensor:
        return bind(maths.log2, self)

    def rsqrt(self) -> Tensor:
        """``1 / sqrt(x)``, one op (layer and batch norms divide by it)."""
        return bind(maths.rsqrt, self)

    def sign(self) -> Tensor:
        """-1, 0 or 1 (NaN stays NaN); its gradient is zero."""
        return bind(ew.sign, self)

    def floor(self) -> Tensor:
        return bind(maths.floor, self)

    def ceil(self) -> Tensor:
        return bind(maths.ceil, self)

    def round(self) -> Tensor:
        """To the nearest integer, halves to the even one (``2.5 -> 2``), as PyTorch and NumPy
        round; its gradient is zero, as floor's and ceil's."""
        return bind(maths.round, self)

    def isnan(self) -> Tensor:
        return bind(maths.isnan, self)

    def isinf(self) -> Tensor:
        return bind(maths.isinf, self)

    def isclose(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8,
                equal_nan: bool = False) -> Tensor:
        """True where ``|x - other| <= atol + rtol |other|``, and where the two are equal
        (infinities of one sign); NaN is close to NaN only with `equal_nan`, as PyTorch's.

        A function of existing ops, not an op: subtract, abs, compare and combine, which fusion
        makes one kernel; its result is a bool mask, with no gradient."""
        for name, value in (("rtol", rtol), ("atol", atol)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise TeachflowError(f"{name} must be a number >= 0, not {value!r}",
                                     op="isclose", hint="e.g. rtol=1e-5, atol=1e-8")
        if not isinstance(equal_nan, bool):
            raise TeachflowError(f"equal_nan is True or False, not {equal_nan!r}", op="isclose")
        # Equal values (infinities of one sign among them) are close; otherwise both must be
        # finite, which is tested first so that no inf - inf is computed (NumPy would warn).
        x_nan = bind(maths.isnan, self)
        if isinstance(other, bool | int | float):
            y_nan, y_finite = math.isnan(other), math.isfinite(other)
        else:
            y_nan = bind(maths.isnan, other)
            y_finite = ~(y_nan | bind(maths.isinf, other))
        finite = ~(x_nan | bind(maths.isinf, self)) & y_finite
        x, y = bind(ew.where, finite, self, 0), bind(ew.where, finite, other, 0)
        close = (self == other) | (finite & (abs(x - y) <= atol + rtol * abs(y)))
        return close | (x_nan & y_nan) if equal_nan else close

    def clip(self, min: Any = None, max: Any = None) -> Tensor:
        """The values limited to ``[min, max]`` (PyTorch's clamp). A bound may be None (no limit
        on that side) or a tensor. The gradient is 1 where ``min <= x <= max``, else 0."""
        if min is None and max is None:
            raise TeachflowError("clip needs a min, a max, or both", op="clip",
                                 hint="x.clip(0.0, 1.0), x.clip(min=0.0) or x.clip(max=1.0)")
        lo = ew.unbounded(self.dtype, above=False) if min is None else min
        hi = ew.unbounded(self.dtype, above=True) if max is None else max
        # A bound typed by the others, as a number is (a loop's index: weak.WeakTensor).
        lo, hi = (b.beside(self, lo, hi) if hasattr(b, "beside") else b for b in (lo, hi))
        return bind(ew.clip, self, lo, hi)

    def clone(self) -> Tensor:
        """A copy in new memory; gradients flow through it unchanged."""
        return bind(ew.clone, self)

    # --- PyTorch's and NumPy's names for the above, which teachflow spells otherwise ----------

    add = ForeignName("x + y")
    sub = ForeignName("x - y")
    subtract = ForeignName("x - y")
    mul = ForeignName("x * y")
    multiply = ForeignName("x * y")
    div = ForeignName("x / y")
    divide = ForeignName("x / y")
    pow = ForeignName("x ** y")
    square = ForeignName("x ** 2")
    neg = ForeignName("-x")
    negative = ForeignName("-x")
    eq = ForeignName("x == y")
    ne = ForeignName("x != y")
    lt = ForeignName("x < y")
    le = ForeignName("x <= y")
    gt = ForeignName("x > y")
    ge = ForeignName("x >= y")
    add_ = ForeignName("x += y")
    sub_ = ForeignName("x -= y")
    mul_ = ForeignName("x *= y")
    div_ = ForeignName("x /= y")
    exp_ = ForeignName("x = x.exp()")
    abs_ = ForeignName("x = x.abs()")
    sqrt_ = ForeignName("x = x.sqrt()")
    maximum = ForeignName("tfl.maximum(x, y)")
    minimum = ForeignName("tfl.minimum(x, y)")
    masked_fill = ForeignName("tfl.where(mask, value, x)")
    clamp = ForeignName("x.clip(min, max)")
    clamp_min = ForeignName("x.clip(min=...)")
    clamp_max = ForeignName("x.clip(max=...)")
    clamp_ = ForeignName("x = x.clip(min, max)")
    copy = ForeignName("x.clone()")


def as_mask(x: Any, op: str) -> Any:
    """An operand of &, | or ~: a boolean tensor (or a Python bool)."""
    if isinstance(x, bool | np.bool_) or (isinstance(x, Tracked) and x.dtype == np.bool_):
        return bool(x) if isinstance(x, np.bool_) else x
    what = f"a {x.dtype.name} tensor" if isinstance(x, Tracked) else type(x).__name__
    raise DTypeError(f"{op} combines masks (boolean tensors), and this operand is {what}",
                     op=op, hint="compare first, e.g. (x > 0) & (x < 1); for integers' bits "
                                 "compute on x.numpy()")
