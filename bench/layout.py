"""How fast is the layout? A 2,000-node compilation laid out, every stage.

Run: ``python bench/layout.py``.
"""

from __future__ import annotations

import teachflow as tfl
from teachflow.viz.layout import layout, layout_stages

from compile_time import program
from timing import best_wall_time


def main() -> None:
    for blocks in (37, 150):
        compilation = tfl.compile(program(blocks), tfl.randn(8, 8), tfl.randn(8, 8), verify=False)
        trace = compilation.snapshots[0].nx
        one = best_wall_time(lambda g=trace: layout(g), repeat=5)
        every = best_wall_time(lambda c=compilation: layout_stages(c.snapshots), repeat=3)
        print(f"{len(trace):5d}-node graph: layout {one * 1e3:6.1f} ms (goal for 2,000 nodes: "
              f"< 500 ms); all {len(compilation.snapshots)} stages {every * 1e3:6.1f} ms")


if __name__ == "__main__":
    main()
