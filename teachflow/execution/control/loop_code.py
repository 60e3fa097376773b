"""A loop node's shape rule and generated code: what `loops` declares its ops with.

The generated Python of a loop is a real Python loop around its body's code. For a while loop::

    v7, v8 = x, n                  # the carry starts as the operands
    while True:
        v3 = sum(v7)               # the condition's graph
        v4 = greater(v3, 1.0)
        if not v4:
            break
        v5 = mul(v7, 0.5)          # the body's graph
        v7, v8 = v5, v6            # the next step's carry

and for a fori loop, ``for k in range(0, 1000):`` with the step index ``i`` handed to the body
as a 0-d int64 array. A fori loop that keeps its history (for its gradient) appends each step's
carry to a list and stacks the lists at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from teachflow.core.spec import TensorSpec
from teachflow.execution.control.control_op import (
    assign,
    bound,
    check_inputs,
    check_scalar_bool,
    indented,
    output_specs,
)
from teachflow.execution.executor import Line, Source
from teachflow.graph import Node
from teachflow.ops.op import RuleError

#: The dtype of a fori loop's step index.
INDEX = np.dtype("int64")


def while_rule(*operands: Any, cond_fn: Any, body_fn: Any) -> tuple:
    check_inputs(cond_fn, operands, "the loop condition")
    check_inputs(body_fn, operands, "the loop body")
    if len(cond_fn.outputs) != 1:
        raise RuleError("the loop condition must give one scalar bool")
    check_scalar_bool(cond_fn.outputs[0].spec, "the loop condition")
    return _carried(body_fn, operands)


def fori_rule(lower: Any, upper: Any, *operands: Any, body_fn: Any,
              history: bool = False) -> tuple:
    for limit in (lower, upper):
        if not (isinstance(limit, int) or (isinstance(limit, TensorSpec) and limit.shape == ()
                                           and limit.dtype.kind in "iu")):
            raise RuleError(f"a loop bound must be an int, not {limit}")
    index = body_fn.inputs[0].spec if body_fn.inputs else None
    if index is None or index.shape != () or index.dtype != INDEX:
        raise RuleError("the loop body's first input must be the int64 step index")
    check_inputs(body_fn, (index, *operands), "the loop body")
    carry = _carried(body_fn, operands)
    if not history:
        return carry
    n = max(upper - lower, 0) if isinstance(lower, int) and isinstance(upper, int) else None
    return carry + tuple(TensorSpec((n, *s.shape), s.dtype, s.device) for s in carry)


def _carried(body: Any, operands: tuple) -> tuple:
    carry = tuple(operands[:len(body.outputs)])
    if output_specs(body) != carry:
        raise RuleError(f"the loop body gives {output_specs(body)} for a carry of {carry}")
    return carry


def emit_while(source: Source, node: Node, operands: list[str],
               results: list[str]) -> list[Line]:
    cond, body = node.params["cond_fn"], node.params["body_fn"]
    inputs = results + operands[len(results):]  # the carry, then what the loop reads
    test, (holds,) = source.body(cond, bound=bound(cond, inputs))
    steps, carried = source.body(body, bound=bound(body, inputs))
    return [(0, assign(results, operands[:len(results)]), node), (0, "while True:", None),
            *indented(test), (1, f"if not {holds}:", None), (2, "break", None),
            *indented(steps), (1, assign(results, carried), None)]


def emit_fori(source: Source, node: Node, operands: list[str],
              results: list[str]) -> list[Line]:
    body = node.params["body_fn"]
    m = len(body.outputs)
    lower, upper, init, free = operands[0], operands[1], operands[2:2 + m], operands[2 + m:]
    carry, stacks = results[:m], results[m:]
    index = source.names.claim(f"i{body.inputs[0].id}")
    step = source.names.claim("step")
    loop_index = source.helper("loop_index", _loop_index(source.backend.xp))
    literal = all(isinstance(o, int) for o in node.inputs[:2])
    limits = f"{lower}, {upper}" if literal else f"int({lower}), int({upper})"
    steps, carried = source.body(body, bound=bound(body, [index, *carry, *free]))
    kept = [source.names.claim(f"steps{v.id}") for v in node.outputs[m:]]
    lines: list[Line] = [(0, assign(carry, init), node)]
    if kept:
        lines.append((0, assign(kept, ["[]"] * len(kept)), None))
    lines += [(0, f"for {step} in range({limits}):", None),
              (1, f"{index} = {loop_index}({step})", None),
              *((1, f"{k}.append({c})", None) for k, c in zip(kept, carry, strict=False)),
              *indented(steps), (1, assign(carry, carried), None)]
    if kept:
        stacked = source.helper("stacked", _stacked(source.backend.xp))
        for result, k, v in zip(stacks, kept, node.outputs[m:], strict=True):
            lines.append((0, f"{result} = {stacked}({k}, {v.spec.shape[1:]!r}, "
                             f"dtype('{v.spec.dtype.name}'))", None))
    return lines


def _loop_index(xp: Any) -> Callable[[int], Any]:
    return lambda k: xp.asarray(k, dtype=INDEX)


def _stacked(xp: Any) -> Callable[..., Any]:
    return lambda items, shape, dtype: xp.stack(items) if items else xp.empty((0, *shape), dtype)
