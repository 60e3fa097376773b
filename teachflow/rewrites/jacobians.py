"""Whole Jacobians, from the three transformations: ``tfl.jacfwd``, ``tfl.jacrev``,
``tfl.hessian``.

The Jacobian of ``f: R^n -> R^m`` is m×n numbers. Forward mode gives one column per JVP (a
direction in), reverse mode one row per VJP (a direction out); `vmap` runs all of them at once,
one basis direction per example:

- ``jacfwd(f)``: ``vmap`` of ``jvp`` over the n basis tangents: n columns, cheap when the input
  is small (a *tall* Jacobian);
- ``jacrev(f)``: ``vmap`` of a VJP (``grad`` of the output weighted by a basis cotangent) over
  the m basis cotangents: m rows, cheap when the output is small (a *wide* one, a loss's);
- ``hessian(f) = jacfwd(jacrev(f))``: forward over reverse, as JAX composes it.

The Jacobian has the output's shape followed by the input's (JAX's and ``torch.func``'s layout).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

from teachflow.core.dispatch import bind
from teachflow.core.errors import AutodiffError, expect_callable
from teachflow.core.spec import is_int
from teachflow.ops.views import reshape, transpose
from teachflow.rewrites.forward_mode import jvp
from teachflow.rewrites.vectorizing import vmap
from teachflow.tensor.factories import eye
from teachflow.tensor.tensor import Tensor, as_tensor
from teachflow.transforms.gradients import grad


def jacfwd(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """The Jacobian of `f` with respect to ``args[argnums]``, column by column (forward mode)."""
    return _jacobian(f, argnums, "jacfwd", _columns)


def jacrev(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """The Jacobian of `f` with respect to ``args[argnums]``, row by row (reverse mode)."""
    return _jacobian(f, argnums, "jacrev", _rows)


def hessian(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """The second derivatives of scalar-valued `f`: ``jacfwd(jacrev(f))``."""
    expect_callable(f, "hessian", "tfl.hessian(f)(x)")
    return jacfwd(jacrev(f, argnums), argnums)


def _jacobian(f: Callable, argnums: Any, name: str, by: Callable) -> Callable:
    expect_callable(f, name, f"tfl.{name}(f)(x)")
    nums = (argnums,) if is_int(argnums) else tuple(argnums)
    if not nums or not all(is_int(i) for i in nums):
        raise AutodiffError(f"argnums picks the arguments by position: an int or a tuple of "
                            f"ints, not {argnums!r}", op=name, hint=f"tfl.{name}(f, argnums=0)")

    @functools.wraps(f)
    def jacobian(*args: Any) -> Any:
        args = list(args)
        for i in nums:
            args[i] = as_tensor(args[i])
            if args[i].dtype.kind not in "fc":
                raise AutodiffError(f"argument {i} has dtype {args[i].dtype.name}: a Jacobian "
                                    "needs floating point", op=name,
                                    hint="pass a float tensor, e.g. x.astype('float64')")
        found = tuple(by(f, args, i) for i in nums)
        return found[0] if is_int(argnums) else found

    return jacobian


def _with(args: list, i: int, x: Any) -> list:
    return [*args[:i], x, *args[i + 1:]]


def _basis(like: Tensor) -> Tensor:
    """One basis direction per element of `like`, stacked: ``(like.size, *like.shape)``."""
    n = math.prod(like.shape)
    return bind(reshape, eye(n, dtype=like.dtype), shape=(n, *like.shape))


def _columns(f: Callable, args: list, i: int) -> Tensor:
    """``vmap`` of ``jvp`` over the basis of argument `i`: the columns, then laid out as
    (output, input)."""
    x = args[i]

    def column(t: Tensor) -> Any:
        return jvp(lambda z: f(*_with(args, i, z)), (x,), (t,))[1]

    stacked = vmap(column)(_basis(x))  # (input size, *output)
    out_ndim = stacked.ndim - 1
    flat = bind(transpose, stacked, axes=(*range(1, out_ndim + 1), 0))
    return bind(reshape, flat, shape=(*flat.shape[:out_ndim], *x.shape))


def _rows(f: Callable, args: list, i: int) -> Tensor:
    """``vmap`` of a VJP over the basis of the output: the rows, laid out as (output, input)."""
    x = args[i]
    out = as_tensor(f(*args))

    def row(ct: Tensor) -> Any:
        return grad(lambda z: (as_tensor(f(*_with(args, i, z))) * ct).sum())(x)

    stacked = vmap(row)(_basis(out))  # (output size, *input)
    return bind(reshape, stacked, shape=(*out.shape, *x.shape))



