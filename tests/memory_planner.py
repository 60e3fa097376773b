"""A stand-in memory planner for tests and benchmarks of the executor's side of memory plans.

It gives every value `plannable_values` allows a slot, reusing a slot whose last value has been
read for the last time (greedy interval colouring, best fit by size), without reordering the
schedule and without writing in place. The real planner is the pass `plan_memory`.
"""

from __future__ import annotations

from teachflow.graph import Graph
from teachflow.memory import Buffer, MemoryPlan, live_ranges, plannable_values


def greedy_plan(graph: Graph) -> MemoryPlan:
    allowed = plannable_values(graph)
    ranges = sorted((r for r in live_ranges(graph) if r.value in allowed),
                    key=lambda r: (r.first_use, r.value.id))
    slots: list[list] = []  # [size, last_use of its latest value]
    buffers = []
    for r in ranges:
        free = [k for k, (_, last) in enumerate(slots) if last < r.first_use]
        fits = [k for k in free if slots[k][0] >= r.size]
        if fits:
            k = min(fits, key=lambda k: slots[k][0])
        elif free:
            k = max(free, key=lambda k: slots[k][0])
        else:
            k = len(slots)
            slots.append([0, -1])
        slots[k] = [max(slots[k][0], r.size), r.last_use]
        buffers.append(Buffer(r.value.id, r.size, r.first_use, r.last_use, k))
    return MemoryPlan(tuple(buffers), tuple(size for size, _ in slots))


def one_slot_each(graph: Graph) -> MemoryPlan:
    """Every allowed value in a slot of its own: nothing is reused."""
    allowed = plannable_values(graph)
    ranges = [r for r in live_ranges(graph) if r.value in allowed]
    return MemoryPlan(tuple(Buffer(r.value.id, r.size, r.first_use, r.last_use, k)
                            for k, r in enumerate(ranges)), tuple(r.size for r in ranges))


def planned(graph: Graph, planner=greedy_plan) -> Graph:
    """A pass: the graph, with its memory plan hung on it."""
    graph.memory_plan = planner(graph)
    return graph


def with_plan(planner=greedy_plan) -> list:
    """The default pipeline, then the stand-in planner."""
    from teachflow.passes import DEFAULT_PIPELINE

    return [*DEFAULT_PIPELINE, lambda g: planned(g, planner)]
