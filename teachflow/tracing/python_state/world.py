"""The Python world around a traced function, watched while it is traced.

Tracing runs the user's Python once. Whatever that run leaves behind in Python state (a
symbolic tensor stored in ``self.cache``, a global counter bumped) would be left by this run
alone, not by the later calls that run the graph. `World` takes stock of what the traced
code can reach before the trace (its globals, closure cells, instance and static arguments:
see `teachflow.tracing.python_state`) and, after it, puts back every place that was given a tensor
of the trace, and says in words what else changed (a `SideEffectWarning`).

It also gives the roots from which a captured tensor is named (a global ``model``, then
``.layers[0].w``): see `naming`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from teachflow.autodiff import tape
from teachflow.core.errors import SourceLocation
from teachflow.graph import Graph, Value, subgraphs
from teachflow.tensor.eager import EAGER
from teachflow.tensor.tensor import Tensor
from teachflow.tracing import python_state
from teachflow.tracing.callables import named_arguments, python_function


class World:
    """The Python world of a traced function: the globals and closure cells its code can reach
    (see `python_state.reach`), its instance and its static arguments. As it was before the
    trace, so that what the trace left in it can be found and put back; and as the roots of the
    paths that name captured tensors (a global ``model``, then ``.layers[0].w``)."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict,
                 copies: frozenset[int] = frozenset()) -> None:
        self.copies = copies  # id()s of the containers rebuilt for the call (see tree)
        inner, owners = python_function(fn)
        self.code = inner.__code__ if inner is not None else None
        world = python_state.reach(inner, [o for _, o in owners]) if inner is not None else \
            python_state.Reach([], {})
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
        self.roots: list[tuple[str, Any, python_state.Place | None]] = [
            (n, v, python_state.Place(namespace, n, "item", ""))
            for namespace, _, values in self.namespaces
            for n, v in values.items() if v is not _UNBOUND]
        self.roots += [(n, v, python_state.Place(c, "cell_contents", "attr", n))
                       for n, (c, v) in self.cells.items()]
        self.roots += [(n, v, None) for n, v in owners]
        self.roots += [(n, a, None) for n, a in named_arguments(fn, args, kwargs)
                       if not isinstance(a, Tensor)]
        self.contents = python_state.contents_of([(n, v) for n, v, _ in self.roots],
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
        for contents in self.contents:
            for key, name, value in list(contents.changed()):
                if isinstance(contents.container, set | frozenset):
                    constant = None
                else:
                    constant = _constant_tensor(graph, value)
                if constant is not None:  # a constant made lazily (self.mask = tfl.tensor(...))
                    contents.replace(key, constant)  # is that constant, as eagerly
                elif python_state.holding(value, of_graph):
                    leaked.append((name, made[-1]))
                    contents.put_back(key)
                elif not _same_value(contents.before.get(key, _UNBOUND), value):
                    (copied if id(contents.container) in self.copies else changed).append(
                        _change(name, contents.before.get(key, _UNBOUND), value))
        for name, (cell, before) in self.cells.items():
            now = _cell_contents(cell)
            if now is not before and python_state.holding(now, of_graph):
                leaked.append((f"nonlocal {name}", made[-1]))
                cell.cell_contents = before
            elif not _same_value(before, now):
                changed.append(_change(f"nonlocal {name}", before, now))
        for namespace, keys, values in self.namespaces:
            for name in [*values, *(k for k in list(namespace) if k not in keys)]:
                before = values.get(name, _UNBOUND)
                now = namespace.get(name, _UNBOUND)
                if now is not before and python_state.holding(now, of_graph):
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
        if v.kind != "node" or v.producer.op.impure or len(v.producer.outputs) > 1 \
                or subgraphs(v.producer):
            return None
        needed.append(v)
        stack += [o for o in v.producer.inputs if isinstance(o, Value)]
    backend = value._backend
    computed: dict[Value, Tensor] = {}
    with tape.no_grad():
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
                         and type(now).__module__ == "teachflow.staged.function"):
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
    plain = (bool, int, float, str, type(None))
    if isinstance(before, plain) and isinstance(now, plain):
        return f"{name}: {before!r} -> {now!r}"
    if now is python_state.GONE or now is _UNBOUND:
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
