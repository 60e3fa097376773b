"""Staged execution (define-and-run): what `bind` does while a graph is being built.

The `GraphBuilder` is the other interpreter behind `bind`. Where the eager interpreter runs an op's
kernel, the builder runs the op's *shape rule* and appends a node to a graph; the Tensor it returns
holds a symbolic `Value` instead of an array. Everything else is shared: the same ops, the same
Tensor methods, the same autodiff tape (so gradient rules applied to symbolic tensors record a
backward graph). Tracing is nothing more than running ordinary Python with this interpreter in
charge:

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
trace assumed, recorded as a `Guard` that each call checks (a different answer retraces).
"""

from __future__ import annotations

import contextlib
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachflow import autodiff, dispatch
from teachflow.backends import get_backend
from teachflow.errors import SourceLocation, TraceError, user_frame, user_location
from teachflow.graph import Graph, Slot, Update, Value
from teachflow.ops.elementwise import stop_gradient
from teachflow.spec import TensorSpec
from teachflow.tensor import Tensor, as_constant, as_dtype
from teachflow.tree import tree_flatten, tree_paths, tree_unflatten

_PYTHON_SCALARS = (bool, int, float)


@dataclass
class _GradState:
    """The ``.grad`` of an outside tensor as the trace sees it, from its first use on."""

    slot: Slot
    current: Tensor | None  # symbolic, or None
    written: bool = False


@dataclass(frozen=True)
class Guard:
    """Something about state outside the graph that a trace assumed, checked at every call:
    whether a ``.grad`` was None (`what` = "grad", `expected` its spec or None), whether a
    tensor required grad (`what` = "requires_grad", which decides what backward() writes), or
    whether the name the code found a captured tensor by still names it (`what` = "binding",
    `place` = the globals or attributes dict and the name: ``W = tfl.tensor(...)`` between
    calls rebinds W to another tensor, which the graph must then read instead)."""

    slot: Slot
    what: str
    expected: Any
    place: tuple[dict, str] | None = None

    def observe(self, arguments: Any) -> Any:
        tensor = self.slot.tensor(arguments)
        if self.what == "binding":
            names, name = self.place
            return names.get(name) is tensor
        if self.what == "requires_grad":
            return tensor.requires_grad
        grad = tensor.grad
        return None if grad is None else grad.spec

    def holds(self, arguments: Any) -> bool:
        return self.observe(arguments) == self.expected

    def reason(self, arguments: Any) -> str:
        """Why it does not hold, in words."""
        now = self.observe(arguments)
        if self.what == "binding":
            return (f"{self.slot.name} now names another tensor than the one traced (it was "
                    "rebound, not updated in place)")
        if self.what == "requires_grad":
            return (f"{self.slot.name}.requires_grad was {self.expected} when traced, now {now} "
                    "(backward() fills the .grad of tensors that require grad)")
        def show(spec: TensorSpec | None) -> str:
            return "None" if spec is None else f"a {spec} gradient"
        return (f"{self.slot.name} was {show(self.expected)} when traced, now {show(now)} "
                "(backward() adds to a .grad that holds a gradient)")


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
        self._names: dict[Tensor, str] = {}  # an outside tensor -> its name in the graph
        self._places: dict[Tensor, tuple[dict, str]] = {}  # ... where that name is bound

    def __enter__(self) -> GraphBuilder:
        self._context = dispatch.interpreting(self)
        self._context.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._context.__exit__(*exc)

    # --- Ops --------------------------------------------------------------------------------

    def symbolic(self, x: Any) -> Any:
        """An op argument as the graph sees it: an outside eager tensor becomes its stand-in."""
        if isinstance(x, Tensor) and not isinstance(x._data, Value):
            return self.standin(x)
        return x

    def value_of(self, x: Any) -> Any:
        """The graph operand for an op argument: a Value, or a Python-scalar literal."""
        if isinstance(x, Tensor):
            data = self.symbolic(x)._data
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
        args = tuple(self.symbolic(x) for x in args)
        operands = tuple(self.value_of(x) for x in args)
        source = user_location()
        spec = op.abstract_eval(*(o.spec if isinstance(o, Value) else o for o in operands),
                                **params)
        node = self.graph.add_node(op, operands, params, spec, source)
        backend = get_backend(spec.device)
        tracked = any(isinstance(x, Tensor) and x._node is not None for x in args)
        if tracked and not autodiff.is_grad_enabled() and not autodiff.in_backward():
            # Computed under the user's no_grad from values that need gradients: the graph says
            # so, so that differentiating through a run of the graph treats it as a constant.
            node = self.graph.add_node(stop_gradient, (node.output,), {}, spec, source)
        tape = autodiff.record(op, args, params, node.output, backend) if tracked else None
        if tape is not None:
            tape.source = source  # so the gradient's nodes can name this line too
        return Tensor._make(node.output, backend, tape)

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

    # --- State outside the graph ----------------------------------------------------------

    def standin(self, tensor: Tensor) -> Tensor:
        """The symbolic tensor that stands for an outside eager tensor in this trace: it reads
        the tensor's values when the graph runs (a capture, by reference), and takes its place
        on the tape, so gradients reach the tensor itself."""
        standin = self.standins.get(tensor)
        if standin is None:
            slot = Slot(tensor, "data", self._name_for(tensor))
            value = self.captured[tensor] = self.graph.capture(slot, tensor.spec)
            standin = self.standins[tensor] = Tensor._make(value, tensor._backend, tensor._node)
            place = self._places.get(tensor)
            if place is not None:  # found by a lasting name: the trace assumes it stays
                self.guards.append(Guard(slot, "binding", True, place))
        return standin

    def assign(self, tensor: Tensor, value: Tensor) -> None:
        if isinstance(tensor._data, Value):  # an argument, or a value of this trace: as eagerly
            if not self.graph.owns(tensor._data):
                raise TraceError(f"cannot update tensor {tensor._data} of another graph",
                                 op="assign", hint="return the new value instead")
            tensor._take(value)
            return
        if self.direct:
            raise TraceError(
                "an in-place update of an eager tensor while building a graph by hand cannot be "
                "honoured: the graph only computes what a Session fetches, and nothing would "
                "write the new values back", op="assign",
                hint="compute the new value as a tensor of the graph (w_new = w - lr * g), fetch "
                     "it with Session.run, and update w eagerly afterwards")
        self.standin(tensor)._take(value)  # written back after the call

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
        state.current = None if grad is None else self.symbolic(grad)
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
            outside, slot = tensor, Slot(tensor, "grad", f"{self._name_for(tensor)}.grad")
        state = self.grads[tensor] = _GradState(slot, None)
        if reading:  # the trace depends on what .grad holds when it starts
            entry = outside._grad
            self.guards.append(Guard(slot, "grad", None if entry is None else entry.spec))
            if entry is not None:
                value = self.graph.capture(slot, entry.spec)
                state.current = Tensor._make(value, entry._backend, None)
        return state

    def _name_for(self, tensor: Tensor) -> str:
        """A readable name for an outside tensor: the name the user's code knows it by (``w``,
        ``self.w``), unique in the graph; a number where none is found."""
        name = self._names.get(tensor)
        if name is None:
            taken = {*(v.name for v in self.graph.inputs), *self._names.values()}
            found, place = _python_name(tensor)
            if place is not None:
                self._places[tensor] = place
            base = found or f"{self.graph._next_id}"
            name, i = base, 1
            while name in taken:
                name, i = f"{base}_{i}", i + 1
            self._names[tensor] = name
        return name

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
        return None

    def finish_guards(self) -> list[Guard]:
        """The guards of this trace. When it wrote a .grad (backward() ran), what backward
        wrote depended on which tensors required grad: that is assumed too."""
        guards = list(self.guards)
        if any(state.written for state in self.grads.values()):
            for position, example in enumerate(self.examples):
                slot = Slot(position, "data", self.graph.inputs[position].name)
                guards.append(Guard(slot, "requires_grad", example.requires_grad))
            for tensor, capture in self.captured.items():
                guards.append(Guard(capture.data, "requires_grad", tensor.requires_grad))
        return guards


class _Surroundings:
    """The Python places around a traced function that could keep a tensor of the trace: the
    attributes of its instance (``self.w = ...``), its globals and nonlocals, and the dicts and
    lists they hold. Their contents are noted before the trace, so that afterwards any place
    that now holds a symbolic tensor (a Python side effect of the trace) is found and put back.
    """

    #: Dicts and lists inside those places are watched too, up to this many entries.
    NESTED_LIMIT = 1000

    def __init__(self, fn: Callable, args: tuple, kwargs: dict) -> None:
        self.places: list[tuple[str, Any, dict]] = []  # (name, container, contents before)
        inner = inspect.unwrap(fn)
        owners = [("self", getattr(fn, "__self__", None)), ("self", getattr(fn, "instance", None)),
                  *((n, a) for n, a in named_arguments(fn, args, kwargs)
                    if not isinstance(a, Tensor))]
        for name, owner in owners:
            if owner is not None and not isinstance(owner, type | types.ModuleType):
                with contextlib.suppress(TypeError):  # (no __dict__)
                    self._watch(f"{name}.", vars(owner), nested=True)
        self._watch("global ", getattr(inner, "__globals__", {}), nested=True)
        cells = dict(zip(getattr(getattr(inner, "__code__", None), "co_freevars", ()),
                         getattr(inner, "__closure__", None) or (), strict=True))
        self.cells = {name: (cell, _cell_contents(cell)) for name, cell in cells.items()}
        for name, (_, value) in self.cells.items():
            self._watch_value(name, value)

    def _watch(self, prefix: str, container: dict, nested: bool) -> None:
        self.places.append((prefix, container, dict(container)))
        if nested:
            for key, value in container.items():
                self._watch_value(f"{prefix.replace('global ', '')}{key}", value)

    def _watch_value(self, name: str, value: Any) -> None:
        if isinstance(value, dict | list):
            if len(value) <= self.NESTED_LIMIT:
                before = dict(value) if isinstance(value, dict) else dict(enumerate(value))
                self.places.append((f"{name}[", value, before))
        elif not isinstance(value, type | types.ModuleType | types.FunctionType | Tensor):
            try:  # an object: its attributes (a model's weights)
                attributes = vars(value)
            except TypeError:
                return
            if len(attributes) <= self.NESTED_LIMIT:
                self.places.append((f"{name}.", attributes, dict(attributes)))

    def restore(self, graph: Graph) -> list[tuple[str, SourceLocation | None]]:
        """Put back every place that now holds a tensor of `graph`; return their names, each
        with the line that computed the tensor."""
        def made_at(value: Any) -> SourceLocation | bool | None:
            if isinstance(value, Tensor) and isinstance(value._data, Value) and \
                    graph.owns(value._data):
                producer = value._data.producer
                return producer.source if producer is not None else None
            return False

        leaked = []
        for prefix, container, before in self.places:
            items = enumerate(container) if isinstance(container, list) else container.items()
            found = [(key, made_at(value)) for key, value in items]
            found = [(key, where) for key, where in found if where is not False]
            for key, where in found:
                name = f"{prefix}{key!r}]" if prefix.endswith("[") else f"{prefix}{key}"
                leaked.append((name, where))
            if found and isinstance(container, list):
                container[:] = before.values()
            for key, _ in found if isinstance(container, dict) else ():
                if key in before:
                    container[key] = before[key]
                else:
                    del container[key]
        for name, (cell, before) in self.cells.items():
            where = made_at(_cell_contents(cell))
            if where is not False:
                leaked.append((f"nonlocal {name}", where))
                cell.cell_contents = before
        return leaked


def _cell_contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell (a name not yet bound)
        return None


def _python_name(tensor: Tensor) -> tuple[str | None, tuple[dict, str] | None]:
    """The name the user's code holds `tensor` by, looked up in the innermost user frame: an
    attribute of one of its objects (``self.w``, ``model.w``) first, as that name lasts, then a
    global, then a local variable (a loop variable may hold it only for now). Also where a
    lasting name is bound (an attributes or globals dict, and the key), else None."""
    frame = user_frame()
    if frame is None:
        return None, None
    scopes = [frame.f_locals, frame.f_globals]
    for scope in scopes:
        for name, value in scope.items():
            if isinstance(value, type | types.ModuleType | Tensor):
                continue
            try:
                attributes = vars(value)
            except Exception:  # no __dict__ (or an odd one): a name must never break a trace
                continue
            for attribute, held in attributes.items():
                if held is tensor:
                    return f"{name}.{attribute}", (attributes, attribute)
    for scope in reversed(scopes):
        for name, value in scope.items():
            if value is tensor:
                lasting = scope is frame.f_globals
                return name, (frame.f_globals, name) if lasting else None
    return None, None


def is_tracing() -> bool:
    """True while a graph is being built (by tracing or by direct construction)."""
    return isinstance(dispatch.current_interpreter(), GraphBuilder)


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
    shape = tuple(None if d is None else int(d) for d in shape)
    value = builder.graph.add_input(TensorSpec(shape, as_dtype(dtype, "placeholder")),
                                    name=name or f"placeholder{len(builder.graph.inputs)}")
    return Tensor._make(value, get_backend("cpu"), None)


# --- Tracing a Python function ------------------------------------------------------------------


class Traced:
    """A traced function: its graph, how its arguments and results were structured, and what it
    assumed about state outside the graph (`guards`)."""

    def __init__(self, graph: Graph, in_tree: Any, out_tree: Any, out_leaves: list,
                 guards: list[Guard], returned: list[Slot | None]) -> None:
        self.graph = graph
        self.in_tree = in_tree  # treedef of (args, kwargs)
        self.out_tree = out_tree
        self.out_leaves = out_leaves  # per flat result: a Value, or a static Python value
        self.guards = guards
        # Per flat result: the outside tensor it *is* (``return w`` gives w itself, eagerly).
        self.returned = returned


def named_arguments(fn: Callable, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """``(name, value)`` for each argument as passed: parameter names for positional ones."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # builtins and callables without a signature
        params = []
    kinds = inspect.Parameter
    fixed = [p.name for p in params
             if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    rest = next((p.name for p in params if p.kind is kinds.VAR_POSITIONAL), "arg")
    positional = [fixed[i] if i < len(fixed) else f"{rest}_{i - len(fixed)}"
                  for i in range(len(args))]
    return [*zip(positional, args, strict=True), *kwargs.items()]


def argument_names(fn: Callable, args: tuple, kwargs: dict) -> list[str]:
    """A readable name for every flat argument leaf, in `tree_flatten((args, kwargs))` order:
    ``x``, ``params_0``, ``cfg_lr``, ..."""
    return ["_".join([name, *(str(p) for p in path)])
            for name, value in named_arguments(fn, args, kwargs) for path in tree_paths(value)]


def trace_function(fn: Callable, args: tuple, kwargs: dict, name: str | None = None,
                   specs: list[TensorSpec] | None = None) -> Traced:
    """Run `fn` once with symbolic tensors in place of its tensor arguments; record the graph.

    `specs`, one per tensor argument, trace for those specs instead of the arguments' own (a
    ``None`` dimension stays unknown: one trace serves every size there).
    """
    graph = Graph(name or getattr(fn, "__name__", "f"))
    leaves, in_tree = tree_flatten((args, kwargs))
    specs_left = iter(specs or ())
    builder = GraphBuilder(graph)
    symbolic = []
    for leaf, arg_name in zip(leaves, argument_names(fn, args, kwargs), strict=True):
        if isinstance(leaf, Tensor):  # dynamic: becomes a graph input
            spec = next(specs_left, leaf.spec)
            value = graph.add_input(spec, name=_identifier(arg_name, graph))
            standin = Tensor._make(value, leaf._backend, None)
            if leaf.requires_grad:  # as eagerly: backward() inside fills its .grad
                standin._node = autodiff.Leaf(standin)
            builder.arguments[standin] = len(builder.examples)
            builder.examples.append(leaf)
            symbolic.append(standin)
        else:  # static: its value is part of the trace
            symbolic.append(leaf)
    sym_args, sym_kwargs = tree_unflatten(in_tree, symbolic)
    surroundings = _Surroundings(fn, args, kwargs)
    try:
        with builder:
            result = fn(*sym_args, **sym_kwargs)
            out_leaves, out_tree = tree_flatten(result)
            outputs = [builder.value_of(x) if isinstance(x, Tensor) else x for x in out_leaves]
    finally:
        leaked = surroundings.restore(graph)
    if leaked:
        names = ", ".join(name for name, _ in leaked)
        raise TraceError(
            f"{names} was given a tensor of the trace: a Python assignment (to an attribute, a "
            "dict or list entry, a global or nonlocal name) runs once, while tracing, so it "
            "would keep a symbolic tensor with no values, and later calls would not change it "
            "(it is put back as it was)", op="trace", location=leaked[0][1],
            hint="update the tensor in place instead (self.w -= lr * g, d['m'] *= 0.9): "
                 "in-place updates are written back after every call; or return the new value")
    graph.outputs = [v for v in outputs if isinstance(v, Value)]
    for slot, value in builder.updates():  # functionalised state: extra outputs, written back
        graph.updates.append(Update(slot, None if value is None else len(graph.outputs)))
        if value is not None:
            graph.outputs.append(value)
    graph.verify()
    returned = [builder.outside(x) for x in out_leaves if isinstance(x, Tensor)]
    return Traced(graph, in_tree, out_tree, outputs, builder.finish_guards(), returned)


def _identifier(name: str, graph: Graph) -> str:
    """A name that is a Python identifier and unique among the graph's inputs."""
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "arg"
    if name[0].isdigit():
        name = "_" + name
    taken = {v.name for v in graph.inputs}
    candidate, i = name, 1
    while candidate in taken:
        candidate, i = f"{name}_{i}", i + 1
    return candidate


def trace(fn: Callable, *example_args: Any, **example_kwargs: Any) -> Graph:
    """The raw graph of `fn` for these example arguments (no passes), like a jaxpr."""
    return trace_function(fn, example_args, example_kwargs).graph
