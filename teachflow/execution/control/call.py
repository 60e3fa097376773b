"""``call``: a graph function calling another, as one node that owns the callee's graph.

Traced code that calls another staged function could simply trace through it, the callee's ops
joining the caller's trace. A call node keeps the program's structure instead, as a function
call in XLA's HLO or a ``func.call`` in MLIR does: the caller's graph gets one node, op
``call``, whose parameter ``callee`` holds the callee's graph. That graph is closed as a
``cond``'s branches are (`graphs`): what it reads from outside (a captured weight) comes in as
an input, and the node passes it. A function called twice in one trace is one graph, traced
once (the trace keeps it: `GraphBuilder.callees`), and the text form prints it once, below the
caller's: ``%5 = call @inner(%x, %w)``.

Everything that handles control flow handles a call: the passes work inside the callee, and
the pass `inline` (first in the default pipeline) replaces the call by the callee's body; the
executor calls the callee's own generated function; run op by op (eagerly, or on a tape), its
ops run one by one. Its gradient is a call too, of the callee's backward graph, traced once per
trace for the inputs that need a gradient: a function called ten times is differentiated once;
so are its tangents (a call of the callee's JVP) and its batched form (of the callee batched).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from teachflow.core import dispatch
from teachflow.execution.control.control_op import (
    ControlOp,
    batched_function,
    check_inputs,
    control_op,
    graph_function,
    output_specs,
    tangent_function,
    with_tangents,
)
from teachflow.execution.control.graphs import trace_subgraph
from teachflow.execution.control.vjp import graph_vjp
from teachflow.execution.executor import Line, Source, generate
from teachflow.graph import Graph, Node
from teachflow.ops.op import Op
from teachflow.tensor.tensor import Tensor


@dataclass(frozen=True, eq=False)
class CallOp(ControlOp):
    def rerun(self, args: Sequence[Any], params: dict) -> tuple:
        callee = params["callee"]
        return tuple(run_call(graph_function(callee), args, key=callee,
                              names=[v.name for v in callee.inputs]))

    def emit(self, source: Source, node: Node, operands: list[str],
             results: list[str]) -> list[Line]:
        """``v5, v6, = inner(x, w)``: the callee's generated function, written once per source
        however many nodes call it."""
        callee = node.params["callee"]
        name = source.kernel_of.get(("call", callee))
        if name is None:
            function = generate(callee, source.backend).fn
            name = source.kernel_of[("call", callee)] = source.bind(callee.name, function)
        return [(0, f"{', '.join(results)}, = {name}({', '.join(operands)})", node)]


def _rule(*operands: Any, callee: Any) -> tuple:
    check_inputs(callee, operands, f"@{callee.name}")
    return output_specs(callee)


def _vjp(cotangents: list, inputs: tuple, params: dict, needs: tuple) -> list:
    """The gradient of a call is a call of the callee's backward graph."""
    callee = params["callee"]
    wrt = tuple(k for k, need in enumerate(needs)
                if need and isinstance(inputs[k], Tensor) and inputs[k].dtype.kind in "fc")
    n = len(inputs)

    def gradient(*args: Any) -> list:
        grads = graph_vjp(callee, list(args[:n]), list(args[n:]), wrt)
        return [grads[k] for k in wrt]
    gradient.__name__ = gradient.__qualname__ = f"grad_{callee.name}"

    grads = run_call(gradient, [*inputs, *cotangents], key=("grad", callee, wrt),
                     names=[v.name for v in callee.inputs] + [f"d{v.id}" for v in callee.outputs])
    out: list = [None] * n
    for k, g in zip(wrt, grads, strict=True):
        out[k] = g
    return out


def _jvp(op: Op, primals: tuple, tangents: tuple, params: dict, transformed: Callable) -> tuple:
    """The tangents of a call are a call of the callee's JVP."""
    callee = params["callee"]
    moving = [k for k, t in enumerate(tangents) if t is not None]
    run, floats = tangent_function(callee, moving, transformed)
    results = run_call(run, [*primals, *(tangents[k] for k in moving)],
                       key=("jvp", callee, tuple(moving)))
    return with_tangents(results, len(callee.outputs), floats)


def _batch(op: Op, args: tuple, dims: tuple, params: dict, size: int,
           transformed: Callable) -> tuple:
    """A call of the callee, batched."""
    callee = params["callee"]
    run = batched_function(callee, dims, size, transformed)
    return run_call(run, list(args), key=("vmap", callee, tuple(dims), size)), \
        [0] * len(callee.outputs)


CALL = control_op(CallOp, "call", _rule, _vjp, (), jvp=_jvp, batch=_batch)


def run_call(fn: Callable[..., list], args: Sequence[Any], key: Any,
             names: Sequence[str] | None = None) -> list:
    """``fn(*args)``, a function of tensors giving a list of tensors: eagerly it runs; while
    tracing, it becomes one ``call`` node, its graph traced once per trace for `key` and the
    operands' specs. `names` name the callee's inputs."""
    return list(dispatch.call(_Call(fn, key, names), tuple(args), {}))


class _Call:
    """One call of a graph function, as the interpreter decides to run it (`dispatch.call`)."""

    def __init__(self, fn: Callable[..., list], key: Any, names: Sequence[str] | None) -> None:
        self.fn, self.key, self.names = fn, key, names

    def run(self, args: tuple, kwargs: dict) -> list:
        """Eagerly: the callee's ops, one by one (on the tape, if an input is tracked)."""
        return list(self.fn(*args))

    def inline(self, args: tuple, kwargs: dict) -> tuple:
        """While tracing: one node, owning the callee's graph (traced at its first call)."""
        builder = dispatch.current_interpreter()
        operands = [builder.operand(x) for x in args]
        key = (self.key, tuple(x.spec if isinstance(x, Tensor) else x for x in operands))
        traced = builder.callees.get(key)
        if traced is None:
            name = self.fn.__name__
            traced = trace_subgraph(self.fn, operands, f"the call of @{name}", self.names)
            traced.graph.name = _unused_name(name, [t.graph for t in builder.callees.values()])
            builder.callees[key] = traced
        tensors = [x for x in operands if isinstance(x, Tensor)]
        return builder.apply(CALL, (*tensors, *traced.free_tensors), {"callee": traced.graph})


def _unused_name(wanted: str, graphs: list[Graph]) -> str:
    """`wanted`, or ``wanted_1``...: two graphs one trace calls have two names."""
    taken = {g.name for g in graphs}
    name, i = wanted, 1
    while name in taken:
        name, i = f"{wanted}_{i}", i + 1
    return name
