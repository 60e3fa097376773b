"""The exercises' master notebooks, built from this file: ``python exercises/build.py``.

Each exercise is a *master* notebook: the answers in it, its cells marked as nbgrader marks them
(solution cells, locked given cells, test cells worth points, hidden tests between
``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``). ``teachflow assign`` turns a master
into the learners' copy; ``teachflow check`` runs its visible tests; grading runs them all.

Grading runs the tests in a trusted process and the learner's code in a sandboxed worker, so
the tests are written for that wall. A name the learner defines (and a given cell's name that
uses one) is a proxy in the tests: calling it runs it in the worker, and only plain data crosses
(tensors, arrays, numbers, strings, lists and dicts of them). So a test calls the learner's
functions with arrays and tensors and checks what comes back against values it computes itself;
a learner's gradient rule is plugged into an op the *test* declares; a learner's rule or pass is
run by a given helper beside it, which reports what the pass stepper shows as plain data (stage
names, the rules that fired, the ops left, the result on some inputs). Given cells that do not
use the learner's names run on both sides. The same notebooks pass ``teachflow check``, which
runs everything in one process.

Each notebook's source is a module of ``exercises/masters/``, ``NN_name.py`` for
``NN_name.ipynb`` (its ``cells()``; ``masters/cells.py`` makes and marks the cells). The
notebooks are committed without outputs: edit a module, then run this file. ``python
exercises/build.py --check`` says whether the committed notebooks are up to date.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat
from nbformat.v4 import new_notebook

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # (the masters import their helpers as `masters.cells`)
    sys.path.insert(0, str(HERE))

#: Each master notebook's name, and the function that makes its cells: one per module of
#: masters/ whose name starts with the exercise's number.
NOTEBOOKS: dict[str, Callable[[], list]] = {
    f"{path.stem}.ipynb": importlib.import_module(f"masters.{path.stem}").cells
    for path in sorted((HERE / "masters").glob("[0-9][0-9]_*.py"))}


def notebook(name: str) -> nbformat.NotebookNode:
    """The master notebook `name`, as this file builds it (cell ids fixed, so a rebuild of an
    unchanged exercise writes the same file)."""
    cells = NOTEBOOKS[name]()
    for index, cell in enumerate(cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        cell.id = grade_id or f"{cell.cell_type}-{index}"
    result = new_notebook(cells=cells)
    result.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}
    result.metadata["language_info"] = {"name": "python"}
    nbformat.validate(result)
    return result


def text(name: str) -> str:
    return nbformat.writes(notebook(name)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a committed notebook is out of date")
    args = parser.parse_args(argv)
    stale = []
    for name in NOTEBOOKS:
        path, wanted = HERE / name, text(name)
        if path.exists() and path.read_text(encoding="utf-8") == wanted:
            continue
        stale.append(name)
        if not args.check:
            path.write_text(wanted, encoding="utf-8")
    if args.check and stale:
        print(f"out of date (run python exercises/build.py): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
