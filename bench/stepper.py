"""How long until the pass stepper has its data? 500- and 5,000-node compilations.

For each: the compilation as data for the widget (`compilation_data`, with and without values on
the example inputs), its size as JSON, and the self-contained page (`to_html`). The browser side
(opening the page, one step's redraw) is measured with Chromium: see the closing note of issue 5.

Run: ``python bench/stepper.py``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import teachflow as tfl
from teachflow.viz.data import compilation_data
from teachflow.viz.html import to_html

from compile_time import program
from timing import best_wall_time


def main() -> None:
    folder = Path(tempfile.mkdtemp())
    for blocks in (40, 375):  # about 500 and 5,000 nodes
        x, w = tfl.randn(16, 16), tfl.randn(16, 16)
        compilation = tfl.compile(program(blocks), x, w, verify=False)
        inputs = compilation.example_inputs
        bare = best_wall_time(lambda c=compilation: compilation_data(c), repeat=3)
        valued = best_wall_time(lambda c=compilation, i=inputs: compilation_data(c, i), repeat=3)
        size = len(json.dumps(compilation_data(compilation, inputs), separators=(",", ":")))
        page = folder / f"stepper-{blocks}.html"
        html = best_wall_time(lambda c=compilation, p=page, i=inputs: to_html(c, p, i), repeat=3)
        nodes = len(compilation.snapshots[0].graph)
        print(f"{nodes:5d}-node compilation, {len(compilation.snapshots)} stages: data "
              f"{bare * 1e3:6.0f} ms without values, {valued * 1e3:6.0f} ms with; "
              f"{size / 1e6:5.1f} MB of JSON; page {html * 1e3:6.0f} ms ({page})")


if __name__ == "__main__":
    main()
