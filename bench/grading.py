"""A class graded: 300 submissions of a five-exercise notebook with ``teachflow grade --jobs 2``.

The class is made from the five-exercise master the grading tests use: most learners answer
everything right, some leave a stub or answer one exercise wrong, and a few attack the grader
(an endless loop, ``os._exit``, an object whose ``__eq__`` always says True, a huge
allocation, a fork bomb). Each kind's expected score is known, so the run checks every score
as well as timing the whole class. Goal (issue 12): 300 submissions in under 10 minutes on
this machine with two jobs. (``bench/check.py`` times ``teachflow check``.)

    python bench/grading.py [--count 300] [--jobs 2]
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import grading_notebooks as notebooks  # noqa: E402  (the five-exercise master of the tests)

from teachflow.grading import assign  # noqa: E402

ANSWERS = {grade_id: notebooks.code(answer)  # the master's answers (markers are comments)
           for grade_id, (answer, _) in notebooks.EXERCISES.items()}
WRONG_RELU = "def my_relu(x):\n    return x"
#: kind -> (how often in 20 submissions, {grade_id: source}, expected score of 10)
KINDS = {
    "right": (12, {}, 10.0),
    "stub": (2, None, 0.0),
    "wrong relu": (2, {"relu": WRONG_RELU}, 9.0),  # its shape test still passes
    "endless loop": (1, {"mse": "def mse(a, b):\n    while True:\n        pass"}, 8.0),
    "os._exit": (1, {"relu": "import os\nos._exit(0)"}, 8.0),
    "always equal": (1, {"relu": "class Yes:\n    def __eq__(self, other):\n        return True"
                                 "\n    shape = (2, 3)\n\ndef my_relu(x):\n    return Yes()"},
                     8.0),
    "fork bomb": (1, {"staged": "import os\nwhile True:\n    os.fork()"}, 8.0),
}


def _answered(release: Path, out: Path, answers: dict[str, str] | None) -> None:
    notebook = nbformat.read(release, as_version=4)
    if answers is not None:
        for cell in notebook.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in ANSWERS:
                cell.source = answers.get(grade_id, ANSWERS[grade_id])
    nbformat.write(notebook, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=2)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        assign(notebooks.five_exercises(work), work / "build")
        release = work / "build" / "release" / "five.ipynb"
        cycle = [kind for kind, (often, _, _) in KINDS.items() for _ in range(often)]
        expected = {}
        (work / "class").mkdir()
        for number in range(options.count):
            kind = cycle[number % len(cycle)]
            name = f"learner{number:03d}"
            _answered(release, work / "class" / f"{name}.ipynb", KINDS[kind][1])
            expected[name] = (kind, KINDS[kind][2])
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "teachflow", "grade", str(work / "class"),
                               "--bundle", str(work / "build" / "grading"), "--out",
                               str(work / "results"), "--jobs", str(options.jobs),
                               "--timeout", "10"], capture_output=True, text=True)
        seconds = time.perf_counter() - start
        print(done.stderr.splitlines()[0] if done.stderr else "", file=sys.stderr)
        if done.returncode:
            sys.exit(f"teachflow grade failed:\n{done.stderr}")
        with (work / "results" / "grades.csv").open() as file:
            scores = {row["submission"]: float(row["score"]) for row in csv.DictReader(file)}
    wrong = {name: (kind, want, scores.get(name)) for name, (kind, want) in expected.items()
             if scores.get(name) != want}
    print(f"{options.count} submissions, --jobs {options.jobs}: {seconds:.1f} s in all, "
          f"{seconds / options.count:.2f} s per submission "
          f"(goal: 300 in under 600 s; {seconds / 600 * 300 / options.count:.2f} of it)")
    for kind, (_, _, want) in KINDS.items():
        count = sum(1 for k, _ in expected.values() if k == kind)
        print(f"  {kind:<13} {count:4d} submissions, expected score {want:g}/10")
    if wrong:
        for name, (kind, want, got) in sorted(wrong.items())[:10]:
            print(f"  WRONG SCORE {name} ({kind}): {got}, expected {want}")
        sys.exit(1)
    print("  every score as expected")


if __name__ == "__main__":
    main()
