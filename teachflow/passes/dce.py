"""Dead code elimination: drop every node no output depends on.

Walking backwards from the outputs marks what is live; everything else is dead. Other passes
leave dead nodes behind on purpose (a simplified ``x*1`` leaves the ``1`` branch unused, CSE
leaves a duplicate's operands unused) and let this pass sweep them up in one place. A collective
(``all_reduce``) is always live (`Graph.live`): the other processes wait for this one to join it.
"""

from __future__ import annotations

from teachflow.graph import Graph, Node, format_node
from teachflow.passes.base import DROP, Change, Decide, Rewriter, rewrite


def dce(graph: Graph) -> tuple[Graph, list[Change]]:
    """Remove the nodes, constants and captures that no output depends on."""
    changes: list[Change] = []

    def decide_for(g: Graph) -> Decide:
        live, used = g.live()
        live = set(live)
        # Constants and captures nothing reads any more go too (constant folding leaves some).
        g.constants = [v for v in g.constants if v in used]
        g.captures = [v for v in g.captures if v in used]

        def decide(node: Node, _: Rewriter) -> object:
            if node in live:
                return None
            changes.append(Change("removed", (node.id,), (), "unused",
                                  f"{format_node(node)} is never used by an output: removed"))
            return DROP

        return decide

    return rewrite(graph, decide_for), changes
