"""What ``tfl.load`` gives for a saved function: a graph that runs without the Python that made
it.

Loading made an ordinary `Graph` of teachflow's primitive ops; from there it is treated as a
traced graph is. The compiler's passes run on it (so ``.show()`` steps through them, as for
``tfl.compile``), an executor is generated from the result, and a call runs that executor on the
arguments and on the state the graph reads (`state`, the captured tensors' saved values, which
the loaded function holds). Differentiating through a call works too: with an argument on the
tape, the graph runs op by op, as a concrete function's does.

A call takes the graph's inputs in order, as tensors or anything NumPy makes an array of (a
float64 array for a float32 input is cast, as a placeholder's feed is). It returns one tensor,
or a tuple of them: the results of the graph, whatever Python structure the function returned
them in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from teachflow.autodiff import tape
from teachflow.compiler import Compilation, run_pipeline
from teachflow.core.backends import get_backend
from teachflow.core.errors import DeviceError, DTypeError, ShapeError
from teachflow.execution.executor import explain_failure, interpret
from teachflow.execution.pieces import executor_for
from teachflow.graph import Graph, Value
from teachflow.tensor.tensor import Tensor


class SavedFunction:
    """A function loaded by ``tfl.load``: callable, and compiled by this teachflow's passes."""

    def __init__(self, graph: Graph, state: dict[str, Tensor], path: Path) -> None:
        self.graph = graph  # as saved: the traced graph
        self.state = state
        self.path = path
        self.compilation = Compilation(run_pipeline(graph, "default", verify=False), self)
        self._backend = get_backend(graph.inputs[0].spec.device if graph.inputs else "cpu")
        self._executor = executor_for(self.compilation.graph, self._backend)
        self._out_backends = [get_backend(v.spec.device) for v in graph.outputs]

    @property
    def source(self) -> str:
        """The generated Python that runs the compiled graph."""
        return self._executor.source

    def __call__(self, /, *args: Any) -> Any:
        inputs = self.graph.inputs
        if len(args) != len(inputs):
            raise ShapeError(f"takes {len(inputs)} argument(s) ({self._parameters()}), not "
                             f"{len(args)}", op=self.graph.name,
                             hint="pass the graph's inputs in order, as tensors or arrays")
        tensors = [_argument(v, a, self.graph.name) for v, a in zip(inputs, args, strict=True)]
        if tape.is_grad_enabled() and any(t._node is not None for t in tensors):
            results = interpret(self.graph, tensors)  # op by op, on the tape
        else:
            results = self._run(tensors)
        return results[0] if len(results) == 1 else tuple(results)

    def _run(self, tensors: list[Tensor]) -> list[Tensor]:
        arrays = [t._data for t in tensors]
        arrays += [v.data.read()._data for v in self._executor.captures]
        try:
            outputs = self._executor.fn(*arrays)
        except Exception as exc:
            raise explain_failure(self.graph, tensors) from exc
        return [Tensor._make(a if type(a) is b.array_type else b.xp.asarray(a), b, None)
                for a, b in zip(outputs, self._out_backends, strict=True)]

    def show(self) -> Any:
        """The pass stepper: this teachflow's passes, run on the loaded graph."""
        return self.compilation.show()

    def to_html(self, path: str | Path) -> Path:
        """Write the pass stepper to `path` as one self-contained web page."""
        return self.compilation.to_html(path)

    def _parameters(self) -> str:
        return ", ".join(f"{v}: {v.spec}" for v in self.graph.inputs)

    def __repr__(self) -> str:
        return (f"<SavedFunction {self.graph.name}({self._parameters()}) from {self.path}: "
                f"{len(self.graph)} nodes>")


def _argument(value: Value, arg: Any, function: str) -> Tensor:
    """`arg` as the tensor input `value` takes, or an error naming the input."""
    spec = value.spec
    if not isinstance(arg, Tensor):
        try:
            array = np.asarray(arg)
        except ValueError as exc:  # a ragged list
            raise ShapeError(f"input {value} was given values that are not an array: {exc}",
                             op=function) from None
        if not np.can_cast(array.dtype, spec.dtype, casting="same_kind"):
            raise DTypeError(f"input {value} is {spec}, but was given {array.dtype.name} "
                             "values", op=function,
                             hint=f"pass {spec.dtype.name} values (.astype('{spec.dtype.name}'))")
        arg = Tensor(array.astype(spec.dtype, copy=False), device=spec.device)
    if arg.dtype != spec.dtype:
        raise DTypeError(f"input {value} is {spec}, but was given a {arg.dtype.name} tensor",
                         op=function, hint=f"convert it: x.astype('{spec.dtype.name}')")
    if arg.device != spec.device:
        raise DeviceError(f"input {value} is on {spec.device}, but was given a tensor on "
                          f"{arg.device}", op=function, hint=f"move it: x.to('{spec.device}')")
    if len(arg.shape) != len(spec.shape) or any(
            d is not None and d != s for d, s in zip(spec.shape, arg.shape, strict=True)):
        raise ShapeError(f"input {value} has shape {spec.shape}, but was given shape "
                         f"{arg.shape}", op=function,
                         hint="None in the input's shape accepts any size there")
    return arg
