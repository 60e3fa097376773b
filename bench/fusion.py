"""Does fusion pay? An 8-op elementwise chain on 10M float32, side by side in one run.

- eager NumPy, one op at a time: every op reads its operands from memory and writes a fresh
  40 MB temporary (and each fresh temporary also costs page faults);
- teachflow compiled without the fuse pass: the same 8 kernels, run from generated code;
- teachflow compiled with the default pipeline: one fused kernel that works block by block, so
  the inputs are read once and the output written once;
- the reference for memory bandwidth: ``np.add(a, b, out=c)`` streams two arrays in and one out;
- the fused kernel again while the caller keeps every result: no result memory can be recycled,
  so each call pays the page faults of a fresh 40 MB array (what recycling saves: counted as
  the process's minor page faults per call, and timed by the median call, since the fastest
  call of either hides the faults that most calls pay);
- memory a compiled two-kernel function holds between calls: only its returned result (kept for
  reuse), never its intermediate.

Effective bandwidth = bytes the fused kernel must move (inputs read once + output written once)
divided by its time. On a GPU (if CuPy finds one), the same chain runs as one CUDA kernel and is
compared with a device-to-device copy.

Run: ``python bench/fusion.py [--n 10000000]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import numpy as np

import teachflow as tfl

from timing import best_wall_time


def chain_numpy(x, y):
    a = np.multiply(x, y)
    b = np.add(a, 1.0)
    c = np.multiply(b, 0.5)
    d = np.subtract(c, x)
    e = np.maximum(d, 0)
    f = np.multiply(e, y)
    g = np.add(f, 2.0)
    return np.sqrt(g)


def chain_teachflow(x, y):
    return (((x * y + 1.0) * 0.5 - x).relu() * y + 2.0).sqrt()


def cpu_benchmark(n: int, repeat: int) -> None:
    rng = np.random.default_rng(0)
    x_np, y_np = (rng.random(n, dtype=np.float32) for _ in range(2))
    x, y = tfl.tensor(x_np), tfl.tensor(y_np)
    fused = tfl.compile(chain_teachflow, x, y, verify=False)
    unfused = tfl.compile(chain_teachflow, x, y, verify=False,
                          passes=["simplify", "constant_fold", "cse", "dce"])
    expected = chain_numpy(x_np, y_np)
    for compiled in (fused, unfused):
        np.testing.assert_allclose(compiled(x, y).numpy(), expected, rtol=1e-6)
    kernels = sum(1 for n in fused.graph.nodes if n.op.name.startswith("fused"))

    out = np.empty_like(x_np)
    kept: list = []

    def fused_kept() -> None:  # the caller holds the last results: fresh memory every call
        kept.append(fused(x, y))
        del kept[:-2]

    runs = {"stream": lambda: np.add(x_np, y_np, out=out),
            "numpy": lambda: chain_numpy(x_np, y_np),
            "unfused": lambda: unfused(x, y),
            "fused": lambda: fused(x, y),
            "fused_kept": fused_kept}
    results = {name: float("inf") for name in runs}
    for _ in range(3):  # interleaved rounds: machine load hits all alike
        for name, run in runs.items():
            results[name] = min(results[name], best_wall_time(run, repeat))

    nbytes = x_np.nbytes
    stream_bw = 3 * nbytes / results["stream"]
    fused_bw = 3 * nbytes / results["fused"]  # x and y read once, the result written once
    print(f"8-op elementwise chain on {n:,} float32 ({nbytes / 1e6:.0f} MB per array), CPU:")
    print(f"  np.add(a, b, out=c) stream   {results['stream'] * 1e3:7.2f} ms   "
          f"{stream_bw / 1e9:6.2f} GB/s (the machine's reference)")
    print(f"  eager NumPy, op by op        {results['numpy'] * 1e3:7.2f} ms")
    print(f"  compiled, not fused          {results['unfused'] * 1e3:7.2f} ms")
    print(f"  compiled, fused ({kernels} kernel)    {results['fused'] * 1e3:7.2f} ms   "
          f"{fused_bw / 1e9:6.2f} GB/s")
    print(f"  fused, results kept by caller {results['fused_kept'] * 1e3:7.2f} ms   "
          "(no memory to recycle: fresh pages every call)")
    print(f"  fused speed-up over eager NumPy: {results['numpy'] / results['fused']:5.2f}x "
          "(goal >= 2.5x)")
    fresh_pages(fused, x, y)
    held_between_calls(n)
    print(f"  fused bandwidth / stream bandwidth: {fused_bw / stream_bw:6.1%} (goal >= 35%)")


def fresh_pages(fused, x, y, calls: int = 21) -> None:
    """What recycling a dropped result saves: page faults and the median call, side by side."""
    try:
        import resource
    except ImportError:  # (not on Windows)
        return

    def measure(keep: bool) -> tuple[float, float]:
        kept, times = [], []
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(calls):
            start = time.perf_counter()
            result = fused(x, y)
            times.append(time.perf_counter() - start)
            if keep:
                kept.append(result)
                del kept[:-2]
            del result
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        return faults / calls, statistics.median(times)

    (dropped_faults, dropped_t), (kept_faults, kept_t) = measure(False), measure(True)
    print(f"  recycling a dropped result: {dropped_faults:.0f} page faults a call instead of "
          f"{kept_faults:.0f}; median call {dropped_t * 1e3:.2f} ms vs {kept_t * 1e3:.2f} ms = "
          f"{kept_t / dropped_t:.2f}x")


def held_between_calls(n: int) -> None:
    """Memory a compiled function keeps between calls, after the caller dropped the result."""
    def two_kernels(x):
        h = (x * 2.0 + 1.0).tanh()  # used twice: a kernel of its own, an intermediate
        return (h - h.sum(axis=1, keepdims=True)).exp() * 3.0

    x = tfl.rand(n // 4, 4)
    compiled = tfl.compile(two_kernels, x, verify=False)
    tracemalloc.start()
    compiled(x)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"  two-kernel function, memory held between calls: {held / 1e6:.1f} MB = "
          f"{held / x.numpy().nbytes:.2f}x its result (its intermediate is not kept)")


def gpu_benchmark(n: int, repeat: int) -> None:
    import cupy

    x = tfl.rand(n, device="gpu")
    y = tfl.rand(n, device="gpu")
    fused = tfl.compile(chain_teachflow, x, y, verify=False)
    np.testing.assert_allclose(fused(x, y).numpy(), chain_numpy(x.numpy(), y.numpy()),
                               rtol=1e-5)
    a, out = x._data, cupy.empty_like(x._data)

    def timed(fn) -> float:
        fn()
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        cupy.cuda.Device().synchronize()
        return (time.perf_counter() - start) / repeat

    copy_t = timed(lambda: cupy.copyto(out, a))
    fused_t = timed(lambda: fused(x, y))
    copy_bw, fused_bw = 2 * a.nbytes / copy_t, 3 * a.nbytes / fused_t
    print(f"\nGPU ({cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}):")
    print(f"  copy {copy_t * 1e3:.3f} ms = {copy_bw / 1e9:.0f} GB/s; fused chain "
          f"{fused_t * 1e3:.3f} ms = {fused_bw / 1e9:.0f} GB/s: "
          f"{fused_bw / copy_bw:.0%} of copy bandwidth (goal >= 70%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    cpu_benchmark(args.n, args.repeat)
    if "gpu" in tfl.devices():
        gpu_benchmark(args.n, 20)
    else:
        print("\nGPU: not measured here (no usable CuPy/CUDA device).")


if __name__ == "__main__":
    main()
