"""A memory plan: which reused slot of memory holds each intermediate of a schedule.

The pass `plan_memory` (`teachflow.passes.plan_memory`) makes one and hangs it on the graph it
returns (`Graph.memory_plan`); the executor reads it and has each kernel write its result into
the slot's memory (``out=``) instead of allocating. A plan names values by id, which a clone
keeps, and is correct only for the graph whose schedule (its nodes' order) it was made for.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Buffer:
    """The memory of one planned value: `size` bytes in slot `slot`, from step `first_use` to
    step `last_use` of the schedule. `in_place_of` is the id of the operand whose memory the
    value takes over (an elementwise op may write where its dying operand was), else None: a
    fact for the learner, which the executor needs not read, since the value has the operand's
    slot, shape and dtype, and so the operand's very view of the arena."""

    value: int
    size: int
    first_use: int
    last_use: int
    slot: int
    in_place_of: int | None = None


@dataclass(frozen=True)
class MemoryPlan:
    """Every planned buffer, and the size of each slot (the largest buffer it holds): the
    slots together are the plan's *arena* (`teachflow.memory.arena` lays them out)."""

    buffers: tuple[Buffer, ...]
    slot_sizes: tuple[int, ...]

    def slot_of(self, value_id: int) -> int | None:
        return next((b.slot for b in self.buffers if b.value == value_id), None)

    @property
    def arena_bytes(self) -> int:
        return sum(self.slot_sizes)
