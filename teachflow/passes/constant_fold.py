"""Constant folding: compute at compile time what does not depend on the inputs.

A node whose operands are all constants (constant arrays, Python literals, or nodes folded
already) gives the same result on every call, so the compiler runs its kernel once, now, and puts
the result in the graph as a constant. It uses the very kernels the program would have run.

A result that is one value repeated (a ``full``, a broadcast of a scalar, an elementwise op of
such values) is folded to that value, kept small: ``broadcast_to`` of a one-element constant, a
view that costs no memory when it runs. Folded to an array, the backward pass's seed of a
``mean`` over a batch (``ones / n``, the batch's size) would be a constant as large as the batch,
held for the whole call, where a broadcast holds four bytes (XLA declines to fold broadcasts for
the same reason). A result that outgrows its operands in any other way (a vector broadcast to a
matrix) is left to run: it is a view, and folded it would be an array.

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
from teachflow.core.spec import TensorSpec
from teachflow.graph import Graph, Node, Value, format_node, subgraphs
from teachflow.ops.creation import full
from teachflow.ops.views import broadcast_to
from teachflow.passes.base import Change, Decide, Rewriter, rewrite

#: The largest result (in elements) that is folded into a constant.
MAX_ELEMENTS = 1 << 16
#: The most bytes of results one run of the pass folds, all nodes together.
MAX_FOLDED_BYTES = 16 << 20
#: A result of one value repeated this many elements or fewer is still folded as an array: a
#: few cache lines, as cheap to hold as a view, and plainer to read in the graph.
SMALL_ARRAY = 64


def constant_fold(graph: Graph, max_elements: int = MAX_ELEMENTS,
                  max_bytes: int = MAX_FOLDED_BYTES) -> tuple[Graph, list[Change]]:
    """Compute now each node whose operands are all known, if it is pure and small enough."""
    changes: list[Change] = []
    folded = 0  # bytes of results made so far
    graphs: list[Graph] = []  # the graphs rewritten (the clone and those its nodes own)
    views: set[Node] = set()  # the broadcasts of one value made, some read only by what folded

    def decide_for(g: Graph) -> Decide:
        known: dict[Value, np.ndarray] = {v: v.data for v in g.constants}
        #: The known values that are one value repeated: that value (as a 0-d array).
        uniform: dict[Value, np.ndarray] = {v: v.data.reshape(()) for v in g.constants
                                            if v.data.size == 1}
        returned = set(g.outputs)
        graphs.append(g)

        def decide(node: Node, rewriter: Rewriter) -> Value | None:
            nonlocal folded
            if (node.op.impure or subgraphs(node) or not 0 <= node.spec.size <= max_elements
                    or any(isinstance(o, Value) and o not in known for o in node.inputs)):
                return None
            value = repeated(node, uniform)
            if value is not None and node.spec.size > SMALL_ARRAY and node.output not in returned:
                small = rewriter.constant(value, TensorSpec((), node.spec.dtype,
                                                            node.spec.device))
                known[small], uniform[small] = value, value
                view = rewriter.add(broadcast_to, (small,), {"shape": node.spec.shape},
                                    spec=node.spec)
                known[view], uniform[view] = np.broadcast_to(value, node.spec.shape), value
                views.add(view.producer)
                changes.append(Change("replaced", (node.id,), (view.producer.id,),
                                      "constant operands",
                                      f"{format_node(node)} depends on constants only and is "
                                      f"one value, {value.item()!r}, repeated: becomes "
                                      f"{small} broadcast to {node.spec.shape}, a view that "
                                      "holds one number"))
                return view
            size = node.spec.size * node.spec.dtype.itemsize if node.spec.size > 0 else 0
            if folded + size > max_bytes or (value is None and outgrows(node, known)):
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
            if result.size == 1:
                uniform[constant] = result.reshape(())
            changes.append(Change("replaced", (node.id,), (constant.id,), "constant operands",
                                  f"{format_node(node)} depends on constants only: computed "
                                  f"now, becomes the constant {constant}"))
            return constant

        return decide

    result = rewrite(graph, decide_for)
    for g in graphs:  # (a view that a later fold read, and nothing else, goes with it)
        read = {o for node in g.nodes for o in node.inputs} | set(g.outputs)
        g.nodes = [n for n in g.nodes if n not in views or n.output in read]
    return result, changes


def repeated(node: Node, uniform: dict[Value, np.ndarray]) -> np.ndarray | None:
    """The one value `node`'s result repeats (a 0-d array of its dtype), or None: a ``full``;
    a view of a repeated value (``reshape``, ``broadcast_to``, ``getitem``...); an elementwise
    op whose operands are all repeated values or Python numbers, computed on those values."""
    dtype = node.spec.dtype
    if node.op is full:
        return np.asarray(node.params["fill_value"], dtype=dtype)
    first = node.inputs[0] if node.inputs else None
    if node.op.view and isinstance(first, Value) and first in uniform:
        return uniform[first].astype(dtype)
    if not node.op.elementwise or not all(o in uniform if isinstance(o, Value)
                                          else isinstance(o, int | float | bool)
                                          for o in node.inputs):
        return None
    operands = [uniform[o] if isinstance(o, Value) else o for o in node.inputs]
    try:
        with np.errstate(all="ignore"):  # (a warning is said when it runs, at the user's line)
            result = CPU.kernels[node.op](*operands, **node.params)
    except Exception:  # (the kernel refuses them: left to run, which says why)
        return None
    result = np.asarray(result, dtype=dtype)
    return result.reshape(()) if result.size == 1 else None


def outgrows(node: Node, known: dict[Value, np.ndarray]) -> bool:
    """True if `node`'s result has more elements than its largest operand (a vector broadcast
    to a matrix): folded, it would be an array that running the node makes as a view. (A node
    with no operands, ``arange``, makes an array either way.)"""
    sizes = [known[o].size for o in node.inputs if isinstance(o, Value)]
    return bool(sizes) and node.spec.size > max(sizes)
