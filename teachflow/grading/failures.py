"""Why a test did not pass, in plain words: a failed assert, a stub, an error, and where.

A test fails in one of a few ways, and each gets the sentence a teaching assistant would say:

- an ``assert`` of the test is false: the assert, its line, and the values it compared
  (`teachflow.grading.asserts` kept them);
- ``np.testing.assert_allclose`` (or another helper) raised ``AssertionError``: its message,
  NumPy's two sides (``x`` and ``y``, or ``ACTUAL`` and ``DESIRED``) named for what they are,
  the value got and the value expected;
- the learner's function still raises ``NotImplementedError``: the exercise is *not done yet*,
  which is not the same as wrong;
- anything else raised an error: its type and message, the learner's line it came from, and
  the test's line that called it.

Lines of code are named by their cell (`Places`): ``cell 3 (grade_id 'softmax'), line 2`` for a
cell `check` ran, or ``cell In[7], line 2`` for a cell the learner ran in their kernel.
"""

from __future__ import annotations

import linecache
import os
import re
import traceback
from dataclasses import dataclass, field
from types import TracebackType

from teachflow.core.errors import SourceLocation, is_library_file
from teachflow.grading.asserts import AssertionFailure
from teachflow.grading.notebook import Cell

PASSED, FAILED, NOT_DONE = "passed", "failed", "not done yet"


@dataclass
class Places:
    """The notebook cells compiled so far, by the file name their code was compiled under.

    A cell a kernel ran was compiled under a file name of the kernel's (``cell In[7]``); a
    message names it by its place in the notebook all the same (``cell 12``), when its text is
    that of a cell of the saved notebook, so that one report never mixes the two."""

    cells: dict[str, Cell] = field(default_factory=dict)
    texts: dict[str, Cell] = field(default_factory=dict)

    def register(self, cell: Cell, source: str) -> str:
        """A file name for `cell`'s code, its lines kept for tracebacks and messages."""
        filename = f"<notebook cell {cell.index + 1}>"
        self.cells[filename] = cell
        for text in (source, cell.source):
            self.texts[text.strip()] = cell
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        return filename

    def where(self, filename: str, lineno: int) -> str:
        cell = self.cells.get(filename) or self.texts.get("".join(
            linecache.getlines(filename)).strip()) if filename else None
        if cell is not None:
            return f"{cell.describe()}, line {lineno}"
        return str(SourceLocation(filename, lineno))

    def line(self, filename: str, lineno: int) -> str:
        """``cell 3 (grade_id 'softmax'), line 2:  return x.exp()``."""
        text = linecache.getline(filename, lineno).strip()
        return f"{self.where(filename, lineno)}" + (f":  {text}" if text else "")

    def raised_in_notebook(self, error: BaseException, kind: type[BaseException]) -> bool:
        """Was `error` a `kind` raised by the notebook's own code (a stub's ``raise
        NotImplementedError()``), not by a library it called (IPython, NumPy)?"""
        frames = traceback.extract_tb(error.__traceback__)
        return isinstance(error, kind) and bool(frames) and (
            frames[-1].filename in self.cells or not is_library_file(frames[-1].filename))

    def user_frames(self, tb: TracebackType | None) -> list[traceback.FrameSummary]:
        """The frames of `tb` in notebook code, not in teachflow, pytest or another library."""
        return [frame for frame in traceback.extract_tb(tb)
                if frame.filename in self.cells or not (
                    is_library_file(frame.filename) or frame.filename.startswith(_PYTEST))]


def _test_machinery() -> tuple[str, ...]:
    """Where pytest and its plugin library live: their frames are not the notebook's."""
    import importlib.util

    found = (importlib.util.find_spec(name) for name in ("_pytest", "pluggy"))
    return tuple(os.path.dirname(spec.origin) + os.sep for spec in found
                 if spec is not None and spec.origin)


_PYTEST = _test_machinery()


def _indent(text: str) -> list[str]:
    return [f"  {line}".rstrip() for line in text.strip().splitlines() if line.strip()]


# np.testing names the two sides x and y (NumPy 1) or ACTUAL and DESIRED (NumPy 2).
_NUMPY_SIDES = ((re.compile(r"^ (x|ACTUAL): ", re.M), " got:      "),
                (re.compile(r"^ (y|DESIRED): ", re.M), " expected: "))


class SubmissionFailure(Exception):
    """Raised on the grader's side for what a submission's code did in its sandbox: the lines
    that explain it were written there (`teachflow.grading.remote`)."""

    def __init__(self, lines: list[str], status: str = FAILED) -> None:
        super().__init__(lines[0] if lines else "")
        self.lines, self.status = lines, status


def explain_failure(error: BaseException, places: Places, test_file: str) -> tuple[str, list[str]]:
    """The status (`FAILED` or `NOT_DONE`) and the lines that explain why a test failed.

    A stub's error that another error hides (``pytest.warns`` around a call of a stub
    fails "DID NOT WARN") is the reason: the exercise is not done yet."""
    stub = _stub_inside(error, places)
    if stub is not None and stub is not error:
        return explain_failure(stub, places, test_file)
    frames = places.user_frames(error.__traceback__)
    in_test = [f for f in frames if f.filename == test_file]
    if isinstance(error, SubmissionFailure):
        called = [f"called from the test at {places.line(test_file, in_test[-1].lineno or 0)}"
                  ] if in_test else []
        return error.status, [*error.lines, *called]
    if isinstance(error, AssertionFailure):
        return FAILED, [f"{places.where(test_file, error.lineno)}:  {error.statement}",
                        *error.details]
    if places.raised_in_notebook(error, NotImplementedError):
        source = next((f for f in reversed(frames) if f.filename != test_file), None)
        who = f"{source.name} " if source and source.name != "<module>" else ""
        lines = [f"{who}still raises NotImplementedError: write your solution in its place"]
        if source is not None:
            lines.append(f"at {places.line(source.filename, source.lineno or 0)}")
        return NOT_DONE, lines
    if isinstance(error, AssertionError):
        message = str(error)
        for pattern, name in _NUMPY_SIDES:
            message = pattern.sub(name, message)
        head = (f"at {places.line(test_file, in_test[-1].lineno or 0)}" if in_test
                else "an assertion failed")
        return FAILED, [head, *_indent(message or "AssertionError (no message)")]
    return FAILED, error_lines(error, places, test_file)


def _stub_inside(error: BaseException, places: Places) -> BaseException | None:
    """The stub's error among `error` and those it was raised while handling, if any."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if (isinstance(error, SubmissionFailure) and error.status == NOT_DONE) or \
                places.raised_in_notebook(error, NotImplementedError):
            return error
        error = error.__cause__ or error.__context__
    return None


def error_lines(error: BaseException, places: Places, test_file: str = "") -> list[str]:
    """An error raised by notebook code: its type and message, and the line it came from."""
    if isinstance(error, SyntaxError):
        lines = [f"SyntaxError: {error.msg} (line {error.lineno})"]
        if error.text:
            lines.append(f"  {error.text.strip()}")
        return lines
    lines = [f"{type(error).__name__}: {line}" if i == 0 else line
             for i, line in enumerate(str(error).splitlines() or [""])]
    frames = places.user_frames(error.__traceback__)
    if frames:
        lines.append(f"raised at {places.line(frames[-1].filename, frames[-1].lineno or 0)}")
    in_test = [f for f in frames if f.filename == test_file]
    if in_test and frames[-1] is not in_test[-1]:
        lines.append(f"called from the test at {places.line(test_file, in_test[-1].lineno or 0)}")
    if isinstance(error, ValueError) and "truth value of an array" in str(error):
        lines.append("(comparing arrays with == gives an array of booleans: a test compares "
                     "them with np.testing.assert_allclose(got, expected))")
    return lines


@dataclass(frozen=True)
class CellFailure:
    """A solution or given cell that did not run to its end, and the names it would define."""

    cell: Cell
    status: str
    lines: list[str]
    defines: frozenset[str]
    failed: str = "did not run"  # or, of a cell the kernel ran: "is broken in the saved file"

    def sentence(self) -> str:
        first = self.lines[0] if self.lines else ""
        if self.status == NOT_DONE:
            return f"{self.cell.describe()} is not done yet ({first})"
        return f"{self.cell.describe()} {self.failed}: {first}"
