"""Constant folding: compute at compile time what does not depend on the inputs.

A node whose operands are all constants (constant arrays, Python literals, or nodes folded
already) gives the same result on every call, so the compiler runs its kernel once, now, and puts
the result in the graph as a constant. It uses the very kernels the program would have run.

Two things are never folded:

- random ops (``randn``): their result must change from call to call (see the CSE pass on purity);
- results bigger than `MAX_ELEMENTS`: materialising ``zeros(10000, 10000)`` as a constant would
  put 400 MB into the graph to save one cheap kernel call.

Captured tensors are not constants either: a model's weights are captured *by reference* and may
change between calls.
"""

from __future__ import annotations

import numpy as np

from teachflow.backends import CPU, rerun_warning_at_user_line
from teachflow.errors import on_behalf_of
from teachflow.graph import Graph, Node, Value, format_node
from teachflow.passes.base import BuiltinPass, Change

#: The largest result (in elements) that is folded into a constant.
MAX_ELEMENTS = 1 << 16


class ConstantFold(BuiltinPass):
    name = "constant_fold"

    def __init__(self, max_elements: int = MAX_ELEMENTS) -> None:
        self.max_elements = max_elements

    def run(self, graph: Graph) -> tuple[Graph, list[Change]]:
        g = graph.clone()
        known: dict[int, np.ndarray] = {id(v): v.data for v in g.constants}
        mapping: dict[int, Value] = {}
        kept, changes = [], []
        for node in g.nodes:
            node.inputs = tuple(mapping.get(id(o), o) if isinstance(o, Value) else o
                                for o in node.inputs)
            if not self._foldable(node, known):
                kept.append(node)
                continue
            operands = [known[id(o)] if isinstance(o, Value) else o for o in node.inputs]
            kernel = CPU.kernels[node.op]
            try:
                result = kernel(*operands, **node.params)
            except RuntimeWarning as warning:  # (log(-1.0) of a constant: at its line)
                with on_behalf_of(node.source):
                    result = rerun_warning_at_user_line(kernel, operands, node.params, warning)
            result = np.asarray(result, dtype=node.spec.dtype)
            constant = g.constant(result)
            constant.spec = node.spec  # keeps the device the value is used on
            known[id(constant)] = result
            mapping[id(node.output)] = constant
            changes.append(Change("replaced", (node.id,), (constant.id,), "constant operands",
                                  f"{format_node(node)} depends on constants only: computed "
                                  f"now, becomes the constant {constant}"))
        g.nodes = kept
        g.outputs = [mapping.get(id(v), v) for v in g.outputs]
        return g, changes

    def _foldable(self, node: Node, known: dict[int, np.ndarray]) -> bool:
        size = node.spec.size
        return (not node.op.random and 0 <= size <= self.max_elements
                and all(not isinstance(o, Value) or id(o) in known for o in node.inputs))
