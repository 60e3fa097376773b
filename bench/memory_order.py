"""Memory-aware scheduling: the peak of the traced order against the order `plan_memory` chose.

The program has `k` independent branches, each making a big value and reducing it at once,
written the way code often is: every big value first, the reductions after.

    hs = [x @ w for w in ws]                  # k big products, all live in the traced order
    total = sum(h.tanh().sum() for h in hs)

`x` is a column and each `w` a row: the products are big, what the call is given is small.

The figures are live bytes from `teachflow.memory.liveness` (what the call is given, its state
and its outputs counted as lesson 8 says), not timings: they come out the same on any machine,
and a test asserts the goal (chosen <= 0.5x traced).

    python bench/memory_order.py [--branches 8] [--size 256]
"""

from __future__ import annotations

import argparse

import numpy as np

import teachflow as tfl
from teachflow.memory import peak_bytes


def branches(k: int, size: int) -> tuple[object, list[tfl.Tensor]]:
    """The program of `k` branches on `size` x `size` matrices, and its example arguments."""
    rng = np.random.default_rng(0)
    ws = [tfl.tensor(rng.standard_normal((1, size)).astype("float32")) for _ in range(k)]

    def program(x):
        hs = [x @ w for w in ws]
        total = hs[0].tanh().sum()
        for h in hs[1:]:
            total = total + h.tanh().sum()
        return total

    return program, [tfl.tensor(rng.standard_normal((size, 1)).astype("float32"))]


def peaks(k: int = 8, size: int = 256) -> tuple[int, int]:
    """The peak of the order before `plan_memory` (the pipeline's other passes done) and of the
    order it chose, in bytes."""
    program, args = branches(k, size)
    compiled = tfl.compile(program, *args)
    before, after = compiled.snapshots[-2].graph, compiled.snapshots[-1].graph
    return peak_bytes(before), peak_bytes(after)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--branches", type=int, default=8)
    parser.add_argument("--size", type=int, default=256)
    a = parser.parse_args()
    naive, chosen = peaks(a.branches, a.size)
    print(f"{a.branches} branches, each a {a.size}x{a.size} float32 outer product reduced at once")
    print(f"peak, traced order        {naive / 2**20:8.2f} MiB")
    print(f"peak, plan_memory's order {chosen / 2**20:8.2f} MiB")
    print(f"chosen over traced        {chosen / naive:8.2f}x   (goal <= 0.5x)")


if __name__ == "__main__":
    main()
