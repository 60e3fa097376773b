"""Running a notebook's cells, and its test cells' tests, as a kernel and pytest would.

Two parts, one on each side of the wall (`teachflow.grading.worker`):

- `Runner` runs the learner's cells, top to bottom in one namespace (``__name__ ==
  "__main__"``, IPython's magics where a cell uses them: `teachflow.grading.shell`), in the
  worker. A cell that does not run (a syntax error, an exception, a stub that raises
  ``NotImplementedError`` at its top level) does not stop the others, and what it bound before
  it raised stays bound, as in a kernel. In a notebook's own kernel the cells ran already; the
  runner only reads them, to tell a stub or a cell broken in the saved file.
- `TestRunner` runs each test cell at its place, on the tests' side, with pytest
  (`teachflow.grading.testcell`): the cell passes when each of its tests does. Each test cell
  says which names it needs (`teachflow.grading.cells`); a name the worker does not have, that
  only failed cells define, is reported with that cell's problem (a name no cell defines, with
  the closest stub before it: a stub defines nothing), and every other test cell runs as
  usual.

``teachflow check`` and ``teachflow grade`` both run them this way (`teachflow.grading.judge`),
so that what a check says is what grading gives.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from teachflow.core.errors import GradingError
from teachflow.grading.asserts import HELPER, assertion_failed, rewrite_asserts
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
    SubmissionFailure,
    error_lines,
    explain_failure,
)
from teachflow.grading.notebook import Cell
from teachflow.grading.regions import without_hidden_tests
from teachflow.grading.testcell import Case, run_cell_tests

OUTPUT_SHOWN = 2000  # characters of a failing test's printed output shown with it

#: True while a check runs, and in a worker: a notebook's own ``check()`` cell does nothing.
inside_check = False


@dataclass
class TestResult:
    """One test function: its status and why (empty when it passed), and what it printed.
    `own`: the lines of `lines` about the learner's code alone (its error, a deadline it ran
    past, a cell that failed), which say nothing of what the test expects."""

    name: str
    status: str
    lines: list[str] = field(default_factory=list)
    output: str = ""
    own: list[str] = field(default_factory=list)


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
    """A namespace as a fresh kernel's: IPython's own when a cell uses magics or ``display``
    (a notebook's shell, `NotebookShell`, unless a shell runs already)."""
    namespace: dict[str, Any] = {"__builtins__": builtins}
    if any(c.cell_type == "code" and needs_ipython(c.source) for c in cells):
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config

        from teachflow.grading.shell import NotebookShell

        if InteractiveShell.initialized():  # a shell runs already: leave its namespace alone
            namespace["get_ipython"] = InteractiveShell.instance
        else:
            config = Config()
            config.HistoryManager.enabled = False  # check writes nothing into ~/.ipython
            namespace = NotebookShell.instance(config=config).user_ns
    namespace["__name__"] = "__main__"
    return namespace


class Runner:
    """Runs cells into `namespace`, noting which cells failed.

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
        except BaseException as error:  # SystemExit included: a cell does not end the check
            if self.places.raised_in_notebook(error, NotImplementedError):  # a stub
                self._fail(cell, NOT_DONE, ["it raises NotImplementedError"])
            else:
                self._fail(cell, FAILED, error_lines(error, self.places))


class TestRunner(Runner):
    """Runs test cells against the namespace (the tests' side): the learner's names in it are
    proxies of the worker's (`teachflow.grading.remote`), and failures are the worker's.
    `before_test`, when set, is called as each test function starts (`seeds`)."""

    before_test: Callable[[], None] | None = None

    def _providers(self, name: str, before: int) -> list[Cell]:
        return [self.cells[i] for i, names in self.defines.items()
                if name in names and (self.ran_by_kernel or i < before)]

    def _missing(self, uses: set[str], before: int) -> dict[int, list[str]]:
        """The failed cells a test cell needs, with the names it needs from each: names that
        the namespace lacks and only failed cells define."""
        needed: dict[int, list[str]] = {}
        stubs = [i for i, f in self.failures.items() if f.status == NOT_DONE and i < before]
        for name in sorted(uses - self.namespace.keys()):
            providers = [c.index for c in self._providers(name, before)]
            if providers and all(i in self.failures for i in providers):
                for index in providers:
                    needed.setdefault(index, []).append(name)
            elif not providers and stubs:
                # A stub defines nothing: the name is likely the answer of the closest one.
                needed.setdefault(max(stubs), []).append(name)
        return needed

    def _raised(self, uses: set[str], before: int) -> list[str]:
        """Why names a test uses may be wrong: the cells that bound them raised afterwards."""
        failed = {i for name in uses for c in self._providers(name, before)
                  if (i := c.index) in self.failures}
        return [line for i in sorted(failed) if self.failures[i].lines for line in (
            f"note: {self.failures[i].cell.describe()} raised an error when it ran, after it "
            f"bound what the test uses: {self.failures[i].lines[0]}",
            *self.failures[i].lines[1:2])]

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
        if needed:  # each of its tests fails (or is not done) for the same reason
            failures = [self.failures[i] for i in needed]
            status = NOT_DONE if all(f.status == NOT_DONE for f in failures) else FAILED
            why = [f"needs {', '.join(needed[f.cell.index])}: {f.sentence()}"
                   for f in failures] + [line for f in failures for line in f.lines[1:]]
            return TestCellResult(cell, status, [TestResult(name, status, why, own=why)
                                                 for name in test_functions(tree)])
        filename = self.places.register(cell, source)
        # A test cell runs in the tests' namespace, as in a kernel: a helper it defines serves
        # later cells.
        self.namespace[HELPER] = assertion_failed
        try:
            with _captured():
                exec(compile(rewrite_asserts(tree, source), filename, "exec"), self.namespace)
        except KeyboardInterrupt:
            raise
        except BaseException as error:
            status, lines = explain_failure(error, self.places, filename)
            return TestCellResult(cell, status, lines=lines + self._name_hint(error, cell))
        names = test_functions(tree)
        cases = run_cell_tests(self.namespace, names, filename, self.before_test)
        results = [self._result(name, [c for c in cases if c.function == name], filename,
                                cell) for name in names]
        notes = self._raised(used_names(source) - defined_names(source), cell.index)
        for result in results:
            if result.status != PASSED:
                result.lines += notes
        statuses = {r.status for r in results}
        status = NOT_DONE if NOT_DONE in statuses else FAILED if FAILED in statuses else PASSED
        return TestCellResult(cell, status, results)

    def _result(self, name: str, cases: list[Case], filename: str, cell: Cell) -> TestResult:
        """A test function's result: passed when each of its cases did."""
        failed = [c for c in cases if c.outcome == "failed"]
        if not cases:
            return TestResult(name, FAILED, ["pytest did not run it (see the cell's other "
                                             "tests: its collection failed?)"])
        if not failed:
            return TestResult(name, PASSED)
        statuses, reasons = set(), {}  # (cases failing for the same reason: together)
        for case in failed:
            status, why = self._explain(case, filename, cell)
            statuses.add(status)
            reasons.setdefault(tuple(why), []).append(case.name)
        lines = []
        for why, names in reasons.items():
            if names != [name]:
                lines.append(f"case{'s' * (len(names) > 1)} {', '.join(names)}:")
            lines += why
        status = NOT_DONE if statuses == {NOT_DONE} else FAILED
        own = [line for c in failed if isinstance(c.error, SubmissionFailure)
               for line in c.error.lines]
        return TestResult(name, status, lines, "".join(c.printed for c in failed)[-OUTPUT_SHOWN:],
                          list(dict.fromkeys(own)))

    def _explain(self, case: Case, filename: str, cell: Cell) -> tuple[str, list[str]]:
        if case.when == "call" and case.error is not None:
            status, lines = explain_failure(case.error, self.places, filename)
            return status, lines + self._name_hint(case.error, cell)
        errors = [line[1:].strip() for line in case.text.splitlines() if line.startswith("E ")]
        return FAILED, [f"pytest could not {'set it up' if case.when == 'setup' else 'finish it'}:"
                        f" {'; '.join(errors) or case.text.strip().splitlines()[-1:]}"]


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
