"""``tfl.while_loop`` and ``tfl.fori_loop``: loops that stay loops in the graph.

Traced, a Python loop is unrolled: a thousand steps are a thousand copies of the body in the
graph, and a loop whose trip count depends on a tensor's value cannot be traced at all. These
loops are one node each, owning the body's graph (and a ``while_loop``'s condition), traced once
whatever the trip count. The values the loop carries from step to step (its *carry*) keep their
shapes and dtypes, since the one body graph must accept what it gives.

- ``while_loop(cond_fn, body_fn, init)``: ``carry = init; while cond_fn(carry): carry =
  body_fn(carry)``. The trip count depends on data, which is exactly what reverse mode cannot
  handle: it would have to keep every step's values on a tape of unknown length. JAX refuses to
  differentiate it for that reason, and so does teachflow, with an `AutodiffError` that says so.
- ``fori_loop(lower, upper, body_fn, init)``: ``for i in range(lower, upper): carry =
  body_fn(i, carry)``, with Python-int bounds, so the trip count is fixed when the graph is
  built. Its gradient runs the loop backwards: a forward loop that also keeps the carry at the
  start of each step (its *history*, one stacked tensor per carry), then a loop from the last
  step to the first that applies the body's gradient (`graph_vjp`) to that step's carry.

`i` is a 0-d int64 tensor in both modes (traced, it must be: one body serves every step), weakly
typed as the Python int it stands for (`weak.WeakTensor`): ``carry + i`` keeps a float32 carry
float32. So is a Python number the loop carries (``(x, 0)``: a counter).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from teachflow.autodiff.backprop import filled_like
from teachflow.core import dispatch
from teachflow.core.dispatch import bind
from teachflow.core.errors import AutodiffError, TeachflowError, expect_callable
from teachflow.core.tree import tree_flatten, tree_unflatten
from teachflow.execution.control.carry import as_carry
from teachflow.execution.control.control_op import (
    ControlOp,
    batched_function,
    control_op,
    graph_function,
    tangent_function,
    with_tangents,
)
from teachflow.execution.control.loop_code import (
    emit_fori,
    emit_while,
    fori_rule,
    while_rule,
)
from teachflow.execution.control.loop_run import Loop, while_vjp
from teachflow.execution.control.vjp import graph_vjp
from teachflow.execution.executor import Line, Source
from teachflow.graph import Node
from teachflow.ops import shape as shape_ops
from teachflow.ops.op import Op
from teachflow.ops.tangents import zeros_of
from teachflow.ops.views import batched
from teachflow.tensor.tensor import Tensor

# --- while_loop -------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class WhileOp(ControlOp):
    #: It runs until its condition fails, which on some inputs is never (the compiler's check
    #: of each pass runs it on the caller's inputs only).
    unbounded = True
    def rerun(self, args: Sequence[Any], params: dict) -> tuple:
        cond, body = graph_function(params["cond_fn"]), graph_function(params["body_fn"])
        m = len(params["body_fn"].outputs)
        free = list(args[m:])
        loop = Loop(lambda c: cond(*c, *free)[0], lambda c: body(*c, *free),
                    tree_flatten(list(args[:m]))[1], None, "while_loop", self)
        return tuple(dispatch.call(loop, tuple(args[:m]), {}))

    def emit(self, source: Source, node: Node, operands: list[str],
             results: list[str]) -> list[Line]:
        return emit_while(source, node, operands, results)


def _while_jvp(op: Op, primals: tuple, tangents: tuple, params: dict,
               transformed: Callable) -> tuple:
    """The tangents of a loop are carried by the loop: each step is the body's JVP (forward
    mode needs no tape, so a trip count that depends on data is no obstacle)."""
    body = params["body_fn"]
    m = len(body.outputs)
    free = list(primals[m:])
    floats, start = _carried(body, primals[:m], tangents[:m])
    moving = [*floats, *(m + q for q, t in enumerate(tangents[m:]) if t is not None)]
    run, _ = tangent_function(body, moving, transformed)
    moved_free = [t for t in tangents[m:] if t is not None]
    holds = graph_function(params["cond_fn"])
    results = run_while(lambda c: holds(*c[:m], *free)[0],
                        lambda c: run(*c[:m], *free, *c[m:], *moved_free),
                        [*primals[:m], *start])
    return with_tangents(results, m, floats)


def _while_batch(op: Op, args: tuple, dims: tuple, params: dict, size: int,
                 transformed: Callable) -> tuple:
    """Refused: each example may stop after a number of steps of its own."""
    raise TeachflowError("tfl.vmap does not cover tfl.while_loop: each example may stop after "
                         "a number of steps of its own", op="while_loop",
                         hint="use tfl.fori_loop (a fixed trip count), or loop outside the "
                              "vmapped function")


WHILE = control_op(WhileOp, "while", while_rule, while_vjp, (), jvp=_while_jvp,
                   batch=_while_batch)

def while_loop(cond_fn: Callable, body_fn: Callable, init: Any) -> Any:
    """``carry = init; while cond_fn(carry): carry = body_fn(carry)``; returns the carry.

    `init` is a tensor or a tuple/list of them (numbers become tensors); `cond_fn` returns a
    scalar bool tensor, `body_fn` a carry of the same structure, shapes and dtypes. Traced, the
    loop is one node, whatever its trip count; it cannot be differentiated (use `fori_loop`).
    """
    expect_callable(cond_fn, "while_loop", "tfl.while_loop(cond_fn, body_fn, init)")
    expect_callable(body_fn, "while_loop", "tfl.while_loop(cond_fn, body_fn, init)")
    return run_while(cond_fn, body_fn, init)


def run_while(cond_fn: Callable, body_fn: Callable, init: Any,
              names: Sequence[str] | None = None) -> Any:
    """`while_loop`; `names` name the carry (``@tfl.script`` gives the variables' names)."""
    leaves, tree = tree_flatten(init)
    leaves = as_carry(leaves, "while_loop")
    loop = Loop(cond_fn, body_fn, tree, names, "while_loop", WHILE)
    return tree_unflatten(tree, list(dispatch.call(loop, tuple(leaves), {})))


# --- fori_loop --------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ForiOp(ControlOp):
    def rerun(self, args: Sequence[Any], params: dict) -> tuple:
        body = params["body_fn"]
        m = len(body.outputs)
        run = graph_function(body)
        free = list(args[2 + m:])
        return tuple(_fori(args[0], args[1], lambda i, *c: run(i, *c, *free), list(args[2:2 + m]),
                           history=params.get("history", False)))

    def emit(self, source: Source, node: Node, operands: list[str],
             results: list[str]) -> list[Line]:
        return emit_fori(source, node, operands, results)


def _fori_vjp(cotangents: list, inputs: tuple, params: dict, needs: tuple) -> list:
    """Run the loop forward keeping each step's carry, then backwards through the body's
    gradient, from the last step to the first.

    A loop that kept its history is differentiated too when a second derivative is wanted (the
    backward loop read it): row ``i`` of the history is the carry step ``i`` started from, so
    its cotangent joins that carry's on the way back."""
    lower, upper = inputs[0], inputs[1]
    if not (isinstance(lower, int) and isinstance(upper, int)):
        raise AutodiffError(
            "this fori_loop's bounds are tensors, so its trip count depends on data: it cannot "
            "be differentiated (as a while_loop cannot)", op="fori_loop",
            hint="give fori_loop Python-int bounds")
    body = params["body_fn"]
    m = len(body.outputs)
    carry, free = list(inputs[2:2 + m]), list(inputs[2 + m:])
    floats = [k for k in range(m) if carry[k].dtype.kind in "fc"]
    wanted = [q for q in range(len(free)) if needs[2 + m + q]]
    out: list = [None] * len(inputs)
    if upper <= lower:  # no step ran: the result is the initial carry itself
        for k in floats:
            out[2 + k] = cotangents[k]
        for q in wanted:
            out[2 + m + q] = filled_like(free[q], 0)
        return out
    run = graph_function(body)
    forward = _fori(lower, upper, lambda i, *c: run(i, *c, *free), carry, history=True)
    history = forward[m:]
    kept = [cotangents[m + k] for k in floats] if params.get("history") else []

    def step_back(j: Any, *state: Any) -> list:
        i = (upper - 1) - j
        row = i - lower if lower else i

        def at_row(h: Any) -> Any:  # h[row], row a traced index
            return bind(shape_ops.gather, h, row, index=(shape_ops.Hole(0),))
        at = [at_row(h) for h in history]
        cts: list = [None] * m
        for k, ct in zip(floats, state, strict=False):
            cts[k] = ct
        wrt = [1 + k for k in floats] + [1 + m + q for q in wanted]
        grads = graph_vjp(body, [i, *at, *free], cts, wrt)
        back = [grads[1 + k] for k in floats]
        back = [g + at_row(h) for g, h in zip(back, kept, strict=True)] if kept else back
        sums = state[len(floats):]
        return back + [s + grads[1 + m + q] for s, q in zip(sums, wanted, strict=True)]

    start = [cotangents[k] for k in floats] + [filled_like(free[q], 0) for q in wanted]
    back = _fori(0, upper - lower, step_back, start) if start else []
    for k, g in zip(floats, back, strict=False):
        out[2 + k] = g
    for q, g in zip(wanted, back[len(floats):], strict=True):
        out[2 + m + q] = g
    return out


def _carried(body: Any, carry: Sequence[Any], tangents: Sequence[Any]) -> tuple:
    """A loop's floating-point carries, and their tangents to start from (zeros for one that
    does not move yet: a step may make it move)."""
    floats = [k for k in range(len(body.outputs)) if carry[k].dtype.kind in "fc"]
    return floats, [zeros_of(carry[k]) if tangents[k] is None else tangents[k] for k in floats]


def _fori_jvp(op: Op, primals: tuple, tangents: tuple, params: dict,
              transformed: Callable) -> tuple:
    """The tangents of a loop are carried by the loop: each step is the body's JVP.

    A loop that keeps its history (the forward loop of a gradient) keeps its tangents' too."""
    body = params["body_fn"]
    m = len(body.outputs)
    free = list(primals[2 + m:])
    floats, start = _carried(body, primals[2:2 + m], tangents[2:2 + m])
    moving = [*(1 + k for k in floats),
              *(1 + m + q for q, t in enumerate(tangents[2 + m:]) if t is not None)]
    run, _ = tangent_function(body, moving, transformed)
    moved_free = [t for t in tangents[2 + m:] if t is not None]

    def step(i: Any, *state: Any) -> list:
        return run(i, *state[:m], *free, *state[m:], *moved_free)
    history = params.get("history", False)
    results = _fori(primals[0], primals[1], step, [*primals[2:2 + m], *start], history=history)
    if not history:
        return with_tangents(results, m, floats)
    f = len(floats)  # results: carry, carried tangents, then the history of each, in that order
    outs, moved = with_tangents(results[:m + f], m, floats)
    kept, kept_moved = with_tangents([*results[m + f:2 * m + f], *results[2 * m + f:]], m, floats)
    return [*outs, *kept], [*moved, *kept_moved]


def _fori_batch(op: Op, args: tuple, dims: tuple, params: dict, size: int,
                transformed: Callable) -> tuple:
    """Moved every carry's batch axis to the front: the body runs batched, step after step.

    The history a loop keeps stacks the steps first: its batch axis comes second."""
    if dims[0] is not None or dims[1] is not None:
        raise _not_covered("tfl.vmap", "a loop whose bounds differ between examples")
    body = params["body_fn"]
    m = len(body.outputs)
    carry = [batched(x, d, size) for x, d in zip(args[2:2 + m], dims[2:2 + m], strict=True)]
    run = batched_function(body, [None, *[0] * m, *dims[2 + m:]], size, transformed)
    free = list(args[2 + m:])
    history = params.get("history", False)
    results = _fori(args[0], args[1], lambda i, *c: run(i, *c, *free), carry, history=history)
    return results, [0] * m + [1] * (m if history else 0)


def _not_covered(transformation: str, what: str) -> TeachflowError:
    return TeachflowError(f"{transformation} does not cover {what}", op="fori_loop",
                          hint="keep the loop outside the transformed function")


FORI = control_op(ForiOp, "fori_loop", fori_rule, _fori_vjp, ("lower", "upper"),
                  jvp=_fori_jvp, batch=_fori_batch)


def fori_loop(lower: int, upper: int, body_fn: Callable, init: Any) -> Any:
    """``for i in range(lower, upper): carry = body_fn(i, carry)``; returns the carry.

    The bounds are Python ints, so the trip count is fixed: traced, the loop is one node (not
    ``upper - lower`` copies of the body), and gradients flow through it. `i` is a 0-d int64
    tensor; `init` a tensor or a tuple/list of them, and `body_fn` keeps its structure, shapes
    and dtypes.
    """
    expect_callable(body_fn, "fori_loop", "tfl.fori_loop(lower, upper, body_fn, init)")
    for name, value in (("lower", lower), ("upper", upper)):
        if isinstance(value, bool) or not _is_int(value):
            raise TeachflowError(
                f"the {name} bound must be a Python int, not {type(value).__name__}",
                op="fori_loop", hint="a bound that depends on a tensor's value makes the trip "
                                     "count data-dependent: use tfl.while_loop for that")
    return run_fori(operator.index(lower), operator.index(upper), body_fn, init)


def run_fori(lower: Any, upper: Any, body_fn: Callable, init: Any,
             names: Sequence[str] | None = None) -> Any:
    """`fori_loop`; the bounds may be int tensors (``@tfl.script``'s ``range(n)``)."""
    leaves, tree = tree_flatten(init)
    leaves = as_carry(leaves, "fori_loop")
    loop = Loop(None, body_fn, tree, names, "fori_loop", FORI, bounds=(lower, upper))
    return tree_unflatten(tree, list(dispatch.call(loop, tuple(leaves), {})))


def _fori(lower: Any, upper: Any, body_fn: Callable, init: list,
          history: bool = False) -> list:
    """A fori loop over flat lists: ``body_fn(i, *carry)`` gives the new carry as a list."""
    leaves, tree = tree_flatten(list(init))
    loop = Loop(None, lambda i, c: body_fn(i, *c), tree, None, "fori_loop", FORI,
                bounds=(lower, upper), history=history)
    return list(dispatch.call(loop, tuple(leaves), {}))


def _is_int(value: Any) -> bool:
    try:
        operator.index(value)
    except TypeError:
        return False
    return not isinstance(value, Tensor)
