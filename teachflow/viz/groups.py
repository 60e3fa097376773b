"""A model's graph by module: each module's nodes drawn as one box, closed until opened.

While a model is traced, each node records the scope it was made in: the modules whose
``forward`` was running, ``Sequential/0:Linear`` (`teachflow.core.errors.name_scope`), and the
gradient of such a node goes in ``gradients/Sequential/0:Linear``. Passes keep a node's scope
with its source line. The stepper draws each scope as a box, closed until the learner opens
it, as TensorBoard draws name scopes: a training step of 71 nodes reads as a few boxes (the
model, the loss, the gradients, the optimizer's step), and each opens on the modules inside it.

Each box is a *frame* laid out on its own, in the same way and with the same care from pass to
pass as the whole graph (`layout.layout_drawings`): its nodes, and the boxes of the scopes
inside it, each one unit. So every node has its place in the frame of its box (the whole graph
is the frame ``""``), and every box its place in the frame around it. An edge belongs to the
innermost frame that holds both its ends, where it joins the two units they are in.

A captured tensor (a weight) or a constant goes in the box of the first op that reads it, as
TensorBoard draws a variable in the scope that made it (an input stays outside: it comes from
the caller). Boxes may read each
other in a circle (a module called twice with another between; a kernel that fused ops of
the forward pass and of the gradient, drawn in one of their boxes): the layout draws an edge
that closes a circle as a curve back up (`layout.layout_edges`), and every box stays a box in
every stage, so the learner's map of the model holds from pass to pass.

`layout_grouped` returns, per stage, a `Layout` of every frame at once (places and routes by
unit: a node's id, or a box's id, a negative number) and the stage's boxes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from teachflow.graph import Graph, Value
from teachflow.viz.layout import (
    Drawing,
    Layout,
    layout_drawings,
    layout_growing,
    layout_stages,
    nodes_and_edges,
)

#: In a box's frame, an edge that spans more layers than this is drawn as one curve: a weight
#: that the model and the optimizer both read would otherwise widen the frame by a column of
#: bends in every layer between them, and the frame has few nodes for a curve to cross.
BOX_SPAN = 1


@dataclass
class Grouped:
    """One stage laid out by scope: `layout` places every unit in its frame; `groups` are the
    stage's boxes, ``{scope: box id}``; `scopes` each drawn node's scope (where not "")."""

    layout: Layout
    groups: dict[str, int]
    scopes: dict[int, str]


def scope_of(node: Any) -> str:
    """The scope a node was made in ("" outside any module)."""
    return node.source.scope if node.source is not None else ""


def layout_grouped(snapshots: list[Any]) -> list[Grouped] | None:
    """Each stage laid out by scope (see the module docstring); None when no node of any stage
    was made in a scope (then `layout.layout_stages` lays it out whole)."""
    if not any(scope_of(n) for snap in snapshots for n in snap.graph.nodes):
        return None
    staged = [_ScopedStage(snap.graph) for snap in snapshots]
    ids: dict[str, int] = {}  # a scope -> its box's id, the same in every stage
    for stage in staged:
        for scope in sorted(stage.groups):
            ids.setdefault(scope, -1 - len(ids))
    # Each frame over the stages that have it, laid out as a compilation is.
    frames: dict[str, list[tuple[int, Drawing]]] = defaultdict(list)
    for k, (stage, snap) in enumerate(zip(staged, snapshots, strict=True)):
        for frame, (units, edges) in stage.frames(ids).items():
            frames[frame].append((k, (units, edges, snap.changes)))
    positions: list[dict] = [{} for _ in snapshots]
    routes: list[dict] = [{} for _ in snapshots]
    for found in frames.values():
        lays = layout_drawings([d for _, d in found], max_span=BOX_SPAN)
        for (k, _), lay in zip(found, lays, strict=True):
            positions[k].update(lay.positions)
            routes[k].update(lay.routes)
    out: list[Grouped] = []
    for k, (stage, snap) in enumerate(zip(staged, snapshots, strict=True)):
        if k and snap.graph is snapshots[k - 1].graph and not snap.changes:
            out.append(out[-1])  # a pass that changed nothing: the stage before, again
            continue
        out.append(Grouped(Layout(positions[k], routes[k]), {s: ids[s] for s in stage.groups},
                           {n: s for n, s in stage.scope.items() if s}))
    return out


class _ScopedStage:
    """One stage's graph by scope: each drawn node's scope, and its boxes (every scope and
    every scope around one)."""

    def __init__(self, graph: Graph) -> None:
        self.nodes, self.edges = nodes_and_edges(graph)
        self.scope = _scopes(graph)
        self.groups = {prefix for scope in self.scope.values() for prefix in _prefixes(scope)}

    def group_of(self, node: int) -> str:
        """The box node `node` is drawn in: its scope's longest prefix that is a box."""
        return next((p for p in reversed(_prefixes(self.scope[node])) if p in self.groups), "")

    def chain(self, node: int) -> list[str]:
        """The boxes `node` is in, innermost first, and the whole graph's frame ("") last."""
        inner = self.group_of(node)
        return [*(p for p in reversed(_prefixes(inner)) if p in self.groups), ""]

    def units(self) -> dict[str, tuple[set, set]]:
        """Each frame's units (node ids, and the scopes of the boxes in it) and its edges
        between them (pairs of units), from the stage's edges."""
        chains = {n: self.chain(n) for n in self.nodes}
        frames: dict[str, tuple[set, set]] = defaultdict(lambda: (set(), set()))
        for n, chain in chains.items():
            frames[chain[0]][0].add(n)
            for inner, outer in pairwise(chain):
                frames[outer][0].add(inner)
        for u, v in self.edges:
            a, b = chains[u], chains[v]
            frame = next(f for f in a if f in b)  # the innermost frame holding both
            ends = (_unit_in(u, a, frame), _unit_in(v, b, frame))
            frames[frame][1].add(ends)
        return frames

    def frames(self, ids: dict[str, int]) -> dict[str, tuple[list, list]]:
        """Each frame's units and edges as layout takes them: sorted, a box by its id."""
        def key(unit: Any) -> int:
            return ids[unit] if isinstance(unit, str) else unit

        return {frame: (sorted(key(u) for u in units),
                        sorted((key(a), key(b)) for a, b in edges))
                for frame, (units, edges) in self.units().items()}


def stage_layouts(compilation: Any) -> tuple[list[Layout], list[Grouped] | None]:
    """Each stage's layout, and its boxes of scopes (None when there are none): by module
    (`layout_grouped`); or, where no node was made in a module's scope, whole
    (`layout.layout_stages`); or, for a graph watched as it grows (`teachflow.viz.watch`), as
    it ends up (`layout.layout_growing`)."""
    snapshots = compilation.snapshots
    if getattr(compilation, "grows", False):
        return layout_growing(snapshots), None
    grouped = layout_grouped(snapshots)
    return ([g.layout for g in grouped] if grouped else layout_stages(snapshots)), grouped


def boxes_data(grouped: Grouped, lay: Layout, routes: dict[str, list]) -> list[dict]:
    """A stage's boxes as the stepper's data has them (`teachflow.viz.stepper_data`): each its id,
    its scope and its place in the box around it; the bends of the edges between boxes join
    `routes` (an edge keeps its first route)."""
    for (u, v), points in lay.routes.items():
        if (u < 0 or v < 0) and len(points) > 2:
            routes.setdefault(f"{u}>{v}", [list(p) for p in points[1:-1]])
    return [{"id": i, "scope": scope, "x": lay.positions[i][0], "y": lay.positions[i][1]}
            for scope, i in sorted(grouped.groups.items())]


def collapsed(stage: dict) -> dict:
    """A full stage (`teachflow.viz.expand`) as it is drawn with every box closed: the nodes
    in no box and the outermost boxes (each a node that owns one graph, captioned with how
    many nodes it holds), and the edges between them (as `widgets/stepper/groups.js` draws
    it; for the static picture, `teachflow.viz.svg`)."""
    scopes = {g["scope"] for g in stage["groups"]}
    top = {g["scope"]: g for g in stage["groups"]
           if not any(p in scopes for p in _prefixes(g["scope"])[:-1])}

    def unit(node: dict) -> Any:  # (the outermost box it is in, or itself)
        return next((top[p]["id"] for p in _prefixes(node["scope"]) if p in top), node["id"])

    units = {n["id"]: unit(n) for n in stage["nodes"]}
    held: dict[int, list[dict]] = defaultdict(list)
    for n in stage["nodes"]:
        held[units[n["id"]]].append(n)
    nodes = [n for n in stage["nodes"] if units[n["id"]] == n["id"]]
    changed = [{*c["nodes"], *c["result"]} for c in stage["changes"]]
    for g in top.values():
        ops = [n for n in held[g["id"]] if n["kind"] == "node"]
        ids = {n["id"] for n in held[g["id"]]}
        nodes.append({"id": g["id"], "kind": "module", "x": g["x"], "y": g["y"], "text": g["scope"],
                      "label": g["scope"], "status": "kept",
                      "is_output": any(n["is_output"] for n in ops),
                      "subgraphs": [{"key": f"{len(ops)} node{'s' * (len(ops) != 1)}"}],
                      "changes_inside": sum(1 for c in changed if not c.isdisjoint(ids))})
    at = {n["id"]: [n["x"], n["y"]] for n in nodes}
    edges, seen = [], set()
    for e in stage["edges"]:
        ends = (units[e["from"]], units[e["to"]])
        if ends == (e["from"], e["to"]):
            edges.append(e)
        elif ends[0] != ends[1] and ends not in seen:
            seen.add(ends)
            edges.append({"from": ends[0], "to": ends[1], "route": [at[ends[0]], at[ends[1]]]})
    return {**stage, "nodes": nodes, "edges": edges}


def _unit_in(node: int, chain: list[str], frame: str) -> Any:
    """The unit of `frame` that node `node` (in the boxes `chain`) is drawn in: itself, or the
    box inside `frame` that holds it."""
    at = chain.index(frame)
    return node if at == 0 else chain[at - 1]


def _prefixes(scope: str) -> list[str]:
    """``"a/b/c"`` -> ``["a", "a/b", "a/b/c"]`` ([] for "")."""
    parts = scope.split("/") if scope else []
    return ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]


def _scopes(graph: Graph) -> dict[int, str]:
    """Each drawn node's scope: an op's own; a captured tensor's or a constant's, the scope of
    the first op that reads it (a layer's weight goes in the layer's box, as TensorBoard draws
    a variable in the scope that made it; its gradient and its update read it from there);
    an input's "" (it comes from the caller)."""
    scopes: dict[int, str] = {v.id: "" for v in graph.values() if v.producer is None}
    first = set(scopes) - {v.id for v in graph.inputs}
    for node in graph.nodes:
        scopes[node.id] = scope_of(node)
        for o in node.inputs:
            if isinstance(o, Value) and o.id in first:
                scopes[o.id] = scopes[node.id]
                first.discard(o.id)
    return scopes


__all__ = ["Grouped", "boxes_data", "collapsed", "layout_grouped", "scope_of", "stage_layouts"]
