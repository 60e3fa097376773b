"""Buffers in reused slots: interval colouring of the live ranges, largest first (lesson 8).

Two intermediates whose live ranges do not overlap can be written into the same memory, one
after the other. A *slot* is such memory: bytes that values of any dtype and shape hold in turn,
as large as the largest of them; the slots together are the plan's *arena*. Which values share
a slot is a colouring of an *interval graph*; the rule here is the "greedy by size" of TFLite's
and XLA's arena planners, with slots where they assign byte offsets:

1. **in place** first: an elementwise op whose kernel may write over its operand
   (`Op.out_may_alias`: a ufunc reads each element before writing it) writes its result where
   an operand was, when the operand dies at that very step, has the result's shape and dtype,
   and no other operand of the op is a view of it. The two are then one buffer's range, from
   the operand's first step to the result's last (a chain ``exp``, ``* 2``, ``tanh`` is one);
2. then the values, **largest first** (ties: the one made first), each into the smallest slot
   that is free for its whole range, else into the largest free one, grown to fit, else into
   a new slot.

Largest first, because a big value placed late finds only slots too small, and grows one by
the difference: in the order the schedule makes values (TFLite's "greedy by first use"), a
12-layer MLP's training step needs an arena 1.23x its planned values' liveness peak; largest
first, 1.07x (`bench/memory_plan.py`). A learner can still replay it by hand: sort, then fit.

What is planned: exactly the values `writable.plannable_values` allows, the rule the executor
applies too (a kernel that takes ``out=``, a shape known now, memory that never escapes the
call). A view reads its operand's memory: the operand's range reaches as far as its views' do
(`liveness`). The executor needs nothing but each value's slot: a value written in place of
its operand has the operand's slot, shape and dtype, so it is the same view of the arena, and
its kernel writes over the operand (``add(slot0_v3, b, out=slot0_v4)``, ``v3`` being
``slot0_v3``). `Buffer.in_place_of` says it for the learner.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from teachflow.graph import Graph, Node, Value
from teachflow.memory.liveness import LiveRange, live_ranges, views_of
from teachflow.memory.plan import Buffer, MemoryPlan
from teachflow.memory.writable import plannable_values


@dataclass(frozen=True)
class Decision:
    """How a buffer got its slot: `reason` is ``"new"`` (the slot's first value),
    ``"reused"`` (after `freed_by`, the slot's value before it, whose last reader ran at step
    `freed_at`) or ``"in_place"`` (over `freed_by`, which dies at step `freed_at`)."""

    buffer: Buffer
    reason: str
    freed_by: int | None = None
    freed_at: int | None = None


def planned_ranges(graph: Graph, schedule: Sequence[Node]) -> list[LiveRange]:
    """The live ranges of the values a plan gives memory to (`plannable_values`), in the order
    they are made."""
    allowed = plannable_values(graph)
    return [r for r in live_ranges(graph, schedule) if r.value in allowed]


def in_place_chains(schedule: Sequence[Node], ranges: list[LiveRange]) -> list[list[LiveRange]]:
    """The ranges grouped into chains, each value of a chain written in place of the one
    before it (most chains are one value long)."""
    memory_of = views_of(schedule)  # a view -> the value whose memory it shows
    range_of = {r.value: r for r in ranges}
    chain_of: dict[Value, list[LiveRange]] = {}
    chains: list[list[LiveRange]] = []
    for r in ranges:
        over = in_place_operand(r.value, range_of, memory_of)
        if over is not None:  # (`over` dies here: no other value was written over it)
            chain_of[r.value] = chain_of[over]
            chain_of[r.value].append(r)
        else:
            chain_of[r.value] = [r]
            chains.append(chain_of[r.value])
    return chains


def in_place_operand(value: Value, range_of: dict[Value, LiveRange],
                     memory_of: dict[Value, Value]) -> Value | None:
    """The operand `value` may be written over: its node is elementwise and may write over its
    operands, and the operand is planned (`range_of`), has `value`'s shape and dtype, dies at
    the node's step, and is not seen through a view by another operand of the node."""
    node, step = value.producer, range_of[value].first_use
    if not (node.op.elementwise and node.op.out_may_alias and len(node.outputs) == 1):
        return None
    operands = [o for o in node.inputs if isinstance(o, Value)]
    for o in operands:
        if (o in range_of and range_of[o].last_use == step and o.spec.shape == value.spec.shape
                and o.spec.dtype == value.spec.dtype
                and not any(memory_of.get(p) is o for p in operands)):
            return o
    return None


def assign_slots(graph: Graph, schedule: Sequence[Node]) -> tuple[MemoryPlan, list[Decision]]:
    """A plan for `schedule` (the nodes in the order they run), and how each buffer got its
    slot, in the order the values are made."""
    chains = in_place_chains(schedule, planned_ranges(graph, schedule))
    sizes: list[int] = []
    held: list[list[list[LiveRange]]] = []  # slot -> the chains it holds
    for chain in sorted(chains, key=lambda c: (-c[0].size, c[0].first_use)):
        first, last = chain[0].first_use, chain[-1].last_use
        free = [s for s in range(len(sizes))
                if all(c[-1].last_use < first or last < c[0].first_use for c in held[s])]
        if free:
            slot = best_fit(sizes, free, chain[0].size)
        else:
            slot = len(sizes)
            sizes.append(0)
            held.append([])
        sizes[slot] = max(sizes[slot], chain[0].size)
        held[slot].append(chain)
    return decisions_of(held, sizes)


def best_fit(sizes: list[int], free: list[int], size: int) -> int:
    """The smallest free slot at least `size` bytes large, else the largest free one (to be
    grown); the first of equals."""
    fits = [s for s in free if sizes[s] >= size]
    if fits:
        return min(fits, key=lambda s: (sizes[s], s))
    return max(free, key=lambda s: (sizes[s], -s))


def decisions_of(held: list[list[list[LiveRange]]], sizes: list[int]
                 ) -> tuple[MemoryPlan, list[Decision]]:
    """The plan of slots holding chains of ranges, its slots numbered in the order they are
    first used, and each buffer's decision, in the order the values are made."""
    order = sorted(range(len(held)), key=lambda s: min(c[0].first_use for c in held[s]))
    decisions = []
    for slot, old in enumerate(order):
        before: LiveRange | None = None  # the slot's value before, in the schedule's order
        for chain in sorted(held[old], key=lambda c: c[0].first_use):
            for r in chain:
                if before is None:
                    decision = Decision(Buffer(r.value.id, r.size, r.first_use, r.last_use,
                                               slot), "new")
                else:
                    over = before.value.id if r is not chain[0] else None
                    decision = Decision(Buffer(r.value.id, r.size, r.first_use, r.last_use,
                                               slot, over),
                                        "reused" if over is None else "in_place",
                                        before.value.id, before.last_use)
                decisions.append(decision)
                before = r
    decisions.sort(key=lambda d: (d.buffer.first_use, d.buffer.value))
    plan = MemoryPlan(tuple(d.buffer for d in decisions), tuple(sizes[s] for s in order))
    return plan, decisions
