"""Plans the pass `plan_memory` would not make, to test the executor's side of memory plans
against them, and the pipelines of planned and unplanned runs.

The real planner is the pass `plan_memory`, last in the default pipeline. `one_slot_each` is a
deliberately wasteful plan (nothing reused, nothing in place): the executor must follow any valid
plan, not only the one the pass makes.
"""

from __future__ import annotations

from collections.abc import Callable

from teachflow.graph import Graph
from teachflow.memory import Buffer, MemoryPlan, live_ranges, plannable_values
from teachflow.passes import DEFAULT_PIPELINE

#: The default pipeline without its memory plan: every intermediate a new array.
UNPLANNED = [p for p in DEFAULT_PIPELINE if p != "plan_memory"]


def one_slot_each(graph: Graph) -> MemoryPlan:
    """Every allowed value in a slot of its own: nothing is reused."""
    allowed = plannable_values(graph)
    ranges = [r for r in live_ranges(graph) if r.value in allowed]
    return MemoryPlan(tuple(Buffer(r.value.id, r.size, r.first_use, r.last_use, k)
                            for k, r in enumerate(ranges)), tuple(r.size for r in ranges))


def planned(graph: Graph, planner: Callable[[Graph], MemoryPlan]) -> Graph:
    """A pass: the graph, with `planner`'s plan hung on it."""
    graph.memory_plan = planner(graph)
    return graph


def with_plan(planner: Callable[[Graph], MemoryPlan] | None = None) -> list:
    """The default pipeline, whose last pass plans memory; with `planner`, the default pipeline
    without `plan_memory`, then `planner`'s plan."""
    if planner is None:
        return list(DEFAULT_PIPELINE)
    return [*UNPLANNED, lambda g: planned(g, planner)]
