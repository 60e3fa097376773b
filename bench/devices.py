"""Two devices or one? Two independent heavy branches on ``cpu`` and ``cpu:1``, against both on
``cpu``; and what a transfer between devices costs.

The program: two independent branches, each a chain of matrix products of an n x n float32
matrix (``((x @ x) @ x) ...``), joined by an add. Compiled twice, side by side in one run:

- one device: every node on ``cpu``: one generated function runs the branches one after the
  other;
- two devices: the first branch inside ``with tfl.device("cpu:1"):``: the passes ``place`` and
  ``partition`` cut the graph into two pieces joined by ``copy`` nodes, and each call runs the
  pieces at the same time, ``cpu``'s in the caller's thread and ``cpu:1``'s on its worker
  (NumPy lets go of Python's lock inside a matrix product).

A fair comparison gives each device one core: the BLAS is set to one thread (with threadpoolctl
where it is installed, else by environment variables set before NumPy is imported), so that
the one-device run cannot use the second core inside its matrix products. The timings are paired
and rotated as ``bench/timing.py`` does (each round times both, in turn first), and the speed-up
printed is the median of the rounds' ratios; on a machine with two free cores the goal is 1.6x
or more. Other work on the machine takes cores away from the pieces and lowers it: the cores
each program used (its CPU time over its wall time: about 1 for one device, 2 for two at once)
say how many it was given, and the same two branches in plain NumPy, one thread against two
(one a worker, as a device's), say what two threads can gain on the machine at that moment: the
ceiling for the two devices.

The transfer: ``t.to("cpu:1")`` of a float32 tensor (a copy: the logical devices share the
memory, but a moved tensor is a tensor of its own), per megabyte, against NumPy's own copy of
the same array.

Run: ``python bench/devices.py`` (``--size 64 --rounds 1`` for a quick look).
"""

from __future__ import annotations

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # (before NumPy)
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import time  # noqa: E402
import timeit  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from contextlib import nullcontext  # noqa: E402

import numpy as np  # noqa: E402

import teachflow as tfl  # noqa: E402

from timing import interleaved_rounds, paired_ratio, ratio_text  # noqa: E402

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # the environment variables above hold
    threadpool_limits = None


def branches(products: int, pinned: bool):
    """The program: two chains of `products` matrix products, the first on cpu:1 when
    `pinned`."""

    def chain(x):
        y = x
        for _ in range(products):
            y = (y @ x) * 0.5
        return y

    def program(x, y):
        with tfl.device("cpu:1") if pinned else nullcontext():
            a = chain(x)
        return a.to("cpu") + chain(y)

    return program


def speedup(size: int, products: int, rounds: int) -> tuple[dict, dict]:
    """Per program: seconds per call (the best) and cores used (the process's CPU time over the
    wall time of a run of calls); and the paired speed-ups of two devices over one, and of the
    same two branches on two threads of plain NumPy over one."""
    rng = np.random.default_rng(0)
    x, y = (tfl.tensor(rng.standard_normal((size, size)).astype(np.float32) / size ** 0.5)
            for _ in range(2))
    one = tfl.function(branches(products, pinned=False))
    two = tfl.function(branches(products, pinned=True))
    np.testing.assert_allclose(one(x, y).numpy(), two(x, y).numpy(), rtol=1e-4, atol=1e-5)
    number = max(1, int(0.2 / max(timeit.timeit(lambda: one(x, y), number=1), 1e-6)))
    a, b = x.numpy(), y.numpy()
    calls = {"one": lambda: one(x, y), "two": lambda: two(x, y),
             "numpy one": lambda: numpy_chain(a, products) + numpy_chain(b, products),
             "numpy two": lambda: numpy_side_by_side(a, b, products)}
    times = interleaved_rounds(calls, number=number, repeat=3, rounds=rounds)
    figures = {name: (min(times[name]), cores_used(call, number)) for name, call in calls.items()}
    return figures, {"teachflow": paired_ratio(times, "one", "two"),
                     "numpy": paired_ratio(times, "numpy one", "numpy two")}


def numpy_chain(x: np.ndarray, products: int) -> np.ndarray:
    y = x
    for _ in range(products):
        y = (y @ x) * 0.5
    return y


_NUMPY_WORKER = ThreadPoolExecutor(1)


def numpy_side_by_side(a: np.ndarray, b: np.ndarray, products: int) -> np.ndarray:
    """The two chains in plain NumPy, one on a thread of its own: how much two threads can
    gain on this machine now (the ceiling for the two devices)."""
    other = _NUMPY_WORKER.submit(numpy_chain, a, products)
    mine = numpy_chain(b, products)
    return other.result() + mine


def cores_used(call, number: int) -> float:
    """The process's CPU time over the wall time of `number` calls: about 1 for one thread
    computing, 2 for two at once (less where other work has the cores)."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(number):
        call()
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


def transfer(megabytes: int, rounds: int) -> tuple[float, float]:
    """Microseconds per megabyte of ``t.to("cpu:1")``, and of NumPy's copy of the array."""
    array = np.ones(megabytes * 2**20 // 4, dtype=np.float32)
    t = tfl.tensor(array)
    times = interleaved_rounds({"to": lambda: t.to("cpu:1"), "numpy": lambda: array.copy()},
                               number=5, repeat=3, rounds=rounds)
    return (min(times["to"]) / megabytes * 1e6, min(times["numpy"]) / megabytes * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=768, help="matrix size n (default 768)")
    parser.add_argument("--products", type=int, default=3, help="products per branch (3)")
    parser.add_argument("--rounds", type=int, default=7, help="paired timing rounds (7)")
    parser.add_argument("--megabytes", type=int, default=16, help="tensor moved (16 MB)")
    args = parser.parse_args()
    tfl.set_logical_devices("cpu", 2)
    how = "threadpoolctl" if threadpool_limits is not None else "environment variables"
    print(f"BLAS: one thread per device ({how}); devices: {', '.join(tfl.devices())}; "
          f"{os.cpu_count()} cores")
    with threadpool_limits(1, "blas") if threadpool_limits is not None else nullcontext():
        figures, gains = speedup(args.size, args.products, args.rounds)
        to, copy = transfer(args.megabytes, args.rounds)
    print(f"two branches of {args.products} products of f32[{args.size},{args.size}]:")
    for name, words in (("one", "both on cpu"), ("two", "on cpu and cpu:1"),
                        ("numpy one", "NumPy, one thread"), ("numpy two", "NumPy, two threads")):
        seconds, cores = figures[name]
        print(f"  {words:<22}  {seconds * 1e3:9.2f} ms per call, {cores:.2f} cores used")
    print(f"  speed-up, two devices   {ratio_text(gains['teachflow'])}  (paired median; goal "
          ">= 1.6x)")
    print(f"  NumPy's, two threads    {ratio_text(gains['numpy'])}  (what this machine gives "
          "two threads now)")
    print(f"transfer of {args.megabytes} MB:")
    print(f"  t.to('cpu:1')           {to:9.1f} us per MB")
    print(f"  numpy copy              {copy:9.1f} us per MB")
    print(f"  to() over copy          {ratio_text(to / copy)}")


if __name__ == "__main__":
    main()
