"""A notebook file as grading reads it: JSON cells, each with nbgrader's metadata.

An ``.ipynb`` file is JSON: ``{"cells": [...], "metadata": {...}, "nbformat": 4, ...}``, each
cell ``{"cell_type": "code", "source": "...", "metadata": {...}, "outputs": [...]}``. nbgrader
(and otter, which reads the same marks) turns a notebook into an exercise by writing into each
cell's ``metadata.nbgrader``::

    {"grade_id": "softmax", "solution": true, "grade": false, "locked": false,
     "points": 0, "schema_version": 3}

The flags give every cell one *role*, the word the rest of `teachflow.grading` uses:

- ``solution`` (``solution: true``): the learner writes here; handed out with a stub;
- ``tests`` (``grade: true``, not a solution): pytest functions, worth the cell's ``points``;
- ``locked`` (``locked: true`` only): given code or instructions, which grading takes from the
  instructor's master, never from a submission;
- ``free`` (no flag): anything else; nobody grades it.

A cell is named in messages by its place (counting from 1, as a reader counts) and its
``grade_id``: "cell 4 (grade_id 'test_softmax')". Reading a file here needs only ``json``, so a
learner's ``teachflow check`` starts fast; the instructor's ``assign`` also validates the whole
file against the notebook format's schema (`teachflow.grading.assign`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from teachflow.core.errors import GradingError


class NotebookError(GradingError):
    """A file that cannot be read as a Jupyter notebook (missing, not JSON, not a notebook)."""


class AuthoringError(GradingError):
    """A master notebook that breaks a rule of authoring (ids, regions, tests, points)."""


SCHEMA_VERSION = 3
ROLES = ("solution", "tests", "locked", "free")


@dataclass(frozen=True)
class Cell:
    """One cell of a notebook: its place, kind, text and nbgrader marks."""

    index: int                   # place in the notebook's list of cells, from 0
    cell_type: str               # "code", "markdown" or "raw"
    source: str
    nbgrader: dict[str, Any]     # metadata.nbgrader ({} where there is none)
    place: int | None = None     # where messages say it is, when not at `index` (grading
                                 # runs a learner's own cell at an index past the master's)

    @property
    def role(self) -> str:
        """``solution``, ``tests``, ``locked`` or ``free`` (see the module's docstring)."""
        if self.nbgrader.get("solution"):
            return "solution"
        if self.nbgrader.get("grade"):
            return "tests"
        return "locked" if self.nbgrader.get("locked") else "free"

    @property
    def grade_id(self) -> str | None:
        grade_id = self.nbgrader.get("grade_id")
        return grade_id if isinstance(grade_id, str) and grade_id else None

    @property
    def points(self) -> float:
        points = self.nbgrader.get("points", 0)
        return float(points) if isinstance(points, int | float) else 0.0

    def describe(self) -> str:
        """The cell as messages name it: ``cell 4 (grade_id 'test_softmax')``."""
        grade_id = self.grade_id
        place = self.index if self.place is None else self.place
        return f"cell {place + 1}" + (f" (grade_id {grade_id!r})" if grade_id else "")


def read_notebook(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The notebook at `path` as JSON, each cell's source joined into one string.

    Raises `NotebookError` naming what is wrong: a missing file, text that is not JSON (with its
    line and column), or JSON that is not a version-4 notebook."""
    name = os.path.basename(os.fspath(path))
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except UnicodeDecodeError as error:
        raise NotebookError(f"{name} is not a notebook: it is not text (byte {error.start} is "
                            f"not UTF-8), where a notebook is JSON", op="read notebook",
                            hint="give an .ipynb file saved by Jupyter") from error
    except OSError as error:
        raise NotebookError(f"cannot read {name}: {error}", op="read notebook",
                            hint="give the path of an .ipynb file") from error
    try:
        notebook = json.loads(text)
    except json.JSONDecodeError as error:
        raise NotebookError(
            f"{name} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})",
            op="read notebook",
            hint="a notebook damaged by hand-editing can often be recovered from its "
                 "checkpoint (.ipynb_checkpoints/) or version control") from error
    problem = _not_a_notebook(notebook)
    if problem:
        raise NotebookError(f"{name} is JSON but not a Jupyter notebook: {problem}",
                            op="read notebook", hint="give an .ipynb file saved by Jupyter")
    for cell in notebook["cells"]:
        if isinstance(cell["source"], list):
            cell["source"] = "".join(cell["source"])
        cell.setdefault("metadata", {})
    return notebook


def _not_a_notebook(notebook: Any) -> str | None:
    """What keeps parsed JSON from being a version-4 notebook (None when nothing does)."""
    if not isinstance(notebook, dict):
        return f"the file holds a {type(notebook).__name__}, not an object with cells"
    if notebook.get("nbformat") != 4:
        return f"its nbformat is {notebook.get('nbformat')!r}, where teachflow reads version 4"
    if not isinstance(notebook.get("cells"), list):
        return "it has no list of cells"
    for index, cell in enumerate(notebook["cells"]):
        where = f"cell {index + 1}"
        if not isinstance(cell, dict):
            return f"{where} is a {type(cell).__name__}, not an object"
        if cell.get("cell_type") not in ("code", "markdown", "raw"):
            return f"{where} has cell_type {cell.get('cell_type')!r}"
        source = cell.get("source")
        if not (isinstance(source, str)
                or (isinstance(source, list) and all(isinstance(s, str) for s in source))):
            return f"{where} has no text (its source is {type(source).__name__})"
        if not isinstance(cell.get("metadata", {}), dict):
            return f"{where}'s metadata is not an object"
        if not isinstance(cell.get("metadata", {}).get("nbgrader", {}), dict):
            return f"{where}'s metadata.nbgrader is not an object"
    return None


def cells_of(notebook: dict[str, Any]) -> list[Cell]:
    """The notebook's cells (from `read_notebook`), with their roles."""
    return [Cell(index, cell["cell_type"], cell["source"],
                 dict(cell["metadata"].get("nbgrader", {})))
            for index, cell in enumerate(notebook["cells"])]
