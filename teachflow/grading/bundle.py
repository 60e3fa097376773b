"""The grading bundle: everything grading needs from the master, in one JSON file.

``teachflow assign`` writes it to ``DIR/grading/``, next to ``DIR/release/`` (what learners
get). nbgrader keeps the same things in its database and ``source/`` folder, otter in its
``autograder.zip``; here it is one file a person can read, ``manifest.json``, and a
``README.md`` that says never to hand the folder out, for it holds the hidden tests::

    {
      "format": "teachflow-grading-bundle", "version": 1,
      "notebook": "softmax.ipynb",           # the released notebook's file name
      "total_points": 3,
      "cells": [                             # every cell of the master, in order
        {"index": 0, "cell_type": "markdown", "role": "free", "grade_id": null,
         "source": "# Softmax"},
        {"index": 1, "cell_type": "code", "role": "locked", "grade_id": "setup",
         "source": "import numpy as np", "defines": ["np"]},
        {"index": 2, "cell_type": "code", "role": "solution", "grade_id": "softmax",
         "source": "def my_softmax(x):\\n    # YOUR CODE HERE\\n    raise NotImplementedError()",
         "defines": ["my_softmax"]},
        {"index": 3, "cell_type": "code", "role": "tests", "grade_id": "test_softmax",
         "source": "def test_shape(): ...", "points": 3,
         "tests": ["test_shape", "test_sums_to_one"], "hidden_tests": ["test_sums_to_one"],
         "uses": ["my_softmax", "np"], "defines": ["test_shape", "test_sums_to_one"]}
      ]
    }

A cell's ``source`` is what grading takes from the master: the text of given (``locked``) and
``free`` cells, the *stub* of a solution cell (the instructor's answer is not in the bundle: a
submission's cell with the same ``grade_id`` takes its place) and the whole of a test cell,
hidden tests included (their markers are comments, so line numbers match the master's).
``defines`` are the names a code cell binds at its top level (a solution cell's, as the answer
binds them) and ``uses`` the global names a test cell reads: which cells its tests depend on,
and which names of a learner's notebook its tests may call. ``points`` belong to the test cell,
shared by its tests (evenly, but for those ``@tfl.grading.points(n)`` gives their own, read from
the cell's ``source``: `teachflow.grading.credit`). ``index`` counts from 0 in the master's list
of cells.

`load_bundle` reads the file back with plain ``json``, into frozen dataclasses, checking every
key; it imports nothing, and nothing from a submission is ever part of it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teachflow.core.errors import GradingError
from teachflow.grading.authoring import ExerciseCell
from teachflow.grading.cells import defined_names, parse, test_functions
from teachflow.grading.notebook import ROLES, Cell
from teachflow.grading.regions import without_hidden_tests

FORMAT = "teachflow-grading-bundle"
VERSION = 1
MANIFEST = "manifest.json"

README = """\
# Grading bundle for {notebook}

Written by `teachflow assign`. It holds the exercise's tests, the hidden ones included:
never hand this folder out. `manifest.json` is described in teachflow's
`teachflow/grading/bundle.py`; grade submissions with
`teachflow grade SUBMISSION.ipynb... --bundle {path}`.
"""


@dataclass(frozen=True)
class BundleCell:
    """One cell of the master as grading sees it (see the module's docstring for each field)."""

    index: int
    cell_type: str
    role: str
    grade_id: str | None
    source: str
    defines: tuple[str, ...] = ()
    points: float = 0.0
    tests: tuple[str, ...] = ()
    hidden_tests: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()


@dataclass(frozen=True)
class Bundle:
    """A loaded grading bundle: the master's cells and what each test cell is worth."""

    path: Path
    notebook: str
    cells: tuple[BundleCell, ...] = field(repr=False)

    @property
    def test_cells(self) -> tuple[BundleCell, ...]:
        return tuple(cell for cell in self.cells if cell.role == "tests")

    @property
    def points(self) -> dict[str, float]:
        """Points per test cell, by grade_id, in the notebook's order."""
        return {cell.grade_id: cell.points for cell in self.test_cells if cell.grade_id}

    @property
    def total_points(self) -> float:
        return sum(self.points.values())


def manifest(notebook_name: str, cells: list[ExerciseCell]) -> dict[str, Any]:
    """The manifest (as JSON data) of a master whose cells `read_master` checked."""
    entries = []
    for exercise in cells:
        cell = exercise.cell
        entry: dict[str, Any] = {"index": cell.index, "cell_type": cell.cell_type,
                                 "role": cell.role, "grade_id": cell.grade_id}
        entry["source"] = exercise.released if cell.role == "solution" else cell.source
        if cell.cell_type == "code":
            entry["defines"] = sorted(exercise.defines)
        if cell.role == "tests":
            hidden = [test for test in exercise.tests if test not in exercise.visible_tests]
            entry.update(points=cell.points, tests=list(exercise.tests), hidden_tests=hidden,
                         uses=sorted(exercise.uses))
        entries.append(entry)
    total = sum(exercise.cell.points for exercise in cells if exercise.cell.role == "tests")
    return {"format": FORMAT, "version": VERSION, "notebook": notebook_name,
            "total_points": total, "cells": entries}


def of_notebook(path: Path, cells: list[Cell]) -> Bundle:
    """The bundle a learner's own notebook makes, for ``teachflow check``: its cells as they
    are, and the visible tests of its test cells (a cell that does not parse has none)."""
    entries = []
    for cell in cells:
        entry: dict[str, Any] = {"index": cell.index, "cell_type": cell.cell_type,
                                 "role": cell.role, "grade_id": cell.grade_id,
                                 "source": cell.source}
        if cell.cell_type == "code":
            entry["defines"] = tuple(sorted(defined_names(cell.source)))
        if cell.role == "tests" and cell.cell_type == "code":
            try:
                visible = without_hidden_tests(cell.source, cell.describe())
                tests = tuple(test_functions(parse(visible)))
            except (GradingError, SyntaxError):
                tests = ()
            entry.update(points=cell.points, tests=tests)
        entries.append(BundleCell(**entry))
    return Bundle(path.parent, path.name, tuple(entries))


def write_bundle(directory: Path, data: dict[str, Any]) -> None:
    """Write ``manifest.json`` and ``README.md`` into `directory` (made if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MANIFEST).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n",
                                      encoding="utf-8")
    (directory / "README.md").write_text(
        README.format(notebook=data["notebook"], path=directory), encoding="utf-8")


def is_bundle(directory: Path) -> bool:
    """Does `directory` hold a manifest this module wrote (of any version)?"""
    try:
        data = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT


def load_bundle(directory: str | os.PathLike[str]) -> Bundle:
    """The bundle in `directory` (``DIR/grading`` as ``teachflow assign`` wrote it)."""
    path = Path(directory)
    try:
        data = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except OSError as error:
        raise _bad(path, f"it has no readable {MANIFEST} ({error.strerror})") from None
    except ValueError as error:
        raise _bad(path, f"its {MANIFEST} is not JSON ({error})") from None
    return bundle_of(path, data)


def bundle_of(path: Path, data: Any) -> Bundle:
    """The bundle a manifest's data describes (`manifest`'s, or a file's, checked)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _bad(path, f"its {MANIFEST} is not a teachflow grading manifest")
    if data.get("version") != VERSION:
        raise _bad(path, f"its manifest has version {data.get('version')!r}; this teachflow "
                         f"reads version {VERSION}")
    if not isinstance(data.get("notebook"), str) or not isinstance(data.get("cells"), list):
        raise _bad(path, "its manifest lacks the notebook's name or its cells")
    return Bundle(path, data["notebook"], tuple(_cell(path, i, c)
                                                for i, c in enumerate(data["cells"])))


_FIELDS: dict[str, tuple[type | tuple[type, ...], Any]] = {
    "index": (int, None), "cell_type": (str, None), "role": (str, None),
    "grade_id": ((str, type(None)), None), "source": (str, None), "defines": (list, []),
    "points": ((int, float), 0.0), "tests": (list, []), "hidden_tests": (list, []),
    "uses": (list, []),
}


def _cell(path: Path, position: int, entry: Any) -> BundleCell:
    if not isinstance(entry, dict):
        raise _bad(path, f"cell {position + 1} of its manifest is not an object")
    values = {}
    for key, (kind, default) in _FIELDS.items():
        value = entry.get(key, default)
        if value is None and default is None and key != "grade_id":
            raise _bad(path, f"cell {position + 1} of its manifest has no {key!r}")
        if not isinstance(value, kind) or isinstance(value, bool):
            raise _bad(path, f"cell {position + 1} of its manifest has a bad {key!r}")
        if isinstance(value, list):
            if not all(isinstance(item, str) for item in value):
                raise _bad(path, f"cell {position + 1} of its manifest has a bad {key!r}")
            value = tuple(value)
        values[key] = value
    if values["role"] not in ROLES:
        raise _bad(path, f"cell {position + 1} of its manifest has role {values['role']!r}")
    return BundleCell(**values)


def _bad(path: Path, problem: str) -> GradingError:
    return GradingError(f"{path} is not a grading bundle: {problem}", op="load bundle",
                        hint="give the grading/ folder `teachflow assign MASTER --out DIR` "
                             "wrote (DIR/grading), and run assign again after updating teachflow")
