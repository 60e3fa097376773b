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

from teachflow.autodiff import tape
from teachflow.autodiff.backprop import filled_like
from teachflow.core import dispatch
from teachflow.core.dispatch import bind
from teachflow.core.errors import AutodiffError, TeachflowError, TraceError, expect_callable
from teachflow.core.tree import tree_flatten, tree_unflatten
from teachflow.execution.control.carry import as_carry, carry_names, check_carry
from teachflow.execution.control.control_op import ControlOp, control_op, graph_function
from teachflow.execution.control.graphs import Subgraph, describe, merge_free, trace_subgraph
from teachflow.execution.control.loop_code import (
    INDEX,
    emit_fori,
    emit_while,
    fori_rule,
    while_rule,
)
from teachflow.execution.control.vjp import graph_vjp
from teachflow.execution.executor import Line, Source
from teachflow.graph import Node
from teachflow.ops import creation
from teachflow.ops import shape as shape_ops
from teachflow.ops.op import Op
from teachflow.tensor.factories import tensor
from teachflow.tensor.tensor import Tensor
from teachflow.tensor.weak import WeakTensor
from teachflow.tracing.callables import callable_name

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
        loop = _Loop(lambda c: cond(*c, *free)[0], lambda c: body(*c, *free),
                     tree_flatten(list(args[:m]))[1], None, "while_loop")
        return tuple(dispatch.call(loop, tuple(args[:m]), {}))

    def emit(self, source: Source, node: Node, operands: list[str],
             results: list[str]) -> list[Line]:
        return emit_while(source, node, operands, results)


def _while_vjp(cotangents: list, inputs: tuple, params: dict, needs: tuple) -> list:
    raise AutodiffError(
        "tfl.while_loop cannot be differentiated: how many steps it takes depends on data, so "
        "reverse mode would have to keep every step's values on a tape of unknown length "
        "(unbounded memory). JAX refuses reverse-mode gradients of while_loop for the same reason",
        op="while_loop",
        hint="if the number of steps is known, use tfl.fori_loop(lower, upper, body_fn, init) "
             "with Python-int bounds, which differentiates; else cut the gradient at the loop "
             "(x.detach())")


WHILE = control_op(WhileOp, "while", while_rule, _while_vjp, ())

#: Eagerly, a while_loop's results say so when backward() reaches them (as traced).
_WHILE_RESULT = Op("while_loop result", lambda xp: None, lambda *specs: None,
                   grads=lambda g: _while_vjp([g], (), {}, ()), primitive=False)


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
    loop = _Loop(cond_fn, body_fn, tree, names, "while_loop")
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


FORI = control_op(ForiOp, "fori_loop", fori_rule, _fori_vjp, ("lower", "upper"))


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
    loop = _Loop(None, body_fn, tree, names, "fori_loop", bounds=(lower, upper))
    return tree_unflatten(tree, list(dispatch.call(loop, tuple(leaves), {})))


def _fori(lower: Any, upper: Any, body_fn: Callable, init: list,
          history: bool = False) -> list:
    """A fori loop over flat lists: ``body_fn(i, *carry)`` gives the new carry as a list."""
    leaves, tree = tree_flatten(list(init))
    loop = _Loop(None, lambda i, c: body_fn(i, *c), tree, None, "fori_loop",
                 bounds=(lower, upper), history=history)
    return list(dispatch.call(loop, tuple(leaves), {}))


def _is_int(value: Any) -> bool:
    try:
        operator.index(value)
    except TypeError:
        return False
    return not isinstance(value, Tensor)


class _Loop:
    """One call of a loop, as the interpreter decides to run it (`dispatch.call`): eagerly a
    Python loop; while tracing, one node whose body (and condition) are traced once.

    `bounds` (lower, upper) make it a fori loop, whose body takes the step index first."""

    def __init__(self, cond_fn: Callable | None, body_fn: Callable, tree: Any,
                 names: Sequence[str] | None, construct: str, bounds: tuple | None = None,
                 history: bool = False) -> None:
        self.cond_fn, self.body_fn, self.tree = cond_fn, body_fn, tree
        self.names, self.construct, self.bounds, self.history = names, construct, bounds, history

    def _carry(self, leaves: Sequence[Any]) -> Any:
        return tree_unflatten(self.tree, list(leaves))

    def _body(self, fn: Callable, leaves: Sequence[Any]) -> Any:
        if self.bounds is None:
            return fn(self._carry(leaves))
        return fn(leaves[0], self._carry(leaves[1:]))

    # --- Eagerly ------------------------------------------------------------------------------

    def run(self, args: tuple, kwargs: dict) -> list:
        carry = list(args)
        specs = [x.spec for x in carry]
        if self.bounds is None:
            while self._holds(self.cond_fn(self._carry(carry))):
                carry = self._step(self.body_fn(self._carry(carry)), specs)
            return [_no_gradient_through(x) for x in carry]
        lower, upper = (int(b.item()) if isinstance(b, Tensor) else b for b in self.bounds)
        backend = carry[0]._backend
        kept: list[list] = []
        for k in range(lower, upper):
            kept.append(carry)
            i = WeakTensor._make(backend.xp.asarray(k, dtype=INDEX), backend, None)
            carry = self._step(self.body_fn(i, self._carry(carry)), specs)
        if self.history:
            carry = carry + [bind(shape_ops.stack, *(step[p] for step in kept), axis=0) if kept
                             else bind(creation.full, shape=(0, *s.shape), fill_value=0,
                                       dtype=s.dtype, device=s.device)
                             for p, s in enumerate(specs)]
        return [_ordinary(x) for x in carry]

    def _holds(self, holds: Any) -> bool:
        if not isinstance(holds, Tensor) or holds.shape != () or holds.dtype.kind != "b":
            got = describe(holds.spec) if isinstance(holds, Tensor) else \
                f"Python {type(holds).__name__}"
            raise TraceError(f"the condition of tfl.while_loop ({callable_name(self.cond_fn)}) "
                             f"must return a scalar bool tensor, not {got}", op="while_loop",
                             hint="compute it from the carry with tensor ops: x.sum() > 1")
        return bool(holds.numpy())

    def _step(self, out: Any, specs: list) -> list:
        leaves, tree = tree_flatten(out)
        leaves = [WeakTensor.of(tensor(x)) if isinstance(x, bool | int | float) else x
                  for x in leaves]
        self._check_body(tree, [x.spec if isinstance(x, Tensor) else x for x in leaves], specs)
        return leaves

    # --- Traced -------------------------------------------------------------------------------

    def inline(self, args: tuple, kwargs: dict) -> list:
        builder = dispatch.current_interpreter()
        carry = [builder.operand(x) for x in args]
        names = carry_names(self.body_fn, len(carry), self.names, self.bounds is not None)
        name = callable_name(self.body_fn)
        subs: list[Subgraph] = []
        if self.bounds is None:
            test = trace_subgraph(self.cond_fn, carry, f"the condition of tfl.while_loop "
                                  f"({callable_name(self.cond_fn)})", names,
                                  lambda fn, sym: fn(self._carry(sym)))
            if len(test.graph.outputs) != 1 or test.out_tree is not None:
                raise TraceError("the condition of tfl.while_loop must return one scalar bool "
                                 "tensor", op="while_loop")
            spec = test.graph.outputs[0].spec
            if spec.shape != () or spec.dtype.kind != "b":
                raise TraceError(f"the condition of tfl.while_loop ({callable_name(self.cond_fn)})"
                                 f" must return a scalar bool tensor, not {describe(spec)}",
                                 op="while_loop",
                                 hint="compute it from the carry with tensor ops: x.sum() > 1")
            subs.append(test)
            leading: list = []
        else:
            backend = carry[0]._backend
            index = WeakTensor._make(backend.xp.asarray(0, dtype=INDEX), backend, None)
            leading = [builder.operand(b) for b in self.bounds]
            carry = [index, *carry]
        body = trace_subgraph(self.body_fn, carry, f"the body of tfl.{self.construct} ({name})",
                              names, self._body)
        carry = carry[1:] if self.bounds is not None else carry
        self._check_body(body.out_tree, [v.spec for v in body.graph.outputs],
                         [x.spec for x in carry])
        subs.append(body)
        explicit = len(carry) + (self.bounds is not None)
        free = merge_free(subs, explicit)
        if self.bounds is None:
            params = {"cond_fn": subs[0].graph, "body_fn": body.graph}
            return list(builder.apply(WHILE, (*carry, *free), params))
        params = {"body_fn": body.graph, **({"history": True} if self.history else {})}
        return list(builder.apply(FORI, (*leading, *carry, *free), params))

    def _check_body(self, tree: Any, got: list, specs: list) -> None:
        check_carry(f"the body of tfl.{self.construct} ({callable_name(self.body_fn)})",
                    self.construct, (self.tree, specs), (tree, got), self.names)


def _ordinary(x: Tensor) -> Tensor:
    """A loop's result as an ordinary tensor, as traced (a weak counter's too)."""
    return Tensor._make(x._data, x._backend, x._node) if isinstance(x, WeakTensor) else x


def _no_gradient_through(x: Tensor) -> Tensor:
    """An eager while_loop's result: backward() reaching it raises, as it would traced."""
    if x._node is None:
        return _ordinary(x)
    node = tape.TapeNode(_WHILE_RESULT, {}, (x._node,), (None,), None, x._backend, x.shape,
                             x.dtype)
    return Tensor._make(x._data, x._backend, node)
