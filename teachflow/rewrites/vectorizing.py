"""Batching: ``tfl.vmap(f, in_axes=0, out_axes=0)``, a function of one example run on a batch.

``vmap(f)`` is ``f`` for a whole batch at once, as if ``f`` ran on each example and the results
were stacked, without the loop: the batch becomes one more axis of every value, and each op runs
once, on the whole batch. Per-example gradients are the classic use:
``tfl.vmap(tfl.grad(loss), in_axes=(None, 0, 0))(w, xs, ys)`` is one batched graph, however
large the batch.

`vmap` traces `f` for one example (each batched argument without its batch axis) and walks the
graph (`walk`): a node none of whose operands is batched runs once, as it is (the same for every
example: a weight, a constant, random numbers too); any other is run by its op's batching rule
(the `batch` field of its declaration), which says where the result's batch axis is. A
control-flow node's rule batches the graphs it owns with this same walk.

`in_axes` says where each argument's batch axis is: an int for all of them, or one entry per
argument (an int, or None for an argument that is the same for every example, or a tree of
them shaped as the argument). `out_axes` says where the results get theirs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

from teachflow.autodiff.tape import no_grad
from teachflow.core.dispatch import bind
from teachflow.core.errors import ShapeError, TeachflowError, expect_callable, on_behalf_of
from teachflow.core.spec import TensorSpec, is_int
from teachflow.core.tree import tree_flatten, tree_unflatten
from teachflow.graph import Graph, Value
from teachflow.graph.graph import subgraphs
from teachflow.ops.views import batched, transpose
from teachflow.rewrites.walk import constants, made_by, operands, rule_summary, traced
from teachflow.tensor.tensor import Tensor, as_tensor

Axes = int | None | Sequence[Any]


def vmap(f: Callable, in_axes: Axes = 0, out_axes: Axes = 0) -> Callable:
    """`f` mapped over a batch axis of its arguments (see the module docstring)."""
    expect_callable(f, "vmap", "tfl.vmap(f)(xs)")

    @functools.wraps(f)
    def mapped(*args: Any) -> Any:
        leaves, tree = tree_flatten(args)
        axes = _leaf_axes(in_axes, args, "in_axes")
        leaves = [as_tensor(x) if a is not None else x for x, a in zip(leaves, axes, strict=True)]
        axes = [None if a is None else _axis(a, x.ndim, "in_axes")
                for x, a in zip(leaves, axes, strict=True)]
        size = _batch_size(leaves, axes)
        tensors = [(x, a) for x, a in zip(leaves, axes, strict=True) if isinstance(x, Tensor)]
        specs = [x.spec if a is None else _without(x.spec, a) for x, a in tensors]
        trace = traced(f, tree_unflatten(tree, leaves), specs, "vmap")
        values = {v: x for v, (x, _) in zip(trace.inputs, tensors, strict=True)}
        dims = {v: a for v, (_, a) in zip(trace.inputs, tensors, strict=True) if a is not None}
        values.update(trace.outside)
        batch(trace.graph, values, dims, size)
        results = [values[r] if isinstance(r, Value) else r for r in trace.results]
        out = tree_unflatten(trace.out_tree, results)
        wanted = _leaf_axes(out_axes, out, "out_axes") if isinstance(out_axes, tuple | list) \
            else [out_axes] * len(results)
        placed = [_placed(x, dims.get(r) if isinstance(r, Value) else None, a, size)
                  for x, r, a in zip(results, trace.results, wanted, strict=True)]
        return tree_unflatten(trace.out_tree, placed)

    return mapped


def batch(graph: Graph, values: dict, dims: dict, size: int) -> None:
    """Walk `graph` for a batch of `size`: each node's value into `values`, and where its batch
    axis is, for a batched one, into `dims` (both keyed by the graph's values)."""
    for node in graph.nodes:
        args = tuple(operands(node, values))
        where = tuple(dims.get(o) if isinstance(o, Value) else None for o in node.inputs)
        with no_grad() if node.no_grad else nullcontext():
            if all(d is None for d in where):
                with on_behalf_of(node.source):
                    result = (node.op.rerun(args, node.params) if subgraphs(node)
                              else bind(node.op, *args, **node.params))
                outs = result if subgraphs(node) else (result,)
                values.update(zip(node.outputs, outs, strict=True))
                continue
            rule = node.op.batch
            if rule is None:
                raise TeachflowError(f"tfl.vmap has no batching rule for op {node.op.name}",
                                     op="vmap", location=node.source,
                                     hint="declare one in the op's declaration (its `batch` "
                                          "field), or compute this outside the vmapped function")
            note = f"batched by {node.op.name}'s rule: {rule_summary(rule)}"
            with made_by(node, note):
                if subgraphs(node):
                    outs, out_dims = rule(node.op, args, where, node.params, size, transformed)
                else:
                    out, d = rule(node.op, args, where, node.params, size)
                    outs, out_dims = (out,), (d,)
        values.update(zip(node.outputs, outs, strict=True))
        dims.update((v, d) for v, d in zip(node.outputs, out_dims, strict=True) if d is not None)


def transformed(graph: Graph, args: Sequence[Any], where: Sequence[int | None],
                size: int) -> list:
    """A graph a control-flow node owns, batched: every result with its batch axis first (one
    that is the same for every example broadcast), so that both branches of a ``cond``, and a
    loop's body step after step, agree on where it is."""
    values = dict(zip(graph.inputs, args, strict=True))
    dims = {v: d for v, d in zip(graph.inputs, where, strict=True) if d is not None}
    values.update(constants(graph))
    batch(graph, values, dims, size)
    return [batched(values[v], dims.get(v), size) for v in graph.outputs]


def _placed(x: Any, dim: int | None, axis: Any, size: int) -> Any:
    """A result with its batch axis where `out_axes` wants it."""
    if axis is None:
        if dim is not None:
            raise ShapeError("out_axes=None asks for a result that is the same for every "
                             "example, but this one differs between them", op="vmap",
                             hint="give out_axes an int for it (0: the batch axis first)")
        return x
    if not isinstance(x, Tensor):
        x = as_tensor(x)
    x = batched(x, dim, size)
    axis = _axis(axis, x.ndim, "out_axes")
    if axis == 0:
        return x
    order = list(range(1, x.ndim))
    order.insert(axis, 0)
    return bind(transpose, x, axes=tuple(order))


def _leaf_axes(axes: Axes, tree: Any, what: str) -> list:
    """One axis (or None) per leaf of `tree` (the arguments, or the results)."""
    leaves, _ = tree_flatten(tree)
    if axes is None or is_int(axes):
        return [axes] * len(leaves)
    if not isinstance(axes, tuple | list) or not isinstance(tree, tuple | list) \
            or len(axes) != len(tree):
        count = len(tree) if isinstance(tree, tuple | list) else 1
        raise ShapeError(f"{what}={axes!r} must be an int, None, or one entry per "
                         f"argument ({count} here)", op="vmap",
                         hint="vmap(f, in_axes=(None, 0, 0))(w, xs, ys)")
    found = []
    for entry, part in zip(axes, tree, strict=True):
        count = len(tree_flatten(part)[0])
        if entry is None or is_int(entry):
            found += [entry] * count
            continue
        inner = tree_flatten(entry)[0]
        if len(inner) != count:
            raise ShapeError(f"{what} entry {entry!r} does not match the structure of its "
                             "argument", op="vmap", hint="give an int or None for it whole")
        found += inner
    return found


def _axis(axis: Any, ndim: int, what: str) -> int:
    if not is_int(axis) or not -ndim <= axis < ndim:
        raise ShapeError(f"{what} {axis!r} is not an axis of a tensor of {ndim} dimension(s)",
                         op="vmap", hint="name an existing axis, or None for no batch axis")
    return int(axis) % ndim


def _batch_size(leaves: list, axes: list) -> int:
    sizes = {x.shape[a] for x, a in zip(leaves, axes, strict=True) if a is not None}
    if not sizes:
        raise ShapeError("vmap needs at least one argument with a batch axis, but in_axes "
                         "gives none", op="vmap", hint="in_axes=0 batches every argument")
    if len(sizes) > 1:
        raise ShapeError(f"the batched arguments disagree on the batch size: "
                         f"{sorted(sizes, key=str)}", op="vmap",
                         hint="every batched argument needs the same size along its batch axis")
    return sizes.pop()


def _without(spec: TensorSpec, axis: int) -> TensorSpec:
    """An example's spec: the batch axis left out."""
    return TensorSpec(spec.shape[:axis] + spec.shape[axis + 1:], spec.dtype, spec.device)
