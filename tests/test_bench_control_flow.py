"""The control-flow benchmark (`bench/control_flow.py`) runs, on a short loop, and prints each of
its rows side by side with a ratio. Its timings are not checked: a benchmark measures them, and
on a busy machine any of them can come out as anything (a derived time of zero prints its ratio
as ``n/a``: tests/test_bench_timing.py tries every kind)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from test_bench_timing import RATIO

BENCH = Path(__file__).parent.parent / "bench" / "control_flow.py"
ROWS = ("trace", "passes", "codegen", "compile (trace+passes+codegen)",
        "first call of tfl.function", "graph nodes, traced", "graph nodes, compiled",
        "run time per call (median)")


def test_the_control_flow_benchmark_prints_its_rows() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--steps", "20", "--repeat", "1"],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    lines = {row: next(line for line in out.splitlines() if line.strip().startswith(row))
             for row in ROWS}
    for row, line in lines.items():
        assert re.search(rf"   +{RATIO}$", line), (row, line)  # fori_loop, unrolled, the ratio
    # The loop is one node and its body's two ops, whatever the trip count; unrolled, two
    # nodes per step.
    counts = re.findall(r"[\d,]+", lines["graph nodes, traced"].split("traced")[1])
    assert counts[:2] == ["3", "40"]
