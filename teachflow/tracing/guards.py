"""What a trace assumes about state outside its graph, checked before every call.

A traced graph reads state it does not own (captured tensors, ``.grad``s) and decides some
things once, while tracing: whether a ``.grad`` was None, which tensors required grad, whether
a name still names the tensor it found. Each such assumption is a `Guard`; a call whose guards
do not all hold runs another trace, and `Guard.reason` says in words what changed. Before a
call, the guards are checked all at once, in generated code (`teachflow.staged.guard_code`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from teachflow.core.spec import TensorSpec
from teachflow.graph import Slot, StateGone


@dataclass(frozen=True)
class Guard:
    """Something about state outside the graph that a trace assumed, checked at every call:

    - "grad": whether a ``.grad`` was None (`expected`: its spec, or None);
    - "requires_grad": whether a tensor required grad (which decides what backward() writes);
    - "leaf": whether a tensor the function updates in place is a leaf that requires grad
      (updating one is refused, eagerly and so while tracing);
    - "binding": whether the name the code found a captured tensor by still names it (`place`:
      the `surroundings.Path` to it, followed again link by link: ``W = tfl.tensor(...)`` or
      ``model = Model()`` between calls rebinds a name, and the graph must read the new tensor);
    - "aliases": which of the arguments and captured tensors (`place`) are one and the same
      tensor (`expected`: for each, the first position of the same tensor): one tensor under
      two names is one stand-in in the trace, as it is one tensor eagerly;
    - "assumption": a Python value that decided what was traced (`place`: how to read it again,
      and its name), such as a module's ``training`` flag (``Dropout`` traces a random mask
      only in training)."""

    slot: Slot | None
    what: str
    expected: Any
    place: Any = None

    def observe(self, arguments: Any) -> Any:
        if self.what == "assumption":
            return self.place[0]()
        if self.what == "aliases":
            first: dict[Any, int] = {}  # a tensor -> its first position
            return tuple(first.setdefault(t, k)
                         for k, t in enumerate([*arguments, *self.place]))
        tensor = self.slot.tensor(arguments)
        if self.what == "binding":
            return self.place.holds(tensor)
        if self.what == "requires_grad":
            return tensor.requires_grad
        if self.what == "leaf":
            return tensor.requires_grad and tensor.is_leaf
        grad = tensor.grad
        return None if grad is None else grad.spec

    def holds(self, arguments: Any) -> bool:
        try:
            return self.observe(arguments) == self.expected
        except StateGone:  # a tensor the trace read is gone: nothing about it can hold
            return False

    def reason(self, arguments: Any) -> str:
        """Why it does not hold, in words."""
        try:
            now = self.observe(arguments)
        except StateGone as gone:
            if self.what != "binding":
                return gone.message
            now = False  # the tensor traced is gone: its name (if any) names another
        if self.what == "assumption":
            return f"{self.place[1]} was {self.expected!r} when traced, now {now!r}"
        if self.what == "aliases":
            return ("the arguments (and captured tensors) that are one and the same tensor are "
                    "not the ones that were when traced")
        if self.what == "binding":
            return (f"{self.slot.name} now names another tensor than the one traced (it was "
                    "rebound, not updated in place)")
        if self.what == "requires_grad":
            return (f"{self.slot.name}.requires_grad was {self.expected} when traced, now {now} "
                    "(backward() fills the .grad of tensors that require grad)")
        if self.what == "leaf":
            was = "a leaf that requires grad" if self.expected else "not a leaf that requires grad"
            return (f"{self.slot.name}, which the function updates in place, was {was} when "
                    "traced, and is not now (such a leaf may be updated only under no_grad)")
        def show(spec: TensorSpec | None) -> str:
            return "None" if spec is None else f"a {spec} gradient"
        return (f"{self.slot.name} was {show(self.expected)} when traced, now {show(now)} "
                "(backward() adds to a .grad that holds a gradient)")
