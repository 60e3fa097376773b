"""How light and how fast is the pass stepper's data? Two 5,000-node compilations, side by side.

- the chain of issue 13: 1,250 times ``y = (y * 1.5 + y).tanh() - y``, 5,000 nodes that fuse
  into one kernel (whose NumPy, C and CUDA sources hold thousands of lines each);
- `compile_time.program(375)`: 5,061 nodes that every pass changes (simplify, constant folding,
  CSE, dozens of kernels).

For each: `Compilation.to_html` (the stepper's data, with the values on the example inputs, and
the page), its first call on a fresh compilation and the best of three, the page's size and its
data's (the JSON). The first call also pays for work that is not the stepper's, made on first
use and kept: the compiler's figures per stage (`Snapshot.stats`) and the kernels' generated
sources: the figures say how much. Goals: ``to_html`` within 1.0 s, its first call included; a
page within 4 MB.

The browser's side (opening a 10,000-node page in Chromium) is `stepper_browser.py`.

Run: ``python bench/stepper.py``.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import teachflow as tfl
from teachflow.viz.entries import SOURCES
from teachflow.viz.html import to_html
from teachflow.viz.stepper_data import compilation_data

from compile_time import program
from timing import best_wall_time

TIME_GOAL_S, SIZE_GOAL_MB = 1.0, 4.0


def chain(y):
    for _ in range(1250):
        y = (y * 1.5 + y).tanh() - y
    return y


def compilations() -> dict:
    """Fresh compilations of the two programs (nothing computed on first use yet)."""
    return {"chain (issue 13)": tfl.compile(chain, tfl.randn(16, 16), verify=False),
            "program(375)": tfl.compile(program(375), tfl.randn(16, 16), tfl.randn(16, 16),
                                        verify=False)}


def elsewhere(compilation) -> float:
    """Seconds that the work made on first use outside the stepper takes: the figures per
    stage, and the kernels' sources."""
    start = time.perf_counter()
    for snap in compilation.snapshots:
        snap.stats  # noqa: B018 (computed on first use, then kept)
    for node in compilation.graph.nodes:
        for name in SOURCES.values():
            try:
                getattr(node.op, name, None)
            except Exception:  # (a generator not there: nothing to time)
                continue
    return time.perf_counter() - start


def main() -> None:
    folder = Path(tempfile.mkdtemp())
    fresh, again = compilations(), compilations()
    print(f"to_html of a 5,000-node compilation (goals: <= {TIME_GOAL_S:.1f} s, page <= "
          f"{SIZE_GOAL_MB:.0f} MB)")
    for (name, compilation), other in zip(fresh.items(), again.values(), strict=True):
        page = folder / "stepper.html"
        start = time.perf_counter()
        to_html(compilation, page, compilation.example_inputs)
        first = time.perf_counter() - start
        best = best_wall_time(lambda c=compilation, p=page: to_html(c, p, c.example_inputs), 3)
        outside = elsewhere(other)  # (on the twin, as fresh as this one was)
        data = compilation_data(compilation, compilation.example_inputs)
        size = page.stat().st_size / 1e6
        json_mb = len(json.dumps(data, separators=(",", ":"))) / 1e6
        nodes = len(compilation.snapshots[0].graph)
        print(f"  {name:17s} {nodes:5,d} nodes, {len(data['nodes']):5,d} entries: "
              f"{first:5.2f} s first ({outside:4.2f} s of it not the stepper's), {best:5.2f} s "
              f"best: {'met' if max(first, best) <= TIME_GOAL_S else 'MISSED'}; page "
              f"{size:4.2f} MB ({json_mb:4.2f} MB of JSON): "
              f"{'met' if size <= SIZE_GOAL_MB else 'MISSED'}")


if __name__ == "__main__":
    main()
