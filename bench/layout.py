"""How fast is the layout? 2,000- and 5,000-node compilations laid out, every stage.

The layout is part of every `Compilation.to_html` and `show()` (see `stepper.py` for the whole):
the trace is laid out once, and each later stage keeps the places of the nodes that survive.

Run: ``python bench/layout.py``.
"""

from __future__ import annotations

import teachflow as tfl
from teachflow.viz.layout import layout, layout_stages

from compile_time import program
from timing import best_wall_time


def main() -> None:
    for blocks in (150, 375):
        compilation = tfl.compile(program(blocks), tfl.randn(8, 8), tfl.randn(8, 8), verify=False)
        trace = compilation.snapshots[0].nx
        one = best_wall_time(lambda g=trace: layout(g), repeat=5)
        every = best_wall_time(lambda c=compilation: layout_stages(c.snapshots), repeat=3)
        goal = " (goal for 2,000 nodes: < 500 ms)" if len(trace) < 3000 else ""
        print(f"{len(trace):5d}-node graph: layout {one * 1e3:6.1f} ms{goal}; all "
              f"{len(compilation.snapshots)} stages {every * 1e3:6.1f} ms")


if __name__ == "__main__":
    main()
