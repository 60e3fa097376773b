"""Data parallelism on this machine: DDP on 2 processes against 1, on the digits MLP.

The step: scikit-learn's digits (64 features), an MLP 64 -> 128 -> 10 with ReLU, cross-entropy,
SGD (lr 0.1), a batch of 64 per step: the whole batch in one process, 32 per rank in two, the
gradients averaged by `tfl.nn.parallel.DistributedDataParallel` (gloo over the loopback).

Printed:
- the largest difference between the weights of the two runs after each step (they must be
  equal up to float32 rounding: the mean of the two halves' gradients is the whole batch's);
- the time per step at 1 and 2 ranks, eager and staged (``tfl.function``);
- the all-reduce's share of an eager step at 2 ranks (the time DDP spends starting and waiting
  for its buckets: what the overlap did not hide);
- the time per MB all-reduced between the 2 processes (a 4 MB float32 array, 20 times).

On a machine of 2 cores, 2 ranks share them, so a step is not expected to be faster: the point
is what the communication costs. Run: ``python bench/ddp.py``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import teachflow as tfl

F = tfl.nn.functional


def run(steps: int, batch: int) -> dict:
    """One rank's part: every step's weights, the times, and the all-reduce's cost."""
    r, n = tfl.distributed.rank(), tfl.distributed.world_size()
    x, y, _, _ = tfl.data.load_digits()
    x, y = x.numpy(), y.numpy()
    share = slice(r * batch // n, (r + 1) * batch // n)
    out: dict = {}
    for staged in (False, True):
        tfl.manual_seed(0)
        model = tfl.nn.Sequential(tfl.nn.Linear(64, 128), tfl.nn.ReLU(), tfl.nn.Linear(128, 10))
        ddp = tfl.nn.parallel.DistributedDataParallel(model)
        opt = tfl.optim.SGD(ddp.parameters(), lr=0.1)

        def step(xb, yb, ddp=ddp, opt=opt):
            opt.zero_grad()
            loss = F.cross_entropy(ddp(xb), yb)
            loss.backward()
            opt.step()
            return loss

        step = tfl.function(step) if staged else step
        weights, times = [], []
        for k in range(steps):
            rows = slice(k * batch, (k + 1) * batch)
            xb, yb = tfl.tensor(x[rows][share]), tfl.tensor(y[rows][share])
            start = time.perf_counter()
            step(xb, yb)
            times.append(time.perf_counter() - start)
            weights.append([p.numpy().copy() for p in model.parameters()])
        kept = times[3:]  # (the first steps trace and warm up)
        out["staged" if staged else "eager"] = {
            "weights": weights, "step": float(np.median(kept)),
            "share": ddp.communication_seconds / sum(times) if not staged else None}
    big = np.ones(1 << 20, np.float32)  # 4 MB
    tfl.distributed.all_reduce(tfl.as_tensor(big))  # (the first one connects)
    start = time.perf_counter()
    for _ in range(20):
        tfl.distributed.all_reduce(tfl.as_tensor(big))
    out["s_per_mb"] = (time.perf_counter() - start) / (20 * big.nbytes / 2**20)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    one, = tfl.distributed.launch(run, 1, args.steps, args.batch, timeout=600)
    two, _ = tfl.distributed.launch(run, 2, args.steps, args.batch, timeout=600)
    for mode in ("eager", "staged"):
        diff = max(float(np.abs(a - b).max()) for w1, w2 in zip(one[mode]["weights"],
                                                                two[mode]["weights"],
                                                                strict=True)
                   for a, b in zip(w1, w2, strict=True))
        print(f"{mode:6}: weights equal step for step over {args.steps} steps: max difference "
              f"{diff:.2e}")
        print(f"{mode:6}: time per step, 1 rank {one[mode]['step'] * 1e3:.2f} ms, 2 ranks "
              f"{two[mode]['step'] * 1e3:.2f} ms")
    print(f"eager : the all-reduce's share of a step at 2 ranks: {two['eager']['share']:.0%}")
    print(f"all-reduce between 2 processes: {two['s_per_mb'] * 1e3:.2f} ms per MB "
          f"({1 / two['s_per_mb']:.0f} MB/s)")


if __name__ == "__main__":
    main()
