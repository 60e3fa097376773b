"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_wall_time(fn: Callable[[], object], repeat: int) -> float:
    """Seconds of the fastest of `repeat` calls (the one least disturbed by the machine)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)
