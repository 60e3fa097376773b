"""The training-step benchmark (`bench/train_step.py`) runs briefly: its contenders agree on the
losses and parameters of three SGD steps (it checks that before timing), and it prints a row per
contender and the goal ratio. Its timings are not checked: a benchmark measures them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parent.parent / "bench" / "train_step.py"


def test_the_training_step_benchmark_agrees_and_prints_its_rows() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--number", "2", "--repeat", "1",
                          "--rounds", "1"], capture_output=True, text=True, check=True,
                         timeout=120).stdout
    for label in ("NumPy by hand", "teachflow eager", "teachflow staged"):
        row = next(line for line in out.splitlines() if line.strip().startswith(label))
        assert re.search(r"\d+\.\d us +\d+\.\d\dx NumPy$", row), row
    assert re.search(r"teachflow staged / NumPy by hand: \d+\.\d\dx", out)
