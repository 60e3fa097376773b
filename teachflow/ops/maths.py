"""More elementwise ops: the maths library's functions (``sin``, ``erf``, ``log2``, ``rsqrt``),
rounding (``floor``, ``ceil``, ``round``) and the tests of a float (``isnan``, ``isinf``).

Each is declared as `teachflow.ops.elementwise` declares its ops, with the same helper: a kernel
against `xp` that takes ``out=`` (a ufunc), a gradient rule written with teachflow ops, and
the C expression fusion writes for it (``erf`` is C's, from ``math.h``; CUDA has it too).

Rounding is flat almost everywhere: its derivative is 0 where it exists, so ``floor`` and
friends declare no gradient rule, and a gradient that reaches them stops there as zeros (as
PyTorch gives). ``isnan`` and ``isinf`` give bools, which have no gradient at all.

NumPy has no ``erf``: on the CPU its kernel is SciPy's ufunc where SciPy is installed (it is,
with scikit-learn), else Python's ``math.erf`` element by element (right, and slow).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.ops.elementwise import elementwise
from teachflow.ops.elementwise import exp as _exp

_TWO_OVER_ROOT_PI = 2 / math.sqrt(math.pi)
_LN2 = math.log(2)


def _erf(xp: ModuleType) -> Callable[..., Any]:
    if xp is not np:
        from cupyx.scipy.special import erf as cupy_erf  # (CuPy's own ufunc)
        return cupy_erf
    try:
        from scipy.special import erf as library_erf
    except ImportError:
        library_erf = np.frompyfunc(math.erf, 1, 1)

    def erf(x: Any, out: Any = None) -> Any:
        """In the float dtype NumPy's ufuncs give (SciPy's gives float16 a float64)."""
        if out is not None:
            out[...] = library_erf(x)
            return out
        x = np.asarray(x)
        result = np.asarray(library_erf(x))
        wanted = np.result_type(x.dtype, np.float16)
        return result if result.dtype == wanted else result.astype(wanted)

    return erf


def _rsqrt(xp: ModuleType) -> Callable[..., Any]:
    def rsqrt(x: Any, out: Any = None) -> Any:
        if out is None:
            return xp.reciprocal(xp.sqrt(x))
        return xp.reciprocal(xp.sqrt(x, out=out), out=out)  # (into one buffer, in place)

    return rsqrt


# --- The maths library --------------------------------------------------------------------------

sin = elementwise("sin", lambda xp: xp.sin, "sin({0})",
                  grads=(lambda g, x: g * bind(cos, x),), arg_names=("x",))
cos = elementwise("cos", lambda xp: xp.cos, "cos({0})",
                  grads=(lambda g, x: -g * bind(sin, x),), arg_names=("x",))
# erf(x) = 2/√π ∫₀ˣ e^(-t²) dt: its derivative is the integrand at x.
erf = elementwise("erf", _erf, "erf({0})",
                  grads=(lambda g, x: g * _TWO_OVER_ROOT_PI * bind(_exp, -(x * x)),),
                  arg_names=("x",))
log2 = elementwise("log2", lambda xp: xp.log2, "log2({0})",
                   grads=(lambda g, x: g / (x * _LN2),), arg_names=("x",))
# 1/√x, whose derivative -½ x^(-3/2) is -½ out³: the rule reads only the output.
rsqrt = elementwise("rsqrt", _rsqrt, "(1 / sqrt({0}))",
                    grads=(lambda g, out: -0.5 * g * out * out * out,), arg_names=("x",))

# --- Rounding: zero gradient ---------------------------------------------------------------------

floor = elementwise("floor", lambda xp: xp.floor, "floor({0})", arg_names=("x",))
ceil = elementwise("ceil", lambda xp: xp.ceil, "ceil({0})", arg_names=("x",))
# To the nearest integer, halves to the even one (2.5 -> 2.0), as NumPy, PyTorch and C's rint
# (in the default rounding mode) all do.
round = elementwise("round", lambda xp: xp.rint, "rint({0})", arg_names=("x",))

# --- Tests of a float: bools, no gradient --------------------------------------------------------

# NaN is the one value not equal to itself. An infinity minus itself is NaN, where a finite
# value minus itself is 0: no function call, so the same text is C's and CUDA's for any type.
isnan = elementwise("isnan", lambda xp: xp.isnan, "({0} != {0})", arg_names=("x",))
isinf = elementwise("isinf", lambda xp: xp.isinf, "(({0} == {0}) && ({0} - {0} != {0} - {0}))",
                    arg_names=("x",))
