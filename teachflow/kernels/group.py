"""What the fusion pass hands to the kernel generators: a group of nodes to run as one kernel.

A `FusedGroup` is a connected piece of the graph made of elementwise nodes of one shape (a chain,
a tree, or any DAG: a value read twice inside the group is computed once), optionally ending in
one reduction. Its operands are the values it reads from outside (graph values, in a fixed order)
and the Python literals inside its nodes. It produces one value or several: every value of the
group that is needed outside it (by a later node, or as an output of the graph) is an output of
the kernel, which XLA calls *multi-output fusion*. The renderers in `numpy_renderer.py`,
`c_renderer.py` and `cuda_fused.py` turn a group into source code, and the fusion pass wraps that
in an `Op`.

A kernel with one output is called ``kernel(in0, in1, ..., out=None)`` and returns its result; a
kernel with several returns a tuple of them, in `outputs` order, and its ``out`` is a tuple too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from teachflow.core.spec import TensorSpec
from teachflow.graph import Node, Value


@dataclass(frozen=True)
class FusedGroup:
    """Nodes to compute as one kernel.

    - ``name``: the kernel's name, e.g. ``"fused_k2"`` (a Python and C identifier).
    - ``nodes``: the elementwise nodes in topological order (each ``node.op.fusion`` is set).
    - ``reduction``: a final reduction over an elementwise result (one whose op says how to
      compute it in pieces: `Op.partials`), or None. Its output is the group's last; the
      others, if any, are elementwise values needed outside.
    - ``inputs``: the values read from outside the group, in the kernel's argument order.
    - ``outputs``: the values the kernel writes to memory, in its results' order: the values
      needed outside the group. Every other value lives only in cache or registers.
    - ``returned``: for each output, whether it is an output of the graph, handed to the caller.
      Only then may a kernel keep its memory for the next call (see
      `kernels.numpy_runtime.Recycler`): the memory of an intermediate is freed when the call
      ends, not held until the next one.
    """

    name: str
    nodes: tuple[Node, ...]
    reduction: Node | None
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    returned: tuple[bool, ...]

    def __post_init__(self) -> None:
        if len(self.returned) != len(self.outputs):
            raise ValueError("FusedGroup: one `returned` flag per output")
        if self.reduction is not None and (
                not self.outputs or self.outputs[-1] is not self.reduction.output
                or any(v.shape != self.elementwise_spec.shape for v in self.outputs[:-1])):
            raise ValueError("FusedGroup: a group with a reduction has the reduction's output "
                             "last, and elementwise values before it")

    @property
    def members(self) -> tuple[Node, ...]:
        """Every node of the group: the elementwise ones, then the reduction if there is one."""
        return (*self.nodes, *((self.reduction,) if self.reduction is not None else ()))

    @property
    def output(self) -> Value:
        """The one output of a single-output group."""
        if len(self.outputs) != 1:
            raise ValueError(f"{self.name} has {len(self.outputs)} outputs, not one")
        return self.outputs[0]

    @property
    def spec(self) -> TensorSpec:
        """The spec of the one output of a single-output group."""
        return self.output.spec

    @property
    def specs(self) -> tuple[TensorSpec, ...]:
        """The specs of the outputs, in order."""
        return tuple(v.spec for v in self.outputs)

    @property
    def elementwise_spec(self) -> TensorSpec:
        """The shape and dtype of the elementwise part: the reduction's operand when there is
        one, else the last node's value (every elementwise node has this shape)."""
        if self.reduction is not None:
            return self.reduction.inputs[0].spec
        return self.nodes[-1].spec

    @property
    def reduced_count(self) -> int | None:
        """How many elements the reduction combines into each of its results (a mean divides
        by it), or None where a size is known only at run time."""
        axis = self.reduction.params["axis"]
        sizes = [n for a, n in enumerate(self.elementwise_spec.shape) if axis is None or a in axis]
        return None if None in sizes else math.prod(sizes)
