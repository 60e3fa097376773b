"""The executor following a memory plan, against the same graph run without one, in one run.

A 12-layer MLP's training step (width 512, batch 128, ReLU, mean squared output, plain SGD on
weights and biases), staged with `tfl.function`: forward, backward and the updates in one graph.
The planned step writes every planned intermediate into its slot of an arena made once
(``out=``); the plain one allocates a new array for each.

- (a) What a warm call allocates (tracemalloc's peak of new bytes during one call; NumPy reports
  its arrays' memory to it), planned and plain, beside the bytes the call returns.
- (b) The arena's bytes beside the liveness peak of the planned values in the schedule (the
  least any slot assignment of them can use; goal: arena <= 1.1x that peak), and beside the
  whole schedule's peak (`teachflow.memory.peak_bytes`: arguments, state and outputs too).
- (c) Time per step, planned and plain, rounds interleaved; the goal ratio is paired (the median
  over rounds of planned / plain in the same round). Goal: <= 1.0x.

The plan comes from the pass `plan_memory` (last in the default pipeline); the plain step runs the
same pipeline without it. The BLAS runs on one thread (threadpoolctl, where installed), so that a
machine shared with other work disturbs both steps alike; `--rounds` many rounds give the median
of the paired ratios and their spread (the lowest and highest round).
Run: ``python bench/memory_plan.py``.
"""

from __future__ import annotations

import argparse
import tracemalloc
from contextlib import nullcontext

import numpy as np

import teachflow as tfl
from teachflow.memory import live_ranges, peak_bytes, plannable_values
from teachflow.passes import DEFAULT_PIPELINE

from timing import best, interleaved_rounds, measured, microseconds, paired_ratio, ratio_text

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # (then the BLAS runs on as many threads as it likes)
    threadpool_limits = None

LR = 1e-3


def pipelines() -> tuple[list, list]:
    """The passes of the planned step (the default pipeline, whose last is `plan_memory`) and of
    the plain one (the same without it)."""
    return list(DEFAULT_PIPELINE), [p for p in DEFAULT_PIPELINE if p != "plan_memory"]


def training_step(layers: int, width: int, batch: int):
    """A training step of its own parameters (the same for every step made), and its input."""
    rng = np.random.default_rng(0)
    params = []
    for _ in range(layers):
        params.append(tfl.tensor((rng.standard_normal((width, width)) / np.sqrt(width))
                                 .astype(np.float32), requires_grad=True))
        params.append(tfl.tensor(np.zeros(width, np.float32), requires_grad=True))
    x = tfl.tensor(rng.standard_normal((batch, width)).astype(np.float32))

    def loss(params, x):
        for w, b in zip(params[::2], params[1::2], strict=True):
            x = tfl.relu(x @ w + b)
        return (x * x).mean()

    def step(x):
        grads = tfl.grad(loss)(params, x)
        with tfl.no_grad():
            for p, g in zip(params, grads, strict=True):
                p -= LR * g
        return loss(params, x)

    return step, x


def untaped(staged):
    """`staged`, called where no tape records (else it runs op by op, to be differentiated)."""
    def call(x):
        with tfl.no_grad():
            return staged(x)

    return call


def allocated(fn) -> int:
    """Tracemalloc's peak of new bytes during one call of `fn`."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def planned_peak(graph) -> int:
    """The most bytes the schedule's planned values hold at once."""
    allowed = plannable_values(graph)
    ranges = [r for r in live_ranges(graph) if r.value in allowed]
    steps = max((r.last_use for r in ranges), default=-1) + 1
    return max((sum(r.size for r in ranges if r.live_at(s)) for s in range(steps)), default=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--number", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with_plan, without = pipelines()
    shape = (args.layers, args.width, args.batch)
    step, x = training_step(*shape)
    planned = tfl.function(step, passes=with_plan)
    plain = tfl.function(training_step(*shape)[0], passes=without)
    planned, plain = untaped(planned), untaped(plain)
    for _ in range(3):  # the same steps: the same losses (and warm: traced, fast path built)
        a, b = planned(x).numpy(), plain(x).numpy()
        np.testing.assert_allclose(a, b, rtol=1e-4)
    graph = tfl.compile(training_step(*shape)[0], x, passes=with_plan).graph
    plan = graph.memory_plan
    print(f"{args.layers}-layer MLP training step, width {args.width}, batch {args.batch}; "
          f"plan from the pass plan_memory: {len(plan.buffers)} values in "
          f"{len(plan.slot_sizes)} slots")
    out_bytes = np.asarray(planned(x).numpy()).nbytes
    print(f"(a) new bytes during a warm call: planned {allocated(lambda: planned(x)):,}, "
          f"plain {allocated(lambda: plain(x)):,} (it returns {out_bytes:,} bytes and writes "
          "the parameters back)")
    peak, whole = planned_peak(graph), peak_bytes(graph)
    print(f"(b) arena {plan.arena_bytes:,} bytes; liveness peak of the planned values "
          f"{peak:,} bytes: {ratio_text(plan.arena_bytes / peak)} (goal <= 1.10x); the whole "
          f"schedule's peak {whole:,} bytes")
    one_thread = threadpool_limits(1, "blas") if threadpool_limits is not None else nullcontext()
    with one_thread:
        times = interleaved_rounds({"planned": lambda: planned(x), "plain": lambda: plain(x)},
                                   args.number, args.repeat, args.rounds)
    for name, t in times.items():
        print(f"    {name:<8}{microseconds(best(t))} per step (best of {args.rounds} rounds)")
    ratios = [a / b for a, b in zip(times["planned"], times["plain"], strict=True)
              if measured(a) and measured(b)]
    blas = "one BLAS thread" if threadpool_limits is not None else "BLAS threads as set"
    print(f"(c) planned / plain: {ratio_text(paired_ratio(times, 'planned', 'plain'))} "
          f"(paired, median over {len(ratios)} rounds, {blas}; rounds from "
          f"{ratio_text(min(ratios, default=float('nan')))} to "
          f"{ratio_text(max(ratios, default=float('nan')))}; goal <= 1.00x)")


if __name__ == "__main__":
    main()
