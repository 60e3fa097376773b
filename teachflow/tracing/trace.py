"""Tracing a Python function: run it once on symbolic tensors, and keep the graph it built.

`trace_function` gives each tensor argument a graph input and a symbolic stand-in, runs the
function with the `GraphBuilder` in charge (`teachflow.tracing.builder`), watches the Python world
around it (`teachflow.tracing.python_state.world`), and returns a `Traced`: the graph, how arguments
and results were structured, and what the trace assumed about state outside (its guards).
`tfl.trace` shows the raw graph, as ``jax.make_jaxpr`` shows a jaxpr.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from teachflow.autodiff import tape
from teachflow.core.errors import TraceError, expect_callable, user_stacklevel
from teachflow.core.spec import TensorSpec
from teachflow.core.tree import tree_flatten, tree_unflatten
from teachflow.graph import Graph, Slot, Update, Value
from teachflow.ops.elementwise import identity
from teachflow.tensor.tensor import Tensor
from teachflow.tracing import python_state
from teachflow.tracing.builder import GraphBuilder
from teachflow.tracing.callables import argument_names, callable_name, signature_of
from teachflow.tracing.guards import Guard
from teachflow.tracing.python_state.world import SideEffectWarning, World


class Traced:
    """A traced function: its graph, how its arguments and results were structured, and what it
    assumed about state outside the graph (`guards`)."""

    def __init__(self, graph: Graph, in_tree: Any, out_tree: Any, out_leaves: list,
                 guards: list[Guard], returned: list[Slot | None]) -> None:
        self.graph = graph
        self.in_tree = in_tree  # treedef of (args, kwargs)
        self.out_tree = out_tree
        self.out_leaves = out_leaves  # per flat result: a Value, or a static Python value
        self.guards = guards
        # Per flat result: the outside tensor it *is* (``return w`` gives w itself, eagerly).
        self.returned = returned


def trace_function(fn: Callable, args: tuple, kwargs: dict, name: str | None = None,
                   specs: list[TensorSpec] | None = None,
                   left_out: frozenset[str] = frozenset(), staged: bool = True) -> Traced:
    """Run `fn` once with symbolic tensors in place of its tensor arguments; record the graph.

    `specs`, one per tensor argument, trace for those specs instead of the arguments' own (a
    ``None`` dimension stays unknown: one trace serves every size there). `left_out` names
    parameters that `args` and `kwargs` fill with their defaults only to key the trace: the
    function is called without them, as the caller called it (a wrapper may not take them).
    For a function `staged` to be called again (not a `tfl.trace` to look at), Python state
    the trace changed is worth a `SideEffectWarning`.
    """
    expect_callable(fn, "trace", "tfl.trace(f, x)")
    graph = Graph(name or callable_name(fn))
    leaves, in_tree = tree_flatten((args, kwargs))
    specs_left = iter(specs or ())
    builder = GraphBuilder(graph)
    symbolic = []
    standins: dict[Tensor, Tensor] = {}  # an argument -> its stand-in
    for leaf, arg_name in zip(leaves, argument_names(fn, args, kwargs), strict=True):
        if isinstance(leaf, Tensor):  # dynamic: becomes a graph input
            spec = next(specs_left, leaf.spec)
            value = graph.add_input(spec, name=_identifier(arg_name, graph))
            standin = standins.get(leaf)  # one tensor passed twice is one stand-in
            if standin is None:
                standin = standins[leaf] = _argument_standin(value, leaf)
                builder.arguments[standin] = len(builder.examples)
            builder.examples.append(leaf)
            symbolic.append(standin)
        else:  # static: its value is part of the trace
            symbolic.append(leaf)
    around = None
    try:
        # The graph is the function's own: a caller's no_grad does not become part of it (a
        # call decides for itself whether the tape records it).
        with builder, tape.enable_grad():
            # The function gets its containers rebuilt around the stand-ins (inside the trace:
            # a dataclass's __post_init__ computes with them as it would with the tensors).
            sym_args, sym_kwargs = tree_unflatten(in_tree, symbolic)
            # Watched: what it can reach, its own arguments' containers included (an entry
            # written there would be lost with the rebuilt container after the trace).
            around = World(fn, sym_args, sym_kwargs, _containers((sym_args, sym_kwargs)))
            builder.surroundings = around
            call_args, call_kwargs = _as_called(fn, sym_args, sym_kwargs, left_out)
            result = fn(*call_args, **call_kwargs)
            if isinstance(result, Iterator | Awaitable):
                raise TraceError(
                    f"{graph.name} returns a {type(result).__name__}, whose values would be "
                    "computed later, outside the trace", op="trace",
                    hint="return the tensors themselves (in a tuple or list): a staged "
                         "function cannot be a generator")
            out_leaves, out_tree = tree_flatten(result)
            outputs = [builder.value_of(x) if isinstance(x, Tensor) else x for x in out_leaves]
    finally:
        leaked, changed, copied = around.restore(graph) if around is not None else ([], [], [])
    if changed and staged and not leaked:
        warnings.warn(
            f"{graph.name} changed Python state while tracing ({'; '.join(changed[:5])}): Python "
            "code runs once, while tracing, and later calls run the graph, which will not "
            "change it again. Keep state that changes at every call in tensors, updated in "
            "place (self.t += 1 on a tensor is written back at every call)",
            SideEffectWarning, stacklevel=user_stacklevel())
    if copied and staged and not leaked:
        warnings.warn(
            f"{graph.name} changed Python values in a container it was given "
            f"({'; '.join(copied[:5])}): a staged function gets its dict, list and dataclass "
            "arguments rebuilt around stand-ins for their tensors, so the change stays in that "
            "copy, and the caller's container never sees it. Keep state that changes at every "
            "call in tensors, updated in place (written back into the caller's tensors), or "
            "return the new values", SideEffectWarning, stacklevel=user_stacklevel())
    if leaked:
        names = ", ".join(name for name, _ in leaked)
        raise TraceError(
            f"{names} was given a tensor of the trace: a Python assignment (to an attribute, a "
            "dict or list entry, a global or nonlocal name) runs once, while tracing, so it "
            "would keep a symbolic tensor with no values, and later calls would not change it "
            "(it is put back as it was)", op="trace", location=leaked[0][1],
            hint="update the tensor in place instead (self.w -= lr * g, d['m'] *= 0.9): "
                 "in-place updates are written back after every call; or return the new value")
    for leaf in out_leaves:  # a tensor in a container tree_flatten cannot take apart
        if not isinstance(leaf, Tensor) and python_state.holding(
                leaf, lambda v: isinstance(v, Tensor) and isinstance(v._data, Value)):
            raise TraceError(
                f"the function returns tensors inside a {type(leaf).__name__}, which a staged "
                "call cannot rebuild with new values at each call", op="trace",
                hint="return the tensors in tuples, lists, dicts or dataclasses")
    graph.outputs = [v for v in outputs if isinstance(v, Value)]
    for slot, value in builder.updates():  # functionalised state: extra outputs, written back
        graph.updates.append(Update(slot, None if value is None else len(graph.outputs)))
        if value is not None:
            graph.outputs.append(value)
    graph.verify()
    returned = [builder.outside(x) for x in out_leaves if isinstance(x, Tensor)]
    guards = builder.finish_guards(aliasing=len(standins) < len(builder.examples))
    return Traced(graph, in_tree, out_tree, outputs, guards, returned)


def _containers(tree: Any) -> frozenset[int]:
    """The id()s of the containers in `tree` that `tree_flatten` takes apart (rebuilt for a
    call: copies of the caller's)."""
    found: set[int] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.add(id(node))
            stack += node.values()
        elif isinstance(node, list | tuple):
            found.add(id(node))
            stack += node
        elif dataclasses.is_dataclass(node) and not isinstance(node, type):
            found.add(id(node))
            stack += [getattr(node, f.name, None) for f in dataclasses.fields(node)]
    return frozenset(found)


def _as_called(fn: Callable, args: tuple, kwargs: dict, left_out: frozenset[str]) -> Any:
    """``(args, kwargs)`` without the parameters in `left_out`: ``f(*args, **kwargs)`` is then
    the call as written."""
    if not left_out:
        return args, kwargs
    bound = signature_of(fn).bind(*args, **kwargs)
    for name in left_out:
        bound.arguments.pop(name, None)
    return bound.args, bound.kwargs


def _argument_standin(value: Value, argument: Tensor) -> Tensor:
    """The symbolic tensor a traced function gets for a tensor argument. One that requires grad
    is a leaf, as eagerly (backward() inside fills its .grad); one computed from other tensors
    outside stays a non-leaf (in place updates allowed), in front of a leaf that stops a
    backward() inside at it (see `GraphBuilder.write_grad`)."""
    standin = Tensor._make(value, argument._backend, None)
    if argument.requires_grad:
        leaf = tape.Leaf(standin)
        standin._node = leaf if argument.is_leaf else tape.TapeNode(
            identity, {}, (leaf,), (None,), None, argument._backend, argument.shape,
            argument.dtype)
    return standin


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
    return trace_function(fn, example_args, example_kwargs, staged=False).graph
