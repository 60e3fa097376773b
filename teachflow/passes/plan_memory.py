"""Memory planning: an order that frees memory early, and a reused slot for each intermediate.

The last pass, since every pass before it may add, remove or reorder nodes, and a plan is
correct only for the order of the nodes it was made for. It does two things, each a chapter of
`teachflow.memory` (lesson 8):

1. it puts the nodes in an order that frees memory early (`memory.schedule`: among the nodes
   ready to run, the one that frees the most bytes net; kept only where it lowers the peak);
2. it gives each intermediate the executor can write into (`memory.writable`: the one rule
   both follow) the memory of an operand that dies where it is made (in place), or a slot of
   memory, reused by values whose ranges do not overlap, largest values first
   (`memory.slots`), and hangs the plan on the graph it returns (`Graph.memory_plan`).

Each decision is a change that says why, in a sentence: ``moved %12 before %10: it frees
4 KiB net``, ``%7 reuses slot 2, freed by %4 at step 5``, ``%9 written in place of %8, which
dies here``. Positions are steps of the executor's schedule: the nodes the outputs depend on,
in the graph's (new) order.

What it leaves alone, and why:
- the graphs a node owns (a ``cond``'s branches, a loop's body, a function called) are not
  planned: they run as often as the node decides, their values are the executor's own;
- a graph on several devices (after `partition`) is not planned nor reordered: its pieces run
  at the same time, each on its own thread in the order `soonest_first` chooses and sending
  values to each other, so no one sequence of steps says when a value dies.
"""

from __future__ import annotations

from teachflow.graph import Graph, Value
from teachflow.memory.liveness import default_schedule
from teachflow.memory.schedule import Move, lower_peak_schedule
from teachflow.memory.slots import Decision, assign_slots
from teachflow.passes.base import Change


def plan_memory(graph: Graph) -> tuple[Graph, list[Change]]:
    """The graph in a memory-aware order, with a plan of its intermediates' memory."""
    g = graph.clone()
    g.memory_plan = None
    if len(devices(g)) > 1:
        return g, []
    schedule = lower_peak_schedule(g)
    g.nodes = list(schedule.nodes)
    g.memory_plan, decisions = assign_slots(g, default_schedule(g))
    changes = [_moved(m) for m in schedule.moves]
    values = {v.id: v for v in g.values()}
    return g, changes + [_slotted(d, values) for d in decisions]


def devices(graph: Graph) -> set[str]:
    """The devices the graph's values live on."""
    return {v.spec.device for v in graph.values()}


def _moved(move: Move) -> Change:
    node, passed = move.node, move.passed
    return Change("moved", (node.id,), (node.id,), "free the most bytes first",
                  f"moved {node.output} before {passed.output}: it frees {_size(move.frees)} "
                  f"net ({passed.output}: {_size(move.passed_frees)})")


def _slotted(decision: Decision, values: dict[int, Value]) -> Change:
    b = decision.buffer
    value = values[b.value]
    node = value.producer
    if value is not node.output:  # (a kernel's second result: the change names the node)
        value = f"{value} (a result of {node.output})"
    if decision.reason == "in_place":
        return Change("in_place", (node.id,), (node.id,), "write over a dying operand",
                      f"{value} written in place of %{decision.freed_by}, which dies here "
                      f"(step {b.first_use})")
    if decision.reason == "reused":
        return Change("reused", (node.id,), (node.id,), "reuse a freed slot",
                      f"{value} reuses slot {b.slot}, freed by %{decision.freed_by} at step "
                      f"{decision.freed_at}")
    return Change("new_slot", (node.id,), (node.id,), "a new slot",
                  f"{value} gets slot {b.slot} ({_size(b.size)}), the first value it holds")


def _size(n: int) -> str:
    """Bytes as a learner reads them: ``12 B``, ``4 KiB``, ``1.5 MiB`` (negative: held)."""
    sign, n = ("-" if n < 0 else ""), abs(n)
    if n < 1024:
        return f"{sign}{n} B"
    if n < 1024 ** 2:
        return f"{sign}{round(n / 1024, 1):g} KiB"
    return f"{sign}{round(n / 1024 ** 2, 1):g} MiB"
