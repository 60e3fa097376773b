"""Building a `Graph` from saved.json, believing nothing the file says until it is checked.

The reader walks the JSON once, in order, and builds the graph with the same calls tracing makes
(`Graph.add_input`, `Graph.add_node`, ...), so what it builds is an ordinary graph. On the way:

- every value has an id, unique in the whole file; an operand refers to a value defined
  *before* it in its own graph, so a reference to a later value (a cycle) or to none (dangling)
  is refused, and so is one that reaches out of a sub-graph (sub-graphs are closed);
- an op is looked up by name among teachflow's primitive ops (`OPS`), never imported or
  evaluated; its operands are counted and its parameters read by the schema (`schema`);
- every shape and dtype the file records is checked against what the op's own shape rule
  gives for those operands: the file can describe a graph, but not redefine an op;
- graphs nest at most `MAX_GRAPH_DEPTH` deep, and no value declares more than `MAX_ELEMENTS`.

Whatever fails raises a `SavedGraphError` that says where (``saved.json: graph.nodes[3] (sum):
params.axis ...``). Sources of nodes (the user's lines) are not in the file: they name files on
the machine that saved it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teachflow.core.backends import get_backend
from teachflow.core.spec import TensorSpec
from teachflow.graph import Graph, Slot, Value
from teachflow.ops.op import OPS
from teachflow.saved.arrays import ArrayFile
from teachflow.saved.format import (
    DEVICES,
    MAX_GRAPH_DEPTH,
    boolean,
    dtype,
    fields,
    integer,
    items,
    refuse,
    refusing,
    shape,
    text,
)
from teachflow.saved.schema import arguments_of, check_params, read_params, read_scalar
from teachflow.tensor.tensor import Tensor


class GraphReader:
    """Reads the graph of a saved function; `state` is what its captures read, by name."""

    def __init__(self, arrays: ArrayFile) -> None:
        self.arrays = arrays
        self.state: dict[str, Tensor] = {}
        self._ids: set[int] = set()
        self._open: list[Graph] = []  # the graphs being read, outermost first
        #: The functions the file's graphs call, by name: each read at its first call (its
        #: JSON and where it is, until then), and then that graph for every call.
        self.functions: dict[str, tuple[Any, str] | Graph] = {}
        self._calling: list[str] = []  # the functions being read, callers first

    def function(self, data: Any, where: str) -> Graph:
        graph = self.graph(data, where)
        with refusing(where, "the graph is not well formed"):
            graph.verify()
        return graph

    def graph(self, data: Any, where: str) -> Graph:
        """One graph (the outermost, or one a node owns: then `GRAPH` parameters call this)."""
        if len(self._open) >= MAX_GRAPH_DEPTH:
            raise refuse(where, f"graphs nest more than {MAX_GRAPH_DEPTH} deep")
        outermost = not self._open
        data = fields(data, where, ("name", "inputs", "constants", "nodes", "outputs"),
                      ("captures",) if outermost else ())
        graph = Graph(text(data["name"], f"{where}.name"),
                      within=None if outermost else self._open[-1])
        values: dict[int, Value] = {}
        for k, item in enumerate(items(data["inputs"], f"{where}.inputs")):
            at = f"{where}.inputs[{k}]"
            spec, name = self.spec(item, at, ("name",))
            self._define(values, item, graph.add_input(spec, name), at)
        for k, item in enumerate(items(data.get("captures", []), f"{where}.captures")):
            self._capture(graph, values, item, f"{where}.captures[{k}]")
        for k, item in enumerate(items(data["constants"], f"{where}.constants")):
            at = f"{where}.constants[{k}]"
            item = fields(item, at, ("id", "array", "shape", "dtype"))
            self._define(values, item, graph.constant(self._array(item, at)), at)
        nodes = items(data["nodes"], f"{where}.nodes")
        later = _ids_of_results(nodes)
        self._open.append(graph)
        try:
            for k, item in enumerate(nodes):
                self._node(graph, values, later, item, f"{where}.nodes[{k}]")
        finally:
            self._open.pop()
        graph.outputs = [self._value(values, later, ref, f"{where}.outputs[{k}]")
                         for k, ref in enumerate(items(data["outputs"], f"{where}.outputs"))]
        return graph

    def read_functions(self, data: Any, where: str) -> None:
        """The file's ``functions``: a list of graphs, each with a name of its own."""
        for k, item in enumerate(items(data, where)):
            at = f"{where}[{k}]"
            name = text(fields(item, at, ("name", "inputs", "constants", "nodes",
                                          "outputs"))["name"], f"{at}.name")
            if name in self.functions:
                raise refuse(at, f"the function name {name!r} is there twice")
            self.functions[name] = (item, at)

    def callee(self, data: Any, where: str) -> Graph:
        """The function a ``call`` node calls, named by `data` (read at its first call)."""
        name = text(data, where)
        found = self.functions.get(name)
        if found is None:
            raise refuse(where, f"names no function of the file: {name!r}")
        if name in self._calling:
            cycle = " calls ".join(f"@{n}" for n in [*self._calling, name])
            raise refuse(where, f"{cycle}: a saved graph's calls must end")
        if isinstance(found, tuple):
            self._calling.append(name)
            try:
                found = self.functions[name] = self.graph(*found)
            finally:
                self._calling.pop()
        return found

    def spec(self, data: Any, where: str, optional: tuple[str, ...] = ()
             ) -> tuple[TensorSpec, str | None]:
        """A value as the file records it: its spec, and its name if it has one."""
        data = fields(data, where, ("id", "shape", "dtype", "device"), optional)
        dims = shape(data["shape"], f"{where}.shape", unknown=True)
        kind = dtype(data["dtype"], f"{where}.dtype")
        device = text(data["device"], f"{where}.device", DEVICES)
        name = text(data["name"], f"{where}.name") if "name" in data else None
        return TensorSpec(dims, kind, device), name

    def array(self, data: Any, where: str, kinds: str) -> np.ndarray:
        """An array a parameter holds (an index array), of a dtype of `kinds`."""
        return self._array(fields(data, where, ("array", "shape", "dtype")), where, kinds)

    def _array(self, data: dict, where: str, kinds: str = "biufc") -> np.ndarray:
        """The array of arrays.npz that `data` names (``"array": "a3"``), with the shape and
        dtype it says."""
        found = dtype(data["dtype"], f"{where}.dtype")
        if found.kind not in kinds:
            raise refuse(where, f"an array of {found.name} cannot be here")
        return self.arrays.read(data["array"], shape(data["shape"], f"{where}.shape"), found,
                                where)

    def _capture(self, graph: Graph, values: dict, data: Any, where: str) -> None:
        spec, name = self.spec(data, where, ("name", "array"))
        if name is None or "array" not in data:
            raise refuse(where, "a capture has a name and an array")
        if name in self.state:
            raise refuse(where, f"two captures are named {name!r}")
        if None in spec.shape:
            raise refuse(where, f"captured state has a shape of known sizes, not {spec}")
        array = self.arrays.read(data["array"], spec.shape, spec.dtype, where)
        with refusing(where, f"the state {name} cannot be made"):
            backend = get_backend(spec.device)
            tensor = Tensor._make(backend.asarray(array), backend, None)
        self.state[name] = tensor
        # The loaded function holds its state, as a graph built by hand holds its variables.
        self._define(values, data, graph.capture(Slot(tensor, "data", name, hold=True), spec),
                     where)

    def _node(self, graph: Graph, values: dict, later: set[int], data: Any,
              where: str) -> None:
        data = fields(data, where, ("op", "inputs", "params", "outputs"), ("no_grad",))
        name = text(data["op"], f"{where}.op")
        op = OPS.get(name)
        if op is None:
            raise refuse(where, f"op {name!r} is not one of teachflow's ops",
                         hint="a saved graph applies teachflow's primitive ops, by name; a "
                              "newer teachflow may have this one")
        where = f"{where} ({name})"
        takes = arguments_of(op)
        operands = items(data["inputs"], f"{where}.inputs")
        if len(operands) < takes.least or (takes.most is not None
                                           and len(operands) > takes.most):
            many = takes.least if takes.most == takes.least else \
                f"{takes.least} or more" if takes.most is None else \
                f"{takes.least} to {takes.most}"
            # (An operand past a NumPy kernel's own would be its out=, the array it writes.)
            raise refuse(where, f"{name} takes {many} operand(s), not {len(operands)}")
        inputs = tuple(self._operand(values, later, o, f"{where}.inputs[{k}]")
                       for k, o in enumerate(operands))
        specs = [o.spec for o in inputs if isinstance(o, Value)]
        if specs:  # (the node, as a refusal names it: its op and its operands' specs)
            where = f"{where[:-1]} of {', '.join(map(str, specs))})"
        params = read_params(op, data["params"], self, f"{where}.params")
        wrong = check_params(op, params, specs)
        if wrong is not None:
            raise refuse(f"{where}.params.{wrong[0]}", wrong[1])
        no_grad = boolean(data.get("no_grad", False), f"{where}.no_grad")
        results = items(data["outputs"], f"{where}.outputs")
        recorded = tuple(self.spec(r, f"{where}.outputs[{k}]")[0] for k, r in enumerate(results))
        refused = ", ".join(f"params.{k}" for k in params) or "its operands"
        with refusing(where, f"{name} refuses {refused}"):
            expected = op.abstract_eval(*(o.spec if isinstance(o, Value) else o
                                          for o in inputs), **params)
        specs = expected if isinstance(expected, tuple) else (expected,)
        if recorded != specs:
            raise refuse(where, f"records results {', '.join(map(str, recorded))}, but {name} "
                                f"of its operands gives {', '.join(map(str, specs))}")
        node = graph.add_node(op, inputs, params, expected, None, no_grad=no_grad)
        for k, (item, v) in enumerate(zip(results, node.outputs, strict=True)):
            self._define(values, item, v, f"{where}.outputs[{k}]")

    def _operand(self, values: dict, later: set[int], data: Any, where: str) -> Any:
        if isinstance(data, dict) and "value" in data:
            return self._value(values, later, fields(data, where, ("value",))["value"], where)
        return read_scalar(data, self, where)

    def _value(self, values: dict, later: set[int], ref: Any, where: str) -> Value:
        ref = integer(ref, where)
        if ref in values:
            return values[ref]
        if ref in later:
            raise refuse(where, f"reads %{ref} before it is computed: a graph lists its nodes "
                                "in the order they run, so this is a cycle")
        raise refuse(where, f"reads %{ref}, which no value of this graph is (a dangling "
                            "reference; a graph a node owns reads only its own inputs)")

    def _define(self, values: dict, data: dict, value: Value, where: str) -> None:
        key = integer(data["id"], f"{where}.id", 0)
        if key in self._ids:
            raise refuse(where, f"id {key} is used twice")
        self._ids.add(key)
        values[key] = value


def _ids_of_results(nodes: list) -> set[int]:
    """The ids the nodes of a graph say they define (to tell a cycle from a dangling id)."""
    return {r["id"] for n in nodes if isinstance(n, dict) and isinstance(n.get("outputs"), list)
            for r in n["outputs"] if isinstance(r, dict) and type(r.get("id")) is int}
