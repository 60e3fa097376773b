"""The graph IR: a dataflow graph of primitive ops, as staged execution records it.

A `Graph` has *inputs*, *nodes* in topological order, and *outputs*. Every edge carries a `Value`
(SSA style: each value is defined once), and each value knows its `TensorSpec` (shape, dtype,
device). A value is one of:

- an ``input`` of the graph (a function argument, or a placeholder),
- the output of a ``node`` (one op applied to values and Python-scalar literals),
- a ``capture``: state outside the graph, read *by reference* when the graph runs: the values of
  an eager tensor the traced code used (so a model's weights can change between calls without
  retracing), or the gradient accumulated in a tensor's ``.grad``,
- a ``const``: an array that was part of the program text (a NumPy array operand).

The chapters, in reading order:

- `node`: a `Value` and a `Node`, and how a node prints (``%3 = mul %1, %2 : f32[64,128]``;
  a small constant by its values, a fused kernel with the body it computes);
- `owned`: the graphs a node owns (a ``cond``'s branches, a loop's body, a function called);
- `state`: the state outside the graph that a capture reads (a `Slot`) and that a graph which
  updates state writes back after it runs (an `Update`);
- `graph`: the `Graph` itself: building one, cloning it for a pass, reading it (its text form,
  the nodes and edges a drawing has, and networkx export), and checking it is well formed.
"""

from teachflow.graph.graph import Graph, GraphError
from teachflow.graph.node import Node, Value, format_node
from teachflow.graph.owned import callees, subgraphs
from teachflow.graph.state import Slot, StateGone, Update

__all__ = ["Graph", "GraphError", "Node", "Slot", "StateGone", "Update", "Value", "callees",
           "format_node", "subgraphs"]
