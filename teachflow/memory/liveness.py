"""Live ranges: which values a schedule holds in memory, and for which of its steps.

A graph runs as a *schedule*: its nodes one after another, step 0, 1, 2, ... (the executor's
order, `default_schedule`). A value made by a node is *live* from the step that makes it to the
last step that reads it: the executor lets go of it right after (``del v3``), and its memory can
be used again. At each step, what is held is the sum of the live values' sizes; the most it
ever holds is the schedule's *peak*. That is the figure a memory planner lowers (XLA's buffer
assignment, TorchInductor's buffer reuse), and what ``tfl.checkpoint`` trades compute for.

What counts, and how (lesson 8 says the same):

- the call's *arguments*, the *state* it reads (weights) and its *constants* are held by their
  owner for the whole call: live at every step;
- an *intermediate* is live from the step that makes it to the step that last reads it;
- an *output* is live from the step that makes it to the end: the caller gets it;
- a *view* (``reshape``, ``transpose``) owns no memory: it is its operand's memory seen anew, so
  it costs nothing of its own and keeps its operand's memory alive as long as it is read (to
  the end, if it is returned);
- a node that owns graphs (``cond``, a loop, a call) holds, while it runs, what the most
  demanding of its graphs holds beyond its inputs;
- a fused kernel's members live in registers: only its results count.

A value whose shape is known only at run time (a ``None`` axis) counts 0 bytes, and says so
(`LiveRange.size_known`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from teachflow.graph import Graph, Node, Value, subgraphs

#: How a value is held, by its `Value.kind` (a node's result is an intermediate or an output).
HELD_BY_OWNER = {"input": "argument", "capture": "state", "const": "constant"}


@dataclass(frozen=True)
class LiveRange:
    """One value's bytes, held from step `first_use` to step `last_use` (both included).

    `held` says why: ``"argument"``, ``"state"``, ``"constant"`` (held by their owner for the
    whole call: from step 0), ``"intermediate"``, ``"output"`` (to the last step) or
    ``"view"`` (no bytes of its own)."""

    value: Value
    size: int
    first_use: int
    last_use: int
    held: str
    size_known: bool = True

    def live_at(self, step: int) -> bool:
        return self.first_use <= step <= self.last_use


def default_schedule(graph: Graph, outputs: Sequence[Value] | None = None) -> list[Node]:
    """The executor's order: the nodes the outputs depend on, in graph order."""
    return graph.live(outputs)[0]


def value_bytes(value: Value) -> tuple[int, bool]:
    """A value's size in bytes, and whether its shape says it (0 and False if not)."""
    if None in value.shape:
        return 0, False
    return math.prod(value.shape) * value.dtype.itemsize, True


def live_ranges(graph: Graph, schedule: Sequence[Node] | None = None,
                outputs: Sequence[Value] | None = None) -> list[LiveRange]:
    """Every value the schedule holds: what the call is given, then each node's results, in
    the schedule's order."""
    outputs = list(graph.outputs if outputs is None else outputs)
    schedule = list(default_schedule(graph, outputs) if schedule is None else schedule)
    end = max(len(schedule) - 1, 0)
    returned = set(outputs)
    last_read = _last_reads(schedule)
    ranges: dict[Value, LiveRange] = {}
    for kind_list in (graph.inputs, graph.captures, graph.constants):
        for v in kind_list:
            size, known = value_bytes(v)
            ranges[v] = LiveRange(v, size, 0, end, HELD_BY_OWNER[v.kind], known)
    for step, node in enumerate(schedule):
        for v in node.outputs:
            size, known = value_bytes(v)
            if node.op.view:  # (returned, it keeps what it sees to the end)
                last = end if v in returned else last_read.get(v, step)
                ranges[v] = LiveRange(v, 0, step, last, "view", known)
            elif v in returned:
                ranges[v] = LiveRange(v, size, step, end, "output", known)
            else:
                ranges[v] = LiveRange(v, size, step, last_read.get(v, step), "intermediate",
                                      known)
    return _views_keep_their_memory(schedule, ranges)


def _last_reads(schedule: Sequence[Node]) -> dict[Value, int]:
    return {o: step for step, node in enumerate(schedule) for o in node.inputs
            if isinstance(o, Value)}


def views_of(nodes: Sequence[Node]) -> dict[Value, Value]:
    """For each view the nodes make, the value whose memory it is (through views of views)."""
    memory: dict[Value, Value] = {}
    for node in nodes:
        if node.op.view and isinstance(node.inputs[0], Value):
            memory[node.output] = memory.get(node.inputs[0], node.inputs[0])
    return memory


def _views_keep_their_memory(schedule: Sequence[Node],
                             ranges: dict[Value, LiveRange]) -> list[LiveRange]:
    """A view read at step k keeps the memory it sees alive to step k: the range of the value
    whose memory it is reaches as far as its views' do."""
    for view, base in views_of(schedule).items():
        seen, held = ranges[view], ranges.get(base)
        if held is not None and seen.last_use > held.last_use:
            ranges[base] = replace(held, last_use=seen.last_use)
    return list(ranges.values())


def transient_bytes(node: Node) -> int:
    """What a node holds while it runs beyond its operands and results: for a node that owns
    graphs, the peak of the most demanding of them, its inputs left out (they are the node's
    operands, counted already)."""
    graphs = subgraphs(node)
    if not graphs:
        return 0
    return max(peak_bytes(g, count_inputs=False) for g in graphs.values())


def timeline(graph: Graph, schedule: Sequence[Node] | None = None,
             outputs: Sequence[Value] | None = None, count_inputs: bool = True,
             ranges: Sequence[LiveRange] | None = None) -> list[int]:
    """Live bytes at each step of the schedule (one entry per node run); `ranges`, when the
    caller has them already, are `live_ranges` of that schedule."""
    schedule = list(default_schedule(graph, outputs) if schedule is None else schedule)
    if ranges is None:
        ranges = live_ranges(graph, schedule, outputs)
    if not count_inputs:
        ranges = [r for r in ranges if r.held not in HELD_BY_OWNER.values()]
    held = [0] * (len(schedule) + 2)  # a difference array: +size at first use, -size after last
    for r in ranges:
        held[r.first_use] += r.size
        held[r.last_use + 1] -= r.size
    live, steps = 0, []
    for step, node in enumerate(schedule):
        live += held[step]
        steps.append(live + transient_bytes(node))
    if not schedule:  # a graph of no nodes holds what it is given
        steps.append(sum(r.size for r in ranges))
    return steps


def peak_bytes(graph: Graph, schedule: Sequence[Node] | None = None,
               outputs: Sequence[Value] | None = None, count_inputs: bool = True) -> int:
    """The most bytes the schedule holds at once."""
    return max(timeline(graph, schedule, outputs, count_inputs), default=0)
