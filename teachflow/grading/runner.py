"""Running a notebook's visible tests: the learner's cells, then each test cell's functions.

`teachflow check` runs in the process that asks, with no Jupyter kernel (starting one costs
seconds, and a learner checks often). It runs the notebook as a kernel would, top to bottom in
one fresh namespace (``__name__ == "__main__"``, IPython's magics where a cell uses them), and
runs each test cell at its place with its hidden tests left out: every ``def test_...`` of the
cell is called, as pytest would, and the cell passes when all of them pass.

In a notebook, ``tfl.grading.check()`` skips the first part: the learner's functions are
already in the kernel, as the learner last ran them, so only the test cells run, in a copy of
the kernel's namespace (a test's own names never leak into the notebook).

A cell that does not run (a syntax error, an exception, a stub that raises
``NotImplementedError`` at its top level) does not stop the others. Each test cell says which
names it needs (`teachflow.grading.cells`); a test cell that needs a name only failed cells
define is reported with that cell's problem (a name no cell defines, with the closest stub
before it: a stub defines nothing), and every other test cell runs as usual. This is
the learner's own code on their own machine, so nothing is sandboxed here; grading, which runs
code from a whole class, is another matter.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import inspect
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from teachflow.errors import GradingError
from teachflow.grading.cells import (
    defined_names,
    needs_ipython,
    parse,
    python_source,
    test_functions,
    used_names,
)
from teachflow.grading.failures import (
    FAILED,
    NOT_DONE,
    PASSED,
    CellFailure,
    Places,
    error_lines,
    explain_failure,
)
from teachflow.grading.notebook import Cell
from teachflow.grading.regions import without_hidden_tests
from teachflow.grading.rewrite import HELPER, assertion_failed, rewrite_asserts

OUTPUT_SHOWN = 2000  # characters of a failing test's printed output shown with it


@dataclass
class TestResult:
    """One test function: its status and why (empty when it passed), and what it printed."""

    name: str
    status: str
    lines: list[str] = field(default_factory=list)
    output: str = ""


@dataclass
class TestCellResult:
    """One test cell: passed only when each of its visible tests passed."""

    cell: Cell
    status: str
    tests: list[TestResult] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # why none of its tests ran


@contextlib.contextmanager
def _captured() -> Iterator[io.StringIO]:
    """What the code inside prints, kept instead of shown."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        yield buffer


def fresh_namespace(cells: list[Cell]) -> dict[str, Any]:
    """A namespace as a fresh kernel's: IPython's own when a cell uses magics or ``display``."""
    namespace: dict[str, Any] = {"__builtins__": builtins}
    if any(c.cell_type == "code" and needs_ipython(c.source) for c in cells):
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config

        if InteractiveShell.initialized():  # a shell runs already: leave its namespace alone
            namespace["get_ipython"] = InteractiveShell.instance
        else:
            config = Config()
            config.HistoryManager.enabled = False  # check writes nothing into ~/.ipython
            namespace = InteractiveShell.instance(config=config).user_ns
    namespace["__name__"] = "__main__"
    return namespace


class Runner:
    """Runs cells into `namespace` and test cells against it, noting which cells failed.

    `ran_by_kernel`: the learner's cells were run by their kernel, not by this runner (a test
    cell may need any of them, and a missing name means a cell not run yet)."""

    def __init__(self, cells: list[Cell], namespace: dict[str, Any],
                 ran_by_kernel: bool = False) -> None:
        self.namespace, self.ran_by_kernel = namespace, ran_by_kernel
        self.places, self.failures = Places(), {}
        self.defines = {c.index: frozenset(defined_names(c.source)) for c in cells
                        if c.cell_type == "code" and c.role != "tests"}
        self.cells = {c.index: c for c in cells}

    def _fail(self, cell: Cell, status: str, lines: list[str]) -> None:
        failed = "is broken in the saved file" if self.ran_by_kernel else "did not run"
        self.failures[cell.index] = CellFailure(cell, status, lines, self.defines[cell.index],
                                                failed)

    def compile_cell(self, cell: Cell) -> Any:
        """`cell`'s code, compiled (None, and the cell noted as failed, when it does not
        parse)."""
        source = python_source(cell.source)
        try:
            return compile(source, self.places.register(cell, source), "exec")
        except SyntaxError as error:
            self._fail(cell, FAILED, error_lines(error, self.places))
            return None

    def read_cell(self, cell: Cell) -> None:
        """Note, without running it, whether a cell the kernel ran fails: a syntax error, or a
        stub that raises ``NotImplementedError`` at its top level."""
        if self.compile_cell(cell) is None:
            return
        stub = cell.role == "solution" and "NotImplementedError" in cell.source
        if stub and any(isinstance(stmt, ast.Raise) and "NotImplementedError" in
                        ast.unparse(stmt) for stmt in parse(cell.source).body):
            self._fail(cell, NOT_DONE, ["it raises NotImplementedError"])
        elif self.defines[cell.index] and not self.defines[cell.index] & self.namespace.keys():
            # Nothing it defines is in the kernel: a stub left alone, or a cell not run yet.
            self._fail(cell, NOT_DONE, ["it raises NotImplementedError" if stub else
                                        "it has not run in this kernel yet: run it first"])

    def run_cell(self, cell: Cell) -> None:
        """Run a solution, given or free cell into the namespace, as the kernel would."""
        code = self.compile_cell(cell)
        if code is None:
            return
        try:
            with _captured():
                exec(code, self.namespace)
        except KeyboardInterrupt:
            raise
        except NotImplementedError:
            self._fail(cell, NOT_DONE, ["it raises NotImplementedError"])
        except BaseException as error:  # SystemExit included: a cell does not end the check
            self._fail(cell, FAILED, error_lines(error, self.places))

    def _providers(self, name: str, before: int) -> list[Cell]:
        return [self.cells[i] for i, names in self.defines.items()
                if name in names and (self.ran_by_kernel or i < before)]

    def _missing(self, uses: set[str], before: int) -> dict[int, list[str]]:
        """The failed cells a test cell needs, with the names it needs from each: names that
        only failed cells define."""
        needed: dict[int, list[str]] = {}
        stubs = [i for i, f in self.failures.items() if f.status == NOT_DONE and i < before]
        for name in sorted(uses):
            providers = [c.index for c in self._providers(name, before)]
            if providers and all(i in self.failures for i in providers):
                for index in providers:
                    needed.setdefault(index, []).append(name)
            elif not providers and name not in self.namespace and stubs:
                # A stub defines nothing: the name is likely the answer of the closest one.
                needed.setdefault(max(stubs), []).append(name)
        return needed

    def run_tests(self, cell: Cell, hidden: bool = False) -> TestCellResult:
        """Run the visible tests of test cell `cell` against the namespace (and its hidden
        ones too when `hidden`: grading runs them)."""
        try:
            visible = cell.source if hidden else without_hidden_tests(cell.source,
                                                                       cell.describe())
            source = python_source(visible)
            tree = parse(source)
        except (GradingError, SyntaxError) as error:
            return TestCellResult(cell, FAILED, lines=[f"the test cell does not parse: {error}",
                                                       "(was it edited? its tests are as the "
                                                       "instructor wrote them when graded)"])
        needed = self._missing(used_names(source) - defined_names(source), cell.index)
        if needed:
            failures = [self.failures[i] for i in needed]
            status = NOT_DONE if all(f.status == NOT_DONE for f in failures) else FAILED
            return TestCellResult(cell, status, lines=[
                f"needs {', '.join(needed[f.cell.index])}: {f.sentence()}" for f in failures
            ] + [line for f in failures for line in f.lines[1:]])
        filename = self.places.register(cell, source)
        # Fresh, a test cell runs in the notebook's namespace, as in a kernel (a helper it
        # defines serves later cells); in the learner's kernel, in a copy that leaves no trace.
        scope = dict(self.namespace) if self.ran_by_kernel else self.namespace
        scope[HELPER] = assertion_failed
        try:
            with _captured():
                exec(compile(rewrite_asserts(tree, source), filename, "exec"), scope)
        except KeyboardInterrupt:
            raise
        except BaseException as error:
            status, lines = explain_failure(error, self.places, filename)
            return TestCellResult(cell, status, lines=lines + self._name_hint(error, cell))
        results = [self._run_test(name, scope[name], filename, cell)
                   for name in test_functions(tree)]
        statuses = {r.status for r in results}
        status = NOT_DONE if NOT_DONE in statuses else FAILED if FAILED in statuses else PASSED
        return TestCellResult(cell, status, results)

    def _run_test(self, name: str, test: Any, filename: str, cell: Cell) -> TestResult:
        required = [p.name for p in inspect.signature(test).parameters.values()
                    if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY,
                                                           p.POSITIONAL_OR_KEYWORD)]
        if required:
            return TestResult(name, FAILED, [f"it takes arguments ({', '.join(required)}): "
                                             f"pytest's fixtures are not available to check"])
        with _captured() as output:
            try:
                test()
            except KeyboardInterrupt:
                raise
            except BaseException as error:
                status, lines = explain_failure(error, self.places, filename)
                lines += self._name_hint(error, cell)
                return TestResult(name, status, lines, output.getvalue()[-OUTPUT_SHOWN:])
        return TestResult(name, PASSED)

    def _name_hint(self, error: BaseException, cell: Cell) -> list[str]:
        """For a NameError: the cell that defines the name, and what to do about it."""
        name = getattr(error, "name", None)
        if not isinstance(error, NameError) or not name:
            return []
        providers = [c for i, names in self.defines.items() if name in names
                     for c in [self.cells[i]]]
        if not providers:
            return []
        if self.ran_by_kernel:
            return [f"run {providers[0].describe()} first: it defines {name}"]
        later = [c for c in providers if c.index > cell.index]
        return [f"{name} is defined only after this test cell, in {later[0].describe()}"
                ] if later and len(later) == len(providers) else []
