"""Inlining: each call of a graph function replaced by the callee's body.

A ``call`` node keeps a program's functions apart (`teachflow.execution.control.call`), and
every pass works on one graph at a time: it cannot cancel ``x * 2`` in the caller against
``/ 2`` in the callee, merge the same work done in two callees, or fuse a callee's last op with
the caller's next one into one kernel. Inlining removes that wall, as every optimizing compiler
does first: the callee's nodes are copied into the caller, reading the call's operands where
the callee read its inputs, and the call's results are what the callee returned. That is why
it is the first pass of the default pipeline: each later pass sees one graph. The price is
size (a function called ten times is copied ten times); a pipeline without ``inline`` keeps
the calls, each run by the callee's own generated code.

The copies keep the callee's source lines, so a node still names the line in the function
that computes it; their lineage is the call's, so a node can be followed from the call in the
trace to the kernels it became. A call inside the callee was inlined there first.
"""

from __future__ import annotations

from typing import Any

from teachflow.execution.control.call import CALL
from teachflow.graph import Graph, Node, Value, format_node
from teachflow.passes.base import Change, Rewriter, rewrite


def inline(graph: Graph) -> tuple[Graph, list[Change]]:
    """Replace every ``call`` node by a copy of its callee's nodes."""
    changes: list[Change] = []

    def decide_for(g: Graph) -> Any:
        def decide(node: Node, rewriter: Rewriter) -> Any:
            if node.op is not CALL:
                return None
            callee = node.params["callee"]
            results = _copy_body(callee, node.inputs, rewriter)
            count = len(callee.nodes)
            nodes = f"{count} node{'s' * (count != 1)}"
            changes.append(Change("replaced", (node.id,), tuple(n.id for n in rewriter.added),
                                  "call f(x) -> body of f",
                                  f"inlined @{callee.name}: {nodes} in place of "
                                  f"{format_node(node)}"))
            return results if len(node.outputs) > 1 else results[0]
        return decide

    return rewrite(graph, decide_for), changes


def _copy_body(callee: Graph, operands: tuple, rewriter: Rewriter) -> tuple:
    """The callee's nodes added where the call stands, its inputs read as `operands`; the
    values standing for its outputs."""
    copied: dict[Value, Any] = dict(zip(callee.inputs, operands, strict=True))
    for v in callee.constants:
        copied[v] = rewriter.constant(v.data, v.spec)
    for n in callee.nodes:
        inputs = tuple(copied[o] if isinstance(o, Value) else o for o in n.inputs)
        rewriter.add(n.op, inputs, n.params, n.specs if len(n.outputs) > 1 else n.spec,
                     source=n.source)
        copied.update(zip(n.outputs, rewriter.added[-1].outputs, strict=True))
    return tuple(copied[v] for v in callee.outputs)
