"""The stepper's data as full stages: each stage with everything the front-end draws.

`teachflow.viz.stepper_data` sends each node once and each stage as a list of the nodes' entries.
The browser puts a stage back together when it first shows it (``widgets/stepper/data.js``), and
`expand` does the same in Python, step for step: for the static picture (`teachflow.viz.svg`), and
for the tests, which check that what the browser rebuilds is this, and that this is the compilation.

A full stage is ``{"index", "pass", "changed", "changes", "stats", "memory", "updates", "nodes",
"edges", "removed", "text", "groups"}`` (``memory`` in full, `teachflow.viz.memory`):

- a node is its entry with every key (the defaults filled in), its ``status`` in this stage (what
  the stage's changes made of it: added, replaced, merged, fused; else kept), its
  ``source_line``, its ``value`` (each result's, for a node with several), its ``kernel`` (name,
  sources, which one ran), its ``body`` as lines of text, and its ``subgraphs`` as full parts;
- an edge is ``{"from", "to", "index", "indices", "route"}``: from the node that makes an operand
  to the node that reads it, at operand ``index`` (``indices``: every operand it is), through
  ``route`` (its ends and bends, in layout units);
- ``removed`` are the nodes of the stage before that this stage has not (drawn faded), as the
  stage before has them (the graphs a removed node owns, without what that stage removed);
- ``text`` is the stage's text form, ``str(snapshot.graph)``;
- ``groups`` are its boxes of modules, as the data has them (`teachflow.viz.groups`);
- a part (a graph a node owns) has its ``nodes``, ``edges`` and ``removed`` as a stage has, and
  the ``removed_edges`` that went with the nodes it lost.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
from typing import Any

#: What an entry that leaves a key out has there (``lineage`` leaves out its own id).
DEFAULTS: dict[str, Any] = {"kind": "node", "device": "cpu", "source": "", "inputs": [],
                            "is_output": False, "updates": [], "scope": ""}


def expand(data: dict) -> list[dict]:
    """Every stage of `data` (as `compilation_data` makes it), full."""
    sources = kernel_sources(data)
    return [_FullStage(data, sources, i).full() for i in range(len(data["stages"]))]


def expand_stage(data: dict, index: int) -> dict:
    """Stage `index` of `data`, full (-1: the last)."""
    return _FullStage(data, kernel_sources(data), index % len(data["stages"])).full()


def kernel_sources(data: dict) -> list[dict]:
    """Each kernel's generated sources, ``{"numpy", "c", "cuda"}`` (None: not generated)."""
    return json.loads(gzip.decompress(base64.b64decode(data["sources"]))) if data["sources"] \
        else []


def entries(data: dict, spans: list[int]) -> list[dict]:
    """The entries of the table that `spans` (runs: first, how many) names, in order."""
    table = data["nodes"]
    return [e for start, count in zip(spans[::2], spans[1::2], strict=True)
            for e in table[start:start + count]]


class _FullStage:
    """Stage `index` of `data`, put together. Made `shallow`, it stands for the stage before
    another: its nodes as that stage has them, but the graphs they own without what it removed
    from them (a stage's removed nodes are the stage before's, and no further back)."""

    def __init__(self, data: dict, sources: list[dict], index: int,
                 shallow: bool = False) -> None:
        self.data, self.sources, self.shallow = data, sources, shallow
        self.stage = data["stages"][index]
        self.status = {i: c["kind"] for c in self.stage["changes"] for i in c["result"]}
        self.before = _FullStage(data, sources, index - 1, shallow=True) \
            if index > 0 and not shallow else None
        # The stage before's parts, by (owner, key), for the nodes each lost.
        self.parts_before = dict(_parts(data, self.before.listed())) if self.before else {}

    def listed(self) -> list[dict]:
        return entries(self.data, self.stage["nodes"])

    def full(self) -> dict:
        stage = self.stage
        listed = self.listed()
        nodes = [self.node(e) for e in listed]
        present = {n["id"] for n in nodes}
        return {
            "index": stage["index"], "pass": stage["pass"], "changed": stage["changed"],
            "nodes": nodes, "edges": edges(nodes, self.data["routes"]),
            "removed": [self.before.node(e) for e in self.before.listed()
                        if e["id"] not in present] if self.before else [],
            "changes": stage["changes"], "stats": stage["stats"],
            "memory": memory_of(self.data, stage),
            "text": text(self.data, stage, listed),
            "updates": stage["updates"],
            "groups": stage.get("groups", []),
        }

    def node(self, entry: dict) -> dict:
        i = entry["id"]
        n = {**DEFAULTS, "lineage": [i], **derived(entry), **entry}
        n.update({"status": self.status.get(i, "kept"),
                  "source_line": self.data["lines"].get(n["source"], ""),
                  "value": self.value(i, entry["results"][0]["type"] if "results" in entry
                                      else n["type"]),
                  "kernel": self.kernel(entry["kernel"]) if "kernel" in entry else None,
                  "body": body(self.data, entry)})
        if "results" in entry:
            n["results"] = [{**r, "value": self.value(r["id"], r["type"])}
                            for r in entry["results"]]
        if "subgraphs" in entry:
            n["subgraphs"] = [self.part(i, p) for p in entry["subgraphs"]]
        return n

    def value(self, i: int, type_: str) -> dict | None:
        """Value `i`'s summary, with the shape and dtype its type gives, and whether its
        preview is cut short, where it leaves them out."""
        summary = self.data["values"].get(str(i))
        if summary is None:
            return None
        value = {**value_type(type_), **summary}
        value.setdefault("truncated", math.prod(value["shape"]) > self.data["preview_elements"])
        return value

    def part(self, owner: int, part: dict) -> dict:
        nodes = [self.node(e) for e in entries(self.data, part["nodes"])]
        full = {**part, "nodes": nodes, "edges": edges(nodes, self.data["routes"]),
                "removed": [], "removed_edges": []}
        before = self.parts_before.get((owner, part["key"]))
        if before is not None:
            present = {n["id"] for n in nodes}
            old = [self.before.node(e) for e in entries(self.data, before["nodes"])]
            full["removed"] = [n for n in old if n["id"] not in present]
            gone = {n["id"] for n in full["removed"]}
            full["removed_edges"] = [e for e in edges(old, self.data["routes"])
                                     if e["from"] in gone or e["to"] in gone]
        return full

    def kernel(self, k: int) -> dict:
        return {**self.data["kernels"][k], **self.sources[k]}


def derived(entry: dict) -> dict:
    """What an entry's text says of its ``op``, ``label`` and ``type`` (``%7 = mul %5, 2.0 :
    f32[3]``: mul, ``%7 = mul``, ``f32[3]``): the entry leaves out those it agrees with."""
    name, _, rest = entry["text"].partition(" = ")
    kind = entry.get("kind", "node")
    if kind != "node":
        return {"op": kind, "label": f"{name} ({kind})"}
    op = rest.split(" ", 1)[0]
    return {"op": op, "label": f"{name} = {op}", "type": rest.rpartition(" : ")[2]}


def value_type(type_: str) -> dict:
    """``f32[16,3]`` -> ``{"dtype": "f32", "shape": [16, 3]}`` (nothing for a shape not known
    in full): what a summary leaves out when its value's type says it."""
    dtype, _, dims = type_.partition("[")
    sizes = dims.rstrip("]").split(",") if dims.rstrip("]") else []
    if not dims.endswith("]") or not all(d.isdigit() for d in sizes):
        return {}
    return {"dtype": dtype, "shape": [int(d) for d in sizes]}


def edges(nodes: list[dict], routes: dict[str, list]) -> list[dict]:
    """The edges between `nodes` (full nodes of one graph), from their operands, sorted."""
    maker = {}  # value id -> the node that makes it
    for n in nodes:
        maker[n["id"]] = n["id"]
        for r in n.get("results", ()):
            maker[r["id"]] = n["id"]
    at = {n["id"]: [n["x"], n["y"]] for n in nodes}
    found: dict[tuple[int, int], dict] = {}
    for n in nodes:
        for index, value in enumerate(n["inputs"]):
            if value is None:
                continue
            key = (maker.get(value, value), n["id"])
            if key in found:
                found[key]["indices"].append(index)
            else:
                found[key] = {"from": key[0], "to": key[1], "index": index, "indices": [index]}
    for (u, v), edge in found.items():
        edge["route"] = [at[u], *routes.get(f"{u}>{v}", []), at[v]]
    return [found[key] for key in sorted(found)]


def text(data: dict, stage: dict, nodes: list[dict]) -> str:
    """The stage's text form from its entries (`nodes`), as `Graph.__str__` prints it: each
    node's line, the lines under it, and the source it came from in a column of its own,
    aligned past the widest line."""
    lines: list[tuple[str, str | None]] = []  # (code, source; None: not aligned)
    for e in nodes:
        if e.get("kind") == "input":
            continue  # (in the head)
        lines.append((e.get("line", e["text"]), e.get("source", "")))
        lines += [(line, "") for line in body(data, e)]
        lines += [(line, None) for line in e.get("owned", ())]
    width = max((len(code) for code, source in lines if source is not None), default=0)
    return "\n".join([stage["head"], *(f"  {code:<{width}}   # {source}" if source
                                       else f"  {code}" for code, source in lines),
                      *stage["tail"]])


def body(data: dict, entry: dict) -> list[str]:
    """The lines printed under a node (a fused kernel's ops), as text."""
    table = data["nodes"]
    return [f"  {table[b]['text']}" if isinstance(b, int) else b for b in entry.get("body", ())]


def _parts(data: dict, listed: list[dict]) -> Any:
    """Every part the entries `listed` own, at any depth, by (owner id, key)."""
    for e in listed:
        for part in e.get("subgraphs", ()):
            yield (e["id"], part["key"]), part
            yield from _parts(data, entries(data, part["nodes"]))


def memory_of(data: dict, stage: dict) -> dict | None:
    """A stage's memory in full: its own, or the earlier stage's it refers to (``as_stage``)."""
    memory = stage.get("memory")
    if memory and "as_stage" in memory:
        return data["stages"][memory["as_stage"]]["memory"]
    return memory
