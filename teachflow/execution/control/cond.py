"""``tfl.cond(pred, true_fn, false_fn, *operands)``: choose between two functions by a tensor.

Eagerly it simply runs: ``true_fn(*operands) if pred else false_fn(*operands)``, so the same
code works in both modes. Traced, the value of `pred` is not known yet, so *both* branches are
traced, each into a graph of its own, and the trace gets one ``cond`` node that owns them and
chooses when the graph runs (as ``jax.lax.cond`` and ``tf.cond`` do). That is why the branches
must agree: one node has one set of results, whichever branch gives them, so both must return
the same structure of tensors with the same shapes and dtypes.

Its gradient is a ``cond`` too: the same predicate chooses between the gradients of the two
branches (each computed by running its branch again on the tape, then backwards); and so are its
tangents (``tfl.jvp``) and its batched form (``tfl.vmap``), unless each example of the batch has
a predicate of its own: then both branches run, and ``where`` picks each example's results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from teachflow.core import dispatch
from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError, ShapeError, TraceError, expect_callable
from teachflow.core.tree import tree_flatten, tree_unflatten
from teachflow.execution.control.control_op import (
    ControlOp,
    assign,
    batched_function,
    bound,
    check_inputs,
    check_scalar_bool,
    control_op,
    graph_function,
    indented,
    output_specs,
    tangent_function,
    with_tangents,
)
from teachflow.execution.control.graphs import Subgraph, describe, merge_free, trace_subgraph
from teachflow.execution.control.vjp import graph_vjp
from teachflow.execution.executor import Line, Source
from teachflow.graph import Node
from teachflow.ops.elementwise import where
from teachflow.ops.op import Op, RuleError
from teachflow.ops.views import to_front, with_rank
from teachflow.tensor.tensor import Tensor
from teachflow.tracing.callables import callable_name


@dataclass(frozen=True, eq=False)
class CondOp(ControlOp):
    def rerun(self, args: Sequence[Any], params: dict) -> tuple:
        true_fn, false_fn = (graph_function(params[k]) for k in ("true_fn", "false_fn"))
        return tuple(run_cond(args[0], true_fn, false_fn, list(args[1:]),
                              names=[v.name for v in params["true_fn"].inputs]))

    def emit(self, source: Source, node: Node, operands: list[str],
             results: list[str]) -> list[Line]:
        lines: list[Line] = [(0, f"if {operands[0]}:", node)]
        for key in ("true_fn", "false_fn"):
            if key == "false_fn":
                lines.append((0, "else:", None))
            graph = node.params[key]
            body, outs = source.body(graph, bound=bound(graph, operands[1:]))
            lines += indented(body) + [(1, assign(results, outs), None)]
        return lines


def _rule(pred: Any, *operands: Any, true_fn: Any, false_fn: Any) -> tuple:
    check_scalar_bool(pred, "the predicate of cond")
    check_inputs(true_fn, operands, "the true branch")
    check_inputs(false_fn, operands, "the false branch")
    if output_specs(true_fn) != output_specs(false_fn):
        raise RuleError("the branches give different results: "
                        f"{output_specs(true_fn)} and {output_specs(false_fn)}")
    return output_specs(true_fn)


def _vjp(cotangents: list, inputs: tuple, params: dict, needs: tuple) -> list:
    """The gradient of a ``cond`` is a ``cond`` of its branches' gradients."""
    pred, operands = inputs[0], list(inputs[1:])
    wrt = [k for k, need in enumerate(needs[1:]) if need]
    n = len(operands)

    def branch(key: str) -> Callable[..., list]:
        graph = params[key]

        def gradient(*args: Any) -> list:
            grads = graph_vjp(graph, list(args[:n]), list(args[n:]), wrt)
            return [grads[k] for k in wrt]
        gradient.__name__ = gradient.__qualname__ = f"grad_{graph.name}"
        return gradient

    grads = run_cond(pred, branch("true_fn"), branch("false_fn"), operands + list(cotangents))
    out: list = [None] * len(inputs)
    for k, g in zip(wrt, grads, strict=True):
        out[1 + k] = g
    return out


def _jvp(op: Op, primals: tuple, tangents: tuple, params: dict, transformed: Callable) -> tuple:
    """The tangents of a ``cond`` are a ``cond`` of its branches' JVPs."""
    moving = [k for k, t in enumerate(tangents[1:]) if t is not None]
    (run_true, floats), (run_false, _) = (tangent_function(params[key], moving, transformed)
                                          for key in ("true_fn", "false_fn"))
    results = run_cond(primals[0], run_true, run_false,
                       [*primals[1:], *(tangents[1 + k] for k in moving)])
    return with_tangents(results, len(params["true_fn"].outputs), floats)


def _batch(op: Op, args: tuple, dims: tuple, params: dict, size: int,
           transformed: Callable) -> tuple:
    """Batched branches, chosen by one predicate; or, where each example has its own, both
    branches run and each result picked per example (``where``)."""
    count = len(params["true_fn"].outputs)
    true_fn, false_fn = (params[key] for key in ("true_fn", "false_fn"))
    if dims[0] is None:
        branches = (batched_function(g, dims[1:], size, transformed) for g in (true_fn, false_fn))
        return run_cond(args[0], *branches, list(args[1:])), [0] * count
    pred = to_front(args[0], dims[0])
    yes, no = (transformed(g, list(args[1:]), dims[1:], size) for g in (true_fn, false_fn))
    return [bind(where, with_rank(pred, a.ndim - 1), a, b)
            for a, b in zip(yes, no, strict=True)], [0] * count


COND = control_op(CondOp, "cond", _rule, _vjp, ("pred",), jvp=_jvp, batch=_batch)


def cond(pred: Any, true_fn: Callable, false_fn: Callable, *operands: Any) -> Any:
    """``true_fn(*operands)`` if `pred` else ``false_fn(*operands)``.

    `pred` is a scalar bool tensor (or a Python bool, which simply chooses now). Eagerly only
    the chosen branch runs. Traced, both branches are traced and the graph gets one ``cond``
    node that chooses when it runs; then both must return the same structure of tensors, with
    the same shapes and dtypes. Gradients flow through the branch that ran.

        y = tfl.cond(x.sum() > 0, lambda x: x * 2, lambda x: -x, x)
    """
    expect_callable(true_fn, "cond", "tfl.cond(pred, true_fn, false_fn, *operands)")
    expect_callable(false_fn, "cond", "tfl.cond(pred, true_fn, false_fn, *operands)")
    return run_cond(pred, true_fn, false_fn, operands)


def run_cond(pred: Any, true_fn: Callable, false_fn: Callable, operands: Sequence[Any],
             names: Sequence[str] | None = None, out_names: Sequence[str] | None = None) -> Any:
    """`cond`, with `operands` structured as one tuple; `names` name the branches' inputs and
    `out_names` their results in the graph and in errors (``@tfl.script`` gives the variables'
    names)."""
    if not isinstance(pred, Tensor):
        return true_fn(*operands) if pred else false_fn(*operands)
    leaves, in_tree = tree_flatten(tuple(operands))
    return dispatch.call(_Cond(true_fn, false_fn, in_tree, names, out_names),
                         (pred, *leaves), {})


class _Cond:
    """One call of `cond`, as the interpreter decides to run it (`dispatch.call`)."""

    def __init__(self, true_fn: Callable, false_fn: Callable, in_tree: Any,
                 names: Sequence[str] | None, out_names: Sequence[str] | None) -> None:
        self.true_fn, self.false_fn, self.in_tree = true_fn, false_fn, in_tree
        self.names, self.out_names = names, out_names

    def _call(self, fn: Callable, leaves: list) -> Any:
        return fn(*tree_unflatten(self.in_tree, list(leaves)))

    def run(self, args: tuple, kwargs: dict) -> Any:
        """Eagerly: run the branch `pred` chooses, and only that one."""
        pred = args[0]
        _check_pred(pred)
        return self._call(self.true_fn if bool(pred.numpy()) else self.false_fn, args[1:])

    def inline(self, args: tuple, kwargs: dict) -> Any:
        """While tracing: trace both branches into graphs; one node chooses between them."""
        builder = dispatch.current_interpreter()
        pred = builder.operand(args[0])
        _check_pred(pred)
        operands = [builder.operand(x) for x in args[1:]]
        tensors = [x for x in operands if isinstance(x, Tensor)]

        def call(fn: Callable, symbolic: list) -> Any:
            return self._call(fn, symbolic)

        branches = [trace_subgraph(fn, operands, f"the {which} branch of tfl.cond "
                                   f"({callable_name(fn)})", self.names, call)
                    for fn, which in ((self.true_fn, "true"), (self.false_fn, "false"))]
        self._check_agree(*branches)
        free = merge_free(branches, len(tensors))
        results = builder.apply(COND, (pred, *tensors, *free),
                                {"true_fn": branches[0].graph, "false_fn": branches[1].graph})
        return tree_unflatten(branches[0].out_tree, list(results))

    def _check_agree(self, true: Subgraph, false: Subgraph) -> None:
        names = (f"the true branch ({callable_name(self.true_fn)})",
                 f"the false branch ({callable_name(self.false_fn)})")
        if true.out_tree != false.out_tree:
            shapes = [tree_unflatten(b.out_tree, ["tensor"] * len(b.graph.outputs))
                      for b in (true, false)]
            raise TraceError(
                f"{names[0]} returns {shapes[0]!r} but {names[1]} returns {shapes[1]!r}: a cond "
                "node has one set of results, whichever branch runs", op="cond",
                hint="make both branches return the same structure (the same tuple of tensors)")
        for k, (a, b) in enumerate(zip(true.graph.outputs, false.graph.outputs, strict=True)):
            if a.spec == b.spec:
                continue
            what = self.out_names[k] if self.out_names else f"result {k}"
            dtype = a.spec.dtype != b.spec.dtype
            raise TraceError(
                f"the branches disagree on {what}: {names[0]} gives {describe(a.spec)}, "
                f"{names[1]} gives {describe(b.spec)}. A cond node has one set of results, so "
                "both branches must give each the same shape and dtype", op="cond",
                hint=f"convert one of them (.astype('{a.spec.dtype.name}'))" if dtype else
                "give it the same shape in both branches (a graph fixes the shape of every "
                "value); tfl.where(pred, a, b) chooses elementwise between shapes that "
                "broadcast")


def _check_pred(pred: Any) -> None:
    spec = pred.spec
    if spec.shape != ():
        raise ShapeError(f"the predicate must be a scalar, not a tensor of shape {spec.shape}",
                         op="cond", hint="reduce it first: (x > 0).all(), x.sum() > 0")
    if spec.dtype.kind != "b":
        raise DTypeError(f"the predicate must be a bool tensor, not {spec.dtype.name}",
                         op="cond", hint="compare to get one: x > 0")
