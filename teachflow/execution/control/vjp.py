"""The gradient of a graph a control-flow node owns: run it again on the tape, then backwards.

A ``cond``'s gradient chooses between its branches' gradients, and a loop run backwards applies
its body's gradient step after step. Both need the same thing: given a sub-graph, values for its
inputs and cotangents for its outputs, the cotangents of its inputs (a vector-Jacobian product).
`graph_vjp` computes it the simplest way there is: it runs the graph again, op by op, with its
inputs as leaves of a fresh tape, and sends the cotangents back through that tape. While
tracing, every op of both passes becomes a node of the graph being traced (the gradient's own
branch or body), so the backward graph can be printed, optimized and run like any other.

The backward pass records its own ops on the tape when a gradient of this gradient is wanted
(the caller's grad mode says so), so that a second derivative can run *it* again in turn: a
graph built with recording off would be rerun untracked, and its derivative would be zero.

Running the forward ops again (*rematerialization*) costs compute and saves memory: nothing of
the forward pass has to be kept for the backward one but the sub-graph's inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from teachflow.autodiff import tape
from teachflow.autodiff.backprop import backpropagate, filled_like
from teachflow.core import dispatch
from teachflow.execution.executor import interpret
from teachflow.graph import Graph
from teachflow.tensor.tensor import Tensor


def graph_vjp(graph: Graph, inputs: Sequence[Any], cotangents: Sequence[Any],
              wrt: Sequence[int]) -> list:
    """The cotangents of `graph`'s inputs at positions `wrt` (zeros where no path leads), given
    `inputs` and one cotangent per output; None at the other positions."""
    create_graph = tape.is_grad_enabled()  # (a gradient of this gradient is wanted)
    args, leaves = [], {}
    interpreter = dispatch.current_interpreter()
    for k, x in enumerate(inputs):
        if k in wrt and isinstance(x, Tensor) and x.dtype.kind in "fc":
            x = interpreter.operand(x)  # (while tracing: a value of the graph being traced)
            x = Tensor._make(x._data, x._backend, None)
            x._node = tape.Leaf(x)
            leaves[k] = x
        args.append(x)
    with tape.enable_grad():
        outputs = interpret(graph, args)
    roots, seeds = [], []
    for out, ct in zip(outputs, cotangents, strict=True):
        if out._node is not None and ct is not None:
            roots.append(out._node)
            seeds.append(ct)
    found = {}
    if roots:
        targets = {leaf._node for leaf in leaves.values()}
        found = dict(backpropagate(roots, seeds, targets=targets, create_graph=create_graph))
    grads: list = [None] * len(inputs)
    for k in wrt:
        leaf = leaves.get(k)
        if leaf is None:
            continue
        g = found.get(leaf._node)
        grads[k] = g if g is not None else filled_like(leaf, 0)
    return grads
