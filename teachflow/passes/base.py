"""What a pass is: a pure function from a graph to a graph, plus a record of what it changed.

A pass never edits the graph it is given: ``pass(graph) -> (new_graph, changes)``, one `Change`
per thing it did, each naming the nodes involved, the rule in plain words (``"x*1 -> x"``) and a
sentence for the learner. Node ids are kept by every pass, so a node can be followed from the
trace to the final kernel; a node a pass creates gets a fresh id and a `lineage` listing the
original nodes it stands for.

Every built-in pass is written with one helper, `rewrite`: it walks a clone of the graph in
order and asks the pass, node by node, what becomes of it (keep it, replace its value, or drop
it; new nodes may take its place), and does the rest: operands of later nodes follow the
replacements, and so do the graph's outputs. A pass is then only its decision. A node that owns
graphs of its own (the body of a loop, the branches of a ``cond``: any parameter that is a
`Graph`) has them rewritten by the same decision first, so every pass applies inside them
without knowing they exist.

A learner's own pass plugs in the same way: a plain function ``Graph -> Graph`` (its changes are
worked out by comparing node ids before and after), or any object with a ``run`` method that
returns a graph, or a graph and its changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from teachflow.core.errors import SourceLocation, TeachflowError
from teachflow.core.spec import TensorSpec
from teachflow.graph import Graph, Node, Value, format_node
from teachflow.ops.op import Op

#: What a change did. "moved", "new_slot", "reused" and "in_place" are plan_memory's;
#: "recomputed" is the trace's own: the nodes a backward pass computes again
#: (``tfl.checkpoint``), drawn apart from the forward nodes they repeat; "bucketed" is
#: bucket_all_reduce's: all-reduces merged into one.
KINDS = ("added", "removed", "replaced", "merged", "fused", "placed", "recomputed",
         "moved", "new_slot", "reused", "in_place", "bucketed")


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
    """A named function from a graph to a new graph and its changes."""

    __name__: str

    def __call__(self, graph: Graph) -> tuple[Graph, list[Change]]: ...


# --- The one way to rewrite a graph ----------------------------------------------------------

#: What a decision returns for a node that goes without a replacement (nothing reads it).
DROP = object()

#: ``decide(node, rewriter)``: None keeps the node; a value (or literal) replaces its output
#: everywhere; `DROP` removes it. Nodes the decision adds with the rewriter take its place.
Decide = Callable[[Node, "Rewriter"], Any]


class Rewriter:
    """What a decision may do while `rewrite` stands at one node of the (cloned) graph."""

    def __init__(self, graph: Graph, node: Node) -> None:
        self.graph, self.node, self.added = graph, node, []
        self.replaced: dict[Value, Any] = {}

    def replace(self, value: Value, by: Any) -> None:
        """From here on, `by` stands for `value`, the value of a node before this one (as a
        node's own value is replaced by its decision): a node that stands for several, such as
        a fused kernel with several results, takes the place of each."""
        self.replaced[value] = by

    def add(self, op: Op, inputs: tuple, params: dict | None = None, spec: TensorSpec = None,
            lineage: tuple[int, ...] | None = None,
            source: SourceLocation | None = None) -> Value:
        """A new node where the current one stands (by default its line of source, its spec
        from the op's shape rule, and the current node's lineage): its value (the first, for
        an op with several results: the node is the last of `added`)."""
        params = params or {}
        if spec is None:
            spec = op.abstract_eval(*(o.spec if isinstance(o, Value) else o for o in inputs),
                                    **params)
        node = self.graph.new_node(op, tuple(inputs), params, spec, source or self.node.source,
                                   self.node.lineage if lineage is None else lineage)
        node.pin = self.node.pin  # (it stands where the current node stands)
        self.added.append(node)
        return node.output

    def constant(self, array: np.ndarray, spec: TensorSpec) -> Value:
        """A new constant of the graph holding `array`, typed `spec` (its device kept)."""
        value = self.graph.constant(array)
        value.spec = spec
        return value


def rewrite(graph: Graph, decide_for: Callable[[Graph], Decide],
            within: Graph | None = None, done: dict[int, Graph] | None = None) -> Graph:
    """A clone of `graph` where each node, in order, became what ``decide(node, rewriter)``
    said. ``decide_for(g)`` gives the decision for graph `g` (the clone, and each graph a node
    owns, rewritten before that node is decided), so a pass may look at a graph as a whole
    first (which values are live, which nodes fuse) and then decide node by node; it may also
    put ``g.nodes`` in another topological order first (fusion brings a group's nodes
    together). A node with several results is replaced by a tuple of values, one per result.

    A graph a node owns is rewritten on its own: a decision sees only that graph's nodes, so
    no work moves into or out of a branch or a loop body (which would change what runs, and
    how often). A graph several nodes own (a function called twice) is rewritten once, and
    they own the result together (`done`: the graphs rewritten so far, by the id of the
    original)."""
    done = {} if done is None else done
    g = graph.clone(within)
    g.memory_plan = None  # (made for the nodes and order before: `plan_memory` makes it again)
    decide = decide_for(g)
    replaced: dict[Value, Any] = {}
    kept: list[Node] = []
    for node in g.nodes:
        node.inputs = tuple(replaced.get(o, o) if isinstance(o, Value) else o
                            for o in node.inputs)
        if any(isinstance(p, Graph) for p in node.params.values()):
            node.params = {k: _rewritten(p, decide_for, g, done) if isinstance(p, Graph)
                           else p for k, p in node.params.items()}
        rewriter = Rewriter(g, node)
        verdict = decide(node, rewriter)
        kept += rewriter.added
        replaced.update(rewriter.replaced)
        if verdict is None:
            kept.append(node)
        elif len(node.outputs) > 1 and verdict is not DROP:
            replaced.update(zip(node.outputs, verdict, strict=True))
        elif verdict is not DROP:
            replaced[node.output] = verdict
    g.nodes = kept
    g.outputs = [replaced.get(v, v) for v in g.outputs]
    return g


def _rewritten(graph: Graph, decide_for: Callable[[Graph], Decide], within: Graph,
               done: dict[int, Graph]) -> Graph:
    if id(graph) not in done:
        done[id(graph)] = rewrite(graph, decide_for, within, done)
    return done[id(graph)]


# --- Passes written by a learner ----------------------------------------------------------------


class LearnersPass:
    """A pass written as ``def my_pass(graph) -> graph`` (or returning ``(graph, changes)``),
    or as an object with such a ``run`` method: given a clone, and checked before it is used."""

    def __init__(self, fn: Callable[[Graph], Any], name: str | None = None) -> None:
        self.fn = fn
        self.__name__ = name or getattr(fn, "name", None) or getattr(fn, "__name__", "pass")

    def __call__(self, graph: Graph) -> tuple[Graph, list[Change]]:
        given = graph.clone()  # a clone: the learner's code may edit what it gets
        given.memory_plan = None  # (which would not fit the nodes the learner's pass leaves)
        result = self.fn(given)
        changes = None
        if isinstance(result, tuple) and len(result) == 2:
            result, changes = result
        if not isinstance(result, Graph):
            raise TeachflowError(f"pass {self.__name__} returned {type(result).__name__}, "
                                 "not a Graph", op="compile",
                                 hint="a pass returns the new graph (or (graph, changes))")
        if changes is not None and (not isinstance(changes, list | tuple) or not all(
                isinstance(c, Change) for c in changes)):
            raise TeachflowError(f"pass {self.__name__} returned changes that are not a list of "
                                 "Change", op="compile",
                                 hint="return (graph, [Change(kind, nodes, result, rule, "
                                      "sentence), ...]), or just the graph")
        # A learner's graph is checked before anything else uses it: a broken one is explained.
        try:
            result.verify()
        except TeachflowError as err:
            raise TeachflowError(f"pass {self.__name__} returned a graph that is not well formed: "
                                 f"{err.message}", op="compile", location=err.location,
                                 hint="a pass must keep every value it uses defined before use; "
                                      "compare with what the pass was given") from err
        return result, list(changes) if changes is not None else diff_changes(graph, result,
                                                                                  self.__name__)


def as_pass(p: Any) -> Pass:
    """A learner's pass (an object with ``run``, its class, or a plain function) as a pass."""
    if isinstance(p, type) and hasattr(p, "run"):  # a pass class: one instance of it
        p = p()
    if hasattr(p, "run") and not isinstance(p, type):
        return LearnersPass(p.run, getattr(p, "name", None) or type(p).__name__)
    if callable(p):
        return LearnersPass(p)
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



def recomputation(graph: Graph) -> list[Change]:
    """The trace's changes: one naming the nodes its backward pass computes again instead of
    keeping them from the forward pass (``tfl.checkpoint``), if there are any."""
    ids = tuple(n.id for n in graph.nodes if n.source is not None and n.source.recomputed)
    if not ids:
        return []
    return [Change("recomputed", ids, ids, "tfl.checkpoint: recompute, don't keep",
                   f"{len(ids)} node(s) of the forward pass run again in the backward pass "
                   "(tfl.checkpoint): their values are not kept from the forward pass, so "
                   "memory is freed, for more compute")]
