"""The `Graph`: inputs, nodes in topological order, outputs, and the state it writes back.

A graph is built by tracing (`teachflow.tracing.builder`) or by hand (``with tfl.Graph():``); a pass
works on a `clone` and leaves the graph it was given unchanged. `str(graph)` prints one node per
line, as `format_node` writes it, with the user's line beside it; a fused node prints with the
body it computes, as XLA prints a fusion. `to_networkx()` hands the graph to networkx for drawing
and analysis, with the nodes and edges a drawing has (`drawn_values`, `drawn_edges`: the pass
stepper draws the same); `verify()` checks it is well formed.

A node may own graphs of its own: the branches of a ``cond``, the condition and body of a loop,
a function called (see `teachflow.execution.control`), held as parameters. Such a *sub-graph* is
closed: what it reads from the graph around it comes in as its inputs, one per operand of the
node. It numbers its values from the same counter as the graph around it, so that an id names one
value in the whole tree. Each of the operations above goes into the graphs a node owns: the text
form prints them indented under their node (a function called: once, after the graph), `verify`
checks them, `to_networkx` hangs them on their node.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from teachflow.core import dispatch
from teachflow.core.errors import SourceLocation, TeachflowError
from teachflow.core.spec import TensorSpec
from teachflow.graph.node import (
    Node,
    Value,
    format_constant,
    format_fused_body,
    format_node,
    format_params,
)
from teachflow.graph.owned import callees, subgraphs
from teachflow.graph.state import Slot, Update
from teachflow.ops.op import Op

if TYPE_CHECKING:
    from teachflow.memory.plan import MemoryPlan


class GraphError(TeachflowError):
    """A graph that is not well formed (found by `Graph.verify`)."""


class Graph:
    """A dataflow graph; also a context manager for building one by hand (define-and-run):

        with tfl.Graph() as g:
            x = tfl.placeholder((None, 3), dtype="float32", name="x")
            y = (x * 2).sum(axis=1)
        tfl.Session(g).run(y, feed={x: np.ones((4, 3))})
    """

    def __init__(self, name: str = "graph", within: Graph | None = None) -> None:
        self.name = name
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self.updates: list[Update] = []  # state written back after a run, from `outputs`
        # A value that a leaf that requires grad took (under no_grad): on a tape, it is that
        # leaf again, as the updated tensor is eagerly (see `executor.interpret`).
        self.leaf_values: dict[Value, Slot] = {}
        self.captures: list[Value] = []
        self.constants: list[Value] = []
        # Which reused slot of memory each intermediate is written into, for this order of the
        # nodes: made by the pass `plan_memory` (lesson 8), read by the executor.
        self.memory_plan: MemoryPlan | None = None
        self._captured: dict[tuple[int, str], Value] = {}  # (id(owner), attr) -> its capture
        self._owned: set[Value] = set()  # every value made here
        # The next id, shared with the graph this one is a sub-graph of (`within`).
        self._counter = within._counter if within is not None else [0]
        self._builder: Any = None

    # --- Building ---------------------------------------------------------------------------

    @property
    def _next_id(self) -> int:
        return self._counter[0]

    def _new_id(self) -> int:
        self._counter[0] += 1
        return self._counter[0] - 1

    def _new_node(self, op: Op, inputs: tuple, params: dict,
                  spec: TensorSpec | tuple[TensorSpec, ...], source: SourceLocation | None,
                  lineage: tuple[int, ...] = (), no_grad: bool = False) -> Node:
        first = self._new_id()
        more = tuple(self._new_id() for _ in range(len(spec) - 1)) if isinstance(spec, tuple) \
            else ()
        node = Node(first, op, inputs, params, spec, source, lineage, no_grad, more)
        self._owned.update(node.outputs)
        return node

    def _own(self, value: Value) -> Value:
        self._owned.add(value)
        return value

    def owns(self, value: Value) -> bool:
        """True if `value` was made in this graph (not in another trace)."""
        return value in self._owned

    def add_input(self, spec: TensorSpec, name: str | None = None) -> Value:
        value = self._own(Value(self._new_id(), spec, "input", name=name))
        self.inputs.append(value)
        return value

    def add_node(self, op: Op, inputs: tuple, params: dict,
                 spec: TensorSpec | tuple[TensorSpec, ...], source: SourceLocation | None,
                 no_grad: bool = False) -> Node:
        """Append ``op(*inputs, **params)``; `spec` is a tuple for an op with several
        results."""
        node = self._new_node(op, inputs, params, spec, source, no_grad=no_grad)
        self.nodes.append(node)
        return node

    def capture(self, slot: Slot, spec: TensorSpec) -> Value:
        """The value standing for state outside the graph (one per slot), read at every run."""
        key = (slot.key, slot.attr)
        value = self._captured.get(key)
        if value is None:
            value = self._own(Value(self._new_id(), spec, "capture", name=slot.name, data=slot))
            self._captured[key] = value
            self.captures.append(value)
        return value

    @property
    def results(self) -> list[Value]:
        """The outputs the function returns (the rest are new values of updated state)."""
        written = {u.output for u in self.updates}
        return [v for i, v in enumerate(self.outputs) if i not in written]

    def constant(self, array: np.ndarray) -> Value:
        value = self._own(Value(self._new_id(), TensorSpec(array.shape, array.dtype, "cpu"),
                                "const", data=array))
        self.constants.append(value)
        return value

    def __enter__(self) -> Graph:
        """``with tfl.Graph() as g:``, TensorFlow 1's way: the ops applied inside the block
        become nodes of `g` instead of running. Tracing's interpreter does the building (see
        `dispatch.building`)."""
        self._builder = dispatch.building(self)
        self._builder.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._builder.__exit__(*exc)
        self._builder = None

    def clone(self, within: Graph | None = None) -> Graph:
        """A copy with the same ids, sources and lineage, whose nodes a pass may rearrange.

        Passes are pure: each works on a clone and leaves the graph it was given unchanged, so
        every stage of a compilation stays available as its own snapshot. The clone of a
        sub-graph numbers new values from the counter of the clone it is `within`.
        """
        g = Graph(self.name, within)
        if within is None:
            g._counter = [self._next_id]
        new: dict[Value, Value] = {}

        def copy(v: Value, kind_list: list[Value]) -> None:
            c = g._own(Value(v.id, v.spec, v.kind, v.name, data=v.data))
            new[v] = c
            kind_list.append(c)

        for v in self.inputs:
            copy(v, g.inputs)
        for v in self.captures:
            copy(v, g.captures)
            g._captured[(v.data.key, v.data.attr)] = new[v]
        for v in self.constants:
            copy(v, g.constants)
        for node in self.nodes:
            inputs = tuple(new[o] if isinstance(o, Value) else o for o in node.inputs)
            clone = Node(node.id, node.op, inputs, node.params, node.specs, node.source,
                         node.lineage, node.no_grad, tuple(v.id for v in node.outputs[1:]),
                         node.pin)
            g._owned.update(clone.outputs)
            new.update(zip(node.outputs, clone.outputs, strict=True))
            g.nodes.append(clone)
        g.outputs = [new[v] for v in self.outputs]
        g.updates = list(self.updates)
        g.leaf_values = {new[v]: slot for v, slot in self.leaf_values.items() if v in new}
        g.memory_plan = self.memory_plan  # (it names values by id, which the clone keeps)
        return g

    def new_node(self, op: Op, inputs: tuple, params: dict,
                 spec: TensorSpec | tuple[TensorSpec, ...], source: SourceLocation | None,
                 lineage: tuple[int, ...]) -> Node:
        """A node with a fresh id, not yet placed in `nodes` (a pass decides where it goes)."""
        return self._new_node(op, inputs, params, spec, source, lineage)

    def users(self) -> dict[Value, list[Node]]:
        """For each value, the nodes that use it as an operand."""
        users: dict[Value, list[Node]] = {}
        for node in self.nodes:
            for o in node.inputs:
                if isinstance(o, Value):
                    users.setdefault(o, []).append(node)
        return users

    def live(self, outputs: Sequence[Value] | None = None) -> tuple[list[Node], set[Value]]:
        """The nodes `outputs` (by default the graph's) depend on, in graph order, and every
        value those nodes read, the outputs included: what running them needs."""
        needed = set(self.outputs if outputs is None else outputs)
        live = []
        for node in reversed(self.nodes):  # (a collective is always run: other ranks wait)
            if node.output in needed or node.op.communicates or (len(node.outputs) > 1
                                         and not needed.isdisjoint(node.outputs)):
                live.append(node)
                needed.update(o for o in node.inputs if isinstance(o, Value))
        return live[::-1], needed

    # --- Reading ------------------------------------------------------------------------------

    def values(self) -> Iterator[Value]:
        """Every value: inputs, captures, constants, then node outputs in order."""
        yield from self.inputs
        yield from self.captures
        yield from self.constants
        for node in self.nodes:
            yield from node.outputs

    def __len__(self) -> int:
        return len(self.nodes)

    def __str__(self) -> str:  # (each function it calls, once, after it)
        return "\n".join([*self._text(), *(line for name, callee in callees(self).items()
                                            for line in callee._text(f"graph @{name}"))])

    def _text(self, title: str | None = None) -> list[str]:
        """The text form's lines; a sub-graph's begin with `title` (``body_fn: halve``)."""
        args = ", ".join(f"{v}: {v.spec}" for v in self.inputs)
        if title is None:
            name = "" if self.name == "graph" else f" {self.name}"  # (a graph built by hand)
            title = f"graph{name}"
        lines = [f"{title}({args}) {{"]
        body: list[tuple[str, str | None]] = [(f"{v} = capture {v.spec}", "")
                                              for v in self.captures]
        body += [(f"{v} = const {format_constant(v.data)}{v.spec}", "") for v in self.constants]
        for n in self.nodes:
            body.append((format_node(n), str(n.source) if n.source else ""))
            body += format_fused_body(n)
            for key, sub in subgraphs(n, calls=False).items():  # under their node, as written
                body += [(f"  {line}", None) for line in sub._text(f"{key}: {sub.name}")]
        width = max((len(text) for text, source in body if source is not None), default=0)
        for text, source in body:
            lines.append(f"  {text:<{width}}   # {source}" if source else f"  {text}")
        if self.results:
            lines.append(f"  return {', '.join(str(v) for v in self.results)}")
        for u in self.updates:  # functionalised state: written back after each run
            new = "None" if u.output is None else str(self.outputs[u.output])
            lines.append(f"  %{u.slot.name} <- {new}")
        lines.append("}")
        return lines

    def to_networkx(self) -> Any:
        """An ``nx.DiGraph``: one node per value source (input, capture, const, op node), with
        ``op``, ``shape``, ``dtype``, ``device``, ``source``, ``lineage``, a ``label``,
        ``is_output`` (returned by the function) and ``updates`` (the names of the state the value
        is written back into); edges carry the operand position as ``index``. The graph
        attribute ``updates`` lists every write-back as (state name, value id or None).

        An op with several results (a loop carrying two tensors) is one networkx node, keyed
        by its first result's id, with ``outputs`` (their ids), ``shapes`` and ``dtypes``; an
        edge from it says which result it carries as ``output``. A node that owns graphs (a
        ``cond``'s branches, a loop's body) has them under ``subgraphs``, by parameter name,
        each a DiGraph of this same form whose ``input`` nodes stand for the operands."""
        import networkx as nx

        g = nx.DiGraph(name=self.name)
        updated = self.written_back()
        g.graph["updates"] = [(u.slot.name, None if u.output is None else self.outputs[u.output].id)
                              for u in self.updates]
        results = set(self.results)
        for v in self.drawn_values():
            node = v.producer
            g.add_node(
                v.id,
                op=node.op.name if node else v.kind,
                shape=v.spec.shape, dtype=v.spec.dtype.name, device=v.spec.device,
                source=str(node.source) if node and node.source else "",
                lineage=node.lineage if node else (v.id,),
                params=format_params({k: p for k, p in node.params.items()
                                      if not isinstance(p, Graph)}) if node else "",
                label=f"{v} = {node.op.name}" if node else f"{v} ({v.kind})",
                is_output=v in results,
                updates=updated.get(v.id, []),
            )
        for node in self.nodes:
            if len(node.outputs) > 1:  # one networkx node for the op, with every result
                g.nodes[node.id].update(
                    outputs=[v.id for v in node.outputs],
                    label=f"{', '.join(map(str, node.outputs))} = {node.op.name}",
                    shapes=[v.spec.shape for v in node.outputs],
                    dtypes=[v.spec.dtype.name for v in node.outputs],
                    is_output=any(v in results for v in node.outputs),
                    updates=[name for v in node.outputs for name in updated.get(v.id, [])])
            if subgraphs(node):
                g.nodes[node.id]["subgraphs"] = {k: sub.to_networkx()
                                                 for k, sub in subgraphs(node).items()}
        for (source, target), reader in self.drawn_edges().items():
            carried = [(k, o) for k, o in enumerate(reader.inputs)  # (x * x: two operands)
                       if isinstance(o, Value) and o.drawn_id == source]
            index, operand = carried[0]
            g.add_edge(source, target, index=index, indices=tuple(k for k, _ in carried),
                       output=operand.producer.outputs.index(operand) if operand.producer else 0)
        return g

    def written_back(self) -> dict[int, list[str]]:
        """The names of the state each output is written back into after a run, by its id."""
        written: dict[int, list[str]] = {}
        for u in self.updates:
            if u.output is not None:
                written.setdefault(self.outputs[u.output].id, []).append(u.slot.name)
        return written

    def drawn_values(self) -> list[Value]:
        """The values a drawing of the graph has a node for, in order (`to_networkx`'s nodes,
        the stepper's): each input, capture and constant, and each op's first result (an op
        with several results is one node, by its first result's id)."""
        return [v for v in self.values() if v.producer is None or v is v.producer.output]

    def drawn_edges(self) -> dict[tuple[int, int], Node]:
        """A drawing's edges, in order, each once (``x * x`` is one edge): from the node an
        operand comes out of (`Value.drawn_id`) to the node that reads it, that node."""
        return {(o.drawn_id, node.id): node for node in self.nodes for o in node.inputs
                if isinstance(o, Value)}

    # --- Checking -----------------------------------------------------------------------------

    def verify(self) -> None:
        """Check the graph is well formed: every operand defined before use and defined once,
        ids unique, every node's recorded spec the one its op's shape rule gives."""
        defined: set[Value] = set()  # the values defined so far
        for v in [*self.inputs, *self.captures, *self.constants]:
            self._define(v, defined)
        for node in self.nodes:
            for operand in node.inputs:
                if isinstance(operand, Value) and operand not in defined:
                    raise GraphError(f"node {node.output} uses {operand} before it is defined",
                                     op="verify", location=node.source)
                if not isinstance(operand, Value | bool | int | float):
                    raise GraphError(f"node {node.output} has an operand of type "
                                     f"{type(operand).__name__}", op="verify",
                                     location=node.source)
            if any(v.producer is not node for v in node.outputs):
                raise GraphError(f"node {node.output} is not its output's producer", op="verify")
            for v in node.outputs:
                self._define(v, defined)
            for key, sub in subgraphs(node).items():  # each sub-graph is well formed itself
                try:
                    sub.verify()
                except GraphError as err:
                    raise GraphError(f"in {key} of node {node.output}: {err.message}",
                                     op="verify", location=err.location or node.source) from err
            specs = [o.spec if isinstance(o, Value) else o for o in node.inputs]
            try:
                expected = node.op.abstract_eval(*specs, **node.params)
            except TeachflowError as err:
                raise GraphError(f"node {node.output}: its op rejects its operands: "
                                 f"{err.message}", op="verify", location=node.source) from err
            recorded = node.specs if isinstance(expected, tuple) else node.spec
            if expected != recorded:
                raise GraphError(f"node {node.output} records {_specs(recorded)} but "
                                 f"{node.op.name} of its operands gives {_specs(expected)}",
                                 op="verify", location=node.source)
        for v in self.outputs:
            if v not in defined:
                raise GraphError(f"output {v} is not defined in the graph", op="verify")
        for u in self.updates:
            if u.output is not None and not 0 <= u.output < len(self.outputs):
                raise GraphError(f"the update of {u.slot.name} names output {u.output}, but the "
                                 f"graph has {len(self.outputs)}", op="verify")

    def _define(self, value: Value, defined: set[Value]) -> None:
        if value in defined:
            raise GraphError(f"value {value} is defined twice", op="verify")
        if not self.owns(value):
            raise GraphError(f"value {value} belongs to another graph", op="verify")
        defined.add(value)


def _specs(spec: TensorSpec | tuple[TensorSpec, ...]) -> str:
    return ", ".join(map(str, spec)) if isinstance(spec, tuple) else str(spec)

