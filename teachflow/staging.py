"""Staged execution (define-and-run): what `bind` does while a graph is being built.

The `GraphBuilder` is the other interpreter behind `bind`. Where the eager interpreter runs an op's
kernel, the builder runs the op's *shape rule* and appends a node to a graph; the Tensor it returns
holds a symbolic `Value` instead of an array. Everything else is shared: the same ops, the same
Tensor methods, the same autodiff tape (so gradient rules applied to symbolic tensors record a
backward graph). Tracing is nothing more than running ordinary Python with this interpreter in
charge:

- Python `for` loops and function calls simply run, so loops come out *unrolled* in the graph;
- Python control flow that needs a tensor's *value* (``if x.sum() > 0``) cannot be decided, and
  raises `TraceError` (see `Value.__bool__`);
- Python side effects such as ``print`` happen once, while tracing, and not when the graph runs
  (as in ``tf.function``): the graph records tensor ops, nothing else.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from teachflow import autodiff, dispatch
from teachflow.backends import get_backend
from teachflow.errors import TraceError, user_location
from teachflow.graph import Graph, Value
from teachflow.spec import TensorSpec
from teachflow.tensor import Tensor, as_constant, as_dtype
from teachflow.tree import tree_flatten, tree_paths, tree_unflatten


class GraphBuilder:
    """The staging interpreter: record each op as a node of `graph`."""

    def __init__(self, graph: Graph, direct: bool = False) -> None:
        self.graph = graph
        self.direct = direct  # building by hand (placeholders allowed), not tracing a function
        self._context: Any = None

    def __enter__(self) -> GraphBuilder:
        self._context = dispatch.interpreting(self)
        self._context.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._context.__exit__(*exc)

    def value_of(self, x: Any) -> Any:
        """The graph operand for an op argument: a Value, or a Python-scalar literal."""
        if isinstance(x, Tensor):
            data = x._data
            if isinstance(data, Value):
                if not self.graph.owns(data):
                    raise TraceError(f"tensor {data} belongs to another graph", op="trace",
                                     hint="a traced tensor cannot leave its own trace; return it "
                                          "from the function instead")
                return data
            return self.graph.capture(x)  # an eager tensor: read by reference at run time
        if isinstance(x, bool | int | float):
            return x
        # A copy: the graph must not change when the user later edits their array.
        return self.graph.constant(np.array(as_constant(x)))

    def apply(self, op: Any, args: tuple, params: dict) -> Tensor:
        operands = tuple(self.value_of(x) for x in args)
        source = user_location()
        spec = op.abstract_eval(*(o.spec if isinstance(o, Value) else o for o in operands),
                                **params)
        node = self.graph.add_node(op, operands, params, spec, source)
        backend = get_backend(spec.device)
        tracked = any(isinstance(x, Tensor) and x._node is not None for x in args)
        tape = autodiff.record(op, args, params, node.output, backend) if tracked else None
        if tape is not None:
            tape.source = source  # so the gradient's nodes can name this line too
        return Tensor._make(node.output, backend, tape)


def is_tracing() -> bool:
    """True while a graph is being built (by tracing or by direct construction)."""
    return isinstance(dispatch.current_interpreter(), GraphBuilder)


def placeholder(shape: tuple, dtype: Any = "float32", name: str | None = None) -> Tensor:
    """A graph input to be fed when the graph runs; None in `shape` marks an unknown size.

    Only inside ``with tfl.Graph():`` (direct construction of a graph).
    """
    builder = dispatch.current_interpreter()
    if not isinstance(builder, GraphBuilder) or not builder.direct:
        raise TraceError("tfl.placeholder only makes sense while building a graph by hand",
                         op="placeholder",
                         hint="use it inside `with tfl.Graph() as g:`; a traced function gets "
                              "its inputs from its arguments")
    shape = tuple(None if d is None else int(d) for d in shape)
    value = builder.graph.add_input(TensorSpec(shape, as_dtype(dtype, "placeholder")),
                                    name=name or f"placeholder{len(builder.graph.inputs)}")
    return Tensor._make(value, get_backend("cpu"), None)


# --- Tracing a Python function ------------------------------------------------------------------


class Traced:
    """A traced function: its graph, plus how its arguments and results were structured."""

    def __init__(self, graph: Graph, in_tree: Any, out_tree: Any, out_leaves: list) -> None:
        self.graph = graph
        self.in_tree = in_tree  # treedef of (args, kwargs)
        self.out_tree = out_tree
        self.out_leaves = out_leaves  # per flat result: a Value, or a static Python value


def named_arguments(fn: Callable, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """``(name, value)`` for each argument as passed: parameter names for positional ones."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # builtins and callables without a signature
        params = []
    kinds = inspect.Parameter
    fixed = [p.name for p in params
             if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    rest = next((p.name for p in params if p.kind is kinds.VAR_POSITIONAL), "arg")
    positional = [fixed[i] if i < len(fixed) else f"{rest}_{i - len(fixed)}"
                  for i in range(len(args))]
    return [*zip(positional, args, strict=True), *kwargs.items()]


def argument_names(fn: Callable, args: tuple, kwargs: dict) -> list[str]:
    """A readable name for every flat argument leaf, in `tree_flatten((args, kwargs))` order:
    ``x``, ``params_0``, ``cfg_lr``, ..."""
    return ["_".join([name, *(str(p) for p in path)])
            for name, value in named_arguments(fn, args, kwargs) for path in tree_paths(value)]


def trace_function(fn: Callable, args: tuple, kwargs: dict, name: str | None = None) -> Traced:
    """Run `fn` once with symbolic tensors in place of its tensor arguments; record the graph."""
    graph = Graph(name or getattr(fn, "__name__", "f"))
    leaves, in_tree = tree_flatten((args, kwargs))
    symbolic = []
    for leaf, arg_name in zip(leaves, argument_names(fn, args, kwargs), strict=True):
        if isinstance(leaf, Tensor):  # dynamic: becomes a graph input
            value = graph.add_input(leaf.spec, name=_identifier(arg_name, graph))
            symbolic.append(Tensor._make(value, leaf._backend, None))
        else:  # static: its value is part of the trace
            symbolic.append(leaf)
    sym_args, sym_kwargs = tree_unflatten(in_tree, symbolic)
    with GraphBuilder(graph) as builder:
        result = fn(*sym_args, **sym_kwargs)
        out_leaves, out_tree = tree_flatten(result)
        outputs = [builder.value_of(x) if isinstance(x, Tensor) else x for x in out_leaves]
    graph.outputs = [v for v in outputs if isinstance(v, Value)]
    graph.verify()
    return Traced(graph, in_tree, out_tree, outputs)


def _identifier(name: str, graph: Graph) -> str:
    """A name that is a Python identifier and unique among the graph's inputs."""
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "arg"
    if name[0].isdigit():
        name = "_" + name
    taken = {v.name for v in graph.inputs}
    candidate, i = name, 1
    while candidate in taken:
        candidate, i = f"{name}_{i}", i + 1
    return candidate


def trace(fn: Callable, *example_args: Any, **example_kwargs: Any) -> Graph:
    """The raw graph of `fn` for these example arguments (no passes), like a jaxpr."""
    return trace_function(fn, example_args, example_kwargs).graph
