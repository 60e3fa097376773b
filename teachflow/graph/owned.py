"""The graphs a node owns: the branches of a ``cond``, the body of a loop, a function called.

A node that owns graphs holds them as parameters; `subgraphs` finds them, and `callees` the
graph functions a whole graph calls (each once, by name), as the text form prints them after
the graph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from teachflow.graph.node import Node, is_graph

if TYPE_CHECKING:
    from teachflow.graph.graph import Graph


def callees(graph: Graph) -> dict[str, Graph]:
    """The graph functions `graph` calls (a ``call`` node's ``callee``), directly or inside the
    graphs its nodes own, by name, each once."""
    found: dict[str, Graph] = {}
    for node in graph.nodes:
        for key, sub in subgraphs(node).items():
            for name, g in [*([(sub.name, sub)] * (key == "callee")), *callees(sub).items()]:
                found.setdefault(name, g)
    return found


def subgraphs(node: Node, calls: bool = True) -> dict[str, Graph]:
    """The graphs `node` owns, by parameter name (the branches of a ``cond``, the body of a
    loop, a function called, unless not `calls`); empty for an ordinary op."""
    return {k: v for k, v in node.params.items() if is_graph(v) and (calls or k != "callee")}
