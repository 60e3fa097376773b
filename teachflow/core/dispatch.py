"""`bind`: the one place where eager and staged execution part ways.

Every op application in teachflow, from ``a + b`` to ``tfl.softmax(x)`` to a gradient rule, ends
up here as ``bind(op, *args, **params)``. `bind` hands the op to the *current interpreter*:

- the eager interpreter (the default, `teachflow.tensor.eager`) runs the op's kernel right away
  and, if an input needs a gradient, records the op on the autodiff tape: define-by-run;
- a staging interpreter (installed while tracing) records the op as a node of a graph and returns
  a symbolic tensor: define-and-run.

Both use the same ops and the same kernels; they differ only in what `bind` does. That is the
central idea of the TensorFlow Eager paper and of JAX's Autodidax, and nothing else in teachflow
asks which mode it is in. (A tensor does know what it holds: values, or a `Value` of a graph that
has none yet. That decides how it prints and whether Python may branch on it or copy it, in any
mode: an eager tensor read inside a trace still prints its numbers.)

Programs also *change state*: ``p -= lr * g`` updates a tensor in place, ``loss.backward()``
fills ``.grad``, ``w.requires_grad = True`` marks a leaf, and ``tfl.tensor([...])`` makes a
tensor from data. Those go to the current interpreter too (`assign`, `read_grad`, `write_grad`,
`mark`, `lift`), and so does reading a tensor's values (`values`) or a Python flag that decides
what runs (`assume`): eagerly they happen at once;
while tracing, the graph builder records the changes, so that the graph can compute the new
state and the call can write it back, and refuses to read values, which exist only when the
graph runs (see `teachflow.tracing.builder`). A call of a staged function is the interpreter's
decision as well (`call`): eagerly its compiled graph runs, while tracing it is one node of the
trace (a graph function calling another).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol


class Interpreter(Protocol):
    """What an execution mode decides: how ops apply, and how state changes."""

    def apply(self, op: Any, args: tuple, params: dict) -> Any:
        """Apply `op` (what `bind` does)."""

    def assign(self, tensor: Any, value: Any) -> None:
        """Make `tensor` hold `value`'s values from now on (an in-place update)."""

    def read_grad(self, tensor: Any) -> Any:
        """``tensor.grad``."""

    def write_grad(self, tensor: Any, grad: Any) -> None:
        """``tensor.grad = grad``."""

    def lift(self, tensor: Any) -> Any:
        """A tensor just made from data (`tfl.tensor`), as this mode holds one."""

    def mark(self, tensor: Any, requires_grad: bool) -> None:
        """``tensor.requires_grad = requires_grad``."""

    def values(self, tensor: Any) -> Any:
        """The tensor's values as a NumPy array (``.numpy()``, ``.item()``, ``float()``)."""

    def operand(self, tensor: Any) -> Any:
        """The tensor as this mode's ops take it: eagerly itself; while tracing, a tensor from
        outside the trace becomes its stand-in (read when the graph runs)."""

    def assume(self, read: Callable[[], Any], what: str) -> Any:
        """A Python value outside the trace that decides what is computed (a module's
        ``training`` flag: `what` names it): eagerly it is simply read; while tracing, it is
        read now and again before each call of the graph, which is traced anew when the value
        changed (``model.eval()`` after a call must not keep running dropout)."""

    def call(self, function: Any, args: tuple, kwargs: dict) -> Any:
        """Call a staged function (`tfl.function`, or one of its concrete functions): eagerly
        its compiled graph runs (``function.run``); while tracing, it becomes one ``call``
        node of the trace, owning the callee's graph (``function.inline``)."""


#: The current interpreter. Only `interpreting` and `set_default_interpreter` change it; the
#: operators of a tensor read it themselves (see `teachflow.tensor.elementwise`).
current: Interpreter | None = None
_default: Interpreter | None = None  # the eager one, outside any `interpreting` block


def bind(op: Any, *args: Any, **params: Any) -> Any:
    """Apply `op` to `args` in the current execution mode."""
    return current.apply(op, args, params)


def call(function: Any, args: tuple, kwargs: dict) -> Any:
    """Call a staged function in the current execution mode."""
    return current.call(function, args, kwargs)


def current_interpreter() -> Interpreter:
    return current


@contextmanager
def interpreting(interpreter: Interpreter) -> Iterator[Interpreter]:
    """Run the body with `interpreter` deciding what `bind` does (e.g. while tracing)."""
    global current
    previous, current = current, interpreter
    try:
        yield interpreter
    finally:
        current = previous


def set_default_interpreter(interpreter: Interpreter) -> None:
    """Install the interpreter used outside any `interpreting` block (done once, at import)."""
    global current, _default
    current = _default = interpreter


def eagerly() -> AbstractContextManager[Interpreter]:
    """Run the body eagerly, even inside a trace: compiling a staged function that traced code
    calls runs that function's own passes, which must not join the trace around it."""
    return interpreting(_default)


# --- Building a graph by hand -------------------------------------------------------------------

#: Makes the interpreter that builds a graph by hand: the tracing one, which
#: `teachflow.tracing.builder` installs at import (as `teachflow.tensor.eager` installs the default
#: one).
_graph_builder: Callable[[Any], Interpreter] | None = None


def set_graph_builder(make: Callable[[Any], Interpreter]) -> None:
    """Install what interprets the ops inside ``with tfl.Graph():`` (done once, at import)."""
    global _graph_builder
    _graph_builder = make


def building(graph: Any) -> AbstractContextManager[Interpreter]:
    """``with graph:`` (TensorFlow 1's direct construction): ops applied in the body become
    nodes of `graph`."""
    return interpreting(_graph_builder(graph))
