"""Writing one ONNX graph: names, constants, casts, and the walk over a teachflow graph.

An ONNX graph is a list of nodes in topological order, ``outputs = OpType(inputs, attributes)``,
whose edges are *names*: a node reads the tensors called ``%3`` and ``c0`` and writes one called
``%4``. That is the IR teachflow already has (SSA values, one node per op), spelled in strings,
so the walk is short: give every teachflow value a name, and for each node ask the op's
converter (`CONVERTERS`, gathered from the modules of each kind of op) to append the ONNX
nodes that compute it.

Two things ONNX wants that teachflow leaves implicit are handled here once, for every converter:

- *Exact types.* ONNX's ``Add`` takes two tensors of one element type; NumPy (and so teachflow)
  promotes ``int32 + float32`` to float64 and lets a Python number take the other operand's type
  (``float16_tensor * 2.0`` stays float16). A converter asks for an operand *in a dtype*
  (`Emitter.input`): a value of another dtype gets a ``Cast`` in front, and a Python number
  becomes a constant of that dtype.
- *Constants.* Every constant (a captured weight, an axis list, a typed ``2.0``) is an
  *initializer* of the outermost graph, stored once however often it is used; the graphs inside
  an ``If`` or a ``Loop`` read it by name, as they read any value of the graph around them.

Each ONNX node carries the teachflow node it computes in its ``doc_string``, with your line
(``%4 = tanh %3 : f32[64,32]  # model.py:12``): the lineage a learner follows from code to
kernel, kept into the exported model (Netron shows it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from teachflow.core.errors import TeachflowError
from teachflow.core.spec import TensorSpec
from teachflow.graph import Graph, Node, Value, format_node
from teachflow.onnx_export import (
    arithmetic_ops,
    control_flow,
    creation_ops,
    index_ops,
    reduction_ops,
    shape_ops,
    window_ops,
)
from teachflow.onnx_export.creation_ops import REFUSED

#: A converter: given the emitter and a teachflow node, it appends the ONNX nodes that compute
#: the node's results, and returns their names (a list for several).
Convert = Callable[["Emitter", Node], Any]

#: Every teachflow op with an ONNX equivalent, by name: how to write it.
CONVERTERS: dict[str, Convert] = {
    **arithmetic_ops.CONVERTERS, **reduction_ops.CONVERTERS, **shape_ops.CONVERTERS,
    **creation_ops.CONVERTERS, **index_ops.CONVERTERS, **control_flow.CONVERTERS,
    **window_ops.CONVERTERS,
}


def onnx_dtype(dtype: np.dtype) -> int:
    """ONNX's number for a NumPy dtype (``TensorProto.FLOAT`` is 1 for float32)."""
    try:
        return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    except (KeyError, TypeError, ValueError):
        raise TeachflowError(f"ONNX has no tensors of dtype {dtype}", op="export_onnx") from None


def value_info(name: str, spec: TensorSpec, dims: Sequence[Any] | None = None) -> Any:
    """The type of a named tensor: element type and shape (a None size stays unknown, or takes
    the symbolic name in `dims`)."""
    return helper.make_tensor_value_info(name, onnx_dtype(spec.dtype),
                                         list(dims) if dims is not None else list(spec.shape))


class Emitter:
    """The ONNX nodes of one graph being written; `child` makes the emitter of a graph inside
    it (a branch, a loop body), which shares the names and the constants of the outermost."""

    def __init__(self, root: Emitter | None = None) -> None:
        self.root = root or self
        self.nodes: list[Any] = []
        self.value_info: list[Any] = []
        self.names: dict[Value, str] = {}  # teachflow value -> its ONNX name, in this graph
        self.node: Node | None = None  # the teachflow node being converted
        self._casts: dict[tuple[str, str], str] = {}
        if root is None:
            self.taken: set[str] = set()
            self.initializers: list[Any] = []
            self._constants: dict[tuple, str] = {}
            self.made_by: dict[str, Node] = {}  # ONNX node name -> the teachflow node it computes

    def child(self) -> Emitter:
        return Emitter(self.root)

    # --- Names and constants --------------------------------------------------------------------

    def fresh(self, wanted: str) -> str:
        """`wanted`, or ``wanted_1``, ...: a name no tensor (or node) of the model has yet."""
        taken = self.root.taken
        name, k = wanted, 1
        while name in taken:
            name, k = f"{wanted}_{k}", k + 1
        taken.add(name)
        return name

    def const(self, array: Any, name: str | None = None) -> str:
        """An initializer of the outermost graph holding `array`; the same array twice is stored
        once."""
        array = np.asarray(array, order="C")  # (ascontiguousarray makes a 0-d array 1-d)
        key = (array.dtype.str, array.shape, array.tobytes()) if name is None else None
        known = self.root._constants.get(key) if key else None
        if known is not None:
            return known
        name = self.fresh(name or f"c{len(self.root.initializers)}")
        self.root.initializers.append(numpy_helper.from_array(array, name))
        if key:
            self.root._constants[key] = name
        return name

    def tensor(self, array: Any) -> Any:
        """`array` as an attribute's value (``ConstantOfShape``'s ``value``)."""
        return numpy_helper.from_array(np.asarray(array))

    @staticmethod
    def onnx_dtype(dtype: Any) -> int:
        return onnx_dtype(dtype)

    def ints(self, values: Sequence[int]) -> str:
        """A 1-d int64 constant: a shape, axes, starts of a slice."""
        return self.const(np.asarray(list(values), dtype=np.int64).reshape(len(values)))

    def input(self, x: Any, dtype: Any = None) -> str:
        """The name of operand `x` (a value, or a Python number), in `dtype` if given."""
        if not isinstance(x, Value):
            return self.const(np.asarray(x, dtype=dtype))
        name = self.names[x]
        if dtype is None or np.dtype(dtype) == x.dtype:
            return name
        return self.cast(name, dtype)

    def cast(self, name: str, dtype: Any) -> str:
        key = (name, np.dtype(dtype).str)
        if key not in self._casts:
            self._casts[key] = self.add("Cast", [name], to=onnx_dtype(dtype))
        return self._casts[key]

    # --- Nodes ----------------------------------------------------------------------------------

    def add(self, op_type: str, inputs: Sequence[str], outputs: int = 1, **attrs: Any) -> Any:
        """Append ``OpType(inputs, attributes)``; its output's name (a list for several)."""
        label = str(self.node.output) if self.node is not None else "graph"
        names = [self.fresh(f"{label}.{op_type}") for _ in range(outputs)]
        doc = ""
        if self.node is not None:
            doc = format_node(self.node) + (f"  # {self.node.source}" if self.node.source
                                            else "")
        self.nodes.append(helper.make_node(op_type, list(inputs), names,
                                           name=self.fresh(f"{label} {op_type}"),
                                           doc_string=doc, **attrs))
        if self.node is not None:
            self.root.made_by[self.nodes[-1].name] = self.node
        return names[0] if outputs == 1 else names

    def translate(self, graph: Graph, inputs: Sequence[str]) -> list[str]:
        """Append the nodes that compute `graph` from the tensors named `inputs` (one per graph
        input); the names of its outputs."""
        self.names.update(zip(graph.inputs, inputs, strict=True))
        for v in graph.constants:
            self.names[v] = self.const(v.data)
        for v in graph.captures:
            self.names[v] = self.const(captured(v), name=str(v))
        for node in graph.nodes:
            self.convert(node)
        return [self.names[v] for v in graph.outputs]

    def convert(self, node: Node) -> None:
        convert = CONVERTERS.get(node.op.name)
        complex_value = next((v for v in (*node.inputs, *node.outputs)
                              if isinstance(v, Value) and v.dtype.kind == "c"), None)
        if convert is None or complex_value is not None:
            reason = REFUSED.get(node.op.name, "teachflow knows no ONNX equivalent for it")
            if complex_value is not None:
                reason = (f"{complex_value} is {complex_value.dtype.name}, and onnxruntime has "
                          "no complex tensors")
            raise TeachflowError(
                f"op {node.op.name} ({format_node(node)}) cannot be exported to ONNX: {reason}",
                op=node.op.name, location=node.source,
                hint="compute it another way (outside the exported function, or from ops "
                     "ONNX has), or pass its result in as an argument")
        outer, self.node, start = self.node, node, len(self.nodes)  # (a loop's nodes: inside)
        try:
            results = convert(self, node)
        finally:
            self.node = outer
        results = [results] if isinstance(results, str) else list(results)
        for value, name in zip(node.outputs, results, strict=True):
            made = any(name in proto.output for proto in self.nodes[start:])
            # Called as the text form calls it (``%4``), where this conversion made it (not a
            # constant, or an operand passed through).
            self.names[value] = self._renamed(name, str(value), start) if made else name
            if made:
                self.value_info.append(value_info(self.names[value], value.spec))

    def _renamed(self, name: str, wanted: str, start: int) -> str:
        """`name` as `wanted` in the nodes from `start` on (those one conversion made)."""
        new = self.fresh(wanted)
        for proto in self.nodes[start:]:
            for names in (proto.input, proto.output):
                for k, n in enumerate(names):
                    if n == name:
                        names[k] = new
        return new

    @staticmethod
    def typed(name: str, spec: TensorSpec) -> Any:
        return value_info(name, spec)

    def graph_proto(self, name: str, inputs: list[Any], outputs: Sequence[str],
                    specs: Sequence[TensorSpec]) -> Any:
        """This emitter's nodes as a graph (a branch, a loop body) with `inputs` (typed) and
        `outputs`. Each output is written by an ``Identity`` of its own, so that one read from
        outside (an operand passed through a branch) still comes from inside."""
        results = []
        for k, (out, spec) in enumerate(zip(outputs, specs, strict=True)):
            results.append(value_info(self.fresh(f"{name}.out{k}"), spec))
            self.nodes.append(helper.make_node("Identity", [out], [results[-1].name],
                                               name=self.fresh(f"{name} return {k}")))
        return helper.make_graph(self.nodes, name, inputs, results, value_info=self.value_info)


def captured(value: Value) -> np.ndarray:
    """The array a capture reads now: a weight of the model becomes a constant of the file."""
    slot = value.data
    if isinstance(slot.owner, int):
        raise TeachflowError(f"the graph reads {slot.name}, state of an argument that exists "
                             "only when the function is called", op="export_onnx",
                             hint="export a function that reads only its arguments' values")
    state = slot.read()
    if state is None:
        raise TeachflowError(f"the graph reads {slot.name}, which is None now", op="export_onnx",
                             hint="export a function that does not read .grad")
    return np.asarray(state.numpy())


def check(model: Any) -> None:
    """onnx's own checker, with its full check (types and shapes inferred and compared with
    those the model declares)."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise TeachflowError(f"the ONNX checker rejects the model teachflow wrote: {exc}",
                             op="export_onnx",
                             hint="this is a bug in teachflow's exporter; please report it "
                                  "with the function you exported") from exc
