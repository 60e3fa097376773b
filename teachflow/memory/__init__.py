"""Memory: what a running graph holds, and for how long (lesson 8).

- `liveness`: the live range of every value in a schedule, the bytes held at each step, and the
  peak.
- `plan`: a memory plan, the reused slot of memory each intermediate is written into.
- `writable`: which values a plan may give a buffer (`plannable`, `plannable_values`): the rule
  the planner and the executor share.
- `schedule`: an order of the nodes that frees memory early (a greedy rule, stated there).
- `slots`: making a plan: each value `plannable_values` allows given the memory of an operand
  that dies where it is made (in place), or a reused slot by interval colouring, largest first.
- `arena`: the memory of a plan's slots, made once per executor and thread, and a view of it
  for each planned value, which its kernel writes into (``out=``).
"""

from teachflow.memory.arena import Arena
from teachflow.memory.liveness import LiveRange, live_ranges, peak_bytes, timeline
from teachflow.memory.plan import Buffer, MemoryPlan
from teachflow.memory.schedule import Schedule, lower_peak_schedule
from teachflow.memory.slots import assign_slots
from teachflow.memory.writable import plannable, plannable_values, writes_out

__all__ = ["Arena", "Buffer", "LiveRange", "MemoryPlan", "Schedule", "assign_slots",
           "live_ranges", "lower_peak_schedule", "peak_bytes", "plannable", "plannable_values",
           "timeline", "writes_out"]
