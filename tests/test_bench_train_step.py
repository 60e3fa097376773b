"""The training-step benchmark (`bench/train_step.py`) runs briefly: its contenders agree on the
losses and parameters of three SGD steps (it checks that before timing), and it prints a row per
contender and the goal ratio. Its timings are not checked: a benchmark measures them (what it
prints for any timing, zero and equal ones included: tests/test_bench_timing.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from test_bench_timing import RATIO

BENCH = Path(__file__).parent.parent / "bench" / "train_step.py"


def test_the_training_step_benchmark_agrees_and_prints_its_rows() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--number", "2", "--repeat", "1",
                          "--rounds", "1"], capture_output=True, text=True, check=True,
                         timeout=600).stdout
    for label in ("NumPy by hand", "teachflow eager", "teachflow staged"):
        row = next(line for line in out.splitlines() if line.strip().startswith(label))
        assert re.search(rf"(\d+\.\d|n/a) us +{RATIO} NumPy$", row), row
    assert re.search(rf"teachflow staged / NumPy by hand: {RATIO}", out)
