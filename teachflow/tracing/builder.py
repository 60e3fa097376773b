"""Staged execution (define-and-run): what `bind` does while a graph is being built.

The `GraphBuilder` is the other interpreter behind `bind`. Where the eager interpreter runs an op's
kernel, the builder runs the op's *shape rule* and appends a node to a graph; the Tensor it returns
holds a symbolic `Value` instead of an array. Everything else is shared: the same ops, the same
Tensor methods, the same autodiff tape (so gradient rules applied to symbolic tensors record a
backward graph). Tracing (`teachflow.tracing.trace`) is nothing more than running ordinary Python
with this interpreter in charge:

- Python `for` loops and function calls simply run, so loops come out *unrolled* in the graph;
- Python control flow that needs a tensor's *value* (``if x.sum() > 0``) cannot be decided, and
  raises `TraceError` (see `Value.__bool__`);
- Python side effects such as ``print`` happen once, while tracing, and not when the graph runs
  (as in ``tf.function``): the graph records tensor ops, nothing else.

State is the exception that proves the rule. A traced function may *change* tensors that outlive
the call: ``p -= lr * g`` on an argument or on a captured weight, ``t[i] = v``, ``loss.backward()``
filling the ``.grad`` of parameters, ``opt.zero_grad()`` clearing them. The builder does not let
those happen to the real tensors (they would end up holding symbolic values). It *functionalises*
them, as ``torch.compile`` does: each outside tensor the trace reads gets a symbolic stand-in, an
update rebinds the stand-in to the new value (exactly as `Tensor._take` does eagerly), and when the
trace ends, every stand-in that changed becomes a graph output plus an `Update` saying where its
value goes. The staged call writes them back after the graph runs, so the program means what it
means eagerly. The ``.grad`` a trace reads is state too: whether it was None is part of what the
trace assumed, recorded as a `Guard` (`teachflow.tracing.guards`) that each call checks (a different
answer retraces).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachflow.autodiff import tape
from teachflow.core import dispatch
from teachflow.core.backends import PIN, get_backend
from teachflow.core.errors import TraceError, user_location
from teachflow.core.spec import TensorSpec, checked_shape
from teachflow.graph import Graph, Slot, Value
from teachflow.tensor.conversion import as_constant, as_dtype
from teachflow.tensor.eager import moved_to_pin
from teachflow.tensor.tensor import Tensor
from teachflow.tracing.guards import Guard
from teachflow.tracing.python_state.naming import CaptureNames
from teachflow.tracing.python_state.world import World

_PYTHON_SCALARS = (bool, int, float)


@dataclass
class _GradState:
    """The ``.grad`` of an outside tensor as the trace sees it, from its first use on."""

    slot: Slot
    current: Tensor | None  # symbolic, or None
    written: bool = False



class GraphBuilder:
    """The staging interpreter: record each op as a node of `graph`, and every change of state."""

    def __init__(self, graph: Graph, direct: bool = False) -> None:
        self.graph = graph
        self.direct = direct  # building by hand (placeholders allowed), not tracing a function
        self._context: Any = None
        # State outside the graph, as this trace sees it:
        self.arguments: dict[Tensor, int] = {}  # symbolic argument -> its position
        self.examples: list[Tensor] = []  # the caller's tensors, by position
        self.standins: dict[Tensor, Tensor] = {}  # an outside eager tensor -> its stand-in
        self.captured: dict[Tensor, Value] = {}  # ... and the capture it started from
        self.grads: dict[Tensor, _GradState] = {}  # an outside tensor -> its .grad so far
        self.guards: list[Guard] = []
        self.aliased: list[Tensor] = []  # captured tensors that are also arguments
        self.capture_names = CaptureNames()  # an outside tensor's name in the graph
        # The traced function's world (its globals, cells, instance): where lasting names of
        # captured tensors start (see `CaptureNames.find`).
        self.surroundings: World | None = None
        # The graph of each function this trace calls, traced once however often it is called
        # (`teachflow.execution.control.call`).
        self.callees: dict[Any, Any] = {}

    def __enter__(self) -> GraphBuilder:
        self._context = dispatch.interpreting(self)
        self._context.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._context.__exit__(*exc)

    # --- Ops --------------------------------------------------------------------------------

    def operand(self, x: Any) -> Any:
        """An op argument as the graph sees it: an outside eager tensor becomes its stand-in."""
        if isinstance(x, Tensor) and not isinstance(x._data, Value):
            return self.standin(x)
        return x

    def value_of(self, x: Any) -> Any:
        """The graph operand for an op argument: a Value, or a Python-scalar literal."""
        if isinstance(x, Tensor):
            data = self.operand(x)._data
            if not self.graph.owns(data):
                raise TraceError(f"tensor {data} belongs to another graph", op="trace",
                                 hint="a traced tensor cannot leave its own trace; return it "
                                      "from the function instead")
            return data
        if type(x) not in _PYTHON_SCALARS:
            x = as_constant(x)  # a NumPy scalar becomes the Python scalar it holds
        if isinstance(x, _PYTHON_SCALARS):
            return x
        # A copy: the graph must not change when the user later edits their array.
        return self.graph.constant(np.array(x))

    def apply(self, op: Any, args: tuple, params: dict) -> Tensor:
        pin = PIN.backend
        if pin is not None and not op.device_param and not _owns_graphs(params):
            args = moved_to_pin(args)  # (as eagerly: see `moved_to_pin`)
        args = tuple(self.operand(x) for x in args)
        operands = tuple(self.value_of(x) for x in args)
        source = user_location()
        spec = op.abstract_eval(*(o.spec if isinstance(o, Value) else o for o in operands),
                                **params)
        node = self.graph.add_node(op, operands, params, spec, source,
                                   no_grad=not tape.is_grad_enabled())
        node.pin = pin and pin.name
        tracked = any(isinstance(x, Tensor) and x._node is not None for x in args)
        taken = tuple(  # the operands as the op takes them (as eagerly)
            [x if isinstance(x, Tensor) or type(x) in _PYTHON_SCALARS else as_constant(x)
             for x in args]) if tracked else ()
        if isinstance(spec, tuple):  # an op with several results (control flow)
            return self._results(op, taken, params, node, source)
        backend = get_backend(spec.device)
        on_tape = tape.record(op, taken, params, node.output, backend) if tracked else None
        if on_tape is not None:
            on_tape.source = source  # so the gradient's nodes can name this line too
        return Tensor._make(node.output, backend, on_tape)

    def _results(self, op: Any, taken: tuple, params: dict, node: Any,
                 source: Any) -> tuple[Tensor, ...]:
        """The tensors of a node with several results, each on the tape if the op is."""
        backends = [get_backend(v.spec.device) for v in node.outputs]
        on_tape = tape.record_results(op, taken, params, node.outputs, backends[0]) \
            if taken else None
        for result in on_tape or ():
            if result is not None:  # (the op's own node: its gradient names this line too)
                result.parents[0].source = source
        return tuple(Tensor._make(v, b, None if on_tape is None else on_tape[k])
                     for k, (v, b) in enumerate(zip(node.outputs, backends, strict=True)))

    def lift(self, tensor: Tensor) -> Tensor:
        """A tensor made from data inside the traced code is a constant of the program (a fresh
        one at every call, as eagerly), not state captured from outside."""
        array = tensor._backend.to_numpy(tensor._data)
        value = self.graph.constant(np.array(array))
        value.spec = tensor.spec  # keeps the device
        return Tensor._make(value, tensor._backend, None)

    def values(self, tensor: Tensor) -> np.ndarray:
        data = tensor._data
        if isinstance(data, Value):
            if data.kind == "const":  # a constant of the program: its values are known
                return data.data
            return np.asarray(data)  # raises: values exist only when the graph runs
        name = self._name_for(tensor)
        raise TraceError(
            f"reading the values of {name}, a tensor from outside the traced function: the "
            f"graph reads {name} when it runs (by reference, so that updates of it are seen), "
            "while a value read now, during tracing, would be built into the graph and go stale",
            op="trace", hint=f"compute with {name} as a tensor (x * {name}), not with its Python "
                             "value; or pass the value as a static Python argument")

    def call(self, function: Any, args: tuple, kwargs: dict) -> Any:
        if PIN.backend is not None:  # (its graphs are traced on what the pin moved)
            args = moved_to_pin(args)
        return function.inline(args, kwargs)

    # --- State outside the graph ----------------------------------------------------------

    def standin(self, tensor: Tensor) -> Tensor:
        """The symbolic tensor that stands for an outside eager tensor in this trace: it reads
        the tensor's values when the graph runs (a capture, by reference), and takes its place
        on the tape, so gradients reach the tensor itself. A tensor that is also an argument is
        that argument (one tensor, one stand-in: updates through either name are one)."""
        standin = self.standins.get(tensor)
        if standin is None:
            position = next((i for i, t in enumerate(self.examples) if t is tensor), None)
            if position is not None:
                self.aliased.append(tensor)
                return next(s for s, i in self.arguments.items() if i == position)
            slot = Slot(tensor, "data", self._name_for(tensor), hold=self.direct)
            value = self.captured[tensor] = self.graph.capture(slot, tensor.spec)
            standin = self.standins[tensor] = Tensor._make(value, tensor._backend, tensor._node)
            place = self.capture_names.paths.get(tensor)
            if place is not None:  # found by a lasting name: the trace assumes it stays
                self.guards.append(Guard(slot, "binding", True, place))
        return standin

    def assign(self, tensor: Tensor, value: Tensor) -> None:
        if isinstance(tensor._data, Value):  # an argument, or a value of this trace: as eagerly
            if not self.graph.owns(tensor._data):
                raise TraceError(f"cannot update tensor {tensor._data} of another graph",
                                 op="assign", hint="return the new value instead")
            tensor._take(value)
            self._still_the_leaf(tensor, self.outside(tensor))
            return
        if self.direct:
            raise TraceError(
                "an in-place update of an eager tensor while building a graph by hand cannot be "
                "honoured: the graph only computes what a Session fetches, and nothing would "
                "write the new values back", op="assign",
                hint="compute the new value as a tensor of the graph (w_new = w - lr * g), fetch "
                     "it with Session.run, and update w eagerly afterwards")
        standin = self.standin(tensor)
        standin._take(value)  # written back after the call
        self._still_the_leaf(standin, self.captured[tensor].data)

    def _still_the_leaf(self, tensor: Tensor, slot: Slot | None) -> None:
        """A leaf that requires grad keeps its place on the tape through an update (made under
        no_grad): running the graph on a tape, the new value must be that leaf again."""
        if slot is not None and isinstance(tensor._node, tape.Leaf):
            self.graph.leaf_values[tensor._data] = slot

    def read_grad(self, tensor: Tensor) -> Tensor | None:
        state = self._grad_state(tensor, reading=True)
        return tensor._grad if state is None else state.current

    def write_grad(self, tensor: Tensor, grad: Tensor | None) -> None:
        state = self._grad_state(tensor, reading=False)
        if state is None:
            tensor._grad = grad
            return
        if self.direct:
            raise TraceError(
                "writing the .grad of an eager tensor while building a graph by hand cannot be "
                "honoured (nothing would write it back)", op="grad",
                hint="compute gradients as tensors of the graph with tfl.grad, and fetch them")
        position = self.arguments.get(tensor)
        if position is not None and not self.examples[position].is_leaf:
            raise TraceError(
                f"backward() inside the traced function reached argument "
                f"{self.graph.inputs[position].name}, which was computed from other tensors "
                "outside the function: the graph cannot send gradients on into how it was "
                "computed", op="backward",
                hint="call backward() outside the staged function, or pass a leaf (for "
                     "example the tensors it was computed from) and compute it inside")
        state.current = None if grad is None else self.operand(grad)
        state.written = True

    def _grad_state(self, tensor: Tensor, reading: bool) -> _GradState | None:
        """The `.grad` of an outside tensor (an argument, or a tensor from before the trace) as
        this trace sees it; None for a tensor of the trace itself (its .grad is its own)."""
        state = self.grads.get(tensor)
        if state is not None:
            return state
        if isinstance(tensor._data, Value):
            position = self.arguments.get(tensor)
            if position is None:
                return None
            name = self.graph.inputs[position].name
            outside, slot = self.examples[position], Slot(position, "grad", f"{name}.grad")
        else:
            outside, slot = tensor, Slot(tensor, "grad", f"{self._name_for(tensor)}.grad",
                                         hold=self.direct)
        state = self.grads[tensor] = _GradState(slot, None)
        if reading:  # the trace depends on what .grad holds when it starts
            entry = outside._grad
            self.guards.append(Guard(slot, "grad", None if entry is None else entry.spec))
            if entry is not None:
                value = self.graph.capture(slot, entry.spec)
                state.current = Tensor._make(value, entry._backend, None)
        return state

    def _name_for(self, tensor: Tensor) -> str:
        """A readable name for an outside tensor: the name the user's code reaches it by (``w``,
        ``self.w``, ``opt.state[0]``), unique in the graph; a number where none is found."""
        roots = self.surroundings.roots if self.surroundings is not None else []
        return self.capture_names.name(tensor, roots, {v.name for v in self.graph.inputs},
                                       f"{self.graph._next_id}")

    def updates(self) -> list[tuple[Slot, Value | None]]:
        """Every piece of outside state the trace changed, with its new value."""
        changed: list[tuple[Slot, Value | None]] = []
        for standin, position in self.arguments.items():
            if standin._data is not self.graph.inputs[position]:
                changed.append((Slot(position, "data", self.graph.inputs[position].name),
                                standin._data))
        for tensor, standin in self.standins.items():
            first = self.captured[tensor]
            if standin._data is not first:
                changed.append((first.data, standin._data))
        for state in self.grads.values():
            if state.written:
                changed.append((state.slot,
                                None if state.current is None else state.current._data))
        return changed

    def outside(self, tensor: Tensor) -> Slot | None:
        """The argument or captured tensor that `tensor` is, if it is one: a function that
        returns it returns that very tensor object, as eagerly."""
        if tensor in self.arguments:
            position = self.arguments[tensor]
            return Slot(position, "data", self.graph.inputs[position].name)
        if not isinstance(tensor._data, Value):
            return self.captured[tensor].data
        return next((state.slot for state in self.grads.values() if state.current is tensor),
                    None)  # ``return w.grad``: the .grad itself, after the write-back

    def assume(self, read: Callable[[], Any], what: str) -> Any:
        value = read()
        self.guards.append(Guard(None, "assumption", value, (read, what)))
        return value

    def mark(self, tensor: Tensor, requires_grad: bool) -> None:
        if tensor in self.arguments:
            name = self.graph.inputs[self.arguments[tensor]].name
            raise TraceError(
                f"setting {name}.requires_grad inside a staged function cannot be honoured: the "
                f"function gets a stand-in for argument {name}, and the caller's tensor would "
                "not change", op="requires_grad",
                hint=f"set it before the call ({name}.requires_grad = True, or "
                     "tfl.tensor(..., requires_grad=True))")
        tensor._mark(requires_grad)

    def finish_guards(self, aliasing: bool) -> list[Guard]:
        """The guards of this trace. When it wrote a .grad (backward() ran), what backward
        wrote depended on which tensors required grad: that is assumed too. Which tensors are
        one and the same matters when some were (`aliasing`) or when the trace updates state."""
        guards = list(self.guards)
        captured = tuple(self.captured) + tuple(self.aliased)
        if aliasing or self.aliased or self.updates():
            guards.append(Guard(None, "aliases", Guard(None, "aliases", None, captured).observe(
                self.examples), captured))
        leaves = set()  # (a tensor assumed to be a leaf that requires grad requires grad)
        for slot, _ in self.updates():  # updating a leaf that requires grad is refused (eagerly
            if slot.attr == "data":  # too): whether it is one is assumed
                tensor = slot.tensor(self.examples)
                guards.append(Guard(slot, "leaf", tensor.requires_grad and tensor.is_leaf))
                if tensor.requires_grad and tensor.is_leaf:
                    leaves.add(tensor)
        if any(state.written for state in self.grads.values()):
            for position, example in enumerate(self.examples):
                slot = Slot(position, "data", self.graph.inputs[position].name)
                guards.append(Guard(slot, "requires_grad", example.requires_grad))
            for tensor, capture in self.captured.items():
                if tensor not in leaves:
                    guards.append(Guard(capture.data, "requires_grad", tensor.requires_grad))
        return guards


def is_tracing() -> bool:
    """True while a graph is being built (by tracing or by direct construction)."""
    return isinstance(dispatch.current_interpreter(), GraphBuilder)


#: ``with tfl.Graph():`` builds its graph by hand with this interpreter (see `dispatch.building`).
dispatch.set_graph_builder(functools.partial(GraphBuilder, direct=True))


def placeholder(shape: tuple, dtype: Any = "float32", name: str | None = None) -> Tensor:
    """A graph input to be fed when the graph runs; None in `shape` marks an unknown size.

    Only inside ``with tfl.Graph():`` (direct construction of a graph).
    """
    builder = dispatch.current_interpreter()
    if not isinstance(builder, GraphBuilder) or not builder.direct:
        raise TraceError("tfl.placeholder only makes sense while building a graph by hand",
                         op="placeholder",
                         hint="use it inside `with tfl.Graph() as g:`; a traced function gets "
                              "its inputs from its arguments")
    shape = checked_shape(shape, "placeholder")
    value = builder.graph.add_input(TensorSpec(shape, as_dtype(dtype, "placeholder")),
                                    name=name or f"placeholder{len(builder.graph.inputs)}")
    return Tensor._make(value, get_backend("cpu"), None)


def _owns_graphs(params: dict) -> bool:
    """Does a node with these parameters own graphs (a ``cond``'s branches, a loop's body, a
    function called)? Under a pin, such a node's operands stay where they are: its graphs were
    traced on them so, the arguments moved to the pin first (`GraphBuilder.call`), and a tensor
    a graph reads from outside is moved inside it, by the ops of the graph that read it."""
    return any(isinstance(v, Graph) for v in params.values())
