"""Memory: what a running graph holds, and for how long (lesson 8).

- `liveness`: the live range of every value in a schedule, the bytes held at each step, and the
  peak.
- `plan`: a memory plan, the reused slot of memory each intermediate is written into.
- `schedule`: an order of the nodes that frees memory early (a greedy rule, stated there).
- `slots`: making a plan: each intermediate given a reused slot by interval colouring, or the
  memory of an operand that dies where it is made (in place).
"""

from teachflow.memory.liveness import LiveRange, live_ranges, peak_bytes, timeline
from teachflow.memory.plan import Buffer, MemoryPlan
from teachflow.memory.schedule import Schedule, lower_peak_schedule
from teachflow.memory.slots import assign_slots

__all__ = ["Buffer", "LiveRange", "MemoryPlan", "Schedule", "assign_slots", "live_ranges",
           "lower_peak_schedule", "peak_bytes", "timeline"]
