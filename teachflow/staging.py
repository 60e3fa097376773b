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

import dataclasses
import functools
import inspect
import types
import warnings
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachflow import autodiff, dispatch, surroundings
from teachflow.backends import get_backend
from teachflow.eager import EAGER
from teachflow.errors import (
    SourceLocation,
    TraceError,
    expect_callable,
    user_frame,
    user_location,
    user_stacklevel,
)
from teachflow.graph import Graph, Slot, StateGone, Update, Value
from teachflow.ops.elementwise import identity
from teachflow.spec import TensorSpec, checked_shape
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

    - "grad": whether a ``.grad`` was None (`expected`: its spec, or None);
    - "requires_grad": whether a tensor required grad (which decides what backward() writes);
    - "leaf": whether a tensor the function updates in place is a leaf that requires grad
      (updating one is refused, eagerly and so while tracing);
    - "binding": whether the name the code found a captured tensor by still names it (`place`:
      the `surroundings.Path` to it, followed again link by link: ``W = tfl.tensor(...)`` or
      ``model = Model()`` between calls rebinds a name, and the graph must read the new tensor);
    - "aliases": which of the arguments and captured tensors (`place`) are one and the same
      tensor (`expected`: for each, the first position of the same tensor): one tensor under
      two names is one stand-in in the trace, as it is one tensor eagerly."""

    slot: Slot | None
    what: str
    expected: Any
    place: Any = None

    def observe(self, arguments: Any) -> Any:
        if self.what == "aliases":
            first: dict[int, int] = {}
            return tuple(first.setdefault(id(t), k)
                         for k, t in enumerate([*arguments, *self.place]))
        tensor = self.slot.tensor(arguments)
        if self.what == "binding":
            return self.place.holds(tensor)
        if self.what == "requires_grad":
            return tensor.requires_grad
        if self.what == "leaf":
            return tensor.requires_grad and tensor.is_leaf
        grad = tensor.grad
        return None if grad is None else grad.spec

    def holds(self, arguments: Any) -> bool:
        try:
            return self.observe(arguments) == self.expected
        except StateGone:  # a tensor the trace read is gone: nothing about it can hold
            return False

    def reason(self, arguments: Any) -> str:
        """Why it does not hold, in words."""
        try:
            now = self.observe(arguments)
        except StateGone as gone:
            if self.what != "binding":
                return gone.message
            now = False  # the tensor traced is gone: its name (if any) names another
        if self.what == "aliases":
            return ("the arguments (and captured tensors) that are one and the same tensor are "
                    "not the ones that were when traced")
        if self.what == "binding":
            return (f"{self.slot.name} now names another tensor than the one traced (it was "
                    "rebound, not updated in place)")
        if self.what == "requires_grad":
            return (f"{self.slot.name}.requires_grad was {self.expected} when traced, now {now} "
                    "(backward() fills the .grad of tensors that require grad)")
        if self.what == "leaf":
            was = "a leaf that requires grad" if self.expected else "not a leaf that requires grad"
            return (f"{self.slot.name}, which the function updates in place, was {was} when "
                    "traced, and is not now (such a leaf may be updated only under no_grad)")
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
        self.aliased: list[Tensor] = []  # captured tensors that are also arguments
        self._names: dict[Tensor, str] = {}  # an outside tensor -> its name in the graph
        self._places: dict[Tensor, surroundings.Path] = {}  # ... how that name lasts
        self._reach: dict[int, tuple[Any, dict]] = {}  # id(namespace) -> (it, tensor places)
        # The traced function's world (its globals, cells, instance): where lasting names of
        # captured tensors start (see `_find`); and, indexed once, the tensors found there.
        self.surroundings: _Surroundings | None = None
        self._rooted: dict[Tensor, list[surroundings.Place]] | None = None

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
        args = tuple(self.operand(x) for x in args)
        operands = tuple(self.value_of(x) for x in args)
        source = user_location()
        spec = op.abstract_eval(*(o.spec if isinstance(o, Value) else o for o in operands),
                                **params)
        node = self.graph.add_node(op, operands, params, spec, source,
                                   no_grad=not autodiff.is_grad_enabled())
        backend = get_backend(spec.device)
        tracked = any(isinstance(x, Tensor) and x._node is not None for x in args)
        tape = autodiff.record(op, tuple(  # the operands as the op takes them (as eagerly)
            [x if isinstance(x, Tensor) or type(x) in _PYTHON_SCALARS else as_constant(x)
             for x in args]), params, node.output, backend) if tracked else None
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

    def call(self, function: Any, args: tuple, kwargs: dict) -> Any:
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
        if slot is not None and isinstance(tensor._node, autodiff.Leaf):
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
        name = self._names.get(tensor)
        if name is None:
            taken = {*(v.name for v in self.graph.inputs), *self._names.values()}
            found, lasting = self._find(tensor)
            if lasting is not None:
                self._places[tensor] = lasting
            base = found or f"{self.graph._next_id}"
            name, i = base, 1
            while name in taken:
                name, i = f"{base}_{i}", i + 1
            self._names[tensor] = name
        return name

    def _find(self, tensor: Tensor) -> tuple[str | None, surroundings.Path | None]:
        """The name the code reaches `tensor` by, and the `Path` to it when that lasts beyond
        the call. First from the traced function's own world: a global or closure variable of
        its code (or of the code it calls), and what they hold (``model.layers[0].w``), every
        link followed again at each call, so that ``model = Model()`` run again is seen; or
        inside its instance (``self.w``). Else as the innermost user frame reaches it: inside an
        object (a path from that object), or by a local name (no path: a loop variable may hold
        it only for now). A name the user gave (a global ``w``) is preferred to ``params[0]``."""
        if self._rooted is None:
            roots = self.surroundings.roots if self.surroundings is not None else []
            self._rooted = _tensor_places(roots)
        found = [p for p in self._rooted.get(tensor, ()) if p.holds(tensor)]
        if found:
            best = min(found, key=lambda p: p.parent is not None)  # a name first, then BFS
            return best.name, best.path()
        frame = user_frame()
        if frame is None:
            return None, None
        known = self._reach.get(id(frame.f_locals))
        if known is None or known[0] is not frame.f_locals:  # (indexed once per frame)
            locals_ = frame.f_locals  # paths inside a local's value start at that value
            index = _tensor_places([(n, v, None) for n, v in locals_.items()])
            for n, v in locals_.items():
                if isinstance(v, Tensor):
                    index.setdefault(v, []).append(surroundings.Place(locals_, n, "item", ""))
            known = self._reach[id(locals_)] = (locals_, index)
        found = [p for p in known[1].get(tensor, ()) if p.holds(tensor)]
        if not found:
            return None, None
        best = min(found, key=lambda p: p.parent is None and p.container is frame.f_locals)
        if best.parent is None and best.container is frame.f_locals:
            return best.name, None  # a local name: no path that lasts
        # A path from a local's value (an object the code made, say, holding the tensor):
        # that object is kept, as later calls would make it again.
        return best.name, best.path(weak=False)

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
        for slot, _ in self.updates():  # updating a leaf that requires grad is refused (eagerly
            if slot.attr == "data":  # too): whether it is one is assumed
                tensor = slot.tensor(self.examples)
                guards.append(Guard(slot, "leaf", tensor.requires_grad and tensor.is_leaf))
        if any(state.written for state in self.grads.values()):
            for position, example in enumerate(self.examples):
                slot = Slot(position, "data", self.graph.inputs[position].name)
                guards.append(Guard(slot, "requires_grad", example.requires_grad))
            for tensor, capture in self.captured.items():
                guards.append(Guard(capture.data, "requires_grad", tensor.requires_grad))
        return guards


def _python_function(fn: Callable) -> tuple[types.FunctionType | None, list[tuple[str, Any]]]:
    """The Python function whose code a call of `fn` runs, and the objects it runs on (an
    instance, a partial's bound arguments), looked up without calling anything of the user's:
    a method, a staged method, a ``functools.partial``, a callable object, or a decorated
    function (followed through ``__wrapped__``)."""
    owners: list[tuple[str, Any]] = []
    for _ in range(100):  # (a chain of wrappers, never a cycle)
        if isinstance(fn, functools.partial):
            owners += _partial_arguments(fn)
            fn = fn.func
            continue
        if isinstance(fn, types.MethodType):
            owners.append(("self", fn.__self__))
            fn = fn.__func__
            continue
        wrapped = _own_attribute(fn, "__wrapped__")
        if wrapped is not None:  # functools.wraps, and a staged function or method
            instance = _own_attribute(fn, "instance")
            if instance is not None:
                owners.append(("self", instance))
            fn = wrapped
            continue
        if isinstance(fn, types.FunctionType):
            return fn, owners
        call = inspect.getattr_static(type(fn), "__call__", None)  # a callable object's class
        if not isinstance(call, types.FunctionType):
            return None, owners
        owners.append(("self", fn))
        fn = call
    return None, owners


def _partial_arguments(fn: functools.partial) -> list[tuple[str, Any]]:
    """A partial's bound arguments under the names of the parameters they fill."""
    try:
        bound = inspect.signature(fn.func).bind_partial(*fn.args, **fn.keywords)
    except (TypeError, ValueError):  # no signature to read: name them by position
        return [("partial", (fn.args, fn.keywords))]
    return list(bound.arguments.items())


def _own_attribute(obj: Any, name: str) -> Any:
    """`obj`'s attribute `name` from its ``__dict__`` (None if absent): no ``__getattr__``."""
    try:
        return object.__getattribute__(obj, "__dict__").get(name)
    except Exception:
        return None


class _Surroundings:
    """The Python world of a traced function: the globals and closure cells its code can reach
    (see `surroundings.reach`), its instance and its static arguments. As it was before the
    trace, so that what the trace left in it can be found and put back; and as the roots of the
    paths that name captured tensors (a global ``model``, then ``.layers[0].w``)."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict,
                 copies: frozenset[int] = frozenset()) -> None:
        self.copies = copies  # id()s of the containers rebuilt for the call (see tree)
        inner, owners = _python_function(fn)
        self.code = inner.__code__ if inner is not None else None
        world = surroundings.reach(inner, [o for _, o in owners]) if inner is not None else \
            surroundings.Reach([], {})
        # Names bound now in each namespace (a global the trace creates is new there), and the
        # values of the names the code uses.
        self.namespaces = [(namespace, set(namespace), {n: namespace.get(n, _UNBOUND)
                                                        for n in names})
                           for namespace, names in world.globals]
        self.cells = {name: (cell, _cell_contents(cell)) for name, cell in world.cells.items()}
        own = set(self.code.co_freevars) if self.code is not None else set()
        self.own_cells = {n: c for n, (c, _) in self.cells.items() if n in own}
        # Where captured tensors are found: from a global or a cell, a path that lasts, followed
        # again at every call; from the instance or a static argument (fixed for the trace).
        self.roots: list[tuple[str, Any, surroundings.Place | None]] = [
            (n, v, surroundings.Place(namespace, n, "item", ""))
            for namespace, _, values in self.namespaces
            for n, v in values.items() if v is not _UNBOUND]
        self.roots += [(n, v, surroundings.Place(c, "cell_contents", "attr", n))
                       for n, (c, v) in self.cells.items()]
        self.roots += [(n, v, None) for n, v in owners]
        self.roots += [(n, a, None) for n, a in named_arguments(fn, args, kwargs)
                       if not isinstance(a, Tensor)]
        self.snapshots = surroundings.snapshots([(n, v) for n, v, _ in self.roots],
                                                skip=(Tensor,))

    def restore(self, graph: Graph) -> tuple[list[tuple[str, SourceLocation | None]],
                                             list[str], list[str]]:
        """Put back every place that now holds (or holds something holding) a tensor of `graph`;
        return their names, each with the line that computed such a tensor. Also the other
        places the trace changed, in words (Python state that only this run of the code
        changes), and those of them in the containers given as arguments, which are copies."""
        made: list[SourceLocation | None] = []
        changed: list[str] = []
        copied: list[str] = []

        def of_graph(value: Any) -> bool:
            if isinstance(value, Tensor) and isinstance(value._data, Value) and \
                    graph.owns(value._data):
                producer = value._data.producer
                made.append(producer.source if producer is not None else None)
                return True
            return False

        leaked = []
        for snapshot in self.snapshots:
            for key, name, value in list(snapshot.changed()):
                if isinstance(snapshot.container, set | frozenset):
                    constant = None
                else:
                    constant = _constant_tensor(graph, value)
                if constant is not None:  # a constant made lazily (self.mask = tfl.tensor(...))
                    snapshot.replace(key, constant)  # is that constant, as eagerly
                elif surroundings.holding(value, of_graph):
                    leaked.append((name, made[-1]))
                    snapshot.put_back(key)
                elif not _same_value(snapshot.before.get(key, _UNBOUND), value):
                    (copied if id(snapshot.container) in self.copies else changed).append(
                        _change(name, snapshot.before.get(key, _UNBOUND), value))
        for name, (cell, before) in self.cells.items():
            now = _cell_contents(cell)
            if now is not before and surroundings.holding(now, of_graph):
                leaked.append((f"nonlocal {name}", made[-1]))
                cell.cell_contents = before
            elif not _same_value(before, now):
                changed.append(_change(f"nonlocal {name}", before, now))
        for namespace, keys, values in self.namespaces:
            for name in [*values, *(k for k in list(namespace) if k not in keys)]:
                before = values.get(name, _UNBOUND)
                now = namespace.get(name, _UNBOUND)
                if now is not before and surroundings.holding(now, of_graph):
                    leaked.append((f"global {name}", made[-1]))
                    if before is _UNBOUND:
                        del namespace[name]
                    else:
                        namespace[name] = before
                elif not _same_value(before, now):
                    changed.append(_change(f"global {name}", before, now))
        return leaked, changed, copied


_UNBOUND = object()  # a global name not bound (yet)


def _constant_tensor(graph: Graph, value: Any) -> Tensor | None:
    """`value`, a tensor of the trace, as an eager tensor, where its values are known while
    tracing: a constant made from data, or computed from such constants alone (no argument,
    captured tensor or random draw); else None."""
    if not (isinstance(value, Tensor) and isinstance(value._data, Value)
            and graph.owns(value._data)):
        return None
    needed, stack = [], [value._data]
    while stack:
        v = stack.pop()
        if v.kind == "const" or v in needed:
            continue
        if v.kind != "node" or v.producer.op.random:
            return None
        needed.append(v)
        stack += [o for o in v.producer.inputs if isinstance(o, Value)]
    backend = value._backend
    computed: dict[Value, Tensor] = {}
    with autodiff.no_grad():
        for node in (n for n in graph.nodes if n.output in needed):
            args = [(computed[o] if o in computed else Tensor._make(backend.asarray(o.data),
                                                                      backend, None))
                    if isinstance(o, Value) else o for o in node.inputs]
            computed[node.output] = EAGER.apply(node.op, tuple(args), node.params)
    if value._data.kind == "const":
        return Tensor._make(backend.asarray(value._data.data), backend, None)
    return computed[value._data]


def _same_value(before: Any, now: Any) -> bool:
    """The same object, or equal plain data (``n = n + 0``, ``self.shape = tuple(x.shape)``
    again); or teachflow's own bookkeeping (a staged method cached on its instance when
    ``super()`` first reaches it)."""
    if now is before or (type(now).__qualname__ == "Function"
                         and type(now).__module__ == "teachflow.function"):
        return True
    return type(now) is type(before) and _plain(now) and _plain(before) and bool(now == before)


def _plain(value: Any, depth: int = 3) -> bool:
    """Numbers, strings, NumPy scalars and dtypes, and small tuples, lists, sets and dicts of
    them: data whose ``==`` says whether it is the same."""
    if isinstance(value, bool | int | float | complex | str | bytes | np.generic | np.dtype) \
            or value is None:
        return True
    if depth == 0 or not isinstance(value, tuple | list | set | frozenset | dict) or \
            len(value) > 100:
        return False
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
    return all(_plain(v, depth - 1) for v in items)


def _change(name: str, before: Any, now: Any) -> str:
    plain = (*_PYTHON_SCALARS, str, type(None))
    if isinstance(before, plain) and isinstance(now, plain):
        return f"{name}: {before!r} -> {now!r}"
    if now is surroundings.GONE or now is _UNBOUND:
        return f"{name} (removed)"
    return f"{name} (set)" if before is _UNBOUND else name


class SideEffectWarning(UserWarning):
    """A traced function changed Python state (an attribute, a list, a global) while tracing:
    that ran once, and later calls run the graph, which does not change it again."""


def _cell_contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell (a name not yet bound)
        return None


def _tensor_places(roots: list[tuple[str, Any, surroundings.Place | None]]) -> dict[
        Tensor, list[surroundings.Place]]:
    """Where each tensor is reached from `roots` (``(name, value, the place holding it)``):
    the roots themselves, then places inside them, shortest first."""
    found: dict[Tensor, list[surroundings.Place]] = {}
    for _, value, place in roots:
        if isinstance(value, Tensor) and place is not None:
            found.setdefault(value, []).append(place)
    for place, value in surroundings.walk(roots, skip=(Tensor,)):
        if isinstance(value, Tensor):
            found.setdefault(value, []).append(place)
    return found


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


def signature_of(fn: Callable, follow_wrapped: bool = True) -> inspect.Signature | None:
    """`fn`'s signature (None where it has none). A callable object's is its class's
    ``__call__``'s, read from the class: asking the object could run a ``__getattr__`` of the
    user's, which may do anything."""
    try:
        if isinstance(fn, types.FunctionType | types.MethodType | types.BuiltinFunctionType |
                      functools.partial | np.ufunc) or _own_attribute(fn, "__signature__"):
            return inspect.signature(fn, follow_wrapped=follow_wrapped)
        call = inspect.getattr_static(type(fn), "__call__", None)
        signature = inspect.signature(call, follow_wrapped=follow_wrapped)
        return signature.replace(parameters=list(signature.parameters.values())[1:])
    except (TypeError, ValueError):  # builtins and callables without a signature
        return None


def named_arguments(fn: Callable, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """``(name, value)`` for each argument as passed: parameter names for positional ones."""
    signature = signature_of(fn)
    params = list(signature.parameters.values()) if signature is not None else []
    kinds = inspect.Parameter
    fixed = [p.name for p in params
             if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    rest = next((p.name for p in params if p.kind is kinds.VAR_POSITIONAL), "arg")
    positional = [fixed[i] if i < len(fixed) else f"{rest}_{i - len(fixed)}"
                  for i in range(len(args))]
    return [*zip(positional, args, strict=True), *kwargs.items()]


def callable_name(fn: Callable) -> str:
    """What to call `fn` in a graph and in messages: its own name; for a callable object its
    class's, for a ``functools.partial`` that of the function it calls."""
    if isinstance(fn, functools.partial):
        return callable_name(fn.func)
    if isinstance(fn, types.FunctionType | types.MethodType | types.BuiltinFunctionType | type):
        return fn.__name__
    # An object's own name (a ufunc's, a staged function's), unless reading it would run a
    # __getattr__ of the user's, which may do anything; else its class's name.
    own = inspect.getattr_static(type(fn), "__getattr__", None) is None
    name = getattr(fn, "__name__", None) if own else _own_attribute(fn, "__name__")
    return name if isinstance(name, str) else type(fn).__name__


def argument_names(fn: Callable, args: tuple, kwargs: dict) -> list[str]:
    """A readable name for every flat argument leaf, in `tree_flatten((args, kwargs))` order:
    ``x``, ``params_0``, ``cfg_lr``, ..."""
    return ["_".join([name, *(str(p) for p in path)])
            for name, value in named_arguments(fn, args, kwargs) for path in tree_paths(value)]


def trace_function(fn: Callable, args: tuple, kwargs: dict, name: str | None = None,
                   specs: list[TensorSpec] | None = None,
                   left_out: frozenset[str] = frozenset(), staged: bool = True) -> Traced:
    """Run `fn` once with symbolic tensors in place of its tensor arguments; record the graph.

    `specs`, one per tensor argument, trace for those specs instead of the arguments' own (a
    ``None`` dimension stays unknown: one trace serves every size there). `left_out` names
    parameters that `args` and `kwargs` fill with their defaults only to key the trace: the
    function is called without them, as the caller called it (a wrapper may not take them).
    For a function `staged` to be called again (not a `tfl.trace` to look at), Python state
    the trace changed is worth a `SideEffectWarning`.
    """
    expect_callable(fn, "trace", "tfl.trace(f, x)")
    graph = Graph(name or callable_name(fn))
    leaves, in_tree = tree_flatten((args, kwargs))
    specs_left = iter(specs or ())
    builder = GraphBuilder(graph)
    symbolic = []
    standins: dict[int, Tensor] = {}  # id(argument) -> its stand-in
    for leaf, arg_name in zip(leaves, argument_names(fn, args, kwargs), strict=True):
        if isinstance(leaf, Tensor):  # dynamic: becomes a graph input
            spec = next(specs_left, leaf.spec)
            value = graph.add_input(spec, name=_identifier(arg_name, graph))
            standin = standins.get(id(leaf))  # one tensor passed twice is one stand-in
            if standin is None:
                standin = standins[id(leaf)] = _argument_standin(value, leaf)
                builder.arguments[standin] = len(builder.examples)
            builder.examples.append(leaf)
            symbolic.append(standin)
        else:  # static: its value is part of the trace
            symbolic.append(leaf)
    around = None
    try:
        # The graph is the function's own: a caller's no_grad does not become part of it (a
        # call decides for itself whether the tape records it).
        with builder, autodiff.enable_grad():
            # The function gets its containers rebuilt around the stand-ins (inside the trace:
            # a dataclass's __post_init__ computes with them as it would with the tensors).
            sym_args, sym_kwargs = tree_unflatten(in_tree, symbolic)
            # Watched: what it can reach, its own arguments' containers included (an entry
            # written there would be lost with the rebuilt container after the trace).
            around = _Surroundings(fn, sym_args, sym_kwargs, _containers((sym_args, sym_kwargs)))
            builder.surroundings = around
            call_args, call_kwargs = _as_called(fn, sym_args, sym_kwargs, left_out)
            result = fn(*call_args, **call_kwargs)
            if isinstance(result, Iterator | Awaitable):
                raise TraceError(
                    f"{graph.name} returns a {type(result).__name__}, whose values would be "
                    "computed later, outside the trace", op="trace",
                    hint="return the tensors themselves (in a tuple or list): a staged "
                         "function cannot be a generator")
            out_leaves, out_tree = tree_flatten(result)
            outputs = [builder.value_of(x) if isinstance(x, Tensor) else x for x in out_leaves]
    finally:
        leaked, changed, copied = around.restore(graph) if around is not None else ([], [], [])
    if changed and staged and not leaked:
        warnings.warn(
            f"{graph.name} changed Python state while tracing ({'; '.join(changed[:5])}): Python "
            "code runs once, while tracing, and later calls run the graph, which will not "
            "change it again. Keep state that changes at every call in tensors, updated in "
            "place (self.t += 1 on a tensor is written back at every call)",
            SideEffectWarning, stacklevel=user_stacklevel())
    if copied and staged and not leaked:
        warnings.warn(
            f"{graph.name} changed Python values in a container it was given "
            f"({'; '.join(copied[:5])}): a staged function gets its dict, list and dataclass "
            "arguments rebuilt around stand-ins for their tensors, so the change stays in that "
            "copy, and the caller's container never sees it. Keep state that changes at every "
            "call in tensors, updated in place (written back into the caller's tensors), or "
            "return the new values", SideEffectWarning, stacklevel=user_stacklevel())
    if leaked:
        names = ", ".join(name for name, _ in leaked)
        raise TraceError(
            f"{names} was given a tensor of the trace: a Python assignment (to an attribute, a "
            "dict or list entry, a global or nonlocal name) runs once, while tracing, so it "
            "would keep a symbolic tensor with no values, and later calls would not change it "
            "(it is put back as it was)", op="trace", location=leaked[0][1],
            hint="update the tensor in place instead (self.w -= lr * g, d['m'] *= 0.9): "
                 "in-place updates are written back after every call; or return the new value")
    for leaf in out_leaves:  # a tensor in a container tree_flatten cannot take apart
        if not isinstance(leaf, Tensor) and surroundings.holding(
                leaf, lambda v: isinstance(v, Tensor) and isinstance(v._data, Value)):
            raise TraceError(
                f"the function returns tensors inside a {type(leaf).__name__}, which a staged "
                "call cannot rebuild with new values at each call", op="trace",
                hint="return the tensors in tuples, lists, dicts or dataclasses")
    graph.outputs = [v for v in outputs if isinstance(v, Value)]
    for slot, value in builder.updates():  # functionalised state: extra outputs, written back
        graph.updates.append(Update(slot, None if value is None else len(graph.outputs)))
        if value is not None:
            graph.outputs.append(value)
    graph.verify()
    returned = [builder.outside(x) for x in out_leaves if isinstance(x, Tensor)]
    guards = builder.finish_guards(aliasing=len(standins) < len(builder.examples))
    return Traced(graph, in_tree, out_tree, outputs, guards, returned)


def _containers(tree: Any) -> frozenset[int]:
    """The id()s of the containers in `tree` that `tree_flatten` takes apart (rebuilt for a
    call: copies of the caller's)."""
    found: set[int] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.add(id(node))
            stack += node.values()
        elif isinstance(node, list | tuple):
            found.add(id(node))
            stack += node
        elif dataclasses.is_dataclass(node) and not isinstance(node, type):
            found.add(id(node))
            stack += [getattr(node, f.name, None) for f in dataclasses.fields(node)]
    return frozenset(found)


def _as_called(fn: Callable, args: tuple, kwargs: dict, left_out: frozenset[str]) -> Any:
    """``(args, kwargs)`` without the parameters in `left_out`: ``f(*args, **kwargs)`` is then
    the call as written."""
    if not left_out:
        return args, kwargs
    bound = signature_of(fn).bind(*args, **kwargs)
    for name in left_out:
        bound.arguments.pop(name, None)
    return bound.args, bound.kwargs


def _argument_standin(value: Value, argument: Tensor) -> Tensor:
    """The symbolic tensor a traced function gets for a tensor argument. One that requires grad
    is a leaf, as eagerly (backward() inside fills its .grad); one computed from other tensors
    outside stays a non-leaf (in place updates allowed), in front of a leaf that stops a
    backward() inside at it (see `GraphBuilder.write_grad`)."""
    standin = Tensor._make(value, argument._backend, None)
    if argument.requires_grad:
        leaf = autodiff.Leaf(standin)
        standin._node = leaf if argument.is_leaf else autodiff.TapeNode(
            identity, {}, (leaf,), (None,), None, argument._backend, argument.shape,
            argument.dtype)
    return standin


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
    return trace_function(fn, example_args, example_kwargs, staged=False).graph
