"""How an exercise's cells are made, marked as nbgrader marks them.

Each module of this folder, ``NN_name.py``, builds one master notebook, ``NN_name.ipynb``:
its function ``cells()`` returns the notebook's cells, made by the functions here. `md` is
words for the learner, `given` code they run but do not change, `solution` their answer (the
part between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` becomes a stub when handed out),
`tests` pytest functions worth some points (hidden ones between ``### BEGIN HIDDEN TESTS`` and
``### END HIDDEN TESTS``), `free` a cell to play in.
"""

from __future__ import annotations

import textwrap

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell


def _marks(grade_id: str, *, solution: bool = False, grade: bool = False, locked: bool = False,
           points: float = 0) -> dict:
    return {"nbgrader": {"grade_id": grade_id, "solution": solution, "grade": grade,
                         "locked": locked, "points": points, "schema_version": 3}}


def _text(source: str) -> str:
    return textwrap.dedent(source).strip("\n")


def md(source: str) -> nbformat.NotebookNode:
    """Words for the learner."""
    return new_markdown_cell(_text(source))


def given(grade_id: str, source: str) -> nbformat.NotebookNode:
    """Code the learner runs but does not change (locked)."""
    return new_code_cell(_text(source), metadata=_marks(grade_id, locked=True))


def solution(grade_id: str, source: str) -> nbformat.NotebookNode:
    """The learner's answer: the part between the markers becomes a stub when handed out."""
    return new_code_cell(_text(source), metadata=_marks(grade_id, solution=True))


def tests(grade_id: str, points: float, source: str) -> nbformat.NotebookNode:
    """pytest functions, worth `points` together (locked)."""
    return new_code_cell(_text(source), metadata=_marks(grade_id, grade=True, locked=True,
                                                        points=points))


def free(source: str) -> nbformat.NotebookNode:
    """A cell to play in: nobody grades it."""
    return new_code_cell(_text(source))


def setup(more: str = "") -> nbformat.NotebookNode:
    """The first code cell, locked: NumPy and teachflow, then `more` (teachflow's parts)."""
    return given("setup", "import numpy as np\n\nimport teachflow as tfl\n" + _text(more))


CHECKING = """
Run the visible tests whenever you like: `tfl.grading.check()` in a cell, or
`teachflow check {name}.ipynb` in a terminal. Grading runs some more that you cannot see.
"""

