"""A loop staged as a loop, or unrolled by tracing? ``tfl.fori_loop`` vs a Python ``for``.

The same 1,000 steps of small ops, ``carry = carry * 0.99 + 0.01`` on a float32[16] tensor,
captured two ways: as one ``fori_loop`` node whose body is traced once, and as a Python ``for``
loop that tracing unrolls into a copy of the body per step. Side by side, in one run:

- trace: ``tfl.trace`` (the raw graph, no passes);
- passes: the default pipeline on that graph (simplify, constant_fold, cse, dce, fuse);
- codegen: what the rest of ``tfl.compile`` takes (generating and compiling the executor);
- compile: ``tfl.compile``, all three; first call: a fresh ``tfl.function``'s first call
  (compile, then run once);
- graph nodes: the nodes of the traced and of the compiled graph, those inside the loop's body
  counted too;
- run time: one call of the compiled function, the median of several timings.

The loop's graph stays the same size whatever the trip count, and so do its trace and compile
times; unrolling makes them grow with it. At run time the loop pays a Python ``for`` step per
iteration around its body's kernels, where the unrolled graph's fused kernels run straight
through.

Run: ``python bench/control_flow.py`` (``--steps 20`` for a quick look).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import timeit
from collections.abc import Callable

import numpy as np

import teachflow as tfl
from teachflow.compiler import run_pipeline
from teachflow.graph import Graph, subgraphs

from timing import best_wall_time, ratio


def step(carry):
    return carry * 0.99 + 0.01


def looped(steps: int) -> Callable:
    def fori(x):
        return tfl.fori_loop(0, steps, lambda i, carry: step(carry), x)

    return fori


def unrolled(steps: int) -> Callable:
    def python_for(x):
        for _ in range(steps):
            x = step(x)
        return x

    return python_for


def node_count(graph: Graph) -> int:
    """The graph's nodes, with those of the graphs its nodes own (a loop's body)."""
    return sum(1 + sum(node_count(g) for g in subgraphs(node).values()) for node in graph.nodes)


def first_call(f: Callable, x: tfl.Tensor) -> float:
    """Seconds of a fresh tfl.function's first call: trace, passes, codegen, one run."""
    staged = tfl.function(f, verify=False)
    start = time.perf_counter()
    staged(x)
    return time.perf_counter() - start


def run_time(compiled: Callable, x: tfl.Tensor, repeat: int) -> float:
    """Seconds per call: the median of `repeat` timings of enough calls to last a while."""
    number = max(1, int(0.02 / max(best_wall_time(lambda: compiled(x), 3), 1e-7)))
    return statistics.median(timeit.repeat(lambda: compiled(x), number=number,
                                           repeat=repeat)) / number


def measure(fns: dict[str, Callable], x: tfl.Tensor, repeat: int) -> dict[str, dict]:
    """Every figure of each function in `fns`, one figure at a time for all of them, so that
    drifting machine load hits them alike."""
    graphs = {name: tfl.trace(f, x) for name, f in fns.items()}
    compiled = {name: tfl.compile(f, x, verify=False) for name, f in fns.items()}
    timings: dict[str, Callable[[str, Callable], float]] = {
        "trace": lambda name, f: best_wall_time(lambda: tfl.trace(f, x), repeat),
        "passes": lambda name, f: best_wall_time(
            lambda: run_pipeline(graphs[name], "default", verify=False), repeat),
        "compile": lambda name, f: best_wall_time(lambda: tfl.compile(f, x, verify=False),
                                                  repeat),
        "first call": lambda name, f: min(first_call(f, x) for _ in range(repeat)),
        "run": lambda name, f: run_time(compiled[name], x, repeat),
    }
    figures: dict[str, dict] = {name: {} for name in fns}
    for key, timing in timings.items():
        for name, f in fns.items():
            figures[name][key] = timing(name, f)
    for name, found in figures.items():
        found["traced nodes"] = node_count(graphs[name])
        found["compiled nodes"] = node_count(compiled[name].graph)
        found["codegen"] = max(found["compile"] - found["trace"] - found["passes"], 0.0)
    return figures


#: (row, key, unit): how each figure prints; time in ms, or a plain count.
ROWS = [
    ("trace", "trace", "ms"),
    ("passes", "passes", "ms"),
    ("codegen", "codegen", "ms"),
    ("compile (trace+passes+codegen)", "compile", "ms"),
    ("first call of tfl.function", "first call", "ms"),
    ("graph nodes, traced", "traced nodes", ""),
    ("graph nodes, compiled", "compiled nodes", ""),
    ("run time per call (median)", "run", "us"),
]


def show(value: float, unit: str) -> str:
    if not math.isfinite(value):  # not taken
        return f"{'n/a':>13s}"
    if unit == "ms":
        return f"{value * 1e3:10.2f} ms"
    if unit == "us":
        return f"{value * 1e6:10.1f} us"
    return f"{int(value):10,d}   "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="loop steps (default 1000)")
    parser.add_argument("--repeat", type=int, default=5, help="timing runs per figure")
    args = parser.parse_args()
    x = tfl.tensor(np.linspace(-1, 1, 16, dtype=np.float32))
    loop, flat = looped(args.steps), unrolled(args.steps)
    np.testing.assert_allclose(tfl.compile(loop, x, verify=False)(x).numpy(),
                               tfl.compile(flat, x, verify=False)(x).numpy(), rtol=1e-5)
    figures = measure({"fori_loop": loop, "unrolled": flat}, x, args.repeat)
    a, b = figures["fori_loop"], figures["unrolled"]
    print(f"{args.steps:,} steps of carry * 0.99 + 0.01 on float32[16]: "
          "tfl.fori_loop vs a Python for loop unrolled by tracing")
    print("\n".join(table(a, b)))


def table(a: dict[str, float], b: dict[str, float]) -> list[str]:
    """The printed rows: each figure of the fori_loop (`a`) and the unrolled loop (`b`), and
    their ratio."""
    lines = [f"  {'':32s}{'fori_loop':>13s}{'unrolled':>13s}   unrolled / fori_loop"]
    lines += [f"  {row:32s}{show(a[key], unit)}{show(b[key], unit)}   {ratio(b[key], a[key]):>9}"
              for row, key, unit in ROWS]
    return lines


if __name__ == "__main__":
    main()
