"""Memory: what a running graph holds, and for how long (lesson 8).

- `liveness`: the live range of every value in a schedule, the bytes held at each step, and the
  peak.
"""

from teachflow.memory.liveness import LiveRange, live_ranges, peak_bytes, timeline

__all__ = ["LiveRange", "live_ranges", "peak_bytes", "timeline"]
