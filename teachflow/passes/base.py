"""What a pass is: a pure function from a graph to a graph, plus a record of what it changed.

A pass never edits the graph it is given. It clones it, rewrites the clone, and returns it with a
list of `Change`s: one per thing it did, each naming the nodes involved, the rule in plain words
(``"x*1 -> x"``) and a sentence for the learner. Node ids are kept by every pass, so a node can
be followed from the trace to the final kernel; a node a pass creates gets a fresh id and a
`lineage` listing the original nodes it stands for.

A learner's own pass plugs in the same way: a plain function ``Graph -> Graph`` (its changes are
worked out by comparing node ids before and after), or any object with a ``run`` method that
returns a graph, or a graph and its changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from teachflow.errors import TeachflowError
from teachflow.graph import Graph, format_node

KINDS = ("added", "removed", "replaced", "merged", "fused")


@dataclass(frozen=True)
class Change:
    """One thing a pass did.

    ``nodes`` are the ids it acted on (in the graph it was given), ``result`` the ids that stand
    for them afterwards (in the graph it returned; empty when they were simply removed).
    """

    kind: str
    nodes: tuple[int, ...]
    result: tuple[int, ...]
    rule: str
    sentence: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"change kind must be one of {KINDS}, not {self.kind!r}")


class Pass(Protocol):
    """Anything with a name whose ``run`` maps a graph to a graph and its changes."""

    name: str

    def run(self, graph: Graph) -> tuple[Graph, list[Change]]: ...


class BuiltinPass:
    """Base of teachflow's own passes: ``run`` clones the graph itself and says what it did."""

    name = "pass"

    def run(self, graph: Graph) -> tuple[Graph, list[Change]]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<pass {self.name}>"


class FunctionPass:
    """A pass written as ``def my_pass(graph) -> graph`` (or returning ``(graph, changes)``)."""

    def __init__(self, fn: Callable[[Graph], Any], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "name", None) or getattr(fn, "__name__", "pass")

    def run(self, graph: Graph) -> tuple[Graph, list[Change]]:
        result = self.fn(graph.clone())  # a clone: the learner's code may edit what it gets
        changes = None
        if isinstance(result, tuple) and len(result) == 2:
            result, changes = result
        if not isinstance(result, Graph):
            raise TeachflowError(f"pass {self.name} returned {type(result).__name__}, "
                                 "not a Graph", op="compile",
                                 hint="a pass returns the new graph (or (graph, changes))")
        if changes is not None and (not isinstance(changes, list | tuple) or not all(
                isinstance(c, Change) for c in changes)):
            raise TeachflowError(f"pass {self.name} returned changes that are not a list of "
                                 "Change", op="compile",
                                 hint="return (graph, [Change(kind, nodes, result, rule, "
                                      "sentence), ...]), or just the graph")
        # A learner's graph is checked before anything else uses it: a broken one is explained.
        try:
            result.verify()
        except TeachflowError as err:
            raise TeachflowError(f"pass {self.name} returned a graph that is not well formed: "
                                 f"{err.message}", op="compile", location=err.location,
                                 hint="a pass must keep every value it uses defined before use; "
                                      "compare with what the pass was given") from err
        return result, list(changes) if changes is not None else diff_changes(graph, result,
                                                                                  self.name)


def as_pass(p: Any) -> Pass:
    """A pass object from a built-in pass, a learner's pass object, or a plain function."""
    if isinstance(p, BuiltinPass):
        return p
    if isinstance(p, type) and hasattr(p, "run"):  # a pass class: one instance of it
        p = p()
    if hasattr(p, "run") and not isinstance(p, type):
        return FunctionPass(p.run, getattr(p, "name", None) or type(p).__name__)
    if callable(p):
        return FunctionPass(p)
    raise TeachflowError(f"{p!r} is not a pass", op="compile",
                         hint="give a pass name such as 'cse', a function Graph -> Graph, or an "
                              "object with a run(graph) method")


def diff_changes(before: Graph, after: Graph, name: str) -> list[Change]:
    """What changed between two graphs, found by node id (for passes that do not say)."""
    old = {n.id: n for n in before.nodes}
    new = {n.id: n for n in after.nodes}
    changes = []
    for node in after.nodes:
        if node.id in old:
            continue
        replaced = tuple(i for i in node.lineage if i in old and i not in new)
        if replaced:
            changes.append(Change("replaced", replaced, (node.id,), name,
                                  f"{name} replaced {_ids(replaced)} with {format_node(node)}"))
        else:
            changes.append(Change("added", (), (node.id,), name,
                                  f"{name} added {format_node(node)}"))
    accounted = {i for c in changes for i in c.nodes}
    for node in before.nodes:
        if node.id not in new and node.id not in accounted:
            changes.append(Change("removed", (node.id,), (), name,
                                  f"{name} removed {format_node(node)}"))
    return changes


def _ids(ids: tuple[int, ...]) -> str:
    return ", ".join(f"%{i}" for i in ids)

