"""Fused kernels on the CPU in NumPy, run: the source compiled, and what it calls while it runs:
blocks, threads for them, and memory.

`numpy_kernel` compiles what `numpy_renderer.py` writes, against NumPy (or CuPy), with each of
its lines running as the user's line of its node (a NumPy warning is shown there). A fused
kernel's source says what one block of rows computes (``def block(...)``) and hands that
to `in_blocks`, which cuts the arrays into blocks, gives each block its rows and scratch buffers,
and runs the blocks. Two costs dominate on big arrays once data moves only once: using one CPU
core when there are more, and the page faults of a freshly allocated result. `in_parallel`
shares a kernel's independent blocks between the cores; `Recycler` hands a kernel back the
memory of its previous result when nobody holds that result any more.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np

from teachflow.core.errors import compile_at_user_lines
from teachflow.kernels.group import FusedGroup
from teachflow.kernels.numpy_renderer import NumpyRenderer


class Recycler:
    """Hands out result arrays, reusing an earlier one when nothing else refers to it.

    A fresh 40 MB array costs milliseconds of page faults before its first use, often more
    than the kernel itself. A kernel called in a loop usually finds an earlier result already
    dropped by the caller: then that memory is reused. While anything still holds the array (a
    Tensor, a view of it), ``sys.getrefcount`` sees it and another array is used instead.

    Two arrays are kept, not one, because the usual loop holds one result while the next is
    computed: ``y = f(x)`` keeps the last result in ``y`` until the new one is made, and a
    staged training step's new weights replace the old ones only after the call. The two then
    take turns, and neither loop ever allocates.

    The price is that up to two results' memory stays held between calls. Only kernels whose
    result the graph returns use a recycler; an intermediate result is freed when the call ends
    (see `FusedGroup.returned`), so a compiled function never holds memory no caller can see.
    """

    def __init__(self, xp: ModuleType) -> None:
        self.xp = xp
        self.kept: list[Any] = []  # the newest last

    def empty(self, shape: tuple, dtype: Any) -> Any:
        for array in self.kept:
            # Three references mean nobody else's: the list, `array`, getrefcount's argument.
            if array.shape == shape and array.dtype == dtype and sys.getrefcount(array) == 3:
                return array
        array = self.xp.empty(shape, dtype=dtype)
        self.kept = [*self.kept[-1:], array]
        return array


_pool: ThreadPoolExecutor | None = None


def _with_errstate(errors: dict, blocks: Callable[[int, int], None], first: int,
                   last: int) -> None:
    with np.errstate(**errors):
        blocks(first, last)


def in_parallel(blocks: Callable[[int, int], None], rows: int, per_block: int) -> None:
    """Run ``blocks(first, last)`` over ``range(rows)`` split into one contiguous share of whole
    blocks per CPU core, on a pool of threads (or inline when there is one core or one block)."""
    global _pool
    n_blocks = -(-rows // per_block)
    workers = min(os.cpu_count() or 1, n_blocks, 8)
    if workers <= 1:
        blocks(0, rows)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=min(os.cpu_count() or 1, 8),
                                   thread_name_prefix="teachflow-fused")
    share = -(-n_blocks // workers) * per_block
    errors = dict(np.geterr(), call=np.geterrcall())  # the caller's np.errstate, in workers
    futures = [_pool.submit(_with_errstate, errors, blocks, first, min(first + share, rows))
               for first in range(0, rows, share)]
    for future in futures:
        future.result()  # re-raises an error from a worker here


def in_blocks(block: Callable[..., None], rows: int, per_block: int, sliced: tuple,
              scratch: list[tuple[tuple, Any]], parallel: bool = True,
              xp: ModuleType = np) -> None:
    """Call ``block(*rows of each array in sliced, *scratch buffers)`` for every block of
    `per_block` rows of ``range(rows)`` (the last block may have fewer).

    `scratch` gives the shape and dtype of each buffer a block needs. A thread allocates its
    buffers once and hands them to every block it runs, cut to the block's rows: they stay in
    the CPU's cache from block to block. Blocks are shared between the cores unless they depend
    on one another (``parallel=False``: each adds its part into one result).
    """
    def some_blocks(first: int, last: int) -> None:
        buffers = [xp.empty(shape, dtype=dtype) for shape, dtype in scratch]
        for start in range(first, last, per_block):
            stop = min(start + per_block, rows)
            block(*[a[start:stop] for a in sliced], *[b[:stop - start] for b in buffers])

    if parallel:
        in_parallel(some_blocks, rows, per_block)
    else:
        some_blocks(0, rows)


def numpy_kernel(group: FusedGroup, xp: ModuleType = np) -> Callable[..., Any]:
    """Compile `numpy_source(group)` against the array module `xp` (NumPy, or CuPy) and return the
    function. It takes the arrays of ``group.inputs`` in order and an optional ``out`` array of the
    group's result spec to fill in place; it returns the result."""
    renderer = NumpyRenderer(group)
    source = renderer.source()
    namespace: dict[str, Any] = {
        "np": xp, "in_blocks": partial(in_blocks, xp=xp),
        **{name: Recycler(xp) for name in renderer.recyclers.values()},
        "__name__": "teachflow.generated",
        **{name: op.kernel(xp) for name, op in renderer.kernels.items()}}
    # Each line that computes a node runs as the user's line of that node (its comment names
    # it: ``# %3 = mul ...``), so a NumPy warning in the kernel is shown there.
    sources = {n.id: n.source for n in group.nodes}
    places = {}
    for number, line in enumerate(source.splitlines(), start=1):
        found = re.search(r"# %(\d+)\b", line)
        if found:
            places[number] = sources.get(int(found.group(1)))
    code = compile_at_user_lines(source, places, f"<teachflow fused kernel: {group.name}>")
    exec(code, namespace)  # the source was generated from the group's own nodes, not user text
    return namespace[group.name]
