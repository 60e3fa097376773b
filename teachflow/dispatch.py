"""`bind`: the one place where eager and staged execution part ways.

Every op application in teachflow, from ``a + b`` to ``tfl.softmax(x)`` to a gradient rule, ends
up here as ``bind(op, *args, **params)``. `bind` hands the op to the *current interpreter*:

- the eager interpreter (the default, `teachflow.eager`) runs the op's kernel right away and, if an
  input needs a gradient, records the op on the autodiff tape: define-by-run;
- a staging interpreter (installed while tracing) records the op as a node of a graph and returns
  a symbolic tensor: define-and-run.

Both use the same ops and the same kernels; they differ only in what `bind` does. That is the
central idea of the TensorFlow Eager paper and of JAX's Autodidax, and nothing else in teachflow
asks which mode it is in.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol


class Interpreter(Protocol):
    """What `bind` needs from an execution mode."""

    def apply(self, op: Any, args: tuple, params: dict) -> Any: ...


_interpreter: Interpreter | None = None


def bind(op: Any, *args: Any, **params: Any) -> Any:
    """Apply `op` to `args` in the current execution mode."""
    return _interpreter.apply(op, args, params)


def current_interpreter() -> Interpreter | None:
    return _interpreter


@contextmanager
def interpreting(interpreter: Interpreter) -> Iterator[Interpreter]:
    """Run the body with `interpreter` deciding what `bind` does (e.g. while tracing)."""
    global _interpreter
    previous, _interpreter = _interpreter, interpreter
    try:
        yield interpreter
    finally:
        _interpreter = previous


def set_default_interpreter(interpreter: Interpreter) -> None:
    """Install the interpreter used outside any `interpreting` block (done once, at import)."""
    global _interpreter
    _interpreter = interpreter
