"""The devices benchmark (`bench/devices.py`) runs, on small matrices, and prints each of its
rows, the speed-up and the transfer's cost as ratios. Its timings are not checked: a benchmark
measures them, and on a busy machine they can come out as anything."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from test_bench_timing import RATIO

BENCH = Path(__file__).parent.parent / "bench" / "devices.py"


def test_the_devices_benchmark_prints_its_rows() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--size", "32", "--rounds", "1",
                          "--megabytes", "1"], capture_output=True, text=True, check=True,
                         timeout=600).stdout
    assert "BLAS: one thread per device" in out and "devices: cpu, cpu:1" in out
    for row in ("both on cpu", "on cpu and cpu:1"):
        assert re.search(rf"{row} +[\d.]+ ms per call, [\d.]+ cores used", out), out
    assert re.search(rf"speed-up, two devices +{RATIO} +\(paired median; goal >= 1.6x\)", out)
    assert re.search(r"t.to\('cpu:1'\) +[\d.]+ us per MB", out)
    assert re.search(rf"to\(\) over copy +{RATIO}$", out, re.M)
