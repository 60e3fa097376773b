"""Partial credit: a test cell's points, shared between its test functions.

A test cell carries points (nbgrader's ``metadata.nbgrader.points``), and each of its test
functions earns its share on its own, so a learner whose answer is right in shape but wrong
in value gets the shape's share. By default the share is even::

    def test_shape(): ...          # 3 points in the cell, 3 tests: 1 each
    def test_sums_to_one(): ...
    def test_large_values(): ...

A test worth more than the others says so with ``@tfl.grading.points(n)``; the cell's points
still are the cell's (the column grades.csv has for it), and what the decorated tests do not
take is shared evenly by the others::

    @tfl.grading.points(2)
    def test_sums_to_one(): ...    # 3 points: this one 2, the other two 0.5 each

So a decorated test takes its points *out of* the cell's: the decorated tests may not ask for
more than the cell has, and when every test of a cell is decorated their points add up to the
cell's (``teachflow assign`` refuses a master that breaks either rule: `problem`).

The points are read from the test cell's text (`own_points`), never by running it: grading
knows what each test is worth before any learner's code runs. The decorator itself only marks
the function (``test.points``), so the cell also runs as plain pytest code.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from teachflow.core.errors import GradingError
from teachflow.grading.cells import parse

Test = TypeVar("Test", bound=Callable[..., Any])


def points(n: float) -> Callable[[Test], Test]:
    """Mark a test function as worth `n` of its cell's points (see the module's docstring)::

        @tfl.grading.points(2)
        def test_sums_to_one():
            np.testing.assert_allclose(my_softmax(x).sum(), 1.0)
    """
    if isinstance(n, bool) or not isinstance(n, int | float) or n < 0:
        raise GradingError(f"points({n!r}): a test's points are a number, 0 or more",
                           op="points", hint="e.g. @tfl.grading.points(2)")

    def mark(test: Test) -> Test:
        test.points = n  # type: ignore[attr-defined]
        return test

    return mark


def _is_points(decorator: ast.expr) -> bool:
    """``@points(n)``, ``@grading.points(n)`` or ``@tfl.grading.points(n)``."""
    if not isinstance(decorator, ast.Call):
        return False
    function = decorator.func
    return (isinstance(function, ast.Name) and function.id == "points") or (
        isinstance(function, ast.Attribute) and function.attr == "points")


def own_points(source: str) -> dict[str, float | None]:
    """The points each test function of a cell's `source` asks for with ``@points(n)``
    (None when `n` is not a plain number, which `problem` refuses)."""
    found: dict[str, float | None] = {}
    try:
        tree = parse(source)
    except SyntaxError:  # (a cell that does not parse has no tests to share points)
        return found
    for stmt in tree.body:
        if not isinstance(stmt, ast.FunctionDef):
            continue
        for decorator in stmt.decorator_list:
            if _is_points(decorator):
                assert isinstance(decorator, ast.Call)
                found[stmt.name] = _number(decorator)
    return found


def _number(call: ast.Call) -> float | None:
    if len(call.args) != 1 or call.keywords:
        return None
    try:
        value = ast.literal_eval(call.args[0])
    except ValueError:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)


def problem(cell_points: float, tests: Sequence[str], source: str) -> str | None:
    """Why the ``@points`` of a test cell cannot share its points out, or None when they can."""
    own = {name: value for name, value in own_points(source).items() if name in tests}
    bad = [name for name, value in own.items() if value is None]
    if bad:
        return f"gives {bad[0]} points that are not a number: write @tfl.grading.points(2)"
    asked = sum(value for value in own.values() if value is not None)
    if asked > cell_points + 1e-9:
        return (f"has {cell_points:g} points, but its tests ask for {asked:g} with "
                f"@tfl.grading.points")
    if len(own) == len(tests) and abs(asked - cell_points) > 1e-9:
        return (f"has {cell_points:g} points, but each of its tests has @tfl.grading.points "
                f"and together they ask for {asked:g}")
    return None


def test_points(cell_points: float, tests: Sequence[str], source: str) -> dict[str, float]:
    """Each test function's points, in the cell's order (see the module's docstring)."""
    own = {name: value or 0.0 for name, value in own_points(source).items() if name in tests}
    rest = [name for name in tests if name not in own]
    share = (cell_points - sum(own.values())) / len(rest) if rest else 0.0
    return {name: own.get(name, share) for name in tests}
