"""Placement: which device runs each node, and why.

A program on several devices (``with tfl.device("cpu:1"):`` around some of it, a tensor moved by
``x.to(...)``) needs each node to know where it runs. TensorFlow's *placer* decides it before a
graph runs; this pass makes the same decision, in the same order of reasons:

1. the node's **pin**: it was built inside ``with tfl.device(name):``;
2. else **where its operands live** (an add of two tensors on ``cpu:1`` runs on ``cpu:1``; a
   transfer, on the device it copies to);
3. else **the call's default**, the device of the function's first input (a node that reads no
   tensor: a constant made with the function).

Every value's device is part of its spec from the moment it is traced, as eagerly (where a
pinned op copies its operands to the pin first: `teachflow.tensor.eager.moved_to_pin`), so the
decision never contradicts the graph: the pass writes it down, one `Change` per node with its
reason, which is what the stepper shows beside each node's colour. The pass `partition` then
cuts the graph along the devices. On a graph that runs on one device there is nothing to decide,
and the pass changes nothing.
"""

from __future__ import annotations

from teachflow.graph import Graph, Node, Value, format_node
from teachflow.passes.base import Change, Decide, Rewriter, rewrite


def place(graph: Graph) -> tuple[Graph, list[Change]]:
    """Give every node of a graph on several devices its device, each with its reason."""
    changes: list[Change] = []

    def decide_for(g: Graph) -> Decide:
        default = g.inputs[0].spec.device if g.inputs else "cpu"
        several = len(devices_of(g)) > 1

        def decide(node: Node, _: Rewriter) -> None:
            if several:
                rule, reason = placement(node, default)
                changes.append(Change("placed", (node.id,), (node.id,), rule,
                                      f"{format_node(node)} runs on {node.spec.device}: "
                                      f"{reason}"))

        return decide

    return rewrite(graph, decide_for), changes


def devices_of(graph: Graph) -> set[str]:
    """Every device a value of `graph` lives on (not counting the graphs its nodes own)."""
    return {v.spec.device for v in graph.values()}


def placement(node: Node, default: str) -> tuple[str, str]:
    """Why `node` runs where it does: (the rule, in a few words; the reason, as a sentence)."""
    device = node.spec.device
    if node.pin is not None:
        return "pinned", f"it was built inside `with tfl.device({node.pin!r}):`"
    if node.op.device_param:
        return "asked for", f"its parameter {node.op.device_param}={device!r} says so"
    operands = [o for o in node.inputs if isinstance(o, Value)]
    if operands:
        names = ", ".join(str(o) for o in dict.fromkeys(operands))
        return "operands", f"where its operands live ({names} on {device})"
    return "default", (f"it reads no tensor and asks for no device: it runs where the call "
                       f"does by default ({device}; the call's first input is on {default})")
