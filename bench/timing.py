"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import time
import timeit
from collections.abc import Callable


def best_wall_time(fn: Callable[[], object], repeat: int) -> float:
    """Seconds of the fastest of `repeat` calls (the one least disturbed by the machine)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def interleaved_best(fns: dict[str, Callable[[], object]], number: int, repeat: int,
                     rounds: int = 3) -> dict[str, float]:
    """Seconds per call of each function: the best of `rounds` x `repeat` runs of `number` calls.

    Each round times every function once before the next round starts, so drifting machine load
    hits them all alike instead of whichever happened to run last.
    """
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            per_call = min(timeit.repeat(fn, number=number, repeat=repeat)) / number
            best[name] = min(best[name], per_call)
    return best
