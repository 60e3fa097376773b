"""What a loop carries from step to step: tensors, in one structure, each keeping its type.

One body graph serves every step of a traced loop, so what the body gives back must be what it
was given: the same structure (a tuple of two stays a tuple of two), and each loop variable the
same shape and dtype. `check_carry` says so in words when it is not, naming the variable and
what to do about it; `as_carry` makes the initial carry tensors (a Python number a weak tensor,
as the number it was: see `WeakTensor`); `carry_names` names the body's inputs in the graph's
text form, after the body's own parameters.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from teachflow.core.errors import TeachflowError, TraceError
from teachflow.core.spec import TensorSpec
from teachflow.core.tree import tree_unflatten
from teachflow.execution.control.graphs import describe
from teachflow.tensor.factories import tensor
from teachflow.tensor.tensor import Tensor
from teachflow.tensor.weak import WeakTensor


def as_carry(leaves: list, construct: str) -> list:
    """The initial carry's leaves as tensors (numbers weak, as the number they were)."""
    out = []
    for k, x in enumerate(leaves):
        if isinstance(x, bool | int | float):  # (weak, as the number it was: see WeakTensor)
            x = WeakTensor.of(tensor(x))
        elif isinstance(x, np.ndarray | np.generic):
            x = tensor(x)
        if not isinstance(x, Tensor):
            raise TeachflowError(f"loop variable {k} is {type(x).__name__}, not a tensor",
                                 op=construct, hint="a loop carries tensors (or numbers)")
        out.append(x)
    if not out:
        raise TeachflowError("the loop carries nothing", op=construct,
                             hint="init is the tensor (or tuple of tensors) the body updates")
    return out


def check_carry(where: str, construct: str, given: tuple[Any, list], got: tuple[Any, list],
                names: Sequence[str] | None) -> None:
    """Raise unless the body (`where`) gave back, as (tree, specs), the carry it was `given`."""
    (tree, specs), (out_tree, out_specs) = given, got
    if out_tree != tree:
        shapes = [tree_unflatten(t, ["tensor"] * n)
                  for t, n in ((tree, len(specs)), (out_tree, len(out_specs)))]
        raise TraceError(f"{where} returns {shapes[1]!r} for a carry of {shapes[0]!r}: "
                         "each step must give the carry back in the same structure",
                         op=construct, hint="return the new values of every loop "
                                            "variable, in the order of init")
    for k, (before, after) in enumerate(zip(specs, out_specs, strict=True)):
        if before == after:
            continue
        what = repr(names[k]) if names else str(k)
        raise TraceError(
            f"{where} changes loop variable {what} from {describe(before)} to "
            f"{describe(after)}: one body serves every step, so each loop variable keeps "
            "its shape and dtype", op=construct, hint=_keep_hint(before, after))


def _keep_hint(before: TensorSpec, after: Any) -> str:
    if isinstance(after, TensorSpec) and before.dtype == after.dtype:
        return "keep its shape (a loop that grows a tensor can fill a preallocated one)"
    hint = f"convert it back (.astype('{before.dtype.name}')), or start the loop with the dtype " \
           "it takes"
    if isinstance(after, TensorSpec) and before.dtype.kind == after.dtype.kind and \
            np.promote_types(before.dtype, after.dtype) == after.dtype:
        hint += (f". Beside an integer tensor made with tfl.tensor, NumPy computes "
                 f"{before.dtype.name} in {after.dtype.name}; beside a Python number or the "
                 f"loop's index it stays {before.dtype.name}: count with 0, not tfl.tensor(0)")
    return hint


def carry_names(body_fn: Callable, count: int, names: Sequence[str] | None,
                indexed: bool) -> list[str]:
    """The names of the body's inputs: the step index first if `indexed`, then the carry (by
    `names` where given; else by the body's parameter names: ``x``; or ``carry0``, ``carry1``
    for a tuple ``carry``)."""
    if names is not None:
        return (["i"] if indexed else []) + list(names)
    params = _parameters(body_fn)
    index = params.pop(0) if indexed and params else "i"
    carry = params[0] if params else "carry"
    carried = [carry] if count == 1 else [f"{carry}{k}" for k in range(count)]
    return ([index] if indexed else []) + carried


def _parameters(fn: Callable) -> list[str]:
    try:
        return [p.name for p in inspect.signature(fn).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return []
