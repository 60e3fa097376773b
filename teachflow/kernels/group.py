"""What the fusion pass hands to the kernel generators: a group of nodes to run as one kernel.

A `FusedGroup` is a chain (or tree) of elementwise nodes, optionally ending in one reduction. Its
operands are the values it reads from outside (graph values, in a fixed order) and the Python
literals inside its nodes; it produces one value. The generators in `numpy_fused.py` and
`cuda_fused.py` turn it into source code, and the fusion pass wraps that in an `Op`.
"""

from __future__ import annotations

from dataclasses import dataclass

from teachflow.graph import Node, Value
from teachflow.spec import TensorSpec


@dataclass(frozen=True)
class FusedGroup:
    """Nodes to compute as one kernel.

    - ``name``: the kernel's name, e.g. ``"fused_k2"`` (a Python and C identifier).
    - ``nodes``: the elementwise nodes in topological order (each ``node.op.fusion`` is set).
    - ``reduction``: a final reduction over the last elementwise result (one whose op says
      how to compute it in pieces: `Op.partials`), or None.
    - ``inputs``: the values read from outside the group, in the kernel's argument order.
    - ``output``: the group's result (the reduction's output if there is one, else the last
      node's output); its spec is the kernel's result spec.
    - ``returned``: the result is an output of the graph, handed to the caller. Only then may a
      kernel keep its memory for the next call (see `kernels.runtime.Recycler`): the memory of
      an intermediate is freed when the call ends, not held until the next one.
    """

    name: str
    nodes: tuple[Node, ...]
    reduction: Node | None
    inputs: tuple[Value, ...]
    output: Value
    returned: bool = False

    @property
    def spec(self) -> TensorSpec:
        return self.output.spec

    @property
    def elementwise_spec(self) -> TensorSpec:
        """The shape and dtype of the elementwise part (before any reduction)."""
        return self.nodes[-1].spec
