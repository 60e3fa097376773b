"""What a trace assumes about state outside its graph, checked before every call.

A traced graph reads state it does not own (captured tensors, ``.grad``s) and decides some
things once, while tracing: whether a ``.grad`` was None, which tensors required grad, whether
a name still names the tensor it found. Each such assumption is a `Guard`; a call whose guards
do not all hold runs another trace, and `Guard.reason` says in words what changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from teachflow.core.spec import TensorSpec
from teachflow.graph import Slot, StateGone
from teachflow.tracing.python_state import Path


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


# --- All guards as one generated function -------------------------------------------------------
# Checking guards one `Guard.holds` at a time costs more than the work of a small step (a guard
# finds its tensor again, and follows its name link by link, through several calls each). As
# TorchDynamo does, a trace's guards become the source of one function: each tensor is found
# once, each name followed by inline lookups, and the first assumption that fails returns False.
# `ConcreteFunction.guard_source` shows it.


def guard_source(guards: list[Guard], captured: list[Slot]) -> tuple[str, dict[str, Any]]:
    """The source of ``guards_hold(arguments)`` checking every guard and that every tensor in
    `captured` still exists, and the names its source refers to (the tensors' weak references,
    the roots of names, expected values)."""
    writer = GuardWriter()
    lines = []
    for slot in captured:
        lines += writer.find(slot)
    for guard in guards:
        lines += writer.check(guard)
    body = [*lines, "return True"]
    text = "\n".join(["def guards_hold(arguments):",
                      '    """Does everything the trace assumed about state still hold?"""',
                      *[f"    {line}" for line in body], ""])
    return text, writer.namespace


def compile_guards(guards: list[Guard], captured: list[Slot]) -> Any:
    """`guard_source`, compiled: ``guards_hold(arguments) -> bool``."""
    text, namespace = guard_source(guards, captured)
    exec(compile(text, "<teachflow guards>", "exec"), namespace)  # (generated from the guards)
    return namespace["guards_hold"]


class GuardWriter:
    """Writes the checks; `namespace` holds every object the source names. A check that fails
    returns `fail` (a name in the namespace, or ``False``); a captured tensor, once found, is
    a local named in `tensors` (by the slot's key)."""

    def __init__(self, fail: str = "False") -> None:
        self.fail = fail
        self.namespace: dict[str, Any] = {"_attr": object.__getattribute__,
                                          "__name__": "teachflow.tracing.guards.generated"}
        self.tensors: dict[int, str] = {}  # id of a captured tensor -> its local name

    def constant(self, prefix: str, value: Any) -> str:
        name = f"{prefix}{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def find(self, slot: Slot) -> list[str]:
        """Lines that bind the slot's tensor to a local name, once (or return False if it is
        gone); an argument's tensor needs none: it is ``arguments[k]``."""
        if isinstance(slot.owner, int) or slot.key in self.tensors:
            return []
        name = self.tensors[slot.key] = f"t{len(self.tensors)}"
        owner = self.constant("owner", slot.owner)
        return [f"{name} = {owner}()  # {one_line(slot.name.removesuffix('.grad'))}",
                f"if {name} is None:  # gone", f"    return {self.fail}"]

    def tensor(self, slot: Slot) -> tuple[list[str], str]:
        """Lines that find the slot's tensor (if not found yet), and its name in the source."""
        lines = self.find(slot)
        if isinstance(slot.owner, int):
            return lines, f"arguments[{slot.owner}]"
        return lines, self.tensors[slot.key]

    def check(self, guard: Guard) -> list[str]:
        fails = [f"    return {self.fail}"]
        if guard.what == "binding" and isinstance(guard.place, Path) and all(
                kind in ("item", "attr") for kind, _ in guard.place.steps):
            lines, tensor = self.tensor(guard.slot)
            reach = f"{self.constant('root', guard.place.root)}()"
            for kind, key in guard.place.steps:
                # (a str or an int is written as itself: its repr reads back as the same key)
                key_name = repr(key) if type(key) in (str, int) else self.constant("key", key)
                reach = f"{reach}[{key_name}]" if kind == "item" else f"_attr({reach}, {key_name})"
            return [*lines, f"try:  # {one_line(guard.place.name)} still names the tensor traced",
                    f"    if {reach} is not {tensor}:", f"        return {self.fail}",
                    "except Exception:  # a link on the way is gone", *fails]
        if guard.what in ("requires_grad", "leaf", "grad") and guard.slot is not None:
            lines, tensor = self.tensor(guard.slot)
            if guard.what == "requires_grad":
                test = f"{tensor}.requires_grad is not {guard.expected!r}"
            elif guard.what == "leaf":
                test = f"({tensor}.requires_grad and {tensor}.is_leaf) is not {guard.expected!r}"
            elif guard.expected is None:
                test = f"{tensor}.grad is not None"
            else:
                spec = self.constant("spec", guard.expected)
                test = f"(g := {tensor}.grad) is None or g.spec != {spec}"
            return [*lines, f"if {test}:  # {guard.what}: {one_line(guard.slot.name)}", *fails]
        if guard.what == "aliases" and guard.expected == tuple(range(len(guard.expected))):
            ids = self.constant("ids", frozenset(id(t) for t in guard.place))
            count = len(guard.expected)
            return ["# no two of the arguments and captured tensors are one tensor",
                    f"if len({{*map(id, arguments), *{ids}}}) != {count}:", *fails]
        # Anything else (an assumption about a Python value, tensors that were one and the same
        # when traced): asked of the guard itself.
        name = self.constant("guard", guard)
        return [f"if not {name}.holds(arguments):  # {guard.what}", *fails]


def one_line(text: str) -> str:
    """`text` on one line, for a comment of the generated source."""
    return " ".join(text.split())
