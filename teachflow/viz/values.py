"""Every value of a stage on the example inputs, summarised for the stepper's node details.

Each stage's graph runs once on the example inputs, node by node (`executor.interpret`), and
each result is summarised: its shape and dtype, a few numbers, and min, max and mean. A node that
survives a pass keeps its id and computes the same value, so a summary made at one stage serves
every later one: only the nodes a pass created are summarised again.

A control-flow node (`teachflow.control`) has one result per value its branches or its loop give,
so it gets one summary per result. The values *inside* the graphs it owns are no results of the
graph around it: `interpret` runs those graphs within the node. So each graph it owns runs once
more here, on what it got the first time it ran: the branch of a ``cond`` that ran, on the
node's operands (the other branch did not run, so its nodes have no values); a loop's condition
on the carry the loop starts with, and its body in the first step (if the loop takes one). Each
such graph gets a few words saying which run its values are from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from teachflow.control.cond import COND
from teachflow.control.loops import FORI, WHILE
from teachflow.errors import TeachflowError
from teachflow.executor import interpret
from teachflow.graph import Graph, Node, Value, subgraphs
from teachflow.spec import short_dtype
from teachflow.tensor import Tensor, as_tensor

#: Values with more elements than this are summarised (shape, min, max, mean, a few numbers).
PREVIEW_ELEMENTS = 12

#: (id of the node that owns a graph, the graph's parameter name) -> what its values are from.
Notes = dict[tuple[int, str], str]


def stage_values(graph: Graph, inputs: list, known: dict[int, dict]) -> tuple[dict, Notes]:
    """Each value of `graph` (and of the graphs its nodes own) on `inputs`, summarised, by value
    id; and, for each graph a node owns, which run its values are from. `known` holds the
    summaries of earlier stages and gets this stage's new ones."""
    # The state the graph reads, as it is now (a .grad that is None now reads as zeros).
    state = {v.data: v.data.read(inputs) for v in graph.captures}
    state = {slot: as_tensor(np.zeros(v.shape, v.dtype)) if t is None else t
             for (slot, t), v in zip(state.items(), graph.captures, strict=True)}
    notes: Notes = {}
    with np.errstate(all="ignore"):
        _run(graph, inputs, state, known, notes)
    return {i: known[i] for i in _value_ids(graph) if i in known}, notes


def _run(graph: Graph, inputs: Sequence[Tensor], state: dict, known: dict[int, dict],
         notes: Notes) -> list[Tensor]:
    """Run `graph`, summarising every value it computes; each control-flow node's graphs run
    again as they first ran (see the module docstring). Returns the graph's outputs."""
    env: dict[Value, Tensor] = {}  # what a control-flow node's operands are

    def keep(value: Value, t: Tensor) -> None:
        env[value] = t
        if value.id not in known:
            known[value.id] = summarize(t.numpy())

    for v, t in zip(graph.inputs, inputs, strict=True):
        keep(v, t)
    for v in graph.captures:
        keep(v, state[v.data])
    for v in graph.constants:
        keep(v, as_tensor(v.data))

    def on_node(node: Node, result: Any) -> None:
        for v, t in zip(node.outputs, result if isinstance(result, tuple) else (result,),
                        strict=True):
            keep(v, t)
        owned = subgraphs(node)
        if owned:
            args = [env[o] if isinstance(o, Value) else o for o in node.inputs]

            def run(key: str, sub_inputs: list) -> list[Tensor]:
                return _run(owned[key], sub_inputs, state, known, notes)

            try:
                said = _first_runs(node, args, run)
            except TeachflowError as err:  # (it ran inside the node, so this should not be)
                said = dict.fromkeys(owned, f"not computed: {err.message}")
            notes.update({(node.id, key): words for key, words in said.items()})

    return interpret(graph, inputs, on_node=on_node, state=state)


def _first_runs(node: Node, args: list, run: Callable[[str, list], list]) -> dict[str, str]:
    """Run each graph `node` owns as it first ran when the node did, with `run(key, inputs)`;
    say what the values of each are from. An op this does not know gets no values inside."""
    if node.op is COND:
        taken, other = ("true_fn", "false_fn") if _true(args[0]) else ("false_fn", "true_fn")
        run(taken, args[1:])
        return {taken: "in the branch that ran on the example inputs",
                other: "none: this branch did not run on the example inputs (the other did)"}
    if node.op is WHILE:  # the condition and the body read the carry, then what else they read
        (holds,) = run("cond_fn", args)
        said = {"cond_fn": "when the loop starts, before its first step"}
        if _true(holds):
            run("body_fn", args)
            said["body_fn"] = "in the loop's first step on the example inputs"
        else:
            said["body_fn"] = "none: the loop took no step on the example inputs"
        return said
    if node.op is FORI:  # the body reads the step index, the carry, then what else it reads
        lower, upper = (int(a.numpy()) if isinstance(a, Tensor) else a for a in args[:2])
        if lower >= upper:
            return {"body_fn": "none: the loop takes no step (its range is empty)"}
        run("body_fn", [as_tensor(np.asarray(lower, dtype=np.int64)), *args[2:]])
        return {"body_fn": f"in the loop's first step (i = {lower}) on the example inputs"}
    return {}


def _true(t: Tensor) -> bool:
    return bool(t.numpy())


def _value_ids(graph: Graph) -> Iterator[int]:
    """The id of every value of `graph` and of the graphs its nodes own."""
    for v in graph.values():
        yield v.id
    for node in graph.nodes:
        for sub in subgraphs(node).values():
            yield from _value_ids(sub)


def summarize(array: Any) -> dict:
    """Shape, dtype, a few numbers, and for a number array min/max/mean."""
    array = np.asarray(array)
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
