"""Grading one submission: the learner's program in the sandbox, the tests on the trusted side.

`grade_submission` reads the submitted notebook as JSON (never running it here) and builds
two programs from it and the bundle:

*The worker's program* (`worker_cells`), run in the sandbox: the master's code cells in the
master's order, where

- a given (``locked``) or unmarked cell is the bundle's text, never the submission's;
- a solution cell is the submission's cell with the same ``grade_id`` wherever the learner
  moved it (the last one, if the learner copied it; a missing one defines nothing);
- cells the learner added (unmarked code of their own, say a helper) run just before the
  next solution cell that follows them in the submission;
- test cells are left out: they run on the trusted side only.

*The trusted side's program*, run in this process: the bundle's given cells that do not use
the learner's names, then each test cell, hidden tests included, with the learner's names
bound to `teachflow.grading.remote.Remote` proxies (or to their values, when those are plain
data). A given cell that uses a learner's name (``model = make_model()``) runs beside the
learner's code in the worker, and its names are proxies too. Tests run as ``teachflow
check`` runs them (`teachflow.grading.runner`), with the same explanations; a test cell that
needs a solution cell that failed is explained by that cell's failure.

Everything the submission holds is untrusted: a file that is not JSON or not a notebook, test
or given cells edited, removed, reordered or duplicated (their text is not read at all) are
reported in the result's notes, and the score is the trusted side's alone.
"""

from __future__ import annotations

import builtins
import contextlib
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teachflow.errors import TeachflowError
from teachflow.grading import sandbox
from teachflow.grading.bundle import Bundle, BundleCell
from teachflow.grading.cells import defined_names, used_names
from teachflow.grading.failures import FAILED, NOT_DONE, PASSED, CellFailure
from teachflow.grading.notebook import Cell, cells_of, read_notebook
from teachflow.grading.remote import Submission, WorkerStopped
from teachflow.grading.runner import Runner, TestCellResult, fresh_namespace

MAX_NOTEBOOK_BYTES = 64 << 20
ADDED = 1_000_000  # a learner's own cell runs at this index plus its place: past the master's


@dataclass
class TestOutcome:
    """One test function of one test cell, judged."""

    cell: str            # the test cell's grade_id
    name: str
    status: str
    max_score: float
    hidden: bool
    lines: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return self.max_score if self.status == PASSED else 0.0


@dataclass
class Judged:
    """A submission's grade: each test's outcome, and notes on the submission itself."""

    tests: list[TestOutcome]
    notes: list[str]
    seconds: float

    def cell_scores(self, bundle: Bundle) -> dict[str, float]:
        scores = dict.fromkeys(bundle.points, 0.0)
        for test in self.tests:
            scores[test.cell] += test.score
        return scores


def _cell(entry: BundleCell, source: str | None = None) -> Cell:
    flags = {"solution": entry.role == "solution", "grade": entry.role == "tests",
             "locked": entry.role in ("locked", "tests"), "points": entry.points}
    nbgrader = {"grade_id": entry.grade_id, **flags} if entry.grade_id else {}
    return Cell(entry.index, entry.cell_type, entry.source if source is None else source,
                nbgrader)


def read_submission(path: Path) -> list[Cell]:
    """The submission's cells; a `TeachflowError` saying why when it is not a notebook."""
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise TeachflowError(f"{path.name} is {size >> 20} MB; a notebook to grade may be at "
                             f"most {MAX_NOTEBOOK_BYTES >> 20} MB", op="grade")
    try:
        return cells_of(read_notebook(path))
    except RecursionError:
        raise TeachflowError(f"{path.name} is JSON nested too deeply to be a notebook",
                             op="grade") from None


def worker_cells(bundle: Bundle, submitted: list[Cell]) -> tuple[list[Cell], list[str]]:
    """The worker's program (see the module's docstring), and notes on what was not taken."""
    notes = []
    solutions: dict[str, Cell] = {}
    extra_before: dict[str, list[Cell]] = {}
    pending: list[Cell] = []
    master_free = {c.source.strip() for c in bundle.cells if c.role == "free"}
    wanted = {c.grade_id for c in bundle.cells if c.role == "solution"}
    for cell in submitted:
        if cell.cell_type != "code":
            continue
        if cell.role == "solution" and cell.grade_id in wanted:
            if cell.grade_id in solutions:
                notes.append(f"two cells have grade_id {cell.grade_id!r}: the later one, "
                             f"{cell.describe()}, is graded")
            solutions[cell.grade_id] = cell
            extra_before.setdefault(cell.grade_id, []).extend(pending)
            pending = []
        elif cell.role == "free" and cell.source.strip() and \
                cell.source.strip() not in master_free:
            pending.append(cell)
    program = []
    for entry in bundle.cells:
        if entry.cell_type != "code" or entry.role == "tests":
            continue
        if entry.role != "solution":
            program.append(_cell(entry))
            continue
        if entry.grade_id not in solutions:
            notes.append(f"the notebook has no solution cell with grade_id {entry.grade_id!r} "
                         f"(deleted, or its metadata changed?)")
            continue
        for extra in extra_before[entry.grade_id]:
            program.append(Cell(ADDED + extra.index, "code", extra.source, {}, extra.index))
        program.append(_cell(entry, solutions[entry.grade_id].source))
    if pending:
        notes.append(f"{len(pending)} cell{'s' * (len(pending) != 1)} after the last solution "
                     f"cell did not run (put helpers before the solution that uses them)")
    return program, notes


def _test_cell_notes(bundle: Bundle, submitted: list[Cell]) -> list[str]:
    master = {c.grade_id: c.source for c in bundle.cells if c.role in ("tests", "locked")}
    seen: dict[str, int] = {}
    changed = []
    for cell in submitted:
        if cell.grade_id in master and cell.role in ("tests", "locked"):
            seen[cell.grade_id] = seen.get(cell.grade_id, 0) + 1
            # (a released test cell lacks its hidden tests, so only given cells compare)
            if cell.role == "locked" and cell.source.strip() != master[cell.grade_id].strip():
                changed.append(cell.grade_id)
    missing = [g for g in master if g not in seen]
    notes = []
    if missing or changed or any(n > 1 for n in seen.values()):
        notes.append("test and given cells are the instructor's: edited, moved, copied or "
                     "deleted ones in the submission were not read")
    return notes


def _learner_dependent(bundle: Bundle, learner_names: set[str]) -> set[int]:
    """Given cells that use a learner's name, directly or through another such cell."""
    dependent: set[int] = set()
    names = set(learner_names)
    for entry in bundle.cells:
        if entry.cell_type == "code" and entry.role in ("locked", "free") and \
                used_names(entry.source) & names:
            dependent.add(entry.index)
            names |= defined_names(entry.source)
    return dependent


def grade_submission(path: Path, bundle: Bundle, isolation: str,
                     limits: sandbox.Limits) -> Judged:
    """Grade the notebook at `path` against `bundle`; never raises for a bad submission."""
    start = time.perf_counter()
    tests = [TestOutcome(cell.grade_id or "", name, FAILED, cell.points / len(cell.tests),
                         name in cell.hidden_tests)
             for cell in bundle.test_cells for name in cell.tests]
    try:
        submitted = read_submission(path)
    except (TeachflowError, OSError, ValueError) as error:
        why = error.message if isinstance(error, TeachflowError) else str(error)
        for test in tests:
            test.lines = [f"not graded: {why}"]
        return Judged(tests, [f"not graded: {why}"], time.perf_counter() - start)
    program, notes = worker_cells(bundle, submitted)
    notes += _test_cell_notes(bundle, submitted)
    scratch = Path(tempfile.mkdtemp(prefix="teachflow-judge-"))
    submission = Submission(program, isolation, limits, scratch)
    try:
        _run_tests(bundle, program, submission, tests)
    finally:
        submission.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return Judged(tests, notes, time.perf_counter() - start)


def _run_tests(bundle: Bundle, program: list[Cell], submission: Submission,
               tests: list[TestOutcome]) -> None:
    # The learner's names are those the *master's* answers define (whatever a submission
    # binds besides, np or pytest say, stays in the worker), and those of given cells that
    # use them; a name a trusted given cell binds is always the trusted one.
    answers = {name for entry in bundle.cells if entry.role == "solution"
               for name in entry.defines}
    dependent = _learner_dependent(bundle, answers)
    trusted = [_cell(e) for e in bundle.cells if e.cell_type == "code"
               and e.role in ("locked", "free") and e.index not in dependent]
    trusted_names = {name for cell in trusted for name in defined_names(cell.source)}
    remote_names = (answers | {name for entry in bundle.cells if entry.index in dependent
                               for name in defined_names(entry.source)}) - trusted_names
    cells = [*program, *(_cell(e) for e in bundle.test_cells)]
    runner = Runner(cells, fresh_namespace(trusted))
    for entry in bundle.cells:  # a solution cell defines what the master's does, whatever
        if entry.role == "solution" and entry.index in runner.defines:  # the learner wrote
            runner.defines[entry.index] |= frozenset(entry.defines)
    for cell in trusted:
        runner.run_cell(cell)
    try:
        submission.start()
        stopped = None
    except WorkerStopped as why:
        stopped = why.reason
    for index, (status, lines) in submission.failures.items():
        if index in runner.cells:
            cell = runner.cells[index]
            runner.failures[index] = CellFailure(cell, status, lines,
                                                 runner.defines.get(index, frozenset()))
    by_name = {(t.cell, t.name): t for t in tests}
    for entry in bundle.test_cells:
        cell = _cell(entry)
        if stopped is not None:
            result = TestCellResult(cell, FAILED, lines=[stopped])
        else:
            uses = used_names(entry.source) - defined_names(entry.source) - trusted_names
            _bind(runner.namespace, uses, remote_names, submission)
            result = runner.run_tests(cell, hidden=True)
        _record(entry, result, by_name)


def _bind(namespace: dict[str, Any], uses: set[str], remote_names: set[str],
          submission: Submission) -> None:
    """Bind the learner's names a test cell uses: plain values, or proxies. A built-in name
    (``abs``) is the grader's own unless the master's answer defines it."""
    for name in sorted(uses):
        if name in remote_names or (name not in namespace and not hasattr(builtins, name)):
            namespace.pop(name, None)
            # (a name the worker lacks: the test's NameError, or the failed cell, explains it)
            with contextlib.suppress(NameError, WorkerStopped):
                namespace[name] = submission.get((name,))


def _record(entry: BundleCell, result: TestCellResult,
            by_name: dict[tuple[str, str], TestOutcome]) -> None:
    grade_id = entry.grade_id or ""
    ran = {test.name: test for test in result.tests}
    for name in entry.tests:
        outcome = by_name[(grade_id, name)]
        test = ran.get(name)
        if test is not None:
            outcome.status = PASSED if test.status == PASSED else FAILED
            outcome.lines = [*(["not done yet:"] if test.status == NOT_DONE else []),
                             *test.lines]
            if test.output.strip() and test.status != PASSED:
                outcome.lines += ["it printed:", *test.output.rstrip().splitlines()[-20:]]
        else:
            outcome.status = FAILED
            outcome.lines = result.lines or ["the test did not run"]

