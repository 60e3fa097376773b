"""Does fusion pay? Two chains, side by side in one run.

**An 8-op elementwise chain on 10M float32:**

- eager NumPy, one op at a time: every op reads its operands from memory and writes a fresh
  40 MB temporary (and each fresh temporary also costs page faults);
- teachflow compiled without the fuse pass: the same 8 kernels, run from generated code;
- teachflow compiled with the default pipeline: one fused kernel. On the CPU it is generated C
  where a C compiler is present (each input read once, the output written once, 8 floats at a
  time on every core), else the NumPy kernel that works block by block; both are timed alone
  too, so the fallback is measured on a machine that has a compiler;
- the reference for memory bandwidth: ``np.add(a, b, out=c)`` streams two arrays in and one out;
- the fused kernel again while the caller keeps every result: no result memory can be recycled,
  so each call pays the page faults of a fresh 40 MB array (what recycling saves: counted as
  the process's minor page faults per call, and timed by the median call, since the fastest
  call of either hides the faults that most calls pay);
- memory a compiled two-kernel function holds between calls: only its returned result (kept for
  reuse), never its intermediate.

Effective bandwidth = bytes the fused kernel must move (inputs read once + output written once)
divided by its time.

**The chain ``y = tanh(y * 1.5 + y) - y`` repeated 1,250 times** (5,000 ops on one tensor, each
value read three times: DAG fusion makes it one kernel) on 1M float32, against eager NumPy op by
op. It is bound by ``tanh``, so the C kernel must vectorise it to win; the NumPy kernel is timed
beside it, and the line says which one the compiled function ran.

**Small groups: C or NumPy?** A call into C costs microseconds of Python handing over the
arrays; a small group's few NumPy calls may cost less. For chains of 2, 4, 6 and 8 ops on 16 to
32,768 float32 elements, and for small reductions, the C kernel and the NumPy kernel side by
side, and which one the compiler picks (`c_runtime.small_group`): the pick should be the quicker
one, or near it at the crossing.

**An outer product by broadcasting** (grouping.py's rule 6): the per-example gradients of a
784-128 layer for 64 examples, ``x[:, :, None] * g[:, None, :]`` (25.7 MB of float32 written from
0.2 MB read). Compiled, the lone ``mul`` is a kernel of its own; compiled without the fuse pass
it is NumPy's broadcasting loop, which goes a row of 128 at a time; ``np.einsum`` beside them.
Rounds interleaved, each ratio the median of the rounds' paired ratios; medians of the calls'
times too (a busy machine's threads stall now and then: the medians show it).

On a GPU (if CuPy finds one), the 8-op chain runs as one CUDA kernel and is compared with a
device-to-device copy.

Run: ``python bench/fusion.py [--n 10000000]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import tracemalloc
from unittest import mock

import numpy as np

import teachflow as tfl
from teachflow.kernels.c_runtime import c_kernel, small_group
from teachflow.kernels.numpy_runtime import numpy_kernel

from timing import (
    best_wall_time,
    interleaved_best,
    interleaved_rounds,
    paired_ratio,
    ratio,
    ratio_text,
)


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


def the_kernel(compiled):
    """The one fused node of a compilation."""
    (node,) = [n for n in compiled.graph.nodes if hasattr(n.op, "group")]
    return node


def interleaved(runs: dict, repeat: int, rounds: int = 3) -> dict[str, float]:
    """Best seconds per call of each run; rounds interleaved, so machine load hits all alike."""
    results = {name: float("inf") for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            results[name] = min(results[name], best_wall_time(run, repeat))
    return results


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
    node = the_kernel(fused)
    group = node.op.group
    blocked = numpy_kernel(group)
    in_c, why = c_kernel(group)

    out = np.empty_like(x_np)
    kept: list = []

    def fused_kept() -> None:  # the caller holds the last results: fresh memory every call
        kept.append(fused(x, y))
        del kept[:-2]

    runs = {"stream": lambda: np.add(x_np, y_np, out=out),
            "numpy": lambda: chain_numpy(x_np, y_np),
            "unfused": lambda: unfused(x, y),
            "fused": lambda: fused(x, y),
            "numpy_kernel": lambda: blocked(x_np, y_np),
            "fused_kept": fused_kept}
    if in_c is not None:
        np.testing.assert_allclose(in_c(x_np, y_np), expected, rtol=1e-6)
        runs["c_kernel"] = lambda: in_c(x_np, y_np)
    results = interleaved(runs, repeat)

    nbytes = x_np.nbytes
    stream_bw = 3 * nbytes / results["stream"]

    def bandwidth(name: str) -> str:  # x and y read once, the result written once
        bw = 3 * nbytes / results[name]
        return f"{bw / 1e9:6.2f} GB/s = {bw / stream_bw:6.1%} of the stream"

    print(f"8-op elementwise chain on {n:,} float32 ({nbytes / 1e6:.0f} MB per array), CPU "
          f"({os.cpu_count()} cores):")
    print(f"  np.add(a, b, out=c) stream    {results['stream'] * 1e3:7.2f} ms   "
          f"{stream_bw / 1e9:6.2f} GB/s (the machine's reference)")
    print(f"  eager NumPy, op by op         {results['numpy'] * 1e3:7.2f} ms")
    print(f"  compiled, not fused           {results['unfused'] * 1e3:7.2f} ms")
    print(f"  compiled, fused (1 kernel)    {results['fused'] * 1e3:7.2f} ms   "
          f"{bandwidth('fused')}")
    print(f"    which ran: {node.op.ran}")
    if in_c is not None:
        print(f"  the C kernel alone            {results['c_kernel'] * 1e3:7.2f} ms   "
              f"{bandwidth('c_kernel')}   (goal >= 95%)")
    else:
        print(f"  the C kernel: not measured here ({why})")
    print(f"  the NumPy kernel alone        {results['numpy_kernel'] * 1e3:7.2f} ms   "
          f"{bandwidth('numpy_kernel')}   (the fallback; goal >= 40%)")
    print(f"  fused, results kept by caller {results['fused_kept'] * 1e3:7.2f} ms   "
          "(no memory to recycle: fresh pages every call)")
    print(f"  fused speed-up over eager NumPy: {ratio(results['numpy'], results['fused']):>5}")
    fresh_pages(fused, x, y)
    held_between_calls(n)


def tanh_chain(y):
    for _ in range(1250):
        y = (y * 1.5 + y).tanh() - y
    return y


def tanh_chain_numpy(y):
    for _ in range(1250):
        y = np.tanh(y * np.float32(1.5) + y) - y
    return y


def tanh_chain_benchmark(n: int) -> None:
    """The 5,000-op chain: one kernel, against eager NumPy."""
    y_np = np.random.default_rng(1).standard_normal(n, dtype=np.float32)
    y = tfl.tensor(y_np)
    start = time.perf_counter()
    compiled = tfl.compile(tanh_chain, y, verify=False)
    compile_s = time.perf_counter() - start
    node = the_kernel(compiled)
    group = node.op.group
    with tempfile.TemporaryDirectory() as cache, \
            mock.patch.dict(os.environ, TEACHFLOW_CACHE=cache):  # a first build, not a cached one
        start = time.perf_counter()
        in_c, why = c_kernel(group)
        build_s = time.perf_counter() - start
    compiled(y)  # (builds its own kernel, from the cache)
    blocked = numpy_kernel(group)
    expected = tanh_chain_numpy(y_np)
    np.testing.assert_allclose(compiled(y).numpy(), expected, rtol=1e-4, atol=1e-5)
    runs = {"eager": lambda: tanh_chain_numpy(y_np), "compiled": lambda: compiled(y),
            "numpy_kernel": lambda: blocked(y_np)}
    if in_c is not None:
        np.testing.assert_allclose(in_c(y_np), expected, rtol=1e-4, atol=1e-5)
        runs["c_kernel"] = lambda: in_c(y_np)
    results = interleaved(runs, repeat=2, rounds=2)
    print(f"\ny = tanh(y * 1.5 + y) - y, 1,250 times (5,000 ops) on {n:,} float32:")
    print(f"  {len(compiled.graph.nodes)} kernel(s) after fusion, "
          f"{len(group.nodes):,} ops in it; tfl.compile {compile_s:.2f} s (its kernels "
          f"built too); the C alone built in {build_s:.2f} s, then cached")
    print(f"  eager NumPy, op by op         {results['eager']:7.3f} s")
    print(f"  compiled                      {results['compiled']:7.3f} s   "
          f"{ratio(results['eager'], results['compiled']):>5} faster   (goal >= 1.25x)")
    print(f"    which ran: {node.op.ran}")
    if in_c is not None:
        print(f"  the C kernel alone            {results['c_kernel']:7.3f} s   "
              f"{ratio(results['eager'], results['c_kernel']):>5}")
    else:
        print(f"  the C kernel: not run ({why})")
    print(f"  the NumPy kernel alone        {results['numpy_kernel']:7.3f} s   "
          f"{ratio(results['eager'], results['numpy_kernel']):>5}")


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
          f"{ratio(kept_t, dropped_t)}")


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
    plan = compiled.graph.memory_plan
    arena = plan.arena_bytes if plan is not None else 0
    print(f"  two-kernel function, memory held between calls: {held / 1e6:.1f} MB = "
          f"{held / x.numpy().nbytes:.2f}x its result: the result kept for reuse and the memory "
          f"plan's arena ({arena / 1e6:.1f} MB, where its intermediate lives)")


def small_groups() -> None:
    """C against NumPy on small groups, and which one `small_group` picks."""
    def chain(ops):
        def f(x, y):
            for k in range(ops):
                x = x * y if k % 2 else x + y
            return x
        return f

    cases = [(f"{ops} ops", chain(ops), (n,)) for ops in (2, 4, 6, 8)
             for n in (16, 512, 2048, 8192, 32768)]
    cases += [("neg, mean", lambda x, y: (-x).mean(), (64, 10)),
              ("mul, row sums", lambda x, y: (x * y).sum(axis=-1, keepdims=True), (64, 10))]
    rng = np.random.default_rng(0)
    print("\nSmall groups, float32, best time per call (C needs a compiler):")
    print("  group             elements      C us   NumPy us   picked  quicker")
    for name, fn, shape in cases:
        x, y = (rng.random(shape, dtype=np.float32) for _ in range(2))
        (node,) = [n for n in tfl.compile(fn, tfl.tensor(x), tfl.tensor(y), verify=False)
                   .graph.nodes if hasattr(n.op, "group")]
        group = node.op.group
        in_c, _ = c_kernel(group)
        if in_c is None:
            print("  (no C kernel here)")
            return
        in_numpy, args = numpy_kernel(group), (x, y)[:len(group.inputs)]
        t = interleaved_best({"c": lambda k=in_c, a=args: k(*a),
                              "numpy": lambda k=in_numpy, a=args: k(*a)}, 1000, 3, 3)
        picked = "NumPy" if small_group(group) else "C"
        quicker = "C" if t["c"] < t["numpy"] else "NumPy"
        print(f"  {name:<16} {x.size:9,}  {t['c'] * 1e6:8.2f}  {t['numpy'] * 1e6:8.2f}"
              f"   {picked:<6}  {quicker} ({ratio(max(t.values()), min(t.values()))})")


def outer_product(x, g):
    return x.reshape(64, 784, 1) * g.reshape(64, 1, 128)


def outer_product_benchmark(rounds: int = 11) -> None:
    rng = np.random.default_rng(0)
    x_np, g_np = (rng.standard_normal((64, n), dtype=np.float32) for n in (784, 128))
    x, g = tfl.tensor(x_np), tfl.tensor(g_np)
    kernel = tfl.compile(outer_product, x, g, verify=False)
    broadcast = tfl.compile(outer_product, x, g, verify=False,
                            passes=["simplify", "constant_fold", "cse", "dce"])
    expected = np.einsum("bi,bj->bij", x_np, g_np)
    for compiled in (kernel, broadcast):
        np.testing.assert_array_equal(compiled(x, g).numpy(), expected)
    runs = {"kernel": lambda: kernel(x, g), "broadcast": lambda: broadcast(x, g),
            "einsum": lambda: np.einsum("bi,bj->bij", x_np, g_np)}
    times = interleaved_rounds(runs, number=1, repeat=3, rounds=rounds)
    print("\nOuter products by broadcasting, f32[64,784,1] * f32[64,1,128] (25.7 MB written):")
    for name, label in (("kernel", "compiled: a kernel of its own"),
                        ("broadcast", "compiled without fuse: NumPy"), ("einsum", "np.einsum")):
        print(f"  {label:<32} best {min(times[name]) * 1e3:6.2f} ms, median "
              f"{statistics.median(times[name]) * 1e3:6.2f} ms")
    print(f"    which ran: {the_kernel(kernel).op.ran}")
    print(f"  NumPy's broadcasting / the kernel: "
          f"{ratio_text(paired_ratio(times, 'broadcast', 'kernel'))}; einsum / the kernel: "
          f"{ratio_text(paired_ratio(times, 'einsum', 'kernel'))}")


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
    tanh_chain_benchmark(1_000_000)
    small_groups()
    outer_product_benchmark()
    if "gpu" in tfl.devices():
        gpu_benchmark(args.n, 20)
    else:
        print("\nGPU: not measured here (no usable CuPy/CUDA device).")


if __name__ == "__main__":
    main()
