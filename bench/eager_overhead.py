"""How much does eager dispatch cost? A chain of 20 small ops, teachflow vs raw NumPy.

Runs the same 20-op chain on 4x4 float32 inputs three ways, side by side in one process:

- raw NumPy calls (the floor: what the kernels themselves cost),
- teachflow eager without gradient recording (inputs do not require grad),
- teachflow eager with gradient recording (inputs require grad; every op goes on the tape),

and prints the time per op and the ratios to NumPy. It also prints each op alone, so the chain's
average does not hide an expensive op. Run: ``python bench/eager_overhead.py``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import timeit

import numpy as np

import teachflow as tfl

from timing import ratio
from workloads import N_OPS, chain_numpy, chain_teachflow

SINGLE_OPS = {  # name: (NumPy statement, teachflow statement), timed as bare statements
    "add": ("np.add(x, y)", "x + y"),
    "mul scalar": ("np.multiply(x, 0.5)", "x * 0.5"),
    "exp": ("np.exp(x)", "x.exp()"),
    "tanh": ("np.tanh(x)", "x.tanh()"),
    "maximum": ("np.maximum(x, y)", "tfl.maximum(x, y)"),
    "matmul": ("np.matmul(x, y)", "x @ y"),
    "sum axis": ("np.sum(x, axis=1, keepdims=True)", "x.sum(axis=1, keepdims=True)"),
}


def statement_time(stmt: str, x, y, number: int, repeat: int) -> float:
    """Seconds per execution of `stmt`, with no wrapper call around it to blur the ratio."""
    timer = timeit.Timer(stmt, globals={"np": np, "tfl": tfl, "x": x, "y": y})
    return min(timer.repeat(number=number, repeat=repeat)) / number


def best_time(fn, args, number: int, repeat: int) -> float:
    """Seconds per call: the best of `repeat` runs of `number` calls (the least disturbed)."""
    return min(timeit.repeat(lambda: fn(*args), number=number, repeat=repeat)) / number


def import_time(module: str, runs: int = 5) -> float:
    """Best wall time of ``python -c "import <module>"`` in a fresh interpreter."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000, help="calls per timing run")
    parser.add_argument("--repeat", type=int, default=15, help="timing runs (best is kept)")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    xs = [rng.uniform(0.5, 1.5, (4, 4)).astype(np.float32) for _ in range(3)]
    plain = [tfl.tensor(a) for a in xs]
    tracked = [tfl.tensor(a, requires_grad=True) for a in xs]

    # The three versions must compute the same thing, or the comparison means nothing.
    expected = chain_numpy(*xs)
    np.testing.assert_allclose(chain_teachflow(*plain).numpy(), expected, rtol=1e-5)
    np.testing.assert_allclose(chain_teachflow(*tracked).numpy(), expected, rtol=1e-5)

    # Interleave the three so drifting machine load hits them alike.
    numpy_s, eager_s, taped_s = [], [], []
    for _ in range(3):
        numpy_s.append(best_time(chain_numpy, xs, args.number, args.repeat))
        eager_s.append(best_time(chain_teachflow, plain, args.number, args.repeat))
        taped_s.append(best_time(chain_teachflow, tracked, args.number, args.repeat))
    t_np, t_eager, t_taped = min(numpy_s), min(eager_s), min(taped_s)

    print(f"20-op chain, 4x4 float32 (numpy {np.__version__}), time per op:")
    print(f"  raw NumPy               {t_np / N_OPS * 1e9:8.0f} ns")
    print(f"  teachflow, no tape      {t_eager / N_OPS * 1e9:8.0f} ns   "
          f"ratio {ratio(t_eager, t_np):>5}  (goal <= 2.5x)")
    print(f"  teachflow, recording    {t_taped / N_OPS * 1e9:8.0f} ns   "
          f"ratio {ratio(t_taped, t_np):>5}  (goal <= 4.0x)")

    print("\nsingle ops (ns per call: numpy / no tape / recording, and ratios):")
    for name, (np_stmt, tf_stmt) in SINGLE_OPS.items():
        a = statement_time(np_stmt, *xs[:2], args.number, args.repeat)
        b = statement_time(tf_stmt, *plain[:2], args.number, args.repeat)
        c = statement_time(tf_stmt, *tracked[:2], args.number, args.repeat)
        print(f"  {name:<11} {a * 1e9:6.0f} / {b * 1e9:6.0f} / {c * 1e9:6.0f}"
              f"    {ratio(b, a):>5}  {ratio(c, a):>5}")

    bare, numpy_only, ours = (import_time(m) for m in ("sys", "numpy", "teachflow"))
    print(f"\npython -c 'import teachflow': {ours:.3f} s (goal < 0.3 s); "
          f"bare interpreter {bare:.3f} s, 'import numpy' {numpy_only:.3f} s")


if __name__ == "__main__":
    main()
