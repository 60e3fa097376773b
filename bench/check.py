"""How long a learner waits for ``teachflow check``: the five-exercise notebook, from a terminal.

A check runs the notebook in a worker process of the learner's own and the tests beside it, as
grading does, so its time is mostly two Python processes starting with NumPy and teachflow.
Measured side by side with what a check cannot do without (``python -c "import teachflow"``,
once for the checking process and once for its worker), in rounds that alternate the two.
Goal: within 3 s for the five exercises, and within 3x the two imports.

    python bench/check.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import grading_notebooks as notebooks  # noqa: E402  (the five-exercise master of the tests)


def seconds(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as folder:
        notebook = notebooks.five_exercises(Path(folder))
        check = [sys.executable, "-m", "teachflow", "check", str(notebook)]
        imports = [sys.executable, "-c", "import teachflow"]
        seconds(check)  # (a first run warms the file cache for both)
        checks, ratios = [], []
        for _ in range(rounds):
            took = seconds(check)
            baseline = 2 * seconds(imports)
            checks.append(took)
            ratios.append(took / baseline)
    median = statistics.median(checks)
    ratio = statistics.median(ratios)
    print(f"teachflow check, five exercises: median {median:.2f} s "
          f"(min {min(checks):.2f}, max {max(checks):.2f}) over {rounds} rounds")
    print(f"  = {ratio:.2f}x two imports of teachflow (paired, median); "
          f"goal: <= 3.0 s {'met' if median <= 3.0 else 'MISSED'}, "
          f"<= 3x {'met' if ratio <= 3.0 else 'MISSED'}")


if __name__ == "__main__":
    main()
