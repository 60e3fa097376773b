"""``tfl.save(obj, path)``: a staged function's graph, or a module's state dict, as a directory.

What is saved of a staged function is its graph *as traced*: the program the learner wrote, in
teachflow's primitive ops, before any pass. The loader compiles it again with the passes of the
teachflow that loads it, so the stepper shows every pass, and nothing generated (a fused kernel
is Python or CUDA C that teachflow wrote) ever travels in a file. The state the graph reads from
outside (a model's weights, captured) is saved with its values now.

Saved graphs are pure: they compute their results from their inputs and that state. A graph
that *writes* state back (``p -= lr * p.grad`` inside the function, ``.grad`` filled by a
``backward()`` in it) is refused, naming the state: its meaning is a change to tensors of the
program that traced it, which a file cannot reach. Save the forward function instead, and its
parameters with the module's state dict.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from teachflow.compiler import Compilation
from teachflow.core.errors import TeachflowError
from teachflow.graph import Graph, Node, Value
from teachflow.ops.op import OPS
from teachflow.saved.format import ARRAYS, DTYPES, FORMAT, MANIFEST, MAX_NAME, VERSION
from teachflow.saved.schema import CannotWrite, write_params, write_scalar
from teachflow.staged.function import ConcreteFunction, Function, one_compilation
from teachflow.tensor.tensor import Tensor


def save(obj: Any, path: str | Path) -> Path:
    """Write `obj` to the directory `path` (made if needed): a ConcreteFunction, a Compilation,
    a `tfl.function` traced once, or anything with a ``state_dict()`` (a module), or such a
    dict of tensors itself. ``tfl.load(path)`` reads it back."""
    folder = Path(path)
    state = obj if isinstance(obj, Mapping) else _state_dict_of(obj)
    writer = Writer()
    if state is not None:
        body = {"tensors": [writer.tensor(name, t) for name, t in _named(state)]}
        kind = "state_dict"
    else:
        body, kind = {"graph": writer.function(graph_to_save(obj))}, "function"
    if writer.functions:  # (1.0 has no calls: a file without them reads as 1.0 everywhere)
        body["functions"] = list(writer.functions.values())
    major, minor = VERSION if writer.functions else (1, 0)
    document = {"format": FORMAT, "version": f"{major}.{minor}", "kind": kind,
                "arrays": ARRAYS, **body}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        np.savez(folder / ARRAYS, **writer.arrays)
        (folder / MANIFEST).write_text(pretty(document) + "\n", encoding="utf-8")
    except OSError as exc:
        raise TeachflowError(f"cannot write {folder}: {exc}", op="save") from exc
    return folder


def graph_to_save(obj: Any) -> Graph:
    """The traced graph of what `tfl.save` was given."""
    compilation = one_compilation(obj, "save", "a saved graph",
                                  "save the one you mean: tfl.save(f.get_concrete_function(x), "
                                  "path)")
    if compilation is not None:
        return compilation.snapshots[0].graph
    raise TeachflowError(
        f"tfl.save takes a staged function or a state dict, not {type(obj).__name__}",
        op="save", hint="tfl.save(tfl.compile(f, x), path), tfl.save(model, path) for a "
                        "module's parameters, or tfl.save(tfl.function(f).get_concrete_"
                        "function(x), path)")


def _state_dict_of(obj: Any) -> Mapping | None:
    method = getattr(obj, "state_dict", None)
    if not callable(method) or isinstance(obj, Function | ConcreteFunction | Compilation):
        return None
    state = method()
    if not isinstance(state, Mapping):
        raise TeachflowError(f"{type(obj).__name__}.state_dict() gave "
                             f"{type(state).__name__}, not a dict of tensors", op="save")
    return state


def _named(state: Mapping) -> list[tuple[str, Any]]:
    for name, t in state.items():
        if not isinstance(name, str) or not name.isprintable() or len(name) > MAX_NAME:
            raise TeachflowError(f"state dict key {name!r:.60} is not a name (at most "
                                 f"{MAX_NAME} printable characters)", op="save")
        if not isinstance(t, Tensor | np.ndarray):
            raise TeachflowError(f"state dict entry {name!r} is {type(t).__name__}, not a "
                                 "tensor: a saved state dict holds tensors only", op="save",
                                 hint="save the tensors; keep other settings in your code")
    return list(state.items())


class Writer:
    """Writes graphs and tensors as saved.json has them, keeping the arrays for arrays.npz
    (``a0``, ``a1``, ... in the order they are met)."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.functions: dict[str, dict] = {}  # each function called, by its name in the file
        self._named: dict[Graph, str] = {}

    def callee(self, graph: Graph) -> str:
        """The name of a function called, written once among the file's functions (two
        graphs of one name, traced for two signatures, get two names)."""
        name = self._named.get(graph)
        if name is None:
            name, k = graph.name, 1
            while name in self.functions:
                name, k = f"{graph.name}_{k}", k + 1
            self._named[graph] = name
            self.functions[name] = {}  # (taken, while its own calls are written)
            self.functions[name] = {**self.graph(graph), "name": name}
        return name

    def array(self, array: np.ndarray) -> dict:
        name = f"a{len(self.arrays)}"
        self.arrays[name] = np.asarray(array, order="C")  # (ascontiguousarray makes 0-d 1-d)
        return {"array": name, "shape": list(array.shape), "dtype": _dtype(array.dtype)}

    def tensor(self, name: str, t: Any) -> dict:
        return {"name": name, **self.array(t.numpy() if isinstance(t, Tensor) else t)}

    def function(self, graph: Graph) -> dict:
        if graph.updates or graph.leaf_values:
            written = ", ".join(sorted({u.slot.name for u in graph.updates}))
            raise TeachflowError(
                f"graph {graph.name} writes state back after it runs ({written}): a saved "
                "graph computes its results from its inputs and the state it reads, and "
                "changes nothing", op="save",
                hint="save the function without the update (the forward pass), and the "
                     "parameters with the module's state dict")
        for v in graph.captures:
            if v.data.attr != "data" or isinstance(v.data.owner, int):
                raise TeachflowError(f"graph {graph.name} reads {v.data.name}, the gradient "
                                     "or state of a tensor at the time of a call, which a "
                                     "saved graph cannot read", op="save",
                                     hint="pass it to the function as an argument instead")
        return self.graph(graph)

    def graph(self, graph: Graph) -> dict:
        data: dict[str, Any] = {"name": graph.name,
                                "inputs": [self.value(v) for v in graph.inputs]}
        if graph.captures:  # (only the outermost graph reads state: sub-graphs are closed)
            data["captures"] = [{**self.value(v), "array": self.array(
                v.data.read().numpy())["array"]} for v in graph.captures]
        data["constants"] = [{"id": v.id, **self.array(v.data)} for v in graph.constants]
        data["nodes"] = [self.node(n) for n in graph.nodes]
        data["outputs"] = [v.id for v in graph.outputs]
        return data

    def value(self, v: Value) -> dict:
        return {"id": v.id, **({"name": v.name} if v.name else {}), "shape": list(v.shape),
                "dtype": _dtype(v.dtype), "device": v.spec.device}

    def node(self, node: Node) -> dict:
        if OPS.get(node.op.name) is not node.op:
            raise TeachflowError(f"op {node.op.name} is not one of teachflow's primitive ops "
                                 "(a fused kernel?): a saved graph is the traced graph",
                                 op="save")
        try:
            params = write_params(node.op, node.params, self)
            inputs = [{"value": o.id} if isinstance(o, Value) else write_scalar(o)
                      for o in node.inputs]
        except CannotWrite as err:
            raise TeachflowError(f"node {node.output} ({node.op.name}): {err}", op="save",
                                 location=node.source) from None
        return {"op": node.op.name, "inputs": inputs, "params": params,
                "outputs": [self.value(v) for v in node.outputs],
                **({"no_grad": True} if node.no_grad else {})}


def _dtype(dtype: np.dtype) -> str:
    if dtype.name not in DTYPES:
        raise TeachflowError(f"dtype {dtype} is not one a saved graph can hold", op="save",
                             hint=f"use one of {', '.join(DTYPES)}")
    return dtype.name


def pretty(data: Any, indent: int = 0) -> str:
    """JSON with a line for each list or object that fits on one (a value, a node), so that
    saved.json reads like the graph's text form."""
    flat = json.dumps(data, allow_nan=False)
    if len(flat) + indent <= 100 or not isinstance(data, dict | list) or not data:
        return flat
    pad, end = " " * (indent + 1), " " * indent
    if isinstance(data, list):
        lines = [pad + pretty(v, indent + 1) for v in data]
        return "[\n" + ",\n".join(lines) + f"\n{end}]"
    lines = [f"{pad}{json.dumps(k)}: {pretty(v, indent + 1)}" for k, v in data.items()]
    return "{\n" + ",\n".join(lines) + f"\n{end}}}"
