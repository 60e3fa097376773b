"""Fusion: run a chain of elementwise ops as one kernel.

Unfused, ``tanh(x * y + w)`` is three kernels: each reads its operands from memory and writes a
temporary back, so the data crosses the memory bus five times. Fused, it is one kernel that reads
``x``, ``y`` and ``w`` once and writes the result once; the intermediates live in cache (NumPy)
or in registers (CUDA). For large arrays memory traffic is the cost, so this is the optimization
that matters most.

Grouping, in one walk over the graph: an elementwise node joins the group of an operand's
producer when that producer is elementwise too, has the same shape (only the group's *inputs*
may broadcast), and has no other user (its value is needed nowhere else, so it need never be
written to memory). A reduction that can be computed in pieces (sum, mean, max: their declarations
say how, see `Op.partials`) whose input is a group's last node, and is that node's only user,
ends the group. Groups of a single op stay as they are: nothing to gain.

Each group becomes one node whose op carries its generated kernels: NumPy source that works
block by block, and CUDA C for CuPy (see `teachflow.kernels`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from teachflow.graph import Graph, Node, Value, format_node
from teachflow.kernels.group import FusedGroup
from teachflow.ops.op import Op
from teachflow.passes.base import DROP, Change, Decide, Rewriter, rewrite


@dataclass(frozen=True, eq=False)
class FusedOp(Op):
    """The op of a fused node: one generated kernel for a whole group."""

    group: FusedGroup | None = field(default=None, repr=False)

    @property
    def numpy_source(self) -> str:
        from teachflow.kernels.numpy_fused import numpy_source

        return numpy_source(self.group)

    @property
    def cuda_source(self) -> str:
        from teachflow.kernels.cuda_fused import cuda_source

        return cuda_source(self.group)


def _fused_kernel(group: FusedGroup):
    def build(xp: Any):
        if xp is np:
            from teachflow.kernels.numpy_fused import numpy_kernel

            return numpy_kernel(group, xp)
        from teachflow.kernels.cuda_fused import cuda_kernel

        return cuda_kernel(group, xp)

    return build


def fused_op(group: FusedGroup) -> FusedOp:
    return FusedOp(group.name, _fused_kernel(group), lambda *specs: group.spec,
                   primitive=False, arg_names=tuple(f"in{i}" for i in range(len(group.inputs))),
                   group=group)


def fuse(graph: Graph) -> tuple[Graph, list[Change]]:
    """Replace each group of elementwise nodes (optionally ending in a reduction) by one node
    that runs a generated kernel; the fused node takes the place of the group's last node."""
    changes: list[Change] = []

    def decide_for(g: Graph) -> Decide:
        groups = _groups(g)
        member_of = {n: grp for grp in groups for n in grp}
        # Kernel names are unique in the graph, also when fuse runs a second time.
        numbered = sum(isinstance(n.op, FusedOp) for n in g.nodes)
        outputs = set(g.outputs)

        def decide(node: Node, rewriter: Rewriter) -> Any:
            group = member_of.get(node)
            if group is None:
                return None
            if node is not group[-1]:  # read only inside the group: the kernel computes it
                return DROP
            fused, change = _fuse(rewriter, group, numbered + len(changes),
                                  returned=node.output in outputs)
            changes.append(change)
            return fused

        return decide

    return rewrite(graph, decide_for), changes


def _groups(g: Graph) -> list[list[Node]]:
    """The groups of nodes that become one kernel each, in graph order."""
    users = g.users()
    outputs = set(g.outputs)
    group_of: dict[Node, list[Node]] = {}
    groups: dict[int, list[Node]] = {}  # id(group) -> group (a list is not hashable)

    def private(value: Any, consumer: Node) -> bool:  # only `consumer` ever reads it
        return (isinstance(value, Value) and value not in outputs
                and all(u is consumer for u in users.get(value, ())))

    for node in g.nodes:
        if node.op.elementwise:
            group = None
            for operand in node.inputs:
                producer = operand.producer if isinstance(operand, Value) else None
                if (producer is not None and producer in group_of
                        and producer.op.elementwise
                        and producer.spec.shape == node.spec.shape
                        and private(operand, node)
                        and group_of[producer][-1] is producer):
                    joined = group_of[producer]
                    if group is None:
                        group = joined
                    elif joined is not group:  # two chains meet here: one group
                        group.extend(joined)
                        for n in joined:
                            group_of[n] = group
                        del groups[id(joined)]
            if group is None:
                group = []
                groups[id(group)] = group
            group.append(node)
            group_of[node] = group
        elif node.op.partials is not None and "initial" not in node.params:
            operand = node.inputs[0]
            producer = operand.producer if isinstance(operand, Value) else None
            if (producer is not None and producer in group_of and producer.op.elementwise
                    and group_of[producer][-1] is producer and private(operand, node)):
                group_of[producer].append(node)
                group_of[node] = group_of[producer]
    order = {n: i for i, n in enumerate(g.nodes)}
    return [sorted(grp, key=order.__getitem__) for grp in groups.values() if len(grp) > 1]


def _fuse(rewriter: Rewriter, members: list[Node], index: int,
          returned: bool) -> tuple[Value, Change]:
    """The fused node of `members` (its value) and the change that says so."""
    reduction = members[-1] if members[-1].op.partials is not None else None
    elementwise = members[:-1] if reduction is not None else members
    inside = {n.output for n in members}
    inputs: list[Value] = []
    for n in members:
        for o in n.inputs:
            if isinstance(o, Value) and o not in inside and o not in inputs:
                inputs.append(o)
    last = members[-1]
    group = FusedGroup(f"fused_k{index + 1}", tuple(elementwise), reduction, tuple(inputs),
                       (last.output,), (returned,))
    lineage = tuple(sorted({i for n in members for i in n.lineage}))
    fused = rewriter.add(fused_op(group), tuple(inputs), {}, last.spec, lineage)
    node = fused.producer
    names = ", ".join(f"%{n.id} {n.op.name}" for n in members)
    change = Change(
        "fused", tuple(n.id for n in members), (node.id,), "elementwise chain -> one kernel",
        f"{names} run as one kernel {group.name} ({format_node(node)}): it reads its "
        f"{len(inputs)} input(s) once and writes one result, with no temporaries in memory")
    return fused, change


