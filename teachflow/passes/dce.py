"""Dead code elimination: drop every node no output depends on.

Walking backwards from the outputs marks what is live; everything else is dead. Other passes
leave dead nodes behind on purpose (a simplified ``x*1`` leaves the ``1`` branch unused, CSE
leaves a duplicate's operands unused) and let this pass sweep them up in one place.
"""

from __future__ import annotations

from teachflow.executor import live_nodes
from teachflow.graph import Graph, format_node
from teachflow.passes.base import BuiltinPass, Change


class DCE(BuiltinPass):
    name = "dce"

    def run(self, graph: Graph) -> tuple[Graph, list[Change]]:
        g = graph.clone()
        live = live_nodes(g, g.outputs)
        alive = {id(n) for n in live}
        changes = [Change("removed", (n.id,), (), "unused",
                          f"{format_node(n)} is never used by an output: removed")
                   for n in g.nodes if id(n) not in alive]
        g.nodes = live
        # Constants and captures nothing reads any more go too (constant folding leaves some).
        used = {id(o) for n in live for o in n.inputs} | {id(v) for v in g.outputs}
        g.constants = [v for v in g.constants if id(v) in used]
        g.captures = [v for v in g.captures if id(v) in used]
        return g, changes
