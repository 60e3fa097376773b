"""A transformation as a rewrite of a graph: trace the function, then walk its graph node by node.

``tfl.jvp`` and ``tfl.vmap`` do not run the function they transform on special tensors. They
trace it into a graph (`traced`), as ``tfl.function`` does, and then *interpret* that graph:
each node's op is applied again through `bind`, together with what the op's rule for the
transformation adds (a tangent, a batch axis). Applied through `bind`, the rewrite computes when
it runs eagerly, and builds the transformed graph's nodes when a trace is running around it (a
``tfl.function``, or another transformation), so that ``tfl.compile(tfl.vmap(tfl.grad(loss)),
...)`` shows one graph, already transformed, to the usual passes. Autodidax teaches the same
idea as interpreters; here the graph between them can be printed and stepped through.

Inside another trace the function is traced into a *closed* sub-graph (as a ``cond``'s branch
is), so what it reads from the trace around it comes in as inputs (`ToRewrite.inputs`); eagerly,
what it reads from outside (a captured weight) is read from its tensor, so gradients reach it.

Every node the rewrite makes names the rule that made it: its source location (the user's line
of the node it came from) carries a note, ``"batched by matmul's rule: ..."``, which the graph's
text form and the pass stepper show beside the line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from teachflow.core import dispatch
from teachflow.core.backends import get_backend
from teachflow.core.errors import on_behalf_of
from teachflow.core.spec import TensorSpec
from teachflow.core.tree import tree_flatten, tree_unflatten
from teachflow.execution.control.graphs import trace_subgraph
from teachflow.graph import Graph, Node, Value
from teachflow.tensor.tensor import Tensor
from teachflow.tracing.builder import GraphBuilder
from teachflow.tracing.trace import trace_function


@dataclasses.dataclass
class ToRewrite:
    """A function traced for a rewrite: its graph, and what each of the graph's inputs is."""

    graph: Graph
    inputs: list[Value]  # the graph's inputs for the tensor arguments, in order
    outside: dict[Value, Any]  # the other values it reads: captures, constants, free values
    out_tree: Any  # the structure of the results
    results: list[Any]  # per flat result: a Value of the graph, or a static Python value


def traced(fn: Callable, args: Sequence[Any], specs: Sequence[TensorSpec], what: str) -> ToRewrite:
    """Trace ``fn(*args)`` with its tensor arguments (the leaves of `args`) standing for tensors
    of the given `specs` (an example's, for ``vmap``). `what` names the transformation."""
    leaves, in_tree = tree_flatten(tuple(args))
    positions = [k for k, x in enumerate(leaves) if isinstance(x, Tensor)]
    structure: list[Any] = []

    def flat(*tensors: Any) -> list:
        filled = list(leaves)
        for k, t in zip(positions, tensors, strict=True):
            filled[k] = t
        out, out_tree = tree_flatten(fn(*tree_unflatten(in_tree, filled)))
        structure.append(out_tree)
        return out

    examples = [_example(leaves[k], spec) for k, spec in zip(positions, specs, strict=True)]
    flat.__name__ = getattr(fn, "__name__", "f")
    if isinstance(dispatch.current_interpreter(), GraphBuilder):
        sub = trace_subgraph(flat, examples, f"the function {what} transforms")
        n = len(examples)
        outside = dict(zip(sub.graph.inputs[n:], sub.free_tensors, strict=True))
        outside.update(constants(sub.graph))
        return ToRewrite(sub.graph, sub.graph.inputs[:n], outside, structure[0],
                      list(sub.graph.outputs))
    trace = trace_function(flat, tuple(examples), {}, staged=False)
    outside = {v: v.data.read(examples) for v in trace.graph.captures}
    outside.update(constants(trace.graph))
    return ToRewrite(trace.graph, list(trace.graph.inputs), outside, structure[0],
                  list(trace.out_leaves))


def _example(x: Tensor, spec: TensorSpec) -> Tensor:
    """A tensor of `spec` to trace with (its values are never read)."""
    if spec == x.spec:
        return x
    backend = get_backend(spec.device)
    return Tensor._make(backend.asarray(np.zeros(spec.shape, spec.dtype)), backend, None)


def constants(graph: Graph) -> dict[Value, Tensor]:
    """The constants of `graph`, as tensors: eagerly made, or constants of the trace running
    (a tensor made from data, as `tfl.tensor` makes one)."""
    found = {}
    interpreter = dispatch.current_interpreter()
    for v in graph.constants:
        backend = get_backend(v.spec.device)
        found[v] = interpreter.lift(Tensor._make(backend.asarray(v.data), backend, None))
    return found


def operands(node: Node, env: dict) -> list:
    """The node's operands from `env` (a Value's entry), literals as they are."""
    return [env[o] if isinstance(o, Value) else o for o in node.inputs]


@contextmanager
def made_by(node: Node, note: str) -> Iterator[None]:
    """Attribute the nodes built inside to `node`'s line, with `note` saying which rule made
    them (``"tangent of exp by its JVP rule"``)."""
    source = node.source
    if source is None:
        yield
        return
    noted = f"{source.note}; {note}" if source.note else note
    with on_behalf_of(dataclasses.replace(source, note=noted)):
        yield


def rule_summary(rule: Callable) -> str:
    """What a rule does, for the note: its docstring's first sentence, up to a colon."""
    doc = " ".join((rule.__doc__ or "").split())
    said = doc.split(". ")[0].split(": ")[0].rstrip(".")
    return said[:1].lower() + said[1:]
