"""Control flow in ONNX: ``If`` and ``Loop``, whose bodies are graphs, as teachflow's are; calls.

A teachflow ``cond`` or loop node owns *closed* graphs: what a branch reads from outside comes in
as an input, one per operand of the node. An ONNX graph inside a node has no such inputs (a
branch of ``If``) or only the loop's own (a ``Loop`` body: the step number, the condition, the
carried values), and reads everything else *by name* from the graphs around it. So a sub-graph
is written with its inputs bound to the names of the node's operands outside.

- ``cond``: ``If(pred)`` with a ``then_branch`` and an ``else_branch``.
- ``fori_loop``: ``Loop(M, "", carry...)``: M steps (``upper - lower``), and a body that makes the
  step index ``i = lower + iteration`` before it runs teachflow's body. A loop that keeps its
  history (for its gradient) gives each step's carry as a *scan output*: ONNX stacks them.
- ``while``: ``Loop("", cond, carry...)``: no step count, and a condition that ONNX reads before
  each step. The first is computed before the loop; the body computes the next from the carry it
  gives, by writing the condition's graph a second time, inside the body.
- ``call``: inlined, the callee's nodes written in place of each call (the pass `inline` does the
  same to a graph), so the model is one flat graph; a runtime inlines ONNX's own functions too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from teachflow.core.spec import TensorSpec
from teachflow.graph import Node

if TYPE_CHECKING:
    from teachflow.onnx_export.emitter import Emitter

STEP, FLAG = TensorSpec((), np.dtype(np.int64)), TensorSpec((), np.dtype(bool))


def _cond(e: Emitter, node: Node) -> list[str]:
    outer = [e.input(x) for x in node.inputs[1:]]
    branches = {}
    for key, attr in (("true_fn", "then_branch"), ("false_fn", "else_branch")):
        graph, branch = node.params[key], e.child()
        results = branch.translate(graph, outer)
        branches[attr] = branch.graph_proto(graph.name, [], results, node.specs)
    return e.add("If", [e.input(node.inputs[0])], outputs=len(node.outputs), **branches)


def _loop_inputs(body: Emitter, carry: list[str], specs: tuple) -> tuple[list[str], list]:
    """The names and types of a Loop body's inputs: step, condition, then the carried values."""
    names = [body.fresh("iteration"), body.fresh("condition"),
             *(body.fresh(f"{name}.carried") for name in carry)]
    return names, [body.typed(n, s) for n, s in zip(names, (STEP, FLAG, *specs), strict=True)]


def _while(e: Emitter, node: Node) -> list[str]:
    test, step = node.params["cond_fn"], node.params["body_fn"]
    m = len(step.outputs)
    operands = [e.input(x) for x in node.inputs]
    carry, free = operands[:m], operands[m:]
    (first,) = e.translate(test, operands)
    body = e.child()
    names, inputs = _loop_inputs(body, carry, node.specs)
    new = body.translate(step, [*names[2:], *free])
    (again,) = body.translate(test, [*new, *free])
    proto = body.graph_proto(step.name, inputs, [again, *new], (FLAG, *node.specs))
    return e.add("Loop", ["", first, *carry], outputs=m, body=proto)


def _fori(e: Emitter, node: Node) -> list[str]:
    step, history = node.params["body_fn"], node.params.get("history", False)
    m = len(step.outputs)
    lower, upper = node.inputs[:2]
    carry = [e.input(x) for x in node.inputs[2:2 + m]]
    free = [e.input(x) for x in node.inputs[2 + m:]]
    specs = node.specs[:m]
    if isinstance(lower, int) and isinstance(upper, int):
        if upper <= lower:  # no step: the carry as it came, and histories of no rows
            return [*(e.add("Identity", [c]) for c in carry),
                    *(e.const(np.zeros(s.shape, s.dtype)) for s in node.specs[m:])]
        trips = e.input(upper - lower, np.int64)
    else:  # (bounds the graph computes: ``range(n)`` in a @tfl.script)
        difference = e.add("Sub", [e.input(upper, np.int64), e.input(lower, np.int64)])
        trips = e.add("Max", [difference, e.input(0, np.int64)])
    start = e.input(lower, np.int64)
    body = e.child()
    names, inputs = _loop_inputs(body, carry, specs)
    index = names[0] if lower == 0 else body.add("Add", [names[0], start])  # i = lower + step
    new = body.translate(step, [index, *names[2:], *free])
    kept = names[2:] if history else []  # the carry each step starts from, stacked by ONNX
    proto = body.graph_proto(step.name, inputs, [names[1], *new, *kept],
                             (FLAG, *specs, *(specs if history else ())))
    return e.add("Loop", [trips, "", *carry], outputs=len(node.outputs), body=proto)


def _call(e: Emitter, node: Node) -> list[str]:
    """Inlined: the callee's nodes, written in place of the call, read the call's operands."""
    return e.translate(node.params["callee"], [e.input(x) for x in node.inputs])


CONVERTERS = {"cond": _cond, "while": _while, "fori_loop": _fori, "call": _call}
