"""Partitioning: one piece of the graph per device, joined by explicit transfers.

After `place`, every node knows its device; a value made on one device and read on another
must be *sent* there. TensorFlow's partitioner cuts the graph into one subgraph per device and
puts a ``Send``/``Recv`` pair on every edge that crosses; here each crossing becomes one node,
``%9 = copy %7 {src='cpu', dst='cpu:1'}``, that belongs to the piece that receives it. The
pieces are the nodes of each device, in the graph's order (`pieces`); the executor runs each on
its device's own thread, at the same time where the graph allows, and a ``copy`` waits for its
value from the other piece (`teachflow.execution.pieces`).

Two kinds of crossing are made explicit:

- a ``to_device`` (a learner's ``x.to("cpu:1")``, or an operand moved to a pinned device) that
  crosses devices becomes a ``copy``, which names both ends;
- a node that reads an operand from another device (a graph built some other way) gets a
  ``copy`` in front of it, one per value and device.

Every copy adds its bytes to the stage's ``bytes_transferred``. A graph on one device has no
crossings: the pass changes nothing.
"""

from __future__ import annotations

from teachflow.graph import Graph, Node, Value, format_node, subgraphs
from teachflow.ops import creation
from teachflow.passes.base import Change, Decide, Rewriter, rewrite
from teachflow.passes.place import devices_of


def partition(graph: Graph) -> tuple[Graph, list[Change]]:
    """Make every crossing between devices an explicit ``copy`` node."""
    changes: list[Change] = []

    def decide_for(g: Graph) -> Decide:
        copies: dict[tuple[Value, str], Value] = {}  # (value, device) -> its copy there
        several = len(devices_of(g)) > 1

        def decide(node: Node, rewriter: Rewriter) -> Value | None:
            if not several:
                return None
            if node.op is creation.to_device:
                source = node.inputs[0]
                if source.spec.device == node.spec.device:
                    return None
                copied = rewriter.add(creation.copy, (source,), _ends(source, node))
                changes.append(Change("replaced", (node.id,), (copied.id,), "transfer -> copy",
                                      f"{format_node(node)} moves a value between devices: "
                                      f"{_copy_sentence(copied)}"))
                return copied
            if subgraphs(node):  # its graphs read the operands where they are, and cross
                return None      # devices inside (partitioned there: see `rewrite`)
            operands = []
            for o in node.inputs:
                if isinstance(o, Value) and o.spec.device != node.spec.device \
                        and not node.op.device_param:
                    key = (o, node.spec.device)
                    if key not in copies:
                        copies[key] = rewriter.add(creation.copy, (o,), _ends(o, node))
                        changes.append(Change("added", (), (copies[key].id,), "crossing -> copy",
                                              f"{node.output} on {node.spec.device} reads {o} "
                                              f"from {o.spec.device}: "
                                              f"{_copy_sentence(copies[key])}"))
                    o = copies[key]
                operands.append(o)
            node.inputs = tuple(operands)
            return None

        return decide

    return rewrite(graph, decide_for), changes


def _ends(value: Value, reader: Node) -> dict:
    return {"src": value.spec.device, "dst": reader.spec.device}


def _copy_sentence(copied: Value) -> str:
    node = copied.producer
    return (f"{format_node(node)} sends {transfer_bytes(node):,} bytes from "
            f"{node.params['src']} to {node.params['dst']}.")


def transfer_bytes(node: Node) -> int:
    """The bytes a node sends from one device to another (0 for a node that sends none, or
    whose size is known only when it runs)."""
    if node.op not in (creation.copy, creation.to_device):
        return 0
    source = node.inputs[0]
    if not isinstance(source, Value) or source.spec.device == node.spec.device \
            or node.spec.size < 0:
        return 0
    return node.spec.size * node.spec.dtype.itemsize


def pieces(graph: Graph) -> dict[str, list[Node]]:
    """The nodes each device runs, in the graph's order: one piece per device."""
    found: dict[str, list[Node]] = {}
    for node in graph.nodes:
        found.setdefault(node.spec.device, []).append(node)
    return found
