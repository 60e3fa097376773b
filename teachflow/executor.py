"""Running a graph: generated straight-line Python, and a node-by-node interpreter.

A staged function does not walk its graph node by node at every call. Once, it *generates* a
Python function with one line per node, each calling the very kernel eager mode calls, and
compiles it. That is `torch.fx`'s ``GraphModule.code`` idea, and why staging pays off for small
ops: the per-op work of eager dispatch (finding the device, checking for the tape, wrapping
results) is done once, at generation time. The source is kept for learners to read:

    def mlp(x, w1, b1):
        v3 = matmul(x, w1)                  # model.py:12
        v4 = add(v3, b1)                    # model.py:12
        v5 = relu(v4)                       # model.py:13
        return v5

Only nodes that the requested outputs depend on are emitted: like ``Session.run`` in TensorFlow,
a graph computes what is fetched and nothing else.

`interpret` is the other way to run a graph: node by node through `bind`, so every op is a normal
eager op (values can be inspected one at a time; a tape can record them for autodiff). When the
generated function fails at run time, `explain_failure` runs the graph that way to find the op
that failed, and lets it explain itself at the user's line, as eagerly.

The generated source calls kernels and names values by names of its own (``tanh``, ``v3``,
``slice(0, 2, None)``); an argument of the user's function is renamed where its name would hide
one of them, so whatever the user calls their arguments, the executor calls what it means to.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

import numpy as np

from teachflow.autodiff import no_grad
from teachflow.backends import Backend, get_backend
from teachflow.dispatch import bind
from teachflow.errors import TeachflowError, on_behalf_of
from teachflow.graph import Graph, Node, Value
from teachflow.ops import OPS
from teachflow.tensor import Tensor

# Parameter values that print as Python source which reads back equal.
_LITERAL = (bool, int, float, str, type(None), type(Ellipsis), slice)


class Executor:
    """A compiled graph: ``executor(*input_arrays, *capture_arrays)`` returns output arrays.

    ``captures`` are the values it reads from state outside the graph (see `Slot`), in argument
    order after the inputs.
    """

    def __init__(self, source: str, fn: Callable, captures: list[Value]) -> None:
        self.source = source
        self.fn = fn
        self.captures = captures

    def __call__(self, *arrays: Any) -> Any:
        return self.fn(*arrays)


def live_nodes(graph: Graph, outputs: Sequence[Value]) -> list[Node]:
    """The nodes the outputs depend on, in graph order."""
    needed = {id(v) for v in outputs}
    live = []
    for node in reversed(graph.nodes):
        if id(node.output) in needed:
            live.append(node)
            needed.update(id(o) for o in node.inputs if isinstance(o, Value))
    return live[::-1]


def generate(graph: Graph, backend: Backend, outputs: Sequence[Value] | None = None,
             inputs: Sequence[Value] | None = None) -> Executor:
    """Generate, compile and return the executor of `graph` on `backend`."""
    outputs = list(graph.outputs if outputs is None else outputs)
    inputs = list(graph.inputs if inputs is None else inputs)
    nodes = live_nodes(graph, outputs)
    used = {id(o) for n in nodes for o in n.inputs if isinstance(o, Value)} | \
        {id(v) for v in outputs}
    captures = [v for v in graph.captures if id(v) in used]

    namespace: dict[str, Any] = {"dtype": np.dtype, "inf": float("inf"), "nan": float("nan")}
    kernels: dict[str, Any] = {}  # name in the source -> the op it calls
    kernel_of: dict[int, str] = {}
    for node in nodes:
        kernel = node.op.name
        while kernels.setdefault(kernel, node.op) is not node.op:  # two ops, one name
            kernel += "_"
        namespace.setdefault(kernel, backend.kernels[node.op])
        kernel_of[id(node)] = kernel
    names: dict[int, str] = {}
    # Names the source uses for its own ends: an argument must not hide them.
    taken = {*namespace, *_BUILTINS_IN_SOURCE}
    for v in inputs:
        names[id(v)] = _input_name(v, taken)
    for v in captures:
        names[id(v)] = f"c{v.id}"
    for v in graph.constants:
        names[id(v)] = f"k{v.id}"
        namespace[names[id(v)]] = backend.asarray(v.data)

    def operand(o: Any) -> str:
        return names[id(o)] if isinstance(o, Value) else repr(o)

    def param(value: Any) -> str:
        if ((isinstance(value, _LITERAL) and not isinstance(value, np.generic))
                or _is_literal_tuple(value)):
            return repr(value)
        if isinstance(value, np.dtype):
            return f"dtype('{value.name}')"
        name = f"p{len(namespace)}"  # anything else (index arrays, ...) is bound by name
        namespace[name] = value
        return name

    lines = []
    for node in nodes:
        kernel = kernel_of[id(node)]
        names[id(node.output)] = f"v{node.id}"
        args = [operand(o) for o in node.inputs]
        args += [f"{k}={param(v)}" for k, v in node.params.items()]
        lines.append((f"{names[id(node.output)]} = {kernel}({', '.join(args)})",
                      str(node.source) if node.source else ""))
    returned = ", ".join(operand(v) for v in outputs)
    if len(outputs) == 1:
        returned += ","
    width = max((len(text) for text, _ in lines), default=0)
    body = [f"    {text:<{width}}  # {src}" if src else f"    {text}" for text, src in lines]
    params = ", ".join(names[id(v)] for v in [*inputs, *captures])
    fn_name = _function_name(graph.name)
    if fn_name in taken or fn_name in namespace:  # named like what its body calls (`tanh`)
        fn_name = f"{fn_name}_graph"
    source = "\n".join([f"def {fn_name}({params}):", *body, f"    return ({returned})", ""])
    code = compile(source, f"<teachflow generated: {graph.name}>", "exec")
    exec(code, namespace)  # the source was generated above from our own graph, not user text
    return Executor(source, namespace[fn_name], captures)


# Builtins that parameter values print as (``slice(0, 2, None)``, ``Ellipsis``).
_BUILTINS_IN_SOURCE = ("slice", "Ellipsis")


def _input_name(v: Value, taken: set[str]) -> str:
    """The argument's own name, unless it could clash with a kernel or a name of the source."""
    name = v.name if v.name and v.name.isidentifier() else f"v{v.id}"
    if (keyword.iskeyword(name) or name in OPS or name in taken
            or (re.fullmatch(r"[vckp]\d+", name) and name != f"v{v.id}")):
        name = f"{name}_{v.id}"
    taken.add(name)
    return name


def _is_literal_tuple(value: Any) -> bool:
    return isinstance(value, tuple) and all(
        (isinstance(v, _LITERAL) and not isinstance(v, np.generic)) or _is_literal_tuple(v)
        for v in value)


def _function_name(name: str) -> str:
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return name if name.isidentifier() and not name.startswith("__") else f"graph_{name}"


def interpret(graph: Graph, inputs: Sequence[Tensor], outputs: Sequence[Value] | None = None,
              on_node: Callable[[Node, Tensor], None] | None = None,
              input_values: Sequence[Value] | None = None,
              state: dict | None = None) -> list[Tensor]:
    """Run the graph one node at a time, each through `bind` (so eagerly, on the tape if an
    input is tracked). `on_node(node, result)` sees every intermediate result. An op that fails
    reports the line that created its node. The state the graph reads is read now, unless
    `state` gives it (by `Slot`)."""
    outputs = list(graph.outputs if outputs is None else outputs)
    input_values = graph.inputs if input_values is None else input_values
    env: dict[int, Any] = {id(v): t for v, t in zip(input_values, inputs, strict=True)}
    for v in graph.captures:
        env[id(v)] = state[v.data] if state is not None else v.data.read(inputs)
    for v in graph.constants:
        backend = get_backend(v.spec.device)
        env[id(v)] = Tensor._make(backend.asarray(v.data), backend, None)
    for node in live_nodes(graph, outputs):
        args = [env[id(o)] if isinstance(o, Value) else o for o in node.inputs]
        with on_behalf_of(node.source), (no_grad() if node.no_grad else nullcontext()):
            env[id(node.output)] = result = bind(node.op, *args, **node.params)
        if on_node is not None:
            on_node(node, result)
    return [env[id(v)] for v in outputs]


def explain_failure(graph: Graph, inputs: Sequence[Tensor], outputs: Sequence[Value] | None = None,
                    input_values: Sequence[Value] | None = None) -> Exception:
    """The generated function failed: run the graph op by op, eagerly, so that the op that fails
    explains itself as it would have eagerly (op, operands, the line that created its node)."""
    try:
        with no_grad():
            interpret(graph, inputs, outputs, input_values=input_values)
    except TeachflowError as err:
        return err
    return TeachflowError("the graph failed to run, although every op of it runs on its own",
                          op=graph.name, hint="the original error is attached as __cause__")
