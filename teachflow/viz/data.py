"""A compilation as plain data: what the pass stepper (in the browser) needs, sent once.

Everything the learner can look at is computed here, in Python, and serialised to JSON-ready
dicts: every stage's nodes with their place in the layout, their status against the stage before
(added, replaced, merged, fused, kept), their details (op, type, the user's source line, lineage,
a fused kernel's generated source, the value on the example inputs: `teachflow.viz.values`),
every edge with its route, the stage's changes in plain words, its figures, and its text form.
The front-end only draws it, so stepping needs no round trip to the kernel and still works from a
saved notebook or page.

A control-flow node (a ``cond``, a loop) owns graphs, and its data holds them (``subgraphs``),
each drawn as a stage's graph is: its nodes with their places in a layout of their own, its
edges, the nodes this pass removed from it, and every node's status, worked out from the same
changes as the graph around it (a pass rewrites inside the graphs a node owns, and says so). The
front-end draws the node as a box the learner opens to see them. So that a closed box does not
hide what a pass did inside it, the node counts the changes inside (``changes_inside``), and each
change names the boxes it happened in (``within``, outermost first).
"""

from __future__ import annotations

import linecache
from typing import TYPE_CHECKING, Any

from teachflow.graph import Graph, Node, format_node, subgraphs
from teachflow.viz.layout import Layout, layout_stages, layout_subgraphs
from teachflow.viz.values import Notes, stage_values

if TYPE_CHECKING:  # (the compiler shows itself with these; they only read what it made)
    from teachflow.compiler import Compilation, Snapshot


def compilation_data(compilation: Compilation, example_inputs: list | None = None) -> dict:
    """The whole compilation as a JSON-ready dict (see the module docstring)."""
    snapshots = compilation.snapshots
    layouts = layout_stages(snapshots)
    inner = layout_subgraphs(snapshots)
    stages: list[dict] = []
    summaries: dict[int, dict] = {}  # a node keeps its id, and its value, across the passes
    for i, (snap, lay, owned) in enumerate(zip(snapshots, layouts, inner, strict=True)):
        values, notes = (stage_values(snap.graph, example_inputs, summaries)
                         if example_inputs is not None else ({}, {}))
        stages.append(stage_data(snap, lay, values, previous=stages[-1] if stages else None,
                                 index=i, inner=owned, notes=notes))
    return {"name": compilation.graph.name, "stages": stages}


def stage_data(snap: Snapshot, lay: Layout, values: dict[int, Any], previous: dict | None,
               index: int, inner: dict[tuple[int, str], Layout] | None = None,
               notes: Notes | None = None) -> dict:
    """One stage as the front-end draws it. `inner` lays out the graphs its nodes own
    (`layout_subgraphs`); `notes` say which run their values are from (`stage_values`)."""
    g = snap.nx
    parts = _Parts(snap, values, inner or {}, notes or {}, previous)
    drawn = parts.part(g, snap.graph, lay, previous, ())
    changes = [{"kind": c.kind, "nodes": list(c.nodes), "result": list(c.result),
                "rule": c.rule, "sentence": c.sentence, "within": parts.within(c)}
               for c in snap.changes]
    return {
        "index": index,
        "pass": snap.pass_name,
        "changed": bool(snap.changes),
        **drawn,
        "changes": changes,
        "stats": dict(snap.stats),
        "text": str(snap.graph),
        # What a call writes back after the graph runs: (state, the node whose value it takes).
        "updates": [{"state": name, "value": value} for name, value in g.graph["updates"]],
    }


class _Parts:
    """One stage's graph, and each graph its nodes own, as drawable parts: nodes, edges, and the
    nodes this pass removed (drawn faded)."""

    def __init__(self, snap: Snapshot, values: dict[int, Any],
                 inner: dict[tuple[int, str], Layout], notes: Notes,
                 previous: dict | None) -> None:
        self.changes = snap.changes
        # What a pass did to a node, wherever it is (ids are unique across the graphs).
        self.status = {i: c.kind for c in snap.changes for i in c.result}
        self.values, self.inner, self.notes = values, inner, notes
        self.before = dict(_owned_parts(previous)) if previous else {}
        # id of a node inside an owned graph -> the nodes whose graphs hold it, outermost first
        self.owners: dict[int, tuple[int, ...]] = {}

    def part(self, g: Any, graph: Graph, lay: Layout, before: dict | None,
             within: tuple[int, ...]) -> dict:
        """The nodes, edges and removed nodes of `g` (``graph`` as networkx), placed by `lay`;
        `before` is the same graph's part at the stage before, `within` the owners it is in."""
        by_id = {v.id: v for v in graph.values()}
        nodes = [self.node(n, attrs, by_id[n].producer, by_id[n], lay.positions[n], within)
                 for n, attrs in sorted(g.nodes(data=True))]
        edges = [{"from": u, "to": v, "index": d["index"], "indices": list(d["indices"]),
                  "route": [list(p) for p in lay.routes[(u, v)]]}
                 for u, v, d in sorted(g.edges(data=True))]
        present = set(g.nodes)
        removed = [n for n in before["nodes"] if n["id"] not in present] if before else []
        if not within:  # (the front-end finds the whole graph's removed edges itself)
            return {"nodes": nodes, "edges": edges, "removed": removed}
        self.owners.update((n["id"], within) for n in [*nodes, *removed])
        gone = {n["id"] for n in removed}
        return {"nodes": nodes, "edges": edges, "removed": removed,
                "removed_edges": [e for e in before["edges"] if e["from"] in gone
                                  or e["to"] in gone] if before else []}

    def node(self, n: int, attrs: dict, node: Node | None, value: Any, at: tuple[float, float],
             within: tuple[int, ...]) -> dict:
        x, y = at
        data = {
            "id": n,
            "label": attrs["label"],
            "op": attrs["op"],
            "kind": value.kind,
            "type": ", ".join(str(v.spec) for v in node.outputs) if node and node.outputs[1:]
                    else str(value.spec),
            "shape": list(value.spec.shape),
            "dtype": value.spec.dtype.name,
            "device": value.spec.device,
            "source": attrs["source"],
            "source_line": _source_line(node),
            "lineage": list(attrs["lineage"]),
            "status": self.status.get(n, "kept"),
            "text": format_node(node) if node else f"{value} = {value.kind}",
            "is_output": attrs["is_output"],
            "updates": list(attrs["updates"]),  # the state this value is written back into
            "x": x,
            "y": y,
            "kernel": _kernel(node),
            "value": self.values.get(n),
        }
        if node is not None and len(node.outputs) > 1:  # one entry per result
            data["results"] = [{"id": v.id, "name": str(v), "type": str(v.spec),
                                "value": self.values.get(v.id)} for v in node.outputs]
        if attrs.get("subgraphs"):
            data["subgraphs"] = self.owned(n, attrs["subgraphs"], subgraphs(node), within)
            inside = {i for part in data["subgraphs"] for i in _ids(part)}
            data["changes_inside"] = self.count(inside)
        return data

    def owned(self, n: int, graphs_nx: dict[str, Any], graphs: dict[str, Graph],
              within: tuple[int, ...]) -> list[dict]:
        """The graphs node `n` owns, each a part with its name, inputs, outputs, the changes
        inside it and which run its values are from."""
        parts = []
        for key, sub in graphs_nx.items():
            graph = graphs[key]
            part = self.part(sub, graph, self.inner[(n, key)], self.before.get((n, key)),
                             (*within, n))
            parts.append({"key": key, "name": graph.name,
                          "inputs": [v.id for v in graph.inputs],
                          "outputs": [v.id for v in graph.outputs],
                          "changes": self.count(set(_ids(part))),
                          "values_from": self.notes.get((n, key), ""), **part})
        return parts

    def count(self, ids: set[int]) -> int:
        """How many of this stage's changes act on, or make, a node among `ids`."""
        return sum(1 for c in self.changes if not ids.isdisjoint((*c.nodes, *c.result)))

    def within(self, change: Any) -> list[int]:
        """The control-flow nodes whose graphs `change` happened in, outermost first."""
        for i in (*change.result, *change.nodes):
            if i in self.owners:
                return list(self.owners[i])
        return []


def _owned_parts(stage: dict) -> Any:
    """Every graph part the nodes of a stage (or of a part) own, by (owner id, key)."""
    for n in stage["nodes"]:
        for part in n.get("subgraphs", []):
            yield (n["id"], part["key"]), part
            yield from _owned_parts(part)


def _ids(part: dict) -> Any:
    """The ids of a part's nodes (removed ones too), and of the nodes of graphs they own."""
    for n in [*part["nodes"], *part["removed"]]:
        yield n["id"]
        for sub in n.get("subgraphs", []):
            yield from _ids(sub)


def _source_line(node: Node | None) -> str:
    if node is None or node.source is None:
        return ""
    return linecache.getline(node.source.filename, node.source.lineno).strip()


def _kernel(node: Node | None) -> dict | None:
    """A fused node's generated sources, and the nodes it stands for."""
    if node is None or getattr(node.op, "group", None) is None:
        return None
    group = node.op.group
    members = [*group.nodes, *([group.reduction] if group.reduction else [])]
    return {"name": group.name, "numpy": node.op.numpy_source, "cuda": node.op.cuda_source,
            "members": [format_node(m) for m in members]}
