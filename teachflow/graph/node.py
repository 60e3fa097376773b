"""The graph's two kinds of thing: a `Value` flows along an edge, a `Node` applies one op.

A value stands in for an array while tracing: it has a shape and a dtype, but no numbers, and an
attempt to use its numbers (``if loss > 0:``, ``float(x)``) is an error that says why. A node is
``output = op(*inputs, **params)``; it remembers the user's source line that created it, and a
stable id (``%7``) that later passes keep as lineage, so a node can be followed from trace to
kernel.

A node prints the way a learner writes maths, one line each (`format_node`):
``%3 = mul %1, %2 : f32[64,128]``, with the parameters that differ from the op's defaults in
braces (``%1 = sum %x {axis=(1,)} : f32[64]``, but ``%2 = mean %x : f32[]``), and where it runs
when that is not the CPU (``%4 = matmul %2, %2 : f32[64,64] on cpu:1``). A call of a graph
function names its callee as a call does: ``%5 = call @inner(%x, %w) : f32[3]``.

Most ops have one result. A control-flow op (`teachflow.execution.control`) has one per value it
carries out of its branches or its loop: its node has several `outputs` (``%5, %6 = while ...``),
and `output` is the first, as for every other node.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teachflow.core.errors import SourceLocation, TraceError
from teachflow.core.spec import TensorSpec
from teachflow.ops.op import Op


class Value:
    """One value flowing along the graph's edges. It stands in for an array in a traced Tensor:
    it has a shape and a dtype, but no numbers, and says so if asked for them."""

    __slots__ = ("data", "drawn_id", "id", "kind", "name", "producer", "spec")

    def __init__(self, id: int, spec: TensorSpec, kind: str, name: str | None = None,
                 producer: Node | None = None, data: Any = None) -> None:
        self.id = id
        self.spec = spec
        self.kind = kind  # "input", "node", "capture" or "const"
        self.name = name
        self.producer = producer
        self.data = data  # the Slot a capture reads, or the constant array
        # The id of the node a drawing shows this value coming out of: its op's (an op with
        # several results is one node, by its first result's id), or its own (an input, a
        # capture, a constant). Kept, not computed: a drawing reads it for every edge.
        self.drawn_id = producer.id if producer is not None else id

    @property
    def shape(self) -> tuple:
        return self.spec.shape

    @property
    def dtype(self) -> np.dtype:
        return self.spec.dtype

    @property
    def ndim(self) -> int:
        return len(self.spec.shape)

    def __str__(self) -> str:
        return f"%{self.name or self.id}"

    def __repr__(self) -> str:
        return f"<Value {self}: {self.spec}>"

    # A traced value has no numbers yet: anything that needs them cannot be decided by tracing.
    def _needs_value(self, what: str, control_flow: bool = False) -> TraceError:
        where = f" (made at {self.producer.source})" if self.producer and self.producer.source \
            else ""
        message = (f"{what} needs the value of traced tensor {self}{where}, but while tracing a "
                   "tensor has only a shape and a dtype: its values exist only when the graph "
                   "runs.")
        if control_flow:
            return TraceError(
                f"{message} Tracing records one path through the Python code; it cannot choose "
                "between paths by a value that is known only when the graph runs.", op="trace",
                hint="put the decision into the graph: tfl.cond(pred, true_fn, false_fn, "
                     "*operands) for an if, tfl.while_loop(cond_fn, body_fn, init) for a "
                     "while; or decorate the function with @tfl.script, which rewrites its "
                     "if/while/for on tensors into those; tfl.where(cond, a, b) chooses "
                     "elementwise; a Python argument decides while tracing (one trace per "
                     "value); lesson 2 shows tfl.where, lesson 4 the rest")
        return TraceError(message, op="trace",
                          hint="keep computing with tensor ops inside the traced function, "
                               "return the tensor, and call .numpy() or .item() on the result")

    def __bool__(self) -> bool:
        raise self._needs_value("Python control flow (if/while/and/or) or bool()",
                                control_flow=True)

    def __float__(self) -> float:
        raise self._needs_value("float()")

    def __int__(self) -> int:
        raise self._needs_value("int()")

    def __index__(self) -> int:
        raise self._needs_value("using a tensor as a Python index")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise self._needs_value("converting to NumPy (.numpy(), .item(), np.asarray)")


class Node:
    """One op application: ``output = op(*inputs, **params)``, or ``out0, out1, ... = op(...)``
    for an op with several results (`spec` a tuple of specs; `more_ids` numbers the results
    after the first, which has the node's own id)."""

    __slots__ = ("_text", "id", "inputs", "lineage", "no_grad", "op", "output", "outputs",
                 "params", "pin", "source")

    def __init__(self, id: int, op: Op, inputs: tuple, params: dict,
                 spec: TensorSpec | tuple[TensorSpec, ...], source: SourceLocation | None,
                 lineage: tuple[int, ...] = (), no_grad: bool = False,
                 more_ids: tuple[int, ...] = (), pin: str | None = None) -> None:
        self.id = id
        self.op = op
        self.inputs = inputs  # Values and Python-scalar literals
        self.params = params
        if isinstance(spec, tuple):  # several results
            self.outputs = tuple(Value(i, s, "node", producer=self)
                                 for i, s in zip((id, *more_ids), spec, strict=True))
            self.output = self.outputs[0]
        else:  # (every trace makes many of these: no tuple built to make one)
            self.output = Value(id, spec, "node", producer=self)
            self.outputs = (self.output,)
        self.source = source
        self.lineage = lineage or (id,)  # the ids of the original nodes this one stands for
        # Traced without recording for autodiff (under no_grad, or a backward pass that is not
        # itself differentiated): running the graph on a tape must not record it either.
        self.no_grad = no_grad
        # The device ``with tfl.device(...)`` pinned the node to while it was built (None: not
        # pinned); the pass `place` says so.
        self.pin = pin
        self._text: tuple | None = None  # (inputs, params, text): see format_node

    @property
    def spec(self) -> TensorSpec:
        return self.output.spec

    @property
    def specs(self) -> tuple[TensorSpec, ...]:
        """The spec of each result (what the op's shape rule gave)."""
        return tuple(v.spec for v in self.outputs)

    def __repr__(self) -> str:
        return f"<Node {format_node(self)}>"


def format_node(node: Node) -> str:
    """``%3 = mul %1, %2 : f32[64,128]``, with the parameters that are not at the op's defaults
    in braces. (A node is written in many places, each stage's text and each kernel's sources:
    the text is kept, for as long as the node has the same operands and parameters.)"""
    kept = node._text
    if kept is not None and kept[0] is node.inputs and kept[1] is node.params:
        return kept[2]
    text = _format_node(node)
    node._text = (node.inputs, node.params, text)
    return text


def _format_node(node: Node) -> str:
    operands = ", ".join(str(o) if isinstance(o, Value) else _format_scalar(o, node.spec.dtype)
                         for o in node.inputs)
    shown = {k: v for k, v in node.params.items()
             if not _is_default(node.op, k, v) and not is_graph(v)}  # (graphs: below it)
    params = f" {{{format_params(shown)}}}" if shown else ""
    results = ", ".join(str(v) for v in node.outputs)
    specs = ", ".join(str(v.spec) for v in node.outputs)
    where = f" on {node.spec.device}" if node.spec.device != "cpu" else ""  # (the default)
    callee = node.params.get("callee")
    if is_graph(callee):  # a call of a graph function, as a call is written
        return f"{results} = {node.op.name} @{callee.name}({operands}) : {specs}{where}"
    return f"{results} = {node.op.name} {operands}{params} : {specs}{where}".replace("  ", " ")


def is_graph(value: Any) -> bool:
    """Is `value` a graph (one a node owns, as a parameter)? (A graph, as
    `teachflow.graph.graph` defines it later: it has nodes and outputs.)"""
    return hasattr(value, "nodes") and hasattr(value, "outputs")


def _format_scalar(value: Any, dtype: np.dtype) -> str:
    """A Python scalar operand; a float that a narrower float dtype holds exactly is written as
    that dtype writes it (``np.float32(0.3)`` became the float 0.30000001192092896: ``0.3``)."""
    if isinstance(value, float) and dtype.kind == "f" and dtype.itemsize < 8:
        narrow = dtype.type(value)
        if float(narrow) == value or value != value:
            return str(narrow)
    return repr(value)


def _is_default(op: Op, name: str, value: Any) -> bool:
    """Is `value` the op's default for `name` (the same object type too: ``axis=0`` is not
    ``axis=False``)?"""
    defaults = getattr(op, "defaults", {})
    return name in defaults and type(value) is type(defaults[name]) and value == defaults[name]


def format_params(params: dict) -> str:
    """``axis=(1,), keepdims=True``: parameters as the text form writes them."""
    return ", ".join(f"{k}={_format_param(v)}" for k, v in params.items())


def _format_param(v: Any) -> str:
    if isinstance(v, np.dtype):
        return v.name
    if isinstance(v, slice):
        parts = ["" if p is None else str(p) for p in (v.start, v.stop, v.step)]
        return ":".join(parts[:2] if v.step is None else parts)
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}"
    if isinstance(v, tuple):
        inner = ", ".join(_format_param(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    return "..." if v is Ellipsis else repr(v)


def format_constant(data: Any) -> str:
    """A small constant by its values (``2.0 : ``, ``[0, 0, 0] : ``); a big one by its type.
    Each value as its own dtype writes it (a float32 0.3 is ``0.3``, not its float64 digits)."""
    if not isinstance(data, np.ndarray) or data.size > 8:
        return ""

    def text(a: np.ndarray) -> str:
        return str(a[()]) if a.ndim == 0 else f"[{', '.join(text(row) for row in a)}]"

    return f"{text(data)} : "


def format_fused_body(node: Node) -> list[tuple[str, str]]:
    """What a fused kernel computes, under its node, as XLA prints a fusion's computation: the
    nodes it stands for, indented, reading the kernel's operands by their names outside; the
    last is the kernel's result."""
    group = getattr(node.op, "group", None)
    if group is None:
        return []
    members = [*group.nodes, *([group.reduction] if group.reduction else [])]
    lines = [("  " + format_node(m), "") for m in members]
    lines[0] = ("{" + lines[0][0][1:], "")
    lines[-1] = (lines[-1][0] + " }", "")
    return lines
