"""A compilation as plain data: what the pass stepper (in the browser) needs, sent once.

Everything the learner can look at is computed here, in Python, and serialised to JSON-ready
dicts: every stage's nodes with their place in the layout, their status against the stage before
(added, replaced, merged, fused, kept), their details (op, type, the user's source line, lineage,
a fused kernel's generated source, the value on the example inputs), every edge with its route,
the stage's changes in plain words, its figures, and its text form. The front-end only draws it,
so stepping needs no round trip to the kernel and still works from a saved notebook or page.
"""

from __future__ import annotations

import linecache
from typing import TYPE_CHECKING, Any

import numpy as np

from teachflow.executor import interpret
from teachflow.graph import Graph, Node, format_node
from teachflow.spec import short_dtype
from teachflow.tensor import as_tensor
from teachflow.viz.layout import Layout, layout_stages

if TYPE_CHECKING:  # (the compiler shows itself with these; they only read what it made)
    from teachflow.compiler import Compilation, Snapshot

#: Values with more elements than this are summarised (shape, min, max, mean, a few numbers).
PREVIEW_ELEMENTS = 12


def compilation_data(compilation: Compilation, example_inputs: list | None = None) -> dict:
    """The whole compilation as a JSON-ready dict (see the module docstring)."""
    snapshots = compilation.snapshots
    layouts = layout_stages(snapshots)
    stages = []
    summaries: dict[int, dict] = {}  # a node keeps its id, and its value, across the passes
    for i, (snap, lay) in enumerate(zip(snapshots, layouts, strict=True)):
        values = (_values(snap.graph, example_inputs, summaries)
                  if example_inputs is not None else {})
        stages.append(stage_data(snap, lay, values, previous=stages[-1] if stages else None,
                                 index=i))
    return {"name": compilation.graph.name, "stages": stages}


def stage_data(snap: Snapshot, lay: Layout, values: dict[int, Any], previous: dict | None,
               index: int) -> dict:
    g = snap.nx
    graph = snap.graph
    by_id = {v.id: v for v in graph.values()}
    nodes = []
    for n, attrs in sorted(g.nodes(data=True)):
        value = by_id[n]
        x, y = lay.positions[n]
        nodes.append({
            "id": n,
            "label": attrs["label"],
            "op": attrs["op"],
            "kind": value.kind,
            "type": str(value.spec),
            "shape": list(value.spec.shape),
            "dtype": value.spec.dtype.name,
            "device": value.spec.device,
            "source": attrs["source"],
            "source_line": _source_line(value.producer),
            "lineage": list(attrs["lineage"]),
            "status": attrs["status"],
            "text": format_node(value.producer) if value.producer else f"{value} = {value.kind}",
            "is_output": attrs["is_output"],
            "updates": list(attrs["updates"]),  # the state this value is written back into
            "x": x,
            "y": y,
            "kernel": _kernel(value.producer),
            "value": values.get(n),
        })
    edges = [{"from": u, "to": v, "index": d["index"], "indices": list(d["indices"]),
              "route": [list(p) for p in lay.routes[(u, v)]]}
             for u, v, d in sorted(g.edges(data=True))]
    changes = [{"kind": c.kind, "nodes": list(c.nodes), "result": list(c.result),
                "rule": c.rule, "sentence": c.sentence} for c in snap.changes]
    return {
        "index": index,
        "pass": snap.pass_name,
        "changed": bool(snap.changes),
        "nodes": nodes,
        "edges": edges,
        "removed": _removed(snap, previous),
        "changes": changes,
        "stats": dict(snap.stats),
        "text": str(graph),
        # What a call writes back after the graph runs: (state, the node whose value it takes).
        "updates": [{"state": name, "value": value} for name, value in g.graph["updates"]],
    }


def _removed(snap: Snapshot, previous: dict | None) -> list[dict]:
    """The previous stage's nodes that this stage no longer has (drawn faded, marked removed)."""
    if previous is None:
        return []
    present = set(snap.nx.nodes)
    return [n for n in previous["nodes"] if n["id"] not in present]


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


def _values(graph: Graph, inputs: list, known: dict[int, dict]) -> dict[int, dict]:
    """Each value of the stage on the example inputs, summarised for display. `known` holds the
    summaries of earlier stages: a node that survived a pass has the same value, so only the
    nodes a pass created are summarised again."""

    def keep(value_id: int, array: Any) -> None:
        if value_id not in known:
            known[value_id] = summarize(np.asarray(array))

    # The state the graph reads, as it is now (a .grad that is None now reads as zeros).
    state = {v.data: v.data.read(inputs) for v in graph.captures}
    state = {slot: as_tensor(np.zeros(v.shape, v.dtype)) if t is None else t
             for (slot, t), v in zip(state.items(), graph.captures, strict=True)}
    for v, t in zip(graph.inputs, inputs, strict=True):
        keep(v.id, t.numpy())
    for v in graph.captures:
        keep(v.id, state[v.data].numpy())
    for v in graph.constants:
        keep(v.id, v.data)
    with np.errstate(all="ignore"):
        interpret(graph, inputs, on_node=lambda node, result: keep(node.id, result.numpy()),
                  state=state)
    return {v.id: known[v.id] for v in graph.values() if v.id in known}


def summarize(array: np.ndarray) -> dict:
    """Shape, dtype, a few numbers, and for a float array min/max/mean."""
    flat = array.reshape(-1)
    shown = array if array.size <= PREVIEW_ELEMENTS else flat[:PREVIEW_ELEMENTS]
    summary: dict[str, Any] = {
        "shape": list(array.shape), "dtype": short_dtype(array.dtype),
        "preview": np.array2string(shown, precision=4, separator=", "),
        "truncated": bool(array.size > PREVIEW_ELEMENTS)}
    if array.size and array.dtype.kind in "fiu":
        with np.errstate(all="ignore"):
            summary.update(min=_number(np.nanmin(array)), max=_number(np.nanmax(array)),
                           mean=_number(np.nanmean(array)))
    return summary


def _number(x: Any) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None

