"""What does staging buy? Eager vs staged vs hand-written NumPy, side by side in one run.

1. The 20-op chain of `eager_overhead.py` on 4x4 and 64x64 float32: teachflow eager, the same
   function under `tfl.function` (traced once, then run by its generated executor), and the
   NumPy calls written by hand.
2. A small MLP training step (batch 64, 784 -> 128 -> 10, ReLU, softmax cross-entropy; forward
   and backward, no optimizer): eager `tfl.value_and_grad`, the same under `tfl.function` (one
   joint forward-and-backward graph), and the forward and backward passes written by hand.
3. The cost of staging itself: tracing a 1,000-node function and generating its executor.

Run: ``python bench/staged_vs_eager.py``.
"""

from __future__ import annotations

import argparse
import time
import timeit

import numpy as np

import teachflow as tfl

from timing import ratio
from workloads import (
    N_OPS,
    chain_numpy,
    chain_teachflow,
    mlp_params,
    mlp_step_numpy,
    mlp_step_teachflow,
)


def best_time(fn, args, number: int, repeat: int) -> float:
    """Seconds per call: the best of `repeat` runs of `number` calls (the least disturbed)."""
    return min(timeit.repeat(lambda: fn(*args), number=number, repeat=repeat)) / number


def side_by_side(fns: dict, args: dict, number: int, repeat: int) -> dict[str, float]:
    """Time each function on its arguments, interleaving rounds so machine load hits all alike."""
    best = {name: float("inf") for name in fns}
    for _ in range(3):
        for name, fn in fns.items():
            best[name] = min(best[name], best_time(fn, args[name], number, repeat))
    return best


def chain_benchmark(n: int, number: int, repeat: int) -> None:
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(0.5, 1.5, (n, n)).astype(np.float32) for _ in range(3)]
    tensors = [tfl.tensor(a) for a in arrays]
    tracked = [tfl.tensor(a, requires_grad=True) for a in arrays]
    staged = tfl.function(chain_teachflow)
    expected = chain_numpy(*arrays)
    for result in (chain_teachflow(*tensors), staged(*tensors)):
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4)
    fns = {"numpy": chain_numpy, "eager": chain_teachflow, "taped": chain_teachflow,
           "staged": staged}
    t = side_by_side(fns, {"numpy": arrays, "eager": tensors, "taped": tracked,
                           "staged": tensors}, number, repeat)
    assert staged.trace_count == 1
    print(f"\n20-op chain, {n}x{n} float32 (time per op):")
    print(f"  hand-written NumPy          {t['numpy'] / N_OPS * 1e6:8.2f} us")
    print(f"  teachflow eager             {t['eager'] / N_OPS * 1e6:8.2f} us")
    print(f"  teachflow eager, recording  {t['taped'] / N_OPS * 1e6:8.2f} us")
    print(f"  teachflow staged            {t['staged'] / N_OPS * 1e6:8.2f} us")
    print(f"  staged speed-up over eager: {ratio(t['eager'], t['staged']):>5} "
          f"(over eager recording: {ratio(t['taped'], t['staged'])})   (goal at 4x4: >= 2.5x)")
    print(f"  staged / NumPy:             {ratio(t['staged'], t['numpy']):>5}"
          "                               (goal at 4x4: <= 1.3x)")


def mlp_benchmark(number: int, repeat: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 784)).astype(np.float32)
    onehot = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]
    params = mlp_params(rng)
    np_args = [x, onehot, *params]
    tf_args = [tfl.tensor(a) for a in np_args]
    staged = tfl.function(mlp_step_teachflow)

    loss, grads = mlp_step_numpy(*np_args)
    for tf_loss, tf_grads in (mlp_step_teachflow(*tf_args), staged(*tf_args)):
        np.testing.assert_allclose(tf_loss.numpy(), loss, rtol=1e-4)
        for g, want in zip(tf_grads, grads, strict=True):
            np.testing.assert_allclose(g.numpy(), want, rtol=1e-3, atol=1e-5)

    t = side_by_side({"numpy": mlp_step_numpy, "eager": mlp_step_teachflow, "staged": staged},
                     {"numpy": np_args, "eager": tf_args, "staged": tf_args}, number, repeat)
    graph = staged.concrete_functions[0].graph
    print(f"\nMLP step, batch 64, 784-128-10, forward + backward ({len(graph)} graph nodes):")
    print(f"  hand-written NumPy  {t['numpy'] * 1e6:8.1f} us")
    print(f"  teachflow eager     {t['eager'] * 1e6:8.1f} us   {ratio(t['eager'], t['numpy']):>5}")
    print(f"  teachflow staged    {t['staged'] * 1e6:8.1f} us   {ratio(t['staged'], t['numpy']):>5}"
          "   (goal: <= 1.15x NumPy)")


def long_function(x):
    """1,000 elementwise ops: the Python loop unrolls into a 1,000-node graph."""
    for i in range(250):
        x = (x * 1.001 + 0.5).tanh() - float(i % 3)
    return x


def staging_cost_benchmark(repeat: int) -> None:
    x = tfl.ones(8, 8)
    best = {}
    for passes in (None, "default"):
        times = []
        for _ in range(repeat):
            staged = tfl.function(long_function, passes=passes, verify=False)
            start = time.perf_counter()
            concrete = staged.get_concrete_function(x)
            times.append(time.perf_counter() - start)
        np.testing.assert_allclose(concrete(x).numpy(), long_function(x).numpy(), rtol=1e-5)
        best[passes] = min(times)
    nodes = len(concrete.compilation.snapshots[0].graph)
    print(f"\nstaging a {nodes}-node function: trace + generate the executor "
          f"{best[None] * 1e3:.1f} ms (goal < 200 ms); with the default passes "
          f"{best['default'] * 1e3:.1f} ms ({len(concrete.graph)} node(s) left)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="timing runs (best is kept)")
    args = parser.parse_args()
    chain_benchmark(4, number=1000, repeat=args.repeat)
    chain_benchmark(64, number=300, repeat=args.repeat)
    mlp_benchmark(number=50, repeat=args.repeat)
    staging_cost_benchmark(repeat=args.repeat)


if __name__ == "__main__":
    main()
