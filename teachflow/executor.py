"""Running a graph: generated straight-line Python, and a node-by-node interpreter.

A staged function does not walk its graph node by node at every call. Once, it *generates* a
Python function with one line per node, each calling the very kernel eager mode calls, and
compiles it. That is `torch.fx`'s ``GraphModule.code`` idea, and why staging pays off for small
ops: the per-op work of eager dispatch (finding the device, checking for the tape, wrapping
results) is done once, at generation time. The source is kept for learners to read:

    def mlp(x, w1, b1):
        v2 = matmul(x, w1)    # model.py:11
        v4 = add(v2, b1)      # model.py:11
        del v2
        v5 = relu(v4)         # model.py:11
        del v4
        v7 = mul(v5, const6)  # model.py:12
        del v5
        return (v7,)

Each value is named for what it is: the function's arguments by their own names (``x``), the
state it reads from outside (the weights ``w1`` and ``b1``, globals here) by the names the
user's code reads it by, a node's result by the node's number (``v5`` is ``%5`` of the graph),
a constant by its number too (``const6``), and a parameter that does not print as Python (an
index array) by its parameter and node (``index9``).

Only nodes that the requested outputs depend on are emitted: like ``Session.run`` in TensorFlow,
a graph computes what is fetched and nothing else.

`interpret` is the other way to run a graph: node by node through `bind`, so every op is a normal
eager op (values can be inspected one at a time; a tape can record them for autodiff). When the
generated function fails at run time, `explain_failure` runs the graph that way to find the op
that failed, and lets it explain itself at the user's line, as eagerly.

The generated source calls kernels and names values by names of its own (``tanh``, ``v3``,
``slice(0, 2, None)``); an argument of the user's function is renamed where its name would hide
one of them (``v3_1``), so whatever the user calls their arguments, the executor calls what it
means to.
"""

from __future__ import annotations

import keyword
import unicodedata
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

import numpy as np

from teachflow.autodiff import no_grad
from teachflow.backends import Backend, get_backend
from teachflow.dispatch import bind
from teachflow.errors import TeachflowError, compile_at_user_lines, on_behalf_of
from teachflow.graph import Graph, Node, Value
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


def generate(graph: Graph, backend: Backend, outputs: Sequence[Value] | None = None,
             inputs: Sequence[Value] | None = None) -> Executor:
    """Generate, compile and return the executor of `graph` on `backend`."""
    outputs = list(graph.outputs if outputs is None else outputs)
    inputs = list(graph.inputs if inputs is None else inputs)
    nodes, used = graph.live(outputs)
    captures = [v for v in graph.captures if v in used]

    namespace: dict[str, Any] = {"dtype": np.dtype, "inf": float("inf"), "nan": float("nan"),
                                 "__name__": "teachflow.generated"}  # (see eager's warnings)
    # Every name the source uses is claimed once: first its own (kernels, values, and the
    # builtins parameter values print as), then the arguments, which may not hide any of them,
    # then the state read from outside, which may not hide an argument either.
    names = _Names([*namespace, *_BUILTINS_IN_SOURCE])
    kernel_of: dict[Any, str] = {}  # op -> the name its kernel has in the source
    for node in nodes:
        if node.op not in kernel_of:
            kernel_of[node.op] = names.claim(node.op.name)
            namespace[kernel_of[node.op]] = backend.kernels[node.op]
    name_of: dict[Value, str] = {}
    for node in nodes:
        name_of[node.output] = names.claim(f"v{node.id}")
    for v in graph.constants:
        name_of[v] = names.claim(f"const{v.id}")
        namespace[name_of[v]] = backend.asarray(v.data)
    for v in inputs:
        name_of[v] = names.claim(v.name or f"v{v.id}")
    for v in captures:  # by the name the user's code reads it by
        name_of[v] = names.claim(v.name or f"state{v.id}")

    def operand(o: Any) -> str:
        return name_of[o] if isinstance(o, Value) else repr(o)

    def param(node: Node, key: str, value: Any) -> str:
        if ((isinstance(value, _LITERAL) and not isinstance(value, np.generic))
                or _is_literal_tuple(value)):
            return repr(value)
        if isinstance(value, np.dtype):
            return f"dtype('{value.name}')"
        name = names.claim(f"{key}{node.id}")  # anything else (index arrays) is bound by name
        namespace[name] = value
        return name

    # An intermediate is let go of (`del`) right after its last use, as eager mode's
    # temporaries are: the memory of a big tensor is reused at once instead of held to the end.
    last_use = {o: node for node in nodes for o in node.inputs if isinstance(o, Value)}
    kept = set(outputs)
    lines, nodes_of_lines = [], []
    for node in nodes:
        args = [operand(o) for o in node.inputs]
        args += [f"{k}={param(node, k, v)}" for k, v in node.params.items()]
        lines.append((f"{name_of[node.output]} = {kernel_of[node.op]}({', '.join(args)})",
                      str(node.source) if node.source else ""))
        nodes_of_lines.append(node)
        done = [name_of[o] for o in dict.fromkeys(node.inputs) if isinstance(o, Value)
                and last_use[o] is node and o.kind == "node" and o not in kept]
        if done:
            lines.append((f"del {', '.join(done)}", ""))
            nodes_of_lines.append(None)
    returned = ", ".join(operand(v) for v in outputs)
    if len(outputs) == 1:
        returned += ","
    width = max((len(text) for text, src in lines if src), default=0)
    body = [f"    {text:<{width}}  # {src}" if src else f"    {text}" for text, src in lines]
    params = ", ".join(name_of[v] for v in [*inputs, *captures])
    fn_name = names.claim(graph.name if not graph.name.startswith("__") else f"graph{graph.name}")
    source = "\n".join([f"def {fn_name}({params}):", *body, f"    return ({returned})", ""])
    # Each line runs as the user's line of its node (a NumPy warning is shown there).
    places = {n: node.source for n, node in enumerate(nodes_of_lines, start=2) if node}
    code = compile_at_user_lines(source, places, f"<teachflow generated: {graph.name}>")
    exec(code, namespace)  # the source was generated above from our own graph, not user text
    return Executor(source, namespace[fn_name], captures)


# Builtins that parameter values print as (``slice(0, 2, None)``, ``Ellipsis``).
_BUILTINS_IN_SOURCE = ("slice", "Ellipsis")


class _Names:
    """The names of one generated source, each used once. Python reads an identifier after
    normalising it (NFKC: ``ｖ3`` *is* ``v3``), so names are compared the way Python will."""

    def __init__(self, reserved: Sequence[str]) -> None:
        self._taken = {unicodedata.normalize("NFKC", n) for n in reserved}

    def claim(self, wanted: str) -> str:
        """`wanted` made a Python identifier (not a keyword), with ``_1``, ``_2``, ... until
        it is free."""
        base = unicodedata.normalize("NFKC", wanted)
        base = "".join(c if (f"a{c}").isidentifier() else "_" for c in base) or "arg"
        if not base.isidentifier():
            base = f"_{base}"
        if keyword.iskeyword(base) or keyword.issoftkeyword(base):
            base = f"{base}_"
        name, i = base, 1
        while name in self._taken:
            name, i = f"{base}_{i}", i + 1
        self._taken.add(name)
        return name


def _is_literal_tuple(value: Any) -> bool:
    return isinstance(value, tuple) and all(
        (isinstance(v, _LITERAL) and not isinstance(v, np.generic)) or _is_literal_tuple(v)
        for v in value)


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
    env: dict[Value, Any] = dict(zip(input_values, inputs, strict=True))
    for v in graph.captures:
        env[v] = state[v.data] if state is not None else v.data.read(inputs)
    for v in graph.constants:
        backend = get_backend(v.spec.device)
        env[v] = Tensor._make(backend.asarray(v.data), backend, None)
    for node in graph.live(outputs)[0]:
        args = [env[o] if isinstance(o, Value) else o for o in node.inputs]
        with on_behalf_of(node.source), (no_grad() if node.no_grad else nullcontext()):
            env[node.output] = result = bind(node.op, *args, **node.params)
        leaf = graph.leaf_values.get(node.output)
        if leaf is not None:  # an update of a leaf: the leaf, with its new values
            owner = leaf.tensor(inputs) if state is None else None
            if owner is not None and owner._node is not None:
                env[node.output] = result = Tensor._make(result._data, result._backend,
                                                              owner._node)
        if on_node is not None:
            on_node(node, result)
    return [env[v] for v in outputs]


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
