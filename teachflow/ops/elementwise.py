"""Elementwise ops: one value in, one value out, at every position (after broadcasting).

Each op is a single declaration: its kernel (against the array module `xp`), its gradient rule
(with teachflow ops, so gradients can be traced and differentiated again), what the forward pass
saves for that rule, and the C expression the fusion pass turns a chain of these ops into. A
kernel that fusion may run takes ``out=``, as a ufunc does, so that a fused NumPy kernel can run
it into a buffer it reuses (views, such as `identity`, need none: their value is their operand).

Each input has its own rule, which names exactly what it reads (``mul``'s rule for x is
``lambda g, y: g * y``): that is how backward computes, and the forward pass keeps, only what the
inputs that need a gradient use. Rules are written with operators where those read like the
maths (``g * out``) and with ``bind(op, ...)`` for ops that have no operator (``where``).

Shape and dtype follow NumPy: operands broadcast, and dtypes promote as NumPy promotes them, with
Python scalars *weak* (``float32_tensor * 2.0`` stays float32). Gradient rules never sum back over
broadcast dimensions themselves: the autodiff engine does that in one place for every op.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.ops import batching, tangents
from teachflow.ops.op import Op, no_tangent
from teachflow.ops.shape_rules import elementwise_rule


def elementwise(
    name: str,
    kernel: Callable[[ModuleType], Any],
    fusion: str,
    grads: tuple | None = None,
    arg_names: tuple[str, ...] = ("x", "y"),
    **facts: Any,
) -> Op:
    """Declare an elementwise op: its shape rule is broadcasting, its dtype rule NumPy's; its
    JVP rule the diagonal one (none for an op without gradients: a comparison, a sign), its
    batching rule the one of every op that broadcasts. `facts` are any other fields of the
    declaration (``commutative=True``; see `Op`)."""
    jvp = no_tangent if grads is None else tangents.diagonal
    return Op(name, kernel, elementwise_rule(kernel), grads=grads, fusion=fusion,
              arg_names=arg_names, broadcasts=True, jvp=jvp, batch=batching.elementwise,
              **facts)


def _share(g: Any, x: Any, y: Any, x_wins: Any, to_x: bool) -> Any:
    """Gradient of maximum/minimum: to the operand that won; split evenly where they are equal."""
    wins = bind(where, x_wins, g, 0) if to_x else bind(where, x_wins, 0, g)
    return bind(where, bind(eq, x, y), 0.5 * g, wins)


def _pow_dx(g: Any, x: Any, y: Any) -> Any:
    # d(x**y)/dx = y * x**(y-1). Where y == 0 the power is the constant 1, so the derivative is 0
    # even at x == 0, where the formula would give 0 * inf = nan.
    if hasattr(y, "shape"):
        # Replace x by 1 where y == 0 *before* the power, so no inf appears even in the
        # derivative of this rule (a masked nan would still poison the next derivative).
        safe_x = bind(where, y == 0, 1, x)
        return bind(where, y == 0, 0, g * y * safe_x ** (y - 1))
    if y == 0:  # zeros, even where g is inf or nan (as PyTorch)
        return bind(where, True, 0, g)
    return g * y * x ** (y - 1)


def _pow_dy(g: Any, x: Any, out: Any) -> Any:
    # d(x**y)/dy = x**y * log(x). At x == 0 with y >= 0 the limit is 0 (x**y is 0, or 1 for
    # y == 0, whatever log says), which is what PyTorch and JAX give; for y < 0, x**y is inf and
    # so is the gradient, and for y nan it is nan. Which case it is, `out` tells (0 or 1 only
    # for y >= 0), so the rule needs neither y nor, for ``2.0 ** y``, anything but the output. x
    # is replaced by 1 where the limit is 0 before the log, so no -inf appears even in the next
    # derivative.
    if hasattr(x, "shape"):
        at_zero = bind(where, x == 0, out <= 1, False)
        log_x = bind(log, bind(where, at_zero, 1, x))
        return bind(where, at_zero, 0, g * out * log_x)
    # A Python-scalar base (``2 ** x``) gets a Python-scalar log: an op on the scalar alone would
    # run on the CPU and clash with a GPU cotangent.
    if x == 0:
        return g * out * bind(where, out <= 1, 0, -math.inf)
    return g * out * math.log(x) if x > 0 else g * out * math.nan


# --- Arithmetic ---------------------------------------------------------------------------------


def _exact_for_floats(dtype: np.dtype) -> bool:
    """maximum/minimum commute except for floats: ``maximum(-0.0, 0.0)`` is -0.0 but
    ``maximum(0.0, -0.0)`` is 0.0 (NumPy returns the first of two equal values)."""
    return dtype.kind not in "fc"


add = elementwise("add", lambda xp: xp.add, "({0} + {1})",
                  grads=(lambda g: g, lambda g: g), commutative=True)
sub = elementwise("sub", lambda xp: xp.subtract, "({0} - {1})",
                  grads=(lambda g: g, lambda g: -g))
mul = elementwise("mul", lambda xp: xp.multiply, "({0} * {1})",
                  grads=(lambda g, y: g * y, lambda g, x: g * x), commutative=True)
div = elementwise("div", lambda xp: xp.true_divide, "({0} / {1})",
                  grads=(lambda g, y: g / y, lambda g, y, out: -g * out / y))
neg = elementwise("neg", lambda xp: xp.negative, "(-{0})",
                  grads=(lambda g: -g,), arg_names=("x",))
pow = elementwise("pow", lambda xp: xp.power, "pow({0}, {1})", grads=(_pow_dx, _pow_dy),
                  fusion_literal=((1, 0.5, "sqrt({0})"),))
# In C, NaN must be tested for explicitly: NumPy's maximum and minimum propagate it.
_MAX_C = "(({0} > {1} || {0} != {0}) ? {0} : {1})"
_MIN_C = "(({0} < {1} || {0} != {0}) ? {0} : {1})"
maximum = elementwise(
    "maximum", lambda xp: xp.maximum, _MAX_C,
    grads=(lambda g, x, y: _share(g, x, y, bind(gt, x, y), to_x=True),
           lambda g, x, y: _share(g, x, y, bind(gt, x, y), to_x=False)),
    commutative=_exact_for_floats)
minimum = elementwise(
    "minimum", lambda xp: xp.minimum, _MIN_C,
    grads=(lambda g, x, y: _share(g, x, y, bind(lt, x, y), to_x=True),
           lambda g, x, y: _share(g, x, y, bind(lt, x, y), to_x=False)),
    commutative=_exact_for_floats)
# clip(x, lo, hi) is minimum(maximum(x, lo), hi), as NumPy computes it (hi wins where lo > hi).
# Its gradient is PyTorch's clamp's: x gets g where lo <= x <= hi; a bound gets g where it won.
clip = elementwise(
    "clip", lambda xp: xp.clip, _MIN_C.format(_MAX_C, "{2}"),
    grads=(lambda g, x, lo, hi: bind(where, x >= lo, bind(where, x <= hi, g, 0), 0),
           lambda g, x, lo, hi: bind(where, lo < hi, bind(where, x < lo, g, 0), 0),
           lambda g, x, lo, hi: bind(where, hi < lo, g, bind(where, x > hi, g, 0))),
    arg_names=("x", "lo", "hi"))


def unbounded(dtype: np.dtype, above: bool) -> bool | int | float:
    """The bound that clips nothing for `dtype`: what ``x.clip(max=3)`` takes as its min. Python
    scalars, so they are weak (an int tensor stays int; inf would make it float64)."""
    if dtype.kind == "b":
        return above
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return int(info.max if above else info.min)
    return math.inf if above else -math.inf

# Floor division and its remainder, with Python's signs (the remainder has the divisor's). Not
# fused: C's / and % round toward zero instead. A floor has no gradient; x % y = x - y⌊x/y⌋.
floor_divide = Op("floor_divide", lambda xp: xp.floor_divide,
                  elementwise_rule(lambda xp: xp.floor_divide), jvp=no_tangent,
                  batch=batching.elementwise)
remainder = Op("remainder", lambda xp: xp.remainder, elementwise_rule(lambda xp: xp.remainder),
               grads=(lambda g: g, lambda g, x, y: -g * bind(floor_divide, x, y)),
               jvp=tangents.diagonal, batch=batching.elementwise)

# --- Transcendental and activation functions ---------------------------------------------------

exp = elementwise("exp", lambda xp: xp.exp, "exp({0})",
                  grads=(lambda g, out: g * out,), arg_names=("x",))
log = elementwise("log", lambda xp: xp.log, "log({0})",
                  grads=(lambda g, x: g / x,), arg_names=("x",))
sqrt = elementwise("sqrt", lambda xp: xp.sqrt, "sqrt({0})",
                   grads=(lambda g, out: 0.5 * g / out,), arg_names=("x",))
tanh = elementwise("tanh", lambda xp: xp.tanh, "tanh({0})",
                   grads=(lambda g, out: g * (1 - out * out),), arg_names=("x",))


def _sigmoid(xp: ModuleType) -> Callable[..., Any]:
    def sigmoid(x: Any, out: Any = None) -> Any:
        # exp(-log(1 + e^-x)) is 1 / (1 + e^-x) without overflow for large negative x. Into a
        # given `out`, every step is computed in place.
        if x.dtype.kind == "u":  # (-x would wrap around, where the sigmoid is of the number)
            x = x.astype(xp.result_type(x, xp.float16))
        log_1p_exp = xp.logaddexp(0, xp.negative(x, out=out), out=out)
        return xp.exp(xp.negative(log_1p_exp, out=out), out=out)

    return sigmoid


sigmoid = elementwise("sigmoid", _sigmoid, "(1 / (1 + exp(-{0})))",
                      grads=(lambda g, out: g * out * (1 - out),), arg_names=("x",))
relu = elementwise("relu", lambda xp: lambda x, out=None: xp.maximum(x, 0, out=out),
                   "(({0} > 0 || {0} != {0}) ? {0} : ({dtype})0)",
                   grads=(lambda g, out: g * (out > 0),), arg_names=("x",))
# log(1 + e^x) is log(e^0 + e^x): logaddexp never overflows. In C as NumPy computes logaddexp.
softplus = elementwise("softplus", lambda xp: lambda x, out=None: xp.logaddexp(0, x, out=out),
                       "(({0} > 0) ? {0} + log1p(exp(-{0})) : log1p(exp({0})))",
                       grads=(lambda g, x: g * bind(sigmoid, x),), arg_names=("x",))
# NaN has no sign: NumPy gives NaN, where the comparisons alone would give 0.
sign = elementwise("sign", lambda xp: xp.sign,
                   "(({0} != {0}) ? {0} : ({dtype})(({0} > 0) - ({0} < 0)))", arg_names=("x",))
abs = elementwise("abs", lambda xp: xp.abs, "abs({0})",
                  grads=(lambda g, x: g * bind(sign, x),), arg_names=("x",))

# --- Comparisons and selection (no gradient flows through a comparison) ----------------------

lt = elementwise("lt", lambda xp: xp.less, "({0} < {1})")
le = elementwise("le", lambda xp: xp.less_equal, "({0} <= {1})")
gt = elementwise("gt", lambda xp: xp.greater, "({0} > {1})")
ge = elementwise("ge", lambda xp: xp.greater_equal, "({0} >= {1})")
eq = elementwise("eq", lambda xp: xp.equal, "({0} == {1})", commutative=True)
ne = elementwise("ne", lambda xp: xp.not_equal, "({0} != {1})", commutative=True)


def _where(xp: ModuleType) -> Callable[..., Any]:
    def where(cond: Any, x: Any, y: Any, out: Any = None) -> Any:
        if out is None:
            return xp.where(cond, x, y)
        # y everywhere, then x where cond is true. Each is made an array first and then cast,
        # as np.where does (a literal -3 is 253 in uint8).
        xp.copyto(out, xp.asarray(y), casting="unsafe")
        xp.copyto(out, xp.asarray(x), casting="unsafe", where=xp.asarray(cond, dtype=bool))
        return out

    return where


where = elementwise("where", _where, "({0} ? {1} : {2})",
                    grads=(None, lambda g, cond: bind(where, cond, g, 0),
                           lambda g, cond: bind(where, cond, 0, g)),
                    arg_names=("cond", "x", "y"), fusion_as_is=("cond",), out_may_alias=False)

# --- Casts --------------------------------------------------------------------------------------



def _astype(xp: ModuleType) -> Callable[..., Any]:
    def astype(x: Any, *, dtype: np.dtype, out: Any = None) -> Any:
        if out is None:
            return x.astype(dtype)
        xp.copyto(out, x, casting="unsafe")  # any cast, as x.astype(dtype) makes it
        return out

    return astype


astype = Op("astype", _astype, lambda x, *, dtype: type(x)(x.shape, dtype),
            grads=(lambda g, x_spec: g.astype(x_spec.dtype),),
            fusion="(({dtype}){0})", fusion_as_is=("x",), arg_names=("x",),
            jvp=tangents.linear, batch=batching.elementwise)
# The identity: `tfl.grad` uses it to watch an input that an outer `tfl.grad` already tracks.
identity = elementwise("identity", lambda xp: lambda x: x, "{0}",
                       grads=(lambda g: g,), arg_names=("x",), view=True)
# The identity whose gradient is zero: `x.detach()`, and the max in a stable softmax.
stop_gradient = Op("stop_gradient", lambda xp: lambda x: x,
                   lambda x: x, fusion="{0}", arg_names=("x",), view=True,
                   jvp=no_tangent, batch=batching.elementwise)
# `x.clone()`: the same values in new memory; its gradient is the identity's.
clone = Op("clone", lambda xp: lambda x: x.copy(), lambda x: x, grads=(lambda g: g,),
           arg_names=("x",), jvp=tangents.linear, batch=batching.elementwise)

