"""Forward mode's rules that many ops share: the values of an op's `jvp` field.

A JVP rule answers: when the operands move along their tangents, how does the result move? It
gets the op, the operands (`primals`), their tangents (None for one that does not move: a zero
nobody has to compute), the result, and the op's parameters; it gives the result's tangent, or
None. Most ops need no rule of their own:

- `diagonal`: an elementwise op's Jacobian is diagonal, so it is its own transpose: the VJP
  rule of each operand, given that operand's tangent where it takes the cotangent, is that
  operand's part of the JVP (``mul``: ``g * y`` becomes ``tx * y``). The parts add up.
- `linear`: an op linear in its operands (reshape, sum, indexing, concatenate, a copy) moves
  the tangents as it moves the values: the tangent is the op applied to them.
- `bilinear`: the product rule, for an op linear in each operand alone (``matmul``): one term
  per moving operand, with the others at their values.
- `op.no_tangent`: a result that cannot move smoothly: integers and bools (comparisons,
  argmax), values made from nothing (zeros, random numbers), a gradient stopped on purpose.

`teachflow.rewrites.forward` applies them, node by node.
"""

from __future__ import annotations

from typing import Any

from teachflow.core.dispatch import bind
from teachflow.ops import creation


def _moves(x: Any) -> bool:
    """A result has a tangent only if it is floating point."""
    return x.dtype.kind in "fc"


def zeros_of(x: Any) -> Any:
    """The tangent of an operand that does not move, where an op must be given one."""
    return bind(creation.full, shape=x.shape, fill_value=0, dtype=x.dtype, device=x.device)


def rule_inputs(op: Any, i: int, primals: tuple, out: Any, params: dict) -> dict:
    """What the VJP rule of operand `i` reads, by name (as the backward pass gives it)."""
    _, reads = op.rule(i)
    kwargs: dict = {name: primals[j] for name, j, _ in reads.inputs}
    if reads.out:
        kwargs["out"] = out
    if reads.index:
        kwargs["i"] = i
    if reads.all_inputs or reads.all_values:
        kwargs["xs" if reads.all_inputs else "inputs"] = primals
    kwargs.update((name, params[name]) for name in reads.params)
    return kwargs


def diagonal(op: Any, primals: tuple, tangents: tuple, out: Any, params: dict) -> Any:
    """An elementwise op's JVP: each operand's VJP rule applied to its tangent, added up."""
    if not _moves(out):
        return None
    total = None
    for i, t in enumerate(tangents):
        found = None if t is None else op.rule(i)
        if found is None:
            continue
        term = found[0](t, **rule_inputs(op, i, primals, out, params))
        total = term if total is None else total + term
    if total is None:
        return None
    if total.shape != out.shape:  # (an operand that broadcast: its tangent stretches too)
        total = total + zeros_of(out)
    return total if total.dtype == out.dtype else total.astype(out.dtype)


def linear(op: Any, primals: tuple, tangents: tuple, out: Any, params: dict) -> Any:
    """The op applied to the tangents of the operands it is linear in (those with a VJP rule);
    the others (an index array, the `like` of a shape) stay as they are."""
    if not _moves(out) or all(t is None for t in tangents):
        return None
    args = [(zeros_of(x) if t is None else t) if op.rule(i) is not None else x
            for i, (x, t) in enumerate(zip(primals, tangents, strict=True))]
    return bind(op, *args, **params)


def bilinear(op: Any, primals: tuple, tangents: tuple, out: Any, params: dict) -> Any:
    """The product rule: ``d(a @ b) = da @ b + a @ db``."""
    if not _moves(out):
        return None
    total = None
    for i, t in enumerate(tangents):
        if t is None:
            continue
        term = bind(op, *primals[:i], t, *primals[i + 1:], **params)
        total = term if total is None else total + term
    return total

