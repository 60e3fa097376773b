"""A stage's memory as the stepper draws it: the bytes held at each step of its schedule, the
peak, and each value's live range (lesson 8).

The figures come from `teachflow.memory.liveness`, counted as it says: the call's arguments,
its state and its constants are held throughout, an intermediate from the step that makes it
to its last read, an output to the end, and a view owns no bytes of its own. When the stage's
graph carries a memory plan (`Graph.memory_plan`, hung there by the pass ``plan_memory``), each
planned value also names the slot of memory it is written into, and the plan's arena.

A stage's ``"memory"`` is::

    {"steps": [node id, ...],       the schedule: the node run at each step (its drawn id)
     "live": [bytes, ...],          the bytes held at each step
     "peak_step": k,                the first step that holds the most (``live[k]`` is the peak)
     "values": [[id, size, first, last, held], ...],
                                    each value the schedule holds: its id, its bytes, its first
                                    and last step, and how it is held, an index into `HELD`;
                                    with a plan, a sixth number: its slot (null: not planned)
     "arena": bytes or null}        the plan's slots together (null: the stage has no plan)

or, where it is the same as an earlier stage's (a pass that changed nothing the schedule
runs), ``{"as_stage": k}``: stage k's. A page of 5000 nodes stays small that way.

A node that owns graphs (a ``cond``, a loop) holds, while it runs, what its busiest graph
holds beyond its operands: that is in ``live`` but is no value of the stage's own.
"""

from __future__ import annotations

from typing import Any

from teachflow.graph import Graph
from teachflow.memory.liveness import default_schedule, live_ranges, timeline

#: How a value is held, by its index in a value's row (`widgets/stepper/memory.js` has the same).
HELD = ("argument", "state", "constant", "intermediate", "output", "view")


def stage_memory(snapshot: Any, earlier: list[dict]) -> dict | None:
    """A stage's ``"memory"``: null where the stage has no peak among its figures (a watched
    trace), a reference to the latest stage of `earlier` that holds the same, else in full."""
    if "peak_bytes" not in snapshot.stats:
        return None
    memory = memory_data(snapshot.graph)
    full = next((k for k in range(len(earlier) - 1, -1, -1)
                 if earlier[k].get("memory") and "as_stage" not in earlier[k]["memory"]), None)
    if full is not None and earlier[full]["memory"] == memory:
        return {"as_stage": full}
    return memory


def memory_data(graph: Graph) -> dict:
    """The stage's memory in full, as the module docstring says."""
    schedule = default_schedule(graph)
    ranges = live_ranges(graph, schedule)
    live = timeline(graph, schedule, ranges=ranges)
    plan = graph.memory_plan
    slots = {} if plan is None else {b.value: b.slot for b in plan.buffers}
    values = []
    for r in ranges:
        row = [r.value.id, r.size, r.first_use, r.last_use, HELD.index(r.held)]
        values.append(row if plan is None else [*row, slots.get(r.value.id)])
    return {"steps": [node.id for node in schedule], "live": live,
            "peak_step": live.index(max(live)) if live else 0, "values": values,
            "arena": None if plan is None else plan.arena_bytes}
