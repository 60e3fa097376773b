"""The memory-plan benchmark (`bench/memory_plan.py`) runs briefly on a small MLP: the planned
and plain steps agree (it checks that before timing), and it prints its three figures. Its
timings are not checked."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from test_bench_timing import RATIO

BENCH = Path(__file__).parent.parent / "bench" / "memory_plan.py"


def test_the_memory_plan_benchmark_agrees_and_prints_its_figures() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--layers", "2", "--width", "32",
                          "--batch", "8", "--number", "1", "--repeat", "1", "--rounds", "1"],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    assert re.search(r"\(a\) new bytes during a warm call: planned [\d,]+, plain [\d,]+", out)
    assert re.search(rf"\(b\) arena [\d,]+ bytes; .*: {RATIO} \(goal", out), out
    assert re.search(rf"\(c\) planned / plain: {RATIO}", out), out
