"""Judging a notebook: the learner's program in a worker, the tests on the trusted side.

`run_exercise` is the one route of ``teachflow check`` and ``teachflow grade``: it runs an
exercise's test cells, each at its place, against a `Submission` whose worker runs the
learner's program (`teachflow.grading.submission`). Grading gives it a sandboxed worker and the
master's bundle with every test; a check gives it a worker of the learner's own (or their
kernel) and the notebook's own visible tests. The same runner, the same proxies and the same
messages serve both, so a test cannot pass in a check and fail when graded.

`grade_submission` reads the submitted notebook as JSON (never running it here) and builds
the worker's program from it and the bundle (`worker_cells`): the master's code cells in the
master's order, where

- a given (``locked``) or unmarked cell is the bundle's text, never the submission's;
- a solution cell is the submission's cell with the same ``grade_id`` wherever the learner
  moved it (the last one, if the learner copied it; a missing one defines nothing);
- a cell the learner added (unmarked code of their own, say a helper or scratch work) runs
  just after the master's cell it follows in the submission;
- test cells are left out: they run on the trusted side only.

The trusted side runs the bundle's given cells that do not use the learner's names, and each
test cell, hidden tests included, with the learner's names bound to
`teachflow.grading.remote.Remote` proxies (or to their values, when those are plain data). A
given cell that uses a learner's name (``model = make_model()``) runs beside the learner's
code in the worker, and its names are proxies too. A test cell that needs a name the worker
lacks, that only a failed solution cell defines, is explained by that cell's failure. Each
test function starts from fixed seeds on both sides (`teachflow.grading.seeds`), and is worth
its share of its cell's points (`teachflow.grading.credit`).

Everything the submission holds is untrusted: a file that is not JSON or not a notebook, test
or given cells edited, removed, reordered or duplicated (their text is not read at all) are
reported in the result's notes, and the score is the trusted side's alone.
"""

from __future__ import annotations

import bisect
import builtins
import contextlib
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teachflow.core.errors import TeachflowError
from teachflow.grading import credit, remote, sandbox, seeds
from teachflow.grading.bundle import Bundle, BundleCell
from teachflow.grading.cells import defined_names, used_names
from teachflow.grading.failures import FAILED, NOT_DONE, PASSED, CellFailure
from teachflow.grading.notebook import Cell, cells_of, read_notebook
from teachflow.grading.runner import TestCellResult, TestRunner, fresh_namespace
from teachflow.grading.submission import ProcessChannel, Submission, WorkerStopped

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
    own: list[str] = field(default_factory=list)  # about the learner's code alone

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


def worker_cells(bundle: Bundle,
                 submitted: list[Cell]) -> tuple[list[tuple[float, Cell]], list[str]]:
    """The worker's program (see the module's docstring) as (slot, cell) in the order it runs,
    and notes on what was not taken. A slot is the master's place a cell runs at: a learner's
    own cell runs just after the master's cell it follows in the submission."""
    notes = []
    master = {c.grade_id: c.index for c in bundle.cells if c.grade_id}
    free = {c.source.strip(): c.index for c in bundle.cells
            if c.role == "free" and c.cell_type == "code"}
    wanted = {c.grade_id for c in bundle.cells if c.role == "solution"}
    solutions: dict[str, Cell] = {}
    added: list[tuple[float, Cell]] = []
    anchor = -1  # the master's place of the last master cell met in the submission
    for cell in submitted:
        if cell.role == "solution" and cell.grade_id in wanted:
            if cell.grade_id in solutions:
                notes.append(f"two cells have grade_id {cell.grade_id!r}: the later one, "
                             f"{cell.describe()}, is graded")
            solutions[cell.grade_id] = cell
            anchor = master[cell.grade_id]
        elif cell.role in ("tests", "locked") and cell.grade_id in master:
            anchor = master[cell.grade_id]
        elif cell.cell_type == "code" and cell.source.strip() in free:
            anchor = free[cell.source.strip()]
        elif cell.cell_type == "code" and cell.role == "free" and cell.source.strip():
            added.append((anchor + 0.5, Cell(ADDED + cell.index, "code", cell.source, {},
                                             cell.index)))
    program: list[tuple[float, Cell]] = []
    for entry in bundle.cells:
        if entry.cell_type != "code" or entry.role == "tests":
            continue
        if entry.role != "solution":
            program.append((entry.index, _cell(entry)))
        elif entry.grade_id in solutions:
            program.append((entry.index, _cell(entry, solutions[entry.grade_id].source)))
        else:
            notes.append(f"the notebook has no solution cell with grade_id {entry.grade_id!r} "
                         f"(deleted, or its metadata changed?)")
    return sorted([*program, *added], key=lambda pair: pair[0]), notes  # (stable)


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


def _outcomes(bundle: Bundle) -> list[TestOutcome]:
    """Every test of the bundle, failed until it runs and passes, with its share of its cell's
    points (`teachflow.grading.credit`)."""
    return [TestOutcome(cell.grade_id or "", name, FAILED, points, name in cell.hidden_tests)
            for cell in bundle.test_cells
            for name, points in credit.test_points(cell.points, cell.tests,
                                                   cell.source).items()]


def not_graded(bundle: Bundle, why: str, seconds: float = 0.0) -> Judged:
    """A submission that could not be graded, for `why`: every test failed, saying so."""
    tests = _outcomes(bundle)
    for test in tests:
        test.lines = [f"not graded: {why}"]
    return Judged(tests, [f"not graded: {why}"], seconds)


def grade_submission(path: Path, bundle: Bundle, isolation: str,
                     limits: sandbox.Limits) -> Judged:
    """Grade the notebook at `path` against `bundle`; never raises for a bad submission."""
    start = time.perf_counter()
    try:
        submitted = read_submission(path)
    except (TeachflowError, OSError, ValueError) as error:
        why = error.message if isinstance(error, TeachflowError) else str(error)
        return not_graded(bundle, why, time.perf_counter() - start)
    tests = _outcomes(bundle)
    program, notes = worker_cells(bundle, submitted)
    notes += _test_cell_notes(bundle, submitted)
    with tempfile.TemporaryDirectory(prefix="teachflow-judge-",
                                     ignore_cleanup_errors=True) as scratch:
        cwd = str(path.resolve().parent) if isolation == "local" else None
        submission = Submission([cell for _, cell in program],
                                lambda: ProcessChannel(isolation, limits, cwd), limits,
                                Path(scratch))
        try:
            results = run_exercise(bundle, program, submission, hidden=True)
        finally:
            submission.close()
    by_name = {(t.cell, t.name): t for t in tests}
    for entry, result in results:
        _record(entry, result, by_name)
    cells = {cell.index: cell for _, cell in program}
    notes += [f"{cells[index].describe()} did not run to its end: {lines[0]}"
              for index, (status, lines) in sorted(submission.failures.items())
              if index in cells and status == FAILED and lines]
    return Judged(tests, notes, time.perf_counter() - start)


def run_exercise(bundle: Bundle, program: list[tuple[float, Cell]], submission: Submission,
                 hidden: bool, kernel: bool = False) -> list[tuple[BundleCell, TestCellResult]]:
    """Run the exercise's test cells at their places against `submission`, whose worker runs
    `program` (`worker_cells`): the one route of ``teachflow check`` and ``teachflow grade``.
    `hidden`: run the hidden tests too; `kernel`: the worker is the learner's kernel, whose
    cells ran already (``tfl.grading.check()``)."""
    # The learner's names are those the *master's* answers define (whatever a submission
    # binds besides, np or pytest say, stays in the worker), and those of given cells that
    # use them; a name a trusted given cell binds is always the trusted one.
    answers = {name for entry in bundle.cells if entry.role == "solution"
               for name in entry.defines}
    dependent = _learner_dependent(bundle, answers)
    trusted = [e for e in bundle.cells if e.cell_type == "code"
               and e.role in ("locked", "free") and e.index not in dependent]
    trusted_names = {name for entry in trusted for name in defined_names(entry.source)}
    remote_names = (answers | {name for entry in bundle.cells if entry.index in dependent
                               for name in defined_names(entry.source)}) - trusted_names
    cells = [*(cell for _, cell in program), *(_cell(e) for e in bundle.test_cells)]
    runner = TestRunner(cells, fresh_namespace([_cell(e) for e in trusted]), kernel)
    runner.before_test = lambda: _seed_both_sides(submission)
    for entry in bundle.cells:  # a solution cell defines what the master's does, whatever
        if entry.role == "solution" and entry.index in runner.defines:  # the learner wrote
            runner.defines[entry.index] |= frozenset(entry.defines)
    slots = [slot for slot, _ in program]
    trusted_at = {entry.index for entry in trusted}
    results = []
    for entry in bundle.cells:
        if entry.index in trusted_at:
            runner.run_cell(_cell(entry))
        elif entry.role == "tests":
            submission.run_to(bisect.bisect_left(slots, entry.index))
            for index, (status, lines) in submission.failures.items():
                if index in runner.cells and index not in runner.failures:
                    runner.failures[index] = CellFailure(
                        runner.cells[index], status, lines, runner.defines.get(index,
                                                                                frozenset()),
                        "is broken in the saved file" if kernel else "did not run")
            uses = used_names(entry.source) - defined_names(entry.source) - trusted_names
            bound = {name for names in submission.bound.values() for name in names}
            _bind(runner.namespace, uses, remote_names, bound, submission)
            results.append((entry, runner.run_tests(_cell(entry), hidden=hidden)))
    return results


def _seed_both_sides(submission: Submission) -> None:
    """Each test starts from fixed seeds, here and in the worker (`seeds`)."""
    seeds.seed_everything(seeds.SEED)
    submission.seed(seeds.SEED)


def _bind(namespace: dict[str, Any], uses: set[str], remote_names: set[str], bound: set[str],
          submission: Submission) -> None:
    """Bind the learner's names a test cell uses: plain values, or proxies. A name of the
    learner's answers is bound only where a cell that ran bound it (in a kernel, a cell broken
    in the saved file binds nothing, whatever the kernel still holds); a built-in name
    (``abs``) is the grader's own unless the master's answer defines it."""
    for name in sorted(uses):
        if name in remote_names or (name not in namespace and not hasattr(builtins, name)):
            namespace.pop(name, None)
            if name in remote_names and name not in bound:
                continue  # (the failed or missing cell explains it)
            # (a name the worker lacks: the test's NameError, or the failed cell, explains it)
            with contextlib.suppress(NameError, WorkerStopped):
                namespace[name] = remote.get(submission, (name,))


def _record(entry: BundleCell, result: TestCellResult,
            by_name: dict[tuple[str, str], TestOutcome]) -> None:
    grade_id, where = entry.grade_id or "", _cell(entry).describe()
    ran = {test.name: test for test in result.tests}
    for name in entry.tests:
        outcome = by_name[(grade_id, name)]
        test = ran.get(name)
        if test is not None:
            outcome.status = PASSED if test.status == PASSED else FAILED
            outcome.lines = [*(["not done yet:"] if test.status == NOT_DONE else []),
                             *test.lines]
            outcome.own = test.own
            if test.output.strip() and test.status != PASSED:
                outcome.lines += ["it printed:", *test.output.rstrip().splitlines()[-20:]]
        else:
            outcome.status = FAILED
            outcome.lines = result.lines or ["the test did not run"]
        if outcome.status != PASSED and not any(where in line for line in outcome.lines):
            outcome.lines.append(f"(the test is in {where})")  # every failure names its cell

