"""How long does the compiler take? The default pipeline on 1,000- and 10,000-node graphs.

The graphs come from one program, unrolled to the size asked for: elementwise chains (so fusion
has work), repeated subexpressions (CSE), identities such as ``x*1`` (simplify), constant
subgraphs (constant folding) and reductions. The cost should grow about linearly with the graph.

Run: ``python bench/compile_time.py``.
"""

from __future__ import annotations

import teachflow as tfl
from teachflow.compiler import run_pipeline

from timing import best_wall_time, ratio


def program(n_blocks: int):
    def f(x, w):
        h = x
        for i in range(n_blocks):
            a = (h * w + 1.0).tanh()  # a chain to fuse
            b = (h * w + 1.0).tanh()  # ... computed twice: CSE merges it
            scale = tfl.full((), 2.0) * 0.5  # constant: folded
            h = (a + b) * 1 * scale - h * 0.1  # f(x)+f(x), x*1: simplify
            if i % 4 == 3:
                h = h - h.mean(axis=1, keepdims=True)  # a reduction
        return h

    return f


def measure(n_blocks: int, repeat: int) -> tuple[int, float, float]:
    x, w = tfl.randn(16, 16), tfl.randn(16, 16)
    graph = tfl.trace(program(n_blocks), x, w)
    pipeline = best_wall_time(lambda: run_pipeline(graph, "default", verify=False), repeat)
    total = best_wall_time(lambda: tfl.compile(program(n_blocks), x, w, verify=False), repeat)
    return len(graph), pipeline, total


def main() -> None:
    small_nodes, small_pipe, small_total = measure(75, repeat=5)
    big_nodes, big_pipe, big_total = measure(750, repeat=3)
    print("default pipeline (simplify, constant_fold, cse, dce, fuse):")
    print(f"  {small_nodes:6d}-node graph: passes {small_pipe * 1e3:7.1f} ms, "
          f"trace + passes + codegen {small_total * 1e3:7.1f} ms   (goal: passes < 1 s)")
    print(f"  {big_nodes:6d}-node graph: passes {big_pipe * 1e3:7.1f} ms, "
          f"trace + passes + codegen {big_total * 1e3:7.1f} ms")
    print(f"  {big_nodes / small_nodes:.1f}x the nodes took {ratio(big_pipe, small_pipe, 1)} "
          "the time (goal: < 12x for 10x the nodes)")


if __name__ == "__main__":
    main()
