"""Elementwise ops: one value in, one value out, at every position (after broadcasting).

Each op is a single declaration: its kernel (against the array module `xp`), its gradient rule
(with teachflow ops, so gradients can be traced and differentiated again), what the forward pass
saves for that rule, and the C expression the fusion pass turns a chain of these ops into.

A rule receives its inputs positionally in every case; for ops that save "nothing" they are None
(add's rule, ``lambda g, x, y: (g, g)``, never looks at x or y). Rules are written with
operators where those read like the maths (``g * out``) and with ``bind(op, ...)`` for ops that
have no operator (``where``).

Shape and dtype follow NumPy: operands broadcast, and dtypes promote as NumPy promotes them, with
Python scalars *weak* (``float32_tensor * 2.0`` stays float32). Gradient rules never sum back over
broadcast dimensions themselves: the autodiff engine does that in one place for every op.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from teachflow.dispatch import bind
from teachflow.ops.op import Op, elementwise_rule


def elementwise(
    name: str,
    kernel: Callable[[ModuleType], Any],
    fusion: str,
    vjp: Callable[..., tuple] | None = None,
    saves: str = "inputs",
    saves_output: bool = False,
    arg_names: tuple[str, ...] = ("x", "y"),
    commutative: bool = False,
) -> Op:
    """Declare an elementwise op: its shape rule is broadcasting, its dtype rule NumPy's."""
    return Op(name, kernel, elementwise_rule(kernel), vjp=vjp, saves=saves,
              saves_output=saves_output, fusion=fusion, arg_names=arg_names,
              commutative=commutative)


def _select(g: Any, x: Any, y: Any, x_wins: Any) -> tuple:
    """Gradient of maximum/minimum: to the operand that won; split evenly where they are equal."""
    tie = bind(eq, x, y)
    return (bind(where, tie, 0.5 * g, bind(where, x_wins, g, 0)),
            bind(where, tie, 0.5 * g, bind(where, x_wins, 0, g)))


def _pow_vjp(g: Any, x: Any, y: Any, *, out: Any) -> tuple:
    # d(x**y)/dx = y * x**(y-1). Where y == 0 the power is the constant 1, so the derivative is 0
    # even at x == 0, where the formula would give 0 * inf = nan.
    if hasattr(y, "shape"):
        # Replace x by 1 where y == 0 *before* the power, so no inf appears even in the
        # derivative of this rule (a masked nan would still poison the next derivative).
        safe_x = bind(where, y == 0, 1, x)
        dx = bind(where, y == 0, 0, g * y * safe_x ** (y - 1))
    else:
        dx = g * y * x ** (y - 1) if y != 0 else g * 0
    # d(x**y)/dy = x**y * log(x); only worth computing when the exponent is a tensor.
    # A Python-scalar base (``2 ** x``) gets a Python-scalar log: an op on the scalar alone
    # would run on the CPU and clash with a GPU cotangent.
    if not getattr(y, "requires_grad", False):
        return dx, None
    log_x = bind(log, x) if hasattr(x, "shape") else float(np.log(x))
    return dx, g * out * log_x


# --- Arithmetic ---------------------------------------------------------------------------------

add = elementwise("add", lambda xp: xp.add, "({0} + {1})",
                  vjp=lambda g, x, y: (g, g), saves="nothing", commutative=True)
sub = elementwise("sub", lambda xp: xp.subtract, "({0} - {1})",
                  vjp=lambda g, x, y: (g, -g), saves="nothing")
mul = elementwise("mul", lambda xp: xp.multiply, "({0} * {1})",
                  vjp=lambda g, x, y: (g * y, g * x), commutative=True)
div = elementwise("div", lambda xp: xp.true_divide, "({0} / {1})",
                  vjp=lambda g, x, y, *, out: (g / y, -g * out / y), saves_output=True)
neg = elementwise("neg", lambda xp: xp.negative, "(-{0})",
                  vjp=lambda g, x: (-g,), saves="nothing", arg_names=("x",))
pow = elementwise("pow", lambda xp: xp.power, "pow({0}, {1})",
                  vjp=_pow_vjp, saves_output=True)
# In C, NaN must be tested for explicitly: NumPy's maximum and minimum propagate it.
maximum = elementwise("maximum", lambda xp: xp.maximum, "(({0} > {1} || {0} != {0}) ? {0} : {1})",
                      vjp=lambda g, x, y: _select(g, x, y, bind(gt, x, y)), commutative=True)
minimum = elementwise("minimum", lambda xp: xp.minimum, "(({0} < {1} || {0} != {0}) ? {0} : {1})",
                      vjp=lambda g, x, y: _select(g, x, y, bind(lt, x, y)), commutative=True)

# --- Transcendental and activation functions ---------------------------------------------------

exp = elementwise("exp", lambda xp: xp.exp, "exp({0})",
                  vjp=lambda g, x, *, out: (g * out,), saves="nothing", saves_output=True,
                  arg_names=("x",))
log = elementwise("log", lambda xp: xp.log, "log({0})",
                  vjp=lambda g, x: (g / x,), arg_names=("x",))
sqrt = elementwise("sqrt", lambda xp: xp.sqrt, "sqrt({0})",
                   vjp=lambda g, x, *, out: (0.5 * g / out,), saves="nothing",
                   saves_output=True, arg_names=("x",))
tanh = elementwise("tanh", lambda xp: xp.tanh, "tanh({0})",
                   vjp=lambda g, x, *, out: (g * (1 - out * out),), saves="nothing",
                   saves_output=True, arg_names=("x",))
# exp(-log(1 + e^-x)) is 1 / (1 + e^-x) without overflow for large negative x.
sigmoid = elementwise("sigmoid", lambda xp: lambda x: xp.exp(-xp.logaddexp(0, -x)),
                      "(1 / (1 + exp(-{0})))",
                      vjp=lambda g, x, *, out: (g * out * (1 - out),), saves="nothing",
                      saves_output=True, arg_names=("x",))
relu = elementwise("relu", lambda xp: lambda x: xp.maximum(x, 0),
                   "(({0} > 0 || {0} != {0}) ? {0} : ({dtype})0)",
                   vjp=lambda g, x, *, out: (g * (out > 0),), saves="nothing",
                   saves_output=True, arg_names=("x",))
sign = elementwise("sign", lambda xp: xp.sign, "(({0} > 0) - ({0} < 0))", arg_names=("x",))
abs = elementwise("abs", lambda xp: xp.abs, "abs({0})",
                  vjp=lambda g, x: (g * bind(sign, x),), arg_names=("x",))

# --- Comparisons and selection (no gradient flows through a comparison) ----------------------

lt = elementwise("lt", lambda xp: xp.less, "({0} < {1})")
le = elementwise("le", lambda xp: xp.less_equal, "({0} <= {1})")
gt = elementwise("gt", lambda xp: xp.greater, "({0} > {1})")
ge = elementwise("ge", lambda xp: xp.greater_equal, "({0} >= {1})")
eq = elementwise("eq", lambda xp: xp.equal, "({0} == {1})", commutative=True)
ne = elementwise("ne", lambda xp: xp.not_equal, "({0} != {1})", commutative=True)
where = elementwise("where", lambda xp: xp.where, "({0} ? {1} : {2})",
                    vjp=lambda g, cond, x, y: (None, bind(where, cond, g, 0),
                                               bind(where, cond, 0, g)),
                    arg_names=("cond", "x", "y"))

# --- Casts --------------------------------------------------------------------------------------

astype = Op(
    "astype",
    lambda xp: lambda x, *, dtype: x.astype(dtype),
    lambda x, *, dtype: type(x)(x.shape, dtype),
    vjp=lambda g, x, *, dtype: (g.astype(x.dtype),),
    saves="shapes",
    fusion="(({dtype}){0})",
    arg_names=("x",),
)
# The identity: `tfl.grad` uses it to watch an input that an outer `tfl.grad` already tracks.
identity = elementwise("identity", lambda xp: lambda x: x, "{0}",
                       vjp=lambda g, x: (g,), saves="nothing", arg_names=("x",))
# The identity whose gradient is zero: `x.detach()`, and the max in a stable softmax.
stop_gradient = Op("stop_gradient", lambda xp: lambda x: x,
                   lambda x: x, fusion="{0}", arg_names=("x",))

