"""Which nodes fuse: the rule that cuts a graph into groups, each to run as one kernel.

The rule, applied to the nodes in order (a learner can follow it with a pencil):

1. An elementwise node joins the group of each operand's producer that is elementwise too and
   makes a value of the same shape (only a group's *inputs* may broadcast). When it joins two
   groups, they become one: two chains that meet, as in ``a*x + b*x``, are one kernel. A value
   read several times inside a group is still computed once, in the kernel.
2. Unless joining would create a cycle: the node also reads a value computed *outside* the group
   from the group's own values (``h = tanh(x); y = h - h.sum()``: the ``sub`` reads ``h``, but
   also the ``sum`` of it, which needs all of ``h`` first). Kernel and sum would each wait for
   the other. The node then does not join that group.
3. Nor, once something outside has read the group's values (before the node, in the graph's
   order; a reduction aside: rule 4), if the node's result would leave the kernel and joining
   frees nothing. That kernel must run before its reader, so a node joining it now runs early,
   ahead of the nodes in between. Inside the kernel its result never exists, and ending in the
   kernel's reduction it is small; but as one of the kernel's results it is held in memory
   from the kernel on. Unless joining keeps another value of the group, one only this node
   reads, from being written: then one value is held instead of another. In a training step,
   a layer's ``h = relu(x @ w.T + b)`` is read by the next layer's ``matmul``; much later,
   backward's ``h > 0`` (ReLU's gradient) reads it again, for a ``mul`` with the cotangent
   that cannot join (rule 2). Joined to ``h``'s kernel, the mask would be one of its results,
   made in the forward pass and held through all of it: one more value per layer. But in
   ``h = tanh(x); return h @ w, ((h * x).exp() - h).sum(axis=1)``, ``h * x`` joins, though
   the ``matmul`` read ``h`` first: all it leads to stays in the kernel, up to the sum.
   Fusion is to lower memory (the values inside a kernel never exist), never raise it.
4. A reduction that can be computed in pieces (sum, mean, max: their ops say how, in
   `Op.partials`) joins the group of its operand, and ends it: the kernel reduces as it
   computes, and still writes the group's values that something else needs (XLA fuses a
   reduction with its operand's producers so). One reduction per group: the first. What reads
   the reduction stays outside, whatever else it reads of the group: it can start only when the
   whole kernel is done (in ``h = tanh(x); y = h + h.sum(axis=1)``, rule 2 keeps the ``add``
   out of ``h``'s group, the ``sum`` joins it, and the ``add`` reads both of its results).
5. Every value of a group that something outside needs (a later node, the graph's outputs) is
   an output of its kernel (*multi-output fusion*); every other value never reaches memory.
6. A group of one node stays as it is: nothing to gain. Unless the node writes more elements
   than it reads (its operands broadcast against each other, as in the outer product
   ``x[:, None] * y``): NumPy's broadcasting loop then goes a short row at a time, while the
   kernel writes the result at the speed of memory (and a result the graph returns into the
   memory of the last call's, when nobody holds that any more). The per-example gradients'
   outer products, 25.7 MB, run 4-6x faster so (`bench/fusion.py`).

`group_nodes` applies the rule and says, for each group, where it stopped and why (a reduction,
a shape change, an op that is not elementwise, a cycle it would create, a reader outside before
it, the graph's outputs).
`grouped_order` puts each group's nodes next to each other, where its last node was, so a pass
can replace them by one node in one walk.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from teachflow.graph import Graph, Node, Value


@dataclass(eq=False)
class Group:
    """Nodes that become one kernel, and why the group ends where it does.

    ``nodes`` are in graph order (a reduction, if any, last); ``outputs`` the values needed
    outside it, in graph order; ``stops`` one entry per node outside that reads a value of the
    group, or per value the graph returns: ``(why, node or None, value)``, ``why`` one of
    ``"reduction"`` (a second one), ``"after reduction"`` (it reads the group's reduction),
    ``"shape"``, ``"not elementwise"``, ``"cycle"``, ``"read before"`` (rule 3),
    ``"returned"``.
    """

    nodes: list[Node]
    outputs: list[Value] = field(default_factory=list)
    stops: list[tuple[str, Node | None, Value]] = field(default_factory=list)

    @property
    def reduction(self) -> Node | None:
        last = self.nodes[-1]
        return None if last.op.elementwise else last


def group_nodes(graph: Graph) -> list[Group]:
    """The groups of `graph`'s nodes (those of more than one node, or of one by rule 6), in
    graph order.

    Whether a node's result leaves its kernel (rule 3) is known only once the groups are: the
    walk lets every node join, then bars those whose result left a kernel that something had
    read before them and freed nothing, and walks again, until none does."""
    barred: set[Node] = set()
    while True:
        grouping = _Grouping(graph, barred)
        groups = grouping.groups()
        if not grouping.leaked:
            return groups
        barred |= grouping.leaked


class _Grouping:
    """Rule 1-3, in one walk. Groups are numbered; merged groups are found by union-find.

    Cycle test (rule 2): can a value the node reads be reached from the groups it would join,
    through something outside them? A walk back from the value, over producers, where a group
    met on the way counts as one unit (all its inputs are its predecessors). It never goes
    before the first node of the groups it looks for, so it stays short in practice.

    Rule 3: the walk notes each group that a node outside it reads (`read`). A node that joins
    a group noted is late (`joined_late`); once the groups are complete, a late node whose
    result leaves its kernel and that frees nothing is `leaked`, and a `barred` node joins no
    group noted (`group_nodes` walks again with it barred).
    """

    def __init__(self, graph: Graph, barred: set[Node]) -> None:
        self.graph = graph
        self.index = {n: i for i, n in enumerate(graph.nodes)}
        self.parent: dict[int, int] = {}  # group -> the group it was merged into (union-find)
        self.members: dict[int, list[Node]] = {}  # root group -> its nodes, in order of joining
        self.inputs: dict[int, list[Value]] = {}  # root group -> values it reads from outside
        self.first: dict[int, int] = {}  # root group -> index of its first node
        self.last: dict[int, int] = {}  # root group -> index of its last node
        self.group_of: dict[Node, int] = {}
        self.cycles: dict[Node, list[int]] = {}  # node -> groups it stayed out of (a cycle)
        self.read: set[int] = set()  # root groups a node outside has read (rule 3)
        self.barred = barred  # nodes that join no group in `read`
        self.late: dict[Node, list[int]] = {}  # node -> groups it stayed out of (rule 3)
        self.joined_late: set[Node] = set()  # nodes that joined a group in `read`
        self.leaked: set[Node] = set()  # late nodes whose result left the kernel, freeing none

    def find(self, g: int) -> int:
        while self.parent[g] != g:
            self.parent[g] = self.parent[self.parent[g]]
            g = self.parent[g]
        return g

    def group(self, node: Node | None) -> int | None:
        g = self.group_of.get(node) if node is not None else None
        return None if g is None else self.find(g)

    # --- Rule 1 to 3 ------------------------------------------------------------------------

    def walk(self) -> None:
        for node in self.graph.nodes:
            joined = self.place(node) if node.op.elementwise and len(node.outputs) == 1 else None
            if node.op.partials is None:  # (a reduction may still end the group: rule 4)
                self.read.update(g for g in self.operand_groups(node) if g != joined)

    def operand_groups(self, node: Node) -> set[int]:
        return {self.group(o.producer) for o in node.inputs if isinstance(o, Value)} - {None}

    def place(self, node: Node) -> int:
        """Put `node` in a group (rule 1 to 3); the group it is in."""
        joined: list[int] = []
        for operand in node.inputs:
            producer = operand.producer if isinstance(operand, Value) else None
            g = self.group(producer)
            if g is None or g in joined or producer.spec.shape != node.spec.shape:
                continue
            if self.would_cycle(node, [*joined, g]):
                self.cycles.setdefault(node, []).append(g)
            elif g in self.read and node in self.barred:
                self.late.setdefault(node, []).append(g)
            else:
                joined.append(g)
        if self.read.intersection(joined):
            self.joined_late.add(node)
        if not joined:
            g = len(self.parent)
            self.parent[g], self.members[g], self.inputs[g] = g, [], []
            self.first[g] = self.index[node]
            joined = [g]
        root = joined[0]
        for other in joined[1:]:  # two chains meet here: one group
            self.parent[other] = root
            self.members[root] += self.members.pop(other)
            self.inputs[root] += self.inputs.pop(other)
            self.first[root] = min(self.first[root], self.first.pop(other))
            self.last.pop(other, None)
            if other in self.read:
                self.read.add(root)
        if len(joined) > 1:  # what one read from the other is inside now
            self.inputs[root] = [o for o in self.inputs[root] if self.group(o.producer) != root]
        self.members[root].append(node)
        self.last[root] = self.index[node]
        self.group_of[node] = root
        self.inputs[root] += [o for o in node.inputs if isinstance(o, Value)
                              and self.group(o.producer) != root]
        return root

    def would_cycle(self, node: Node, groups: list[int]) -> bool:
        """True if a value the group of `node` and `groups` would read from outside depends on
        one of `groups`. (A group's own inputs never depend on it: with one group, only the
        node's operands need a look.)"""
        targets = set(groups)
        start = min(self.first[g] for g in groups)
        seen: set[Any] = set()
        stack = [o for o in node.inputs if isinstance(o, Value)
                 and self.group(o.producer) not in targets]
        if len(groups) > 1:
            stack += [o for g in groups for o in self.inputs[g]]
        while stack:
            value = stack.pop()
            producer = value.producer
            if producer is None:
                continue
            g = self.group(producer)
            if g in targets:
                return True
            if (self.last[g] if g is not None else self.index.get(producer, -1)) < start:
                continue  # all of it runs before the groups begin: it cannot depend on them
            key = ("group", g) if g is not None else producer
            if key in seen:
                continue
            seen.add(key)
            stack += self.inputs[g] if g is not None else [
                o for o in producer.inputs if isinstance(o, Value)]
        return False

    # --- Rule 4 and 5 -----------------------------------------------------------------------

    def groups(self) -> list[Group]:
        self.walk()
        users = self.graph.users()
        returned = set(self.graph.outputs)
        found: dict[int, Group] = {}
        for g, nodes in self.members.items():
            found[g] = Group(sorted(nodes, key=self.index.__getitem__))
        for group in found.values():
            self.attach_reduction(group, users)
        for g, group in found.items():
            self.outputs_and_stops(group, g, users, returned)
        kept = [group for group in found.values()
                if len(group.nodes) > 1 or writes_more_than_it_reads(group.nodes[0])]
        return sorted(kept, key=lambda group: self.index[group.nodes[-1]])

    def attach_reduction(self, group: Group, users: dict) -> None:
        """The first reduction (in graph order) of a value of the group joins it, and ends it;
        the group's other values needed outside are its other outputs."""
        inside = set(group.nodes)
        candidates = [u for n in group.nodes for u in users.get(n.output, ())
                      if u not in inside and u.op.partials is not None
                      and "initial" not in u.params and len(u.outputs) == 1
                      and u.inputs[0] is n.output and n.output not in u.inputs[1:]]
        if candidates:
            group.nodes.append(min(candidates, key=self.index.__getitem__))

    def outputs_and_stops(self, group: Group, g: int, users: dict, returned: set) -> None:
        inside = set(group.nodes)
        shape = group.nodes[0].spec.shape
        for node in group.nodes:
            value = node.output
            readers = [u for u in dict.fromkeys(users.get(value, ())) if u not in inside]
            if readers or value in returned or node is group.nodes[-1]:
                group.outputs.append(value)  # (the last one even if unused: dce's business)
            if node in self.joined_late and (readers or value in returned) \
                    and not self.frees(node, group, inside):
                self.leaked.add(node)
            if value in returned:
                group.stops.append(("returned", None, value))
            for reader in readers:
                if group.reduction is not None and group.reduction.output in reader.inputs:
                    why = "after reduction"  # whatever else it reads of the group
                elif reader.op.partials is not None:
                    why = "reduction"
                elif not reader.op.elementwise or len(reader.outputs) > 1:
                    why = "not elementwise"
                elif reader.spec.shape != shape:
                    why = "shape"
                elif g in {self.find(c) for c in self.cycles.get(reader, ())}:
                    why = "cycle"
                elif g in {self.find(c) for c in self.late.get(reader, ())}:
                    why = "read before"
                else:
                    why = "not elementwise"
                group.stops.append((why, reader, value))

    def frees(self, node: Node, group: Group, inside: set[Node]) -> bool:
        """Does `node`, in `group` (its nodes: `inside`), keep a value of the group from being
        one of its results? Not one that a late node made: a chain of them frees nothing but
        its own links. (Called in graph order: the values `node` reads have their place.)"""
        return any(isinstance(o, Value) and o.producer in inside
                   and o.producer not in self.joined_late and o not in group.outputs
                   for o in node.inputs)


def writes_more_than_it_reads(node: Node) -> bool:
    """Whether `node`'s result has more elements than its operands together (rule 6): they
    broadcast against each other. Sizes known only when the graph runs do not count."""
    sizes = [v.spec.size for v in (node.output, *node.inputs) if isinstance(v, Value)]
    return len(sizes) > 1 and -1 not in sizes and sizes[0] > sum(sizes[1:])


def grouped_order(graph: Graph, groups: list[Group]) -> list[Node]:
    """`graph`'s nodes in an order where each group's nodes are next to each other.

    Each group moves as one unit to where its last node was; the other nodes keep their order
    as far as the groups allow (a node that reads a group's value comes after all of it). The
    groups make no cycle, so this order exists: a topological sort of the units, taking the
    earliest ready unit first."""
    position = {n: i for i, n in enumerate(graph.nodes)}
    unit_of: dict[Node, int] = {}
    units: list[list[Node]] = []
    for group in groups:
        for n in group.nodes:
            unit_of[n] = len(units)
        units.append(group.nodes)
    for n in graph.nodes:
        if n not in unit_of:
            unit_of[n] = len(units)
            units.append([n])
    key = [max(position[n] for n in unit) for unit in units]
    waiting = [0] * len(units)
    after: list[list[int]] = [[] for _ in units]
    for u, unit in enumerate(units):
        before = {unit_of[o.producer] for n in unit for o in n.inputs
                  if isinstance(o, Value) and o.producer in unit_of} - {u}
        waiting[u] = len(before)
        for b in before:
            after[b].append(u)
    ready = [(key[u], u) for u in range(len(units)) if waiting[u] == 0]
    heapq.heapify(ready)
    order: list[Node] = []
    while ready:
        _, u = heapq.heappop(ready)
        order += units[u]
        for v in after[u]:
            waiting[v] -= 1
            if waiting[v] == 0:
                heapq.heappush(ready, (key[v], v))
    if len(order) != len(graph.nodes):
        raise AssertionError("fusion groups made a cycle")  # the rule above never does
    return order
