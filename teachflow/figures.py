"""The figures of a compiler's stage: what a graph costs to run, counted from the graph alone.

Each snapshot of the pipeline (`teachflow.compiler`) has them as ``stats``, and the pass stepper
draws each as a sparkline over the stages, so a learner sees what a pass bought:

- ``nodes``: the ops (inputs, state and constants are not nodes);
- ``kernels``: kernels launched (a view launches none; a fused kernel is one);
- ``bytes_moved``: bytes the kernels read and write;
- ``flops``: floating-point operations, roughly (`Op.flops`);
- ``bytes_transferred``: bytes copied from one device to another (`passes.partition`);
- ``peak_bytes``: the most bytes the stage's schedule holds at once (`memory.liveness`,
  lesson 8): the call's arguments, its state and its constants are held throughout, an
  intermediate from the step that makes it to its last read, an output to the end, and a view
  owns nothing of its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from teachflow.graph import Graph, Node, Value, subgraphs
from teachflow.memory import peak_bytes
from teachflow.ops.op import spec_of
from teachflow.passes.partition import transfer_bytes


def every_node(graph: Graph) -> Iterator[Node]:
    """The nodes of `graph` and of every graph its nodes own, in order."""
    for node in graph.nodes:
        yield node
        for sub in subgraphs(node).values():
            yield from every_node(sub)


def _bytes(v: Any) -> int:
    if not isinstance(v, Value) or None in v.shape:
        return 0
    return math.prod(v.shape) * v.dtype.itemsize


def node_flops(node: Node) -> int:
    """Floating-point operations, roughly, as the node's op counts them (`Op.flops`: one per
    element for most, 2·m·n·k for a matrix product); none for a view; the sum of the members
    for a fused kernel."""
    group = getattr(node.op, "group", None)
    if group is not None:
        members = [*group.nodes, *([group.reduction] if group.reduction else [])]
        return sum(node_flops(n) for n in members)
    if node.op.view:
        return 0
    return node.op.flops(node.spec, *(spec_of(o) for o in node.inputs))


def graph_stats(graph: Graph, figures: dict[tuple, tuple[bool, int, int, int]] | None = None
                ) -> dict[str, int]:
    """nodes; kernels launched (views launch none); bytes read and written by kernels; flops;
    bytes sent from one device to another (`bytes_transferred`); the peak of live bytes of the
    graph's schedule (`peak_bytes`, counted as the module docstring says).

    The program as written: the graphs a control-flow node owns count too, each once (both
    branches of a ``cond``, one step of a loop's body), so that a pass working inside them
    shows in the figures. The control-flow node itself is a node but no kernel: it runs its
    graphs' kernels (and holds, while it runs, what the busiest of them holds). `figures` keeps
    each node's (kernel?, bytes, flops) for the next stage, where the pass's copy of the node
    has the same op and specs."""
    figures = {} if figures is None else figures
    nodes = kernels = moved = flops = transferred = 0
    for node in every_node(graph):
        key = (node.op, *(o.spec if isinstance(o, Value) else None for o in node.inputs),
               *(v.spec for v in node.outputs))
        known = figures.get(key)
        if known is None:
            known = figures[key] = _node_figures(node)
        is_kernel, node_bytes, node_flops_, node_sends = known
        nodes += 1
        kernels += is_kernel
        moved += node_bytes
        flops += node_flops_
        transferred += node_sends
    return {"nodes": nodes, "kernels": kernels, "bytes_moved": moved, "flops": flops,
            "bytes_transferred": transferred, "peak_bytes": peak_bytes(graph)}


def _node_figures(node: Node) -> tuple[bool, int, int, int]:
    """(launches a kernel, bytes it reads and writes, its flops, bytes it sends from one device
    to another): none for a view or a control-flow node (its graphs' kernels count)."""
    if node.op.view or subgraphs(node):
        return False, 0, 0, 0
    moved = sum(_bytes(v) for v in node.outputs) + sum(_bytes(o) for o in node.inputs)
    return True, moved, node_flops(node), transfer_bytes(node)
