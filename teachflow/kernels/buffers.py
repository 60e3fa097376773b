"""Scratch buffers for a fused kernel: as few as its chain of ops needs.

A fused NumPy kernel computes every node of its chain for one block of rows, each into a scratch
buffer the size of a block (`numpy_renderer.py`). One buffer per node would do, but a chain of any
length needs only a few: once the last node that reads a value has run, the value's buffer can
hold the next value of the same shape and dtype. This is register allocation in miniature, the
way a compiler hands out a CPU's registers: walk the nodes in order, free each value's buffer
after its last read, and give each new value a free buffer of its kind, or a new one.

An op whose kernel may write over its own operands (a ufunc may: `Op.out_may_alias`) takes the
buffer of an operand it reads for the last time, so a chain often runs in place:
``np.tanh(v3, out=s0)`` where ``v3`` is in ``s0``. A view (`Op.view`) takes no buffer: its value
is its operand's memory.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable

from teachflow.graph import Node, Value


def assign_buffers(nodes: list[Node], kind: Callable[[Value], Hashable],
                   own: Collection[Node]) -> tuple[dict[Node, int], list[Hashable]]:
    """Give every node a buffer, but views and the nodes in `own` (those that write into the
    kernel's results: memory of their own, read from there by later nodes).

    Returns the buffer of each node, numbered from 0, and the kind of each buffer: values of the
    same `kind` (their block's shape and dtype) may share one.
    """
    memory_of: dict[Value, Value] = {}  # a view's value -> the value whose memory it is
    last_read: dict[Value, int] = {}  # a value with memory of its own -> its last reader
    for i, node in enumerate(nodes):
        for operand in node.inputs:
            if isinstance(operand, Value):
                last_read[memory_of.get(operand, operand)] = i
        if node.op.view:
            source = node.inputs[0]
            memory_of[node.output] = memory_of.get(source, source)

    kinds: list[Hashable] = []
    buffer_of: dict[Node, int] = {}
    held: dict[Value, int] = {}  # value -> the buffer holding it
    free: dict[Hashable, list[int]] = {}  # kind -> buffers free for reuse

    def release(upto: int) -> None:
        """Free the buffers of values whose last reader is node `upto` or before."""
        for value, buffer in list(held.items()):
            if last_read.get(value, -1) <= upto:
                free.setdefault(kinds[buffer], []).append(buffer)
                del held[value]

    for i, node in enumerate(nodes):
        if not node.op.view and node not in own:
            # Operands read for the last time by this very node are free for it, if its kernel
            # may write over them.
            release(i if node.op.out_may_alias else i - 1)
            k = kind(node.output)
            if free.get(k):
                buffer = free[k].pop()
            else:
                buffer = len(kinds)
                kinds.append(k)
            held[node.output] = buffer_of[node] = buffer
        release(i)
    return buffer_of, kinds
