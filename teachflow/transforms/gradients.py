"""Gradients as functions: ``tfl.grad(f)`` and ``tfl.value_and_grad(f)``, JAX's style.

`Tensor.backward` (the tape, `teachflow.autodiff.tape`) fills ``.grad`` of leaves, as PyTorch does.
These are the other way to ask for a gradient: a *function* that returns it. ``grad(f)(x)``
watches each differentiated argument as a fresh leaf, runs `f`, and backpropagates from its
scalar result to those leaves only. Nothing is written into any ``.grad``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from teachflow.autodiff.backprop import backpropagate, filled_like, seed_of
from teachflow.autodiff.tape import enable_grad
from teachflow.core import dispatch
from teachflow.core.dispatch import bind
from teachflow.core.errors import (
    AutodiffError,
    DTypeError,
    GradientWarning,
    expect_callable,
    on_behalf_of,
    warn_at_user_line,
)
from teachflow.core.spec import is_int
from teachflow.core.tree import tree_flatten, tree_unflatten
from teachflow.ops import elementwise
from teachflow.tensor.tensor import Tensor, as_tensor


def _watch(x: Any, argnum: int, connected: bool) -> Any:
    """A tensor standing for argument `x`, whose gradient backward can stop at."""
    x = as_tensor(x)
    if x.dtype.kind not in "fc":
        raise DTypeError(f"cannot differentiate with respect to argument {argnum}: it has dtype "
                         f"{x.dtype.name}, and gradients need floating point", op="grad",
                         hint="pass a float tensor, e.g. x.astype('float32')")
    if connected and x._node is not None:
        # Tracked by someone else (an outer tfl.grad, say): stay connected, so they can
        # differentiate through this gradient.
        return bind(elementwise.identity, x)
    # The same values on a new leaf. While tracing, a tensor from outside the trace is the
    # stand-in that reads it when the graph runs (the gradient sees its values at that time).
    x = dispatch.current_interpreter().operand(x)
    fresh = Tensor._make(x._data, x._backend, None)
    fresh.requires_grad = True
    return fresh


#: How many value_and_grad calls are running their function right now (nesting depth).
_depth = 0


def value_and_grad(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """``value_and_grad(f)(*args) -> (f(*args), df/dargs)`` for a scalar-valued `f`.

    `argnums` picks the arguments to differentiate (an int, or a tuple for a tuple of
    gradients). An argument may be a tensor or a list/tuple/dict of tensors; its gradient has
    the same structure.

    Gradients of gradients work: when an argument is itself tracked (it requires grad, for
    instance because an outer `grad` is differentiating with respect to it), the backward pass is
    recorded too, so the gradient returned can be differentiated again.
    """
    return _differentiate(f, argnums, want_value=True)


def grad(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """``grad(f)(*args)``: the gradient of scalar-valued `f` with respect to ``args[argnums]``."""
    return _differentiate(f, argnums, want_value=False)


def _differentiate(f: Callable, argnums: int | Sequence[int], want_value: bool) -> Callable:
    op = "value_and_grad" if want_value else "grad"
    expect_callable(f, op, f"tfl.{op}(f)(x)")
    single = is_int(argnums)
    nums = (argnums,) if single else tuple(argnums) if isinstance(argnums, Sequence) else None
    if nums is None or not nums or not all(is_int(i) for i in nums):
        raise AutodiffError(f"argnums picks the arguments to differentiate by position: an int "
                            f"or a non-empty tuple of ints, not {argnums!r}", op=op,
                            hint=f"tfl.{op}(f, argnums=0), or argnums=(0, 1) for two")
    nums = tuple(int(i) for i in nums)

    @functools.wraps(f)
    def differentiated(*args: Any, **kwargs: Any) -> Any:
        global _depth
        args = list(args)
        for i in nums:
            if not -len(args) <= i < len(args):
                raise AutodiffError(f"argnums={argnums} but the function got {len(args)} "
                                    "positional argument(s)", op="grad")
        flat = [tree_flatten(args[i]) for i in nums]  # (leaves, treedef) per differentiated arg
        # Inside another gradient computation (``grad(grad(f))``), this backward pass must
        # itself be recorded so the result can be differentiated again. Otherwise it is not,
        # even for arguments that require grad (a model's parameters): a gradient is a plain
        # value, as PyTorch's ``autograd.grad`` gives it unless asked for ``create_graph``.
        create_graph = _depth > 0
        watched = []
        with enable_grad():
            for i, (leaves, treedef) in zip(nums, flat, strict=True):
                fresh = [_watch(x, i, create_graph) for x in leaves]
                args[i] = tree_unflatten(treedef, fresh)
                watched.append(fresh)
            _depth += 1
            try:
                out = f(*args, **kwargs)
            finally:
                _depth -= 1
        grads = iter(_gradients(out, [w for ws in watched for w in ws], create_graph))
        results = tuple(tree_unflatten(treedef, [next(grads) for _ in ws])
                        for (_, treedef), ws in zip(flat, watched, strict=True))
        gradient = results[0] if single else results
        if not want_value:
            return gradient
        return (out if create_graph else out.detach()), gradient

    return differentiated


def _gradients(out: Any, inputs: list, create_graph: bool) -> list:
    if not isinstance(out, Tensor) or out.spec.size != 1:
        what = f"shape {out.shape}" if isinstance(out, Tensor) else type(out).__name__
        raise AutodiffError(f"the function must return a scalar tensor, but returned {what}",
                            op="grad", hint="return a scalar such as loss.sum() or loss.mean()")
    found: dict = {}
    if out._node is not None:
        targets = {x._node for x in inputs}
        origin = getattr(out._node, "source", None)
        with on_behalf_of(origin and replace(origin, note="seed: d(out)/d(out) = 1")):
            seed = seed_of(out, None, "grad")
        found = dict(backpropagate(out._node, seed, targets, create_graph))
    if not found:
        warn_at_user_line(
            "the function's output does not depend on the arguments differentiated: no op "
            "recorded links them, so each gradient is zeros. Expected otherwise? Then the "
            "output was computed outside teachflow (NumPy, .numpy(), .item(), float()), under "
            "tfl.no_grad(), through .detach() or a comparison, or by code whose result comes "
            "back as plain values", GradientWarning)
    return [found[x._node] if x._node in found else filled_like(x, 0)
            for x in inputs]
