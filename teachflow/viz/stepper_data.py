"""A compilation as plain data for the pass stepper: every node sent once, each stage as a list.

Everything the learner can look at is computed here, in Python, and sent to the browser once as
JSON-ready data: each node with its place in the layout, its details (op, type, the user's
source line, lineage, a fused kernel's generated sources, the value on the example inputs), each
stage's nodes, its changes in plain words, its figures. The front-end only draws it, so stepping
needs no round trip to the kernel and still works from a saved notebook or page.

Most nodes survive most passes, so a stage is not sent whole: each node goes once into a table
(``nodes``), and a stage lists the entries it has. A node gets a second entry, with the same id,
only when a pass changes it (rewires an operand, say). Whatever follows from the table and a
stage's changes is worked out again in the browser (`teachflow.viz.expand` does the same in
Python): which nodes a pass made, merged, fused or removed; the edges (from each node's
operands); the stage's text form (from each node's line). A value travels as a summary of a few
numbers (`teachflow.viz.values`), once; a fused kernel's sources once per kernel, compressed.

A control-flow node (a ``cond``, a loop) owns graphs, and its entry holds them (``subgraphs``),
each drawn as a stage's graph is: its nodes with their places in a layout of their own, and
every node's status, worked out from the same changes as the graph around it (a pass rewrites
inside the graphs a node owns, and says so). The front-end draws the node as a box the learner
opens to see them. So that a closed box does not hide what a pass did inside it, the node counts
the changes inside (``changes_inside``), and each change names the boxes it happened in
(``within``, outermost first).

The format (``"format": 2``)
----------------------------

``compilation_data`` returns::

    {"format": 2, "name": the function's name,
     "nodes": [entry, ...],         every node of every stage: one entry per version
     "stages": [stage, ...],
     "values": {id: summary},       each value on the example inputs (`values.summarize`),
                                    without the shape and dtype its node's type says, nor
                                    "truncated" where the shape says it: more elements
                                    than "preview_elements"
     "preview_elements": 12,        the numbers a summary's preview shows at most
     "kernels": [kernel, ...],      each fused kernel once
     "sources": base64 text,        the kernels' generated sources: gzip of JSON, a list with
                                    {"numpy", "c", "cuda"} per kernel (null: not generated)
     "lines": {"file.py:12": code}, the user's source lines the nodes came from
     "routes": {"3>7": [[x, y], ...]},  the bends of edge 3 -> 7, in layout units (an edge
                                    keeps its route from stage to stage; "-2>7": from box -2)
     "devices": ["cpu", "cpu:1"]}   the devices the nodes run on, for the legend (`viz.devices`;
                                    [] when all run on one)

and ``"words"``: null, or for a stepper that watches a trace or a backward pass
(`teachflow.viz.watch`), ``{"title", "first", "card", "unknown"}``: what its card and its
narration say at the first stage, and (a tape) why a value is missing.

A **stage** is ``{"index", "pass", "changed", "changes", "stats", "memory", "updates", "nodes",
"head", "tail", "groups"}``: ``changes`` are what the pass did, each ``{"kind", "nodes", "result",
"rule", "sentence", "within"}``; ``memory`` what its schedule holds, step by step (`viz.memory`: or
which stage holds the same; null without ``stats["peak_bytes"]``); ``updates`` the state each call
writes back, ``{"state", "value"}``; ``nodes`` its entries in the graph's order, as runs of
consecutive indices into the table (``[0, 5000]`` is entries 0 to 4999; ``[0, 10, 12, 3]`` is 0 to 9
and 12 to 14); ``head`` and ``tail`` the lines of its text form before and after the nodes' lines;
``groups`` its boxes of the modules that made the nodes (`teachflow.viz.groups`), each ``{"id",
"scope", "x", "y"}``: a negative id, its scope (``Sequential/0:Linear``), and its place in the box
around it (the box of the longest scope that begins its own), where a node's ``x``, ``y`` are its
place in its own box, the box of the longest scope that begins its ``scope``.

An **entry** is ``{"id", "text", "x", "y"}`` (``text``: ``%7 = mul %5, 2.0 : f32[3]``; ``x``,
``y``: its place in the layout) and, where they are not the default in brackets: ``op``, ``label``,
``type`` (what its text says: mul, ``%7 = mul``, ``f32[3]``; for an input, capture or constant, its
kind and ``%x (input)``), ``kind`` ("node"; or "input", "capture", "const"), ``device`` ("cpu"),
``source`` (""), ``rule`` (what made it in a transformation: ""), ``lineage`` ([id]), ``inputs``
(the value id each operand reads, null for a Python number: the edges come from these; []),
``is_output`` (false), ``updates`` (the state it is written back into; []), ``transfer`` (a
``copy``'s ``[src, dst]``), ``line`` (its line of the text form: ``text``), ``body`` (lines printed
under it, as a fused kernel's ops; a number n stands for two spaces and entry n's ``text``),
``owned`` (lines of the graphs it owns, printed under it), ``kernel`` (its index in ``kernels``),
``results`` (one ``{"id", "name", "type"}`` per result, for a node with several; a kernel's say
which of its ops' values each is: ``writes``), ``subgraphs`` and ``changes_inside``, and ``scope``
(the module that made it: ""). A **part** (a graph a node owns) is ``{"key", "name", "inputs",
"outputs", "changes", "values_from", "nodes"}``, its nodes as a stage's are.

A **kernel** is ``{"name", "ran"}`` and ``missing`` (why a source is null, by language): ``ran``
says which kernel ran on the CPU, and why (or that none has run yet). The ops it computes are
its node's ``body``, as the text form prints them under the node.

`teachflow.viz.expand` turns this back into full stages, what the front-end draws: a stage's
nodes (each with its ``status``, ``source_line``, ``value`` and ``kernel``), its ``edges`` (with
their ``route``), the nodes it ``removed``, and its ``text``.
"""

from __future__ import annotations

import base64
import gc
import gzip
import json
import linecache
from typing import TYPE_CHECKING, Any

from teachflow.graph import Graph, Node, Value, format_node, subgraphs
from teachflow.graph.node import format_fused_body  # (lines as str(graph) has)
from teachflow.viz.devices import device_fields, devices_shown
from teachflow.viz.entries import (
    head,
    ids_inside,
    kernel_entry,
    line_of,
    runs,
    same_node,
    shown_summaries,
    tail,
)
from teachflow.viz.expand import derived
from teachflow.viz.groups import boxes_data, stage_layouts
from teachflow.viz.layout import Layout, layout_subgraphs
from teachflow.viz.memory import stage_memory
from teachflow.viz.values import PREVIEW_ELEMENTS, Values

if TYPE_CHECKING:  # (the compiler shows itself with these; they only read what it made)
    from teachflow.compiler import Compilation, Snapshot

FORMAT = 2


def compilation_data(compilation: Compilation, example_inputs: list | None = None,
                     values: Values | None = None) -> dict:
    """The whole compilation as a JSON-ready dict (see the module docstring); its values on
    `example_inputs`, or the `values` given (what `teachflow.viz.watch` computed itself)."""
    # The data holds many small objects until it is sent: the cyclic garbage collector would
    # rescan them all, and the compilation's, again and again (as it would in the passes).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _Table(compilation, example_inputs, values).data()
    finally:
        if was_enabled:
            gc.enable()


class _Table:
    """The compilation's nodes as a table of entries, filled stage by stage."""

    def __init__(self, compilation: Compilation, example_inputs: list | None,
                 values: Values | None = None) -> None:
        self.compilation = compilation
        self.values = values if values is not None or example_inputs is None \
            else Values(example_inputs)
        self.entries: list[dict] = []
        self.latest: dict[int, int] = {}  # node id -> its latest entry
        self.made_from: dict[int, Any] = {}  # entry -> the Node (or Value) it was made from
        self.by_text: dict[str, int] = {}  # a node's text -> an entry with that text
        self.types: dict[Any, str] = {}  # a TensorSpec -> how it prints
        self.types_shown: dict[int, str] = {}  # the id of a value a node shows -> its type
        self.kernels: list[dict] = []
        self.kernel_of: dict[int, int] = {}  # id() of a fused op -> its kernel
        self.sources: list[dict] = []
        self.lines: dict[str, str] = {}
        self.written: dict[Any, str] = {}  # a node's source location -> how it prints
        self.routes: dict[str, list] = {}
        self.parts: dict[tuple[int, str], list[int]] = {}  # a part's entries, the stage before
        # The stage being made: its changes, the layouts of the graphs its nodes own, and the
        # boxes each node inside one is in.
        self.changes: list = []
        self.inner: dict[tuple[int, str], Layout] = {}
        self.owners: dict[int, tuple[int, ...]] = {}
        self.shown: tuple | None = None  # the last stage's graph, layout and entries
        self.scopes: dict[int, str] = {}  # the stage's scope of each drawn node (not "")

    def data(self) -> dict:
        snapshots = self.compilation.snapshots
        layouts, grouped = stage_layouts(self.compilation)
        inner = layout_subgraphs(snapshots)
        stages = []
        for i, (snap, lay, owned) in enumerate(zip(snapshots, layouts, inner, strict=True)):
            if self.values is not None:
                self.values.add(snap.graph)
            self.scopes = grouped[i].scopes if grouped else {}
            stages.append(self.stage(snap, lay, owned, i))
            stages[-1]["memory"] = stage_memory(snap, stages[:-1])
            stages[-1]["groups"] = boxes_data(grouped[i], lay, self.routes) if grouped else []
        # (gzip's level 3: a fifth bigger than its default, in a third of the time)
        sources = json.dumps(self.sources, separators=(",", ":")).encode()
        return {
            "words": getattr(self.compilation, "words", None),
            "format": FORMAT,
            "name": self.compilation.graph.name,
            "nodes": self.entries,
            "stages": stages,
            "values": shown_summaries(self.values, self.types_shown),
            "preview_elements": PREVIEW_ELEMENTS,
            "kernels": self.kernels,
            "sources": base64.b64encode(gzip.compress(sources, 3, mtime=0)).decode("ascii"),
            "lines": self.lines,
            "routes": self.routes,
            "devices": devices_shown(self.entries),
        }

    # --- A stage ----------------------------------------------------------------------------

    def stage(self, snap: Snapshot, lay: Layout, inner: dict[tuple[int, str], Layout],
              index: int) -> dict:
        graph = snap.graph
        self.changes, self.inner, self.owners = snap.changes, inner, {}
        shown = self.shown
        if shown is not None and shown[0] is graph and shown[1] is lay and not inner:
            nodes = shown[2]  # the stage before, again (a pass that changed nothing)
        else:
            nodes, _ = self.graph_entries(graph, lay, ())
        self.shown = (graph, lay, nodes)
        return {
            "index": index,
            "pass": snap.pass_name,
            "changed": bool(snap.changes),
            "changes": [{"kind": c.kind, "nodes": list(c.nodes), "result": list(c.result),
                         "rule": c.rule, "sentence": c.sentence, "within": self.within(c)}
                        for c in snap.changes],
            "stats": dict(snap.stats),
            # What a call writes back after the graph runs: (state, the node whose value it is).
            "updates": [{"state": u.slot.name,
                         "value": None if u.output is None else graph.outputs[u.output].id}
                        for u in graph.updates],
            "nodes": runs(nodes),
            "head": head(graph),
            "tail": tail(graph),
        }

    def graph_entries(self, graph: Graph, lay: Layout,
                      within: tuple[int, ...]) -> tuple[list[int], set[int]]:
        """The entries of `graph`'s nodes (made where new), placed by `lay`, `within` the
        boxes given; and the ids of the nodes of the graphs they own, at any depth."""
        results, written = set(graph.results), graph.written_back()
        indices, inside = [], set()
        for v in graph.drawn_values():
            node = v.producer
            outputs = node.outputs if node else (v,)
            x, y = lay.positions[v.id]
            context = {"x": x, "y": y, "is_output": any(o in results for o in outputs),
                       "updates": [name for o in outputs for name in written.get(o.id, ())]
                       if written else []}
            if node is not None and node.params and subgraphs(node):
                entry, ids = self.box_entry(node, context, within, lay)
                inside |= ids
                indices.append(self.add(entry, node))
            else:
                indices.append(self.entry_for(v, node, context, lay))
        return indices, inside

    def keep_routes(self, node: Node, lay: Layout) -> None:
        """Keep the bends of the edges into `node`, once: an edge keeps its route from stage to
        stage (`layout_stages`)."""
        for o in node.inputs:
            if isinstance(o, Value):
                u = o.drawn_id
                bends = lay.routes.get((u, node.id), ())[1:-1]  # (none between two boxes)
                if bends:
                    self.routes.setdefault(f"{u}>{node.id}", [list(p) for p in bends])

    # --- Entries ----------------------------------------------------------------------------

    def entry_for(self, v: Value, node: Node | None, context: dict, lay: Layout) -> int:
        """The entry of `v` (made by `node`, or an input, capture or constant): the latest one
        of its id when nothing about it changed, else a new one."""
        at = self.latest.get(v.id)
        if at is not None and node is not None:
            before, entry = self.made_from[at], self.entries[at]
            if (entry["x"] == context["x"] and entry["y"] == context["y"]
                    and entry.get("is_output", False) == context["is_output"]
                    and entry.get("updates", []) == context["updates"]
                    and isinstance(before, Node) and same_node(before, node)):
                self.made_from[at] = node
                return at
        return self.add(self.node_entry(v, node, context, lay), node or v)

    def add(self, entry: dict, made_from: Any) -> int:
        """The index of `entry` in the table: the latest entry of its id if equal, or a new
        one."""
        at = self.latest.get(entry["id"])
        if at is None or self.entries[at] != entry:
            at = len(self.entries)
            self.entries.append(entry)
            self.latest[entry["id"]] = at
            self.by_text.setdefault(entry["text"], at)
        self.made_from[at] = made_from
        return at

    def node_entry(self, v: Value, node: Node | None, context: dict, lay: Layout) -> dict:
        """A fresh entry for `v` (see the module docstring)."""
        if node is None:
            entry = {"id": v.id, "label": f"{v} ({v.kind})", "op": v.kind, "type": self.type(v),
                     "text": f"{v} = {v.kind}", "kind": v.kind}
            if v.kind != "input":  # (an input's line is the head's)
                entry["line"] = line_of(v)
        else:
            text = format_node(node)
            outputs = ", ".join(str(o) for o in node.outputs)
            entry = {"id": v.id, "label": f"{outputs} = {node.op.name}", "op": node.op.name,
                     "type": ", ".join(self.type(o) for o in node.outputs), "text": text}
            if node.source is not None:
                entry["source"] = self.where(node.source)
                if node.source.note:  # the rule that made it: "batched by matmul's rule: ..."
                    entry["rule"] = node.source.note
            if node.lineage != (v.id,):
                entry["lineage"] = list(node.lineage)
            operands = [o.id if isinstance(o, Value) else None for o in node.inputs]
            if operands:
                entry["inputs"] = operands
                self.keep_routes(node, lay)
            if len(node.outputs) > 1:
                entry["results"] = [{"id": o.id, "name": str(o), "type": self.type(o)}
                                    for o in node.outputs]
                written = getattr(getattr(node.op, "group", None), "outputs", ())
                if len(written) == len(node.outputs):  # a kernel's: the values it writes
                    for result, member in zip(entry["results"], written, strict=True):
                        result["writes"] = str(member)
            if getattr(node.op, "group", None) is not None:
                entry["body"] = [self.ref(line) for line, _ in format_fused_body(node)]
                entry["kernel"] = self.kernel(node)
        for key, x in derived(entry).items():  # (what its text says need not be sent)
            if entry.get(key) == x:
                del entry[key]
        if v.id in self.scopes:  # (the module that made it: its box, `viz.groups`)
            entry["scope"] = self.scopes[v.id]
        entry.update({"x": context["x"], "y": context["y"]})
        entry.update(device_fields(v, node))
        if context["is_output"]:
            entry["is_output"] = True
        if context["updates"]:
            entry["updates"] = context["updates"]
        return entry

    def box_entry(self, node: Node, context: dict, within: tuple[int, ...],
                  lay: Layout) -> tuple[dict, set[int]]:
        """The entry of a node that owns graphs, with a part for each (every stage, as what
        happens inside may change), and the ids inside them."""
        entry = self.node_entry(node.output, node, context, lay)
        owned = subgraphs(node)
        entry["owned"] = [f"  {line}" for key, sub in subgraphs(node, calls=False).items()
                          for line in sub._text(f"{key}: {sub.name}")]  # (as str(graph) has)
        parts, inside = [], set()
        for key, sub in owned.items():
            present, deeper = self.graph_entries(sub, self.inner[(node.id, key)],
                                                 (*within, node.id))
            before = self.parts.get((node.id, key), [])
            self.parts[(node.id, key)] = present
            ids = {self.entries[i]["id"] for i in present}
            gone = [i for i in before if self.entries[i]["id"] not in ids]
            ids |= deeper | {self.entries[i]["id"] for i in gone}
            for i in gone:
                ids |= ids_inside(self.entries, self.entries[i])
            self.owners.update((i, (*within, node.id)) for i in ids - deeper)
            values_from = self.values.notes.get((node.id, key), "") if self.values else ""
            parts.append({"key": key, "name": sub.name, "inputs": [v.id for v in sub.inputs],
                          "outputs": [v.id for v in sub.outputs], "changes": self.count(ids),
                          "values_from": values_from, "nodes": runs(present)})
            inside |= ids
        entry["subgraphs"] = parts
        entry["changes_inside"] = self.count(inside)
        return entry, inside

    def type(self, v: Value) -> str:
        """``f32[16,16]``: how `v`'s spec prints (worked out once per spec: it takes a while)."""
        text = self.types.get(v.spec)
        if text is None:
            text = self.types[v.spec] = str(v.spec)
        self.types_shown[v.id] = text
        return text

    def where(self, location: Any) -> str:
        """``cell In[3], line 2``: how a node's source location prints (worked out once per
        location: a notebook's cell number is looked up), the line it names kept in `lines`."""
        if location not in self.written:
            self.written[location] = source = str(location)
            self.lines.setdefault(source, linecache.getline(location.filename,
                                                            location.lineno).strip())
        return self.written[location]

    def ref(self, line: str) -> int | str:
        """A line that is two spaces and an entry's text, as that entry's index; else the
        line."""
        at = self.by_text.get(line[2:]) if line.startswith("  ") else None
        return line if at is None else at

    def kernel(self, node: Node) -> int:
        """The index of `node`'s fused kernel in the kernels' table (each kernel once)."""
        op = node.op
        if id(op) not in self.kernel_of:
            kernel, sources = kernel_entry(op)
            self.kernel_of[id(op)] = len(self.kernels)
            self.kernels.append(kernel)
            self.sources.append(sources)
        return self.kernel_of[id(op)]

    # --- Changes inside boxes ---------------------------------------------------------------

    def count(self, ids: set[int]) -> int:
        """How many of this stage's changes act on, or make, a node among `ids`."""
        return sum(1 for c in self.changes if not ids.isdisjoint((*c.nodes, *c.result)))

    def within(self, change: Any) -> list[int]:
        """The control-flow nodes whose graphs `change` happened in, outermost first."""
        for i in (*change.result, *change.nodes):
            if i in self.owners:
                return list(self.owners[i])
        return []
