"""Which values a memory plan may give a buffer: the rule the planner and the executor share.

A planned value is written into memory the executor made once (``matmul(x, w, out=slot0_v2)``)
and written over by a later value of the same slot. That is safe for a value when

- its node's kernel writes its result where it is told (`writes_out`: a NumPy ufunc, or a
  kernel with an ``out`` parameter: ``relu``'s, ``sum``'s, a fused kernel's), and its shape is
  known before the call;
- its memory never outlives the call: it is not returned, nor seen by something returned
  through a view (``reshape``, ``transpose``), and
- nothing keeps its memory under another name the planner cannot see: every node that reads it
  makes a new array (a kernel that takes ``out=`` does) or is a view, read the same way. A node
  whose result may be its operand's memory (``getitem``, a ``cond`` that returns what it was
  given, ``stop_gradient``) leaves its operands unplanned.

A node with several results (a fused kernel) is planned whole or not at all: its kernel takes
one ``out`` per result, or none.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from teachflow.graph import Graph, Node, Value, subgraphs
from teachflow.ops.op import Op

_WRITES_OUT: weakref.WeakKeyDictionary[Op, bool] = weakref.WeakKeyDictionary()


def takes_out(kernel: Any) -> bool:
    """True for a ufunc, or a function with an ``out`` parameter (``np.clip``, ``relu``'s)."""
    if isinstance(kernel, np.ufunc):
        return True
    try:
        return "out" in inspect.signature(kernel).parameters
    except (TypeError, ValueError):  # no signature to read
        return False


def writes_out(op: Op) -> bool:
    """True if `op`'s kernel writes its result into an ``out=`` array: read once from the op's
    own declaration, its NumPy kernel (the kernels for CuPy are written alike)."""
    found = _WRITES_OUT.get(op)
    if found is None:
        found = _WRITES_OUT[op] = not op.view and takes_out(op.kernel(np))
    return found


def plannable(node: Node) -> bool:
    """True if `node`'s results may be written into planned buffers: its kernel takes ``out=``
    and their shapes and dtypes are known now. (Whether a result's memory escapes the call is
    the graph's to say: `plannable_values`.)"""
    return (not subgraphs(node) and writes_out(node.op)
            and all(None not in v.shape and v.dtype != object for v in node.outputs))


def plannable_values(graph: Graph, outputs: Sequence[Value] | None = None) -> set[Value]:
    """The values of `graph` computing `outputs` (default: its own) that a memory plan may give
    a buffer: those of `plannable` nodes whose memory never escapes the call (module docstring).
    """
    outputs = list(graph.outputs if outputs is None else outputs)
    nodes = graph.live(outputs)[0]
    escaping = set(outputs)
    for node in nodes:
        if node.op.view or (not subgraphs(node) and writes_out(node.op)):
            continue  # a view, or a kernel that makes a new array: reads the memory, keeps none
        escaping.update(o for o in node.inputs if isinstance(o, Value))
    for node in reversed(nodes):  # what a view shows escapes with it (latest first: to the base)
        if node.op.view and not escaping.isdisjoint(node.outputs):
            escaping.update(o for o in node.inputs if isinstance(o, Value))
    return {v for node in nodes if plannable(node) and escaping.isdisjoint(node.outputs)
            for v in node.outputs}
