"""An arena: the memory of a plan's slots, made once, and a view of it for each planned value.

An executor that follows a `MemoryPlan` allocates one block of bytes (the *arena*: its slots one
after another, each starting on a 64-byte boundary, as allocators align for vector loads) and
sees each planned value as a view of its slot's bytes with the value's dtype and shape. The
kernels write into those views (``out=``), so a call allocates nothing but what it returns.

One arena serves one thread at a time: two calls running at once would write each other's
values. Each thread that calls the executor (the pieces of a graph on several devices run on
workers, a user may call from threads of their own) gets an arena of its own, made on its first
call and kept for the next ones.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from teachflow.memory.plan import MemoryPlan

#: Every slot starts on a multiple of this many bytes.
ALIGNMENT = 64


@dataclass(frozen=True)
class PlannedView:
    """Where one planned value lies in the arena: from byte `offset`, its `dtype` and `shape`;
    its slot is `slot`."""

    slot: int
    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]


class Arena:
    """`nbytes` of memory on the array module `xp` (NumPy or CuPy), seen as `views`."""

    def __init__(self, views: list[PlannedView], nbytes: int, xp: ModuleType) -> None:
        self.views = views
        self.nbytes = nbytes
        self.xp = xp
        self._mine = threading.local()

    @staticmethod
    def of(plan: MemoryPlan, planned: list[tuple[int, np.dtype, tuple[int, ...]]],
           xp: ModuleType) -> Arena:
        """The arena for `planned` values, each given by (its value's id, dtype, shape)."""
        offsets = slot_offsets(plan)
        slot = {b.value: b.slot for b in plan.buffers}
        views = []
        for value, dtype, shape in planned:
            size = math.prod(shape) * np.dtype(dtype).itemsize
            if size > plan.slot_sizes[slot[value]]:
                raise ValueError(f"the plan's slot {slot[value]} ({plan.slot_sizes[slot[value]]}"
                                 f" bytes) cannot hold value %{value} ({size} bytes)")
            views.append(PlannedView(slot[value], offsets[slot[value]], np.dtype(dtype), shape))
        return Arena(views, offsets[-1], xp)

    def __call__(self) -> tuple[Any, ...]:
        """This thread's views, one per planned value (made on the thread's first call)."""
        mine = getattr(self._mine, "views", None)
        if mine is None:
            mine = self._mine.views = self.make()
        return mine

    def make(self) -> tuple[Any, ...]:
        memory = self.xp.empty(self.nbytes + ALIGNMENT, dtype=np.uint8)
        start = -_address(memory) % ALIGNMENT  # (the block itself may start anywhere)
        return tuple(
            memory[start + v.offset:start + v.offset + math.prod(v.shape) * v.dtype.itemsize]
            .view(v.dtype).reshape(v.shape) for v in self.views)


def slot_offsets(plan: MemoryPlan) -> list[int]:
    """The byte where each slot starts, each aligned, and last the arena's size."""
    offsets = [0]
    for size in plan.slot_sizes:
        offsets.append(offsets[-1] + -(-size // ALIGNMENT) * ALIGNMENT)
    return offsets


def _address(array: Any) -> int:
    return array.data.ptr if hasattr(array.data, "ptr") else array.ctypes.data
