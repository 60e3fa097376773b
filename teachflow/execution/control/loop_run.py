"""Running a loop: in Python, eagerly; as one node, traced (`Loop`, what ``dispatch.call`` is
given for `teachflow.execution.control.loops`).

Eagerly, a loop is a Python loop around the body (and condition), run op by op. Traced, it is
one node (a ``while`` or a ``fori_loop``) that owns the graphs of its body and condition, traced
once whatever the trip count. A while_loop has no gradient (see `loops`): eagerly, its results
say so when backward() reaches them, as traced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from teachflow.autodiff import tape
from teachflow.core import dispatch
from teachflow.core.dispatch import bind
from teachflow.core.errors import AutodiffError, TraceError
from teachflow.core.tree import tree_flatten, tree_unflatten
from teachflow.execution.control.carry import carry_names, check_carry
from teachflow.execution.control.graphs import Subgraph, describe, merge_free, trace_subgraph
from teachflow.execution.control.loop_code import INDEX
from teachflow.ops import creation
from teachflow.ops import shape as shape_ops
from teachflow.ops.op import Op
from teachflow.tensor.factories import tensor
from teachflow.tensor.tensor import Tensor
from teachflow.tensor.weak import WeakTensor
from teachflow.tracing.callables import callable_name


def while_vjp(cotangents: list, inputs: tuple, params: dict, needs: tuple) -> list:
    raise AutodiffError(
        "tfl.while_loop cannot be differentiated: how many steps it takes depends on data, so "
        "reverse mode would have to keep every step's values on a tape of unknown length "
        "(unbounded memory). JAX refuses reverse-mode gradients of while_loop for the same reason",
        op="while_loop",
        hint="if the number of steps is known, use tfl.fori_loop(lower, upper, body_fn, init) "
             "with Python-int bounds, which differentiates; else cut the gradient at the loop "
             "(x.detach())")


#: Eagerly, a while_loop's results say so when backward() reaches them (as traced).
WHILE_RESULT = Op("while_loop result", lambda xp: None, lambda *specs: None,
                   grads=lambda g: while_vjp([g], (), {}, ()), primitive=False)


class Loop:
    """One call of a loop, as the interpreter decides to run it (`dispatch.call`): eagerly a
    Python loop; while tracing, one node whose body (and condition) are traced once.

    `bounds` (lower, upper) make it a fori loop, whose body takes the step index first."""

    def __init__(self, cond_fn: Callable | None, body_fn: Callable, tree: Any,
                 names: Sequence[str] | None, construct: str, op: Op,
                 bounds: tuple | None = None, history: bool = False) -> None:
        self.cond_fn, self.body_fn, self.tree, self.op = cond_fn, body_fn, tree, op
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
            return list(builder.apply(self.op, (*carry, *free), params))
        params = {"body_fn": body.graph, **({"history": True} if self.history else {})}
        return list(builder.apply(self.op, (*leading, *carry, *free), params))

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
    node = tape.TapeNode(WHILE_RESULT, {}, (x._node,), (None,), None, x._backend, x.shape,
                             x.dtype)
    return Tensor._make(x._data, x._backend, node)
