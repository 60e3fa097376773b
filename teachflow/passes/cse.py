"""Common subexpression elimination: compute each distinct thing once.

Two nodes compute the same value when they apply the same op, with the same parameters, to the
same operands. *Value numbering* finds them in one walk over the graph: each value gets a number,
a node's key is ``(op, params, numbers of its operands)``, and a key seen before means a value
computed before. The later node is merged into the earlier one.

This is only legal because ops are **pure**: their result depends on their operands and nothing
else. A random op is not: two draws of `randn` must give different numbers, so random ops are
never merged (and never constant-folded), nor are collectives (two ``all_reduce`` nodes are two
exchanges the other processes take part in). That is the lesson on purity in one `if`. Nor is a
node that owns graphs (a loop, a call: what they compute is not in the node's key).

Purity would make one more merge legal, and it must not be made: a node that ``tfl.checkpoint``
computes again in the backward pass (its source says `recomputed`) applies the same op to the
same operands as its forward original. Merged, the backward pass would read the forward's value,
which would then stay alive from the forward pass to the backward one: exactly the memory the
checkpoint gave up compute to save. So whether a node is recomputed is part of its key: a
recomputed node merges only with another recomputed one.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from teachflow.graph import Graph, Node, Value, format_node, subgraphs
from teachflow.passes.base import Change, Decide, Rewriter, rewrite


def params_key(params: dict) -> tuple:
    """Parameters as a hashable key (NumPy arrays and slices are not hashable themselves)."""
    return tuple((k, _hashable(v)) for k, v in sorted(params.items()))


def _hashable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return ("array", v.shape, v.dtype.str, v.tobytes())
    if isinstance(v, slice):
        return ("slice", _hashable(v.start), _hashable(v.stop), _hashable(v.step))
    if isinstance(v, tuple | list):
        return tuple(_hashable(x) for x in v)
    return literal_key(v) if isinstance(v, bool | int | float | complex) else v


def literal_key(v: Any) -> tuple:
    """Equal keys for equal *programs*, not equal numbers: ``1 == True == 1.0`` and
    ``0.0 == -0.0`` in Python, but ``x[True]`` is not ``x[1]`` and ``1/(x*-0.0)`` is not
    ``1/(x*0.0)``."""
    return (type(v).__name__, repr(v))


class ValueNumbering:
    """Number values so that equal numbers mean equal computations."""

    def __init__(self) -> None:
        self.numbers: dict[Value, int] = {}  # value -> number
        self.first: dict[tuple, Value] = {}  # key -> the first value computed with it
        self._fresh = itertools.count()

    def number(self, operand: Any) -> Any:
        if not isinstance(operand, Value):  # a literal is its own number
            return literal_key(operand)
        n = self.numbers.get(operand)
        if n is None:  # an input, capture, constant or new result: equal only to itself
            n = self.numbers[operand] = next(self._fresh)
        return n

    def visit(self, node: Node) -> Value | None:
        """Number `node`'s output; return an earlier value that computes the same, if any."""
        if node.op.impure or subgraphs(node):
            self.number(node.output)  # a fresh number: never equal to anything else
            return None
        operands = [self.number(o) for o in node.inputs]
        if node.op.commutes(node.spec.dtype):
            operands.sort(key=repr)
        recomputed = node.source is not None and node.source.recomputed
        key = (node.op.name, params_key(node.params), tuple(operands), recomputed)
        earlier = self.first.get(key)
        if earlier is not None:
            self.numbers[node.output] = self.numbers[earlier]
            return earlier
        self.first[key] = node.output
        self.number(node.output)
        return None

    def same(self, a: Any, b: Any) -> bool:
        """True if `a` and `b` are known to compute the same value."""
        return a is b or (isinstance(a, Value) and isinstance(b, Value)
                          and a in self.numbers and b in self.numbers
                          and self.numbers[a] == self.numbers[b])


def cse(graph: Graph) -> tuple[Graph, list[Change]]:
    """Merge each node that computes what an earlier node computes into that earlier node."""
    changes: list[Change] = []

    def decide_for(_g: Graph) -> Decide:
        numbering = ValueNumbering()

        def decide(node: Node, _: Rewriter) -> Value | None:
            earlier = numbering.visit(node)
            if earlier is not None:
                earlier.producer.lineage = tuple(sorted({*earlier.producer.lineage,
                                                         *node.lineage}))
                changes.append(Change(
                    "merged", (node.id,), (earlier.id,), "same op on the same operands",
                    f"{format_node(node)} computes the same as {earlier}: merged into {earlier}"))
            return earlier

        return decide

    return rewrite(graph, decide_for), changes
