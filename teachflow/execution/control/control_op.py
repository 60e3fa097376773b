"""What a control-flow op is: an `Op` whose node owns graphs, and runs them.

An ordinary op is a kernel: arrays in, an array out. A control-flow op decides *which* code runs
(a ``cond``) or *how often* (a loop), so its "kernel" is graphs: the node holds them as
parameters (``true_fn``/``false_fn``, ``cond_fn``/``body_fn``), each a closed `Graph` whose
inputs are the node's operands, and it has one result per value its branches or body give.
Everything that handles an ordinary op handles this one too, through three things it says:

- its shape rule checks the operands against the graphs' inputs, and gives one spec per result
  (`Graph.verify` checks every node this way, and the graphs inside it);
- ``rerun(args, params)``: run it op by op, as `executor.interpret` runs every node: eagerly it
  runs the graphs (through `bind`, so a tape can record their ops); inside a trace it adds the
  same node to that trace;
- ``emit(source, node, operands, results)``: its lines of generated Python, real control flow
  around its graphs' code (``if pred: ... else: ...``, ``while True: ... break``);
- ``vjp``: its gradient, one rule for all its inputs at once (`teachflow.autodiff.tape`);
- ``jvp`` and ``batch``: its rules for ``tfl.jvp`` and ``tfl.vmap`` (`teachflow.rewrites`),
  which run the node again with its graphs transformed. Such a rule gets one more argument than
  an ordinary op's, `transformed`: the transformation's own walk, to run a graph it owns with
  (`tangent_function`, `batched_function`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from teachflow.core.errors import TeachflowError
from teachflow.core.spec import TensorSpec
from teachflow.execution.executor import Line, Source, interpret
from teachflow.graph import Graph, Node, Value
from teachflow.ops.op import Op, RuleError, no_flops
from teachflow.ops.tangents import zeros_of


def no_kernel(xp: Any) -> Callable[..., Any]:
    def refuse(*args: Any, **params: Any) -> Any:
        raise TeachflowError("a control-flow op has no kernel: it runs the graphs it owns",
                             op="control flow",
                             hint="call tfl.cond / tfl.while_loop / tfl.fori_loop, not bind")
    return refuse


@dataclass(frozen=True, eq=False)
class ControlOp(Op):
    """An op whose node owns graphs (see the module docstring)."""

    def common_device(self, specs: list) -> None:
        """None: the operands need not share a device. Each graph reads each operand where it
        lives and moves what it needs elsewhere itself (an op inside that mixes devices is the
        error, as eagerly); the results live where the graphs make them."""
        return None

    def rerun(self, args: Sequence[Any], params: dict) -> tuple:
        raise NotImplementedError

    def emit(self, source: Source, node: Node, operands: list[str],
             results: list[str]) -> list[Line]:
        raise NotImplementedError


def control_op(cls: type[ControlOp], name: str, shape_rule: Callable[..., Any],
               vjp: Callable[..., list] | None, arg_names: tuple[str, ...],
               jvp: Callable[..., tuple] | None = None,
               batch: Callable[..., tuple] | None = None) -> ControlOp:
    """Declare a control-flow op (no kernel, no flops of its own: its graphs' ops count)."""
    return cls(name, no_kernel, shape_rule, vjp=vjp, flops=no_flops, arg_names=arg_names,
               jvp=jvp, batch=batch)


# --- Transformed graphs (tfl.jvp, tfl.vmap) -----------------------------------------------------


def tangent_function(graph: Graph, moving: Sequence[int], transformed: Callable) -> tuple:
    """`graph` as a function of its inputs and the tangents of those at positions `moving`,
    giving its outputs and then the tangents of its floating-point outputs (zeros where one does
    not move: a branch or a step must give every result); and which outputs those are."""
    n = len(graph.inputs)
    floats = [k for k, v in enumerate(graph.outputs) if v.spec.dtype.kind in "fc"]

    def run(*args: Any) -> list:
        tangents: list = [None] * n
        for k, t in zip(moving, args[n:], strict=True):
            tangents[k] = t
        outs, moved = transformed(graph, list(args[:n]), tangents)
        return [*outs, *(zeros_of(outs[k]) if moved[k] is None else moved[k] for k in floats)]
    run.__name__ = run.__qualname__ = f"jvp_{graph.name}"
    return run, floats


def with_tangents(results: Sequence[Any], count: int, floats: Sequence[int]) -> tuple:
    """`tangent_function`'s results as (outputs, a tangent or None per output)."""
    moved: list = [None] * count
    for k, t in zip(floats, results[count:], strict=True):
        moved[k] = t
    return list(results[:count]), moved


def batched_function(graph: Graph, where: Sequence[int | None], size: int,
                     transformed: Callable) -> Callable[..., list]:
    """`graph` run on a batch (its inputs' batch axes at `where`), each result batched first."""
    def run(*args: Any) -> list:
        return transformed(graph, list(args), where, size)
    run.__name__ = run.__qualname__ = f"vmap_{graph.name}"
    return run


# --- Shape rules ------------------------------------------------------------------------------


def check_inputs(graph: Graph, specs: Sequence[Any], what: str) -> None:
    """The operands a node passes to `graph` are what it was traced for."""
    if len(specs) != len(graph.inputs):
        raise RuleError(f"{what} takes {len(graph.inputs)} operand(s), the node gives "
                        f"{len(specs)}")
    for k, (spec, v) in enumerate(zip(specs, graph.inputs, strict=True)):
        if spec != v.spec:
            where = (f" on {v.spec.device}", f" on {spec.device}") \
                if isinstance(spec, TensorSpec) and spec.device != v.spec.device else ("", "")
            raise RuleError(f"operand {k} of {what} is {v.spec}{where[0]}, the node gives "
                            f"{spec}{where[1]}")


def check_scalar_bool(spec: Any, what: str) -> None:
    if not isinstance(spec, TensorSpec) or spec.shape != () or spec.dtype.kind != "b":
        raise RuleError(f"{what} must be a scalar bool tensor, not {spec}",
                        hint="compare to get one: x.sum() > 0")


def output_specs(graph: Graph) -> tuple[TensorSpec, ...]:
    return tuple(v.spec for v in graph.outputs)


# --- Running the graphs -------------------------------------------------------------------------


def graph_function(graph: Graph) -> Callable[..., list]:
    """`graph` as a Python function of its inputs (flat) giving its outputs (a list), run op by
    op: what eager control flow calls, and what a trace traces again."""
    def run(*args: Any) -> list:
        return interpret(graph, list(args))
    run.__name__ = run.__qualname__ = graph.name
    return run


def assign(results: Sequence[str], values: Sequence[str]) -> str:
    """``a, b = x, y`` (``a = x`` for one)."""
    return f"{', '.join(results)} = {', '.join(values)}"


def bound(graph: Graph, names: Sequence[str]) -> dict[Value, str]:
    """Name `graph`'s inputs by what the node passes in."""
    return dict(zip(graph.inputs, names, strict=True))


def indented(lines: list[Line], by: int = 1) -> list[Line]:
    return [(depth + by, text, node) for depth, text, node in lines]
