"""Common subexpression elimination: compute each distinct thing once.

Two nodes compute the same value when they apply the same op, with the same parameters, to the
same operands. *Value numbering* finds them in one walk over the graph: each value gets a number,
a node's key is ``(op, params, numbers of its operands)``, and a key seen before means a value
computed before. The later node is merged into the earlier one.

This is only legal because ops are **pure**: their result depends on their operands and nothing
else. A random op is not: two draws of `randn` must give different numbers, so random ops are
never merged (and never constant-folded). That is the lesson on purity in one `if`.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from teachflow.graph import Graph, Node, Value, format_node
from teachflow.passes.base import BuiltinPass, Change


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
        self.numbers: dict[int, int] = {}  # id(value) -> number
        self.first: dict[tuple, Value] = {}  # key -> the first value computed with it
        self._fresh = itertools.count()

    def number(self, operand: Any) -> Any:
        if not isinstance(operand, Value):  # a literal is its own number
            return literal_key(operand)
        n = self.numbers.get(id(operand))
        if n is None:  # an input, capture, constant or new result: equal only to itself
            n = self.numbers[id(operand)] = next(self._fresh)
        return n

    def visit(self, node: Node) -> Value | None:
        """Number `node`'s output; return an earlier value that computes the same, if any."""
        if node.op.random:
            self.number(node.output)  # a fresh number: never equal to anything else
            return None
        operands = [self.number(o) for o in node.inputs]
        if node.op.commutes(node.spec.dtype):
            operands.sort(key=repr)
        key = (node.op.name, params_key(node.params), tuple(operands))
        earlier = self.first.get(key)
        if earlier is not None:
            self.numbers[id(node.output)] = self.numbers[id(earlier)]
            return earlier
        self.first[key] = node.output
        self.number(node.output)
        return None

    def same(self, a: Any, b: Any) -> bool:
        """True if `a` and `b` are known to compute the same value."""
        return a is b or (isinstance(a, Value) and isinstance(b, Value)
                          and id(a) in self.numbers and id(b) in self.numbers
                          and self.numbers[id(a)] == self.numbers[id(b)])


class CSE(BuiltinPass):
    name = "cse"

    def run(self, graph: Graph) -> tuple[Graph, list[Change]]:
        g = graph.clone()
        numbering = ValueNumbering()
        mapping: dict[int, Value] = {}
        kept, changes = [], []
        for node in g.nodes:
            node.inputs = tuple(mapping.get(id(o), o) if isinstance(o, Value) else o
                                for o in node.inputs)
            earlier = numbering.visit(node)
            if earlier is None:
                kept.append(node)
                continue
            mapping[id(node.output)] = earlier
            earlier.producer.lineage = tuple(sorted({*earlier.producer.lineage, *node.lineage}))
            changes.append(Change(
                "merged", (node.id,), (earlier.id,), "same op on the same operands",
                f"{format_node(node)} computes the same as {earlier}: merged into {earlier}"))
        g.nodes = kept
        g.outputs = [mapping.get(id(v), v) for v in g.outputs]
        return g, changes
