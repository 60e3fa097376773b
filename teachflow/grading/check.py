"""The learner's check: ``teachflow check NOTEBOOK.ipynb``, and ``tfl.grading.check()``.

Both run the *visible* tests of an exercise notebook against the learner's current solutions
and print, per test cell, whether it passed, failed or is not done yet, with each failing
assertion in words (`teachflow.grading.failures`)::

    FAILED        test_softmax (2 points)
      test_shape
        cell 4 (grade_id 'test_softmax'), line 3:  assert my_softmax(x).shape == (3,)
        got:      my_softmax(x).shape = (3, 1)
        expected: (3,)

A check runs the tests the way grading does (`teachflow.grading.judge.run_exercise`): the
learner's code in a worker, the tests beside it calling the learner's functions through the
same proxies, within the same deadlines. Only the walls are left out, as this is the
learner's own code on their own machine. So a check that passes is a grade that passes (for
the visible tests: grading also runs hidden ones).

From a terminal, ``teachflow check`` starts the worker as a process of the learner's own, in
the notebook's folder, which runs the saved notebook from the top, each test cell at its place;
its exit status is 0 only when every visible test passes. In a notebook,
``tfl.grading.check()`` tests the functions as the learner last *ran* them: the worker is the
kernel itself, and the test cells are read from the notebook's file: it finds that file from
VS Code's ``__vsc_ipynb_file__``, from Jupyter Server's ``JPY_SESSION_NAME``, or as the only
notebook in the kernel's folder; ``path=`` says which file where none of those does. Test cells
are locked, so the saved ones are the ones shown.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teachflow.core.errors import GradingError
from teachflow.grading import runner, seeds
from teachflow.grading.bundle import Bundle, of_notebook
from teachflow.grading.failures import NOT_DONE, PASSED
from teachflow.grading.judge import run_exercise, worker_cells
from teachflow.grading.notebook import Cell, cells_of, read_notebook
from teachflow.grading.runner import TestCellResult
from teachflow.grading.sandbox import Limits
from teachflow.grading.submission import Channel, KernelChannel, ProcessChannel, Submission
from teachflow.grading.worker import Worker


def _cells(count: int) -> str:
    return f"{count} test cell{'s' * (count != 1)}"


@dataclass
class Report:
    """What a check found: one result per test cell, in the notebook's order."""

    notebook: Path
    results: list[TestCellResult]
    seconds: float
    printed_in: int | None = None  # the kernel's execution count when check() printed it

    @property
    def passed(self) -> bool:
        """Did every visible test pass?"""
        return all(result.status == PASSED for result in self.results)

    def count(self, status: str) -> int:
        return sum(1 for result in self.results if result.status == status)

    def summary(self) -> str:
        total, passed, undone = len(self.results), self.count(PASSED), self.count(NOT_DONE)
        if self.passed:
            return (f"{'All ' * (total > 1)}{_cells(total)} pass{'es' * (total == 1)} "
                    f"{'its' if total == 1 else 'their'} visible tests. Grading also runs tests "
                    f"you cannot see.")
        parts = [f"{passed} of {_cells(total)} pass{'es' * (total == 1)}"]
        if total - passed - undone:
            parts.append(f"{total - passed - undone} fail")
        if undone:
            parts.append(f"{undone} {'is' if undone == 1 else 'are'} not done yet")
        return ", ".join(parts) + "."

    def text(self) -> str:
        """The report as printed."""
        count = len(self.results)
        lines = [f"Checking {self.notebook.name}: the visible tests of {_cells(count)}", ""]
        for result in self.results:
            points = result.cell.points
            head = f"{result.status.upper():<13} {result.cell.grade_id} " \
                   f"({points:g} point{'s' * (points != 1)})"
            if result.status == PASSED:
                count = len(result.tests)
                head = head if count else head.replace(PASSED.upper(), "HIDDEN", 1)
                head += (f": {count} test{'s' * (count != 1)}" if count
                         else ": no visible tests; grading runs hidden ones")
            lines.append(head)
            lines += [f"    {line}" for line in result.lines]
            lines += _failed_tests(result)
        lines += ["", self.summary(), f"({self.seconds:.1f} s)"]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<check of {self.notebook.name}: {self.summary()}>"

    def _ipython_display_(self) -> None:
        """In a notebook, the report as printed; not twice in the cell whose check() printed
        it already."""
        if self.printed_in is None or self.printed_in != _execution_count():
            print(self.text())


def _failed_tests(result: TestCellResult) -> list[str]:
    """The tests of a cell that did not pass, those failing for the same reason together."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for test in result.tests:
        if test.status != PASSED:
            groups.setdefault((*test.lines, test.output), []).append(test.name)
    lines = []
    for (*why, output), names in groups.items():
        lines.append(f"  {', '.join(names)}")
        lines += [f"    {line}" for line in why]
        if output.strip():
            lines.append("    it printed:")
            lines += [f"      {line}" for line in output.rstrip().splitlines()]
    return lines


def _exercise_of(path: Path) -> tuple[Bundle, list[tuple[float, Cell]]]:
    """The notebook at `path` as an exercise to check (its own cells and visible tests), and
    the program its worker runs."""
    cells = cells_of(read_notebook(path))
    if not any(cell.role == "tests" and cell.cell_type == "code" for cell in cells):
        raise GradingError(f"{path.name} has no test cells", op="check",
                           hint="check an exercise notebook: one whose test cells carry "
                                "nbgrader's marks (metadata.nbgrader.grade = true)")
    exercise = of_notebook(path, cells)
    program, _ = worker_cells(exercise, cells)
    return exercise, program


#: A check gives a learner's code the deadlines and memory grading gives it by default.
DEFAULT_LIMITS = Limits()

@contextlib.contextmanager
def _running_check(path: Path) -> Iterator[None]:
    """The tests' side runs as Jupyter runs a notebook: in its folder, which is also where
    imports look first; a check() inside it does nothing."""
    cwd, sys_path, backend = os.getcwd(), list(sys.path), os.environ.get("MPLBACKEND")
    os.chdir(path.parent)
    sys.path.insert(0, str(path.parent))
    os.environ["MPLBACKEND"] = backend or "Agg"  # plots are drawn into nothing, not a window
    runner.inside_check = True
    try:
        yield
    finally:
        runner.inside_check = False
        os.chdir(cwd)
        sys.path[:] = sys_path
        if backend is None:
            os.environ.pop("MPLBACKEND", None)


def check_notebook(path: str | os.PathLike[str], limits: Limits = DEFAULT_LIMITS) -> Report:
    """Run the notebook at `path` from the top, fresh, in a worker of the learner's own, and
    its visible tests at their places."""
    start, path = time.perf_counter(), Path(path).resolve()
    exercise, program = _exercise_of(path)
    folder = str(path.parent)
    return _checked(path, exercise, program, lambda: ProcessChannel("local", limits, folder),
                    limits, start)


def check_namespace(path: str | os.PathLike[str], namespace: dict[str, Any],
                    limits: Limits = DEFAULT_LIMITS) -> Report:
    """Run the visible tests of the notebook at `path` against `namespace`, where a kernel
    ran the learner's cells (a syntax error in the saved file still fails what needs it)."""
    start, path = time.perf_counter(), Path(path).resolve()
    exercise, program = _exercise_of(path)
    worker = Worker(namespace)
    with seeds.kept():  # (each test seeds the kernel's generators: it gets its own back)
        return _checked(path, exercise, program, lambda: KernelChannel(worker, limits), limits,
                        start, kernel=True)


def _checked(path: Path, exercise: Bundle, program: list[tuple[float, Cell]],
             connect: Callable[[], Channel], limits: Limits, start: float,
             kernel: bool = False) -> Report:
    with tempfile.TemporaryDirectory(prefix="teachflow-check-",
                                     ignore_cleanup_errors=True) as scratch:
        submission = Submission([cell for _, cell in program], connect, limits, Path(scratch))
        try:
            with _running_check(path):
                results = run_exercise(exercise, program, submission, hidden=False,
                                       kernel=kernel)
        finally:
            submission.close()
    return Report(path, [result for _, result in results], time.perf_counter() - start)


def notebook_path(namespace: dict[str, Any]) -> Path:
    """The file of the notebook this kernel runs (see the module's docstring for how)."""
    vscode = namespace.get("__vsc_ipynb_file__")
    if isinstance(vscode, str) and os.path.isfile(vscode):
        return Path(vscode)
    session, cwd = os.environ.get("JPY_SESSION_NAME", ""), Path.cwd()
    if session.endswith(".ipynb"):  # relative to the server's root, a folder above the kernel's
        for folder in (cwd, *cwd.parents):
            if (folder / session).is_file():
                return folder / session
    notebooks = sorted(cwd.glob("*.ipynb"))
    if len(notebooks) == 1:
        return notebooks[0]
    raise GradingError("cannot tell which notebook this kernel runs", op="check",
                       hint="name it: tfl.grading.check('my_exercise.ipynb')")


def check(path: str | os.PathLike[str] | None = None) -> Report | None:
    """Run the visible tests of this notebook and print what passed, failed or is not done.

    In a notebook, the tests run against the functions as you last ran them; elsewhere (a
    script), the notebook at `path` runs from the top first, as ``teachflow check`` runs it.
    A notebook's own ``check()`` cell, run by ``teachflow check``, does nothing (None)."""
    if runner.inside_check:
        return None
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        if path is None:
            raise GradingError("check() outside a notebook needs the notebook's path",
                               op="check", hint="tfl.grading.check('my_exercise.ipynb'), or "
                                                "teachflow check my_exercise.ipynb")
        report = check_notebook(path)
    else:
        report = check_namespace(path or notebook_path(shell.user_ns), shell.user_ns)
        report.printed_in = _execution_count()
    print(report.text())
    return report


def _execution_count() -> int | None:
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "execution_count", None)
