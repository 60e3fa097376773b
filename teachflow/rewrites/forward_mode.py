"""Forward mode: ``tfl.jvp(f, primals, tangents) -> (outputs, output_tangents)``.

A Jacobian-vector product pushes a direction through the function: moving the inputs along
`tangents`, how fast do the outputs move? Reverse mode (``tfl.grad``) answers the transposed
question, for every input at once, from one output. Forward mode answers for every output at
once, from one direction, and needs no tape: each value's tangent is computed right beside the
value, by its op's JVP rule (the `jvp` field of the op's declaration, beside its VJP rule).

`jvp` traces `f` and walks its graph (`walk`): at each node the op runs on the values, and its
JVP rule on the values and the tangents. A tangent that is zero is never computed (None), so a
node none of whose operands moves costs only its value. A control-flow node's rule transforms
the graphs it owns (the branches of a ``cond``, a loop's body) with this same walk, so the
tangent of a loop is a loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

from teachflow.autodiff.tape import no_grad
from teachflow.core.dispatch import bind
from teachflow.core.errors import AutodiffError, expect_callable, on_behalf_of
from teachflow.core.tree import tree_flatten, tree_unflatten
from teachflow.graph import Graph, Value
from teachflow.graph.graph import subgraphs
from teachflow.ops.tangents import zeros_of
from teachflow.rewrites.walk import constants, made_by, operands, traced
from teachflow.tensor.tensor import Tensor, as_tensor


def jvp(f: Callable, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
    """``(f(*primals), J·tangents)``: the outputs, and how fast they move when the inputs move
    along `tangents` (a tensor per primal, of its shape, in the same structure)."""
    expect_callable(f, "jvp", "tfl.jvp(f, (x,), (t,))")
    if not isinstance(primals, tuple | list) or not isinstance(tangents, tuple | list):
        raise AutodiffError("primals and tangents are tuples (or lists), one entry per "
                            "argument of f", op="jvp", hint="tfl.jvp(f, (x,), (t,))")
    p_leaves, p_tree = tree_flatten(tuple(primals))
    t_leaves, t_tree = tree_flatten(tuple(tangents))
    if p_tree != t_tree:
        raise AutodiffError("tangents must have the structure of primals: one tangent per "
                            "primal tensor", op="jvp", hint="tfl.jvp(f, (x, y), (tx, ty))")
    p_leaves = [as_tensor(x) for x in p_leaves]
    t_leaves = [as_tensor(t) for t in t_leaves]
    for k, (x, t) in enumerate(zip(p_leaves, t_leaves, strict=True)):
        if x.shape != t.shape or x.dtype.kind not in "fc":
            raise AutodiffError(
                f"primal {k} is {x.dtype.name}{list(x.shape)} and its tangent "
                f"{t.dtype.name}{list(t.shape)}: a tangent has its primal's shape, and only "
                "floating-point values have tangents", op="jvp",
                hint="give each float primal a tangent of its shape")
    trace = traced(f, tree_unflatten(p_tree, p_leaves), [x.spec for x in p_leaves], "jvp")
    values = dict(zip(trace.inputs, p_leaves, strict=True))
    values.update(trace.outside)
    moving = {v: t.astype(x.dtype) for v, x, t in zip(trace.inputs, p_leaves, t_leaves,
                                                       strict=True)}
    forward(trace.graph, values, moving)
    outs = [values[r] if isinstance(r, Value) else r for r in trace.results]
    tans = [_tangent_of(r, o, moving) for r, o in zip(trace.results, outs, strict=True)]
    return tree_unflatten(trace.out_tree, outs), tree_unflatten(trace.out_tree, tans)


def _tangent_of(result: Any, value: Any, moving: dict) -> Any:
    """A result's tangent; zeros where it does not move (a constant, an integer)."""
    t = moving.get(result) if isinstance(result, Value) else None
    if t is not None:
        return t
    return zeros_of(value) if isinstance(value, Tensor) else 0.0


def forward(graph: Graph, values: dict, moving: dict) -> None:
    """Walk `graph`: each node's values into `values`, and its tangents, where they are not
    zero, into `moving` (both keyed by the graph's values)."""
    for node in graph.nodes:
        primals = tuple(operands(node, values))
        tangents = tuple(moving.get(o) if isinstance(o, Value) else None for o in node.inputs)
        rule = node.op.jvp
        if rule is None and any(t is not None for t in tangents):
            raise AutodiffError(f"tfl.jvp has no JVP rule for op {node.op.name}", op="jvp",
                                location=node.source,
                                hint="declare one in the op's declaration (its `jvp` field), "
                                     "beside its gradient rule")
        with no_grad() if node.no_grad else nullcontext():
            if subgraphs(node) and all(t is None for t in tangents):  # (nothing moves)
                with on_behalf_of(node.source):
                    values.update(zip(node.outputs, node.op.rerun(primals, node.params),
                                      strict=True))
                continue
            if subgraphs(node):
                with made_by(node, f"tangent of {node.op.name} by its JVP rule: its graphs "
                                   "transformed"):
                    outs, tans = rule(node.op, primals, tangents, node.params, transformed)
                values.update(zip(node.outputs, outs, strict=True))
                moving.update((v, t) for v, t in zip(node.outputs, tans, strict=True)
                              if t is not None)
                continue
            with on_behalf_of(node.source):
                out = bind(node.op, *primals, **node.params)
            values[node.output] = out
            if all(t is None for t in tangents):
                continue
            with made_by(node, f"tangent of {node.op.name} by its JVP rule"):
                t = rule(node.op, primals, tangents, out, node.params)
            if t is not None:
                moving[node.output] = t


def transformed(graph: Graph, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple:
    """A graph a control-flow node owns, walked for its values and tangents: what its JVP rule
    runs in place of the graph (None where a tangent is zero, in and out)."""
    values = dict(zip(graph.inputs, primals, strict=True))
    moving = {v: t for v, t in zip(graph.inputs, tangents, strict=True) if t is not None}
    values.update(constants(graph))
    forward(graph, values, moving)
    return ([values[v] for v in graph.outputs], [moving.get(v) for v in graph.outputs])

