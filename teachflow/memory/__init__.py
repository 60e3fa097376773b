"""Memory: what a running graph holds, and for how long (lesson 8).

- `liveness`: the live range of every value in a schedule, the bytes held at each step, and the
  peak.
- `plan`: a memory plan, the reused slot of memory each intermediate is written into.
"""

from teachflow.memory.liveness import LiveRange, live_ranges, peak_bytes, timeline
from teachflow.memory.plan import Buffer, MemoryPlan

__all__ = ["Buffer", "LiveRange", "MemoryPlan", "live_ranges", "peak_bytes", "timeline"]
