"""A class graded on Dask: 300 submissions with ``--scheduler local:2`` vs ``--jobs 2``.

``teachflow grade --scheduler`` sends each submission to a Dask worker as one task
(`teachflow.grading.cluster`); ``--jobs`` hands it to a process pool of this machine. Both
judge a submission the same way (a sandboxed worker started for it), so what Dask adds is its
cluster's start (a scheduler, the workers spawned and importing teachflow) and a round trip
per task. Measured on one class, graded both ways in rounds that alternate which goes first,
each command timed whole as an instructor waits for it (the best round of each kept: on a
shared machine, the others' load only ever adds), and every score checked against what its
answer earns. The class:
copies of the softmax exercise of the grading tests, most right, some wrong (1 of 3 points),
some stubs (0). Goal (issue 31): Dask within 1.2x the pool's time. Every socket is on
127.0.0.1.

    python bench/grade_scale.py [--count 300] [--workers 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import grading_notebooks as notebooks  # noqa: E402  (the softmax master of the tests)

from teachflow.grading import assign  # noqa: E402

RIGHT = "def my_softmax(x):\n    e = np.exp(x - x.max())\n    return e / e.sum()"
WRONG = "def my_softmax(x):\n    return np.exp(x)"  # the right shape, nothing else
#: kind -> (how often in 20 submissions, the answer (None: the stub), expected score of 3)
KINDS = {"right": (16, RIGHT, 3.0), "wrong": (2, WRONG, 1.0), "stub": (2, None, 0.0)}


def make_class(work: Path, count: int) -> dict[str, float]:
    """`count` submissions in work/class; each one's expected score."""
    assign(notebooks.master(work), work / "build")
    release = json.loads((work / "build" / "release" / "softmax.ipynb").read_text())
    cycle = [kind for kind, (often, _, _) in KINDS.items() for _ in range(often)]
    (work / "class").mkdir()
    expected = {}
    for number in range(count):
        _, answer, score = KINDS[cycle[number % len(cycle)]]
        notebook = json.loads(json.dumps(release))
        for cell in notebook["cells"]:
            if answer is not None and \
                    cell["metadata"].get("nbgrader", {}).get("grade_id") == "softmax":
                cell["source"] = answer
        name = f"learner{number:03d}"
        (work / "class" / f"{name}.ipynb").write_text(json.dumps(notebook))
        expected[name] = score
    return expected


def graded(work: Path, where: list[str], out: str) -> tuple[float, dict[str, float]]:
    """Seconds ``teachflow grade ... WHERE`` took, and the scores it wrote."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "teachflow", "grade", str(work / "class"),
                           "--bundle", str(work / "build" / "grading"), "--out",
                           str(work / out), "--timeout", "20", *where],
                          capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"teachflow grade {' '.join(where)} failed:\n{done.stderr[-3000:]}")
    with (work / out / "grades.csv").open() as file:
        return seconds, {row["submission"]: float(row["score"]) for row in csv.DictReader(file)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    ways = {"pool": ["--jobs", str(options.workers)],
            "dask": ["--scheduler", f"local:{options.workers}"]}
    times: dict[str, list[float]] = {way: [] for way in ways}
    wrong = []
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        expected = make_class(work, options.count)
        for round_ in range(options.rounds):
            for way in (list(ways) if round_ % 2 == 0 else list(reversed(ways))):
                seconds, scores = graded(work, ways[way], f"{way}{round_}")
                times[way].append(seconds)
                wrong += [(way, name, scores.get(name), score)
                          for name, score in expected.items() if scores.get(name) != score]
    n, pool, dask = options.count, min(times["pool"]), min(times["dask"])
    print(f"{n} submissions of one exercise, graded both ways, best of {options.rounds}:")
    print(f"  --jobs {options.workers}:              {pool:7.1f} s  ({pool / n:.3f} s each; "
          f"rounds: {', '.join(f'{t:.1f}' for t in times['pool'])})")
    print(f"  --scheduler local:{options.workers}:   {dask:7.1f} s  ({dask / n:.3f} s each; "
          f"rounds: {', '.join(f'{t:.1f}' for t in times['dask'])})")
    print(f"  Dask / pool: {dask / pool:.2f}x (goal: at most 1.2x)")
    if wrong:
        for way, name, got, score in wrong[:10]:
            print(f"  WRONG SCORE {name} ({way}): {got}, expected {score}")
        sys.exit(1)
    mix = ", ".join(f"{often}/20 {kind}" for kind, (often, _, _) in KINDS.items())
    print(f"  every score as expected, both ways ({mix})")


if __name__ == "__main__":
    main()
