"""Buffers in reused slots: interval colouring of the live ranges (lesson 8).

Two intermediates whose live ranges do not overlap can be written into the same memory, one
after the other. Which can share is a colouring of an *interval graph*, and for intervals the
simple greedy works: walk the values in the order they are made, hand each a slot no live value
holds, and take a slot back when its value's last reader has run. The slot given is the *best
fit*: the smallest free slot at least as large as the value, else the largest free slot, grown
to fit (the arena grows by the difference only, where a new slot would grow it by the whole).
That is TFLite's "greedy by first use" planner; XLA's and TFLite's "greedy by size" order the
values largest first instead, which packs odd sizes tighter, but the order a schedule makes
values is the one a learner can replay by hand, step by step.

In place: an elementwise op whose kernel may write over its operand (`Op.out_may_alias`: a
ufunc reads each element before writing it) writes its result where an operand was, when the
operand dies at that very step and is the result's shape and dtype. A slot is bytes: values of
any dtype and shape may share it, one after the other; each slot is its own allocation (NumPy
aligns its start to 16 bytes at least, enough for every dtype), or, in one arena,
starts where `MemoryPlan.offsets` says, rounded up to 64 bytes.

What is planned: a node's result held as an intermediate (`liveness`), of a size its shape
says, but
- not what the call is given, its state, its constants or its outputs (their owners hold them);
- not a view, nor the result of an op whose kernel may return its operand's memory (`aliases`:
  NumPy's basic indexing gives a view): such a value keeps its operand's slot held instead;
- not the results of a node that owns graphs, nor what such a node reads (a branch may return
  its operand as it is), nor memory a returned view shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from teachflow.graph import Graph, Node, Value, subgraphs
from teachflow.memory.liveness import LiveRange, live_ranges
from teachflow.memory.plan import Buffer, MemoryPlan

#: Ops not marked as views whose kernel may still return (part of) its first operand's memory:
#: ``x[1:3]`` is a NumPy view, and ``sum_like`` with nothing to sum reshapes.
MAY_RETURN_OPERAND = frozenset({"getitem", "gather", "sum_like"})


def aliases(node: Node) -> bool:
    """Whether `node`'s result may be its first operand's memory."""
    return node.op.view or node.op.name in MAY_RETURN_OPERAND


@dataclass(frozen=True)
class Decision:
    """How a buffer got its slot: `reason` is ``"new"``, ``"reused"`` (after `freed_by`, whose
    last reader ran at step `freed_at`) or ``"in_place"`` (of `freed_by`)."""

    buffer: Buffer | None
    reason: str
    freed_by: int | None = None
    freed_at: int | None = None


def planned_ranges(graph: Graph, schedule: Sequence[Node]) -> list[LiveRange]:
    """The live ranges of the values a plan gives memory to, in the order they are made; a
    value's range reaches as far as the ranges of the values that may be its memory."""
    ranges = {r.value: r for r in live_ranges(graph, schedule)}
    owner: dict[Value, Value] = {}
    for node in schedule:
        if aliases(node) and isinstance(node.inputs[0], Value):
            owner[node.output] = owner.get(node.inputs[0], node.inputs[0])
    unplannable = {owner.get(v, v) for v in graph.outputs}
    reach: dict[Value, int] = {}
    for node in schedule:
        if subgraphs(node):
            unplannable.update(owner.get(o, o) for o in node.inputs if isinstance(o, Value))
            unplannable.update(node.outputs)
        for o in node.inputs:
            if isinstance(o, Value) and o in owner:
                base = owner[o]
                reach[base] = max(reach.get(base, 0), ranges[o].last_use)
    planned = []
    for v, r in ranges.items():
        if (r.held != "intermediate" or not r.size_known or r.size == 0 or v in owner
                or v in unplannable):
            continue
        last = max(r.last_use, reach.get(v, r.last_use))
        planned.append(LiveRange(v, r.size, r.first_use, last, r.held))
    return planned


def in_place_operand(node: Node, value: Value, holder: dict[int, LiveRange],
                     step: int) -> LiveRange | None:
    """The range of the operand `value` may be written over: `node` is elementwise and may
    write over its operands, and the operand holds a slot (`holder`), has `value`'s shape and
    dtype, and dies at `step`."""
    if not (node.op.elementwise and node.op.out_may_alias and len(node.outputs) == 1):
        return None
    operands = {o for o in node.inputs if isinstance(o, Value)
                and o.spec.shape == value.spec.shape and o.spec.dtype == value.spec.dtype}
    return next((h for h in holder.values() if h.value in operands and h.last_use == step),
                None)


def assign_slots(graph: Graph, schedule: Sequence[Node]) -> tuple[MemoryPlan, list[Decision]]:
    """A plan for `schedule` (the nodes in the order they run), and how each buffer got its
    slot."""
    sizes: list[int] = []
    holder: dict[int, LiveRange] = {}  # slot -> the range it holds now
    last_held: dict[int, LiveRange] = {}  # a free slot -> the range it held last
    held: dict[Value, int] = {}  # planned values still live -> their slots
    decisions: list[Decision] = []
    ranges = sorted(planned_ranges(graph, schedule), key=lambda r: r.first_use)
    for r in ranges:  # (the sort is stable: a node's results stay in order)
        for slot, h in list(holder.items()):  # slots whose value's last reader has run
            if h.last_use < r.first_use:
                last_held[slot] = h
                del holder[slot], held[h.value]
        over = in_place_operand(r.value.producer, r.value, holder, r.first_use)
        if over is not None:
            slot = held.pop(over.value)
            decision = Decision(None, "in_place", over.value.id, r.first_use)
        elif last_held:
            slot = best_fit(sizes, list(last_held), r.size)
            freed = last_held.pop(slot)
            decision = Decision(None, "reused", freed.value.id, freed.last_use)
        else:
            slot, decision = len(sizes), Decision(None, "new")
            sizes.append(0)
        sizes[slot] = max(sizes[slot], r.size)
        holder[slot], held[r.value] = r, slot
        buffer = Buffer(r.value.id, r.size, r.first_use, r.last_use, slot,
                        over.value.id if over is not None else None)
        decisions.append(replace(decision, buffer=buffer))
    return MemoryPlan(tuple(d.buffer for d in decisions), tuple(sizes)), decisions


def best_fit(sizes: list[int], free: list[int], size: int) -> int:
    """The smallest free slot at least `size` bytes large, else the largest free one (to be
    grown); the first of equals."""
    fits = [s for s in free if sizes[s] >= size]
    if fits:
        return min(fits, key=lambda s: (sizes[s], s))
    return max(free, key=lambda s: (sizes[s], -s))
