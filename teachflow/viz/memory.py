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
     "values": [[node, name, size, first, last, held, slot], ...],
                                    each value the schedule holds: the drawn id of its node,
                                    its name (``%7``), its bytes, its first and last step, how
                                    it is held (``"argument"``, ``"state"``, ``"constant"``,
                                    ``"intermediate"``, ``"output"``, ``"view"``) and its slot
                                    in the memory plan (null: not planned)
     "arena": bytes or null}        the plan's slots together (null: the stage has no plan)

A node that owns graphs (a ``cond``, a loop) holds, while it runs, what its busiest graph
holds beyond its operands: that is in ``live`` but is no value of the stage's own.
"""

from __future__ import annotations

from typing import Any

from teachflow.graph import Graph
from teachflow.memory.liveness import default_schedule, live_ranges, timeline


def memory_data(graph: Graph) -> dict:
    """The stage's memory, as the module docstring says."""
    schedule = default_schedule(graph)
    live = timeline(graph, schedule)
    plan = getattr(graph, "memory_plan", None)
    slots = _slots(plan)
    values = [[r.value.drawn_id, str(r.value), r.size, r.first_use, r.last_use, r.held,
               slots.get(r.value.id)] for r in live_ranges(graph, schedule)]
    return {"steps": [node.id for node in schedule], "live": live,
            "peak_step": live.index(max(live)) if live else 0, "values": values,
            "arena": None if plan is None else plan.arena_bytes}


def _slots(plan: Any) -> dict[int, int]:
    """Each planned value's slot, by value id."""
    if plan is None:
        return {}
    return {b.value: b.slot for b in plan.buffers}
