"""Timing helpers shared by the benchmarks, and how a ratio of two timings prints.

A ratio prints as ``1.23x``, or ``n/a`` where it means nothing: a time that is zero (a
difference of two timings that came out negative on a busy machine, clamped), not a number or
infinite (not taken). No benchmark prints ``nanx`` or ``infx`` (tests/test_bench_timing.py).
"""

from __future__ import annotations

import math
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
    return {name: best(times) for name, times in per_round.items()}


def best(times: list[float]) -> float:
    """The least of `times` that were measured; NaN if none was."""
    return min((t for t in times if measured(t)), default=math.nan)


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
    """The median over rounds of ``a``'s time divided by ``b``'s in the same round (rounds
    where either was not measured left out; NaN if that leaves none)."""
    ratios = [x / y for x, y in zip(times[a], times[b], strict=True)
              if measured(x) and measured(y)]
    return statistics.median(ratios) if ratios else math.nan


def measured(seconds: float) -> bool:
    """Whether a timing (or a ratio of two) is a number a ratio can be made of."""
    return math.isfinite(seconds) and seconds > 0


def ratio(a: float, b: float, digits: int = 2) -> str:
    """``a / b``, two timings, as ``1.23x``; ``n/a`` where either was not measured."""
    return ratio_text(a / b if measured(a) and measured(b) else math.nan, digits)


def microseconds(seconds: float) -> str:
    """A timing as ``  1234.5 us``; ``n/a us`` where it was not measured."""
    return f"{seconds * 1e6:8.1f} us" if measured(seconds) else f"{'n/a':>8} us"


def ratio_text(value: float, digits: int = 2) -> str:
    """A ratio as ``1.23x`` (`digits` decimals); ``n/a`` where it is not a positive number."""
    return f"{value:.{digits}f}x" if measured(value) else "n/a"
