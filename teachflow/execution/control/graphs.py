"""Tracing a function into a sub-graph: a branch of a ``cond``, the condition or body of a loop.

A control-flow node owns graphs of its own, traced from the user's functions while the graph
around them is being traced. Each is *closed*, as a jaxpr is: what the function reads from the
trace around it (a tensor computed before the loop, a captured weight) does not reach into the
outer graph. It becomes an input of the sub-graph, and the outer value becomes an operand of
the node (JAX calls this closure conversion). So a sub-graph can be printed, checked, optimized
and run on its own, with no hidden edges into the graph around it, and the node's operands say
everything it reads.

The `SubgraphBuilder` is the `GraphBuilder` that traces one sub-graph. It differs in what comes
from outside: a tensor of an enclosing trace becomes one of its inputs (`operand`), and state
changes that would have to reach past the node are refused with a way that works: an update in
place of a tensor from outside (return the new value instead), ``.grad``, ``backward()``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachflow.core import dispatch
from teachflow.core.errors import TraceError, user_frame
from teachflow.core.spec import TensorSpec
from teachflow.core.tree import tree_flatten
from teachflow.graph import Graph, Value
from teachflow.tensor.conversion import default_dtype
from teachflow.tensor.tensor import Tensor
from teachflow.tracing.builder import GraphBuilder
from teachflow.tracing.callables import callable_name


class SubgraphBuilder(GraphBuilder):
    """Traces one sub-graph inside the trace of `parent` (`construct` says which, for errors:
    ``"the true branch of tfl.cond"``)."""

    def __init__(self, graph: Graph, parent: GraphBuilder, construct: str) -> None:
        super().__init__(graph)
        self.parent = parent
        self.construct = construct
        self.surroundings = parent.surroundings
        self.free: dict[Value, Value] = {}  # a value of the parent's graph -> our input
        self.free_tensors: list[Tensor] = []  # ... the parent's tensor, in order

    def operand(self, x: Any) -> Any:
        """A tensor from outside this sub-graph (of an enclosing trace, or eager) becomes an
        input of it; the parent's tensor for it becomes an operand of the node."""
        if not isinstance(x, Tensor) or (isinstance(x._data, Value) and self.graph.owns(x._data)):
            return x
        outer = self.parent.operand(x)
        value = outer._data
        if not self.parent.graph.owns(value):
            raise TraceError(f"tensor {value} belongs to another graph", op="trace",
                             hint="a traced tensor cannot leave its own trace; return it from "
                                  "the function instead")
        inner = self.free.get(value)
        if inner is None:
            name = _local_name(x) or value.name or str(value.id)
            inner = self.free[value] = self.graph.add_input(value.spec,
                                                            name=_fresh(self.graph, name))
            self.free_tensors.append(outer)
        return Tensor._make(inner, outer._backend, None)

    def _refuse(self, what: str, hint: str) -> TraceError:
        return TraceError(f"{what} inside {self.construct} cannot be honoured: the branch or "
                          "body is a graph of its own, run as one node, and nothing it does "
                          "reaches the state outside it except through its results",
                          op="trace", hint=hint)

    def assign(self, tensor: Tensor, value: Tensor) -> None:
        if isinstance(tensor._data, Value) and self.graph.owns(tensor._data):
            tensor._take(value)  # a tensor of this sub-graph: as eagerly
            return
        raise self._refuse(
            "an in-place update of a tensor from outside",
            "compute the new value and return it (a branch's result, a loop's carry), then "
            "use it after the tfl.cond / loop: x = tfl.cond(p, f, g, x)")

    def read_grad(self, tensor: Tensor) -> Any:
        raise self._refuse("reading .grad", "read .grad outside the branch or loop body")

    def write_grad(self, tensor: Tensor, grad: Any) -> None:
        raise self._refuse("writing .grad (backward() does)",
                           "compute gradients with tfl.grad inside, and return them")

    def assume(self, read: Callable[[], Any], what: str) -> Any:
        return self.parent.assume(read, what)  # (the trace around the branch or loop checks it)

    def mark(self, tensor: Tensor, requires_grad: bool) -> None:
        if isinstance(tensor._data, Value) and self.graph.owns(tensor._data):
            tensor._mark(requires_grad)  # a tensor of this sub-graph (tfl.grad watching one)
            return
        raise self._refuse("setting requires_grad",
                           "set requires_grad before the staged function is called")


@dataclass
class Subgraph:
    """A traced sub-graph: the graph, how its results were structured, and what it reads from
    the trace around it (`free`: parent values, in the order of its extra inputs)."""

    graph: Graph
    out_tree: Any
    free: list[Value]
    free_tensors: list[Tensor]


def trace_subgraph(fn: Callable, args: Sequence[Any], construct: str,
                   names: Sequence[str] | None = None, call: Callable | None = None) -> Subgraph:
    """Trace ``fn(*args)`` into a sub-graph of the current trace. Each tensor in `args` becomes
    an input (named by `names`, else by `fn`'s parameters); anything else is passed as it is
    (static). `call(fn, symbolic_args)` calls it (default: ``fn(*symbolic_args)``). A Python
    number among the results becomes a constant of the sub-graph."""
    parent = _current_builder()
    graph = Graph(callable_name(fn), within=parent.graph)
    builder = SubgraphBuilder(graph, parent, construct)
    names = list(names) if names is not None else _parameter_names(fn, len(args))
    symbolic = []
    for i, x in enumerate(args):
        if isinstance(x, Tensor):
            name = _fresh(graph, names[i] if i < len(names) else f"arg{i}")
            # (of its class: a weak tensor's stand-in is weak, as a loop's index is)
            symbolic.append(type(x)._make(graph.add_input(x.spec, name=name), x._backend, None))
        else:
            symbolic.append(x)
    with builder:
        out = call(fn, symbolic) if call is not None else fn(*symbolic)
        leaves, out_tree = tree_flatten(out)
        graph.outputs = [_result_value(builder, leaf, construct, k)
                         for k, leaf in enumerate(leaves)]
    return Subgraph(graph, out_tree, list(builder.free), builder.free_tensors)


def _result_value(builder: SubgraphBuilder, leaf: Any, construct: str, k: int) -> Value:
    if isinstance(leaf, Tensor):
        return builder.operand(leaf)._data
    if isinstance(leaf, bool | int | float) and not isinstance(leaf, np.generic):
        return builder.graph.constant(np.asarray(leaf, dtype=default_dtype(leaf)))
    if isinstance(leaf, np.ndarray | np.generic):
        return builder.graph.constant(np.asarray(leaf))
    raise TraceError(f"{construct} returns {type(leaf).__name__} (result {k}), which is not a "
                     "tensor: the results of a branch or loop body are the node's results, "
                     "computed when the graph runs", op="trace",
                     hint="return tensors (or numbers) only; keep other values outside")


def merge_free(subgraphs: Sequence[Subgraph], explicit: int) -> list[Tensor]:
    """Give every sub-graph of one node the same inputs: the `explicit` operands first, then
    every value any of them reads from outside (an input the others ignore). Returns the
    parent's tensors for those values: the node's further operands."""
    values: list[Value] = []
    tensors: list[Tensor] = []
    for sub in subgraphs:
        for value, tensor in zip(sub.free, sub.free_tensors, strict=True):
            if value not in values:
                values.append(value)
                tensors.append(tensor)
    for sub in subgraphs:
        graph = sub.graph
        own = dict(zip(sub.free, graph.inputs[explicit:], strict=True))
        extra = [own[v] if v in own else
                 graph.add_input(v.spec, name=_fresh(graph, v.name or str(v.id)))
                 for v in values]
        graph.inputs = graph.inputs[:explicit] + extra
    return tensors


def describe(spec: TensorSpec | Any) -> str:
    """``float32[3]``: a result or carry as the messages of this package name it."""
    if isinstance(spec, TensorSpec):
        return f"{spec.dtype.name}{list(spec.shape)}"
    return f"Python {type(spec).__name__}"


def _current_builder() -> GraphBuilder:
    builder = dispatch.current_interpreter()
    assert isinstance(builder, GraphBuilder)
    return builder


def _parameter_names(fn: Callable, count: int) -> list[str]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return [f"arg{i}" for i in range(count)]
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
    while len(names) < count:
        names.append(f"{star or 'arg'}{len(names)}")
    return names


def _local_name(tensor: Tensor) -> str | None:
    """The name the user's code has for `tensor` where it reads it (``w`` in ``lambda x: x *
    w``), so that the sub-graph's input is named as the code names it."""
    frame = user_frame()
    if frame is None:
        return None
    return next((name for name, v in frame.f_locals.items() if v is tensor and
                 name.isidentifier()), None)


def _fresh(graph: Graph, wanted: str) -> str:
    """`wanted`, or ``wanted_1``...: a name no input of `graph` has yet."""
    taken = {v.name for v in graph.inputs}
    name, i = wanted, 1
    while name in taken:
        name, i = f"{wanted}_{i}", i + 1
    return name
