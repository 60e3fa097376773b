"""Drawing a dataflow graph: a layered layout of our own, stable from one pass to the next.

The classic recipe for drawing a DAG (Sugiyama's) in four steps:

1. **Layers.** Each node goes one layer below its deepest operand (longest path from the
   inputs). Inputs, captures and constants sit just above their first user instead of all at the
   top, so a weight does not send an edge across the whole picture.
2. **Dummy nodes.** An edge that spans several layers is split by a dummy node in every layer it
   crosses, so it can bend around the nodes in between. The dummies' places become the edge's
   route.
3. **Order within layers.** A few sweeps down and up the layers place each node at the average
   position of its neighbours in the layer before (the *barycenter* heuristic), which removes most
   edge crossings. Ties keep the node id order, so the layout is deterministic.
4. **Coordinates.** Layer index gives y; the order gives x.

For a whole compilation, the trace is laid out once and every later stage reuses it: a node that
survives a pass keeps its place, and a node a pass creates takes the place of what it replaced
(a fused kernel where its last op was, a folded constant where the folded node was). The
learner's mental map of the graph survives the passes.

A graph that a control-flow node owns (a loop's body, a branch of a ``cond``) is laid out on its
own, in the same way and with the same care from pass to pass (`layout_subgraphs`): the stepper
draws it inside its node's box when the learner opens the box.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

from teachflow.graph import Graph, subgraphs

#: Distance between neighbouring nodes in a layer, and between layers.
X_GAP, Y_GAP = 1.0, 1.0
#: Barycenter sweeps (each one down and one up).
SWEEPS = 4
#: Edges spanning more layers than this get no dummy nodes: they are drawn as one long curve.
#: (A model's weight feeds layers all over the graph; routing every such edge through every
#: layer would add hundreds of thousands of dummies to a big graph and freeze the layout.)
MAX_ROUTED_SPAN = 8


@dataclass
class Layout:
    """Where each node is drawn (x, y), and the points each edge passes through."""

    positions: dict[Any, tuple[float, float]]
    routes: dict[tuple[Any, Any], list[tuple[float, float]]] = field(default_factory=dict)
    layers: dict[Any, int] = field(default_factory=dict)

    @property
    def width(self) -> float:
        return max((x for x, _ in self.positions.values()), default=0.0) + X_GAP

    @property
    def height(self) -> float:
        return max((y for _, y in self.positions.values()), default=0.0) + Y_GAP


def layout(graph: Any) -> Layout:
    """Lay out an ``nx.DiGraph`` (such as ``Snapshot.nx``) top to bottom."""
    return layout_edges(sorted(graph.nodes), sorted(graph.edges))


def layout_edges(nodes: list, edges: list[tuple], max_span: int = MAX_ROUTED_SPAN) -> Layout:
    """Lay out the graph of `nodes` and `edges` (pairs of nodes) top to bottom; an edge that
    spans more than `max_span` layers is drawn as one curve."""
    layer, back = assign_layers(nodes, edges), set()
    if len(layer) < len(nodes):  # a cycle (no dataflow graph has one; boxes may)
        back = _back_edges(nodes, edges)
        edges = [e for e in edges if e not in back]
        layer = assign_layers(nodes, edges)
    order, chains = _with_dummies(nodes, edges, layer, max_span)
    order = reduce_crossings(order, chains)
    positions = _coordinates(order)
    routes = {edge: [positions[p] for p in chain] for edge, chain in chains.items()}
    routes.update({(u, v): [positions[u], positions[v]] for u, v in back})
    return Layout({n: positions[n] for n in nodes}, routes, layer)


def _back_edges(nodes: list, edges: list[tuple]) -> set[tuple]:
    """The edges that close a cycle, found by a depth-first walk (smallest node first): left
    out of the layering, they are drawn as curves back up. A dataflow graph has none; a graph
    of boxes may (a module called twice with another between: box, other box, box)."""
    succs: dict[Any, list] = defaultdict(list)
    for u, v in edges:
        succs[u].append(v)
    back: set[tuple] = set()
    state: dict[Any, int] = {}  # 1: on the walk's path; 2: done
    for start in nodes:
        if start in state:
            continue
        state[start] = 1
        stack = [(start, iter(succs[start]))]
        while stack:
            node, rest = stack[-1]
            nxt = next(rest, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                back.add((node, nxt))
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(succs[nxt])))
    return back


def assign_layers(nodes: list, edges: list[tuple]) -> dict[Any, int]:
    """Longest path from the sources; sources then move down to just above their first user."""
    preds: dict[Any, list] = defaultdict(list)
    succs: dict[Any, list] = defaultdict(list)
    for u, v in edges:
        preds[v].append(u)
        succs[u].append(v)
    layer: dict[Any, int] = {}
    order = _topological(nodes, preds, succs)
    if len(order) < len(nodes):
        return {}  # a cycle: no layers (`layout_edges` breaks it first)
    for n in order:
        layer[n] = 1 + max((layer[p] for p in preds[n]), default=-1)
    for n in nodes:
        if not preds[n] and succs[n]:
            layer[n] = min(layer[s] for s in succs[n]) - 1
    return layer


def _topological(nodes: list, preds: dict, succs: dict) -> list:
    """Kahn's algorithm, smallest id first among the ready nodes (deterministic)."""
    waiting = {n: len(preds[n]) for n in nodes}
    ready = [n for n in nodes if waiting[n] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        n = heapq.heappop(ready)
        order.append(n)
        for s in succs[n]:
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(ready, s)
    return order


def _with_dummies(nodes: list, edges: list[tuple], layer: dict,
                  max_span: int = MAX_ROUTED_SPAN) -> tuple[list[list], dict]:
    """Nodes by layer (in id order), with a dummy per layer crossed by a long edge; and, for
    each edge, the chain of points it passes: source, dummies, target."""
    depth = max(layer.values(), default=0) + 1
    order: list[list] = [[] for _ in range(depth)]
    for n in nodes:
        order[layer[n]].append(n)
    chains = {}
    for u, v in edges:
        chain = [u]
        if layer[v] - layer[u] > max_span:  # a long edge: ends only, see MAX_ROUTED_SPAN
            chains[(u, v)] = [u, v]
            continue
        for lay in range(layer[u] + 1, layer[v]):
            dummy = ("dummy", u, v, lay)
            order[lay].append(dummy)
            chain.append(dummy)
        chains[(u, v)] = [*chain, v]
    return order, chains


def reduce_crossings(order: list[list], chains: dict, sweeps: int = SWEEPS) -> list[list]:
    """Barycenter sweeps: sort each layer by the mean position of its neighbours in the layer
    just above (sweeping down) or just below (sweeping up)."""
    # Only neighbours in adjacent layers pull on a node (long edges are drawn, not ordered).
    level = {n: i for i, layer in enumerate(order) for n in layer}
    up: dict[Any, list] = defaultdict(list)
    down: dict[Any, list] = defaultdict(list)
    for chain in chains.values():
        for a, b in pairwise(chain):
            if level[b] == level[a] + 1:
                down[a].append(b)
                up[b].append(a)
    # A layer of one node has nothing to sort; and once a whole sweep moves nothing, no later
    # sweep will (a long chain of ops is mostly such layers, and settles at once).
    order = [list(layer) for layer in order]
    busy = [i for i, layer in enumerate(order) if len(layer) > 1]
    for _ in range(sweeps):
        before = [order[i] for i in busy]
        for i in busy:
            if i > 0:
                order[i] = _by_barycenter(order[i], order[i - 1], up)
        for i in reversed(busy):
            if i < len(order) - 1:
                order[i] = _by_barycenter(order[i], order[i + 1], down)
        if all(order[i] == layer for i, layer in zip(busy, before, strict=True)):
            break
    return order


def _by_barycenter(layer: list, fixed: list, neighbours: dict) -> list:
    """`layer` sorted by its nodes' mean places in `fixed`, the layer next to it, where all their
    `neighbours` are (`reduce_crossings` keeps only those); a node with none keeps its place."""
    where = {n: i for i, n in enumerate(fixed)}

    def key(item: tuple[int, Any]) -> tuple[float, int]:
        i, n = item
        places = [where[m] for m in neighbours[n]]
        return (sum(places) / len(places) if places else float(i), i)

    return [n for _, n in sorted(enumerate(layer), key=key)]


def _coordinates(order: list[list]) -> dict[Any, tuple[float, float]]:
    """x by place in the layer, each layer centred on the widest; y by layer."""
    widest = max((len(layer) for layer in order), default=0)
    positions = {}
    for y, layer in enumerate(order):
        offset = (widest - len(layer)) / 2
        for x, n in enumerate(layer):
            positions[n] = ((offset + x) * X_GAP, y * Y_GAP)
    return positions


def count_crossings(order: list[list], chains: dict) -> int:
    """Edge crossings between consecutive layers (for tests and for the curious)."""
    where = {n: i for layer in order for i, n in enumerate(layer)}
    level = {n: y for y, layer in enumerate(order) for n in layer}
    segments: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for chain in chains.values():
        for a, b in pairwise(chain):
            segments[level[a]].append((where[a], where[b]))
    crossings = 0
    for segs in segments.values():
        segs.sort()
        for i, (a1, b1) in enumerate(segs):
            crossings += sum(1 for a2, b2 in segs[i + 1:] if a2 > a1 and b2 < b1)
    return crossings


# --- A whole compilation, one mental map ------------------------------------------------------


def layout_stages(snapshots: Iterable[Any]) -> list[Layout]:
    """One layout per snapshot (its ``graph`` and ``changes``). The first (the trace) is laid
    out; each later stage keeps every surviving node's place and puts each new node where the
    nodes it replaced were."""
    snapshots = list(snapshots)
    drawings: list[Drawing | None] = []
    for k, snap in enumerate(snapshots):
        if k and snap.graph is snapshots[k - 1].graph and not snap.changes:
            drawings.append(None)  # a pass that changed nothing
        else:
            drawings.append((*nodes_and_edges(snap.graph), snap.changes))
    return layout_drawings(drawings)


#: A stage to draw: its nodes, its edges (pairs of nodes), and the changes its pass made.
Drawing = tuple[list, list[tuple], list[Any]]


def layout_drawings(drawings: list[Drawing | None],
                    max_span: int = MAX_ROUTED_SPAN) -> list[Layout]:
    """One layout per stage given as a `Drawing` (None: the stage before, again), as
    `layout_stages` lays out a compilation's: the first laid out (`layout_edges`), each later
    one keeping the places of the nodes it keeps."""
    base = layout_edges(*drawings[0][:2], max_span)
    place = dict(base.positions)
    layouts = [base]
    for drawing in drawings[1:]:
        if drawing is None:
            layouts.append(layouts[-1])
            continue
        nodes, edges, changes = drawing
        kept = {place[n] for n in nodes if n in place}
        new: list = []
        for change in changes:
            origins = [place[i] for i in change.nodes if i in place]
            for i in change.result:
                if i not in place and origins:
                    place[i] = origins[-1]  # the last op replaced: a fused kernel's root
                    new.append(i)
        users: dict[Any, list] = defaultdict(list)
        for u, v in edges:
            users[u].append(v)
        for n in nodes:
            if n not in place:  # a value no change accounts for: beside its first user
                placed = [place[s] for s in users[n] if s in place]
                place[n] = ((placed[0][0] - X_GAP / 2, placed[0][1] - Y_GAP) if placed
                            else (0.0, 0.0))
                new.append(n)
        for n in new:  # (a rule that made several nodes: side by side, clear of the rest)
            place[n] = _free(place[n], kept)
            kept.add(place[n])
        positions = {n: place[n] for n in nodes}
        # An edge the trace had keeps its route (its ends kept their places); a new one is
        # drawn straight.
        traced = base.routes
        routes = {(u, v): traced.get((u, v)) or [positions[u], positions[v]] for u, v in edges}
        layouts.append(Layout(positions, routes, {}))
    return layouts


def layout_growing(snapshots: Iterable[Any]) -> list[Layout]:
    """One layout per snapshot of a graph that only grows (a trace watched node by node): the
    last is laid out, and each stage draws its nodes where the last has them, so each new node
    appears where it will stay."""
    snapshots = list(snapshots)
    whole = layout_edges(*nodes_and_edges(snapshots[-1].graph))
    layouts = []
    for snap in snapshots:
        nodes, edges = nodes_and_edges(snap.graph)
        layouts.append(Layout({n: whole.positions[n] for n in nodes},
                              {e: whole.routes[e] for e in edges}, {}))
    return layouts


def _free(at: tuple[float, float], taken: set) -> tuple[float, float]:
    """`at`, or the nearest place in its row, half a step at a time, that `taken` has not."""
    x, y = at
    step = 0
    while (x, y) in taken:
        step += 1
        x = at[0] + (step + 1) // 2 * X_GAP / 2 * (1 if step % 2 else -1)
    return x, y


def layout_subgraphs(snapshots: Iterable[Any]) -> list[dict[tuple[Any, str], Layout]]:
    """For each snapshot, a layout of each graph a node owns (at any depth), by the owner's id
    and the graph's parameter name (``(7, "body_fn")``). Each such graph is laid out over the
    stages that have it as `layout_stages` lays out the whole: its nodes keep their places."""
    snapshots = list(snapshots)
    stages: dict[tuple[Any, str], list[tuple[int, Any]]] = defaultdict(list)
    for i, snap in enumerate(snapshots):
        for path, sub in _owned_graphs(snap.graph):  # (what layout_stages reads of a snapshot)
            stages[path].append((i, SimpleNamespace(graph=sub, changes=snap.changes)))
    layouts: list[dict[tuple[Any, str], Layout]] = [{} for _ in snapshots]
    for path, found in stages.items():
        for (i, _), lay in zip(found, layout_stages(s for _, s in found), strict=True):
            layouts[i][path] = lay
    return layouts


def nodes_and_edges(graph: Graph) -> tuple[list[int], list[tuple[int, int]]]:
    """The nodes and edges of `graph`'s drawing (`Graph.drawn_values`, `Graph.drawn_edges`) as
    the layout takes them: the nodes' ids and the edges' (pairs of them), both sorted."""
    return sorted([v.id for v in graph.drawn_values()]), sorted(graph.drawn_edges())


def _owned_graphs(graph: Graph) -> Iterable[tuple[tuple[int, str], Graph]]:
    """Every graph a node of `graph` owns, at any depth, with its owner's id and its parameter
    name."""
    for node in graph.nodes:
        for key, sub in subgraphs(node).items() if node.params else ():
            yield (node.id, key), sub
            yield from _owned_graphs(sub)
