"""State outside the graph: what a capture reads, and where an update writes.

A graph is pure: it computes values from values. Yet a traced function may read state that lives
outside it (a model's weights, a tensor's ``.grad``), and may *update* state (``p -= lr * g``,
``t[i] = v``, ``loss.backward()`` filling ``.grad``). The graph reads such state through a
*capture*, a value standing for a `Slot`, at every run. An update is *functionalised*, as
``torch.compile`` does: the graph computes the new values as extra outputs, and its updates
(`Update`) say which slot each goes to; whoever runs the graph writes them back afterwards. The
text form shows them as ``%w <- %9`` after the ``return`` line.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from teachflow.core.errors import TraceError


class StateGone(TraceError):
    """A graph reads a captured tensor that no longer exists (its name was rebound, or it was
    deleted): the trace that read it cannot run any more."""


class Slot:
    """State outside the graph: the values (``attr="data"``) or the gradient (``attr="grad"``) of
    a tensor that the traced code captured, or of its argument number `owner` (an int: which
    tensor that is, is known only at each call). A capture reads a slot; an `Update` writes one.

    A traced function refers to a captured tensor *weakly*: the tensor belongs to the user's
    code (a global, a model's attribute), and once that code lets go of it (``W = new_W``), no
    call could read it again, so keeping it would only keep its memory. A graph built by hand
    (``with tfl.Graph():``) holds its captured tensors, as a TensorFlow graph holds its
    variables (`hold`)."""

    __slots__ = ("attr", "key", "name", "owner")

    def __init__(self, owner: Any, attr: str, name: str, hold: bool = False) -> None:
        if isinstance(owner, int):
            self.owner, self.key = owner, owner
        else:
            self.owner = (lambda: owner) if hold else weakref.ref(owner)
            self.key = id(owner)  # (for finding the capture of a tensor while building)
        self.attr = attr
        self.name = name  # as the text form prints it: "w", "w.grad", "x.grad"

    def tensor(self, arguments: Sequence[Any] = ()) -> Any:
        """The tensor whose state this is (an argument is looked up among `arguments`)."""
        if isinstance(self.owner, int):
            return arguments[self.owner]
        tensor = self.owner()
        if tensor is None:
            raise StateGone(
                f"{self.name}, a tensor the traced code read from outside, no longer exists "
                "(the name that held it was rebound, or it was deleted)", op="function",
                hint="trace again, for the tensors there are now (a tfl.function does so "
                     "when called; a Compilation is made again with tfl.compile)")
        return tensor

    @property
    def alive(self) -> bool:
        return isinstance(self.owner, int) or self.owner() is not None

    def read(self, arguments: Sequence[Any] = ()) -> Any:
        """The state now: the tensor itself, or its ``.grad`` (a tensor, or None)."""
        tensor = self.tensor(arguments)
        return tensor if self.attr == "data" else tensor.grad

    def __repr__(self) -> str:
        return f"<Slot {self.name}>"


@dataclass(frozen=True)
class Update:
    """A write-back: after the graph runs, the state `slot` takes the value of the graph's output
    number `output`, or becomes None (``p.grad = None``) when `output` is None."""

    slot: Slot
    output: int | None
