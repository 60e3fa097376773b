"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import statistics
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
    per_round = interleaved_rounds(fns, number, repeat, rounds)
    return {name: min(times) for name, times in per_round.items()}


def interleaved_rounds(fns: dict[str, Callable[[], object]], number: int, repeat: int,
                       rounds: int = 3) -> dict[str, list[float]]:
    """Seconds per call of each function in each round (the best of `repeat` runs of `number`
    calls), rounds interleaved as in `interleaved_best`. Two functions' times in one round were
    taken moments apart: their ratio, round by round, is a paired measurement, steadier on a
    busy machine than the ratio of two bests taken at different moments.

    Each round starts one function later than the round before (round 2 runs the functions in
    the order 2, 3, ..., 1), so each runs after each of the others equally often. What one
    leaves behind can slow the next for a whole run, not only its first calls: after a function
    that allocates thousands of temporaries, the next one's arrays land elsewhere in memory (a
    training step measured 5-10% slower right after teachflow's eager step than right after
    NumPy's). A fixed order would charge that to one function every round."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns.items())
    for r in range(rounds):
        shift = r % len(order)
        for name, fn in order[shift:] + order[:shift]:
            times[name].append(min(timeit.repeat(fn, number=number, repeat=repeat)) / number)
    return times


def paired_ratio(times: dict[str, list[float]], a: str, b: str) -> float:
    """The median over rounds of ``a``'s time divided by ``b``'s in the same round."""
    return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))
