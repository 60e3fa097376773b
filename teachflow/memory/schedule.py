"""A schedule that frees memory early: which of the nodes ready to run goes first (lesson 8).

Any topological order computes the same values, but not with the same peak. Tracing records the
order the code was written in, and code often makes every big value first and uses them later:

    hs = [x @ w for w in ws]              # eight big products, all live at once
    total = sum(h.tanh().sum() for h in hs)

Run each product's ``sum`` right after it, and one big value is live at a time. The rule here
is greedy, and a learner can follow it by hand:

    among the nodes ready to run, run the one that frees the most bytes net: the bytes of the
    operands it reads for the last time, less the bytes it makes; ties: the earlier in the
    graph's order.

A node *frees* an operand's memory when it is the operand's last reader, and the operand is an
intermediate (what the call is given, its state and constants are held by their owners, and an
output goes to the caller). A view makes nothing: its operand's memory is freed when the last
reader of the view, or of the operand, has run. Greedy is not always best: the rule's order is
kept only where its peak is lower than the given order's (`liveness.peak_bytes`), so a schedule
never raises the peak.

Some nodes keep their order among themselves, whatever their bytes: a random op (which draws
which numbers follows the order the draws are made in) and a node that owns graphs (its branches
or body may draw too). The rule sees each as depending on the one before it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from teachflow.graph import Graph, Node, Value, subgraphs
from teachflow.memory.liveness import default_schedule, peak_bytes, value_bytes, views_of


@dataclass(frozen=True)
class Move:
    """`node` runs before `passed`, the first node of the given order not yet run: it frees
    `frees` bytes net (negative: holds that many more), where `passed` would free
    `passed_frees`."""

    node: Node
    passed: Node
    frees: int
    passed_frees: int


@dataclass(frozen=True)
class Schedule:
    """An order of all the graph's nodes, its peak, the given order's peak, and the moves that
    make it differ from the given order (none where the given order was kept)."""

    nodes: tuple[Node, ...]
    peak: int
    given_peak: int
    moves: tuple[Move, ...]


def keeps_its_place(node: Node) -> bool:
    """Whether a node keeps its order among such nodes: a random op, a collective, or a node
    owning graphs."""
    return node.op.impure or bool(subgraphs(node))


def lower_peak_schedule(graph: Graph) -> Schedule:
    """The greedy rule's order where its peak is lower than the graph's own order's, else the
    graph's own order."""
    order, moves = greedy_order(graph)
    given_peak = peak_bytes(graph, default_schedule(graph))
    peak = peak_bytes(graph, _run(graph, order))
    if peak < given_peak:
        return Schedule(tuple(order), peak, given_peak, tuple(moves))
    return Schedule(tuple(graph.nodes), given_peak, given_peak, ())


def _run(graph: Graph, order: Sequence[Node]) -> list[Node]:
    """What the executor runs of `order`: the nodes the outputs depend on."""
    live = set(default_schedule(graph))
    return [n for n in order if n in live]


def memory_of(graph: Graph) -> dict[Value, Value]:
    """The value whose memory each value is: a view's operand's (through views of views), and
    every other value its own."""
    return {v: v for v in graph.values()} | views_of(graph.nodes)


class _Bytes:
    """What the greedy rule counts for each node: the bytes it makes, and the memory it reads,
    with how many readers each memory has left."""

    def __init__(self, graph: Graph) -> None:
        owner = memory_of(graph)
        kept = {owner[v] for v in graph.outputs}  # (a view returned keeps its operand too)
        self.reads = {n: {owner.get(o, o) for o in n.inputs if isinstance(o, Value)}
                      for n in graph.nodes}
        self.readers: dict[Value, list[Node]] = {}
        for node, memory in self.reads.items():
            for m in memory:
                self.readers.setdefault(m, []).append(node)
        self.left = {m: len(r) for m, r in self.readers.items()}
        self.freeable = {m: value_bytes(m)[0] for m in self.readers
                         if m.kind == "node" and m not in kept}
        self.makes = {n: 0 if n.op.view else sum(value_bytes(v)[0] for v in n.outputs)
                      for n in graph.nodes}

    def frees(self, node: Node) -> int:
        """Bytes net that running `node` now frees: what it reads last, less what it makes."""
        last = sum(self.freeable.get(m, 0) for m in self.reads[node] if self.left[m] == 1)
        return last - self.makes[node]

    def ran(self, node: Node, done: set[Node]) -> list[Node]:
        """Count `node` as run; the nodes whose figure grew (now the last reader of something)."""
        grew = []
        for m in self.reads[node]:
            self.left[m] -= 1
            if self.left[m] == 1 and m in self.freeable:
                grew += [r for r in self.readers[m] if r not in done and r is not node]
        return grew


def greedy_order(graph: Graph) -> tuple[list[Node], list[Move]]:
    """Every node of `graph` in the greedy rule's order, and where it departs from the graph's.

    The ready nodes wait in a heap by (bytes freed net, position in the graph); a node whose
    figure changes (it became the last reader of something) is pushed again with the new
    figure, and an old entry is skipped when popped."""
    position = {n: i for i, n in enumerate(graph.nodes)}
    made_by = {v: n for n in graph.nodes for v in n.outputs}
    needs = {n: {made_by[o] for o in n.inputs if isinstance(o, Value) and o in made_by}
             for n in graph.nodes}
    placed = [n for n in graph.nodes if keeps_its_place(n)]
    for before, after in pairwise(placed):
        needs[after].add(before)
    users: dict[Node, list[Node]] = {n: [] for n in graph.nodes}
    for node, earlier in needs.items():
        for e in earlier:
            users[e].append(node)
    left = {n: len(needs[n]) for n in graph.nodes}
    counts = _Bytes(graph)
    ready: list[tuple[int, int]] = []

    def push(node: Node) -> None:
        heapq.heappush(ready, (-counts.frees(node), position[node]))

    for node in graph.nodes:
        if not left[node]:
            push(node)
    order: list[Node] = []
    done: set[Node] = set()
    moves: list[Move] = []
    given = iter(graph.nodes)  # the given order, to find the first node not yet run
    first = next(given, None)
    while ready:
        score, at = heapq.heappop(ready)
        node = graph.nodes[at]
        if node in done or -score != counts.frees(node):
            continue  # an entry from before its figure changed
        while first in done:
            first = next(given, None)
        if node is not first:
            moves.append(Move(node, first, -score, counts.frees(first)))
        order.append(node)
        done.add(node)
        for grown in counts.ran(node, done):
            if not left[grown]:
                push(grown)
        for user in users[node]:
            left[user] -= 1
            if not left[user]:
                push(user)
    return order, moves
