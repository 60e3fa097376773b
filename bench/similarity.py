"""``teachflow similarity`` on a class: 300 submissions of the five-exercise notebook.

Every learner's five answers are code of their own, drawn at random (a dozen lines each, no
two alike: the most fingerprints an index can get), and a few learners copy another's answers
with every name changed and comments added. The run times the whole command, from a terminal,
as an instructor runs it (reading the notebooks, fingerprinting, ranking, writing the report)
and checks that the copies are the pairs ranked first. Goal (issue 32): 300 submissions
within 30 s.

    python bench/similarity.py [--count 300] [--copies 3]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import grading_notebooks as notebooks  # noqa: E402  (the five-exercise master of the tests)

from teachflow.grading import assign  # noqa: E402

GOAL = 30.0


def expression(rng: random.Random, names: list[str], depth: int = 0) -> str:
    """A random expression over `names`: operators, calls, methods and numbers."""
    choice = rng.random()
    if depth > 2 or choice < 0.3:
        return rng.choice(names) if rng.random() < 0.7 else str(rng.randint(0, 99))
    if choice < 0.6:
        op = rng.choice(["+", "-", "*", "/", "**", "@"])
        return f"({expression(rng, names, depth + 1)} {op} {expression(rng, names, depth + 1)})"
    if choice < 0.8:
        function = rng.choice(["tfl.exp", "tfl.maximum", "np.sqrt", "len", "abs", "min"])
        arguments = ", ".join(expression(rng, names, depth + 1) for _ in range(rng.randint(1, 2)))
        return f"{function}({arguments})"
    method = rng.choice(["sum", "mean", "reshape", "tanh", "numpy", "max"])
    return f"{rng.choice(names)}.{method}({expression(rng, names, depth + 1)})"


def answer(rng: random.Random, header: str) -> str:
    """A function of a dozen random lines: assignments, loops, branches, a return."""
    names = re.findall(r"def \w+\((.*)\)", header)[0].split(", ")
    lines = [header]
    for number in range(rng.randint(8, 14)):
        kind = rng.random()
        new = f"v{number}"
        if kind < 0.6:
            lines.append(f"    {new} = {expression(rng, names)}")
        elif kind < 0.8:
            lines += [f"    for {new} in range({rng.randint(1, 9)}):",
                      f"        {rng.choice(names)} = {expression(rng, [*names, new])}"]
        else:
            lines += [f"    if {expression(rng, names)} > {expression(rng, names)}:",
                      f"        {new} = {expression(rng, names)}",
                      "    else:", f"        {new} = {expression(rng, names)}"]
        names.append(new)
    lines.append(f"    return {expression(rng, names)}")
    return "\n".join(lines)


def disguised(source: str) -> str:
    """A copy: every local name changed, a comment on every other line."""
    renamed = re.sub(r"\bv(\d+)\b", lambda m: f"tmp_{int(m.group(1)) * 7}", source)
    return "\n".join(line + ("  # mine" if i % 2 and not line.rstrip().endswith(":") else "")
                     for i, line in enumerate(renamed.splitlines()))


def make_class(release: Path, folder: Path, count: int, copies: int,
               rng: random.Random) -> list[tuple[str, str]]:
    """`count` submissions in `folder`; the (original, copy) pairs planted."""
    notebook = json.loads(release.read_text())
    headers = {}  # grade_id -> the stub's lines down to its `def` (a decorator kept)
    for cell in notebook["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("solution"):
            lines = "".join(cell["source"]).splitlines()
            end = next(i for i, line in enumerate(lines) if line.startswith("def "))
            headers[cell["metadata"]["nbgrader"]["grade_id"]] = "\n".join(lines[:end + 1])
    answers = {}
    for number in range(count - copies):
        answers[f"learner{number:03}"] = {g: answer(rng, h) for g, h in headers.items()}
    planted = []
    for number, original in enumerate(rng.sample(sorted(answers), copies)):
        copy = f"copier{number}"
        answers[copy] = {g: disguised(source) for g, source in answers[original].items()}
        planted.append((original, copy))
    for name, sources in answers.items():
        for cell in notebook["cells"]:
            grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
            if grade_id in sources:
                cell["source"] = sources[grade_id]
        (folder / f"{name}.ipynb").write_text(json.dumps(notebook))
    return planted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--copies", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        done = assign(notebooks.five_exercises(folder), folder / "build", verify=False)
        (folder / "subs").mkdir()
        planted = make_class(done.release, folder / "subs", args.count, args.copies,
                             random.Random(0))
        start = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "teachflow", "similarity",
                              str(folder / "subs"), "--bundle", str(done.grading),
                              "--out", str(folder / "report.html"), "--top", "5"],
                             capture_output=True, text=True, timeout=600)
        took = time.perf_counter() - start
        if run.returncode != 0:
            raise SystemExit(f"teachflow similarity failed:\n{run.stdout}{run.stderr}")
        report = (folder / "report.html").stat().st_size
    top = re.findall(r"^\s+\d+%\s+(\S+) ~ (\S+)", run.stdout, re.M)[:len(planted)]
    found = sorted(tuple(sorted(pair)) for pair in top) == sorted(
        tuple(sorted(pair)) for pair in planted)
    print(run.stdout.rstrip())
    print(f"teachflow similarity, {args.count} submissions of five exercises: {took:.1f} s "
          f"from a terminal (the command, its imports included; report {report / 1e3:.0f} kB)")
    print(f"  the {len(planted)} planted copies ranked first: {'yes' if found else 'NO'}; "
          f"goal: <= {GOAL:.0f} s {'met' if took <= GOAL else 'MISSED'}")


if __name__ == "__main__":
    main()
