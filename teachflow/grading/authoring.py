"""The instructor's master notebook: the rules it must keep, and the notebook learners get.

A master is an ordinary notebook that runs from top to bottom with the answers in it. Its marked
cells (`teachflow.grading.notebook`) make it an exercise:

- a *solution* cell holds the answer between ``### BEGIN SOLUTION`` and ``### END SOLUTION``
  (a solution cell without markers is all answer);
- a *test* cell holds pytest functions (``def test_shape(): assert ...``) and the ``points``
  they share; instructor-only tests sit between ``### BEGIN HIDDEN TESTS`` and
  ``### END HIDDEN TESTS``;
- a *locked* cell holds given code or instructions.

`read_master` checks every rule before anything is written, so a mistake is found by the
instructor and not by 300 learners: each marked cell has a ``grade_id`` of its own (grading
matches a submission's cells to the master's by it, never by position), regions open and close,
test cells hold tests and points, every code cell parses, as handed out and as graded, and
every argument of a test is a fixture grading provides (pytest's own, the notebook's
``@pytest.fixture``, a ``parametrize`` argument). ``teachflow assign`` then grades the master
itself, by the route a submission takes (`teachflow.grading.assign`).
`released_notebook` then builds the learner's copy, as nbgrader's ``generate_assignment`` does:
answers stubbed, hidden tests removed, outputs cleared (an output can show an answer), the
marks kept, and given and test cells locked against editing and deletion in Jupyter.
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass
from typing import Any

from teachflow.grading import credit, regions
from teachflow.grading.cells import (
    TEST_PREFIX,
    defined_names,
    parse,
    test_functions,
    used_names,
)
from teachflow.grading.notebook import SCHEMA_VERSION, AuthoringError, Cell, cells_of
from teachflow.grading.testcell import BUILTIN_FIXTURES

GRADE_ID = re.compile(r"^[A-Za-z0-9_-]+$")  # nbgrader's rule; also safe in file and column names


@dataclass(frozen=True)
class ExerciseCell:
    """A master's cell, checked: what learners get of it, and what grading needs to know."""

    cell: Cell
    released: str                           # its source as handed out
    tests: tuple[str, ...] = ()             # test functions, hidden ones included
    visible_tests: tuple[str, ...] = ()     # those learners see
    defines: frozenset[str] = frozenset()   # names bound at its top level
    uses: frozenset[str] = frozenset()      # names it reads (test cells: from the notebook)


def read_master(notebook: dict[str, Any]) -> list[ExerciseCell]:
    """The master's cells, checked (`read_notebook`'s JSON in, `AuthoringError` out)."""
    cells = cells_of(notebook)
    _check_ids(cells)
    exercise = [_exercise_cell(cell) for cell in cells]
    _check_fixtures(cells)
    return exercise


def _check_fixtures(cells: list[Cell]) -> None:
    """Each test function's arguments are fixtures grading provides: pytest's own, those the
    notebook defines (``@pytest.fixture``), and its ``parametrize`` arguments."""
    provided = set(BUILTIN_FIXTURES)
    for cell in cells:
        if cell.cell_type == "code" and cell.role != "solution":
            provided |= {f.name for f in _functions(parse(cell.source)) if _is_fixture(f)}
    for cell in cells:
        if cell.role != "tests" or cell.cell_type != "code":
            continue
        for test in _functions(parse(cell.source)):
            if not test.name.startswith(TEST_PREFIX):
                continue
            given = _parametrized(test)
            for argument in [a.arg for a in (*test.args.posonlyargs, *test.args.args)]:
                if argument not in provided and argument not in given:
                    raise _refuse(cell, f"has {test.name}({argument}): no fixture provides "
                                  f"{argument!r}",
                                  "a test may take pytest's own fixtures (tmp_path, "
                                  "monkeypatch, capsys, recwarn, ...), a @pytest.fixture "
                                  "defined in a given or test cell, or a parametrize argument")


def _functions(tree: ast.Module) -> list[ast.FunctionDef]:
    return [s for s in tree.body if isinstance(s, ast.FunctionDef)]


def _decorator_name(decorator: ast.expr) -> str:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(target)


def _is_fixture(function: ast.FunctionDef) -> bool:
    return any(_decorator_name(d).split(".")[-1] == "fixture" for d in function.decorator_list)


def _parametrized(function: ast.FunctionDef) -> set[str]:
    """The argument names a function's ``parametrize`` marks give (``"x, y"`` or a list)."""
    names: set[str] = set()
    for decorator in function.decorator_list:
        if not (isinstance(decorator, ast.Call) and decorator.args and
                _decorator_name(decorator).split(".")[-1] == "parametrize"):
            continue
        first = decorator.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            names |= {n.strip() for n in first.value.split(",") if n.strip()}
        elif isinstance(first, ast.List | ast.Tuple):
            names |= {e.value for e in first.elts if isinstance(e, ast.Constant)}
    return names


def _refuse(cell: Cell, problem: str, hint: str) -> AuthoringError:
    return AuthoringError(f"{cell.describe()} {problem}", op="assign", hint=hint)


def _check_ids(cells: list[Cell]) -> None:
    seen: dict[str, Cell] = {}
    for cell in cells:
        marks = cell.nbgrader
        if not any(marks.get(flag) for flag in ("solution", "grade", "locked")):
            continue
        version = marks.get("schema_version", SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            raise _refuse(cell, f"has nbgrader schema_version {version!r}",
                          "teachflow reads nbgrader's schema_version 3: update the master with "
                          "`nbgrader update`, or set the version to 3")
        grade_id = marks.get("grade_id")
        if not isinstance(grade_id, str) or not grade_id:
            raise _refuse(cell, f"is marked as a {cell.role} cell but has no grade_id",
                          "give every solution, test and locked cell a grade_id of its own "
                          "(metadata.nbgrader.grade_id): grading matches cells by it")
        if not GRADE_ID.match(grade_id):
            raise _refuse(cell, "has a grade_id that is not letters, digits, '_' and '-'",
                          "rename it: a grade_id names a column of grades.csv")
        if grade_id in seen:
            raise _refuse(cell, f"has the same grade_id as {seen[grade_id].describe()}",
                          "give each cell a grade_id of its own: grading matches cells by it")
        seen[grade_id] = cell


def _exercise_cell(cell: Cell) -> ExerciseCell:
    where = cell.describe()
    marks, role = cell.nbgrader, cell.role
    if role != "solution" and regions.has_markers(cell.source, regions.SOLUTION):
        raise _refuse(cell, "has a '### BEGIN SOLUTION' region but is not a solution cell",
                      "mark it as a solution cell (metadata.nbgrader.solution = true), or the "
                      "answer would be handed out")
    if role != "tests" and regions.has_markers(cell.source, regions.HIDDEN_TESTS):
        raise _refuse(cell, "has a hidden-test region but is not a test cell",
                      "mark it as a test cell (metadata.nbgrader.grade = true) with points, or "
                      "the hidden tests would be handed out")
    if role == "solution":
        if marks.get("grade"):
            raise _refuse(cell, "is both a solution and a graded cell (graded by hand, in "
                          "nbgrader)", "teachflow grades by tests: keep the answer in a "
                          "solution cell and put its tests, with the points, in a test cell")
        stub = regions.CODE_STUB if cell.cell_type == "code" else regions.MARKDOWN_STUB
        if regions.has_markers(cell.source, regions.SOLUTION):
            released = regions.replace(cell.source, regions.SOLUTION, stub, where)
        else:
            released = "\n".join(stub)  # nbgrader: a solution cell without markers is all answer
    elif role == "tests":
        return _test_cell(cell)
    else:
        released = cell.source
    if cell.cell_type != "code":
        return ExerciseCell(cell, released)
    _parses(cell, cell.source, "")
    _parses(cell, released, " once its solution region is replaced by the stub")
    return ExerciseCell(cell, released, defines=frozenset(defined_names(cell.source)))


def _parses(cell: Cell, source: str, when: str) -> Any:
    try:
        return parse(source)
    except SyntaxError as error:
        raise _refuse(cell, f"does not parse{when}: {error.msg} at line {error.lineno}",
                      "a master runs from top to bottom: fix the cell, and keep whole "
                      "statements inside a region") from None


def _test_cell(cell: Cell) -> ExerciseCell:
    where = cell.describe()
    if cell.cell_type != "code":
        raise _refuse(cell, f"is a {cell.cell_type} cell marked as a test cell (grade: true)",
                      "tests are code: write them as pytest functions in a code cell")
    points = cell.nbgrader.get("points")
    if isinstance(points, bool) or not isinstance(points, int | float) or points < 0:
        raise _refuse(cell, f"is a test cell with points {points!r}",
                      "give it a number of points (metadata.nbgrader.points), shared by its "
                      "tests; 0 is allowed")
    visible = regions.without_hidden_tests(cell.source, where)
    tree = _parses(cell, cell.source, "")
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name.startswith("Test"):
            raise _refuse(cell, f"holds a test class, {stmt.name}",
                          "teachflow grades the test functions at a test cell's top level "
                          "(their points are the cell's, shared): write its tests as "
                          "functions")
    tests = test_functions(tree)
    if not tests:
        raise _refuse(cell, "is a test cell with no test function",
                      "write its tests as pytest functions: def test_something(): assert ...")
    visible_tests = test_functions(_parses(cell, visible, " once its hidden tests are removed"))
    shared = credit.problem(points, tests, cell.source)
    if shared is not None:
        raise _refuse(cell, shared, "a test's @tfl.grading.points come out of its cell's "
                                    "points; the tests without it share what is left")
    return ExerciseCell(cell, visible, tuple(tests), tuple(visible_tests),
                        frozenset(defined_names(cell.source)),
                        frozenset(used_names(cell.source) - defined_names(cell.source)))


def released_notebook(notebook: dict[str, Any], cells: list[ExerciseCell]) -> dict[str, Any]:
    """The learner's copy of the master (`read_notebook`'s JSON and `read_master`'s cells)."""
    released = copy.deepcopy(notebook)
    released["metadata"].pop("widgets", None)  # saved widget state can hold an answer's output
    for ipynb_cell, exercise in zip(released["cells"], cells, strict=True):
        ipynb_cell["source"] = exercise.released
        if ipynb_cell["cell_type"] == "code":
            ipynb_cell["outputs"], ipynb_cell["execution_count"] = [], None
        role, metadata = exercise.cell.role, ipynb_cell["metadata"]
        if role == "free":
            continue
        metadata["nbgrader"] = {**exercise.cell.nbgrader, "schema_version": SCHEMA_VERSION,
                                "locked": role in ("tests", "locked")}
        metadata["deletable"] = False  # grading finds the cell by its grade_id: keep it
        if role != "solution":
            metadata["editable"] = False
    return released
