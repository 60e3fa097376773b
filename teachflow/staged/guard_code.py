"""A trace's guards as generated Python: every assumption checked in one function.

`teachflow.tracing.guards` says what a trace assumes (`Guard`) and how to check one assumption
(`Guard.holds`). Checking them one at a time costs more than the work of a small step: a guard
finds its tensor again and follows its name link by link, through several calls each. As
TorchDynamo does, a trace's guards become lines of code instead, written by the executor's code
generator (`teachflow.execution.executor.Source`): each tensor found once, each name followed by
inline lookups, and the first assumption that fails returns. ``ConcreteFunction.guard_source``
shows them as one function, ``guards_hold(arguments)``, which the plain route of a call runs;
the fast path (`fast_path`) writes the same lines at the start of a whole call.
"""

from __future__ import annotations

from collections.abc import Callable

from teachflow.execution.executor import Line, Source
from teachflow.graph import Slot
from teachflow.tracing.guards import Guard
from teachflow.tracing.python_state import Path


def guards_function(guards: list[Guard], captured: list[Slot]) -> tuple[str, Callable]:
    """``guards_hold(arguments) -> bool``, checking every guard and that every tensor in
    `captured` still exists: its source, and the function."""
    source = Source()
    arguments = source.names.claim("arguments")
    code = GuardCode(source, arguments)
    lines = [(0, '"""Does everything the trace assumed about state still hold?"""', None)]
    for slot in captured:
        lines += code.find(slot)
    for guard in guards:
        lines += code.check(guard)
    return source.define(source.names.claim("guards_hold"), [arguments],
                         [*lines, (0, "return True", None)])


class GuardCode:
    """Writes the checks of guards into `source`, in a function whose parameter `arguments`
    names the call's tensors. A check that fails returns `fail` (a name in the source, or
    ``False``); a captured tensor, once found, is a local name of the source (`tensors`, by the
    slot's key); the objects the checks refer to are bound in its namespace (the tensors' weak
    references, the roots of names, expected values)."""

    def __init__(self, source: Source, arguments: str, fail: str = "False") -> None:
        self.source = source
        self.arguments = arguments
        self.fail = fail
        self.tensors: dict[int, str] = {}  # id of a captured tensor -> its local name
        self.grad: str | None = None  # the local name of a .grad being compared
        self.attr = source.helper("_attr", object.__getattribute__)

    def find(self, slot: Slot) -> list[Line]:
        """Lines that bind the slot's tensor to a local name, once (or fail if it is gone); an
        argument's tensor needs none: it is ``arguments[k]``."""
        if isinstance(slot.owner, int) or slot.key in self.tensors:
            return []
        name = self.tensors[slot.key] = self.source.names.claim(f"t{len(self.tensors)}")
        owner = self.source.bind("owner", slot.owner)
        return [(0, f"{name} = {owner}()  # {one_line(slot.name.removesuffix('.grad'))}", None),
                (0, f"if {name} is None:  # gone", None), (1, f"return {self.fail}", None)]

    def tensor(self, slot: Slot) -> tuple[list[Line], str]:
        """Lines that find the slot's tensor (if not found yet), and its name in the source."""
        lines = self.find(slot)
        if isinstance(slot.owner, int):
            return lines, f"{self.arguments}[{slot.owner}]"
        return lines, self.tensors[slot.key]

    def check(self, guard: Guard) -> list[Line]:
        """The lines that check `guard`."""
        fails: list[Line] = [(1, f"return {self.fail}", None)]
        if guard.what == "binding" and isinstance(guard.place, Path) and all(
                kind in ("item", "attr") for kind, _ in guard.place.steps):
            lines, tensor = self.tensor(guard.slot)
            reach = f"{self.source.bind('root', guard.place.root)}()"
            for kind, key in guard.place.steps:
                # (a str or an int is written as itself: its repr reads back as the same key)
                key_name = repr(key) if type(key) in (str, int) else self.source.bind("key", key)
                reach = f"{reach}[{key_name}]" if kind == "item" else \
                    f"{self.attr}({reach}, {key_name})"
            return [*lines,
                    (0, f"try:  # {one_line(guard.place.name)} still names the tensor traced",
                     None),
                    (1, f"if {reach} is not {tensor}:", None), (2, f"return {self.fail}", None),
                    (0, "except Exception:  # a link on the way is gone", None), *fails]
        if guard.what in ("requires_grad", "leaf", "grad") and guard.slot is not None:
            lines, tensor = self.tensor(guard.slot)
            if guard.what == "requires_grad":
                test = f"{tensor}.requires_grad is not {guard.expected!r}"
            elif guard.what == "leaf":
                test = f"({tensor}.requires_grad and {tensor}.is_leaf) is not {guard.expected!r}"
            elif guard.expected is None:
                test = f"{tensor}.grad is not None"
            else:
                spec = self.source.bind("spec", guard.expected)
                if self.grad is None:
                    self.grad = self.source.names.claim("g")
                test = f"({self.grad} := {tensor}.grad) is None or {self.grad}.spec != {spec}"
            return [*lines, (0, f"if {test}:  # {guard.what}: {one_line(guard.slot.name)}",
                             None), *fails]
        if guard.what == "aliases" and guard.expected == tuple(range(len(guard.expected))):
            ids = self.source.bind("ids", frozenset(id(t) for t in guard.place))
            count = len(guard.expected)
            return [(0, "# no two of the arguments and captured tensors are one tensor", None),
                    (0, f"if len({{*map(id, {self.arguments}), *{ids}}}) != {count}:", None),
                    *fails]
        # Anything else (an assumption about a Python value, tensors that were one and the same
        # when traced): asked of the guard itself.
        name = self.source.bind("guard", guard)
        return [(0, f"if not {name}.holds({self.arguments}):  # {guard.what}", None), *fails]


def one_line(text: str) -> str:
    """`text` on one line, for a comment of the generated source."""
    return " ".join(text.split())

