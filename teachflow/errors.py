"""Errors a learner can act on.

Every error teachflow raises on purpose is a `TeachflowError`. Its message names the op, describes
the operands (shape, dtype, device), points at the line of *your* code that called the op (not at
teachflow's internals), and says what to do. The pieces stay available as attributes (`op`,
`operands`, `location`, `hint`) for tools such as the grader, and an underlying NumPy/CuPy error
is kept as `__cause__`, so nothing is lost.

The subclasses also derive from the matching built-in exception (`ShapeError` is a `ValueError`,
`DTypeError` a `TypeError`, ...) so code written against NumPy's exceptions keeps working.
"""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


@dataclass(frozen=True)
class SourceLocation:
    """A line of user code: where an op was called from."""

    filename: str
    lineno: int
    function: str = ""
    note: str = ""  # e.g. "grad of tanh": this line's op, differentiated

    @property
    def line(self) -> str:
        """The source text of the line, stripped (empty when the source is unavailable)."""
        return linecache.getline(self.filename, self.lineno).strip()

    def __str__(self) -> str:
        cell = _notebook_cell(self.filename)
        where = (f"cell In[{cell}], line {self.lineno}" if cell is not None
                 else f"{os.path.basename(self.filename)}:{self.lineno}")
        return f"{where} ({self.note})" if self.note else where


def _notebook_cell(filename: str) -> int | None:
    """The execution count of the notebook cell compiled to `filename`, if it is one."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    filename_map = getattr(getattr(shell, "compile", None), "_filename_map", None)
    return filename_map.get(filename) if isinstance(filename_map, dict) else None


# Frames in teachflow (its files, and the code it generates: executors and fused kernels, named
# "<teachflow ...>"), in Python's standard library (copy.copy, functools) and in the array
# libraries teachflow calls are not the learner's code.
_NOT_USER_CODE = (_PACKAGE_DIR, "<frozen ", "<teachflow ")
_ARRAY_LIBRARIES = tuple(f"{os.sep}{lib}{os.sep}" for lib in ("numpy", "cupy", "cupyx"))
_STDLIB_DIRS = tuple({os.path.abspath(sysconfig.get_paths()[key]) + os.sep
                      for key in ("stdlib", "platstdlib")})
_INSTALLED = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


def _is_internal(frame: FrameType) -> bool:
    filename = frame.f_code.co_filename
    if filename.startswith("<"):  # compiled from a string: by teachflow, or by a module of it
        return filename.startswith(_NOT_USER_CODE) or (  # (a dataclass's __init__, "<string>")
            frame.f_globals.get("__name__", "").startswith("teachflow."))
    filename = os.path.abspath(filename)
    if filename.startswith(_NOT_USER_CODE) or any(lib in filename for lib in _ARRAY_LIBRARIES):
        return True
    # The standard library itself, not what is installed under it.
    return filename.startswith(_STDLIB_DIRS) and not any(d in filename for d in _INSTALLED)


def user_frame() -> FrameType | None:
    """The innermost frame of user code on the stack (None when there is none)."""
    frame = sys._getframe(1)
    while frame is not None and _is_internal(frame):
        frame = frame.f_back
    return frame


#: While a gradient rule runs for an op the user wrote, the ops it applies belong to that line.
_on_behalf_of: SourceLocation | None = None


def user_location() -> SourceLocation | None:
    """The innermost frame on the stack that belongs to user code, not to teachflow.

    Walking the stack costs microseconds, so teachflow only does it when it needs the answer:
    while building an error message, or (in staged mode) when recording a node.
    """
    if _on_behalf_of is not None:
        return _on_behalf_of
    frame = user_frame()
    if frame is None:
        return None
    return SourceLocation(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


@contextmanager
def on_behalf_of(location: SourceLocation | None) -> Iterator[None]:
    """Attribute the ops applied inside to `location` (used while a gradient rule runs)."""
    global _on_behalf_of
    previous, _on_behalf_of = _on_behalf_of, location
    try:
        yield
    finally:
        _on_behalf_of = previous


def user_stacklevel() -> int:
    """The `stacklevel` for `warnings.warn` that points at the learner's line."""
    frame, level = sys._getframe(1), 1
    while frame is not None and _is_internal(frame):
        frame, level = frame.f_back, level + 1
    return level


class TeachflowError(Exception):
    """Base class of every error teachflow raises on purpose.

    Args:
        message: what went wrong, in one or two plain sentences.
        op: the op (by name) that refused its operands, if any.
        operands: descriptions of the operands, e.g. ``"a: float32[3, 4] on cpu"``.
        hint: what to do about it.
        location: the user's source line; found on the stack when not given.
    """

    def __init__(
        self,
        message: str,
        *,
        op: str | None = None,
        operands: tuple[str, ...] = (),
        hint: str | None = None,
        location: SourceLocation | None = None,
    ) -> None:
        self.message = message
        self.op = op
        self.operands = tuple(operands)
        self.hint = hint
        self.location = location if location is not None else user_location()
        super().__init__(self._render())

    def _render(self) -> str:
        head = f"{self.op}: {self.message}" if self.op else self.message
        lines = [head]
        if self.location is not None:
            where = f"  at {self.location}"
            if self.location.line:
                where += f":  {self.location.line}"
            lines.append(where)
        if self.operands:
            lines.append("  operands: " + ", ".join(self.operands))
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)


class ShapeError(TeachflowError, ValueError):
    """Operand shapes that an op cannot combine (broadcasting, matmul, reshape, ...)."""


class IndexingError(ShapeError, IndexError):
    """An index that does not fit the tensor it indexes."""


class DTypeError(TeachflowError, TypeError):
    """An operand of a dtype (or Python type) the op does not accept."""


class DeviceError(TeachflowError, RuntimeError):
    """Operands on different devices, or a device that is not usable here."""


class TraceError(TeachflowError):
    """Something tracing cannot record, such as Python control flow on a traced value."""


class GradingError(TeachflowError):
    """A problem with an exercise or its grading, as opposed to with a learner's answer."""


class AutodiffError(TeachflowError):
    """A gradient that cannot be computed as asked (a non-scalar output, no tracked input, ...)."""


def expect_callable(fn: object, op: str, example: str) -> None:
    """`fn` must be callable (a function, a method, a module...): a clear error where it is not
    (``tfl.grad(None)``, ``tfl.function(f())`` with f's result instead of f)."""
    if not callable(fn):
        raise DTypeError(f"{op} takes a function, not {type(fn).__name__} {fn!r:.60}", op=op,
                         hint=f"pass the function itself, without calling it: {example}")
