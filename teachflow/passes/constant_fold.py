"""Constant folding: compute at compile time what does not depend on the inputs.

A node whose operands are all constants (constant arrays, Python literals, or nodes folded
already) gives the same result on every call, so the compiler runs its kernel once, now, and puts
the result in the graph as a constant. It uses the very kernels the program would have run.

Three things are never folded:

- random ops (``randn``): their result must change from call to call (see the CSE pass on purity),
  and collectives (``all_reduce``): their result depends on the other processes too;
- control flow (a ``cond``, a loop): its graphs are folded inside, each on its own;
- results bigger than `MAX_ELEMENTS`: materialising ``zeros(10000, 10000)`` as a constant would
  put 400 MB into the graph to save one cheap kernel call; and, once the pass has made
  `MAX_FOLDED_BYTES` of results in all, any more: a graph of many small constants must not
  grow into a large one (a saved graph of a few hundred kilobytes, loaded, could otherwise ask
  for gigabytes, one folded node at a time).

Captured tensors are not constants either: a model's weights are captured *by reference* and may
change between calls.
"""

from __future__ import annotations

import numpy as np

from teachflow.core.backends import CPU, rerun_warning_at_user_line
from teachflow.core.errors import on_behalf_of
from teachflow.graph import Graph, Node, Value, format_node, subgraphs
from teachflow.passes.base import Change, Decide, Rewriter, rewrite

#: The largest result (in elements) that is folded into a constant.
MAX_ELEMENTS = 1 << 16
#: The most bytes of results one run of the pass folds, all nodes together.
MAX_FOLDED_BYTES = 16 << 20


def constant_fold(graph: Graph, max_elements: int = MAX_ELEMENTS,
                  max_bytes: int = MAX_FOLDED_BYTES) -> tuple[Graph, list[Change]]:
    """Compute now each node whose operands are all known, if it is pure and small enough."""
    changes: list[Change] = []
    folded = 0  # bytes of results made so far

    def decide_for(g: Graph) -> Decide:
        known: dict[Value, np.ndarray] = {v: v.data for v in g.constants}

        def decide(node: Node, rewriter: Rewriter) -> Value | None:
            nonlocal folded
            size = node.spec.size * node.spec.dtype.itemsize if node.spec.size > 0 else 0
            if (node.op.impure or subgraphs(node) or not 0 <= node.spec.size <= max_elements
                    or folded + size > max_bytes
                    or any(isinstance(o, Value) and o not in known for o in node.inputs)):
                return None
            folded += size
            operands = [known[o] if isinstance(o, Value) else o for o in node.inputs]
            kernel = CPU.kernels[node.op]
            try:
                result = kernel(*operands, **node.params)
            except RuntimeWarning as warning:  # (log(-1.0) of a constant: at its line)
                with on_behalf_of(node.source):
                    result = rerun_warning_at_user_line(kernel, operands, node.params, warning)
            except Exception:  # (the kernel refuses them: left to run, which says why)
                return None
            result = np.asarray(result, dtype=node.spec.dtype)
            constant = rewriter.constant(result, node.spec)  # (on the device it is used on)
            known[constant] = result
            changes.append(Change("replaced", (node.id,), (constant.id,), "constant operands",
                                  f"{format_node(node)} depends on constants only: computed "
                                  f"now, becomes the constant {constant}"))
            return constant

        return decide

    return rewrite(graph, decide_for), changes
