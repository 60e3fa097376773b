"""What the stepper's data reads off one node or one graph, each a small function of its own:
the lines of a graph's text form around its nodes (`head`, `tail`, and a capture's or a
constant's line), whether a pass's copy of a node is the node again (`same_node`), a fused
kernel's entry and generated sources (made once per kernel), the summaries of the values the
nodes show, and a list of indices written as runs.
`teachflow.viz.stepper_data` puts them together into the data the stepper draws.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

from teachflow.graph import Graph, Node, Value, callees
from teachflow.graph.node import format_constant  # (lines as str(graph) has)
from teachflow.viz.expand import value_type
from teachflow.viz.values import PREVIEW_ELEMENTS

#: A fused kernel's generated sources: where the data keeps each, and the op's name for it.
SOURCES = {"numpy": "numpy_source", "c": "c_source", "cuda": "cuda_source"}


def runs(indices: list[int]) -> list[int]:
    """``[4, 5, 6, 9]`` -> ``[4, 3, 9, 1]``: runs of consecutive numbers, each as its first and
    how many there are."""
    out: list[int] = []
    for i in indices:
        if out and out[-2] + out[-1] == i:
            out[-1] += 1
        else:
            out += [i, 1]
    return out


#: The sources made for each fused op (weakly: they go with the op), made once per kernel: its
#: three generators take a while on a big kernel, and a compilation may be shown many times.
_SOURCES_MADE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def kernel_sources(op: Any) -> tuple[dict[str, str | None], dict[str, str]]:
    """A fused op's generated sources by language (None where none could be made), and why
    not, where not."""
    made = _SOURCES_MADE.get(op)
    if made is None:
        sources, missing = {}, {}
        for lang, name in SOURCES.items():
            try:
                sources[lang] = getattr(op, name)
            except Exception as err:  # (a generator not written yet, or failing)
                sources[lang] = None
                missing[lang] = f"{type(err).__name__}: {err}"
        made = _SOURCES_MADE[op] = sources, missing
    return made


def kernel_entry(op: Any) -> tuple[dict, dict[str, str | None]]:
    """A fused op's entry in the kernels' table (its name, which kernel ran on the CPU, and
    why a source is missing, where one is), and its sources."""
    sources, missing = kernel_sources(op)
    try:
        ran = op.ran
    except Exception:  # (an op that cannot say)
        ran = None
    kernel = {"name": op.group.name, "ran": ran}
    if missing:
        kernel["missing"] = missing
    return kernel, sources


def shown_summaries(values: Any, types_shown: dict[int, str]) -> dict[str, dict]:
    """The summary of each value a node shows (`types_shown`: its id -> its type), by id,
    without the shape and dtype that its type says (`expand.value_type`), nor whether its
    preview is cut short when its shape says so (none without `values`)."""
    if values is None:
        return {}
    out = {}
    for i, type_ in types_shown.items():
        summary = values.summaries.get(i)
        if summary is not None:
            said = {**value_type(type_), "truncated": math.prod(summary["shape"])
                    > PREVIEW_ELEMENTS}
            out[str(i)] = {k: x for k, x in summary.items() if said.get(k, ...) != x}
    return out


def same_node(a: Node, b: Node) -> bool:
    """Whether `b` is `a` again (a pass copies every node it keeps): the same op on the same
    operands, with the same parameters, results, source and lineage. (A copy shares most of
    these with its original: `is` answers first.)"""
    if (a.op is not b.op or len(a.inputs) != len(b.inputs) or len(a.outputs) != len(b.outputs)
            or (a.source is not b.source and a.source != b.source)
            or (a.lineage is not b.lineage and a.lineage != b.lineage)):
        return False
    for x, y in zip(a.inputs, b.inputs, strict=True):
        if isinstance(x, Value):
            if not isinstance(y, Value) or x.id != y.id:
                return False
        elif isinstance(y, Value) or type(x) is not type(y) or x != y:
            return False
    for x, y in zip(a.outputs, b.outputs, strict=True):
        if x.id != y.id or (x.spec is not y.spec and x.spec != y.spec):
            return False
    try:
        return a.params is b.params or bool(a.params == b.params)
    except (TypeError, ValueError):  # (an array among them: compared as different)
        return False


def ids_inside(entries: list[dict], entry: dict) -> set[int]:
    """The ids of the nodes inside the graphs `entry` owns, at any depth."""
    ids: set[int] = set()
    for part in entry.get("subgraphs", ()):
        for start, count in zip(part["nodes"][::2], part["nodes"][1::2], strict=True):
            for inner in entries[start:start + count]:
                ids.add(inner["id"])
                ids |= ids_inside(entries, inner)
    return ids


def line_of(v: Value) -> str:
    """A capture's or a constant's line of the text form (an input's is in the head)."""
    if v.kind == "const":
        return f"{v} = const {format_constant(v.data)}{v.spec}"
    return f"{v} = {v.kind} {v.spec}"


def head(graph: Graph) -> str:
    """The first line of `graph`'s text form: ``graph f(%x: f32[3]) {``."""
    args = ", ".join(f"{v}: {v.spec}" for v in graph.inputs)
    name = "" if graph.name == "graph" else f" {graph.name}"
    return f"graph{name}({args}) {{"


def tail(graph: Graph) -> list[str]:
    """The lines of `graph`'s text form after its nodes: what it returns, the state it writes
    back, and the closing brace; then each function it calls, once."""
    lines = [f"  return {', '.join(str(v) for v in graph.results)}"] if graph.results else []
    for u in graph.updates:
        new = "None" if u.output is None else str(graph.outputs[u.output])
        lines.append(f"  %{u.slot.name} <- {new}")
    return [*lines, "}", *(line for name, callee in callees(graph).items()
                           for line in callee._text(f"graph @{name}"))]
